"""The metadata of a synthetic GGUF (lab.model.synth): the llama.* / qwen35.* hyperparameters llama.cpp
reads, the lab's `lab.synthetic.*` markers, and a real tokenizer copied from one of llama.cpp's
tokenizer-only GGUFs (models/ggml-vocab-*.gguf in the cached llama-cpp-python sdist), padded to the
model's embedding rows.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from lab.core import paths
from lab.model import gguf_file, models
from lab.model.models import ArchSpec
from lab.model.synth_shapes import SynthError, full_attention_interval, gguf_arch, llama_shape
from lab.setup import llama_source

RMS_EPS = 1e-6  # Qwen2/3 and Llama 3 use 1e-6 / 1e-5; only numerics, never speed, depends on it
DEFAULT_ROPE_THETA = 10000.0  # llama.cpp's default for the llama architecture when a config gives none
DEFAULT_VOCAB = "ggml-vocab-qwen2.gguf"  # 151936 tokens (already padded like Qwen's embeddings)
# The qwen35 pre-tokenizer (tokenizer.ggml.pre = "qwen35"); 151936 tokens, padded to the model's vocab_size
QWEN35_VOCAB = "ggml-vocab-qwen35.gguf"
# llama.cpp conversion/qwen.py _Qwen35MRopeMixin: "the upstream default mrope_section is [11, 11, 10] and
# llama.cpp's QWEN35 / QWEN35MOE loaders treat qwen35.rope.dimension_sections as required"
QWEN35_ROPE_SECTIONS = [11, 11, 10, 0]
QWEN35_PARTIAL_ROTARY = 0.25  # conversion/qwen.py Qwen3NextModel: rope dims = head_dim × partial_rotary_factor (0.25)
SYNTHETIC_NOTE = ("random weights: for speed and memory tests only, its text is garbage "
                  "(written by lab.model.synth; the shape is a real model's, the values are not)")


@dataclass(frozen=True)
class KV:
    """One GGUF metadata entry: key, value, gguf.GGUFValueType (and the item type of an array)."""

    key: str
    value: object
    vtype: int
    sub_type: int | None = None


def _vt():
    from gguf import GGUFValueType

    return GGUFValueType


def vocab_name_for(arch: ArchSpec) -> str:
    """The llama.cpp tokenizer GGUF a file of `arch`'s shape copies: the qwen35 one for the hybrid."""
    return QWEN35_VOCAB if gguf_arch(arch) == "qwen35" else DEFAULT_VOCAB


def default_vocab_path(name: str = DEFAULT_VOCAB) -> Path:
    """llama.cpp's models/<name> (ggml-vocab-qwen2.gguf by default): $LAB_VOCAB_GGUF, else the copy set-up keeps
    in the cache (lab.core.paths.vocab_dir), copied out of the llama-cpp-python source first when it is not there."""
    if os.environ.get("LAB_VOCAB_GGUF"):
        return Path(os.environ["LAB_VOCAB_GGUF"]).expanduser()
    cache = paths.cache_dir()
    target = paths.vocab_dir(cache) / name
    if target.exists():
        return target
    source = llama_source.sdist_path(cache)
    if not source.exists():
        raise SynthError(f"no vocabulary GGUF: {source} is missing (run `make setup`), or pass --vocab / set "
                         f"LAB_VOCAB_GGUF to a tokenizer GGUF such as llama.cpp's models/{name}")
    llama_source.copy_vocabs(cache, (name,))
    if not target.exists():
        raise SynthError(f"{source} has no vendor/llama.cpp/models/{name}")
    return target


def vocab_kvs(vocab_gguf: str | Path) -> list[KV]:
    """Every `tokenizer.*` entry of a tokenizer GGUF, with its GGUF types kept (lab.model.gguf_file reads it,
    these arrays in full)."""
    path = Path(vocab_gguf)
    try:
        header = gguf_file.read_gguf_header(path, keep_prefix="tokenizer.")
    except gguf_file.GgufError as exc:
        raise SynthError(f"{path}: cannot read as a tokenizer GGUF: {exc}") from exc
    out = [KV(key, header.metadata[key], *header.value_types[key]) for key in header.keys if key.startswith("tokenizer.")]
    if not any(kv.key == "tokenizer.ggml.tokens" for kv in out):
        raise SynthError(f"{path}: no tokenizer.ggml.tokens: not a tokenizer GGUF")
    return out


