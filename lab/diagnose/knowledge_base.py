"""The troubleshooting knowledge base and its conditions: lab/data/troubleshooting.yaml (loaded through
`lab.core.facts`) as validated `Entry`s, and the facts those entries' conditions are judged on.

Each entry has regexes tried against every log line (lab.diagnose.troubleshoot does the matching),
optional conditions on facts the lab collected (compute capability, versions, NVML counters, check
results), a cause, a fix and its sources.

* `load_kb()` reads and validates the YAML once (bad regexes or ids fail loudly).
* `derive_facts(facts)` flattens whatever facts were passed (lab.measure.inventory.collect's dict, a
  manifest, lab.core.evidence.gpu_summary, versions, checks) into the few keys the conditions use.
* `condition_holds` / `conditions_hold` judge conditions on those keys: True, False, or None (unknown).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable

from lab.core import facts as facts_data
from lab.core.versions import version_tuple

KB_NAME = "troubleshooting"
SEVERITIES = ("error", "warn", "info")
SEVERITY_RANK = {"error": 0, "warn": 1, "info": 2}
OPS = ("<", "<=", ">", ">=", "==", "!=", "in", "not_in", "contains", "matches")


@dataclass(frozen=True)


class Entry:
    """One known problem (a row of lab/data/troubleshooting.yaml, regexes compiled)."""

    id: str
    title: str
    severity: str
    cause: str
    fix: str
    source: tuple[str, ...]
    commands: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    matchers: tuple[re.Pattern, ...] = ()
    unless: tuple[re.Pattern, ...] = ()
    context: tuple[re.Pattern, ...] = ()
    conditions: tuple[dict, ...] = ()
    conditions_mode: str = "all"
    facts_alone: bool = False
    info_when: tuple[dict, ...] = ()
    supersedes: tuple[str, ...] = ()
    # Facts that must not be known false for the entry to apply at all (e.g. "the profile expects a GPU":
    # a CPU profile's "offloaded 0/31 layers" is by design, not a problem to fix). Unknown still applies.
    requires: tuple[dict, ...] = ()


def _compile(entry_id: str, key: str, patterns) -> tuple[re.Pattern, ...]:
    out = []
    for p in patterns or ():
        try:
            out.append(re.compile(p, re.IGNORECASE))
        except re.error as exc:
            raise facts_data.DataError(f"{KB_NAME}.yaml: entry {entry_id!r}, {key}: bad regex {p!r}: {exc}") from exc
    return tuple(out)


def _check_condition(entry_id: str, cond: Any) -> dict:
    where = f"{KB_NAME}.yaml: entry {entry_id!r}, condition {cond!r}"
    if not isinstance(cond, dict):
        raise facts_data.DataError(f"{where}: must be a mapping")
    if "check" in cond:
        re.compile(cond["check"])
        if not set(cond.get("status", [])) <= {"fail", "warn", "pass", "skip"}:
            raise facts_data.DataError(f"{where}: status must be among fail/warn/pass/skip")
        return cond
    if "fact" not in cond or cond.get("op") not in OPS or "value" not in cond:
        raise facts_data.DataError(f"{where}: needs fact, op (one of {', '.join(OPS)}) and value")
    return cond


def _entry(raw: dict) -> Entry:
    eid = raw.get("id")
    for key in ("id", "title", "severity", "cause", "fix", "source"):
        if not raw.get(key):
            raise facts_data.DataError(f"{KB_NAME}.yaml: entry {eid!r} has no {key!r}")
    if raw["severity"] not in SEVERITIES:
        raise facts_data.DataError(f"{KB_NAME}.yaml: entry {eid!r}: severity must be one of {SEVERITIES}")
    if not raw.get("matchers") and not raw.get("facts_alone"):
        raise facts_data.DataError(f"{KB_NAME}.yaml: entry {eid!r} has neither matchers nor facts_alone")
    if raw.get("conditions_mode", "all") not in ("all", "any"):
        raise facts_data.DataError(f"{KB_NAME}.yaml: entry {eid!r}: conditions_mode must be all or any")
    source = raw["source"] if isinstance(raw["source"], list) else [raw["source"]]
    return Entry(
        id=eid, title=raw["title"], severity=raw["severity"], cause=raw["cause"].strip(), fix=raw["fix"].strip(),
        source=tuple(str(s) for s in source), commands=tuple(raw.get("commands") or ()),
        tools=tuple(raw.get("tools") or ()),
        matchers=_compile(eid, "matchers", raw.get("matchers")), unless=_compile(eid, "unless", raw.get("unless")),
        context=_compile(eid, "context", raw.get("context")),
        conditions=tuple(_check_condition(eid, c) for c in raw.get("conditions") or ()),
        conditions_mode=raw.get("conditions_mode", "all"), facts_alone=bool(raw.get("facts_alone")),
        info_when=tuple(_check_condition(eid, c) for c in raw.get("info_when") or ()),
        supersedes=tuple(raw.get("supersedes") or ()),
        requires=tuple(_check_condition(eid, c) for c in raw.get("requires") or ()),
    )


@lru_cache(maxsize=1)


def load_kb() -> tuple[Entry, ...]:
    """All entries of lab/data/troubleshooting.yaml, validated (unique ids, regexes compile)."""
    data = facts_data.load(KB_NAME, "entries")
    entries = tuple(_entry(raw) for raw in data["entries"])
    ids = [e.id for e in entries]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise facts_data.DataError(f"{KB_NAME}.yaml: duplicate ids {dupes}")
    unknown = sorted({s for e in entries for s in e.supersedes} - set(ids))
    if unknown:
        raise facts_data.DataError(f"{KB_NAME}.yaml: supersedes names unknown ids {unknown}")
    return entries


def _version_tuple(value: Any) -> tuple[int, ...] | None:
    """lab.core.versions.version_tuple of a fact, or None when it holds no version (unknown, not an error)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    try:
        return version_tuple(value)
    except ValueError:
        return None


