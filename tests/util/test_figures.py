"""udr.util.figures: a figure is written whole or not at all, and closed either way."""

from __future__ import annotations

import pytest

from udr.util.figures import pyplot, save_png


def test_a_figure_is_written_as_a_png_and_closed(tmp_path):
    plt = pyplot()
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    save_png(fig, tmp_path / "a" / "plot.png", dpi=50)
    assert (tmp_path / "a" / "plot.png").read_bytes().startswith(b"\x89PNG")
    assert not plt.fignum_exists(fig.number)


def test_a_failed_write_keeps_the_old_file_and_closes_the_figure(tmp_path):
    plt = pyplot()
    out = tmp_path / "plot.png"
    out.write_bytes(b"before")
    fig, _ = plt.subplots()
    with pytest.raises(ValueError):
        save_png(fig, out, dpi=-1)
    assert out.read_bytes() == b"before" and list(tmp_path.iterdir()) == [out]
    assert not plt.fignum_exists(fig.number)
