"""The snippets of docs/quickstart.md and docs/serving.md run as written, against a tiny project of the tasks
they name (sst2, trec, e2e; a tiny bi-encoder indexed as models/final, so `Retriever.load("models/final")`
loads it): every Python block, every `udr ...` command of a transcript or a bash block, the scripts a transcript writes
(`$ cat X.py`, then `$ python X.py`) and an interactive session's `>>>` lines, in the page's order, in one
namespace per page. A DeprecationWarning raised in udr's code or attributed to a snippet fails, and where the
page shows what a snippet prints, the snippet prints as many lines (the values are the tiny model's)."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import shutil
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, run_udr, write_params

DOC_TASKS = ["sst2", "trec", "e2e"]
UDR_CODE = str(REPO / "udr")
DEPRECATIONS = (DeprecationWarning, PendingDeprecationWarning)


@dataclass
class Snippet:
    """One runnable piece of a page: Python `code`, or a `udr` command's arguments; `shown`: the lines
    the page says it prints (None where it shows none)."""

    where: str
    code: str | None = None
    command: list[str] | None = None
    shown: list[str] | None = None


def _blocks(text: str) -> list[tuple[str, str]]:
    return re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)


def snippets(page: Path) -> list[Snippet]:
    """The runnable snippets of `page`, in order."""
    out: list[Snippet] = []
    blocks = _blocks(page.read_text(encoding="utf-8"))
    for i, (lang, body) in enumerate(blocks):
        where = f"{page.name} block {i + 1}"
        if lang == "python":
            after = blocks[i + 1] if i + 1 < len(blocks) else None
            shown = after[1].splitlines() if after and after[0] == "text" and not after[1].startswith("$") else None
            out.append(Snippet(where, code=body, shown=shown))
        elif lang == "text" and body.startswith("$ "):
            out += _transcript(body, where)
        elif lang == "bash":  # a setup block: its `udr` commands (make, dvc and `udr repro` build the real project)
            commands = (line.split("#")[0].strip() for line in body.splitlines())
            built = ("udr repro",)
            out += [
                Snippet(where, command=shlex.split(c)[1:])
                for c in commands
                if c.startswith("udr ") and not c.startswith(built)
            ]
    return out


def _transcript(body: str, where: str) -> list[Snippet]:
    """A shell transcript's steps: `$ udr ...` commands (with `\\` continuation lines), the file a `$ cat
    X.py` shows, run by `$ python X.py`, and a `$ python` session's `>>>` / `...` lines."""
    out: list[Snippet] = []
    lines = body.splitlines()
    files: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.startswith("$ "):
            continue
        command = line[2:]
        while command.endswith("\\") and i < len(lines):
            command = command[:-1] + " " + lines[i].strip()
            i += 1
        printed = []
        while i < len(lines) and not lines[i].startswith("$ "):
            printed.append(lines[i])
            i += 1
        argv = shlex.split(command)
        if argv[0] == "udr":
            out.append(Snippet(where, command=argv[1:], shown=printed))
        elif argv[:1] == ["cat"] and argv[1].endswith(".py"):
            files[argv[1]] = "\n".join(printed) + "\n"
        elif argv[0] == "python" and len(argv) == 2:
            out.append(Snippet(where, code=files[argv[1]], shown=printed))
        elif argv == ["python"]:
            code = [x[4:] for x in printed if x.startswith((">>> ", "... "))]
            out.append(Snippet(where, code="\n".join(code) + "\n"))
    return out


@pytest.fixture(scope="module")
def doc_project(tmp_path_factory, data_dir):
    """The tasks the pages name, prepared with small caps, and a tiny bi-encoder as the final model, indexed
    by `udr index`; the repository's examples/ beside them, as the pages read them."""
    import os

    from tests.tiny_models import save_tiny_encoder
    from udr.data.prepare import prepare_task
    from udr.data.tasks import get_task
    from udr.lm.models import resolve_model
    from udr.paths import Paths
    from udr.retriever.encoder import BiEncoder, BiEncoderSettings

    root = tmp_path_factory.mktemp("docs")
    write_params(root, {t: {"max_train": 24, "max_test": 4} for t in DOC_TASKS}, data_dir, train={"later_rounds": {}})
    paths = Paths(root)
    for name in DOC_TASKS:
        prepare_task(
            get_task(name), data_dir, paths.prepared_dir(name), seed=42, test_fraction=0.2, max_train=24, max_test=4
        )
    base = resolve_model(str(save_tiny_encoder(root / "tiny-enc")), paths.base_model("encoder"), kind="encoder")
    BiEncoder.from_base(base, BiEncoderSettings(max_query_length=48, max_demo_length=64)).save(paths.round_model(0))
    os.environ.pop("UDR_DATA_DIR", None)
    run_udr(root, "index")
    shutil.copytree(REPO / "examples", root / "examples")
    return root


def _deprecations(caught) -> list[str]:
    """The DeprecationWarnings raised in udr's code or attributed to a snippet (udr's own use of a
    deprecated name, or a snippet's)."""
    return [
        f"{w.filename}:{w.lineno}: {w.message}"
        for w in caught
        if issubclass(w.category, DEPRECATIONS) and (w.filename.startswith(UDR_CODE) or w.filename.startswith("<doc"))
    ]


def run_snippets(items: list[Snippet], cwd: Path, monkeypatch) -> None:
    """Run `items` in `cwd` in one namespace; fail on a deprecation (see :func:`_deprecations`), a `udr`
    command's non-zero exit, or a snippet printing another number of lines than the page shows."""
    from udr.cli import main

    monkeypatch.chdir(cwd)
    monkeypatch.delenv("UDR_DATA_DIR", raising=False)
    namespace: dict = {"__name__": "__main__"}
    for item in items:
        stdout = io.StringIO()
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(stdout):
            warnings.simplefilter("always")
            if item.code is not None:
                exec(compile(item.code, f"<doc {item.where}>", "exec"), namespace)
            else:
                monkeypatch.setattr(sys, "argv", ["udr", *item.command])
                try:
                    main()
                except SystemExit as exc:
                    assert not exc.code, f"{item.where}: `udr {shlex.join(item.command)}` exited {exc.code}"
        assert not _deprecations(caught), f"{item.where}: {_deprecations(caught)}"
        printed = stdout.getvalue().splitlines()
        tabular = item.command is not None and not {"--json", "--prompt", "--input"} & set(item.command)
        if item.shown and not tabular:  # a table wraps its cells by width: its lines are not counted
            assert len(printed) == len(item.shown), f"{item.where}: printed {printed}, the page shows {item.shown}"


@pytest.mark.filterwarnings("ignore::udr.serving.evidence.UntrainedTaskWarning")
@pytest.mark.parametrize("page", ["quickstart.md", "serving.md"])
def test_the_pages_snippets_run(doc_project, tmp_path, monkeypatch, page):
    pytest.importorskip("sentence_transformers", reason="the sentence-transformers extra is not installed")
    pytest.importorskip("langchain_core", reason="the langchain extra is not installed")
    pytest.importorskip("dspy", reason="the dspy extra is not installed")
    monkeypatch.setenv("UDR_CACHE_DIR", str(tmp_path / "cache"))
    items = snippets(REPO / "docs" / page)
    assert any(i.code and "Retriever.load" in i.code for i in items)  # the pages' main snippet is found
    if page == "serving.md":
        kinds = {("python" if i.code else "udr") for i in items}
        assert kinds == {"python", "udr"} and len(items) >= 10, [i.where for i in items]
    run_snippets(items, doc_project, monkeypatch)


def test_a_deprecated_name_in_a_snippet_fails_the_check(doc_project, monkeypatch):
    """The check is real: a snippet that reads a demonstration's former `score` fails it."""
    code = 'from udr import Retriever\nretriever = Retriever.load("models/final")\n'
    code += 'print(retriever.retrieve("a film", task="sst2", k=1)[0].score)\n'
    with pytest.raises(AssertionError, match="Demonstration.score is now Demonstration.similarity"):
        run_snippets([Snippet("test", code=code)], doc_project, monkeypatch)
    with pytest.raises(AssertionError, match="printed .*the page shows"):
        run_snippets([Snippet("test", code='print("one line")', shown=["one", "two"])], doc_project, monkeypatch)
