"""NVML as the cards report it: the lab's real NVML code (inventory, hardware checks, GPU links, gpu_summary, the
gpumon sampler) run on replayed cards. CI has no GPU, so tests/fake_gpu/pynvml.py stands in for nvidia-ml-py and
serves tests/data/nvml/*.json: a lent H200 as the lab recorded it, and Tesla V100 32GB cards (one SXM2, one PCIe,
two SXM2 over NVLink) as published nvidia-smi dumps show them (each fixture's `source` cites where every value
came from)."""
from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest

from lab.core import evidence, planmode, profiles
from lab.measure import gpu_links, gpumon, hardware_checks, inventory

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "fake_gpu" / "pynvml.py"
DATA = ROOT / "tests" / "data" / "nvml"
H200_RUN = ROOT / "outputs" / "h200-x1" / "20261201T225010Z_ca156936"
NOT_SUPPORTED = "NVMLError_NotSupported: Not Supported"
UNKNOWN = "NVMLError_Unknown: Unknown Error"  # the fake's answer for a value no published source gave
FIXTURES = ("h200-x1", "v100-sxm2-32g-x1", "v100-pcie-32g-x1", "v100-sxm2-32g-x2-nvlink")


def fixture_json(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


@pytest.fixture
def card(monkeypatch):
    """card(name): a fresh fake pynvml (its own init count and clock) as `pynvml`, replaying tests/data/nvml/name.json."""
    def use(name: str | None):
        spec = importlib.util.spec_from_file_location("pynvml", FAKE)
        fake = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "pynvml", fake)  # before exec: the fake builds its error classes on itself
        spec.loader.exec_module(fake)
        if name is None:
            monkeypatch.delenv("LAB_FAKE_NVML", raising=False)
        else:
            monkeypatch.setenv("LAB_FAKE_NVML", str(DATA / f"{name}.json"))
        monkeypatch.delenv("LAB_PLAN_ONLY", raising=False)
        planmode._gpu_names.cache_clear()  # lru_cache of this machine's GPU names: it would keep another card's
        return fake
    yield use
    planmode._gpu_names.cache_clear()


def statuses(found) -> dict:
    return {c.name: c.status for c in found}


# ---------------------------------------------------------------- the fixtures themselves
@pytest.mark.parametrize("name", FIXTURES)
def test_fixtures_cite_sources_and_stay_small(name):
    path = DATA / f"{name}.json"
    assert path.stat().st_size < 20_000
    data = fixture_json(name)
    assert data["source"] and isinstance(data["cuda_driver_version"], int)
    for gpu in data["gpus"]:
        s = gpu["samples"]
        assert len(s["power_mw"]) == len(s["memory_used_bytes"]) >= 3  # a replay that varies over time


# ---------------------------------------------------------------- lab.measure.inventory
def test_inventory_replays_the_h200_record(card):
    """The replay gives back what the lab recorded on the lent H200: every static field, and the same
    'unavailable' reasons; power and memory used are the record's idle values or the run's later samples."""
    card("h200-x1")
    inv = inventory.gpu_inventory()
    recorded = json.loads((H200_RUN / "records" / "01_hardware.json").read_text())["inventory"]
    assert inv["nvml"] == recorded["nvml"]  # driver 580.159.04, CUDA 13.0, NVML 13.580.159.04
    (gpu,), (rec,) = inv["gpus"], recorded["gpus"]
    varying = {"power_draw_w", "memory_used_bytes"}
    assert {k: v for k, v in gpu.items() if k not in varying} == {k: v for k, v in rec.items() if k not in varying}
    assert gpu["unavailable"] == {k: NOT_SUPPORTED for k in
                                  ("retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending", "nvlink_links")}
    samples = fixture_json("h200-x1")["gpus"][0]["samples"]
    assert gpu["power_draw_w"] in [mw / 1000 for mw in samples["power_mw"]]
    assert gpu["memory_used_bytes"] in samples["memory_used_bytes"]


