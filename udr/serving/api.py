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

Imports of torch, huggingface_hub and the udr modules that load numpy or pydantic are inside the functions that use
them, to keep `from udr import Retriever` and `udr retrieve` light.
"""

from __future__ import annotations

import numbers
import threading
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from udr.data.tasks import builtin_tasks, get_task
from udr.errors import UdrError
from udr.lm.models import hub_id
from udr.paths import Paths
from udr.serving.evidence import (
    AS_ASKED,
    BASE_METHOD,
    BY_EVIDENCE,
    Measurement,
    Training,
    UntrainedTaskWarning,  # noqa: F401  (re-exported: `from udr.serving.api import UntrainedTaskWarning`)
    model_training,
    notice,
    prefers_base,
    project_measurement,
    untrained,
    untrained_note,
)
from udr.serving.query_encoder import ServingEncoder
from udr.util.distributed import resolve_device_type
from udr.util.files import check_no_links_out, file_sha256


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


@dataclass(frozen=True)
class ServedPool:
    """A pool and the searcher over its embeddings: what one retrieval reads, swapped as one object."""

    pool: Any
    searcher: Any
    base: str = ""  # served with the base encoder: BY_EVIDENCE or AS_ASKED ("": UDR serves it)
    # Metadata filter -> the searcher over the rows that pass it (udr.serving.filters.filtered_search).
    filtered: dict = field(default_factory=dict, compare=False, repr=False)


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
        self.encoder = encoder
        self.encoder_choice = check_encoder_choice(encoder_choice)  # which encoder serves a pool (ENCODERS)
        self._base_encoder = None  # the base encoder (sbert), loaded on first need
        self.params = None if params is None else Path(params)
        self.search = check_search(search, encoder.device.type)
        self.model_dir = Path(model_dir)
        self.root = Path(root)
        self.cache_dir = cache_dir
        self.batch_size = batch_size
        self.progress = progress  # a progress bar while embedding a pool
        self._fingerprint: str | None = None
        self._pools: dict = {}  # task name -> Pool (own pools, and pipeline pools once used)
        # The names add_pool gave, in order (a pipeline pool loaded on use is not one) -> the task their rows
        # follow (None: their own).
        self._read_as: dict[str, str | None] = {}
        # (name, own, task it is read as) of the pools whose untrained-task note was considered: said once each.
        self._noted: set[tuple] = set()
        self._noted_lock = threading.Lock()
        # task name -> ServedPool: a pool with the searcher over its embeddings, replaced as one object, so
        # that a retrieval, which takes one reference, never pairs one pool's texts with another's ranking.
        self._served: dict = {}

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

        check_encoder_choice(encoder)

        if params is not None:
            if not Path(params).is_file():
                raise UdrError(f"params file not found: {params}")
            root = Path(params).parent
        model_dir = Path(path) if path is not None else Paths(Path(root)).final_model
        repo_id = hub_id(str(path)) if path is not None else None
        if repo_id is not None:
            model_dir = _download(repo_id)
        if not model_dir.is_dir():
            raise UdrError(
                f"missing model {model_dir}: train one with `dvc repro` (or `udr index`), "
                "or pass the directory of a udr bi-encoder"
            )
        check_no_links_out(model_dir)  # pools, index and declarations are read from inside it only
        serving = ServingEncoder(model_dir, torch.device(_device(device)))
        retriever = cls(
            serving,
            model_dir,
            root=root,
            params=params,
            cache_dir=cache_dir,
            batch_size=batch_size,
            progress=progress,
            search=search,
            encoder_choice=encoder,
        )
        if encoder == "base" and retriever.base_encoder_dir[0] is None:  # before any pool is read
            raise UdrError(f'encoder "base": {retriever.base_encoder_dir[1]}; serve with encoder "udr" instead')
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
        `task` is given. name: what to call the pool (default: `task`, or "own"). A row's pool id is its
        0-based position in `records` (a file's n-th data row: a CSV header is no row).
        """
        from udr.serving.pools import Columns, file_pool, own_task, records_pool

        spec = own_task(instruction, like=task, name=name, registry=self.registry if task else None)
        columns = Columns(input_column, target_column)
        if isinstance(records, (str, Path)):
            pool = file_pool(Path(records), spec, columns)
        else:
            pool = records_pool(records, spec, columns=columns)
        # Embed now, so errors and the cost come here, before anything is replaced.
        served = self._serve(pool, self._base_reason(pool.name, True, task))
        self._served[pool.name] = served
        self._pools[pool.name] = pool
        self._read_as[pool.name] = task
        return pool.name

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
        from udr.retriever.search import check_diversity
        from udr.serving.filters import check_filter, filtered_search
        from udr.serving.selection import LabelSelection

        check_diversity(diversity)
        selection = LabelSelection(label_weight, label_votes, per_label)
        selection.check_with(diversity)
        k = check_count(k)
        where = check_filter(filter)
        if where and selection.active:  # a quota's refill searches the whole pool: not yet within a filter
            raise UdrError("filter and label-aware selection (label_weight, per_label) do not combine yet: use one")
        if isinstance(queries, (str, bytes)):
            raise UdrError("queries: expected a list of strings, got one string (use retrieve() for a single query)")
        queries = list(queries)
        for i, query in enumerate(queries):
            check_query(query, f"query {i + 1}" if len(queries) > 1 else "query")
        served = self._served_pool(self.resolve_task(task))  # one reference: pool and searcher together
        searcher, pool = served.searcher, served.pool
        self._note_untrained(pool.name, served.base)
        if where:  # search the rows that pass only
            searcher, k = filtered_search(served, where, k)
            if searcher is None:
                return [[] for _ in queries]
        rows = pool.positions
        labels = None
        if selection.active:
            from udr.serving.selection import label_ranking, pool_labels

            labels = pool_labels(pool, own_shape=self._read_as.get(pool.name, "") is None)
        out: list[list[Demonstration]] = []
        for lo in range(0, len(queries), self.batch_size):
            chunk = queries[lo : lo + self.batch_size]
            if labels is None:
                ranking = searcher.rank(chunk, k, diversity=diversity)
                ranked = zip(ranking.ids, ranking.similarities)
            else:
                ranked = label_ranking(searcher, pool, labels, chunk, k, selection)
            for ids, scores in ranked:
                out.append(
                    [
                        Demonstration(
                            int(pid), pool.inputs[rows[int(pid)]], pool.outputs[rows[int(pid)]], float(similarity)
                        )
                        for pid, similarity in zip(ids, scores)
                    ]
                )
        return out

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

        spec = self._pools[self.resolve_task(task)].task
        rng = None
        if order == "random":
            from udr.util.rng import task_rng

            rng = task_rng(0, spec.name, f"prompt/{query}")
        return prompt_text(
            spec,
            spec.instruction if instruction else None,
            [(d.input, d.output) for d in demonstrations],
            spec.clean_query(query),
            order=order,
            rng=rng,
        )

    # ------------------------------------------------------------ pools

    @cached_property
    def project(self):
        """The settings of the project at `root` (its params file, read once), or None without one."""
        from udr.serving.pools import project_settings

        return project_settings(self.root, self.params)

    @cached_property
    def model_tasks(self) -> dict:
        """{name: Task}: the tasks whose pools the model folder carries, as they were declared then."""
        from udr.serving.pools import model_tasks

        return model_tasks(self.model_dir)

    @cached_property
    def model_pools(self) -> list[str]:
        """The tasks whose pools the model folder carries (`udr index`)."""
        from udr.serving.pools import model_pool_tasks

        return model_pool_tasks(self.model_dir)

    @property
    def registry(self) -> dict:
        """{name: Task}: the model folder's tasks, the built-in ones and those the project at `root`
        declares (the project's win on a name both have)."""
        return {**self.model_tasks, **(builtin_tasks() if self.project is None else self.project.registry)}

    @cached_property
    def training(self) -> Training:
        """The tasks the model was trained on (its record, or an export's model card; read once), or unknown."""
        return model_training(self.model_dir)

    @cached_property
    def measurement(self) -> Measurement | None:
        """What the project at `root` measured on tasks its UDR never trained on (its metrics/summary.json,
        read once), or None without one."""
        return project_measurement(self.root, lambda: self.fingerprint)

    def _note_untrained(self, name: str, base: str = "") -> None:
        """Say once (an UntrainedTaskWarning) where pool `name` is an own pool, or a task the model was not
        trained on, and whether the base encoder serves it (`base`, ServedPool's): nothing is read again after
        the first retrieval from a pool."""
        own = name in self._read_as
        key = (name, own, self._read_as[name] if own else name, base)
        if key in self._noted:
            return
        with self._noted_lock:
            if key in self._noted:
                return
            self._noted.add(key)
        message = untrained_note(name, key[2], own, self.training, lambda: self.measurement, base)
        if message is not None:
            notice(message)

    @property
    def fingerprint(self) -> str:
        """The model's fingerprint (hash of its settings and weights), computed once."""
        if self._fingerprint is None:
            from udr.retriever.index import model_fingerprint

            self._fingerprint = model_fingerprint(self.model_dir)
        return self._fingerprint

    def pool_task(self, name: str):
        """The task pool `name` is read as (its instruction and template): a pool served here (an own pool by the
        name `add_pool` gave it, e.g. "own"), else the registry's task of that name."""
        pool = self._pools.get(name)
        return pool.task if pool is not None else get_task(name, self.registry)

    def tasks(self) -> list[str]:
        """The tasks this retriever can serve now: own pools, the model folder's and the prepared pipeline tasks."""
        return sorted(set(self._pools) | set(self._pipeline_tasks()))

    def _pipeline_tasks(self) -> list[str]:
        return sorted(set(self.model_pools) | set(Paths(self.root).prepared_tasks()))

    def resolve_task(self, task: str | None) -> str:
        """The pool `task` names, loading a pipeline pool on first use: the model folder's, else the
        project's prepared one. None: the only own pool or, with no own pool, the only pipeline task;
        where several are possible it is an error (a pool loaded for an earlier query does not make the
        choice)."""
        if task is None:
            possible = list(self._read_as) or self._pipeline_tasks()
            if len(possible) == 1:
                return self.resolve_task(possible[0])
            raise UdrError(
                f"no task given: name the task to retrieve for (known here: {', '.join(self.tasks()) or 'none'})"
            )
        if task not in self._pools:
            from udr.serving.pools import model_pool, prepared_pool

            if task in self.model_pools:  # the project is not read: a broken declaration elsewhere cannot stop it
                spec = self.model_tasks.get(task) or get_task(task)
                pool = model_pool(self.model_dir, spec)
                self._check_carried_pool(task)
                self._pools[task] = pool
            else:
                self._check_exported(task)
                self._pools[task] = prepared_pool(self.root, task, self.project)
        return task

    def _check_exported(self, task: str) -> None:
        """A one-line error where the model is a `udr export` that carries no pool of `task` and the project
        at `root` has none either: the tasks it carries, and how to add one."""
        from udr.retriever.encoder import EXPORT_NAME

        if not (self.model_dir / EXPORT_NAME).is_file() or Paths(self.root).prepared(task, "train").is_file():
            return
        carried = ", ".join(self.model_pools) or "none"
        raise UdrError(
            f"the export {self.model_dir} carries no pool of task '{task}' (its pools: {carried}): give the "
            f"task's demonstrations with --pool FILE (Python: add_pool), or export it again with "
            f"`udr export DIR -t {task}` in the project that prepared {task}"
        )

    def _check_carried_pool(self, task: str) -> None:
        """A one-line error where the project at `root` prepared `task` again since `udr index` copied its
        pool into the model folder (as `udr evaluate` refuses the stale index): the folder's pool is stale."""
        prepared = Paths(self.root).prepared(task, "train")
        if prepared.is_file() and file_sha256(prepared) != file_sha256(Paths.model_pool(self.model_dir, task)):
            raise UdrError(
                f"the model folder's pool of {task} differs from the project's prepared {task} (prepared again "
                f"since `udr index`?): run `udr index -t {task}` again, or retrieve from outside the project"
            )

    def _served_pool(self, name: str) -> ServedPool:
        """The pool `name` with its searcher, built on first use (another thread's, if it came first)."""
        served = self._served.get(name)
        if served is None:
            own = name in self._read_as
            base = self._base_reason(name, own, self._read_as[name] if own else name)
            served = self._served.setdefault(name, self._serve(self._pools[name], base))
        return served

    def _base_reason(self, name: str, own: bool, read_as: str | None) -> str:
        """Why the base encoder serves pool `name` (read as `read_as`; `own`: an own pool): AS_ASKED (encoder
        "base"), BY_EVIDENCE (encoder "auto", a pool the model was not trained on, the project's evidence
        preferring the base encoder, which is this model's), or "" where UDR serves it."""
        if self.encoder_choice == "base":
            return AS_ASKED
        if self.encoder_choice == "udr" or not untrained(read_as, own, self.training):
            return ""
        if not prefers_base(self.measurement) or self.base_encoder_dir[0] is None:
            return ""
        return BY_EVIDENCE

    @cached_property
    def base_encoder_dir(self) -> tuple[Path | None, str]:
        """(the base encoder the sbert baseline reads, `udr evaluate -m sbert`: the project's models/base/encoder,
        where it is the one the model was trained from (the spec the model's settings record, where they record
        one), else None; why not, where None)."""
        from udr.lm.loading import read_provenance

        folder = Paths(self.root).method_model(BASE_METHOD)
        record = read_provenance(folder) if folder.is_dir() else None
        if record is None or record.get("kind") not in (None, "encoder"):
            return None, f"no resolved base encoder at {folder} (`udr models` resolves it in the project)"
        recorded, spec = str(getattr(self.encoder.settings, "base", "") or ""), str(record.get("spec") or "")
        if recorded and spec and recorded != spec:
            return None, f"the base encoder at {folder} is {spec}, and this model was trained from {recorded}"
        return folder, ""

    def _base(self):
        """The base encoder as the sbert baseline reads it, on the retriever's device (loaded once)."""
        if self._base_encoder is None:
            from udr.serving.query_encoder import _LOAD_LOCK

            folder, why = self.base_encoder_dir
            if folder is None:
                raise UdrError(f'encoder "base": {why}; serve with encoder "udr" instead')
            with _LOAD_LOCK:  # one thread imports transformers and loads it
                if self._base_encoder is None:
                    from udr.evaluation.baselines import sbert_encoder

                    self._base_encoder = sbert_encoder(folder).to(self.encoder.device)
        return self._base_encoder

    def _serve(self, pool, base: str = "") -> ServedPool:
        """`pool` with a searcher over its embeddings: UDR's (the index, the cache, or embedded now), or with
        `base` the base encoder's of the pool's inputs, as the sbert baseline embeds them (embedded now)."""
        from udr.retriever.encoder import query_text
        from udr.retriever.search import DenseRetriever

        if base:
            encoder = self._base()
            emb = encoder.encode(
                list(pool.inputs),
                "demo",
                batch_size=self.batch_size,
                progress=self.progress,
                description=f"embedding {pool.name} pool ({len(pool)} demonstrations, base encoder)",
            )
            searcher = DenseRetriever(
                encoder, pool.ids, emb, batch_size=self.batch_size, approximate=self.search == "approximate"
            )
            return ServedPool(pool, searcher, base)
        emb = self._pool_embeddings(pool)
        instruction, settings = pool.task.instruction, self.encoder.settings
        searcher = DenseRetriever(
            self.encoder,
            pool.ids,
            emb,
            lambda x: query_text(instruction, x, settings),
            batch_size=self.batch_size,
            approximate=self.search == "approximate",
        )
        return ServedPool(pool, searcher)

    def _pool_embeddings(self, pool):
        """The model's `udr index` for a pipeline pool when it has one (checked), else the cache."""
        from udr.retriever.index import load_index
        from udr.serving.pool_cache import cached_pool_embeddings

        if pool.prepared and Paths.index(self.model_dir, pool.name).is_file():
            return load_index(self.model_dir, pool.task, pool.ids, file_sha256(Path(pool.source)), self.fingerprint)
        return cached_pool_embeddings(
            self.encoder,
            self.fingerprint,
            pool,
            cache_dir=self.cache_dir,
            batch_size=self.batch_size,
            progress=self.progress,
        ).embeddings


