"""Quantization: what each llama.cpp quant type costs in bytes, loses in quality and gains in speed.

Notebook 03 runs the method on the embedded model (SmolLM2-135M) with the real llama.cpp tools:

1. `f16_reference`: an F16 GGUF written from the shipped quantized file (dequantized with `gguf`, every
   metadata key kept). The reference is itself dequantized from Q4_1: it is the shipped model's exact
   weights in a wider type, not the original BF16 training checkpoint.
2. `build_ladder`: `llama-quantize` from that reference to Q8_0 … Q4_0, cached outside the checkout under
   the set-up cache, keyed by the source file's sha256 (and the llama.cpp build).
3. `size_check`: each file's size against parameters × bits per weight, and against llama.cpp's own
   per-tensor type choice (reproduced by `choose_tensor_types`, which must match the file exactly).
4. `measure_quality`: mean KL divergence, top-1 agreement and perplexity against the reference on the
   held-out text (lab/data/heldout.txt), from `llama-perplexity --kl-divergence` (deterministic, so cached
   like the ladder, keyed by the files, the text, the arguments and the build); `crosscheck_kld` recomputes
   the first chunks independently through llama-cpp-python in every run.
5. `measure_speed`: `llama-bench -o json`, prompt processing and generation.

The same size model then predicts the 27B-class models (`target_sizes`; the seeds' size claims are judged
once, in lab.predict.claims, and shown here), and `vllm_quant_plan` says which checkpoint formats a profile's GPU can
run in vLLM and how to make them. Pure functions (type table, size prediction, output parsing)
touch no files or processes; the tests exercise them exactly. What notebook 03 shows of all this — its tables,
chart, record and closing text — is lab.measure.quantize_views.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from lab.core import checks as lab_checks
from lab.core import evidence, facts, paths
from lab.model import gguf_file, llama_bench, models, xcheck_logits

DATA = "quant_types"  # lab/data/quant_types.yaml
DEFAULT_LADDER = ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0")
TARGET_TYPES = ("F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_K_S", "Q4_0")
GB = 10**9
GIB = 1 << 30
MIB = 1 << 20
HELDOUT = facts.DATA_DIR / "heldout.txt"
# Cross-check tolerances between llama-perplexity and the lab's own computation on the same tokens:
# llama-perplexity stores the base log-probabilities as 16-bit integers over a 16-nat range and skips
# tokens below e^-16 in the KL sum, so the two agree closely but not to the last digit.
XCHECK_KLD_REL = 0.05
XCHECK_KLD_ABS = 0.002
XCHECK_TOP1_PP = 3.0
XCHECK_PPL_REL = 0.02
# The shipped file against its own F16 copy: identical weights, but llama.cpp's quantized dot products
# quantize the activations to 8 bits (vec_dot_type Q8_1/Q8_0/Q8_K) where the F16 path keeps 16, which
# alone gave KLD ≈ 0.003 here. Above 0.01 the reference would not be the shipped model.
SHIPPED_KLD_MAX = 0.01
# A seed's "about X–Y GB" still holds within 5 % of its range (round numbers in prose).
CLAIM_SLACK = 0.05


class QuantError(ValueError):
    """Bad input to the quantization arithmetic (unknown type, impossible shape); says what is allowed."""


class DiskSpaceError(RuntimeError):
    """Not enough free disk for the ladder; the message names the folder, the bytes needed and free."""


class ToolError(RuntimeError):
    """A llama.cpp tool failed or printed something the lab cannot parse; the message has its log tail."""


# ================================================================ type table (pure)
@dataclass(frozen=True)
class TensorType:
    """A ggml tensor type: `block_weights` weights stored in `block_bytes` bytes."""

    id: str
    block_weights: int
    block_bytes: int
    layout: str
    source: str

    @property
    def bits_per_weight(self) -> float:
        return 8 * self.block_bytes / self.block_weights

    @property
    def is_quantized(self) -> bool:
        return self.id not in ("F32", "F16", "BF16")


@lru_cache(maxsize=1)
def tensor_types() -> dict[str, TensorType]:
    """The ggml tensor types of lab/data/quant_types.yaml, by id."""
    data = facts.load(DATA, "tensor_types")
    return {e["id"]: TensorType(e["id"], int(e["block_weights"]), int(e["block_bytes"]), e.get("layout", ""),
                                e["source"]) for e in data["tensor_types"]}


@lru_cache(maxsize=1)
def file_types() -> dict[str, dict]:
    """llama-quantize's file types (mixes) of lab/data/quant_types.yaml, by id."""
    return {e["id"]: e for e in facts.load(DATA, "file_types")["file_types"]}


@lru_cache(maxsize=1)
def _fallbacks() -> dict[str, str]:
    return {e["from"]: e["to"] for e in facts.load(DATA, "fallback")["fallback"]}


def _known_types() -> str:
    return ", ".join(sorted(set(file_types()) | set(tensor_types())))


def tensor_type(name: str) -> TensorType:
    """A ggml tensor type by id ("Q4_K", "Q8_0", "F16" ...); QuantError names the known ones."""
    key = name.upper()
    if key not in tensor_types():
        raise QuantError(f"unknown tensor type {name!r}; known tensor types: {', '.join(tensor_types())}")
    return tensor_types()[key]


def base_type(qtype: str) -> str:
    """The ggml tensor type a llama-quantize type starts from ("Q4_K_M" → "Q4_K"; "Q8_0" → "Q8_0")."""
    key = qtype.upper() if isinstance(qtype, str) else qtype
    if key in file_types():
        return file_types()[key]["base"]
    if key in tensor_types():
        return key
    raise QuantError(f"unknown quant type {qtype!r}; known: {_known_types()}")


def bits_per_weight(qtype: str) -> float:
    """Nominal bits per weight of a type: its base tensor type's block bytes × 8 ÷ block weights
    (Q4_K_M → Q4_K → 144 bytes per 256 weights = 4.5). Mixes add more; see `choose_tensor_types`."""
    return tensor_type(base_type(qtype)).bits_per_weight


def tensor_nbytes(qtype: str, ne: Sequence[int]) -> int:
    """Exact bytes of one tensor of shape `ne` (ggml order: ne[0] is the row length) stored as `qtype`."""
    t = tensor_type(qtype)
    ne = [int(n) for n in ne]
    if not ne or any(n <= 0 for n in ne):
        raise QuantError(f"tensor shape {ne} must be non-empty and positive")
    if ne[0] % t.block_weights:
        raise QuantError(f"row length {ne[0]} is not a multiple of {t.id}'s block of {t.block_weights} weights")
    n = 1
    for d in ne:
        n *= d
    return n // t.block_weights * t.block_bytes


def naive_weight_bytes(params: int, qtype: str) -> int:
    """parameters × bits per weight ÷ 8, every parameter at the type's base (the seeds' arithmetic), rounded."""
    if not isinstance(params, int) or params <= 0:
        raise QuantError(f"parameter count must be a positive integer, found {params!r}")
    t = tensor_type(base_type(qtype))
    return round(Fraction(params * t.block_bytes, t.block_weights))


# ================================================================ llama.cpp's per-tensor choice (pure)
@dataclass(frozen=True)
class TensorSpec:
    """One tensor as a GGUF lists it: name, shape in ggml order (ne[0] = row length), stored type."""

    name: str
    ne: tuple[int, ...]
    type: str

    @property
    def n_elements(self) -> int:
        return math.prod(self.ne)


@dataclass(frozen=True)
class TensorChoice:
    """The type llama-quantize gives one tensor, and why (`reason` is one of REASONS)."""

    name: str
    ne: tuple[int, ...]
    type: str
    reason: str

    @property
    def n_elements(self) -> int:
        return math.prod(self.ne)

    @property
    def nbytes(self) -> int:
        return tensor_nbytes(self.type, self.ne)


REASONS = {
    "base": "the type's base tensor type",
    "kept": "kept as stored: 1-D (norms, biases) or a tensor llama.cpp never quantizes",
    "output": "output head (or the token embedding when tied to it) raised to Q6_K",
    "output_shape": "output head / tied embedding: row length not a multiple of the block → Q8_0",
    "more_bits": "attn_v / ffn_down in a 'use_more_bits' layer raised to Q6_K (the _M mixes)",
    "first_layers": "attn_v / ffn_down of the first layers raised to Q5_K (Q4_K_S, Q3_K_M)",
    "attn_v_gqa": "attn_v / attn_qkv raised to Q5_K: IQ4_XS with ≥ 4 query heads per KV head",
    "q3_k_m": "attn_v / attn_qkv, ffn_down and attn_output raised to Q4_K (Q3_K_M)",
    "fallback": "row length not a multiple of 256: a 32-weight type instead (tensor_type_fallback)",
}
# Substrings of tensor names llama.cpp never quantizes (src/llama-quant.cpp tensor_allows_quantization).
_NEVER_QUANTIZED = ("_norm.weight", "ffn_gate_inp.weight", "ssm_conv1d", "altup", "laurel", "per_layer_model_proj",
                    "attn_rel_b.weight", "position_embd", "token_types.weight", "time_mix_")


def _quantizable(spec: TensorSpec) -> bool:
    n_dims = len(spec.ne)
    while n_dims > 1 and spec.ne[n_dims - 1] == 1:  # ggml_n_dims ignores trailing 1s
        n_dims -= 1
    return n_dims >= 2 and spec.name.endswith("weight") and not any(s in spec.name for s in _NEVER_QUANTIZED)


def _category(name: str) -> str:
    """src/llama-quant.cpp tensor_get_category, in the same order."""
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    for key, cat in (("attn_qkv.weight", "attn_v"), ("attn_kv_b.weight", "attn_v"), ("attn_v.weight", "attn_v"),
                     ("attn_k.weight", "attn_k"), ("attn_q.weight", "attn_q"), ("attn_output.weight", "attn_output"),
                     ("ffn_up", "ffn_up"), ("ffn_gate", "ffn_gate"), ("ffn_down", "ffn_down")):
        if key in name:
            return cat
    return "other"


