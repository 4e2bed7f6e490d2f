"""Serving a pool or task the model was not trained on with the base encoder: where the project's own evidence
on its unseen tasks (the summary's UDR - SBERT interval) is resolved below zero, `encoder="auto"` embeds such a
pool and its queries as `udr evaluate -m sbert` does and the note says so; trained tasks keep UDR; an
unresolved or missing interval, or `encoder="udr"`, keeps UDR; `udr retrieve --encoder` chooses."""

from __future__ import annotations

import copy
import json
import shutil

import numpy as np
import pytest

from tests.serving.test_evidence import INSTRUCTION, QUERY, RECORD, ROWS, SUMMARY, _results, measured_model, notes
from udr.errors import UdrError

# The unseen comparison resolved below zero by more than the project's margin for a claim (CLAIM_MARGIN).
RESOLVED = copy.deepcopy(SUMMARY)
RESOLVED["unseen"]["udr_minus"]["sbert"]["all"] = {"difference": -7.5, "low": -15.0, "high": -1.02, "resolved": True}
# Resolved, but by less than the margin: the default run's own -7.5 [-15.0, -0.0] (a shift between CPU kinds
# could bring its end above 0), which keeps UDR.
AT_THE_EDGE = copy.deepcopy(SUMMARY)
AT_THE_EDGE["unseen"]["udr_minus"]["sbert"]["all"] = {"difference": -7.5, "low": -15.0, "high": -0.02, "resolved": True}
SAID = 'UDR - SBERT -7.5 [-15.0, -1.0]; `--encoder udr` (Python: encoder="udr") serves UDR.'
PROBE = "name[Cafe 9], food[Thai]"
# Notes outside `notes()` are not what a test looks at (the CLI's test sees them on stderr).
QUIET = pytest.mark.filterwarnings("ignore::udr.serving.evidence.UntrainedTaskWarning")


@pytest.fixture
def project(served, tmp_path):
    """A private copy of the served project: its final model trained on sst2 (record), its summary's unseen
    UDR - SBERT interval resolved below zero."""
    root = tmp_path / "project"
    shutil.copytree(served, root)
    (root / "models/final/udr_record.json").write_text(json.dumps({**RECORD, "init": {"base": "tiny"}}))
    (root / "metrics").mkdir(exist_ok=True)
    (root / "metrics/summary.json").write_text(json.dumps(RESOLVED))
    return root


def _load(root, tmp_path, **options):
    from udr import Retriever

    return Retriever.load(root=root, cache_dir=tmp_path / "cache", batch_size=4, **options)


def _sbert(root, inputs, queries, k):
    """What `udr evaluate -m sbert` ranks: its retriever over a pool of `inputs` (ids 0..n-1)."""
    import polars as pl

    from udr.evaluation.baselines import sbert_retriever

    frame = pl.DataFrame({"id": list(range(len(inputs))), "input": list(inputs)})
    return sbert_retriever(root / "models/base/encoder", "own", frame, "cpu", 4).rank(queries, k)


def _ranked(demos):
    return [d.pool_id for d in demos], np.array([d.similarity for d in demos])


@QUIET
def test_an_own_pool_is_served_with_the_base_encoder_where_the_evidence_prefers_it(project, tmp_path):
    with notes() as said:
        retriever = _load(project, tmp_path)
        retriever.add_pool(ROWS, instruction=INSTRUCTION)
        demos = retriever.retrieve(PROBE, k=4)
        retriever.retrieve("name[Cafe 1]", k=2)
    assert len(said) == 1, said
    note = said[0]
    assert "\n" not in note and note.startswith("this model was trained on sst2; 'own' is not one of them.")
    assert "So it is served with the base encoder (sbert), which the project measured better on unseen" in note
    assert SAID in note
    # The ranking and similarities are the sbert baseline's: the base encoder on the pool's inputs, no instruction.
    ranking = _sbert(project, [r["input"] for r in ROWS], [PROBE], 4)
    ids, sims = _ranked(demos)
    assert ids == ranking.ids[0].tolist()
    np.testing.assert_allclose(sims, ranking.similarities[0], rtol=1e-5, atol=1e-6)
    assert np.all(np.abs(sims) <= 1 + 1e-5)  # cosine
    # UDR (asked for) ranks with the tiny bi-encoder: other similarities (CLS, dot product, the instruction).
    with notes() as said:
        udr = _load(project, tmp_path, encoder="udr")
        udr.add_pool(ROWS, instruction=INSTRUCTION)
        udr_demos = udr.retrieve(PROBE, k=4)
    assert len(said) == 1 and "base encoder" not in said[0] and "measured" in said[0]
    assert not np.allclose(_ranked(udr_demos)[1], sims)
    # Python: from_pool takes it too; the retriever says which serves.
    own = type(retriever).from_pool(ROWS, instruction=INSTRUCTION, root=project, cache_dir=tmp_path / "c", batch_size=4)
    assert own.encoder_choice == "auto" and own._served["own"].base == "evidence"
    assert _results(own.retrieve(PROBE, k=4)) == _results(demos)
    udr_own = type(retriever).from_pool(ROWS, instruction=INSTRUCTION, root=project, encoder="udr", batch_size=4)
    assert _results(udr_own.retrieve(PROBE, k=4)) == _results(udr_demos)


