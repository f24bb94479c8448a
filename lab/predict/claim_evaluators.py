"""How each kind of seed claim is tested: (claim, measured) -> (verdict, why, numbers), one evaluator per test
kind of lab/data/seed_claims.yaml.

A claim about "27B" is judged on the seeds' own model, Qwen3.8-27B (its published config in
lab/data/model_configs.yaml), with other real models shown beside it for comparison only
(`numbers["models"]`). Speed claims are checked against the roofline (lab.predict.roofline) with the lab's one
definition of bytes read per token (lab/data/calibration.yaml `read_per_token`, the ceiling `lab plan` shows), the
generous assumption of perfect multi-GPU scaling, and decode without speculation (every weight read once per token). A single-stream claim above that ceiling is then held against
multi-token prediction (MTP) bounded by its step cost (lab.predict.mtp_model, the lab's one MTP model: a step of n
drafts costs 1 + n × (head pass + the card architecture's verify ms, fitted on the public draft-mtp rows) plain
tokens at the card's predicted plain speed, so at most (n + 1) ÷ that with every draft accepted): beyond that
bound it is impossible by physics; within it but needing an acceptance above what the public rows publish for the
card, contradicted by facts; otherwise not testable here. Below the ceiling, a measurement of the lab's own from the
claim's hardware decides, else the published rows the claim names (lab.predict.claim_published). Sizes come from
lab.model.weights, KV from lab.predict.kvcache, drivers and formats from lab.predict.compat.
"""
from __future__ import annotations

import re
from typing import Any

from lab.model import models, weights
from lab.predict import claim_published, compat, kvcache, memory_plan, roofline, speculative_speed
from lab.predict.claims_ledger import ledger, model_class
from lab.core.units import GIB

MEASURE_TOLERANCE = 0.15  # a measured speed within 15 % of the claim agrees with it (run-to-run and build spread)
SIZE_TOLERANCE = 0.10     # "about 15 GB" agrees with 13.5–16.5 GB
SPECULATIVE_DRAFTS = (1, 2, 3, 4)  # draft tokens per step for which the acceptance rate a claim needs is shown


def _range(value) -> tuple[float, float]:
    vals = value if isinstance(value, list) else [value]
    return float(min(vals)), float(max(vals))


def _overlaps(claim: tuple[float, float], lo: float, hi: float, tol: float) -> bool:
    return claim[0] * (1 - tol) <= hi and claim[1] * (1 + tol) >= lo


def _either_unit(claim: tuple[float, float], n_bytes: float, tol: float = SIZE_TOLERANCE) -> bool:
    """Does `n_bytes` agree with a claim in "GB" read either as 1e9 or as 2^30 bytes?"""
    return _overlaps(claim, n_bytes / 1e9, n_bytes / 1e9, tol) or _overlaps(claim, n_bytes / GIB, n_bytes / GIB, tol)


def _arch(model_id: str):
    return models.stand_in(model_id)


def _target(model_cls: str) -> tuple[str, Any]:
    mid = model_class(model_cls)["model"]
    return mid, _arch(mid)


def _comparisons(model_cls: str) -> dict:
    return {mid: _arch(mid) for mid in model_class(model_cls).get("comparisons", [])}


def _weights(quant: str, model_id: str, arch) -> tuple[float, str]:
    """(bytes, basis) of the weights at `quant` (lab.model.weights.weights_bytes: exact GGUF mix for a modelled
    config, else parameters × bits per weight)."""
    b, basis = weights.weights_bytes(quant, arch=arch, model_id=model_id)
    return float(b), basis


def _read_weights(quant: str, model_id: str, arch) -> tuple[float, str]:
    """(bytes, basis) of the weights one decoded token reads at `quant` (lab.model.weights.decode_read_bytes: the
    one definition, lab/data/calibration.yaml `read_per_token`, that `lab plan`'s ceiling uses too)."""
    b, basis = weights.decode_read_bytes(quant, arch, model_id)
    return float(b), basis


def _kv(arch, tokens: int, kv_dtype: str = "f16") -> int:
    """KV cache + recurrent state of one sequence of `tokens` (lab.predict.kvcache)."""
    return kvcache.kv_cache_bytes(arch, tokens, 1, kv_dtype) if tokens > 0 else 0


