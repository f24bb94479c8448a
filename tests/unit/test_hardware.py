"""lab.measure.inventory / hardware_checks / psu_sizing / copy_bandwidth / hardware: pure checks on fake inventories (tier 1), then the real inventory and host
bandwidth probe on this machine (tier 2; no GPU here, so NVML is missing for real)."""
from __future__ import annotations

import copy
import json

import pytest

from lab.core import profiles
from lab.model import weights
from lab.measure import copy_bandwidth, gpu_links, hardware_checks, inventory, psu_sizing
from lab.pages import hardware
from lab.predict import profile_speed
from lab.core.checks import worst
from lab.core.profiles import Profile

V100_PROFILE = {
    "name": "v100-test", "description": "2 x V100 SXM2 32GB with NVLink (test profile)",
    "gpu_name_pattern": "V100.*32GB", "gpu_count": 2, "gpu_vram_mib": 32768, "gpu_compute_capability": "7.0",
    "nvlink_expected": True, "gpu_memory_bandwidth_gb_s": 900, "gpu_tdp_w": 250, "host_ram_gib_min": 64,
    "driver_version": "570", "engine": "llama.cpp", "engine_version": "0.3.36",
    "model_name": "Qwen3-32B", "model_architecture": "config:Qwen/Qwen3-32B", "model_quant": "Q4_K_M",
    "context_tokens": 16384, "tensor_parallel_size": 2, "n_gpu_layers": -1,
}


def v100_profile(**changes) -> Profile:
    return Profile.model_validate({**V100_PROFILE, **changes})


def healthy_v100(index: int) -> dict:
    """What NVML reports for a healthy, idle Tesla V100-SXM2-32GB (Volta: retired pages, no row remap)."""
    return {
        "index": index, "name": "Tesla V100-SXM2-32GB", "pci_bus_id": f"00000000:0{index}:00.0",
        "memory_total_bytes": 32768 * 2**20, "memory_used_bytes": 300 * 2**20, "compute_capability": "7.0",
        "bar1_total_bytes": 32768 * 2**20, "ecc_mode_current": True, "ecc_mode_pending": True,
        "ecc_uncorrected_volatile": 0, "ecc_uncorrected_aggregate": 0,
        "remapped_rows_correctable": None, "remapped_rows_uncorrectable": None, "remapped_rows_pending": None,
        "remapped_rows_failure": None, "retired_pages_sbe": 0, "retired_pages_dbe": 0, "retired_pages_pending": False,
        "pcie_gen_current": 3, "pcie_gen_max": 3, "pcie_width_current": 16, "pcie_width_max": 16,
        "nvlink_links": [{"link": k, "active": True} for k in range(6)],
        "temperature_c": 38, "temperature_slowdown_c": 87, "temperature_shutdown_c": 90,
        "power_draw_w": 40.0, "power_limit_w": 250.0, "power_enforced_limit_w": 250.0, "power_default_limit_w": 250.0,
        "throttle_reasons_mask": 0x1, "throttle_reasons": ["GPU idle"], "clock_sm_mhz": 135,
        "clock_sm_max_mhz": 1530, "display_mode": False, "display_active": False, "persistence_mode": True,
        "vbios": "88.00.80.00.01",
        "unavailable": {k: "NVMLError_NotSupported: Not Supported" for k in
                        ("remapped_rows_correctable", "remapped_rows_uncorrectable", "remapped_rows_pending",
                         "remapped_rows_failure")},
    }


def fake_inventory(gpus: list[dict] | None = None, nvml_reason: str | None = None) -> dict:
    available = nvml_reason is None
    return {
        "nvml": {"available": available, "reason": nvml_reason, "driver": "570.172.08" if available else None,
                 "cuda_driver": "12.8" if available else None, "nvml_version": "12.570.172.08" if available else None},
        "gpus": gpus if gpus is not None else [healthy_v100(0), healthy_v100(1)],
        "collected_utc": "2026-11-29T00:00:00Z",
        "host": {"hostname": "box", "os": "Linux", "cpu_model": "Intel Xeon E5-2680 v4", "cpu_logical_cores": 28,
                 "cpu_physical_cores": 14, "ram_bytes": 128 * 2**30, "ram_available_bytes": 120 * 2**30,
                 "python": "3.11"},
        "model_file": {"spec": None, "path": None, "size_bytes": 19_600_000_000, "how": "estimate: 32e9 params",
                       "note": None, "disk_path": "/data", "disk_free_bytes": 500 * 2**30,
                       "disk_total_bytes": 1000 * 2**30},
    }


