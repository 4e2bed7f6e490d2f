"""The one exception type the CLI turns into a one-line message and a non-zero exit."""

import reprlib
from collections.abc import Iterable, Mapping


class UdrError(Exception):
    """A user-facing error: bad input, unknown task, missing model, bad parameter.

    The message must be one line that names the problem (file and line where there is one).
    """


def first_line(exc: BaseException, limit: int = 120) -> str:
    """An exception's message as a reason inside a one-line error: its first line, cut to `limit`
    characters (its class name where it has no message)."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else exc.__class__.__name__


def quoted(value, limit: int = 80) -> str:
    """`repr(value)` for a one-line error, bounded: built from at most a few items and characters of each
    level (reprlib), so a huge or deeply aliased value costs no more than its quoted prefix."""

    class Prefix(reprlib.Repr):
        def repr_str(self, x, level):  # the start of a string, not its middle elided
            return shorten(repr(x[: self.maxstring + 1]), self.maxstring)

    bounded = Prefix()
    bounded.maxstring = bounded.maxother = bounded.maxlong = limit
    bounded.maxlist = bounded.maxtuple = bounded.maxdict = bounded.maxset = 6
    bounded.maxlevel = 3
    return shorten(bounded.repr(value), limit)


def shorten(text: str, limit: int = 80) -> str:
    """`text` cut to `limit` characters (with "..."), for quoting a user's value in a one-line error."""
    text = str(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def listed(names, limit: int = 12) -> str:
    """Names for a one-line error, comma-separated: at most `limit` of them, each cut to 40 characters, and
    how many more there are, so a message stays short however many names a crafted input gives."""
    names = list(names)
    shown = ", ".join(shorten(str(n), 40) for n in names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def is_collection(value, *also_not: type) -> bool:
    """Whether `value` is a collection of items, as an argument taking a list expects: iterable, and not a string
    or bytes (whose items are characters), a mapping (its keys) or an instance of one of `also_not`."""
    return isinstance(value, Iterable) and not isinstance(value, (str, bytes, Mapping, *also_not))


def check_text(text: str, what: str) -> None:
    """A one-line error where `text` (a string) is no valid Unicode: a lone surrogate, which no encoder can read
    (e.g. from a JSON "\\ud800" escape, or text decoded with errors="surrogateescape")."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UdrError(
            f"{what}: not valid Unicode (a lone surrogate {text[exc.start]!r} at character {exc.start + 1})"
        ) from None
