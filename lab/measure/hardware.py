"""What this box has, whether it is healthy enough for the profile, and how fast its memory is.

Three layers, so that the judgement can be tested without hardware:

* `inventory(profile)` reads NVML (through nvidia-ml-py's `pynvml`) and the host into a plain dict.
  Every NVML call is guarded: a field the GPU or driver cannot report is `None`, and the reason
  (e.g. "NVMLError_NotSupported: Not Supported") is kept under the GPU's `unavailable` mapping.
* `check_all(inv, bandwidth, profile)` and the `check_*` functions are pure: (inventory dict,
  profile) -> `lab.core.checks.Check` list. Unit tests feed them fake inventories.
* `measure_bandwidth()` times a large memory copy on the GPU (torch or cupy) or, without one, in
  host RAM with numpy, and keeps the raw samples.

Bandwidth convention: a copy of B bytes reads B and writes B, and is counted as 2 x B bytes moved
(STREAM's "Copy" convention, and the one behind the 4227 GB/s H200 device-to-device figure in
the lab's H200 evidence in outputs/h200-x1/). Decode reads weights only, so read bandwidth is the figure of merit; a copy is a
fair, portable proxy for it.
"""
from __future__ import annotations

import os
import re
import shutil
import statistics
import time
from pathlib import Path

from lab.core import evidence
from lab.core.checks import Check, worst
from lab.core.profiles import Profile

NVML_SOURCE = "NVML API reference (docs.nvidia.com/deploy/nvml-api), read through nvidia-ml-py"
V100_BRIEF = "NVIDIA Tesla V100 PCIe product brief PB-08744-001 (250 W, passive heat sink, no display output)"
PAGE_RETIREMENT_DOC = "NVIDIA 'Dynamic Page Retirement' (docs.nvidia.com/deploy/dynamic-page-retirement)"
ROW_REMAP_DOC = "NVIDIA 'GPU Memory Error Management' (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt)"
HBM_ECC_SOURCE = ("NVIDIA Tesla V100 GPU Architecture whitepaper (Volta, WP-08608-001), 'ECC Memory Resiliency': "
                  "'With V100 and P100, ECC can be active without a bandwidth or capacity penalty.'")
WEIGHTS_ESTIMATE_SOURCE = ("lab.model.weights: lab.model.quantize per-tensor prediction for a shipped stand-in, else params x "
                           "lab/data/weight_bits.yaml bits (llama.cpp tools/quantize QUANT_OPTIONS)")

# Clock event ("throttle") reason bits from nvml.h, with how much each should worry a user.
THROTTLE_REASONS = {
    0x001: ("GPU idle", "info"),
    0x002: ("application clocks setting", "info"),
    0x004: ("SW power cap", "warn"),
    0x008: ("HW slowdown", "fail"),
    0x010: ("sync boost", "info"),
    0x020: ("SW thermal slowdown", "warn"),
    0x040: ("HW thermal slowdown", "fail"),
    0x080: ("HW power brake slowdown", "fail"),
    0x100: ("display clock setting", "info"),
}

# PSU sizing rule of thumb: keep the sustained load at or below 80 % of the PSU's rating.
PSU_LOAD_FRACTION = 0.8
PSU_CPU_BOARD_W = 150  # a desktop CPU under inference load + board, RAM, disks and fans
PSU_SIZES_W = (450, 550, 650, 750, 850, 1000, 1200, 1300, 1600, 2000, 2400, 3000)


# ================================================================ inventory (side effects)
def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _nvml_call(fn, *args):
    """Call one NVML function: (value, None), or (None, why it gave nothing)."""
    try:
        return fn(*args), None
    except Exception as exc:  # NVMLError_NotSupported, _NoPermission, _GPUIsLost, missing symbols...
        return None, _reason(exc)