GPU_BW = {"kind": "gpu", "gb_s": 780.0, "sd": 2.0, "n": 10, "samples": [780.0] * 10, "method": "fake"}


def by_name(found) -> dict:
    return {c.name: c for c in found}


def statuses(found, contains: str) -> set[str]:
    return {c.status for c in found if contains in c.name}


# ---------------------------------------------------------------- tier 1: pure checks
def test_healthy_v100_pair_passes_everything_checkable():
    found = hardware.check_all(fake_inventory(), GPU_BW, v100_profile())
    bad = [c for c in found if c.status in ("warn", "fail")]
    assert bad == []
    names = by_name(found)
    assert names["GPU count"].status == "pass"
    assert names["GPU 1 NVLink"].observed == "6 of 6 links active"
    assert names["GPU 0 retired pages / remapped rows"].status == "pass"  # Volta: retired pages reported
    assert names["Memory bandwidth (measured)"].observed.endswith("= 87% of datasheet")
    assert worst(found) == "pass"
    assert all(c.source for c in found), "every check names its source"


def test_ecc_errors_fail_and_history_warns():
    gpu = healthy_v100(0) | {"ecc_uncorrected_volatile": 2, "ecc_uncorrected_aggregate": 5}
    found = hardware_checks.check_ecc(gpu)
    assert found[1].status == "fail" and "Xid 48" in found[1].fix
    old = healthy_v100(0) | {"ecc_uncorrected_aggregate": 3}
    assert hardware_checks.check_ecc(old)[1].status == "warn"
    off = healthy_v100(0) | {"ecc_mode_current": False, "ecc_mode_pending": False}
    assert hardware_checks.check_ecc(off)[0].status == "warn" and "HBM2" in hardware_checks.check_ecc(off)[0].fix
    pending = healthy_v100(0) | {"ecc_mode_pending": False}
    assert "reboot" in hardware_checks.check_ecc(pending)[0].fix


def test_retired_pages_and_row_remapping():
    assert hardware_checks.check_memory_retirement(healthy_v100(0) | {"retired_pages_pending": True}).status == "warn"
    assert hardware_checks.check_memory_retirement(healthy_v100(0) | {"retired_pages_dbe": 2}).status == "warn"
    ampere = healthy_v100(0) | {"remapped_rows_correctable": 0, "remapped_rows_uncorrectable": 1,
                                "remapped_rows_pending": False, "remapped_rows_failure": True}
    check = hardware_checks.check_memory_retirement(ampere)
    assert check.status == "fail" and "RMA" in check.fix
    assert hardware_checks.check_memory_retirement(ampere | {"remapped_rows_failure": False,
                                                      "remapped_rows_pending": True}).status == "warn"


def test_throttling_decoded_and_judged():
    assert inventory.throttle_reason_names(0x1 | 0x40) == ["GPU idle", "HW thermal slowdown"]
    assert inventory.throttle_reason_names(0) == []
    assert inventory.throttle_reason_names(None) is None
    assert inventory.throttle_reason_names(0x8000) == ["other bits 0x8000"]
    hot = healthy_v100(0) | {"throttle_reasons_mask": 0x40 | 0x8, "temperature_c": 88}
    assert hardware_checks.check_throttle(hot).status == "fail"
    assert hardware_checks.check_throttle(hot).observed == "HW slowdown, HW thermal slowdown"
    assert hardware_checks.check_temperature(hot).status == "fail"
    assert hardware_checks.check_temperature(healthy_v100(0) | {"temperature_c": 80}).status == "warn"
    assert hardware_checks.check_throttle(healthy_v100(0) | {"throttle_reasons_mask": 0x4}).status == "warn"
    assert hardware_checks.check_throttle(healthy_v100(0)).status == "pass"  # idle only


def test_pcie_x8_and_idle_gen_drop_warn_not_fail():
    x8 = hardware_checks.check_pcie(healthy_v100(0) | {"pcie_width_current": 8})
    assert x8.status == "warn" and x8.observed == "gen 3 x8" and "riser" in x8.fix
    idle = hardware_checks.check_pcie(healthy_v100(0) | {"pcie_gen_current": 1})
    assert idle.status == "warn" and "idle" in idle.fix


