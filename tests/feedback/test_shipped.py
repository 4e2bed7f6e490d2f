"""udr.feedback.shipped: round 0 takes shipped scores after a seeded sample of them is scored again and
agrees; a changed or disagreeing shipped file is an error and nothing is written; the committed shipped
feedback matches its recorded checksums."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import REPO, scoring_project
from udr.errors import UdrError
from udr.feedback.scores_file import inputs_hash, read_manifest, read_scores
from udr.feedback.shipped import read_checksums
from udr.util.files import file_sha256
from udr.util.notice import UdrNotice

TASK = "sst2"


@pytest.fixture(scope="module")
def scored_project(tmp_path_factory, data_dir):
    """A project with sst2 prepared, BM25 candidates, a tiny LM, and its round-0 scores (no shipped folder)."""
    from udr.stages.score import run_score

    score = {"queries_per_task": 6, "shard_pairs": 7, "batch_tokens": 2048, "dtype": "fp32", "check_queries": 2}
    root = tmp_path_factory.mktemp("shipped")
    scoring_project(root, [TASK], data_dir, max_train=30, max_test=5, k=5, score=score, lm_src="tiny-src")
    run_score(_settings(root), TASK, 0, progress=False)
    return root


def _settings(root, *overrides):
    from udr.config import load_settings

    return load_settings(root / "params.yaml", list(overrides))


def _shipping(scored_project, tmp_path) -> Path:
    """A copy of the project whose round-0 scores became its shipped feedback (and are gone from data/scores)."""
    root = tmp_path / "proj"
    shutil.copytree(scored_project, root)
    shipped = root / "data/feedback/round0"
    shipped.mkdir(parents=True)
    for suffix in (".parquet", ".json"):
        shutil.move(root / f"data/scores/round0/{TASK}{suffix}", shipped / f"{TASK}{suffix}")
    _list_checksums(shipped)
    return root


def _list_checksums(shipped: Path) -> None:
    """The shipped folder's SHA256SUMS, as committed beside the files."""
    names = (f"{TASK}.parquet", f"{TASK}.json")
    (shipped / "SHA256SUMS").write_text("".join(f"{file_sha256(shipped / n)}  {n}\n" for n in names))


def _score(root, *overrides):
    from udr.stages.score import run_score

    return run_score(_settings(root, *overrides), TASK, 0, progress=False)


def _edit_shipped(root, change, *, keep_checksum: bool, keep_list: bool = True) -> None:
    """Shipped scores edited: `keep_checksum`, their manifest's checksum too; `keep_list`, SHA256SUMS too."""
    path = root / f"data/feedback/round0/{TASK}.parquet"
    pl.read_parquet(path).with_columns(change).write_parquet(path)
    if keep_checksum:
        summary = path.with_suffix(".json")
        record = json.loads(summary.read_text())
        summary.write_text(json.dumps({**record, "sha256": file_sha256(path)}))
    if keep_list:
        _list_checksums(path.parent)


def test_shipped_scores_are_taken_once_their_sample_agrees(scored_project, tmp_path):
    root = _shipping(scored_project, tmp_path)
    summary = _score(root)
    shipped = pl.read_parquet(root / f"data/feedback/round0/{TASK}.parquet")
    out = pl.read_parquet(root / f"data/scores/round0/{TASK}.parquet")
    # 6 queries x 5 candidates: 2 sampled queries scored again (10 pairs), the other 20 pairs taken.
    assert summary.scored == 10 and summary.shipped["taken"] == 20 and summary.shipped["checked_queries"] == 2
    assert summary.shipped["max_abs_diff"] <= summary.shipped["tolerance"]
    assert summary.machine
    # The output holds the shipped scores themselves, the sample's included.
    assert out.sort(["query_id", "candidate_id"]).equals(shipped.sort(["query_id", "candidate_id"]))
    recorded = json.loads((root / f"metrics/score/round0/{TASK}.json").read_text())
    assert recorded["shipped"]["sha256"] == file_sha256(root / f"data/feedback/round0/{TASK}.parquet")
    assert recorded["shipped"]["source"] == f"data/feedback/round0/{TASK}.parquet"  # no machine path
    manifest = json.loads((root / f"data/scores/round0/{TASK}.json").read_text())
    assert manifest["taken_from"] == recorded["shipped"]["source"] and manifest["sha256"] == file_sha256(
        root / f"data/scores/round0/{TASK}.parquet"
    )


def test_an_altered_shipped_score_is_refused(scored_project, tmp_path):
    root = _shipping(scored_project, tmp_path)
    first = pl.int_range(pl.len()) == 0
    _edit_shipped(root, pl.when(first).then(pl.col("score") + 1e-6).otherwise(pl.col("score")), keep_checksum=False)
    with pytest.raises(UdrError, match="changed since it was written"):
        _score(root)
    assert not (root / f"data/scores/round0/{TASK}.parquet").exists()


def test_shipped_scores_this_lm_disagrees_with_fail_and_nothing_is_written(scored_project, tmp_path):
    root = _shipping(scored_project, tmp_path)
    _edit_shipped(root, pl.col("score") + 0.5, keep_checksum=True)  # every score, so the sampled ones too
    with pytest.raises(UdrError, match="disagrees with this machine's LM: 10 of 10"):
        _score(root)
    assert not (root / f"data/scores/round0/{TASK}.parquet").exists()
    # Within a wider tolerance the same file is taken.
    assert _score(root, "score.check_tolerance=0.6").shipped["taken"] == 20


