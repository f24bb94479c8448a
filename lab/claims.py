"""The claims ledger: every numeric claim of the two seed guides, judged for a profile.

The claims are data (lab/data/seed_claims.yaml: quote, English, condition, value, how to test, source).
`verdicts(profile, measured)` gives each one of

    consistent                   the numbers agree (arithmetic, documentation or our measurement)
    contradicted by measurement  our measurement on the same hardware and engine disagrees
    contradicted by facts        arithmetic on published configs or a documented rule disagrees
    impossible by physics        above the memory-bandwidth roofline even with generous assumptions
    not testable here            needs hardware, a meter or a price list this run does not have

with the numbers behind it. Speed claims are checked against the roofline (lab.roofline) with the most
generous assumptions — perfect multi-GPU scaling, only the 4-bit payload of the weights, the smallest
KV cache of any real 27B-class model — so "impossible" holds whichever model the seed meant. Sizes and
KV caches are arithmetic on the real stand-in configs (lab.models, lab.kvcache); drivers and formats go
through the lab's compatibility rules (lab.compat).

`profile_roofline(profile, hardware_record)` resolves a profile's own ceiling inputs (bandwidth, weight
bytes, KV bytes) and `plan_part(profile)` is what `lab plan --json` adds.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, Literal

from lab import facts, roofline

Verdict = Literal["consistent", "contradicted by measurement", "contradicted by facts", "impossible by physics",
                  "not testable here"]
VERDICTS: tuple[str, ...] = ("consistent", "contradicted by measurement", "contradicted by facts",
                             "impossible by physics", "not testable here")
TEST_KINDS = ("decode_ceiling", "aggregate_ceiling", "weights_size", "kv_size", "kv_ratio", "context_fit", "compat",
              "gpu_spec", "arithmetic", "documented", "untestable", "memory_plan")
MEASURE_TOLERANCE = 0.15  # a measured speed within 15 % of the claim agrees with it (run-to-run and build spread)
SIZE_TOLERANCE = 0.10     # "about 15 GB" agrees with 13.5–16.5 GB
GIB = 1 << 30


@dataclass(frozen=True)
class ClaimVerdict:
    """One claim judged: what the seed says, the verdict, the numbers behind it and why."""

    id: str
    seed: str
    kind: str
    quote: str
    english: str
    value: Any
    unit: str
    condition: dict
    verdict: str
    explanation: str
    numbers: dict = field(default_factory=dict)
    source: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def row(self) -> dict:
        """A flat row for the ledger table."""
        value = "–".join(str(v) for v in self.value) if isinstance(self.value, list) else str(self.value)
        return {"id": self.id, "seed": self.seed[:3], "kind": self.kind, "claim": self.english,
                "value": f"{value} {self.unit}".strip(), "verdict": self.verdict, "why": self.explanation,
                "quote": self.quote}


# ---------------------------------------------------------------- the ledger as data
@lru_cache(maxsize=1)
def ledger() -> dict:
    """lab/data/seed_claims.yaml, checked: unique ids, a known test kind, values present, verdicts valid."""
    data = facts.load("seed_claims", "claims")
    ids = [c.get("id") for c in data["claims"]]
    if len(ids) != len(set(ids)):
        raise facts.DataError("seed_claims.yaml: duplicate claim ids")
    for c in data["claims"]:
        for key in ("id", "seed", "quote", "english", "kind", "condition", "value", "unit", "test"):
            if key not in c:
                raise facts.DataError(f"seed_claims.yaml: claim {c.get('id')!r} has no {key!r}")
        kind = c["test"].get("kind")
        if kind not in TEST_KINDS:
            raise facts.DataError(f"seed_claims.yaml: claim {c['id']!r}: unknown test kind {kind!r}; known: {TEST_KINDS}")
        if kind == "documented" and c["test"].get("verdict") not in VERDICTS:
            raise facts.DataError(f"seed_claims.yaml: claim {c['id']!r}: documented verdict must be one of {VERDICTS}")
        model = c["condition"].get("model")
        if model is not None and model not in data["model_classes"]:
            raise facts.DataError(f"seed_claims.yaml: claim {c['id']!r}: unknown model class {model!r}")
    return data


def claims() -> list[dict]:
    return ledger()["claims"]


def _range(value) -> tuple[float, float]:
    vals = value if isinstance(value, list) else [value]
    return float(min(vals)), float(max(vals))


def _overlaps(claim: tuple[float, float], lo: float, hi: float, tol: float) -> bool:
    return claim[0] * (1 - tol) <= hi and claim[1] * (1 + tol) >= lo


def _fmt(x: float | None, digits: int = 1) -> str:
    return "?" if x is None else f"{x:,.{digits}f}"


# ---------------------------------------------------------------- model arithmetic for a claim
def _stand_ins(model_class: str) -> dict:
    from lab import models

    return {sid: models.stand_in(sid) for sid in ledger()["model_classes"][model_class]["stand_ins"]}


def _params(model_class: str) -> float:
    return float(ledger()["model_classes"][model_class]["params"])


def _bits(quant: str) -> float:
    """Bits per weight of `quant` over a whole model (lab.weights: lab/data/weight_bits.yaml; "INT4" is AWQ)."""
    from lab import weights

    return weights.bits_per_weight(quant)


def _weights(quant: str, params: float | None = None, arch=None, model_id: str | None = None) -> float:
    """Weight bytes at `quant` (lab.weights.weights_bytes: exact for a modelled stand-in, else params × bits)."""
    from lab import weights

    return float(weights.weights_bytes(quant, arch=arch, model_id=model_id, params=params)[0])


def _payload_bits(quant: str) -> float:
    """Fewest bits per weight any file of this format can have (4-bit formats: the 4-bit payload)."""
    bits = _bits(quant)
    return min(bits, float(ledger()["payload_bits_4bit"])) if bits < 6 else bits


def _kv_bytes(arch, tokens: int, kv_dtype: str = "f16") -> int:
    from lab import kvcache

    return kvcache.kv_cache_bytes(arch, tokens, 1, kv_dtype) if tokens > 0 else 0


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
        return measured.get("single_stream_tok_s")
    conc = claim["condition"].get("concurrency")
    agg = measured.get("aggregate_tok_s") or {}
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
    arches = _stand_ins(cond["model"])
    kv = {sid: _kv_bytes(a, ctx) for sid, a in arches.items()}
    quant = cond.get("quant", "Q4_K_M")
    w_min = _params(cond["model"]) * _payload_bits(quant) / 8
    w_typ = _weights(quant, params=_params(cond["model"]))
    ceiling_max = roofline.aggregate_ceiling_tok_s(bw, w_min, min(kv.values()), batch)
    typical = {sid: roofline.aggregate_ceiling_tok_s(bw, w_typ, kv_b, batch) for sid, kv_b in kv.items()}
    lo, hi = _range(claim["value"])
    # A calibrated prediction only for one stream: batching efficiency differs too much between engines
    # (llama-server on the H200 reached 35 % of its roofline at 1 stream but 13 % of the aggregate one at 16).
    cal = roofline.pick_calibration("gpu", cond.get("engine", "llama.cpp"), "in_process", "datasheet", gpu["name"],
                                    weights_bytes=w_typ) if batch == 1 else None
    eff = cal.efficiency("datasheet") if cal else None
    numbers = {"bandwidth_gb_s": bw, "gpus": n, "batch": batch, "context_tokens": ctx,
               "weights_bytes_min": w_min, "weights_bytes_typical": w_typ,
               "kv_bytes_per_seq": kv, "ceiling_max_tok_s": ceiling_max, "ceiling_typical_tok_s": typical,
               "needed_fraction_of_ceiling": lo / max(typical.values()),
               "calibration_id": cal.id if cal else None, "calibration_efficiency": eff,
               "predicted_tok_s": {sid: c * eff for sid, c in typical.items()} if eff else None}
    how = (f"{n} x {gpu['bandwidth_gb_s']:g} GB/s{' (perfect scaling)' if n > 1 else ''} ÷ "
           f"({w_min / 1e9:.1f} GB of 4-bit weights{f' + {min(kv.values()) / 1e9:.2f} GB KV at {ctx} tokens' if ctx else ''})")
    if batch > 1:
        how = f"{batch} streams x " + how.replace("GB of 4-bit weights", "GB of 4-bit weights read once per step")
    claimed = f"{lo:g}" if lo == hi else f"{lo:g}–{hi:g}"
    if lo > ceiling_max:
        return ("impossible by physics",
                f"claimed {claimed} tok/s > ceiling {ceiling_max:.0f} tok/s = {how}", numbers)
    if _matches(cond, measured) and (got := _measured_value(claim, measured)) is not None:
        verdict, why = _against_measurement(claim, got)
        return verdict, why + f"; roofline {ceiling_max:.0f} tok/s at most", numbers
    why = (f"below the ceiling ({ceiling_max:.0f} tok/s at most; {_span(typical.values())} tok/s with {quant} weights"
           f"{' and the stand-ins’ KV' if ctx else ''}); it needs ≥ {numbers['needed_fraction_of_ceiling']:.0%} of that")
    if eff:
        why += (f"; {cal.engine} reached {eff:.0%} of its roofline in {cal.id} ({cal.quality}): expect "
                f"{_span(numbers['predicted_tok_s'].values())} tok/s")
    return "not testable here", why + " — needs this hardware to measure", numbers


def _span(values) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.0f}" if round(lo) == round(hi) else f"{lo:.0f}–{hi:.0f}"


def _decode_ceiling(claim, measured):
    return _speed(claim, measured, 1)


def _aggregate_ceiling(claim, measured):
    return _speed(claim, measured, int(claim["condition"].get("concurrency", 1)))


def _weights_size(claim, _measured):
    test, cond = claim["test"], claim["condition"]
    bits = test.get("bits") or [_bits(test["quant"])] * 2
    params = _params(cond["model"])
    lo_b, hi_b = params * bits[0] / 8, params * bits[1] / 8
    numbers = {"params": params, "bits_per_weight": bits, "bytes": [lo_b, hi_b],
               "gb": [lo_b / 1e9, hi_b / 1e9], "gib": [lo_b / GIB, hi_b / GIB],
               "stand_ins_gb": {sid: a.params * bits[-1] / 8 / 1e9 for sid, a in _stand_ins(cond["model"]).items()}}
    claim_r = _range(claim["value"])
    computed = (f"{params / 1e9:g}e9 params x {bits[0]:g}{'' if bits[0] == bits[1] else f'–{bits[1]:g}'} bits ÷ 8 = "
                f"{lo_b / 1e9:.1f}{'' if lo_b == hi_b else f'–{hi_b / 1e9:.1f}'} GB "
                f"({lo_b / GIB:.1f}{'' if lo_b == hi_b else f'–{hi_b / GIB:.1f}'} GiB)")
    ok = _overlaps(claim_r, lo_b / 1e9, hi_b / 1e9, SIZE_TOLERANCE) or _overlaps(claim_r, lo_b / GIB, hi_b / GIB, SIZE_TOLERANCE)
    return ("consistent" if ok else "contradicted by facts"), computed, numbers


def _kv_size(claim, _measured):
    test, cond = claim["test"], claim["condition"]
    tokens, dtype = int(test["tokens"]), test.get("kv_dtype", "f16")
    per = {sid: _kv_bytes(a, tokens, dtype) for sid, a in _stand_ins(cond["model"]).items()}
    numbers = {"tokens": tokens, "kv_dtype": dtype, "stand_ins_bytes": per,
               "stand_ins_gib": {k: v / GIB for k, v in per.items()}}
    parts = [f"{sid} {v / GIB:.1f} GiB" for sid, v in per.items()]
    shape = test.get("seed_shape")
    if shape:
        from lab import kvcache

        b = 2 * shape["layers"] * shape["kv_heads"] * shape["head_dim"] * tokens * kvcache.bytes_per_element(dtype)
        numbers["seed_shape_bytes"] = b
        parts.append(f"the seed's own shape ({shape['layers']} layers x {shape['kv_heads']} KV heads x "
                     f"{shape['head_dim']}) {b / GIB:.1f} GiB")
    claim_r = _range(claim["value"])
    ok = any(_overlaps(claim_r, v / 1e9, v / 1e9, SIZE_TOLERANCE) or _overlaps(claim_r, v / GIB, v / GIB, SIZE_TOLERANCE)
             for v in per.values())
    why = f"KV at {tokens} tokens, {dtype}: " + "; ".join(parts)
    if not ok:
        why = "no real 27B-class config gives that: " + why
    if test.get("cross_check"):
        other = _memory_plan_row(test["cross_check"])
        numbers["memory_plan"] = {"id": other["id"], "status": other["status"], "verdict": other["verdict"]}
    return ("consistent" if ok else "contradicted by facts"), why, numbers


def _kv_ratio(claim, _measured):
    test, cond = claim["test"], claim["condition"]
    base = {"tokens": int(test.get("tokens", cond.get("context_tokens") or 4096)), "kv_dtype": test.get("kv_dtype", "f16")}
    num, den = {**base, **test["numerator"]}, {**base, **test["denominator"]}
    model = cond.get("model", "27b")
    ratios = {sid: _kv_bytes(a, num["tokens"], num["kv_dtype"]) / _kv_bytes(a, den["tokens"], den["kv_dtype"])
              for sid, a in _stand_ins(model).items()}
    claimed = _range(claim["value"])
    ok = any(_overlaps(claimed, r, r, SIZE_TOLERANCE) for r in ratios.values())
    why = "computed " + ", ".join(f"{sid} {r:.2f}" for sid, r in ratios.items())
    if test.get("note"):
        why += f"; {test['note']}"
    return ("consistent" if ok else "contradicted by facts"), why, {"ratios": ratios, "numerator": num, "denominator": den}


def _context_fit(claim, _measured):
    test, cond = claim["test"], claim["condition"]
    gpu = roofline.gpu_spec(cond["gpu"])
    memory = gpu["memory_gib"] * GIB * int(cond.get("gpus", 1))
    tokens, dtype = int(test["tokens"]), test.get("kv_dtype", "f16")
    rows = {}
    for sid, arch in _stand_ins(cond["model"]).items():
        w = _weights(cond["quant"], arch=arch, model_id=sid)
        kv = _kv_bytes(arch, tokens, dtype)
        rows[sid] = {"weights_gib": w / GIB, "kv_gib": kv / GIB, "free_gib": (memory - w - kv) / GIB}
    fits = {sid: r["free_gib"] >= 0 for sid, r in rows.items()}
    claim_fits = bool(test["claim_fits"])
    ok = any(v == claim_fits for v in fits.values())
    why = (f"{gpu['memory_gib'] * int(cond.get('gpus', 1)):g} GiB vs weights ({cond['quant']}, lab.weights) + KV at "
           f"{tokens} tokens: " + "; ".join(f"{sid} {r['weights_gib']:.1f} + {r['kv_gib']:.1f} GiB → "
                                            f"{'fits' if r['free_gib'] >= 0 else 'does not fit'} ({r['free_gib']:+.1f} GiB)"
                                            for sid, r in rows.items())
           + " (before the engine's own buffers)")
    return ("consistent" if ok else "contradicted by facts"), why, {"memory_gib": memory / GIB, "stand_ins": rows}


def _compat(claim, _measured):
    from lab import compat

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


@lru_cache(maxsize=1)
def _memory_plan_rows() -> dict:
    from lab import memory_plan

    return {row["id"]: row for row in memory_plan.check_kv_claims()}


def _memory_plan_row(claim_id: str) -> dict:
    rows = _memory_plan_rows()
    if claim_id not in rows:
        raise facts.DataError(f"seed_claims.yaml delegates to {claim_id!r}, which lab/data/seed_claims_kv.yaml lacks")
    return rows[claim_id]


def _memory_plan(claim, _measured):
    """Delegated to lab.memory_plan (the KV helper's own ledger): pass/warn → consistent, fail → contradicted."""
    row = _memory_plan_row(claim["test"]["claim_id"])
    verdict = "contradicted by facts" if row["status"] == "fail" else "consistent"
    detail = "; ".join(f"{r['model']} {r['value']} {r['unit']}" for r in row["rows"] if r.get("stand_in"))
    return verdict, f"{row['verdict']} ({detail}; lab.memory_plan {row['id']})", {"memory_plan": row}


def _untestable(claim, _measured):
    return "not testable here", claim["test"]["note"], {}


EVALUATORS = {"decode_ceiling": _decode_ceiling, "aggregate_ceiling": _aggregate_ceiling,
              "weights_size": _weights_size, "kv_size": _kv_size, "kv_ratio": _kv_ratio,
              "context_fit": _context_fit, "compat": _compat, "gpu_spec": _gpu_spec, "arithmetic": _arithmetic,
              "documented": _documented, "untestable": _untestable, "memory_plan": _memory_plan}


def judge(claim: dict, measured: dict | None = None) -> ClaimVerdict:
    """One claim's verdict. `measured` (see `measured_from_sweep`) counts only when it comes from the
    claim's own hardware and engine; otherwise speed claims rest on physics."""
    verdict, why, numbers = EVALUATORS[claim["test"]["kind"]](claim, measured)
    return ClaimVerdict(claim["id"], claim["seed"], claim["kind"], claim["quote"], claim["english"], claim["value"],
                        claim["unit"], claim["condition"], verdict, why, numbers, claim.get("source", ""))


def verdicts(profile=None, measured: dict | None = None) -> list[ClaimVerdict]:
    """Every claim judged. With a profile but no `measured`, the verdicts are the profile-independent
    ones (physics, arithmetic, documentation); `measured` from this profile's run can then confirm or
    contradict the speed claims made for the same hardware and engine."""
    if measured is not None and profile is not None:
        measured = {"engine": profile.engine, **measured}
    return [judge(c, measured) for c in claims()]


def counts(items: list[ClaimVerdict]) -> dict:
    return {v: sum(x.verdict == v for x in items) for v in VERDICTS}


def table(items: list[ClaimVerdict]):
    """The ledger as a pandas DataFrame (one row per claim)."""
    import pandas as pd

    return pd.DataFrame([x.row() for x in items])


def measured_from_sweep(profile, hardware: dict | None, single_stream_tok_s: float | None,
                        aggregate_tok_s: dict | None, context_tokens: int | None) -> dict:
    """What a benchmark run measured, in the shape `judge` compares with: the GPU seen (name, count),
    the engine, single-stream decode tok/s, aggregate tok/s by concurrency, and the context it ran at."""
    gpus = (hardware or {}).get("gpus") or []
    return {"hardware": {"gpu_name": gpus[0].get("name") if gpus else None, "gpu_count": len(gpus)},
            "engine": profile.engine, "single_stream_tok_s": single_stream_tok_s,
            "aggregate_tok_s": dict(aggregate_tok_s or {}), "context_tokens": context_tokens}


# ---------------------------------------------------------------- a profile's own roofline
def profile_roofline(profile, hardware_record: dict | None = None, context_tokens: int | None = None,
                     levels: list[int] | None = None) -> dict:
    """The profile's decode ceiling and calibrated prediction (lab.roofline.profile_ceiling) with its
    inputs resolved here: bandwidth from notebook 01's record or the datasheet; weight bytes from the
    GGUF file when it exists, else lab.weights.weights_bytes (what the memory plan uses); KV bytes from lab.kvcache at
    `context_tokens` (default: the benchmark's prompt + half its output, the average depth while it
    decodes). Reads the GGUF header for gguf: profiles; never starts anything."""
    from lab import kvcache, models, paths, weights as weights_mod

    ctx = context_tokens or profile.bench_prompt_tokens + profile.bench_output_tokens // 2
    notes, weights, how, kv, arch = [], None, None, None, None
    try:
        arch = models.arch_for(profile)
    except Exception as exc:  # the GGUF is not there yet (set-up not run, or a bring-your-own model)
        notes.append(f"model architecture unknown: {exc}")
    if profile.engine == "vllm" and profile.model_dir:
        # vLLM reads the HF-format folder it serves (cpu-vllm: float32, ~5x the GGUF it was made from)
        from lab import vllm_env

        try:
            folder = vllm_env.served_model_path(profile)
            files = sorted(folder.glob("*.safetensors"))
            if files:
                weights, how = float(sum(f.stat().st_size for f in files)), f"safetensors of {folder.name} (what vLLM serves)"
        except vllm_env.VllmMissing as exc:
            notes.append(f"served model folder not found: {exc}")
    elif profile.model_file:
        try:
            path = paths.model_path(profile.model_file)
            if path.is_file() and path.suffix == ".gguf":
                weights, how = float(models.gguf_weights_bytes(path)), f"tensor bytes of {path.name}"
        except Exception as exc:
            notes.append(f"model file unreadable: {exc}")
    if weights is None and arch is not None:
        # the same bytes as the memory plan (lab.weights.weights_bytes): exact for a modelled stand-in
        kind, _, ref = profile.model_architecture.partition(":")
        try:
            b, basis = weights_mod.weights_bytes(profile.model_quant, arch=arch,
                                                 model_id=ref if kind == "config" else None)
            weights, how = float(b), basis
        except (KeyError, ValueError) as exc:
            notes.append(f"weight bytes unknown: {exc}")
    tp = profile.tensor_parallel_size if profile.engine == "vllm" else 1
    if weights is not None and tp > 1:
        how += (f"; all {tp} GPUs' weights, read in parallel: each GPU reads 1/{tp} of them "
                f"({weights / tp / 1e9:.2f} GB) and the bandwidth is {tp} GPUs' (perfect tensor parallelism)")
    if arch is not None:
        kv_dtype = profile.kv_cache_dtype
        if profile.engine == "vllm" and kv_dtype == "auto":  # vLLM's "auto" is the model's dtype
            from lab.memory_plan import VLLM_AUTO_KV

            kv_dtype = VLLM_AUTO_KV.get(profile.dtype, "auto")
        kv = float(kvcache.kv_cache_breakdown(arch, ctx, 1, kv_dtype, profile.tensor_parallel_size)["total_bytes"])
    result = roofline.profile_ceiling(profile, bandwidth=roofline.bandwidth_for(profile, hardware_record),
                                      weights_bytes=weights, kv_bytes_per_seq=kv, context_tokens=ctx, levels=levels)
    result.update(weights_how=how, model=arch.name if arch else profile.model_name, notes=notes)
    return result


def plan_part(profile) -> dict:
    """What `lab plan --json` adds: the decode ceiling, the calibrated prediction, and every claim's
    verdict (physics, arithmetic and documentation only: a plan measures nothing)."""
    rl = profile_roofline(profile)
    items = verdicts(profile)
    return {"decode_ceiling_tok_s": rl["decode_ceiling_tok_s"], "predicted_decode_tok_s": rl["predicted_decode_tok_s"],
            "roofline": rl, "claims": [{"id": x.id, "verdict": x.verdict, "why": x.explanation} for x in items],
            "claim_counts": counts(items)}


__all__ = ["VERDICTS", "ClaimVerdict", "ledger", "claims", "judge", "verdicts", "counts", "table",
           "measured_from_sweep", "profile_roofline", "plan_part"]
