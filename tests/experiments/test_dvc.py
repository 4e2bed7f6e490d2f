"""udr.experiments.dvc: the DVC command lines `udr exp` runs, and reading saved experiments back from git."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from udr.errors import UdrError
from udr.experiments.dvc import check_overrides, exp_run_args, saved_experiments, set_params


def _params(root: Path) -> Path:
    params = root / "params.yaml"
    params.write_text((REPO / "params.yaml").read_text())
    return params


def test_set_params_writes_the_override_and_keeps_the_comments(tmp_path):
    from udr.config import load_settings

    params = _params(tmp_path)
    comments = [line for line in params.read_text().splitlines() if line.lstrip().startswith("#")]
    set_params(params, ["score.reuse_shipped=false", "train.threads=2"])
    settings = load_settings(params)
    assert (settings.score.reuse_shipped, settings.train.threads) == (False, 2)
    assert [line for line in params.read_text().splitlines() if line.lstrip().startswith("#")] == comments
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_set_params_takes_hydras_add_and_delete_forms_as_dvc_exp_run_does(tmp_path):
    """`++key=v` sets a key (or adds it), `~key` deletes one (its default applies), `+key=v` adds one the file
    lacks."""
    from udr.config import Settings, load_settings

    params = _params(tmp_path)
    set_params(params, ["++seed=5", "++train.threads=2"])
    assert (load_settings(params).seed, load_settings(params).train.threads) == (5, 2)
    set_params(params, ["~seed"])
    assert not any(line.startswith("seed:") for line in params.read_text().splitlines())
    assert load_settings(params).seed == Settings.model_fields["seed"].default
    set_params(params, ["+seed=7"])
    assert load_settings(params).seed == 7 and sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("score.nope=1", "score.nope: unknown key"),
        ("train.threads=-1", "bad parameter train.threads"),
        ("+seed=2", "An item is already at 'seed'"),
        ("~score.nope", "'score.nope' does not exist"),
        ("~seed=12345", "is 42 and not 12345"),
        ("x", "bad override 'x': expected key.path=value"),
        ("+seed", "bad override '+seed': expected key.path=value"),
        ("=3", "bad override '=3': expected key.path=value"),
        ("~~seed", "DVC cannot set it"),
    ],
)
def test_a_bad_override_is_one_line_and_leaves_params_as_they_were(tmp_path, override, says):
    params = _params(tmp_path)
    before = params.read_bytes()
    with pytest.raises(UdrError) as err:
        set_params(params, [override])
    assert "\n" not in str(err.value) and (says is None or says in str(err.value)), err.value
    assert params.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_check_overrides_refuses_before_dvc_starts_what_dvc_would_refuse(tmp_path):
    params = _params(tmp_path)
    check_overrides(params, ["train.lr=1e-5,1e-4", "~seed", "+seed=3"], sweep=True)
    for bad in (["+seed=2"], ["~score.nope"], ["seed=1,x"]):
        with pytest.raises(UdrError):
            check_overrides(params, bad, sweep=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_exp_run_args_pass_overrides_and_targets_to_dvc():
    assert exp_run_args("x", ["train.lr=1e-4", "~train.later_rounds.round2"], ["evaluate@udr"]) == [
        "exp",
        "run",
        "-n",
        "x",
        "-S",
        "train.lr=1e-4",
        "-S",
        "~train.later_rounds.round2",
        "evaluate@udr",
    ]
    assert exp_run_args(None, ["a=1,2"], [], queue=True) == ["exp", "run", "-S", "a=1,2", "--queue"]
    with pytest.raises(UdrError, match="bad parameter override 'train.lr'"):
        exp_run_args("x", ["train.lr"])


def test_saved_experiments_reads_dvc_refs(tmp_path):
    def git(*args):
        return subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "base")
    head = git("rev-parse", "HEAD")
    git("update-ref", "refs/exps/ab/cdef/abl-no-instruction", head)
    git("update-ref", "refs/heads/not-an-exp", head)
    assert saved_experiments(tmp_path) == {"abl-no-instruction": head}
    (tmp_path / "sub").mkdir()
    git("update-ref", "-d", "refs/exps/ab/cdef/abl-no-instruction")
    assert saved_experiments(tmp_path / "sub") == {}


@pytest.mark.parametrize(
    ("source", "link", "target"),
    [
        ("../shared/data", ".dvc/tmp/exps/shared", "../shared"),
        ("../data", ".dvc/tmp/exps/data", "../data"),
        ("../../a/b/data", ".dvc/tmp/a", "../../a"),
    ],
)
def test_data_outside_the_project_is_linked_where_queued_runs_look(tmp_path, source, link, target):
    """A queued experiment runs in .dvc/tmp/exps/<run>/: a relative data.source_dir resolves from there."""
    import os
    from types import SimpleNamespace

    from udr.experiments.dvc import link_data_for_temp_runs

    root = tmp_path / "x" / "y" / "proj"
    root.mkdir(parents=True)
    settings = SimpleNamespace(data=SimpleNamespace(source_dir=source))
    made = link_data_for_temp_runs(root, settings)
    assert made == root / link and made.is_symlink()
    assert made.resolve() == Path(os.path.normpath(root / target))
    # From any run folder the relative path now reaches the data (through the link)
    run = root / ".dvc" / "tmp" / "exps" / "tmpab12cd"
    run.mkdir(parents=True)
    (root / target).mkdir(parents=True, exist_ok=True)
    assert (run / source).resolve() == (root / source).resolve()
    assert link_data_for_temp_runs(root, SimpleNamespace(data=SimpleNamespace(source_dir="/abs/data"))) is None


def test_queue_tasks_are_read_from_the_queue_status():
    from udr.experiments.dvc import queue_tasks

    status = (
        "Task     Name       Created    Status\n"
        "3f2a1b0  sweep-79   10:01 AM   Failed\n"
        "9c8d7e6  sweep-78   10:01 AM   Success\n"
        "1a2b3c4             10:02 AM   Failed\n"
        "\n"
        "Worker status: 0 active, 1 idle\n"
    )
    assert queue_tasks(status) == {
        "3f2a1b0": ("sweep-79", "Failed"),
        "9c8d7e6": ("sweep-78", "Success"),
        "1a2b3c4": ("1a2b3c4", "Failed"),
    }
    assert queue_tasks("No experiment tasks in the queue.\n\nWorker status: 0 active, 0 idle\n") == {}


def _fake_dvc(monkeypatch, statuses: list):
    """run_dvc answering `queue status` from `statuses` in turn (an exception is raised), other calls recorded."""
    from udr.experiments import dvc

    calls = []

    def run_dvc(args, root, *, capture=False, dry=False, env=None):
        calls.append(args)
        if args[:2] == ["queue", "status"]:
            answer = statuses.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer
        return ""

    monkeypatch.setattr(dvc, "run_dvc", run_dvc)
    monkeypatch.setattr(dvc, "link_data_for_temp_runs", lambda root, settings: None)
    monkeypatch.setattr(dvc.time, "sleep", lambda s: None)
    return calls


HEADER = "Task     Name        Created    Status\n"


def test_a_queued_run_reports_its_own_failures_not_earlier_ones(monkeypatch, capsys):
    from udr.errors import UdrError
    from udr.experiments.dvc import run_queued

    old = "819f906  mushy-ankh  06:18 PM   Failed\n"
    statuses = [
        HEADER + old,
        HEADER + old + "1f0cedd  irate-yank  06:19 PM   Running\n" + "96f018c  utile-sink  06:19 PM   Queued\n",
        UdrError("`dvc queue status` failed with exit 255"),  # a read during a worker's write
        HEADER + old + "1f0cedd  irate-yank  06:19 PM   Success\n" + "96f018c  utile-sink  06:19 PM   Failed\n",
    ]
    calls = _fake_dvc(monkeypatch, statuses)
    why = r"^1 queued experiment\(s\) failed: utile-sink \(why: `dvc queue logs utile-sink`\)"
    with pytest.raises(UdrError, match=why):
        run_queued(Path("."), [["exp", "run", "--queue"]], None)
    assert ["queue", "start", "-j", "1"] in calls and not statuses
    printed = capsys.readouterr().out
    assert "irate-yank  Success" in printed and "utile-sink  Failed" in printed and "mushy-ankh" not in printed

    statuses = [HEADER + old, HEADER + old + "1f0cedd  irate-yank  06:19 PM   Success\n"]
    _fake_dvc(monkeypatch, statuses)
    run_queued(Path("."), [["exp", "run", "--queue"]], None)  # an earlier failure alone fails nothing

    # a task a killed run left "Running" (DVC lists it so for ever) is not waited for
    killed = "ad3f6f5  doped-zack  06:43 PM   Running\n"
    statuses = [HEADER + killed, HEADER + killed + "1f0cedd  irate-yank  06:19 PM   Success\n"]
    _fake_dvc(monkeypatch, statuses)
    run_queued(Path("."), [["exp", "run", "--queue"]], None)
    assert not statuses


def test_a_queue_status_that_keeps_failing_is_raised(monkeypatch):
    from udr.errors import UdrError
    from udr.experiments.dvc import QUEUE_STATUS_READS, read_queue

    statuses = [UdrError("`dvc queue status` failed with exit 255: ERROR: unexpected error")] * QUEUE_STATUS_READS
    _fake_dvc(monkeypatch, statuses)
    with pytest.raises(UdrError, match="exit 255: ERROR: unexpected error"):
        read_queue(Path("."))
    assert not statuses


def test_a_dvc_failure_names_dvcs_error_line_not_its_banner():
    from udr.experiments.dvc import _dvc_error_line

    stderr = (
        "ERROR: unexpected error - [Errno 2] No such file or directory: 'x.json'\n\n"
        "Having any troubles? Hit us up at https://dvc.org/support, we are always happy to help!\n"
    )
    assert _dvc_error_line(stderr) == "ERROR: unexpected error - [Errno 2] No such file or directory: 'x.json'"
    assert _dvc_error_line("a\nlast words\n") == "last words"


def test_a_kept_evaluation_copies_its_results_last(tmp_path, monkeypatch):
    """keep_evaluation copies a revision's predictions before its results: killed between, no result is there
    to mark the saved evaluation done without its predictions; not killed, both are the revision's bytes."""
    from udr.experiments import dvc

    def git(*args):
        return subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    for path, text in {"metrics/udr/sst2.json": "{}", "data/predictions/udr/sst2.parquet": "rows"}.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    head = git("rev-parse", "HEAD")
    written, real = [], dvc.write_atomic

    def killed_after_the_first(path, write):
        if written:
            raise KeyboardInterrupt
        written.append(Path(path).relative_to(tmp_path).as_posix())
        real(path, write)

    monkeypatch.setattr(dvc, "write_atomic", killed_after_the_first)
    with pytest.raises(KeyboardInterrupt):
        dvc.keep_evaluation(tmp_path, head, "udr", "udr-seed-1")
    assert written == ["data/predictions/udr-seed-1/sst2.parquet"]
    assert not (tmp_path / "metrics/udr-seed-1").exists()
    monkeypatch.undo()
    dvc.keep_evaluation(tmp_path, head, "udr", "udr-seed-1")
    assert (tmp_path / "metrics/udr-seed-1/sst2.json").read_text() == "{}"
    assert (tmp_path / "data/predictions/udr-seed-1/sst2.parquet").read_text() == "rows"


