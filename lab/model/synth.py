"""Synthetic random-weight GGUF files of a real architecture's shape, for speed and memory tests.

A 27B-class model is 15-20 GB to download; its *speed* depends only on its shape and quant type, not on
its weights (decode reads every weight once per token whatever the values are). So the lab writes a
llama-architecture GGUF with a stand-in's dimensions (e.g. Qwen3-32B: 64 layers, n_embd 5120, n_ff 25600,
64 heads, 8 KV heads, head_dim 128, vocab 151936), every matrix in Q4_K (or Q8_0) with random but valid
blocks, RMSNorm weights F32 ones, and a real vocabulary + chat template copied from one of llama.cpp's
tokenizer-only GGUFs (`models/ggml-vocab-qwen2.gguf` in the llama-cpp-python sdist). The file says what
it is (`lab.synthetic` = true and a note): its text is garbage, its tok/s and memory use are the model's.

What a llama-architecture file cannot express, and so is refused or noted: MoE experts are refused; a
sliding window is dropped (every layer global, noted in the metadata); Qwen3's per-head q/k RMSNorm
(2 x head_dim weights per layer, 0.00005 % of the model) is left out, so a Qwen3-32B-shaped file has
32,761,446,400 parameters in its matrices.

A Qwen3.5-family hybrid (Gated DeltaNet + gated full attention: Qwen3.8-27B, Qwen3.5-27B) is written as
llama.cpp's own `qwen35` architecture instead, with the exact tensor names, shapes and types its loader
asks for (src/models/qwen35.cpp load_arch_tensors; names from src/llama-arch.cpp) and the metadata it
reads (qwen35.ssm.*, full_attention_interval, rope.dimension_sections): matrices Q4_K/Q8_0, the conv
kernel, the decay A, dt bias and norms F32 (ggml_ssm_conv and the element-wise ops take F32), and the
tokenizer of llama.cpp's models/ggml-vocab-qwen35.gguf padded to the model's 248,320 embedding rows.
The multi-token-prediction layer a converted checkpoint may carry (llama.cpp does not run it without
speculative decoding) is not written.

The file streams out one tensor at a time (the largest, Qwen3's token_embd, is 438 MB of Q4_K), after a
free-disk check; `predict_bytes` gives its exact size beforehand from the GGUF layout alone.

    python -m lab synth --arch qwen3-32b --out /data/qwen3-32b-synthetic-Q4_K.gguf [--layers N]
    python -m lab synth --arch qwen3.8-27b --out /data/qwen3.8-27b-synthetic-Q4_K.gguf [--layers 4]
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import struct
import sys
import tarfile
from dataclasses import dataclass, replace
from pathlib import Path

from lab.model import models
from lab.model.models import ArchSpec

GGUF_ALIGNMENT = 32  # GGUF's default data alignment (gguf-py constants GGUF_DEFAULT_ALIGNMENT)
RMS_EPS = 1e-6  # Qwen2/3 and Llama 3 use 1e-6 / 1e-5; only numerics, never speed, depends on it
DEFAULT_ROPE_THETA = 10000.0  # llama.cpp's default for the llama architecture when a config gives none
DEFAULT_VOCAB = "ggml-vocab-qwen2.gguf"  # 151936 tokens (already padded like Qwen's embeddings)
# The qwen35 pre-tokenizer (tokenizer.ggml.pre = "qwen35"); 151936 tokens, padded to the model's vocab_size
QWEN35_VOCAB = "ggml-vocab-qwen35.gguf"
# llama.cpp conversion/qwen.py _Qwen35MRopeMixin: "the upstream default mrope_section is [11, 11, 10] and
# llama.cpp's QWEN35 / QWEN35MOE loaders treat qwen35.rope.dimension_sections as required"
QWEN35_ROPE_SECTIONS = [11, 11, 10, 0]
QWEN35_PARTIAL_ROTARY = 0.25  # conversion/qwen.py Qwen3NextModel: rope dims = head_dim × partial_rotary_factor (0.25)
HYBRID_FAMILIES = ("qwen3_5_text", "qwen3_5", "qwen35")  # what the qwen35 writer accepts (dense, not MoE)
SYNTHETIC_NOTE = ("random weights: for speed and memory tests only, its text is garbage "
                  "(written by lab.model.synth; the shape is a real model's, the values are not)")
DISK_MARGIN_BYTES = 256 << 20  # leave this much free after writing


class SynthError(ValueError):
    """The shape cannot be written as a llama.cpp GGUF (llama or qwen35), or there is no room for it."""


# ---------------------------------------------------------------- quant block layouts
@dataclass(frozen=True)
class QuantLayout:
    name: str
    ggml_type: int  # gguf.GGMLQuantizationType value
    block_weights: int
    block_bytes: int


# Block layouts from ggml/src/ggml-common.h: block_q4_K = {half d; half dmin; uint8 scales[12]; uint8 qs[128]}
# (256 weights in 144 bytes, 4.5 bits/weight); block_q8_0 = {half d; int8 qs[32]} (32 weights in 34 bytes).
QUANTS = {
    "Q4_K": QuantLayout("Q4_K", 12, 256, 144),
    "Q8_0": QuantLayout("Q8_0", 8, 32, 34),
}
F32 = QuantLayout("F32", 0, 1, 4)


@dataclass(frozen=True)
class TensorPlan:
    """One tensor of the file: ggml dimensions (ne0 = the input/row length first) and its layout."""

    name: str
    ne: tuple[int, ...]
    layout: QuantLayout
    fill: float = 1.0  # the value of every element of an F32 tensor (norm weights 1; see tensor_plan)

    @property
    def n_elements(self) -> int:
        return math.prod(self.ne)

    @property
    def nbytes(self) -> int:
        return self.n_elements // self.layout.block_weights * self.layout.block_bytes

    @property
    def byte_shape(self) -> tuple[int, ...]:
        """numpy shape of the raw bytes (rows, bytes per row), as gguf.GGUFWriter takes it."""
        rows = math.prod(self.ne[1:])
        return (rows, self.ne[0] // self.layout.block_weights * self.layout.block_bytes)


def gguf_arch(arch: ArchSpec) -> str:
    """The llama.cpp architecture a file of `arch`'s shape is written as: qwen35 for the Gated DeltaNet hybrid."""
    return "qwen35" if arch.linear_layers else "llama"


