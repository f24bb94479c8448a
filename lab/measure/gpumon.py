"""Memory and energy while something runs: one sampler thread reads, every `interval_s`,
  - per GPU through NVML (nvidia-ml-py): memory used, power draw, and the total-energy counter
    (nvmlDeviceGetTotalEnergyConsumption, millijoules since the driver loaded; Volta and newer);
  - the server's process tree through psutil: resident memory (RSS) of the process and all its children.

`window(t0, t1, output_tokens)` then gives, for any stretch of the run (a model load, one benchmark point):
peak VRAM and mean power, each as a total over the GPUs and per GPU (`peak_vram_mib` / `peak_vram_mib_per_gpu`,
`mean_power_w` / `mean_power_w_per_gpu`: lab/data/fields.yaml's `gpus:` says which is which), energy (the counter's
difference when the GPU has one, else power integrated over the samples) and joules per output token, peak host RSS. Times are time.perf_counter() seconds, the clock
lab.measure.loadgen stamps its runs with.

On a machine without NVML or GPUs every GPU number is None with `gpu_not_measured` saying why: "not measured",
never 0 and never a guess. Host RSS is measured everywhere psutil runs.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

NVML_SOURCE = ("NVML API reference (docs.nvidia.com/deploy/nvml-api): nvmlDeviceGetMemoryInfo, "
               "nvmlDeviceGetPowerUsage (mW), nvmlDeviceGetTotalEnergyConsumption (mJ), read through nvidia-ml-py")


@dataclass
class Sample:
    t: float  # time.perf_counter()
    vram_mib: list[float] | None = None  # per GPU, memory used (all processes)
    power_w: list[float] | None = None
    energy_mj: list[float | None] | None = None  # per GPU, total-energy counter
    host_rss_mib: float | None = None  # the watched process tree


@dataclass
class Sampler:
    """Start it before the thing to watch (`start()` or `with`), `watch(pid)` once a server has a pid, read
    `window(...)` for any stretch, `stop()` at the end. Samples stay in memory (10 per second × 2 floats per GPU)."""

    interval_s: float = 0.1
    pid: int | None = None
    samples: list[Sample] = field(default_factory=list)
    gpu_not_measured: str | None = None
    gpu_names: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _handles: list = field(default_factory=list, repr=False)
    _nv: object = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _tree: list = field(default_factory=list, repr=False)
    _tree_pid: int | None = field(default=None, repr=False)
    _tree_t: float = field(default=0.0, repr=False)

    # ------------------------------------------------------------ life cycle
    def start(self) -> "Sampler":
        self._open_nvml()
        self.sample()  # one right away: a window that starts now has a first point
        self._thread = threading.Thread(target=self._loop, name="lab-gpumon", daemon=True)
        self._thread.start()
        return self

    def mark(self) -> float:
        """Take a sample now and return its time: the edge of a window."""
        return self.sample().t

    def watch(self, pid: int | None) -> None:
        """Follow this process (and its children) for host RSS from now on."""
        self.pid = pid

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.sample()
        if self._nv is not None:
            try:
                self._nv.nvmlShutdown()
            except Exception:  # noqa: BLE001 - shutting down a library that failed to start
                pass
            self._nv = None

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False

    def _open_nvml(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - ImportError, NVMLError_LibraryNotFound, DriverNotLoaded, ...
            self.gpu_not_measured = f"NVML not available ({type(exc).__name__}: {exc})"
            return
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            self.gpu_not_measured = "NVML reports no GPU"
            pynvml.nvmlShutdown()
            return
        self._nv = pynvml
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        for h in self._handles:
            name = pynvml.nvmlDeviceGetName(h)
            self.gpu_names.append(name.decode() if isinstance(name, bytes) else name)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    # ------------------------------------------------------------ one reading
    def _gpu_reading(self) -> tuple[list | None, list | None, list | None]:
        if self._nv is None:
            return None, None, None
        nv, mem, power, energy = self._nv, [], [], []
        for h in self._handles:
            try:
                mem.append(nv.nvmlDeviceGetMemoryInfo(h).used / 2**20)
            except Exception:  # noqa: BLE001 - one failed read is a gap, not a zero
                mem.append(None)
            try:
                power.append(nv.nvmlDeviceGetPowerUsage(h) / 1000.0)
            except Exception:  # noqa: BLE001
                power.append(None)
            try:
                energy.append(float(nv.nvmlDeviceGetTotalEnergyConsumption(h)))
            except Exception:  # noqa: BLE001 - pre-Volta GPUs have no counter
                energy.append(None)
        return mem, power, energy

    def _host_rss_mib(self) -> float | None:
        if not self.pid:
            return None
        try:
            import psutil

            now = time.monotonic()
            # Listing children scans every process in /proc (~6 ms on a busy box): do it every 2 s, not every
            # sample, so the sampler stays light next to the benchmark client in the same process.
            if self._tree_pid != self.pid or now - self._tree_t > 2.0:
                proc = psutil.Process(self.pid)
                self._tree = [proc, *proc.children(recursive=True)]
                self._tree_pid, self._tree_t = self.pid, now
        except Exception:  # noqa: BLE001 - the process ended, or psutil is missing
            return None
        total, alive = 0, False
        for p in self._tree:
            try:
                total += p.memory_info().rss
                alive = True
            except Exception:  # noqa: BLE001 - a child ended between listing and reading
                pass
        return total / 2**20 if alive else None

    def sample(self) -> Sample:
        mem, power, energy = self._gpu_reading()
        s = Sample(time.perf_counter(), mem, power, energy, self._host_rss_mib())
        with self._lock:
            self.samples.append(s)
        return s

    # ------------------------------------------------------------ what a stretch of time used
    def window(self, t0: float, t1: float, output_tokens: int | None = None) -> dict:
        with self._lock:
            inside = [s for s in self.samples if t0 <= s.t <= t1]
            before = [s for s in self.samples if s.t < t0]
        return summarise_window(inside, before[-1] if before else None, t0, t1, output_tokens,
                                self.gpu_not_measured, self.gpu_names)


def _peak(values) -> float | None:
    vals = [v for v in values if v is not None]
    return max(vals) if vals else None


def summarise_window(inside: list[Sample], before: Sample | None, t0: float, t1: float,
                     output_tokens: int | None, gpu_not_measured: str | None = None,
                     gpu_names: list[str] | None = None) -> dict:
    """What the samples of [t0, t1] say (pure). `before`: the last sample ahead of t0, so the energy
    counter's difference covers the whole window even when no sample fell right on t0."""
    seconds = t1 - t0
    out = {"seconds": round(seconds, 3), "samples": len(inside), "gpu_names": gpu_names or [],
           "peak_vram_mib": None, "peak_vram_mib_per_gpu": None, "mean_power_w": None, "mean_power_w_per_gpu": None,
           "energy_j": None,
           "energy_how": None, "joules_per_token": None, "tokens_per_joule": None,
           "peak_host_rss_mib": _peak(s.host_rss_mib for s in inside), "gpu_not_measured": gpu_not_measured,
           "source": NVML_SOURCE}
    gpu = [s for s in inside if s.vram_mib is not None]
    if not gpu:
        out["gpu_not_measured"] = gpu_not_measured or ("no GPU sample in this window" if inside else "no sample")
        return out
    n = len(gpu[0].vram_mib)
    out["peak_vram_mib_per_gpu"] = [_peak(s.vram_mib[i] for s in gpu) for i in range(n)]
    # the peak of the sum, not the sum of the peaks: two GPUs need not peak at the same moment
    out["peak_vram_mib"] = _peak(sum(v for v in s.vram_mib if v is not None) for s in gpu)
    powers = [[s.power_w[i] for s in gpu if s.power_w and s.power_w[i] is not None] for i in range(n)]
    out["mean_power_w_per_gpu"] = [sum(p) / len(p) if p else None for p in powers]
    # a total that leaves a GPU out would read as the box's power: None unless every GPU was read
    out["mean_power_w"] = (sum(out["mean_power_w_per_gpu"]) if all(p is not None for p in out["mean_power_w_per_gpu"])
                           else None)
    first = before if before is not None and before.energy_mj is not None else gpu[0]
    last = gpu[-1]
    counters = (first.energy_mj and last.energy_mj and all(v is not None for v in first.energy_mj + last.energy_mj)
                and first is not last)
    if counters:
        out["energy_j"] = sum(b - a for a, b in zip(first.energy_mj, last.energy_mj)) / 1000.0
        out["energy_how"] = "NVML total-energy counter difference"
    elif all(p for p in powers) and len(gpu) >= 2:
        # trapezoids over the samples, per GPU, summed
        total = 0.0
        for i in range(n):
            pts = [(s.t, s.power_w[i]) for s in gpu if s.power_w and s.power_w[i] is not None]
            total += sum((tb - ta) * (pa + pb) / 2 for (ta, pa), (tb, pb) in zip(pts, pts[1:]))
        out["energy_j"] = total
        out["energy_how"] = "power samples integrated (no energy counter)"
    if out["energy_j"] is not None and output_tokens:
        out["joules_per_token"] = out["energy_j"] / output_tokens
        out["tokens_per_joule"] = output_tokens / out["energy_j"] if out["energy_j"] > 0 else None
    return out


