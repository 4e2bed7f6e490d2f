"""tools/migrate_score_manifests.py on inputs it cannot read: a summary that does not parse is one line,
"migrate_score_manifests: error: ...", and exit status 1, never a traceback; one of the wrong types is
named and left as it was. (Its migration of real summaries: tests/stages/test_score.py.)"""

from __future__ import annotations

import json

import polars as pl
import pytest

from tests.conftest import write_params
from tools.migrate_score_manifests import main as migrate


@pytest.fixture
def scores_dir(tmp_path, data_dir):
    write_params(tmp_path, {"sst2": {"max_train": 20, "max_test": 6}}, data_dir)
    folder = tmp_path / "data" / "scores" / "round0"
    folder.mkdir(parents=True)
    pl.DataFrame({"query_id": [1], "candidate_id": [2], "score": [-1.0]}).write_parquet(folder / "sst2.parquet")
    return folder


@pytest.mark.parametrize(
    "text", ['{"task": "sst2", "pairs": 3', '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "[1, 2]"]
)
def test_a_summary_that_does_not_parse_is_a_one_line_error(scores_dir, capsys, text):
    (scores_dir / "sst2.json").write_text(text)
    assert migrate(["--params", str(scores_dir.parents[2] / "params.yaml"), "--dir", str(scores_dir)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"migrate_score_manifests: error: unreadable scores summary {scores_dir / 'sst2.json'}: ")
    assert len(err.strip().splitlines()) == 1, err
    assert (scores_dir / "sst2.json").read_text() == text


def test_a_summary_of_the_wrong_types_is_named_and_left_as_it_was(scores_dir, capsys):
    text = json.dumps({"task": "sst2", "pairs": "3", "inputs": "0" * 64, "sha256": "0" * 64})
    (scores_dir / "sst2.json").write_text(text)
    assert migrate(["--params", str(scores_dir.parents[2] / "params.yaml"), "--dir", str(scores_dir)]) == 1
    err = capsys.readouterr().err
    assert err.strip() == f"not migrated: {scores_dir / 'sst2.json'}: its pairs is '3', not a count"
    assert (scores_dir / "sst2.json").read_text() == text
