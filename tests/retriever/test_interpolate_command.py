"""`udr interpolate MODEL --alpha A --out DIR` (udr.retriever.interpolation.write_interpolation) end to end on
the tiny two-round project (tests.conftest's `looped`): the weights on the line between the trained model
and its base encoder, the record saying what was mixed, and the folder read by `udr index --model`,
`udr evaluate --model` and the Retriever."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

TEXTS = ["a gripping, funny film", "what are the cheapest flights to boston"]


@pytest.fixture(scope="module")
def project(looped, tmp_path_factory):
    root = tmp_path_factory.mktemp("interp") / "proj"
    shutil.copytree(looped, root, ignore=shutil.ignore_patterns("final"))
    return root


def test_interpolate_writes_the_weighted_model_and_its_record(project, run_cli):
    from udr.lm.loading import read_provenance
    from udr.retriever.encoder import BiEncoder

    code, out, err = run_cli(
        ["interpolate", "models/rounds/round0", "--alpha", "0.25", "--out", "models/wise"], project
    )
    assert code == 0, err
    assert "alpha 0.25 -> models/wise" in out + err
    wise = BiEncoder.load(project / "models/wise")
    trained = BiEncoder.load(project / "models/rounds/round0")
    base = BiEncoder.from_base(project / "models/base/encoder", trained.settings)
    assert wise.settings == trained.settings
    for side in ("query_model", "demo_model"):
        mine, t, b = (getattr(m, side).state_dict() for m in (wise, trained, base))
        for key, value in mine.items():
            if key.startswith("pooler."):  # not in the tiny base's file (random at every load): kept as trained
                assert torch.equal(value, t[key]), key
            elif value.is_floating_point():
                assert torch.allclose(value, 0.25 * t[key] + 0.75 * b[key], atol=1e-6), key
    record = json.loads((project / "models/wise/udr_record.json").read_text())
    source = json.loads((project / "models/rounds/round0/udr_record.json").read_text())
    mix = record.pop("interpolation")
    assert mix["alpha"] == 0.25
    assert mix["trained"]["path"] == "../rounds/round0" and len(mix["trained"]["model"]) == 16
    provenance = read_provenance(project / "models/base/encoder")
    assert mix["initial"]["path"] == "../base/encoder" and mix["initial"]["base"] == provenance["spec"]
    assert mix["initial"]["weights_sha256"] == provenance["weights_sha256"]
    assert record == {**source, "project": "../.."}  # what it was trained on and how, as the trained model's
    assert not list((project / "models").glob(".wise*"))  # built beside, then swapped in
    # the same inputs give the same folder (nothing random)
    code, _, err = run_cli(["interpolate", "models/rounds/round0", "--alpha", "0.25", "--out", "models/wise2"], project)
    assert code == 0, err
    for part in ("query", "demo"):
        same = (project / f"models/wise2/{part}/model.safetensors").read_bytes()
        assert same == (project / f"models/wise/{part}/model.safetensors").read_bytes()


def test_alpha_one_is_the_trained_model_and_zero_the_initial_one(project, run_cli):
    from udr.retriever.encoder import BiEncoder

    for alpha, which in (("1", "models/rounds/round1"), ("0", "models/rounds/round0")):
        code, _, err = run_cli(
            [
                "interpolate",
                "models/rounds/round1",
                "--alpha",
                alpha,
                "--initial",
                "models/rounds/round0",
                "--out",
                f"models/end-{alpha}",
            ],
            project,
        )
        assert code == 0, err
        for side in ("query", "demo"):
            got = BiEncoder.load(project / f"models/end-{alpha}").encode(TEXTS, side)
            assert np.allclose(got, BiEncoder.load(project / which).encode(TEXTS, side), atol=1e-5)
    record = json.loads((project / "models/end-0/udr_record.json").read_text())
    assert (
        record["interpolation"]["initial"]["path"] == "../rounds/round0"
        and "model" in record["interpolation"]["initial"]
    )


def test_an_interpolated_model_indexes_evaluates_and_serves(project, run_cli):
    from udr.retriever.index import model_fingerprint
    from udr.serving.api import Retriever

    code, _, err = run_cli(["interpolate", "models/rounds/round0", "--alpha", "0.5", "--out", "models/half"], project)
    assert code == 0, err
    fingerprint = model_fingerprint(project / "models/half")
    code, _, err = run_cli(["index", "--model", "models/half"], project)
    assert code == 0, err
    assert (project / "models/half/index/sst2.npy").is_file()
    record = json.loads((project / "models/half/udr_record.json").read_text())
    assert record["interpolation"]["alpha"] == 0.5 and set(record["index"]["pools"]) >= {"sst2", "break"}
    assert model_fingerprint(project / "models/half") == fingerprint  # indexing leaves the weights as they are
    code, out, err = run_cli(["evaluate", "-m", "udr", "--model", "models/half", "-t", "sst2", "--limit", "2"], project)
    assert code == 0, err
    demos = Retriever.load(project / "models/half").retrieve("a gripping, funny film", task="sst2", k=2)
    assert len(demos) == 2


def test_bad_interpolations_are_one_line_errors(project, run_cli):
    cases = [
        (["models/rounds/round0", "--alpha", "1.5", "--out", "models/x"], "bad interpolation alpha 1.5"),
        (["models/rounds/round0", "--alpha", "0.5", "--out", "models/rounds/round0"], "is the model itself"),
        (["models/nosuch", "--alpha", "0.5", "--out", "models/x"], "missing model models/nosuch"),
        (["models/rounds/round0", "--alpha", "0.5", "--out", "data"], "holds other files"),
        (["models/rounds/round0", "--alpha", "0.5", "--out", "models/x", "--initial", "data"], "--initial takes"),
        (
            ["models/rounds/round0", "--alpha", "0.5", "--out", "models/x", "-S", "models.encoder=bert-base-uncased"],
            "this project's base encoder is bert-base-uncased: give --initial DIR",
        ),
    ]
    for args, message in cases:
        code, _, err = run_cli(["interpolate", *args], project)
        assert code == 1 and message in err and len(err.strip().splitlines()) == 1, (args, err)
    assert not (project / "models/x").exists()


def test_a_second_process_on_the_output_folder_is_refused(project, run_cli):
    """The output folder is locked for the run: while another process holds it, `udr interpolate` there is
    refused in one line naming that process, and nothing is written."""
    from tests.locking import another_process_holding

    target = project / "models" / "held"
    with another_process_holding(target) as pid:
        code, _, err = run_cli(
            ["interpolate", "models/rounds/round0", "--alpha", "0.5", "--out", "models/held"], project
        )
    assert code == 1 and f"pid {pid}" in err and len(err.strip().splitlines()) == 1, err
    assert not target.exists()


def test_train_final_alpha_interpolates_the_last_round_into_models_final(project, run_cli):
    """`train.final_alpha` below 1: `udr index` writes models/final as `udr interpolate` writes the last round's
    model at that alpha (the same bytes), its record and the index report saying so."""
    last = sorted(p.name for p in (project / "models" / "rounds").iterdir() if p.is_dir())[-1]
    code, _, err = run_cli(["index", "-S", "train.final_alpha=0.25"], project)
    assert code == 0, err
    code, _, err = run_cli(["interpolate", f"models/rounds/{last}", "--alpha", "0.25", "--out", "models/wl"], project)
    assert code == 0, err
    for part in ("query", "demo"):
        final = (project / f"models/final/{part}/model.safetensors").read_bytes()
        assert final == (project / f"models/wl/{part}/model.safetensors").read_bytes(), part
        trained = (project / f"models/rounds/{last}/{part}/model.safetensors").read_bytes()
        assert part == "demo" or final != trained  # the query encoder moved (a frozen E_d stays as it was)
    mix = json.loads((project / "models/final/udr_record.json").read_text())["interpolation"]
    assert mix["alpha"] == 0.25 and mix["trained"]["path"] == f"../rounds/{last}"
    assert json.loads((project / "models/final/index/report.json").read_text())["final_alpha"] == 0.25
