"""A profile's own decode ceiling and calibrated prediction, with the inputs resolved from what is on disk
(lab.predict.roofline.profile_ceiling does the arithmetic).

Bandwidth comes from notebook 01's record or the datasheet; weight bytes READ per token from
lab.model.weights.profile_read_bytes (the memory plan's loaded weights less the token embedding:
lab/data/calibration.yaml `read_per_token`); KV bytes from lab.predict.kvcache.
"""
from __future__ import annotations

from lab.model import models, weights as weights_mod
from lab.predict import kvcache, roofline
from lab.predict.memory_plan import VLLM_AUTO_KV


def roofline_for(profile, hardware_record: dict | None = None, context_tokens: int | None = None,
                 levels: list[int] | None = None) -> dict:
    """The profile's decode ceiling and calibrated prediction (lab.predict.roofline.profile_ceiling) with its
    inputs resolved here: bandwidth from notebook 01's record or the datasheet; weight bytes read per token from
    lab.model.weights.profile_read_bytes (calibration.yaml read_per_token); KV bytes from lab.predict.kvcache at
    `context_tokens` (default: the benchmark's prompt + half its output, the average depth while it
    decodes). Reads the GGUF header for gguf: profiles; never starts anything."""
    ctx = context_tokens or profile.bench_prompt_tokens + profile.bench_output_tokens // 2
    notes, weights, how, kv, arch = [], None, None, None, None
    try:
        arch = models.arch_for(profile)
    except Exception as exc:  # the GGUF is not there yet (set-up not run, or a bring-your-own model)
        notes.append(f"model architecture unknown: {exc}")
    read = None
    try:  # the one weight size every view shows (lab.model.weights.profile_weights), and what one token reads of it
        b, how = weights_mod.profile_weights(profile, arch)
        weights = float(b)
        r, read_how = weights_mod.profile_read_bytes(profile, arch)
        read = float(r)
    except (ValueError, KeyError) as exc:
        notes.append(f"weight bytes unknown: {exc}")
    tp = profile.tensor_parallel_size if profile.engine == "vllm" else 1
    if read is not None and tp > 1:
        read_how += (f"; all {tp} GPUs' weights, read in parallel: each GPU reads 1/{tp} of them "
                     f"({read / tp / 1e9:.2f} GB) and the bandwidth is {tp} GPUs' (perfect tensor parallelism)")
    if arch is not None:
        kv_dtype = profile.kv_cache_dtype
        if profile.engine == "vllm" and kv_dtype == "auto":  # vLLM's "auto" is the model's dtype
            kv_dtype = VLLM_AUTO_KV.get(profile.dtype, "auto")
        kv = float(kvcache.kv_cache_breakdown(arch, ctx, 1, kv_dtype, profile.tensor_parallel_size)["total_bytes"])
    result = roofline.profile_ceiling(profile, bandwidth=roofline.bandwidth_for(profile, hardware_record),
                                      weights_bytes=read, kv_bytes_per_seq=kv, context_tokens=ctx, levels=levels)
    # `weights_bytes`: the weights as every view shows them; the ceiling used `weights_read_bytes` (read_per_token)
    result.update(weights_bytes=weights, weights_how=how, weights_read_bytes=read,
                  weights_read_how=read_how if read is not None else None,
                  model=arch.name if arch else profile.model_name, notes=notes)
    return result
