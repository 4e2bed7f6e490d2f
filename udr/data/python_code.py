"""CodeXGLUE-style code summarisation examples from the installed Python stdlib.

Each example pairs a documented stdlib function's source (docstring removed)
with the first sentence of its docstring. Files are only parsed with ``ast``,
never imported, so building is safe and deterministic for a given Python
version and stdlib tree.
"""

from __future__ import annotations

import ast
import os
import re
import sysconfig
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path

# Size limits on the (docstring-free) function source used as model input.
MAX_INPUT_LINES = 40
MAX_INPUT_CHARS = 1500
# Word-count limits on the target sentence.
MIN_TARGET_WORDS = 3
MAX_TARGET_WORDS = 40

EXCLUDED_DIR_NAMES = frozenset(
    {
        "site-packages",
        "dist-packages",
        "test",
        "tests",
        "idle_test",
        "lib2to3",
        "idlelib",
        "turtledemo",
        "ensurepip",
        "__pycache__",
    }
)
EXCLUDED_DIR_PREFIXES = ("config-",)
# Relative (posix) directory paths excluded in addition to the names above.
EXCLUDED_REL_DIRS = frozenset({"venv/scripts"})

# A sentence ends at a period followed by whitespace or the end of the text.
_SENTENCE_END = re.compile(r"\.(?=\s|$)")
# "e.g." / "i.e." preceded by start-of-text or a non-letter.
_ABBREV_BEFORE = re.compile(r"(?:^|[^A-Za-z])(?:e\.g|i\.e)$", re.IGNORECASE)
# printf-style placeholders: "%(name)s", "%s", "%d", ...
_PERCENT_PLACEHOLDER = re.compile(r"%(?:\(|[-+ #0]*\d*(?:\.\d+)?[sdrifxXeEgGco])")


def default_stdlib_dir() -> Path:
    """Return the directory of the running interpreter's pure-Python stdlib."""
    return Path(sysconfig.get_paths()["stdlib"])


def _is_excluded_dir(name: str, rel_posix: str) -> bool:
    return name in EXCLUDED_DIR_NAMES or name.startswith(EXCLUDED_DIR_PREFIXES) or rel_posix in EXCLUDED_REL_DIRS


def _iter_source_files(root: Path) -> Iterator[tuple[Path, str]]:
    """Yield ``(path, module dotted path)`` for included ``.py`` files, sorted."""
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root)
        kept = []
        for d in sorted(dirnames):
            rel = (rel_dir / d).as_posix()
            if not _is_excluded_dir(d, rel):
                kept.append(d)
        dirnames[:] = kept  # prune in place; os.walk then descends in sorted order
        for fname in sorted(filenames):
            if not fname.endswith(".py") or fname.startswith("test_"):
                continue
            parts = list(rel_dir.parts)
            stem = fname[: -len(".py")]
            if stem != "__init__" or not parts:
                parts.append(stem)
            yield Path(dirpath) / fname, ".".join(parts)


def _read_and_parse(path: Path) -> tuple[list[str], ast.Module] | None:
    """Return (lines, tree), or None when the file is not UTF-8 or not parseable."""
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    # ast line numbers count "\n" only; str.splitlines() would also split on
    # form feeds etc. and misalign, so normalise line endings and split on "\n".
    source = source.replace("\r\n", "\n").replace("\r", "\n")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid-escape warnings etc.
            tree = ast.parse(source, filename=str(path))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return source.split("\n"), tree


def _iter_functions(node: ast.AST, prefix: str = "") -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]]:
    """Yield (function node, qualname) at module/class level, in source order.

    Descends through classes and compound statements (``if``/``try``/...),
    which still define module- or class-level functions, but never into
    function bodies.
    """
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield child, prefix + child.name
        elif isinstance(child, ast.ClassDef):
            yield from _iter_functions(child, prefix + child.name + ".")
        elif isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
            yield from _iter_functions(child, prefix)


