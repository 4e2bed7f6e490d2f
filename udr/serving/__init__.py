"""Serving: the Python `Retriever` (the model it serves and the pools it serves), demonstration pools, their
embedding cache, batch query files, and `udr retrieve`'s request."""
