"""`udr retrieve`'s front door: what the user asked for (:class:`RetrieveRequest`, its options checked
together when it is made, before any model loads) and the answer (:func:`answer`: the demonstrations of
one query, or the JSON lines of a file of queries). The command parses its options into a request and
shows the answer; Python can do the same.

Imports of udr.serving.api and udr.serving.query_file are inside the functions that use them, to keep the
start of `udr` light.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from udr.errors import UdrError
from udr.retriever.label_selection import DEFAULT_VOTES, LabelSelection
from udr.retriever.search import check_diversity
from udr.util.files import check_output_path, write_text_atomic

if TYPE_CHECKING:
    from udr.serving.api import Demonstration


@dataclass(frozen=True)
class RetrieveRequest:
    """What the user asked `udr retrieve` for (the command's options, named as they are): one `query`, or
    a batch (`input_file`, its results to `output_file` or stdout: none, or "-"), from a task's pool or an own `pool`.
    Made, it is checked: a combination of options that does not go together, an option of the wrong type, an
    empty query or instruction, a k below 1, a diversity or a label-aware selection option out of range or an
    unknown encoder, device or search is a one-line UdrError.
    `output_file` is kept resolved."""

    query: str | None = None
    task: str | None = None
    k: int = 8
    diversity: float = 0.0
    as_json: bool = False
    input_file: Path | None = None
    output_file: Path | None = None
    model: Path | None = None
    prompt: bool = False
    pool: Path | None = None
    instruction: str | None = None
    input_column: str | None = None
    target_column: str | None = None
    where: tuple[str, ...] = ()  # --where COLUMN=VALUE clauses: a metadata filter (udr.serving.filters)
    device: str = "auto"
    params: Path | None = None
    search: str = "exact"
    encoder: str = "auto"
    label_weight: float = 0.0
    label_votes: int = DEFAULT_VOTES
    per_label: int | str | None = None

    def __post_init__(self) -> None:
        if (self.query is None) == (self.input_file is None):
            raise UdrError("give one QUERY or --input FILE (not both)")
        if self.output_file is not None and self.input_file is None:
            raise UdrError("--output goes with --input (a batch); a single query prints to the terminal")
        if self.output_file is not None and str(self.output_file) == "-":  # stdout, as without --output
            object.__setattr__(self, "output_file", None)
        for option, value in (
            ("--instruction", self.instruction),
            ("--input-column", self.input_column),
            ("--target-column", self.target_column),
            ("--where", self.where or None),
        ):
            if value is not None and self.pool is None:
                raise UdrError(f"{option} goes with --pool (your own demonstrations)")
        from udr.serving.api import check_encoder_choice, check_instruction, check_k_from_one, check_path, check_query
        from udr.serving.served_model import check_device_name
        from udr.serving.served_pool import check_search

        for option, value in (
            ("--input", self.input_file),
            ("--output", self.output_file),
            ("--model", self.model),
            ("--pool", self.pool),
            ("--params", self.params),
        ):
            if value is not None:
                check_path(value, option)
        if self.output_file is not None:
            output = check_output_path(Path(self.output_file))  # resolved, before the model loads
            if output.resolve() == Path(self.input_file).resolve():
                raise UdrError(
                    f"--output {output} is the --input file: the results would replace it; give another path"
                )
            object.__setattr__(self, "output_file", output)
        for option, value in (
            ("--task", self.task),
            ("--input-column", self.input_column),
            ("--target-column", self.target_column),
        ):
            if value is not None and not isinstance(value, str):
                raise UdrError(f"{option}: expected a name (a string), got {type(value).__name__}")
        if self.query is not None:
            check_query(self.query)
        check_k_from_one(self.k)  # its upper bound is the pool's size, known once the pool is read
        check_instruction(self.instruction)
        check_device_name(self.device)
        check_search(self.search, "cuda" if self.device == "cuda" else "cpu")
        check_diversity(self.diversity)
        selection = self.label_selection
        selection.check_with(self.diversity)
        object.__setattr__(self, "per_label", selection.per_label)  # "2" from the shell: 2
        check_encoder_choice(self.encoder)
        self.filter  # noqa: B018  (a malformed --where clause is refused before the model loads)

    @property
    def filter(self) -> dict[str, str]:
        """The metadata filter the --where clauses give ({}: none)."""
        from udr.serving.filters import parse_where

        return parse_where(self.where)

    @property
    def label_selection(self) -> LabelSelection:
        """The label-aware selection asked for (`label_selection.active`: whether any)."""
        return LabelSelection(self.label_weight, self.label_votes, self.per_label)

    @property
    def label_options(self) -> dict:
        """The label-aware selection options, as `Retriever.retrieve` takes them."""
        return self.label_selection.options

    @property
    def batch(self) -> bool:
        """Whether this is a file of queries (`input_file`) rather than one query."""
        return self.input_file is not None


@dataclass(frozen=True)
class RetrieveAnswer:
    """The answer to a request. One query: its `task`, `demonstrations` (most similar first, or in maximal
    marginal relevance order) and, where asked, the `prompt`. A batch: its JSON `lines` in input order,
    written to the request's `output_file` where it names one."""

    task: str | None = None
    demonstrations: tuple[Demonstration, ...] = ()
    prompt: str | None = None
    lines: tuple[str, ...] = ()


def answer(request: RetrieveRequest, *, progress: bool = True) -> RetrieveAnswer:
    """Load the retriever the request names (its own pool added), and answer the query or the batch; a
    batch with an `output_file` is written there (beside, then renamed)."""
    from udr.serving.api import Retriever

    retriever = Retriever.load(
        request.model,
        params=request.params,
        device=request.device,
        progress=progress,
        search=request.search,
        encoder=request.encoder,
    )
    task = request.task
    if request.pool is not None:
        task = retriever.add_pool(
            request.pool,
            instruction=request.instruction,
            task=task,
            input_column=request.input_column,
            target_column=request.target_column,
        )
    if request.batch:
        from udr.serving.query_file import read_queries, retrieve_lines

        queries = read_queries(request.input_file, task)
        lines = retrieve_lines(
            retriever,
            queries,
            request.k,
            prompt=request.prompt,
            progress=progress,
            diversity=request.diversity,
            filter=request.filter,
            **request.label_options,
        )
        if request.output_file is not None:
            write_text_atomic(request.output_file, "".join(line + "\n" for line in lines))
        return RetrieveAnswer(lines=tuple(lines))
    task = retriever.resolve_task(task)
    demos = retriever.retrieve(
        request.query,
        task=task,
        k=request.k,
        diversity=request.diversity,
        filter=request.filter,
        **request.label_options,
    )
    text = retriever.prompt(request.query, demos, task=task) if request.prompt else None
    return RetrieveAnswer(task=task, demonstrations=tuple(demos), prompt=text)
