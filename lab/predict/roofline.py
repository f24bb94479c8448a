"""Decode-speed ceilings and predictions (pure: numbers in, numbers out).

Decode is memory-bound: to produce one token a sequence reads every weight once and its own KV cache
once (the memory-bound decode argument; measured on the H200 in outputs/h200-x1/). So

    single-stream ceiling  = bandwidth ÷ (weight bytes + KV bytes of that sequence)
    aggregate ceiling (B)  = B × bandwidth ÷ (weight bytes + B × KV bytes per sequence)

because one decode step of B sequences reads the weights once and each sequence's KV once. With
perfect tensor parallelism over N GPUs the bandwidth is N × one GPU's (llama.cpp's default layer split
runs the GPUs one after another, so it gets one GPU's bandwidth per token). No engine reaches the
ceiling: `predicted = ceiling × efficiency`, where the efficiency comes from measurements kept with their
sources in lab/data/calibration.yaml. "Weight bytes" are the weights READ per token (calibration.yaml
`read_per_token`, `read_definition`): what the engine loads less the token embedding, of which a token reads one
row (llama.cpp keeps it in host memory); a tied embedding (SmolLM2) is the output head too and counts whole.

Per-token model (llama.cpp on a GPU, the one prediction `lab plan` shows): t = bytes read per token ÷ (achieved
fraction × datasheet bandwidth) + a fixed cost per token: one per model family (qwen35: shared by every GPU; dense:
from the lab's H200 point), plus an architecture's own where a controlled pair measured it (`controlled_pairs`;
Hopper, the lab's H100 + H200: at this size a Hopper token is bound by kernel launches, ~7.5 ms, not by bytes); the
achieved fraction is one per GPU architecture, each fitted on its own rows: the public single-stream rows without
speculation (lab.predict.public_speed.fit_points) + the lab's points (calibration.yaml); `lab predict --list-gpus`
prints them. lab.predict.public_check compares the model with every predictable row.

Bandwidth convention: a measured copy counts read + write (lab.measure.copy_bandwidth); an efficiency calibrated
against copy bandwidth is only applied to copy bandwidth, one calibrated against a datasheet figure to
datasheet figures.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Literal

from lab.core import facts
from lab.predict import public_speed
from lab.core.units import GB

BandwidthKind = Literal["copy", "datasheet"]
Mode = Literal["in_process", "served", "aggregate"]


# ---------------------------------------------------------------- the arithmetic
def read_definition() -> dict:
    """The one definition of bytes read per decoded token (lab/data/calibration.yaml `read_per_token`:
    definition + source), which every ceiling and the per-token model use."""
    return facts.load("calibration")["read_per_token"]


def bytes_per_token(weights_bytes: float, kv_bytes_per_seq: float = 0.0) -> float:
    """Bytes one sequence reads to produce one token (`read_definition`): `weights_bytes` = the weights read per
    token (lab.model.weights.decode_read_bytes / profile_read_bytes: loaded less the token embedding) + its KV cache
    and recurrent state at the current depth."""
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
    """Every entry of lab/data/calibration.yaml (each has a source: lab.core.facts refuses one without)."""
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


def gpu_spec_for(name: str | None) -> dict | None:
    """The gpus entry whose `match` regex is found in `name` (a profile's gpu_name_pattern, an NVML name): the most
    specific (longest) match wins; None when no entry matches."""
    hits = [g for g in gpu_specs() if name and re.search(g["match"], name, re.IGNORECASE)]
    return max(hits, key=lambda g: len(g["match"])) if hits else None


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
                    entries: list[Calibration] | None = None, arch_family: str | None = None) -> dict:
    """The roofline for a profile from numbers already resolved (see lab.predict.profile_speed.roofline_for):
    single-stream ceiling at `context_tokens`, a calibrated prediction, and ceilings per concurrency.
    Values are None, with `reason`, when an input is unknown — never 0."""
    out = {"context_tokens": context_tokens, "bandwidth_gb_s": bandwidth.gb_s if bandwidth else None,
           "bandwidth_kind": bandwidth.kind if bandwidth else None,
           "bandwidth_source": bandwidth.source if bandwidth else None,
           "weights_bytes": weights_bytes, "kv_bytes_per_seq": kv_bytes_per_seq,
           "bytes_per_token": None, "decode_ceiling_tok_s": None, "efficiency": None, "calibration_id": None,
           "calibration_source": None, "predicted_decode_tok_s": None, "by_concurrency": [], "reason": None,
           "per_token_predicted_tok_s": None, "per_token_fixed_ms": None, "per_token_family": None, "per_token_how": None,
           "per_token_gpu_arch": None, "per_token_fraction": None,
           "prediction_basis": None, "efficiency_predicted_tok_s": None}
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
               prediction_basis=f"efficiency of calibration {cal.id}" if cal else None,
               by_concurrency=ceilings_by_concurrency(bandwidth.gb_s, weights_bytes, kv_bytes_per_seq,
                                                      levels or profile.bench_levels))
    if device_kind == "gpu" and profile.engine in ("llama.cpp", "llama-cpp-python"):
        try:
            ptm = per_token_model()
            fam = family_of(arch_family) if arch_family else profile_family(profile)
            spec = gpu_spec_for(profile.gpu_name_pattern or profile.name)
            gpu_arch = spec["arch"] if spec else None
            out.update(per_token_predicted_tok_s=ptm.predict_tok_s(bpt, bandwidth.gb_s, bandwidth.kind, fam, gpu_arch),
                       per_token_fixed_ms=ptm.fixed_for(fam, gpu_arch), per_token_family=fam, per_token_how=ptm.how,
                       per_token_gpu_arch=gpu_arch, per_token_fraction=ptm.fraction_for(gpu_arch))
            # One answer: where the per-token model applies (llama.cpp on a GPU) it is THE prediction; the single
            # efficiency ratio of the nearest calibration entry stays in the record as what it was, not as a
            # second prediction (a 3B model's ratio put a V100 at 16 tok/s beside the per-token model's 35).
            out.update(efficiency_predicted_tok_s=out["predicted_decode_tok_s"],
                       predicted_decode_tok_s=out["per_token_predicted_tok_s"],
                       prediction_basis=f"per-token model ({fam}: fixed {ptm.fixed_for(fam, gpu_arch):.2f} ms per token + bytes at "
                                        f"{ptm.fraction_for(gpu_arch):.2f} of datasheet bandwidth ({gpu_arch or 'architecture unknown'}); "
                                        f"fitted on the lab's H200 and published measurements)")
        except (ValueError, KeyError, facts.DataError) as exc:
            out["per_token_how"] = f"per-token model unavailable: {exc}"
    if cal is None:
        out["reason"] = f"no calibration entry for {device_kind} with {bandwidth.kind} bandwidth: prediction unknown"
    return out


# ---------------------------------------------------------------- per-token time model
@dataclass(frozen=True)
class PerTokenModel:
    """t = bytes ÷ (fraction[GPU architecture] × datasheet bandwidth) + fixed_ms[model family] + extra_ms[architecture]
    (see `fit_per_token`).

    `fraction_by_arch`: achieved ÷ datasheet bandwidth per architecture, each fitted from that architecture's own
    rows (`rows_by_arch` names them); `default_fraction` (their median) for an architecture without rows.
    `extra_fixed_ms_by_arch`: what an architecture's own fixed cost per token adds to the shared one, for an
    architecture measured as a controlled pair (one file, one build, two cards of different bandwidth: the lab's H100
    and H200), the only points that tell its fixed cost from its bandwidth; 0 for every other architecture.
    `copy_fraction_of_datasheet`: a measured copy ÷ the datasheet figure on the device where both were measured
    (the lab's H200), to read a profile's measured copy bandwidth in datasheet terms."""

    fixed_ms_by_family: dict
    fraction_by_arch: dict
    rows_by_arch: dict
    default_fraction: float
    copy_fraction_of_datasheet: float
    how: str
    points: tuple
    extra_fixed_ms_by_arch: dict = field(default_factory=dict)

    @property
    def fixed_ms(self) -> float:
        """The fixed cost of the family fitted on the most GPUs (the default for an unknown family)."""
        return next(iter(self.fixed_ms_by_family.values()))

    def fixed_for(self, family: str | None, arch: str | None = None) -> float:
        """Fixed ms per token of `family` on a card of `arch` (a calibration key): the family's shared cost + the
        architecture's own extra (`extra_fixed_ms_by_arch`; 0 where no controlled pair measured one)."""
        return self.fixed_ms_by_family.get(family or "", self.fixed_ms) + self.extra_fixed_ms_by_arch.get(arch or "", 0.0)

    def fixed_by_arch(self, family: str | None) -> dict:
        """fixed_for(family, arch) of every architecture with its own extra, and under "default" everyone else's (the
        form lab.predict.mtp_model's params carry)."""
        return {"default": self.fixed_for(family), **{a: self.fixed_for(family, a) for a in self.extra_fixed_ms_by_arch}}

    def fraction_for(self, arch: str | None) -> float:
        return self.fraction_by_arch.get(arch or "", self.default_fraction)

    def predict_tok_s(self, weights_bytes: float, bandwidth_gb_s: float, bandwidth_kind: BandwidthKind = "datasheet",
                      family: str | None = None, arch: str | None = None) -> float:
        """Decode tok/s of one stream reading `weights_bytes` per token on a device of `bandwidth_gb_s` (datasheet,
        or a measured copy, which is turned into datasheet terms first)."""
        datasheet = bandwidth_gb_s if bandwidth_kind == "datasheet" else bandwidth_gb_s / self.copy_fraction_of_datasheet
        t = weights_bytes / (self.fraction_for(arch) * datasheet * GB) + self.fixed_for(family, arch) / 1000.0
        return 1.0 / t


FIT_STEP_MS = 0.01  # grid step of the fixed cost: far below the spread of the published rows


def _geo_mean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _grid_fit(pts: list[dict]) -> tuple[float, float, dict] | None:
    """(squared log error, fixed ms c, {arch: fraction}) of t = b ÷ (f[arch] × datasheet) + c over `pts`: for each c
    on a grid of FIT_STEP_MS, every architecture's fraction is the geometric mean of what its points imply,
    b ÷ ((t − c) × datasheet); the c with the least squared log error wins. Physical check: no fraction may exceed 1
    (decode cannot read faster than the datasheet bandwidth). None when no c passes it."""
    t_ms = {p["id"]: 1000.0 / p["tok_s"] for p in pts}

    def fractions(c: float) -> dict:
        by_arch: dict[str, list] = {}
        for p in pts:
            by_arch.setdefault(p["arch"], []).append(p["weights_bytes"] / ((t_ms[p["id"]] - c) / 1000 * p["datasheet_gb_s"] * GB))
        return {a: _geo_mean(v) for a, v in by_arch.items()}

    best = None
    for i in range(int(min(t_ms.values()) / FIT_STEP_MS)):
        c = i * FIT_STEP_MS
        f = fractions(c)
        if max(f.values()) > 1.0:
            continue
        err = sum(math.log((p["weights_bytes"] / (f[p["arch"]] * p["datasheet_gb_s"] * GB) + c / 1000) * p["tok_s"]) ** 2
                  for p in pts)
        if best is None or err < best[0]:
            best = (err, c, f)
    return best


def controlled_pairs(points: list[dict], family: str) -> dict:
    """{arch: its points} for each architecture whose `family` points include a controlled pair: points of one
    `controlled` group (one file, one build, one method: the lab's own runs) on two or more datasheet bandwidths.
    Only such a pair tells an architecture's fixed cost per token from its bandwidth fraction; the public rows of an
    architecture mix builds and files, whose differences a fixed cost would absorb."""
    groups: dict[tuple, set] = {}
    for p in points:
        if p["family"] == family and p.get("controlled"):
            groups.setdefault((p["arch"], p["controlled"]), set()).add(p["datasheet_gb_s"])
    own = {a for (a, _), bws in groups.items() if len(bws) >= 2}
    return {a: [p for p in points if p["family"] == family and p["arch"] == a] for a in sorted(own)}


def fit_per_token(points: list[dict]) -> PerTokenModel:
    """Fit t = b ÷ (f[arch] × datasheet) + c[family] + e[arch] to measured points (pure, deterministic).

    Each point: id, family, arch, weights_bytes (bytes read per token), tok_s, datasheet_gb_s; copy_gb_s where a
    copy was measured; `controlled` (a group name) where it is one of a controlled set (`controlled_pairs`). The
    family seen on the most architectures (the anchor) fixes the shared fixed cost c on its points of every
    architecture without a controlled pair (`_grid_fit`: a fraction per architecture, one c, no fraction above 1).
    An architecture with a controlled pair is fitted on its own points the same way (its own c and fraction): e[arch]
    is its c less the shared one (at this model size decode on Hopper is bound by a per-token cost, not by bytes: the
    lab's H100 and H200 decode the same file at 0.96x the speed with 0.70x the bandwidth). Another family's fixed cost
    is then the median of t − b ÷ (f[arch] × datasheet) − e[arch] over its points."""
    if len(points) < 2:
        raise ValueError(f"the per-token model needs at least two measured points, found {len(points)}")
    fams: dict[str, set] = {}
    for p in points:
        fams.setdefault(p["family"], set()).add(p["arch"])
    anchor = max(fams, key=lambda f: (len(fams[f]), sum(p["family"] == f for p in points)))
    pairs = controlled_pairs(points, anchor)
    pts = [p for p in points if p["family"] == anchor and p["arch"] not in pairs]
    if len({p["weights_bytes"] for p in pts}) < 2:
        raise ValueError(f"the {anchor} points need two different byte counts to separate bandwidth from fixed cost")
    best = _grid_fit(pts)
    if best is None:
        raise ValueError("no fixed cost keeps every architecture's achieved bandwidth at or below its datasheet figure")
    _, c, frac = best
    extra = {}
    for a, own in pairs.items():
        fit_a = _grid_fit(own)
        if fit_a is None:
            raise ValueError(f"no fixed cost keeps {a}'s achieved bandwidth at or below its datasheet figure")
        extra[a] = round(fit_a[1] - c, 6)
        frac[a] = fit_a[2][a]
    fixed = {anchor: round(c, 6)}
    for fam in fams:
        if fam == anchor:
            continue
        own = [1000.0 / p["tok_s"] - p["weights_bytes"] / (frac[p["arch"]] * p["datasheet_gb_s"] * GB) * 1000
               - extra.get(p["arch"], 0.0) for p in points if p["family"] == fam and p["arch"] in frac]
        if own:
            fixed[fam] = sorted(own)[len(own) // 2] if len(own) % 2 else sum(sorted(own)[len(own) // 2 - 1:len(own) // 2 + 1]) / 2
    rows = {a: tuple(p["id"] for p in points if p["family"] == anchor and p["arch"] == a) for a in frac}
    both = [p for p in points if p.get("copy_gb_s")]
    copy_frac = both[0]["copy_gb_s"] / both[0]["datasheet_gb_s"] if both else 1.0
    ordered = sorted(v for a, v in frac.items() if a not in pairs)
    default = ordered[len(ordered) // 2]
    how = (f"fitted on {len(points)} measured points: fixed cost per token "
           + ", ".join(f"{f} {v:.2f} ms" for f, v in fixed.items())
           + "".join(f", {a} {extra[a]:+.2f} ms (its own, from a controlled pair: "
                     f"{', '.join(p['id'] for p in pairs[a])})" for a in extra)
           + "; achieved fraction of datasheet bandwidth "
           + ", ".join(f"{a} {v:.2f} ({len(rows[a])} rows)" for a, v in sorted(frac.items())))
    return PerTokenModel(fixed, frac, rows, default, copy_frac, how, tuple(p["id"] for p in points), extra)


def lab_points() -> list[dict]:
    """The lab's own measured points (calibration.yaml per_token_points) in fit_per_token's shape."""
    return [{"id": p["id"], "family": p["family"], "arch": p["gpu_arch"],
             "weights_bytes": p["weights_bytes"] - p["token_embd_bytes"],  # read per token (read_definition)
             "tok_s": p["tok_s"], "datasheet_gb_s": p["datasheet_gb_s"], "copy_gb_s": p["copy_gb_s"],
             "controlled": p.get("controlled")}
            for p in facts.load("calibration", "per_token_points")["per_token_points"]]


def fit_model(rows: list | None = None) -> PerTokenModel:
    """The per-token model fitted to the lab's H200 points and `rows` (public rows, lab.predict.public_speed.Row; all of
    lab/data/public_speed.yaml when None) as lab.predict.public_speed.fit_points selects them: the one fit, callable
    on a subset (lab.predict.public_validate leaves a card or an architecture out with it)."""
    return fit_per_token(lab_points() + public_speed.fit_points(rows))


@lru_cache(maxsize=1)
def per_token_model() -> PerTokenModel:
    """The model fitted to the lab's H200 points and the public rows (`fit_model` on every row)."""
    return fit_model()


def family_of(arch) -> str:
    """Which fixed cost applies: "qwen35" (a hybrid with linear-attention layers, the measured Qwen3.5/3.8 shape)
    or "dense". `arch`: an ArchSpec, a family name, or None (dense)."""
    if arch is None:
        return "dense"
    if hasattr(arch, "linear_layers"):
        return "qwen35" if arch.linear_layers else "dense"
    return "qwen35" if re.search(r"qwen3[._]?5|qwen35|qwen3next", str(arch).lower()) else "dense"


def profile_family(profile) -> str:
    """family_of the profile's architecture (dense when it cannot be resolved here)."""
    from lab.model import models

    try:
        return family_of(models.arch_for(profile))
    except Exception:  # noqa: BLE001 - an unresolvable architecture costs only the family distinction
        return "dense"


def projection_rows(weights_bytes: float, family: str, gpu_ids: tuple[str, ...] = ("v100-32g", "rtx-4090", "h200"),
                    model: PerTokenModel | None = None, read_bytes: float | None = None) -> list[dict]:
    """Single-stream decode projected by the per-token model on each GPU of calibration.yaml's `gpus`, beside the
    plain roofline (datasheet bandwidth ÷ bytes read per token: `read_bytes` when given — the profile's own
    definition, weights + KV and state — else the weights): what the seeds' single-stream claims are held against.
    Each GPU's achieved fraction is its architecture's (`arch` in calibration.yaml's gpus)."""
    model = model or per_token_model()
    read = read_bytes or weights_bytes
    rows = []
    for gid in gpu_ids:
        g = gpu_spec(gid)
        fits = weights_bytes / 2**30 < g["memory_gib"]
        rows.append({"gpu": g["name"], "bandwidth_gb_s": g["bandwidth_gb_s"], "read_bytes": read,
                     "roofline_tok_s": round(decode_ceiling_tok_s(g["bandwidth_gb_s"], read), 1),
                     "projected_tok_s": round(model.predict_tok_s(read, g["bandwidth_gb_s"], "datasheet", family,
                                                                      g["arch"]), 1),
                     "fixed_ms": round(model.fixed_for(family, g["arch"]), 2), "weights_fit_in_vram": fits,
                     "how": model.how, "source": g["source"]})
    return rows


__all__ = ["read_definition", "bytes_per_token", "decode_ceiling_tok_s", "aggregate_ceiling_tok_s", "efficiency", "predicted_tok_s",
           "ceilings_by_concurrency", "Calibration", "calibrations", "gpu_specs", "gpu_spec", "pick_calibration",
           "Bandwidth", "runs_on_gpu", "bandwidth_for", "profile_ceiling", "PerTokenModel", "fit_per_token",
           "per_token_model", "fit_model", "lab_points", "gpu_spec_for", "family_of", "projection_rows"]
