"""Recognise known problems in logs and in what the lab measured, and say what to do (`lab doctor`).

The knowledge base is data (lab.diagnose.knowledge_base over lab/data/troubleshooting.yaml); this module
matches it:

* `match_text(text, facts)` is pure: text and facts in, ranked `Finding`s out.
* `diagnose(source, facts)` takes log text, a log file or a run folder; for a run folder it reads
  logs/*.log, the checks and facts in records/*.json and manifest.json, and the error outputs of
  the executed notebooks (lab.diagnose.run_inputs). Logs under logs/repro/ are errors reproduced on
  purpose (notebook 07) and are skipped unless `include_repro=True`.

Long logs are scanned in blocks by lab.diagnose.log_scan; lab.diagnose.doctor (`lab doctor`) and
lab.pages.troubleshoot (notebook 07) show and judge the findings.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lab.core import display
from lab.core.redaction import redact
from lab.diagnose import run_inputs
from lab.diagnose.knowledge_base import (SEVERITY_RANK, Entry, conditions_hold, derive_facts, describe_conditions,
                                         load_kb)
from lab.diagnose.log_scan import candidate_lines, file_blocks, strip_ansi, text_blocks

BASE_SCORE = {"error": 30, "warn": 20, "info": 10}
CONFIRMED_BONUS = 10  # the facts the lab collected agree with what the log says
CONTEXT_BONUS = 5  # the log names the situation the entry is about (e.g. a V100)
EVIDENCE_CHARS = 2000  # a guard against a megabyte line; a real log line is kept whole (the report folds long cells)


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
    line = redact(strip_ansi(line).strip())
    return display.clip(line, EVIDENCE_CHARS)


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
                   describe_conditions(entry.conditions, derived) if confirmed else "")


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
    why = describe_conditions(entry.conditions, derived)
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
        blocks = text_blocks(source) if isinstance(source, str) else source
        for block, first_line in blocks:
            low = block.lower()
            newlines = None
            for entry in kb:
                for which, pattern in enumerate(entry.matchers):
                    for start, line in candidate_lines(block, low, pattern):
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
                    if any(next(iter(candidate_lines(block, low, p)), None) for p in entry.context):
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
            chunks, found = run_inputs.run_folder_inputs(path, include_repro)
            return _match_chunks(chunks, derive_facts(_merge_facts(found, facts)), kb)
        return _match_chunks([(file_blocks(path), path.name)], derive_facts(facts), kb)
    return _match_chunks([(str(source), None)], derive_facts(facts), kb)


def diagnose_log(source, origin: str | None = None, stats: dict | None = None) -> list[Finding]:
    """Ranked findings for one log given as a path or a binary stream (stdin), scanned whole in blocks;
    `stats` receives bytes, lines and binary (see file_blocks)."""
    return _match_chunks([(file_blocks(source, stats), origin)], derive_facts(None), load_kb())
