"""The documentation site builds strictly, its generated pages cover the code, and the README stays short."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ISSUE = re.compile(r"issue [0-9]+", re.IGNORECASE)


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
    files = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "benchmarks" / "README.md"]
    for path in files:
        found = ISSUE.search(path.read_text(encoding="utf-8"))
        assert not found, f"{path.relative_to(ROOT)} names {found.group(0)!r}"


def test_performance_page_summarises_the_benchmarks():
    """The Performance page summarises benchmarks/README.md instead of including it: after its first section,
    each section names benchmark scripts that exist and that benchmarks/README.md describes, its figures are
    copied from there, and it ends by pointing to that file."""
    page = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    notebook = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
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
            assert script in notebook, f"{title!r} names {script}, which benchmarks/README.md does not describe"
        for figure in re.findall(r"\d[\d,]*\.\d+|\d{1,3}(?:,\d{3})+", section):
            assert figure in notebook, f"{title!r} quotes {figure}, which benchmarks/README.md does not have"
    assert page.rstrip().splitlines()[-1].startswith("`benchmarks/README.md` in the repository")


def test_readme_tables_are_the_pipeline_files():
    """The README's results tables are copies of metrics/ files (docs/sync_readme.py), never edited by hand."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"<!-- udr:copy metrics/headline\.md -->", readme)
    done = subprocess.run([sys.executable, "docs/sync_readme.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
