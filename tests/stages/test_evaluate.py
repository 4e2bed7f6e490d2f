"""`udr evaluate` end to end on tiny models through the CLI (the project: `evaluated`, tests/conftest.py)."""

from __future__ import annotations

import json
import re

import polars as pl

from tests.conftest import EVAL_METHODS as METHODS
from tests.conftest import EVAL_TASKS as TASKS
from tests.conftest import UNSEEN_TASK


def test_every_method_writes_metrics_and_inspectable_predictions(evaluated):
    from udr.data.tasks import get_task

    for method in METHODS:
        for task in TASKS:
            result = json.loads((evaluated / "metrics" / method / f"{task}.json").read_text())
            assert result["n"] == 6 and result["method"] == method and result["task"] == task
            assert result["kind"] == get_task(task).kind and result["family"] == get_task(task).family
            assert 0.0 <= result["score"] <= 100.0 and result["seconds"] >= 0
            preds = pl.read_parquet(evaluated / "data" / "predictions" / method / f"{task}.parquet")
            assert preds.height == 6
            pool = set(pl.read_parquet(evaluated / "data" / "prepared" / task / "train.parquet")["id"].to_list())
            for demos, tokens in zip(preds["demo_ids"].to_list(), preds["prompt_tokens"].to_list()):
                assert demos and set(demos) <= pool and len(set(demos)) == len(demos)
                assert tokens <= 700
            if task == "sst2":
                assert result["demos_mean"] <= 3 and result["metric"] == "accuracy"
                choices = {"It was great .", "It was terrible ."}
                assert set(preds["prediction"].to_list()) <= choices
            else:
                assert result["graded"]["name"] == "token_f1"
                assert not any("\n" in p for p in preds["prediction"].to_list())


def test_shots_only_for_the_chosen_tasks_and_methods(evaluated):
    udr = json.loads((evaluated / "metrics" / "udr" / "sst2.json").read_text())
    assert set(udr["shots"]) == {"1", "2", "3"}
    assert udr["shots"]["1"]["demos_mean"] == 1.0
    assert udr["shots"]["3"]["score"] == udr["score"]  # 3 = max_demos: the main run
    assert "shots" not in json.loads((evaluated / "metrics" / "random" / "sst2.json").read_text())
    assert "shots" not in json.loads((evaluated / "metrics" / "udr" / "break.json").read_text())


def test_epr_baseline_is_trained_per_task_with_its_recipe(evaluated):
    """One EPR per task, each on its own task's feedback; their steps add up to UDR's round (the same budget)."""
    round0 = json.loads((evaluated / "metrics" / "train" / "round0" / "summary.json").read_text())
    steps = 0
    for task in TASKS:
        steps += json.loads((evaluated / "metrics" / "train" / "epr" / task / "summary.json").read_text())["steps"]
        record = json.loads((evaluated / "models" / "epr" / task / "udr_record.json").read_text())
        assert record["method"] == "epr" and record["train"]["tasks"] == [task]
        assert record["train"]["sampling"] == "epr"
    assert steps == round0["steps"]
    assert not (evaluated / "models" / "epr" / "udr_encoder.json").exists()


def test_per_task_epr_evaluates_each_task_with_its_own_model(evaluated):
    """Each task's EPR result names its own model's fingerprint; the unseen task has no EPR result, and the
    report's unseen table has no EPR column."""
    from udr.retriever.index import model_fingerprint

    for task in TASKS:
        result = json.loads((evaluated / "metrics" / "epr" / f"{task}.json").read_text())
        assert result["model"] == model_fingerprint(evaluated / "models" / "epr" / task)
    assert not (evaluated / "metrics" / "epr" / f"{UNSEEN_TASK}.json").exists()
    summary = json.loads((evaluated / "metrics" / "summary.json").read_text())
    assert "epr" in summary["averages"] and "epr" not in summary["unseen"]["averages"]
    assert set(summary["unseen"]["averages"]) == {"random", "bm25", "sbert", "udr"}


