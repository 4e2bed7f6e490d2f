"""udr.feedback.scores_file: a scores manifest is read through the guarded JSON reader and each of its
fields checked for its type; whatever else a user's file holds is a one-line error naming it."""

from __future__ import annotations

import json

import polars as pl
import pytest

from udr.errors import UdrError
from udr.feedback.scores_file import inputs_hash, read_manifest, read_score_rows

INPUTS = {"task": "sst2", "round": 0, "dtype": "fp32"}
MANIFEST = {
    "task": "sst2",
    "round": 0,
    "seed": 42,
    "queries": [3, 1, 2],
    "pairs": 6,
    "inputs": INPUTS,
    "inputs_hash": inputs_hash(INPUTS),
    "sha256": "0" * 64,
    "machine": "cpu",
    "taken_from": None,
}


def _scores(tmp_path, manifest: dict | str):
    scores = tmp_path / "round0" / "sst2.parquet"
    scores.parent.mkdir()
    pl.DataFrame({"query_id": [1, 1], "candidate_id": [2, 3], "score": [-0.5, -1.0]}).write_parquet(scores)
    text = manifest if isinstance(manifest, str) else json.dumps(manifest)
    scores.with_suffix(".json").write_text(text)
    return scores


def test_a_manifest_of_the_right_types_is_read(tmp_path):
    manifest = read_manifest(_scores(tmp_path, MANIFEST), 0, "sst2")
    assert manifest.queries == [3, 1, 2] and manifest.pairs == 6 and manifest.taken_from is None


@pytest.mark.parametrize(
    "text, reason",
    [
        ('{"task": ' + "[" * 100_000 + "]" * 100_000 + "}", "maximum recursion depth"),
        ("{truncated", "Expecting property name"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({**MANIFEST, "queries": "1,2,3"}), "field 'queries': Input should be a valid list"),
        (json.dumps({**MANIFEST, "queries": [1, "2"]}), r"field 'queries.1': Input should be a valid integer"),
        (json.dumps({**MANIFEST, "pairs": "6"}), "field 'pairs': Input should be a valid integer"),
        (json.dumps({**MANIFEST, "round": True}), "field 'round': Input should be a valid integer"),
        (json.dumps({**MANIFEST, "inputs": ["task"]}), "field 'inputs': Input should be a valid dictionary"),
        (json.dumps({**MANIFEST, "seed": 4.2}), "field 'seed'"),
        (json.dumps({k: v for k, v in MANIFEST.items() if k != "sha256"}), "required field 'sha256' is missing"),
        (json.dumps({**MANIFEST, "extra": 1}), "unknown field 'extra'"),
    ],
)
def test_a_crafted_manifest_is_a_one_line_error_naming_the_file_and_field(tmp_path, text, reason):
    scores = _scores(tmp_path, text)
    with pytest.raises(UdrError, match=rf"unreadable scores manifest {scores.with_suffix('.json')}: {reason}") as info:
        read_manifest(scores, 0, "sst2")
    message = str(info.value)
    assert "\n" not in message and len(message) < 400 and "udr score --round 0 --task sst2" in message


def test_a_truncated_or_mistyped_scores_file_is_a_one_line_error(tmp_path):
    scores = _scores(tmp_path, MANIFEST)
    pl.DataFrame({"query_id": [1], "candidate_id": [2], "score": ["high"]}).write_parquet(scores)
    with pytest.raises(UdrError, match=r"malformed scores .*sst2.parquet: column 'score' holds String, not number"):
        read_score_rows(scores, 0, "sst2")
    scores.write_bytes(scores.read_bytes()[:40])
    with pytest.raises(UdrError, match=r"unreadable scores .*sst2.parquet: .*; run `udr score --round 0"):
        read_score_rows(scores, 0, "sst2")
