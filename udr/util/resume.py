"""Resumable work: a hidden directory beside a stage's output holds what a run finished so far, and a
manifest of everything that work depends on. A run started again with the same inputs picks it up;
with other inputs it is discarded."""

from __future__ import annotations

import json
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