def _full_attention_interval(arch: ArchSpec) -> int:
    """n such that every n-th layer (i + 1) % n == 0 is full attention, the others linear: the one layer
    pattern qwen35.full_attention_interval can express (llama.cpp src/models/qwen35.cpp load_arch_hparams)."""
    first = min(arch.global_layers) if arch.global_layers else arch.n_layers
    n = first + 1
    if tuple(i for i in range(arch.n_layers) if (i + 1) % n != 0) != tuple(arch.linear_layers):
        raise SynthError(f"{arch.name}: linear layers {list(arch.linear_layers)} are not every layer but each "
                         f"{n}-th; lab.model.synth writes qwen35.full_attention_interval only")
    return n


def _hybrid_shape(arch: ArchSpec, layers: int | None) -> ArchSpec:
    if arch.family not in HYBRID_FAMILIES:
        raise SynthError(f"{arch.name}: linear-attention layers of family {arch.family!r}; lab.model.synth writes the "
                         f"Qwen3.5 hybrid ({', '.join(HYBRID_FAMILIES)}) as llama.cpp's qwen35 architecture only")
    if not (arch.linear_key_heads and arch.linear_value_heads and arch.linear_head_dim_k and arch.linear_conv_kernel):
        raise SynthError(f"{arch.name}: the Gated DeltaNet shape (linear heads, head dims, conv kernel) is unknown")
    if arch.linear_head_dim_k != arch.linear_head_dim_v:
        raise SynthError(f"{arch.name}: linear key head dim {arch.linear_head_dim_k} != value head dim "
                         f"{arch.linear_head_dim_v}; llama.cpp's qwen35 uses ssm.state_size for both")
    if arch.linear_value_heads % arch.linear_key_heads:
        raise SynthError(f"{arch.name}: {arch.linear_value_heads} linear V heads are not a multiple of "
                         f"{arch.linear_key_heads} K heads")
    interval = _full_attention_interval(arch)
    if layers is not None:
        arch = replace(arch, n_layers=layers, linear_layers=tuple(i for i in arch.linear_layers if i < layers))
        if not arch.global_layers:
            raise SynthError(f"--layers {layers} keeps no full-attention layer (every {interval}-th layer is one): "
                             f"use a multiple of {interval}, e.g. --layers {interval} or {2 * interval}")
    return arch


