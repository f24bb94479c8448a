"""The field schema: one name, unit, rounding and meaning for every figure the lab reports (lab/data/fields.yaml).

llama-bench gives each output field one name and unit (avg_ts, stddev_ts, n_prompt); the lab does the same: the
load generator's run summary (lab.core.run_summary), a tune point's levels, a speculative row and the record
summaries name a figure as here, and lab.core.display labels and rounds it from here. Two rules make the other
names a table needs, never a new word: a latency distribution `ttft_ms`'s statistic `p50` is `ttft_p50_ms` (`flat`),
and a figure measured at a given number of streams is `output_throughput@8` (`at`; display labels it "…, 8 streams").

Records written before the schema named some figures differently (`aggregate_tok_s`, `decode_tok_s` …); the
entries' `old_names` are the one alias map, and `canonical` applies it where old records are read for display
(`lab compare`, report.html) — nothing writes an old name again.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict

from lab.core import facts


class Field(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    label: str | None = None  # a table's header where the name's words do not say it (display.label)
    unit: str
    sig: int
    decimals: int | None = None  # instead of `sig`: a fixed number of decimals (whole MiB)
    meaning: str
    source: str | None = None
    stats: tuple[str, ...] = ()
    of: str | None = None  # a selection: the figure it picks, and from what
    old_names: tuple[str, ...] = ()
    gpus: Literal["total", "per_gpu", "per_device"] | None = None  # a GPU figure's shape: one number over the GPUs,
    # a list by NVML index, or a mapping by the engine's device name
    stat: str | None = None  # set on a flat statistic ("ttft_p50_ms" → the ttft_ms entry, stat "p50")
    streams: int | None = None  # set on a figure at a level ("output_throughput@8" → streams 8)


@lru_cache(maxsize=None)
def schema() -> dict[str, Field]:
    """Every field of lab/data/fields.yaml, by name (checked: a name is one figure, an old name belongs to one)."""
    data = facts.load("fields")
    sig = data["defaults"]["sig"]
    out = {name: Field(name=name, **{"sig": sig, **(entry or {})}) for name, entry in data["fields"].items()}
    seen: dict[str, str] = {}
    for f in out.values():
        for old in f.old_names:
            if old in out or old in seen:
                raise facts.DataError(f"lab/data/fields.yaml: old name {old!r} of {f.name!r} is also "
                                      f"{'a field' if old in out else 'an old name of ' + seen[old]}")
            seen[old] = f.name
        if f.name.endswith(PER_GPU) and (f.gpus != "per_gpu" or getattr(out.get(f.name[:-len(PER_GPU)]), "gpus", None)
                                         != "total"):
            raise facts.DataError(f"lab/data/fields.yaml: {f.name!r} must be `gpus: per_gpu`, and "
                                  f"{f.name[:-len(PER_GPU)]!r} its `gpus: total`")
    return out


PER_GPU = "_per_gpu"


@lru_cache(maxsize=None)
def old_names() -> dict[str, str]:
    """{old name: field name}: the one alias map, for reading records written before the schema."""
    return {old: f.name for f in schema().values() for old in f.old_names}


def get(name: str) -> Field | None:
    """The field `name` is, its flat statistics included ('tpot_p50_ms' → tpot_ms's entry with stat 'p50');
    None for a name the schema does not know."""
    fields = schema()
    if name in fields:
        return fields[name]
    if "@" in name:
        head, _, streams = name.partition("@")
        base = get(head)
        return base.model_copy(update={"name": name, "streams": int(streams)}) if base and streams.isdigit() else None
    if name.endswith("_ms"):
        head, _, stat = name[:-3].rpartition("_")
        base = fields.get(f"{head}_ms")
        if base is not None and stat in base.stats:
            return base.model_copy(update={"name": name, "stat": stat})
    return None


def flat(name: str, stat: str) -> str:
    """The flat name of one statistic of a latency distribution: flat('ttft_ms', 'p50') → 'ttft_p50_ms'."""
    f = schema()[name]
    if stat not in f.stats:
        raise KeyError(f"{name} has no statistic {stat!r}; it has {', '.join(f.stats)}")
    return f"{name[:-3]}_{stat}_ms"


def at(name: str, streams) -> str:
    """The name of figure `name` measured at `streams` streams: at('output_throughput', 8) → 'output_throughput@8'."""
    if get(name) is None:
        raise KeyError(f"{name!r} is not a figure of lab/data/fields.yaml")
    return f"{name}@{int(streams)}"


def unit(name: str) -> str | None:
    f = get(name)
    return f.unit if f is not None else None


def canonical(mapping: dict) -> dict:
    """`mapping` (a record's summary, a row) with old names read as today's, nested dicts and lists of them too;
    keys the schema does not know pass unchanged. Where a record carries both names, today's wins.

    It also reads schema_version 1's GPU figures (before 2026-12-04): a per-GPU list under a total's name
    (`mean_power_w: [486.7]`) is the `_per_gpu` field, and the total is its sum (`migrate_gpus`) — except where the
    record carries the exact total under an old name (`peak_vram_mib_total`, the peak of the sum), which wins."""
    if isinstance(mapping, list):
        return [canonical(v) if isinstance(v, (dict, list)) else v for v in mapping]
    if not isinstance(mapping, dict):
        return mapping
    olds = old_names()
    out: dict = {}
    summed: set = set()  # totals made by summing a version-1 list: an exact total found later replaces them
    for k, v in mapping.items():
        new = olds.get(k, k) if isinstance(k, str) else k
        if isinstance(v, list) and _gpus(new) == "total":
            per_gpu, total = migrate_gpus(new, v)
            out.setdefault(per_gpu, v)
            if new not in out:
                out[new] = total
                summed.add(new)
            continue
        if new in out and new != k and new not in summed:
            continue
        out[new] = canonical(v) if isinstance(v, (dict, list)) else v
        summed.discard(new)
    return out


def _gpus(name) -> str | None:
    f = get(name) if isinstance(name, str) else None
    return f.gpus if f is not None else None


def migrate_gpus(name: str, values: list) -> tuple[str, float | None]:
    """schema_version 1 → 2 for one GPU figure: a per-GPU list written under the total's name `name` → (the per-GPU
    field's name, the total). The total is the sum over the GPUs (None when a GPU's value is missing): exact for power
    and energy, and for one GPU's peak memory; for several GPUs' peak memory the sum of the peaks is an upper bound of
    the peak of the sum (version 1 wrote that one exactly, as `peak_vram_mib_total`, which `canonical` prefers)."""
    nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    total = sum(nums) if nums and len(nums) == len(values) else None
    return name + PER_GPU, total


def gpu_shape_problems(record, where: str = "") -> list[str]:
    """Where a record's GPU figures do not have their schema shape (lab/data/fields.yaml `gpus:`): a total that is not
    a number, a per-GPU figure that is not a list, a per-device figure that is not a mapping. [] when every one does. Read a version-1 record through
    `canonical` first (its lists under the totals' names are the shape it had then)."""
    problems: list[str] = []
    if isinstance(record, list):
        for i, v in enumerate(record):
            problems += gpu_shape_problems(v, f"{where}[{i}]")
    elif isinstance(record, dict):
        for k, v in record.items():
            path = f"{where}.{k}" if where else str(k)
            shape = _gpus(k)
            number = isinstance(v, (int, float)) and not isinstance(v, bool)
            if shape == "total" and not (v is None or number):
                problems.append(f"{path}: a total over the GPUs is one number (fields.yaml gpus: total), "
                                f"not {type(v).__name__} {v!r:.60}")
            elif shape == "per_gpu" and not (v is None or isinstance(v, list)):
                problems.append(f"{path}: a per-GPU figure is a list, one value per GPU (fields.yaml gpus: per_gpu), "
                                f"not {type(v).__name__} {v!r:.60}")
            elif shape == "per_device" and not (v is None or isinstance(v, dict)):
                problems.append(f"{path}: a per-device figure maps the engine's device names to values (fields.yaml "
                                f"gpus: per_device), not {type(v).__name__} {v!r:.60}")
            elif isinstance(v, (dict, list)):
                problems += gpu_shape_problems(v, path)
    return problems


__all__ = ["Field", "schema", "old_names", "get", "flat", "at", "unit", "canonical", "migrate_gpus",
           "gpu_shape_problems", "PER_GPU"]
