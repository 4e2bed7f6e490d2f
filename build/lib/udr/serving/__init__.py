"""Serving: the Python `Retriever`, demonstration pools, their embedding cache, and batch query files."""
