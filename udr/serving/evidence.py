"""What a retriever says when it serves a pool or task its model was not trained on.

A UDR model is trained on a handful of tasks; on a task of another family it can retrieve worse than the
untrained base encoder (the sbert baseline). So where a :class:`udr.Retriever` serves an own pool (`add_pool`,
`from_pool`, `udr retrieve --pool`) or a task its model's record does not name, it says so once, in one line:
the tasks the model was trained on (its record, ``udr_record.json``, or an export's model card), what the
project measured on the tasks it never trained on (the "unseen" section of the `udr report` summary,
``metrics/summary.json``, where the retriever has a project) and how to check it on the user's own data.
Python gets an :class:`UntrainedTaskWarning` (a :class:`udr.util.notice.UdrNotice`: filter it as any
warning); `udr retrieve` prints it as ``udr: note: ...`` on stderr. Every name and number in it is read from
those files; a file that is missing or unreadable leaves its part out, and never stops retrieval.

Where that measurement is resolved below zero by the project's claim margin (:func:`prefers_base`: the
paired bootstrap interval of UDR − SBERT on the unseen average ends at −CLAIM_MARGIN or below), the retriever
serves such a pool with the base encoder, as the sbert baseline reads it, and the same note says so and how
to have UDR instead (`--encoder udr`, Python ``encoder="udr"``); a task the model was trained on keeps UDR
whatever the evidence.

Imports of udr.retriever.record and udr.retriever.encoder (pydantic) are inside the functions that use them, to
keep `from udr import Retriever` and `udr retrieve` light.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from udr.errors import UdrError, listed, shorten
from udr.evaluation.claims import CLAIM_MARGIN
from udr.paths import Paths
from udr.util.notice import UdrNotice
from udr.util.notice import notice as udr_notice

# The baseline the note compares with: the untrained base encoder (what serving UDR must beat), where the
# summary has it; otherwise the summary's first baseline.
BASE_METHOD = "sbert"
# The key of the summary's comparisons: "<compared method>_minus" ({baseline: {"tasks": ..., "all": interval}}).
MINUS = "_minus"
CARD = "README.md"  # an export's model card
# The card's lists of the tasks each training behind the model trained on, as udr.serving.model_card writes
# them: "...; scored queries per task: sst2 100, trec 100."; else its table rows "| sst2 | trained on (100 ...".
CARD_QUERIES = re.compile(r"scored queries per task: (.+?)\.?\s*$")
CARD_ROW = re.compile(r"^\|\s*([^|]+?)\s*\|\s*trained on \(")
# Side files the note reads: whatever goes wrong with one of them leaves its part of the note out.
UNREADABLE = (OSError, ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError, UdrError)


class UntrainedTaskWarning(UdrNotice):
    """A retriever serves a pool or task its model was not trained on (or whose training is unknown);
    the message says what the project measured on such tasks and how to check it on your data. Silence
    it with ``warnings.filterwarnings("ignore", category=UntrainedTaskWarning)``."""


@dataclass(frozen=True)
class Training:
    """The tasks a model was trained on; `tasks` None where they are unknown (`unknown` says why)."""

    tasks: tuple[str, ...] | None
    unknown: str = ""


@dataclass(frozen=True)
class Measurement:
    """The project's comparison on its unseen tasks (never trained on): `compared` (udr) against
    `baseline`, their average scores, the paired bootstrap interval of the difference, the test
    examples and tasks behind it, where it was read, and whether it measured this very model (None:
    not known)."""

    compared: str
    baseline: str
    compared_score: float
    baseline_score: float
    difference: float
    low: float
    high: float
    n: int | None
    tasks: tuple[str, ...]
    source: str
    this_model: bool | None


def model_training(model_dir: Path) -> Training:
    """What `model_dir` was trained on: its record's tasks over every round; for an export without a
    record, the tasks its model card names; otherwise unknown."""
    from udr.retriever.encoder import EXPORT_NAME
    from udr.retriever.record import RECORD_FILE, read_record, trained_tasks

    model_dir = Path(model_dir)
    try:
        record = read_record(model_dir)
        if record is not None:
            return Training(tuple(trained_tasks(record)))
    except UNREADABLE:
        return Training(None, f"its {RECORD_FILE} is unreadable")
    if not (model_dir / EXPORT_NAME).is_file():
        return Training(None, f"no {RECORD_FILE} in its folder")
    tasks = _card_tasks(model_dir / CARD)
    if tasks is None:
        return Training(None, f"the export carries no {RECORD_FILE} and its model card names none")
    return Training(tasks)


def _card_tasks(card: Path) -> tuple[str, ...] | None:
    """The tasks an export's model card says the model was trained on, or None where it says none."""
    try:
        lines = card.read_text(encoding="utf-8").splitlines() if card.is_file() else []
    except (OSError, UnicodeDecodeError):
        return None
    names: dict[str, None] = {}  # every training's line: an inherited training's tasks and this one's
    for line in lines:
        found = CARD_QUERIES.search(line)
        if found:
            names.update(
                (n, None) for n in (item.rsplit(" ", 1)[0].strip() for item in found.group(1).split(", ")) if n
            )
    if names:
        return tuple(names)
    rows = [m.group(1) for m in map(CARD_ROW.match, lines) if m]
    return tuple(rows) or None


