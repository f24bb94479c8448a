"""Whether this box is healthy enough for the profile: pure checks, (inventory dict, profile) -> `Check`s.

The inventory is lab.measure.inventory.collect's dict; unit tests feed fake ones (tests/unit/test_hardware.py).
Each check names what it saw, what the profile expects, the fix, and its source.
"""
from __future__ import annotations

import re

from lab.core.checks import Check
from lab.core.profiles import Profile
from lab.measure.inventory import THROTTLE_REASONS, WEIGHTS_ESTIMATE_SOURCE, throttle_reason_names

NVML_SOURCE = "NVML API reference (docs.nvidia.com/deploy/nvml-api), read through nvidia-ml-py"
V100_BRIEF = "NVIDIA Tesla V100 PCIe product brief PB-08744-001 (250 W, passive heat sink, no display output)"
PAGE_RETIREMENT_DOC = "NVIDIA 'Dynamic Page Retirement' (docs.nvidia.com/deploy/dynamic-page-retirement)"
ROW_REMAP_DOC = "NVIDIA 'GPU Memory Error Management' (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt)"
HBM_ECC_SOURCE = ("NVIDIA Tesla V100 GPU Architecture whitepaper (Volta, WP-08608-001), 'ECC Memory Resiliency': "
                  "'With V100 and P100, ECC can be active without a bandwidth or capacity penalty.'")


def gib(nbytes: float | None) -> str:
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
                 f"{gib(total)} total, {gib(inv['host'].get('ram_available_bytes'))} available", expected,
                 "" if ok else "Less RAM than the profile needs: loading (and converting) a model holds it in RAM "
                 "or page cache; add RAM or use a smaller model.", _profile_source(profile))


def check_disk(inv: dict, profile: Profile) -> Check:
    mf = inv["model_file"]
    size, free = mf.get("size_bytes"), mf.get("disk_free_bytes")
    src = WEIGHTS_ESTIMATE_SOURCE if (mf.get("how") or "").startswith("estimate") else _profile_source(profile)
    if mf.get("how") == "file":
        return Check("Disk for the model file", "pass", f"present: {gib(size)} at {mf['path']}",
                     "model file on disk", "", _profile_source(profile))
    if size is None:
        return Check("Disk for the model file", "skip", f"{gib(free)} free at {mf.get('disk_path')}",
                     "model size unknown", "Name the model's size in model_name (e.g. '27B') or give model_file.",
                     _profile_source(profile))
    observed = f"{gib(free)} free at {mf['disk_path']}"
    expected = f">= {gib(size * 1.1)} ({mf['how']}, + 10 %)"
    fix = ("Converting from Hugging Face weights needs the F16 copy too (about 2 bytes per parameter) on top. ")
    if free >= size * 1.1:
        return Check("Disk for the model file", "pass", observed, expected, "", src)
    if free >= size:
        return Check("Disk for the model file", "warn", observed, expected, "Fits, barely. " + fix, src)
    return Check("Disk for the model file", "fail", observed, expected,
                 "Not enough free space for the model: free space or point model_file elsewhere. " + fix, src)


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
    return [check_cpu(inv, profile), check_ram(inv, profile), check_disk(inv, profile)]

