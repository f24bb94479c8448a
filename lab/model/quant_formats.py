"""Quant formats: what each llama.cpp quant type costs in bytes, tensor by tensor.

The ggml type table of lab/data/quant_types.yaml (block weights and bytes, hence bits per weight), the exact
bytes of one tensor, llama-quantize's per-tensor type choice (`choose_tensor_types`, reproducing
src/llama-quant.cpp; notebook 03 checks it against the real files tensor by tensor), the size it sums to
(`predict_size`), AWQ/GPTQ-style 4-bit group sizes, and the tensor lists all this runs over: a GGUF's header
(`gguf_info`, no tensor data read) or a llama.cpp conversion of a shipped stand-in (`arch_tensor_specs`).
Pure but for reading GGUF headers: the tests exercise it exactly. lab.model.quant_targets applies it to the
27B-class models, lab.model.quant_ladder to the files notebook 03 makes.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from lab.core import facts
from lab.model import gguf_file, models
from lab.core.units import GB, GIB, MIB

DATA = "quant_types"  # lab/data/quant_types.yaml


class QuantError(ValueError):
    """Bad input to the quantization arithmetic (unknown type, impossible shape); says what is allowed."""


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


def gguf_n_gqa(path: str | Path) -> int:
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


def mtp_tensor_specs(model_id: str) -> list[TensorSpec]:
    """The multi-token-prediction blocks a llama.cpp conversion of `model_id` appends after the trunk (blk.<n_layers>.*,
    conversion/qwen.py _QwenMtpMixin; the published Qwen3.8-27B GGUFs carry one: block_count 65), in the shapes
    llama.cpp's loader asks for (lab.model.synth_shapes, the one description of the block). Empty for a model
    without MTP layers. llama.cpp skips these tensors unless --spec-type draft-mtp (TENSOR_SKIP), so they are in
    the download and on disk but not in VRAM for plain decoding."""
    from lab.model import synth_shapes

    arch = models.stand_in(model_id)
    f16 = synth_shapes.QuantLayout("F16", 1, 1, 2)
    out = []
    for il in range(arch.n_layers, arch.n_layers + arch.mtp_layers):
        out += [TensorSpec(t.name, tuple(t.ne), "F32" if len(t.ne) == 1 else "F16")
                for t in synth_shapes.mtp_block(arch, f16, il)]
    return out


def arch_tensor_specs(model_id: str, mtp: bool = False) -> list[TensorSpec]:
    """The tensors a llama.cpp conversion of stand-in `model_id` holds, in GGUF names and file order.

    Built from the shipped config (lab.model.models): token embedding, per-layer attention (or Gated-DeltaNet
    for Qwen3.5's linear layers), norms and gated MLP, output head when untied. 2-D weights are listed as
    F16 (a converted file's type), 1-D ones as F32. Qwen3.5's multi-token-prediction block, which the published
    files carry but llama.cpp loads only for --spec-type draft-mtp, is appended when `mtp` (`mtp_tensor_specs`);
    lab.model.models' parameter count is the trunk's."""
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
    return specs + (mtp_tensor_specs(model_id) if mtp else [])
