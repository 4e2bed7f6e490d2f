"""Tasks: what a task's rows mean, how the LM sees them, how they are scored, where they come from.

A task says how a raw record becomes an :class:`Example` (a row normaliser over named columns), how
the LM sees it (instruction, prompt template, label verbalizers or choices), how it is scored (metric),
and where its data comes from (the offline mirror, local files, a builder in this package, or the hub).
Every task, built-in or a user's, is declared as data and built by :mod:`udr.data.declarations`.

Prompt convention (the published code's): a demonstration or query is rendered as
``template.format(input=..., answer=...)`` with ``template = "{input}\\t{answer}"``; demonstrations
are joined by newlines. For classification the answer is the label's verbalization ("It was great ."),
for multiple choice the chosen option's text, for generation the target text.

Imports of udr.data.declarations are inside the functions that use them: it imports this module (a cycle), and
pydantic.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from udr.errors import UdrError, listed, quoted, shorten

TaskKind = Literal["classification", "multiple_choice", "generation"]
TASK_KINDS: tuple[str, ...] = get_args(TaskKind)
METRICS: tuple[str, ...] = ("accuracy", "bleu", "exact_match", "macro_f1", "rouge", "sari")
"""The metrics a task can name (each implemented in :mod:`udr.evaluation.metrics`)."""
KIND_METRICS: dict[str, tuple[str, ...]] = {
    "classification": ("accuracy", "macro_f1"),
    "multiple_choice": ("accuracy", "macro_f1"),
    "generation": ("bleu", "exact_match", "rouge", "sari"),
}
"""The metrics that can score each kind of task (a label index, or a generated text)."""

DEFAULT_TEMPLATE = "{input}\t{answer}"


class RowError(ValueError):
    """A raw record does not have the shape its task expects (the reason is the message)."""


@dataclass(frozen=True)
class Example:
    """A normalised record. For classification `choices` are the task's verbalizers."""

    input: str
    target: str
    label: int  # index into choices; -1 for generation
    choices: tuple[str, ...]
    references: tuple[str, ...]


# ---------------------------------------------------------------- data sources


@dataclass(frozen=True)
class MirrorSource:
    """JSON-lines files in `<data dir>/<folder>/<split>.jsonl`.

    `train`/`test` name the file used for each split; where one is None, both splits are carved
    by a seeded split from the other file.
    """

    folder: str
    train: str | None
    test: str | None

    def describe(self) -> str:
        if self.train and self.test:
            return f"mirror:{self.folder} (train={self.train}, test={self.test})"
        return f"mirror:{self.folder} (seeded split of {self.train or self.test})"


@dataclass(frozen=True)
class FileSource:
    """A user's own files (JSON lines, CSV, TSV or parquet, by suffix), as declared: relative to `base`
    (the declaring file's directory) unless absolute. Without a test file both splits are carved by a
    seeded split from the train file."""

    train: str
    test: str | None = None
    base: str = "."

    def path(self, name: str) -> Path:
        """The file `name` (self.train or self.test) on this machine."""
        path = Path(name)
        return path if path.is_absolute() else Path(self.base) / path

    def describe(self) -> str:
        if self.test:
            return f"files:{self.train} (test={self.test})"
        return f"files:{self.train} (seeded split)"


# The record builders a declaration may name (`data: {builder: ...}`): udr's own, nothing else is imported.
BUILDERS = ("udr.data.python_code:build_python_code_examples",)


def check_builder(builder: str) -> str:
    """A one-line error unless `builder` is one of udr's own registered builders."""
    if builder not in BUILDERS:
        raise UdrError(
            f"unknown builder {quoted(builder)}: only udr's own builders may be named ({', '.join(BUILDERS)})"
        )
    return builder


@dataclass(frozen=True)
class BuiltinSource:
    """Records built by a function of this package (no files needed); always carved by a seeded split."""

    builder: str  # one of BUILDERS: "module:function" returning list[dict] (checked before it is called)

    def describe(self) -> str:
        return f"builtin:{self.builder}"


