"""Imports inside functions are kept only where they serve a start time (the CLI's, a command's, `from udr
import Retriever`) or break a cycle, and each such module says so: one line of its docstring holds PHRASE
and names the third-party libraries it imports lazily. A standard-library module costs nothing to import at
the top, so one imported inside a function must be named in that line too (the line says why). And the
CLI's start loads none of the heavy libraries."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

PHRASE = "inside the functions that use them"
# Not loaded by `import udr.cli.app` (the `udr` command's start) today; torch alone takes seconds.
HEAVY = {"torch", "transformers", "polars", "matplotlib", "faiss", "datasets", "numpy", "pydantic", "yaml", "rich"}


def _checked() -> list[Path]:
    return sorted((REPO / "udr").rglob("*.py"))


def _function_imports(tree: ast.AST) -> set[str]:
    """The top-level names of the modules imported inside a function (nested ones included)."""
    found = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    found |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add(node.module.split(".")[0])
    return found


def _docstring(tree: ast.Module) -> str:
    return " ".join((ast.get_docstring(tree) or "").split())


def _names(doc: str, name: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}\b", doc) is not None


def test_a_module_importing_inside_functions_says_what_and_why():
    missing = []
    for path in _checked():
        tree = ast.parse(path.read_text())
        lazy = _function_imports(tree)
        if not lazy:
            continue
        doc, rel = _docstring(tree), path.relative_to(REPO).as_posix()
        if PHRASE not in doc:
            missing.append(f"{rel}: imports {sorted(lazy)} inside functions; its docstring lacks {PHRASE!r}")
            continue
        third_party = {n for n in lazy if n != "udr" and n not in sys.stdlib_module_names}
        unnamed = sorted(n for n in third_party if not _names(doc, n))
        if unnamed:
            missing.append(f"{rel}: its docstring does not name {unnamed}, imported inside functions")
    assert not missing, "\n".join(missing)


def test_no_standard_library_module_is_imported_inside_a_function_without_a_reason():
    lazy_stdlib = []
    for path in _checked():
        tree = ast.parse(path.read_text())
        doc = _docstring(tree)
        for name in sorted(n for n in _function_imports(tree) if n in sys.stdlib_module_names):
            if PHRASE not in doc or not _names(doc, name):
                lazy_stdlib.append(f"{path.relative_to(REPO).as_posix()}: {name} (import it at the top)")
    assert not lazy_stdlib, "\n".join(lazy_stdlib)


def test_the_cli_start_loads_no_heavy_library():
    code = f"import sys, udr.cli.app; print(sorted(set({sorted(HEAVY)!r}) & {{m.split('.')[0] for m in sys.modules}}))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