def pad_vocab(kvs: list[KV], n_vocab: int, source: str = "vocabulary") -> list[KV]:
    """Pad tokens (and their types/scores) to the model's embedding rows, as convert_hf_to_gguf.py does for
    Qwen ("[PAD<i>]", type UNUSED); refuse a vocabulary larger than the embedding."""
    from gguf import TokenType

    by_key = {kv.key: kv for kv in kvs}
    n_tokens = len(by_key["tokenizer.ggml.tokens"].value)
    if n_tokens > n_vocab:
        raise SynthError(f"{source} has {n_tokens} tokens but the shape's vocab_size is {n_vocab}: use a smaller "
                         "tokenizer GGUF or a larger vocab_size")
    extra = range(n_tokens, n_vocab)
    fill = {"tokenizer.ggml.tokens": [f"[PAD{i}]" for i in extra],
            "tokenizer.ggml.token_type": [int(TokenType.UNUSED)] * len(extra),
            "tokenizer.ggml.scores": [0.0] * len(extra)}
    return [replace(kv, value=list(kv.value) + fill[kv.key]) if kv.key in fill and extra else kv for kv in kvs]


def _config_value(arch: ArchSpec, key: str, default):
    """A config.json field of the shipped entry `arch` was read from (by source URL), else `default`."""
    for model_id in models.stand_in_ids():
        entry = models.stand_in_entry(model_id)
        if entry["source"] == arch.source and entry["config"].get(key) is not None:
            return entry["config"][key]
    return default


def _rope_theta(arch: ArchSpec) -> float:
    return float(_config_value(arch, "rope_theta", DEFAULT_ROPE_THETA))


def _qwen35_kvs(arch: ArchSpec, shaped: ArchSpec) -> list[KV]:
    """The qwen35.* keys llama.cpp reads (src/llama-model.cpp load_hparams, src/models/qwen35.cpp
    load_arch_hparams), written as conversion/qwen.py writes them for Qwen3_5ForConditionalGeneration."""
    VT = _vt()
    a = "qwen35"
    n_rot = int(shaped.head_dim_k * float(_config_value(arch, "partial_rotary_factor", QWEN35_PARTIAL_ROTARY)))
    sections = list(_config_value(arch, "mrope_section", QWEN35_ROPE_SECTIONS))
    sections = (sections + [0, 0, 0, 0])[:4]
    return [
        KV(f"{a}.vocab_size", shaped.vocab_size, VT.UINT32),
        KV(f"{a}.context_length", shaped.max_context, VT.UINT32),
        KV(f"{a}.embedding_length", shaped.hidden_size, VT.UINT32),
        # MTP blocks count in block_count (llama.cpp: n_layer_all; n_layer() = block_count - nextn_predict_layers,
        # src/llama-model.cpp load_hparams), as conversion/qwen.py _QwenMtpMixin writes them
        KV(f"{a}.block_count", shaped.n_layers + shaped.mtp_layers, VT.UINT32),
        KV(f"{a}.feed_forward_length", shaped.ffn_size, VT.UINT32),
        KV(f"{a}.attention.head_count", shaped.n_heads, VT.UINT32),
        KV(f"{a}.attention.head_count_kv", shaped.n_kv_heads, VT.UINT32),
        KV(f"{a}.attention.key_length", shaped.head_dim_k, VT.UINT32),
        KV(f"{a}.attention.value_length", shaped.head_dim_v, VT.UINT32),
        KV(f"{a}.attention.layer_norm_rms_epsilon", RMS_EPS, VT.FLOAT32),
        KV(f"{a}.rope.dimension_count", n_rot, VT.UINT32),
        KV(f"{a}.rope.dimension_sections", sections, VT.ARRAY, VT.INT32),
        KV(f"{a}.rope.freq_base", _rope_theta(arch), VT.FLOAT32),
        KV(f"{a}.ssm.conv_kernel", shaped.linear_conv_kernel, VT.UINT32),
        KV(f"{a}.ssm.inner_size", shaped.linear_value_heads * shaped.linear_head_dim_v, VT.UINT32),
        KV(f"{a}.ssm.state_size", shaped.linear_head_dim_k, VT.UINT32),
        KV(f"{a}.ssm.time_step_rank", shaped.linear_value_heads, VT.UINT32),
        KV(f"{a}.ssm.group_count", shaped.linear_key_heads, VT.UINT32),
        KV(f"{a}.full_attention_interval", full_attention_interval(shaped), VT.UINT32),
    ] + ([KV(f"{a}.nextn_predict_layers", shaped.mtp_layers, VT.UINT32)] if shaped.mtp_layers else [])


