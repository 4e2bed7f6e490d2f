"""`udr export`: a trained udr bi-encoder as a sentence-transformers model, with a model card.

The export is a sentence-transformers (v5+) model whose `Router` sends queries through udr's query
encoder E_q and documents (demonstrations) through its demonstration encoder E_d, each followed by
udr's pooling (and an L2 normalisation where udr used cosine similarity). Each task's instruction is
a named prompt, so ``model.encode_query(x, prompt_name=task)`` reads what E_q reads for a query x, and
``model.encode_document(demo, prompt_name=task)`` what E_d reads for a demonstration rendered with the
task's template. `udr_export.json` beside it records udr's own settings and the tasks' templates, so
:meth:`udr.Retriever.load` reads the export back without sentence-transformers installed.

The export carries its tasks' pools as a udr model folder does (`pools/<task>.parquet`, the prepared train
rows, and `pools/tasks.json`, the declarations of tasks not built in), so `udr retrieve -t TASK --model
EXPORT` serves them from anywhere. It carries no pool embeddings (they are bound to the model folder's
files): the first retrieval from a task embeds its pool, and the on-disk cache keeps it.

The base encoder (SBERT, the reference `udr adapt` compares with) is exported as a copy of its folder with the
same pools and declarations and `udr_base_export.json` (:func:`export_base_encoder`), so that
:meth:`udr.Retriever.load` serves it as the sbert baseline reads a pool: the base encoder on the pool's inputs,
no instruction.

Imports of sentence_transformers (the `sentence-transformers` extra) and transformers are inside the functions that
use them, to keep the start of `udr` and of its commands light.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from udr.errors import UdrError
from udr.retriever.encoder import EXPORT_NAME as EXPORT_META
from udr.retriever.encoder import BiEncoder
from udr.serving.served_model import BASE_EXPORT_NAME
from udr.util.files import building_dir, check_dir_target, json_text, resolve_target, staging_dir
from udr.util.locks import holding
from udr.util.weights import drop_load_options, refuse_remote_code

EXPORT_FORMATS = ("sentence-transformers",)
# Where sentence-transformers' Router keeps each route's Transformer module in the export.
ROUTE_DIRS = {"query": "query_0_Transformer", "demo": "document_0_Transformer"}
# Prompt names sentence-transformers itself uses (encode_query / encode_document and the Router's routes):
# a task of one of these names would silently change every plain encode_query() / encode_document().
RESERVED_PROMPT_NAMES = ("query", "document", "passage", "corpus")
# What an earlier export holds (and an export may replace): a bi-encoder's metadata, or a base encoder's.
EXPORT_MARKERS = (EXPORT_META, BASE_EXPORT_NAME), "an earlier udr export"


def _sentence_transformers():
    try:
        import sentence_transformers
    except ImportError:
        raise UdrError(
            "exporting to sentence-transformers needs it installed: pip install 'udr[sentence-transformers]'"
        ) from None
    major = int(sentence_transformers.__version__.split(".")[0])
    if major < 5:
        raise UdrError(f"sentence-transformers {sentence_transformers.__version__} has no Router: need 5 or later")
    return sentence_transformers


def build_sentence_transformer(model_dir: Path, prompts: dict[str, str], staging: Path, device: str = "cpu"):
    """The udr bi-encoder at `model_dir` as an in-memory SentenceTransformer (Router over E_q and E_d);
    each encoder is staged in `staging` beside a copy of the shared tokenizer, as sentence-transformers
    reads a model and its tokenizer from one directory."""
    st = _sentence_transformers()
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Router, Transformer

    settings = BiEncoder.load_settings(model_dir)
    query_dir, demo_dir, tokenizer_dir = BiEncoder.part_dirs(model_dir)
    for part in (query_dir, demo_dir, tokenizer_dir):
        refuse_remote_code(part)
    routes = {}
    for side, source, length in (
        ("query", query_dir, settings.max_query_length),
        ("document", demo_dir, settings.max_demo_length),
    ):
        staged = staging / side
        shutil.copytree(source, staged)
        for item in tokenizer_dir.iterdir():
            if item.is_file() and not (staged / item.name).exists():
                shutil.copy2(item, staged / item.name)
        encoder = Transformer(str(staged), max_seq_length=length)
        drop_load_options(encoder.tokenizer)  # else HF_HUB_OFFLINE decides the exported tokenizer_config.json
        modules = [encoder, Pooling(encoder.get_embedding_dimension(), pooling_mode=settings.pooling)]
        if settings.similarity == "cosine":
            modules.append(Normalize())
        routes[side] = modules
    # No default route: a plain encode() (what generic tools call) raises instead of silently embedding
    # queries with the document encoder; encode_query / encode_document (or task=) choose the side.
    router = Router.for_query_document(
        query_modules=routes["query"], document_modules=routes["document"], default_route=None, allow_empty_key=False
    )
    return st.SentenceTransformer(
        modules=[router],
        device=device,
        prompts=prompts,
        similarity_fn_name="cosine" if settings.similarity == "cosine" else "dot",
    )


@contextlib.contextmanager
def _quiet_transformers():
    """transformers' own progress bars (loading weights, writing shards: a fraction of a second here) off,
    so that the export prints one line, on a terminal or in a log."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def export_pools(model_dir: Path, tasks: dict, prepared) -> dict[str, Path]:
    """{task: pool file} of the pools an export of `model_dir` carries for `tasks` ({name: Task}): the copy
    the model folder carries (`udr index`), else the project's prepared train split (`prepared(name)`: its
    path); a task with neither is carried by no pool (the export serves it from --pool rows only)."""
    from udr.paths import Paths

    out = {}
    for name in tasks:
        for path in (Paths.model_pool(model_dir, name), prepared(name)):
            if path is not None and Path(path).is_file():
                out[name] = Path(path)
                break
    return out


