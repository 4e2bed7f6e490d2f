"""udr.util.progress: a rich bar on a terminal, plain periodic lines in a log or a pipe."""

from __future__ import annotations

import io


def test_lines_report_progress_when_stderr_is_not_a_terminal(monkeypatch):
    """Off a terminal a long task prints done/total, rate and extra columns every interval, and a last line."""
    import sys

    from udr.util.progress import LineProgress, progress_bar

    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert isinstance(progress_bar(True), LineProgress)
    stream = io.StringIO()
    with LineProgress(("loss {task.fields[loss]:.2f}",), interval=0.0, stream=stream) as bar:
        job = bar.add_task("scoring grammar round0", total=4, loss=1.0)
        bar.update(job, advance=1, loss=0.5)
        bar.advance(job, 3)
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("scoring grammar round0: 1/4 (25%), ") and lines[0].endswith("loss 0.50")
    assert "s left" in lines[0] and lines[-1].startswith("scoring grammar round0: 4/4 (100%)")
    assert len(lines) == 3  # two updates and the last line


def test_no_lines_before_the_interval_nor_when_disabled(monkeypatch):
    import sys

    from udr.util.progress import LineProgress, progress_bar

    stream = io.StringIO()
    with LineProgress(interval=3600, stream=stream) as bar:
        job = bar.add_task("embedding", total=10)
        bar.advance(job, 10)
    assert stream.getvalue() == ""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert not isinstance(progress_bar(False), LineProgress)


def test_the_cli_reports_progress_unless_turned_off(monkeypatch):
    from udr.cli.app import show_progress

    monkeypatch.delenv("UDR_PROGRESS_SECONDS", raising=False)
    assert show_progress()
    monkeypatch.setenv("UDR_PROGRESS_SECONDS", "off")
    assert not show_progress()