def _kv_parts(arch, tokens: int, kv_dtype: str) -> str:
    b = kvcache.kv_cache_breakdown(arch, tokens, 1, kv_dtype)
    per_tok = kvcache.kv_bytes_per_token(arch, kv_dtype, "global")
    text = (f"{len(arch.global_layers)} KV layers × {per_tok / 1024 / max(1, len(arch.global_layers)):g} KiB × {tokens} tokens"
            f" = {b['global_bytes'] / GIB:.2f} GiB")
    if b["local_bytes"]:
        text += f" + {len(arch.local_layers)} sliding-window layers {b['local_bytes'] / GIB:.2f} GiB"
    if b["linear_state_bytes"]:
        text += f" + {len(arch.linear_layers)} Gated DeltaNet layers' fixed state {b['linear_state_bytes'] / (1 << 20):.0f} MiB"
    return text


def _row(model_id: str, role: str, value: float, unit: str, agrees: bool, arithmetic: str) -> dict:
    return {"model": model_id, "role": role, "value": round(value, 3), "unit": unit, "agrees": agrees,
            "arithmetic": arithmetic}


# ---------------------------------------------------------------- speculative decoding
def acceptance_needed(tokens_per_pass: float, drafts: int) -> float | None:
    """The per-token acceptance rate `a` with which `drafts` draft tokens per step yield `tokens_per_pass`
    tokens per step on average (lab.predict.speculative_speed.acceptance_for: 1 + a + … + a^k)."""
    return speculative_speed.acceptance_for(tokens_per_pass, drafts)


def _speculation(claimed: float, ceiling: float, gpu_id: str, split: str, plain_tok_s: float | None = None) -> dict:
    """What MTP would need to reach `claimed` from the no-speculation `ceiling`, bounded by the step cost
    (lab.predict.mtp_model.step_over_plain at one card's predicted plain speed `plain_tok_s`, the ceiling when
    there is none: a step of n drafts costs that many plain tokens and yields 1 + rate × n tokens): per n-max 1-4 the acceptance rate needed, the most any rate gives ((n + 1) ÷ step), and
    the rate the public rows publish for the card (mtp_model.acceptance_for)."""
    from lab.predict import mtp_model

    need = claimed / ceiling
    by_n = {}
    arch = roofline.gpu_spec(gpu_id)["arch"]
    for n in SPECULATIVE_DRAFTS:
        step, _ = mtp_model.step_over_plain(n, plain_tok_s or ceiling, arch)
        rate = max(0.0, (need * step - 1) / n)
        published, rows = mtp_model.acceptance_for(gpu_id, n, split)
        by_n[n] = {"step_over_plain": step, "max_speedup": (n + 1) / step, "rate_needed": rate if rate <= 1 else None,
                   "published_rate": published, "published_rows": rows}
    reach = [n for n, x in by_n.items() if x["rate_needed"] is not None and x["published_rate"] is not None
             and x["published_rate"] >= x["rate_needed"]]
    return {"speedup_needed": need, "by_n": by_n, "max_speedup": max(x["max_speedup"] for x in by_n.values()),
            "reachable_at": reach}


def _speculation_text(spec: dict) -> str:
    parts = [f"n-max {n}: " + ("impossible" if x["rate_needed"] is None else f"rate ≥ {x['rate_needed']:.2f}")
             + ("" if x["published_rate"] is None else f" (published {x['published_rate']:.2f})")
             for n, x in spec["by_n"].items()]
    steps = "/".join(f"{x['step_over_plain']:.2f}" for x in spec["by_n"].values())
    return (f"without speculation every token reads every weight once; with MTP a step of n drafts costs "
            f"{steps} plain tokens (n = 1-4, lab.predict.mtp_model "
            f"at one card's predicted plain speed) and yields 1 + rate x n, at most {spec['max_speedup']:.2f}x plain; "
            f"{spec['speedup_needed']:.2f}x needs {'; '.join(parts)}")


# ---------------------------------------------------------------- measurement matching
def _matches(cond: dict, measured: dict | None) -> bool:
    """Does our measurement come from the claim's hardware and engine (and context, when it names one)?"""
    if not measured:
        return False
    hw = measured.get("hardware") or {}
    gpu_token = re.sub(r"[^a-z0-9]", "", str(cond.get("gpu", "")).split("-")[0].lower())
    name = re.sub(r"[^a-z0-9]", "", str(hw.get("gpu_name") or "").lower())
    if not gpu_token or gpu_token not in name or hw.get("gpu_count") != cond.get("gpus", 1):
        return False
    if cond.get("engine") and measured.get("engine") != cond["engine"]:
        return False
    ctx = cond.get("context_tokens")
    return not ctx or abs((measured.get("context_tokens") or 0) - ctx) <= 0.25 * ctx


