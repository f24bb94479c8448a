"""One table from profile field to engine flag to record field (lab/data/flag_table.yaml), llama-bench's pattern: one
list of fields drives every output.

    flag_table.flags(profile, "llama.cpp")          # Flags(argv, notes, env) of the rows' "serve" part, in table order
    flag_table.flags(profile, "vllm", "batch", version=..., cc=(9, 0))
    flag_table.flag("parallel_slots", "llama.cpp")  # "-np"
    flag_table.reported_values("llama.cpp", parsed_log, facts)   # {"parallel_slots": 16, "context_per_request": ...}

A row names a Profile field (lab/core/profiles.py), which is also the field's name in notebook 04's record; each
engine's column gives its flag, how the value is written (`WRITERS`), when it is passed and the rule of
lab/data/engine_rules.yaml its note quotes; `reported` says where the server tells the value back. The builders
(lab.serving.engines, lab.serving.vllm_command) place each part of the command: the table gives its words."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

from lab.core import facts
from lab.core.profiles import Profile
from lab.core.versions import at_least
from lab.serving.command import Note, rule
from lab.serving.command import note as note

ENGINES = ("llama.cpp", "llama-cpp-python", "vllm")
# llama_cpp.server logs llama.cpp's own lines (lab.serving.engine_logs.parse_log reads both alike)
_LOG_OF = {"llama-cpp-python": "llama.cpp"}
# llama-server's KV types (-ctk/-ctv) the lab passes; ggml type ids llama_cpp.server's --type_k/--type_v take
# (llama_cpp/llama_cpp.py GGML_TYPE_*)
LLAMA_KV_TYPES = ("f16", "bf16", "q8_0", "q4_0")
GGML_TYPE_IDS = {"f16": 1, "q4_0": 2, "q8_0": 8}


def llama_kv_type(kv_cache_dtype: str) -> str:
    """The KV type llama.cpp gets for a profile's kv_cache_dtype: "auto" is f16 (llama.cpp's default), any other
    value as it is. The one rule: the server's -ctk/-ctv, llama_cpp.server's ids, -fa and lab tune's baseline."""
    return "f16" if kv_cache_dtype == "auto" else kv_cache_dtype


@dataclass(frozen=True)
class Column:
    """One engine's column of a row: its flag(s), how and when the value is written, the note's rule."""

    flags: tuple[str, ...]
    note: str | None = None
    note_flag: str | None = None
    note_level: str = "info"
    write: str = "value"
    when: str = "always"
    part: str = "serve"
    env: dict = field(default_factory=dict)
    env_note: str | None = None
    also_if: dict | None = None

    @property
    def said(self) -> str:
        """The flag as its note names it ("-ctk/-ctv")."""
        return self.note_flag if self.note_flag is not None else "/".join(self.flags)


@dataclass(frozen=True)
class Row:
    field: str
    meaning: str
    source: str
    columns: dict  # engine → Column
    reported: dict  # engine → {"log": dotted path, "http": route and field}


@dataclass
class Flags:
    """What a part of the table adds to a command: argv words, notes, environment."""

    argv: list[str] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Context:
    """What a writer may need beyond the value: the engine version and the GPU's compute capability."""

    version: str | None = None
    cc: tuple[int, int] | None = None


# ---------------------------------------------------------------- how a value is written
Written = tuple[list[str], list[Note]]


def _value(col: Column, value, _ctx: Context) -> Written:
    return [w for flag in col.flags for w in (flag, str(value))], []


def _all_layers(col: Column, value, ctx: Context) -> Written:
    """-ngl -1 (the profile's "all") → 999: llama-server takes a number (lab/data/engine_rules.yaml llama-ngl)."""
    return _value(col, "999" if value == -1 else value, ctx)


def _slash_list(col: Column, value, ctx: Context) -> Written:
    # "/" between GPUs: llama-server splits on "," or "/", llama-bench on "/" only (its "," separates values to
    # test), so one spelling serves both (tools/llama-bench/llama-bench.cpp, common/arg.cpp)
    return _value(col, "/".join(f"{x:g}" for x in value), ctx)


