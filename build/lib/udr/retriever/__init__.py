"""Stage 3, the retriever: the bi-encoder, its losses and training, mining the next round's candidates,
exact search and the final index."""
