"""`udr repro`: DVC's stages run several at once, each after the stages it depends on, and only where DVC
finds something changed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from udr.errors import UdrError
from udr.workflows.repro import StagePlan, chain_lengths, default_jobs, plan_stages, run_repro, run_stages


class FakeProcess:
    """A stage process that ends with `code` after `polls` polls."""

    def __init__(self, code: int = 0, polls: int = 2):
        self.code, self.polls = code, polls

    def poll(self):
        self.polls -= 1
        return self.code if self.polls <= 0 else None


def _run(plan: StagePlan, jobs: int, codes: dict[str, int] | None = None):
    started, ended, running, most = [], [], set(), [0]

    def start(name):
        started.append(name)
        running.add(name)
        most[0] = max(most[0], len(running))
        return FakeProcess((codes or {}).get(name, 0))

    def on_end(name, code, seconds):
        running.discard(name)
        ended.append((name, code))

    run_stages(Path("."), plan, jobs, start, on_end)
    return started, ended, most[0]


def test_the_longest_chain_goes_first_and_a_stage_waits_for_what_it_depends_on(monkeypatch):
    monkeypatch.setattr("udr.workflows.repro.time.sleep", lambda s: None)
    waits_for = {"a": set(), "b": set(), "c": {"a"}, "d": {"c"}, "e": {"b", "d"}}
    plan = StagePlan(waits_for, priority=chain_lengths(waits_for))
    assert plan.priority == {"a": 4, "b": 2, "c": 3, "d": 2, "e": 1}
    started, ended, most = _run(plan, jobs=2)
    assert started[:2] == ["a", "b"] and most == 2
    finished = [name for name, _ in ended]
    for name, deps in waits_for.items():
        assert all(finished.index(d) < started.index(name) for d in deps), name
    assert _run(plan, jobs=1)[2] == 1


def test_a_failed_stage_starts_nothing_more_and_is_the_error(monkeypatch):
    monkeypatch.setattr("udr.workflows.repro.time.sleep", lambda s: None)
    waits_for = {"a": set(), "b": set(), "c": {"a"}, "d": {"b"}}
    plan = StagePlan(waits_for, priority=chain_lengths(waits_for))
    with pytest.raises(UdrError, match=r"stage a failed \(exit 3\)"):
        _run(plan, jobs=2, codes={"a": 3})


def test_jobs_are_the_cores_over_the_largest_threads(tmp_path):
    from tests.conftest import REPO
    from udr.config import load_settings

    (tmp_path / "params.yaml").write_text((REPO / "params.yaml").read_text())
    assert default_jobs(load_settings(tmp_path / "params.yaml"), 2) == 2
    settings = load_settings(tmp_path / "params.yaml", ["train.threads=2"])
    assert default_jobs(settings, 2) == 1 and default_jobs(settings, 5) == 2
    assert default_jobs(load_settings(tmp_path / "params.yaml", ["evaluate.threads=0"]), 8) == 1


def _dvc_project(root: Path) -> None:
    """A DVC project of shell stages: two independent chains (a -> c, b) and d after both, and an
    always-changed stage the others read."""
    python = sys.executable

    def step(name: str, reads: list[str]) -> dict:
        cmd = f"{python} -c \"import pathlib, time; time.sleep(0.5); pathlib.Path('{name}.txt').write_text('{name}')\""
        return {"cmd": cmd, "deps": reads, "outs": [f"{name}.txt"]}

    stages = {
        "facts": {
            "cmd": f"{python} -c \"import pathlib; pathlib.Path('facts.txt').write_text('same')\"",
            "always_changed": True,
            "outs": [{"facts.txt": {"cache": False}}],
        },
        "a": step("a", ["facts.txt"]),
        "b": step("b", ["facts.txt"]),
        "c": step("c", ["a.txt"]),
        "d": step("d", ["b.txt", "c.txt"]),
    }
    # one line a command whatever the interpreter's path, so that the test's edit of one finds it
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False, width=1 << 16))
    (root / "params.yaml").write_text("seed: 1\n")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([str(Path(python).with_name("dvc")), "init", "-q"], cwd=root, check=True)


@pytest.mark.slow
def test_a_dvc_pipeline_runs_two_at_a_time_then_finds_nothing_to_do(tmp_path):
    _dvc_project(tmp_path)
    said: list[str] = []
    run_repro(tmp_path, [], jobs=2, say=said.append)
    assert {p.name: p.read_text() for p in tmp_path.glob("*.txt")} == {n + ".txt": n for n in "abcd"} | {
        "facts.txt": "same"
    }
    lock = yaml.safe_load((tmp_path / "dvc.lock").read_text())["stages"]
    assert set(lock) == {"facts", "a", "b", "c", "d"}
    ran = [line for line in said if ": ran" in line]
    assert len(ran) == 4, said
    # nothing changed: the always-changed stage writes the same bytes, and nothing downstream may run
    assert plan_stages(tmp_path, []).waits_for == {}
    said.clear()
    run_repro(tmp_path, [], jobs=2, say=said.append)
    assert not [line for line in said if ": ran" in line], said
    # one stage's input changed: it and what is downstream of it may run, the rest not
    pipeline = (tmp_path / "dvc.yaml").read_text()
    assert pipeline.count("sleep(0.5); pathlib.Path('b") == 1
    (tmp_path / "dvc.yaml").write_text(pipeline.replace("sleep(0.5); pathlib.Path('b", "sleep(0.4); pathlib.Path('b"))
    assert set(plan_stages(tmp_path, []).waits_for) == {"b", "d"}
    assert set(plan_stages(tmp_path, ["c"]).waits_for) == set()


def test_an_unknown_stage_is_a_one_line_error(tmp_path):
    _dvc_project(tmp_path)
    with pytest.raises(UdrError, match="unknown stage 'nope'"):
        plan_stages(tmp_path, ["nope"])


def test_a_folder_without_a_pipeline_is_a_one_line_error(tmp_path):
    with pytest.raises(UdrError, match="no dvc.yaml in"):
        plan_stages(tmp_path, [])
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    with pytest.raises(UdrError, match="not a DVC repository"):
        plan_stages(tmp_path, [])


def test_udr_repro_with_a_bad_override_exits_with_one_line_and_runs_nothing(tmp_path, run_cli):
    _dvc_project(tmp_path)
    code, _, err = run_cli(["repro", "-S", "seed=two"], tmp_path)
    assert code != 0 and len(err.strip().splitlines()) == 1 and "seed" in err
    assert (tmp_path / "params.yaml").read_text() == "seed: 1\n" and not (tmp_path / "dvc.lock").exists()
