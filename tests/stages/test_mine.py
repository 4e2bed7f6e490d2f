"""The `udr mine` stage: a later round's candidates, and how the mining went kept apart from them."""

from __future__ import annotations

import json
import shutil

from tests.conftest import LOOP_TASKS as TASKS


def test_mining_again_leaves_the_candidates_folder_the_same_bytes_and_reports_its_time_apart(looped, tmp_path, run_cli):
    """rescore depends on the whole `data/candidates/round1` folder: mining the same candidates again takes
    another time, and where the time was written beside them, DVC re-ran the scoring and all after it."""
    root = tmp_path / "proj"
    shutil.copytree(looped, root)
    folder = root / "data" / "candidates" / "round1"
    before = {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
    assert sorted(before) == sorted(f"{t}.parquet" for t in TASKS)
    code, _, err = run_cli(["mine", "-r", "1"], root)
    assert code == 0, err
    assert {p.name: p.read_bytes() for p in sorted(folder.iterdir())} == before
    for task in TASKS:
        report = json.loads((root / "metrics" / "mine" / "round1" / f"{task}.json").read_text())
        assert report["task"] == task and report["round"] == 1 and report["seconds"] >= 0