@dataclass(frozen=True)
class HubSource:
    """The upstream dataset on the Hugging Face hub (users who are online)."""

    hub_id: str
    train: str = "train"
    test: str = "test"

    def describe(self) -> str:
        return f"hub:{self.hub_id}"


Source = MirrorSource | FileSource | BuiltinSource | HubSource


# ---------------------------------------------------------------- row normalisers


# Characters of fixed text a format (a template, an input format) or an instruction may add to every
# text it renders: far above any real one, so that a crafted declaration cannot blow a prompt up.
FORMAT_TEXT_MAX = 1000


def format_fields(fmt: str) -> tuple[str, ...]:
    """The column names a format string reads ("{text_a} Question: {text_b}" -> text_a, text_b). Only
    plain `{name}` fields, each once, and at most FORMAT_TEXT_MAX characters of fixed text: a format spec
    or conversion (`{input:>300000000}`, `{input!r}`) or a field repeated any number of times could make a
    text of any length from a short one, and is refused."""
    try:
        parsed = list(string.Formatter().parse(fmt))
    except ValueError as exc:
        raise ValueError(f"bad format {quoted(fmt)}: {exc}") from None
    parts = [(f, spec, conv) for _, f, spec, conv in parsed if f is not None]
    for name, spec, conversion in parts:
        if spec or conversion:
            raise ValueError(
                f"bad format {quoted(fmt)}: field {{{shorten(name, 40)}}} has a format spec or conversion; "
                "write plain {name} fields"
            )
    names = [f for f, _, _ in parts]
    repeated = next((f for f in names if names.count(f) > 1), None)
    if repeated is not None:
        raise ValueError(f"bad format {quoted(fmt)}: field {{{shorten(repeated, 40)}}} appears more than once")
    if sum(len(literal) for literal, *_ in parsed) > FORMAT_TEXT_MAX:
        raise ValueError(f"bad format {quoted(fmt)}: more than {FORMAT_TEXT_MAX} characters of fixed text")
    return tuple(names)


_CHOICE = re.compile(r"choice\d+")


def _row_fields(fmt: str) -> tuple[str, ...]:
    """The columns a multiple-choice input format reads ({choiceN} are the row's options, not columns)."""
    return tuple(f for f in format_fields(fmt) if not _CHOICE.fullmatch(f))


def _text(row: dict, key: str) -> str:
    if key not in row:
        raise RowError(f"missing field '{key}'")
    value = row[key]
    if value is None:  # an empty CSV cell, or JSON null
        raise RowError(f"field '{key}' is empty")
    if not isinstance(value, str):
        raise RowError(f"field '{key}' must be a string, got {type(value).__name__}")
    value = " ".join(value.split())
    if not value:
        raise RowError(f"field '{key}' is empty")
    return value


def _label_key(value) -> str:
    """A raw label as the string its verbalizer set is keyed by (1 and "1" alike)."""
    return str(value).strip()


@dataclass(frozen=True)
class Classification:
    """Text(s) -> one of a fixed label set. `labels[i]` (raw) is verbalised as `verbalizers[i]`.

    With no label set (`labels` empty) each row keeps its raw label, verbalised as itself, and the
    set is read from the train split after loading (:func:`udr.data.sources.load_task`)."""

    labels: tuple[str, ...]
    verbalizers: tuple[str, ...]
    input_format: str = "{text}"
    label_field: str = "label"

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        """(declaration field, column) of every column a row must have."""
        return (*(("input", f) for f in format_fields(self.input_format)), ("label", self.label_field))

    def __call__(self, row: dict) -> Example:
        fields = {k: _text(row, k) for k in format_fields(self.input_format)}
        if self.label_field not in row:
            raise RowError(f"missing field '{self.label_field}'")
        raw = row[self.label_field]
        if raw is None:
            raise RowError(f"field '{self.label_field}' is empty")
        if isinstance(raw, (list, dict)):
            raise RowError(f"field '{self.label_field}' must be one value, got a {type(raw).__name__}")
        if not self.labels:
            key = _label_key(raw)
            if not key:
                raise RowError(f"field '{self.label_field}' is empty")
            return Example(self.input_format.format(**fields), key, -1, (), (key,))
        if _label_key(raw) not in self.labels:
            raise RowError(
                f"field '{self.label_field}': unknown label {raw!r} (expected one of {', '.join(self.labels)})"
            )
        label = self.labels.index(_label_key(raw))
        return Example(
            input=self.input_format.format(**fields),
            target=self.verbalizers[label],
            label=label,
            choices=self.verbalizers,
            references=(self.verbalizers[label],),
        )


