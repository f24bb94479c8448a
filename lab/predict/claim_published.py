"""Speed claims held against published measurements: a claim whose test names rows of lab/data/public_speed.yaml
(`published: [row ids]`: the claim's own card, engine and quant, no speculation) is judged on them when the lab has
no measurement of its own from that hardware (lab.predict.claim_evaluators calls `judge` after its own checks).

The rows are taken at the claim's context, the sequence length while decoding:
  * a claim without a context is compared with the rows measured on a short prompt (depth_tokens null);
  * a row within 25 % of the claim's context is compared directly (the tolerance lab.predict.claim_evaluators
    applies to its own measurements);
  * between a shallower and a deeper row the time per token is interpolated linearly in depth (decode reads the
    weights plus the KV cache, which grows linearly with the depth: lab.predict.roofline), a short prompt counted
    as depth 0;
  * with rows on one side only, they bound the speed: a shallower row is at least as fast, a deeper one at most.
A claim agrees when the published speed lies within the claim's range widened by the tolerance (as a measurement of
the lab's own, lab.predict.claim_evaluators._against_measurement); it is "contradicted by measurement" (published)
when it lies outside; otherwise (a bound that does not decide) "not testable here".
"""
from __future__ import annotations

from lab.core import facts
from lab.predict import public_speed

NEAR = 0.25  # a row within 25 % of the claim's context counts as measured at it


def _rows(ids: list[str]) -> list[public_speed.Row]:
    rows = {r.id: r for r in public_speed.load()}
    missing = [i for i in ids if i not in rows]
    if missing:
        raise facts.DataError(f"seed_claims.yaml: published rows {missing} are not in lab/data/public_speed.yaml")
    return [rows[i] for i in ids]


def _name(r: public_speed.Row) -> str:
    depth = "short prompt" if r.depth_tokens is None else f"{r.depth_tokens:,} tokens deep"
    return f"{r.id} {r.decode_tok_s:g} tok/s ({r.engine} {r.build or ''}".rstrip() + f", {depth})"


def estimate(rows: list[public_speed.Row], context: int | None) -> dict:
    """What the rows say at `context`: {kind: direct | interpolated | at most | at least | none, lo, hi, rows, how}."""
    if context is None:
        near = [r for r in rows if r.depth_tokens is None]
    else:
        near = [r for r in rows if r.depth_tokens is not None and abs(r.depth_tokens - context) <= NEAR * context]
    if near:
        speeds = [r.decode_tok_s for r in near]
        return {"kind": "direct", "lo": min(speeds), "hi": max(speeds), "rows": [r.id for r in near],
                "how": "; ".join(_name(r) for r in near)}
    if context is None:
        return {"kind": "none", "lo": None, "hi": None, "rows": [], "how": "no published row on a short prompt"}
    below = [r for r in rows if (r.depth_tokens or 0) <= context]
    above = [r for r in rows if (r.depth_tokens or 0) >= context]
    if below and above:
        a = max(below, key=lambda r: r.depth_tokens or 0)
        b = min(above, key=lambda r: r.depth_tokens or 0)
        da, db = a.depth_tokens or 0, b.depth_tokens or 0
        t = 1 / a.decode_tok_s + (1 / b.decode_tok_s - 1 / a.decode_tok_s) * (context - da) / (db - da)
        return {"kind": "interpolated", "lo": 1 / t, "hi": 1 / t, "rows": [a.id, b.id],
                "how": (f"{1 / t:.1f} tok/s at {context:,} tokens, the time per token interpolated linearly in depth "
                        f"between {_name(a)} and {_name(b)}")}
    if below:
        a = min(below, key=lambda r: r.decode_tok_s)
        return {"kind": "at most", "lo": None, "hi": a.decode_tok_s, "rows": [a.id],
                "how": f"at most {a.decode_tok_s:g} tok/s at {context:,} tokens: {_name(a)} is shallower"}
    if above:
        b = max(above, key=lambda r: r.decode_tok_s)
        return {"kind": "at least", "lo": b.decode_tok_s, "hi": None, "rows": [b.id],
                "how": f"at least {b.decode_tok_s:g} tok/s at {context:,} tokens: {_name(b)} is deeper"}
    return {"kind": "none", "lo": None, "hi": None, "rows": [], "how": "no published row"}


def judge(claim: dict, tolerance: float) -> tuple[str, str, dict] | None:
    """(verdict, why, numbers) from the claim's published rows; None when its test names none."""
    ids = claim["test"].get("published")
    if not ids:
        return None
    return judge_rows(claim, _rows(ids), tolerance)


