"""Decode summed over several streams through llama-server, with host sampling and with backend sampling (-bs): the
lab's one model of the served aggregate. `lab plan` shows it for a GPU profile; lab/data/served_overhead.yaml
served_streams holds the measurements it is fitted and checked on.

    served step(B) = batched step(B) + server(B)        aggregate(B) = B ÷ served step(B)
    server(B)      = per_stream_ms[sampling] × B + per_step_ms[sampling] (B ≥ 2)

* batched step(B): llama-batched-bench's step on the card (1000 × B ÷ S_TG), measured where the lab has it; elsewhere
  the card's plain ms per token (the per-token model, lab.predict.roofline) + the Hopper cards' measured growth from 1
  to B streams (FALLBACK, said so: that growth is compute and launches, which a slower card pays more of, so the
  aggregate is then an upper bound, and -bs's gain, the same ms saved out of a longer step, an upper bound too).
* per_stream_ms: the work llama-server does for each stream each step outside the graph - with host sampling, the
  sampler chain over the 248,320-token vocabulary, detokenising and streaming the chunk; with -bs the sampling runs in
  the compute graph (lab/data/backend_sampling.yaml), so the term is what -bs changes. Never negative.
* per_step_ms: what a step with 2+ busy slots costs the server beyond that, not yet attributed (slot
  placement, requests ending at different times).

Both fitted (least squares, per sampling mode) on every measured card (host-side work: the same for any card on a
like host); `check` leaves each card out and predicts it from the others. Pure: lab/data in, numbers out.
"""
from __future__ import annotations

import functools

from lab.core import facts

MODES = ("host", "backend")
LEVELS = (1, 8, 16)


def measurements() -> list[dict]:
    """lab/data/served_overhead.yaml served_streams, the repetitions of each mode averaged per level."""
    out = []
    for m in facts.load("served_overhead")["served_streams"]:
        served = {mode: {int(b): sum(r[b] for r in runs) / len(runs) for b in runs[0]}
                  for mode, runs in m["served_tok_s"].items()}
        out.append({**m, "batched": {int(b): float(v) for b, v in m["batched_bench_tok_s"].items()}, "served": served})
    return out


def server_ms(m: dict, mode: str, b: int) -> float:
    """The server's ms per step at b streams in a measurement: served step − batched step."""
    return 1000.0 * b / m["served"][mode][b] - 1000.0 * b / m["batched"][b]


def fit(ms: list[dict], mode: str) -> dict:
    """{per_stream_ms, per_step_ms, points}: least squares of server ms on [B, B ≥ 2] over the measurements, the
    per-stream term held at 0 when the free fit makes it negative (then per_step is the mean at 2+ streams)."""
    pts = [(b, server_ms(m, mode, b)) for m in ms for b in m["served"][mode]]
    n1 = [(b, y) for b, y in pts if b > 1]
    sxx = sum(b * b for b, _ in pts)
    sxz = sum(b for b, _ in n1)
    szz = len(n1)
    sxy = sum(b * y for b, y in pts)
    szy = sum(y for _, y in n1)
    det = sxx * szz - sxz * sxz
    s = (sxy * szz - sxz * szy) / det if det else 0.0
    q = (sxx * szy - sxz * sxy) / det if det else 0.0
    if s < 0:
        s, q = 0.0, szy / szz if szz else 0.0
    return {"per_stream_ms": s, "per_step_ms": q, "points": [m["id"] for m in ms]}


@functools.lru_cache(maxsize=2)
def terms(mode: str) -> dict:
    """The server terms fitted on every measured card (`fit`)."""
    return fit(measurements(), mode)


def hopper_growth_ms(b: int) -> float:
    """Mean batched-step growth from 1 to b streams over the measured cards (ms)."""
    ms = [m for m in measurements() if b in m["batched"]]
    return sum(1000.0 * b / m["batched"][b] - 1000.0 / m["batched"][1] for m in ms) / len(ms)


