"""The query side of a bi-encoder for serving, started in a fraction of the time transformers takes.

`import transformers` and its model classes cost a cold `udr retrieve` 2 to 4 seconds before any
work (they pull in torch.distributed, torch._dynamo, scipy). A served query needs only E_q's forward
pass and the tokenizer, so for BERT-family encoders (BERT, MiniLM: the default and the paper's
base encoders) :class:`LightQueryEncoder` runs that forward with torch alone, from the model's
safetensors weights and its `tokenizer.json` (the `tokenizers` library). It computes what
transformers' `BertModel` computes (embeddings, scaled-dot-product attention, GELU, post-norm
layers), so its embeddings equal the bi-encoder's (tested); other architectures, or an accelerator,
use the full :class:`udr.retriever.encoder.BiEncoder`.

:class:`ServingEncoder` is the encoder of a retriever's served model (:class:`udr.serving.served_model.ServedModel`):
queries through the light encoder where it applies, and the full bi-encoder loaded on first need (embedding a pool
that is in neither the index nor the cache, or a model the light path does not cover).

Imports of numpy, safetensors, tokenizers, torch and udr.retriever.encoder are inside the functions that use them,
to keep `from udr import Retriever` and `udr retrieve` light.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from udr.errors import UdrError, quoted
from udr.util.readers import read_json
from udr.util.weights import load_weights

if TYPE_CHECKING:
    from udr.retriever.encoder import BiEncoderSettings

_LOAD_LOCK = threading.Lock()  # one thread at a time loads a full bi-encoder (and imports transformers)

_ACTIVATIONS = ("gelu", "relu")
REBUILD = "train it again (`udr train`) or pass another --model"


def _check_config(config: dict, path: Path) -> None:
    """A one-line UdrError naming `path` where the BERT config.json holds a field no model can have: a
    size or count that is not a positive integer, a width its heads do not divide, a bad epsilon or
    padding id."""

    def whole(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    for key in ("num_attention_heads", "num_hidden_layers", "hidden_size"):
        value = config.get(key)
        if not whole(value) or value < 1:
            raise UdrError(f"bad model config {path}: {key} must be a positive integer, not {quoted(value)}; {REBUILD}")
    if config["hidden_size"] % config["num_attention_heads"]:
        raise UdrError(
            f"bad model config {path}: hidden_size {config['hidden_size']} is not a multiple of "
            f"num_attention_heads {config['num_attention_heads']}; {REBUILD}"
        )
    eps = config.get("layer_norm_eps", 1e-12)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not 0 < eps < 1:
        raise UdrError(
            f"bad model config {path}: layer_norm_eps must be a small positive number, not {quoted(eps)}; {REBUILD}"
        )
    pad = config.get("pad_token_id")
    if pad is not None and (not whole(pad) or pad < 0):
        raise UdrError(f"bad model config {path}: pad_token_id must be a token id, not {quoted(pad)}; {REBUILD}")


class LightQueryEncoder:
    """E_q of a BERT-family bi-encoder: tokenizer.json + safetensors weights, torch only."""

    def __init__(self, weights: dict, config: dict, tokenizer, settings: BiEncoderSettings):
        self.w, self.config, self.tokenizer, self.settings = weights, config, tokenizer, settings
        self.heads = config["num_attention_heads"]
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.layers = config["num_hidden_layers"]
        self.activation = config.get("hidden_act", "gelu")

    @classmethod
    def load(cls, query_dir: Path, tokenizer_dir: Path, settings: BiEncoderSettings) -> LightQueryEncoder | None:
        """The light encoder of E_q at `query_dir`, or None when its architecture is not one it covers. Its
        files go through the one guarded model load (:func:`udr.util.weights.load_weights`): a config.json
        that does not parse or says what no model can be, weights that do not match it, a damaged
        tokenizer, are a one-line UdrError naming the folder, before any query."""
        config_file, weights_file = query_dir / "config.json", query_dir / "model.safetensors"
        tokenizer_file = tokenizer_dir / "tokenizer.json"
        if not (config_file.is_file() and weights_file.is_file() and tokenizer_file.is_file()):
            return None
        config = read_json(config_file, "model config", REBUILD, expect=dict)
        if (
            config.get("model_type") != "bert"
            or config.get("position_embedding_type", "absolute") != "absolute"
            or config.get("is_decoder")
            or config.get("hidden_act", "gelu") not in _ACTIVATIONS
        ):
            return None
        _check_config(config, config_file)
        return load_weights(lambda: cls._build(query_dir, tokenizer_file, config, settings), query_dir, REBUILD)

    @classmethod
    def _build(
        cls, query_dir: Path, tokenizer_file: Path, config: dict, settings: BiEncoderSettings
    ) -> LightQueryEncoder | None:
        """The encoder of `load`, tried on one query so that weights that do not fit the config fail here."""
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        weights = load_file(str(query_dir / "model.safetensors"))
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
        weights = {k[len(prefix) :]: v.float() for k, v in weights.items() if k.startswith(prefix)}
        if "embeddings.word_embeddings.weight" not in weights:
            return None
        layers = config.get("num_hidden_layers", 0)
        stored = {k.split(".")[2] for k in weights if k.startswith("encoder.layer.")}
        if stored != {str(i) for i in range(layers)}:
            raise UdrError(
                f"model {query_dir} does not match its config: config.json says {layers} layers, "
                f"the weights hold {len(stored)}; {REBUILD}"
            )
        width = weights["embeddings.word_embeddings.weight"].shape[-1]
        if width != config["hidden_size"]:
            raise UdrError(
                f"model {query_dir} does not match its config: config.json says hidden_size "
                f"{config['hidden_size']}, the weights {width}; {REBUILD}"
            )
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        tokenizer.enable_truncation(max_length=settings.max_query_length)
        pad_id = config.get("pad_token_id") or 0
        tokenizer.enable_padding(pad_id=pad_id, pad_token=tokenizer.id_to_token(pad_id) or "[PAD]")
        encoder = cls(weights, config, tokenizer, settings)
        encoder.encode(["a query"])  # weights of another shape than the config's fail now, not at a query
        return encoder

    @property
    def dimension(self) -> int:
        return int(self.config["hidden_size"])

    def encode(self, texts: Sequence[str], batch_size: int = 64):
        """Pooled query embeddings (n, d) float32, batched as :meth:`BiEncoder.encode` batches them."""
        import numpy as np
        import torch

        from udr.retriever.encoder import encode_batches

        texts = list(texts)
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        with torch.inference_mode():
            for idx in encode_batches(texts, batch_size):
                out[idx] = self._embed([texts[i] for i in idx]).numpy()
        return out

    def _embed(self, texts: list[str]):
        import torch

        encodings = self.tokenizer.encode_batch(texts)
        ids = torch.tensor([e.ids for e in encodings], dtype=torch.long)
        mask = torch.tensor([e.attention_mask for e in encodings], dtype=torch.long)
        from udr.retriever.encoder import pool_hidden

        return pool_hidden(self._forward(ids, mask), mask, self.settings)

    def _forward(self, ids, mask):
        """BertModel's last hidden state (eval mode, sdpa attention)."""
        import torch
        import torch.nn.functional as F

        w, eps = self.w, self.eps
        batch, length = ids.shape
        positions = torch.arange(length)[None]
        h = F.embedding(ids, w["embeddings.word_embeddings.weight"]) + F.embedding(
            torch.zeros_like(ids), w["embeddings.token_type_embeddings.weight"]
        )
        h = h + F.embedding(positions, w["embeddings.position_embeddings.weight"])
        h = F.layer_norm(h, h.shape[-1:], w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
        # transformers passes no mask when nothing is padded, else a boolean (B, 1, L, L) one
        attn_mask = None if bool(mask.all()) else mask.bool()[:, None, None, :].expand(batch, 1, length, length)
        head_dim = h.shape[-1] // self.heads
        act = F.gelu if self.activation == "gelu" else F.relu
        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def heads(x):
                return x.view(batch, length, -1, head_dim).transpose(1, 2)

            q = heads(F.linear(h, w[p + "attention.self.query.weight"], w[p + "attention.self.query.bias"]))
            k = heads(F.linear(h, w[p + "attention.self.key.weight"], w[p + "attention.self.key.bias"]))
            v = heads(F.linear(h, w[p + "attention.self.value.weight"], w[p + "attention.self.value.bias"]))
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=head_dim**-0.5)
            a = a.transpose(1, 2).contiguous().reshape(batch, length, -1)
            a = F.linear(a, w[p + "attention.output.dense.weight"], w[p + "attention.output.dense.bias"])
            ln = p + "attention.output.LayerNorm."
            h = F.layer_norm(a + h, h.shape[-1:], w[ln + "weight"], w[ln + "bias"], eps)
            x = act(F.linear(h, w[p + "intermediate.dense.weight"], w[p + "intermediate.dense.bias"]))
            x = F.linear(x, w[p + "output.dense.weight"], w[p + "output.dense.bias"])
            h = F.layer_norm(x + h, h.shape[-1:], w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
        return h


class ServingEncoder:
    """A bi-encoder as :class:`udr.serving.api.Retriever` uses it: `settings`, `device`, and
    `encode(texts, side)`; queries through :class:`LightQueryEncoder` where it applies, the full
    :class:`udr.retriever.encoder.BiEncoder` loaded on first need."""

    def __init__(self, model_dir: Path, device):
        from udr.retriever.encoder import BiEncoder

        self.model_dir, self.device = Path(model_dir), device
        self.settings = BiEncoder.load_settings(self.model_dir)
        self._full = None
        self.light = None
        if device.type == "cpu":
            query_dir, _, tokenizer_dir = BiEncoder.part_dirs(self.model_dir)
            self.light = LightQueryEncoder.load(query_dir, tokenizer_dir, self.settings)

    @property
    def full(self):
        """The full bi-encoder (transformers), loaded once on first use, by one thread: transformers'
        lazy imports fail ("cannot import name 'AutoModel'") when threads run them at once."""
        if self._full is None:
            with _LOAD_LOCK:
                if self._full is None:
                    from udr.retriever.encoder import BiEncoder

                    self._full = BiEncoder.load(self.model_dir).to(self.device)
        return self._full

    def encode(self, texts: Sequence[str], side: str, batch_size: int = 64, **options):
        if side == "query" and self.light is not None:
            return self.light.encode(texts, batch_size)
        return self.full.encode(texts, side, batch_size=batch_size, **options)
