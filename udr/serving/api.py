"""The Python API: a trained bi-encoder serving demonstrations from task pools.

    from udr import Retriever

    retriever = Retriever.load("models/final")           # the pipeline's final UDR model
    for demo in retriever.retrieve("a gripping, funny film", task="sst2", k=8):
        print(f"{demo.similarity:.2f}  {demo.input} -> {demo.output}")

    own = Retriever.from_pool([{"input": "...", "target": "..."}, ...], instruction="Summarize the text: ")
    own.retrieve("some text", k=4)

Pipeline tasks retrieve from the pools the model folder carries (`udr index` puts a copy of each
pool and its task declaration beside the index, so the folder serves from anywhere), else from their
prepared train split in the project at `root` (``data/prepared``), with the model's index embeddings
when it has them and the on-disk cache (:mod:`udr.serving.pool_cache`) otherwise; own pools always go
through the cache. `udr retrieve` is a thin shell over this class.

Serving an own pool, or a task the model was not trained on, says so once per retriever and pool name (an
:class:`udr.serving.evidence.UntrainedTaskWarning`: the model's training tasks, what the project measured
on tasks it never trained on, how to check it on your data). Where the project's own evidence on those tasks
is resolved below zero by the project's claim margin (UDR − SBERT, :func:`udr.serving.evidence.prefers_base`),
such a pool and its queries are served with the base encoder as the sbert baseline reads them (the project's
``models/base/encoder``, where it is the one the model was trained from: its own pooling and normalisation, no
instruction, the pool's inputs; :func:`udr.evaluation.baselines.sbert_encoder`), and the note says so; a trained
task keeps UDR. `encoder` ("auto", "udr" or "base"; `udr retrieve --encoder`) overrides the rule: "udr" serves
every pool with UDR, "base" every pool with the base encoder.

Serving follows `udr adapt`: a retriever of the project's own model (no `path` given) asked for a task the project
has no pool of, where a finished `udr adapt` of that task recorded its choice (:func:`udr.project.adapt.adapted_task`),
serves it with the retriever that run recommended: its export (the adapted or the project's UDR with the task's
pool, or the base encoder's as the sbert baseline reads it), and one notice says which encoder serves. A bm25 or
random winner is no dense retriever: the task is then served with the base encoder (sbert, the reference the run
compared with) over the workspace's pool, and the notice says so. A model given by `path` always serves as asked.

A retriever holds the model it serves (:class:`udr.serving.served_model.ServedModel`: the bi-encoder, its facts
and the evidence on the tasks it serves) and the pools it serves (:class:`udr.serving.served_pool.ServedPool`: a
pool with the searcher over its embeddings), and retrieves from them.

Imports of torch and the udr modules that load numpy or pydantic are inside the functions that use them, to keep
`from udr import Retriever` and `udr retrieve` light.
"""

from __future__ import annotations

import numbers
import os
import unicodedata
import warnings
from collections.abc import Iterable, Sequence, Set
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from udr.data.declarations import check_instruction
from udr.data.tasks import get_task
from udr.errors import UdrError, check_text, is_collection, quoted
from udr.serving.evidence import UntrainedTaskWarning
from udr.serving.served_model import (
    ENCODERS,
    BaseExport,
    ServedModel,
    check_device,
    check_encoder_choice,
    is_base_export,
    model_folder,
)
from udr.serving.served_pool import SEARCHES, ServedPool, check_search, serve_pool

# Re-exported where they were first defined: `from udr.serving.api import ...` keeps working.
__all__ = [
    "ENCODERS",
    "MAX_QUERY_CHARS",
    "SEARCHES",
    "Demonstration",
    "Retriever",
    "ServedPool",
    "UntrainedTaskWarning",
    "check_count",
    "check_encoder_choice",
    "check_instruction",
    "check_k_from_one",
    "check_path",
    "check_query",
    "check_search",
    "check_text",
]


@dataclass(frozen=True)
class Demonstration:
    """One retrieved demonstration: its pool id, the row's input and output (the answer as the LM
    sees it: a label's verbalization, the chosen option or the target text), and its similarity
    E_q(query) . E_d(demonstration)."""

    pool_id: int
    input: str
    output: str
    similarity: float

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def score(self) -> float:
        """The similarity under its former name (deprecated: "score" is the LM's feedback in udr)."""
        warnings.warn("Demonstration.score is now Demonstration.similarity", DeprecationWarning, stacklevel=2)
        return self.similarity