def llama_shape(arch: ArchSpec, layers: int | None = None) -> ArchSpec:
    """The ArchSpec that the written file has (llama, or qwen35 for the hybrid); refuses what neither
    architecture can express."""
    if arch.n_experts:
        raise SynthError(f"{arch.name}: mixture-of-experts ({arch.n_experts} experts) is not supported by lab.model.synth")
    if arch.head_dim_k != arch.head_dim_v:
        raise SynthError(f"{arch.name}: head_dim_k {arch.head_dim_k} != head_dim_v {arch.head_dim_v}; "
                         "llama.cpp's llama and qwen35 graphs need them equal")
    if arch.n_heads % arch.n_kv_heads:
        raise SynthError(f"{arch.name}: {arch.n_heads} query heads are not a multiple of {arch.n_kv_heads} KV heads")
    if layers is not None and layers <= 0:
        raise SynthError(f"layers must be positive, got {layers}")
    if arch.linear_layers:
        return _hybrid_shape(arch, layers)
    if layers is not None:
        arch = replace(arch, n_layers=layers, local_layers=tuple(i for i in arch.local_layers if i < layers))
    return arch


def _check_rows(arch: ArchSpec, quant: str, q: QuantLayout, rows: dict[str, int]) -> None:
    for what, n in rows.items():
        if n % q.block_weights:  # a row of a quantized matrix is whole blocks (ne0 % block size == 0)
            raise SynthError(f"{arch.name}: {what} = {n} is not a multiple of {quant}'s block of {q.block_weights}")


def _tied(arch: ArchSpec) -> bool:
    return arch.embedding_params is not None and arch.embedding_params == arch.vocab_size * arch.hidden_size


def tensor_plan(arch: ArchSpec, quant: str = "Q4_K", layers: int | None = None) -> list[TensorPlan]:
    """Every tensor llama.cpp loads for the file's architecture (src/models/llama.cpp, or
    src/models/qwen35.cpp for the hybrid), in ggml dimensions."""
    if quant not in QUANTS:
        raise SynthError(f"quant {quant!r} not supported; choose one of {', '.join(QUANTS)}")
    arch = llama_shape(arch, layers)
    if arch.linear_layers:
        return _qwen35_plan(arch, quant)
    q = QUANTS[quant]
    e, ff, v = arch.hidden_size, arch.ffn_size, arch.vocab_size
    q_out, kv_out = arch.n_heads * arch.head_dim_k, arch.n_kv_heads * arch.head_dim_k
    _check_rows(arch, quant, q, {"n_embd": e, "n_ff": ff, "n_head x head_dim": q_out})
    plan = [TensorPlan("token_embd.weight", (e, v), q)]
    for i in range(arch.n_layers):
        b = f"blk.{i}."
        plan += [TensorPlan(b + "attn_norm.weight", (e,), F32),
                 TensorPlan(b + "attn_q.weight", (e, q_out), q),
                 TensorPlan(b + "attn_k.weight", (e, kv_out), q),
                 TensorPlan(b + "attn_v.weight", (e, kv_out), q),
                 TensorPlan(b + "attn_output.weight", (q_out, e), q),
                 TensorPlan(b + "ffn_norm.weight", (e,), F32),
                 TensorPlan(b + "ffn_gate.weight", (e, ff), q),
                 TensorPlan(b + "ffn_up.weight", (e, ff), q),
                 TensorPlan(b + "ffn_down.weight", (ff, e), q)]
    plan.append(TensorPlan("output_norm.weight", (e,), F32))
    if not _tied(arch):  # tied embeddings (Gemma): llama.cpp reuses token_embd as the output head
        plan.append(TensorPlan("output.weight", (e, v), q))
    return plan


