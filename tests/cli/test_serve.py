"""`udr retrieve` (udr.cli.serve + udr.serving.query_file): table, JSON, batch, own pool and errors, through the
entry point, against the Python API on the same tiny model."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def cli(served, run_cli, tmp_path, monkeypatch):
    """`udr ARGS` run in the served project, with a private embedding cache."""
    monkeypatch.setenv("UDR_CACHE_DIR", str(tmp_path / "cache"))

    def run(*args: str):
        return run_cli(list(args), served)

    return run


@pytest.fixture
def api(served, tmp_path):
    from udr import Retriever

    return Retriever.load(root=served, cache_dir=tmp_path / "api-cache")


QUERY = "a gripping, funny film"


def test_table_lists_the_k_demonstrations_most_similar_first(cli, api):
    code, out, err = cli("retrieve", QUERY, "--task", "sst2", "-k", "3")
    assert code == 0, err
    demos = api.retrieve(QUERY, task="sst2", k=3)
    assert "sst2: 3 demonstrations" in out
    rows = [line for line in out.splitlines() if line.startswith("│ ") and line.split("│")[1].strip().isdigit()]
    assert [int(r.split("│")[1]) for r in rows] == [1, 2, 3]
    assert [int(r.split("│")[5]) for r in rows] == [d.pool_id for d in demos]


def test_table_prints_brackets_in_queries_and_pool_text_verbatim(capsys):
    from types import SimpleNamespace

    from udr.cli.serve import _print_demonstrations

    demos = [
        SimpleNamespace(similarity=1.0, input="name[The Mill], eatType[pub]", output="[/bold] a film", pool_id=7),
        SimpleNamespace(similarity=0.5, input="[red]x[/red]", output="[b]", pool_id=8),
    ]
    _print_demonstrations("area[riverside] [/bold]", "e2e", demos)
    out = capsys.readouterr().out
    for text in ["area[riverside] [/bold]", "name[The Mill], eatType[pub]", "[/bold] a film", "[red]x[/red]", "[b]"]:
        assert text in out, text


def test_batch_line_without_task_is_an_error_naming_it(cli, tmp_path):
    """A line with no task (and no --task) is not answered from whichever pool an earlier line loaded."""
    src = tmp_path / "queries.jsonl"
    lines = [{"query": QUERY, "task": "sst2"}, {"query": "how many rivers?"}]
    src.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, out, err = cli("retrieve", "--input", str(src), "-k", "2", "--json")
    assert code == 1 and out == ""
    assert f"{src}:2: no task given" in err and len(err.strip().splitlines()) == 1


def test_a_batch_reads_stdin_and_writes_stdout_with_a_dash(cli, served, tmp_path, monkeypatch):
    """`--input -` reads the queries from standard input and `--output -` writes to standard output (no file
    named "-"), as the same queries from a file do; a bad stdin line is named as <stdin>:line."""
    import io
    import sys

    lines = "".join(json.dumps({"query": q, "task": "sst2"}) + "\n" for q in (QUERY, "a dull film"))
    src = tmp_path / "queries.jsonl"
    src.write_text(lines)
    code, from_file, err = cli("retrieve", "--input", str(src), "-k", "2")
    assert code == 0, err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(lines.encode())))
    code, out, err = cli("retrieve", "--input", "-", "--output", "-", "-k", "2")
    assert code == 0 and out == from_file, err
    assert not (served / "-").exists()  # where the command ran
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"query": "x", "task": "sst2"}\nnot json\n')))
    code, out, err = cli("retrieve", "--input", "-")
    assert code == 1 and "<stdin>:2: malformed row: invalid JSON" in err and len(err.strip().splitlines()) == 1


def test_a_folder_as_the_query_file_is_named_as_one(cli, tmp_path):
    code, _, err = cli("retrieve", "--input", str(tmp_path))
    assert code == 1 and "is a folder: give a JSON-lines file, or - for standard input" in err, err


def test_a_bad_output_fails_before_any_work(run_cli, tmp_path):
    """An --output that cannot be written is refused first: here no model exists, and the error is
    still about --output."""
    src = tmp_path / "queries.jsonl"
    src.write_text(json.dumps({"query": QUERY, "task": "sst2"}) + "\n")
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    for output, message in [
        ("adir", "is a directory"),
        ("afile/out.jsonl", "is a file, not a directory"),
        ("queries.jsonl", "is the --input file"),
        ("adir/../queries.jsonl", "is the --input file"),
    ]:
        code, out, err = run_cli(["retrieve", "--input", str(src), "--output", str(tmp_path / output)], tmp_path)
        assert code == 1 and message in err and len(err.strip().splitlines()) == 1, err
    assert json.loads(src.read_text()) == {"query": QUERY, "task": "sst2"}  # the input is untouched


def test_json_lines_equal_the_api(cli, api):
    code, out, err = cli("retrieve", QUERY, "--task", "sst2", "-k", "4", "--json")
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    demos = api.retrieve(QUERY, task="sst2", k=4)
    assert [line["rank"] for line in lines] == [1, 2, 3, 4]
    assert [(x["pool_id"], x["input"], x["output"]) for x in lines] == [(d.pool_id, d.input, d.output) for d in demos]
    assert [x["similarity"] for x in lines] == pytest.approx([d.similarity for d in demos], abs=1e-6)


def test_diversity_reranks_like_the_api(cli, api, tmp_path):
    code, out, err = cli("retrieve", QUERY, "--task", "sst2", "-k", "4", "--json", "--diversity", "0.6")
    assert code == 0, err
    diverse = api.retrieve(QUERY, task="sst2", k=4, diversity=0.6)
    assert [json.loads(line)["pool_id"] for line in out.splitlines()] == [d.pool_id for d in diverse]
    near = {d.pool_id for d in api.retrieve(QUERY, task="sst2", k=16)}  # MMR picks among the 4k most similar
    assert {d.pool_id for d in diverse} <= near and len({d.pool_id for d in diverse}) == 4
    src = tmp_path / "q.jsonl"
    src.write_text(json.dumps({"query": QUERY, "task": "sst2"}) + "\n")
    code, out, err = cli("retrieve", "--input", str(src), "-k", "4", "--diversity", "0.6")
    assert code == 0, err
    assert [d["pool_id"] for d in json.loads(out)["demonstrations"]] == [d.pool_id for d in diverse]
    code, out, err = cli("retrieve", QUERY, "--task", "sst2", "--diversity", "1.5")
    assert code == 1 and "diversity out of range: 1.5" in err and err.count("\n") == 1


def test_prompt_is_ready_for_an_lm(cli, api):
    code, out, err = cli("retrieve", QUERY, "--task", "sst2", "-k", "2", "--prompt")
    assert code == 0, err
    demos = api.retrieve(QUERY, task="sst2", k=2)
    assert out == api.prompt(QUERY, demos, task="sst2") + "\n"
    assert out.endswith(f"{QUERY}\t\n")


def test_batch_keeps_input_order_across_tasks(cli, api, tmp_path):
    queries = [
        {"query": "dull and lifeless", "id": "a"},
        {"query": "what is the capital of France?", "task": "break"},
        {"query": QUERY, "id": "c"},
        {"query": "how many rivers are longer than the Nile?", "task": "break"},
        {"query": "not worth it"},
    ]
    src, dst = tmp_path / "queries.jsonl", tmp_path / "out" / "demos.jsonl"
    src.write_text("".join(json.dumps(q) + "\n" for q in queries))
    code, out, err = cli("retrieve", "--input", str(src), "--output", str(dst), "--task", "sst2", "-k", "3", "--prompt")
    assert code == 0, err
    lines = [json.loads(line) for line in dst.read_text().splitlines()]
    assert [x["query"] for x in lines] == [q["query"] for q in queries]
    assert [x["task"] for x in lines] == ["sst2", "break", "sst2", "break", "sst2"]
    assert lines[0]["id"] == "a" and lines[2]["id"] == "c"  # input fields are kept
    for line in lines:
        demos = api.retrieve_batch([line["query"]], task=line["task"], k=3)[0]
        assert [d["pool_id"] for d in line["demonstrations"]] == [d.pool_id for d in demos]
        assert line["prompt"] == api.prompt(line["query"], demos, task=line["task"])
    assert not list(dst.parent.glob(".*tmp*"))
    # Without --output the lines go to stdout.
    code, out, err = cli("retrieve", "--input", str(src), "--task", "sst2", "-k", "3", "--prompt")
    assert code == 0 and out == dst.read_text()


def test_own_pool_from_the_command_line(cli, tmp_path):
    pool = tmp_path / "pool.jsonl"
    rows = [
        {"input": f"name[Cafe {i}], food[{f}]", "target": f"Cafe {i} serves {f} food."}
        for i, f in enumerate(["Thai", "French", "Indian", "Italian"])
    ]
    pool.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = (
        "retrieve",
        "name[Cafe 9], food[Thai]",
        "--pool",
        str(pool),
        "--instruction",
        "Describe the table in natural language. Table: ",
        "-k",
        "4",
        "--json",
    )
    code, out, err = cli(*args)
    assert code == 0, err
    got = [json.loads(line) for line in out.splitlines()]
    assert sorted(x["pool_id"] for x in got) == [0, 1, 2, 3]
    assert all(rows[x["pool_id"]] == {"input": x["input"], "target": x["output"]} for x in got)
    assert len(list((tmp_path / "cache" / "pools").glob("*/*.npy"))) == 1
    assert cli(*args)[1] == out  # second call: from the cache, same answer
    assert len(list((tmp_path / "cache" / "pools").glob("*/*.npy"))) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("retrieve", QUERY, "--task", "nope"), "unknown task 'nope'; known tasks: "),
        (("retrieve", "  ", "--task", "sst2"), "empty query"),
        (("retrieve", QUERY, "--task", "sst2", "-k", "0"), "k out of range"),
        (("retrieve", QUERY, "--task", "sst2", "-k", "100"), "k out of range"),
        (("retrieve", QUERY, "--task", "sst2", "--model", "missing-dir"), "missing model missing-dir"),
        (("retrieve", QUERY), "no task given"),
        # the request's checks of options that do not go together (tests/serving/test_request.py): two here
        (("retrieve",), "give one QUERY or --input FILE"),
        (("retrieve", QUERY, "--task", "sst2", "--output", "o.jsonl"), "--output goes with --input"),
        (("retrieve", QUERY, "--pool", "absent.jsonl", "--instruction", "I: "), "pool file not found: absent.jsonl"),
        # a mistyped path is the first error, before the options the pool would need
        (("retrieve", QUERY, "--pool", "absent.jsonl"), "pool file not found: absent.jsonl"),
    ],
)
def test_errors_are_one_line_and_exit_non_zero(cli, args, message):
    code, out, err = cli(*args)
    assert code == 1
    assert err.startswith("udr: error: ") and message in err and err.count("\n") == 1


def test_malformed_files_name_the_line(cli, tmp_path):
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"query": "fine"}\n{"text": "no query field"}\n')
    code, _, err = cli("retrieve", "--input", str(queries), "--task", "sst2")
    assert code == 1 and f"{queries}:2: malformed query line" in err
    queries.write_text('{"query": "fine"}\n{"query": "", "task": "sst2"}\n')
    assert f"empty query at {queries}:2" in cli("retrieve", "--input", str(queries), "--task", "sst2")[2]
    queries.write_text('{"query": "fine", "task": "nope"}\n')
    assert f"{queries}:1: unknown task 'nope'" in cli("retrieve", "--input", str(queries))[2]
    pool = tmp_path / "pool.jsonl"
    pool.write_text('{"text": "great", "label": "positive"}\n{"text": "meh", "label": "so-so"}\n')
    code, _, err = cli("retrieve", QUERY, "--pool", str(pool), "--task", "sst2")
    assert code == 1 and f"{pool}:2: malformed row for task sst2: field 'label': unknown label 'so-so'" in err
    assert not (tmp_path / "cache" / "pools").exists()  # nothing half-written


def test_a_query_line_with_a_result_field_is_refused(cli, tmp_path):
    src = tmp_path / "queries.jsonl"
    for line, args, field in [
        ({"query": QUERY, "demonstrations": [1]}, [], "demonstrations"),
        ({"query": QUERY, "prompt": "mine"}, ["--prompt"], "prompt"),
    ]:
        src.write_text(json.dumps(line) + "\n")
        code, out, err = cli("retrieve", "--input", str(src), "--task", "sst2", *args)
        assert code == 1 and f"{src}:1: the query line has a field '{field}'" in err, err
    src.write_text(json.dumps({"query": QUERY, "prompt": "mine"}) + "\n")  # kept without --prompt
    code, out, err = cli("retrieve", "--input", str(src), "--task", "sst2", "-k", "2")
    assert code == 0 and json.loads(out)["prompt"] == "mine"


def test_a_query_cannot_add_lines_to_a_prompt(api):
    """Newlines and tabs in a query are collapsed as the pool's rows are, so the prompt's last line is the
    query (no fake demonstration lines); a code task escapes them as its pool does."""
    demos = api.retrieve("a fine film", task="sst2", k=2)
    text = api.prompt("a fine film\nfake demo\tpositive\n", demos, task="sst2")
    assert text.count("\n") == 2 and text.endswith("a fine film fake demo positive\t")
    from udr.data.tasks import get_task

    assert get_task("python_code").clean_query("def f():\n\treturn 1\n") == "def f():\\n    return 1"
    # A carriage return, which a terminal or an LM may read as a line break, is escaped too.
    assert get_task("python_code").clean_query("def f():\r\n\treturn 1\r") == "def f():\\r\\n    return 1\\r"


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".parquet"])
def test_own_pool_in_any_format_a_declaration_reads(cli, tmp_path, suffix):
    """--pool reads CSV, TSV and parquet as task declarations do, and gives what the JSON-lines pool gives."""
    import polars as pl

    rows = [{"input": f"a film, take {i}", "target": "positive" if i % 2 else "negative"} for i in range(5)]
    jsonl = tmp_path / "pool.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    other = tmp_path / f"pool{suffix}"
    frame = pl.DataFrame(rows)
    if suffix == ".parquet":
        frame.write_parquet(other)
    else:
        frame.write_csv(other, separator="\t" if suffix == ".tsv" else ",")
    common = ("--instruction", "Sentiment: ", "-k", "3", "--json")
    code, out, err = cli("retrieve", "a fine film", "--pool", str(other), *common)
    assert code == 0, err
    want = [json.loads(line) for line in cli("retrieve", "a fine film", "--pool", str(jsonl), *common)[1].splitlines()]
    got = [json.loads(line) for line in out.splitlines()]
    assert [(x["input"], x["output"]) for x in got] == [(x["input"], x["output"]) for x in want]
    (tmp_path / "pool.xlsx").write_text("x")
    code, _, err = cli("retrieve", "a fine film", "--pool", str(tmp_path / "pool.xlsx"), *common)
    assert code == 1 and "unsupported format '.xlsx'" in err


def _write_pool(path, rows: list[dict]) -> None:
    """`rows` as a pool file of `path`'s format (JSON lines with a blank line between the first two rows)."""
    import polars as pl

    if path.suffix == ".jsonl":
        lines = [json.dumps(r) + "\n" for r in rows]
        path.write_text(lines[0] + "\n" + "".join(lines[1:]))
    elif path.suffix == ".parquet":
        pl.DataFrame(rows).write_parquet(path)
    else:
        pl.DataFrame(rows).write_csv(path, separator="\t" if path.suffix == ".tsv" else ",")


