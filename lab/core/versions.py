"""Version numbers as the lab compares them: one parser for every caller (engine rules, compatibility
rules, the by-hand build, the troubleshooting conditions), so "0.10.1.post1" means the same everywhere."""
from __future__ import annotations

import re

# The release part: the first run of dot-separated numbers, after an optional "v" ("v0.4.2").
_RELEASE = re.compile(r"v?(\d+(?:\.\d+)*)")


def version_tuple(version) -> tuple[int, ...]:
    """The release numbers of a version, to compare as a tuple.

    "0.10.1.post1" → (0, 10, 1); "v0.11.0rc1" → (0, 11, 0); "2.7.1+cu126" → (2, 7, 1); "535.129.03" →
    (535, 129, 3); 12.2 → (12, 2). Pre-, post- and dev-release tags and local labels do not count: a
    release candidate already has what the rules date to its release, and a post release repackages it.
    ValueError when there is no number in it ("latest")."""
    m = _RELEASE.search(str(version))
    if not m:
        raise ValueError(f"not a version number: {version!r}")
    return tuple(int(x) for x in m.group(1).split("."))


def at_least(version, threshold) -> bool:
    """Whether `version` is `threshold` or later (missing parts count as 0: "0.18" is "0.18.0")."""
    a, b = version_tuple(version), version_tuple(threshold)
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) >= b + (0,) * (width - len(b))


def compute_capability(value) -> tuple[int, int] | None:
    """A GPU's compute capability as NVML, nvidia-smi or a profile writes it ("7.0", 8.9, "12.0") → (major, minor),
    to compare as a tuple; None for none. One parser for the engine rules and the compatibility rules."""
    if value is None or value == "":
        return None
    major, _, minor = str(value).strip().partition(".")
    return int(major), int(minor or 0)


def cc_x10(value) -> int:
    """Compute capability as an integer ×10 (7.0 → 70, "8.9" → 89, 12.0 → 120), as the compatibility data writes it."""
    major, minor = compute_capability(value)
    return major * 10 + minor


__all__ = ["version_tuple", "at_least", "compute_capability", "cc_x10"]