def _of_model(name: str) -> property:
    """A read-only attribute of the retriever that is its served model's (:class:`ServedModel`)."""
    return property(lambda self: getattr(self.model, name), doc=f"The served model's `{name}` (ServedModel.{name}).")


class Retriever:
    """Dense retrieval of demonstrations with a UDR (or EPR) bi-encoder; see the module docstring."""

    def __init__(
        self,
        encoder,
        model_dir: Path,
        *,
        root: Path | str = ".",
        params: Path | str | None = None,
        cache_dir: Path | None = None,
        batch_size: int = 64,
        progress: bool = False,
        search: str = "exact",
        encoder_choice: str = "auto",
    ):
        self.model = ServedModel(encoder, model_dir, root=root, params=params, encoder_choice=encoder_choice)
        self.search = check_search(search, encoder.device.type)
        self.cache_dir = cache_dir
        self.batch_size = check_count(batch_size, "batch_size", "queries or rows embedded at once")
        self.progress = progress  # a progress bar while embedding a pool
        self._pools: dict = {}  # task name -> Pool (own pools, and pipeline pools once used)
        # The names add_pool gave, in order (a pipeline pool loaded on use is not one) -> the task their rows
        # follow (None: their own).
        self._read_as: dict[str, str | None] = {}
        # task name -> ServedPool: a pool with the searcher over its embeddings, replaced as one object, so
        # that a retrieval, which takes one reference, never pairs one pool's texts with another's ranking.
        self._served: dict = {}
        self.follows_adapt = False  # serve a task `udr adapt` chose for with its choice (load, no path given)
        self._adapted: dict[str, Retriever] = {}  # task name -> the retriever `udr adapt` chose for it
        self.adapt_labels = None  # a LabelSelection `udr adapt` chose with this retriever (served by default)

    # The served model's facts, as the retriever's attributes.
    encoder = _of_model("encoder")
    encoder_choice = _of_model("encoder_choice")  # which encoder serves a pool (ENCODERS)
    model_dir = _of_model("model_dir")
    root = _of_model("root")
    params = _of_model("params")
    fingerprint = _of_model("fingerprint")
    project = _of_model("project")
    registry = _of_model("registry")
    model_tasks = _of_model("model_tasks")
    model_pools = _of_model("model_pools")
    training = _of_model("training")
    measurement = _of_model("measurement")
    base_encoder_dir = _of_model("base_encoder_dir")

    # ------------------------------------------------------------ construction

    @classmethod
    def load(
        cls,
        path: Path | str | None = None,
        *,
        root: Path | str = ".",
        params: Path | str | None = None,
        device: str = "auto",
        cache_dir: Path | None = None,
        batch_size: int = 64,
        progress: bool = False,
        search: str = "exact",
        encoder: str = "auto",
    ) -> Retriever:
        """The bi-encoder saved at `path` (default: the pipeline's final model under `root`, which is the
        directory of `params` when that is given: the project's params file, default root/params.yaml): a udr model
        directory, a `udr export` of one (a sentence-transformers directory), or the hub id of such an
        export (`hf:org/name`, or a bare `org/name` that is no local path, for users who are online).
        search: "exact" (every demonstration scored), or "approximate" (CPU: a faiss IVF index whose
        recall@8 against exact search is calibrated to 0.99 on the pool; for pools of tens of thousands
        and more, where it is several times faster). encoder: which encoder serves a pool: "auto" (UDR, but
        the base encoder for a pool the model was not trained on where the project measured the base encoder
        better on its unseen tasks; see the module docstring), "udr" or "base" (every pool)."""
        import torch

        from udr.serving.query_encoder import ServingEncoder

        check_encoder_choice(encoder)
        root = check_path(root, "root")
        cache_dir = None if cache_dir is None else check_path(cache_dir, "cache_dir")
        if params is not None:
            params = check_path(params, "params")
            if not params.is_file():
                raise UdrError(f"params file not found: {params}")
            root = params.parent
        if path is not None:
            check_path(path, "model")  # a folder, or a hub id as given
        model_dir = model_folder(path, root)
        on = torch.device(check_device(device))
        retriever = cls(
            BaseExport(on) if is_base_export(model_dir) else ServingEncoder(model_dir, on),
            model_dir,
            root=root,
            params=params,
            cache_dir=cache_dir,
            batch_size=batch_size,
            progress=progress,
            search=search,
            encoder_choice=encoder,
        )
        if encoder == "base":  # before any pool is read
            retriever.model.base_folder()
        retriever.follows_adapt = path is None
        return retriever

    @classmethod
    def from_pool(
        cls,
        records: Iterable[dict] | Path | str,
        *,
        instruction: str | None = None,
        task: str | None = None,
        model: Path | str | None = None,
        input_column: str | None = None,
        target_column: str | None = None,
        **load_options,
    ) -> Retriever:
        """A retriever over your own demonstrations (records, or a file), with the model at `model`
        (default: the pipeline's final model); see :meth:`add_pool`. `load_options`: :meth:`load`'s
        (`encoder="udr"` serves the pool with UDR whatever the project's evidence)."""
        _pool_file(records)  # a mistyped path or a wrong type, before the model loads
        retriever = cls.load(model, **load_options)
        retriever.add_pool(
            records, instruction=instruction, task=task, input_column=input_column, target_column=target_column
        )
        return retriever

    def add_pool(
        self,
        records: Iterable[dict] | Path | str,
        *,
        instruction: str | None = None,
        task: str | None = None,
        name: str | None = None,
        input_column: str | None = None,
        target_column: str | None = None,
    ) -> str:
        """Serve your own demonstrations; returns the name to retrieve them by.

        records: dicts, or the path of a file (.jsonl, .csv, .tsv or .parquet), in a task's row shape when
        `task` names one (built-in, or declared by the project at `root`; its pipeline pool is then replaced
        by yours) and in the generation shape ``{"input", "target"}`` otherwise. input_column /
        target_column: the columns holding the input and the target (or label) where they have other names.
        instruction: the task instruction UDR reads with every demonstration (and query); required unless
        `task` is given. name: what to call the pool (default: `task`, or "own"; a pipeline task's name only with
        that `task`). A row's pool id is its
        0-based position in `records` (a file's n-th data row: a CSV header is no row).
        """
        from udr.serving.pools import Columns, file_pool, own_task, records_pool

        path = _pool_file(records)
        if name is not None:
            self._check_pool_name(name, task)
        spec = own_task(instruction, like=task, name=name, registry=self.registry if task else None)
        columns = Columns(input_column, target_column)
        if path is not None:
            pool = file_pool(path, spec, columns)
        else:
            pool = records_pool(records, spec, columns=columns)
        # Embed now, so errors and the cost come here, before anything is replaced.
        served = replace(self._serve(pool, self.model.base_reason(task, own=True)), own_shape=task is None)
        self._served[pool.name] = served  # the pool with its shape: a concurrent retrieval reads one or the other
        self._pools[pool.name] = pool
        self._read_as[pool.name] = task
        return pool.name

    def _check_pool_name(self, name, task: str | None) -> None:
        """A one-line error unless `name` is a non-empty string that names no pipeline pool served here, unless
        the rows are read as that task (`task`): they would replace its pool, served under its name."""
        if not isinstance(name, str) or not name.strip():
            raise UdrError(f"name: expected a non-empty string to call the pool by, got {quoted(name)}")
        if name != task and name not in self._read_as and name in self.model.pipeline_tasks():
            raise UdrError(
                f"name {name!r} is a task's: your pool would replace its pool here; call it another name, or read "
                f"your rows as that task (task={name!r})"
            )

    # ------------------------------------------------------------ retrieval

    def retrieve(
        self,
        query: str,
        task: str | None = None,
        k: int = 8,
        *,
        diversity: float = 0.0,
        label_weight: float = 0.0,
        label_votes: int = 16,
        per_label: int | str | None = None,
        filter: dict | None = None,
    ) -> list[Demonstration]:
        """The k demonstrations most similar to `query`, most similar first. diversity (0 to 1): re-rank
        by maximal marginal relevance, trading similarity to the query for dissimilarity among the k
        (LangChain's `lambda_mult` is 1 - diversity); the order is then MMR's pick order. Label-aware
        selection from a classification pool (:mod:`udr.serving.selection`): label_weight (γ) re-ranks by
        similarity + γ · the share of the candidate's label among the label_votes nearest rows; per_label
        caps each label's demonstrations (a number, or "balanced"); the order is then the label-aware one.
        filter: search only the rows whose metadata have these values ({column: value}, an AND;
        :mod:`udr.serving.filters`)."""
        return self.retrieve_batch(
            [query],
            task=task,
            k=k,
            diversity=diversity,
            label_weight=label_weight,
            label_votes=label_votes,
            per_label=per_label,
            filter=filter,
        )[0]

    def retrieve_batch(
        self,
        queries: Sequence[str],
        task: str | None = None,
        k: int = 8,
        *,
        diversity: float = 0.0,
        label_weight: float = 0.0,
        label_votes: int = 16,
        per_label: int | str | None = None,
        filter: dict | None = None,
    ) -> list[list[Demonstration]]:
        """`retrieve` for many queries of one task, embedded `batch_size` at a time; results in query order."""
        from udr.retriever.label_selection import LabelSelection
        from udr.retriever.search import check_diversity
        from udr.serving.filters import check_filter

        check_diversity(diversity)
        selection = LabelSelection(label_weight, label_votes, per_label)
        selection.check_with(diversity)
        k = check_count(k)
        where = check_filter(filter)
        if isinstance(queries, (str, bytes)):
            raise UdrError("queries: expected a list of strings, got one string (use retrieve() for a single query)")
        if not is_collection(queries, Set):
            # a set's order is not the caller's, and a dict's would be its keys: results in query order need a sequence
            raise UdrError(f"queries: expected a list of strings, got {type(queries).__name__}")
        queries = list(queries)
        for i, query in enumerate(queries):
            check_query(query, f"query {i + 1}" if len(queries) > 1 else "query")
        name = self.resolve_task(task)
        if name in self._adapted:
            follower = self._adapted[name]
            chosen = follower.adapt_labels  # `udr adapt` recommended label-aware selection: the default here
            if chosen is not None and not (selection.active or diversity or where):
                label_weight, label_votes, per_label = chosen.weight, chosen.votes, chosen.per_label
            return follower.retrieve_batch(
                queries,
                name,
                k,
                diversity=diversity,
                label_weight=label_weight,
                label_votes=label_votes,
                per_label=per_label,
                filter=filter,
            )
        if selection.active:  # a pool without labels is refused before it is embedded (an own pool is already)
            from udr.serving.selection import pool_labels

            known = self._served.get(name)
            pool_labels(known.pool if known else self._pools[name], own_shape=known is not None and known.own_shape)
        served = self._served_pool(name)  # one reference: pool, searcher and shape together
        pool = served.pool
        self.model.note_untrained(pool.name, *self._reading(pool.name), served.base)
        found = served.search(
            queries,
            k,
            diversity=diversity,
            selection=selection,
            where=where,
            batch_size=self.batch_size,
        )
        rows = pool.positions
        return [
            [Demonstration(pid, pool.inputs[rows[pid]], pool.outputs[rows[pid]], sim) for pid, sim in one]
            for one in found
        ]

    def prompt(
        self,
        query: str,
        demonstrations: Sequence[Demonstration],
        task: str | None = None,
        *,
        order: str = "ascending",
        instruction: bool = False,
    ) -> str:
        """The in-context prompt for `query` with `demonstrations` (as retrieved, most similar first),
        in the evaluation's layout: ascending order puts the most similar right before the query.
        `instruction`: start with the task instruction (the default follows `score.instruction`: none)."""
        from udr.lm.prompt import prompt_text

        check_query(query)
        pairs = _demonstration_pairs(demonstrations)
        name = self.resolve_task(task)
        spec = self._adapted[name].pool_task(name) if name in self._adapted else self._pools[name].task
        rng = None
        if order == "random":
            from udr.util.rng import task_rng

            rng = task_rng(0, spec.name, f"prompt/{query}")
        return prompt_text(
            spec,
            spec.instruction if instruction else None,
            pairs,
            spec.clean_query(query),
            order=order,
            rng=rng,
        )

    # ------------------------------------------------------------ pools

    def pool_task(self, name: str):
        """The task pool `name` is read as (its instruction and template): a pool served here (an own pool by the
        name `add_pool` gave it, e.g. "own"), else the registry's task of that name."""
        pool = self._pools.get(name)
        if pool is None and name in self._adapted:
            return self._adapted[name].pool_task(name)
        return pool.task if pool is not None else get_task(name, self.registry)

    def tasks(self) -> list[str]:
        """The tasks this retriever can serve now: own pools, the model folder's and the prepared pipeline tasks, and
        those served as `udr adapt` chose since."""
        return sorted(set(self._pools) | set(self._adapted) | set(self.model.pipeline_tasks()))

    def resolve_task(self, task: str | None) -> str:
        """The pool `task` names, loading a pipeline pool on first use: the model folder's, else the
        project's prepared one, or, where neither has it, the retriever `udr adapt` chose for it (see the module
        docstring). None: the only own pool or, with no own pool, the only pipeline task; where several are
        possible it is an error (a pool loaded for an earlier query does not make the choice)."""
        if task is not None and not isinstance(task, str):
            raise UdrError(f"task: expected a task's name (a string), got {type(task).__name__}")
        if task is None:
            possible = list(self._read_as) or self.model.pipeline_tasks()
            if len(possible) == 1:
                return self.resolve_task(possible[0])
            raise UdrError(
                f"no task given: name the task to retrieve for (known here: {', '.join(self.tasks()) or 'none'})"
            )
        if task not in self._pools and task not in self._adapted:
            follower = self._follow_adapt(task)
            if follower is not None:
                self._adapted.setdefault(task, follower)
                return task
            self._pools[task] = self.model.pipeline_pool(task)
        return task

    def _follow_adapt(self, task: str) -> Retriever | None:
        """The retriever `udr adapt` recommended for `task`, loaded, where this retriever follows adapt and `task` is
        no pipeline task here but a finished run's; None otherwise. Says once which encoder serves it."""
        if not self.follows_adapt or task in self.model.pipeline_tasks():
            return None
        from udr.project.adapt import ADAPTED, adapted_task
        from udr.util.files import shown_path
        from udr.util.notice import notice

        chosen = adapted_task(self.root, task)
        if chosen is None:
            return None
        options = {
            "device": self.encoder.device.type,
            "cache_dir": self.cache_dir,
            "batch_size": self.batch_size,
            "progress": self.progress,
            "search": self.search,
        }
        where = shown_path(chosen.workspace, Path.cwd())
        evidence = f"`udr adapt` recommended it on {where}/metrics/adapt.md; --model DIR serves another model"
        if chosen.export is None:  # bm25 or random: no dense retriever to serve
            follower = Retriever.load(root=chosen.workspace, encoder="base", **options)
            notice(
                f"serving {task} with the base encoder (sbert) over the workspace's pool: `udr adapt` recommended "
                f"{chosen.method} for it ({where}/metrics/adapt.md), which is no dense retriever udr serves, and sbert "
                "is the reference it was compared with; --model DIR serves another model"
            )
        else:
            # The task's own evidence decides: a trained winner serves with its UDR, whatever the project measured
            # on other unseen tasks.
            encoder = "udr" if self.encoder_choice == "auto" and chosen.method != "sbert" else self.encoder_choice
            follower = Retriever.load(chosen.export, root=self.root, encoder=encoder, **options)
            what = {"sbert": "the base encoder (sbert)", ADAPTED: "the adapted UDR", "udr": "the project's UDR"}
            shown = shown_path(chosen.export, Path.cwd())
            notice(f"serving {task} with {what[chosen.method]} from {shown}: {evidence}")
        follower.model.chosen_by_adapt = True
        if chosen.labels is not None:
            from udr.project.adapt import selection_text
            from udr.retriever.label_selection import LabelSelection

            follower.adapt_labels = LabelSelection(**chosen.labels)
            notice(
                f"{task}: label-aware selection by default ({selection_text(chosen.labels)}), as `udr adapt` "
                "recommended; label_weight / per_label (--label-weight, --per-label) choose another"
            )
        return follower

    def _reading(self, name: str) -> tuple[str | None, bool]:
        """(the task pool `name`'s rows are read as, whether it is an own pool)."""
        own = name in self._read_as
        return (self._read_as[name] if own else name), own

    def _served_pool(self, name: str) -> ServedPool:
        """The pool `name` with its searcher, built on first use (another thread's, if it came first)."""
        served = self._served.get(name)
        if served is None:
            base = self.model.base_reason(*self._reading(name))
            served = self._served.setdefault(name, self._serve(self._pools[name], base))
        return served

    def _serve(self, pool, base: str = "") -> ServedPool:
        """`pool` with its searcher, as this retriever searches and embeds (:func:`serve_pool`)."""
        return serve_pool(
            self.model,
            pool,
            base,
            search=self.search,
            cache_dir=self.cache_dir,
            batch_size=self.batch_size,
            progress=self.progress,
        )


