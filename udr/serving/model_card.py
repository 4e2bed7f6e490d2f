"""The model card of a `udr export`, written from the model's own files: its record (udr_record.json: the
models, tasks, feedback sizes and training of every round behind it), the pools and task declarations
`udr index` put beside it, and the project's results of this very model (metrics/, matched by the model's
fingerprint; metrics/results.md with its n and bootstrap intervals where every UDR result is this model's).

Imports of udr.config and the udr.retriever, udr.serving and udr.evaluation modules that load numpy or pydantic
are inside the functions that use them, to keep the start of `udr` and of its commands light.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from udr.errors import UdrError
from udr.paths import Paths
from udr.retriever.record import read_record, rounds, trained_tasks
from udr.util.readers import read_parquet_checked
from udr.util.schemas import EvaluationResult, LastTrainingRun, PreparedMeta, TrainingRun, model_from, read_model

if TYPE_CHECKING:
    from udr.config import Settings

# What fixes a model record that lacks what its card states.
AGAIN = "train the model again with this udr (its record lacks what the model card states)"

USAGE = """```python
from sentence_transformers import SentenceTransformer

model = SentenceTransformer({where})
# Queries and demonstrations go through their own encoders; the task's instruction is a named prompt.
# A plain model.encode() raises (no default side): tools that call .encode need encode_query / encode_document.
query = model.encode_query([{query!r}], prompt_name="{task}")
demos = model.encode_document(["{demo}"], prompt_name="{task}")
print(model.similarity(query, demos))
```

```python
from udr import Retriever

retriever = Retriever.load({where})  # a udr export loads like a udr model
own = retriever.add_pool([{{"input": {demo_input!r}, "target": {demo_output!r}}}], instruction={instruction!r})
print(retriever.retrieve({query!r}, task=own, k=1))
```

```python
# LangChain (pip install 'udr[langchain]'): a few-shot prompt with UDR's demonstrations, most similar last.
from udr.serving.langchain_selector import UDRExampleSelector

selector = UDRExampleSelector(retriever, instruction={instruction!r}, k=1,
                              examples=[{{"input": {demo_input!r}, "output": {demo_output!r}}}])
prompt = selector.prompt_template()  # a FewShotPromptTemplate
print(prompt.format(input={query!r}))
```

```python
# DSPy (pip install 'udr[dspy]'): a predictor whose demos UDR retrieves for each call.
import dspy
from udr.serving.dspy_fewshot import UDRFewShot

program = UDRFewShot(dspy.Predict("question -> answer"), retriever, instruction={instruction!r}, k=1,
                     trainset=[dspy.Example(question={demo_input!r}, answer={demo_output!r})])
print([demo.answer for demo in program.demonstrations({query!r})])
```"""


def _yaml_front_matter(base: str) -> str:
    lines = ["---", "library_name: sentence-transformers", "pipeline_tag: sentence-similarity"]
    lines += ["tags:", "- sentence-transformers", "- udr", "- in-context-learning", "- demonstration-retrieval"]
    if "/" in base and not base.startswith(("pypi:", "/", ".")):
        lines.append(f"base_model: {base}")
    return "\n".join([*lines, "---", ""])


def _base_encoder(record: dict) -> str:
    """The base encoder the first training run started from (the record is read through its schema:
    an `init` is the base encoder or a record)."""
    while isinstance(record.get("init"), dict) and "base" not in record["init"]:
        record = record["init"]
    if isinstance(record.get("init"), dict):
        return str(record["init"]["base"])
    return str((record.get("models") or {}).get("encoder") or "not recorded")


def _pool_rows(settings: Settings, model_dir: Path, name: str) -> str:
    """The rows of a task's pool: the copy the model folder carries, else the project's prepared split."""
    carried = Paths.model_pool(model_dir, name)
    if carried.is_file():
        return str(len(read_parquet_checked(carried, "pool", ["id"], fix="run `udr index` again")))
    meta_path = settings.paths.prepared_dir(name) / "meta.json"
    again = f"run `udr prepare --task {name}` again"
    counts = read_model(meta_path, PreparedMeta, "prepared data metadata", again).counts if meta_path.is_file() else {}
    kept = counts["train"].kept if "train" in counts else None
    return "?" if kept is None else str(kept)


def card_tasks(settings: Settings, model_dir: Path, names: list[str] | None = None) -> dict:
    """{name: Task} the card and the export's prompts describe: `names` (as the model folder or the project
    declares them), else the tasks whose pools the model folder carries (`udr index`), else the project's."""
    from udr.serving.pools import model_pool_tasks, model_tasks

    carried = model_tasks(model_dir)
    if names:
        return {n: carried[n] if n in carried else settings.task(n) for n in dict.fromkeys(names)}
    pooled = model_pool_tasks(model_dir)
    if pooled:
        return {n: carried[n] if n in carried else settings.task(n) for n in pooled}
    return carried or {n: settings.task(n) for n in settings.prepared_task_names()}


