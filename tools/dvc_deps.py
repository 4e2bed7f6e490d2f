"""Write each dvc.yaml stage's `udr/` code dependencies from the imports of its command (`make deps`).

Usage:

    python tools/dvc_deps.py [--check] [--file dvc.yaml]

A stage whose command is `udr <command> ...` depends on the udr code that command runs: the CLI function
registered as `<command>` and the modules it imports, directly or through other udr modules (function-level
imports, and builders named by a "udr.module:function" string, included). Each used subpackage is listed
as a directory (`udr/<subpackage>`) where the command runs every module of it, else as the modules it runs
(`__init__.py` included) and the subpackage's data files; a top-level module as `udr/<module>.py`. The CLI
layer (udr/cli) and udr/__init__.py, which only re-exports, are left out.

Only the `udr/...` entries of each stage's `deps` list are rewritten, in place: they become one sorted block
where the first of them was (at the head of the list where there was none); every other line of the file
(comments, other deps, params, outs, anchors and aliases) is kept byte for byte. Stages that share one deps
list through a YAML anchor must run the same code. `--check` writes nothing: it prints the difference and
exits 1 when the file is not what this would write.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "udr"
DVC_YAML = ROOT / "dvc.yaml"
# The thin command layer and the package's lazy re-export are not stage code (see dvc.yaml's header).
NOT_STAGE_CODE = {"udr", "udr.cli"}
REFERENCE = re.compile(r"udr(\.\w+)+:\w+")
# A block-sequence item line: indentation and "- " before the scalar.
ITEM_PREFIX = re.compile(r" *- +")


class DepsError(Exception):
    """dvc.yaml cannot be rewritten as it is (the message says why)."""


# ------------------------------------------------------------------ the code a command runs


def module_file(name: str) -> Path | None:
    """The file of udr module `name` (a package's __init__.py), or None where there is none."""
    path = ROOT / Path(*name.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def udr_imports(node: ast.AST) -> set[str]:
    """Every udr module an AST imports (and the packages above them, which run first)."""
    found = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Import):
            found |= {a.name for a in n.names if a.name.split(".")[0] == "udr"}
        elif isinstance(n, ast.ImportFrom) and n.module and n.module.split(".")[0] == "udr":
            found.add(n.module)
            found |= {f"{n.module}.{a.name}" for a in n.names if module_file(f"{n.module}.{a.name}")}
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and REFERENCE.fullmatch(n.value):
            found.add(n.value.split(":")[0])  # a "udr.module:function" loaded by name (task builders)
    parts = {tuple(m.split(".")) for m in found}
    return {".".join(p[:i]) for p in parts for i in range(1, len(p) + 1)}


def closure(start: set[str]) -> set[str]:
    """`start` and every udr module they import, transitively (the CLI layer not followed)."""
    seen, todo = set(), list(start)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = None if name in NOT_STAGE_CODE else module_file(name)
        if path is not None:
            todo += udr_imports(ast.parse(path.read_text(encoding="utf-8")))
    return seen


def command_imports(command: str) -> set[str]:
    """The udr modules imported by the CLI function registered as `command`, plus the CLI's shared
    helpers (settings loading), which every command runs."""
    app = ast.parse((PKG / "cli" / "app.py").read_text(encoding="utf-8"))
    for path in sorted((PKG / "cli").glob("*.py")):
        for fn in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(fn, ast.FunctionDef) and any(
                isinstance(d, ast.Call) and d.args and getattr(d.args[0], "value", None) == command
                for d in fn.decorator_list
            ):
                return udr_imports(fn) | udr_imports(app)
    raise DepsError(f"no CLI command {command!r}")


def required_code_deps(command: str) -> set[str]:
    """The code a command's stage runs: `udr/<module>.py` for a top-level module, `udr/<subpackage>` where it
    runs every module of the subpackage, else the subpackage's modules it runs (`udr/<subpackage>/<module>.py`,
    `__init__.py` included) and its data files, so that a change elsewhere in the subpackage (an LM kernel,
    for the training stages) does not re-run it."""
    deps, used = set(), {}
    for name in closure(command_imports(command)):
        parts = name.split(".")
        if len(parts) < 2 or parts[1] == "cli":
            continue
        if (PKG / parts[1]).is_dir():
            used.setdefault(parts[1], set()).add(module_file(name))
        else:
            deps.add(f"udr/{parts[1]}.py")
    for package, files in used.items():
        folder = PKG / package
        if files >= set(folder.glob("*.py")):
            deps.add(f"udr/{package}")
            continue
        data = {f for f in folder.iterdir() if f.is_file() and f.suffix != ".py"}
        deps |= {f.relative_to(ROOT).as_posix() for f in files | data if f is not None}
    return deps


def stage_command(cmd) -> str | None:
    """The udr command a stage's `cmd` runs (`udr train --round 0` -> train), or None for another program."""
    words = cmd.split() if isinstance(cmd, str) else []
    return words[1] if len(words) > 1 and words[0] == "udr" else None


def is_code_dep(dep) -> bool:
    return isinstance(dep, str) and dep.startswith("udr/")


# ------------------------------------------------------------------ dvc.yaml, rewritten in place


def _get(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    return next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)


def _item_line(lines: list[str], item: yaml.Node, stage: str) -> tuple[int, str]:
    """The line of a one-line block-sequence item and what precedes its scalar (indentation and "- ")."""
    start, end = item.start_mark, item.end_mark
    line = lines[start.line] if start.line < len(lines) else ""
    prefix, rest = line[: start.column], line[end.column :] if end.line == start.line else ""
    if end.line != start.line or not ITEM_PREFIX.fullmatch(prefix) or rest.strip():
        raise DepsError(f"stage {stage!r}: write its deps as a block list, one entry a line ({line.strip()!r})")
    return start.line, prefix


def _ending(line: str) -> str:
    return line[len(line.rstrip("\r\n")) :] or "\n"


def generate(text: str) -> str:
    """`text` (a dvc.yaml) with every udr stage's `udr/` deps written from its command's imports."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    stages = _get(root, "stages")
    if not isinstance(stages, yaml.MappingNode):
        raise DepsError("dvc.yaml has no stages")
    lists: dict[int, tuple[yaml.SequenceNode, set[str], str]] = {}
    for key, stage in stages.value:
        body = _get(stage, "do") or stage
        cmd = _get(body, "cmd")
        command = stage_command(cmd.value if isinstance(cmd, yaml.ScalarNode) else None)
        if command is None:
            continue
        deps = _get(body, "deps")
        if not isinstance(deps, yaml.SequenceNode) or not deps.value:
            raise DepsError(f"stage {key.value!r} runs udr {command}: give it a deps list (its data, at least)")
        want = required_code_deps(command)
        node, other, first = lists.setdefault(id(deps), (deps, want, key.value))
        if other != want:
            raise DepsError(
                f"stages {first!r} and {key.value!r} share one deps list (a YAML anchor) but run different code"
            )
    lines = re.findall(r"[^\n]*\n|[^\n]+$", text)  # as YAML counts them (not splitlines' \f, \v, ...)
    # Bottom up, so that the lines of the lists still to rewrite do not move.
    for deps, want, stage in sorted(lists.values(), key=lambda entry: -entry[0].start_mark.line):
        code = [_item_line(lines, item, stage) for item in deps.value if is_code_dep(getattr(item, "value", None))]
        at, prefix = code[0] if code else _item_line(lines, deps.value[0], stage)
        ending = _ending(lines[at])
        for number, _ in reversed(code):
            del lines[number]
        lines[at:at] = [f"{prefix}{dep}{ending}" for dep in sorted(want)]
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the file would change")
    parser.add_argument("--file", type=Path, default=DVC_YAML, help="the dvc.yaml (default: the project's)")
    args = parser.parse_args(argv)
    text = args.file.read_text(encoding="utf-8")
    try:
        new = generate(text)
    except (DepsError, yaml.YAMLError) as exc:
        print(f"{args.file}: {exc}", file=sys.stderr)
        return 2
    if new == text:
        return 0
    if args.check:
        diff = difflib.unified_diff(text.splitlines(True), new.splitlines(True), str(args.file), "generated")
        sys.stdout.writelines(diff)
        print(f"{args.file}: its stages' udr/ deps differ from their commands' imports: run `make deps`")
        return 1
    args.file.write_text(new, encoding="utf-8")
    print(f"{args.file}: udr/ deps rewritten from the commands' imports")
    return 0


if __name__ == "__main__":
    sys.exit(main())
