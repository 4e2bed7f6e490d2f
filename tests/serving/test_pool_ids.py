"""One pool-id convention by every route: a user's CSV, declared as a task and prepared, then served by the
task's name, through an export that carries its pool, and as an own pool (`udr retrieve --pool`, `add_pool`),
names each row by one id, its 0-based position among the file's data rows; a pool cut to its cap says so."""

from __future__ import annotations

import csv
import json

import pytest

from tests.conftest import run_udr, write_csv_task, write_params

QUERY = "the battery died after a week"


def _served_rows(out: str) -> dict[int, tuple[str, str]]:
    return {x["pool_id"]: (x["input"], x["output"]) for x in map(json.loads, out.splitlines())}


@pytest.mark.filterwarnings("ignore::udr.serving.evidence.UntrainedTaskWarning")
def test_a_csv_rows_pool_id_is_the_same_by_every_route(run_cli, served, data_dir, tmp_path, monkeypatch):
    from udr import Retriever
    from udr.data.prepare import pool_cut_note

    pytest.importorskip("sentence_transformers", reason="the sentence-transformers extra is not installed")
    monkeypatch.setenv("UDR_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "project"
    declaration = write_csv_task(root / "data" / "tasks", data_dir, "reviews", rows=40)
    write_params(root, {"reviews": {"max_train": 20, "max_test": 6}}, data_dir)
    run_udr(root, "prepare")
    meta = json.loads((root / "data" / "prepared" / "reviews" / "meta.json").read_text())
    assert pool_cut_note(meta, "--max-train") == (
        "reviews: the pool keeps a seeded 20 of its 32 train rows (--max-train 20); raise --max-train to keep them all"
    )
    assert pool_cut_note({**meta, "counts": {"train": {"available": 20, "kept": 20, "cap": 20}}}, "--max-train") is None
    model = str(served / "models" / "final")
    path = declaration.with_suffix(".csv")
    with path.open(newline="") as fh:
        texts = [row["review"] for row in csv.DictReader(fh)]

    by_name = Retriever.load(model, root=root).retrieve(QUERY, task="reviews", k=20)
    named = {d.pool_id: (d.input, d.output) for d in by_name}
    assert len(named) == 20 and all(texts[i].split() == x.split() for i, (x, _) in named.items())

    code, out, err = run_cli(
        ["retrieve", QUERY, "--pool", str(path), "-t", "reviews", "--model", model, "-k", "40", "--json"], root
    )
    assert code == 0, err
    own = _served_rows(out)
    assert named.items() <= own.items()  # each prepared row has the id --pool gives it
    mine = Retriever.load(model, root=root)
    assert {
        d.pool_id: (d.input, d.output)
        for d in mine.retrieve(QUERY, mine.add_pool(path, task="reviews", name="mine"), k=40)
    } == own

    export = tmp_path / "export"
    run_udr(root, "export", str(export), "--model", model, "-t", "reviews")
    code, out, err = run_cli(
        ["retrieve", QUERY, "-t", "reviews", "--model", str(export), "-k", "20", "--json"], tmp_path
    )
    assert code == 0, err
    assert _served_rows(out).keys() == named.keys()