def test_per_task_epr_errors(evaluated, run_cli):
    code, _, err = run_cli(["train", "--task", "sst2"], evaluated)
    assert code == 1 and "--task 'sst2' names a baseline's task: add --epr or --dr-target" in err
    code, _, err = run_cli(["train", "--epr", "--task", "nosuch"], evaluated)
    assert code == 1 and "--task 'nosuch': not a task of prepare.tasks (sst2, break)" in err
    code, _, err = run_cli(["train", "--epr", "--dr-target"], evaluated)
    assert code == 1 and "--epr and --dr-target exclude each other" in err
    code, _, err = run_cli(["evaluate", "-m", "epr", "-t", UNSEEN_TASK, "--limit", "1"], evaluated)
    assert code == 1 and f"none of {UNSEEN_TASK}" in err and "udr train --epr --task" in err


def test_evaluate_errors(evaluated, run_cli):
    code, _, err = run_cli(["evaluate", "--method", "knn"], evaluated)
    assert code == 1 and "unknown method 'knn'" in err
    code, _, err = run_cli(["evaluate", "--method", "bm25", "--set", "evaluate.order=sideways"], evaluated)
    assert code == 1 and "bad parameter evaluate.order" in err


def test_validation_split_is_evaluated_apart_from_test(evaluated, tmp_path):
    """`udr evaluate --split validation` scores the validation rows and writes beside, not over, the
    test results; without a validation split it says how to make one."""
    import shutil

    import pytest

    from udr.config import load_settings
    from udr.errors import UdrError
    from udr.stages.evaluate import run_evaluate

    project = tmp_path / "p"
    shutil.copytree(evaluated, project)
    settings = load_settings(project / "params.yaml")
    with pytest.raises(UdrError, match="has no validation split: set prepare.tasks.sst2.validation"):
        run_evaluate(settings, "bm25", tasks=["sst2"], split="validation", progress=False)
    test_rows = pl.read_parquet(project / "data" / "prepared" / "sst2" / "test.parquet")
    test_rows.head(4).write_parquet(project / "data" / "prepared" / "sst2" / "validation.parquet")
    before = (project / "metrics" / "bm25" / "sst2.json").read_text()
    result = run_evaluate(settings, "bm25", tasks=["sst2"], split="validation", progress=False)["sst2"]
    assert result["n"] == 4 and "shots" not in result
    assert json.loads((project / "metrics" / "validation" / "bm25" / "sst2.json").read_text()) == result
    assert pl.read_parquet(project / "data" / "predictions-validation" / "bm25" / "sst2.parquet").height == 4
    assert (project / "metrics" / "bm25" / "sst2.json").read_text() == before


def test_a_quick_look_writes_nothing_and_a_stale_cap_is_named(evaluated, run_cli):
    """--limit N evaluates a task's first N rows and saves nothing; a cap the prepared data was not cut
    with (udr prepare has not run since) is a one-line error, not silently ignored."""
    result = evaluated / "metrics" / "bm25" / "sst2.json"
    predictions = evaluated / "data" / "predictions" / "bm25" / "sst2.parquet"
    before = (result.read_bytes(), predictions.read_bytes())
    code, out, err = run_cli(["evaluate", "-m", "bm25", "-t", "sst2", "--limit", "2"], evaluated)
    assert code == 0, err
    assert "over 2 test examples" in err + out and "not a comparison of methods; not saved" in err + out
    assert (result.read_bytes(), predictions.read_bytes()) == before
    code, _, err = run_cli(["evaluate", "-m", "bm25", "-t", "sst2", "-S", "prepare.tasks.sst2.max_test=5"], evaluated)
    assert code == 1 and "data/prepared/sst2 was cut with max_test 6, the params say 5" in err
    assert len(err.strip().splitlines()) == 1


