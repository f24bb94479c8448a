"""Decode-speed ceilings and predictions (pure: numbers in, numbers out).

Decode is memory-bound: to produce one token a sequence reads every weight once and its own KV cache
once (the memory-bound decode argument; measured on the H200 in outputs/h200-x1/). So

    single-stream ceiling  = bandwidth ÷ (weight bytes + KV bytes of that sequence)
    aggregate ceiling (B)  = B × bandwidth ÷ (weight bytes + B × KV bytes per sequence)

because one decode step of B sequences reads the weights once and each sequence's KV once. With
perfect tensor parallelism over N GPUs the bandwidth is N × one GPU's (llama.cpp's default layer split
runs the GPUs one after another, so it gets one GPU's bandwidth per token). No engine reaches the
ceiling: `predicted = ceiling × efficiency`, where the efficiency comes from measurements kept with their
sources in lab/data/calibration.yaml. The weights count as read in full; for a model with an untied
input embedding only one row of it is read per token, which makes the ceiling ≈ 2–3 % pessimistic
for 27B-class models (vocab × hidden ÷ params) and exact for tied ones such as SmolLM2.

Bandwidth convention: a measured copy counts read + write (lab.hardware); an efficiency calibrated
against copy bandwidth is only applied to copy bandwidth, one calibrated against a datasheet figure to
datasheet figures.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Literal

from lab import facts

GB = 1e9
BandwidthKind = Literal["copy", "datasheet"]
Mode = Literal["in_process", "served", "aggregate"]


# ---------------------------------------------------------------- the arithmetic
def bytes_per_token(weights_bytes: float, kv_bytes_per_seq: float = 0.0) -> float:
    """Bytes one sequence reads to produce one token: all weights + its KV cache at the current depth."""
    if weights_bytes <= 0 or kv_bytes_per_seq < 0:
        raise ValueError(f"weights_bytes must be > 0 and kv_bytes_per_seq ≥ 0, found {weights_bytes}, {kv_bytes_per_seq}")
    return float(weights_bytes) + float(kv_bytes_per_seq)


def decode_ceiling_tok_s(bandwidth_gb_s: float, bytes_per_token: float) -> float:
    """Single-stream decode ceiling: bandwidth (GB/s, 1e9 bytes) ÷ bytes read per token."""
    if bandwidth_gb_s <= 0 or bytes_per_token <= 0:
        raise ValueError(f"bandwidth and bytes per token must be > 0, found {bandwidth_gb_s}, {bytes_per_token}")
    return bandwidth_gb_s * GB / bytes_per_token


def aggregate_ceiling_tok_s(bandwidth_gb_s: float, weights_bytes: float, kv_bytes_per_seq: float,
                            batch: int) -> float:
    """Tokens per second summed over `batch` sequences decoding together: each step reads the weights
    once and every sequence's KV once, and yields `batch` tokens."""
    if batch < 1:
        raise ValueError(f"batch must be ≥ 1, found {batch}")
    step_bytes = bytes_per_token(weights_bytes, 0) + batch * float(kv_bytes_per_seq)
    return batch * decode_ceiling_tok_s(bandwidth_gb_s, step_bytes)


def efficiency(measured_tok_s: float | None, ceiling_tok_s: float | None) -> float | None:
    """measured ÷ ceiling; None when either is unknown."""
    if measured_tok_s is None or not ceiling_tok_s:
        return None
    return measured_tok_s / ceiling_tok_s


def predicted_tok_s(ceiling_tok_s: float | None, eff: float | None) -> float | None:
    """ceiling × efficiency; None when either is unknown."""
    if ceiling_tok_s is None or eff is None:
        return None
    return ceiling_tok_s * eff


def ceilings_by_concurrency(bandwidth_gb_s: float, weights_bytes: float, kv_bytes_per_seq: float,
                            levels: list[int]) -> list[dict]:
    """One row per concurrency level: aggregate ceiling and what each stream gets at most."""
    rows = []
    for b in levels:
        agg = aggregate_ceiling_tok_s(bandwidth_gb_s, weights_bytes, kv_bytes_per_seq, b)
        rows.append({"concurrency": b, "aggregate_ceiling_tok_s": agg, "per_stream_ceiling_tok_s": agg / b})
    return rows


