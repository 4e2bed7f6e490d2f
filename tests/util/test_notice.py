"""udr.util.notice: one channel for notices: a UdrNotice warning from Python, attributed to the caller's
line; one `udr: note:` line on stderr from the `udr` command (its entry point's hook)."""

from __future__ import annotations

import warnings

import pytest

from udr.util.notice import UdrNotice, notice


def test_from_python_a_notice_is_a_warning_at_the_callers_line(capsys):
    with pytest.warns(UdrNotice, match=r"^pool x left out: no rows$") as caught:
        notice("pool x left out:\n  no rows")  # one line, whatever the message holds
    assert caught[0].filename == __file__
    assert capsys.readouterr().err == ""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UdrNotice)
        notice("silenced")  # filtered as any warning
    assert capsys.readouterr().err == ""


def test_a_notice_said_twice_is_shown_twice():
    """No registry of shown warnings: a notice said again (another run in the same process) shows again."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(2):
            notice("same words")
    assert [str(w.message) for w in caught] == ["same words", "same words"]


def test_from_the_command_a_notice_is_one_line_on_stderr(run_cli, monkeypatch, tmp_path):
    import importlib

    cli_app = importlib.import_module("udr.cli.app")  # the module (udr.cli's `app` is the Typer app)

    def command(**_options):  # main() passes standalone_mode
        notice("evaluate.beside: no other.json here;\nthis run alone")
        warnings.warn("a plain warning", UserWarning, stacklevel=1)
        print("results")

    monkeypatch.setattr(cli_app, "app", command)
    before = warnings.showwarning
    code, out, err = run_cli([], tmp_path)
    assert code == 0 and out == "results\n"
    lines = err.splitlines()
    assert lines[0] == "udr: note: evaluate.beside: no other.json here; this run alone"
    assert not any(line.startswith("udr: note: a plain") for line in lines)  # other warnings as Python shows them
    assert warnings.showwarning is before  # the hook is the command's only