def test_a_named_evaluation_is_saved_beside_the_pipelines_and_compared(evaluated, run_cli, tmp_path):
    """`udr evaluate --model DIR --save-as NAME` writes NAME's result and predictions, not over the
    method's; `udr exp compare` gives the paired interval of two saved evaluations, and its average
    difference is the mean of the per-task score differences."""
    import shutil

    project = tmp_path / "p"
    shutil.copytree(evaluated, project)
    before = (project / "metrics" / "epr" / "sst2.json").read_bytes()
    code, out, err = run_cli(
        ["evaluate", "-m", "epr", "--model", "models/final", "--save-as", "final-as-epr", "-t", "sst2", "-t", "break"],
        project,
    )
    assert code == 0, err
    assert "(saved as final-as-epr)" in out + err
    saved = json.loads((project / "metrics" / "final-as-epr" / "sst2.json").read_text())
    assert saved["saved_as"] == "final-as-epr" and saved["n"] == 6
    assert pl.read_parquet(project / "data" / "predictions" / "final-as-epr" / "break.parquet").height == 6
    assert (project / "metrics" / "epr" / "sst2.json").read_bytes() == before
    # The same model under the method's retriever code: models/final is UDR's, so the scores match.
    assert saved["score"] == json.loads((project / "metrics" / "udr" / "sst2.json").read_text())["score"]

    code, out, err = run_cli(["exp", "compare", "final-as-epr", "bm25", "--json"], project)
    assert code == 0, err
    table = json.loads(out)
    assert set(table) == {"sst2", "break", "average"}
    scores = {
        m: {t: json.loads((project / "metrics" / m / f"{t}.json").read_text())["graded"]["score"] for t in TASKS}
        for m in ("final-as-epr", "bm25")
    }
    for t in TASKS:
        assert abs(table[t]["difference"] - (scores["final-as-epr"][t] - scores["bm25"][t])) < 1e-9
        assert table[t]["low"] <= table[t]["difference"] <= table[t]["high"]
    mean = sum(table[t]["difference"] for t in TASKS) / len(TASKS)
    assert abs(table["average"]["difference"] - mean) < 1e-9
    code, out, err = run_cli(["exp", "compare", "final-as-epr", "bm25", "-t", "sst2"], project)
    assert code == 0 and "| sst2 | 6 |" in out and "**average**" in out
    code, out, err = run_cli(["show", "-m", "final-as-epr", "-t", "break", "-n", "1", "--json"], project)
    assert code == 0, err
    first = pl.read_parquet(project / "data" / "predictions" / "final-as-epr" / "break.parquet").row(0, named=True)
    assert json.loads(out)["id"] == first["id"] and json.loads(out)["prediction"] == first["prediction"]

    for args, message in (
        (["evaluate", "-m", "bm25", "--save-as", "udr"], "name 'udr' is taken"),
        (["evaluate", "-m", "bm25", "--save-as", "../x"], "bad name '../x'"),
        (["evaluate", "-m", "bm25", "--save-as", "x", "--limit", "2"], "--save-as and --limit exclude each other"),
        (["exp", "compare", "nothing", "bm25"], "no task has saved test results of both nothing and bm25"),
        (["exp", "compare", "nothing", "bm25", "-t", "sst2"], "missing result"),
        (["exp", "compare", "udr", "bm25", "--split", "dev"], "bad split 'dev'"),
    ):
        code, _, err = run_cli(args, project)
        assert code != 0 and message in err, (args, err)
        assert len(err.strip().splitlines()) == 1


