"""udr.serving.model_card: a model trained further from a trained model (`udr train --init`, e.g. the shipped
model on a new task) has a card that tells the training it inherited (the initial model's record: its tasks
and rounds) from this training's (its tasks and steps), and names every task trained on."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest

TRAIN = {"loss": "rank", "loss_lambda": 0.5, "candidates_per_query": 4, "batch_size": 4, "lr": 1e-3}


def _trained_with(params_file: str, lm: str) -> dict:
    return {
        "params_file": params_file,
        "project": "../..",
        "seed": 1,
        "models": {"lm": lm, "encoder": "tiny-encoder"},
        "candidates": {"k": 4},
        "train": TRAIN,
    }


def _train(folder, init, round_: int, params_file: str, lm: str, queries: dict, steps: int) -> None:
    """What `udr train` writes beside a model it trained from `init`: its record."""
    from udr.retriever.record import trained_model_record, write_record

    folder.mkdir(parents=True)
    summary = SimpleNamespace(queries=queries, steps=steps, loss_start=2.0, loss_end=1.0)
    write_record(
        folder, trained_model_record("udr", round_, _trained_with(params_file, lm), summary, init, "tiny-encoder")
    )


@pytest.fixture
def chained(served, tmp_path):
    """The served project's indexed model, recorded as trained twice: the shipped training (rounds 0 and 1
    on sst2 and trec, from params.yaml) and then, from that model, round 0 of a new training on break
    (params-news.yaml)."""
    from udr.retriever.record import read_record, write_record

    root = tmp_path / "proj"
    shutil.copytree(served, root)
    models = root / "models"
    _train(models / "r0", models / "base" / "encoder", 0, "params.yaml", "shipped-lm", {"sst2": 6, "trec": 5}, 11)
    _train(models / "r1", models / "r0", 1, "params.yaml", "shipped-lm", {"sst2": 6}, 12)
    _train(models / "news", models / "r1", 0, "params-news.yaml", "news-lm", {"break": 8}, 13)
    write_record(models / "final", read_record(models / "news"))
    return root


def test_the_card_tells_inherited_training_from_this_training(chained, tmp_path):
    from udr.config import load_settings
    from udr.serving.evidence import model_training
    from udr.serving.model_card import model_card

    card = model_card(load_settings(chained / "params.yaml"), chained / "models" / "final", "me/udr")
    lines = card.splitlines()
    inherited = lines.index(next(x for x in lines if x.startswith("- **Inherited training** (")))
    this = lines.index(next(x for x in lines if x.startswith("- **This training** (")))
    assert inherited < this
    assert (
        "feedback LM `shipped-lm` scored 4 candidates per train query; scored queries per task: sst2 6, trec 5."
        in (lines[inherited])
    )
    assert lines[inherited + 1].startswith("  - **round 0** (from `params.yaml`): 11 steps")
    assert lines[inherited + 2].startswith("  - **round 1** (from `params.yaml`): 12 steps")
    assert "feedback LM `news-lm` scored 4 candidates per train query; scored queries per task: break 8." in lines[this]
    assert lines[this + 1].startswith("  - **round 0** (from `params-news.yaml`): 13 steps")
    assert sum("round 0**" in line for line in lines) == 2 and "Training, round" not in card
    # Every task trained on is named, with the training it came from; a task not carried says so.
    assert "| break | trained on (8 scored queries, this training) | generation |" in card
    assert "| sst2 | trained on (6 scored queries, inherited) | classification |" in card
    assert any(
        x.startswith("| trec | trained on (5 scored queries, inherited) |") and "| not carried |" in x for x in lines
    )
    # An export without a record reads every training's tasks from the card.
    export = tmp_path / "export"
    export.mkdir()
    (export / "udr_export.json").write_text("{}")
    (export / "README.md").write_text(card)
    assert set(model_training(export).tasks) == {"sst2", "trec", "break"}


def test_one_training_of_several_rounds_is_not_inherited(chained):
    """The rounds of one training (round 1 continuing round 0 from the same params file) stay one training."""
    from udr.config import load_settings
    from udr.retriever.record import read_record, write_record
    from udr.serving.model_card import model_card

    final = chained / "models" / "final"
    write_record(final, read_record(chained / "models" / "r1"))
    card = model_card(load_settings(chained / "params.yaml"), final, "me/udr")
    assert "Inherited" not in card and "This training" not in card
    assert "- **Training, round 0** (from `params.yaml`): 11 steps" in card
    assert "- **Training, round 1** (from `params.yaml`): 12 steps" in card
    assert "scored queries per task: sst2 6, trec 5." in card
    assert "| sst2 | trained on (6 scored queries) | classification |" in card
    assert json.loads((final / "udr_record.json").read_text())["round"] == 1


def test_the_card_names_an_anchored_loss_its_feedback_and_an_interpolation(tmp_path):
    from udr.retriever.record import trained_model_record
    from udr.serving.model_card import _model_lines

    anchored = {**TRAIN, "loss": "anchored", "anchor_beta": 1.0, "anchor_top": 3, "feedback": "lm+labels"}
    trained = {**_trained_with("params.yaml", "lm"), "train": anchored}
    summary = SimpleNamespace(queries={"sst2": 6}, steps=5, loss_start=2.0, loss_end=1.0)
    record = trained_model_record("udr", 0, trained, summary, tmp_path / "base", "tiny-encoder")
    record["interpolation"] = {"alpha": 0.5}
    encoder = SimpleNamespace(pooling="mean", similarity="cosine", shared=False, base="tiny-encoder")
    text = "\n".join(_model_lines(record, encoder, tmp_path))
    assert "(lambda 0.5, beta 1.0), the 3 best against the 3 worst candidates, feedback `lm+labels`" in text
    assert "interpolated with its initial encoder (WiSE-FT), alpha 0.5" in text
    plain = "\n".join(_model_lines({**record, "interpolation": None}, encoder, tmp_path))
    assert "WiSE-FT" not in plain


@pytest.mark.parametrize(
    "change, message",
    [
        ("no models", r"^unreadable model record .*udr_record.json: required field 'models' is missing"),
        ("init a string", r"^unreadable model record .*udr_record.json: field 'init.init': "),
    ],
)
def test_a_record_the_card_cannot_state_is_one_line_naming_it(chained, change, message, run_cli):
    """`udr export` writes its card from the record: a record without its models, or whose `init` chain
    ends in a string instead of the base encoder, is one line naming the file and the field."""
    from udr.config import load_settings
    from udr.errors import UdrError
    from udr.serving.model_card import model_card

    path = chained / "models" / "final" / "udr_record.json"
    record = json.loads(path.read_text())
    if change == "no models":
        record.pop("models")
    else:
        record["init"]["init"] = "tiny-encoder"
    path.write_text(json.dumps(record))
    with pytest.raises(UdrError, match=message) as err:
        model_card(load_settings(chained / "params.yaml"), chained / "models" / "final", "me/udr")
    assert "\n" not in str(err.value)
    code, _, stderr = run_cli(["export", str(chained / "export")], chained)
    assert code == 1 and len(stderr.strip().splitlines()) == 1 and "udr_record.json" in stderr, stderr
    assert not (chained / "export").exists()


def test_a_carried_pool_with_text_ids_is_one_line_naming_it(served, tmp_path):
    import polars as pl

    from udr.data.tasks import get_task
    from udr.errors import UdrError
    from udr.paths import Paths
    from udr.serving.pools import model_pool, model_pool_tasks

    model = tmp_path / "final"
    shutil.copytree(served / "models" / "final", model)
    task = model_pool_tasks(model)[0]
    path = Paths.model_pool(model, task)
    pl.read_parquet(path).with_columns(pl.col("id").cast(pl.String)).write_parquet(path)
    with pytest.raises(UdrError, match=rf"^malformed pool .*{task}.parquet: column 'id' holds String, not integer"):
        model_pool(model, get_task(task))
