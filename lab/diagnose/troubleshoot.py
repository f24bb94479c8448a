"""Recognise known problems in logs and in what the lab measured, and say what to do (`lab doctor`).

The knowledge base is data: lab/data/troubleshooting.yaml (loaded through `lab.core.facts`). Each entry
has regexes tried against every log line, optional conditions on facts the lab collected (compute
capability, versions, NVML counters, check results), a cause, a fix and its sources.

Layers, so the matching can be tested without files or hardware:

* `load_kb()` reads and validates the YAML once (bad regexes or ids fail loudly).
* `derive_facts(facts)` flattens whatever facts were passed (lab.measure.inventory.collect's dict, a
  manifest, lab.core.evidence.gpu_summary, versions, checks) into the few keys the conditions use.
* `match_text(text, facts)` is pure: text and facts in, ranked `Finding`s out.
* `diagnose(source, facts)` takes log text, a log file or a run folder; for a run folder it reads
  logs/*.log, the checks and facts in records/*.json and manifest.json, and the error outputs of
  the executed notebooks. Logs under logs/repro/ are errors reproduced on purpose (notebook 07)
  and are skipped unless `include_repro=True`.
* `findings_table` / `format_findings` / `doctor_exit_code` show and judge the result.
"""
from __future__ import annotations

import bisect
import json
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from lab.core import facts as facts_data
from lab.core.evidence import redact
from lab.core.versions import version_tuple

KB_NAME = "troubleshooting"
SEVERITIES = ("error", "warn", "info")
SEVERITY_RANK = {"error": 0, "warn": 1, "info": 2}
BASE_SCORE = {"error": 30, "warn": 20, "info": 10}
CONFIRMED_BONUS = 10  # the facts the lab collected agree with what the log says
CONTEXT_BONUS = 5  # the log names the situation the entry is about (e.g. a V100)
EVIDENCE_CHARS = 300
OPS = ("<", "<=", ">", ">=", "==", "!=", "in", "not_in", "contains", "matches")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


# ================================================================ the knowledge base
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


# ================================================================ facts
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


def _describe_conditions(conds: Iterable[dict], derived: dict) -> str:
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


# ================================================================ findings
@dataclass
class Finding:
    """One recognised problem: which entry, the line that showed it, and what to do."""

    entry_id: str
    title: str
    severity: str
    score: int
    evidence: str
    cause: str
    fix: str
    commands: list[str] = field(default_factory=list)
    source: list[str] = field(default_factory=list)
    where: str | None = None  # file (and line) of the first evidence, when known
    count: int = 1  # how many lines matched
    matched_by: str = "log"  # "log", "facts" or "check"
    confirmed_by: str = ""  # the facts that agree, in words

    def to_dict(self) -> dict:
        return asdict(self)


def _clip(line: str) -> str:
    line = redact(_ANSI.sub("", line).strip())
    return line if len(line) <= EVIDENCE_CHARS else line[: EVIDENCE_CHARS - 1] + "…"


# ---------------------------------------------------------------- scanning long logs
# A 50 MB log has ~500,000 lines; trying ~160 case-insensitive regexes (or one alternation of them) on each
# costs minutes in Python's re. Instead each pattern is reduced to the literal text every match must contain
# (parsed from the regex itself), the block is lower-cased once, and str.find (C speed) locates the few lines
# that can match; only those lines meet the regex. Patterns without such a literal are run over the block.
BLOCK_CHARS = 4 << 20  # a log is read and scanned in blocks of whole lines: memory stays bounded


def _literal_runs(items) -> list[str]:
    from re import _constants as C  # the parsed form of a pattern (stable since Python 3.11)

    runs, cur = [], ""
    for op, av in items:
        if op is C.LITERAL:
            cur += chr(av)
            continue
        runs.append(cur)
        cur = ""
    runs.append(cur)
    return runs


MIN_GATE_CHARS = 2  # even "t4" is found far faster by str.find than by running the regex on every line


def _branch_literals(branches) -> tuple[str, ...] | None:
    lits = []
    for branch in branches:
        best = max(_literal_runs(list(branch)), key=len)
        if len(best) < MIN_GATE_CHARS:
            return None
        lits.append(best.lower())
    return tuple(lits)


