"""A LangChain example selector backed by UDR (the `langchain` extra: `pip install 'udr[langchain]'`).

    selector = UDRExampleSelector(Retriever.load("models/final"), task="sst2", k=4)
    prompt = selector.prompt_template()  # a FewShotPromptTemplate

gives the prompt `udr retrieve --prompt` gives: the demonstrations rendered with the task's template, the
most similar right before the query, the query written as the pool's inputs are (one line), the
demonstrations retrieved for the query as given (as `udr retrieve` retrieves them). Examples are
dicts {input_key: ..., output_key: ...}; with `task` naming a pool the retriever serves (a project task, or
the name `add_pool` gave your own pool) they come from it. Your own pool, a file or a list of rows as
`udr retrieve --pool` reads them, goes in `pool=` with its `instruction=` (and `input_column=` /
`target_column=` where its columns have other names)::

    selector = UDRExampleSelector(retriever, pool="cards.csv", instruction="Intent: ", input_column="text",
                                  target_column="intent")

`add_example` (or `examples=`) adds your own examples to `pool=`'s, or serves them instead of the task's pool.
`filter=` ({column: value}, an AND) selects among the rows whose metadata (an own pool's columns beyond its input
and target; an added example's keys beyond input_key and output_key) match, before the ranking, as
`udr retrieve --where` does (:mod:`udr.serving.filters`).

Imports of udr.serving.pools and udr.serving.filters are inside the functions that use them (an own pool's
reading, a filter's check).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from udr.data.tasks import DEFAULT_TEMPLATE

try:
    from langchain_core.example_selectors import BaseExampleSelector
    from langchain_core.prompts import FewShotPromptTemplate, PromptTemplate
except ImportError as exc:  # pragma: no cover - the message is the point
    from udr.errors import UdrError

    raise UdrError("the LangChain selector needs langchain-core: pip install 'udr[langchain]'") from exc

from udr.errors import UdrError, quoted
from udr.retriever.label_selection import DEFAULT_VOTES, LabelSelection


class _BracesKept(PromptTemplate):
    """A PromptTemplate whose formatted text is escaped for one more f-string formatting."""

    def format(self, **kwargs: Any) -> str:
        return super().format(**kwargs).replace("{", "{{").replace("}", "}}")


_RAW_QUERY = "__udr_raw_query"  # the query as given, beside its cleaned form (no template reads it)


class _QueryCleaned(FewShotPromptTemplate):
    """A FewShotPromptTemplate over a :class:`UDRExampleSelector` that does what `udr retrieve --prompt`
    does: the selector retrieves for the query as given, and the prompt writes it cleaned
    (:meth:`UDRExampleSelector.clean_query`: one line)."""

    def _cleaned(self, kwargs: dict) -> dict:
        key = self.example_selector.input_key
        query = kwargs.get(key)
        if not isinstance(query, str):
            return kwargs
        return {**kwargs, key: self.example_selector.clean_query(query), _RAW_QUERY: query}

    def _selected_for(self, kwargs: dict) -> dict:
        """The selector's input: the query as given (retrieval reads it whole, as `udr retrieve` does)."""
        if _RAW_QUERY not in kwargs:
            return kwargs
        raw = {k: v for k, v in kwargs.items() if k != _RAW_QUERY}
        return {**raw, self.example_selector.input_key: kwargs[_RAW_QUERY]}

    def format(self, **kwargs: Any) -> str:
        return super().format(**self._cleaned(kwargs))

    async def aformat(self, **kwargs: Any) -> str:
        return await super().aformat(**self._cleaned(kwargs))

    def _get_examples(self, **kwargs: Any) -> list[dict[str, Any]]:
        return super()._get_examples(**self._selected_for(kwargs))

    async def _aget_examples(self, **kwargs: Any) -> list[dict[str, Any]]:
        return await super()._aget_examples(**self._selected_for(kwargs))


