"""udr.evaluation.bootstrap: paired bootstrap intervals of a difference in scores."""

from __future__ import annotations

import numpy as np
import pytest

from udr.errors import UdrError
from udr.evaluation.bootstrap import Interval, PairedTask, paired_bootstrap
from udr.evaluation.metrics import graded_score


def _accuracy_of(correct: np.ndarray):
    return lambda idx: 100.0 * float(correct[idx].mean())


def test_a_clear_difference_is_resolved_and_a_tie_is_not():
    rng = np.random.default_rng(0)
    a = rng.random(300) < 0.9
    b = rng.random(300) < 0.5
    (clear,), average = paired_bootstrap([PairedTask(300, _accuracy_of(a), _accuracy_of(b))], resamples=500)
    assert clear.difference == pytest.approx(100 * (a.mean() - b.mean()))
    assert clear.low < clear.difference < clear.high and clear.resolved and clear.low > 0
    assert average == clear  # one task: the average is that task
    (tie,), _ = paired_bootstrap([PairedTask(300, _accuracy_of(a), _accuracy_of(a.copy()))], resamples=200)
    assert tie == Interval(0.0, 0.0, 0.0) and not tie.resolved


def test_an_interval_in_a_table_is_bold_where_resolved():
    assert Interval(1.25, 0.5, 2.0).markdown() == "**+1.2 [+0.5, +2.0]**"
    assert Interval(-1.0, -3.04, 0.96).markdown() == "-1.0 [-3.0, +1.0]"


def test_resolved_means_clear_of_zero_by_the_claim_margin_on_unrounded_bounds_either_way():
    """A claim needs the interval clear of 0 by CLAIM_MARGIN: an upper bound of -0.04 (printed -0.0) or a
    lower bound of +0.003 or +0.49 is no claim, whatever its rounding shows; -0.5 and +0.5 are."""
    from udr.evaluation.claims import CLAIM_MARGIN

    assert CLAIM_MARGIN == 0.5
    for low, high, claim in (
        (-15.0, -0.04, False),
        (0.003, 6.7, False),
        (0.49, 9.3, False),
        (0.5, 9.3, True),
        (-4.5, -0.5, True),
        (-4.5, -0.4999, False),
    ):
        iv = Interval((low + high) / 2, low, high)
        assert iv.resolved is claim, (low, high)
        assert iv.markdown().startswith("**") is claim
        assert Interval.of(iv.to_dict()) == iv and iv.to_dict()["resolved"] is claim


def test_pairing_narrows_the_interval_of_correlated_methods():
    """Two methods that agree on most examples: the paired interval is much narrower than the spread
    of either method's own score, which an unpaired comparison would add up."""
    rng = np.random.default_rng(1)
    a = rng.random(200) < 0.6
    b = a.copy()
    flip = rng.choice(200, size=10, replace=False)
    b[flip] = ~b[flip]
    (iv,), _ = paired_bootstrap([PairedTask(200, _accuracy_of(a), _accuracy_of(b))], resamples=500, seed=3)
    (alone,), _ = paired_bootstrap([PairedTask(200, _accuracy_of(a), lambda idx: 0.0)], resamples=500, seed=3)
    assert iv.high - iv.low < 0.5 * (alone.high - alone.low)


def test_same_seed_same_intervals_and_the_average_comes_from_the_same_resamples():
    rng = np.random.default_rng(2)
    tasks = [PairedTask(n, _accuracy_of(rng.random(n) < 0.7), _accuracy_of(rng.random(n) < 0.6)) for n in (40, 90)]
    first = paired_bootstrap(tasks, resamples=300, seed=7)
    assert paired_bootstrap(tasks, resamples=300, seed=7) == first
    per_task, average = first
    assert average.difference == pytest.approx(np.mean([iv.difference for iv in per_task]))
    assert min(iv.low for iv in per_task) <= average.low <= average.high <= max(iv.high for iv in per_task)


def test_corpus_metrics_are_recomputed_on_each_resample():
    refs = [{"references": [f"the cat sat on mat number {i}"], "target": ""} for i in range(20)]
    good = [f"the cat sat on mat number {i}" for i in range(20)]
    bad = ["a dog" for _ in range(20)]
    score = lambda preds: lambda idx: graded_score("bleu", [preds[i] for i in idx], [refs[i] for i in idx])
    (iv,), _ = paired_bootstrap([PairedTask(20, score(good), score(bad))], resamples=100)
    assert iv.difference == pytest.approx(100.0) and iv.resolved


@pytest.mark.parametrize("kwargs", [{"resamples": 0}, {"level": 1.0}])
def test_bad_arguments_are_one_line_errors(kwargs):
    with pytest.raises(UdrError, match="paired bootstrap"):
        paired_bootstrap([PairedTask(3, lambda idx: 1.0, lambda idx: 0.0)], **kwargs)
    with pytest.raises(UdrError, match="no tasks"):
        paired_bootstrap([])


def test_score_interval_is_wilson_for_a_share_and_the_bootstrap_otherwise():
    from udr.data.tasks import Example
    from udr.evaluation.bootstrap import score_interval, wilson_interval
    from udr.evaluation.metrics import metric_result

    choices = ("No .", "Yes .")
    rows = [Example(str(i), choices[i % 3 == 0], int(i % 3 == 0), choices, (choices[i % 3 == 0],)) for i in range(30)]
    preds = [int(i % 2 == 0) for i in range(30)]
    accuracy = metric_result("accuracy", preds, rows)["score"]
    low, high = wilson_interval(accuracy / 100, 30)
    wilson = score_interval("accuracy", preds, rows, accuracy)
    assert wilson == {"low": round(100 * low, 2), "high": round(100 * high, 2), "method": "wilson"}
    f1 = metric_result("macro_f1", preds, rows)["score"]
    boot = score_interval("macro_f1", preds, rows, f1, seed=3)
    assert boot["method"] == "bootstrap" and boot["low"] < f1 < boot["high"]
    assert boot == score_interval("macro_f1", preds, rows, f1, seed=3)  # seeded