def test_inventory_v100_pcie_says_what_it_cannot_report(card):
    card("v100-pcie-32g-x1")
    inv = inventory.gpu_inventory()
    assert inv["nvml"] == {"available": True, "reason": None, "driver": "410.48", "cuda_driver": "10.0",
                           "nvml_version": "10.410.48"}
    (gpu,) = inv["gpus"]
    assert gpu["name"] == "Tesla V100-PCIE-32GB" and gpu["compute_capability"] == "7.0"
    assert gpu["memory_total_bytes"] == 32480 * 2**20 and gpu["pci_bus_id"] == "00000000:18:00.0"
    assert (gpu["power_limit_w"], gpu["power_default_limit_w"], gpu["clock_sm_max_mhz"]) == (250.0, 250.0, 1380)
    assert (gpu["ecc_mode_current"], gpu["ecc_uncorrected_volatile"], gpu["persistence_mode"]) == (True, 0, False)
    why = gpu["unavailable"]
    assert why["nvlink_links"] == NOT_SUPPORTED  # the PCIe card has no NVLink
    # driver 410 predates nvmlDeviceGetRemappedRows: nvidia-ml-py finds no such function in the library
    assert why["remapped_rows_failure"] == "NVMLError_FunctionNotFound: Function Not Found"
    assert why["vbios"] == why["retired_pages_dbe"] == why["temperature_slowdown_c"] == UNKNOWN
    assert gpu["throttle_reasons"] is None


@pytest.mark.parametrize("name, n", [("v100-sxm2-32g-x1", 1), ("v100-sxm2-32g-x2-nvlink", 2)])
def test_inventory_v100_sxm2_six_nvlinks_no_row_remapping(card, name, n):
    card(name)
    inv = inventory.gpu_inventory()
    assert (inv["nvml"]["driver"], inv["nvml"]["cuda_driver"]) == ("535.129.03", "12.2")
    assert [g["name"] for g in inv["gpus"]] == ["Tesla V100-SXM2-32GB"] * n
    for gpu in inv["gpus"]:
        assert gpu["memory_total_bytes"] == 32768 * 2**20 and gpu["compute_capability"] == "7.0"
        assert gpu["nvlink_links"] == [{"link": i, "active": True} for i in range(6)]
        assert gpu["unavailable"]["remapped_rows_failure"] == NOT_SUPPORTED  # Ampere and newer only
        assert gpu["power_default_limit_w"] == 300.0 and gpu["clock_sm_max_mhz"] == 1530
    assert [g["pci_bus_id"] for g in inv["gpus"]] == ["00000000:1A:00.0", "00000000:1C:00.0"][:n]


def test_no_driver_is_reported_not_raised(card):
    card(None)  # no fixture: as nvidia-ml-py on a machine without libnvidia-ml
    inv = inventory.gpu_inventory()
    assert inv["nvml"]["reason"] == "NVMLError_LibraryNotFound: NVML Shared Library Not Found" and inv["gpus"] == []
    assert evidence.gpu_summary()["reason"] == "NVML: NVML Shared Library Not Found"


# ---------------------------------------------------------------- notebook 01's hardware checks (pure, on the replay)
def test_hardware_checks_h200_all_pass(card):
    card("h200-x1")
    found = statuses(hardware_checks.gpu_checks(inventory.gpu_inventory(), profiles.load("h200-x1")))
    assert found.pop("GPU 0 NVLink") == "skip"  # the profile expects none; NVML: Not Supported
    assert set(found.values()) == {"pass"}, found


def test_hardware_checks_v100_pcie_on_its_profile(card):
    card("v100-pcie-32g-x1")
    found = hardware_checks.gpu_checks(inventory.gpu_inventory(), profiles.load("v100-32g-x1"))
    s = statuses(found)
    assert s["NVIDIA driver"] == "warn"  # 410 against the profile's 580 branch
    assert s["GPU 0 model"] == s["GPU 0 VRAM"] == s["GPU 0 compute capability"] == "pass"
    assert s["GPU 0 power limit vs TDP"] == "pass"  # 250 W card, 250 W profile
    assert s["GPU 0 persistence mode"] == "warn"  # the dump: Persistence-M Off
    assert s["GPU 0 NVLink"] == s["GPU 0 clock throttle reasons"] == "skip"
    retire = next(c for c in found if c.name == "GPU 0 retired pages / remapped rows")
    assert retire.status == "skip" and "FunctionNotFound" in retire.observed


def test_hardware_checks_pcie_card_on_the_nvlink_profile_fails(card):
    card("v100-pcie-32g-x1")
    s = statuses(hardware_checks.gpu_checks(inventory.gpu_inventory(), profiles.load("v100-32g-x2-nvlink")))
    assert s["GPU count"] == "fail" and s["GPU 0 model"] == "fail"  # one PCIe card where two SXM2 are expected
    assert s["GPU 0 NVLink"] == "fail"