@dataclass(frozen=True)
class MultipleChoice:
    """A question with per-row options; the label field holds the index of the right one.

    The options are one list-valued column (`choices_field` a string) or one column each (a tuple).
    The input format may read them as {choice0}, {choice1}, ..."""

    input_format: str = "{question}"
    choices_field: str | tuple[str, ...] = "choices"
    label_field: str = "label"

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        """(declaration field, column) of every column a row must have."""
        own = (self.choices_field,) if isinstance(self.choices_field, str) else self.choices_field
        return (
            *(("input", f) for f in _row_fields(self.input_format)),
            *(("choices", c) for c in own),
            ("label", self.label_field),
        )

    def _choices(self, row: dict) -> tuple[str, ...]:
        if isinstance(self.choices_field, str):
            choices = row.get(self.choices_field)
            if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
                raise RowError(f"field '{self.choices_field}' must be a list of at least 2 strings")
            return tuple(" ".join(c.split()) for c in choices)
        return tuple(_text(row, f) for f in self.choices_field)

    def __call__(self, row: dict) -> Example:
        choices = self._choices(row)
        label = row.get(self.label_field)
        if isinstance(label, str) and label.strip().isdigit():  # CSV columns are text
            label = int(label)
        if not isinstance(label, int) or isinstance(label, bool) or not 0 <= label < len(choices):
            raise RowError(f"field '{self.label_field}' must be an integer index into the choices, got {label!r}")
        values = {k: _text(row, k) for k in _row_fields(self.input_format)}
        values.update({f"choice{i}": c for i, c in enumerate(choices)})
        return Example(
            input=self.input_format.format(**values),
            target=choices[label],
            label=label,
            choices=choices,
            references=(choices[label],),
        )


@dataclass(frozen=True)
class Generation:
    """Input -> free text. The target column holds one reference (a string) or several (a list); where
    `references_field` is set and present in a row, its list of references wins."""

    input_format: str = "{input}"
    target_field: str = "target"
    references_field: str | None = None

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        """(declaration field, column) of every column a row must have (the target column may be
        replaced by the references column)."""
        target = () if self.references_field else (("target", self.target_field),)
        return (*(("input", f) for f in format_fields(self.input_format)), *target)

    def _references(self, row: dict) -> tuple[str, ...]:
        key = self.references_field if self.references_field and self.references_field in row else None
        key = key or (self.target_field if isinstance(row.get(self.target_field), list) else None)
        if key is None:
            return (_text(row, self.target_field),)
        refs = row[key]
        # A null or blank entry in a list of references is a missing reference (DART's test split has
        # such rows): the others stand; a row with none left, or with other values, is malformed.
        valid = isinstance(refs, list) and all(r is None or isinstance(r, str) for r in refs)
        refs = [" ".join(r.split()) for r in refs if r is not None and r.strip()] if valid else []
        if not refs:
            raise RowError(f"field '{key}' must be a non-empty list of non-empty strings")
        return tuple(refs)

    def _input(self, row: dict) -> str:
        return self.input_format.format(**{k: _text(row, k) for k in format_fields(self.input_format)})

    def __call__(self, row: dict) -> Example:
        source = self._input(row)
        refs = self._references(row)
        return Example(input=source, target=refs[0], label=-1, choices=(), references=refs)