def judge_rows(claim: dict, rows: list[public_speed.Row], tolerance: float) -> tuple[str, str, dict]:
    """(verdict, why, numbers) of a speed claim against `rows` (the claim's own, or the published rows of the route
    the lab recommends for its set-up: lab.predict.claim_evaluators)."""
    context = claim["condition"].get("context_tokens")
    est = estimate(rows, context)
    vals = claim["value"] if isinstance(claim["value"], list) else [claim["value"]]
    lo, hi = float(min(vals)), float(max(vals))
    too_high = est["hi"] is not None and lo * (1 - tolerance) > est["hi"]
    too_low = not claim.get("at_least") and est["lo"] is not None and hi * (1 + tolerance) < est["lo"]
    claimed = f"{lo:g}" if lo == hi else f"{lo:g}–{hi:g}"
    where = f"at {context:,} tokens" if context else "on a short prompt"
    numbers = {**est, "claimed": [lo, hi], "tolerance": tolerance, "sources": sorted({r.source for r in rows})}
    text = f"published (lab/data/public_speed.yaml) {where}: {est['how']}"
    if too_high or too_low:
        edge = f"{lo * (1 - tolerance):.1f}" if too_high else f"{hi * (1 + tolerance):.1f}"
        return ("contradicted by measurement", f"{text} — {'below' if too_high else 'above'} the claimed {claimed} "
                f"tok/s {'less' if too_high else 'plus'} {tolerance:.0%} ({edge})", numbers)
    if est["kind"] in ("direct", "interpolated"):
        return "consistent", f"{text} — within the claimed {claimed} tok/s (±{tolerance:.0%})", numbers
    return "not testable here", f"{text} — does not decide the claimed {claimed} tok/s", numbers


def route_rows(best: dict) -> list:
    """The published rows of the recommended route's own set-up: same card and card count, same engine, the same
    speculation (draft-mtp at the chosen n-max, or none), no outlier note, drafts not gated."""
    from lab.predict import mtp_model, public_speed

    r, n = best, (best["model"].get("mtp") or {}).get("n_max")
    out = []
    for row in public_speed.load():
        if not (row.gpu_id and r["card_id"] and public_speed.same_card(row.gpu_id, r["card_id"])
                and row.gpu_count == r["gpus"] and row.outlier is None and row.engine == "llama.cpp"
                and r["engine"] == "llama.cpp" and (row.split_mode == r["split"] or r["gpus"] == 1)):
            continue
        if n is None and row.speculative is None:
            out.append(row)
        elif n is not None and mtp_model.is_draft_mtp(row) and row.speculative.n_max == n and not mtp_model.is_gated(row):
            out.append(row)
    return out


def route_verdict(claim: dict, depth: int, tolerance: float) -> tuple[str, str, dict] | None:
    """A one-stream speed claim against the route the lab recommends for its set-up (card_speed.best_route): named,
    with its prediction and, where there are any, the published rows of that route (claim_published.judge_rows).
    Consistent when those rows agree (or, without rows, when the prediction is within the tolerance); None when the
    route is plain decoding (the claim's own rows already judge that) or has no prediction."""
    from lab.predict import card_speed

    cond = claim["condition"]
    ask = card_speed.Ask(gpu=cond["gpu"], gpus=int(cond.get("gpus", 1)), engine=cond.get("engine", "llama.cpp"),
                         quant=cond.get("quant"), depth=depth,
                         split="tensor" if cond.get("tensor_parallel") else None)
    route = card_speed.best_route(ask)
    best = route["best"]
    if not route["mtp_chosen"] or not best["predicted_tok_s"]:
        return None
    vals = claim["value"] if isinstance(claim["value"], list) else [claim["value"]]
    lo, hi = float(min(vals)), float(max(vals))
    name = f"the lab's recommended route for this set-up, {best['route']}: predicted {best['predicted_tok_s']:.1f} tok/s"
    numbers = {"route": best["route"], "predicted_tok_s": best["predicted_tok_s"],
               "plain_tok_s": (route["plain"] or {}).get("predicted_tok_s")}
    rows = route_rows(best)
    if rows:
        verdict, why, pub = judge_rows(claim, rows, tolerance)
        numbers["published"] = pub
        if verdict != "not testable here":
            return verdict, f"judged against {name}; {why}", numbers
    p = best["predicted_tok_s"]
    ok = lo * (1 - tolerance) <= p <= hi * (1 + tolerance)
    return ("not testable here", f"judged against {name} ({'within' if ok else 'outside'} the claimed "
            f"{lo:g}{'' if lo == hi else f'–{hi:g}'} ±{tolerance:.0%}); no published row of that route decides it",
            numbers)



__all__ = ["judge", "judge_rows", "estimate", "route_rows", "route_verdict", "NEAR"]
