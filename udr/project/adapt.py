"""`udr adapt`'s decisions: from a user's labelled file to the best demonstration retriever for their task,
with the evidence. Its run (:mod:`udr.workflows.adapt`) takes a workspace (:mod:`udr.project.workspace`)
through a short sequence of named steps, each one of the project's own stages run inside it, so the default
pipeline is left as it is:

1. plan: the work and its time, from this project's recorded rates (:func:`plan_adaptation`), cut to the budget;
2. feedback: BM25 candidates and the LM's scores of `queries` of the task's train rows;
3. adapt: UDR trained on that feedback from the project's UDR (`models/final`);
4. validate: every candidate retriever (:func:`candidates`: with label-aware selection on top of SBERT and the
   adapted UDR where the answers are labels) on the validation rows, paired with SBERT;
5. choose: the retriever recommended (:func:`recommend`), decided on validation only;
6. test: the recommended retriever and the baselines on the test rows, once;
7. export: the winner, ready for `udr retrieve`, Python, LangChain and DSPy.

A finished run records its workspace in the project (:func:`record_workspace`), so that serving the task by name
there follows the recommendation (:func:`adapted_task`).

Each step, as it finishes, is recorded in the workspace with the request's fingerprint (:class:`StepRecord`),
so the same command run again resumes a stopped run, its finished steps skipped.

Imports of transformers, yaml, pydantic, udr.config, udr.data, udr.serving, udr.project.saved_evaluations and
udr.util (schemas, safe_yaml) are inside the functions that use them, to keep the start of `udr` light.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

from udr.errors import UdrError
from udr.evaluation.claims import CLAIM_MARGIN
from udr.paths import LABELS_SUFFIX
from udr.project.workspace import WorkspaceRequest
from udr.util.files import file_sha256, read_json_object, remove, shown_path, write_text_atomic

if TYPE_CHECKING:
    import polars as pl

    from udr.config import Settings

# The retrievers compared on validation, each with the saved name it is evaluated under. `adapted` is
# UDR trained on the task's own feedback; `udr` and `epr` are the project's models, never trained on it.
# EPR is trained per task (models/epr/<task>): the project has none of a new task, so it is not a candidate.
CANDIDATES = ("random", "bm25", "sbert", "udr", "adapted")
ADAPTED = "adapted"
# Label-aware selection (:mod:`udr.retriever.label_selection`, the workspace's `evaluate.labels`) on top of SBERT
# and of the adapted UDR: candidates too where the task's answers are labels (a classification task). Each name
# is the saved evaluation's, mapped to the retriever it selects from.
LABELLED = {"sbert-labels": "sbert", "adapted-labels": ADAPTED}


def candidates(kind: str) -> tuple[str, ...]:
    """The retrievers compared on a task of `kind`: :data:`CANDIDATES`, and the label-aware ones
    (:data:`LABELLED`) on a classification task."""
    return (*CANDIDATES, *LABELLED) if kind == "classification" else CANDIDATES


# The retriever a recommendation has to beat, resolved, on validation: the general encoder, no training.
REFERENCE = "sbert"
# Scored queries are never cut below this by a minutes budget: fewer do not train (notebook: feedback curve).
MIN_QUERIES = 64
REPORT_NAME = "adapt.json"
WORKSPACES = "workspaces"  # the project's folder of workspaces: workspaces/NAME is a run's default --dir
# In it, .adapted/NAME.json: the workspace the last finished run of NAME used (its --dir). A task name starts
# with a letter or digit, so no workspace is called so.
WORKSPACE_RECORDS = ".adapted"


def default_workspace(root: Path, name: str) -> Path:
    """The workspace a run of task `name` uses without --dir: the project's workspaces/NAME."""
    return Path(root) / WORKSPACES / name


def adapted_model(settings: Settings) -> Path:
    """The folder of the UDR a run adapts to the task: the workspace's `models/adapted`."""
    return settings.root / "models" / ADAPTED


@dataclass(frozen=True)
class Rates:
    """This project's recorded speeds: LM scoring tokens/s, evaluation seconds per prompt token, training
    seconds per step, and the machine they were measured on."""

    score_tokens_per_s: float
    eval_seconds_per_token: float
    train_seconds_per_step: float
    machine: str