def test_hardware_checks_two_v100_sxm2_with_nvlink(card):
    card("v100-sxm2-32g-x2-nvlink")
    found = hardware_checks.gpu_checks(inventory.gpu_inventory(), profiles.load("v100-32g-x2-nvlink"))
    s = statuses(found)
    assert s["GPU count"] == "pass" and s["NVIDIA driver"] == "warn"  # 535 against 580
    for i in (0, 1):
        assert s[f"GPU {i} NVLink"] == s[f"GPU {i} power limit vs TDP"] == s[f"GPU {i} ECC mode"] == "pass"
        assert s[f"GPU {i} temperature"] == s[f"GPU {i} display attached"] == "pass"
    assert next(c for c in found if c.name == "GPU 1 NVLink").observed == "6 of 6 links active"


# ---------------------------------------------------------------- lab.measure.gpu_links
def _survey(nvml: dict, topo_text: str | None) -> dict:
    """What gpu_links.survey builds, without running nvidia-smi or PyTorch (a unit test starts no process)."""
    topo = {"available": True, **gpu_links.parse_topo(topo_text)} if topo_text else {"available": False}
    copy = {"measured": False, "reason": "not measured in a unit test"}
    return {"nvml": {k: nvml[k] for k in ("available", "reason")}, "gpus": nvml["gpus"], "topo": topo,
            "copy": copy, "pairs": [gpu_links.classify(p, nvml["gpus"], topo, copy) for p in nvml["pairs"]]}


def test_gpu_links_two_v100_sxm2_over_nvlink(card):
    card("v100-sxm2-32g-x2-nvlink")
    nvml = gpu_links.nvml_pairs()
    assert nvml["available"] and [g["bus_id"] for g in nvml["gpus"]] == ["00000000:1A:00.0", "00000000:1C:00.0"]
    links = nvml["gpus"][0]["nvlink_links"]
    assert len(links) == 6 and all(l["active"] and l["version"] == 2 for l in links)
    assert [l["remote_bus_id"] for l in links[:2]] == ["00000000:1C:00.0"] * 2 and links[0]["remote_type"] == "GPU"
    assert links[2]["remote_bus_id"] is None  # far end not published: the lab keeps None
    (pair,) = nvml["pairs"]
    assert (pair["p2p"]["write"], pair["p2p"]["nvlink"], pair["p2p"]["atomics"]) == (True, True, True)
    assert pair["common_ancestor"] is None and pair["common_ancestor_why"] == UNKNOWN
    survey = _survey(nvml, fixture_json("v100-sxm2-32g-x2-nvlink")["topo_m"])
    assert survey["topo"]["matrix"]["GPU0"]["GPU1"] == "NV2"
    (p,) = survey["pairs"]
    assert (p["kind"], p["evidence"]) == ("nvlink", "NVML P2P status over NVLink: OK")
    found = statuses(gpu_links.link_checks(survey, profiles.load("v100-32g-x2-nvlink"), inventory.gpu_inventory()))
    assert found["GPU 0-1 link"] == "pass" and found["GPU 0-1 copy bandwidth"] == "skip"


def test_gpu_links_p2p_read_is_ok_over_nvlink(card):
    """nvidia-ml-py defines NVML_P2P_CAPS_INDEX_READ = (0,), a tuple: the read query failed on every real pair
    (ctypes.ArgumentError) and the peer-to-peer check was skipped until gpu_links passed an int."""
    card("v100-sxm2-32g-x2-nvlink")
    nvml = gpu_links.nvml_pairs()
    assert nvml["pairs"][0]["p2p"]["read"] is True, nvml["pairs"][0]["p2p"].get("read_why")
    survey = _survey(nvml, fixture_json("v100-sxm2-32g-x2-nvlink")["topo_m"])
    assert statuses(gpu_links.link_checks(survey, profiles.load("v100-32g-x2-nvlink")))["GPU 0-1 peer-to-peer"] == "pass"


def test_gpu_links_line_rate_counts_the_pairs_links_only(card):
    """Two of a V100 SXM2's six links join this pair (NV2): 2 x 25 GB/s, not 6 x 25."""
    card("v100-sxm2-32g-x2-nvlink")
    (pair,) = _survey(gpu_links.nvml_pairs(), None)["pairs"]
    assert gpu_links.link_line_rate_gb_s(pair)[0] == 50


def test_gpu_links_h200_has_no_nvlink(card):
    card("h200-x1")
    nvml = gpu_links.nvml_pairs()
    recorded = json.loads((H200_RUN / "records" / "01_hardware.json").read_text())["gpu_links"]
    assert nvml["gpus"] == recorded["gpus"] and nvml["pairs"] == [] == recorded["pairs"]


