"""udr.serving.export and `udr export`: the trained bi-encoder as a sentence-transformers model (a Router
over E_q and E_d, task instructions as prompts) retrieves exactly what udr.Retriever does, loads back
into udr, and carries a model card written from the run."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from tests.conftest import SERVED_TASKS

pytest.importorskip("sentence_transformers", reason="the sentence-transformers extra is not installed")


@pytest.fixture(scope="module")
def exported(served, real_model, tmp_path_factory):
    from tests.conftest import run_udr

    out = tmp_path_factory.mktemp("export") / "udr-st"
    run_udr(served, "export", str(out), "--model", str(real_model), "--name", "me/udr-retriever")
    return out


def _queries(root, task, n=6):
    import polars as pl

    return pl.read_parquet(root / "data" / "prepared" / task / "test.parquet")["input"].to_list()[:n]


def test_sentence_transformers_top_k_equals_the_udr_retriever(served, real_model, exported, tmp_path):
    from sentence_transformers import SentenceTransformer

    from udr import Retriever
    from udr.data.tasks import get_task
    from udr.serving.pools import prepared_pool

    model = SentenceTransformer(str(exported), device="cpu")
    retriever = Retriever.load(real_model, root=served, cache_dir=tmp_path / "cache")
    for name in SERVED_TASKS:
        task, pool = get_task(name), prepared_pool(served, name)
        docs = model.encode_document(
            [task.render(x, y) for x, y in zip(pool.inputs, pool.outputs)], prompt_name=name, convert_to_numpy=True
        )
        queries = _queries(served, name)
        scores = model.similarity(model.encode_query(queries, prompt_name=name), docs).numpy()
        for query, row in zip(queries, scores):
            want = [d.pool_id for d in retriever.retrieve(query, task=name, k=5)]
            assert [int(pool.ids[i]) for i in np.argsort(-row, kind="stable")[:5]] == want


def test_udr_loads_the_export_and_retrieves_the_same(served, real_model, exported, tmp_path):
    from udr import Retriever

    original = Retriever.load(real_model, root=served, cache_dir=tmp_path / "a")
    loaded = Retriever.load(exported, root=served, cache_dir=tmp_path / "b")
    for name in SERVED_TASKS:
        for query in _queries(served, name, 3):
            got = loaded.retrieve(query, task=name, k=4)
            want = original.retrieve(query, task=name, k=4)
            assert [d.pool_id for d in got] == [d.pool_id for d in want]
            assert [d.similarity for d in got] == pytest.approx([d.similarity for d in want], abs=1e-5)


def test_export_has_prompts_metadata_and_a_model_card(served, exported):
    from sentence_transformers import SentenceTransformer

    from udr.data.tasks import get_task

    model = SentenceTransformer(str(exported), device="cpu")
    assert model.prompts["sst2"] == get_task("sst2").instruction and model.similarity_fn_name == "dot"
    meta = json.loads((exported / "udr_export.json").read_text())
    assert set(meta["tasks"]) == set(SERVED_TASKS) and meta["query_prompts"] is True
    card = (exported / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: sentence-transformers")
    for needle in (
        "## Tasks and data",
        "| sst2 | in the project (training not recorded) | classification |",
        "## Limitations",
        "## Usage",
    ):
        assert needle in card
    assert 'SentenceTransformer("me/udr-retriever")' in card and 'Retriever.load("me/udr-retriever")' in card
    assert "UDRExampleSelector(" in card and "UDRFewShot(" in card


def test_export_errors_are_one_line(run_cli, served, tmp_path):
    (tmp_path / "afile").write_text("x")
    for args, message in [
        (["export", str(tmp_path / "x"), "--format", "onnx"], "unknown export format 'onnx'"),
        (["export", str(tmp_path / "afile")], "is a file"),
        (["export", str(tmp_path / "afile" / "sub")], "afile is a file, not a directory"),
        (["export", "."], "it holds the current directory"),
        (["export", str(tmp_path / "x"), "--model", str(tmp_path / "none")], "missing model"),
    ]:
        code, _, err = run_cli(args, served)
        assert code == 1 and message in err and len(err.strip().splitlines()) == 1, err


def test_the_model_cards_usage_snippets_run(exported, capsys):
    import re

    pytest.importorskip("langchain_core", reason="the langchain extra is not installed")
    pytest.importorskip("dspy", reason="the dspy extra is not installed")
    card = (exported / "README.md").read_text().replace("me/udr-retriever", str(exported))
    blocks = re.findall(r"```python\n(.*?)```", card, re.S)
    assert len(blocks) == 4  # sentence-transformers, udr, LangChain, DSPy
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "model card", "exec"), namespace)
    assert "Demonstration(pool_id=" in capsys.readouterr().out


def test_export_replaces_only_an_earlier_export_or_an_empty_directory(run_cli, served, real_model, exported, tmp_path):
    """The user's folder, the project's models/ and the project itself are refused, untouched; an earlier
    export and an empty directory are replaced; no staging folder is left beside the export."""
    import shutil

    mine = tmp_path / "mydocs"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    for target in (mine, served / "models", served):
        before = sorted(p.name for p in target.iterdir())
        code, _, err = run_cli(["export", str(target), "--model", str(real_model)], served)
        refused = "holds the current directory" if target == served else "not an earlier udr export"
        assert code == 1 and refused in err and len(err.strip().splitlines()) == 1, err
        assert sorted(p.name for p in target.iterdir()) == before
    assert (mine / "notes.txt").read_text() == "keep me"
    again = tmp_path / "again"
    shutil.copytree(exported, again)
    (again / "stale.txt").write_text("from the old export")
    empty = tmp_path / "empty"
    empty.mkdir()
    for target in (again, empty):
        code, _, err = run_cli(["export", str(target), "--model", str(real_model)], served)
        assert code == 0, err
        assert (target / "udr_export.json").is_file() and not (target / "stale.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again", "empty", "mydocs"]


@pytest.mark.parametrize("name", ["query", "document"])
def test_a_task_named_like_a_sentence_transformers_prompt_is_not_exported(real_model, tmp_path, name):
    from udr.data.tasks import get_task
    from udr.errors import UdrError
    from udr.serving.export import export_sentence_transformers

    with pytest.raises(UdrError, match=f"task '{name}' cannot be exported: .*rename the task"):
        export_sentence_transformers(real_model, tmp_path / "out", {name: get_task("sst2")}, "card")
    assert not (tmp_path / "out").exists()


def test_a_plain_encode_of_the_export_raises_instead_of_picking_a_side(exported):
    """Generic tools call .encode() for queries: the export has no default route, so that is an error
    naming the fix, never queries silently embedded by the document encoder."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(exported), device="cpu")
    with pytest.raises(ValueError, match="Could not determine route"):
        model.encode(["a fine film"])
    assert np.allclose(model.encode(["a fine film"], task="query"), model.encode_query(["a fine film"]))
    assert "A plain model.encode() raises" in (exported / "README.md").read_text()


