"""udr.serving.request: `udr retrieve`'s request refuses each combination of options that does not go
together, in one line, when it is made (no model, no project needed); its answer is the Python API's."""

from __future__ import annotations

import json

import pytest

from udr.errors import UdrError
from udr.serving.request import RetrieveRequest, answer

QUERY = "a gripping, funny film"


@pytest.fixture
def queries(tmp_path):
    src = tmp_path / "queries.jsonl"
    src.write_text(json.dumps({"query": QUERY, "task": "sst2"}) + "\n")
    return src


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "give one QUERY or --input FILE (not both)"),
        ({"query": QUERY, "input_file": "QUERIES"}, "give one QUERY or --input FILE (not both)"),
        ({"query": QUERY, "output_file": "o.jsonl"}, "--output goes with --input (a batch)"),
        ({"query": QUERY, "instruction": "I: "}, "--instruction goes with --pool (your own demonstrations)"),
        ({"query": QUERY, "input_column": "text"}, "--input-column goes with --pool"),
        ({"query": QUERY, "target_column": "label"}, "--target-column goes with --pool"),
        ({"input_file": "QUERIES", "output_file": "QUERIES"}, "is the --input file: the results would replace it"),
        ({"input_file": "QUERIES", "output_file": "adir/../QUERIES"}, "is the --input file"),
        ({"input_file": "QUERIES", "output_file": "adir"}, "--output"),
        ({"query": "  "}, "empty query"),
        ({"query": QUERY, "diversity": 1.5}, "diversity out of range: 1.5"),
        ({"query": QUERY, "encoder": "sbert"}, "bad encoder 'sbert': expected one of auto, udr, base"),
    ],
)
def test_each_bad_combination_is_refused_in_one_line(tmp_path, queries, monkeypatch, options, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    options = {k: v.replace("QUERIES", queries.name) if isinstance(v, str) else v for k, v in options.items()}
    with pytest.raises(UdrError) as info:
        RetrieveRequest(**options)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_good_request_keeps_its_output_resolved(tmp_path, queries, monkeypatch):
    monkeypatch.chdir(tmp_path)
    request = RetrieveRequest(input_file=queries, output_file="adir/../out.jsonl", k=4)
    assert request.output_file == tmp_path / "out.jsonl" and request.batch
    own = RetrieveRequest(query=QUERY, pool=tmp_path / "mine.csv", instruction="I: ", input_column="text")
    assert not own.batch and own.output_file is None
    assert RetrieveRequest(input_file=queries, output_file="-").output_file is None  # stdout, no file named "-"


def test_the_answer_is_the_python_apis(served, tmp_path, queries, monkeypatch):
    from udr import Retriever

    monkeypatch.setenv("UDR_CACHE_DIR", str(tmp_path / "cache"))
    params = served / "params.yaml"
    api = Retriever.load(root=served, cache_dir=tmp_path / "api-cache")
    one = answer(RetrieveRequest(query=QUERY, task="sst2", k=3, prompt=True, params=params), progress=False)
    demos = api.retrieve(QUERY, task="sst2", k=3)
    assert one.task == "sst2" and [d.pool_id for d in one.demonstrations] == [d.pool_id for d in demos]
    assert one.prompt == api.prompt(QUERY, demos, task="sst2") and one.lines == ()
    out = tmp_path / "out.jsonl"
    batch = answer(RetrieveRequest(input_file=queries, output_file=out, k=3, params=params), progress=False)
    assert out.read_text() == "".join(line + "\n" for line in batch.lines) and len(batch.lines) == 1
    assert [d["pool_id"] for d in json.loads(batch.lines[0])["demonstrations"]] == [d.pool_id for d in demos]
