"""MkDocs hooks: pages generated from the code at build time, so they cannot drift from it.

Markers in a page's Markdown are replaced before it is rendered:

- ``<!-- udr:parameters -->``: every parameter of :class:`udr.config.Settings` (type, bounds, default,
  description), one section per top-level key;
- ``<!-- udr:params-yaml -->``: the project's ``params.yaml`` with its comments;
- ``<!-- udr:cli -->``: every command of the ``udr`` Typer app with its usage, help and options;
- ``<!-- udr:include PATH [shift=N] -->``: a file of the repository (e.g. ``metrics/results.md``), its
  headings moved N levels down. A missing file fails the build.

``metrics/plots/shots.png``, ``metrics/feedback/curve.png`` and ``metrics/claims.png`` are copied into the site
under ``assets/``.
"""

from __future__ import annotations

import json
import re
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

MARKER = re.compile(r"<!--\s*udr:([a-z-]+)((?:\s+[^\s>]+)*)\s*-->")
IMAGES = {
    "assets/shots.png": "metrics/plots/shots.png",
    "assets/curve.png": "metrics/feedback/curve.png",
    "assets/claims.png": "metrics/claims.png",
}


def _root(config) -> Path:
    return Path(config.config_file_path).resolve().parent


# --- Markdown helpers -------------------------------------------------------------------------------------------


def _escape(text: str, cell: bool = False) -> str:
    """Text for Markdown: `<`, `>` and `*` escaped outside code spans (and `|` inside a table cell)."""
    parts = re.split(r"(`[^`]*`)", text)
    out = []
    for i, part in enumerate(parts):
        if i % 2:  # a code span
            out.append(part.replace("|", "&#124;") if cell else part)
            continue
        part = part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("*", r"\*")
        if cell:
            part = part.replace("|", r"\|")
        out.append(part)
    return "".join(out)


def _one_line(text: str) -> str:
    """Whitespace collapsed, Sphinx roles (:mod:`x`) reduced to their code span."""
    return re.sub(r":[a-z]+:(`[^`]*`)", r"\1", " ".join(text.split()))


# --- Parameters, from udr.config.Settings ------------------------------------------------------------------------


def _is_model(annotation: Any) -> bool:
    from pydantic import BaseModel

    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _key_name(annotation: Any) -> str:
    """What a mapping's keys name, from their annotation: a retriever method (a Literal of
    :data:`udr.config.METHODS`), a task name (str), else a key."""
    from udr.config import METHODS

    if get_origin(annotation) is Literal and set(get_args(annotation)) <= set(METHODS):
        return "method"
    return "task" if annotation is str else "key"


def _type_name(annotation: Any) -> str:
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if origin is list:
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        value = args[1] if len(args) == 2 else Any
        if _is_model(value):
            from udr.config import TaskCaps

            key = _key_name(args[0])
            keys = "task name" if key == "task" else key
            return f"mapping: {keys} → {'caps' if value is TaskCaps else 'settings'} (below)"
        return "mapping" if value is Any else f"mapping of {_type_name(args[0])} → {_type_name(value)}"
    if annotation is Any:
        return "any"
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))


def _bounds(field) -> str:
    symbols = {"gt": ">", "ge": "≥", "lt": "<", "le": "≤", "min_length": "length ≥", "max_length": "length ≤"}
    out = []
    for item in field.metadata:
        for attr, symbol in symbols.items():
            value = getattr(item, attr, None)
            if value is not None:
                out.append(f"{symbol} {value}")
    return ", ".join(out)


def _default(field) -> str:
    from pydantic_core import PydanticUndefined, to_jsonable_python

    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if _is_model(type(value)):
        return "(below)"
    return f"`{json.dumps(to_jsonable_python(value))}`"  # settings inside a container: their fields


def _rows(model, prefix: str) -> list[str]:
    rows = []
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        key = f"{prefix}.{name}" if prefix else name
        kind = _type_name(field.annotation)
        bounds = _bounds(field)
        if bounds:
            kind += f" ({bounds})"
        description = _one_line(field.description or "")
        rows.append(f"| `{key}` | {_escape(kind, True)} | {_default(field)} | {_escape(description, True)} |")
        annotation = field.annotation
        if _is_model(annotation):
            rows += _rows(annotation, key)
        elif get_origin(annotation) is dict and _is_model(get_args(annotation)[-1]):
            rows += _rows(get_args(annotation)[-1], f"{key}.<{_key_name(get_args(annotation)[0])}>")
    return rows


