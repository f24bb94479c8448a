"""The claims ledger judged once, for every view: each claim of lab/data/seed_claims.yaml (lab.predict.claims_ledger)
gets one verdict from its test kind's evaluator (lab.predict.claim_evaluators), with the numbers behind it.
Notebooks 03 (sizes), 05 (KV and layers), 06 (all, with speed against measurement) and `lab plan` show views
of the same verdicts (lab.predict.claims_views).

`plan_part(profile)` is what `lab plan --json` adds: the profile's roofline (lab.predict.profile_speed) and
every claim's verdict.
"""
from __future__ import annotations

from lab.predict import profile_speed
from lab.predict.claim_evaluators import EVALUATORS
from lab.predict.claims_ledger import VERDICTS, ClaimVerdict, claims


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


def measured_from_sweep(profile, hardware: dict | None, stream_decode_tok_s: float | None,
                        output_throughput: dict | None, context_tokens: int | None) -> dict:
    """What a benchmark run measured, in the shape `judge` compares with: the GPU seen (name, count),
    the engine, one stream's decode tok/s, output throughput by concurrency (the run summary's names,
    lab/data/fields.yaml), and the context it ran at."""
    gpus = (hardware or {}).get("gpus") or []
    return {"hardware": {"gpu_name": gpus[0].get("name") if gpus else None, "gpu_count": len(gpus)},
            "engine": profile.engine, "stream_decode_tok_s": stream_decode_tok_s,
            "output_throughput": dict(output_throughput or {}), "context_tokens": context_tokens}


def plan_part(profile) -> dict:
    """What `lab plan --json` adds: the decode ceiling, the calibrated prediction, and every claim's
    verdict (physics, arithmetic and documentation only: a plan measures nothing)."""
    rl = profile_speed.roofline_for(profile)
    items = verdicts(profile)
    return {"decode_ceiling_tok_s": rl["decode_ceiling_tok_s"], "predicted_decode_tok_s": rl["predicted_decode_tok_s"],
            "roofline": rl, "claims": [{"id": x.id, "verdict": x.verdict, "why": x.explanation} for x in items],
            "claim_counts": counts(items)}
