"""Serving: the Python `Retriever`, demonstration pools, their embedding cache, batch query files, and
`udr retrieve`'s request."""
