"""udr: Unified Demonstration Retriever as a reproducible pipeline.

`from udr import Retriever` is the Python API (:mod:`udr.serving.api`). Imports of udr.serving.api and
udr.errors are inside the functions that use them (the module's `__getattr__`, on first use), to keep
`import udr` (and the `udr` command's start) light, free of torch and transformers.
"""

__version__ = "0.1.0"
__all__ = ["Demonstration", "Retriever", "UdrError"]


def __getattr__(name: str):
    if name in ("Retriever", "Demonstration"):
        from udr.serving import api

        return getattr(api, name)
    if name == "UdrError":
        from udr.errors import UdrError

        return UdrError
    raise AttributeError(f"module 'udr' has no attribute {name!r}")
