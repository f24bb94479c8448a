"""A stand-in for nvidia-ml-py's `pynvml`, for TESTS ONLY: it lets CI (no GPU, no driver) run the lab's real NVML
code (lab.measure.inventory, gpu_links, gpumon, lab.core.evidence) on what real cards reported, replayed from a
fixture. Never install it next to the real package; it stands for hardware, not for any engine.

Which card: the JSON file named by the environment variable LAB_FAKE_NVML (tests/data/nvml/*.json, each with a
`source` saying where every value came from). Without it, nvmlInit raises NVMLError_LibraryNotFound, as the real
package does on a machine without the driver.

How to use it: put tests/fake_gpu first on the import path (PYTHONPATH=tests/fake_gpu for a subprocess or a
papermill kernel) or set sys.modules["pynvml"] to this module, and set LAB_FAKE_NVML=<fixture path>.

Fixture values are returned as recent nvidia-ml-py returns them (str names and versions, ints in NVML's units:
bytes, mW, mJ, °C, MHz). A value written {"nvml_error": "NOT_SUPPORTED"} raises that error (what the card's dump
showed as N/A / Not Supported); a field the fixture leaves out raises NVMLError_Unknown, because no published
source gave it. Errors mirror nvidia-ml-py: one NVMLError_<Name> subclass per NVML_ERROR_* code, built the way
nvidia-ml-py builds them, and str() is nvmlErrorString's text ("Not Supported"), so the lab's recorded reasons
read as they do on a real card ("NVMLError_NotSupported: Not Supported").

Over time: power draw and memory used follow the fixture's `samples` series (a step every `step_s` seconds,
repeating) by the time since the fixture was loaded (first nvmlInit with it), and the total-energy counter is
`energy_start_mj` plus the exact integral of that power, so it only grows and its difference over a stretch
divided by the stretch's length is the mean power over it.
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import string
import sys
import threading
import time
from types import SimpleNamespace

# ---------------------------------------------------------------- constants (values from nvml.h / nvidia-ml-py)
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_UNKNOWN = 999

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3
NVML_NVLINK_MAX_LINKS = 36  # nvidia-ml-py 13.615.71 (the pinned version)
NVML_NVLINK_DEVICE_TYPE_GPU = 0
NVML_NVLINK_DEVICE_TYPE_IBMNPU = 1
NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
# nvidia-ml-py 13.615.71 (pyproject.toml pins it) defines READ with a trailing comma: the tuple (0,), which its
# ctypes call cannot convert. Mirrored, with the same ctypes.ArgumentError, so a replay fails where a card would.
NVML_P2P_CAPS_INDEX_READ = (0,)
NVML_P2P_CAPS_INDEX_WRITE = 1
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_CAPS_INDEX_ATOMICS = 3
NVML_P2P_CAPS_INDEX_PROP = 4
NVML_P2P_CAPS_INDEX_PCI = 4
NVML_P2P_STATUS_OK = 0
NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED = 1  # sic, as nvml.h spells it
NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED = 1
NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2
NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3
NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4
NVML_P2P_STATUS_NOT_SUPPORTED = 5
NVML_P2P_STATUS_UNKNOWN = 6
NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_SYSTEM = 50

_P2P_KEYS = {0: "read", NVML_P2P_CAPS_INDEX_WRITE: "write",
             NVML_P2P_CAPS_INDEX_NVLINK: "nvlink", NVML_P2P_CAPS_INDEX_ATOMICS: "atomics"}


# ---------------------------------------------------------------- errors, built as nvidia-ml-py builds them
class NVMLError(Exception):
    # nvmlErrorString's words for each code (nvidia-ml-py asks the library; the fake has no library)
    _valClassMapping: dict = {}
    _errcode_to_string = {
        NVML_ERROR_UNINITIALIZED: "Uninitialized", NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported", NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized", NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size", NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded", NVML_ERROR_TIMEOUT: "Timeout",
        NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue", NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found", NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost", NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
        NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
        NVML_ERROR_IN_USE: "In use by another client", NVML_ERROR_MEMORY: "Insufficient Memory",
        NVML_ERROR_NO_DATA: "No data", NVML_ERROR_UNKNOWN: "Unknown Error",
    }

    def __new__(typ, value):
        if typ == NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self):
        return self._errcode_to_string.get(self.value, "NVML Error with code %d" % self.value)

    def __eq__(self, other):
        return self.value == other.value

    __hash__ = Exception.__hash__


def _extractNVMLErrorsAsClasses():
    """NVML_ERROR_NOT_SUPPORTED -> class NVMLError_NotSupported(NVMLError), as nvidia-ml-py names them."""
    this_module = sys.modules[__name__]
    for err_name in [x for x in dir(this_module) if x.startswith("NVML_ERROR_")]:
        class_name = "NVMLError_" + string.capwords(err_name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        err_val = getattr(this_module, err_name)

        def gen_new(val):
            def new(typ, *args):
                return NVMLError.__new__(typ, val)
            return new
        cls = type(class_name, (NVMLError,), {"__new__": gen_new(err_val)})
        cls.__module__ = __name__
        setattr(this_module, class_name, cls)
        NVMLError._valClassMapping[err_val] = cls


_extractNVMLErrorsAsClasses()


def nvmlExceptionClass(nvmlErrorCode):
    return NVMLError._valClassMapping[nvmlErrorCode]


def nvmlErrorString(result):
    return NVMLError._errcode_to_string.get(result, "Unknown Error")


# ---------------------------------------------------------------- the replayed card
_lock = threading.Lock()
_state = {"inits": 0, "path": None, "fixture": None, "t0": 0.0}


def _raise(code_name: str):
    raise NVMLError(getattr(sys.modules[__name__], "NVML_ERROR_" + code_name))


def _fixture() -> dict:
    if _state["inits"] <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return _state["fixture"]


def _value(where: dict, key: str):
    """A fixture value; {"nvml_error": NAME} raises it; a missing key is a value no source gave: Unknown."""
    if key not in where:
        raise NVMLError(NVML_ERROR_UNKNOWN)
    v = where[key]
    if isinstance(v, dict) and "nvml_error" in v:
        _raise(v["nvml_error"])
    return v


class _Handle:
    """What nvmlDeviceGetHandleByIndex gives: opaque to the lab, an index here."""

    def __init__(self, index: int):
        self.index = index

    def __repr__(self):
        return f"<fake nvmlDevice_t {self.index}>"


def _gpu(handle) -> dict:
    if not isinstance(handle, _Handle):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _fixture()["gpus"][handle.index]


def _elapsed() -> float:
    return time.monotonic() - _state["t0"]


def _series(gpu: dict):
    s = _value(gpu, "samples")
    return s["step_s"], s["power_mw"], s["memory_used_bytes"]


def _step_index(gpu: dict) -> int:
    step, power, _ = _series(gpu)
    return int(_elapsed() // step) % len(power)


def nvmlInit():
    with _lock:
        path = os.environ.get("LAB_FAKE_NVML")
        if not path:  # as nvidia-ml-py on a machine without libnvidia-ml.so.1
            raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
        if path != _state["path"]:  # another card: load it and start its clock (tests switch fixtures in one process)
            with open(path, encoding="utf-8") as f:
                _state.update(fixture=json.load(f), path=path, t0=time.monotonic())
        _state["inits"] += 1  # NVML counts nvmlInit calls; each nvmlShutdown takes one back


nvmlInitWithFlags = lambda flags=0: nvmlInit()  # noqa: E731 - same call, flags ignored


def nvmlShutdown():
    with _lock:
        if _state["inits"] <= 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        _state["inits"] -= 1


# ---------------------------------------------------------------- system
def nvmlSystemGetDriverVersion():
    return _value(_fixture(), "driver_version")


def nvmlSystemGetNVMLVersion():
    return _value(_fixture(), "nvml_version")


def nvmlSystemGetCudaDriverVersion():
    return _value(_fixture(), "cuda_driver_version")


nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion


def nvmlDeviceGetCount():
    return len(_fixture()["gpus"])


def nvmlDeviceGetHandleByIndex(index):
    if not 0 <= index < nvmlDeviceGetCount():
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _Handle(index)


# ---------------------------------------------------------------- identity and memory
def nvmlDeviceGetName(handle):
    return _value(_gpu(handle), "name")


def nvmlDeviceGetUUID(handle):
    return _value(_gpu(handle), "uuid")


def nvmlDeviceGetIndex(handle):
    _gpu(handle)
    return handle.index


def _pci(bus_id: str):
    domain, bus, devfn = bus_id.split(":")
    return SimpleNamespace(busId=bus_id, busIdLegacy=bus_id[4:], domain=int(domain, 16), bus=int(bus, 16),
                           device=int(devfn.split(".")[0], 16))


def nvmlDeviceGetPciInfo(handle):
    return _pci(_value(_gpu(handle), "pci_bus_id"))


nvmlDeviceGetPciInfo_v3 = nvmlDeviceGetPciInfo


def nvmlDeviceGetMemoryInfo(handle, version=None):
    gpu = _gpu(handle)
    total = _value(gpu, "memory_total_bytes")
    used = _series(gpu)[2][_step_index(gpu)]
    return SimpleNamespace(total=total, used=used, free=total - used)


def nvmlDeviceGetBAR1MemoryInfo(handle):
    total = _value(_gpu(handle), "bar1_total_bytes")
    return SimpleNamespace(bar1Total=total, bar1Used=0, bar1Free=total)


def nvmlDeviceGetCudaComputeCapability(handle):
    return tuple(_value(_gpu(handle), "compute_capability"))


def nvmlDeviceGetVbiosVersion(handle):
    return _value(_gpu(handle), "vbios")


# ---------------------------------------------------------------- memory health
def nvmlDeviceGetEccMode(handle):
    return list(_value(_gpu(handle), "ecc_mode"))  # [current, pending]


def nvmlDeviceGetTotalEccErrors(handle, errorType, counterType):
    if errorType != NVML_MEMORY_ERROR_TYPE_UNCORRECTED:  # the fixtures hold the uncorrected counters only
        raise NVMLError(NVML_ERROR_UNKNOWN)
    key = {NVML_VOLATILE_ECC: "ecc_uncorrected_volatile", NVML_AGGREGATE_ECC: "ecc_uncorrected_aggregate"}
    if counterType not in key:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _value(_gpu(handle), key[counterType])


def nvmlDeviceGetRemappedRows(handle):
    return tuple(_value(_gpu(handle), "remapped_rows"))  # (correctable, uncorrectable, pending, failure)


def nvmlDeviceGetRetiredPages(handle, sourceFilter):
    key = {NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: "retired_pages_sbe",
           NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: "retired_pages_dbe"}
    if sourceFilter not in key:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return list(_value(_gpu(handle), key[sourceFilter]))  # page addresses


def nvmlDeviceGetRetiredPagesPendingStatus(handle):
    return _value(_gpu(handle), "retired_pages_pending")


# ---------------------------------------------------------------- PCIe, temperature, clocks, modes
def nvmlDeviceGetCurrPcieLinkGeneration(handle):
    return _value(_gpu(handle), "pcie_gen_current")


def nvmlDeviceGetMaxPcieLinkGeneration(handle):
    return _value(_gpu(handle), "pcie_gen_max")


def nvmlDeviceGetCurrPcieLinkWidth(handle):
    return _value(_gpu(handle), "pcie_width_current")


def nvmlDeviceGetMaxPcieLinkWidth(handle):
    return _value(_gpu(handle), "pcie_width_max")


def nvmlDeviceGetTemperature(handle, sensor):
    if sensor != NVML_TEMPERATURE_GPU:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _value(_gpu(handle), "temperature_c")


def nvmlDeviceGetTemperatureThreshold(handle, threshold):
    key = {NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: "temperature_slowdown_c",
           NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: "temperature_shutdown_c"}
    if threshold not in key:
        raise NVMLError(NVML_ERROR_UNKNOWN)  # other thresholds: no fixture holds them
    return _value(_gpu(handle), key[threshold])


def nvmlDeviceGetClockInfo(handle, clock_type):
    if clock_type != NVML_CLOCK_SM:
        raise NVMLError(NVML_ERROR_UNKNOWN)  # the fixtures hold the SM clock only
    return _value(_gpu(handle), "clock_sm_mhz")


def nvmlDeviceGetMaxClockInfo(handle, clock_type):
    if clock_type != NVML_CLOCK_SM:
        raise NVMLError(NVML_ERROR_UNKNOWN)
    return _value(_gpu(handle), "clock_sm_max_mhz")


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    return _value(_gpu(handle), "throttle_reasons_mask")


nvmlDeviceGetCurrentClocksThrottleReasons = nvmlDeviceGetCurrentClocksEventReasons


def nvmlDeviceGetDisplayMode(handle):
    return _value(_gpu(handle), "display_mode")


def nvmlDeviceGetDisplayActive(handle):
    return _value(_gpu(handle), "display_active")


def nvmlDeviceGetPersistenceMode(handle):
    return _value(_gpu(handle), "persistence_mode")


# ---------------------------------------------------------------- power and energy (vary over time)
def nvmlDeviceGetPowerUsage(handle):
    gpu = _gpu(handle)
    return _series(gpu)[1][_step_index(gpu)]  # mW


def nvmlDeviceGetTotalEnergyConsumption(handle):
    """mJ: the start value plus the integral of the power series (mW x s = mJ) since the fixture was loaded."""
    gpu = _gpu(handle)
    step, power, _ = _series(gpu)
    t = _elapsed()
    cycles, rest = divmod(t, step * len(power))
    k = int(rest // step)
    energy = cycles * sum(power) * step + sum(power[:k]) * step + power[k] * (rest - k * step)
    return int(_value(gpu, "energy_start_mj") + math.floor(energy))


def nvmlDeviceGetPowerManagementLimit(handle):
    return _value(_gpu(handle), "power_limit_mw")


def nvmlDeviceGetEnforcedPowerLimit(handle):
    return _value(_gpu(handle), "power_enforced_limit_mw")


def nvmlDeviceGetPowerManagementDefaultLimit(handle):
    return _value(_gpu(handle), "power_default_limit_mw")


# ---------------------------------------------------------------- NVLink and pairs
def _link(handle, link: int) -> dict:
    links = _value(_gpu(handle), "nvlink")  # NOT_SUPPORTED on a GPU without NVLink
    if not 0 <= link < len(links):  # NVML: past the GPU's last link is an invalid argument
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return links[link]


def nvmlDeviceGetNvLinkState(handle, link):
    return NVML_FEATURE_ENABLED if _value(_link(handle, link), "active") else NVML_FEATURE_DISABLED


def nvmlDeviceGetNvLinkVersion(handle, link):
    return _value(_link(handle, link), "version")


def nvmlDeviceGetNvLinkRemotePciInfo(handle, link):
    return _pci(_value(_link(handle, link), "remote_bus_id"))


nvmlDeviceGetNvLinkRemotePciInfo_v2 = nvmlDeviceGetNvLinkRemotePciInfo


def nvmlDeviceGetNvLinkRemoteDeviceType(handle, link):
    return _value(_link(handle, link), "remote_type")


def _pair(h1, h2) -> dict:
    _gpu(h1), _gpu(h2)
    pairs = _value(_fixture(), "pairs")
    key = ",".join(str(i) for i in sorted((h1.index, h2.index)))
    if key not in pairs:
        raise NVMLError(NVML_ERROR_UNKNOWN)
    return pairs[key]


def nvmlDeviceGetP2PStatus(device1, device2, p2pIndex):
    if not isinstance(p2pIndex, int):  # what ctypes says when nvidia-ml-py passes it a tuple (argument 3)
        raise ctypes.ArgumentError("argument 3: TypeError: Don't know how to convert parameter 3")
    if p2pIndex not in _P2P_KEYS:
        raise NVMLError(NVML_ERROR_UNKNOWN)
    return _value(_value(_pair(device1, device2), "p2p"), _P2P_KEYS[p2pIndex])


def nvmlDeviceGetTopologyCommonAncestor(device1, device2):
    return _value(_pair(device1, device2), "common_ancestor")