@dataclass(frozen=True)
class Plan:
    """The work of one `udr adapt` and its estimated seconds per step."""

    queries: int
    pairs: int
    train_steps: int
    validation_rows: int
    test_rows: int
    test_methods: tuple[str, ...]
    seconds: dict[str, float] = field(default_factory=dict)
    machine: str = ""
    validated: int = len(CANDIDATES)  # the retrievers compared on validation

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())

    def describe(self) -> str:
        minutes = self.total_seconds / 60
        parts = ", ".join(f"{k} {v / 60:.1f}" for k, v in self.seconds.items())
        return (
            f"plan: score {self.queries} queries ({self.pairs} pairs), train {self.train_steps} steps, evaluate "
            f"{self.validated} retrievers on {self.validation_rows} validation rows and {len(self.test_methods)} "
            f"on {self.test_rows} test rows: about {minutes:.0f} minutes, an estimate, not a bound ({parts}; at "
            f"the rates this project recorded on {self.machine or 'an unknown machine'}, model loading left out)"
        )

    @classmethod
    def from_dict(cls, data: dict) -> Plan:
        """The plan a run recorded (``asdict``) back as a Plan."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        return cls(**{**values, "test_methods": tuple(values.get("test_methods", ()))})


def recorded_rates(project_settings: Settings) -> Rates:
    """The project's speeds from its own stage reports (`metrics/score/round0/*.json`, the methods' results,
    `metrics/train/round0/summary.json`); a project that has not run its pipeline is a one-line error."""
    from udr.util.schemas import EvaluationResult, ScoreReport, TrainReport, read_model

    paths = project_settings.paths
    score_files = sorted(paths.score_report(0, t) for t in project_settings.task_names())
    scored = []
    for path in (p for p in score_files if p.is_file()):
        report = read_model(path, ScoreReport, "score report", "run `udr score`")
        if report.scored and (report.tokens is None or report.seconds is None):
            raise UdrError(f"score report {path} records no tokens or seconds (an older udr's): run `udr score` again")
        scored.append(report)
    results = [
        read_model(paths.method_metrics(m, t, "test"), EvaluationResult, "result", "run `udr evaluate`")
        for m in ("random", "bm25", "sbert")
        for t in project_settings.evaluation_tasks()
        if paths.method_metrics(m, t, "test").is_file()
    ]
    results = [r for r in results if r.kind != "generation" and r.prompt_tokens_mean and r.seconds is not None]
    scored = [r for r in scored if r.scored]
    train = paths.train_log("round0") / "summary.json"
    if not scored or not results or not train.is_file():
        raise UdrError(
            "udr adapt estimates its time from this project's own runs: run `make run` (or `dvc repro`) first"
        )
    trained = read_model(train, TrainReport, "training summary", "run `udr train`")
    tokens = sum(r.tokens for r in scored)
    seconds = sum(r.seconds for r in scored)
    prompt_tokens = sum(r.n * r.prompt_tokens_mean for r in results)
    return Rates(
        score_tokens_per_s=tokens / seconds if seconds else 1000.0,
        eval_seconds_per_token=sum(r.seconds for r in results) / prompt_tokens if prompt_tokens else 0.0,
        train_seconds_per_step=trained.seconds / max(trained.steps, 1),
        machine=results[0].machine,
    )


def plan_adaptation(
    rates: Rates,
    *,
    row_tokens: float,
    choice_tokens: float = 0.0,
    pool_rows: int,
    validation_rows: int,
    test_rows: int,
    queries: int,
    candidates: int,
    max_demos: int,
    context: int,
    batch_size: int,
    epochs: int,
    test_methods: Sequence[str],
    minutes: float | None = None,
    validated: int = len(CANDIDATES),
) -> Plan:
    """The work of a run and its seconds per step; with `minutes`, the scored queries cut (not below
    :data:`MIN_QUERIES`) until the estimate fits, a one-line error where the evaluations alone do not.
    `row_tokens`: the mean tokens of one demonstration (input and answer) with the LM's tokenizer;
    `choice_tokens`: the tokens of every answer choice together (:func:`pool_tokens`), which the scorer and
    the evaluation run after each prompt; `validated`: the retrievers compared on validation."""
    prompt_tokens = min(context, (max_demos + 1) * row_tokens) + choice_tokens
    evaluations = (validated * validation_rows + len(test_methods) * test_rows) * prompt_tokens
    fixed = {"evaluate": evaluations * rates.eval_seconds_per_token}

    def plan(q: int) -> Plan:
        q = min(q, pool_rows)
        pairs = q * min(candidates, max(pool_rows - 1, 0))
        steps = max(1, int(-(-q * epochs // batch_size)))
        seconds = {
            "score": pairs * (2 * row_tokens + choice_tokens) / rates.score_tokens_per_s,
            "train": steps * rates.train_seconds_per_step,
            **fixed,
        }
        return Plan(q, pairs, steps, validation_rows, test_rows, tuple(test_methods), seconds, rates.machine, validated)

    chosen = plan(queries)
    if minutes is None or chosen.total_seconds <= minutes * 60:
        return chosen
    if fixed["evaluate"] > minutes * 60:
        raise UdrError(
            f"--minutes {minutes:g}: the evaluations alone take about {fixed['evaluate'] / 60:.0f} minutes here; "
            "give fewer --validation rows, a smaller test file, or more minutes"
        )
    room = minutes * 60 - fixed["evaluate"] - plan(0).seconds["train"]
    per_query = (plan(queries).seconds["score"] + plan(queries).seconds["train"] - plan(0).seconds["train"]) / max(
        chosen.queries, 1
    )
    fitted = max(MIN_QUERIES, int(room / per_query)) if per_query > 0 else queries
    return plan(min(queries, fitted))


@dataclass(frozen=True)
class Choice:
    """The retriever recommended on validation and why."""

    method: str
    reason: str


def recommend(rows: Sequence[dict]) -> Choice:
    """The recommended retriever from the validation rows of :func:`comparison_rows` (each method's score, n
    and paired interval against :data:`REFERENCE`): the best-scoring one (random is never recommended),
    where its interval against SBERT is resolved above zero (clear of it by the claim margin); SBERT otherwise,
    the general encoder, as no
    other retriever is shown to be better on these rows."""
    ranked = sorted((r for r in rows if r["method"] != "random"), key=lambda r: r["score"], reverse=True)
    if not ranked:
        raise UdrError("nothing to recommend: no retriever was evaluated")
    best, n = ranked[0]["method"], ranked[0]["n"]
    if best == REFERENCE:
        return Choice(REFERENCE, f"SBERT scores highest on the {n} validation rows")
    interval = ranked[0]["versus_sbert"]
    shown = f"{best} − sbert {interval['difference']:+.1f} [{interval['low']:+.1f}, {interval['high']:+.1f}]"
    if interval["low"] >= CLAIM_MARGIN:  # resolved above SBERT: clear of 0 by the claim margin
        return Choice(best, f"{best} is resolved above SBERT on the {n} validation rows ({shown})")
    return Choice(
        REFERENCE,
        f"no retriever is resolved above SBERT on the {n} validation rows (best: {shown}); "
        "SBERT needs no training and keeps its generality",
    )


@dataclass
class Outcome:
    """What a run found: the plan, validation and test tables (rows of method, score, interval against
    SBERT), the choice, the export, and the seconds each step took."""

    task: str
    metric: str
    plan: dict
    validation: list[dict]
    choice: dict
    test: list[dict]
    export: str | None
    seconds: dict[str, float]
    labels: dict | None = None  # a label-aware winner's `evaluate.labels`, which serving applies

    def markdown(self) -> str:
        lines = [f"## udr adapt: {self.task} ({self.metric})", ""]
        for title, rows in (("validation", self.validation), ("test", self.test)):
            if not rows:
                continue
            n = rows[0]["n"]
            shares = any(r.get("label_share") is not None for r in rows)  # a task whose answers are labels
            lines += [f"**{title}** ({n} rows; paired 95% intervals against SBERT)", ""]
            if shares:
                lines += ["| retriever | score | label share | − sbert |", "| --- | ---: | ---: | ---: |"]
            else:
                lines += ["| retriever | score | − sbert |", "| --- | ---: | ---: |"]
            for r in rows:
                diff = r.get("versus_sbert")
                shown = "" if diff is None else f"{diff['difference']:+.1f} [{diff['low']:+.1f}, {diff['high']:+.1f}]"
                mark = " ← recommended" if r["method"] == self.choice["method"] else ""
                share = r.get("label_share")
                share_cell = [f"{share:.2f}" if share is not None else ""] if shares else []
                lines.append(" | ".join([f"| {r['method']}{mark}", f"{r['score']:.1f}", *share_cell, shown]) + " |")
            lines.append("")
        lines.append(f"Recommended: **{self.choice['method']}**: {self.choice['reason']}.")
        if self.labels:
            lines.append(f"Label-aware selection, served by default: {selection_text(self.labels)}.")
        if self.export:
            lines.append(f"Exported to {self.export}.")
        return "\n".join(lines) + "\n"


def evaluated_method(candidate: str) -> str:
    """The `udr evaluate` method a candidate is evaluated as: the adapted UDR is `udr` (with `--model` its
    folder), a LABELLED candidate its retriever's `METHOD+labels`, any other its own name."""
    base = LABELLED.get(candidate, candidate)
    return ("udr" if base == ADAPTED else base) + (LABELS_SUFFIX if candidate in LABELLED else "")


