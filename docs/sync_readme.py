"""Copy generated files into README.md, each between ``<!-- udr:copy PATH -->`` and ``<!-- /udr:copy -->``,
so that the README's results tables are the pipeline's files, never a hand copy. `make run` runs it after
`dvc repro`; ``--check`` exits 1 naming a stale copy (tests/test_docs.py runs it).

    python docs/sync_readme.py [--check]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(<!-- udr:copy (\S+) -->\n)(.*?)(<!-- /udr:copy -->)", re.S)


def synced(readme: str) -> str:
    """`readme` with every copy block holding its file's current text."""

    def fill(m: re.Match) -> str:
        path = ROOT / m.group(2)
        if not path.is_file():
            raise SystemExit(f"README.md: udr:copy names {m.group(2)}, which does not exist")
        return m.group(1) + path.read_text(encoding="utf-8").rstrip("\n") + "\n" + m.group(4)

    return BLOCK.sub(fill, readme)


def main(argv: list[str]) -> int:
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    new = synced(text)
    if "--check" in argv:
        stale = [m.group(2) for m in BLOCK.finditer(text) if m.group(0) not in new]
        if stale:
            print(f"README.md: stale copy of {', '.join(stale)}: run `python docs/sync_readme.py`", file=sys.stderr)
            return 1
        return 0
    if new != text:
        tmp = readme.with_suffix(".md.tmp")
        tmp.write_text(new, encoding="utf-8")
        tmp.replace(readme)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
