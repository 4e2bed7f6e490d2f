import textwrap
from pathlib import Path

import pytest

from udr.data import python_code as pythoncode
from udr.data.python_code import (
    build_python_code_examples,
    first_sentence,
)

ALPHA = '''\
import functools
import sys


def add(a, b):
    """Add two numbers together.

    More details here.
    """
    return a + b


class Box:
    """A box."""

    def size(self):
        """Return the size of the box. Extra sentence."""
        return len(self.items)

    @functools.lru_cache()
    @staticmethod
    def cached(key):
        """Look up a key in the cache."""
        return CACHE[key]

    class Inner:
        async def fetch(self, url):
            """Fetch the given url asynchronously.
            """

            return await get(url)


def only_doc():
    """This function has only a docstring."""


def eg(x):
    """Scale the value, e.g. doubling it for most inputs. Then more."""
    return x * 2


def multi(path):
    """Open the file at the given path
    and return its contents as text.

    Second paragraph.
    """
    with open(path) as f:
        return f.read()


def outer():
    """Build and return a nested helper function."""
    def inner():
        """Nested functions are never examples."""
        return 1
    return inner


def too_short(x):
    """Short one."""
    return x


def prompt(x):
    """>>> prompt(1) gives one."""
    return x


def fmt(x):
    """Format %(name)s with the given value."""
    return x


def no_period(x):
    """Return the value without a final period"""
    return x


if sys.platform == "win32":
    def plat():
        """Return the platform flavour name."""
        return "windows"
else:
    def plat():
        """Return the platform flavour name."""
        return "posix"
'''

# Exact duplicate of alpha.add in a later module.
BETA_INIT = '''\
def add(a, b):
    """Add two numbers together."""
    return a + b
'''

# Whitespace-only variant of alpha.add; differently named function.
BETA_UTIL = '''\
def add(a,  b):
    """Sum two numbers and return the result."""
    return a  +  b


def mul(a, b):
    """Multiply two numbers together."""
    return a * b
'''

EXCLUDED_FUNC = '''\
def hidden(x):
    """This function must never be collected."""
    return x
'''


def _write(root: Path, rel: str, text: str | bytes) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")


@pytest.fixture
def fake_stdlib(tmp_path: Path) -> Path:
    root = tmp_path / "lib"
    _write(root, "alpha.py", ALPHA)
    _write(root, "beta/__init__.py", BETA_INIT)
    _write(root, "beta/util.py", BETA_UTIL)
    _write(root, "broken.py", 'def oops(:\n    """Broken syntax here."""\n    return 1\n')
    _write(root, "latin.py", b'def f(x):\n    """Caf\xe9 is not valid UTF-8."""\n    return x\n')
    for rel in [
        "test/helpers.py",
        "beta/tests/helpers.py",
        "idlelib/idle_test/mod.py",
        "site-packages/pkg/mod.py",
        "dist-packages/mod.py",
        "lib2to3/fixer.py",
        "idlelib/run.py",
        "turtledemo/demo.py",
        "ensurepip/boot.py",
        "config-3.11-x86_64-linux-gnu/python-config.py",
        "venv/scripts/common/activate.py",
        "__pycache__/cached.py",
        "test_toplevel.py",
        "beta/test_util.py",
    ]:
        _write(root, rel, EXCLUDED_FUNC)
    return root


def test_fake_stdlib_exact_examples(fake_stdlib: Path):
    examples = build_python_code_examples(fake_stdlib)
    by_name = {ex["name"]: ex for ex in examples}
    expected = {
        "alpha:add": ("def add(a, b):\n    return a + b", "Add two numbers together."),
        "alpha:Box.size": (
            "def size(self):\n    return len(self.items)",
            "Return the size of the box.",
        ),
        # Decorators are not part of the input.
        "alpha:Box.cached": (
            "def cached(key):\n    return CACHE[key]",
            "Look up a key in the cache.",
        ),
        "alpha:Box.Inner.fetch": (
            "async def fetch(self, url):\n    return await get(url)",
            "Fetch the given url asynchronously.",
        ),
        "alpha:eg": (
            "def eg(x):\n    return x * 2",
            "Scale the value, e.g. doubling it for most inputs.",
        ),
        "alpha:multi": (
            "def multi(path):\n    with open(path) as f:\n        return f.read()",
            "Open the file at the given path and return its contents as text.",
        ),
        "alpha:outer": (
            textwrap.dedent(
                '''\
                def outer():
                    def inner():
                        """Nested functions are never examples."""
                        return 1
                    return inner'''
            ),
            "Build and return a nested helper function.",
        ),
        # Conditional redefinitions share a name; one example is kept.
        "alpha:plat": (
            'def plat():\n    return "posix"',
            "Return the platform flavour name.",
        ),
        "beta.util:mul": ("def mul(a, b):\n    return a * b", "Multiply two numbers together."),
    }
    assert set(by_name) == set(expected)
    for name, (inp, target) in expected.items():
        assert by_name[name] == {"input": inp, "target": target, "name": name}
    assert [ex["name"] for ex in examples] == sorted(by_name)