def test_the_export_prints_no_progress_bars_in_a_log(served, real_model, tmp_path):
    """Off a terminal (a log, a pipe) transformers' loading and saving bars stay off."""
    import subprocess
    import sys

    out = tmp_path / "logged"
    done = subprocess.run(
        [sys.executable, "-m", "udr.cli", "export", str(out), "--model", str(real_model)],
        cwd=served,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    printed = (done.stdout + done.stderr).strip().splitlines()
    assert printed[-1].startswith("exported ") and not [line for line in printed if "%|" in line], printed


@pytest.mark.filterwarnings("ignore::udr.serving.evidence.UntrainedTaskWarning")
def test_an_export_carries_its_pools_and_serves_them_from_anywhere(
    run_cli, served, real_model, exported, tmp_path, monkeypatch
):
    """`udr retrieve -t TASK --model EXPORT` serves the pools the export carries, outside any project, as the
    model it was exported from does in its project; a task it lacks is one line naming its pools and the fix."""
    from udr import Retriever
    from udr.paths import Paths

    monkeypatch.setenv("UDR_CACHE_DIR", str(tmp_path / "cache"))
    meta = json.loads((exported / "udr_export.json").read_text())
    assert meta["pools"] == sorted(SERVED_TASKS)
    for name in SERVED_TASKS:  # the prepared rows, byte for byte; no embeddings (a few KB per task here)
        assert (exported / "pools" / f"{name}.parquet").read_bytes() == Paths(served).prepared(
            name, "train"
        ).read_bytes()
    assert not (exported / "index").exists()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    original = Retriever.load(real_model, root=served, cache_dir=tmp_path / "a")
    for name in SERVED_TASKS:
        query = _queries(served, name, 1)[0]
        code, out, err = run_cli(
            ["retrieve", query, "-t", name, "--model", str(exported), "-k", "4", "--json"], elsewhere
        )
        assert code == 0, err
        want = [d.pool_id for d in original.retrieve(query, task=name, k=4)]
        assert [json.loads(line)["pool_id"] for line in out.splitlines()] == want
    assert Retriever.load(exported, root=elsewhere, cache_dir=tmp_path / "b").tasks() == sorted(SERVED_TASKS)
    code, _, err = run_cli(["retrieve", "my card was declined", "-t", "banking", "--model", str(exported)], elsewhere)
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "carries no pool of task 'banking' (its pools: break, sst2)" in err
    assert "--pool FILE" in err and "`udr export DIR -t banking`" in err


def test_export_task_option_chooses_the_pools(run_cli, served, real_model, tmp_path):
    """-t exports those tasks' prompts and pools; a task with no pool to carry is refused in one line; an
    indexed model folder's export carries the folder's own pools."""
    out = tmp_path / "only-sst2"
    code, printed, err = run_cli(["export", str(out), "--model", str(real_model), "-t", "sst2"], served)
    assert code == 0, err
    meta = json.loads((out / "udr_export.json").read_text())
    assert list(meta["tasks"]) == ["sst2"] and meta["pools"] == ["sst2"]
    assert sorted(p.name for p in (out / "pools").iterdir()) == ["sst2.parquet", "tasks.json"]
    assert "1 task prompts, 1 pools" in err
    code, _, err = run_cli(["export", str(tmp_path / "x"), "--model", str(real_model), "-t", "trec"], served)
    assert code == 1 and "task 'trec' has no pool to export" in err and "udr prepare -t trec" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "x").exists()
    final = served / "models" / "final"
    indexed = tmp_path / "indexed"
    code, _, err = run_cli(["export", str(indexed)], served)
    assert code == 0, err
    for name in SERVED_TASKS:
        assert (indexed / "pools" / f"{name}.parquet").read_bytes() == (
            final / "pools" / f"{name}.parquet"
        ).read_bytes()