def llama_cpp_order(tensors: Sequence[TensorSpec]) -> list[TensorSpec]:
    """Tensors in the order llama-quantize visits (and writes) them: the model loader's weights_map,
    sorted by layer number ("blk.N."; others first), then by name (src/llama-model-loader.h
    weight_name_comparer). The layer counters of the mix rules follow this order, not the file's."""
    def key(t: TensorSpec):
        m = re.match(r"blk\.(\d+)\.", t.name)
        return (int(m.group(1)) if m else -1, t.name.encode())
    return sorted(tensors, key=key)


def _use_more_bits(i: int, n: int) -> bool:
    """llama.cpp's use_more_bits: the first and last eighth of the layers and every third one between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def choose_tensor_types(tensors: Sequence[TensorSpec], qtype: str, n_layers: int,
                        pure: bool = False, n_gqa: int | None = None, imatrix: bool = False) -> list[TensorChoice]:
    """The type llama-quantize gives each tensor for file type `qtype` (no imatrix, no overrides).

    Reproduces src/llama-quant.cpp for the mixes marked `modelled` in quant_types.yaml: the output rule
    (output.weight, or the token embedding when no output.weight exists, goes to Q6_K — Q8_0 when its
    row length does not fit the block), the _M mixes' extra bits for attn_v and ffn_down in
    use_more_bits layers, Q4_K_S's first layers, Q3_K_M's raised attn_v/attn_qkv (Q5_K for the first two,
    then Q4_K), attn_output and ffn_down (Q5_K for the first 1/16, then Q4_K), IQ4_XS's attn_v/attn_qkv at
    Q5_K when n_gqa (query heads per KV head) ≥ 4 and its first-1/8 ffn_down at Q5_K without an imatrix,
    then the fallback of tensor_type_fallback for rows that are not a multiple of the block. `pure` is
    `llama-quantize --pure`: no mix rules. The result is in llama.cpp's order (`llama_cpp_order`), which is
    also the quantized file's. MoE models are not modelled."""
    key = qtype.upper()
    if key in tensor_types() and key not in file_types():
        key_base, modelled = key, True
    elif key in file_types():
        key_base, modelled = file_types()[key]["base"], bool(file_types()[key].get("modelled"))
    else:
        raise QuantError(f"unknown quant type {qtype!r}; known: {_known_types()}")
    if not modelled:
        raise QuantError(f"{qtype}: the lab does not model this mix's per-tensor rules; "
                         f"modelled: {', '.join(k for k, v in file_types().items() if v.get('modelled'))}")
    if n_layers <= 0:
        raise QuantError(f"n_layers must be positive, found {n_layers}")
    if key == "IQ4_XS" and not pure and n_gqa is None:
        raise QuantError("IQ4_XS's mix depends on the query heads per KV head (n_gqa): pass n_gqa")
    base = tensor_type(key_base)
    tied = not any(t.name == "output.weight" for t in tensors)
    n_wv = sum(_category(t.name) == "attn_v" for t in tensors)
    i_wv = i_down = 0
    out: list[TensorChoice] = []
    for t in llama_cpp_order(tensors):
        if not _quantizable(t):
            out.append(TensorChoice(t.name, tuple(t.ne), t.type, "kept"))
            continue
        if not base.is_quantized:  # F16/BF16 targets: no mix rules, no fallback
            out.append(TensorChoice(t.name, tuple(t.ne), base.id, "base"))
            continue
        new, reason = base.id, "base"
        cat = _category(t.name)
        if not pure:
            if cat == "output" or (tied and cat == "token_embd"):
                if t.ne[0] % tensor_type(new).block_weights:
                    new, reason = "Q8_0", "output_shape"
                elif new != "Q8_0":
                    new, reason = "Q6_K", "output"
            elif cat == "attn_v":
                if key in ("Q4_K_M", "Q5_K_M") and _use_more_bits(i_wv, n_wv):
                    new, reason = "Q6_K", "more_bits"
                elif key == "Q4_K_S" and i_wv < 4:
                    new, reason = "Q5_K", "first_layers"
                elif key == "Q3_K_M":
                    new, reason = ("Q5_K", "first_layers") if i_wv < 2 else ("Q4_K", "q3_k_m")
                elif key == "IQ4_XS" and n_gqa >= 4:
                    new, reason = "Q5_K", "attn_v_gqa"
                i_wv += 1
            elif cat == "ffn_down":
                if key in ("Q4_K_M", "Q5_K_M") and _use_more_bits(i_down, n_layers):
                    new, reason = "Q6_K", "more_bits"
                elif key == "Q4_K_S" and i_down < n_layers // 8:
                    new, reason = "Q5_K", "first_layers"
                elif key == "Q3_K_M":  # not Falcon: every other layer Q4_K
                    new, reason = ("Q5_K", "first_layers") if i_down < n_layers // 16 else ("Q4_K", "q3_k_m")
                elif key == "IQ4_XS" and i_down < n_layers // 8 and not imatrix:
                    new, reason = "Q5_K", "first_layers"
                i_down += 1
            elif cat == "attn_output" and key == "Q3_K_M":
                new, reason = "Q4_K", "q3_k_m"
        block = tensor_type(new).block_weights
        if t.ne[0] % block:
            if new in _fallbacks():
                new = _fallbacks()[new]
            elif block > 32:
                raise QuantError(f"{t.name}: no fallback known for {new}")
            if t.ne[0] % tensor_type(new).block_weights:
                new = "F16"  # llama.cpp: "must use F16 due to unusual shape"
            reason = "fallback"
        out.append(TensorChoice(t.name, tuple(t.ne), new, reason))
    return out


@dataclass
class SizePrediction:
    """What `choose_tensor_types` gives, summed: tensor bytes per type and per reason."""

    qtype: str
    params: int
    tensor_bytes: int
    by_type: dict[str, dict]
    by_reason: dict[str, dict]
    choices: list[TensorChoice] = field(repr=False)

    @property
    def bits_per_weight(self) -> float:
        return 8 * self.tensor_bytes / self.params

    def arithmetic(self) -> str:
        """The sum written out: weights × bpw / 8 for each type, in GB."""
        parts = [f"{v['weights'] / 1e9:.3f}e9 × {tensor_type(t).bits_per_weight:g}/8"
                 for t, v in sorted(self.by_type.items(), key=lambda kv: -kv[1]["bytes"])]
        return " + ".join(parts) + f" = {self.tensor_bytes / GB:.3f} GB"


def predict_size(tensors: Sequence[TensorSpec], qtype: str, n_layers: int, pure: bool = False,
                 n_gqa: int | None = None, imatrix: bool = False) -> SizePrediction:
    """Tensor-data bytes of a GGUF quantized to `qtype` from tensors `tensors` (llama.cpp's choice, exact)."""
    choices = choose_tensor_types(tensors, qtype, n_layers, pure=pure, n_gqa=n_gqa, imatrix=imatrix)
    by_type: dict[str, dict] = {}
    by_reason: dict[str, dict] = {}
    for c in choices:
        for table, k in ((by_type, c.type), (by_reason, c.reason)):
            row = table.setdefault(k, {"tensors": 0, "weights": 0, "bytes": 0})
            row["tensors"] += 1
            row["weights"] += c.n_elements
            row["bytes"] += c.nbytes
    total = sum(v["bytes"] for v in by_type.values())
    return SizePrediction(qtype.upper(), sum(c.n_elements for c in choices), total, by_type, by_reason, choices)


def int4_group_bytes(tensors: Sequence[TensorSpec], fmt: str = "INT4-g128") -> dict:
    """Bytes of an AWQ/GPTQ-style 4-bit checkpoint: every quantizable matrix except the token embedding
    and output head at bits + (scale + zero bits) / group; everything else 16-bit."""
    spec = next((e for e in facts.load(DATA, "int4_group_formats")["int4_group_formats"] if e["id"] == fmt), None)
    if spec is None:
        raise QuantError(f"unknown 4-bit group format {fmt!r}")
    bits = Fraction(spec["bits"]) + Fraction(spec["scale_bits"] + spec["zero_bits"], spec["group_size"])
    q_weights = other = 0
    for t in tensors:
        if _quantizable(t) and _category(t.name) not in ("output", "token_embd"):
            q_weights += t.n_elements
        else:
            other += t.n_elements
    q_bytes = round(q_weights * bits / 8)
    o_bytes = other * int(spec["unquantized_bytes_per_param"])
    return {"format": fmt, "bits_per_quantized_weight": float(bits), "quantized_weights": q_weights,
            "quantized_bytes": q_bytes, "other_weights": other, "other_bytes": o_bytes, "bytes": q_bytes + o_bytes,
            "arithmetic": f"{q_weights / 1e9:.3f}e9 × {float(bits):.4g}/8 + {other / 1e9:.3f}e9 × "
                          f"{spec['unquantized_bytes_per_param']} B = {(q_bytes + o_bytes) / GB:.3f} GB",
            "source": spec["source"]}


# ================================================================ tensor lists
@dataclass(frozen=True)
class GGUFInfo:
    """What the lab reads from a GGUF header: tensors (file order), tensor-data bytes, metadata keys,
    architecture and layer count."""

    tensors: tuple[TensorSpec, ...]
    tensor_bytes: int
    keys: tuple[str, ...]
    architecture: str
    n_layers: int
    file_type: int | None
    n_vocab: int | None


def gguf_info(path: str | Path) -> GGUFInfo:
    """The header of a GGUF file, read by `gguf_file.read_gguf_header` (cached per path, size and modification
    time; gguf.GGUFReader would turn each of the ladder's 49,152-token vocabularies into numpy views: ~2 s a file)."""
    from gguf import GGMLQuantizationType

    h = gguf_file.read_gguf_header(path)
    arch = h.metadata["general.architecture"]
    blocks, ftype = h.metadata.get(f"{arch}.block_count"), h.metadata.get("general.file_type")
    return GGUFInfo(tuple(TensorSpec(name, shape, GGMLQuantizationType(t).name) for name, shape, t in h.tensors),
                    h.tensor_bytes, h.keys, arch, int(blocks) if blocks is not None else 0,
                    int(ftype) if ftype is not None else None, h.array_lengths.get("tokenizer.ggml.tokens"))