def _qwen35_plan(arch: ArchSpec, quant: str) -> list[TensorPlan]:
    """llama.cpp src/models/qwen35.cpp load_arch_tensors, trunk layers only (no MTP block), in its order.

    Full-attention layers: attn_q of n_head × head_dim × 2 rows (query and output gate), attn_k, attn_v,
    attn_output, per-head q/k norms. Gated DeltaNet layers: attn_qkv (2 × key_dim + value_dim rows),
    attn_gate (z), ssm_conv1d {kernel, conv_dim} F32, ssm_dt.bias and ssm_a {V heads} F32, ssm_beta and
    ssm_alpha {n_embd, V heads}, ssm_norm {head dim} F32, ssm_out. Every layer: attn_norm,
    post_attention_norm, gated FFN. F32 fills keep the recurrence finite: ssm_a (-exp(A_log) in a
    conversion) is -1 so every decay exp(softplus(.) × a) is below 1, dt bias 0, the conv kernel an average."""
    q = QUANTS[quant]
    e, ff, v = arch.hidden_size, arch.ffn_size, arch.vocab_size
    hd, nh, nkv = arch.head_dim_k, arch.n_heads, arch.n_kv_heads
    dk, nk, nv = arch.linear_head_dim_k, arch.linear_key_heads, arch.linear_value_heads
    key_dim, value_dim = nk * dk, nv * dk
    conv_dim, kernel = 2 * key_dim + value_dim, arch.linear_conv_kernel
    _check_rows(arch, quant, q, {"n_embd": e, "n_ff": ff, "n_head x head_dim": nh * hd,
                                 "linear value dim": value_dim})
    linear = set(arch.linear_layers)
    plan = [TensorPlan("token_embd.weight", (e, v), q),
            TensorPlan("output_norm.weight", (e,), F32)]
    if not _tied(arch):
        plan.append(TensorPlan("output.weight", (e, v), q))
    for i in range(arch.n_layers):
        b = f"blk.{i}."
        plan += [TensorPlan(b + "attn_norm.weight", (e,), F32),
                 TensorPlan(b + "post_attention_norm.weight", (e,), F32)]
        if i not in linear:
            plan += [TensorPlan(b + "attn_q.weight", (e, nh * hd * 2), q),
                     TensorPlan(b + "attn_k.weight", (e, nkv * hd), q),
                     TensorPlan(b + "attn_v.weight", (e, nkv * hd), q),
                     TensorPlan(b + "attn_output.weight", (nh * hd, e), q),
                     TensorPlan(b + "attn_q_norm.weight", (hd,), F32),
                     TensorPlan(b + "attn_k_norm.weight", (hd,), F32)]
        else:
            plan += [TensorPlan(b + "attn_qkv.weight", (e, conv_dim), q),
                     TensorPlan(b + "attn_gate.weight", (e, value_dim), q),
                     TensorPlan(b + "ssm_conv1d.weight", (kernel, conv_dim), F32, 1.0 / kernel),
                     TensorPlan(b + "ssm_dt.bias", (nv,), F32, 0.0),
                     TensorPlan(b + "ssm_a", (nv,), F32, -1.0),
                     TensorPlan(b + "ssm_beta.weight", (e, nv), q),
                     TensorPlan(b + "ssm_alpha.weight", (e, nv), q),
                     TensorPlan(b + "ssm_norm.weight", (dk,), F32),
                     TensorPlan(b + "ssm_out.weight", (value_dim, e), q)]
        plan += [TensorPlan(b + "ffn_gate.weight", (e, ff), q),
                 TensorPlan(b + "ffn_down.weight", (ff, e), q),
                 TensorPlan(b + "ffn_up.weight", (e, ff), q)]
    return plan