def test_nvlink_down_fails_only_when_expected():
    down = healthy_v100(0) | {"nvlink_links": [{"link": k, "active": False} for k in range(6)]}
    check = hardware_checks.check_nvlink(down, v100_profile())
    assert check.status == "fail" and "V100 PCIe" in check.fix
    absent = healthy_v100(0) | {"nvlink_links": None,
                                "unavailable": {"nvlink_links": "NVMLError_NotSupported: Not Supported"}}
    assert hardware_checks.check_nvlink(absent, v100_profile()).status == "fail"
    assert "NotSupported" in hardware_checks.check_nvlink(absent, v100_profile()).observed
    no_nvlink = v100_profile(nvlink_expected=False, tensor_parallel_size=1)
    assert hardware_checks.check_nvlink(down, no_nvlink).status == "skip"


def test_power_cap_display_and_persistence_warn():
    capped = hardware_checks.check_power(healthy_v100(0) | {"power_limit_w": 180.0}, v100_profile())
    assert capped.status == "warn" and "72%" in capped.fix
    sxm2 = hardware_checks.check_power(healthy_v100(0) | {"power_limit_w": 300.0, "power_default_limit_w": 300.0},
                                v100_profile())
    assert sxm2.status == "warn" and "gpu_tdp_w" in sxm2.fix
    assert hardware_checks.check_display(healthy_v100(0) | {"display_active": True}).status == "warn"
    # a headless H200 reported display mode Enabled with nothing active: not a warning
    assert hardware_checks.check_display(healthy_v100(0) | {"display_mode": True}).status == "pass"
    assert hardware_checks.check_persistence(healthy_v100(0) | {"persistence_mode": False}).status == "warn"


def test_wrong_card_fails_identity_checks():
    p100 = healthy_v100(0) | {"name": "Tesla P100-PCIE-16GB", "memory_total_bytes": 16280 * 2**20,
                              "compute_capability": "6.0"}
    found = by_name(hardware_checks.gpu_checks(fake_inventory([p100, healthy_v100(1)]), v100_profile()))
    assert found["GPU 0 model"].status == "fail"
    assert found["GPU 0 VRAM"].status == "fail"
    assert found["GPU 0 compute capability"].status == "fail"
    assert found["GPU 1 model"].status == "pass"


def test_missing_gpu_on_gpu_profile_fails_without_raising():
    inv = fake_inventory([], nvml_reason="NVMLError_LibraryNotFound: NVML Shared Library Not Found")
    names = by_name(hardware_checks.gpu_checks(inv, v100_profile()))
    assert names["GPU count"].status == "fail" and "LibraryNotFound" in names["GPU count"].observed
    assert "Above 4G" in names["GPU count"].fix
    assert names["NVIDIA driver"].status == "fail"
    # notebook 01 on that box is in plan mode (lab.core.planmode): every check listed as not-run, none failed
    found = hardware.check_all(inv, None, v100_profile())
    assert {c.status for c in found} == {"not-run"} and worst(found) == "not-run"
    assert by_name(found)["GPU count"].expected == names["GPU count"].expected
    one_missing = hardware_checks.check_gpu_count(fake_inventory([healthy_v100(0)]), v100_profile())
    assert one_missing.status == "fail" and one_missing.observed == 1


def test_cpu_profile_skips_gpu_checks_with_reason():
    cpu = profiles.load("cpu-default")
    inv = fake_inventory([], nvml_reason="NVMLError_LibraryNotFound: NVML Shared Library Not Found")
    found = hardware_checks.gpu_checks(inv, cpu)
    assert {c.status for c in found} == {"skip"}
    assert all("CPU-only" in (c.fix or c.expected) for c in found)
    # a CPU profile on a box that has a GPU: say so (the GPU sits unused)
    assert hardware_checks.check_gpu_count(fake_inventory(), cpu).status == "warn"