def test_the_feedback_curve_compares_every_point_with_the_baseline(evaluated, run_cli, tmp_path):
    """`udr exp curve` puts saved evaluations on a curve: each point's average minus the baseline's is
    the mean of its per-task differences, with an interval around it; table, JSON and plot are written."""
    out = tmp_path / "curve" / "curve.md"
    points = ["trained:6=udr", "trained:3=epr", "untrained:6=sbert"]
    code, _, err = run_cli(["exp", "curve", *points, "--split", "test", "-o", str(out)], evaluated)
    assert code == 0, err
    curve = json.loads(out.with_suffix(".json").read_text())
    tasks = list(curve["baseline"]["scores"])  # the tasks every point has: the per-task EPR has no unseen one
    assert curve["baseline"]["name"] == "bm25" and set(tasks) == set(TASKS)
    score = {
        m: {t: json.loads((evaluated / "metrics" / m / f"{t}.json").read_text())["graded"]["score"] for t in tasks}
        for m in ("udr", "epr", "sbert", "bm25")
    }
    assert [(p["recipe"], p["queries"], p["name"]) for p in curve["points"]] == [
        ("trained", 6, "udr"),
        ("trained", 3, "epr"),
        ("untrained", 6, "sbert"),
    ]
    for p in curve["points"]:
        mean = sum(score[p["name"]][t] - score["bm25"][t] for t in tasks) / len(tasks)
        iv = p["versus_baseline"]
        assert abs(iv["difference"] - mean) < 1e-9 and iv["low"] <= iv["difference"] <= iv["high"]
    table = out.read_text()
    assert table.index("| trained | 3 |") < table.index("| trained | 6 |") < table.index("| untrained | 6 |")
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"

    for args, message in (
        (["exp", "curve", "x:6=nothing", "-t", "sst2", "--split", "test"], "missing result"),
        (["exp", "curve", "x:6=udr", "--split", "dev"], "bad split 'dev'"),
        (["exp", "curve", "x=udr"], "bad point 'x=udr'"),
    ):
        code, _, err = run_cli([*args, "-o", str(tmp_path / "bad.md")], evaluated)
        assert code != 0 and message in err, (args, err)
        assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "bad.md").exists()