# ---------------------------------------------------------------- metadata
# GGUFValueType codes (gguf-py constants.py) → struct format; 8 = string, 9 = array
_SCALAR_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_SCALAR_BYTES = {k: struct.calcsize(v) for k, v in _SCALAR_FMT.items()}
_STRING, _ARRAY = 8, 9

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
    """llama.cpp's models/<name> (ggml-vocab-qwen2.gguf by default): $LAB_VOCAB_GGUF, else extracted once from
    the cached llama-cpp-python sdist."""
    if os.environ.get("LAB_VOCAB_GGUF"):
        return Path(os.environ["LAB_VOCAB_GGUF"]).expanduser()
    from lab import setup

    ver = setup.LLAMA_CPP_PYTHON_VERSION
    target = setup.cache_dir() / "vocab" / ver / name
    if target.exists():
        return target
    sdist = setup.cache_dir() / "sdist" / f"llama_cpp_python-{ver}.tar.gz"
    if not sdist.exists():
        raise SynthError(f"no vocabulary GGUF: {sdist} is missing (run `make setup`), or pass --vocab / set "
                         f"LAB_VOCAB_GGUF to a tokenizer GGUF such as llama.cpp's models/{name}")
    member = f"llama_cpp_python-{ver}/vendor/llama.cpp/models/{name}"
    with tarfile.open(sdist) as tar:
        try:
            src = tar.extractfile(member)
        except KeyError as exc:
            raise SynthError(f"{sdist} has no {member}") from exc
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".partial")
        with open(tmp, "wb") as fh:
            shutil.copyfileobj(src, fh)
        tmp.replace(target)
    return target


def vocab_kvs(vocab_gguf: str | Path) -> list[KV]:
    """Every `tokenizer.*` entry of a tokenizer GGUF, with its GGUF types kept.

    Read with a small parser (GGUF v2/v3, little-endian): gguf.GGUFReader takes ~12 s on a 2-core box to
    map Qwen's 151936 tokens and 151387 merges one numpy view at a time; this takes well under a second."""
    import mmap

    path = Path(vocab_gguf)
    out = []
    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            if buf[:4] != b"GGUF" or struct.unpack_from("<I", buf, 4)[0] not in (2, 3):
                raise SynthError(f"{path}: not a little-endian GGUF v2/v3 file")
            n_kv = struct.unpack_from("<Q", buf, 16)[0]
            off = 24

            def string(off: int) -> tuple[str, int]:
                (n,) = struct.unpack_from("<Q", buf, off)
                return bytes(buf[off + 8: off + 8 + n]).decode("utf-8"), off + 8 + n

            def scalar(vtype: int, off: int):
                if vtype == _STRING:
                    return string(off)
                fmt = _SCALAR_FMT[vtype]
                return struct.unpack_from(fmt, buf, off)[0], off + struct.calcsize(fmt)

            for _ in range(n_kv):
                key, off = string(off)
                (vtype,) = struct.unpack_from("<I", buf, off)
                off += 4
                if vtype != _ARRAY:
                    value, off = scalar(vtype, off)
                    sub = None
                else:
                    sub, count = struct.unpack_from("<IQ", buf, off)
                    off += 12
                    if sub == _ARRAY:
                        raise SynthError(f"{path}: {key} is a nested array; not supported")
                    if sub == _STRING:
                        value = []
                        for _ in range(count):
                            item, off = string(off)
                            value.append(item)
                    else:
                        fmt = _SCALAR_FMT[sub]
                        value = list(struct.unpack_from(f"<{count}{fmt[1:]}", buf, off))
                        off += count * struct.calcsize(fmt)
                if key.startswith("tokenizer."):
                    out.append(KV(key, value, vtype, sub))
    except (OSError, struct.error, KeyError, UnicodeDecodeError) as exc:
        raise SynthError(f"{path}: cannot read as a tokenizer GGUF: {exc!r}") from exc
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
        KV(f"{a}.block_count", shaped.n_layers, VT.UINT32),
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
        KV(f"{a}.full_attention_interval", _full_attention_interval(shaped), VT.UINT32),
    ]


def model_kvs(arch: ArchSpec, quant: str, seed: int, layers: int | None, vocab_name: str) -> list[KV]:
    """The llama.* (or qwen35.*) hyperparameters llama.cpp reads, the lab's synthetic markers, and general.*."""
    VT = _vt()
    shaped = llama_shape(arch, layers)
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


# ---------------------------------------------------------------- exact size, from the GGUF layout alone


def _pad(n: int, align: int = GGUF_ALIGNMENT) -> int:
    return (n + align - 1) // align * align


def _value_bytes(value, vtype: int, sub_type: int | None) -> int:
    if vtype == _STRING:
        return 8 + len(value.encode("utf-8") if isinstance(value, str) else value)
    if vtype == _ARRAY:
        if sub_type == _STRING:
            return 4 + 8 + sum(8 + len(s.encode("utf-8") if isinstance(s, str) else s) for s in value)
        return 4 + 8 + len(value) * _SCALAR_BYTES[sub_type]
    return _SCALAR_BYTES[vtype]


