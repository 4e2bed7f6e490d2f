"""Tasks declared as data: the schema of a task declaration, and the registries built from them.

A declaration is a YAML mapping from task name to its fields (the built-in tasks' own file,
`udr/data/builtin_tasks.yaml`, is the reference for every field)::

    my_reviews:
      kind: classification             # classification | multiple_choice | generation
      family: sentiment                # for reports (default: the kind)
      instruction: "Sentiment of the review: "
      metric: macro_f1                 # default: accuracy (or macro_f1); generation: bleu, exact_match, rouge, sari
      template: "{input}\\t{answer}"    # how a demonstration is rendered (the default)
      data: {train: reviews.csv, test: reviews_test.csv}   # JSONL / CSV / TSV / parquet; no test: carved
      input: "{title}. {body}"          # a column, or a format over columns
      label: stars                      # the label column (classification, multiple choice)
      verbalizers: {"1": "It was terrible .", "5": "It was great ."}   # label -> its answer text

`data` is local files (relative to the declaring file), `{mirror: folder, train: split, test: split}`
(the offline mirror, data.source_dir), `{hub: org/name}` (online users) or `{builder: module:function}`
(only udr's own builders, `udr.data.tasks.BUILDERS`: nothing else is imported).
Multiple choice names the options' column (`choices: options`, a list per row) or columns
(`choices: [a, b]`) and a label column holding the right option's index; generation names the `target`
column (a string, or a list of references), optionally `references` (a list column that wins where
present), `keep_lines` (code) and `group_test_references`.

A project declares its own tasks in `data.tasks_dir` (every `*.yaml` there) or in the `tasks:` section
of params.yaml; :func:`project_registry` merges them with the built-in ones.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from udr.data.tasks import (
    DEFAULT_TEMPLATE,
    FORMAT_TEXT_MAX,
    KIND_METRICS,
    METRICS,
    BuiltinSource,
    Classification,
    CodeGeneration,
    FileSource,
    Generation,
    HubSource,
    MirrorSource,
    MultipleChoice,
    Source,
    Task,
    TaskKind,
    check_builder,
    format_fields,
)
from udr.errors import UdrError, check_text, quoted
from udr.util.files import shown_path
from udr.util.safe_yaml import load_yaml

BUILTIN_FILE = Path(__file__).with_name("builtin_tasks.yaml")
TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # a file name in data/ and models/: 64 at most
BLANK_INSTRUCTION = "blank: give the text UDR and the LM read before each input"
_COLUMN = re.compile(r"[^.\[\]{}!:]+")  # a column name a format field can name as it is
_DEFAULT_INPUT = {"classification": "{text}", "multiple_choice": "{question}", "generation": "{input}"}
# Fields that only one kind of task reads: declaring them for another kind is an error.
_KIND_FIELDS = {
    "verbalizers": ("classification",),
    "label": ("classification", "multiple_choice"),
    "choices": ("multiple_choice",),
    "target": ("generation",),
    "references": ("generation",),
    "keep_lines": ("generation",),
    "group_test_references": ("generation",),
}


def check_instruction(instruction, what: str = "instruction") -> None:
    """A one-line error unless `instruction` is None or a task instruction: a string of valid Unicode that is not
    blank (`what` names it in the message: the option or argument it came from)."""
    if instruction is None:
        return
    if not isinstance(instruction, str):
        raise UdrError(f"{what}: expected a string, got {type(instruction).__name__}")
    if not instruction.strip():
        raise UdrError(f"{what} {instruction!r} is {BLANK_INSTRUCTION}, or leave it out")
    check_text(instruction, what)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataDeclaration(_Strict):
    """Where a task's rows come from: local files (train, optional test), or one of mirror / hub / builder."""

    mirror: str | None = Field(None, description="A folder of the offline mirror (data.source_dir).")
    hub: str | None = Field(None, description="A Hugging Face dataset id (online users; `pip install datasets`).")
    builder: str | None = Field(None, description="`module:function` of this package returning the records.")
    train: str | None = Field(None, description="Files: the train file. Mirror / hub: the train split's name.")
    test: str | None = Field(
        None, description="Files: the test file. Mirror / hub: the test split's name. None: carved from train."
    )

    @field_validator("builder")
    @classmethod
    def _known_builder(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                check_builder(value)
            except UdrError as exc:
                raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _one_source(self) -> DataDeclaration:
        kinds = [k for k in ("mirror", "hub", "builder") if getattr(self, k)]
        if len(kinds) > 1:
            raise ValueError(f"give one of mirror, hub and builder, not {' and '.join(kinds)}")
        if not kinds and not self.train:
            raise ValueError("local files need a train file (data.train)")
        if self.builder and (self.train or self.test):
            raise ValueError("a builder makes both splits: no train or test with it")
        return self

    def source(self, base: Path) -> Source:
        """The task's source; relative file paths are relative to `base`."""
        if self.mirror:
            train, test = (self.train, self.test) if (self.train or self.test) else ("train", "test")
            return MirrorSource(self.mirror, train, test)
        if self.hub:
            return HubSource(self.hub, self.train or "train", self.test or "test")
        if self.builder:
            return BuiltinSource(self.builder)
        return FileSource(self.train, self.test, str(base))


class TaskDeclaration(_Strict):
    """One task as declared (the module docstring shows every field)."""

    kind: TaskKind
    instruction: str = Field(
        min_length=1,
        max_length=FORMAT_TEXT_MAX,
        description="What UDR reads before every demonstration (and query).",
    )
    data: DataDeclaration
    family: str = Field("", description="The task family, for reports (default: the kind).")
    metric: str | None = Field(
        None,
        description="classification, multiple choice: accuracy (default) or macro_f1; generation: bleu "
        "(default), exact_match, rouge or sari.",
    )
    template: str = Field(DEFAULT_TEMPLATE, description="A demonstration: {input} then {answer}.")
    input: str | None = Field(None, description="A column, or a format over columns ('{a} Question: {b}').")
    label: str = Field("label", description="The label column (classification: the raw label; choice: index).")
    verbalizers: dict[str, str] | None = Field(
        None, description="Raw label -> answer text; none: each label (read from train) answers as itself."
    )
    choices: str | list[str] = Field("choices", description="The options: a list column, or one column each.")
    target: str = Field("target", description="The answer column: a string, or a list of references.")
    references: str | None = Field(None, description="A list column of references that wins where present.")
    keep_lines: bool = Field(False, description="Keep the input's line structure (code), escaped to one line.")
    group_test_references: bool = Field(False, description="Merge test rows with equal input into one example.")

    @field_validator("instruction")
    @classmethod
    def _instruction_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError(BLANK_INSTRUCTION)
        return value

    @field_validator("verbalizers", mode="before")
    @classmethod
    def _label_keys(cls, value: Any) -> Any:
        # YAML reads `0: bad` with an integer key; labels are compared as text.
        return {str(k): v for k, v in value.items()} if isinstance(value, dict) else value

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, value: str | None) -> str | None:
        if value is not None and value not in METRICS:
            raise ValueError(f"unknown metric '{value}' (known: {', '.join(METRICS)})")
        return value

    @field_validator("template")
    @classmethod
    def _template(cls, value: str) -> str:
        fields = format_fields(value)
        if sorted(fields) != ["answer", "input"]:
            raise ValueError("the template must use {input} and {answer} and nothing else")
        if value.index("{input}") > value.index("{answer}"):
            raise ValueError("the template must put {input} before {answer}")
        return value

    @field_validator("input")
    @classmethod
    def _input(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value if "{" in value else "{" + value + "}"  # a bare column name
        fields = format_fields(value)
        if not fields:
            raise ValueError("the input must read at least one column")
        for field in fields:
            if not _COLUMN.fullmatch(field) or field.isdigit():
                raise ValueError(
                    f"column {field!r} cannot be read in a format ('.', '[', digits-only are Python format "
                    "syntax): rename the column"
                )
        return value

    @field_validator("choices")
    @classmethod
    def _choice_columns(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and len(value) < 2:
            raise ValueError("give at least 2 choice columns")
        return value

    @model_validator(mode="after")
    def _fields_of_kind(self) -> TaskDeclaration:
        if self.metric is not None and self.metric not in KIND_METRICS[self.kind]:
            raise ValueError(
                f"metric: {self.metric} cannot score a {self.kind} task (its metrics: "
                f"{', '.join(KIND_METRICS[self.kind])})"
            )
        for name, kinds in _KIND_FIELDS.items():
            if name in self.model_fields_set and self.kind not in kinds:
                raise ValueError(f"{name} is not a field of a {self.kind} task")
        if self.verbalizers is not None:
            texts = list(self.verbalizers.values())
            if len(texts) < 2:
                raise ValueError("verbalizers: give at least 2 labels")
            if any(not t.strip() for t in texts) or any(not k.strip() for k in self.verbalizers):
                raise ValueError("verbalizers: labels and their texts must not be empty")
            if len(set(texts)) < len(texts):
                raise ValueError("verbalizers: two labels have the same text")
        return self

    def build(self, name: str, base: Path, declared_in: str) -> Task:
        """The :class:`Task` this declares; relative data files are relative to `base`."""
        fmt = self.input or _DEFAULT_INPUT[self.kind]
        if self.kind == "classification":
            labels = tuple(self.verbalizers or ())
            normalize = Classification(labels, tuple((self.verbalizers or {}).values()), fmt, self.label)
        elif self.kind == "multiple_choice":
            choices = self.choices if isinstance(self.choices, str) else tuple(self.choices)
            normalize = MultipleChoice(fmt, choices, self.label)
        else:
            normalize = (CodeGeneration if self.keep_lines else Generation)(fmt, self.target, self.references)
        return Task(
            name=name,
            kind=self.kind,
            family=self.family or self.kind.replace("_", " "),
            instruction=self.instruction,
            metric=self.metric or ("bleu" if self.kind == "generation" else "accuracy"),
            normalize=normalize,
            source=self.data.source(base),
            template=self.template,
            group_test_references=self.group_test_references,
            declared_in=declared_in,
            declaration=self.model_dump(mode="json", exclude_unset=True),
        )


def _error(name: str, where: str, exc: ValidationError) -> UdrError:
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"])
    if first["type"] == "extra_forbidden":
        reason = "unknown field"
    elif first["type"] == "missing":
        reason = "required field is missing"
    else:
        reason = first["msg"].removeprefix("Value error, ")
    at = f"{field}: " if field else ""
    return UdrError(f"bad task declaration '{name}' ({where}): {at}{reason}")


def parse_declarations(raw: Any, base: Path, where: str) -> dict[str, Task]:
    """Tasks of one declaration mapping {name: fields}; `where` names it in errors."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise UdrError(f"bad task declarations ({where}): expected a mapping of task name to its fields")
    tasks = {}
    for name, fields in raw.items():
        if not isinstance(name, str) or not TASK_NAME.fullmatch(name):
            raise UdrError(
                f"bad task declaration ({where}): task name {quoted(name)} must be 1-64 letters, digits, "
                "'_', '.' or '-'"
            )
        if not isinstance(fields, Mapping):
            raise UdrError(f"bad task declaration '{name}' ({where}): expected a mapping of fields")
        try:
            declaration = TaskDeclaration.model_validate(dict(fields))
        except ValidationError as exc:
            raise _error(name, where, exc) from None
        tasks[name] = declaration.build(name, base, where)
    return tasks


def read_declarations(path: Path, where: str | None = None) -> dict[str, Task]:
    """Tasks declared in one YAML file (relative data paths: relative to the file's directory); `where`
    names the file in errors and listings (default: its path)."""
    try:
        raw = load_yaml(path.read_text(encoding="utf-8"), f"task declarations {path}")
    except UnicodeDecodeError:
        raise UdrError(f"task declarations {path} are not valid UTF-8") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise UdrError(f"task declarations {path}{f':{mark.line + 1}' if mark else ''} are not valid YAML") from None
    return parse_declarations(raw, path.parent.resolve(), where or str(path))


def merge(registries: list[dict[str, Task]]) -> dict[str, Task]:
    """One registry from several; a task declared twice is an error naming both places."""
    out: dict[str, Task] = {}
    for tasks in registries:
        for name, task in tasks.items():
            if name in out:
                raise UdrError(f"task '{name}' is declared twice: in {out[name].declared_in} and in {task.declared_in}")
            out[name] = task
    return out


@lru_cache(maxsize=1)
def builtin_registry() -> dict[str, Task]:
    """The tasks udr ships (`builtin_tasks.yaml`)."""
    raw = load_yaml(BUILTIN_FILE.read_text(encoding="utf-8"), str(BUILTIN_FILE))
    return parse_declarations(raw, BUILTIN_FILE.parent, "built-in")


def project_registry(tasks_dir: Path | None, inline: Any = None, inline_base: Path = Path(".")) -> dict[str, Task]:
    """The built-in tasks, the declarations in `tasks_dir` (every *.yaml / *.yml, in name order) and the
    inline ones (params.yaml's `tasks:` section, relative paths from `inline_base`)."""
    registries = [builtin_registry()]
    if tasks_dir is not None and tasks_dir.is_dir():
        files = sorted(p for p in tasks_dir.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
        registries += [read_declarations(p, shown_path(p, inline_base)) for p in files]
    registries.append(parse_declarations(inline, inline_base.resolve(), "params.yaml tasks"))
    return merge(registries)