# ---------------------------------------------------------------- calibration data
@dataclass(frozen=True)
class Calibration:
    """One measured decode speed with the bandwidth and bytes it ran at (lab/data/calibration.yaml)."""

    id: str
    device_kind: str
    device: str
    engine: str
    mode: str
    batch: int
    tok_s: float
    weights_bytes: int
    kv_bytes_per_seq: int
    bandwidth_gb_s: dict
    quality: str
    source: str

    def ceiling_tok_s(self, kind: BandwidthKind) -> float | None:
        bw = self.bandwidth_gb_s.get(kind)
        if bw is None:
            return None
        return aggregate_ceiling_tok_s(bw, self.weights_bytes, self.kv_bytes_per_seq, self.batch)

    def efficiency(self, kind: BandwidthKind) -> float | None:
        return efficiency(self.tok_s, self.ceiling_tok_s(kind))

    def row(self) -> dict:
        """For a table: the raw numbers and the efficiencies derived from them."""
        d = asdict(self)
        d.pop("bandwidth_gb_s")
        for kind in ("copy", "datasheet"):
            d[f"bandwidth_{kind}_gb_s"] = self.bandwidth_gb_s.get(kind)
            d[f"efficiency_vs_{kind}"] = self.efficiency(kind)
        return d


def calibrations() -> list[Calibration]:
    """Every entry of lab/data/calibration.yaml (each has a source: lab.facts refuses one without)."""
    data = facts.load("calibration", "measurements")
    return [Calibration(**{k: e[k] for k in Calibration.__dataclass_fields__}) for e in data["measurements"]]


def gpu_specs() -> list[dict]:
    """Bandwidth per GPU model (for claims about hardware the lab is not running on)."""
    return facts.load("calibration", "gpus")["gpus"]


def gpu_spec(gpu_id: str) -> dict:
    for g in gpu_specs():
        if g["id"] == gpu_id:
            return g
    raise KeyError(f"unknown GPU {gpu_id!r} in lab/data/calibration.yaml; known: {', '.join(g['id'] for g in gpu_specs())}")


def _norm(text: str | None) -> str:
    return re.sub(r"[^a-z0-9]", "", (text or "").lower())


def pick_calibration(device_kind: str, engine: str, mode: Mode = "in_process", bandwidth_kind: BandwidthKind = "copy",
                     device: str | None = None, entries: list[Calibration] | None = None,
                     weights_bytes: float | None = None) -> Calibration | None:
    """The closest calibration entry that has an efficiency for `bandwidth_kind`: same device kind is
    required; then the same GPU model (e.g. "V100" in the NVML name) weighs most, then the engine, then
    the mode, then first-hand over secondary, then the nearest model size (`weights_bytes`). None when
    nothing fits (the prediction is then None)."""
    entries = calibrations() if entries is None else entries
    dev = _norm(device)

    def score(c: Calibration) -> tuple:
        model = re.search(r"(v100|h200|h100|a100|a10|l4|t4|4090|3090|4060|epyc|xeon)", _norm(c.device))
        same_device = bool(dev and model and model.group(1) in dev)
        size = -abs(math.log(c.weights_bytes / weights_bytes)) if weights_bytes else 0.0
        return (same_device, c.engine == engine, c.mode == mode, c.quality == "first_hand", size)

    usable = [c for c in entries if c.device_kind == device_kind and c.efficiency(bandwidth_kind) is not None]
    return max(usable, key=score) if usable else None


# ---------------------------------------------------------------- a profile's numbers
@dataclass(frozen=True)
class Bandwidth:
    """The bandwidth a profile decodes with: gb_s (all tensor-parallel GPUs together), its kind and origin."""

    gb_s: float
    kind: BandwidthKind
    per_device_gb_s: float
    devices: int
    source: str


def runs_on_gpu(profile) -> bool:
    """Whether the profile decodes on its GPUs (llama.cpp engines only with layers offloaded)."""
    if profile.gpu_count == 0:
        return False
    return profile.engine not in ("llama.cpp", "llama-cpp-python") or profile.n_gpu_layers != 0