def _task_rows(settings: Settings, model_dir: Path, tasks: dict, record: dict | None) -> list[str]:
    """The table of tasks: those the export carries, then any the model was trained on that it does not
    carry (an initial model's tasks, say), each with its role: trained on (in this training, or inherited
    from the model training started from), or served only."""
    trained = trained_tasks(record) if record else {}
    split = len(trainings(record)) > 1 if record else False
    own = _queries(trainings(record)[-1]) if record else {}
    rows = [
        "| task | role | kind | instruction | template | pool (rows) | source |",
        "| --- | --- | --- | --- | --- | ---: | --- |",
    ]
    for name in [*tasks, *(t for t in trained if t not in tasks)]:
        if record is None:
            role = "in the project (training not recorded)"
        elif name in trained:
            where = (", this training" if name in own else ", inherited") if split else ""
            role = f"trained on ({trained[name]} scored queries{where})"
        else:
            role = "served, never trained on"
        task = tasks.get(name) or settings.registry.get(name)
        if task is None:
            rows.append(f"| {name} | {role} | ? | ? | ? | not carried | not declared in this project |")
            continue
        template = task.template.replace("\t", "\\t")
        pool = _pool_rows(settings, model_dir, name) if name in tasks else "not carried"
        rows.append(
            f"| {name} | {role} | {task.kind} | `{task.instruction}` | `{template}` | {pool} | "
            f"{task.source.describe()} |"
        )
    return rows


def _examples(settings: Settings, model_dir: Path, task: str) -> list[tuple[str, str]]:
    """Two (input, target) rows of a task's pool, for the usage snippets."""
    text = {"input": "text", "target": "text"}
    for path in (Paths.model_pool(model_dir, task), settings.paths.prepared(task, "train")):
        if path.is_file():
            frame = read_parquet_checked(path, "pool", list(text), kinds=text, non_null=list(text))
            rows = frame.head(2).to_dicts()
            return [(r["input"], r["target"]) for r in rows] * (2 if len(rows) == 1 else 1)
    return [("a query", "an answer"), ("a demonstration", "its answer")]


def trainings(record: dict) -> list[list[dict]]:
    """The trainings behind a model, first to last, each its runs (records without their `init`) first to
    last. A run continues the training of the run before it where it is that run's next round, of the same
    method from the same params file; otherwise it started a new training from that run's model (`udr train
    --init`, e.g. the shipped model trained further on a new task), whose training is then inherited."""
    out: list[list[dict]] = []
    for run in rounds(record):
        last = out[-1][-1] if out else None
        if last is not None and (
            run.get("method") == last.get("method")
            and run.get("params_file") == last.get("params_file")
            and run.get("round") == last.get("round", -2) + 1
        ):
            out[-1].append(run)
        else:
            out.append([run])
    return out


def _queries(runs: list[dict]) -> dict[str, int]:
    """{task: scored queries} of a training's runs, the latest run's counts first."""
    out: dict[str, int] = {}
    for run in reversed(runs):
        for task, n in (run.get("tasks") or {}).items():
            out.setdefault(task, n)
    return out


def _run_line(run: TrainingRun, label: str) -> str:
    from udr.retriever.recipes import RECIPES, Recipe

    t = run.train
    what = "the EPR baseline" if run.method == "epr" else f"round {run.round}"
    weights, lists = RECIPES.get(t.loss, Recipe).describe(t)  # a loss this version lacks: the recipes' words
    return (
        f"{label}{what}** (from `{run.params_file}`): {run.steps} steps, loss "
        f"{run.loss.start:.3f} -> {run.loss.end:.3f}; loss `{t.loss}` ({weights}), {lists}"
        + ("" if t.feedback == "lm" else f", feedback `{t.feedback}`")
        + f", batch {t.batch_size}, lr {t.lr}, seed {run.seed}"
        + ("; E_d frozen (only E_q learned)." if t.freeze_demo_encoder else ".")
    )