def offload_check(reported: dict, profile) -> dict:
    """Did the server put on the GPU what the profile asked (from llama-server's log, parsed by
    lab.serving.engine_logs.parse_llama_log)? A Check as a dict: fewer layers offloaded than asked, or a KV buffer in
    host memory on a GPU profile, is a warning — decode then runs at host-memory speed for those layers."""
    from lab.core.checks import Check

    src = "llama-server log: 'offloaded N/M layers to GPU', 'KV buffer size' lines (lab.serving.engine_logs.parse_llama_log)"
    if not profile.gpu_count or profile.engine not in ("llama.cpp", "llama-cpp-python"):
        return Check("layers and KV cache on the GPU", "skip", "CPU profile" if not profile.gpu_count else profile.engine,
                     "n/a", "", src).to_dict()
    from lab.core import planmode

    if not reported:  # no server ran here (plan mode, or it could not start): no log to read, nothing to warn about
        return Check("layers and KV cache on the GPU", "skip",
                     f"no server started here ({planmode.reason(profile) or 'no server log'})",
                     "all layers offloaded (read from the server's log on the profile's box)", "", src).to_dict()
    off = reported.get("offloaded")
    if not off:
        return Check("layers and KV cache on the GPU", "warn", "no 'offloaded N/M layers' line in the log",
                     "all layers offloaded", "the server log has no offload line: a CPU-only build? check notebook 02",
                     src).to_dict()
    asked = off["of"] if profile.n_gpu_layers < 0 else min(profile.n_gpu_layers, off["of"])
    # host memory: "CPU" buffers, and the pinned host buffers older CUDA builds name "CUDA_Host" (--no-kv-offload;
    # ggml-org/llama.cpp#6787)
    host_kv = {dev: mib for dev, mib in (reported.get("kv_buffers_mib") or {}).items()
               if (dev.upper().startswith("CPU") or dev.upper().endswith("_HOST")) and mib > 0}
    problems = []
    if off["layers"] < asked:
        problems.append(f"only {off['layers']} of {off['of']} layers offloaded, {asked} asked")
    if host_kv:
        problems.append("KV cache in host memory: " + ", ".join(f"{d} {m:.0f} MiB" for d, m in host_kv.items()))
    observed = f"{off['layers']}/{off['of']} layers" + (f"; host KV {sum(host_kv.values()):.0f} MiB" if host_kv else "")
    return Check("layers and KV cache on the GPU", "warn" if problems else "pass", observed,
                 f"{asked}/{off['of']} layers, KV on the GPU",
                 "; ".join(problems) + (" — spilled parts run at host-memory speed: lower context_tokens or "
                                         "parallel_slots, a smaller quant, or more VRAM" if problems else ""),
                 src).to_dict()