def test_host_checks_ram_disk_and_psu_arithmetic():
    small = fake_inventory()
    small["host"]["ram_bytes"] = 32 * 2**30
    assert hardware_checks.check_ram(small, v100_profile()).status == "fail"
    full = fake_inventory()
    full["model_file"]["disk_free_bytes"] = 10 * 2**30
    assert hardware_checks.check_disk(full, v100_profile()).status == "fail"
    psu = psu_sizing.advice(fake_inventory(), v100_profile())
    assert psu["sustained_w"] == 650 and round(psu["minimum_w"]) == 812 and psu["recommended_w"] == 850
    assert psu["arithmetic"] == "250 + 250 W GPUs + 150 W CPU/board = 650 W sustained; / 0.8 = 812 W -> a 850 W PSU"
    no_nvml = psu_sizing.advice(fake_inventory([], nvml_reason="x"), v100_profile())
    assert no_nvml["gpu_total_w"] == 500 and "gpu_tdp_w" in no_nvml["how"]  # falls back to the profile
    assert psu_sizing.check(psu).status == "skip"


def test_model_size_estimate_from_name_and_quant():
    assert weights.params_from_name("Qwen3-32B") == 32e9
    assert weights.params_from_name(None, "SmolLM2-135M-Instruct") == 135e6
    assert weights.params_from_name("Gemma-3-27B-it") == 27e9
    assert weights.params_from_name("mystery-model") is None
    info = inventory.model_file_info(v100_profile(model_name="gemma-3-27b-it (27B)"))
    assert info["how"].startswith("estimate") and 16e9 < info["size_bytes"] < 17e9  # ~16.5 GB at Q4_K_M


def test_bandwidth_check_against_datasheet():
    slow = GPU_BW | {"gb_s": 500.0}
    assert hardware_checks.check_bandwidth(slow, v100_profile()).status == "warn"
    host = {"kind": "host_ram", "gb_s": 20.0, "sd": 1.0, "n": 10, "gpu_unmeasured_reason": "torch missing"}
    check = hardware_checks.check_bandwidth(host, v100_profile())
    assert check.status == "warn" and "torch missing" in check.fix


# What lab.measure.inventory.gpu_inventory() read on a real H200 (device run, 2026-11-29, driver 580.159.04):
# Hopper reports remapped rows, not retired pages; a single GPU answers NotSupported for NVLink.
H200_SEEN = {
    "index": 0, "name": "NVIDIA H200", "pci_bus_id": "00000000:00:06.0", "memory_total_bytes": 150754820096,
    "memory_used_bytes": 644939776, "compute_capability": "9.0", "bar1_total_bytes": 274877906944,
    "ecc_mode_current": True, "ecc_mode_pending": True, "ecc_uncorrected_volatile": 0, "ecc_uncorrected_aggregate": 0,
    "remapped_rows_correctable": 0, "remapped_rows_uncorrectable": 0, "remapped_rows_pending": False,
    "remapped_rows_failure": False, "retired_pages_sbe": None, "retired_pages_dbe": None, "retired_pages_pending": None,
    "pcie_gen_current": 5, "pcie_gen_max": 5, "pcie_width_current": 16, "pcie_width_max": 16, "nvlink_links": None,
    "temperature_c": 35, "temperature_slowdown_c": 89, "temperature_shutdown_c": 95, "power_draw_w": 86.821,
    "power_limit_w": 700.0, "power_enforced_limit_w": 700.0, "power_default_limit_w": 700.0,
    "throttle_reasons_mask": 1, "clock_sm_mhz": 345, "clock_sm_max_mhz": 1980, "display_mode": True,
    "display_active": False, "persistence_mode": True, "vbios": "96.00.A5.00.1A",
    "unavailable": {"retired_pages_sbe": "NVMLError_NotSupported: Not Supported",
                    "retired_pages_dbe": "NVMLError_NotSupported: Not Supported",
                    "retired_pages_pending": "NVMLError_NotSupported: Not Supported",
                    "nvlink_links": "NVMLError_NotSupported: Not Supported"},
    "throttle_reasons": ["GPU idle"],
}


def test_real_h200_inventory_passes_an_h200_profile():
    prof = v100_profile(name="h200", gpu_name_pattern="H200", gpu_count=1, gpu_vram_mib=143771,
                        gpu_compute_capability="9.0", nvlink_expected=False, gpu_memory_bandwidth_gb_s=4800,
                        gpu_tdp_w=700, tensor_parallel_size=1)
    inv = fake_inventory([H200_SEEN])
    bw = {"kind": "gpu", "gb_s": 4224.4, "sd": 24.1, "n": 10, "samples": [4224.4] * 10}  # measured there
    found = by_name(hardware.check_all(inv, bw, prof))
    assert {c.status for c in found.values()} == {"pass", "skip"}
    assert found["GPU 0 retired pages / remapped rows"].observed.startswith("remapped rows: 0 uncorrectable")
    assert found["GPU 0 NVLink"].status == "skip"
    assert found["Memory bandwidth (measured)"].observed.endswith("= 88% of datasheet")
    assert psu_sizing.advice(inv, prof)["recommended_w"] == 1200


