"""Plan mode: a run for hardware that is not here. Every notebook does what needs no such hardware and says plainly
what was not run; its records carry `mode: plan`, and the report and `lab compare` label its numbers "predicted".

A run is in plan mode when the user asked for it (`lab run --plan-only`: the runner hands LAB_PLAN_ONLY=1 to the
kernels) or when the profile wants GPUs this machine does not have (a buyer's run of a V100 profile on a laptop):
measuring there would only measure the wrong machine. One answer for "which mode is this?": `reason(profile)`.
"""
from __future__ import annotations

import functools
import os
import re

from lab.core import evidence
from lab.core.checks import Check

PLAN_ENV = "LAB_PLAN_ONLY"
NOT_RUN = "not-run"  # a check's status in plan mode: it would run on the profile's hardware, it did not run here
NOT_HERE = "this machine is not the profile's hardware: GPU checks are not run (plan mode)"
ASKED = "plan only (--plan-only): nothing is measured; every number is predicted from the profile and lab/data"


@functools.lru_cache(maxsize=1)
def _gpu_names() -> tuple[str, ...]:
    return tuple(g.get("name") or "" for g in evidence.gpu_summary()["gpus"])


def matching_gpus(profile, gpu_names=None) -> int:
    """How many of this machine's GPUs (or of `gpu_names`, an inventory's) are the profile's card (its
    gpu_name_pattern; any GPU when it sets none)."""
    pattern = getattr(profile, "gpu_name_pattern", None)
    names = _gpu_names() if gpu_names is None else gpu_names
    return sum(1 for n in names if not pattern or re.search(pattern, n or ""))


def remote_endpoint(profile) -> bool:
    """A server the user runs elsewhere (endpoint_url not on this machine): its GPUs are that machine's, not these."""
    url = getattr(profile, "endpoint_url", None)
    return bool(url) and not any(h in url for h in ("://127.0.0.1", "://localhost", "://[::1]"))


def reason(profile, gpu_names=None) -> str | None:
    """Why this run of `profile` is in plan mode, or None when it measures (the profile's hardware is here).
    `gpu_names`: the GPUs an inventory the caller holds saw (default: this machine's, from NVML)."""
    # the missing hardware first: it is the reason a reader needs, --plan-only or not
    if profile.gpu_count > 0 and not remote_endpoint(profile) and matching_gpus(profile, gpu_names) < profile.gpu_count:
        return NOT_HERE
    if os.environ.get(PLAN_ENV) == "1":
        return ASKED
    return None


def mode(profile) -> str:
    return "plan" if reason(profile) else "measure"


def not_run(found: list[Check], why: str) -> list[Check]:
    """The checks a notebook would make on the profile's hardware, as `not-run`: what each expects stays, nothing
    observed on this machine is compared with it (it is not the machine the profile describes)."""
    return [Check(c.name, NOT_RUN, f"not run: {why}", c.expected,
                  "run `lab run --profile PROFILE` on the profile's machine to make this check", c.source)
            for c in found]


def card_only(checks: list[dict], why: str) -> list[dict]:
    """A plan-mode record's checks with those only the profile's hardware can answer as `not-run`: a check a step
    skipped because of plan mode (its reason says `why`: notebook 04's server checks, KV parity, layers on the GPU,
    the benchmark) was not skipped as "not on this profile", it is waiting for the card. A skip for another reason (a
    multi-GPU check on a one-GPU profile) stays a skip."""
    out = []
    for c in checks:
        said = f"{c.get('observed') or ''} {c.get('fix') or ''}" if isinstance(c, dict) else ""
        if isinstance(c, dict) and c.get("status") == "skip" and why and why in said:
            c = {**c, "status": NOT_RUN, "observed": f"not run: {c.get('fix') or c.get('observed')}",
                 "fix": "run `lab run --profile PROFILE` on the profile's machine to make this check"}
        out.append(c)
    return out


def label(value, mode_: str | None):
    """A number for a table: in a plan-mode run every value is a prediction, never shown as a measurement."""
    if mode_ != "plan" or value is None:
        return value
    return f"{value} (predicted)"
