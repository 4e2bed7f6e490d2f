"""udr.retriever.encoder: a saved bi-encoder loads back to identical embeddings."""

from __future__ import annotations

import numpy as np


def test_save_load_round_trip_gives_identical_embeddings(looped, tmp_path):
    from udr.retriever.encoder import BiEncoder

    enc = BiEncoder.load(looped / "models/rounds/round1")
    texts = ["a gripping, funny film", "return the count of flights from boston", "x"]
    enc.save(tmp_path / "copy")
    again = BiEncoder.load(tmp_path / "copy")
    for side in ("query", "demo"):
        assert np.array_equal(enc.encode(texts, side), again.encode(texts, side))
    assert again.settings == enc.settings
