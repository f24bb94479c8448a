"""The record schema: every key a record may hold, with its meaning (lab/data/records.yaml).

lab.core.fields names the figures; this names the records' keys: for each record (`01_hardware` …) its top-level
keys and its `summary` keys, each with one line, a summary key that is a figure pointing at lab/data/fields.yaml
instead of saying it again. lab.core.evidence.write_record calls `check` before it writes: a key the schema does not
know is named with the record, the key, the nearest known name and the file to add it to; the record is written
marked `invalid` with those reasons and RecordSchemaError raised (a measurement is never lost to the schema, and never
passes unnoticed). Records already written are never checked again when read.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache

from lab.core import facts

FILE = "lab/data/records.yaml"


class RecordSchemaError(ValueError):
    """A record holds a key lab/data/records.yaml does not name (or is a record it does not name)."""


@dataclass(frozen=True)
class RecordSpec:
    name: str
    written_by: str
    keys: dict[str, str]  # top-level keys beyond the common ones: key → meaning
    summary: dict[str, str]  # summary key → meaning (figures: fields.yaml's meaning)
    patterns: tuple[tuple[re.Pattern, str], ...] = ()  # summary keys made from data
    also_named: re.Pattern | None = None

    def summary_meaning(self, key: str) -> str | None:
        if key in self.summary:
            return self.summary[key]
        return next((meaning for pattern, meaning in self.patterns if pattern.fullmatch(key)), None)


def _strings(where: str, mapping) -> dict[str, str]:
    if mapping is None:
        return {}
    if not isinstance(mapping, dict) or not all(isinstance(k, str) and isinstance(v, str) and v for k, v in mapping.items()):
        raise facts.DataError(f"{FILE}: {where} must map each key to its one-line meaning")
    return dict(mapping)


@lru_cache(maxsize=None)
def schema() -> tuple[dict[str, str], dict[str, RecordSpec]]:
    """(the common keys, every record's spec by name), checked: a `figures` name is a field of lab/data/fields.yaml
    (its meaning is that field's), no key is both a summary key and a figure, no record key repeats a common one."""
    from lab.core import fields

    data = facts.load("records")
    common = _strings("common", data.get("common"))
    known = fields.schema()
    out = {}
    for name, entry in (data.get("records") or {}).items():
        where = f"records: {name}"
        unknown = set(entry) - {"written_by", "also_named", "keys", "summary", "figures", "summary_patterns"}
        if unknown or not entry.get("written_by"):
            raise facts.DataError(f"{FILE}: {where}: needs written_by; unknown entries {sorted(unknown)}")
        keys, summary = _strings(f"{where}: keys", entry.get("keys")), _strings(f"{where}: summary", entry.get("summary"))
        if set(keys) & set(common):
            raise facts.DataError(f"{FILE}: {where}: {sorted(set(keys) & set(common))} are common keys already")
        for figure in entry.get("figures") or []:
            if figure not in known:
                raise facts.DataError(f"{FILE}: {where}: figure {figure!r} is not a field of lab/data/fields.yaml")
            if figure in summary:
                raise facts.DataError(f"{FILE}: {where}: {figure!r} is both a summary key and a figure")
            summary[figure] = f"{known[figure].meaning} (lab/data/fields.yaml)"
        patterns = tuple((re.compile(p), m) for p, m in _strings(f"{where}: summary_patterns",
                                                                 entry.get("summary_patterns")).items())
        also = entry.get("also_named")
        out[name] = RecordSpec(name, entry["written_by"], keys, summary, patterns, re.compile(also) if also else None)
    return common, out


def spec(name: str) -> RecordSpec | None:
    """The schema's entry for record `name` (`06_tune_isolate` → 06_tune's, through its also_named), or None."""
    records = schema()[1]
    if name in records:
        return records[name]
    return next((s for s in records.values() if s.also_named and s.also_named.fullmatch(name)), None)


def _nearest(key: str, names) -> str:
    near = difflib.get_close_matches(key, list(names), n=1, cutoff=0.5)
    return f" (did you mean {near[0]!r}?)" if near else ""


def problems(name: str, data: dict) -> list[str]:
    """What in record `name` (its top-level keys, its summary's keys) the schema does not know, one line each."""
    common, records = schema()
    rec = spec(name)
    if rec is None:
        return [f"record {name!r} is not in the record schema{_nearest(name, records)}. Add it under `records:` in "
                f"{FILE}, with its keys and summary keys, one line of meaning each"]
    out = []
    top = {**common, **rec.keys}
    for key in data:
        if key not in top:
            out.append(f"record {name}: key {key!r} is not in the record schema{_nearest(key, top)}. Add it to {FILE} "
                       f"under `records: {rec.name}: keys:` with one line of meaning")
    summary = data.get("summary")
    if isinstance(summary, dict):
        for key in summary:
            if rec.summary_meaning(key) is None:
                out.append(f"record {name}: summary key {key!r} is not in the record schema{_nearest(key, rec.summary)}. "
                           f"Add it to {FILE} under `records: {rec.name}: summary:` with one line of meaning (a figure: "
                           "to lab/data/fields.yaml, and its name under `figures:`)")
    return out


def check(name: str, data: dict) -> None:
    """Raise RecordSchemaError (a ValueError) naming every key of record `name` the schema does not know."""
    found = problems(name, data)
    if found:
        raise RecordSchemaError("; ".join(found) if len(found) > 1 else found[0])


def meaning(name: str, key: str, in_summary: bool = False) -> str | None:
    """The one line the schema gives record `name`'s key (a summary key with in_summary), or None."""
    rec = spec(name)
    if rec is None:
        return None
    if in_summary:
        return rec.summary_meaning(key)
    return schema()[0].get(key) or rec.keys.get(key)