def test_shipped_scores_of_other_inputs_or_switched_off_are_not_taken(scored_project, tmp_path):
    root = _shipping(scored_project, tmp_path)
    assert _score(root).shipped["taken"] == 20
    # Switched off, nothing is taken, not even through the earlier output that came from the shipped file.
    switched_off = _score(root, "score.reuse_shipped=false")
    assert switched_off.shipped is None and switched_off.scored == 30
    manifest_path = root / f"data/feedback/round0/{TASK}.json"
    manifest = json.loads(manifest_path.read_text())
    other = {**manifest["inputs"], "lm": "another LM"}
    manifest_path.write_text(json.dumps({**manifest, "inputs": other, "inputs_hash": inputs_hash(other)}))
    _list_checksums(manifest_path.parent)
    (root / f"data/scores/round0/{TASK}.parquet").unlink()
    with pytest.warns(UdrNotice, match="scored with other inputs"):
        summary = _score(root)
    assert summary.shipped is None and summary.scored == 30


def test_a_shipped_edit_that_keeps_its_manifest_checksum_is_caught_by_the_committed_list(scored_project, tmp_path):
    """Scores and manifest checksum edited together (the sample may miss the edit): the folder's
    SHA256SUMS, committed beside, refuses the file."""

    root = _shipping(scored_project, tmp_path)
    assert _score(root).shipped["taken"] == 20
    (root / f"data/scores/round0/{TASK}.parquet").unlink()
    last = pl.int_range(pl.len()) == pl.len() - 1
    edit = pl.when(last).then(pl.col("score") + 1e-6).otherwise(pl.col("score"))
    _edit_shipped(root, edit, keep_checksum=True, keep_list=False)
    with pytest.raises(UdrError, match="differs from its checksum in SHA256SUMS"):
        _score(root)


def test_a_reordered_shipped_query_list_is_refused(scored_project, tmp_path):
    root = _shipping(scored_project, tmp_path)
    path = root / f"data/feedback/round0/{TASK}.json"
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps({**manifest, "queries": manifest["queries"][::-1]}))
    _list_checksums(path.parent)
    with pytest.raises(UdrError, match="queries are not the seeded choice"):
        _score(root)


def test_a_shipped_folder_without_the_tasks_file_says_so(scored_project, tmp_path):
    """The notice says what the run does instead: score the pairs here, or reuse an earlier run's."""
    root = _shipping(scored_project, tmp_path)
    (root / f"data/feedback/round0/{TASK}.parquet").rename(root / "data/feedback/round0/other.parquet")
    said = f"no shipped feedback of {TASK} in data/feedback/round0 \\(score.shipped\\): scoring its 30 pairs here$"
    with pytest.warns(UdrNotice, match=said):
        assert _score(root).shipped is None
    reused = "reusing all 30 of its pairs from an earlier run's output of the same inputs$"
    with pytest.warns(UdrNotice, match=reused) as caught:
        assert _score(root).scored == 0
    assert not any("scoring" in str(w.message) for w in caught)


@pytest.mark.parametrize("damage", ["missing", "a directory"])
def test_a_missing_or_unreadable_committed_checksum_list_is_refused(scored_project, tmp_path, damage):
    """Without SHA256SUMS nothing shipped could be verified against the committed list: refused, in one line."""
    root = _shipping(scored_project, tmp_path)
    checksums = root / "data/feedback/round0/SHA256SUMS"
    checksums.unlink()
    if damage == "a directory":
        checksums.mkdir()
    message = "has no SHA256SUMS" if damage == "missing" else "unreadable .*SHA256SUMS"
    with pytest.raises(UdrError, match=message) as err:
        _score(root)
    assert "\n" not in str(err.value) and "score.reuse_shipped=false" in str(err.value)
    assert not (root / f"data/scores/round0/{TASK}.parquet").exists()


def test_the_committed_shipped_feedback_matches_its_checksums():
    """Any change to a committed shipped score (or a missing file) fails here, as it fails the score stage;
    each manifest lists the file's queries and hashes its inputs in the one current form."""
    folder = REPO / "data/feedback/round0"
    manifests = sorted(folder.glob("*.json"))
    assert manifests, folder
    checksums = read_checksums(folder)
    assert set(checksums) == {p.name for p in folder.iterdir() if p.suffix in (".json", ".parquet")}
    for path in manifests:
        scores = path.with_suffix(".parquet")
        manifest = read_manifest(scores, 0, path.stem)
        assert manifest.sha256 == file_sha256(scores), f"{scores} changed since its manifest"
        frame = read_scores(scores, 0, path.stem)
        assert len(frame) == manifest.pairs
        assert checksums[scores.name] == file_sha256(scores) and checksums[path.name] == file_sha256(path)
        assert sorted(frame["query_id"].unique().to_list()) == sorted(manifest.queries)


def test_shipped_scores_of_another_precision_are_taken_when_the_sample_agrees(scored_project, tmp_path):
    """bf16 feedback serves an fp32 run (an AVX2-only CPU's), the sample scored in fp32 deciding."""
    root = _shipping(scored_project, tmp_path)
    manifest_path = root / f"data/feedback/round0/{TASK}.json"
    manifest = json.loads(manifest_path.read_text())
    bf16 = {**manifest["inputs"], "dtype": "bf16"}
    manifest_path.write_text(json.dumps({**manifest, "inputs": bf16, "inputs_hash": inputs_hash(bf16)}))
    _list_checksums(manifest_path.parent)
    summary = _score(root)  # this run's dtype is fp32
    assert summary.dtype == "fp32" and summary.shipped["taken"] == 20


def test_scores_under_a_folder_that_cannot_be_written_are_one_line_before_the_lm_loads(scored_project, tmp_path):
    root = _shipping(scored_project, tmp_path)
    scores = root / "data/scores"
    shutil.rmtree(scores)
    scores.write_text("a file where the scores folder goes")
    with pytest.raises(UdrError, match=r"cannot write scores file .*sst2.parquet: .*scores is a file"):
        _score(root)