@lru_cache(maxsize=4096)
def _gate(pattern: re.Pattern) -> tuple[str, ...] | None:
    """Lower-case literal strings, one of which every match of `pattern` contains; None when none can be
    read from the regex (the pattern is then run over the whole block)."""
    from re import _constants as C, _parser

    try:
        parsed = list(_parser.parse(pattern.pattern, pattern.flags))
    except Exception:  # noqa: BLE001 - an unusual pattern is simply not gated
        return None
    best = max(_literal_runs(parsed), key=len)
    if len(best) >= 4:
        return (best.lower(),)
    for op, av in parsed:  # a|b|c at the top, or (?:a|b|c) as one item of the sequence
        if op is C.BRANCH:
            return _branch_literals(av[1])
        if op is C.SUBPATTERN and len(av[-1]) == 1 and av[-1][0][0] is C.BRANCH:
            lits = _branch_literals(av[-1][0][1][1])
            if lits:
                return lits
    return (best.lower(),) if len(best) >= MIN_GATE_CHARS else None


@lru_cache(maxsize=4096)
def _multiline(pattern: re.Pattern) -> re.Pattern:
    return re.compile(pattern.pattern, pattern.flags | re.MULTILINE)


def _candidate_lines(block: str, low: str, pattern: re.Pattern) -> Iterable[tuple[int, str]]:
    """(offset, line) of the lines of `block` that `pattern` matches."""
    gate = _gate(pattern)
    if gate is None:
        seen = -1
        for m in _multiline(pattern).finditer(block):
            start = block.rfind("\n", 0, m.start()) + 1
            if start != seen:
                seen = start
                end = block.find("\n", start)
                line = block[start:] if end < 0 else block[start:end]
                if pattern.search(line):
                    yield start, line
        return
    starts = set()
    for lit in gate:
        pos = low.find(lit)
        while pos >= 0:
            start = block.rfind("\n", 0, pos) + 1
            end = block.find("\n", pos)
            end = len(block) if end < 0 else end
            starts.add((start, end))
            pos = low.find(lit, end)
    for start, end in sorted(starts):
        line = block[start:end]
        if pattern.search(line):
            yield start, line


def _text_blocks(text: str) -> Iterable[tuple[str, int]]:
    """A text as (block, number of its first line) pairs of whole lines."""
    pos, line = 0, 1
    while pos < len(text):
        end = text.find("\n", pos + BLOCK_CHARS)
        end = len(text) if end < 0 else end + 1
        yield text[pos:end], line
        line += text.count("\n", pos, end)
        pos = end


def file_blocks(source, stats: dict | None = None) -> Iterable[tuple[str, int]]:
    """A file (path or binary stream) as (block, first line number) pairs, read BLOCK_CHARS at a time,
    undecodable bytes replaced: the whole file is scanned however long it is, in bounded memory. `stats`,
    if given, receives bytes, lines and whether NUL bytes (binary data) were seen."""
    import codecs
    from contextlib import nullcontext

    stats = {} if stats is None else stats
    stats.update(bytes=0, lines=0, binary=False)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    rest, line = "", 1
    opened = open(source, "rb") if isinstance(source, (str, Path)) else nullcontext(source)
    with opened as fh:
        while raw := fh.read(BLOCK_CHARS):
            stats["bytes"] += len(raw)
            stats["binary"] = stats["binary"] or b"\0" in raw
            text = rest + decoder.decode(raw)
            cut = text.rfind("\n")
            if cut < 0 and len(text) < 4 * BLOCK_CHARS:  # a very long line: keep reading (up to a cap)
                rest = text
                continue
            cut = len(text) - 1 if cut < 0 else cut
            block, rest = text[: cut + 1], text[cut + 1:]
            yield block, line
            line += block.count("\n")
        rest += decoder.decode(b"", final=True)
        if rest:
            yield rest, line
            line += rest.count("\n") + (not rest.endswith("\n"))
    stats["lines"] = line - 1


