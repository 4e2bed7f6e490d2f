"""Tiny models built in code for fast tests (no downloads): a byte-level tokenizer and a small Llama."""

from __future__ import annotations

from pathlib import Path


def byte_tokenizer():
    """A byte-level BPE tokenizer with no merges: one token per byte, plus <pad> (id 256)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tk = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tk.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<pad>")


def tiny_llama(seed: int = 0):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=260,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=4096,
        pad_token_id=256,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg).eval()


def save_tiny_lm(path: Path, seed: int = 0) -> Path:
    """A tiny causal LM directory (safetensors + tokenizer) that `udr models` can resolve."""
    tiny_llama(seed).save_pretrained(path, safe_serialization=True)
    byte_tokenizer().save_pretrained(path)
    return path


def char_wordpiece_tokenizer():
    """A BERT-style tokenizer over single characters ([CLS] text [SEP], WordPiece with ## pieces)."""
    import string

    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = sorted(set(string.printable.strip()))
    vocab = {t: i for i, t in enumerate(specials + chars + [f"##{c}" for c in chars])}
    tk = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=1000))
    tk.normalizer = normalizers.BertNormalizer(lowercase=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tk,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def tiny_bert(vocab_size: int, seed: int = 0):
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    cfg = BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    return BertModel(cfg, add_pooling_layer=False).eval()


def save_tiny_encoder(path: Path, seed: int = 0) -> Path:
    """A tiny BERT encoder directory (safetensors + tokenizer) that `udr models` can resolve."""
    tok = char_wordpiece_tokenizer()
    tiny_bert(len(tok), seed).save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return path
