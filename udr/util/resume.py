"""Resumable work: a hidden directory beside a stage's output holds what a run finished so far, and a
manifest of everything that work depends on. A run started again with the same inputs picks it up;
with other inputs it is discarded. A finished run's outputs are staged there too and moved out together
(:func:`publish`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from udr.util.files import json_text, remove, write_text_atomic

MANIFEST = "manifest.json"


def partial_dir(output: Path) -> Path:
    """Where the finished parts of `output` wait: `.<name>.partial` beside it."""
    return output.with_name(f".{output.stem}.partial")


def open_partial(partial: Path, fingerprint: dict) -> bool:
    """Keep `partial` if its manifest records exactly `fingerprint` (True: earlier work is reused);
    otherwise empty it and record the new fingerprint (False)."""
    manifest = partial / MANIFEST
    if manifest.is_file():
        try:
            if json.loads(manifest.read_text()) == json.loads(json.dumps(fingerprint)):
                return True
        except (ValueError, RecursionError):  # unreadable (not JSON, not UTF-8, nested too deep): start afresh
            pass
    remove(partial)
    partial.mkdir(parents=True)
    write_text_atomic(manifest, json_text(fingerprint, sort_keys=True))
    return False


PUBLISH = "publish.json"


def publish(partial: Path, staged: dict[str, Path]) -> None:
    """Move the finished files `staged` ({a file's name in `partial`: where it goes}) out of `partial`, then
    remove it. Their list is written first, so that a kill at any instant leaves the old outputs with the new
    ones still staged, which the next :func:`finish_publishing` moves out, or the new outputs: never a new
    file beside an old one it belongs with (a scores file and its manifest)."""
    where = {name: os.path.relpath(dest, partial) for name, dest in staged.items()}
    write_text_atomic(partial / PUBLISH, json_text(where))
    finish_publishing(partial)


def finish_publishing(partial: Path) -> bool:
    """Complete the :func:`publish` from `partial` that a kill interrupted, if any (True where there was one)."""
    log = partial / PUBLISH
    if not log.is_file():
        return False
    for name, dest in json.loads(log.read_text()).items():
        if (partial / name).is_file():
            os.replace(partial / name, partial / dest)
    remove(partial)
    return True