def _measured_value(claim: dict, measured: dict) -> float | None:
    if claim["kind"] == "speed_single_stream":
        return measured.get("stream_decode_tok_s")
    conc = claim["condition"].get("concurrency")
    agg = measured.get("output_throughput") or {}
    return agg.get(conc, agg.get(str(conc)))


def _against_measurement(claim: dict, got: float) -> tuple[str, str]:
    lo, hi = _range(claim["value"])
    low_ok = got >= lo * (1 - MEASURE_TOLERANCE)
    high_ok = claim.get("at_least") or got <= hi * (1 + MEASURE_TOLERANCE)
    if low_ok and high_ok:
        return "consistent", f"measured {got:.1f} tok/s on this hardware and engine"
    return "contradicted by measurement", (f"measured {got:.1f} tok/s on this hardware and engine vs claimed "
                                           f"{lo:g}{'' if lo == hi else f'–{hi:g}'} (±{MEASURE_TOLERANCE:.0%})")


# ---------------------------------------------------------------- evaluators: (claim, measured) -> (verdict, why, numbers)
def _speed(claim: dict, measured: dict | None, batch: int) -> tuple[str, str, dict]:
    cond = claim["condition"]
    gpu = roofline.gpu_spec(cond["gpu"])
    n = int(cond.get("gpus", 1))
    bw = gpu["bandwidth_gb_s"] * n  # perfect scaling over the GPUs: the most generous reading
    ctx = int(cond.get("context_tokens") or 0)
    depth = ctx or int(roofline.read_definition()["default_depth_tokens"])  # `lab plan`'s depth when none is named
    mid, arch = _target(cond["model"])
    quant = cond.get("quant", "Q4_K_M")
    kv = _kv(arch, depth)
    w_read, w_basis = _read_weights(quant, mid, arch)
    ceiling = roofline.aggregate_ceiling_tok_s(bw, w_read, kv, batch)
    lo, hi = _range(claim["value"])
    # One prediction: the per-token model `lab plan` shows (llama.cpp, one stream, one card); none for batches,
    # vLLM or multi-GPU splits, whose efficiency the lab has not measured on these cards.
    predicted = None
    if batch == 1 and n == 1 and cond.get("engine", "llama.cpp") == "llama.cpp":
        predicted = roofline.per_token_model().predict_tok_s(roofline.bytes_per_token(w_read, kv), gpu["bandwidth_gb_s"],
                                                             "datasheet", roofline.family_of(arch), gpu["arch"])
    numbers = {"model": mid, "bandwidth_gb_s": bw, "gpus": n, "batch": batch, "context_tokens": ctx, "depth_tokens": depth,
               "weights_read_bytes": w_read, "weights_basis": w_basis, "kv_bytes_per_seq": kv,
               "ceiling_tok_s": ceiling, "needed_fraction_of_ceiling": lo / ceiling, "predicted_tok_s": predicted}
    how = (f"{n} x {gpu['bandwidth_gb_s']:g} GB/s{' (perfect scaling)' if n > 1 else ''} ÷ "
           f"({w_read / 1e9:.2f} GB of {quant} weights read per token"
           f" + {kv / 1e9:.2f} GB KV and state at {depth} tokens)")
    if batch > 1:
        how = f"{batch} streams x " + how.replace("read per token", "read once per step")
    claimed = f"{lo:g}" if lo == hi else f"{lo:g}–{hi:g}"
    if lo > ceiling:
        why = f"claimed {claimed} tok/s > ceiling {ceiling:.0f} tok/s = {how}"
        if batch != 1:
            return "impossible by physics", why, numbers
        split = "tensor" if cond.get("tensor_parallel") else "layer" if n > 1 else "none"
        # the step's cost in plain tokens at ONE card's predicted plain speed: perfect scaling shortens the
        # verification with the plain token, the generous reading the ceiling already makes
        one_card = roofline.per_token_model().predict_tok_s(roofline.bytes_per_token(w_read, kv), gpu["bandwidth_gb_s"],
                                                            "datasheet", roofline.family_of(arch), gpu["arch"])
        spec = numbers["speculation"] = _speculation(lo, ceiling, cond["gpu"], split, one_card)
        why += "; " + _speculation_text(spec)
        if spec["speedup_needed"] > spec["max_speedup"]:
            return "impossible by physics", why + ": beyond MTP's bound even with every draft accepted", numbers
        if not spec["reachable_at"]:
            return ("contradicted by facts", why + ": only with an acceptance above what the public rows publish for "
                    "this card (lab/data/public_speed.yaml)", numbers)
        return ("not testable here", why + f": reachable with MTP at n-max {'/'.join(map(str, spec['reachable_at']))} on the perfect-scaling "
                "ceiling; `lab plan` predicts each MTP route — needs this hardware to measure", numbers)
    if _matches(cond, measured) and (got := _measured_value(claim, measured)) is not None:
        verdict, why = _against_measurement(claim, got)
        return verdict, why + f"; roofline {ceiling:.0f} tok/s at most", numbers
    why = f"below the ceiling {ceiling:.0f} tok/s = {how}; it needs ≥ {numbers['needed_fraction_of_ceiling']:.0%} of that"
    if predicted:
        why += f"; the per-token model (`lab plan`'s prediction) gives {predicted:.0f} tok/s without speculation"
    # no measurement of ours from this hardware: the published rows the claim names judge it (lab.predict.claim_published)
    pub = claim_published.judge(claim, MEASURE_TOLERANCE)
    if pub is not None:
        numbers["published"] = pub[2]  # plain decoding's published rows, whatever decides
    # ... and, for one stream, the route the lab recommends for the claim's set-up (lab.predict.card_speed.best_route,
    # the answer `lab predict` and `lab plan`'s routes give): a claim the lab's own "Run this" reaches is not
    # contradicted by the plain rows alone
    if batch == 1 and (route := claim_published.route_verdict(claim, depth, MEASURE_TOLERANCE)) is not None:
        numbers["route"] = route[2]
        if route[0] == "consistent" or pub is None or pub[0] == "not testable here":
            plain = f"; without speculation: {pub[1]}" if pub is not None else ""
            return route[0], f"{route[1]}{plain}; {why}", numbers
        # plain decoding decides (it agrees, or both disagree): both named
        return pub[0], f"without speculation: {pub[1]}; {route[1]}; {why}", numbers
    if pub is not None:
        numbers["published"] = pub[2]
        if pub[0] != "not testable here":
            return pub[0], f"{pub[1]}; {why}", numbers
        why = f"{pub[1]}; {why}"
    return "not testable here", why + " — needs this hardware to measure", numbers