def predict_bytes(kvs: list[KV], plan: list[TensorPlan]) -> dict:
    """Exact file size (GGUF v3): header + metadata + tensor table, padded to the alignment, then every
    tensor's data padded to the alignment. `tensor_bytes` is what llama.cpp loads as weights."""
    header = 4 + 4 + 8 + 8  # magic, version, tensor count, metadata count
    meta = sum(8 + len(kv.key.encode()) + 4 + _value_bytes(kv.value, kv.vtype, kv.sub_type) for kv in kvs)
    table = sum(8 + len(t.name.encode()) + 4 + 8 * len(t.ne) + 4 + 8 for t in plan)
    data_offset = _pad(header + meta + table)
    data = sum(_pad(t.nbytes) for t in plan)
    return {"header_bytes": data_offset, "tensor_bytes": sum(t.nbytes for t in plan), "total_bytes": data_offset + data,
            "params": sum(t.n_elements for t in plan),
            "matrix_params": sum(t.n_elements for t in plan if t.layout is not F32)}


# ---------------------------------------------------------------- random but valid blocks
def weight_std(n_in: int) -> float:
    """Target standard deviation of a matrix's weights: 1/sqrt(row length), so a random matrix keeps the
    activations' scale (LeCun); RMSNorm before every block keeps the residual stream bounded anyway."""
    return 1.0 / math.sqrt(n_in)


def _q4_k_blocks(rng, n_blocks: int, n_in: int):
    """Random Q4_K blocks. Per 32-weight sub-block: scale sc in 4..8, min m = round(7.5 x sc), d = dmin, so
    w = d*sc*q - dmin*m has mean ~0 over q uniform in 0..15 (the nibbles' mean is 7.5) and sd = d*sc*4.61."""
    import numpy as np

    blocks = rng.bit_generator.random_raw(n_blocks * 18).view(np.uint8).reshape(n_blocks, 144)  # qs: random nibbles
    sc = rng.integers(4, 9, size=(n_blocks, 8), dtype=np.uint8)
    m = np.rint(sc * 7.5).astype(np.uint8)  # <= 60, fits 6 bits
    d = (weight_std(n_in) / (6.0 * math.sqrt(255 / 12))) * rng.uniform(0.8, 1.2, size=n_blocks)
    d16 = d.astype(np.float16)
    blocks[:, 0:2] = d16.view(np.uint8).reshape(n_blocks, 2)
    blocks[:, 2:4] = d16.view(np.uint8).reshape(n_blocks, 2)  # dmin = d
    # 12 scale bytes, ggml-quants.c get_scale_min_k4 in reverse: bytes 0-3 sc[0..3] (+ high bits of sc[4..7]),
    # bytes 4-7 m[0..3] (+ high bits of m[4..7]), bytes 8-11 low nibbles of sc[4..7] | m[4..7] << 4.
    blocks[:, 4:8] = (sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6)
    blocks[:, 8:12] = (m[:, :4] & 63) | ((m[:, 4:] >> 4) << 6)
    blocks[:, 12:16] = (sc[:, 4:] & 0xF) | ((m[:, 4:] & 0xF) << 4)
    return blocks


def _q8_0_blocks(rng, n_blocks: int, n_in: int):
    """Random Q8_0 blocks: int8 uniform over -128..127 (sd 73.9), d = target sd / 73.9."""
    import numpy as np

    blocks = np.empty((n_blocks, 34), dtype=np.uint8)
    raw = rng.bit_generator.random_raw(n_blocks * 4).view(np.uint8).reshape(n_blocks, 32)
    blocks[:, 2:] = raw
    d = (weight_std(n_in) / 73.9 * rng.uniform(0.8, 1.2, size=n_blocks)).astype(np.float16)
    blocks[:, 0:2] = d.view(np.uint8).reshape(n_blocks, 2)
    return blocks


_BLOCK_MAKERS = {"Q4_K": _q4_k_blocks, "Q8_0": _q8_0_blocks}