def selection_of(settings: Settings, candidate: str) -> dict:
    """The label-aware selection a LABELLED candidate is evaluated and served with: its evaluated method's
    (`evaluate.label_settings`: SBERT's own for sbert-labels, UDR's for adapted-labels)."""
    return settings.evaluate.label_settings(evaluated_method(candidate)).model_dump()


def selection_text(labels: dict) -> str:
    """`evaluate.labels` in words: "γ 3, 16 votes, no per-label quota"."""
    quota = labels.get("per_label")
    quota_text = "no per-label quota" if quota is None else f"per-label quota {quota}"
    return f"γ {labels['weight']:g}, {labels['votes']} votes, {quota_text}"


def comparison_rows(settings: Settings, task: str, methods: Sequence[str], split: str) -> list[dict]:
    """One row per method: its saved score on `split`, n, its label share (None where the task's answers are
    not labels), and its paired bootstrap interval against SBERT
    (a dict; None for SBERT itself), each result and prediction file read once."""
    from udr.project.saved_evaluations import compare_saved, saved_results

    results = {m: saved_results(settings, m, [task], split) for m in dict.fromkeys([*methods, REFERENCE])}
    pairs = [(m, REFERENCE) for m in methods if m != REFERENCE]
    versus = compare_saved(settings, results, pairs, split) if pairs else {}
    return [
        {
            "method": m,
            "score": results[m][task]["score"],
            "n": results[m][task]["n"],
            # the share of retrieved demonstrations whose answer is the query's gold label (label tasks)
            "label_share": results[m][task].get("label_share"),
            "versus_sbert": versus[m, REFERENCE].per_task[task].to_dict() if m != REFERENCE else None,
        }
        for m in methods
    ]