def _entry_for_hits(entry: Entry, hits: list[tuple[int, str, str]], context_seen: bool, derived: dict) -> Finding | None:
    """The finding for an entry whose matchers hit these (matcher index, line, where) triples; `context_seen`:
    one of its context patterns appeared somewhere in the same text."""
    if entry.requires and conditions_hold(entry.requires, derived) is False:
        return None
    confirmed = conditions_hold(entry.conditions, derived, entry.conditions_mode) if entry.conditions else None
    in_context = context_seen if entry.context else None
    if entry.context and not in_context and confirmed is not True:
        return None  # e.g. "Using FlexAttention backend" on a GPU that is not Volta/Turing
    severity = entry.severity
    if entry.info_when and conditions_hold(entry.info_when, derived) is True:
        severity = "info"
    score = BASE_SCORE[severity] + min(len(hits), 5)
    score += CONFIRMED_BONUS if confirmed else 0
    score += CONTEXT_BONUS if in_context else 0
    _, line, where = min(hits, key=lambda h: h[0])  # the entry's first (most telling) matcher, earliest line
    return Finding(entry.id, entry.title, severity, score, _clip(line), entry.cause, entry.fix, list(entry.commands),
                   list(entry.source), where, len(hits), "log",
                   _describe_conditions(entry.conditions, derived) if confirmed else "")


def _entry_from_facts(entry: Entry, derived: dict) -> Finding | None:
    if not (entry.facts_alone and entry.conditions):
        return None
    if entry.requires and conditions_hold(entry.requires, derived) is False:
        return None
    if conditions_hold(entry.conditions, derived, entry.conditions_mode) is not True:
        return None
    severity = entry.severity
    if entry.info_when and conditions_hold(entry.info_when, derived) is True:
        severity = "info"
    why = _describe_conditions(entry.conditions, derived)
    by = "check" if why.startswith("check") and ";" not in why else "facts"
    return Finding(entry.id, entry.title, severity, BASE_SCORE[severity] + CONFIRMED_BONUS - 2, _clip(f"{by}: {why}"),
                   entry.cause, entry.fix, list(entry.commands), list(entry.source), None, 1, by, why)


def _check_findings(derived: dict, claimed: set[str], kb: tuple[Entry, ...]) -> list[Finding]:
    """Failing/warning checks that no knowledge-base finding explains, reported with their own fix."""
    covering = [c for e in kb if e.id in claimed for c in e.conditions if "check" in c]
    out = []
    for c in derived.get("checks", []):
        if c["status"] not in ("fail", "warn"):
            continue
        if any(re.search(cov["check"], str(c["name"])) and c["status"] in set(cov.get("status", ["fail", "warn"]))
               for cov in covering):
            continue  # e.g. an ECC check already behind the xid-ecc-memory finding
        # A failed check is a problem; a warned one is already flagged in the report and is usually a
        # measurement caveat (a busy machine, a missed speed target): listed, but not alarming.
        severity = "error" if c["status"] == "fail" else "info"
        src = c.get("source") or ""
        out.append(Finding(f"check:{c['name']}", f"Check '{c['name']}' {c['status']}", severity,
                           BASE_SCORE[severity] - 3,
                           _clip(f"check {c['name']}: {c['status']} (observed {c.get('observed')!r}, "
                                 f"expected {c.get('expected')!r})"),
                           "A check the lab ran on this machine did not pass.", c.get("fix") or "See the check.",
                           [], [src] if src else [], c.get("record"), 1, "check", ""))
    return out


def rank(findings: list[Finding]) -> list[Finding]:
    """Most important first: higher score, then worse severity, then the entry id (stable)."""
    return sorted(findings, key=lambda f: (-f.score, SEVERITY_RANK[f.severity], f.entry_id))


def match_text(text: str, facts: dict | None = None, origin: str | None = None,
               kb: tuple[Entry, ...] | None = None) -> list[Finding]:
    """Pure: the knowledge-base entries this text (and these facts) show, ranked.

    `origin` names where the text came from, for Finding.where ("logs/server.log")."""
    return _match_chunks([(text, origin)], derive_facts(facts), kb or load_kb())


