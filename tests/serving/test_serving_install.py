"""A serving install (`pip install udr`, without the `pipeline` extra) retrieves, and a pipeline command
there fails with one line naming the extra. The pipeline's libraries are made unimportable in a
subprocess, as they are where that extra is not installed."""

from __future__ import annotations

import json
import subprocess
import sys

from udr.cli.app import PIPELINE_MODULES

BLOCK = (
    "import sys\nfor name in {names!r}:\n    sys.modules[name] = None\n"
    "sys.argv = {argv!r}\nfrom udr.cli import main\nmain()\n"
)


def _udr_without_pipeline(root, *args: str) -> subprocess.CompletedProcess:
    code = BLOCK.format(names=sorted(PIPELINE_MODULES), argv=["udr", *args])
    return subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)


def test_retrieve_needs_no_pipeline_library(served, tmp_path, monkeypatch):
    monkeypatch.setenv("UDR_CACHE_DIR", str(tmp_path / "cache"))
    done = _udr_without_pipeline(served, "retrieve", "a gripping, funny film", "--task", "sst2", "-k", "2", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert [json.loads(line)["rank"] for line in done.stdout.splitlines()] == [1, 2]


def test_a_pipeline_command_names_the_extra(served):
    done = _udr_without_pipeline(served, "candidates", "--task", "sst2")  # BM25: bm25s
    assert done.returncode == 1, done.stderr[-2000:]
    assert "needs the pipeline extra" in done.stderr and "pip install 'udr[pipeline]'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