@dataclass(frozen=True)
class CodeGeneration(Generation):
    """Like :class:`Generation` but keeps the input's line structure (code), escaped to one line.

    Prompts put one demonstration per line, so newlines in code are written as the two characters
    backslash-n (as CodeXGLUE's flattened code does) and indentation survives.
    """

    def _input(self, row: dict) -> str:
        values = {}
        for key in format_fields(self.input_format):
            code = row.get(key)
            if not isinstance(code, str) or not code.strip():
                raise RowError(f"field '{key}' must be a non-empty string")
            values[key] = one_line_code(code)
        return self.input_format.format(**values)


def one_line_code(code: str) -> str:
    """Code as one prompt line: backslashes doubled, tabs as 4 spaces, newlines as the two characters \\n."""
    return code.strip("\n").replace("\\", "\\\\").replace("\t", "    ").replace("\n", "\\n")


# ---------------------------------------------------------------- the task


@dataclass(frozen=True)
class Task:
    """A task: how its rows become examples, how the LM sees them, how they are scored, where they come from.

    kind: how the LM answers (a label of a fixed set, one of the row's choices, or free text);
    family: the paper's task family ("sentiment", "semantic parsing", ...), for reports only.
    The template renders a demonstration and the query (see :meth:`render`, :meth:`render_query`).
    Tasks are declared as data (:mod:`udr.data.declarations`), the built-in ones included.
    """

    name: str
    kind: TaskKind
    family: str
    instruction: str
    metric: str
    normalize: Callable[[dict], Example]
    source: Source
    template: str = DEFAULT_TEMPLATE
    # Test rows with identical input are merged into one multi-reference example (E2E style data).
    group_test_references: bool = False
    # Where the task was declared (the built-in declarations, a file of the project, params.yaml).
    declared_in: str = "built-in"
    # The declaration's fields as written (JSON types): what a model folder stores to serve the task
    # without its project (`udr index`).
    declaration: Mapping | None = field(default=None, compare=False, repr=False)

    @property
    def generation(self) -> bool:
        """Whether the answer is free text (scored and predicted token by token)."""
        return self.kind == "generation"

    def render(self, input: str, answer: str) -> str:
        """One demonstration (input and answer) as the LM and the demonstration encoder E_d read it."""
        return self.template.format(input=input, answer=answer)

    def clean_query(self, text: str) -> str:
        """A user's query written as the pool's inputs are: one line, code escaped as the pool's is,
        other whitespace collapsed (so a query cannot add lines, e.g. fake demonstrations, to a prompt); in
        code, a carriage return is escaped as a newline is (\\r)."""
        if isinstance(self.normalize, CodeGeneration):
            return one_line_code(text).replace("\r", "\\r")
        return " ".join(text.split())

    def render_query(self, input: str) -> str:
        """The query as it ends a prompt: the template up to where the answer goes."""
        head, _, _ = self.template.partition("{answer}")
        return head.format(input=input)


# ---------------------------------------------------------------- the registry


def builtin_tasks() -> dict[str, Task]:
    """The tasks udr ships, declared in `udr/data/builtin_tasks.yaml` (read once)."""
    from udr.data.declarations import builtin_registry

    return builtin_registry()


def get_task(name: str, registry: Mapping[str, Task] | None = None) -> Task:
    """Task `name` of `registry` (default: the built-in tasks), or a one-line UdrError listing the known
    ones. A project's registry (its own declared tasks too) is `Settings.registry`."""
    tasks = builtin_tasks() if registry is None else registry
    try:
        return tasks[name]
    except KeyError:
        raise UdrError(f"unknown task {quoted(name)}; known tasks: {listed(sorted(tasks), 40)}") from None


def all_tasks(registry: Mapping[str, Task] | None = None) -> list[Task]:
    """Every task of `registry` (default: the built-in tasks)."""
    return list((builtin_tasks() if registry is None else registry).values())
