"""The training log writes dvclive's files byte for byte, without dvclive (which imports most of DVC)."""

from __future__ import annotations

import sys

import pytest

from udr.retriever.train_log import LOGGED, TrainLog


def _history(n: int) -> list[dict]:
    return [
        {"step": s, "loss": 6.0 / (s + 1), "rank": 5.5 / (s + 3), "in_batch": 1e-7 * s + 4.0, "lr": 5e-05 * (n - s) / n}
        for s in range(n)
    ]


def _files(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_log_equals_dvclives_files(tmp_path):
    dvclive = pytest.importorskip("dvclive", reason="dvclive is the reference, in the dev extra")
    history = _history(12)
    live = dvclive.Live(str(tmp_path / "dvclive"), save_dvc_exp=False, dvcyaml=None, report=None)
    for record in history:
        live.step = record["step"]
        for key in LOGGED:
            live.log_metric(f"train/{key}", record[key], plot=True)
        live.next_step()
    live.end()

    # five replayed from a checkpoint, the rest logged
    log = TrainLog(tmp_path / "ours", history[:5], tmp_path / "model")
    for record in history[5:]:
        log.log(record)
    assert _files(log.dir) == _files(tmp_path / "dvclive")
    assert len(_files(log.dir)) == len(LOGGED) + 1


def test_the_log_does_not_import_dvc(tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m.split(".")[0] in {"dvc", "dvclive", "scmrepo"}]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_Refuse({"dvc", "dvclive", "scmrepo"}), *sys.meta_path])
    log = TrainLog(tmp_path / "log", _history(2), tmp_path / "model")
    assert (log.dir / "metrics.json").is_file()


class _Refuse:
    def __init__(self, names):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ImportError(f"{name} refused by the test")
        return None