def _decode_ceiling(claim, measured):
    return _speed(claim, measured, 1)


def _aggregate_ceiling(claim, measured):
    return _speed(claim, measured, int(claim["condition"].get("concurrency", 1)))


def _weights_size(claim, _measured):
    test, cond = claim["test"], claim["condition"]
    quant = test["quant"]
    claim_r = _range(claim["value"])
    mid, arch = _target(cond["model"])
    real, basis = _weights(quant, mid, arch)
    if test.get("file"):  # a claim about the file: the download, MTP block included (lab.model.quant_targets)
        from lab.model import quant_targets

        whole = quant_targets.exact_gguf_bytes(mid, quant, with_mtp=True)
        if whole is not None:
            real, basis = float(whole), (f"the {quant} file people download: llama.cpp's mix over {mid}'s tensors with "
                                         "its MTP block (lab.model.quant_targets.gguf_parts), header not counted")
    floor = arch.params * float(test.get("naive_bits", 4)) / 8 if test.get("naive_bits") else None
    rows = [_row(mid, "judged", real / 1e9, "GB", _either_unit(claim_r, real), basis)]
    for cid, carch in _comparisons(cond["model"]).items():
        b, cbasis = _weights(quant, cid, carch)
        rows.append(_row(cid, "comparison", b / 1e9, "GB", _either_unit(claim_r, b), cbasis))
    numbers = {"model": mid, "quant": quant, "params": arch.params, "bytes": real, "gb": real / 1e9,
               "gib": real / GIB, "basis": basis, "models": rows}
    why = (f"{mid} at {quant}: {real / 1e9:.2f} GB ({real / GIB:.2f} GiB) — {basis}; agrees when within "
           f"±{SIZE_TOLERANCE:.0%} of the claim read as GB or as GiB")
    if floor is not None and real > floor * 1.01:
        numbers["naive_bytes"] = floor
        why += (f"; the seed's own arithmetic, {arch.params / 1e9:.2f}e9 weights × {test['naive_bits']:g} bits ÷ 8 = "
                f"{floor / 1e9:.1f} GB, is a floor no real file reaches (group scales, 16-bit embeddings and output)")
    if test.get("against") == "published_int4":
        return _against_published_int4(claim, real, basis, numbers, why)
    return ("consistent" if rows[0]["agrees"] else "contradicted by facts"), why, numbers


