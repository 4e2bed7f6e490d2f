"""Stage 2, LM feedback: BM25 candidates (round 0) and `udr score`, the LM's ranking of each query's candidates."""
