"""The documentation site builds strictly, its generated pages cover the code, and the README stays short."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# An issue named in prose: "issue 45" or "#44" (not an HTML entity such as the data's "#39;").
ISSUE = re.compile(r"issue [0-9]+|(?<![&\w])#[0-9]+\b(?!;)", re.IGNORECASE)
# A path of the machine a text was written on.
MACHINE_PATH = re.compile(r"(?<![\w.~])/(?:work|tmp|home|root|Users|mnt|scratch)/")
# A notebook entry's file name: dated, e.g. 2026-11-selection.md.
NOTEBOOK_ENTRY = re.compile(r"^\d{4}-\d{2}-[a-z0-9-]+\.md$")
# Files of the repository named in a text (a code span or a link): these must exist.
REPO_FILE = re.compile(r"(?<![\w./-])((?:metrics|notebook|benchmarks|docs)/[\w./-]+\.md)\b")


def _user_docs() -> list[Path]:
    """The user documentation: the README, the site's sources and the benchmarks' tables."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "benchmarks" / "README.md"]


def _notebook() -> list[Path]:
    return sorted((ROOT / "notebook").glob("*.md"))


def _commands(command, path):
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        if not getattr(sub, "hidden", False):
            yield from _commands(sub, [*path, name])


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (the `docs` extra: pip install -e '.[docs]')")
    pytest.importorskip("material", reason="mkdocs-material is not installed (the `docs` extra)")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)]
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    assert "WARNING" not in result.stderr, result.stderr
    return out


def test_parameters_page_lists_every_settings_section(site):
    from udr.config import Settings

    html = (site / "parameters" / "index.html").read_text(encoding="utf-8")
    sections = [name for name, field in Settings.model_fields.items() if not field.exclude]
    assert sections
    for name in sections:
        assert f'id="{name}"' in html, f"the parameters page has no section for {name}"
    # Every leaf parameter of a section is listed with its dotted key.
    for name in sections:
        annotation = Settings.model_fields[name].annotation
        for key in getattr(annotation, "model_fields", {}):
            assert f"<code>{name}.{key}</code>" in html, f"{name}.{key} is missing from the parameters page"


def test_cli_page_lists_every_command(site):
    import typer.main

    import udr.cli

    html = (site / "cli" / "index.html").read_text(encoding="utf-8")
    paths = list(_commands(typer.main.get_command(udr.cli.app), ["udr"]))
    assert len(paths) > 10
    for path in paths:
        assert f"<code>{' '.join(path)}</code>" in html, f"`{' '.join(path)}` is missing from the CLI page"


def test_readme_is_short_and_has_no_history():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    assert not ISSUE.search(readme)


def test_docs_sources_name_no_issues():
    for path in _user_docs():
        found = ISSUE.search(path.read_text(encoding="utf-8"))
        assert not found, f"{path.relative_to(ROOT)} names {found.group(0)!r}"


def test_docs_and_notebook_name_no_machine_paths():
    for path in [*_user_docs(), *_notebook()]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found = MACHINE_PATH.search(line)
            assert not found, f"{path.relative_to(ROOT)}:{number} names a machine path: {line.strip()!r}"


# Committed folders of run records, profiles, shipped feedback and benchmarks: no machine path in any text.
COMMITTED_DIRS = ("metrics", "profiles", "data/feedback", "benchmarks")


def _committed_texts() -> list[tuple[str, str]]:
    """(path, text) of every committed text file under COMMITTED_DIRS (binary ones, parquet or png, left out)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", *COMMITTED_DIRS], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: which files are committed is unknown")
    texts = []
    for name in sorted(filter(None, listed.decode("utf-8").split("\0"))):
        data = (ROOT / name).read_bytes() if (ROOT / name).is_file() else b"\0"
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if "\0" not in text:
            texts.append((name, text))
    return texts


def test_committed_records_name_no_machine_paths():
    """A record of a run (a log, a table, its params) names paths relative to the repository or a placeholder
    such as $WORK, never the machine's own (/work/..., /root/..., /tmp/..., /home/...)."""
    texts = _committed_texts()
    assert any(name.startswith("metrics/") for name, _ in texts)
    found = [
        f"{name}:{number}: {line.strip()[:160]!r}"
        for name, text in texts
        for number, line in enumerate(text.splitlines(), 1)
        if MACHINE_PATH.search(line)
    ]
    assert not found, "committed files name machine paths:\n" + "\n".join(found)


