"""`udr exp sweep` end to end: a real queued sweep of a cheap stage in a clone of this repository, with
the data beside it as in the default layout (`../shared/data`): queued runs find the data, and a sweep
whose experiments fail exits non-zero naming them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


@pytest.fixture
def clone(tmp_path, data_dir):
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "data").symlink_to(data_dir, target_is_directory=True)
    project = tmp_path / "proj"
    subprocess.run(["git", "clone", "-q", str(REPO), str(project)], check=True)
    return project


def _sweep(project, *sets: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "UDR_DATA_DIR"}  # the params' data.source_dir, as DVC runs it
    args = [sys.executable, "-m", "udr.cli", "exp", "sweep", "prepare@sst2", "-j", "1"]
    for s in sets:
        args += ["-S", s]
    return subprocess.run(args, cwd=project, env=env, capture_output=True, text=True, timeout=600)


def test_a_queued_sweep_finds_the_data_and_reports_failures(clone):
    done = _sweep(clone, "prepare.tasks.sst2.max_test=79,78")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("Success") == 2 and "Failed" not in done.stdout
    failing = _sweep(clone, "data.source_dir=../nowhere")
    assert failing.returncode == 1 and "Failed" in failing.stdout
    assert "1 queued experiment(s) failed" in failing.stderr and "dvc queue logs" in failing.stderr
