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
    if profile.engine == "vllm" and roofline.runs_on_gpu(profile) and result["bytes_per_token"]:
        result.update(_vllm_prediction(profile, ctx, kv_dtype if arch is not None else "auto", result))
    # `weights_bytes`: the weights as every view shows them; the ceiling used `weights_read_bytes` (read_per_token)
    result.update(weights_bytes=weights, weights_how=how, weights_read_bytes=read,
                  weights_read_how=read_how if read is not None else None,
                  model=arch.name if arch else profile.model_name, notes=notes)
    return result


def _vllm_prediction(profile, depth: int, kv_dtype: str, result: dict) -> dict:
    """A vLLM GPU profile's one-stream prediction by the lab's vLLM model (lab.predict.vllm_speed, as `lab predict
    --engine vllm` and `lab plan`'s fork routes); the nearest calibration entry's efficiency stays in the record as
    efficiency_predicted_tok_s, not as a second prediction."""
    from lab.predict import links, vllm_speed

    spec = roofline.gpu_spec_for(profile.gpu_name_pattern or profile.name)
    if spec is None:
        return {}
    tp = profile.tensor_parallel_size
    link = links.default_link(spec["id"], tp, profile) if tp > 1 else None
    x = vllm_speed.setup_speed(spec["id"], tp, profile.model_quant, depth, kv_dtype, link)
    return {"efficiency_predicted_tok_s": result["predicted_decode_tok_s"], "predicted_decode_tok_s": x["tok_s"],
            "prediction_basis": f"vLLM model (lab.predict.vllm_speed): {x['how']}", "vllm_how": x["how"]}


WELL_UNDER = 0.10  # a measurement more than 10 % under the expectation is said to be so (the answer box)


def expectation(profile, records: dict | None = None) -> dict:
    """One stream on the profile's card as every view of a run shows it: the ceiling and the expected speed from
    `roofline_for` with the run's own measured bandwidth when notebook 01 ran (the figures notebook 06's record
    carries, read from it when it ran: one ceiling per card, not the datasheet's beside the measured copy's), else the
    datasheet's; the served single-stream measurement when notebook 06 measured one, and how far under the
    expectation it came. {ceiling_tok_s, expected_tok_s, bandwidth_source, measured_tok_s, shortfall, well_under,
    sentence}."""
    records = records or {}
    bench = (records.get("06_benchmark") or {}).get("summary") or {}
    if bench.get("decode_ceiling_tok_s") is not None:
        ceiling, expected = bench["decode_ceiling_tok_s"], bench.get("predicted_decode_tok_s")
        source = "notebook 06's roofline (the run's measured bandwidth when notebook 01 ran)"
    else:
        rl = roofline_for(profile, records.get("01_hardware"))
        ceiling, expected, source = rl["decode_ceiling_tok_s"], rl["predicted_decode_tok_s"], rl["bandwidth_source"]
    measured = bench.get("served_single_stream_decode_tok_s")
    short = measured / expected - 1 if measured and expected else None
    well_under = short is not None and short < -WELL_UNDER
    sentence = None
    if short is not None:
        sentence = (f"measured {measured:.1f} tok/s, {abs(short):.0%} {'under' if short < 0 else 'over'} the expected "
                    f"{expected:.0f} tok/s" + (" - well under: the prediction does not hold on this card and build"
                                               if well_under else ""))
    return {"ceiling_tok_s": ceiling, "expected_tok_s": expected, "bandwidth_source": source,
            "measured_tok_s": measured, "shortfall": short, "well_under": well_under, "sentence": sentence}
