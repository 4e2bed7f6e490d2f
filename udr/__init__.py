"""udr: Unified Demonstration Retriever as a reproducible pipeline."""

__version__ = "0.1.0"