# ---------------------------------------------------------------- lab.core.evidence.gpu_summary and plan mode
@pytest.mark.parametrize("name, gpus, driver, cuda", [
    ("h200-x1", [("NVIDIA H200", 150754820096, "9.0")], "580.159.04", "13.0"),
    ("v100-pcie-32g-x1", [("Tesla V100-PCIE-32GB", 32480 * 2**20, "7.0")], "410.48", "10.0"),
    ("v100-sxm2-32g-x1", [("Tesla V100-SXM2-32GB", 32768 * 2**20, "7.0")], "535.129.03", "12.2"),
    ("v100-sxm2-32g-x2-nvlink", [("Tesla V100-SXM2-32GB", 32768 * 2**20, "7.0")] * 2, "535.129.03", "12.2"),
])
def test_gpu_summary(card, name, gpus, driver, cuda):
    card(name)
    summary = evidence.gpu_summary()
    assert summary == {"gpus": [{"index": i, "name": n, "memory_total_bytes": m, "compute_capability": cc}
                                for i, (n, m, cc) in enumerate(gpus)],
                       "driver": driver, "cuda_driver": cuda, "reason": None}


def test_gpu_summary_matches_the_h200_manifest_and_plan_mode_sees_the_card(card):
    card("h200-x1")
    manifest = json.loads((H200_RUN / "manifest.json").read_text())
    summary = evidence.gpu_summary()
    assert (summary["gpus"], summary["driver"], summary["cuda_driver"]) == \
        (manifest["gpus"], manifest["driver"], manifest["cuda_driver"])
    assert planmode.reason(profiles.load("h200-x1")) is None  # the profile's card is here: measure
    assert planmode.reason(profiles.load("v100-32g-x1")) == planmode.NOT_HERE


def test_plan_mode_two_v100s(card):
    card("v100-sxm2-32g-x2-nvlink")
    assert planmode.matching_gpus(profiles.load("v100-32g-x2-nvlink")) == 2
    assert planmode.reason(profiles.load("v100-32g-x2-nvlink")) is None


# ---------------------------------------------------------------- lab.measure.gpumon.Sampler
# SAMPLER WINDOW SHAPE: written against gpumon's new window fields (mean_power_w = the sum over GPUs as a float,
# mean_power_w_per_gpu the list; peak_vram_mib the total, peak_vram_mib_per_gpu the list). Adjust here only.
@pytest.mark.parametrize("name", FIXTURES)
def test_sampler_window_on_replayed_cards(card, name):
    card(name)
    data = fixture_json(name)
    n = len(data["gpus"])
    sampler = gpumon.Sampler(interval_s=0.05).start()
    t0 = sampler.mark()
    time.sleep(0.5)
    t1 = sampler.mark()
    sampler.stop()
    w = sampler.window(t0, t1, output_tokens=100)
    assert w["gpu_not_measured"] is None and w["gpu_names"] == [g["name"] for g in data["gpus"]]
    energies = [s.energy_mj for s in sampler.samples]
    assert all(len(e) == n for e in energies)
    assert all(b >= a for e0, e1 in zip(energies, energies[1:]) for a, b in zip(e0, e1))  # the counter only grows
    per_gpu_power, per_gpu_vram = w["mean_power_w_per_gpu"], w["peak_vram_mib_per_gpu"]
    assert len(per_gpu_power) == len(per_gpu_vram) == n
    assert isinstance(w["mean_power_w"], float) and w["mean_power_w"] == pytest.approx(sum(per_gpu_power))
    assert max(per_gpu_vram) <= w["peak_vram_mib"] <= sum(per_gpu_vram) + 1e-6
    for gpu, watts, mib in zip(data["gpus"], per_gpu_power, per_gpu_vram):
        series = gpu["samples"]
        assert min(series["power_mw"]) / 1000 <= watts <= max(series["power_mw"]) / 1000
        assert mib in [b / 2**20 for b in series["memory_used_bytes"]]
    assert w["energy_how"] == "NVML total-energy counter difference" and w["energy_j"] > 0
    # the counter integrates the same power the samples read: joules / seconds is the mean power, within what
    # 0.05 s sampling of 0.1 s power steps can miss
    assert w["energy_j"] / w["seconds"] == pytest.approx(w["mean_power_w"], rel=0.35)
    assert w["joules_per_token"] == pytest.approx(w["energy_j"] / 100)