def write_outcome(folder: Path, outcome: Outcome) -> tuple[Path, Path]:
    """`metrics/adapt.json` and `metrics/adapt.md` in the workspace, each written beside and renamed."""
    out = folder / "metrics"
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / REPORT_NAME, json.dumps(asdict(outcome), indent=2) + "\n")
    write_text_atomic(out / "adapt.md", outcome.markdown())
    return out / REPORT_NAME, out / "adapt.md"


class Steps:
    """Times named steps and reports each as it ends (`say`: where one-line progress goes); with a `record`,
    each finished step is written to it, and a step it holds already (a run resumed) is skipped."""

    def __init__(self, say: Callable[[str], None], record: StepRecord | None = None):
        self.say = say
        self.record = record
        self.seconds: dict[str, float] = {}

    def run(self, name: str, fn: Callable, *args, **kwargs) -> None:
        """Run step `name` (`fn(*args, **kwargs)`) unless the record holds it done."""

        def step() -> None:  # its value is not kept
            fn(*args, **kwargs)

        self.kept(name, step)

    def kept(self, name: str, fn: Callable[[], str | dict | None]) -> str | dict | None:
        """Run step `name`, whose value (a text, or a mapping of JSON values) the record keeps: a resumed
        run gets it from there."""
        if self.record is not None and name in self.record.done:
            done = self.record.done[name]
            self.seconds[name] = done["seconds"]
            self.say(f"{name}: done before, skipped")
            return done.get("value")
        start = time.perf_counter()
        value = fn()
        self.seconds[name] = round(time.perf_counter() - start, 1)
        if self.record is not None:
            self.record.finish(name, self.seconds[name], value)
        self.say(f"{name}: done in {self.seconds[name] / 60:.1f} min")
        return value


