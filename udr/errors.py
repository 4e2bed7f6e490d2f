"""The one exception type the CLI turns into a one-line message and a non-zero exit."""


class UdrError(Exception):
    """A user-facing error: bad input, unknown task, missing model, bad parameter.

    The message must be one line that names the problem (file and line where there is one).
    """


def first_line(exc: BaseException, limit: int = 120) -> str:
    """An exception's message as a reason inside a one-line error: its first line, cut to `limit`
    characters (its class name where it has no message)."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else exc.__class__.__name__


def shorten(text: str, limit: int = 80) -> str:
    """`text` cut to `limit` characters (with "..."), for quoting a user's value in a one-line error."""
    text = str(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
