"""What this box has: NVML's view of every GPU, the host, and the profile's model file with its disk.

`collect(profile)` reads NVML (through nvidia-ml-py's `pynvml`) and the host into a plain dict, which
lab.measure.hardware_checks judges and notebook 01 records. Every NVML call is guarded: a field the GPU or
driver cannot report is `None`, and the reason (e.g. "NVMLError_NotSupported: Not Supported") is kept under
the GPU's `unavailable` mapping. Never raises for a missing driver, library or permission.
"""
from __future__ import annotations


from lab.core import disk, evidence, paths
from lab.core.profiles import Profile
from lab.model import weights

WEIGHTS_ESTIMATE_SOURCE = ("lab.model.weights: lab.model.quant_formats per-tensor prediction for a shipped stand-in, else params x "
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


def why_failed(exc: BaseException) -> str:
    """An exception as the reason a value is missing: "NVMLError_NotSupported: Not Supported"."""
    return f"{type(exc).__name__}: {exc}"


def nvml_call(fn, *args):
    """Call one NVML function: (value, None), or (None, why it gave nothing). Shared with lab.measure.gpu_links."""
    try:
        return fn(*args), None
    except Exception as exc:  # NVMLError_NotSupported, _NoPermission, _GPUIsLost, missing symbols...
        return None, why_failed(exc)


def _gpu_fields(nv, h) -> dict:
    """One GPU's facts; each value is (value, None) or (None, reason). Units: bytes, W, °C, MHz."""
    mw = lambda v: None if v is None else v / 1000  # NVML reports milliwatts
    f: dict = {}
    f["name"] = nvml_call(nv.nvmlDeviceGetName, h)
    bus, why = nvml_call(nv.nvmlDeviceGetPciInfo, h)
    bus_id = getattr(bus, "busId", None)
    f["pci_bus_id"] = (bus_id.decode() if isinstance(bus_id, bytes) else bus_id, why)
    mem, why = nvml_call(nv.nvmlDeviceGetMemoryInfo, h)
    f["memory_total_bytes"] = (mem.total if mem else None, why)
    f["memory_used_bytes"] = (mem.used if mem else None, why)
    cc, why = nvml_call(nv.nvmlDeviceGetCudaComputeCapability, h)
    f["compute_capability"] = ("%d.%d" % tuple(cc) if cc else None, why)
    bar1, why = nvml_call(nv.nvmlDeviceGetBAR1MemoryInfo, h)
    f["bar1_total_bytes"] = (bar1.bar1Total if bar1 else None, why)
    ecc, why = nvml_call(nv.nvmlDeviceGetEccMode, h)
    f["ecc_mode_current"] = (bool(ecc[0]) if ecc else None, why)
    f["ecc_mode_pending"] = (bool(ecc[1]) if ecc else None, why)
    unc = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    f["ecc_uncorrected_volatile"] = nvml_call(nv.nvmlDeviceGetTotalEccErrors, h, unc, nv.NVML_VOLATILE_ECC)
    f["ecc_uncorrected_aggregate"] = nvml_call(nv.nvmlDeviceGetTotalEccErrors, h, unc, nv.NVML_AGGREGATE_ECC)
    rows, why = nvml_call(nv.nvmlDeviceGetRemappedRows, h)  # Ampere and newer
    f["remapped_rows_correctable"] = (rows[0] if rows else None, why)
    f["remapped_rows_uncorrectable"] = (rows[1] if rows else None, why)
    f["remapped_rows_pending"] = (bool(rows[2]) if rows else None, why)
    f["remapped_rows_failure"] = (bool(rows[3]) if rows else None, why)
    sbe, why = nvml_call(nv.nvmlDeviceGetRetiredPages, h, nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
    f["retired_pages_sbe"] = (len(sbe) if sbe is not None else None, why)
    dbe, why = nvml_call(nv.nvmlDeviceGetRetiredPages, h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    f["retired_pages_dbe"] = (len(dbe) if dbe is not None else None, why)
    pend, why = nvml_call(nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
    f["retired_pages_pending"] = (bool(pend) if pend is not None else None, why)
    f["pcie_gen_current"] = nvml_call(nv.nvmlDeviceGetCurrPcieLinkGeneration, h)
    f["pcie_gen_max"] = nvml_call(nv.nvmlDeviceGetMaxPcieLinkGeneration, h)
    f["pcie_width_current"] = nvml_call(nv.nvmlDeviceGetCurrPcieLinkWidth, h)
    f["pcie_width_max"] = nvml_call(nv.nvmlDeviceGetMaxPcieLinkWidth, h)
    f["nvlink_links"] = _nvlink_links(nv, h)
    f["temperature_c"] = nvml_call(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
    f["temperature_slowdown_c"] = nvml_call(nv.nvmlDeviceGetTemperatureThreshold, h,
                                             nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
    f["temperature_shutdown_c"] = nvml_call(nv.nvmlDeviceGetTemperatureThreshold, h,
                                             nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)
    for key, fn in (("power_draw_w", "nvmlDeviceGetPowerUsage"), ("power_limit_w", "nvmlDeviceGetPowerManagementLimit"),
                    ("power_enforced_limit_w", "nvmlDeviceGetEnforcedPowerLimit"),
                    ("power_default_limit_w", "nvmlDeviceGetPowerManagementDefaultLimit")):
        value, why = nvml_call(getattr(nv, fn), h)
        f[key] = (mw(value), why)
    f["throttle_reasons_mask"] = _throttle_mask(nv, h)
    f["clock_sm_mhz"] = nvml_call(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
    f["clock_sm_max_mhz"] = nvml_call(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM)
    for key, fn in (("display_mode", "nvmlDeviceGetDisplayMode"), ("display_active", "nvmlDeviceGetDisplayActive"),
                    ("persistence_mode", "nvmlDeviceGetPersistenceMode")):
        value, why = nvml_call(getattr(nv, fn), h)
        f[key] = (bool(value) if value is not None else None, why)
    f["vbios"] = nvml_call(nv.nvmlDeviceGetVbiosVersion, h)
    return f


def _nvlink_links(nv, h):
    """[{link, active}] for the links NVML knows on this GPU, or (None, reason) when it has none."""
    links = []
    for link in range(nv.NVML_NVLINK_MAX_LINKS):
        state, why = nvml_call(nv.nvmlDeviceGetNvLinkState, h, link)
        if state is None:  # past the last link (InvalidArgument) or no NVLink at all (NotSupported)
            return (links, None) if links else (None, why)
        links.append({"link": link, "active": bool(state)})
    return links, None


def _throttle_mask(nv, h):
    fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    return nvml_call(fn, h)


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
        return {"nvml": {**nvml, "reason": why_failed(exc)}, "gpus": []}
    try:
        nvml["available"] = True
        nvml["driver"], _ = nvml_call(nv.nvmlSystemGetDriverVersion)
        nvml["nvml_version"], _ = nvml_call(nv.nvmlSystemGetNVMLVersion)
        cuda, _ = nvml_call(nv.nvmlSystemGetCudaDriverVersion)
        nvml["cuda_driver"] = f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None
        count, why = nvml_call(nv.nvmlDeviceGetCount)
        if count is None:
            nvml["reason"] = f"nvmlDeviceGetCount: {why}"
        gpus = []
        for i in range(count or 0):
            handle, why = nvml_call(nv.nvmlDeviceGetHandleByIndex, i)
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


def model_file_info(profile: Profile) -> dict:
    """The profile's model file: its size when it exists, else the weight bytes `lab plan` shows (an estimate),
    and the free space on the disk it lives (or will live) on."""
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
        # not here yet: the weights `lab plan` and the memory plan show (lab.model.weights.profile_weights), a
        # little under the file, which adds its header (metadata, tokenizer)
        try:
            size, basis = weights.profile_weights(profile)
            info["size_bytes"], info["how"] = size, f"estimate (tensor data, lab.model.weights): {basis}"
        except (KeyError, ValueError):
            pass
    target, usage = disk.usage_at(path.parent if path is not None else paths.models_dir(paths.cache_dir()))
    info.update(disk_path=str(target), disk_free_bytes=usage.free, disk_total_bytes=usage.total)
    return info


def collect(profile: Profile) -> dict:
    """Everything the checks judge: NVML, host and the model file's disk, as plain JSON-able data."""
    inv = gpu_inventory()
    inv["collected_utc"] = evidence.utc_now()
    inv["host"] = host_inventory()
    inv["model_file"] = model_file_info(profile)
    return inv


def throttle_reason_names(mask: int | None) -> list[str] | None:
    """NVML clock-event bitmask -> names ("HW slowdown", "SW thermal slowdown", ...); None stays None."""
    if mask is None:
        return None
    names = [name for bit, (name, _) in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    if unknown:
        names.append(f"other bits 0x{unknown:x}")
    return names

