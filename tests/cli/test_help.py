"""`udr --help` and each command's: docstrings become help without their source line breaks."""

from __future__ import annotations

import re


def _commands(typer_app):
    yield from typer_app.registered_commands
    for group in typer_app.registered_groups:
        yield from _commands(group.typer_instance)


def test_every_commands_help_is_unwrapped_paragraphs():
    from udr.cli import app

    helps = [info.help for info in _commands(app)]
    assert len(helps) > 15 and all(helps)
    for text in helps:
        assert not re.search(r"[^\n]\n[^\n]", text), text


def test_the_command_list_wraps_at_the_terminal_only(run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_cli(["--help"], tmp_path)
    assert code == 0
    lines = out.splitlines()
    panel = lines[next(i for i, line in enumerate(lines) if "Commands" in line) + 1 :]
    panel = panel[: next(i for i, line in enumerate(panel) if line.startswith("╰"))]
    assert len(panel) > 15
    # Where a description goes on in the next row, that row's first word must not have fitted in this one:
    # otherwise the break is a docstring's own, in the middle of the terminal's lines.
    for row, following in zip(panel, panel[1:]):
        if following.startswith("│" + " " * 12):
            word = following.strip("│ ").split()[0]
            assert len(row.rstrip("│").rstrip()) + 1 + len(word) > len(row) - 2, f"broken line: {row!r}"


def test_a_bad_option_is_one_line_naming_the_command_and_help_stays_help(run_cli, tmp_path):
    for args, line in [
        (["score", "-r", "abc"], "udr score: invalid value for '--round' / '-r': bad round 'abc': expected a number"),
        (["evaluate", "--limit", "0"], "udr evaluate: invalid value for '--limit': "),
        (["interpolate", "M", "--alpha", "abc", "--out", "o"], "udr interpolate: invalid value for '--alpha': "),
        (["exp", "seeds", "--seed", "-1"], "udr exp seeds: invalid value for '--seed': "),
        (["adapt", "a", "--from", "x.csv", "--queries", "0"], "udr adapt: invalid value for '--queries': "),
        (["score", "--bogus"], "udr score: no such option: --bogus"),
        (["nosuch"], "udr: no such command 'nosuch'"),
    ]:
        code, out, err = run_cli(args, tmp_path)
        assert (code, out) == (2, ""), args
        assert len(err.splitlines()) == 1 and err.startswith(line), err
    # while --help, and a group without its command, still show the help
    for args, status in [(["score", "--help"], 0), (["exp", "seeds", "--help"], 0), ([], 2), (["exp"], 2)]:
        code, out, err = run_cli(args, tmp_path)
        assert code == status and "Usage: udr" in out and err == "", args