def _gguf_n_gqa(path: str | Path) -> int:
    """Query heads per KV head of a GGUF's model (llama.cpp hparams.n_gqa(), which IQ4_XS's mix reads)."""
    arch = models.from_gguf(path)
    return arch.n_heads // arch.n_kv_heads


def gguf_tensor_specs(path: str | Path) -> list[TensorSpec]:
    """The tensors of a GGUF file, in file order (header only; no tensor data is read)."""
    return list(gguf_info(path).tensors)


def _cfg(model_id: str) -> dict:
    cfg = dict(models.stand_in_entry(model_id)["config"])
    inner = cfg.pop("text_config", None)
    return {**cfg, **inner} if isinstance(inner, dict) else cfg


def arch_tensor_specs(model_id: str) -> list[TensorSpec]:
    """The tensors a llama.cpp conversion of stand-in `model_id` holds, in GGUF names and file order.

    Built from the shipped config (lab.model.models): token embedding, per-layer attention (or Gated-DeltaNet
    for Qwen3.5's linear layers), norms and gated MLP, output head when untied. 2-D weights are listed as
    F16 (a converted file's type), 1-D ones as F32. Qwen3.5's multi-token-prediction layer, which a
    conversion may carry but llama.cpp does not run, is not counted (nor in lab.model.models' parameter count)."""
    arch = models.stand_in(model_id)
    cfg = _cfg(model_id)
    mtype = cfg.get("model_type", "")
    h, ffn, vocab = arch.hidden_size, arch.ffn_size, arch.vocab_size
    heads, kv, hk, hv = arch.n_heads, arch.n_kv_heads, arch.head_dim_k, arch.head_dim_v
    if arch.n_experts:
        raise QuantError(f"{model_id}: MoE models are not modelled")
    mat = lambda name, ne0, ne1: TensorSpec(name, (ne0, ne1), "F16")  # noqa: E731
    vec = lambda name, n: TensorSpec(name, (n,), "F32")  # noqa: E731
    specs = [mat("token_embd.weight", h, vocab)]
    gemma = mtype.startswith("gemma")
    linear = set(arch.linear_layers)
    for i in range(arch.n_layers):
        b = f"blk.{i}."
        specs.append(vec(b + "attn_norm.weight", h))
        if i in linear:
            nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
            dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
            conv_dim = 2 * nk * dk + nv * dv
            specs += [mat(b + "attn_qkv.weight", h, conv_dim), mat(b + "attn_gate.weight", h, nv * dv),
                      TensorSpec(b + "ssm_conv1d.weight", (cfg["linear_conv_kernel_dim"], conv_dim), "F32"),
                      vec(b + "ssm_dt.bias", nv), vec(b + "ssm_a", nv),
                      mat(b + "ssm_beta.weight", h, nv), mat(b + "ssm_alpha.weight", h, nv),
                      vec(b + "ssm_norm.weight", dv), mat(b + "ssm_out.weight", nv * dv, h)]
        else:
            q_out = heads * hk * (2 if cfg.get("attn_output_gate") else 1)
            specs += [mat(b + "attn_q.weight", h, q_out), mat(b + "attn_k.weight", h, kv * hk),
                      mat(b + "attn_v.weight", h, kv * hv), mat(b + "attn_output.weight", heads * hv, h)]
            if cfg.get("attention_bias") or mtype == "qwen2":
                specs += [vec(b + "attn_q.bias", heads * hk), vec(b + "attn_k.bias", kv * hk),
                          vec(b + "attn_v.bias", kv * hv)]
            if mtype.startswith(("qwen3", "gemma3")):
                specs += [vec(b + "attn_q_norm.weight", hk), vec(b + "attn_k_norm.weight", hk)]
        if gemma:
            specs += [vec(b + "post_attention_norm.weight", h), vec(b + "ffn_norm.weight", h)]
        elif mtype.startswith("qwen3_5"):
            specs.append(vec(b + "post_attention_norm.weight", h))
        else:
            specs.append(vec(b + "ffn_norm.weight", h))
        specs += [mat(b + "ffn_gate.weight", h, ffn), mat(b + "ffn_up.weight", h, ffn), mat(b + "ffn_down.weight", ffn, h)]
        if gemma:
            specs.append(vec(b + "post_ffw_norm.weight", h))
    specs.append(vec("output_norm.weight", h))
    if not cfg.get("tie_word_embeddings", False):
        specs.append(mat("output.weight", h, vocab))
    return specs


# ================================================================ 27B-class targets and the seeds' claims (pure)
def target_model_ids(profile) -> list[str]:
    """The 27B-class stand-ins of quant_types.yaml, plus the profile's own stand-in when it names one."""
    ids = [e["id"] for e in facts.load(DATA, "target_models")["target_models"]]
    kind, _, ref = profile.model_architecture.partition(":")
    if kind == "config" and ref not in ids:
        ids.append(ref)
    return ids


def target_sizes(profile, types: Sequence[str] = TARGET_TYPES) -> list[dict]:
    """For each 27B-class stand-in and type: naive (params × bpw/8) and llama.cpp-mix bytes, GB and GiB.

    One row per (model, type), plus an INT4-g128 (AWQ/GPTQ) row per model. `params_check` compares the
    tensor list's parameter count with lab.model.models' (they must be equal)."""
    rows = []
    own = profile.model_architecture.partition(":")[2] if profile.model_architecture.startswith("config:") else None
    vram = profile.gpu_vram_mib * MIB if profile.gpu_vram_mib else None
    for mid in target_model_ids(profile):
        arch = models.stand_in(mid)
        specs = arch_tensor_specs(mid)
        n = sum(t.n_elements for t in specs)
        if n != arch.params:
            raise QuantError(f"{mid}: tensor list has {n} parameters, lab.model.models counts {arch.params}")
        entry = models.stand_in_entry(mid)
        common = {"model": entry["hf_repo"], "model_id": mid, "profile_model": mid == own, "params": n,
                  "source": entry["source"]}
        for q in types:
            pred = predict_size(specs, q, arch.n_layers)
            naive = naive_weight_bytes(n, q)
            rows.append({**common, "type": q, "nominal_bpw": bits_per_weight(q), "naive_bytes": naive,
                         "predicted_bytes": pred.tensor_bytes, "predicted_gb": pred.tensor_bytes / GB,
                         "predicted_gib": pred.tensor_bytes / GIB, "effective_bpw": pred.bits_per_weight,
                         "vs_naive_pct": 100 * (pred.tensor_bytes - naive) / naive,
                         "vram_left_gib": (vram - pred.tensor_bytes) / GIB if vram else None,
                         "arithmetic": pred.arithmetic(), "basis": "llama.cpp mix, per tensor"})
        int4 = int4_group_bytes(specs)
        rows.append({**common, "type": "INT4-g128 (AWQ/GPTQ)", "nominal_bpw": 4.0,
                     "naive_bytes": n // 2,
                     "predicted_bytes": int4["bytes"], "predicted_gb": int4["bytes"] / GB,
                     "predicted_gib": int4["bytes"] / GIB, "effective_bpw": 8 * int4["bytes"] / n,
                     "vs_naive_pct": 100 * (int4["bytes"] - n / 2) / (n / 2),
                     "vram_left_gib": (vram - int4["bytes"]) / GIB if vram else None,
                     "arithmetic": int4["arithmetic"], "basis": "4-bit groups of 128 + 16-bit embeddings/head"})
    return rows


