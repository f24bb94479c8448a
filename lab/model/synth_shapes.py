"""The shapes and tensor lists of a synthetic GGUF (lab.model.synth): what a real architecture becomes as
llama.cpp's `llama` architecture, or `qwen35` for the Gated DeltaNet hybrid, and every tensor its loader asks
for (names, ggml dimensions, quant block layout). Pure: nothing is read or written here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from lab.model.models import ArchSpec

HYBRID_FAMILIES = ("qwen3_5_text", "qwen3_5", "qwen35")  # what the qwen35 writer accepts (dense, not MoE)


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
    mtp: bool = False  # part of an MTP block: llama.cpp skips it unless --spec-type draft-mtp (see mtp_block)

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


def full_attention_interval(arch: ArchSpec) -> int:
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
    interval = full_attention_interval(arch)
    if layers is not None:
        arch = replace(arch, n_layers=layers, linear_layers=tuple(i for i in arch.linear_layers if i < layers))
        if not arch.global_layers:
            raise SynthError(f"--layers {layers} keeps no full-attention layer (every {interval}-th layer is one): "
                             f"use a multiple of {interval}, e.g. --layers {interval} or {2 * interval}")
    return arch


def _mtp_shape(arch: ArchSpec, mtp: int | None) -> ArchSpec:
    """arch with the MTP blocks the file gets: `mtp` if given, else the real model's (arch.mtp_layers, from
    the config's mtp_num_hidden_layers). Only the qwen35 writer has them; llama.cpp's qwen35 MTP graph runs
    exactly one (src/models/qwen35.cpp graph_mtp: GGML_ASSERT n_layer_nextn == 1)."""
    n = arch.mtp_layers if mtp is None else mtp
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise SynthError(f"mtp must be 0 or 1 (MTP blocks to write), got {n!r}")
    if n and not arch.linear_layers:
        if mtp is None:  # a llama-architecture file has no place for the real model's MTP block: leave it out
            return replace(arch, mtp_layers=0)
        raise SynthError(f"{arch.name}: --mtp {n}: only the qwen35 (Gated DeltaNet hybrid) writer has MTP blocks")
    if n > 1:
        raise SynthError(f"--mtp {n}: llama.cpp's qwen35 MTP graph runs a single MTP block (src/models/qwen35.cpp "
                         "graph_mtp); use --mtp 1, or --mtp 0 for none")
    return replace(arch, mtp_layers=n)


def llama_shape(arch: ArchSpec, layers: int | None = None, mtp: int | None = None) -> ArchSpec:
    """The ArchSpec that the written file has (llama, or qwen35 for the hybrid, with `mtp` MTP blocks: the
    real model's by default); refuses what neither architecture can express."""
    if arch.n_experts:
        raise SynthError(f"{arch.name}: mixture-of-experts ({arch.n_experts} experts) is not supported by lab.model.synth")
    if arch.head_dim_k != arch.head_dim_v:
        raise SynthError(f"{arch.name}: head_dim_k {arch.head_dim_k} != head_dim_v {arch.head_dim_v}; "
                         "llama.cpp's llama and qwen35 graphs need them equal")
    if arch.n_heads % arch.n_kv_heads:
        raise SynthError(f"{arch.name}: {arch.n_heads} query heads are not a multiple of {arch.n_kv_heads} KV heads")
    if layers is not None and layers <= 0:
        raise SynthError(f"layers must be positive, got {layers}")
    arch = _mtp_shape(arch, mtp)
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


def tensor_plan(arch: ArchSpec, quant: str = "Q4_K", layers: int | None = None,
                mtp: int | None = None) -> list[TensorPlan]:
    """Every tensor llama.cpp loads for the file's architecture (src/models/llama.cpp, or
    src/models/qwen35.cpp for the hybrid, with its MTP block when the shape has one), in ggml dimensions."""
    if quant not in QUANTS:
        raise SynthError(f"quant {quant!r} not supported; choose one of {', '.join(QUANTS)}")
    arch = llama_shape(arch, layers, mtp)
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
    """llama.cpp src/models/qwen35.cpp load_arch_tensors in its order: the trunk, then arch.mtp_layers MTP blocks.

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
    for il in range(arch.n_layers, arch.n_layers + arch.mtp_layers):
        plan += mtp_block(arch, q, il)
    return plan


def mtp_block(arch: ArchSpec, q: QuantLayout, il: int) -> list[TensorPlan]:
    """One multi-token-prediction block, blk.<il> after the trunk, as llama.cpp's qwen35 loader asks for it
    (src/models/qwen35.cpp load_block_mtp, names src/llama-arch.cpp LLM_TENSOR_NEXTN_*): a full-attention
    decoder layer of the trunk's shape (norms, gated attn_q, attn_k/v/output, q/k norms, gated FFN), then
    nextn.eh_proj {2 n_embd, n_embd} (projects [enorm(embedding); hnorm(hidden)]), nextn.enorm, nextn.hnorm
    and nextn.shared_head_norm {n_embd}. conversion/qwen.py _QwenMtpMixin maps the checkpoint's mtp.fc,
    mtp.pre_fc_norm_embedding, mtp.pre_fc_norm_hidden, mtp.norm and mtp.layers.0.* to exactly these; the
    optional nextn.embed_tokens and nextn.shared_head_head are absent there (Qwen's MTP shares the token
    embedding and the LM head: graph_mtp falls back to token_embd and output), so they are here."""
    e, ff = arch.hidden_size, arch.ffn_size
    hd, nh, nkv = arch.head_dim_k, arch.n_heads, arch.n_kv_heads
    b = f"blk.{il}."
    block = [TensorPlan(b + "attn_norm.weight", (e,), F32),
             TensorPlan(b + "post_attention_norm.weight", (e,), F32),
             TensorPlan(b + "attn_q.weight", (e, nh * hd * 2), q),
             TensorPlan(b + "attn_k.weight", (e, nkv * hd), q),
             TensorPlan(b + "attn_v.weight", (e, nkv * hd), q),
             TensorPlan(b + "attn_output.weight", (nh * hd, e), q),
             TensorPlan(b + "attn_q_norm.weight", (hd,), F32),
             TensorPlan(b + "attn_k_norm.weight", (hd,), F32),
             TensorPlan(b + "ffn_gate.weight", (e, ff), q),
             TensorPlan(b + "ffn_down.weight", (ff, e), q),
             TensorPlan(b + "ffn_up.weight", (e, ff), q),
             TensorPlan(b + "nextn.eh_proj.weight", (2 * e, e), q),
             TensorPlan(b + "nextn.enorm.weight", (e,), F32),
             TensorPlan(b + "nextn.hnorm.weight", (e,), F32),
             TensorPlan(b + "nextn.shared_head_norm.weight", (e,), F32)]
    return [replace(t, mtp=True) for t in block]