def _switch(col: Column, value, _ctx: Context) -> Written:
    return (list(col.flags) if value else []), []


def _llama_kv(col: Column, value, ctx: Context) -> Written:
    kv = llama_kv_type(value)
    words, _ = _value(col, kv, ctx)
    wrong = [] if kv in LLAMA_KV_TYPES else [
        note(col.note, col.said, "error", prefix=f"kv_cache_dtype {kv} is not a llama.cpp type.")]
    return words, wrong + [note(col.note, col.said)]


def _lcp_kv(col: Column, value, _ctx: Context) -> Written:
    """llama_cpp.server takes ggml type ids, and a quantized V cache needs --flash_attn true."""
    kv = llama_kv_type(value)
    said = "/".join(col.flags)
    if kv not in GGML_TYPE_IDS:
        return [], [note(col.note, said, "error", prefix=f"kv_cache_dtype {kv} is not available in "
                                                            "llama_cpp.server (f16, q8_0, q4_0).")]
    if kv == "f16":
        return [], []
    words = [w for flag in col.flags for w in (flag, str(GGML_TYPE_IDS[kv]))]
    return words + ["--flash_attn", "true"], [note(col.note, f"{said}/--flash_attn")]


def _vllm_dtype(col: Column, value, ctx: Context) -> Written:
    """auto: nothing, or half below compute capability 8.0 (no bf16 there); bfloat16 there is an error."""
    flag = col.flags[0]
    if value != "auto":
        if value == "bfloat16" and ctx.cc and ctx.cc < (8, 0):
            return [flag, "bfloat16"], [note("vllm-dtype-half", flag, "error")]
        return [flag, value], [note(col.note, flag)]
    if ctx.cc and ctx.cc < (8, 0):
        return [flag, "half"], [note("vllm-dtype-half", f"{flag} half")]
    return [], []


def _vllm_kv(col: Column, value, ctx: Context) -> Written:
    """f16/bf16/auto: vLLM's auto (nothing passed); llama.cpp's q8_0/q4_0: an error; fp8 below 8.9 under V1: an error."""
    flag = col.flags[0]
    if value in ("f16", "bf16", "auto"):
        return [], [note(col.note, flag)]
    if value in ("q8_0", "q4_0"):
        return [], [note(col.note, flag, "error")]
    if ctx.cc and ctx.cc < (8, 9) and ctx.version and at_least(ctx.version, rule("vllm-swap-space")["since"]):
        return [flag, value], [note("vllm-fp8-kv", flag, "error")]
    return [flag, value], [note(col.note, flag)]


WRITERS: dict[str, Callable[[Column, object, Context], Written]] = {
    "value": _value, "all_layers": _all_layers, "slash_list": _slash_list, "switch": _switch,
    "llama_kv": _llama_kv, "lcp_kv": _lcp_kv, "vllm_dtype": _vllm_dtype, "vllm_kv": _vllm_kv}
WHEN: dict[str, Callable[[object], bool]] = {
    "always": lambda v: True, "set": lambda v: v is not None and v != [], "above_one": lambda v: v > 1, "enabled": bool}
# A writer that decides itself which note to add (none when nothing is passed)
_OWN_NOTES = ("llama_kv", "lcp_kv", "vllm_dtype", "vllm_kv")


# ---------------------------------------------------------------- the table
def _column(raw: dict) -> Column:
    flags = raw.get("flag")
    flags = tuple(flags) if isinstance(flags, list) else (flags,)
    return Column(flags=flags, note=raw.get("note"), note_flag=raw.get("note_flag"),
                  note_level=raw.get("note_level", "info"), write=raw.get("write", "value"),
                  when=raw.get("when", "always"), part=raw.get("part", "serve"), env=dict(raw.get("env") or {}),
                  env_note=raw.get("env_note"), also_if=raw.get("also_if"))


def _row(raw: dict) -> Row:
    return Row(field=raw["field"], meaning=raw["meaning"], source=raw["source"],
               columns={e: _column(raw[e]) for e in ENGINES if e in raw}, reported=dict(raw.get("reported") or {}))


