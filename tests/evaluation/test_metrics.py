"""udr.evaluation.metrics on hand-made cases whose expected values are worked out here, not by the libraries."""

from __future__ import annotations

import math

import numpy as np
import pytest

from udr.data.tasks import Example, builtin_tasks
from udr.errors import UdrError
from udr.evaluation import metrics
from udr.evaluation.metrics import (
    GradedStatistics,
    accuracy,
    bleu,
    exact_match,
    graded_score,
    metric_result,
    rouge,
    rouge_l,
    sari,
    sentence_bleu_mean,
    token_f1,
)

# ---------------------------------------------------------------- accuracy, exact match, token F1


def test_accuracy_three_of_four():
    assert accuracy([0, 1, 1, 2], [0, 1, 2, 2]) == pytest.approx(75.0)
    assert accuracy(["pos", " neg", "neg"], ["pos", "neg", "pos"]) == pytest.approx(200 / 3)


def test_exact_match_ignores_case_and_whitespace():
    preds = ["  Return  Flights ;return #1 ", "(Yield :output (Today))"]
    refs = [["return flights ;return #1"], ["(Yield :output (Tomorrow))"]]
    assert exact_match(preds, refs) == pytest.approx(50.0)
    assert exact_match(preds, refs, normalize=None) == 0.0  # raw comparison: the spacing differs
    # any of several references counts
    assert exact_match(["b"], [["a", " B "]]) == 100.0


def test_token_f1_by_hand():
    # prediction tokens: in get_weather sl location paris (5)
    # reference tokens:  in get_weather sl location paris sl date_time today (8)
    # overlap 5 -> P = 5/5, R = 5/8, F1 = 2PR/(P+R) = 10/13
    pred = "[IN:GET_WEATHER [SL:LOCATION paris ] ]"
    ref = "[IN:GET_WEATHER [SL:LOCATION paris ] [SL:DATE_TIME today ] ]"
    assert token_f1([pred], [[ref]]) == pytest.approx(100 * 10 / 13)
    # "the cat sat on the mat" vs "the cat lay on a mat": overlap the, cat, on, mat = 4 of 6 both ways
    assert token_f1(["the cat sat on the mat"], [["the cat lay on a mat"]]) == pytest.approx(100 * 4 / 6)
    # best reference per example, mean over examples: (1 + 0) / 2
    assert token_f1(["x y", "z"], [["q", "Y X"], ["w"]]) == pytest.approx(50.0)
    assert token_f1([""], [["a"]]) == 0.0


# ---------------------------------------------------------------- BLEU


def test_bleu_identical_is_100():
    assert bleu(["the cat sat on the mat"], [["the cat sat on the mat"]]) == pytest.approx(100.0)


def test_bleu_disjoint_is_0():
    # No n-gram matches at all: sacrebleu returns exactly 0 before any smoothing applies
    # (its early stop when every n-gram count is zero), whatever the smoothing method.
    for smooth in ("exp", "add-k", "none"):
        assert bleu(["a b c d"], [["w x y z"]], smooth=smooth) == 0.0


def test_bleu_2_by_hand():
    # pred "a b c d" vs ref "a b c e": unigrams 3/4, bigrams (ab, bc, cd) 2/3, same length -> BP = 1
    # BLEU-2 = sqrt(3/4 * 2/3) = sqrt(1/2)
    assert bleu(["a b c d"], [["a b c e"]], max_order=2) == pytest.approx(100 * math.sqrt(0.5))


def test_sentence_bleu_add_one_by_hand():
    # pred "a b c" vs ref "a b d": unigrams 2/3; bigrams (ab, bc) 1/2 -> add-one (1+1)/(2+1) = 2/3
    # BLEU-2 = sqrt(2/3 * 2/3) = 2/3; mean with an identical pair (100) -> (66.67 + 100) / 2
    score = sentence_bleu_mean(["a b c", "x y z"], [["a b d"], ["x y z"]], max_order=2)
    assert score == pytest.approx((100 * 2 / 3 + 100) / 2)


def test_bleu_second_matching_reference_raises_score():
    preds = ["the cat is on the mat", "a dog runs"]
    one = bleu(preds, [["the cat is on a mat"], ["one dog runs"]])
    two = bleu(preds, [["the cat is on a mat", "the cat is on the mat"], ["one dog runs"]])
    assert 0 < one < two < 100
    # rows with fewer references are padded (None): the same as repeating their first reference
    repeated = bleu(preds, [["the cat is on a mat", "the cat is on the mat"], ["one dog runs"] * 2])
    assert two == pytest.approx(repeated)


# ---------------------------------------------------------------- ROUGE, SARI