SEARCHES = ("exact", "approximate")
ENCODERS = ("auto", "udr", "base")  # which encoder serves a pool (Retriever.load's `encoder`)


def check_encoder_choice(encoder) -> str:
    """`encoder` if it is one of ENCODERS, else a one-line UdrError."""
    if not isinstance(encoder, str) or encoder not in ENCODERS:
        raise UdrError(f"bad encoder {encoder!r}: expected one of {', '.join(ENCODERS)}")
    return encoder


def check_search(search: str, device_type: str) -> str:
    """`search` if it is a known search on this device, else a one-line UdrError."""
    if search not in SEARCHES:
        raise UdrError(f"bad search {search!r}: expected one of {', '.join(SEARCHES)}")
    if search == "approximate" and device_type != "cpu":
        raise UdrError("approximate search runs on the CPU (faiss); on a GPU, exact search is the fast one")
    return search


def _download(repo_id: str) -> Path:
    """A udr export on the Hugging Face hub, downloaded (safetensors and configs only)."""
    try:
        from huggingface_hub import snapshot_download

        return Path(
            snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.md", "*.parquet"])
        )
    except Exception as exc:  # offline, unknown repo, auth: all one line
        raise UdrError(
            f"missing model {repo_id}: no local folder of that name, and the hub did not give it "
            f"({exc.__class__.__name__}); are you offline?"
        ) from None


