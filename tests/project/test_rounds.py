"""udr.project.rounds: the per-round account of Algorithm 1 (`udr rounds`)."""

from __future__ import annotations

import json

from tests.conftest import LOOP_TASKS as TASKS


def test_rounds_report(looped, run_cli):
    from udr.config import load_settings
    from udr.project.rounds import rounds_table

    rows = rounds_table(load_settings(looped / "params.yaml"))
    totals = {r["round"]: r for r in rows if r["task"] == "all"}
    assert set(totals) == {0, 1}
    assert totals[0]["pairs"] == 2 * 8 * 5 and totals[1]["scored"] == sum(
        json.loads((looped / f"metrics/mine/round1/{t}.json").read_text())["new"] for t in TASKS
    )
    assert totals[1]["train_steps"] >= 1 and totals[1]["mined_new_fraction"] is not None
    per_task = [r for r in rows if r["task"] != "all"]
    assert all(r["retrieved"] is not None and r["retrieved"][0] >= r["retrieved"][1] for r in per_task)
    code, out, _ = run_cli(["rounds"], looped)
    assert code == 0 and "sst2" in out


def test_rounds_of_another_params_file_leave_out_the_pipelines_training(looped, tmp_path):
    """A params file beside the pipeline's does not show the training loss of the round models that the
    pipeline's params file made."""
    import shutil

    from udr.config import load_settings
    from udr.project.rounds import rounds_table

    own = looped / "params-own.yaml"
    shutil.copyfile(looped / "params.yaml", own)
    try:
        rows = [r for r in rounds_table(load_settings(own)) if r["task"] == "all"]
    finally:
        own.unlink()
    assert rows and all(r["train_loss_start"] is None and r["train_steps"] is None for r in rows)
    assert all(r["pairs"] for r in rows)  # the scoring files are the same folder's