def _gpu_fields(nv, h) -> dict:
    """One GPU's facts; each value is (value, None) or (None, reason). Units: bytes, W, °C, MHz."""
    mw = lambda v: None if v is None else v / 1000  # NVML reports milliwatts
    f: dict = {}
    f["name"] = _nvml_call(nv.nvmlDeviceGetName, h)
    bus, why = _nvml_call(nv.nvmlDeviceGetPciInfo, h)
    bus_id = getattr(bus, "busId", None)
    f["pci_bus_id"] = (bus_id.decode() if isinstance(bus_id, bytes) else bus_id, why)
    mem, why = _nvml_call(nv.nvmlDeviceGetMemoryInfo, h)
    f["memory_total_bytes"] = (mem.total if mem else None, why)
    f["memory_used_bytes"] = (mem.used if mem else None, why)
    cc, why = _nvml_call(nv.nvmlDeviceGetCudaComputeCapability, h)
    f["compute_capability"] = ("%d.%d" % tuple(cc) if cc else None, why)
    bar1, why = _nvml_call(nv.nvmlDeviceGetBAR1MemoryInfo, h)
    f["bar1_total_bytes"] = (bar1.bar1Total if bar1 else None, why)
    ecc, why = _nvml_call(nv.nvmlDeviceGetEccMode, h)
    f["ecc_mode_current"] = (bool(ecc[0]) if ecc else None, why)
    f["ecc_mode_pending"] = (bool(ecc[1]) if ecc else None, why)
    unc = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    f["ecc_uncorrected_volatile"] = _nvml_call(nv.nvmlDeviceGetTotalEccErrors, h, unc, nv.NVML_VOLATILE_ECC)
    f["ecc_uncorrected_aggregate"] = _nvml_call(nv.nvmlDeviceGetTotalEccErrors, h, unc, nv.NVML_AGGREGATE_ECC)
    rows, why = _nvml_call(nv.nvmlDeviceGetRemappedRows, h)  # Ampere and newer
    f["remapped_rows_correctable"] = (rows[0] if rows else None, why)
    f["remapped_rows_uncorrectable"] = (rows[1] if rows else None, why)
    f["remapped_rows_pending"] = (bool(rows[2]) if rows else None, why)
    f["remapped_rows_failure"] = (bool(rows[3]) if rows else None, why)
    sbe, why = _nvml_call(nv.nvmlDeviceGetRetiredPages, h, nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
    f["retired_pages_sbe"] = (len(sbe) if sbe is not None else None, why)
    dbe, why = _nvml_call(nv.nvmlDeviceGetRetiredPages, h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    f["retired_pages_dbe"] = (len(dbe) if dbe is not None else None, why)
    pend, why = _nvml_call(nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
    f["retired_pages_pending"] = (bool(pend) if pend is not None else None, why)
    f["pcie_gen_current"] = _nvml_call(nv.nvmlDeviceGetCurrPcieLinkGeneration, h)
    f["pcie_gen_max"] = _nvml_call(nv.nvmlDeviceGetMaxPcieLinkGeneration, h)
    f["pcie_width_current"] = _nvml_call(nv.nvmlDeviceGetCurrPcieLinkWidth, h)
    f["pcie_width_max"] = _nvml_call(nv.nvmlDeviceGetMaxPcieLinkWidth, h)
    f["nvlink_links"] = _nvlink_links(nv, h)
    f["temperature_c"] = _nvml_call(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
    f["temperature_slowdown_c"] = _nvml_call(nv.nvmlDeviceGetTemperatureThreshold, h,
                                             nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
    f["temperature_shutdown_c"] = _nvml_call(nv.nvmlDeviceGetTemperatureThreshold, h,
                                             nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)
    for key, fn in (("power_draw_w", "nvmlDeviceGetPowerUsage"), ("power_limit_w", "nvmlDeviceGetPowerManagementLimit"),
                    ("power_enforced_limit_w", "nvmlDeviceGetEnforcedPowerLimit"),
                    ("power_default_limit_w", "nvmlDeviceGetPowerManagementDefaultLimit")):
        value, why = _nvml_call(getattr(nv, fn), h)
        f[key] = (mw(value), why)
    f["throttle_reasons_mask"] = _throttle_mask(nv, h)
    f["clock_sm_mhz"] = _nvml_call(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
    f["clock_sm_max_mhz"] = _nvml_call(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM)
    for key, fn in (("display_mode", "nvmlDeviceGetDisplayMode"), ("display_active", "nvmlDeviceGetDisplayActive"),
                    ("persistence_mode", "nvmlDeviceGetPersistenceMode")):
        value, why = _nvml_call(getattr(nv, fn), h)
        f[key] = (bool(value) if value is not None else None, why)
    f["vbios"] = _nvml_call(nv.nvmlDeviceGetVbiosVersion, h)
    return f


def _nvlink_links(nv, h):
    """[{link, active}] for the links NVML knows on this GPU, or (None, reason) when it has none."""
    links = []
    for link in range(nv.NVML_NVLINK_MAX_LINKS):
        state, why = _nvml_call(nv.nvmlDeviceGetNvLinkState, h, link)
        if state is None:  # past the last link (InvalidArgument) or no NVLink at all (NotSupported)
            return (links, None) if links else (None, why)
        links.append({"link": link, "active": bool(state)})
    return links, None


def _throttle_mask(nv, h):
    fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    return _nvml_call(fn, h)


def gpu_inventory() -> dict:
    """NVML's view: {"nvml": {available, reason, driver, cuda_driver}, "gpus": [per-GPU dicts]}.

    Never raises: no driver, no library or no permission gives available=False and the reason."""
    nvml = {"available": False, "reason": None, "driver": None, "cuda_driver": None, "nvml_version": None}
    try:
        import pynvml as nv
    except ImportError as exc:
        return {"nvml": {**nvml, "reason": f"nvidia-ml-py is not installed ({exc})"}, "gpus": []}
    try:
        nv.nvmlInit()
    except Exception as exc:
        return {"nvml": {**nvml, "reason": _reason(exc)}, "gpus": []}
    try:
        nvml["available"] = True
        nvml["driver"], _ = _nvml_call(nv.nvmlSystemGetDriverVersion)
        nvml["nvml_version"], _ = _nvml_call(nv.nvmlSystemGetNVMLVersion)
        cuda, _ = _nvml_call(nv.nvmlSystemGetCudaDriverVersion)
        nvml["cuda_driver"] = f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None
        count, why = _nvml_call(nv.nvmlDeviceGetCount)
        if count is None:
            nvml["reason"] = f"nvmlDeviceGetCount: {why}"
        gpus = []
        for i in range(count or 0):
            handle, why = _nvml_call(nv.nvmlDeviceGetHandleByIndex, i)
            if handle is None:
                gpus.append({"index": i, "name": None, "unavailable": {"handle": why}})
                continue
            fields = _gpu_fields(nv, handle)
            gpu = {"index": i, **{k: v for k, (v, _) in fields.items()}}
            gpu["unavailable"] = {k: why for k, (v, why) in fields.items() if v is None and why}
            gpus.append(gpu)
        for gpu in gpus:
            gpu["throttle_reasons"] = throttle_reason_names(gpu.get("throttle_reasons_mask"))
        return {"nvml": nvml, "gpus": gpus}
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass


def host_inventory() -> dict:
    """CPU model and cores, RAM total/available, OS (from lab.core.evidence.host_info plus psutil)."""
    host = evidence.host_info()
    try:
        import psutil

        host["cpu_physical_cores"] = psutil.cpu_count(logical=False)
        host["ram_available_bytes"] = psutil.virtual_memory().available
    except ImportError:
        host["cpu_physical_cores"], host["ram_available_bytes"] = None, None
    return host


def _cache_dir() -> Path:
    return Path(os.environ.get("LAB_CACHE", Path.home() / ".cache" / "llm-lab")).expanduser()


def _params_from_name(*names: str | None) -> float | None:
    """"Qwen3-32B" -> 32e9, "SmolLM2-135M-Instruct" -> 135e6; None when no size is in the name."""
    for name in names:
        m = re.search(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)\s*([BM])(?![A-Za-z])", name or "")
        if m:
            return float(m.group(1)) * (1e9 if m.group(2) == "B" else 1e6)
    return None


def model_file_info(profile: Profile) -> dict:
    """The profile's model file: its size when it exists, else an estimate from the name and quant,
    and the free space on the disk it lives (or will live) on."""
    from lab.core import paths

    spec, path, why = profile.model_file, None, None
    if spec:
        try:
            path = paths.model_path(spec)
        except Exception as exc:  # set-up not run yet: the embedded model has no path yet
            why = str(exc)
    info = {"spec": spec, "path": str(path) if path else None, "size_bytes": None, "how": None, "note": why}
    if path is not None and path.is_file():
        info["size_bytes"], info["how"] = path.stat().st_size, "file"
    else:
        from lab.model import models, weights

        # the file is the architecture's model when that is a shipped stand-in (exact per-tensor bytes for
        # GGUF mixes), else the size in the name (the real model first) × bits per weight
        kind, _, ref = profile.model_architecture.partition(":")
        params = _params_from_name(profile.model_name, profile.model_stand_in_for)
        try:
            try:
                stand_in = models.stand_in(ref) if kind == "config" else None
            except (KeyError, models.ModelConfigError):  # a config path, not a shipped stand-in id
                stand_in = None
            size, basis = weights.weights_bytes(profile.model_quant, arch=stand_in, model_id=ref if stand_in else None,
                                                params=params)
            info["size_bytes"], info["how"] = size, f"estimate (tensor data, lab.model.weights): {basis}"
        except (KeyError, ValueError, models.ModelConfigError):
            pass
    target = (path.parent if path is not None else _cache_dir() / "models").absolute()
    while not target.exists() and target != target.parent:
        target = target.parent
    usage = shutil.disk_usage(target)
    info.update(disk_path=str(target), disk_free_bytes=usage.free, disk_total_bytes=usage.total)
    return info


def inventory(profile: Profile) -> dict:
    """Everything the checks judge: NVML, host and the model file's disk, as plain JSON-able data."""
    inv = gpu_inventory()
    inv["collected_utc"] = evidence.utc_now()
    inv["host"] = host_inventory()
    inv["model_file"] = model_file_info(profile)
    return inv


# ================================================================ bandwidth (side effects)
def _stats(samples: list[float]) -> dict:
    return {"gb_s": statistics.fmean(samples), "mean": statistics.fmean(samples),
            "sd": statistics.stdev(samples) if len(samples) > 1 else None,
            "median": statistics.median(samples), "min": min(samples), "max": max(samples), "n": len(samples)}


def measure_host_bandwidth(size_mib: int = 512, repeats: int = 10, warmup: int = 2) -> dict:
    """numpy copy of a `size_mib` buffer, `repeats` timed copies after `warmup` untimed ones.

    GB/s per sample = 2 x bytes / seconds (read + write). Single-threaded: numpy's copy is one
    memcpy; on the 2-core machine two threads measured no faster."""
    import numpy as np

    try:
        import psutil

        size_mib = max(16, min(size_mib, psutil.virtual_memory().available // (8 << 20)))
    except ImportError:
        pass
    nbytes = size_mib << 20
    src = np.ones(nbytes, dtype=np.uint8)  # ones, not empty: touch every page before timing
    dst = np.zeros_like(src)
    for _ in range(warmup):
        np.copyto(dst, src)
    samples, t_all = [], time.perf_counter()
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        samples.append(2 * nbytes / (time.perf_counter() - t0) / 1e9)
    return {"kind": "host_ram", **_stats(samples), "samples": samples, "bytes_per_copy": nbytes,
            "counted": "read + write: 2 x bytes per copy (STREAM Copy convention)",
            "method": f"numpy.copyto of a {size_mib} MiB uint8 array, {warmup} warm-up + {repeats} timed copies, "
                      "time.perf_counter, one thread",
            "library": f"numpy {np.__version__}", "device": evidence.host_info()["cpu_model"],
            "duration_s": time.perf_counter() - t_all}


def _torch_copy_samples(torch, index: int, nbytes: int, repeats: int, inner: int) -> list[float]:
    dev = torch.device("cuda", index)
    src = torch.ones(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize(dev)
    samples = []
    with torch.cuda.device(dev):
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                dst.copy_(src)
            end.record()
            end.synchronize()
            samples.append(2 * nbytes * inner / (start.elapsed_time(end) / 1e3) / 1e9)
    del src, dst
    torch.cuda.empty_cache()
    return samples


def _cupy_copy_samples(cp, index: int, nbytes: int, repeats: int, inner: int) -> list[float]:
    with cp.cuda.Device(index):
        src = cp.ones(nbytes, dtype=cp.uint8)
        dst = cp.empty_like(src)
        for _ in range(3):
            cp.copyto(dst, src)
        cp.cuda.Device(index).synchronize()
        samples = []
        for _ in range(repeats):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            for _ in range(inner):
                cp.copyto(dst, src)
            end.record()
            end.synchronize()
            samples.append(2 * nbytes * inner / (cp.cuda.get_elapsed_time(start, end) / 1e3) / 1e9)
        return samples


def _gpu_backend():
    """(name, module, device count) of the first GPU array library that sees a GPU, or (None, reason)."""
    reasons = []
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.device_count() > 0:
            return "torch", torch, torch.cuda.device_count()
        reasons.append(f"torch {torch.__version__}: torch.cuda.is_available() is False")
    except Exception as exc:
        reasons.append(f"torch: {_reason(exc)}")
    try:
        import cupy

        n = cupy.cuda.runtime.getDeviceCount()
        if n > 0:
            return "cupy", cupy, n
        reasons.append("cupy: no CUDA device")
    except Exception as exc:
        reasons.append(f"cupy: {_reason(exc)}")
    return None, "; ".join(reasons), 0


def measure_gpu_bandwidth(size_mib: int = 1024, repeats: int = 10, inner: int = 5) -> dict | None:
    """Device-to-device copy on every visible GPU (torch, else cupy); None when neither sees a GPU.

    Per sample: `inner` back-to-back copies timed with CUDA events; GB/s = 2 x bytes x inner / s.
    The top-level numbers are the slowest GPU's (tensor parallelism runs at the slowest card)."""
    name, lib, count = _gpu_backend()
    if name is None:
        return None
    nbytes, t0, per_device = size_mib << 20, time.perf_counter(), []
    for i in range(count):
        fn = _torch_copy_samples if name == "torch" else _cupy_copy_samples
        samples = fn(lib, i, nbytes, repeats, inner)
        dev_name = lib.cuda.get_device_name(i) if name == "torch" else \
            lib.cuda.runtime.getDeviceProperties(i)["name"].decode()
        per_device.append({"index": i, "device": dev_name, **_stats(samples), "samples": samples})
    slowest = min(per_device, key=lambda d: d["mean"])
    return {"kind": "gpu", **{k: slowest[k] for k in ("gb_s", "mean", "sd", "median", "min", "max", "n", "samples")},
            "device": slowest["device"], "device_index": slowest["index"], "per_device": per_device,
            "bytes_per_copy": nbytes, "counted": "read + write: 2 x bytes per copy (STREAM Copy convention)",
            "method": f"{name} device-to-device copy of {size_mib} MiB, 3 warm-up copies, {repeats} samples of "
                      f"{inner} copies each timed with CUDA events, per GPU; top level = slowest GPU",
            "library": f"{name} {lib.__version__}", "duration_s": time.perf_counter() - t0}


def measure_bandwidth(prefer: str = "auto", host_size_mib: int = 512, gpu_size_mib: int = 1024,
                      repeats: int = 10) -> dict:
    """GPU copy bandwidth when a GPU and torch/cupy exist ("auto" or "gpu"), else host RAM.

    Always returns a dict with kind "gpu" or "host_ram", gb_s (mean), sd and raw samples; when the
    GPU was wanted but not measured, `gpu_unmeasured_reason` says why."""
    gpu_reason = "prefer='host_ram'"
    if prefer in ("auto", "gpu"):
        name, lib_or_reason, _ = _gpu_backend()
        if name is None:
            gpu_reason = lib_or_reason
        else:
            try:
                result = measure_gpu_bandwidth(gpu_size_mib, repeats)
                if result is not None:
                    return result
            except Exception as exc:  # out of memory on a busy GPU, a kernel image missing for this arch...
                gpu_reason = f"{name} copy failed: {_reason(exc)}"
    result = measure_host_bandwidth(host_size_mib, repeats)
    result["gpu_unmeasured_reason"] = gpu_reason
    return result


# ================================================================ pure: decoding and checks
def throttle_reason_names(mask: int | None) -> list[str] | None:
    """NVML clock-event bitmask -> names ("HW slowdown", "SW thermal slowdown", ...); None stays None."""
    if mask is None:
        return None
    names = [name for bit, (name, _) in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    if unknown:
        names.append(f"other bits 0x{unknown:x}")
    return names


def _gib(nbytes: float | None) -> str:
    return "unknown" if nbytes is None else f"{nbytes / 2**30:.1f} GiB"


def _profile_source(profile: Profile) -> str:
    return f"params/{profile.name}.yaml"


def _why(gpu: dict, *fields: str) -> str:
    reasons = [f"{f}: {gpu.get('unavailable', {}).get(f)}" for f in fields if gpu.get("unavailable", {}).get(f)]
    return "; ".join(reasons) or "not reported"


def check_gpu_count(inv: dict, profile: Profile) -> Check:
    seen, nvml = len(inv["gpus"]), inv["nvml"]
    expected = profile.gpu_count
    src = _profile_source(profile)
    if expected == 0:
        if seen == 0:
            return Check("GPU count", "skip", f"0 ({nvml.get('reason') or 'none'})", "0: CPU-only profile",
                         "", src)
        return Check("GPU count", "warn", seen, "0: CPU-only profile",
                     "This box has GPUs the profile does not use; pick a GPU profile to use them.", src)
    if not nvml["available"]:
        return Check("GPU count", "fail", f"no GPU visible: {nvml['reason']}", expected,
                     "Install the NVIDIA driver (580 is the last branch for Volta) and check `nvidia-smi`; in a "
                     "container pass `--gpus all`; a card missing after boot with 'BAR1 is 0M' or 'can't assign; "
                     "no space' in dmesg needs Above 4G Decoding enabled (and CSM off) in the BIOS.",
                     f"{src}; {NVML_SOURCE}")
    if seen < expected:
        return Check("GPU count", "fail", seen, expected,
                     "A card is missing: check `nvidia-smi -L`, `lspci | grep -i nvidia`, dmesg for Xid 79 "
                     "('fallen off the bus': heat, power, risers) and BAR errors (Above 4G Decoding).", src)
    if seen > expected:
        return Check("GPU count", "warn", seen, expected,
                     "More GPUs than the profile uses: set CUDA_VISIBLE_DEVICES (with "
                     "CUDA_DEVICE_ORDER=PCI_BUS_ID) or raise gpu_count.", src)
    return Check("GPU count", "pass", seen, expected, "", src)


def check_driver(inv: dict, profile: Profile) -> Check:
    nvml, src = inv["nvml"], f"{_profile_source(profile)}; {NVML_SOURCE}"
    driver = nvml.get("driver")
    observed = f"driver {driver}, CUDA {nvml.get('cuda_driver')}" if driver else f"none ({nvml.get('reason')})"
    expected = f"driver {profile.driver_version}" if profile.driver_version else "an NVIDIA driver"
    if not driver:
        return Check("NVIDIA driver", "fail", observed, expected,
                     "Install the NVIDIA driver; for a V100 use the 580 branch or older (the last with Volta) "
                     "with a CUDA 12.x toolkit.", src)
    if profile.driver_version and driver.split(".")[0] != profile.driver_version.split(".")[0]:
        return Check("NVIDIA driver", "warn", observed, expected,
                     "The driver branch differs from the one the profile declares: update the profile or the "
                     "driver (see notebook 02 for which CUDA toolkits each branch supports).", src)
    return Check("NVIDIA driver", "pass", observed, expected, "", src)


def _gpu_identity_checks(gpu: dict, profile: Profile) -> list[Check]:
    i, src = gpu["index"], _profile_source(profile)
    name = gpu.get("name")
    ok_name = bool(name and re.search(profile.gpu_name_pattern, name))
    out = [Check(f"GPU {i} model", "pass" if ok_name else "fail", name or _why(gpu, "name"),
                 f"matches /{profile.gpu_name_pattern}/",
                 "" if ok_name else "This is not the card the profile describes: pick the profile for this card "
                 "(its VRAM, bandwidth and compute capability drive every prediction).", src)]
    total = gpu.get("memory_total_bytes")
    need = profile.gpu_vram_mib * 2**20
    # NVML reports a little less than the marketing size (the driver reserves some), hence 95 %.
    ok_vram = total is not None and total >= 0.95 * need
    out.append(Check(f"GPU {i} VRAM", "pass" if ok_vram else "fail",
                     f"{total / 2**20:.0f} MiB" if total else _why(gpu, "memory_total_bytes"),
                     f">= 95 % of {profile.gpu_vram_mib} MiB",
                     "" if ok_vram else "Less memory than the profile plans with: a 16 GB card, or inline ECC "
                     "on a GDDR card; fix gpu_vram_mib or the model/context plan.", src))
    cc = gpu.get("compute_capability")
    ok_cc = cc == profile.gpu_compute_capability
    out.append(Check(f"GPU {i} compute capability", "pass" if ok_cc else "fail", cc or _why(gpu, "compute_capability"),
                     profile.gpu_compute_capability,
                     "" if ok_cc else "Another GPU generation than the profile's: builds target the wrong arch "
                     "('no kernel image is available'); rebuild with CMAKE_CUDA_ARCHITECTURES for this card.",
                     f"{src}; NVIDIA CUDA 13.0 release notes, Deprecated Architectures (sm_70 needs CUDA 12.x)"))
    return out


def check_ecc(gpu: dict) -> list[Check]:
    i = gpu["index"]
    cur, pend = gpu.get("ecc_mode_current"), gpu.get("ecc_mode_pending")
    if cur is None:
        mode = Check(f"GPU {i} ECC mode", "skip", _why(gpu, "ecc_mode_current"), "on",
                     "This card reports no ECC (consumer cards have none).", NVML_SOURCE)
    elif pend is not None and pend != cur:
        mode = Check(f"GPU {i} ECC mode", "warn", f"current {'on' if cur else 'off'}, pending {'on' if pend else 'off'}",
                     "current = pending", "An ECC change waits for a reboot or GPU reset (`nvidia-smi -r`).",
                     NVML_SOURCE)
    elif not cur:
        mode = Check(f"GPU {i} ECC mode", "warn", "off", "on",
                     "Memory errors go undetected with ECC off. On HBM2 cards (V100) ECC costs no capacity or "
                     "bandwidth, so the seed's 'ECC costs 5-10 %' does not apply: `sudo nvidia-smi -e 1`, reboot.",
                     HBM_ECC_SOURCE)
    else:
        mode = Check(f"GPU {i} ECC mode", "pass", "on", "on", "", NVML_SOURCE)
    vol, agg = gpu.get("ecc_uncorrected_volatile"), gpu.get("ecc_uncorrected_aggregate")
    observed = f"{vol} since driver load, {agg} lifetime"
    if vol is None and agg is None:
        errs = Check(f"GPU {i} ECC uncorrectable errors", "skip", _why(gpu, "ecc_uncorrected_volatile"), 0,
                     "No ECC counters on this card.", NVML_SOURCE)
    elif vol:
        errs = Check(f"GPU {i} ECC uncorrectable errors", "fail", observed, "0",
                     "Uncorrectable (double-bit) errors since the driver loaded (Xid 48 in dmesg): results on this "
                     "GPU may be corrupt. Reboot to retire the pages; if they return, the card is failing (RMA).",
                     PAGE_RETIREMENT_DOC)
    elif agg:
        errs = Check(f"GPU {i} ECC uncorrectable errors", "warn", observed, "0",
                     "Uncorrectable errors in the card's history: watch `nvidia-smi -q -d ECC,PAGE_RETIREMENT`.",
                     PAGE_RETIREMENT_DOC)
    else:
        errs = Check(f"GPU {i} ECC uncorrectable errors", "pass", observed, "0", "", NVML_SOURCE)
    return [mode, errs]


def check_memory_retirement(gpu: dict) -> Check:
    """Retired pages (Kepler-Turing) or remapped rows (Ampere and newer), whichever the card reports."""
    name = f"GPU {gpu['index']} retired pages / remapped rows"
    if gpu.get("remapped_rows_failure") is not None:
        observed = (f"remapped rows: {gpu.get('remapped_rows_uncorrectable')} uncorrectable, "
                    f"{gpu.get('remapped_rows_correctable')} correctable, pending {gpu['remapped_rows_pending']}, "
                    f"failure {gpu['remapped_rows_failure']}")
        if gpu["remapped_rows_failure"]:
            return Check(name, "fail", observed, "no remapping failure",
                         "Row remapping failed: the memory has run out of spare rows. The card needs an RMA.",
                         ROW_REMAP_DOC)
        if gpu["remapped_rows_pending"]:
            return Check(name, "warn", observed, "nothing pending",
                         "A row remap waits for a GPU reset: reboot or `nvidia-smi -r` when idle.", ROW_REMAP_DOC)
        return Check(name, "pass", observed, "no failure, nothing pending", "", ROW_REMAP_DOC)
    sbe, dbe, pend = gpu.get("retired_pages_sbe"), gpu.get("retired_pages_dbe"), gpu.get("retired_pages_pending")
    if sbe is None and dbe is None and pend is None:
        return Check(name, "skip", _why(gpu, "remapped_rows_failure", "retired_pages_dbe"), "reported",
                     "This card reports neither retired pages nor remapped rows.", NVML_SOURCE)
    observed = f"retired pages: {sbe} single-bit, {dbe} double-bit, pending {pend}"
    if pend:
        return Check(name, "warn", observed, "nothing pending",
                     "A page waits for retirement (Xid 63): reload the driver or reboot.", PAGE_RETIREMENT_DOC)
    if (sbe or 0) + (dbe or 0) > 0:
        return Check(name, "warn", observed, "0 retired",
                     "Some pages were retired after ECC errors. A few are normal wear; a growing count, or Xid 64 "
                     "(retirement failed), means failing memory.", PAGE_RETIREMENT_DOC)
    return Check(name, "pass", observed, "0 retired, nothing pending", "", PAGE_RETIREMENT_DOC)


def check_pcie(gpu: dict) -> Check:
    name = f"GPU {gpu['index']} PCIe link"
    gc, gm, wc, wm = (gpu.get(k) for k in ("pcie_gen_current", "pcie_gen_max", "pcie_width_current", "pcie_width_max"))
    if None in (gc, gm, wc, wm):
        return Check(name, "skip", _why(gpu, "pcie_gen_current", "pcie_width_current"), "gen/width reported",
                     "", NVML_SOURCE)
    observed, expected = f"gen {gc} x{wc}", f"gen {gm} x{wm} (the link's maximum)"
    notes = []
    if wc < wm:
        notes.append(f"The link runs at x{wc} of x{wm}: that is the slot, a riser/adapter or bifurcation "
                     "(SXM2-to-PCIe adapters are known for it), not power saving. Reseat or move the card.")
    if gc < gm:
        notes.append(f"Gen {gc} of {gm}: idle GPUs drop the PCIe generation to save power, so at idle this is "
                     "normal; re-read `nvidia-smi -q -d PCI` while a model runs. Still low under load: BIOS slot "
                     "setting, riser or a gen-limited slot.")
    if not notes:
        return Check(name, "pass", observed, expected, "", NVML_SOURCE)
    notes.append("With the model in VRAM PCIe speed matters for loading and for tensor parallelism without "
                 "NVLink, not for one-GPU decode: a warning, not a failure.")
    return Check(name, "warn", observed, expected, " ".join(notes), NVML_SOURCE)


def check_nvlink(gpu: dict, profile: Profile) -> Check:
    name = f"GPU {gpu['index']} NVLink"
    links = gpu.get("nvlink_links")
    active = sum(l["active"] for l in links) if links else 0
    observed = f"{active} of {len(links)} links active" if links else f"no NVLink ({_why(gpu, 'nvlink_links')})"
    if not profile.nvlink_expected:
        return Check(name, "skip", observed, "not expected by the profile", "", _profile_source(profile))
    if active:
        return Check(name, "pass", observed, ">= 1 active link", "", NVML_SOURCE)
    return Check(name, "fail", observed, ">= 1 active link",
                 "The profile expects NVLink but none is up. Tesla V100 PCIe cards have no NVLink connector: "
                 "NVLink between V100s means SXM2 modules (an SXM2 server or adapter board). Check "
                 "`nvidia-smi nvlink -s` and `nvidia-smi topo -m`; without NVLink set nvlink_expected: false "
                 "(tensor parallelism then goes over PCIe).", f"{V100_BRIEF}; {_profile_source(profile)}")


def check_temperature(gpu: dict) -> Check:
    name, temp, slow = f"GPU {gpu['index']} temperature", gpu.get("temperature_c"), gpu.get("temperature_slowdown_c")
    if temp is None:
        return Check(name, "skip", _why(gpu, "temperature_c"), "reported", "", NVML_SOURCE)
    limit = slow if slow is not None else 85
    expected = f"< {limit - 10} °C ({'slowdown at ' + str(slow) if slow is not None else 'no slowdown threshold reported'})"
    fix = ("Passively cooled cards (Tesla V100/P40) need server airflow; in a desktop case duct a blower "
           "fan onto the heat sink, driven by GPU temperature. A reading at idle says little about load: re-check "
           "during notebook 06. V100's HBM2 runs hotter than the core.")
    if temp >= limit:
        return Check(name, "fail", f"{temp} °C", expected, "At the slowdown threshold: the GPU is throttling. " + fix,
                     f"{V100_BRIEF}; {NVML_SOURCE}")
    if temp >= limit - 10:
        return Check(name, "warn", f"{temp} °C", expected, "Within 10 °C of slowdown. " + fix, V100_BRIEF)
    return Check(name, "pass", f"{temp} °C", expected, "", NVML_SOURCE)


def check_power(gpu: dict, profile: Profile) -> Check:
    name = f"GPU {gpu['index']} power limit vs TDP"
    limit, default, draw = gpu.get("power_limit_w"), gpu.get("power_default_limit_w"), gpu.get("power_draw_w")
    if limit is None or default is None:
        return Check(name, "skip", _why(gpu, "power_limit_w", "power_default_limit_w"), "reported", "", NVML_SOURCE)
    observed = f"limit {limit:.0f} W of default {default:.0f} W, drawing {draw:.0f} W" if draw is not None \
        else f"limit {limit:.0f} W of default {default:.0f} W"
    expected = f"limit = default{f', TDP {profile.gpu_tdp_w} W (profile)' if profile.gpu_tdp_w else ''}"
    if limit < default - 1:
        return Check(name, "warn", observed, expected,
                     f"Power capped at {limit / default:.0%} of default: fine if intended (a cap keeps most decode "
                     "speed and costs more prefill speed); undo with `sudo nvidia-smi -pl <W>`.", NVML_SOURCE)
    if profile.gpu_tdp_w and abs(default - profile.gpu_tdp_w) > 0.05 * profile.gpu_tdp_w:
        return Check(name, "warn", observed, expected,
                     "The card's default limit differs from the profile's TDP: another variant (V100 PCIe 250 W, "
                     "SXM2 300 W)? Fix gpu_tdp_w so PSU advice is right.", f"{V100_BRIEF}; {_profile_source(profile)}")
    return Check(name, "pass", observed, expected, "", NVML_SOURCE)


def check_throttle(gpu: dict) -> Check:
    name, mask = f"GPU {gpu['index']} clock throttle reasons", gpu.get("throttle_reasons_mask")
    if mask is None:
        return Check(name, "skip", _why(gpu, "throttle_reasons_mask"), "reported", "", NVML_SOURCE)
    levels = {level for bit, (_, level) in THROTTLE_REASONS.items() if mask & bit}
    names = throttle_reason_names(mask)
    observed = ", ".join(names) or "none"
    expected = "none, or only idle / application clocks"
    if "fail" in levels:
        return Check(name, "fail", observed, expected,
                     "Hardware slowdown: overheating, or the board's power-brake signal (insufficient PSU or "
                     "cabling, a bad riser). Check cooling and the 8-pin power cables.", NVML_SOURCE)
    if "warn" in levels:
        return Check(name, "warn", observed, expected,
                     "Software thermal or power-cap slowdown: a power cap under full load is expected; at idle "
                     "or with thermal slowdown, improve airflow or check the power limit.", NVML_SOURCE)
    return Check(name, "pass", observed, expected, "", NVML_SOURCE)


def check_display(gpu: dict) -> Check:
    """Judged on display *active* (memory set aside for a display). NVML's display *mode* alone is
    not evidence: a headless H200 reported mode Enabled, active Disabled (device run, 2026-11-29)."""
    name = f"GPU {gpu['index']} display attached"
    mode, active = gpu.get("display_mode"), gpu.get("display_active")
    observed = f"display active {active} (display mode {mode})"
    if active is None:
        return Check(name, "skip", _why(gpu, "display_active"), "no active display", "", NVML_SOURCE)
    if active:
        return Check(name, "warn", observed, "no active display",
                     "A desktop on this GPU takes VRAM (hundreds of MiB) and adds latency jitter: drive the "
                     "monitor from another GPU or the iGPU. (Tesla V100 has no display output.)",
                     f"{V100_BRIEF}; {NVML_SOURCE}")
    return Check(name, "pass", observed, "no active display", "", NVML_SOURCE)


def check_persistence(gpu: dict) -> Check:
    name, mode = f"GPU {gpu['index']} persistence mode", gpu.get("persistence_mode")
    if mode is None:
        return Check(name, "skip", _why(gpu, "persistence_mode"), "on", "Not reported (e.g. on Windows).",
                     NVML_SOURCE)
    if not mode:
        return Check(name, "warn", "off", "on",
                     "Without persistence the driver tears down between jobs: the first CUDA call takes seconds "
                     "and clocks/power settings can reset. `sudo nvidia-smi -pm 1` or enable nvidia-persistenced.",
                     NVML_SOURCE)
    return Check(name, "pass", "on", "on", "", NVML_SOURCE)


_GPU_CHECK_NAMES = ("model", "VRAM", "compute capability", "ECC mode", "ECC uncorrectable errors",
                    "retired pages / remapped rows", "PCIe link", "NVLink", "temperature", "power limit vs TDP",
                    "clock throttle reasons", "display attached", "persistence mode")


def gpu_checks(inv: dict, profile: Profile) -> list[Check]:
    """Count and driver, then every per-GPU check for each GPU NVML saw."""
    out = [check_gpu_count(inv, profile)]
    if profile.gpu_count == 0:
        why = f"profile {profile.name} is CPU-only (gpu_count: 0)"
        return out + [Check(f"GPU {n}", "skip", "not checked", "-", why, _profile_source(profile))
                      for n in ("driver", *_GPU_CHECK_NAMES)]
    out.append(check_driver(inv, profile))
    if not inv["gpus"]:
        why = "no GPU visible: see 'GPU count'"
        return out + [Check(f"GPU {n}", "skip", "not checked", "-", why, NVML_SOURCE) for n in _GPU_CHECK_NAMES]
    for gpu in inv["gpus"]:
        out += _gpu_identity_checks(gpu, profile)
        out += check_ecc(gpu)
        out += [check_memory_retirement(gpu), check_pcie(gpu), check_nvlink(gpu, profile), check_temperature(gpu),
                check_power(gpu, profile), check_throttle(gpu), check_display(gpu), check_persistence(gpu)]
    return out


def check_cpu(inv: dict, profile: Profile) -> Check:
    host = inv["host"]
    cores = host.get("cpu_logical_cores") or 0
    observed = f"{host.get('cpu_model')}: {host.get('cpu_physical_cores')} physical / {cores} logical cores"
    expected = f">= {profile.threads} cores (profile threads)"
    if cores < profile.threads:
        return Check("CPU cores", "warn", observed, expected,
                     f"The profile runs {profile.threads} threads on {cores} cores: oversubscription slows "
                     "CPU decode; lower `threads`.", _profile_source(profile))
    return Check("CPU cores", "pass", observed, expected, "", _profile_source(profile))


def check_ram(inv: dict, profile: Profile) -> Check:
    total = inv["host"].get("ram_bytes")
    expected = f">= {profile.host_ram_gib_min:g} GiB"
    if total is None:
        return Check("Host RAM", "skip", "unknown (psutil missing)", expected, "", _profile_source(profile))
    ok = total >= profile.host_ram_gib_min * 2**30
    return Check("Host RAM", "pass" if ok else "fail",
                 f"{_gib(total)} total, {_gib(inv['host'].get('ram_available_bytes'))} available", expected,
                 "" if ok else "Less RAM than the profile needs: loading (and converting) a model holds it in RAM "
                 "or page cache; add RAM or use a smaller model.", _profile_source(profile))


def check_disk(inv: dict, profile: Profile) -> Check:
    mf = inv["model_file"]
    size, free = mf.get("size_bytes"), mf.get("disk_free_bytes")
    src = WEIGHTS_ESTIMATE_SOURCE if (mf.get("how") or "").startswith("estimate") else _profile_source(profile)
    if mf.get("how") == "file":
        return Check("Disk for the model file", "pass", f"present: {_gib(size)} at {mf['path']}",
                     "model file on disk", "", _profile_source(profile))
    if size is None:
        return Check("Disk for the model file", "skip", f"{_gib(free)} free at {mf.get('disk_path')}",
                     "model size unknown", "Name the model's size in model_name (e.g. '27B') or give model_file.",
                     _profile_source(profile))
    observed = f"{_gib(free)} free at {mf['disk_path']}"
    expected = f">= {_gib(size * 1.1)} ({mf['how']}, + 10 %)"
    fix = ("Converting from Hugging Face weights needs the F16 copy too (about 2 bytes per parameter) on top. ")
    if free >= size * 1.1:
        return Check("Disk for the model file", "pass", observed, expected, "", src)
    if free >= size:
        return Check("Disk for the model file", "warn", observed, expected, "Fits, barely. " + fix, src)
    return Check("Disk for the model file", "fail", observed, expected,
                 "Not enough free space for the model: free space or point model_file elsewhere. " + fix, src)


def psu_advice(inv: dict, profile: Profile, cpu_board_w: float = PSU_CPU_BOARD_W,
               load_fraction: float = PSU_LOAD_FRACTION) -> dict:
    """PSU size from summed GPU TDP (NVML's default power limit, else the profile's gpu_tdp_w) plus an
    allowance for CPU and board, kept at <= `load_fraction` of the rating. Returns the arithmetic."""
    gpus = inv.get("gpus") or []
    per_gpu = [g.get("power_default_limit_w") for g in gpus]
    if gpus and all(w is not None for w in per_gpu):
        how = "NVML default power limit (= TDP) per GPU"
    else:
        per_gpu = [float(profile.gpu_tdp_w or 0)] * profile.gpu_count
        how = f"profile gpu_tdp_w ({profile.gpu_tdp_w} W) x gpu_count ({profile.gpu_count})" if profile.gpu_count \
            else "no GPU"
    gpu_w = float(sum(per_gpu))
    sustained = gpu_w + cpu_board_w
    minimum = sustained / load_fraction
    size = next((s for s in PSU_SIZES_W if s >= minimum), None)
    arithmetic = (f"{' + '.join(f'{w:.0f}' for w in per_gpu) or '0'} W GPUs + {cpu_board_w:.0f} W CPU/board = "
                  f"{sustained:.0f} W sustained; / {load_fraction:g} = {minimum:.0f} W -> a {size} W PSU")
    rows = [{"item": "GPUs", "watts": gpu_w, "how": how},
            {"item": "CPU + board, RAM, disks, fans (allowance)", "watts": float(cpu_board_w),
             "how": "desktop CPU under inference load; add ~150 W for a dual-socket server"},
            {"item": "sustained total", "watts": sustained, "how": "sum"},
            {"item": f"minimum PSU rating (sustained / {load_fraction:g})", "watts": minimum,
             "how": "rule of thumb: keep continuous load <= 80 % of the rating (headroom for spikes, efficiency)"},
            {"item": "next standard size", "watts": float(size) if size else None, "how": "rounded up"}]
    return {"gpu_w": per_gpu, "gpu_total_w": gpu_w, "cpu_board_w": float(cpu_board_w), "sustained_w": sustained,
            "load_fraction": load_fraction, "minimum_w": minimum, "recommended_w": size, "how": how,
            "arithmetic": arithmetic, "rows": rows,
            "consumer_note": "GeForce cards spike well above their power limit for milliseconds: when NVIDIA's "
                             "'required system power' for the card is higher (RTX 4090: 850 W), use that.",
            "seed_note": "seed 000: 850 W for 2 x V100 PCIe (250 W each): 500 + 150 = 650 W / 0.8 = 812 W -> 850 W "
                         "holds for a desktop CPU; a dual-socket board (+150 W) needs 1000 W."}


def check_psu(psu: dict) -> Check:
    """The PSU cannot be read by software: this check is advice, so it is 'skip' with the arithmetic."""
    return Check("PSU size (advice: software cannot read the PSU)", "skip", psu["arithmetic"],
                 f">= {psu['minimum_w']:.0f} W ({psu['recommended_w']} W class)",
                 "Read the rating on your PSU's label. Tesla PCIe cards (P40, P100, V100) take an 8-pin CPU "
                 "(EPS-12V) power plug, not a PCIe 8-pin: use the adapter their product brief names.",
                 f"{V100_BRIEF}; rule of thumb (80 % continuous load)")


def check_bandwidth(bw: dict, profile: Profile) -> Check:
    kind, gb_s = bw.get("kind"), bw.get("gb_s")
    observed = f"{gb_s:.1f} GB/s ({kind}, mean of {bw.get('n')}, sd {bw.get('sd') or 0:.1f})"
    if profile.gpu_count == 0:
        return Check("Memory bandwidth (measured)", "pass", observed, "> 0 (host RAM, read + write)", "",
                     "measured here: " + bw.get("method", ""))
    sheet = profile.gpu_memory_bandwidth_gb_s
    if kind != "gpu":
        return Check("Memory bandwidth (measured)", "warn", observed, f"GPU copy, datasheet {sheet:g} GB/s",
                     f"The GPU was not measured ({bw.get('gpu_unmeasured_reason')}); speed predictions fall back "
                     "to the datasheet. Install torch (cu126 for V100) to measure it.", "measured here")
    ratio = gb_s / sheet
    expected = f">= 70 % of datasheet {sheet:g} GB/s"
    if ratio < 0.7:
        return Check("Memory bandwidth (measured)", "warn", f"{observed} = {ratio:.0%} of datasheet", expected,
                     "A copy normally reaches 80-90 % of datasheet (H200: 4227 of 4800 GB/s). Look for throttling, "
                     "a busy GPU or lowered memory clocks.", "outputs/h200-x1/20261129T173230Z_87d3b0f/records/01_hardware.json (H200 copy bandwidth)")
    return Check("Memory bandwidth (measured)", "pass", f"{observed} = {ratio:.0%} of datasheet", expected, "",
                 "outputs/h200-x1/20261129T173230Z_87d3b0f/records/01_hardware.json (H200 copy bandwidth)")


def host_checks(inv: dict, profile: Profile) -> list[Check]:
    return [check_cpu(inv, profile), check_ram(inv, profile), check_disk(inv, profile),
            check_psu(psu_advice(inv, profile))]


def check_all(inv: dict, bw: dict | None, profile: Profile) -> list[Check]:
    """Every check of notebook 01: GPUs, host, PSU advice and (when measured) bandwidth."""
    found = gpu_checks(inv, profile) + host_checks(inv, profile)
    if bw is not None:
        found.append(check_bandwidth(bw, profile))
    return found


# ================================================================ display and summary
def gpu_table(inv: dict):
    """One row per GPU with the fields a user looks at first (a DataFrame)."""
    import pandas as pd

    if not inv["gpus"]:
        return pd.DataFrame([{"gpu": "none", "reason": inv["nvml"].get("reason") or "NVML saw no GPU"}])
    rows = []
    for g in inv["gpus"]:
        rows.append({
            "gpu": g["index"], "name": g.get("name"),
            "VRAM GiB": round(g["memory_total_bytes"] / 2**30, 1) if g.get("memory_total_bytes") else None,
            "CC": g.get("compute_capability"),
            "BAR1 GiB": round(g["bar1_total_bytes"] / 2**30, 1) if g.get("bar1_total_bytes") else None,
            "ECC now/pending": f"{g.get('ecc_mode_current')}/{g.get('ecc_mode_pending')}",
            "uncorr. ECC vol/agg": f"{g.get('ecc_uncorrected_volatile')}/{g.get('ecc_uncorrected_aggregate')}",
            "PCIe now / max": f"gen{g.get('pcie_gen_current')} x{g.get('pcie_width_current')} / "
                              f"gen{g.get('pcie_gen_max')} x{g.get('pcie_width_max')}",
            "NVLink active": sum(l["active"] for l in g["nvlink_links"]) if g.get("nvlink_links") else None,
            "temp °C (slowdown)": f"{g.get('temperature_c')} ({g.get('temperature_slowdown_c')})",
            "power W draw/limit/TDP": f"{_w(g.get('power_draw_w'))}/{_w(g.get('power_limit_w'))}/"
                                      f"{_w(g.get('power_default_limit_w'))}",
            "throttle": ", ".join(g.get("throttle_reasons") or []) or "none",
            "persistence": g.get("persistence_mode"), "display": g.get("display_active"),
            "unreported fields": len(g.get("unavailable", {}))})
    return pd.DataFrame(rows)


def _w(v):
    return "?" if v is None else f"{v:.0f}"


def host_table(inv: dict):
    """The host and the model file's disk as field/value rows (a DataFrame)."""
    import pandas as pd

    h, mf, nv = inv["host"], inv["model_file"], inv["nvml"]
    rows = [("CPU", h.get("cpu_model")), ("cores physical / logical", f"{h.get('cpu_physical_cores')} / "
                                                                      f"{h.get('cpu_logical_cores')}"),
            ("RAM total / available", f"{_gib(h.get('ram_bytes'))} / {_gib(h.get('ram_available_bytes'))}"),
            ("OS", h.get("os")), ("NVIDIA driver / CUDA", f"{nv.get('driver')} / {nv.get('cuda_driver')}"),
            ("NVML", "available" if nv["available"] else f"unavailable: {nv.get('reason')}"),
            ("model file", f"{mf.get('spec')}: {_gib(mf.get('size_bytes'))} ({mf.get('how')})"),
            ("free disk there", f"{_gib(mf.get('disk_free_bytes'))} at {mf.get('disk_path')}")]
    return pd.DataFrame(rows, columns=["field", "value"])


def psu_table(psu: dict):
    """The PSU arithmetic of `psu_advice` as rows (a DataFrame)."""
    import pandas as pd

    return pd.DataFrame(psu["rows"], columns=["item", "watts", "how"])


def bandwidth_chart(bw: dict, profile: Profile):
    """Each sample as a bar, the mean as a line, and the datasheet figure when the profile has one."""
    import plotly.graph_objects as go

    fig = go.Figure(go.Bar(x=list(range(1, len(bw["samples"]) + 1)), y=bw["samples"], name="samples"))
    fig.add_hline(y=bw["gb_s"], line_dash="dash", annotation_text=f"mean {bw['gb_s']:.1f} GB/s")
    if bw["kind"] == "gpu" and profile.gpu_memory_bandwidth_gb_s:
        fig.add_hline(y=profile.gpu_memory_bandwidth_gb_s, line_color="grey",
                      annotation_text=f"datasheet {profile.gpu_memory_bandwidth_gb_s:g} GB/s")
    where = bw.get("device") or bw["kind"]
    fig.update_layout(title=f"Copy bandwidth, {bw['kind']} ({where}); read + write counted",
                      xaxis_title="sample", yaxis_title="GB/s", height=340)
    return fig


def decode_ceiling_tok_s(bandwidth_gb_s: float | None, model_bytes: int | None) -> float | None:
    """Upper bound on single-stream decode: every token reads all weights once (KV reads ignored)."""
    if not bandwidth_gb_s or not model_bytes:
        return None
    return bandwidth_gb_s * 1e9 / model_bytes


def summary(inv: dict, bw: dict, found: list[Check], psu: dict) -> dict:
    """The key results of notebook 01, for the record's `summary` and the report."""
    model_bytes = inv["model_file"].get("size_bytes")
    return {"verdict": worst(found),
            "checks": {s: sum(c.status == s for c in found) for s in ("pass", "warn", "fail", "skip")},
            "gpus_seen": len(inv["gpus"]), "gpu_names": [g.get("name") for g in inv["gpus"]],
            "nvml": "available" if inv["nvml"]["available"] else inv["nvml"].get("reason"),
            "driver": inv["nvml"].get("driver"), "cpu": inv["host"].get("cpu_model"),
            "ram_gib": round(inv["host"]["ram_bytes"] / 2**30, 1) if inv["host"].get("ram_bytes") else None,
            "bandwidth_kind": bw["kind"], "bandwidth_gb_s": round(bw["gb_s"], 2),
            "bandwidth_sd": round(bw["sd"], 2) if bw.get("sd") is not None else None,
            "model_file_bytes": model_bytes, "model_file_how": inv["model_file"].get("how"),
            "decode_ceiling_tok_s": decode_ceiling_tok_s(bw["gb_s"], model_bytes),
            "disk_free_gib": round(inv["model_file"]["disk_free_bytes"] / 2**30, 1),
            "psu_recommended_w": psu["recommended_w"]}


def what_this_means(record: dict) -> str:
    """Markdown for the notebook's last cell, built only from the written record."""
    s, lines = record["summary"], []
    verdict = {"pass": "Nothing blocks this box.", "warn": "Usable, with warnings below.",
               "fail": "Something must be fixed before the later notebooks mean anything.",
               "skip": "Nothing was checked."}[s["verdict"]]
    lines.append(f"**Verdict: {s['verdict']}** — {verdict} ({s['checks']['pass']} pass, {s['checks']['warn']} "
                 f"warn, {s['checks']['fail']} fail, {s['checks']['skip']} skipped)")
    if not s["gpus_seen"]:
        lines.append(f"- No GPU seen (NVML: {s['nvml']}); GPU checks that need one were skipped or failed as "
                     "listed in the table.")
    for c in record["checks"]:
        if c["status"] in ("fail", "warn"):
            lines.append(f"- **{c['status']}: {c['name']}** — observed {c['observed']}; expected {c['expected']}. "
                         f"{c['fix']}")
    bw = record["bandwidth"]
    lines.append(f"- Measured {bw['kind'].replace('_', ' ')} copy bandwidth: **{bw['gb_s']:.1f} GB/s** "
                 f"(read + write, mean of {bw['n']}). Later notebooks use it for speed predictions.")
    if s.get("decode_ceiling_tok_s"):
        lines.append(f"- Single-stream decode cannot beat bandwidth / model bytes = {bw['gb_s']:.1f} GB/s / "
                     f"{s['model_file_bytes'] / 1e9:.2f} GB ≈ **{s['decode_ceiling_tok_s']:.0f} tok/s** on this "
                     "memory (weights only; KV reads and overheads lower it, llama.cpp reached ~38 % of this "
                     "ceiling on an H200). Notebook 06 measures the real figure.")
    lines.append(f"- PSU: {record['psu']['arithmetic']}.")
    return "\n".join(lines)