def first_sentence(docstring: str) -> str | None:
    """Return the first sentence of a cleaned docstring, or None if it has none.

    The first paragraph (up to the first blank line) is whitespace-joined and
    cut after the first period followed by whitespace or end of text; the
    periods of ``e.g.`` and ``i.e.`` do not end a sentence.
    """
    para_lines = []
    for line in docstring.strip().split("\n"):
        if not line.strip():
            break
        para_lines.append(line)
    text = " ".join(" ".join(para_lines).split())
    for match in _SENTENCE_END.finditer(text):
        if _ABBREV_BEFORE.search(text[: match.start()]):
            continue
        return text[: match.end()]
    return None


def _is_valid_target(target: str) -> bool:
    n_words = len(target.split())
    return (
        MIN_TARGET_WORDS <= n_words <= MAX_TARGET_WORDS
        and target[0].isalpha()
        and not _PERCENT_PLACEHOLDER.search(target)
        and "->" not in target  # signature-style first lines, e.g. "D.get(k) -> v."
    )


def _function_input(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """Return the function's source without decorators and docstring, or None."""
    doc_stmt = node.body[0]
    if len(node.body) < 2:
        return None  # only the docstring: nothing to summarise
    # Docstring sharing a line with the signature or the next statement cannot
    # be cut out line-wise; such one-liners are rare, so skip them.
    if doc_stmt.lineno == node.lineno or node.body[1].lineno == doc_stmt.end_lineno:
        return None
    before = lines[node.lineno - 1 : doc_stmt.lineno - 1]
    after = lines[doc_stmt.end_lineno : node.end_lineno]
    while after and not after[0].strip():
        after.pop(0)  # blank line(s) that separated the docstring from the code
    text = textwrap.dedent("\n".join(before + after))
    if text[:1].isspace():
        # A multi-line string literal at column 0 defeats textwrap.dedent;
        # remove the def line's own indentation wherever it is present.
        indent = before[0][: len(before[0]) - len(before[0].lstrip())]
        text = "\n".join(line[len(indent) :] if line.startswith(indent) else line for line in text.split("\n"))
    return "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")


def _collect(stdlib_dir: Path | None) -> tuple[list[dict], int]:
    """Return (examples with a private ``docstring`` key, number of parsed files)."""
    root = Path(stdlib_dir) if stdlib_dir is not None else default_stdlib_dir()
    candidates: list[dict] = []
    n_files = 0
    for path, module in _iter_source_files(root):
        parsed = _read_and_parse(path)
        if parsed is None:
            continue
        n_files += 1
        lines, tree = parsed
        for node, qualname in _iter_functions(tree):
            docstring = ast.get_docstring(node, clean=True)
            if not docstring:
                continue
            target = first_sentence(docstring)
            if target is None or not _is_valid_target(target):
                continue
            source = _function_input(lines, node)
            if source is None or source.count("\n") + 1 > MAX_INPUT_LINES or len(source) > MAX_INPUT_CHARS:
                continue
            raw_doc = node.body[0].value.value  # type: ignore[attr-defined]
            head = raw_doc.strip()[:30]
            if head and head in source:
                continue  # docstring text repeated in the body would leak the target
            candidates.append(
                {
                    "input": source,
                    "target": target,
                    "name": f"{module}:{qualname}",
                    "docstring": raw_doc,
                }
            )

    candidates.sort(key=lambda ex: (ex["name"], ex["input"]))
    seen_names: set[str] = set()
    seen_inputs: set[str] = set()
    examples = []
    for ex in candidates:
        # Normalised-whitespace key also covers exact duplicates. Repeated names
        # come from conditional definitions (if/else, try/except) of one function.
        norm = " ".join(ex["input"].split())
        if ex["name"] in seen_names or norm in seen_inputs:
            continue
        seen_names.add(ex["name"])
        seen_inputs.add(norm)
        examples.append(ex)
    return examples, n_files


def build_python_code_examples(stdlib_dir: Path | None = None) -> list[dict]:
    """Build code-summarisation examples from the stdlib at ``stdlib_dir``.

    Returns ``{"input", "target", "name"}`` dicts sorted by (name, input), where
    ``input`` is a documented function's source with decorators and docstring
    removed, ``target`` is the docstring's first sentence and ``name`` is
    ``"<module dotted path>:<qualname>"``. Defaults to the running
    interpreter's stdlib; the result is deterministic for a given stdlib tree.
    """
    examples, _ = _collect(stdlib_dir)
    return [{"input": ex["input"], "target": ex["target"], "name": ex["name"]} for ex in examples]