STEPS_NAME = "adapt-steps.json"  # in a workspace `udr adapt` made: its request and the steps it finished
# The request's fields as the command's options name them (in the line refusing another request).
OPTIONS = {
    "name": "NAME",
    "source": "--from",
    "test": "--test",
    "input_column": "--input",
    "label_column": "--label",
    "instruction": "--instruction",
    "metric": "--metric",
    "validation": "--validation",
    "queries": "--queries",
    "minutes": "--minutes",
    "max_train": "--max-train",
    "max_test": "--max-test",
    "export": "--export",
    "test_all": "--test-all",
}


def request_fingerprint(request: AdaptRequest) -> dict[str, str | None]:
    """What decides a run's work and results: every option but the workspace (`--from` and `--test` by
    their bytes, `--export` resolved), each as text."""
    out: dict[str, str | None] = {}
    for name in OPTIONS:
        value = getattr(request, name)
        if value is not None and name in ("source", "test"):
            if not Path(value).is_file():
                what = "is a folder, not a data file" if Path(value).is_dir() else "does not exist"
                raise UdrError(f"{OPTIONS[name]} {value} {what}: give a CSV, TSV, JSON-lines or parquet file")
            value = f"sha256:{file_sha256(value)}"
        elif value is not None and name == "export":
            value = Path(value).resolve()
        out[name] = None if value is None else str(value)
    return out


@dataclass
class StepRecord:
    """`udr adapt`'s record in its workspace (:data:`STEPS_NAME`): the request's fingerprint
    (:func:`request_fingerprint`) and each finished step's seconds and value, written as each step ends."""

    folder: Path
    request: dict
    done: dict[str, dict] = field(default_factory=dict)

    def text(self) -> str:
        return json.dumps({"request": self.request, "done": self.done}, indent=2) + "\n"

    def finish(self, name: str, seconds: float, value: str | dict | None) -> None:
        self.done[name] = {"seconds": seconds, **({"value": value} if value is not None else {})}
        write_text_atomic(self.folder / STEPS_NAME, self.text())

    @classmethod
    def read(cls, folder: Path) -> StepRecord | None:
        """The record in `folder`, None where it has none; an unreadable one is a one-line error."""
        path = Path(folder) / STEPS_NAME
        if not path.is_file():
            return None
        fix = "add --restart to start the run over"
        data = read_json_object(path, "udr adapt step record", fix)
        request, done = data.get("request"), data.get("done")
        steps_ok = isinstance(done, dict) and all(
            isinstance(v, dict) and isinstance(v.get("seconds"), (int, float)) for v in done.values()
        )
        if not isinstance(request, dict) or not steps_ok:
            raise UdrError(f"malformed udr adapt step record {path}: expected a request and its done steps; {fix}")
        return cls(Path(folder), request, done)


def resumed_record(folder: Path, request: dict, restart: bool, shown: str) -> StepRecord | None:
    """The step record of the run `udr adapt` resumes in the workspace `folder` (shown as `shown`), None
    where it starts one (no folder, or `restart`: the run there removed). A folder that is no udr adapt
    workspace, or one of another request, is a one-line error and stays as it is."""
    if not folder.exists():
        return None
    if not (folder / STEPS_NAME).is_file():
        raise UdrError(f"{shown} already exists and is no udr adapt run: give another --dir, or remove it first")
    if restart:
        remove(folder)
        return None
    record = StepRecord.read(folder)
    for key, value in request.items():
        if record.request.get(key) != value:
            was = record.request.get(key)
            raise UdrError(
                f"{shown} holds a udr adapt run of another request ({OPTIONS.get(key, key)} {was}, not {value}): "
                "run that command to resume it, give another --dir, or add --restart to start over"
            )
    return record


