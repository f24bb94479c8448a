"""The claims ledger: every numeric claim of the two seed guides, judged once, for every view.

The claims are data (lab/data/seed_claims.yaml: the verbatim quote, English, condition, value, how to
test it, source) — the one file that holds them; notebooks 03 (sizes), 05 (KV and layers), 06 (all, with
speed against measurement) and `lab plan` show views of the same verdicts. Each claim gets one of

    consistent                   the numbers agree (arithmetic, documentation or our measurement)
    contradicted by measurement  our measurement on the same hardware and engine disagrees
    contradicted by facts        arithmetic on the published config or a documented rule disagrees
    impossible by physics        above the memory-bandwidth roofline even with generous assumptions
    not testable here            needs hardware, a meter or a price list this run does not have

with the numbers behind it. A claim about "27B" is judged on the seeds' own model, Qwen3.8-27B (its
published config in lab/data/model_configs.yaml), with other real models shown beside it for comparison
only (`numbers["models"]`). Speed claims are checked against the roofline (lab.predict.roofline) with generous
assumptions — perfect multi-GPU scaling, only the 4-bit payload of the weights — and for decode without
speculation (every weight read once per token); the verdict says what multi-token prediction (MTP) or
speculative decoding would need (accepted tokens per weight pass). Sizes come from lab.model.weights, KV from
lab.predict.kvcache, drivers and formats from lab.predict.compat.

`profile_roofline(profile, hardware_record)` resolves a profile's own ceiling inputs (bandwidth, weight
bytes, KV bytes) and `plan_part(profile)` is what `lab plan --json` adds.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, Literal

from lab.core import facts
from lab.predict import roofline

Verdict = Literal["consistent", "contradicted by measurement", "contradicted by facts", "impossible by physics",
                  "not testable here"]
VERDICTS: tuple[str, ...] = ("consistent", "contradicted by measurement", "contradicted by facts",
                             "impossible by physics", "not testable here")
TEST_KINDS = ("decode_ceiling", "aggregate_ceiling", "weights_size", "kv_size", "kv_ratio", "context_fit", "compat",
              "gpu_spec", "arithmetic", "documented", "untestable", "layers", "total_memory")
MEASURE_TOLERANCE = 0.15  # a measured speed within 15 % of the claim agrees with it (run-to-run and build spread)
SIZE_TOLERANCE = 0.10     # "about 15 GB" agrees with 13.5–16.5 GB
SPECULATIVE_DRAFTS = (1, 2, 3, 4)  # draft tokens per step for which the acceptance rate a claim needs is shown
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
    """lab/data/seed_claims.yaml, checked: unique ids and quotes, a known test kind, values present, verdicts valid."""
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


def _either_unit(claim: tuple[float, float], n_bytes: float, tol: float = SIZE_TOLERANCE) -> bool:
    """Does `n_bytes` agree with a claim in "GB" read either as 1e9 or as 2^30 bytes?"""
    return _overlaps(claim, n_bytes / 1e9, n_bytes / 1e9, tol) or _overlaps(claim, n_bytes / GIB, n_bytes / GIB, tol)


def _span(values) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.0f}" if round(lo) == round(hi) else f"{lo:.0f}–{hi:.0f}"


# ---------------------------------------------------------------- the model a claim is about
def model_class(name: str) -> dict:
    """The class entry: `model` (judged: the seeds' model for "27b"), `comparisons` (shown beside it only)."""
    return ledger()["model_classes"][name]


def _arch(model_id: str):
    from lab.model import models

    return models.stand_in(model_id)


def _target(model_cls: str) -> tuple[str, Any]:
    mid = model_class(model_cls)["model"]
    return mid, _arch(mid)


def _comparisons(model_cls: str) -> dict:
    return {mid: _arch(mid) for mid in model_class(model_cls).get("comparisons", [])}


def _weights(quant: str, model_id: str, arch) -> tuple[float, str]:
    """(bytes, basis) of the weights at `quant` (lab.model.weights.weights_bytes: exact GGUF mix for a modelled
    config, else parameters × bits per weight)."""
    from lab.model import weights

    b, basis = weights.weights_bytes(quant, arch=arch, model_id=model_id)
    return float(b), basis


def _payload_weights(quant: str, arch) -> float:
    """Fewest bytes any file of this format can read per token: a 4-bit format's 4-bit payload alone, as if
    scales, zero points and 16-bit embeddings were free (physics bounds use it so they never favour the lab)."""
    from lab.model import weights

    bits = weights.bits_per_weight(quant)
    payload = float(ledger()["payload_bits_4bit"])
    return arch.params * (min(bits, payload) if bits < 6 else bits) / 8


def _kv(arch, tokens: int, kv_dtype: str = "f16") -> int:
    """KV cache + recurrent state of one sequence of `tokens` (lab.predict.kvcache)."""
    from lab.predict import kvcache

    return kvcache.kv_cache_bytes(arch, tokens, 1, kv_dtype) if tokens > 0 else 0


def _kv_parts(arch, tokens: int, kv_dtype: str) -> str:
    from lab.predict import kvcache

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
    tokens per weight pass on average: (1 − a^(k+1)) / (1 − a) (a draft counts only when every earlier one
    was accepted). 0 when one token per pass is enough; None when even a = 1 (k + 1 tokens) falls short."""
    if tokens_per_pass <= 1:
        return 0.0
    if tokens_per_pass > drafts + 1:
        return None

    def expected(a: float) -> float:
        return sum(a ** i for i in range(drafts + 1))

    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected(mid) < tokens_per_pass else (lo, mid)
    return hi


def _speculation(claimed: float, ceiling: float) -> dict:
    need = claimed / ceiling
    return {"tokens_per_weight_pass_needed": need,
            "acceptance_needed": {k: acceptance_needed(need, k) for k in SPECULATIVE_DRAFTS}}


def _speculation_text(spec: dict) -> str:
    need = spec["tokens_per_weight_pass_needed"]
    parts = [f"{k} draft{'s' if k > 1 else ''}: " + ("impossible" if a is None else f"≥ {a:.0%} accepted")
             for k, a in spec["acceptance_needed"].items()]
    return (f"without speculation every token reads every weight once; with MTP or speculative decoding it would "
            f"need {need:.1f} tokens per weight pass ({'; '.join(parts)})")


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
    mid, arch = _target(cond["model"])
    quant = cond.get("quant", "Q4_K_M")
    kv = _kv(arch, ctx)
    w_min = _payload_weights(quant, arch)
    w_typ, w_basis = _weights(quant, mid, arch)
    ceiling_max = roofline.aggregate_ceiling_tok_s(bw, w_min, kv, batch)
    typical = roofline.aggregate_ceiling_tok_s(bw, w_typ, kv, batch)
    lo, hi = _range(claim["value"])
    # A calibrated prediction only for one stream: batching efficiency differs too much between engines and
    # concurrency levels (lab/data/calibration.yaml: llama-server on the H200 at 1 stream vs 16 streams).
    cal = roofline.pick_calibration("gpu", cond.get("engine", "llama.cpp"), "in_process", "datasheet", gpu["name"],
                                    weights_bytes=w_typ) if batch == 1 else None
    eff = cal.efficiency("datasheet") if cal else None
    numbers = {"model": mid, "bandwidth_gb_s": bw, "gpus": n, "batch": batch, "context_tokens": ctx,
               "weights_bytes_min": w_min, "weights_bytes_typical": w_typ, "weights_basis": w_basis,
               "kv_bytes_per_seq": kv, "ceiling_max_tok_s": ceiling_max, "ceiling_typical_tok_s": typical,
               "needed_fraction_of_ceiling": lo / typical,
               "calibration_id": cal.id if cal else None, "calibration_efficiency": eff,
               "predicted_tok_s": typical * eff if eff else None}
    how = (f"{n} x {gpu['bandwidth_gb_s']:g} GB/s{' (perfect scaling)' if n > 1 else ''} ÷ "
           f"({w_min / 1e9:.1f} GB of 4-bit weights of {mid}"
           f"{f' + {kv / 1e9:.2f} GB KV and state at {ctx} tokens' if ctx else ''})")
    if batch > 1:
        how = f"{batch} streams x " + how.replace("GB of 4-bit weights", "GB of 4-bit weights read once per step")
    claimed = f"{lo:g}" if lo == hi else f"{lo:g}–{hi:g}"
    if lo > ceiling_max:
        why = f"claimed {claimed} tok/s > ceiling {ceiling_max:.0f} tok/s = {how}"
        if batch == 1:
            numbers["speculation"] = _speculation(lo, ceiling_max)
            why += "; " + _speculation_text(numbers["speculation"])
        return "impossible by physics", why, numbers
    if _matches(cond, measured) and (got := _measured_value(claim, measured)) is not None:
        verdict, why = _against_measurement(claim, got)
        return verdict, why + f"; roofline {ceiling_max:.0f} tok/s at most", numbers
    why = (f"below the ceiling ({ceiling_max:.0f} tok/s at most; {typical:.0f} tok/s with {w_typ / 1e9:.1f} GB of "
           f"{quant} weights{' and its KV' if ctx else ''}); it needs ≥ {numbers['needed_fraction_of_ceiling']:.0%} of that")
    if eff:
        why += (f"; {cal.engine} reached {eff:.0%} of its roofline in {cal.id} ({cal.quality}): expect "
                f"{numbers['predicted_tok_s']:.0f} tok/s")
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
    floor = arch.params * float(test.get("naive_bits", 4)) / 8 if test.get("naive_bits") else None
    rows = [_row(mid, "judged", real / 1e9, "GB", _either_unit(claim_r, real), basis)]
    for cid, carch in _comparisons(cond["model"]).items():
        b, cbasis = _weights(quant, cid, carch)
        rows.append(_row(cid, "comparison", b / 1e9, "GB", _either_unit(claim_r, b), cbasis))
    numbers = {"model": mid, "quant": quant, "params": arch.params, "bytes": real, "gb": real / 1e9,
               "gib": real / GIB, "basis": basis, "models": rows}
    why = f"{mid} at {quant}: {real / 1e9:.2f} GB ({real / GIB:.2f} GiB) — {basis}"
    if floor is not None and real > floor * 1.01:
        numbers["naive_bytes"] = floor
        why += (f"; the seed's own arithmetic, {arch.params / 1e9:.2f}e9 weights × {test['naive_bits']:g} bits ÷ 8 = "
                f"{floor / 1e9:.1f} GB, is a floor no real file reaches (group scales, 16-bit embeddings and output)")
    return ("consistent" if rows[0]["agrees"] else "contradicted by facts"), why, numbers


def _kv_size(claim, _measured):
    from lab.predict import kvcache

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
    from lab.predict import kvcache, memory_plan

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
    from lab.predict import compat

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


def _untestable(claim, _measured):
    return "not testable here", claim["test"]["note"], {}


EVALUATORS = {"decode_ceiling": _decode_ceiling, "aggregate_ceiling": _aggregate_ceiling,
              "weights_size": _weights_size, "kv_size": _kv_size, "kv_ratio": _kv_ratio, "layers": _layers,
              "total_memory": _total_memory, "context_fit": _context_fit, "compat": _compat, "gpu_spec": _gpu_spec,
              "arithmetic": _arithmetic, "documented": _documented, "untestable": _untestable}


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


def of_kinds(items: list[ClaimVerdict], *kinds: str) -> list[ClaimVerdict]:
    """The verdicts of the given claim kinds (notebook 03 shows "size", notebook 05 "kv" and "layers")."""
    return [x for x in items if x.kind in kinds]


def models_table(items: list[ClaimVerdict]):
    """The arithmetic behind each verdict, one row per model: the judged model, then the comparisons."""
    import pandas as pd

    return pd.DataFrame([{"claim": x.id, "verdict": x.verdict, **r} for x in items
                         for r in x.numbers.get("models", [])])


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
    """The profile's decode ceiling and calibrated prediction (lab.predict.roofline.profile_ceiling) with its
    inputs resolved here: bandwidth from notebook 01's record or the datasheet; weight bytes from the
    GGUF file when it exists, else lab.model.weights.weights_bytes (what the memory plan uses); KV bytes from lab.predict.kvcache at
    `context_tokens` (default: the benchmark's prompt + half its output, the average depth while it
    decodes). Reads the GGUF header for gguf: profiles; never starts anything."""
    from lab.core import paths
    from lab.model import models, weights as weights_mod
    from lab.predict import kvcache

    ctx = context_tokens or profile.bench_prompt_tokens + profile.bench_output_tokens // 2
    notes, weights, how, kv, arch = [], None, None, None, None
    try:
        arch = models.arch_for(profile)
    except Exception as exc:  # the GGUF is not there yet (set-up not run, or a bring-your-own model)
        notes.append(f"model architecture unknown: {exc}")
    if profile.engine == "vllm" and profile.model_dir:
        # vLLM reads the HF-format folder it serves (cpu-vllm: float32, ~5x the GGUF it was made from)
        try:
            folder = paths.served_model_path(profile)
            files = sorted(folder.glob("*.safetensors"))
            if files:
                weights, how = float(sum(f.stat().st_size for f in files)), f"safetensors of {folder.name} (what vLLM serves)"
        except paths.VllmMissing as exc:
            notes.append(f"served model folder not found: {exc}")
    elif profile.model_file:
        try:
            path = paths.model_path(profile.model_file)
            if path.is_file() and path.suffix == ".gguf":
                weights, how = float(models.gguf_weights_bytes(path)), f"tensor bytes of {path.name}"
        except Exception as exc:
            notes.append(f"model file unreadable: {exc}")
    if weights is None and arch is not None:
        # the same bytes as the memory plan (lab.model.weights.weights_bytes): exact for a modelled stand-in
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
            from lab.predict.memory_plan import VLLM_AUTO_KV

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


__all__ = ["VERDICTS", "ClaimVerdict", "ledger", "claims", "model_class", "acceptance_needed", "judge", "verdicts",
           "counts", "table", "of_kinds", "models_table",
           "measured_from_sweep", "profile_roofline", "plan_part"]