@pytest.mark.filterwarnings("ignore::udr.serving.evidence.UntrainedTaskWarning")
def test_an_own_pools_ids_are_the_rows_a_sentence_transformers_export_scores(
    run_cli, served, exported, tmp_path, monkeypatch
):
    """The same CSV row has one pool id from `udr retrieve --pool` and from Python, and it is the row's
    position in the list a sentence-transformers user encodes: the ranking of the export's
    `encode_document` over the rows names the same rows."""
    import csv

    from sentence_transformers import SentenceTransformer

    from udr import Retriever
    from udr.serving.pools import own_task

    monkeypatch.setenv("UDR_CACHE_DIR", str(tmp_path / "cache"))
    rows = [
        ("How many singers do we have?", "SELECT count(*) FROM singer"),
        ("What is the maximum capacity of all stadiums?", "SELECT max(capacity) FROM stadium"),
        ("Show the names of stadiums with a capacity above 5000.", "SELECT name FROM stadium WHERE capacity > 5000"),
        ("List every concert held in 2014.", "SELECT * FROM concert WHERE year = 2014"),
        ("What is the average age of all singers?", "SELECT avg(age) FROM singer"),
    ]
    path = tmp_path / "sql.csv"
    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows([("question", "sql"), *rows])
    instruction, query = "Translate the question into SQL: ", "How many stadiums hold more than 10000 people?"
    columns = ("--input-column", "question", "--target-column", "sql", "--instruction", instruction)
    code, out, err = run_cli(
        ["retrieve", query, "--pool", str(path), *columns, "--model", str(exported), "-k", "3", "--json"], tmp_path
    )
    assert code == 0, err
    got = [json.loads(line) for line in out.splitlines()]
    assert all(rows[x["pool_id"]] == (x["input"], x["output"]) for x in got)
    own = Retriever.from_pool(
        path, instruction=instruction, input_column="question", target_column="sql", model=exported, root=tmp_path
    )
    assert [d.pool_id for d in own.retrieve(query, k=3)] == [x["pool_id"] for x in got]
    model = SentenceTransformer(str(exported), device="cpu")
    task = own_task(instruction)
    docs = model.encode_document([task.render(x, y) for x, y in rows], prompt=instruction, convert_to_numpy=True)
    scores = model.similarity(model.encode_query([query], prompt=instruction), docs).numpy()[0]
    assert [int(i) for i in np.argsort(-scores, kind="stable")[:3]] == [x["pool_id"] for x in got]