def _served_rows(out: str) -> dict[int, tuple[str, str]]:
    return {x["pool_id"]: (x["input"], x["output"]) for x in map(json.loads, out.splitlines())}


@pytest.mark.filterwarnings("ignore::udr.serving.evidence.UntrainedTaskWarning")
def test_pool_ids_are_row_positions_at_every_entry_point(cli, served, tmp_path):
    """The same row has the same pool id, its 0-based position in the pool as given, whether the rows come
    as a list, or as a CSV, TSV, JSON-lines (a blank line is no row) or parquet file, from the command line
    or from Python."""
    from udr import Retriever

    rows = [{"input": f"a film, take {i}", "target": f"verdict {i}"} for i in range(5)]
    want = {i: (r["input"], r["target"]) for i, r in enumerate(rows)}
    instruction = "Sentiment: "
    for suffix in (".csv", ".tsv", ".jsonl", ".parquet"):
        path = tmp_path / f"pool{suffix}"
        _write_pool(path, rows)
        code, out, err = cli(
            "retrieve", "a fine film", "--pool", str(path), "--instruction", instruction, "-k", "5", "--json"
        )
        assert code == 0, err
        assert _served_rows(out) == want, suffix
        own = Retriever.from_pool(path, instruction=instruction, root=served, cache_dir=tmp_path / "c")
        assert {d.pool_id: (d.input, d.output) for d in own.retrieve("a fine film", k=5)} == want, suffix
    listed = Retriever.load(root=served, cache_dir=tmp_path / "c")
    name = listed.add_pool(rows, instruction=instruction)
    assert {d.pool_id: (d.input, d.output) for d in listed.retrieve("a fine film", task=name, k=5)} == want