def tensor_data(t: TensorPlan, rng):
    """The raw bytes of one tensor (numpy uint8 of t.byte_shape): norms are ones, matrices random blocks."""
    import numpy as np

    if t.layout is F32:
        return np.full(t.ne[::-1], t.fill, dtype=np.float32)
    n_blocks = t.n_elements // t.layout.block_weights
    return _BLOCK_MAKERS[t.layout.name](rng, n_blocks, t.ne[0]).reshape(t.byte_shape)


# ---------------------------------------------------------------- writing
def _resolve_arch(arch_id_or_spec: str | ArchSpec) -> ArchSpec:
    if isinstance(arch_id_or_spec, ArchSpec):
        return arch_id_or_spec
    try:
        return models.stand_in(arch_id_or_spec)
    except KeyError as exc:
        raise SynthError(str(exc.args[0])) from exc


def plan_file(arch_id_or_spec: str | ArchSpec, quant: str = "Q4_K", vocab_gguf: str | Path | None = None,
              layers: int | None = None, seed: int = 0) -> tuple[ArchSpec, list[KV], list[TensorPlan], dict]:
    """Everything `synthesize` will write, and its exact size, without writing: (arch, metadata, tensors, sizes)."""
    arch = _resolve_arch(arch_id_or_spec)
    vocab = Path(vocab_gguf) if vocab_gguf else default_vocab_path(vocab_name_for(arch))
    plan = tensor_plan(arch, quant, layers)
    kvs = model_kvs(arch, quant, seed, layers, vocab.name) + pad_vocab(vocab_kvs(vocab), arch.vocab_size, str(vocab))
    return arch, kvs, plan, predict_bytes(kvs, plan)


def check_disk(out_path: Path, need_bytes: int) -> None:
    """Refuse to start a write that cannot finish (an 18 GB file on a full disk fails after minutes)."""
    folder = out_path.parent if out_path.parent.exists() else Path.cwd()
    free = shutil.disk_usage(folder).free
    if out_path.exists():
        free += out_path.stat().st_size  # it will be replaced
    if free < need_bytes + DISK_MARGIN_BYTES:
        raise SynthError(f"{folder}: {free / 2**30:.2f} GiB free, the file needs {need_bytes / 2**30:.2f} GiB "
                         f"(+ {DISK_MARGIN_BYTES >> 20} MiB margin): free space or choose another --out")


def synthesize(arch_id_or_spec: str | ArchSpec, out_path: str | Path, quant: str = "Q4_K",
               vocab_gguf: str | Path | None = None, layers: int | None = None, seed: int = 0,
               progress: bool = True) -> Path:
    """Write a random-weight GGUF of `arch_id_or_spec`'s shape (a stand-in id such as "qwen3-32b", or an
    ArchSpec) to `out_path`; `layers` overrides the layer count (a quick smaller file). Returns the path.

    The file is written to `<out>.partial` and renamed at the end, so a half-written file never looks done.
    Raises SynthError for a shape llama cannot express, an unknown quant, or too little disk."""
    arch, kvs, plan, size = plan_file(arch_id_or_spec, quant, vocab_gguf, layers, seed)
    return write_file(out_path, arch, kvs, plan, size, seed, progress)


def write_file(out_path: str | Path, arch: ArchSpec, kvs: list[KV], plan: list[TensorPlan], size: dict,
               seed: int = 0, progress: bool = True) -> Path:
    """Write what `plan_file` planned (disk checked first, one tensor in memory at a time)."""
    import gguf
    import numpy as np
    from tqdm import tqdm

    out = Path(out_path)
    check_disk(out, size["total_bytes"])
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    writer = gguf.GGUFWriter(str(tmp), gguf_arch(arch))
    for kv in kvs:
        if kv.key != "general.architecture":
            writer.add_key_value(kv.key, kv.value, gguf.GGUFValueType(kv.vtype),
                                 gguf.GGUFValueType(kv.sub_type) if kv.sub_type is not None else None)
    for t in plan:
        if t.layout is F32:
            writer.add_tensor_info(t.name, t.ne[::-1], np.dtype(np.float32), t.nbytes)
        else:
            writer.add_tensor_info(t.name, t.byte_shape, np.dtype(np.uint8), t.nbytes,
                                   raw_dtype=gguf.GGMLQuantizationType(t.layout.ggml_type))
    rng = np.random.Generator(np.random.PCG64(seed))
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        with tqdm(total=size["tensor_bytes"], unit="B", unit_scale=True, disable=not progress,
                  desc=f"synth {arch.name}") as bar:
            for t in plan:
                writer.write_tensor_data(tensor_data(t, rng))
                bar.update(t.nbytes)
        writer.close()
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise
    written = tmp.stat().st_size
    if written != size["total_bytes"]:
        tmp.unlink(missing_ok=True)
        raise SynthError(f"{out}: wrote {written} bytes, predicted {size['total_bytes']} (a bug in lab.model.synth)")
    tmp.replace(out)
    return out


