"""UDR demonstrations for DSPy programs (the `dspy` extra: `pip install 'udr[dspy]'`).

:class:`UDRFewShot` wraps a DSPy predictor (a `dspy.Predict`, a `dspy.ChainOfThought`, or any module with one
Predict that hands its call's keywords to it): each call retrieves the k demonstrations UDR finds for that
call's input, as `dspy.KNNFewShot` does with a symmetric embedder, but with UDR's query and demonstration
encoders, and passes them with the call (`demos=`), so calls from several threads (`dspy.Evaluate(num_threads=...)`)
or tasks (`acall`) each get their own::

    qa = UDRFewShot(dspy.ChainOfThought("question -> answer"), Retriever.load("models/final"), task="trec")
    qa(question="Who wrote the novel Dracula?")

The demonstrations come from the task's pool (inputs in `input_field`, answers in `output_field`, by
default `question` and `answer`: name your signature's fields otherwise), from an own pool the retriever serves
(`task=` the name `add_pool` gave it) or from your own `trainset` of `dspy.Example`s. The retrieval options are
`udr retrieve`'s: `diversity`, label-aware selection (`label_weight`, `label_votes`, `per_label`) and a metadata
`filter` ({column: value}: an own pool's extra columns, or a trainset example's other fields with a text,
number, boolean or null value; :mod:`udr.serving.filters`). `save("program.json")` / `load(...)` keep the
predictor's state and UDR's settings (the trainset's rows, k, the options, the fields, the model's path and
fingerprint, never its weights); `save(DIR, save_program=True)` pickles the program without the retriever, which
`dspy.load` loads again from its path.

Imports of pydantic and udr.serving.api are inside the functions that use them: the module loads with dspy
alone, and the retriever (torch) only when a module is made or loaded.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import os
from pathlib import Path
from typing import Literal

from udr.data.tasks import get_task

try:
    import dspy
except ImportError as exc:  # pragma: no cover - the message is the point
    from udr.errors import UdrError

    raise UdrError("the DSPy component needs dspy: pip install 'udr[dspy]'") from exc

from udr.errors import UdrError, is_collection
from udr.retriever.label_selection import DEFAULT_VOTES, LabelSelection
from udr.serving.filters import check_filter

STATE_KEY = "udr"  # UDRFewShot's own settings in the state `dump_state` writes beside the predictor's
# The attributes `load_state` sets from them.
_SETTINGS = (
    "task",
    "records",
    "instruction",
    "_pool",
    "k",
    "diversity",
    "labels",
    "filter",
    "input_field",
    "output_field",
)


def check_fields(predictor, input_field: str, output_field: str) -> None:
    """A one-line error where the predictor's signature lacks `input_field` among its inputs or
    `output_field` among its outputs (UDRFewShot's defaults are question / answer)."""
    signature = getattr(predictor, "signature", None)
    if signature is None:
        return
    for role, name, fields, option in (
        ("input", input_field, signature.input_fields, "input_field"),
        ("output", output_field, signature.output_fields, "output_field"),
    ):
        if name not in fields:
            raise UdrError(
                f"UDRFewShot: the predictor's signature has no {role} field '{name}' (its {role}s: "
                f"{', '.join(fields) or 'none'}): pass {option}= one of them"
            )


def demo_receiver(module) -> dspy.Predict:
    """The Predict that reads the demos a call of `module` passes (`demos=`): `module` itself, or the one
    Predict of a module whose forward hands its keywords on (a ChainOfThought); else a one-line error."""
    if isinstance(module, dspy.Predict):
        return module
    name = type(module).__name__
    if not isinstance(module, dspy.Module):
        raise UdrError(f"UDRFewShot wraps a DSPy module (dspy.Predict, dspy.ChainOfThought, ...): got a {name}")
    found = module.named_predictors()
    if len(found) != 1:
        names = ", ".join(n for n, _ in found) or "none"
        raise UdrError(
            f"UDRFewShot: {name} has {len(found)} Predict modules ({names}): wrap a module with one "
            "(dspy.Predict, dspy.ChainOfThought), or each Predict on its own"
        )
    params = inspect.signature(type(module).forward).parameters.values()
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        raise UdrError(
            f"UDRFewShot: {name}.forward takes no **kwargs to hand the call's demos= to its Predict "
            f"({found[0][0]}): wrap that Predict instead"
        )
    return found[0][1]


def _state_settings(raw) -> dict:
    """UDRFewShot's settings read back from a saved state's STATE_KEY entry, checked (one-line errors)."""
    from pydantic import BaseModel, ConfigDict, Field, ValidationError

    Value = str | int | float | bool | None  # a metadata value, as filters take them

    class Row(BaseModel):
        model_config = ConfigDict(extra="allow")  # the row's metadata
        __pydantic_extra__: dict[str, Value]
        input: str
        target: str

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        model: str
        fingerprint: str
        task: str | None
        trainset: list[Row] | None
        instruction: str | None
        k: int = Field(ge=1)
        diversity: float = Field(ge=0.0, le=1.0)
        label_weight: float = Field(default=0.0, ge=0.0)
        label_votes: int = Field(default=DEFAULT_VOTES, ge=1)
        per_label: int | Literal["balanced"] | None = None
        filter: dict[str, Value] = Field(default_factory=dict)
        input_field: str
        output_field: str

    if raw is None:
        raise UdrError(f"UDRFewShot.load: the state has no '{STATE_KEY}' entry: it was saved from another program")
    try:
        return Settings.model_validate(raw).model_dump()
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(map(str, error["loc"])) or STATE_KEY
        raise UdrError(f"UDRFewShot.load: bad '{STATE_KEY}' entry in the state ({where}: {error['msg']})") from None


class UDRFewShot(dspy.Module):
    """A predictor whose few-shot demos are retrieved by UDR for each call's input, most similar last.
    retriever: a :class:`udr.Retriever`, or the path of a model it loads (`Retriever.load`)."""

    def __init__(
        self,
        predictor,
        retriever,
        *,
        task: str | None = None,
        trainset: list | None = None,
        instruction: str | None = None,
        k: int = 4,
        input_field: str = "question",
        output_field: str = "answer",
        diversity: float = 0.0,
        label_weight: float = 0.0,
        label_votes: int = DEFAULT_VOTES,
        per_label: int | str | None = None,
        filter: dict | None = None,
    ):
        """label_weight, label_votes, per_label: label-aware selection, as `udr retrieve --label-weight
        --label-votes --per-label` (a classification task's pool, or a trainset, whose outputs are its labels).
        filter: demonstrations from the rows whose metadata have these values only, as `udr retrieve --where`
        (an own pool's extra columns; a trainset example's other fields)."""
        super().__init__()
        self.labels = LabelSelection(label_weight, label_votes, per_label)
        self.labels.check_with(diversity)
        self.filter = check_filter(filter)
        check_fields(demo_receiver(predictor), input_field, output_field)
        from udr.serving.api import Retriever

        if isinstance(retriever, (str, os.PathLike)):
            retriever = Retriever.load(retriever)
        elif not isinstance(retriever, Retriever):
            raise UdrError(f"UDRFewShot needs a udr.Retriever or a model's path, got a {type(retriever).__name__}")
        self.predictor, self.retriever = predictor, retriever
        self.k, self.diversity = k, diversity
        self.input_field, self.output_field = input_field, output_field
        if trainset is None and task is None:
            raise UdrError("UDRFewShot needs a task (its pool) or a trainset")
        self.task, self.records, self.instruction = task, None, instruction
        self._pool: str | None = None  # the retriever's name of the trainset's pool, once added
        if trainset is not None:
            self.records = self._records(trainset)
            if instruction is None and task is not None:
                instruction = get_task(task, retriever.registry).instruction
            if instruction is None:
                instruction = demo_receiver(predictor).signature.instructions
            self.instruction = instruction
        self._embed_pool()

    def _records(self, trainset) -> list[dict]:
        """The trainset's examples as own-pool records {input, target, its metadata: the example's other fields
        with a text, number, boolean or null value}; a one-line error for a bad example."""
        if not is_collection(trainset):
            raise UdrError(f"trainset: expected a list of dspy.Examples, got {type(trainset).__name__}")
        records = []
        fields = (self.input_field, self.output_field)
        for i, example in enumerate(trainset):
            if not isinstance(example, dspy.Example):
                raise UdrError(f"trainset example {i}: expected a dspy.Example, got {type(example).__name__}")
            values = {f: getattr(example, f, None) for f in fields}
            if not all(isinstance(v, str) and v.strip() for v in values.values()):
                raise UdrError(f"trainset example {i} needs non-empty '{self.input_field}' and '{self.output_field}'")
            items = example.items() if isinstance(example, dspy.Example) else ()
            meta = {f: v for f, v in items if f not in fields and isinstance(v, (str, int, float, bool, type(None)))}
            records.append({**meta, "input": values[self.input_field], "target": values[self.output_field]})
        return records

    def _pool_name(self) -> str:
        """The pool demonstrations come from: the task's, or the trainset's (added to the retriever once)."""
        if self.records is None:
            return self.task
        if self._pool is None:
            self._pool = self.retriever.add_pool(self.records, instruction=self.instruction, name=f"dspy-{id(self)}")
        return self._pool

    def _options(self) -> dict:
        """The retrieval options, as `Retriever.retrieve` takes them."""
        return {"diversity": self.diversity, "filter": self.filter, **self.labels.options}

    def _embed_pool(self) -> None:
        """Embed the pool now (add the trainset's) and check the options against it: errors and the cost come
        here, not in each thread's first call."""
        self.retriever.retrieve_batch([], task=self._pool_name(), k=self.k, **self._options())

    def demonstrations(self, query: str) -> list:
        """The k retrieved demonstrations for `query` as dspy.Examples, most similar last."""
        demos = self.retriever.retrieve(query, task=self._pool_name(), k=self.k, **self._options())
        return [
            dspy.Example(**{self.input_field: d.input, self.output_field: d.output}).with_inputs(self.input_field)
            for d in reversed(demos)
        ]

    def _query(self, kwargs: dict) -> str:
        if "demos" in kwargs:
            raise UdrError("UDRFewShot retrieves each call's demos: call it without demos=")
        if self.input_field not in kwargs:
            raise UdrError(f"UDRFewShot: the call has no '{self.input_field}' (it has {', '.join(kwargs)})")
        return kwargs[self.input_field]

    def forward(self, **kwargs):
        demos = self.demonstrations(self._query(kwargs))
        return self.predictor(**kwargs, demos=demos)

    async def aforward(self, **kwargs):
        demos = await asyncio.to_thread(self.demonstrations, self._query(kwargs))
        return await self.predictor.acall(**kwargs, demos=demos)

    # ------------------------------------------------------------ saving

    def dump_state(self, json_mode=True):
        """The predictor's state and, under STATE_KEY, UDR's settings (the model by path and fingerprint)."""
        settings = {
            "model": str(Path(self.retriever.model_dir).resolve()),
            "fingerprint": self.retriever.fingerprint,
            "task": self.task,
            "trainset": self.records,
            "instruction": self.instruction,
            "k": self.k,
            "diversity": self.diversity,
            **self.labels.options,
            "filter": self.filter,
            "input_field": self.input_field,
            "output_field": self.output_field,
        }
        return {**super().dump_state(json_mode=json_mode), STATE_KEY: settings}

    def load_state(self, state, *, allow_unsafe_lm_state=False):
        """Restore what :meth:`dump_state` wrote; a state saved with another model is a one-line error."""
        settings = _state_settings(state.get(STATE_KEY))
        if settings["fingerprint"] != self.retriever.fingerprint:
            raise UdrError(
                f"UDRFewShot.load: the state was saved with the model {settings['model']}, and this program's "
                f"retriever serves another ({self.retriever.model_dir}): build it with that model"
            )
        check_fields(demo_receiver(self.predictor), settings["input_field"], settings["output_field"])
        labels = LabelSelection(settings["label_weight"], settings["label_votes"], settings["per_label"])
        labels.check_with(settings["diversity"])
        kept = {name: self.__dict__[name] for name in _SETTINGS}
        try:  # UDR's settings first, checked against the pool; then the predictor's state
            self.task, self.records, self.instruction = settings["task"], settings["trainset"], settings["instruction"]
            self._pool = None  # the saved trainset (with its instruction) is added below
            self.k, self.diversity, self.labels = settings["k"], settings["diversity"], labels
            self.filter = settings["filter"]
            self.input_field, self.output_field = settings["input_field"], settings["output_field"]
            self._embed_pool()
            super().load_state(state, allow_unsafe_lm_state=allow_unsafe_lm_state)
        except BaseException:
            self.__dict__.update(kept)  # a state that fails leaves the module as it was,
            self._pool = None  # its trainset served again (the failed one may have replaced it under its name)
            self._embed_pool()
            raise
        return self

    def __getstate__(self):
        """Pickled (`save_program=True`) without the retriever: its model's path, project and cache instead."""
        state = super().__getstate__()
        retriever = state.pop("retriever")
        state["retriever_from"] = {
            "path": str(Path(retriever.model_dir).resolve()),
            "root": str(Path(retriever.root).resolve()),
            "cache_dir": None if retriever.cache_dir is None else str(retriever.cache_dir),
        }
        state["_pool"] = None
        return state

    def __setstate__(self, state):
        source = state.pop("retriever_from")
        super().__setstate__(state)
        from udr.serving.api import Retriever

        self.retriever = Retriever.load(source["path"], root=source["root"], cache_dir=source["cache_dir"])
        self._embed_pool()

    def __deepcopy__(self, memo):
        """A deep copy (DSPy's optimizers copy programs) that shares the retriever, whose weights stay put."""
        new = self.__class__.__new__(self.__class__)
        memo[id(self)] = new
        for name, value in self.__dict__.items():
            new.__dict__[name] = value if name == "retriever" else copy.deepcopy(value, memo)
        return new