@pytest.mark.filterwarnings("ignore::udr.serving.evidence.UntrainedTaskWarning")
def test_pool_columns_are_named_as_init_task_names_them(cli, served, tmp_path):
    """--input-column / --target-column (alias --label-column) read a pool whose columns have other names,
    in any format, from the command line and from Python; without them, or naming a column the file lacks,
    one line names the file's columns and the options."""
    from udr import Retriever

    rows = [{"utterance": f"card {i} was declined", "intent": f"intent {i}", "source": "app"} for i in range(4)]
    want = {i: (r["utterance"], r["intent"]) for i, r in enumerate(rows)}
    common = ("--instruction", "Intent of the message: ", "-k", "4", "--json")
    for suffix in (".csv", ".parquet"):
        path = tmp_path / f"banking{suffix}"
        _write_pool(path, rows)
        for target_option in ("--target-column", "--label-column"):
            args = ("--pool", str(path), "--input-column", "utterance", target_option, "intent", *common)
            code, out, err = cli("retrieve", "my card got declined", *args)
            assert code == 0, err
            assert _served_rows(out) == want
        own = Retriever.from_pool(
            path,
            instruction="Intent of the message: ",
            input_column="utterance",
            target_column="intent",
            root=served,
            cache_dir=tmp_path / "c",
        )
        assert {d.pool_id: (d.input, d.output) for d in own.retrieve("my card", k=4)} == want
    path = tmp_path / "banking.csv"
    code, _, err = cli("retrieve", "my card", "--pool", str(path), *common)
    assert code == 1 and err.count("\n") == 1, err
    assert "missing field 'input' (its columns: utterance, intent, source)" in err
    assert "--input-column and --target-column" in err
    code, _, err = cli("retrieve", "my card", "--pool", str(path), "--input-column", "text", *common)
    assert code == 1 and err.count("\n") == 1
    assert f"--input-column: no column 'text' in {path} (its columns: utterance, intent, source)" in err
    # A registered task's shape with other column names: sst2's labels read from the file's own columns.
    reviews = tmp_path / "reviews.csv"
    _write_pool(reviews, [{"review": f"film {i}", "stars": ("negative", "positive")[i % 2]} for i in range(4)])
    args = ("--pool", str(reviews), "--task", "sst2", "--input-column", "review", "--label-column", "stars")
    code, out, err = cli("retrieve", "a fine film", *args, "-k", "4", "--json")
    assert code == 0, err
    assert {x["output"] for x in map(json.loads, out.splitlines())} == {"It was terrible .", "It was great ."}