def published_size_checks() -> list[dict]:
    """The size model against published file sizes (quant_types.yaml `published_sizes`): one row each."""
    rows = []
    for entry in facts.load(DATA, "published_sizes")["published_sizes"]:
        arch = models.stand_in(entry["model"])
        specs = arch_tensor_specs(entry["model"])
        unit = GIB if entry["unit"] == "GiB" else GB
        for q, published in entry["sizes"].items():
            pred = predict_size(specs, q, arch.n_layers, pure=bool(entry.get("pure")),
                                n_gqa=arch.n_heads // arch.n_kv_heads, imatrix=bool(entry.get("imatrix")))
            value = pred.tensor_bytes / unit
            rows.append({"check": entry["id"], "model": entry["model"], "type": q + (" (pure)" if entry.get("pure") else ""),
                         "published": published, "predicted": round(value, 3), "unit": entry["unit"],
                         "diff_pct": 100 * (value - published) / published, "source": entry["source"]})
    return rows


@lru_cache(maxsize=256)  # pure in its arguments and the shipped data; the claims ledger asks ~280 times per notebook
def exact_gguf_bytes(model_id: str, quant: str, imatrix: bool = False) -> int | None:
    """Tensor bytes of stand-in `model_id` quantized by llama.cpp to `quant`, when this module models
    that mix (GGUF types only; AWQ/GPTQ, MoE and unknown ids → None). `imatrix`: made with an importance matrix
    (changes IQ4_XS's first ffn_down layers; the published i1-/bartowski files are)."""
    try:
        arch = models.stand_in(model_id)
        return predict_size(arch_tensor_specs(model_id), quant, arch.n_layers,
                            n_gqa=arch.n_heads // arch.n_kv_heads, imatrix=imatrix).tensor_bytes
    except (QuantError, models.ModelConfigError, KeyError, ValueError, FileNotFoundError):
        return None


DOWNLOAD_TYPES = ("Q3_K_M", "IQ4_XS", "Q4_K_S", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "BF16")


def published_download_table(model_id: str = "qwen3.8-27b", types: Sequence[str] = DOWNLOAD_TYPES) -> list[dict]:
    """The GGUF sizes users download (quant_types.yaml `published_downloads`, each with its source) beside the
    lab's exact size for the same llama-quantize type (`exact_gguf_bytes`, with or without an
    imatrix as the published file was made): one row per published figure, and one lab-only row for each
    type nobody published. `verdict`: "exact" (a standard mix, equal to the printed digits), "agrees"
    (a rounded figure the lab's rounds to), "differs", "custom mix" (unsloth UD / bartowski _L / other
    overrides: the lab's standard mix is shown for scale) or "no size published"."""
    arch = models.stand_in(model_id)
    entries = [e for e in facts.load(DATA, "published_downloads")["published_downloads"] if e["model"] == model_id]
    rows = []
    for t in types:
        matched = [e for e in entries if e["type"] == t] or [None]
        for e in matched:
            imatrix = bool(e and e.get("imatrix"))
            lab = exact_gguf_bytes(model_id, t, imatrix=imatrix)
            if lab is None:
                raise QuantError(f"{model_id}: the lab has no exact size for {t}")
            row = {"type": t, "listed_as": e["listed_as"] if e else "(lab only)", "mix": e["mix"] if e else "standard",
                   "imatrix": imatrix, "published": e and e["size"], "unit": e["unit"] if e else "GB",
                   "lab_bytes": lab, "lab_gb": round(lab / GB, 3), "lab_gib": round(lab / GIB, 3),
                   "lab_bpw": round(8 * lab / arch.params, 3), "diff_pct": None, "verdict": "no size published",
                   "source": e["source"] if e else "lab.model.quantize.predict_size over lab.model.models' Qwen3.8-27B tensors"}
            if e and e["size"] is not None:
                unit = GIB if e["unit"] == "GiB" else GB
                digits = 0 if e.get("rounded") else 3
                lab_in_unit = round(lab / unit, digits)
                row["diff_pct"] = round(100 * (lab / unit - e["size"]) / e["size"], 2)
                if e["mix"] != "standard":
                    row["verdict"] = "custom mix"
                elif lab_in_unit == e["size"]:
                    row["verdict"] = "agrees" if e.get("rounded") else "exact"
                else:
                    row["verdict"] = "differs"
            rows.append(row)
    return rows


# ================================================================ vLLM formats (pure)
def _compat_rule(rule_id: str) -> dict | None:
    for rule in facts.load("compat_rules", "rules")["rules"]:
        if rule.get("id") == rule_id:
            return rule
    return None


def vllm_quant_plan(profile, gpu_present: bool | None = None) -> dict:
    """Which vLLM checkpoint formats the profile's GPU can run, and how to make each one.

    Thresholds come from lab/data/compat_rules.yaml (quant_format_min_capability); the tools and
    commands from quant_types.yaml `vllm_routes`. With no GPU here (or `gpu_present=False`) the commands
    are a plan to run on a GPU machine, not something this notebook runs."""
    rule = _compat_rule("quant_format_min_capability")
    if rule is None:
        raise facts.DataError("compat_rules.yaml has no rule 'quant_format_min_capability'")
    formats = dict(rule["formats"])
    formats["GGUF"] = {"min": int(rule.get("gguf_min", 60))}
    cc_text = profile.gpu_compute_capability
    note = ""
    if cc_text is None:
        cc_text, note = "7.0", "this profile has no GPU: evaluated for the seeds' V100 (compute capability 7.0)"
    cc = int(round(float(cc_text) * 10))
    if gpu_present is None:
        gpu_present = bool(evidence.gpu_summary()["gpus"])
    model = "Qwen/Qwen3-32B"
    if profile.model_architecture.startswith("config:"):
        model = models.stand_in_entry(profile.model_architecture.split(":", 1)[1])["hf_repo"]
    out_dir = model.split("/")[-1]
    rows = []
    for route in facts.load(DATA, "vllm_routes")["vllm_routes"]:
        f = formats.get(route["format"]) or ({"min": int(route["min_capability"])} if "min_capability" in route else {})
        need = f.get("min")
        if need is None:
            runs, kernel = "unknown", "no capability rule for this format"
        elif cc < need:
            runs, kernel = "no", f"needs compute capability ≥ {need / 10:.1f}, this GPU is {cc / 10:.1f}"
        elif f.get("fast_from") and cc < f["fast_from"]:
            runs, kernel = "yes (slow kernel)", f.get("below_fast", "")
        else:
            runs, kernel = "yes", ""
        fill = lambda s: s.replace("{model}", model).replace("{out}", f"{out_dir}-{route['format'].lower()}")  # noqa: E731
        rows.append({"format": route["format"], "min_capability": None if need is None else need / 10,
                     "runs_here": runs, "why": kernel, "tool": route["tool"],
                     "commands": [fill(c) for c in route["commands"]], "serve": fill(route["serve"]),
                     "note": route.get("note", "").strip(), "source": route["source"]})
    return {"compute_capability": cc / 10, "note": note, "model": model,
            "status": "runnable here" if gpu_present else "plan (no GPU on this machine: run the commands on a GPU box)",
            "thresholds_source": rule["source"], "rows": rows}


# ================================================================ files and tools (side effects)
def ladder_source(profile) -> tuple[Path, str]:
    """The GGUF the ladder starts from: the profile's embedded model, else SmolLM2 (the method is the point:
    re-quantizing a 27B file needs ~55 GB of F16 and far more than this notebook's minutes)."""
    if profile.model_file and profile.model_file.startswith("embedded:"):
        return paths.model_path(profile.model_file), f"the profile's model ({profile.model_file})"
    return paths.embedded_model("smollm2"), (f"embedded:smollm2 — the profile's model ({profile.model_name}) is "
                                              "not re-quantized here; the ladder shows the method")


def _build_key() -> str:
    try:
        return str(paths.setup_paths().get("build_key") or "unknown-build")
    except paths.SetupMissing:
        return "unknown-build"


def cache_dir(source: str | Path, source_sha256: str | None = None) -> Path:
    """<set-up cache>/quant/<source stem>-<sha256[:16]>: outside the checkout, shared by runs."""
    source = Path(source)
    sha = source_sha256 or evidence.sha256_file(source)
    return Path(paths.setup_paths()["cache"]) / "quant" / f"{source.stem}-{sha[:16]}"


def free_bytes(folder: str | Path) -> int:
    folder = Path(folder)
    probe = folder
    while not probe.exists():
        probe = probe.parent
    return shutil.disk_usage(probe).free


def check_free_disk(folder: str | Path, needed: int, what: str = "the quant ladder") -> int:
    """Raise DiskSpaceError unless `folder`'s file system has `needed` bytes free; return the free bytes."""
    free = free_bytes(folder)
    if free < needed:
        raise DiskSpaceError(
            f"{folder}: {what} needs {needed:,} bytes ({needed / GIB:.2f} GiB) free, only {free:,} bytes "
            f"({free / GIB:.2f} GiB) are. Free some space, or point LAB_CACHE at a larger disk and re-run set-up.")
    return free


def _atomic_target(dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    return dest.with_name(f".{dest.name}.{os.getpid()}.partial")


def _progress(total: float | None, desc: str, unit: str = "it", enabled: bool = True, **kw):
    from tqdm import tqdm

    # TQDM_DISABLE: the runner sets it for executed notebooks (lab.records.runner.KERNEL_ENV); an explicit
    # disable= would otherwise override tqdm's own reading of it.
    enabled = enabled and not os.environ.get("TQDM_DISABLE")
    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, file=sys.stderr, dynamic_ncols=True,
                mininterval=0.5, **kw)


@dataclass
class Reference:
    """The F16 reference written from the shipped file."""

    path: Path
    source: Path
    source_sha256: str
    source_why: str
    sha256: str
    bytes: int
    tensors: int
    source_tensor_types: dict[str, int]
    keys_source: list[str]
    keys_reference: list[str]
    keys_changed: dict[str, list]
    reused: bool
    seconds: float
    note: str

    @property
    def source_type(self) -> str:
        """The shipped file's main tensor type (the most common one that is not F32)."""
        quant = {k: v for k, v in self.source_tensor_types.items() if k != "F32"} or self.source_tensor_types
        return max(quant, key=quant.get)

    @property
    def keys_kept(self) -> bool:
        return set(self.keys_source) <= set(self.keys_reference)

    def table(self):
        import pandas as pd

        return pd.DataFrame([
            {"item": "source", "value": f"{self.source.name} ({self.source_why})"},
            {"item": "source sha256", "value": self.source_sha256},
            {"item": "source tensor types", "value": ", ".join(f"{k} × {v}" for k, v in self.source_tensor_types.items())},
            {"item": "reference", "value": str(self.path)},
            {"item": "reference size", "value": f"{self.bytes:,} bytes ({self.bytes / MIB:.1f} MiB)"},
            {"item": "metadata keys kept", "value": f"{len(set(self.keys_source) & set(self.keys_reference))} of "
                                                    f"{len(self.keys_source)} (changed: {self.keys_changed or 'none'})"},
            {"item": "written", "value": "reused from the cache" if self.reused else f"now, in {self.seconds:.1f} s"},
            {"item": "what it is", "value": self.note}])

    def to_dict(self) -> dict:
        d = asdict(self)
        d["keys_kept"] = self.keys_kept
        return d


def write_f16_reference(source: str | Path, dest: str | Path, progress: bool = True) -> dict:
    """Dequantize every tensor of `source` with gguf.quants.dequantize and write an F16 GGUF to `dest`.

    Every metadata key is copied with its type; only general.file_type changes (to 1, MOSTLY_F16), because
    the file now holds F16. 1-D tensors (norms) stay F32 as llama.cpp stores them. Returns what changed."""
    import numpy as np
    import gguf
    from gguf import GGUFReader, GGUFWriter

    source, dest = Path(source), Path(dest)
    reader = GGUFReader(source)
    arch = reader.fields["general.architecture"].contents()
    tmp = _atomic_target(dest)
    changed = {}
    alignment = reader.fields.get("general.alignment")
    writer = GGUFWriter(tmp, arch, **({"alignment": int(alignment.contents())} if alignment else {}))
    for f in reader.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue  # the header counts and the architecture are written by GGUFWriter itself
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = f.contents()
        if f.name == "general.file_type":
            changed[f.name] = [value, int(gguf.LlamaFileType.MOSTLY_F16)]
            value = int(gguf.LlamaFileType.MOSTLY_F16)
        writer.add_key_value(f.name, value, vtype, sub_type=sub)
    total = sum(int(t.n_elements) for t in reader.tensors)
    with _progress(total, "dequantize → F16", "w", progress, unit_scale=True) as bar:
        for t in reader.tensors:
            if t.tensor_type == gguf.GGMLQuantizationType.F32:
                arr = np.array(t.data, dtype=np.float32)
            else:
                arr = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float16)
            arr = arr.reshape(tuple(reversed([int(x) for x in t.shape])))
            writer.add_tensor(t.name, arr)
            bar.update(int(t.n_elements))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file(progress=False)
    writer.close()
    tmp.replace(dest)
    return {"changed": changed}


def f16_reference(profile, progress: bool = True) -> Reference:
    """The cached F16 reference of the ladder's source (written now if missing, after a disk check)."""
    source, why = ladder_source(profile)
    sha = evidence.sha256_file(source)
    folder = cache_dir(source, sha)
    dest = folder / "reference-F16.gguf"
    src = gguf_info(source)
    types = dict(Counter(t.type for t in src.tensors))
    quant = {k: v for k, v in types.items() if k != "F32"} or types
    src_type = max(quant, key=quant.get)
    t0 = time.perf_counter()
    reused = dest.exists()
    changed = {"general.file_type": [src.file_type, 1]} if src.file_type is not None else {}
    if not reused:
        params = sum(t.n_elements for t in src.tensors)
        check_free_disk(folder, int(params * 2 * 1.1) + 64 * MIB, "the F16 reference")
        changed = write_f16_reference(source, dest, progress)["changed"]
    note = (f"An F16 copy of the shipped {src_type} file: its weights are exactly the shipped model's "
            f"(dequantized {src_type} values, rounded to F16) — it is itself dequantized, not the original BF16 "
            f"checkpoint. Every loss below is a re-quantization loss from a {src_type} starting point, measured "
            "against the model you actually have; quantizing the BF16 original behaves differently (usually "
            "lower loss, and monotone in bits).")
    return Reference(path=dest, source=source, source_sha256=sha, source_why=why, sha256=evidence.sha256_file(dest),
                     bytes=dest.stat().st_size, tensors=len(src.tensors), source_tensor_types=types,
                     keys_source=list(src.keys), keys_reference=list(gguf_info(dest).keys), keys_changed=changed,
                     reused=reused, seconds=round(time.perf_counter() - t0, 2), note=note)


def _run_tool(name: str, args: list[str], log: Path | None, timeout: float = 600) -> str:
    """Run a llama.cpp tool; return stdout+stderr; on failure raise ToolError with the log's tail."""
    cmd = [str(paths.tool(name)), *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    text = proc.stdout + ("\n" if proc.stdout and proc.stderr else "") + proc.stderr
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"$ {' '.join(cmd)}\n# exit {proc.returncode}, {time.perf_counter() - t0:.1f} s\n{text}")
    if proc.returncode != 0:
        tail = "\n".join(text.splitlines()[-15:])
        raise ToolError(f"{name} exited {proc.returncode}: {' '.join(cmd)}\n{tail}")
    return text


PRODUCT = "{product}"  # placeholder in a cached tool's arguments for the file it writes


def _cached_tool(name: str, args: list[str], meta: Path, log: Path | None, product: Path | None = None) -> tuple[str, dict]:
    """Run a deterministic llama.cpp tool once per cache entry and reuse it after: its output text (and the file
    it writes, `product`, passed in `args` as PRODUCT) are kept at `meta`. The caller keys `meta` by everything
    the output depends on: the input files' sha256, the text, the arguments and the llama.cpp build. A reused
    entry's log in the run folder says so, with when and how long it was computed. Returns (text, how made)."""
    if meta.exists() and (product is None or product.exists()):
        info = json.loads(meta.read_text())
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(f"# reused from the lab's cache {meta} (computed {info['utc']} in {info['seconds']} s; "
                           f"same input files, text, arguments and llama.cpp build)\n$ {' '.join(info['command'])}\n"
                           f"{info['text']}")
        return info["text"], {"reused": True, "computed_utc": info["utc"], "seconds": info["seconds"]}
    tmp = _atomic_target(product) if product is not None else None
    argv = [str(tmp) if a == PRODUCT else a for a in args]
    t0 = time.perf_counter()
    text = _run_tool(name, argv, log)
    info = {"utc": evidence.utc_now(), "seconds": round(time.perf_counter() - t0, 2),
            "command": [str(paths.tool(name)), *argv], "text": text}
    if tmp is not None:
        tmp.replace(product)
    tmp_meta = _atomic_target(meta)
    tmp_meta.write_text(json.dumps(info))
    tmp_meta.replace(meta)
    return text, {"reused": False, "computed_utc": info["utc"], "seconds": info["seconds"]}


@dataclass
class QuantFile:
    qtype: str
    path: Path
    bytes: int
    tensor_bytes: int
    sha256: str
    reused: bool
    seconds: float | None
    fallback_tensors: int | None
    log: str | None


@dataclass
class Ladder:
    """The reference and the quantized files, largest type first."""

    reference: Reference
    files: list[QuantFile]
    folder: Path
    build: str
    threads: int

    def table(self):
        import pandas as pd

        rows = [{"type": "F16 (reference)", "file": self.reference.path.name, "bytes": self.reference.bytes,
                 "MiB": self.reference.bytes / MIB, "made": "reused" if self.reference.reused else "now"}]
        rows += [{"type": f.qtype, "file": f.path.name, "bytes": f.bytes, "MiB": f.bytes / MIB,
                  "made": (f"reused (made in {f.seconds:.1f} s)" if f.seconds else "reused") if f.reused
                  else f"now, {f.seconds:.1f} s", "fallback tensors": f.fallback_tensors} for f in self.files]
        return pd.DataFrame(rows)

    def by_type(self) -> dict[str, QuantFile]:
        return {f.qtype: f for f in self.files}


def build_ladder(reference: Reference, types: Sequence[str] = DEFAULT_LADDER, threads: int | None = None,
                 log_dir: str | Path | None = None, progress: bool = True) -> Ladder:
    """Quantize the reference to each type with the real llama-quantize (cached; disk checked first)."""
    for q in types:
        if q.upper() not in file_types():
            raise QuantError(f"unknown quant type {q!r} for llama-quantize; known: {', '.join(file_types())}")
    threads = threads or min(2, os.cpu_count() or 1)
    build = _build_key()
    folder = reference.path.parent / build
    log_dir = Path(log_dir) / "03_quantize" if log_dir else None
    specs = gguf_tensor_specs(reference.path)
    n_layers = gguf_info(reference.path).n_layers
    missing = [q.upper() for q in types if not (folder / f"{q.upper()}.gguf").exists()]
    if missing:
        gqa = _gguf_n_gqa(reference.path)
        needed = sum(predict_size(specs, q, n_layers, n_gqa=gqa).tensor_bytes if file_types()[q].get("modelled")
                     else naive_weight_bytes(sum(t.n_elements for t in specs), q) for q in missing)
        check_free_disk(folder, int(needed * 1.1) + 64 * MIB, f"{len(missing)} quantized file(s)")
    files = []
    with _progress(len(types), "llama-quantize", "type", progress) as bar:
        for q in (t.upper() for t in types):
            bar.set_postfix_str(q)
            dest = folder / f"{q}.gguf"
            meta = dest.with_suffix(".json")  # what llama-quantize said when it made the file
            reused = dest.exists()
            if not reused:
                tmp = _atomic_target(dest)
                log_path = (log_dir / f"llama-quantize-{q}.log") if log_dir else None
                t0 = time.perf_counter()
                text = _run_tool("llama-quantize", [str(reference.path), str(tmp), q, str(threads)], log_path)
                m = re.search(r"(\d+) of (\d+) tensor\(s\) required fallback", text)
                info = {"seconds": round(time.perf_counter() - t0, 2), "fallback_tensors": int(m.group(1)) if m else 0,
                        "threads": threads, "build": build, "log": str(log_path) if log_path else None,
                        "summary": [ln for ln in text.splitlines() if "size  =" in ln or "quantize time" in ln]}
                tmp_meta = _atomic_target(meta)
                tmp_meta.write_text(json.dumps(info, indent=2))
                tmp.replace(dest)
                tmp_meta.replace(meta)
            info = json.loads(meta.read_text()) if meta.exists() else {}
            seconds, fallback, log = info.get("seconds"), info.get("fallback_tensors"), info.get("log")
            files.append(QuantFile(q, dest, dest.stat().st_size, gguf_info(dest).tensor_bytes, evidence.sha256_file(dest),
                                   reused, seconds, fallback, log))
            bar.update(1)
    return Ladder(reference, files, folder, build, threads)


# ================================================================ size check
@dataclass
class SizeCheck:
    rows: list[dict]
    breakdown: list[dict]
    mismatches: dict[str, list[dict]]

    def table(self):
        import pandas as pd

        cols = ["type", "params", "nominal_bpw", "naive_bytes", "predicted_bytes", "tensor_bytes", "file_bytes",
                "metadata_bytes", "effective_bpw", "file_vs_naive_pct", "types_match", "why"]
        return pd.DataFrame(self.rows)[cols]

    def breakdown_table(self):
        import pandas as pd

        return pd.DataFrame(self.breakdown)


def explain_size(pred: SizePrediction, naive: int) -> str:
    """Why the exact size differs from parameters × nominal bpw, in words, largest effect first."""
    base = base_type(pred.qtype)
    parts = []
    for reason, v in sorted(pred.by_reason.items(), key=lambda kv: -kv[1]["bytes"]):
        if reason == "base":
            continue
        types = sorted({c.type for c in pred.choices if c.reason == reason})
        extra = v["bytes"] - naive_weight_bytes(v["weights"], base) if v["weights"] else 0
        parts.append(f"{v['tensors']} tensor(s), {v['weights'] / 1e6:.2f}M weights, {REASONS[reason]} "
                     f"({'/'.join(types)}; {extra / MIB:+.2f} MiB vs {base})")
    diff = pred.tensor_bytes - naive
    head = f"{diff / MIB:+.2f} MiB vs {pred.params:,} × {bits_per_weight(pred.qtype):g}/8"
    return head + (": " + "; ".join(parts) if parts else ": every tensor at the base type")


def size_check(ladder: Ladder) -> SizeCheck:
    """Each file: measured bytes vs parameters × nominal bpw vs llama.cpp's per-tensor choice (which must
    equal the file's tensor types exactly), and why they differ."""
    specs = gguf_tensor_specs(ladder.reference.path)
    n_layers = gguf_info(ladder.reference.path).n_layers
    gqa = _gguf_n_gqa(ladder.reference.path)
    params = sum(t.n_elements for t in specs)
    rows, breakdown, mismatches = [], [], {}
    for f in ladder.files:
        pred = predict_size(specs, f.qtype, n_layers, n_gqa=gqa)
        actual = {t.name: t.type for t in gguf_tensor_specs(f.path)}
        bad = [{"tensor": c.name, "predicted": c.type, "file": actual.get(c.name)}
               for c in pred.choices if actual.get(c.name) != c.type]
        mismatches[f.qtype] = bad
        naive = naive_weight_bytes(params, f.qtype)
        rows.append({"type": f.qtype, "params": params, "nominal_bpw": bits_per_weight(f.qtype), "naive_bytes": naive,
                     "predicted_bytes": pred.tensor_bytes, "tensor_bytes": f.tensor_bytes, "file_bytes": f.bytes,
                     "metadata_bytes": f.bytes - f.tensor_bytes, "effective_bpw": 8 * f.tensor_bytes / params,
                     "file_vs_naive_pct": 100 * (f.bytes - naive) / naive,
                     "predicted_equals_file": pred.tensor_bytes == f.tensor_bytes,
                     "types_match": f"{len(specs) - len(bad)}/{len(specs)}", "why": explain_size(pred, naive)})
        for t, v in sorted(pred.by_type.items(), key=lambda kv: -kv[1]["bytes"]):
            breakdown.append({"type": f.qtype, "tensor_type": t, "tensors": v["tensors"], "weights": v["weights"],
                              "bytes": v["bytes"], "bpw": tensor_type(t).bits_per_weight,
                              "share_of_bytes_pct": 100 * v["bytes"] / pred.tensor_bytes})
    return SizeCheck(rows, breakdown, mismatches)


# ================================================================ quality: llama-perplexity --kl-divergence
_NUM = r"(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?|nan|-?inf)"
_SUMMARY = {
    "ppl": rf"Mean PPL\(Q\)\s*:\s*{_NUM}\s*±\s*{_NUM}",
    "ppl_base": rf"Mean PPL\(base\)\s*:\s*{_NUM}\s*±\s*{_NUM}",
    "ln_ppl_ratio": rf"Mean ln\(PPL\(Q\)/PPL\(base\)\)\s*:\s*{_NUM}\s*±\s*{_NUM}",
    "ppl_ratio": rf"Mean PPL\(Q\)/PPL\(base\)\s*:\s*{_NUM}\s*±\s*{_NUM}",
    "kld": rf"Mean\s+KLD:\s*{_NUM}\s*±\s*{_NUM}",
    "kld_max": rf"Maximum KLD:\s*{_NUM}",
    "kld_p99": rf"99\.0%\s+KLD:\s*{_NUM}",
    "kld_median": rf"Median\s+KLD:\s*{_NUM}",
    "delta_p_mean_pct": rf"Mean\s+Δp:\s*{_NUM}\s*±\s*{_NUM}\s*%",
    "delta_p_rms_pct": rf"RMS Δp\s*:\s*{_NUM}\s*±\s*{_NUM}\s*%",
    "top1_pct": rf"Same top p:\s*{_NUM}\s*±\s*{_NUM}\s*%",
}
_CHUNK = re.compile(rf"^\s*(\d+)\s+{_NUM}\s*±\s*{_NUM}\s+{_NUM}\s*±\s*{_NUM}\s+{_NUM}\s*±\s*{_NUM}\s+"
                    rf"{_NUM}\s*±\s*{_NUM}\s*%\s+{_NUM}\s*±\s*{_NUM}\s*%\s*$", re.M)


def parse_kld_output(text: str) -> dict:
    """The summary statistics llama-perplexity prints after --kl-divergence (means with ± uncertainty)."""
    out: dict[str, Any] = {}
    for key, pattern in _SUMMARY.items():
        m = re.search(pattern, text)
        if not m:
            tail = "\n".join(text.splitlines()[-12:])
            raise ToolError(f"llama-perplexity output has no '{key}' line (pattern {pattern!r}); last lines:\n{tail}")
        out[key] = float(m.group(1))
        if m.lastindex and m.lastindex > 1:
            out[key + "_unc"] = float(m.group(2))
    m = re.search(r"computing over (\d+) chunks, n_ctx=(\d+)", text)
    if m:
        out["chunks"], out["n_ctx"] = int(m.group(1)), int(m.group(2))
    return out


def parse_kld_chunks(text: str) -> list[dict]:
    """The per-chunk running values llama-perplexity prints (cumulative means up to each chunk)."""
    rows = []
    for m in _CHUNK.finditer(text):
        g = [m.group(1)] + [m.group(i) for i in range(2, 12)]
        rows.append({"chunk": int(g[0]), "ppl": float(g[1]), "ln_ppl_ratio": float(g[3]), "kld": float(g[5]),
                     "delta_p_rms_pct": float(g[7]), "top1_pct": float(g[9])})
    return rows


def parse_base_output(text: str) -> dict:
    """PPL and chunk count from the --kl-divergence-base run (the F16 reference's own perplexity)."""
    m = re.search(rf"Final estimate: PPL = {_NUM} \+/- {_NUM}", text)
    c = re.search(r"calculating perplexity over (\d+) chunks, n_ctx=(\d+)", text)
    if not m or not c:
        raise ToolError("llama-perplexity --kl-divergence-base printed no final PPL; last lines:\n"
                        + "\n".join(text.splitlines()[-12:]))
    return {"ppl": float(m.group(1)), "ppl_unc": float(m.group(2)), "chunks": int(c.group(1)), "n_ctx": int(c.group(2))}


@dataclass
class Quality:
    rows: list[dict]
    base: dict
    base_file: Path
    settings: dict
    raw_chunks: dict[str, list[dict]]

    def table(self):
        import pandas as pd

        cols = ["type", "kld", "kld_unc", "kld_median", "kld_p99", "top1_pct", "ppl", "ppl_base", "ppl_ratio",
                "delta_p_rms_pct", "computed"]
        return pd.DataFrame(self.rows)[cols]


def _made_text(made: dict) -> str:
    when = made["computed_utc"].replace("T", " ").rstrip("Z")[:16]
    return f"cached ({when} UTC, {made['seconds']:.0f} s)" if made["reused"] else f"now ({made['seconds']:.0f} s)"


def heldout_text() -> tuple[Path, dict]:
    """The held-out text and its data entry (source, licence)."""
    return HELDOUT, facts.load(DATA, "heldout_text")["heldout_text"][0]


def measure_quality(ladder: Ladder, text: str | Path | None = None, n_ctx: int = 128, batch: int = 512,
                    chunks: int | None = None, include_source: bool = True, log_dir: str | Path | None = None,
                    progress: bool = True) -> Quality:
    """KL divergence, top-1 agreement and perplexity of each file against the F16 reference.

    `llama-perplexity --kl-divergence-base` saves the reference's log-probabilities over the held-out text
    (chunks of `n_ctx` tokens; the second half of each chunk is scored), then `--kl-divergence` runs each
    quantized file over the same tokens. `include_source` adds the shipped file itself (it should be
    ~identical to the reference it was dequantized into). Each tool run is cached (`_cached_tool`); a row's
    `computed` says whether it ran now or when it was made."""
    if n_ctx < 16:
        raise QuantError(f"n_ctx must be at least 16, found {n_ctx}")
    text_path = Path(text) if text else HELDOUT
    log_dir = Path(log_dir) / "03_quantize" if log_dir else None
    threads = ladder.threads
    text_sha = evidence.sha256_file(text_path)
    # Flash attention on, as in crosscheck_kld: attention numerics move a fragile file's KLD by ~10 %.
    common = ["-c", str(n_ctx), "-b", str(max(batch, n_ctx)), "-t", str(threads), "-fa", "on"] + \
        (["--chunks", str(chunks)] if chunks else [])
    # llama-perplexity's output is a pure function of the files, the text, these arguments and the build (the same
    # numbers to the last digit in runs at different machine loads), so it is computed once per key and reused; the
    # cross-check (crosscheck_kld) recomputes the first chunks independently in every run.
    key = hashlib.sha256(json.dumps([ladder.reference.sha256, text_sha, common]).encode()).hexdigest()[:12]
    cache = ladder.folder / f"kld-{text_sha[:12]}-c{n_ctx}-n{chunks or 'all'}-{key}"
    base_file = cache / "base-logprobs.bin"
    targets = [(f"shipped {ladder.reference.source_type}", ladder.reference.source, ladder.reference.source_sha256)] \
        if include_source else []
    targets += [(f.qtype, f.path, f.sha256) for f in ladder.files]
    if not base_file.exists():
        # The base file holds n_vocab 16-bit log-probabilities per scored token; English BPE text runs ≥ 2 bytes
        # per token, which bounds the token count from above.
        n_vocab = gguf_info(ladder.reference.path).n_vocab or 256_000
        est_chunks = chunks or max(1, text_path.stat().st_size // 2 // n_ctx)
        check_free_disk(ladder.folder, est_chunks * (n_ctx // 2) * (n_vocab + 4) * 2 + 16 * MIB,
                        "llama-perplexity's base log-probabilities")
    rows, raw = [], {}
    with _progress(len(targets) + 1, "llama-perplexity", "run", progress) as bar:
        bar.set_postfix_str("F16 base logits")
        text_out, base_made = _cached_tool(
            "llama-perplexity", ["-m", str(ladder.reference.path), "-f", str(text_path), *common,
                                 "--kl-divergence-base", PRODUCT],
            cache / "base.json", log_dir / "llama-perplexity-base.log" if log_dir else None, product=base_file)
        base = parse_base_output(text_out) | {"made": base_made}
        bar.update(1)
        for label, path, sha in targets:
            bar.set_postfix_str(label)
            safe = label.replace(" ", "_")
            out, made = _cached_tool(
                "llama-perplexity", ["-m", str(path), *common, "--kl-divergence-base", str(base_file), "--kl-divergence"],
                cache / f"{safe}-{sha[:16]}.json", log_dir / f"llama-perplexity-{safe}.log" if log_dir else None)
            stats = parse_kld_output(out)
            raw[label] = parse_kld_chunks(out)
            rows.append({"type": label, "file": str(path), **stats, "computed": _made_text(made), "made": made})
            bar.update(1)
    settings = {"n_ctx": n_ctx, "batch": max(batch, n_ctx), "threads": threads, "flash_attn": "on", "chunks": base["chunks"],
                "scored_tokens": base["chunks"] * (n_ctx - 1 - n_ctx // 2), "text": str(text_path),
                "text_sha256": text_sha, "cache": str(cache)}
    return Quality(rows, base, base_file, settings, raw)


def read_kld_base(path: str | Path) -> dict:
    """Header and tokens of a --kl-divergence-base file ("_logits_", n_ctx u32, n_vocab i32, n_chunk i32,
    then n_ctx × n_chunk int32 tokens; tools/perplexity/perplexity.cpp kl_divergence)."""
    import numpy as np

    with open(path, "rb") as fh:
        if fh.read(8) != b"_logits_":
            raise ToolError(f"{path}: not a llama-perplexity log-probability file")
        (n_ctx,) = struct.unpack("<I", fh.read(4))
        n_vocab, n_chunk = struct.unpack("<ii", fh.read(8))
        tokens = np.frombuffer(fh.read(4 * n_ctx * n_chunk), dtype=np.int32)
    return {"n_ctx": n_ctx, "n_vocab": n_vocab, "n_chunk": n_chunk, "tokens": tokens}


def kld_stats(base_logits, logits, targets) -> dict:
    """Mean KL(base ‖ q), top-1 agreement and perplexities from two [tokens, vocab] logit arrays (float64)."""
    import numpy as np

    def log_softmax(x):
        x = np.asarray(x, dtype=np.float64)
        x = x - x.max(axis=1, keepdims=True)
        return x - np.log(np.exp(x).sum(axis=1, keepdims=True))

    lb, lq = log_softmax(base_logits), log_softmax(logits)
    kld = (np.exp(lb) * (lb - lq)).sum(axis=1)
    idx = np.arange(len(targets))
    return {"kld": float(kld.mean()), "top1_pct": float(100 * (lb.argmax(1) == lq.argmax(1)).mean()),
            "ppl": float(np.exp(-lq[idx, targets].mean())), "ppl_base": float(np.exp(-lb[idx, targets].mean())),
            "tokens": int(len(targets))}


def crosscheck_kld(ladder: Ladder, quality: Quality, n_chunks: int = 2) -> list[dict]:
    """Recompute KLD, top-1 and PPL for the first `n_chunks` chunks with llama-cpp-python (full-vocabulary
    float64 softmax, no 16-bit storage) and compare with llama-perplexity's running values at that chunk.
    Same tokens (read from the base file), same context and flash attention on, as measure_quality. The bindings
    run in a child process (lab.model.xcheck_logits): if they crash, the row says how and the notebook goes on."""
    import numpy as np

    hdr = read_kld_base(quality.base_file)
    n_ctx, first = hdr["n_ctx"], hdr["n_ctx"] // 2
    n_chunks = min(n_chunks, hdr["n_chunk"])
    tokens = hdr["tokens"]
    workdir = Path(quality.base_file).parent / "xcheck"

    def logits_of(path: Path):
        return xcheck_logits.logits(path, tokens[:n_chunks * n_ctx], n_ctx, n_chunks, first, ladder.threads, workdir)

    targets = np.concatenate([tokens[c * n_ctx + first + 1:(c + 1) * n_ctx] for c in range(n_chunks)])
    paths_by_label = {r["type"]: Path(r["file"]) for r in quality.rows}
    try:
        base = logits_of(ladder.reference.path)
    except xcheck_logits.CrosscheckFailed as exc:
        return [{"type": label, "chunks": n_chunks, "agree": None, "error": f"F16 reference: {exc}"}
                for label in paths_by_label]
    rows = []
    for label, path in paths_by_label.items():
        try:
            mine = kld_stats(base, logits_of(path), targets)
        except xcheck_logits.CrosscheckFailed as exc:
            rows.append({"type": label, "chunks": n_chunks, "agree": None, "error": str(exc)})
            continue
        tool = next((r for r in quality.raw_chunks.get(label, []) if r["chunk"] == n_chunks), None)
        row = {"type": label, "chunks": n_chunks, "tokens": mine["tokens"], "lab_kld": mine["kld"],
               "tool_kld": tool and tool["kld"], "lab_top1_pct": mine["top1_pct"], "tool_top1_pct": tool and tool["top1_pct"],
               "lab_ppl": mine["ppl"], "tool_ppl": tool and tool["ppl"]}
        if tool:
            row["kld_diff"] = mine["kld"] - tool["kld"]
            row["top1_diff_pp"] = mine["top1_pct"] - tool["top1_pct"]
            row["ppl_diff_pct"] = 100 * (mine["ppl"] - tool["ppl"]) / tool["ppl"]
            row["agree"] = (abs(row["kld_diff"]) <= max(XCHECK_KLD_ABS, XCHECK_KLD_REL * tool["kld"])
                            and abs(row["top1_diff_pp"]) <= XCHECK_TOP1_PP
                            and abs(row["ppl_diff_pct"]) <= 100 * XCHECK_PPL_REL)
        else:
            row["agree"] = None
        rows.append(row)
    return rows


# ================================================================ speed: llama-bench
@dataclass
class Speed:
    rows: list[dict]
    raw: list[dict]
    settings: dict

    def table(self):
        import pandas as pd

        return pd.DataFrame(self.rows)


def measure_speed(ladder: Ladder, n_prompt: int = 64, n_gen: int = 32, reps: int = 3,
                  include_reference: bool = True, log_dir: str | Path | None = None, progress: bool = True) -> Speed:
    """Prompt processing (pp) and generation (tg) tokens/s of every file, from one `llama-bench -o json` run
    (after llama-bench's warm-up; `*_tok_s` is the median of the `reps` samples, `*_mean`/`*_sd` llama-bench's)."""
    files = ([("F16 (reference)", ladder.reference.path)] if include_reference else []) + \
            [(f.qtype, f.path) for f in ladder.files]
    load_before = os.getloadavg()[0]
    with _progress(1, f"llama-bench ({len(files)} files × pp{n_prompt}/tg{n_gen} × {reps})", "run", progress) as bar:
        result = llama_bench.run([p for _, p in files], threads=ladder.threads, n_prompt=n_prompt, n_gen=n_gen,
                                 reps=reps, flash_attn="on", timeout_s=600,
                                 log=Path(log_dir) / "03_quantize" / "llama-bench.log" if log_dir else None)
        bar.update(1)
    load_after = os.getloadavg()[0]
    raw = result["rows"]
    label = {str(p): lab for lab, p in files}
    by_name = {Path(p).name: lab for lab, p in files}
    rows: dict[str, dict] = {}
    for t in result["tests"]:
        lab = label.get(t["model_filename"], by_name.get(Path(str(t["model_filename"])).name, t["model_filename"]))
        row = rows.setdefault(lab, {"type": lab, "model_bytes": t["model_size"]})
        test = "pp" if t["n_prompt"] and not t["n_gen"] else "tg"
        row[f"{test}_tok_s"] = t["tok_s"]  # the median (lab.model.llama_bench says why)
        row[f"{test}_mean"] = t["tok_s_mean"]
        row[f"{test}_sd"] = t["tok_s_sd"]
        row[f"{test}_samples"] = t["samples_tok_s"] or [t["tok_s_mean"]]
    settings = {"n_prompt": n_prompt, "n_gen": n_gen, "reps": reps, "threads": ladder.threads, "flash_attn": "on",
                "cores": os.cpu_count(), "load_avg_before": load_before, "load_avg_after": load_after,
                "build": raw[0].get("build_commit") if raw else None, "cpu": raw[0].get("cpu_info") if raw else None}
    return Speed(list(rows.values()), raw, settings)


# ================================================================ the ladder, summarised
def summarise(ladder: Ladder, sizes: SizeCheck, quality: Quality, speed: Speed) -> list[dict]:
    """One row per type: size, quality against F16, speed — the ladder table and the chart's data."""
    q = {r["type"]: r for r in quality.rows}
    s = {r["type"]: r for r in speed.rows}
    z = {r["type"]: r for r in sizes.rows}
    ref_speed = s.get("F16 (reference)", {})
    rows = [{"type": "F16 (reference)", "file_mib": ladder.reference.bytes / MIB, "effective_bpw": 16.0,
             "kld": 0.0, "top1_pct": 100.0, "ppl": quality.base["ppl"], "ppl_ratio": 1.0,
             "pp_tok_s": ref_speed.get("pp_tok_s"), "tg_tok_s": ref_speed.get("tg_tok_s"), "tg_sd": ref_speed.get("tg_sd")}]
    for f in ladder.files:
        rows.append({"type": f.qtype, "file_mib": f.bytes / MIB, "effective_bpw": z[f.qtype]["effective_bpw"],
                     "kld": q[f.qtype]["kld"], "kld_unc": q[f.qtype]["kld_unc"], "top1_pct": q[f.qtype]["top1_pct"],
                     "ppl": q[f.qtype]["ppl"], "ppl_ratio": q[f.qtype]["ppl_ratio"],
                     "pp_tok_s": s.get(f.qtype, {}).get("pp_tok_s"), "tg_tok_s": s.get(f.qtype, {}).get("tg_tok_s"),
                     "tg_sd": s.get(f.qtype, {}).get("tg_sd")})
    for label, r in q.items():
        if label.startswith("shipped"):
            rows.append({"type": label, "file_mib": ladder.reference.source.stat().st_size / MIB,
                         "effective_bpw": None, "kld": r["kld"], "kld_unc": r["kld_unc"], "top1_pct": r["top1_pct"],
                         "ppl": r["ppl"], "ppl_ratio": r["ppl_ratio"], "pp_tok_s": None, "tg_tok_s": None, "tg_sd": None})
    return rows


def published_quality() -> dict:
    """llama.cpp's own perplexity increase per type on Llama-3-8B (quant_types.yaml `published_quality`)."""
    return facts.load(DATA, "published_quality")["published_quality"][0]


# The recommendation rule, stated once: the smallest llama.cpp type whose published perplexity increase
# on Llama-3-8B is at most PPL_DELTA_MAX, among those whose weights leave at least KV_SHARE_MIN of the
# card for the KV cache and buffers (notebook 05 sizes those).
PPL_DELTA_MAX = 0.2
KV_SHARE_MIN = 1 / 3
SEED_VRAM_MIB = 32768  # the seeds' card, a V100 32GB, for profiles without a GPU


def recommend(rows: list[dict], targets: list[dict], profile, kld_good: float = 0.05) -> dict:
    """What the ladder supports: a measured part (this model) and a target part (the 27B class on the
    profile's card, or on the seeds' V100 32GB when the profile has none), by the rule above."""
    ladder = sorted((r for r in rows if not r["type"].startswith(("F16", "shipped"))), key=lambda r: r["file_mib"])
    by = {r["type"]: r for r in ladder}
    lines = []
    good = [r for r in ladder if r["kld"] <= kld_good]
    if good:
        g = good[0]
        lines.append(f"Measured here, the smallest file within mean KLD ≤ {kld_good} of the reference is {g['type']} "
                     f"({g['file_mib']:.1f} MiB, KLD {g['kld']:.4f}, top-1 {g['top1_pct']:.1f} %).")
    if "Q4_K_M" in by and "Q4_0" in by:
        a, b = by["Q4_K_M"], by["Q4_0"]
        lines.append(f"At 4 bits the K-quant mix wins: Q4_K_M has KLD {a['kld']:.3f} (top-1 {a['top1_pct']:.0f} %) "
                     f"against Q4_0's {b['kld']:.3f} ({b['top1_pct']:.0f} %) for {100 * (a['file_mib'] / b['file_mib'] - 1):.0f} % "
                     "more bytes.")
    odd = quality_monotone(rows)
    if odd:
        lines.append("Not monotone here: " + "; ".join(odd) + " — quality follows the tensor types each file really "
                     "got (the size breakdown), not the name on the file.")
    vram_mib = profile.gpu_vram_mib or SEED_VRAM_MIB
    where = (f"{profile.gpu_vram_mib / 1024:g} GiB card" if profile.gpu_vram_mib
             else "V100 32GB (the seeds' card; this profile has no GPU)")
    own = profile.model_architecture.split(":", 1)[1] if profile.model_architecture.startswith("config:") else None
    mids = [own] if own else sorted({r["model_id"] for r in targets if 26e9 <= r["params"] <= 28e9})
    deltas = published_quality()["deltas"]
    table, picks = [], {}
    for mid in mids:
        for r in targets:
            if r["model_id"] != mid or r["type"] not in deltas:
                continue
            left = vram_mib * MIB - r["predicted_bytes"]
            ok = left >= KV_SHARE_MIN * vram_mib * MIB and deltas[r["type"]] <= PPL_DELTA_MAX
            table.append({"model": r["model"], "type": r["type"], "weights_gb": round(r["predicted_gb"], 2),
                          "left_for_kv_gib": round(left / GIB, 2), "llama.cpp Δppl @ Llama-3-8B": deltas[r["type"]],
                          "KLD on the embedded model (this run)": by.get(r["type"], {}).get("kld"), "meets_rule": ok})
            if ok and (mid not in picks or r["predicted_bytes"] < picks[mid]["predicted_bytes"]):
                picks[mid] = r
    for mid, r in picks.items():
        lines.append(f"For {r['model']} on a {where}: **{r['type']}** — {r['predicted_gb']:.1f} GB of weights, "
                     f"{(vram_mib * MIB - r['predicted_bytes']) / GIB:.1f} GiB left for KV cache and buffers, "
                     f"+{deltas[r['type']]} PPL on Llama-3-8B by llama.cpp's own table.")
    rule = (f"rule: the smallest type with llama.cpp's published Δppl ≤ {PPL_DELTA_MAX} that leaves ≥ "
            f"{KV_SHARE_MIN:.0%} of the card for the KV cache")
    pick = next(iter(picks.values()), None)
    return {"type": pick["type"] if pick else None, "text": " ".join(lines), "rule": rule, "table": table,
            "source": published_quality()["source"]}


def quality_monotone(rows: list[dict]) -> list[str]:
    """Pairs where a smaller file has *lower* KLD than a larger one (worth a sentence when they occur)."""
    ladder = sorted((r for r in rows if not r["type"].startswith(("F16", "shipped"))), key=lambda r: -r["file_mib"])
    return [f"{b['type']} ({b['file_mib']:.1f} MiB) has lower KLD than {a['type']} ({a['file_mib']:.1f} MiB)"
            for a, b in zip(ladder, ladder[1:]) if b["kld"] < a["kld"]]


def make_checks(reference: Reference, ladder: Ladder, sizes: SizeCheck, quality: Quality, xcheck: list[dict],
                speed: Speed, published: list[dict]) -> list[lab_checks.Check]:
    """The notebook's verdicts, one Check each."""
    C = lab_checks.Check
    out = [C("F16 reference keeps every metadata key", "pass" if reference.keys_kept else "fail",
             f"{len(set(reference.keys_source) & set(reference.keys_reference))}/{len(reference.keys_source)} keys",
             "all keys of the shipped file", "write_f16_reference copies every field", "lab.model.quantize.write_f16_reference")]
    order = [f.bytes for f in ladder.files]
    out.append(C("ladder files get smaller down the ladder", "pass" if order == sorted(order, reverse=True) else "warn",
                 ", ".join(f"{f.qtype} {f.bytes / MIB:.1f} MiB" for f in ladder.files), "strictly decreasing sizes",
                 "a row-length fallback can make a 4-bit mix larger than expected; see the size table", ""))
    bad = {q: len(v) for q, v in sizes.mismatches.items() if v}
    out.append(C("llama.cpp's per-tensor types reproduced", "pass" if not bad else "fail",
                 bad or "every tensor of every file", "the type llama-quantize chose for each tensor",
                 "update lab.model.quantize.choose_tensor_types to the vendored src/llama-quant.cpp",
                 "src/llama-quant.cpp llama_tensor_get_type_impl, tensor_type_fallback"))
    exact = all(r["predicted_equals_file"] for r in sizes.rows)
    out.append(C("predicted tensor bytes equal the files'", "pass" if exact else "fail",
                 {r["type"]: r["tensor_bytes"] - r["predicted_bytes"] for r in sizes.rows}, "0 bytes difference",
                 "", "ggml/src/ggml-common.h block sizes"))
    worst_pub = max(published, key=lambda r: abs(r["diff_pct"])) if published else None
    if worst_pub:
        out.append(C("size model vs published file sizes", "pass" if abs(worst_pub["diff_pct"]) <= 1.0 else "warn",
                     f"worst {worst_pub['check']} {worst_pub['type']}: {worst_pub['diff_pct']:+.2f} %", "within 1 %",
                     "published figures include metadata and may come from older mixes", worst_pub["source"]))
    agree = [r for r in xcheck if r.get("agree") is not None]
    failed = [r for r in xcheck if r.get("error")]
    out.append(C("KLD cross-check (llama-cpp-python vs llama-perplexity)",
                 "warn" if failed else ("pass" if agree and all(r["agree"] for r in agree) else ("skip" if not agree else "warn")),
                 {r["type"]: f"KLD {r['lab_kld']:.4f} vs {r['tool_kld']:.4f}" for r in agree}
                 | {r["type"]: r["error"] for r in failed},
                 f"KLD within {100 * XCHECK_KLD_REL:g} % (or {XCHECK_KLD_ABS}), top-1 within {XCHECK_TOP1_PP:g} pp, "
                 f"PPL within {100 * XCHECK_PPL_REL:g} %",
                 ("llama-cpp-python failed in its own process (see observed): the ladder's KLD comes from "
                  "llama-perplexity alone; the crash is the bindings', not the quantized files'") if failed else "",
                 "tools/perplexity/perplexity.cpp kl_divergence"))
    shipped = next((r for r in quality.rows if r["type"].startswith("shipped")), None)
    if shipped:
        out.append(C("shipped file ≈ its F16 reference", "pass" if shipped["kld"] < SHIPPED_KLD_MAX else "warn",
                     f"KLD {shipped['kld']:.4f}, top-1 {shipped['top1_pct']:.2f} %", f"KLD < {SHIPPED_KLD_MAX}",
                     "same weights; the residual is the CPU kernels' 8-bit activations (a Q4_1 × Q8_1 dot product) "
                     "against the F16 path's 16-bit ones",
                     "ggml/src/ggml-cpu/ggml-cpu.c type_traits_cpu[GGML_TYPE_Q4_1].vec_dot_type = GGML_TYPE_Q8_1"))
    load = speed.settings["load_avg_before"]
    cores = speed.settings["cores"] or 1
    out.append(C("speed measured on a quiet machine", "pass" if load <= cores else "warn",
                 f"load average {load:.1f} on {cores} cores", f"≤ {cores}",
                 "other processes shared the CPU: treat tok/s as rough and compare types within this run only", ""))
    return out


__all__ = [
    "DEFAULT_LADDER", "TARGET_TYPES", "QuantError", "DiskSpaceError", "ToolError", "TensorType", "TensorSpec",
    "TensorChoice", "SizePrediction", "Reference", "QuantFile", "Ladder", "SizeCheck", "Quality", "Speed",
    "tensor_types", "file_types", "tensor_type", "base_type", "bits_per_weight", "tensor_nbytes", "naive_weight_bytes",
    "GGUFInfo", "gguf_info", "llama_cpp_order", "published_quality", "choose_tensor_types", "predict_size", "int4_group_bytes", "gguf_tensor_specs", "arch_tensor_specs",
    "target_model_ids", "target_sizes", "exact_gguf_bytes", "published_size_checks", "vllm_quant_plan",
    "ladder_source", "cache_dir", "free_bytes", "check_free_disk", "write_f16_reference", "f16_reference",
    "build_ladder", "size_check", "explain_size", "parse_kld_output", "parse_kld_chunks", "parse_base_output",
    "heldout_text", "measure_quality", "read_kld_base", "kld_stats", "crosscheck_kld",
    "measure_speed", "summarise", "recommend", "quality_monotone", "make_checks",
]