@pytest.mark.parametrize("name", ["../x", "bad name", "a..b", "-flag", "x.lock", "dot.", ""])
def test_a_bad_experiment_name_is_refused_before_anything_runs(name, tmp_path):
    """DVC takes an experiment name as a git ref, and the suite a folder under metrics/: a name neither takes is
    one line, before any work (no folder made)."""
    from udr.experiments.suite import run_suite, state_progress, write_suite_table

    with pytest.raises(UdrError, match="bad experiment name"):
        exp_run_args(name or "x y", ["a=1"])
    for call in (run_suite, state_progress, write_suite_table):
        with pytest.raises(UdrError, match="bad experiment name") as err:
            call(tmp_path, name=name or "x y")
        assert "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_good_experiment_names_pass():
    from udr.experiments.dvc import check_experiment_name

    for name in ("suite", "abl-no-instruction", "seed-1", "udr_v2.1", "A1"):
        assert check_experiment_name(name) == name


def test_without_dvc_setting_a_param_is_a_one_line_error(tmp_path, monkeypatch):
    params = _params(tmp_path)
    before = params.read_bytes()
    monkeypatch.setitem(sys.modules, "dvc.utils.hydra", None)
    with pytest.raises(UdrError, match="dvc is not installed"):
        set_params(params, ["seed=2"])
    assert params.read_bytes() == before