def test_evaluations_saved_in_git_compare_as_their_files_do(evaluated, tmp_path):
    """The analyses' intervals read each evaluation from a git commit (a DVC experiment): the paired
    interval from the commit is the one from the same files on disk, later changes on disk do not
    reach it, and a commit without the predictions is a one-line error naming the file and commit."""
    import shutil
    import subprocess

    import pytest

    from udr.config import load_settings
    from udr.errors import UdrError
    from udr.experiments.dvc import compare_revisions
    from udr.project.saved_evaluations import saved_comparison

    project = tmp_path / "p"
    shutil.copytree(evaluated, project)

    def git(*args):
        cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
        return subprocess.run(cmd, cwd=project, check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("add", "metrics", "data/predictions")
    git("commit", "-q", "-m", "evaluated")
    settings = load_settings(project / "params.yaml")
    from_files = saved_comparison(settings, "udr", "bm25", TASKS)
    at_head = {"udr": {t: ("udr", "HEAD") for t in TASKS}}, {t: ("bm25", "HEAD") for t in TASKS}
    assert compare_revisions(project, *at_head, settings.seed) == {"udr": from_files}
    # a side of several evaluations (seeds) is their score averaged on every resample
    twice = {"udr": {t: [("udr", "HEAD"), ("udr", "HEAD")] for t in TASKS}}
    assert compare_revisions(project, twice, at_head[1], settings.seed) == {"udr": from_files}
    for t in TASKS:  # an evaluation that differs from BM25's: every prediction the gold answer, which scores 100
        path = project / "data" / "predictions" / "random" / f"{t}.parquet"
        pl.read_parquet(path).with_columns(prediction=pl.col("gold")).write_parquet(path)
        result = project / "metrics" / "random" / f"{t}.json"
        saved = json.loads(result.read_text())
        result.write_text(json.dumps({**saved, "graded": {**saved["graded"], "score": 100.0}}))
    git("commit", "-q", "-am", "random predicts the gold answers")
    mixed = {"mix": {t: [("bm25", "HEAD"), ("random", "HEAD")] for t in TASKS}}
    alone = {"random": {t: ("random", "HEAD") for t in TASKS}}
    ((_, average),) = compare_revisions(project, mixed, at_head[1], settings.seed).values()
    ((_, random_average),) = compare_revisions(project, alone, at_head[1], settings.seed).values()
    assert random_average.difference != 0 and average.difference == pytest.approx(random_average.difference / 2)
    for t in TASKS:  # the workspace's UDR now predicts as BM25 does: the commit still holds UDR's
        predictions = project / "data" / "predictions"
        shutil.copy(predictions / "bm25" / f"{t}.parquet", predictions / "udr" / f"{t}.parquet")
    assert compare_revisions(project, *at_head, settings.seed) == {"udr": from_files}

    git("rm", "-q", "-r", "data/predictions/sbert")
    git("commit", "-q", "-m", "no sbert predictions")
    with pytest.raises(UdrError, match=r"^no data/predictions/sbert/sst2.parquet at HEAD"):
        compare_revisions(project, {"sbert": {"sst2": ("sbert", "HEAD")}}, {"sst2": ("bm25", "HEAD")}, settings.seed)


def test_saved_evaluations_that_cannot_be_compared_are_one_line_errors(evaluated, run_cli, tmp_path):
    """`udr exp compare` refuses two evaluations scored with different metrics, and a truncated or
    non-object result; `--save-as` a name that is a file of metrics/ is refused before evaluating."""
    import shutil

    project = tmp_path / "p"
    shutil.copytree(evaluated, project)
    for name in ("bleu-sst2", "truncated", "listed"):
        shutil.copytree(project / "metrics/bm25", project / "metrics" / name)
        shutil.copytree(project / "data/predictions/bm25", project / "data/predictions" / name)
    result = json.loads((project / "metrics/bm25/sst2.json").read_text())
    changed = {**result, "metric": "bleu", "graded": {**result["graded"], "name": "bleu"}}
    (project / "metrics/bleu-sst2/sst2.json").write_text(json.dumps(changed))
    (project / "metrics/truncated/sst2.json").write_text(json.dumps(result)[:40])
    (project / "metrics/listed/sst2.json").write_text("[1, 2]")
    (project / "metrics/summary.json").write_text("{}")
    for args, message in (
        (["exp", "compare", "bleu-sst2", "bm25", "-t", "sst2"], "sst2 was scored with different metrics"),
        (["exp", "compare", "truncated", "bm25", "-t", "sst2"], "unreadable result"),
        (["exp", "compare", "listed", "bm25", "-t", "sst2"], "malformed result"),
        (["evaluate", "-m", "bm25", "-t", "sst2", "--save-as", "summary.json"], "is taken by the file"),
    ):
        code, _, err = run_cli(args, project)
        assert code == 1 and message in err and len(err.strip().splitlines()) == 1, (args, err)
    assert not (project / "data/predictions/summary.json").exists()


def test_evaluate_prints_the_score_with_its_interval_and_saves_it(evaluated):
    """Every result carries the 95% interval of its main score: Wilson for accuracy and exact match (from
    the score and n alone), the bootstrap for BLEU-like scores; the score lies inside it."""
    from udr.evaluation.bootstrap import wilson_interval

    sst2 = json.loads((evaluated / "metrics" / "bm25" / "sst2.json").read_text())
    low, high = wilson_interval(sst2["score"] / 100, sst2["n"])
    assert sst2["interval"] == {"low": round(100 * low, 2), "high": round(100 * high, 2), "method": "wilson"}
    for method in ("bm25", "udr"):
        r = json.loads((evaluated / "metrics" / method / "break.json").read_text())
        assert r["interval"]["method"] == ("wilson" if r["metric"] == "exact_match" else "bootstrap")
        assert r["interval"]["low"] <= r["score"] <= r["interval"]["high"]


def test_the_printed_score_has_its_interval(evaluated, run_cli):
    code, out, err = run_cli(["evaluate", "-m", "random", "-t", "sst2", "--limit", "3"], evaluated)
    assert code == 0, err
    assert re.search(r"random on sst2: accuracy \d+\.\d\d \[95% CI \d+\.\d\d, \d+\.\d\d, wilson\]", err + out)


def test_udr_embeds_a_pool_that_its_model_has_no_index_of(evaluated, run_cli, tmp_path):
    """`udr evaluate -m udr` on a task `udr index` has not embedded (a task added since) embeds its pool on
    the fly, as -m epr does, and scores what the indexed run scores."""
    import shutil

    project = tmp_path / "p"
    shutil.copytree(evaluated, project)
    (project / "models" / "final" / "index" / "sst2.npy").unlink()
    code, out, err = run_cli(["evaluate", "-m", "udr", "-t", "sst2", "--limit", "6"], project)
    assert code == 0, err
    score = json.loads((evaluated / "metrics" / "udr" / "sst2.json").read_text())["score"]
    assert f"udr on sst2: accuracy {score:.2f}" in out + err


def test_names_longer_than_a_file_name_are_one_line_errors(tmp_path, data_dir, run_cli):
    """`--save-as` and `exp compare` names become folder names: one past the limit is refused before any
    work ("File name too long" was a traceback, after the whole evaluation for --save-as)."""
    from tests.conftest import write_params

    write_params(tmp_path, {"sst2": {"max_train": 20, "max_test": 6}}, data_dir)
    for args in (
        ["evaluate", "-m", "bm25", "-t", "sst2", "--save-as", "n" * 300],
        ["exp", "compare", "n" * 300, "bm25", "-t", "sst2"],
        ["exp", "compare", "bm25", "n" * 300],
    ):
        code, _, err = run_cli(args, tmp_path)
        assert code == 1 and "bad name 'nnnn" in err and "longer than 100 characters" in err, (args, err)
        assert len(err.strip().splitlines()) == 1, err


def test_damaged_saved_predictions_are_one_line_errors(tmp_path, data_dir):
    """A comparison reads each saved evaluation's predictions through the guarded reader: truncated, or
    with a null prediction (a damaged row), one line naming the file."""
    import pytest

    from tests.conftest import write_params
    from udr.config import load_settings
    from udr.errors import UdrError
    from udr.project.saved_evaluations import prediction_metric

    settings = load_settings(write_params(tmp_path, {"sst2": {"max_train": 20, "max_test": 6}}, data_dir))
    path = settings.paths.predictions("bm25", "sst2")
    path.parent.mkdir(parents=True)
    examples = [{"id": 1, "input": "a", "target": "positive"}, {"id": 2, "input": "b", "target": "negative"}]
    for predictions, message in (
        (["positive", None], r"malformed predictions .*sst2.parquet: row 2 has no prediction \(null\)"),
        ([1, 0], r"malformed predictions .*sst2.parquet: column 'prediction' holds Int64, not text"),
        (None, r"unreadable predictions .*sst2.parquet: .*; evaluate bm25 on sst2 \(test\) again"),
    ):
        pl.DataFrame({"id": [1, 2], "prediction": predictions or ["positive", "negative"]}).write_parquet(path)
        if predictions is None:
            path.write_bytes(path.read_bytes()[:60])
        with pytest.raises(UdrError, match=message) as info:
            prediction_metric(settings, "bm25", "sst2", examples, "accuracy")
        assert "\n" not in str(info.value)


def test_a_saved_evaluation_another_process_writes_is_refused_naming_its_pid(evaluated, run_cli, tmp_path):
    """Two `udr evaluate --save-as NAME` at once: the second is refused before any work, in one line naming
    the first's pid, and writes nothing (neither says "saved as NAME" over the other's results)."""
    import shutil

    from tests.locking import another_process_holding

    project = tmp_path / "p"
    shutil.copytree(evaluated, project)
    with another_process_holding(project / "metrics" / "samename" / "sst2.json") as pid:
        code, out, err = run_cli(["evaluate", "-m", "bm25", "-t", "sst2", "--save-as", "samename"], project)
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert f"pid {pid}" in err and "metrics/samename/sst2.json" in err and "saved as" not in out + err
    assert not (project / "data" / "predictions" / "samename").exists()
    assert not (project / "metrics" / "samename").exists()
    code, out, err = run_cli(["evaluate", "-m", "bm25", "-t", "sst2", "--save-as", "samename"], project)
    assert code == 0 and "(saved as samename)" in out + err, err
    assert [p.name for p in (project / "metrics" / "samename").iterdir()] == ["sst2.json"]  # no lock file left


def test_dr_target_trains_per_task_on_target_similarity_and_evaluates_with_its_own_models(evaluated):
    """`udr train --dr-target --task T` (the fixture's): EPR's recipe on candidates ranked by their targets' BM25
    similarity (recorded as feedback target) -> models/dr-target/T, other weights than EPR's; `-m dr-target`
    evaluates each task with its own model, and has none of the unseen task."""
    from udr.retriever.index import model_fingerprint

    for task in TASKS:
        model = evaluated / "models" / "dr-target" / task
        record = json.loads((model / "udr_record.json").read_text())
        assert record["method"] == "dr-target" and record["train"]["feedback"] == "target"
        assert record["train"]["sampling"] == "epr" and record["train"]["tasks"] == [task]
        assert model_fingerprint(model) != model_fingerprint(evaluated / "models" / "epr" / task)
        result = json.loads((evaluated / "metrics" / "dr-target" / f"{task}.json").read_text())
        assert result["method"] == "dr-target" and result["model"] == model_fingerprint(model)
    assert not (evaluated / "metrics" / "dr-target" / f"{UNSEEN_TASK}.json").exists()


def test_label_aware_selection_is_a_method_on_classification_tasks(evaluated, tmp_path, run_cli):
    """`-m udr+labels`: UDR's candidates chosen by label-aware selection (`evaluate.labels`), on the
    classification tasks only, saved under that name with its settings; a balanced quota shares each prompt's
    demonstrations among the labels; weight 0 and no quota give UDR's own demonstrations."""
    import shutil

    project = tmp_path / "p"
    shutil.copytree(evaluated, project)
    balanced = ["-S", "evaluate.labels.per_label=balanced", "-S", "evaluate.labels.weight=5"]
    code, out, err = run_cli(["evaluate", "-m", "udr+labels", *balanced], project)
    assert code == 0, err
    assert not (project / "metrics" / "udr+labels" / "break.json").exists()  # generation: no labels
    result = json.loads((project / "metrics" / "udr+labels" / "sst2.json").read_text())
    assert result["method"] == "udr+labels" and result["labels"]["per_label"] == "balanced"
    assert result["labels"]["weight"] == 5.0 and result["model"]  # UDR's model fingerprint
    pool = pl.read_parquet(project / "data" / "prepared" / "sst2" / "train.parquet")
    label = dict(zip(pool["id"].to_list(), pool["label"].to_list()))
    preds = pl.read_parquet(project / "data" / "predictions" / "udr+labels" / "sst2.parquet")
    whole = [demos for demos in preds["demo_ids"].to_list() if len(demos) == 3]  # the context cuts the others
    assert whole
    for demos in whole:
        counts = [sum(label[d] == c for d in demos) for c in set(label.values())]
        assert max(counts) - min(counts) <= 1, demos

    plain = ["-S", "evaluate.labels.weight=0", "--save-as", "udr-again"]
    code, out, err = run_cli(["evaluate", "-m", "udr+labels", "-t", "sst2", *plain], project)
    assert code == 0, err
    again = pl.read_parquet(project / "data" / "predictions" / "udr-again" / "sst2.parquet")
    udr = pl.read_parquet(project / "data" / "predictions" / "udr" / "sst2.parquet")
    assert again["demo_ids"].to_list() == udr["demo_ids"].to_list()

    code, out, err = run_cli(["evaluate", "-m", "udr+labels", "-t", "break"], project)
    assert code != 0 and "needs a classification task's labels: break is generation" in err
    code, out, err = run_cli(["evaluate", "-m", "nosuch+labels"], project)
    assert code != 0 and "unknown method 'nosuch+labels'" in err