def bandwidth_for(profile, hardware_record: dict | None = None) -> Bandwidth | None:
    """Measured bandwidth from notebook 01's record (`bandwidth` key) when it fits the profile (a GPU
    measurement for a GPU profile, host RAM for a CPU one); else the profile's datasheet figure; else
    None. Perfect tensor parallelism multiplies by tensor_parallel_size."""
    tp = profile.tensor_parallel_size
    on_gpu = runs_on_gpu(profile)
    measured = (hardware_record or {}).get("bandwidth") or {}
    if measured.get("gb_s") and measured.get("kind") == ("gpu" if on_gpu else "host_ram"):
        n = tp if on_gpu else 1
        return Bandwidth(measured["gb_s"] * n, "copy", measured["gb_s"], n,
                         f"measured copy bandwidth x {n}: {measured.get('method', measured['kind'])}")
    if on_gpu and profile.gpu_memory_bandwidth_gb_s:
        return Bandwidth(profile.gpu_memory_bandwidth_gb_s * tp, "datasheet", profile.gpu_memory_bandwidth_gb_s, tp,
                         f"profile {profile.name}: gpu_memory_bandwidth_gb_s (datasheet) x tensor_parallel_size {tp}")
    return None


def profile_ceiling(profile, *, bandwidth: Bandwidth | None, weights_bytes: float | None,
                    kv_bytes_per_seq: float | None, context_tokens: int, levels: list[int] | None = None,
                    entries: list[Calibration] | None = None) -> dict:
    """The roofline for a profile from numbers already resolved (see lab.claims.profile_inputs):
    single-stream ceiling at `context_tokens`, a calibrated prediction, and ceilings per concurrency.
    Values are None, with `reason`, when an input is unknown — never 0."""
    out = {"context_tokens": context_tokens, "bandwidth_gb_s": bandwidth.gb_s if bandwidth else None,
           "bandwidth_kind": bandwidth.kind if bandwidth else None,
           "bandwidth_source": bandwidth.source if bandwidth else None,
           "weights_bytes": weights_bytes, "kv_bytes_per_seq": kv_bytes_per_seq,
           "bytes_per_token": None, "decode_ceiling_tok_s": None, "efficiency": None, "calibration_id": None,
           "calibration_source": None, "predicted_decode_tok_s": None, "by_concurrency": [], "reason": None}
    missing = [n for n, v in (("bandwidth", bandwidth), ("weights_bytes", weights_bytes),
                              ("kv_bytes_per_seq", kv_bytes_per_seq)) if v is None]
    if missing:
        out["reason"] = (f"unknown: {', '.join(missing)}"
                         + (" (a CPU profile has no datasheet bandwidth: run notebook 01 to measure it)"
                            if bandwidth is None and profile.gpu_count == 0 else ""))
        return out
    bpt = bytes_per_token(weights_bytes, kv_bytes_per_seq)
    ceiling = decode_ceiling_tok_s(bandwidth.gb_s, bpt)
    device_kind = "gpu" if runs_on_gpu(profile) else "cpu"
    cal = pick_calibration(device_kind, profile.engine, "in_process", bandwidth.kind,
                           profile.gpu_name_pattern or "", entries, weights_bytes)
    eff = cal.efficiency(bandwidth.kind) if cal else None
    out.update(bytes_per_token=bpt, decode_ceiling_tok_s=ceiling, efficiency=eff,
               calibration_id=cal.id if cal else None, calibration_source=cal.source if cal else None,
               predicted_decode_tok_s=predicted_tok_s(ceiling, eff),
               by_concurrency=ceilings_by_concurrency(bandwidth.gb_s, weights_bytes, kv_bytes_per_seq,
                                                      levels or profile.bench_levels))
    if cal is None:
        out["reason"] = f"no calibration entry for {device_kind} with {bandwidth.kind} bandwidth: prediction unknown"
    return out


__all__ = ["bytes_per_token", "decode_ceiling_tok_s", "aggregate_ceiling_tok_s", "efficiency", "predicted_tok_s",
           "ceilings_by_concurrency", "Calibration", "calibrations", "gpu_specs", "gpu_spec", "pick_calibration",
           "Bandwidth", "runs_on_gpu", "bandwidth_for", "profile_ceiling"]
