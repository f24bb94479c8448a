"""What should happen on a profile's hardware, worked out without the hardware.

`plan(profile)` is pure: it reads only the profile object and the lab's own data (lab/data/), never a
GPU, a process or the network. It composes parts — today the compatibility findings; the memory fit
and the speed ceiling join the same dict as further keys — so `lab plan --json` and the notebooks
read one shape.
"""
from __future__ import annotations

from pathlib import Path

from lab import compat
from lab.profiles import Profile, load


def compat_part(profile: Profile) -> dict:
    """The compatibility rules judged on what the profile declares."""
    findings = compat.evaluate(compat.facts_from_profile(profile))
    return {"findings": [f.to_dict() for f in findings]}


def plan(profile: Profile | str | Path) -> dict:
    """{"profile": name, "findings": [{"id", "severity", "message", "fix", "source"}, ...]}.

    A name or path is loaded (and validated) first; a Profile is used as given.
    """
    prof = profile if isinstance(profile, Profile) else load(profile)
    result: dict = {"profile": prof.name}
    result.update(compat_part(prof))
    return result


def describe(result: dict) -> str:
    """The plan as plain text for a terminal: one block per finding, errors first."""
    findings = result["findings"]
    counts = {s: sum(f["severity"] == s for f in findings) for s in ("error", "warn", "info")}
    lines = [f"profile {result['profile']}: {counts['error']} error(s), {counts['warn']} warning(s), "
             f"{counts['info']} note(s)"]
    for f in findings:
        lines.append(f"  [{f['severity']}] {f['id']}: {f['message']}")
        lines.append(f"      fix:    {f['fix']}")
        lines.append(f"      source: {f['source']}")
    if not findings:
        lines.append("  no compatibility problems found in what the profile declares")
    return "\n".join(lines)