class UDRExampleSelector(BaseExampleSelector):
    """Select the k demonstrations UDR retrieves for a prompt's input, most similar last (the order
    UDR's prompts use; `ascending=False` gives most similar first). diversity: maximal marginal
    relevance, as `udr retrieve --diversity`; label_weight / label_votes / per_label: label-aware selection."""

    def __init__(
        self,
        retriever,
        *,
        task: str | None = None,
        pool: list[dict] | Path | str | None = None,
        examples: list[dict] | None = None,
        instruction: str | None = None,
        input_column: str | None = None,
        target_column: str | None = None,
        k: int = 4,
        diversity: float = 0.0,
        label_weight: float = 0.0,
        label_votes: int = DEFAULT_VOTES,
        per_label: int | str | None = None,
        filter: dict | None = None,
        input_key: str = "input",
        output_key: str = "output",
        ascending: bool = True,
    ):
        """pool: your own demonstrations, a file (.jsonl, .csv, .tsv, .parquet) or a list of rows, read as
        `udr retrieve --pool` reads them: in the shape of `task` where named (its template and, by default,
        its instruction), else `{"input", "target"}` (or `input_column` / `target_column`) with `instruction`.
        label_weight, label_votes, per_label: label-aware selection, as `udr retrieve --label-weight --label-votes
        --per-label` (a classification task's pool, or your own examples, whose outputs are their labels).
        filter: select among the rows whose metadata have these values only (see the module docstring)."""
        from udr.serving.api import Retriever, check_k_from_one
        from udr.serving.filters import check_filter

        if not isinstance(retriever, Retriever):
            raise UdrError(
                f"UDRExampleSelector needs a udr.Retriever (Retriever.load(...)), got a {type(retriever).__name__}"
            )
        check_k_from_one(k, "examples")
        self.labels = LabelSelection(label_weight, label_votes, per_label)
        self.labels.check_with(diversity)
        self.retriever, self.k, self.diversity, self.ascending = retriever, k, diversity, ascending
        self.filter = check_filter(filter)
        for option, key in (("input_key", input_key), ("output_key", output_key)):
            if not isinstance(key, str) or not key.isidentifier():
                raise UdrError(f"{option}: expected a prompt variable's name (a Python identifier), got {quoted(key)}")
        if input_key == output_key:
            raise UdrError(f"input_key and output_key are both {input_key!r}: the input and the answer need two names")
        self.input_key, self.output_key = input_key, output_key
        self.task = task
        self.instruction = instruction
        self._own: list[dict] = []
        self._uses_own = examples is not None or pool is not None or task is None  # else the task's pool
        self._pool: str | None = None  # the retriever's pool of `_own`, once added (None: not yet, or stale)
        if isinstance(pool, (str, Path)):  # a mistyped path is the first error
            from udr.serving.pools import checked_pool_file

            checked_pool_file(pool)
        if task is None and instruction is None:
            raise UdrError(
                "UDRExampleSelector needs a task (its pool and instruction) or the instruction of your pool= or "
                "examples="
            )
        if pool is not None:
            self._own.extend(self._read_pool(pool, input_column, target_column))
        elif input_column is not None or target_column is not None:
            raise UdrError("input_column / target_column name the columns of pool=: give the pool too")
        for example in examples or ():
            self.add_example(example)
        if not self._uses_own:  # k beyond the pool, or a pool without labels, is refused here, not at first use
            self.retriever.retrieve_batch([], task=task, k=k, filter=self.filter, **self.labels.options)

    def _read_pool(self, pool, input_column: str | None, target_column: str | None) -> list[dict]:
        """`pool=`'s rows as own records {input, target, its metadata}, read as `udr retrieve --pool` reads them."""
        from udr.serving.pools import Columns, file_pool, own_task, records_pool

        registry = self.retriever.registry if self.task is not None else None
        spec = own_task(self.instruction, like=self.task, registry=registry)
        columns = Columns(input_column, target_column)
        if isinstance(pool, (str, Path)):
            read = file_pool(Path(pool), spec, columns)
        elif isinstance(pool, dict) or not hasattr(pool, "__iter__"):
            raise UdrError(f"pool=: expected a file or a list of rows, got a {type(pool).__name__}")
        else:
            read = records_pool(pool, spec, where="pool=", columns=columns)
        return [{**meta, "input": x, "target": y} for x, y, meta in zip(read.inputs, read.outputs, read.metadata)]

    def _spec(self):
        """The task whose template and instruction render the examples (None: no task named): a pool the
        retriever serves under that name (your own, from `add_pool`), else the registry's task."""
        return None if self.task is None else self.retriever.pool_task(self.task)

    def _template(self) -> str:
        """The task's template with LangChain's variables in place of {input} and {answer}."""
        spec = self._spec()
        template = DEFAULT_TEMPLATE if spec is None else spec.template
        return template.replace("{input}", "{" + self.input_key + "}").replace("{answer}", "{" + self.output_key + "}")

    @property
    def example_prompt(self) -> PromptTemplate:
        """A PromptTemplate rendering one example with the task's template, one per line. Its output has
        its braces doubled: `FewShotPromptTemplate` formats the joined examples and suffix once more,
        which turns them back, so text with braces (code, JSON, the user's own) passes through unchanged."""
        return _BracesKept.from_template(self._template() + "\n")

    @property
    def suffix(self) -> str:
        """The query as it ends the prompt (the task's template up to the answer)."""
        return self._template().partition("{" + self.output_key + "}")[0]

    def clean_query(self, query: str) -> str:
        """`query` as the task writes a user's query into a prompt (one line; see `Task.clean_query`)."""
        spec = self._spec()
        return spec.clean_query(query) if spec is not None else " ".join(query.split())

    def prompt_template(self, **kwargs: Any) -> FewShotPromptTemplate:
        """The `FewShotPromptTemplate` that gives `udr retrieve --prompt`'s prompt: the examples this
        selector chooses, then the query, cleaned as :meth:`clean_query` does (a query with line breaks or
        tabs cannot add lines, e.g. fake demonstrations). `kwargs` go to the template (e.g. a `prefix`)."""
        return _QueryCleaned(
            example_selector=self,
            example_prompt=self.example_prompt,
            suffix=self.suffix,
            input_variables=[self.input_key],
            example_separator="",
            **kwargs,
        )

    def add_example(self, example: dict[str, str]) -> Any:
        """Serve `example` ({input_key, output_key}, its other keys its metadata) too: with `pool=`'s rows, or
        instead of the task's pool."""
        if not isinstance(example, Mapping):
            raise UdrError(
                f"example: expected a dict {{{self.input_key!r}: ..., {self.output_key!r}: ...}}, got {quoted(example)}"
            )
        for key in (self.input_key, self.output_key):
            if not isinstance(example.get(key), str) or not example[key].strip():
                raise UdrError(f"example needs a non-empty string '{key}': got {example!r}")
        meta = {k: v for k, v in example.items() if k not in (self.input_key, self.output_key)}
        self._own.append({**meta, "input": example[self.input_key], "target": example[self.output_key]})
        self._uses_own, self._pool = True, None

    def select_examples(self, input_variables: dict[str, str]) -> list[dict]:
        """The k examples UDR retrieves for `input_variables[input_key]`."""
        if not isinstance(input_variables, Mapping):
            raise UdrError(f"input_variables: expected a dict with '{self.input_key}', got {quoted(input_variables)}")
        if self.input_key not in input_variables:
            raise UdrError(f"input_variables has no '{self.input_key}' (it has {', '.join(input_variables)})")
        if self._uses_own and self._pool is None:
            spec = self._spec()
            instruction = self.instruction or (spec.instruction if spec is not None else None)
            self._pool = self.retriever.add_pool(self._own, instruction=instruction, name=f"langchain-{id(self)}")
        name = self._pool if self._uses_own else self.task
        k = min(self.k, len(self._own)) if self._uses_own else self.k
        demos = self.retriever.retrieve(
            input_variables[self.input_key],
            task=name,
            k=k,
            diversity=self.diversity,
            filter=self.filter,
            **self.labels.options,
        )
        chosen = [{self.input_key: d.input, self.output_key: d.output} for d in demos]
        return chosen[::-1] if self.ascending else chosen