def project_measurement(root: Path, fingerprint: Callable[[], str] | None = None) -> Measurement | None:
    """The project's measurement on the tasks its UDR was never trained on: the "unseen" section of the
    summary at `root` (metrics/summary.json, written by `udr report`), or None where there is none (or it
    is unreadable). `fingerprint`: the served model's, to tell whether the results are of this model."""
    paths = Paths(Path(root))
    path = paths.summary
    try:
        if not path.is_file():
            return None
        unseen = json.loads(path.read_text(encoding="utf-8"))["unseen"]
        key = next(k for k, v in unseen.items() if k.endswith(MINUS) and isinstance(v, dict) and v)
        compared, comparisons = key[: -len(MINUS)], unseen[key]
        baseline = BASE_METHOD if BASE_METHOD in comparisons else next(iter(comparisons))
        interval = comparisons[baseline]["all"]
        averages = unseen["averages"]
        numbers = [
            averages[compared]["all"],
            averages[baseline]["all"],
            interval["difference"],
            interval["low"],
            interval["high"],
        ]
        if not all(_finite(x) for x in numbers):
            return None
        results = unseen.get("tasks", {}).get(compared, {})
        tasks = tuple(results) or tuple(comparisons[baseline].get("tasks", {}))
        counts = [r.get("n") for r in results.values()] if isinstance(results, dict) else []
        n = sum(counts) if counts and all(isinstance(c, int) and not isinstance(c, bool) for c in counts) else None
    except (StopIteration, *UNREADABLE):
        return None
    return Measurement(
        compared,
        baseline,
        *(float(x) for x in numbers),
        n,
        tuple(str(t) for t in tasks),
        _shown(path),
        _this_model(paths, compared, tasks, fingerprint),
    )


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _this_model(paths: Paths, method: str, tasks, fingerprint: Callable[[], str] | None) -> bool | None:
    """Whether the results of `method` on `tasks` name the served model's fingerprint (None: they name none)."""
    models = set()
    for task in tasks:
        try:
            result = json.loads(paths.method_metrics(method, str(task)).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(result, dict) and isinstance(result.get("model"), str):
            models.add(result["model"])
    if not models or fingerprint is None:
        return None
    try:
        return models == {fingerprint()}
    except UNREADABLE:
        return None


def _shown(path: Path, limit: int = 80) -> str:
    """`path` as the note shows it: relative to the working directory where it lies inside it, else as it
    is; a long one keeps its end (metrics/summary.json)."""
    try:
        text = os.path.relpath(path)
        text = text if not text.startswith("..") else str(path)
    except (ValueError, OSError):  # another drive, no working directory
        text = str(path)
    return text if len(text) <= limit else "..." + text[3 - limit :]


def untrained(read_as: str | None, own: bool, training: Training) -> bool:
    """Whether a pool read as `read_as` (see :func:`untrained_note`) is one the model was not trained on (or,
    for an own pool, may not have been): what the note is said for. A pipeline task of a model whose training
    is unknown is not (the project's own tasks, most likely trained on)."""
    if training.tasks is None:
        return own
    return read_as not in training.tasks


def prefers_base(m: Measurement | None) -> bool:
    """Whether the project's own evidence says to serve untrained tasks with the base encoder: its unseen
    tasks' comparison with the base encoder (sbert) is resolved below zero by the margin the project asks of
    any claim it makes (the interval's high end at -CLAIM_MARGIN or below: CPU kinds move averages by up to
    0.3 points, so an interval ending at -0.0 on one may end above 0 on another), and it measured this model
    (or says nothing of which model it measured)."""
    return m is not None and m.baseline == BASE_METHOD and m.high <= -CLAIM_MARGIN and m.this_model is not False


# untrained_note's `base`: how the pool is served with the base encoder ("": it is not, UDR serves it).
BY_EVIDENCE, AS_ASKED = "evidence", "asked"


def untrained_note(
    name: str,
    read_as: str | None,
    own: bool,
    training: Training,
    measurement: Callable[[], Measurement | None] = lambda: None,
    base: str = "",
) -> str | None:
    """The one-line note for serving pool `name`, or None where there is nothing to say. `read_as`: the task
    it is read as (a pipeline task's own name, the task an `own` pool's rows follow, or None for an own pool
    of its own shape). None where the model was trained on `read_as`, and for a pipeline task of a model
    whose training is unknown (the project's own tasks, most likely trained on: a note on each would be noise).
    `measurement` (:func:`project_measurement`) is called only where there is a note. `base`: the pool is
    served with the base encoder, because the measurement prefers it (BY_EVIDENCE) or as the caller asked
    (AS_ASKED); "" where UDR serves it."""
    shown = f"'{shorten(name, 40)}'" + (f" (read as {shorten(read_as, 40)})" if read_as not in (None, name) else "")
    if not untrained(read_as, own, training):
        return None
    if training.tasks is None:
        head = f"this model's training tasks are unknown ({training.unknown}), so {shown} may be a task it never saw."
    elif training.tasks:
        head = f"this model was trained on {listed(training.tasks)}; {shown} is not one of them."
    else:
        head = f"this model's record names no task it was trained on; {shown} is not one of them."
    compared, baseline = "udr", BASE_METHOD
    parts = [head]
    m = measurement()
    if m is not None:
        compared, baseline = m.compared, m.baseline
        whose = "" if m.this_model is not False else f" its {m.compared.upper()} model, not this one:"
        n = f", n = {m.n}" if m.n is not None else ""
        parts.append(
            f"On tasks never trained on ({listed(m.tasks, 6)}), the project measured{whose} "
            f"{m.compared.upper()} {m.compared_score:.1f} vs {m.baseline.upper()} {m.baseline_score:.1f} "
            f"(difference {m.difference:+.1f} [{m.low:+.1f}, {m.high:+.1f}]{n}, {m.source})."
        )
    if base == BY_EVIDENCE and m is not None:
        parts.append(
            f"So it is served with the base encoder ({m.baseline}), which the project measured better on unseen "
            f"tasks: {m.compared.upper()} - {m.baseline.upper()} {m.difference:+.1f} [{m.low:+.1f}, {m.high:+.1f}]; "
            '`--encoder udr` (Python: encoder="udr") serves UDR.'
        )
    elif base:
        parts.append(f'It is served with the base encoder ({BASE_METHOD}), as asked (encoder "base").')
    else:
        parts.append("It is served with this UDR model.")
    parts.append(
        "Check on your data: udr adapt NAME --from FILE compares random, BM25, SBERT, this UDR and one adapted to "
        f"your rows, and exports the one to serve (by hand: udr init-task, then udr evaluate -m {baseline}, "
        f"udr evaluate -m {compared} [--model DIR] and udr exp compare {compared} {baseline} in its workspace)."
    )
    return " ".join(" ".join(p.split()) for p in parts)  # one line, whatever a name or path holds


def notice(message: str) -> None:
    """Say `message` as an :class:`UntrainedTaskWarning` (:func:`udr.util.notice.notice`), each time it is
    called (the caller says it once)."""
    udr_notice(message, UntrainedTaskWarning)