def _against_published_int4(claim: dict, real: float, basis: str, numbers: dict, lab_why: str) -> tuple[str, str, dict]:
    """An "INT4 ≈ N GB" claim against what people download: the lab's own AWQ/GPTQ figure and every counted published
    checkpoint (weight_bits.yaml `published_checkpoints`), in GB = 1e9 bytes as the claim writes it. Consistent when
    the MEDIAN of those sizes lies within the claim's range ± the claim's `tolerance` — one file near the edge, or
    reading GB as GiB, cannot flip it; the margin to the edge is stated."""
    tol = float(claim["test"].get("tolerance", SIZE_TOLERANCE))
    lo, hi = _range(claim["value"])
    band = (lo * (1 - tol), hi * (1 + tol))
    files = weights.published_checkpoints()
    counted = [f for f in files if f["counted"]]
    sizes = sorted([real / 1e9] + [f["bytes"] / 1e9 for f in counted])
    mid = len(sizes) // 2
    median = sizes[mid] if len(sizes) % 2 else (sizes[mid - 1] + sizes[mid]) / 2
    inside = band[0] <= median <= band[1]
    margin = min(median - band[0], band[1] - median) if inside else max(band[0] - median, median - band[1])
    numbers.update(tolerance=tol, band_gb=band, median_gb=median, sizes_gb=sizes, margin_gb=margin,
                   published=[{k: f[k] for k in ("repo", "size", "unit", "counted", "source")} for f in files])
    listed = "; ".join(f"{f['repo']} {f['size']:g} {f['unit']}" + ("" if f["counted"] else f" (not counted: {f['why']})")
                       for f in files)
    why = (f"4-bit AWQ/GPTQ downloads of this 27B: the lab's {real / 1e9:.2f} GB ({basis}) and the published {listed} "
           f"(lab/data/weight_bits.yaml published_checkpoints); median {median:.2f} GB vs the claim {lo:g}–{hi:g} GB "
           f"± {tol:.0%} = {band[0]:.2f}–{band[1]:.2f} GB (GB = 1e9 bytes, as the claim writes it): "
           + (f"inside, {margin:.2f} GB from the edge" if inside else f"{margin:.2f} GB outside"))
    if numbers.get("naive_bytes"):
        why += f"; the seed's own arithmetic gives {numbers['naive_bytes'] / 1e9:.1f} GB, a floor no real file reaches"
    gguf = weights.published_file("Qwen3.8-27B-UD-IQ4_XS.gguf")
    if gguf and not inside and band[0] <= gguf["bytes"] / 1e9 <= band[1]:
        why += (f"; a 4-bit GGUF does land there (unsloth's UD-IQ4_XS, {gguf['bytes'] / 1e9:.2f} GB: llama.cpp's "
                "format, not the AWQ/GPTQ INT4 vLLM loads)")
    return ("consistent" if inside else "contradicted by facts"), why, numbers


