"""`udr adapt`'s pure parts: the plan and its budget, the recommendation rule, the report."""

from __future__ import annotations

import json

import pytest

from udr.errors import UdrError
from udr.evaluation.bootstrap import Interval
from udr.project.adapt import (
    CANDIDATES,
    LABELLED,
    MIN_QUERIES,
    Outcome,
    Rates,
    candidates,
    default_validation,
    plan_adaptation,
    recommend,
)

RATES = Rates(score_tokens_per_s=1000.0, eval_seconds_per_token=0.001, train_seconds_per_step=0.5, machine="cpu x")


def plan(**overrides):
    options = dict(
        row_tokens=40.0,
        pool_rows=1000,
        validation_rows=200,
        test_rows=300,
        queries=256,
        candidates=10,
        max_demos=8,
        context=512,
        batch_size=16,
        epochs=3,
        test_methods=("recommended", "sbert", "bm25"),
    )
    return plan_adaptation(RATES, **{**options, **overrides})


def test_the_plan_counts_the_work_and_prices_it_at_the_recorded_rates():
    p = plan()
    assert (p.queries, p.pairs, p.train_steps) == (256, 2560, 48)
    assert p.seconds["score"] == pytest.approx(2560 * 80 / 1000)
    assert p.seconds["train"] == pytest.approx(24.0)
    prompt = min(512, 9 * 40)
    assert p.seconds["evaluate"] == pytest.approx((len(CANDIDATES) * 200 + 3 * 300) * prompt * 0.001)
    assert "about" in p.describe() and "cpu x" in p.describe()


def test_a_minutes_budget_cuts_the_scored_queries_until_the_estimate_fits():
    full = plan(queries=1000)
    minutes = (full.seconds["evaluate"] + 0.5 * (full.seconds["score"] + full.seconds["train"])) / 60
    cut = plan(queries=1000, minutes=minutes)
    assert MIN_QUERIES <= cut.queries < 1000
    assert cut.total_seconds <= minutes * 60 + 1e-6
    assert plan(queries=1000, minutes=10_000).queries == 1000


def test_a_budget_the_evaluations_alone_exceed_is_one_line_naming_what_to_cut():
    with pytest.raises(UdrError, match="evaluations alone") as err:
        plan(minutes=1)
    assert "\n" not in str(err.value)


def test_a_pool_smaller_than_the_queries_scores_each_row_once():
    p = plan(pool_rows=100, queries=256)
    assert (p.queries, p.pairs) == (100, 1000)


def test_validation_rows_default_to_a_fifth_of_the_train_rows_within_bounds():
    assert default_validation(1500, True, 0.2) == 200
    assert default_validation(500, True, 0.2) == 100
    assert default_validation(500, False, 0.2) == 80
    assert default_validation(100, False, 0.2) == 40


def _rows(scores: dict[str, float], versus: dict[str, Interval], n: int) -> list[dict]:
    """comparison_rows' shape: each method's score, n and interval against SBERT."""
    return [
        {"method": m, "score": v, "n": n, "versus_sbert": versus[m].to_dict() if m in versus else None}
        for m, v in scores.items()
    ]


def test_a_retriever_displaces_sbert_only_when_resolved_above_it():
    scores = {"random": 50.0, "bm25": 80.0, "sbert": 85.0, "udr": 88.0, "adapted": 90.0}
    level = {m: Interval(scores[m] - 85.0, -1.0, 6.0) for m in scores if m != "sbert"}
    choice = recommend(_rows(scores, level, 200))
    assert choice.method == "sbert" and "no retriever is resolved above SBERT" in choice.reason
    resolved = {**level, "adapted": Interval(5.0, 1.5, 8.5)}
    assert recommend(_rows(scores, resolved, 200)).method == "adapted"
    assert recommend(_rows({"random": 99.0, "sbert": 60.0, "bm25": 50.0}, {}, 10)).method == "sbert"


def test_the_report_marks_the_recommendation_and_shows_the_intervals():
    rows = [
        {"method": "sbert", "score": 85.0, "n": 200, "versus_sbert": None},
        {"method": "adapted", "score": 90.0, "n": 200, "versus_sbert": Interval(5.0, 1.5, 8.5).to_dict()},
    ]
    outcome = Outcome("news", "accuracy", {}, rows, {"method": "adapted", "reason": "r"}, [], None, {})
    text = outcome.markdown()
    assert "| adapted ← recommended | 90.0 | +5.0 [+1.5, +8.5] |" in text
    assert "| sbert | 85.0 |  |" in text and "Recommended: **adapted**" in text
    assert "label share" not in text  # answers that are not labels have none
    rows = [r | {"label_share": share} for r, share in zip(rows, (0.94, 0.96))]
    text = Outcome("news", "accuracy", {}, rows, {"method": "adapted", "reason": "r"}, [], None, {}).markdown()
    assert "| retriever | score | label share | − sbert |" in text
    assert "| adapted ← recommended | 90.0 | 0.96 | +5.0 [+1.5, +8.5] |" in text


def test_label_aware_candidates_are_compared_where_the_answers_are_labels_and_priced():
    assert candidates("classification") == (*CANDIDATES, "sbert-labels", "adapted-labels")
    assert candidates("generation") == candidates("multiple_choice") == CANDIDATES
    assert set(LABELLED.values()) == {"sbert", "adapted"}
    seven = plan(validated=len(candidates("classification")))
    prompt = min(512, 9 * 40)
    assert seven.seconds["evaluate"] == pytest.approx((7 * 200 + 3 * 300) * prompt * 0.001)
    assert "evaluate 7 retrievers on 200 validation rows" in seven.describe()


def test_every_answer_choice_is_priced_after_each_prompt():
    """A classification prompt is scored once per label, each label's tokens after it: with many labels they
    are most of the work (49 intents: 197 of a pair's 222 tokens)."""
    few, many = plan(), plan(choice_tokens=200.0)
    assert many.seconds["score"] == pytest.approx(2560 * (80 + 200) / 1000)
    prompt = min(512, 9 * 40) + 200
    assert many.seconds["evaluate"] == pytest.approx((len(CANDIDATES) * 200 + 3 * 300) * prompt * 0.001)
    assert many.seconds["train"] == few.seconds["train"]


def test_choice_tokens_count_the_labels_a_scored_pair_carries(looped):
    """On a real scoring run (the tiny project's round 0), the estimate of a pair's tokens, both rows and
    every choice, is within a tenth of what the scorer counted; the choices are each label's tokens."""
    from transformers import AutoTokenizer

    from udr.config import load_settings
    from udr.data.prepare import read_prepared
    from udr.project.adapt import pool_tokens

    settings = load_settings(looped / "params.yaml")
    report = json.loads((looped / "metrics/score/round0/sst2.json").read_text())
    per_pair = report["tokens"] / report["pairs"]
    train = read_prepared(looped, "sst2", "train")
    rows, choices = pool_tokens(settings, "sst2", train)
    assert abs(2 * rows + choices - per_pair) / per_pair < 0.1, (rows, choices, per_pair)
    tokenizer = AutoTokenizer.from_pretrained(settings.paths.base_model("lm"))
    labels = train["choices"][0]
    assert len(labels) == 2 and choices == sum(len(tokenizer(f" {label}")["input_ids"]) for label in labels)
    generation = read_prepared(looped, "break", "train")
    assert pool_tokens(settings, "break", generation)[1] == 0.0  # generation: the target is in the row
