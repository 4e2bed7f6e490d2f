"""The one exception type the CLI turns into a one-line message and a non-zero exit."""


class UdrError(Exception):
    """A user-facing error: bad input, unknown task, missing model, bad parameter.

    The message must be one line that names the problem (file and line where there is one).
    """
