"""The typed run summary: what the load generator's `summarise_run` (lab.measure.metrics) returns for one level.

One name per figure (lab/data/fields.yaml, lab.core.fields): notebook 06's sweep, lab tune's levels, the
speculative rows, the multi-GPU modes and report.html read the same fields. The model forbids a field the
schema does not declare, so a renamed figure fails where it is made, not in a reader three modules away.

It reads like the dict it replaced (`s["ttft_ms"]["p50"]`, `s.get("spread")`, `"cut" in s`) as well as by
attribute (`s.ttft_ms["p50"]`, `s.output_throughput`), so a record read back from JSON (a plain dict) and a
summary just measured are read by the same code; `evidence.write_record` writes it as a dict (model_dump).
"""
from __future__ import annotations

from typing import Any, Iterator

from pydantic import BaseModel, ConfigDict
from typing_extensions import TypedDict


class Latency(TypedDict):
    """A latency distribution in ms (ttft_ms, tpot_ms, itl_ms, e2el_ms): every statistic None when n is 0."""

    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    n: int


class Validity(TypedDict):
    valid: bool
    reasons: list[str]
    warnings: list[str]


class Figures(BaseModel):
    """A pydantic model read like a mapping of its fields (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    def __getitem__(self, key: str) -> Any:
        if key not in type(self).model_fields:
            raise KeyError(f"{key!r}: not a field of {type(self).__name__} (lab/data/fields.yaml names every figure)")
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in type(self).model_fields else default

    def __contains__(self, key: object) -> bool:
        return key in type(self).model_fields

    def keys(self) -> list[str]:
        return list(type(self).model_fields)

    def items(self) -> Iterator[tuple[str, Any]]:
        return ((k, getattr(self, k)) for k in type(self).model_fields)

    def values(self) -> Iterator[Any]:
        return (getattr(self, k) for k in type(self).model_fields)


class RunSummary(Figures):
    """One level's figures (lab.measure.metrics.summarise_run): names, units and meanings in lab/data/fields.yaml."""

    requests: int
    successes: int
    failures: int
    duration_s: float
    error_rate: float | None
    errors: dict[str, int]
    ttft_ms: Latency
    tpot_ms: Latency
    itl_ms: Latency
    e2el_ms: Latency
    request_throughput: float | None
    output_throughput: float | None
    total_token_throughput: float | None
    stream_decode_tok_s: float | None
    server_decode_tok_s: float | None
    prefill_tok_s: float | None
    server_prefill_tok_s: float | None
    prefill_share: float | None
    output_tokens_mean: float | None
    prompt_tokens_mean: float | None
    cached_fraction: float | None
    requests_without_usage: int
    tokens_counted_from: str | None
    goodput: dict | None
    validity: Validity
    # the run's settings and what ran beside it (summarise_run)
    concurrency: int | None = None
    request_rate: float | None = None
    client_cpu_s: float | None = None
    decode_tok_s_summed: float | None = None
    # the level's concurrency over time (lab.measure.metrics.concurrency_window): its steady state, when it had one
    steady_decode_tok_s: float | None = None
    full_concurrency_fraction: float | None = None
    prefill_fraction: float | None = None
    window_decode_tok_s: float | None = None
    joules_per_token: float | None = None
    # the GPU figures: a total over the GPUs and its per-GPU list, one or several GPUs alike (fields.yaml `gpus:`)
    mean_power_w: float | None = None
    mean_power_w_per_gpu: list[float | None] | None = None
    peak_vram_mib: float | None = None
    peak_vram_mib_per_gpu: list[float | None] | None = None
    peak_host_rss_mib: float | None = None
    energy_not_measured: str | None = None
    repetitions: list[dict] = []
    spread: dict[str, dict] = {}
    warmup: dict | None = None
    deadline_s: float | None = None
    cut: str | None = None


# The figures of one level a tune point keeps (lab.experiments.tune `levels`), by the run summary's names; a latency
# statistic by its flat name (lab.core.fields.flat).
LEVEL_FIGURES = ("output_throughput", "stream_decode_tok_s", "decode_tok_s_summed", "steady_decode_tok_s",
                 "full_concurrency_fraction", "server_decode_tok_s",
                 "prefill_tok_s", "requests", "successes", "duration_s", "spread", "warmup", "joules_per_token",
                 "mean_power_w", "peak_vram_mib", "peak_vram_mib_per_gpu", "peak_host_rss_mib")
LEVEL_STATS = (("ttft_ms", "p50"), ("tpot_ms", "p50"), ("e2el_ms", "p50"))


def level_figures(summary) -> dict:
    """A run summary's LEVEL_FIGURES and p50 latencies as one flat dict (a tune point's level)."""
    from lab.core import fields

    return ({k: summary.get(k) for k in LEVEL_FIGURES}
            | {fields.flat(name, stat): (summary.get(name) or {}).get(stat) for name, stat in LEVEL_STATS})


def at_level(levels: dict | None, streams, key: str):
    """Figure `key` of the level with `streams` streams in a {streams: level figures} mapping (keyed by int; by str
    in a record read back); None when that level was not measured."""
    levels = levels or {}
    return (levels.get(streams) or levels.get(str(streams)) or {}).get(key)


__all__ = ["Latency", "Validity", "Figures", "RunSummary", "LEVEL_FIGURES", "LEVEL_STATS", "level_figures", "at_level"]