# ---------------------------------------------------------------- tier 2: real, on this machine
def test_real_inventory_on_this_machine():
    inv = inventory.collect(profiles.load("cpu-default"))
    json.dumps(inv, allow_nan=False)  # plain data, recordable as is
    assert inv["host"]["cpu_logical_cores"] >= 1 and inv["host"]["ram_bytes"] > 2**30
    assert inv["model_file"]["disk_free_bytes"] > 0 and inv["model_file"]["size_bytes"] > 0
    if not inv["nvml"]["available"]:  # this CPU machine: the real NVML error, no traceback
        assert inv["gpus"] == [] and "NVMLError" in inv["nvml"]["reason"]
    found = hardware.check_all(inv, None, profiles.load("cpu-default"))
    assert by_name(found)["Host RAM"].status == "pass"


def test_real_host_bandwidth_keeps_samples():
    bw = copy_bandwidth.measure_host(size_mib=64, repeats=5)
    assert bw["kind"] == "host_ram" and len(bw["samples"]) == 5 and bw["n"] == 5
    assert all(s > 0 for s in bw["samples"]) and bw["gb_s"] > 0.5 and bw["sd"] is not None
    assert bw["bytes_per_copy"] == 64 << 20 and "2 x bytes" in bw["counted"]
    json.dumps(bw, allow_nan=False)


def test_measure_bandwidth_falls_back_to_host_with_a_reason():
    bw = copy_bandwidth.measure(host_size_mib=64, repeats=3)
    assert bw["kind"] in ("gpu", "host_ram") and bw["gb_s"] > 0
    if bw["kind"] == "host_ram":
        assert bw["gpu_unmeasured_reason"]


def test_fake_inventory_round_trips_through_a_record(tmp_path):
    from lab.core import session
    from lab.serving import endpoint

    inv, prof = fake_inventory(), v100_profile(model_architecture="config:qwen3-32b")  # a stand-in: KV is sized
    links = {"nvml": {"available": True}, "gpus": inv["gpus"], "topo": None, "copy": {"measured": False}, "pairs": []}
    found = hardware.check_all(inv, GPU_BW, prof)
    with_links = hardware.check_all(inv, GPU_BW, prof, links)  # notebook 01's: the GPU pairs' checks appended
    assert with_links[:-1] == found and with_links[-1] == gpu_links.link_checks(links, prof, inv)[0]
    psu = psu_sizing.advice(inv, prof)
    s = session.Session(prof, profiles.resolve("v100-32g-x1"), tmp_path, endpoint.where(prof))  # as notebooks start it
    s.results.update(inventory=copy.deepcopy(inv), bandwidth=GPU_BW, gpu_links=links, power_supply=psu)  # the steps'
    rec = json.loads(hardware.record(s).read_text())
    assert rec["checks"] == [c.to_dict() for c in with_links]  # the checks the notebook shows, worked out again
    assert rec["server_scope"]["local"] and [t["title"] for t in rec["tables"]][-1] == "PSU arithmetic"
    # the ceiling is the profile's one ceiling (`lab plan`'s: bytes read per token) at the bandwidth measured here
    rl = profile_speed.roofline_for(prof, {"bandwidth": GPU_BW})
    assert rec["summary"]["decode_ceiling_tok_s"] == rl["decode_ceiling_tok_s"]
    assert rec["summary"]["decode_ceiling_tok_s"] == pytest.approx(rl["bandwidth_gb_s"] * 1e9 / rec["summary"]["bytes_read_per_token"])
    text = hardware.closing_text(rec)
    assert rec["what_this_means"] == text and hardware.what_this_means(s).data == text  # the record keeps what it shows
    # the notebook's checks include the GPU pairs' (this survey saw fewer GPUs than the profile: that one fails)
    assert "Verdict: fail" in text and "**fail: GPU pair link**" in text
    assert "780.0 GB/s" in text and "850 W PSU" in text
    assert text.endswith(f"- GPU pairs: none ({len(inv['gpus'])} GPU seen), so nothing is split across cards on this box.")