def test_rouge_l_by_hand():
    # LCS("the cat sat on the mat", "the cat lay on the mat") = the cat on the mat = 5; P = R = 5/6
    assert rouge_l(["the cat sat on the mat"], [["the cat lay on the mat"]]) == pytest.approx(100 * 5 / 6)
    # best of two references; stemming makes "cats" match "cat"
    assert rouge_l(["the cats sat"], [["dogs", "the cat sat"]]) == pytest.approx(100.0)
    # ROUGE-2: bigrams of the prediction (the cat, cat sat, sat on, on the, the mat) vs the reference's
    # (the cat, cat lay, lay on, on the, the mat): 3 of 5 both ways
    scores = rouge(["the cat sat on the mat"], [["the cat lay on the mat"]])
    assert scores["rouge2"] == pytest.approx(60.0)
    assert scores["rouge1"] == pytest.approx(100 * 5 / 6)


def test_sari_published_example_and_identity():
    # the value printed in the SARI paper's HF `evaluate` port's documentation
    src = ["About 95 species are currently accepted ."]
    pred = ["About 95 you now get in ."]
    refs = [
        [
            "About 95 species are currently known .",
            "About 95 species are now accepted .",
            "95 species are now accepted .",
        ]
    ]
    assert sari(src, pred, refs) == pytest.approx(26.953601953601954)
    # output = source = reference: everything kept rightly, nothing to delete or add (0/0 = 1)
    assert sari(["a b c"], ["a b c"], [["a b c"]]) == pytest.approx(100.0)


# ---------------------------------------------------------------- dispatcher


def _gen(target: str, *more: str, source: str = "some input") -> Example:
    return Example(input=source, target=target, label=-1, choices=(), references=(target, *more))


def test_score_task_covers_every_registry_metric():
    used = {task.metric for task in builtin_tasks().values()}
    assert used <= set(metrics.METRICS)
    cls = [
        Example("x", "It was great .", 1, ("It was terrible .", "It was great ."), ("It was great .",)),
        Example("y", "It was terrible .", 0, ("It was terrible .", "It was great ."), ("It was terrible .",)),
    ]
    for name in sorted(used):
        if name == "accuracy":
            out = metric_result(name, [1, 1], cls)
            assert out["score"] == pytest.approx(50.0)
        else:
            exs = [_gen("the cat sat on the mat", source="the cat sat on the mat"), _gen("a b")]
            out = metric_result(name, ["the cat sat on the mat", "a b"], exs)
            assert out["score"] == pytest.approx(100.0)
        assert out["metric"] == name and out["n"] == 2
        assert set(out["graded"]) == {"name", "score"}


def test_score_task_accuracy_text_predictions_and_rows():
    rows = [
        {"id": "0", "input": "q", "target": "yes", "label": 0, "choices": ["yes", "no"], "references": ["yes"]},
        {"id": "1", "input": "q", "target": "2", "label": -1, "choices": [], "references": ["2"]},
    ]
    assert metric_result("accuracy", ["yes", 2], rows)["score"] == pytest.approx(100.0)
    assert metric_result("accuracy", [1, "3"], rows)["score"] == 0.0


def test_score_task_exact_match_grades_with_token_f1():
    out = metric_result(
        "exact_match",
        ["[IN:GET_WEATHER [SL:LOCATION paris ] ]"],
        [_gen("[IN:GET_WEATHER [SL:LOCATION paris ] [SL:DATE_TIME today ] ]")],
    )
    assert out["score"] == 0.0
    assert out["graded"] == {"name": "token_f1", "score": pytest.approx(100 * 10 / 13)}


def test_score_task_details():
    bl = metric_result("bleu", ["a b c d"], [_gen("a b c e")])
    assert bl["details"]["bleu_2"] == pytest.approx(100 * math.sqrt(0.5))
    assert bl["details"]["bleu_1"] == pytest.approx(75.0)
    ro = metric_result("rouge", ["the cat sat on the mat"], [_gen("the cat lay on the mat")])
    assert ro["score"] == pytest.approx(100 * 5 / 6) and ro["details"]["rouge_2"] == pytest.approx(60.0)