def check_project_models(project_settings: Settings) -> None:
    """A one-line UdrError, before anything is written, where the project lacks a model a run compares or
    starts from: the trained UDR (`models/final`, also the adapted UDR's start)."""
    from udr.retriever.encoder import SETTINGS_NAME

    paths = project_settings.paths
    model = paths.final_model
    if not (model / SETTINGS_NAME).is_file():
        raise UdrError(
            f"udr adapt compares and starts from UDR: this project has no {shown_path(model, project_settings.root)} "
            "(run `udr index`, or `make run`)"
        )


def pool_tokens(settings: Settings, task: str, train: pl.DataFrame, sample: int = 200) -> tuple[float, float]:
    """(row tokens, choice tokens) of `task`'s pool (`train`: its prepared train split) with the LM's
    tokenizer: the mean tokens of one demonstration (input and answer, plus 4 for its template) over the first
    `sample` pool rows, and the tokens of all of the task's answer choices together (0 for generation): a
    classification or multiple-choice prompt is scored once per choice, each choice's tokens run after it
    (with 49 labels they are most of a pair's tokens)."""
    rows = train.head(sample).to_dicts()
    tokenize = _lm_tokenizer(settings)
    texts = [f"{r['input']} {r['target']}" for r in rows]
    row = sum(len(ids) for ids in tokenize(texts)["input_ids"]) / max(len(texts), 1) + 4
    if settings.task(task).kind == "generation" or not rows or not rows[0]["choices"]:
        return row, 0.0
    return row, float(sum(len(ids) for ids in tokenize([f" {c}" for c in rows[0]["choices"]])["input_ids"]))