def _feedback(runs: list[TrainingRun]) -> str:
    last = runs[-1]
    queries = ", ".join(f"{t} {n}" for t, n in _queries([r.model_dump() for r in runs]).items())
    return (
        f"`{last.models.lm}` scored {last.candidates.k} candidates per train query; scored queries per task: {queries}."
    )


def _typed(runs: list[dict], model_dir: Path) -> list[TrainingRun]:
    """A training's runs, each with every field the card states of it (the last one's feedback too), else
    a one-line UdrError naming the record."""
    from udr.retriever.record import record_path

    path = record_path(model_dir)
    *first, last = runs
    return [
        *(model_from(TrainingRun, run, path, "model record", AGAIN) for run in first),
        model_from(LastTrainingRun, last, path, "model record", AGAIN),
    ]


def _model_lines(record: dict | None, encoder, model_dir: Path) -> list[str]:
    head = f"({encoder.pooling} pooling, {encoder.similarity} similarity); " + (
        "one encoder for queries and demonstrations."
        if encoder.shared
        else "two copies, one for queries (E_q) and one for demonstrations (E_d), as a sentence-transformers `Router`."
    )
    if record is None:
        return [
            f"- **Base encoder**: `{encoder.base or 'not recorded'}` {head}",
            "- **Training**: not recorded in the model folder (no udr_record.json: a model made by an older udr "
            "or by hand), so the tasks below are those of the project it was exported from.",
        ]
    lines = [f"- **Base encoder**: `{_base_encoder(record)}` {head}"]
    mix = record.get("interpolation")
    if isinstance(mix, dict):  # `udr interpolate`: the trainings below, mixed back toward the initial weights
        lines.append(
            f"- **Weights**: the trained model below interpolated with its initial encoder (WiSE-FT), alpha "
            f"{mix.get('alpha')} (1: the trained weights, 0: the initial ones)."
        )
    *inherited, own = (_typed(runs, model_dir) for runs in trainings(record))
    if not inherited:
        lines.append(f"- **Feedback LM**: {_feedback(own)}")
        return [*lines, *(_run_line(run, "- **Training, ") for run in own)]
    for i, runs in enumerate(inherited):
        which = f" {i + 1} of {len(inherited)}" if len(inherited) > 1 else ""
        lines.append(
            f"- **Inherited training{which}** (the model training started from, as its record says): "
            f"feedback LM {_feedback(runs)}"
        )
        lines += [_run_line(run, "  - **") for run in runs]
    lines.append(
        f"- **This training** (started from the model above, with `udr train --init`): feedback LM {_feedback(own)}"
    )
    return [*lines, *(_run_line(run, "  - **") for run in own)]


def _saved_evaluations(settings: Settings) -> list[tuple[str, str]]:
    """(name, split) of every evaluation the project holds: the methods' and `udr evaluate --save-as`
    names', on test (metrics/NAME/) and validation (metrics/validation/NAME/), the methods first."""
    from udr.config import METHODS
    from udr.evaluation.saved_names import RESERVED_NAMES

    out = []
    for split in ("test", "validation"):
        folder = settings.paths.method_metrics("x", "x", split).parent.parent
        names = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
        ordered = [m for m in ("udr", "epr") if m in names] + [
            n for n in names if n not in ("udr", "epr") and n not in RESERVED_NAMES and n not in METHODS
        ]
        out += [(name, split) for name in ordered]
    return out


def _read_result(path: Path) -> dict:
    """A saved evaluation's result (:class:`udr.util.schemas.EvaluationResult`), or {} where it is missing
    or unreadable (not this model's then)."""
    try:
        return read_model(path, EvaluationResult, "result").model_dump(exclude_none=True)
    except UdrError:
        return {}


