"""How fast this box's memory is: a timed copy on the GPU (torch or cupy) or, without one, in host RAM (numpy),
with the raw samples kept.

Bandwidth convention: a copy of B bytes reads B and writes B, and is counted as 2 x B bytes moved
(STREAM's "Copy" convention, and the one behind the 4227 GB/s H200 device-to-device figure in
the lab's H200 evidence in outputs/h200-x1/). Decode reads weights only, so read bandwidth is the figure of merit; a copy is a
fair, portable proxy for it.
"""
from __future__ import annotations

import statistics
import time

from lab.core import evidence
from lab.measure.inventory import why_failed

def _stats(samples: list[float]) -> dict:
    return {"gb_s": statistics.fmean(samples), "mean": statistics.fmean(samples),
            "sd": statistics.stdev(samples) if len(samples) > 1 else None,
            "median": statistics.median(samples), "min": min(samples), "max": max(samples), "n": len(samples)}


def measure_host(size_mib: int = 512, repeats: int = 10, warmup: int = 2) -> dict:
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
        reasons.append(f"torch: {why_failed(exc)}")
    try:
        import cupy

        n = cupy.cuda.runtime.getDeviceCount()
        if n > 0:
            return "cupy", cupy, n
        reasons.append("cupy: no CUDA device")
    except Exception as exc:
        reasons.append(f"cupy: {why_failed(exc)}")
    return None, "; ".join(reasons), 0


def measure_gpu(size_mib: int = 1024, repeats: int = 10, inner: int = 5) -> dict | None:
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


def measure(prefer: str = "auto", host_size_mib: int = 512, gpu_size_mib: int = 1024,
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
                result = measure_gpu(gpu_size_mib, repeats)
                if result is not None:
                    return result
            except Exception as exc:  # out of memory on a busy GPU, a kernel image missing for this arch...
                gpu_reason = f"{name} copy failed: {why_failed(exc)}"
    result = measure_host(host_size_mib, repeats)
    result["gpu_unmeasured_reason"] = gpu_reason
    return result
