"""Rewrite scores summaries written before scores files carried a manifest into manifests.

Usage (in a project, after `udr models`, `udr prepare` and `udr candidates`):

    python tools/migrate_score_manifests.py [--params params.yaml] [--dir data/scores/round0] [--report-dir DIR]

For each `<task>.json` summary beside a `<task>.parquet` in `--dir` (default: every data/scores/round<N>/
and the shipped feedback folder, `score.shipped`), the summary's checksum must match the file and its
inputs hash must equal the hash of this project's inputs for those pairs (in the current format or one
of the two older ones); the scored queries must be the seeded choice of their number. The manifest
(:class:`udr.feedback.scores_file.ScoresManifest`) then replaces the summary, and the summary's run
figures (time, throughput, the shipped check) go to the report (`metrics/score/round<N>/<task>.json`, or
`--report-dir`; the shipped folder's: metrics/feedback/shipped-round0/). Anything that does not match
is left as it was, and named.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path

import numpy as np

from udr.errors import UdrError, quoted


def legacy_hashes(settings, work, inputs: dict) -> set[str]:
    """The inputs hash as udr wrote it before manifests: the current form, with the LM's whole record, and
    with the candidates file's hash as well."""
    from udr.feedback.scores_file import inputs_hash
    from udr.lm.loading import read_provenance
    from udr.util.files import file_sha256

    whole = {**inputs, "lm": read_provenance(settings.paths.base_model("lm"))}
    with_candidates = {**whole, "candidates": file_sha256(work.candidates_file)}
    return {inputs_hash(inputs), inputs_hash(whole), inputs_hash(with_candidates)}


def _legacy_problem(old: dict) -> str:
    """What makes a legacy summary unusable (a field of another type than udr wrote), or ""."""
    if not isinstance(old.get("pairs"), int) or isinstance(old.get("pairs"), bool):
        return f"its pairs is {quoted(old.get('pairs'))}, not a count"
    for key in ("sha256", "inputs", "dtype", "machine"):
        if key in old and not isinstance(old[key], str):
            return f"its {key} is {quoted(old[key])}, not a string"
    shipped = old.get("shipped")
    if shipped is not None and not (isinstance(shipped, dict) and isinstance(shipped.get("source"), str)):
        return f"its shipped is {quoted(shipped)}, not an object with a source"
    return ""


def migrate(settings, folder: Path, round_: int, report_dir: Path | None) -> list[str]:
    from udr.feedback.pair_scoring import ScoreSummary, pair_inputs
    from udr.feedback.scores_file import ScoresManifest, inputs_hash, query_choice
    from udr.project.scoring import load_work
    from udr.util.files import file_sha256, read_json_object, write_json_atomic
    from udr.util.readers import read_parquet_checked

    problems = []
    for summary_path in sorted(folder.glob("*.json")):
        scores = summary_path.with_suffix(".parquet")
        if not scores.is_file():
            continue
        old = read_json_object(summary_path, "scores summary", "score the task again (`udr score`)")
        if "inputs_hash" in old:
            continue
        why = _legacy_problem(old)
        if why:
            problems.append(f"{summary_path}: {why}")
            continue
        task = summary_path.stem
        if old.get("sha256") and old["sha256"] != file_sha256(scores):
            problems.append(f"{scores}: checksum differs from its summary")
            continue
        work = load_work(settings, task, round_)
        inputs = pair_inputs(work, settings.score, settings.paths.base_model("lm"), old.get("dtype", "bf16"))
        if old.get("inputs") not in legacy_hashes(settings, work, inputs):
            problems.append(f"{scores}: scored with other inputs than this project's")
            continue
        ids = read_parquet_checked(scores, "scores", ["query_id"], kinds={"query_id": "integer"}, non_null=["query_id"])
        held = np.sort(ids["query_id"].unique().to_numpy())
        choice = query_choice(np.asarray(work.train["id"].to_list()), settings.seed, task)[: len(held)]
        if not np.array_equal(np.sort(choice), held):
            problems.append(f"{scores}: its queries are not the seeded choice of {len(held)} (another seed?)")
            continue
        shipped = old.get("shipped")
        manifest = ScoresManifest(
            task,
            round_,
            settings.seed,
            [int(q) for q in choice],
            int(old["pairs"]),
            inputs,
            inputs_hash(inputs),
            file_sha256(scores),
            old.get("machine", ""),
            shipped["source"] if shipped else None,
        )
        report = (report_dir / f"{task}.json") if report_dir else settings.paths.score_report(round_, task)
        # what a summary held besides the manifest's fields: the run report's (the stage's ScoreSummary)
        write_json_atomic(report, {f.name: old[f.name] for f in fields(ScoreSummary) if f.name in old})
        manifest.write(scores)
        print(f"{scores}: manifest written, run report -> {report}")
    return problems


def main(argv=None) -> int:
    """The tool's entry point: a UdrError (a summary or scores file that does not parse, bad params) is one
    line on stderr, "migrate_score_manifests: error: ...", and exit status 1."""
    try:
        return _main(argv)
    except UdrError as exc:
        print(f"migrate_score_manifests: error: {exc}", file=sys.stderr)
        return 1


def _main(argv=None) -> int:
    from udr.config import load_settings
    from udr.paths import parse_round

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--dir", type=Path, action="append", help="a folder of scores (default: all of the project's)")
    ap.add_argument("--report-dir", type=Path, help="where the run reports go (default: metrics/score/round<N>/)")
    args = ap.parse_args(argv)
    settings = load_settings(args.params)
    shipped = settings.root / settings.score.shipped
    folders = args.dir or [*sorted(settings.root.glob("data/scores/round*")), shipped]
    problems = []
    for folder in folders:
        round_ = parse_round(folder.name) if folder.parent.name == "scores" else 0
        report_dir = args.report_dir
        if report_dir is None and folder.resolve() == shipped.resolve():  # not this project's run: kept apart
            report_dir = settings.root / "metrics" / "feedback" / "shipped-round0"
        problems += migrate(settings, folder, round_, report_dir)
    for p in problems:
        print(f"not migrated: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