@QUIET
@pytest.mark.parametrize("summary", ["unresolved", "at the edge", "missing", "another model"])
def test_without_resolved_evidence_udr_serves_as_before(project, served, tmp_path, summary):
    if summary == "unresolved":
        (project / "metrics/summary.json").write_text(json.dumps(SUMMARY))  # [-7.0, +0.8]
    elif summary == "at the edge":
        (project / "metrics/summary.json").write_text(json.dumps(AT_THE_EDGE))
    elif summary == "missing":
        (project / "metrics/summary.json").unlink()
    else:  # the project measured another UDR model than this one
        measured_model(project)
    with notes() as said:
        retriever = _load(project, tmp_path)
        retriever.add_pool(ROWS, instruction=INSTRUCTION)
        demos = retriever.retrieve(PROBE, k=4)
    assert len(said) == 1 and "base encoder" not in said[0]
    asked = _load(project, tmp_path, encoder="udr")
    asked.add_pool(ROWS, instruction=INSTRUCTION)
    assert _results(asked.retrieve(PROBE, k=4)) == _results(demos)
    plain = _load(served, tmp_path)  # no record, no summary: UDR
    plain.add_pool(ROWS, instruction=INSTRUCTION)
    assert _results(plain.retrieve(PROBE, k=4)) == _results(demos)


@QUIET
def test_a_trained_task_keeps_udr_and_an_untrained_one_gets_the_base_encoder(project, served, tmp_path):
    plain = _load(served, tmp_path)
    with notes() as said:
        retriever = _load(project, tmp_path)
        trained = retriever.retrieve(QUERY, task="sst2", k=3)
        assert said == []
        reviews = [{"text": "a delight", "label": "positive"}, {"text": "a slog", "label": "negative"}]
        retriever.add_pool(reviews, task="sst2", name="reviews")  # an own pool read as a trained task
        as_sst2 = retriever.retrieve(QUERY, task="reviews", k=2)
        assert said == []
        untrained = retriever.retrieve("what is the capital of france", task="break", k=3)
    assert _results(trained) == _results(plain.retrieve(QUERY, task="sst2", k=3))
    plain.add_pool(reviews, task="sst2", name="reviews")
    assert _results(as_sst2) == _results(plain.retrieve(QUERY, task="reviews", k=2))
    assert len(said) == 1 and said[0].startswith("this model was trained on sst2; 'break' is not one of them.")
    assert SAID in said[0]
    udr_break = plain.retrieve("what is the capital of france", task="break", k=3)
    assert _results(untrained) != _results(udr_break)
    assert all(abs(d.similarity) <= 1 + 1e-5 for d in untrained)
    # encoder="base" serves every pool with the base encoder, the trained ones too, and says it was asked.
    with notes() as said:
        base = _load(project, tmp_path, encoder="base")
        assert _results(base.retrieve("what is the capital of france", task="break", k=3)) == _results(untrained)
        assert _results(base.retrieve(QUERY, task="sst2", k=3)) != _results(trained)
    assert len(said) == 1 and 'It is served with the base encoder (sbert), as asked (encoder "base").' in said[0]


