"""The bi-encoder a training round starts from: UDR before any training (:func:`initial_bi_encoder`: the
base encoder on both sides) for round 0 and EPR, the previous round's model for a later round
(:func:`initial_encoder`), each read with the training's encoder settings; and what a round's start is, for
its resume fingerprint (:func:`describe_init`)."""

from __future__ import annotations

from pathlib import Path

from udr.config import EncoderSettings
from udr.errors import UdrError
from udr.lm.loading import PROVENANCE_FILE
from udr.retriever.encoder import SETTINGS_NAME, BiEncoder, BiEncoderSettings, resolve_pooling, resolve_similarity
from udr.util.files import file_sha256


def bi_encoder_settings(
    encoder: EncoderSettings, pooling: str, similarity: str, *, base_spec: str, shared: bool
) -> BiEncoderSettings:
    """The bi-encoder settings of a training with `encoder` (encoder.*) and the given pooling and
    similarity; `base_spec`: the base encoder as the params name it (models.encoder); `shared`: one encoder
    for both sides (train.shared_encoder)."""
    return BiEncoderSettings(
        **encoder.model_dump(exclude={"pooling", "similarity"}),
        pooling=pooling,
        similarity=similarity,
        base=base_spec,
        shared=shared,
    )


def initial_bi_encoder(base_dir: Path, encoder: EncoderSettings, *, base_spec: str, shared: bool) -> BiEncoder:
    """UDR before any training: the base encoder at `base_dir` on both sides, read with the encoder settings
    `encoder` (auto pooling and similarity: the base model's own); `base_spec` and `shared` as in
    :func:`bi_encoder_settings`."""
    pooling = resolve_pooling(encoder.pooling, base_dir)
    similarity = resolve_similarity(encoder.similarity, base_dir)
    return BiEncoder.from_base(
        base_dir, bi_encoder_settings(encoder, pooling, similarity, base_spec=base_spec, shared=shared)
    )


def initial_encoder(init: Path, encoder: EncoderSettings, *, base_spec: str, shared: bool) -> BiEncoder:
    """The bi-encoder a round starts from: a later round continues the previous round's model `init` (auto
    pooling and similarity: its own), round 0 the base encoder `init` (:func:`initial_bi_encoder`)."""
    if not (init / SETTINGS_NAME).is_file():
        return initial_bi_encoder(init, encoder, base_spec=base_spec, shared=shared)
    model = BiEncoder.load(init)
    old = model.settings
    model.settings = bi_encoder_settings(
        encoder,
        old.pooling if encoder.pooling == "auto" else encoder.pooling,
        old.similarity if encoder.similarity == "auto" else encoder.similarity,
        base_spec=base_spec,
        shared=shared,
    )
    return model


def describe_init(init: Path) -> dict:
    """What a round starts from, for its fingerprint: the folder, its settings or provenance file's checksum
    and its weights'; neither a resolved base encoder nor a trained bi-encoder is a one-line error."""
    for name in (SETTINGS_NAME, PROVENANCE_FILE):
        if (init / name).is_file():
            weights = sorted(file_sha256(p) for p in init.rglob("*.safetensors"))
            return {"path": str(init), name: file_sha256(init / name), "weights": weights}
    raise UdrError(f"missing model: {init} is neither a resolved base encoder nor a trained bi-encoder")