def _find_key(obj: Any, key: str, depth: int = 0):
    """The first value under `key` anywhere in nested dicts/lists (breadth of a manifest/record)."""
    if depth > 6:
        return None
    if isinstance(obj, dict):
        if key in obj and obj[key] is not None:
            return obj[key]
        for v in obj.values():
            found = _find_key(v, key, depth + 1)
            if found is not None:
                return found
    elif isinstance(obj, list):
        for v in obj:
            found = _find_key(v, key, depth + 1)
            if found is not None:
                return found
    return None


def _cc_float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def derive_facts(facts: dict | None) -> dict:
    """Flatten collected facts into the keys the knowledge base's conditions use.

    Accepts lab.measure.inventory.collect() ({"nvml": {...}, "gpus": [...], "host": {...}}),
    lab.core.evidence.gpu_summary() ({"gpus", "driver", "cuda_driver"}), a manifest or record holding
    either, plus optional "versions" ({"torch", "torch_cuda", "nvcc"/"cuda_toolkit", ...}),
    "torch_arch_list", "os", "is_wsl" and "checks" (Check dicts). Keys that cannot be worked out
    are absent, so a condition on them is "unknown" rather than false.
    """
    if not facts:
        return {}
    out: dict = {}
    gpus = _find_key(facts, "gpus")
    if isinstance(gpus, list):
        out["gpu_count"] = len(gpus)
        ccs = [c for c in (_cc_float(g.get("compute_capability")) for g in gpus if isinstance(g, dict)) if c]
        if ccs:
            out["min_compute_capability"] = min(ccs)
            out["max_compute_capability"] = max(ccs)
        links = [link for g in gpus if isinstance(g, dict) for link in (g.get("nvlink_links") or [])]
        if links:
            out["nvlink_links_active"] = sum(1 for link in links if link.get("active"))
            out["nvlink_links_inactive"] = sum(1 for link in links if not link.get("active"))
        for key in ("ecc_uncorrected_volatile", "retired_pages_dbe"):
            vals = [g.get(key) for g in gpus if isinstance(g, dict) and isinstance(g.get(key), int)]
            if vals:
                out["ecc_uncorrected" if key.startswith("ecc") else key] = sum(vals)
        reasons = [r for g in gpus if isinstance(g, dict) for r in (g.get("throttle_reasons") or [])]
        if any(isinstance(g, dict) and g.get("throttle_reasons") is not None for g in gpus):
            out["thermal_throttle"] = any(re.search(r"thermal|HW slowdown|power brake", r, re.I) for r in reasons)
    for key in ("driver", "cuda_driver"):
        value = _find_key(facts, key)
        if isinstance(value, str):
            out[key] = value
    if "driver" in out and _version_tuple(out["driver"]):
        out["driver_major"] = _version_tuple(out["driver"])[0]
    versions = _find_key(facts, "versions") or _find_key(facts, "packages") or {}
    if not isinstance(versions, dict):
        versions = {}
    toolkit = facts.get("cuda_toolkit") or facts.get("nvcc") or versions.get("cuda_toolkit") or versions.get("nvcc")
    if toolkit:
        out["cuda_toolkit"] = str(toolkit)
    torch_v = facts.get("torch") or versions.get("torch")
    if torch_v:
        out["torch"] = str(torch_v)
    torch_cuda = facts.get("torch_cuda") or versions.get("torch_cuda")
    if not torch_cuda and isinstance(torch_v, str) and "+cu" in torch_v:
        digits = torch_v.split("+cu", 1)[1]
        torch_cuda = f"{digits[:-1]}.{digits[-1]}" if digits.isdigit() and len(digits) >= 3 else None
    if torch_cuda:
        out["torch_cuda"] = str(torch_cuda)
    arch_list = facts.get("torch_arch_list") or versions.get("torch_arch_list")
    if isinstance(arch_list, list) and "min_compute_capability" in out:
        needed = {f"sm_{int(round(c * 10))}" for c in ccs}
        out["torch_lacks_gpu_arch"] = not needed <= set(arch_list)
    built_for = out.get("torch_cuda") or out.get("cuda_toolkit")
    if built_for and out.get("cuda_driver") and _version_tuple(built_for) and _version_tuple(out["cuda_driver"]):
        out["driver_cuda_older_than_toolkit"] = _version_tuple(out["cuda_driver"])[:2] < _version_tuple(built_for)[:2]
    os_name = facts.get("os") or _find_key(facts, "os")
    if isinstance(os_name, str):
        out["os"] = os_name
        out.setdefault("is_wsl", bool(re.search(r"microsoft|wsl", os_name, re.I)))
    if isinstance(facts.get("is_wsl"), bool):
        out["is_wsl"] = facts["is_wsl"]
    expected = facts.get("profile_gpu_count")
    if isinstance(expected, int) and not isinstance(expected, bool):
        out["profile_gpu_count"] = expected
    checks = facts.get("checks")
    if isinstance(checks, list):
        out["checks"] = [c for c in checks if isinstance(c, dict) and "name" in c and "status" in c]
    return out