def test_named_repository_files_exist():
    """Every `metrics/`, `notebook/`, `benchmarks/` or `docs/` Markdown file the user docs and the metrics
    write-ups name exists (a moved file leaves no stale reference), and so does every relative link of the
    pages read on GitHub (the site's own links are checked by its strict build)."""
    texts = [*_user_docs(), *sorted((ROOT / "metrics").rglob("*.md"))]
    for path in texts:
        name = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        written = set(re.findall(r"(?:-o|--out)\s+([\w./-]+\.md)", text))  # what a command on the page writes
        for ref in REPO_FILE.findall(text):
            assert ref in written or (ROOT / ref).is_file(), f"{name} names {ref}, which does not exist"
    for path in [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *_notebook()]:
        for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            resolved = (path.parent / target.split("#")[0]).resolve()
            assert resolved.exists(), f"{path.relative_to(ROOT)} links {target}, which does not exist"


def test_notebook_is_dated_indexed_and_kept_out_of_the_site(site):
    """The lab notebook (notebook/) holds dated entries, each listed with its dates in notebook/README.md;
    the user docs link it, and the documentation site neither includes nor builds it."""
    entries = [p for p in _notebook() if p.name != "README.md"]
    assert entries, "notebook/ has no entries"
    index = (ROOT / "notebook" / "README.md").read_text(encoding="utf-8")
    rows = {row for row in index.splitlines() if row.startswith("|")}
    for entry in entries:
        assert NOTEBOOK_ENTRY.match(entry.name), f"notebook/{entry.name} is not named YYYY-MM-topic.md"
        listed = [row for row in rows if f"]({entry.name})" in row]
        assert listed, f"notebook/README.md does not list {entry.name}"
        assert re.search(r"\d{4}-\d{2}-\d{2}", listed[0]), f"notebook/README.md gives {entry.name} no date"
    assert "notebook/README.md" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert any("notebook/" in p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md"))
    for path in (ROOT / "docs").rglob("*.md"):
        assert not re.search(r"udr:include\s+notebook/", path.read_text(encoding="utf-8")), path
    assert "notebook" not in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    built = [p for p in site.rglob("*") if "notebook" in p.relative_to(site).as_posix()]
    assert not built, f"the site builds notebook pages: {built[:3]}"


def test_performance_page_summarises_the_benchmarks():
    """The Performance page summarises benchmarks/README.md instead of including it: after its first section,
    each section names benchmark scripts that exist and that benchmarks/README.md describes, its figures are
    copied from there (the current tables, not the notebook), and it ends by pointing to that file."""
    page = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    tables = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    assert "udr:include benchmarks/" not in page
    # The sections after the title and "Where the default run's time goes".
    sections = re.split(r"^## ", page, flags=re.MULTILINE)[2:]
    assert len(sections) >= 9
    for section in sections:
        title = section.splitlines()[0]
        scripts = re.findall(r"benchmarks/[\w/]+?(?:\.py|\.sh|/)(?=[`\s])", section)
        assert scripts, f"the Performance section {title!r} names no benchmark script"
        for script in scripts:
            assert (ROOT / script).exists(), f"{title!r} names {script}, which does not exist"
            assert script in tables, f"{title!r} names {script}, which benchmarks/README.md does not describe"
        for figure in re.findall(r"\d[\d,]*\.\d+|\d{1,3}(?:,\d{3})+", section):
            assert figure in tables, f"{title!r} quotes {figure}, which benchmarks/README.md does not have"
    assert page.rstrip().split("\n\n")[-1].startswith("`benchmarks/README.md` in the repository")


def test_readme_tables_are_the_pipeline_files():
    """The README's results tables are copies of metrics/ files (docs/sync_readme.py), never edited by hand."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"<!-- udr:copy metrics/headline\.md -->", readme)
    done = subprocess.run([sys.executable, "docs/sync_readme.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