def test_an_export_another_process_writes_is_refused_naming_its_pid(run_cli, served, real_model, tmp_path):
    from tests.locking import another_process_holding

    target = tmp_path / "shared-export"
    with another_process_holding(target) as pid:
        code, _, err = run_cli(["export", str(target), "--model", str(real_model)], served)
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert f"pid {pid}" in err and "export folder" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written, no lock left


CARDS = [
    ("my card was declined at the till", "declined"),
    ("the app refused my payment", "declined"),
    ("why was my payment rejected", "declined"),
    ("I lost my card on the train", "lost"),
    ("someone stole my wallet and card", "lost"),
    ("where can I order a new card", "lost"),
    ("how do I raise my credit limit", "limit"),
    ("can I get a higher limit on my card", "limit"),
    ("my limit is too low for rent", "limit"),
]


@pytest.mark.filterwarnings("ignore::udr.serving.evidence.UntrainedTaskWarning")
def test_an_export_serves_filters_label_options_and_incremental_pools(
    run_cli, served, real_model, exported, tmp_path, monkeypatch, embedded_rows
):
    """An export, loaded back outside any project, selects as the model it was exported from does: the label
    options on a pool it carries (`udr retrieve --model EXPORT --per-label`), a metadata filter on an own pool
    (`--where` and `filter=`, the same rows as a pool of the passing rows alone), and an own pool grown by rows
    embeds only the added rows; a filter with a quota selects within the passing rows."""
    import csv

    from udr import Retriever

    monkeypatch.setenv("UDR_CACHE_DIR", str(tmp_path / "cli-cache"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    original = Retriever.load(real_model, root=served, cache_dir=tmp_path / "a")
    labels = {"label_weight": 0.5, "label_votes": 8, "per_label": 2}
    flags = ["--label-weight", "0.5", "--label-votes", "8", "--per-label", "2"]
    for query in _queries(served, "sst2", 2):
        args = ["retrieve", query, "-t", "sst2", "--model", str(exported), "-k", "4", *flags, "--json"]
        code, out, err = run_cli(args, elsewhere)
        assert code == 0, err
        got = [json.loads(line) for line in out.splitlines()]
        want = original.retrieve(query, task="sst2", k=4, **labels)
        assert [g["pool_id"] for g in got] == [d.pool_id for d in want]
        assert sorted(Counter(g["output"] for g in got).values()) == [2, 2]

    rows = [(text, intent, ("app", "shop")[i % 2]) for i, (text, intent) in enumerate(CARDS)]
    path = tmp_path / "cards.csv"
    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows([("text", "intent", "channel"), *rows])
    columns = {"instruction": "Intent of the message: ", "input_column": "text", "target_column": "intent"}
    loaded = Retriever.load(exported, root=elsewhere, cache_dir=tmp_path / "b")
    name = loaded.add_pool(path, **columns)
    kept = [i for i, row in enumerate(rows) if row[2] == "app"]
    instruction = columns["instruction"]
    app_only = [{"input": rows[i][0], "target": rows[i][1]} for i in kept]
    loaded.add_pool(app_only, instruction=instruction, name="app-only")
    query = "my payment did not go through"
    got = loaded.retrieve(query, task=name, k=3, filter={"channel": "app"})
    assert [(d.pool_id, d.input) for d in got] == [
        (kept[d.pool_id], d.input) for d in loaded.retrieve(query, task="app-only", k=3)
    ]
    cli_columns = [f"--{key.replace('_', '-')}={value}" for key, value in columns.items()]
    args = ["retrieve", query, "--pool", str(path), *cli_columns, "--where", "channel=app", "-k", "3", "--json"]
    code, out, err = run_cli([*args, "--model", str(exported)], elsewhere)
    assert code == 0, err
    assert [json.loads(line)["pool_id"] for line in out.splitlines()] == [d.pool_id for d in got]
    # a quota within the filter: as over the pool of the passing rows alone
    code, out, err = run_cli([*args, "--model", str(exported), "--per-label", "1"], elsewhere)
    assert code == 0, err
    quota = loaded.retrieve(query, task="app-only", k=3, per_label=1)
    assert [json.loads(line)["pool_id"] for line in out.splitlines()] == [kept[d.pool_id] for d in quota]
    assert sorted(json.loads(line)["output"] for line in out.splitlines()) == ["declined", "limit", "lost"]

    records = [{"input": text, "target": intent, "channel": channel} for text, intent, channel in rows]
    embedded_rows.clear()
    grown = Retriever.load(exported, root=elsewhere, cache_dir=tmp_path / "c", encoder="udr")
    grown.add_pool(records[:6], instruction=instruction, name="cards")
    grown.add_pool(records, instruction=instruction, name="cards")  # three rows added
    assert embedded_rows == [6, 3]
    fresh = Retriever.load(exported, root=elsewhere, cache_dir=tmp_path / "d", encoder="udr")
    fresh.add_pool(records, instruction=instruction, name="cards")
    got = grown.retrieve(query, task="cards", k=4, per_label="balanced")
    want = fresh.retrieve(query, task="cards", k=4, per_label="balanced")
    assert [d.pool_id for d in got] == [d.pool_id for d in want]
    assert [d.similarity for d in got] == pytest.approx([d.similarity for d in want], abs=1e-5)
    assert sorted(Counter(d.output for d in got).values()) == [1, 1, 2]


def test_an_export_is_the_same_bytes_with_and_without_hf_hub_offline(served, real_model, tmp_path):
    """transformers writes how a tokenizer was loaded (`local_files_only`, from HF_HUB_OFFLINE) into the
    tokenizer_config.json it saves: an export made offline differed from one made online."""
    import os
    import subprocess
    import sys

    files = {}
    for offline in (True, False):
        env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"} | (
            {"HF_HUB_OFFLINE": "1"} if offline else {}
        )
        out = tmp_path / "udr-st"  # one folder, which the card names: the second export replaces the first
        command = [sys.executable, "-m", "udr.cli", "export", str(out), "--model", str(real_model)]
        done = subprocess.run(command, cwd=served, capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        files[offline] = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert any(path.name == "tokenizer_config.json" for path in files[True])
    assert files[True] == files[False]