@pytest.mark.filterwarnings("ignore::udr.serving.evidence.UntrainedTaskWarning")
def test_where_searches_only_the_rows_that_pass(cli, served, tmp_path):
    """--where COLUMN=VALUE (an AND when repeated) gives what the unfiltered retrieval over the passing rows
    gives (ids as the whole file numbers them, order), for one query and a batch, as Python's filter= does;
    fewer rows than -k say so on stderr; an unknown column is one line."""
    from udr import Retriever

    rows = [
        {"text": f"card {i} {w}", "intent": w, "lang": ("en", "de")[i % 2], "app": ("web", "ios", "android")[i % 3]}
        for i, w in enumerate(["declined", "lost", "stolen", "limit", "fee", "refund", "pin", "late"] * 3)
    ]
    path, kept_path = tmp_path / "cards.csv", tmp_path / "kept.csv"
    kept = [i for i, r in enumerate(rows) if r["lang"] == "de" and r["app"] == "web"]
    _write_pool(path, rows)
    _write_pool(kept_path, [rows[i] for i in kept])
    common = ("--instruction", "Intent: ", "--input-column", "text", "--target-column", "intent", "-k", "3", "--json")
    where = ("--where", "lang=de", "--where", "app=web")
    code, out, err = cli("retrieve", "my card got declined", "--pool", str(path), *where, *common)
    assert code == 0, err
    got = [(x["pool_id"], x["input"], x["similarity"]) for x in map(json.loads, out.splitlines())]
    want = cli("retrieve", "my card got declined", "--pool", str(kept_path), *common)[1]
    assert got == [(kept[x["pool_id"]], x["input"], x["similarity"]) for x in map(json.loads, want.splitlines())]
    own = Retriever.from_pool(
        path, instruction="Intent: ", input_column="text", target_column="intent", root=served, cache_dir=tmp_path / "c"
    )
    python = own.retrieve("my card got declined", k=3, filter={"lang": "de", "app": "web"})
    assert [(d.pool_id, d.input) for d in python] == [(i, x) for i, x, _ in got]

    queries = tmp_path / "q.jsonl"
    queries.write_text('{"query": "my card got declined"}\n{"query": "a fee I did not expect"}\n')
    code, out, err = cli("retrieve", "--input", str(queries), "--pool", str(path), *where, *common[:-1])
    assert code == 0, err
    batch = [[d["pool_id"] for d in json.loads(line)["demonstrations"]] for line in out.splitlines()]
    assert batch[0] == [i for i, _, _ in got] and all(set(b) <= set(kept) for b in batch)

    code, out, err = cli("retrieve", "my card", "--pool", str(path), *where, *common[:-3], "-k", "8", "--json")
    assert code == 0 and len(out.splitlines()) == len(kept) == 4
    assert f"udr: note: filter lang=de AND app=web leaves 4 of {len(rows)} rows" in err
    code, _, err = cli("retrieve", "my card", "--pool", str(path), "--where", "country=de", *common)
    assert code == 1 and err.count("udr: error: ") == 1  # after the untrained-task note, one line
    assert err.splitlines()[-1] == (
        "udr: error: filter: unknown column 'country' in pool 'own' (its metadata columns: lang, app)"
    )
    code, _, err = cli("retrieve", "my card", "--task", "sst2", "--where", "lang=de")
    assert code == 1 and "--where goes with --pool" in err and err.count("\n") == 1
    code, _, err = cli("retrieve", "my card", "--pool", str(path), "--where", "lang", *common)
    assert code == 1 and "--where 'lang': expected COLUMN=VALUE" in err


def test_a_folder_given_as_pool_is_named_a_folder(cli, tmp_path):
    """--pool of a folder, even one named like a data file, is not reported as missing."""
    for folder in (tmp_path / "rows", tmp_path / "rows.csv"):
        folder.mkdir()
        code, _, err = cli("retrieve", QUERY, "--pool", str(folder), "--instruction", "I: ")
        assert code == 1 and err.count("\n") == 1, err
        assert f"udr: error: pool {folder} is a folder, not a data file (use .jsonl, .csv, .tsv, .parquet)" in err