@QUIET
def test_a_bad_encoder_or_a_missing_base_encoder_is_one_line(project, tmp_path):
    with pytest.raises(UdrError, match=r"^bad encoder 'sbert': expected one of auto, udr, base$"):
        _load(project, tmp_path, encoder="sbert")
    shutil.rmtree(project / "models/base/encoder")
    with pytest.raises(UdrError, match=r'^encoder "base": no resolved base encoder at .*; serve with encoder "udr"'):
        _load(project, tmp_path, encoder="base")
    # auto without the base encoder: UDR, as before, with the note.
    with notes() as said:
        retriever = _load(project, tmp_path)
        retriever.add_pool(ROWS, instruction=INSTRUCTION)
        retriever.retrieve(PROBE, k=2)
    assert len(said) == 1 and "base encoder" not in said[0]


@QUIET
def test_a_model_of_another_base_encoder_keeps_udr(project, tmp_path):
    from udr.retriever.encoder import SETTINGS_NAME

    settings = project / "models/final" / SETTINGS_NAME
    data = json.loads(settings.read_text())
    data["base"] = "pypi:another-encoder"
    settings.write_text(json.dumps(data))
    retriever = _load(project, tmp_path)
    assert (
        retriever.base_encoder_dir[0] is None
        and "this model was trained from pypi:another-encoder" in (retriever.base_encoder_dir[1])
    )
    with notes() as said:
        retriever.add_pool(ROWS, instruction=INSTRUCTION)
        retriever.retrieve(PROBE, k=2)
    assert len(said) == 1 and "base encoder" not in said[0]


def test_the_cli_encoder_option(project, run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("UDR_CACHE_DIR", str(tmp_path / "cache"))
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    args = ["retrieve", PROBE, "--pool", str(pool), "--instruction", INSTRUCTION, "-k", "4", "--json"]
    code, out, err = run_cli(args, project)
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("udr: note: this model was trained on sst2;") and SAID in lines[0]
    ranking = _sbert(project, [r["input"] for r in ROWS], [PROBE], 4)
    assert [json.loads(line)["pool_id"] for line in out.splitlines()] == ranking.ids[0].tolist()
    code, udr_out, err = run_cli([*args, "--encoder", "udr"], project)
    assert code == 0 and udr_out != out and "base encoder" not in err and err.count("udr: note: ") == 1
    code, base_out, err = run_cli([*args, "--encoder", "base"], project)
    assert code == 0 and base_out == out and 'as asked (encoder "base")' in err
    code, _, err = run_cli([*args, "--encoder", "sbert"], project)
    assert code == 1 and err.strip() == "udr: error: bad encoder 'sbert': expected one of auto, udr, base"


@QUIET
def test_the_base_encoders_pool_embeddings_are_cached_across_calls(project, tmp_path, monkeypatch):
    """A pool the base encoder serves is embedded once: a second retriever over it (another call, another
    process) embeds no row and ranks as the first; two rows added embed those two only."""
    from udr.retriever.encoder import BiEncoder

    counts: list[int] = []
    original = BiEncoder.encode

    def counted(self, texts, side, **kw):
        if side == "demo":
            counts.append(len(texts))
        return original(self, texts, side, **kw)

    monkeypatch.setattr(BiEncoder, "encode", counted)
    first = _load(project, tmp_path, encoder="base")
    first.add_pool(ROWS, instruction=INSTRUCTION)
    ids, sims = _ranked(first.retrieve(PROBE, k=4))
    assert sum(counts) == len(ROWS)
    counts.clear()
    again = _load(project, tmp_path, encoder="base")
    again.add_pool(ROWS, instruction=INSTRUCTION)
    ids_again, sims_again = _ranked(again.retrieve(PROBE, k=4))
    assert counts == [] and ids_again == ids
    np.testing.assert_allclose(sims_again, sims, rtol=1e-6)
    more = [*ROWS, {**ROWS[0], "input": "name[Cafe 77], food[Thai]"}, {**ROWS[1], "input": "name[Cafe 78]"}]
    grown = _load(project, tmp_path, encoder="base")
    grown.add_pool(more, instruction=INSTRUCTION)
    grown.retrieve(PROBE, k=4)
    assert sum(counts) == 2