def cached_file(arch_id: str, layers: int | None = None, quant: str = "Q4_K", seed: int = 0,
                progress: bool = False) -> Path:
    """A synthetic file kept in the lab's cache (~/.cache/llm-lab/synth/), written once: reused while its size
    is the predicted one. Notebook 05's parity grid uses Qwen3.8-27B at 4 layers (2.3 GB, ~10 s to write)."""
    from lab import setup

    arch, kvs, plan, size = plan_file(arch_id, quant, None, layers, seed)
    name = f"{arch_id}-{layers or arch.n_layers}L-{quant}-seed{seed}.gguf"
    path = setup.cache_dir() / "synth" / name
    if path.exists() and path.stat().st_size == size["total_bytes"]:
        return path
    return write_file(path, arch, kvs, plan, size, seed, progress)


def describe(arch: ArchSpec, plan: list[TensorPlan], size: dict, quant: str) -> str:
    n_attn = sum(1 for t in plan if t.name.endswith("attn_q.weight"))
    n_linear = sum(1 for t in plan if t.name.endswith("ssm_out.weight"))
    layers = f"{n_attn + n_linear} layers ({n_attn} full attention, {n_linear} Gated DeltaNet)" if n_linear \
        else f"{n_attn} layers"
    return (f"{arch.name} shape as {gguf_arch(arch)}: {layers}, "
            f"n_embd {arch.hidden_size}, n_ff {arch.ffn_size}, {arch.n_heads} heads / {arch.n_kv_heads} KV heads "
            f"x {arch.head_dim_k}, vocab {arch.vocab_size}; {quant}: {size['params'] / 1e9:.3f} B params, "
            f"{size['tensor_bytes'] / 2**30:.2f} GiB of weights, file {size['total_bytes']} bytes")


# ---------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m lab synth",
                                 description="Write a random-weight GGUF of a real model's shape (speed and memory "
                                             "tests only: its text is garbage).")
    ap.add_argument("--arch", required=True, help=f"stand-in id: {', '.join(models.stand_in_ids())}")
    ap.add_argument("--out", required=True, help="the GGUF file to write")
    ap.add_argument("--layers", type=int, default=None,
                    help="override the layer count (a smaller, quicker file; for the hybrid a multiple of 4 keeps "
                         "the 3 Gated DeltaNet : 1 full attention pattern)")
    ap.add_argument("--quant", default="Q4_K", choices=sorted(QUANTS), help="matrix type (default Q4_K)")
    ap.add_argument("--vocab", default=None, help=f"tokenizer GGUF to copy (default llama.cpp's {DEFAULT_VOCAB}; "
                                                   f"{QWEN35_VOCAB} for the Qwen3.5 hybrid)")
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    ap.add_argument("--dry-run", action="store_true", help="print the shape and exact size, write nothing")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    return ap


def main(argv: list[str] | None = None) -> int:
    """`python -m lab synth`: 0 written, 1 no room on the disk, 2 bad usage (unknown arch or quant, bad shape)."""
    args = build_parser().parse_args(argv)
    try:
        arch, kvs, plan, size = plan_file(args.arch, args.quant, args.vocab, args.layers, args.seed)
    except (SynthError, models.ModelConfigError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(describe(arch, plan, size, args.quant))
    if args.dry_run:
        return 0
    try:
        path = write_file(args.out, arch, kvs, plan, size, args.seed, progress=not args.no_progress)
    except SynthError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path} ({path.stat().st_size} bytes; {SYNTHETIC_NOTE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