def _write_pools(folder: Path, model_dir: Path, tasks: dict, pools: dict[str, Path]) -> None:
    """The pools `pools` and the declarations of their tasks that are not built in, in `folder` (an export
    being built), laid out as in a udr model folder."""
    from udr.paths import Paths
    from udr.retriever.index import read_model_declarations

    if not pools:
        return
    carried = read_model_declarations(model_dir)
    declared = {}
    for name, source in pools.items():
        target = Paths.model_pool(folder, name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        declaration = carried.get(name) or tasks[name].declaration
        if declaration is not None:
            declared[name] = declaration
    Paths.model_tasks(folder).write_text(json_text(declared))


def _task_meta(tasks: dict) -> dict:
    """{name: its instruction, template and kind} of `tasks` ({name: Task}), as an export's metadata records them."""
    return {name: {"instruction": t.instruction, "template": t.template, "kind": t.kind} for name, t in tasks.items()}


def export_sentence_transformers(
    model_dir: Path, out_dir: Path, tasks: dict, card: str, pools: dict[str, Path] | None = None
) -> dict:
    """Write the export of the udr bi-encoder at `model_dir` to `out_dir` (atomically: built beside it,
    then swapped in): the sentence-transformers model, `udr_export.json`, the model card `card` (README.md)
    and the pools `pools` ({task: prepared pool file}, :func:`export_pools`). `tasks`: {name: Task} whose
    instructions become named prompts. Returns the metadata. `out_dir` must be new, empty, or an earlier
    export (:func:`check_export_target`)."""
    clash = sorted(set(tasks) & set(RESERVED_PROMPT_NAMES))
    if clash:
        raise UdrError(
            f"task {clash[0]!r} cannot be exported: its prompt would replace sentence-transformers' own "
            f"{clash[0]!r} prompt ({', '.join(RESERVED_PROMPT_NAMES)} are reserved); rename the task"
        )
    settings = BiEncoder.load_settings(model_dir)
    prompts = {name: task.instruction for name, task in tasks.items()} if settings.instruction else {}
    meta = {
        "format": "sentence-transformers",
        "encoder": settings.model_dump(),
        "routes": ROUTE_DIRS,
        "tasks": _task_meta(tasks),
        # Which prompt goes where: E_q reads the instruction only with query_instruction (see udr.retriever.encoder).
        "query_prompts": bool(settings.instruction and settings.query_instruction),
        "document_prompts": bool(settings.instruction),
        "pools": sorted(pools or {}),
    }
    with (
        writing_export(out_dir) as out_dir,
        building_dir(out_dir, *EXPORT_MARKERS) as tmp,
        staging_dir(out_dir) as staging,
        _quiet_transformers(),
    ):
        build_sentence_transformer(Path(model_dir), prompts, staging).save(str(tmp))
        for folder in ROUTE_DIRS.values():
            if not (tmp / folder / "config.json").is_file():
                raise UdrError(f"unexpected sentence-transformers layout: no {folder}/config.json in the export")
        _write_pools(tmp, Path(model_dir), tasks, pools or {})
        (tmp / EXPORT_META).write_text(json_text(meta))
        (tmp / "README.md").write_text(card)
    return meta


def export_base_encoder(base_dir: Path, out_dir: Path, tasks: dict, pools: dict[str, Path]) -> dict:
    """Write the base encoder at `base_dir` (a sentence-transformers model: the sbert baseline's) to `out_dir`
    (atomically, as :func:`export_sentence_transformers`) with the pools `pools` ({task: pool file}), the
    declarations of `tasks` ({name: Task}) not built in, and `udr_base_export.json`; returns its metadata."""
    meta = {
        "format": "base-encoder",
        "method": "sbert",
        "reads": "the pool's inputs and the queries, no instruction (as `udr evaluate -m sbert`)",
        "tasks": {
            name: {"instruction": t.instruction, "template": t.template, "kind": t.kind} for name, t in tasks.items()
        },
        "pools": sorted(pools),
    }
    with writing_export(out_dir) as out_dir, building_dir(out_dir, *EXPORT_MARKERS) as tmp:
        shutil.copytree(Path(base_dir).resolve(), tmp, dirs_exist_ok=True)
        _write_pools(tmp, Path(base_dir), tasks, pools)
        (tmp / BASE_EXPORT_NAME).write_text(json_text(meta))
    return meta


@contextlib.contextmanager
def writing_export(out_dir: Path) -> Iterator[Path]:
    """Hold the lock of the export folder `out_dir` (:mod:`udr.util.locks`), then check it
    (:func:`check_export_target`); yields the resolved folder to write."""
    target = resolve_target(Path(out_dir), "export target")
    with holding(target, "export folder"):
        yield check_export_target(target)


def check_export_target(out_dir: Path) -> Path:
    """The resolved export folder: an export replaces only an earlier export (it holds `udr_export.json`, or a
    base encoder's `udr_base_export.json`) or an empty directory; anything else (the user's files, `models/`, a
    project) is a one-line error and stays untouched."""
    return check_dir_target(Path(out_dir), *EXPORT_MARKERS, "export target")