def check_count(k, what: str = "k") -> int:
    """A one-line error unless `k` is a whole number (not a bool, float, string or None); the range is
    checked against the pool (:func:`udr.retriever.search.check_k`)."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise UdrError(f"{what}: expected a whole number of demonstrations, got {k!r}")
    return int(k)


# The longest query accepted: E_q reads at most `max_query_length` tokens of it, and a prompt repeats it.
MAX_QUERY_CHARS = 100_000


def check_query(query, what: str = "query") -> None:
    """A one-line error for a query that is not a non-empty string of at most MAX_QUERY_CHARS characters
    (checked before anything is tokenised or copied)."""
    if not isinstance(query, str):
        raise UdrError(f"{what}: expected a string, got {type(query).__name__}")
    if len(query) > MAX_QUERY_CHARS:
        raise UdrError(
            f"{what} is {len(query):,} characters long: at most {MAX_QUERY_CHARS:,} are accepted "
            "(the query encoder reads only its start); shorten it"
        )
    if not query.strip():
        raise UdrError(f"empty {what}: give the text to find demonstrations for")


def _device(device: str) -> str:
    if device not in ("auto", "cpu", "cuda"):
        raise UdrError(f"bad device '{device}' (expected auto, cpu or cuda)")
    return resolve_device_type(device, "device")