def _match_chunks(chunks: list[tuple[Any, str | None]], derived: dict, kb: tuple[Entry, ...]) -> list[Finding]:
    """Findings for text chunks: each a str, or an iterable of (block, first line) pairs (see file_blocks)."""
    hits: dict[str, dict[int | str, tuple[int, str, str]]] = {}
    context_seen: set[str] = set()
    for source, origin in chunks:
        blocks = _text_blocks(source) if isinstance(source, str) else source
        for block, first_line in blocks:
            low = block.lower()
            newlines = None
            for entry in kb:
                for which, pattern in enumerate(entry.matchers):
                    for start, line in _candidate_lines(block, low, pattern):
                        if any(p.search(line) for p in entry.unless):
                            continue
                        if newlines is None:
                            newlines = [m.start() for m in re.finditer("\n", block)]
                        n = first_line + bisect.bisect_left(newlines, start)
                        key = f"{origin}:{n}"
                        per_entry = hits.setdefault(entry.id, {})
                        if key not in per_entry or per_entry[key][0] > which:
                            per_entry[key] = (which, line, key if origin else f"line {n}")
                if entry.context and entry.id not in context_seen:
                    if any(next(iter(_candidate_lines(block, low, p)), None) for p in entry.context):
                        context_seen.add(entry.id)
    findings: dict[str, Finding] = {}
    for entry in kb:
        found = None
        if entry.id in hits:
            ordered = sorted(hits[entry.id].values(), key=lambda h: _where_order(h[2]))
            found = _entry_for_hits(entry, ordered, entry.id in context_seen, derived)
        found = found or _entry_from_facts(entry, derived)
        if found:
            findings[entry.id] = found
    for f in list(findings.values()):
        for other in next(e for e in kb if e.id == f.entry_id).supersedes:
            findings.pop(other, None)
    out = list(findings.values()) + _check_findings(derived, set(findings), kb)
    return rank(out)


def _where_order(where: str) -> tuple[str, int]:
    origin, _, n = where.rpartition(":") if ":" in where else ("", "", where.split()[-1])
    return origin, int(n) if n.isdigit() else 0


# ================================================================ run folders
def _read(path: Path, limit: int = 5_000_000) -> str:
    with open(path, "rb") as fh:
        return fh.read(limit).decode("utf-8", "replace")


def notebook_errors(path: Path) -> str:
    """The error outputs of an executed notebook (ename: evalue and traceback), ANSI colours removed."""
    try:
        nb = json.loads(_read(path))
    except (OSError, json.JSONDecodeError):
        return ""
    lines = []
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []) or []:
            if out.get("output_type") == "error":
                lines.append(f"{out.get('ename')}: {out.get('evalue')}")
                lines.extend(_ANSI.sub("", t) for t in out.get("traceback", []))
    return "\n".join(lines)


def run_folder_inputs(run_dir: str | Path, include_repro: bool = False) -> tuple[list[tuple[str, str]], dict]:
    """(text chunks with their origin, facts) read from a run folder.

    Facts: manifest.json and every record are merged under "records"; checks from all records
    (and the manifest's statuses, if they hold checks) are listed under "checks"."""
    run = Path(run_dir)
    chunks: list[tuple[str, str]] = []
    logs = run / "logs"
    for path in sorted(logs.rglob("*")) if logs.is_dir() else []:
        rel = path.relative_to(run).as_posix()
        if not path.is_file() or path.suffix not in (".log", ".txt", ".out", ".err"):
            continue
        if not include_repro and "repro" in path.relative_to(logs).parts[:-1]:
            continue
        chunks.append((file_blocks(path), rel))
    for path in sorted((run / "notebooks").glob("*.ipynb")) if (run / "notebooks").is_dir() else []:
        text = notebook_errors(path)
        if text:
            chunks.append((text, path.relative_to(run).as_posix()))
    facts: dict = {"records": {}, "checks": []}
    manifest = run / "manifest.json"
    if manifest.is_file():
        try:
            facts["manifest"] = json.loads(_read(manifest))
        except json.JSONDecodeError:
            chunks.append(("manifest.json is not valid JSON", "manifest.json"))
    for path in sorted((run / "records").glob("*.json")) if (run / "records").is_dir() else []:
        try:
            rec = json.loads(_read(path))
        except json.JSONDecodeError:
            continue
        facts["records"][path.stem] = rec
        for c in rec.get("checks", []) if isinstance(rec, dict) else []:
            if isinstance(c, dict) and "name" in c and "status" in c:
                facts["checks"].append({**c, "record": f"records/{path.name}"})
    expected = _profile_gpu_count(facts)
    if expected is not None:
        facts["profile_gpu_count"] = expected
    return chunks, facts