def _lm_tokenizer(settings: Settings):
    """The tokenizer of the project's LM (`udr models`), for counting tokens."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(settings.paths.base_model("lm"), trust_remote_code=False)


def default_validation(rows: int, test_given: bool, test_fraction: float) -> int:
    """Validation rows carved from the train rows when the user names none: a fifth of them, 40 to 200."""
    train = rows if test_given else int(rows * (1 - test_fraction))
    return max(40, min(200, train // 5))


def export_winner(settings: Settings, task: str, method: str, target: Path) -> str:
    """The recommended retriever written to `target`, carrying `task`'s pool (`udr retrieve -t TASK --model
    TARGET` serves it): a trained bi-encoder (adapted, udr) as a sentence-transformers export with its model
    card; SBERT as a copy of the base encoder (already a sentence-transformers model), which udr serves as the
    sbert baseline reads the pool. BM25 has no weights to export: the line says so."""
    from udr.serving.export import export_base_encoder, export_pools, export_sentence_transformers, writing_export
    from udr.serving.model_card import card_tasks, model_card

    if method in LABELLED:  # the retriever it selects from; serving applies the selection (Adapted.labels)
        labels = selection_text(selection_of(settings, method))
        shown = export_winner(settings, task, LABELLED[method], target)
        return f"{shown}; serve it with label-aware selection ({labels}), as `udr retrieve -t {task}` does"
    if method in ("bm25", "random"):
        return f"{method} has no model to export: retrieve with it through `udr evaluate -m {method}`'s own code"

    def prepared(name: str) -> Path:
        return settings.paths.prepared(name, "train")

    with writing_export(target) as out:
        if method == REFERENCE:
            base = settings.paths.base_model("encoder")
            chosen = {task: settings.task(task)}
            export_base_encoder(base, out, chosen, export_pools(base, chosen, prepared))
            return f"{target} (the base encoder, a sentence-transformers model, with the pool of {task})"
        model_dir = {
            ADAPTED: adapted_model(settings),
            "udr": settings.paths.final_model,
        }[method]
        chosen = card_tasks(settings, model_dir, [task])
        pools = export_pools(model_dir, chosen, prepared)
        card = model_card(settings, model_dir, str(target), chosen)
        export_sentence_transformers(model_dir, out, chosen, card, pools)
    return f"{target} (sentence-transformers with the pool of {task} and its model card)"


def _workspace_record(root: Path, name: str) -> Path:
    return Path(root) / WORKSPACES / WORKSPACE_RECORDS / f"{name}.json"


def record_workspace(root: Path, name: str, folder: Path) -> None:
    """Record in the project at `root` that the run of task `name` finished in the workspace `folder`."""
    record = _workspace_record(root, name)
    record.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(record, json.dumps({"workspace": str(Path(folder).resolve())}) + "\n")


@dataclass(frozen=True)
class Adapted:
    """What the finished run of a task chose: its workspace, the recommended method and where it was exported
    (a bm25 or random winner has no export)."""

    task: str
    workspace: Path
    method: str
    export: Path | None
    labels: dict | None = None  # a label-aware winner's selection settings (`evaluate.labels`)


def adapted_task(root: Path, name: str) -> Adapted | None:
    """What the last finished `udr adapt` of task `name` in the project at `root` recommended: from the workspace
    it recorded (:func:`record_workspace`), else the default one; None where neither holds a finished run. A
    report that does not read is a one-line error."""
    from udr.data.declarations import TASK_NAME

    if not isinstance(name, str) or not TASK_NAME.fullmatch(name):
        return None
    folder = default_workspace(root, name)
    record = _workspace_record(root, name)
    if record.is_file():
        recorded = read_json_object(record, "udr adapt workspace record", "run `udr adapt` again").get("workspace")
        if isinstance(recorded, str) and Path(recorded).is_dir():
            folder = Path(recorded)
    report = folder / "metrics" / REPORT_NAME
    if not report.is_file():
        return None
    outcome = read_json_object(report, "udr adapt report", "run `udr adapt` again")
    choice = outcome.get("choice")
    method = choice.get("method") if isinstance(choice, dict) else None
    if method not in (*CANDIDATES, *LABELLED):
        raise UdrError(f"malformed udr adapt report {report}: no recommended retriever; run `udr adapt` again")
    labels = None
    if method in LABELLED:
        from pydantic import ValidationError

        from udr.config import LabelSettings

        labels = outcome.get("labels")
        try:
            LabelSettings(**labels)
        except (TypeError, ValidationError):
            raise UdrError(
                f"malformed udr adapt report {report}: no label selection of {method}; run `udr adapt` again"
            ) from None
    steps = StepRecord.read(folder)
    exported = steps.request.get("export") if steps is not None else None
    export = Path(exported) if exported else folder / "export"
    has_model = method not in ("bm25", "random") and export.is_dir()
    return Adapted(name, folder, LABELLED.get(method, method), export if has_model else None, labels)


def set_workspace_params(params_file: Path, section: str, values: dict) -> None:
    """Update one section of a workspace's params file (the plan's budget), written beside and renamed, so
    that later `udr` commands there run with what this run used."""
    import yaml

    from udr.util.safe_yaml import load_yaml

    text = params_file.read_text(encoding="utf-8")
    header = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
    raw = load_yaml(text, f"params file {params_file}") or {}
    raw.setdefault(section, {}).update(values)
    write_text_atomic(params_file, header + yaml.safe_dump(raw, sort_keys=False))


@dataclass(frozen=True)
class AdaptRequest(WorkspaceRequest):
    """What the user asked `udr adapt` for (the command's options): the task and its workspace, as
    :class:`udr.project.workspace.WorkspaceRequest` has and checks them, and adapt's own options."""

    max_test: int = 300
    queries: int = 256
    minutes: float | None = None
    export: Path | None = None
    test_all: bool = False
    restart: bool = False  # start over in a workspace a run left (not part of the request's fingerprint)

    def workspace_request(self, folder: Path, validation: int) -> WorkspaceRequest:
        """The workspace this request makes in `folder`, with `validation` rows carved from the train rows."""
        shared = {f.name: getattr(self, f.name) for f in fields(WorkspaceRequest)}
        return WorkspaceRequest(**{**shared, "folder": folder, "validation": validation})