def model_kvs(arch: ArchSpec, quant: str, seed: int, layers: int | None, vocab_name: str,
              mtp: int | None = None) -> list[KV]:
    """The llama.* (or qwen35.*) hyperparameters llama.cpp reads, the lab's synthetic markers, and general.*."""
    VT = _vt()
    shaped = llama_shape(arch, layers, mtp)
    kvs = [
        KV("general.architecture", gguf_arch(arch), VT.STRING),  # GGUFWriter adds this one itself; listed for the size
        KV("general.type", "model", VT.STRING),
        KV("general.name", f"synthetic {arch.name} shape ({quant}, random weights)", VT.STRING),
        KV("general.description", SYNTHETIC_NOTE, VT.STRING),
        KV("general.quantization_version", 2, VT.UINT32),  # ggml's GGML_QNT_VERSION
        KV("lab.synthetic", True, VT.BOOL),
        KV("lab.synthetic.note", SYNTHETIC_NOTE, VT.STRING),
        KV("lab.synthetic.shape_of", arch.name, VT.STRING),
        KV("lab.synthetic.shape_source", arch.source, VT.STRING),
        KV("lab.synthetic.quant", quant, VT.STRING),
        KV("lab.synthetic.seed", int(seed), VT.UINT32),
        KV("lab.synthetic.vocab_from", vocab_name, VT.STRING),
        KV("lab.synthetic.layers_of_original", arch.n_layers, VT.UINT32),
    ]
    if gguf_arch(arch) == "qwen35":
        return kvs + _qwen35_kvs(arch, shaped)
    kvs += [
        KV("llama.vocab_size", shaped.vocab_size, VT.UINT32),
        KV("llama.context_length", shaped.max_context, VT.UINT32),
        KV("llama.embedding_length", shaped.hidden_size, VT.UINT32),
        KV("llama.block_count", shaped.n_layers, VT.UINT32),
        KV("llama.feed_forward_length", shaped.ffn_size, VT.UINT32),
        KV("llama.attention.head_count", shaped.n_heads, VT.UINT32),
        KV("llama.attention.head_count_kv", shaped.n_kv_heads, VT.UINT32),
        KV("llama.attention.key_length", shaped.head_dim_k, VT.UINT32),
        KV("llama.attention.value_length", shaped.head_dim_v, VT.UINT32),
        KV("llama.rope.dimension_count", shaped.head_dim_k, VT.UINT32),  # the llama graph asserts n_rot == head_dim
        KV("llama.rope.freq_base", _rope_theta(arch), VT.FLOAT32),
        KV("llama.attention.layer_norm_rms_epsilon", RMS_EPS, VT.FLOAT32),
    ]
    if arch.sliding_window:
        kvs.append(KV("lab.synthetic.dropped", f"sliding window {arch.sliding_window} on {len(arch.local_layers)} "
                      "layers: every layer here is global attention, so KV grows on all of them", VT.STRING))
    return kvs