def _profile_gpu_count(facts: dict) -> int | None:
    """How many GPUs the run's profile expects, from the profile file the manifest or a record names
    (None when no file is named or it cannot be read: then GPU-only entries still apply)."""
    import yaml

    named = [((facts.get("manifest") or {}).get("profile") or {}).get("file")]
    named += [(r.get("provenance") or {}).get("profile_file") for r in facts["records"].values() if isinstance(r, dict)]
    for name in filter(None, named):
        try:
            count = (yaml.safe_load(Path(name).read_text()) or {}).get("gpu_count")
        except (OSError, yaml.YAMLError, AttributeError):
            continue
        if isinstance(count, int):
            return count
    return None


def _merge_facts(found: dict, given: dict | None) -> dict:
    if not given:
        return found
    merged = {**found, **given}
    merged["checks"] = list(found.get("checks", [])) + list(given.get("checks", []) or [])
    return merged


def _looks_like_path(source: str) -> bool:
    return "\n" not in source and len(source) < 4096 and Path(source).expanduser().exists()


def diagnose(source: str | Path, facts: dict | None = None, include_repro: bool = False) -> list[Finding]:
    """Ranked findings for log text, a log file, or a run folder (outputs/<profile>/<run>/).

    A `str` is taken as a path only when it is one line naming an existing file or folder; any
    other string is log text. `facts` (e.g. lab.measure.inventory.collect(), versions, checks) confirm
    log findings and let facts-only entries fire; in a run folder they add to what the records hold."""
    kb = load_kb()
    if isinstance(source, Path) or (isinstance(source, str) and _looks_like_path(source)):
        path = Path(source).expanduser()
        if path.is_dir():
            chunks, found = run_folder_inputs(path, include_repro)
            return _match_chunks(chunks, derive_facts(_merge_facts(found, facts)), kb)
        return _match_chunks([(file_blocks(path), path.name)], derive_facts(facts), kb)
    return _match_chunks([(str(source), None)], derive_facts(facts), kb)


def diagnose_log(source, origin: str | None = None, stats: dict | None = None) -> list[Finding]:
    """Ranked findings for one log given as a path or a binary stream (stdin), scanned whole in blocks;
    `stats` receives bytes, lines and binary (see file_blocks)."""
    return _match_chunks([(file_blocks(source, stats), origin)], derive_facts(None), load_kb())


# ================================================================ showing and judging
def findings_table(findings: list[Finding]):
    """Findings as a pandas DataFrame, in rank order (for notebooks and the report)."""
    import pandas as pd

    cols = ["severity", "entry_id", "title", "evidence", "where", "count", "cause", "fix", "commands", "source",
            "score", "matched_by", "confirmed_by"]
    rows = [{**f.to_dict(), "commands": "\n".join(f.commands), "source": "\n".join(f.source)} for f in findings]
    return pd.DataFrame(rows, columns=cols)


def format_findings(findings: list[Finding]) -> str:
    """Plain text for a terminal (`lab doctor`)."""
    if not findings:
        return "No known problem found."
    blocks = []
    for i, f in enumerate(findings, 1):
        lines = [f"{i}. [{f.severity}] {f.title}  ({f.entry_id})",
                 f"   seen: {f.evidence}" + (f"  [{f.where}]" if f.where else "") + (f"  (x{f.count})" if f.count > 1 else ""),
                 f"   cause: {f.cause}", f"   fix: {f.fix}"]
        lines += [f"     $ {c}" for c in f.commands]
        if f.confirmed_by and f.matched_by == "log":
            lines.append(f"   confirmed by: {f.confirmed_by}")
        lines += [f"   source: {s}" for s in f.source]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def doctor_exit_code(findings: list[Finding], min_severity: str = "warn") -> int:
    """0 when nothing at or above `min_severity` matched, 1 when something did.

    The default ignores "info" findings (notes such as "vLLM disabled its custom all-reduce", or
    "no GPU offload" on a machine that has no GPU); pass min_severity="info" to count them too."""
    limit = SEVERITY_RANK[min_severity]
    return 1 if any(SEVERITY_RANK[f.severity] <= limit for f in findings) else 0