def _kv_size(claim, _measured):
    test, cond = claim["test"], claim["condition"]
    tokens, dtype = int(test["tokens"]), test.get("kv_dtype", "f16")
    claim_r = _range(claim["value"])
    mid, arch = _target(cond["model"])
    total = _kv(arch, tokens, dtype)
    rows = [_row(mid, "judged", total / GIB, "GiB", _either_unit(claim_r, total), _kv_parts(arch, tokens, dtype))]
    for cid, carch in _comparisons(cond["model"]).items():
        b = _kv(carch, tokens, dtype)
        rows.append(_row(cid, "comparison", b / GIB, "GiB", _either_unit(claim_r, b), _kv_parts(carch, tokens, dtype)))
    numbers = {"model": mid, "tokens": tokens, "kv_dtype": dtype, "bytes": total, "gib": total / GIB,
               "kv_bytes_per_token": kvcache.kv_bytes_per_token(arch, dtype, "global"),
               "state_bytes_per_seq": arch.linear_state_bytes_per_seq, "models": rows}
    why = f"{mid}, {tokens} tokens at {dtype}: {rows[0]['arithmetic']}"
    shape = test.get("seed_shape")
    if shape:
        b = 2 * shape["layers"] * shape["kv_heads"] * shape["head_dim"] * tokens * kvcache.bytes_per_element(dtype)
        numbers["seed_shape_bytes"] = b
        why += (f"; the seed's own inputs ({shape['layers']} layers × {shape['kv_heads']} KV heads × "
                f"{shape['head_dim']}) give {b / GIB:.1f} GiB, not its answer either")
    others = [r["model"] for r in rows[1:] if r["agrees"]]
    if not rows[0]["agrees"] and others:
        why += f"; it would fit {', '.join(others)} instead"
    return ("consistent" if rows[0]["agrees"] else "contradicted by facts"), why, numbers


def _layers(claim, _measured):
    value = float(claim["value"])
    mid, arch = _target(claim["condition"]["model"])

    def agrees(n: int) -> bool:
        return abs(n - value) <= 0.1 * value

    rows = [_row(mid, "judged", arch.n_layers, "layers", agrees(arch.n_layers), _layer_text(arch))]
    rows += [_row(cid, "comparison", a.n_layers, "layers", agrees(a.n_layers), _layer_text(a))
             for cid, a in _comparisons(claim["condition"]["model"]).items()]
    why = f"{mid}: {rows[0]['arithmetic']}"
    others = [f"{r['model']} ({r['value']:g})" for r in rows[1:] if r["agrees"]]
    if not rows[0]["agrees"] and others:
        why += f"; {value:g} layers fits {', '.join(others)} instead"
    return ("consistent" if rows[0]["agrees"] else "contradicted by facts"), why, {"model": mid, "models": rows}


def _layer_text(arch) -> str:
    if arch.linear_layers:
        return (f"num_hidden_layers = {arch.n_layers}: {len(arch.global_layers)} full-attention layers keep a KV "
                f"cache, {len(arch.linear_layers)} Gated DeltaNet layers a fixed state")
    return f"num_hidden_layers = {arch.n_layers}"


def _total_memory(claim, _measured):
    """Weights + llama.cpp's KV (and state) + the runtime overhead allowance, against a claimed total."""
    test, cond = claim["test"], claim["condition"]
    tokens, dtype = int(test["tokens"]), test.get("kv_dtype", "f16")
    over = memory_plan.runtime_overhead(test["overhead"])
    claim_r = (float(claim["value"]) - float(test["tolerance_gb"]), float(claim["value"]) + float(test["tolerance_gb"]))

    def total(mid: str, arch) -> tuple[float, str]:
        w, _ = _weights(cond["quant"], mid, arch)
        kv = kvcache.llama_cpp_kv_prediction(arch, tokens, 1, dtype)["total_bytes"]
        t = w + kv + int(over["bytes"])
        return t, (f"weights {w / 1e9:.2f} GB ({cond['quant']}, lab.model.weights) + KV and state (llama.cpp, -c {tokens}, "
                   f"{dtype}) {kv / 1e9:.2f} GB + overhead {int(over['bytes']) / 1e9:.2f} GB = {t / 1e9:.2f} GB")

    mid, arch = _target(cond["model"])
    t, text = total(mid, arch)
    rows = [_row(mid, "judged", t / 1e9, "GB", _either_unit(claim_r, t, 0), text)]
    for cid, carch in _comparisons(cond["model"]).items():
        ct, ctext = total(cid, carch)
        rows.append(_row(cid, "comparison", ct / 1e9, "GB", _either_unit(claim_r, ct, 0), ctext))
    why = f"{mid}: {text} (overhead: {over['source']})"
    others = [f"{r['model']} ({r['value']:.1f} GB)" for r in rows[1:] if r["agrees"]]
    if not rows[0]["agrees"] and others:
        why += f"; close to 30 GB is {', '.join(others)} instead"
    return ("consistent" if rows[0]["agrees"] else "contradicted by facts"), why, {"model": mid, "bytes": t, "models": rows}