def test_fake_stdlib_exclusions_and_dedup(fake_stdlib: Path):
    examples = build_python_code_examples(fake_stdlib)
    names = {ex["name"] for ex in examples}
    # Excluded directories/files, unparsable and non-UTF-8 files contribute nothing.
    assert not any("hidden" in n or "oops" in n or n.startswith("latin:") for n in names)
    assert all(n.split(":")[0] in {"alpha", "beta.util"} for n in names)
    # Exact duplicate (beta:add) and whitespace-variant (beta.util:add) dropped;
    # the first in sorted order (alpha:add) is kept.
    assert "alpha:add" in names
    assert "beta:add" not in names and "beta.util:add" not in names
    # Only-docstring, nested, and filtered-target functions are skipped.
    for skipped in ["only_doc", "inner", "too_short", "prompt", "fmt", "no_period"]:
        assert not any(n.endswith(":" + skipped) or n.endswith("." + skipped) for n in names)
    for ex in examples:
        assert '"""' + ex["target"][:20] not in ex["input"]
        assert ex["target"] not in ex["input"]


def test_input_size_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    body = "\n".join(f"    x{i} = {i}" for i in range(45))
    _write(tmp_path, "big.py", f'def big():\n    """Do a lot of things."""\n{body}\n')
    assert build_python_code_examples(tmp_path) == []
    monkeypatch.setattr(pythoncode, "MAX_INPUT_LINES", 100)
    assert [ex["name"] for ex in build_python_code_examples(tmp_path)] == ["big:big"]
    monkeypatch.setattr(pythoncode, "MAX_INPUT_CHARS", 100)
    assert build_python_code_examples(tmp_path) == []


@pytest.mark.parametrize(
    "doc, expected",
    [
        ("Return x.", "Return x."),
        ("Return x. More.", "Return x."),
        ("Use e.g. this. Not that.", "Use e.g. this."),
        ("Use i.e. this one.\nNext.", "Use i.e. this one."),
        ("Split the\n  lines here\n\nSecond.", None),
        ("Split the\n  lines here.\n\nSecond.", "Split the lines here."),
        ("Call os.path.join on it. Then stop.", "Call os.path.join on it."),
        ("No period at all", None),
    ],
)
def test_first_sentence(doc, expected):
    assert first_sentence(doc) == expected


@pytest.fixture(scope="module")
def real_collected():
    examples, _ = pythoncode._collect(None)
    return examples


def test_real_stdlib_examples(real_collected):
    assert len(real_collected) > 1000
    names = [ex["name"] for ex in real_collected]
    assert len(set(names)) == len(names)
    assert len({ex["input"] for ex in real_collected}) == len(real_collected)
    for ex in real_collected:
        target = ex["target"]
        assert target.endswith(".")
        assert 3 <= len(target.split()) <= 40
        assert target[0].isalpha()
        head = ex["docstring"].strip()[:30]
        assert head and head not in ex["input"], ex["name"]
        assert ex["input"].startswith(("def ", "async def ")), ex["name"]
        assert ex["input"].count("\n") < pythoncode.MAX_INPUT_LINES
        assert len(ex["input"]) <= pythoncode.MAX_INPUT_CHARS
    keys = [(ex["name"], ex["input"]) for ex in real_collected]
    assert keys == sorted(keys)


def test_real_stdlib_deterministic(real_collected):
    built = build_python_code_examples()
    assert built == [{"input": ex["input"], "target": ex["target"], "name": ex["name"]} for ex in real_collected]
    assert all(set(ex) == {"input", "target", "name"} for ex in built)