def _compare(op: str, have: Any, want: Any) -> bool | None:
    if op == "matches":
        return bool(re.search(str(want), str(have)))
    if op in ("in", "not_in"):
        inside = have in (want or [])
        return inside if op == "in" else not inside
    if op == "contains":
        return want in have if isinstance(have, (list, tuple, set, str)) else None
    if isinstance(have, bool) or isinstance(want, bool):
        a, b = have, want
    elif isinstance(have, (int, float)) and isinstance(want, (int, float)):
        a, b = have, want
    else:
        a, b = _version_tuple(have), _version_tuple(want)
        if a is None or b is None:
            a, b = str(have), str(want)
    try:
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[op]
    except TypeError:
        return None


def condition_holds(cond: dict, derived: dict) -> bool | None:
    """True/False, or None when the facts needed are missing (unknown is not false)."""
    if "check" in cond:
        checks = derived.get("checks")
        if checks is None:
            return None
        pattern, statuses = re.compile(cond["check"]), set(cond.get("status", ["fail", "warn"]))
        return any(pattern.search(str(c["name"])) and c["status"] in statuses for c in checks)
    if cond["fact"] not in derived:
        return None
    return _compare(cond["op"], derived[cond["fact"]], cond["value"])


def conditions_hold(conds: Iterable[dict], derived: dict, mode: str = "all") -> bool | None:
    results = [condition_holds(c, derived) for c in conds]
    if not results:
        return None
    if mode == "any":
        return True if any(r is True for r in results) else (False if all(r is False for r in results) else None)
    if any(r is False for r in results):
        return False
    return True if all(r is True for r in results) else None


def describe_conditions(conds: Iterable[dict], derived: dict) -> str:
    parts = []
    for c in conds:
        if condition_holds(c, derived) is not True:
            continue
        if "check" in c:
            names = [f"{x['name']} ({x['status']})" for x in derived.get("checks", [])
                     if re.search(c["check"], str(x["name"])) and x["status"] in set(c.get("status", []))]
            parts.append("check " + ", ".join(names))
        else:
            parts.append(f"{c['fact']}={derived[c['fact']]!r} ({c['op']} {c['value']!r})")
    return "; ".join(parts)