def _kv_ratio(claim, _measured):
    test, cond = claim["test"], claim["condition"]
    base = {"tokens": int(test.get("tokens", cond.get("context_tokens") or 4096)), "kv_dtype": test.get("kv_dtype", "f16")}
    num, den = {**base, **test["numerator"]}, {**base, **test["denominator"]}
    mid, arch = _target(cond.get("model", "27b"))
    ratio = _kv(arch, num["tokens"], num["kv_dtype"]) / _kv(arch, den["tokens"], den["kv_dtype"])
    ok = _overlaps(_range(claim["value"]), ratio, ratio, SIZE_TOLERANCE)
    why = f"{mid}: {ratio:.2f} (KV and fixed state together)"
    if test.get("note"):
        why += f"; {test['note']}"
    return ("consistent" if ok else "contradicted by facts"), why, {"model": mid, "ratio": ratio, "numerator": num,
                                                                   "denominator": den}


def _context_fit(claim, _measured):
    test, cond = claim["test"], claim["condition"]
    gpu = roofline.gpu_spec(cond["gpu"])
    memory = gpu["memory_gib"] * GIB * int(cond.get("gpus", 1))
    tokens, dtype = int(test["tokens"]), test.get("kv_dtype", "f16")
    mid, arch = _target(cond["model"])
    w, basis = _weights(cond["quant"], mid, arch)
    kv = _kv(arch, tokens, dtype)
    free = memory - w - kv
    fits = free >= 0
    why = (f"{gpu['memory_gib'] * int(cond.get('gpus', 1)):g} GiB vs {mid} weights ({cond['quant']}) {w / GIB:.1f} GiB "
           f"+ KV and state at {tokens} tokens {kv / GIB:.1f} GiB → {'fits' if fits else 'does not fit'} "
           f"({free / GIB:+.1f} GiB before the engine's own buffers)")
    if test.get("note"):
        why += f"; {test['note']}"
    numbers = {"model": mid, "memory_gib": memory / GIB, "weights_gib": w / GIB, "weights_basis": basis,
               "kv_gib": kv / GIB, "free_gib": free / GIB}
    return ("consistent" if fits == bool(test["claim_fits"]) else "contradicted by facts"), why, numbers


def _compat(claim, _measured):
    test = claim["test"]
    results = [r for r in compat.evaluate_all(test["facts"]) if r.id in test["rules"]]
    statuses = [r.status for r in results]
    messages = [f.message for r in results for f in r.findings]
    numbers = {"facts": test["facts"], "rules": {r.id: r.status for r in results}, "findings": messages}
    if not results or all(s == "skip" for s in statuses):
        return "not testable here", "the rules lack inputs to judge this", numbers
    works = "error" not in statuses
    why = " | ".join(messages) if messages else f"rules {', '.join(test['rules'])} pass"
    if test.get("note"):
        why += f" ({test['note']})"
    claim_works = bool(test["claim_works"])
    if works and "warn" in statuses and test.get("warn_is_unverified"):
        # nothing known forbids it, nothing public shows it working: only the card can tell
        return "not testable here", why, numbers
    return ("consistent" if works == claim_works else "contradicted by facts"), why, numbers


def _gpu_spec(claim, _measured):
    test = claim["test"]
    spec = roofline.gpu_spec(test["gpu"])
    got = float(spec[test["field"]])
    ok = _overlaps(_range(claim["value"]), got, got, 0.05)
    return ("consistent" if ok else "contradicted by facts"), f"{spec['name']}: {test['field']} = {got:g} ({spec['source']})", \
        {"spec": spec}


def _arithmetic(claim, _measured):
    test = claim["test"]
    got = float(test["computed"])
    ok = _overlaps(_range(claim["value"]), got, got, float(test.get("tolerance", 0.02)))
    return ("consistent" if ok else "contradicted by facts"), test["how"], {"computed": got}


def _documented(claim, _measured):
    test = claim["test"]
    return test["verdict"], f"{test['note']} ({test['source']})", {}


def _untestable(claim, _measured):
    return "not testable here", claim["test"]["note"], {}


EVALUATORS = {"decode_ceiling": _decode_ceiling, "aggregate_ceiling": _aggregate_ceiling,
              "weights_size": _weights_size, "kv_size": _kv_size, "kv_ratio": _kv_ratio, "layers": _layers,
              "total_memory": _total_memory, "context_fit": _context_fit, "compat": _compat, "gpu_spec": _gpu_spec,
              "arithmetic": _arithmetic, "documented": _documented, "untestable": _untestable}