def rows(windows: dict[str, dict]) -> list[dict]:
    """{label: window} as table rows: peak VRAM and power (all GPUs, and each), energy, J/token, host RSS — or why
    not measured. A window of a record written before schema_version 2 is read through lab.core.fields.canonical."""
    from lab.core import fields

    out = []
    for label, w in windows.items():
        if not w:
            continue
        w = fields.canonical(w)
        per_gpu = w.get("peak_vram_mib_per_gpu") or []
        out.append({"stretch": label, "seconds": w["seconds"],
                    "peak_vram_mib": None if w["peak_vram_mib"] is None else round(w["peak_vram_mib"]),
                    "peak_vram_mib_per_gpu": [None if v is None else round(v) for v in per_gpu] if per_gpu else None,
                    "mean_power_w": None if w["mean_power_w"] is None else round(w["mean_power_w"], 1),
                    "mean_power_w_per_gpu": [None if v is None else round(v, 1) for v in w.get("mean_power_w_per_gpu") or []]
                    or None,
                    "energy_j": None if w["energy_j"] is None else round(w["energy_j"], 1),
                    "joules_per_token": None if w["joules_per_token"] is None else round(w["joules_per_token"], 4),
                    "tokens_per_joule": None if w["tokens_per_joule"] is None else round(w["tokens_per_joule"], 3),
                    "peak_host_rss_mib": None if w["peak_host_rss_mib"] is None else round(w["peak_host_rss_mib"]),
                    "gpu": w["gpu_not_measured"] and f"not measured: {w['gpu_not_measured']}" or ", ".join(w["gpu_names"])})
    return out