def check_count(k, what: str = "k", of: str | None = None) -> int:
    """A one-line error unless `k` is a whole number (not a bool, float, string or None); the range of k is
    checked against the pool (:func:`udr.retriever.search.check_k`). `of`: a count of these, which must be at
    least 1 (checked here)."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise UdrError(f"{what}: expected a whole number of {of or 'demonstrations'}, got {quoted(k)}")
    if of is not None and k < 1:
        raise UdrError(f"{what}: expected at least 1 {of}, got {k}")
    return int(k)


def check_k_from_one(k, unit: str = "demonstrations") -> int:
    """`k` checked as :func:`check_count` checks it and at least 1, before a pool bounds it from above (a one-line
    "k out of range" naming `unit`)."""
    if check_count(k) < 1:
        raise UdrError(f"k out of range: asked for {k} {unit} (at least 1)")
    return int(k)


def check_path(value, what: str) -> Path:
    """`value` as a Path, or a one-line error unless it is a str or an os.PathLike."""
    if not isinstance(value, (str, os.PathLike)):
        raise UdrError(f"{what}: expected a path, got {type(value).__name__}")
    return Path(value)


def _pool_file(records) -> Path | None:
    """The checked path of a pool file (:func:`udr.serving.pools.checked_pool_file`), None for records; a one-line
    error where `records` is neither a path nor an iterable of rows."""
    from udr.serving.pools import checked_pool_file

    if isinstance(records, (str, os.PathLike)):
        return checked_pool_file(records)
    if not is_collection(records):
        raise UdrError(f"records: expected a file path or a list of dicts, got {type(records).__name__}")
    return None


def _demonstration_pairs(demonstrations) -> list[tuple[str, str]]:
    """(input, output) of each demonstration, or a one-line error unless they are Demonstrations of text."""
    if not is_collection(demonstrations, Demonstration):
        raise UdrError(f"demonstrations: expected a list of Demonstrations, got {type(demonstrations).__name__}")
    pairs = []
    for i, d in enumerate(demonstrations):
        if not isinstance(d, Demonstration) or not (isinstance(d.input, str) and isinstance(d.output, str)):
            raise UdrError(
                f"demonstrations[{i}]: expected a Demonstration with text input and output (as retrieve returns), "
                f"got {quoted(d)}"
            )
        pairs.append((d.input, d.output))
    return pairs


# The longest query accepted: E_q reads at most `max_query_length` tokens of it, and a prompt repeats it.
MAX_QUERY_CHARS = 100_000


def check_query(query, what: str = "query") -> None:
    """A one-line error for a query that is not a string of valid Unicode with a visible character, of at most
    MAX_QUERY_CHARS characters (checked before anything is tokenised or copied)."""
    if not isinstance(query, str):
        raise UdrError(f"{what}: expected a string, got {type(query).__name__}")
    if len(query) > MAX_QUERY_CHARS:
        raise UdrError(
            f"{what} is {len(query):,} characters long: at most {MAX_QUERY_CHARS:,} are accepted "
            "(the query encoder reads only its start); shorten it"
        )
    if not query.strip() or all(c.isspace() or unicodedata.category(c) == "Cf" for c in query):
        # Cf: zero-width spaces and joiners, a byte-order mark: nothing to read
        raise UdrError(f"empty {what}: give the text to find demonstrations for")
    check_text(query, what)