def _results(settings: Settings, model_dir: Path, tasks: dict) -> list[str]:
    """The evaluations the project holds of this very model (their results name its fingerprint), the
    pipeline's and those saved under a name (`udr evaluate --save-as`): the whole results.md where every
    UDR result is this model's, else a table of its own results."""
    from udr.retriever.index import model_fingerprint

    fingerprint = model_fingerprint(model_dir)
    own = []
    for method, split in _saved_evaluations(settings):
        for name in tasks:
            result = _read_result(settings.paths.method_metrics(method, name, split))
            if result.get("model") == fingerprint:
                own.append((name, method if split == "test" else f"{method} ({split})", result))
    udr_all = all(
        _read_result(settings.paths.method_metrics("udr", name)).get("model") == fingerprint for name in tasks
    )
    results = settings.paths.results
    if own and udr_all and results.is_file():
        text = results.read_text().replace("# In-context learning results", "").replace("# Unseen tasks", "### Unseen")
        return [text.replace("\n## ", "\n### ").strip(), ""]
    if own:
        rows = ["| task | evaluated as | metric | n | score |", "| --- | --- | --- | ---: | ---: |"]
        for name, method, r in own:
            rows.append(f"| {name} | {method} | {r['metric']} | {r['n']} | {r['score']:.1f} |")
        return [*rows, ""]
    return [
        "No evaluation of this model was found in the project it was exported from (no result in metrics/ names "
        "its fingerprint): evaluate it with `udr evaluate -m udr --model DIR --save-as NAME`.",
        "",
    ]


def model_card(settings: Settings, model_dir: Path, where: str, tasks: dict | None = None) -> str:
    """The README.md of an export of the bi-encoder at `model_dir`, written from the model's own record
    (what it was trained on and how), the pools it carries and the project's evaluations of this very
    model; `where` is how its usage snippets name the export (a path or a hub id)."""
    from udr.retriever.encoder import BiEncoder

    encoder = BiEncoder.load_settings(model_dir)
    record = read_record(model_dir)
    tasks = tasks or card_tasks(settings, model_dir)
    first = next(iter(tasks))
    first_task = tasks[first]
    example = _examples(settings, model_dir, first)
    lm = ((record or {}).get("models") or {}).get("lm") or "the project's LM"
    lines = [
        _yaml_front_matter(_base_encoder(record) if record else encoder.base),
        "# UDR demonstration retriever",
        "",
        "A Unified Demonstration Retriever ([Li et al., 2023](https://arxiv.org/abs/2305.04320)) trained with "
        "udr: one bi-encoder that retrieves in-context demonstrations for many tasks, "
        "trained on a language model's own feedback (which candidate demonstrations raise the likelihood of "
        "the gold answer), with a list-wise rank loss and an in-batch loss.",
        "",
        "## Model",
        "",
        *_model_lines(record, encoder, model_dir),
        f"- **Inputs**: queries up to {encoder.max_query_length} tokens, demonstrations up to "
        f"{encoder.max_demo_length}. A demonstration is rendered with its task's template and read after "
        "the task instruction"
        + (
            "; so is a query."
            if encoder.instruction and encoder.query_instruction
            else "; queries are read bare (no prompt_name on queries)."
        ),
        "",
        "## Tasks and data",
        "",
        *_task_rows(settings, model_dir, tasks, record),
        "",
        "## Results",
        "",
        *_results(settings, model_dir, tasks),
        "## Limitations",
        "",
        "- Small test sets: read differences through the paired bootstrap intervals above, not the point "
        "estimates; a difference is real only where its interval clears 0 by the claim margin (bold).",
        f"- The feedback came from one small LM (`{lm}`); what it rewards (often a "
        "demonstration sharing the query's label) may not carry over to other LMs.",
        "- Retrieval is within one task's pool; give each task's demonstrations with that task's "
        "instruction (prompt) and template, as above.",
        "- Trained on the tasks marked above only; other tasks are out of its training distribution.",
        "",
        "## Usage",
        "",
        USAGE.format(
            where=json.dumps(where, ensure_ascii=False),  # a Python string literal, whatever `--name` holds
            task=first,
            query=example[0][0],
            demo=first_task.render(*example[1]).replace("\t", "\\t").replace('"', '\\"'),
            demo_input=example[1][0],
            demo_output=example[1][1],
            instruction=first_task.instruction,
        ),
        "",
    ]
    return "\n".join(lines)
