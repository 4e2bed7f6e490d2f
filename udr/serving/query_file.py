"""Batch retrieval for `udr retrieve --input`: a JSON-lines file of queries in, one result line out
per query, in input order.

An input line is an object with a ``"query"`` string and, optionally, a ``"task"`` (default: the
command's --task). An output line is the input object plus ``"task"``, ``"demonstrations"`` (a
list of {pool_id, input, output, similarity}, most similar first) and, when asked, ``"prompt"``.

Imports of udr.data.sources (numpy) are inside the functions that use them, to keep `from udr import Retriever` and
`udr retrieve` light.
"""

from __future__ import annotations

import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from udr.errors import UdrError
from udr.serving.api import check_query
from udr.util.progress import progress_bar


@dataclass(frozen=True)
class QueryLine:
    where: str  # file:line (1-based)
    record: dict
    query: str
    task: str | None


STDIN = "-"  # the --input that reads the queries from standard input


def read_queries(path: Path, default_task: str | None) -> list[QueryLine]:
    """The queries of a JSON-lines file (`-`: standard input); a malformed line fails with file:line."""
    from udr.data.sources import check_utf8_head, parse_jsonl, read_jsonl

    path = Path(path)
    if str(path) == STDIN:
        data, path = sys.stdin.buffer.read(), "<stdin>"
        check_utf8_head(data, path)
        records = parse_jsonl(io.BytesIO(data), path)
    elif path.is_dir():
        raise UdrError(f"query file {path} is a folder: give a JSON-lines file, or - for standard input")
    elif not path.is_file():
        raise UdrError(f"query file not found: {path}")
    else:
        records = read_jsonl(path)
    lines = []
    for lineno, record in records:
        where = f"{path}:{lineno + 1}"
        if "query" not in record:
            raise UdrError(f'{where}: malformed query line: expected an object with a "query" string')
        check_query(record["query"], f"query at {where}")
        task = record.get("task", default_task)
        if task is not None and not isinstance(task, str):
            raise UdrError(f'{where}: malformed query line: "task" must be a string')
        lines.append(QueryLine(where, record, record["query"], task))
    if not lines:
        raise UdrError(f"{path}: no queries (the file is empty)")
    return lines


def retrieve_lines(
    retriever,
    lines: list[QueryLine],
    k: int,
    *,
    prompt: bool = False,
    progress: bool = False,
    diversity: float = 0.0,
    filter: dict | None = None,
    **label_options,
) -> list[str]:
    """One JSON result line per query line, in input order; queries of a task are embedded together. filter:
    every query's metadata filter (:mod:`udr.serving.filters`); `label_options`: label-aware selection's
    (`Retriever.retrieve_batch`'s label_weight, label_votes, per_label)."""
    for line in lines:  # the result fields would silently replace the user's own
        for field in ("demonstrations", "prompt") if prompt else ("demonstrations",):
            if field in line.record:
                raise UdrError(f"{line.where}: the query line has a field '{field}', where results go: rename it")
    by_task: dict[str | None, list[int]] = {}
    for i, line in enumerate(lines):
        by_task.setdefault(line.task, []).append(i)
    out: list[str | None] = [None] * len(lines)
    step = retriever.batch_size
    with progress_bar(progress) as bar:
        job = bar.add_task("retrieving", total=len(lines))
        for task, members in by_task.items():
            for lo in range(0, len(members), step):
                chunk = members[lo : lo + step]
                try:
                    queries = [lines[i].query for i in chunk]
                    results = retriever.retrieve_batch(
                        queries, task=task, k=k, diversity=diversity, filter=filter, **label_options
                    )
                except UdrError as exc:
                    raise UdrError(f"{lines[chunk[0]].where}: {exc}") from None
                for i, demos in zip(chunk, results):
                    record = {
                        **lines[i].record,
                        "task": retriever.resolve_task(task),
                        "demonstrations": [d.to_dict() for d in demos],
                    }
                    if prompt:
                        record["prompt"] = retriever.prompt(lines[i].query, demos, task=task)
                    out[i] = json.dumps(record, ensure_ascii=False)
                bar.update(job, advance=len(chunk))
    return [line for line in out if line is not None]