@lru_cache(maxsize=None)
def rows() -> tuple[Row, ...]:
    """The table's rows, in order, checked: each field is a Profile field, each note a rule of engine_rules.yaml,
    each `write` and `when` known."""
    out = tuple(_row(r) for r in facts.load("flag_table", "rows")["rows"])
    for r in out:
        if r.field not in Profile.model_fields:
            raise facts.DataError(f"lab/data/flag_table.yaml: {r.field!r} is not a Profile field")
        for engine, col in r.columns.items():
            if col.write not in WRITERS or col.when not in WHEN:
                raise facts.DataError(f"lab/data/flag_table.yaml: {r.field} ({engine}): write {col.write!r} or "
                                      f"when {col.when!r} unknown")
            for rule_id in (col.note, col.env_note, (col.also_if or {}).get("note")):
                if rule_id:
                    rule(rule_id)  # KeyError names a missing rule
    return out


@lru_cache(maxsize=None)
def derived() -> tuple[Row, ...]:
    """Record fields no flag sets but the server reports (context_per_request)."""
    return tuple(_row(r) for r in facts.load("flag_table", "derived")["derived"])


def row(field_name: str) -> Row:
    for r in rows() + derived():
        if r.field == field_name:
            return r
    raise KeyError(f"lab/data/flag_table.yaml has no row {field_name!r}")


def flag(field_name: str, engine: str) -> str | None:
    """The engine's (first) flag for a profile field ("parallel_slots", "llama.cpp" → "-np"); None: it has none."""
    col = row(field_name).columns.get(engine)
    return col.flags[0] if col and col.flags else None


def flags(profile: Profile, engine: str, part: str = "serve", *, version: str | None = None,
          cc: tuple[int, int] | None = None) -> Flags:
    """The argv words, notes and environment of the table's rows in `part` for `engine`, in table order."""
    out, ctx = Flags(), Context(version, cc)
    for r in rows():
        col = r.columns.get(engine)
        if col is None or col.part != part:
            continue
        value = getattr(profile, r.field)
        if not WHEN[col.when](value):
            continue
        words, notes = WRITERS[col.write](col, value, ctx)
        if col.env:
            out.env.update(col.env)
            out.notes += [note(col.env_note, name) for name in col.env] if col.env_note else []
        out.argv += words
        out.notes += notes
        if col.note and col.write not in _OWN_NOTES:
            out.notes.append(note(col.note, col.said, col.note_level))
        if col.also_if and value == col.also_if["value"]:
            out.notes.append(note(col.also_if["note"], f"{col.said} {value}"))
    return out


# ---------------------------------------------------------------- what the server says back
def _dig(data, path: str):
    for key in path.split("."):
        if isinstance(data, list) and key.isdigit():
            data = data[int(key)] if int(key) < len(data) else None
        elif isinstance(data, dict):
            data = data.get(key)
        else:
            return None
    return data


def record_fields() -> tuple[str, ...]:
    """The fields a server can report back (notebook 04's record names them so): the rows' and `derived`'s with a
    `reported` entry."""
    return tuple(r.field for r in rows() + derived() if r.reported)


def reported_values(engine: str, log: dict | None, found_facts: dict | None) -> dict:
    """{profile field: the server's value} for every field of `record_fields()`: from its parsed log
    (lab.serving.engine_logs.parse_log) where the row says where, else from what its API said (lab.serving.endpoint
    facts, keyed by the same names); None where it said neither."""
    engine = _LOG_OF.get(engine, engine)
    out = {}
    for r in rows() + derived():
        if not r.reported:
            continue
        path = (r.reported.get(engine) or {}).get("log")
        value = _dig(log or {}, path) if path else None
        out[r.field] = value if value is not None else (found_facts or {}).get(r.field)
    return out


def http_sources(engine: str) -> dict[str, str]:
    """{profile field: the route and field an engine's API reports it in}, the sources of lab.serving.endpoint's facts."""
    return {r.field: r.reported[engine]["http"] for r in rows() + derived()
            if "http" in (r.reported.get(engine) or {})}