def batched_step_ms(gpu_id: str | None, b: int, plain_tok_s: float | None) -> tuple[float | None, str]:
    """(batched step ms at b streams, where it came from): measured on the card, else the card's predicted plain ms +
    the measured cards' growth (FALLBACK)."""
    for m in measurements():
        if m["gpu_id"] == gpu_id and b in m["batched"]:
            return 1000.0 * b / m["batched"][b], f"llama-batched-bench on this card ({m['id']})"
    if not plain_tok_s:
        return None, "no plain prediction for the card"
    if b == 1:
        return 1000.0 / plain_tok_s, "the card's predicted plain ms per token"
    return (1000.0 / plain_tok_s + hopper_growth_ms(b),
            f"FALLBACK: the card's predicted plain ms + the H100/H200's measured growth to {b} streams "
            f"({hopper_growth_ms(b):.1f} ms; a slower card's compute makes it larger: an upper bound)")


def aggregate(gpu_id: str | None, b: int, mode: str, plain_tok_s: float | None = None, t: dict | None = None) -> dict:
    """Decode tok/s summed over b streams through llama-server with `mode` sampling ("host", or "backend" = -bs):
    {tok_s, step_ms, batched_ms, server_ms, batched_from}."""
    t = t or terms(mode)
    batched, how = batched_step_ms(gpu_id, b, plain_tok_s)
    if batched is None:
        return {"tok_s": None, "step_ms": None, "batched_ms": None, "server_ms": None, "batched_from": how}
    server = t["per_stream_ms"] * b + (t["per_step_ms"] if b > 1 else 0.0)
    return {"tok_s": 1000.0 * b / (batched + server), "step_ms": batched + server, "batched_ms": batched,
            "server_ms": server, "batched_from": how}


def check() -> dict:
    """Each measured card left out of the server fit and predicted from the others, at every measured level and both
    modes: {"rows": [{card, mode, streams, measured, predicted, error, in_sample, in_sample_error}], "max_abs_error"}."""
    ms = measurements()
    rows = []
    for m in ms:
        for mode in MODES:
            held = fit([x for x in ms if x is not m], mode)
            for b in sorted(m["served"][mode]):
                got = m["served"][mode][b]
                p = aggregate(m["gpu_id"], b, mode, None, held)["tok_s"]
                i = aggregate(m["gpu_id"], b, mode, None, terms(mode))["tok_s"]
                rows.append({"card": m["gpu_id"], "mode": mode, "streams": b, "measured": got, "predicted": p,
                             "error": p / got - 1, "in_sample": i, "in_sample_error": i / got - 1})
    return {"rows": rows, "max_abs_error": max(abs(r["error"]) for r in rows if r["streams"] > 1)}


def profile_rows(profile, plain_tok_s: float | None, levels: tuple = (8, 16)) -> list[dict]:
    """What `lab plan` shows for a GPU llama.cpp profile: the aggregate at `levels` with host sampling and with -bs,
    the gain, and whether the profile already passes -bs. [] for a CPU or vLLM profile."""
    from lab.predict import roofline

    if profile.gpu_count == 0 or profile.engine not in ("llama.cpp", "llama-cpp-python"):
        return []
    spec = roofline.gpu_spec_for(profile.gpu_name_pattern or profile.name)
    gpu_id = spec["id"] if spec else None
    has_bs = any(a in ("-bs", "--backend-sampling") for a in (profile.server_args or []))
    out = []
    for b in levels:
        host, back = aggregate(gpu_id, b, "host", plain_tok_s), aggregate(gpu_id, b, "backend", plain_tok_s)
        if host["tok_s"] is None:
            continue
        out.append({"streams": b, "host_tok_s": host["tok_s"], "bs_tok_s": back["tok_s"],
                    "gain": back["tok_s"] / host["tok_s"] - 1, "batched_from": host["batched_from"],
                    "server_host_ms": host["server_ms"], "server_bs_ms": back["server_ms"], "profile_has_bs": has_bs})
    return out


def how() -> str:
    h, b = terms("host"), terms("backend")
    return (f"server per step = {h['per_stream_ms']:.2f} ms x streams + {h['per_step_ms']:.1f} ms with host sampling, "
            f"{b['per_stream_ms']:.2f} ms x streams + {b['per_step_ms']:.1f} ms with -bs (fitted on "
            f"{', '.join(h['points'])}: lab/data/served_overhead.yaml served_streams)")


__all__ = ["MODES", "measurements", "fit", "terms", "aggregate", "batched_step_ms", "check", "profile_rows", "how"]