def parameters_markdown() -> str:
    """One section per top-level key of udr.config.Settings, each with a table of its parameters."""
    from udr.config import Settings

    header = ["| key | type | default | description |", "| --- | --- | --- | --- |"]
    out = []
    for name, field in Settings.model_fields.items():
        if field.exclude:
            continue
        out.append(f"## `{name}`\n")
        annotation = field.annotation
        if _is_model(annotation):
            doc = _one_line(annotation.__doc__ or "")
            if doc:
                out.append(_escape(doc) + "\n")
            rows = _rows(annotation, name)
        else:
            # A top-level value: its own row.
            single = type("Top", (), {"model_fields": {name: field}})
            rows = _rows(single, "")
        out.append("\n".join(header + rows) + "\n")
    return "\n".join(out)


def params_yaml_markdown(root: Path) -> str:
    text = (root / "params.yaml").read_text(encoding="utf-8")
    return f'```yaml title="params.yaml"\n{text.rstrip()}\n```\n'


# --- The command line, from the Typer app ------------------------------------------------------------------------


def _commands(command, path: list[str]):
    """(path, command) for the app and every command below it, groups before their subcommands."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        if not getattr(sub, "hidden", False):
            yield from _commands(sub, [*path, name])


def cli_commands() -> list[tuple[list[str], Any]]:
    import typer.main

    import udr.cli  # registers every command on the app

    return list(_commands(typer.main.get_command(udr.cli.app), ["udr"]))


def _help_paragraphs(text: str) -> str:
    paragraphs = [_one_line(p) for p in re.split(r"\n\s*\n", text or "") if p.strip()]
    return "\n\n".join(_escape(p.replace("\b", "").strip()) for p in paragraphs)


def cli_markdown() -> str:
    commands = cli_commands()
    context_class = type(commands[0][1]).context_class
    out = []
    for path, command in commands:
        level = "##" if len(path) <= 2 else "###"
        title = " ".join(path)
        out.append(f"{level} `{title}`\n")
        ctx = context_class(command, info_name=path[-1])
        usage = " ".join([title, *command.collect_usage_pieces(ctx)])
        if getattr(command, "commands", None):
            usage = f"{title} [OPTIONS] COMMAND [ARGS]..."
        out.append(f"```text\n{usage}\n```\n")
        help_text = _help_paragraphs(command.help or "")
        if help_text:
            out.append(help_text + "\n")
        rows = []
        for param in command.params:
            if getattr(param, "hidden", False):
                continue
            record = param.get_help_record(ctx)
            if record is None:
                continue
            names, description = record
            rows.append(f"| `{names}` | {_escape(_one_line(description or ''), True)} |")
        if rows:
            out.append("\n".join(["| argument / option | description |", "| --- | --- |", *rows]) + "\n")
        subcommands = [name for name in getattr(command, "commands", {})]
        if subcommands and len(path) > 1:
            out.append("Commands: " + ", ".join(f"`{title} {name}`" for name in subcommands) + ".\n")
    return "\n".join(out)


# --- Includes --------------------------------------------------------------------------------------------------


def include_markdown(root: Path, args: list[str], page: str) -> str:
    if not args:
        raise PluginError(f"{page}: udr:include needs a path")
    path = root / args[0]
    if not path.is_file():
        raise PluginError(f"{page}: udr:include: no file {args[0]}")
    shift = 0
    for arg in args[1:]:
        key, _, value = arg.partition("=")
        if key != "shift" or not value.isdigit():
            raise PluginError(f"{page}: udr:include: unknown argument {arg!r}")
        shift = int(value)
    text = path.read_text(encoding="utf-8")
    if shift:
        lines, fenced = [], False
        for line in text.splitlines():
            if line.startswith(("```", "~~~")):
                fenced = not fenced
            if not fenced and re.match(r"#{1,6} ", line):
                line = "#" * shift + line
            lines.append(line)
        text = "\n".join(lines)
    return text.rstrip() + "\n"


# --- MkDocs events ------------------------------------------------------------------------------------------------


def on_page_markdown(markdown: str, page, config, files) -> str:
    root = _root(config)
    name = page.file.src_uri

    def replace(match: re.Match) -> str:
        kind, args = match.group(1), match.group(2).split()
        if kind == "parameters":
            return parameters_markdown()
        if kind == "params-yaml":
            return params_yaml_markdown(root)
        if kind == "cli":
            return cli_markdown()
        if kind == "include":
            return include_markdown(root, args, name)
        raise PluginError(f"{name}: unknown marker udr:{kind}")

    return MARKER.sub(replace, markdown)


def on_files(files, config):
    root = _root(config)
    for dest, src in IMAGES.items():
        path = root / src
        if not path.is_file():
            raise PluginError(f"missing {src}: the image the page shows")
        files.append(File.generated(config, dest, abs_src_path=str(path)))
    return files