@pytest.mark.parametrize("metric", metrics.METRICS)
def test_graded_statistics_equal_graded_score_on_resamples(metric):
    """Summing per-example statistics gives graded_score on any resample (repeats included)."""
    rng = np.random.default_rng(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away", "and", "then", "came", "back", "home"]

    def text():
        return " ".join(rng.choice(words, size=int(rng.integers(1, 12))))

    n = 25
    if metric == "accuracy":
        examples = [{"target": "yes" if i % 3 else "no", "label": i % 2} for i in range(n)]
        preds = [int(rng.integers(0, 2)) if i % 2 else str(rng.choice(["yes", "no"])) for i in range(n)]
    else:
        examples = [
            {"input": text(), "target": text(), "references": [text() for _ in range(1 + i % 3)]} for i in range(n)
        ]
        preds = [text() for _ in range(n)]
    stats = GradedStatistics(metric, preds, examples)
    for idx in [np.arange(n), *(rng.integers(0, n, size=n) for _ in range(20))]:
        expected = graded_score(metric, [preds[i] for i in idx], [examples[i] for i in idx])
        assert stats.score(idx) == expected


# ---------------------------------------------------------------- errors


def test_errors_are_one_line_udr_errors():
    cases = [
        lambda: metric_result("meteor", ["a"], [_gen("a")]),
        lambda: accuracy([], []),
        lambda: accuracy([1, 2], [1]),
        lambda: exact_match(["a"], [[]]),
        lambda: bleu(["a", "b"], [["a"]]),
        lambda: rouge_l([None], [["a"]]),
        lambda: sari(["s"], ["a", "b"], [["a"], ["b"]]),
        lambda: metric_result("bleu", [], []),
    ]
    for case in cases:
        with pytest.raises(UdrError) as err:
            case()
        assert "\n" not in str(err.value) and str(err.value)
    with pytest.raises(UdrError, match="unknown metric 'meteor'; known metrics: accuracy, bleu"):
        metric_result("meteor", ["a"], [_gen("a")])
    with pytest.raises(UdrError, match="2 predictions but 1 references"):
        bleu(["a", "b"], [["a"]])


def test_macro_f1_by_hand_and_as_scikit_learn_computes_it():
    """Always answering the majority label: accuracy 75, macro-F1 (0 for the minority class) 42.86."""
    golds = [0, 0, 0, 1]
    assert metrics.macro_f1([0, 0, 0, 0], golds) == pytest.approx(100 * (6 / 7 + 0) / 2)
    assert metrics.macro_f1(["a", "b", "b", "c"], ["a", "b", "c", "c"]) == pytest.approx(100 * (1 + 2 / 3 + 2 / 3) / 3)
    sklearn = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    preds, gold = rng.integers(0, 4, 50).tolist(), rng.integers(0, 3, 50).tolist()
    assert metrics.macro_f1(preds, gold) == pytest.approx(100 * sklearn.f1_score(gold, preds, average="macro"))


def test_macro_f1_task_score_its_details_and_bootstrap_statistics():
    cls = [
        Example("x", "It was great .", 1, ("It was terrible .", "It was great ."), ("It was great .",)),
        Example("y", "It was terrible .", 0, ("It was terrible .", "It was great ."), ("It was terrible .",)),
        Example("z", "It was great .", 1, ("It was terrible .", "It was great ."), ("It was great .",)),
    ]
    out = metric_result("macro_f1", [1, 1, 1], cls)
    assert out["score"] == pytest.approx(100 * (0.8 + 0) / 2) and out["graded"]["name"] == "macro_f1"
    assert out["details"]["accuracy"] == pytest.approx(200 / 3)
    stats = metrics.GradedStatistics("macro_f1", [1, 1, 1], cls)
    assert stats.score(np.arange(3)) == pytest.approx(out["score"])
    assert stats.score(np.array([0, 2, 2])) == pytest.approx(metrics.macro_f1([1, 1, 1], [1, 1, 1]))


# ---------------------------------------------------------------- label share of the demonstrations


def test_label_share_averages_each_prompts_share_of_the_querys_label():
    """Pool labels 0,0,0,1,1,1 (ids 10-15). Query 1 (label 0) gets 10, 11, 13: 2/3; query 2 (label 1)
    gets 13, 14, 15: 1; query 3 (label 1) gets 10 alone: 0; query 4 has no demonstrations and counts
    for nothing. Mean over the three: (2/3 + 1 + 0) / 3 = 5/9."""
    from udr.evaluation.metrics import label_share

    labels = {10: 0, 11: 0, 12: 0, 13: 1, 14: 1, 15: 1}
    rows = [{"label": 0}, {"label": 1}, {"label": 1}, {"label": 0}]
    demos = [[10, 11, 13], [13, 14, 15], [10], []]
    assert label_share(demos, rows, labels) == pytest.approx(5 / 9, abs=1e-12)
    assert label_share([[12, 10]], [{"label": 0}], labels) == 1.0
    assert label_share([[]], [{"label": 0}], labels) is None
    with pytest.raises(UdrError, match="2 predictions but 1 rows"):
        label_share(demos[:2], rows[:1], labels)
