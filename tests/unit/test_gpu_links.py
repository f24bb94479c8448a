"""lab.measure.gpu_links: topo parsing, link classification and the link checks (pure), and a clean no-GPU survey."""
import pytest

from lab.core import profiles
from lab.measure import gpu_links

TOPO_NVSWITCH = ("\x1b[4m\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
                 "GPU0\t X \tNV18\tPXB\t0-47\t0\t\tN/A\n"
                 "GPU1\tNV18\t X \tSYS\t0-47\t0\t\tN/A\n"
                 "NIC0\tPXB\tSYS\t X \n\nLegend:\n\n  X    = Self\n")
TOPO_PCIE = ("        GPU0    GPU1    CPU Affinity    NUMA Affinity\n"
             "GPU0     X      PHB     0-11            N/A\n"
             "GPU1    PHB      X      0-11            N/A\n")


def test_parse_topo_nvswitch_and_pcie():
    t = gpu_links.parse_topo(TOPO_NVSWITCH)
    assert t["devices"] == ["GPU0", "GPU1", "NIC0"]
    assert t["matrix"]["GPU0"]["GPU1"] == "NV18" and t["matrix"]["GPU1"]["NIC0"] == "SYS"
    assert t["affinity"]["GPU1"] == {"cpu": "0-47", "numa": "0"}
    assert gpu_links.parse_topo(TOPO_PCIE)["matrix"]["GPU1"]["GPU0"] == "PHB"
    assert gpu_links.parse_topo("No devices were found") == {"devices": [], "matrix": {}, "affinity": {}}


def _gpus(links_a=None, bus_b="00000000:1B:00.0"):
    return [{"index": 0, "bus_id": "00000000:1A:00.0", "nvlink_links": links_a},
            {"index": 1, "bus_id": bus_b, "nvlink_links": None}]


def test_pair_kind_prefers_nvml_then_remote_ends_then_topo():
    pair = {"a": 0, "b": 1, "p2p": {"read": True, "write": True, "nvlink": False}, "common_ancestor": "PHB (PCIe host bridge)"}
    assert gpu_links.pair_kind({**pair, "p2p": {"nvlink": True}}, _gpus(), None)[0] == "nvlink"
    direct = [{"link": i, "active": True, "version": 2, "remote_bus_id": "00000000:1b:00.0", "remote_type": "GPU"}
              for i in range(6)]
    kind, why = gpu_links.pair_kind(pair, _gpus(direct), None)
    assert kind == "nvlink" and "6 active NVLink link(s)" in why
    assert gpu_links.pair_kind(pair, _gpus(), gpu_links.parse_topo(TOPO_NVSWITCH)) == ("nvlink", "nvidia-smi topo -m: NV18")
    kind, why = gpu_links.pair_kind(pair, _gpus(), gpu_links.parse_topo(TOPO_PCIE))
    assert kind == "pcie" and "PHB" in why


def test_line_rate_nvlink_and_pcie():
    links = [{"link": i, "active": True, "version": 2} for i in range(6)]
    assert gpu_links.link_line_rate_gb_s({"kind": "nvlink", "nvlink_links_a": links})[0] == 150
    rate, how = gpu_links.link_line_rate_gb_s({"kind": "pcie"}, {"pcie_gen_max": 3, "pcie_width_max": 16})
    assert rate == pytest.approx(15.76) and how == "PCIe gen3 x16"


def _survey(kind="pcie", copies=None, p2p=True):
    return {"nvml": {"available": True, "reason": None}, "gpus": _gpus(),
            "pairs": [{"a": 0, "b": 1, "kind": kind, "evidence": "test", "p2p": {"read": p2p, "write": p2p},
                       "nvlink_links_a": None, "copies": copies or []}]}


def test_checks_nvlink_expected_but_pcie_fails_with_the_sxm2_hint():
    v100 = profiles.load("v100-32g-x2-nvlink")
    found = {c.name: c for c in gpu_links.link_checks(_survey("pcie"), v100)}
    link = found["GPU 0-1 link"]
    assert link.status == "fail" and "SXM2" in link.fix and "no NVLink connector" in link.fix
    assert "V100 datasheet" in link.source
    assert found["GPU 0-1 copy bandwidth"].status == "skip"


def test_checks_pass_on_nvlink_and_warn_without_p2p_or_on_a_slow_copy():
    h200 = profiles.load("h200-x2")
    copies = [{"src": 0, "dst": 1, "gb_s": 3.0}, {"src": 1, "dst": 0, "gb_s": 3.1}]
    inv = {"gpus": [{"index": 0, "pcie_gen_max": 5, "pcie_width_max": 16}]}
    found = {c.name: c for c in gpu_links.link_checks(_survey("nvlink", copies, p2p=False), h200)}
    assert found["GPU 0-1 link"].status == "pass"
    assert found["GPU 0-1 peer-to-peer"].status == "warn"
    assert "NCCL_P2P_DISABLE" in found["GPU 0-1 peer-to-peer"].fix
    pcie = {c.name: c for c in gpu_links.link_checks(_survey("pcie", copies), profiles.load("h200-x1"), inv)}
    assert pcie["GPU pair link"].status == "skip"  # a one-GPU profile has no pair to judge
    slow = {c.name: c for c in gpu_links.link_checks(_survey("pcie", copies), h200.model_copy(update={"nvlink_expected": False}), inv)}
    assert slow["GPU 0-1 link"].status == "pass"
    assert slow["GPU 0-1 copy bandwidth"].status == "warn"  # 3 GB/s of a 63 GB/s gen5 x16 link


def test_fewer_gpus_than_the_profile_fails_and_cpu_profiles_skip():
    none = {"nvml": {"available": False, "reason": "no driver"}, "gpus": [], "pairs": []}
    assert gpu_links.link_checks(none, profiles.load("h200-x2"))[0].status == "fail"
    assert gpu_links.link_checks(none, profiles.load("cpu-default"))[0].status == "skip"


def test_survey_on_this_machine_never_raises():
    s = gpu_links.survey()
    assert set(s) == {"nvml", "gpus", "topo", "copy", "pairs"}
    if not s["gpus"]:
        assert s["pairs"] == [] and s["copy"]["measured"] is False
        assert gpu_links.pair_table(s).iloc[0]["pair"] == "none"


def test_pairs_text_reads_only_the_record():
    rec = {"gpu_links": {"gpus": [{}, {}], "pairs": [{"a": 0, "b": 1, "kind": "nvlink", "evidence": "nvidia-smi topo -m: NV18",
                                                      "copies": [{"src": 0, "dst": 1, "gb_s": 371.4}]}]}}
    text = gpu_links.pairs_text(rec)
    assert "GPU 0–1: **nvlink** (nvidia-smi topo -m: NV18); copy 0→1 371 GB/s" in text
    assert gpu_links.pairs_text({}) == ""
