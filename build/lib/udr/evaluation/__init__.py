"""Stage 4, evaluation: baseline retrievers, in-context prompt assembly, metrics, `udr evaluate` and `udr report`."""
