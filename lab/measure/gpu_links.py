"""How the GPUs of one box are joined: NVLink or PCIe, peer-to-peer access, and a measured GPU-to-GPU copy.

Three layers, like lab.measure.inventory / hardware_checks (which answer the per-GPU questions; this module only the pairs):

* `survey()` reads NVML for every pair of GPUs — P2P status (read, write, NVLink, atomics), the PCIe
  common ancestor, and per NVLink link its state, version and what sits at the other end — plus
  `nvidia-smi topo -m` (parsed by `parse_topo`), and times a copy from each GPU to the other with
  PyTorch when it is importable. Never raises: what could not be read is None with the reason.
* `pair_kind()` and `link_checks()` are pure: survey dict + profile -> `Check`s (unit-tested with fakes).
* `pair_table()` is the view for notebook 01.

NVLink between V100s needs SXM2 modules: the V100 PCIe card has no NVLink connector (NVIDIA V100 datasheet,
Tesla V100 PCIe product brief PB-08744-001), so a "two V100 PCIe + NVLink bridge" box talks over PCIe.
"""
from __future__ import annotations

import itertools
import re
import shutil
import statistics
import subprocess
import time

from lab.core import facts
from lab.core.checks import Check
from lab.core.profiles import Profile
from lab.measure.inventory import nvml_call, why_failed

NVML_SOURCE = "NVML API reference (docs.nvidia.com/deploy/nvml-api): nvmlDeviceGetP2PStatus, nvmlDeviceGetNvLink*"
TOPO_SOURCE = "nvidia-smi topo -m (its legend: NV# = bonded NVLinks; PIX/PXB/PHB/NODE/SYS = PCIe paths)"
P2P_CAPS = ("read", "write", "nvlink", "atomics")
# NVML's common-ancestor levels in the words of nvidia-smi's topo legend
ANCESTOR = {0: "same board (INTERNAL)", 10: "PIX (one PCIe bridge)", 20: "PXB (several PCIe bridges)",
            30: "PHB (PCIe host bridge)", 40: "NODE (host bridges within a NUMA node)",
            50: "SYS (across NUMA nodes)"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


# ================================================================ data
def link_figures() -> dict[str, dict]:
    """lab/data/gpu_links.yaml's links by id (bandwidth per direction, assumed latency, source)."""
    return {e["id"]: e for e in facts.load("gpu_links", "links")["links"]}


def _rates(kind: str) -> dict:
    return next(e for e in facts.load("gpu_links", "line_rates")["line_rates"] if e["id"] == kind)


def link_line_rate_gb_s(pair: dict, gpu: dict | None = None) -> tuple[float | None, str]:
    """The line rate (GB/s, one direction) of the link a pair's copy goes over, and how it was worked out.
    NVLink: the active links of GPU a that end at GPU b (`nvlink_links_to_b`; all of a's active links only where NVML
    names no far end) x the per-link rate of their version: a V100 SXM2 has six links, of which one or two join a
    given pair. PCIe: the narrower of the pair's maximum generation x width (idle GPUs drop their current
    generation, so the maximum is the link's)."""
    if pair.get("kind") == "nvlink":
        to_b = pair.get("nvlink_links_to_b")
        links = to_b if to_b is not None else [l for l in pair.get("nvlink_links_a") or [] if l.get("active")]
        versions = {l.get("version") for l in links if l.get("version")}
        if links and len(versions) == 1:
            v = versions.pop()
            rate = _rates("nvlink")["gb_s_per_link_per_direction"].get(v)
            if rate:
                name = _rates("nvlink")["versions"].get(v, v)
                whose = "to GPU b" if to_b is not None else "of GPU a, far ends not reported"
                return rate * len(links), f"{len(links)} NVLink {name} links ({whose}) x {rate} GB/s"
        return None, "NVLink links or version not reported"
    gen, width = (gpu or {}).get("pcie_gen_max"), (gpu or {}).get("pcie_width_max")
    rate = _rates("pcie")["gb_s_per_lane_per_direction"].get(gen) if gen else None
    if rate and width:
        return rate * width, f"PCIe gen{gen} x{width}"
    return None, "PCIe generation/width not reported"


# ================================================================ reading (side effects)
def _bus_id(pci) -> str | None:
    bus = getattr(pci, "busId", None)
    return (bus.decode() if isinstance(bus, bytes) else bus) if bus else None


def nvlink_detail(nv, handle) -> tuple[list[dict] | None, str | None]:
    """Per NVLink link of one GPU: active, version (NVML code), remote bus id and remote device type."""
    links = []
    for link in range(nv.NVML_NVLINK_MAX_LINKS):
        state, why = nvml_call(nv.nvmlDeviceGetNvLinkState, handle, link)
        if state is None:
            return (links, None) if links else (None, why)
        remote, _ = nvml_call(nv.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
        rtype, _ = nvml_call(nv.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link)
        version, _ = nvml_call(nv.nvmlDeviceGetNvLinkVersion, handle, link)
        links.append({"link": link, "active": bool(state), "version": version, "remote_bus_id": _bus_id(remote),
                      "remote_type": {0: "GPU", 1: "IBMNPU", 2: "NVSwitch"}.get(rtype, rtype)})
    return links, None


def _p2p(nv, h1, h2) -> dict:
    out = {}
    for cap in P2P_CAPS:
        index = getattr(nv, f"NVML_P2P_CAPS_INDEX_{cap.upper()}")
        # nvidia-ml-py (13.615.71 included) defines `NVML_P2P_CAPS_INDEX_READ = 0,`: a one-element tuple, which
        # ctypes cannot pass ("Don't know how to convert parameter 3"), so the read capability was never asked
        index = index[0] if isinstance(index, tuple) else index
        status, why = nvml_call(nv.nvmlDeviceGetP2PStatus, h1, h2, index)
        out[cap] = None if status is None else status == nv.NVML_P2P_STATUS_OK
        if status not in (None, nv.NVML_P2P_STATUS_OK):
            out[f"{cap}_status"] = status
        if why:
            out[f"{cap}_why"] = why
    return out


def nvml_pairs() -> dict:
    """{"available", "reason", "gpus": [{index, name, bus_id, nvlink_links, nvlink_why}], "pairs": [...]}."""
    try:
        import pynvml as nv
        nv.nvmlInit()
    except Exception as exc:
        return {"available": False, "reason": why_failed(exc), "gpus": [], "pairs": []}
    try:
        count, why = nvml_call(nv.nvmlDeviceGetCount)
        handles, gpus = [], []
        for i in range(count or 0):
            h, _ = nvml_call(nv.nvmlDeviceGetHandleByIndex, i)
            handles.append(h)
            name, _ = nvml_call(nv.nvmlDeviceGetName, h)
            pci, _ = nvml_call(nv.nvmlDeviceGetPciInfo, h)
            links, lwhy = nvlink_detail(nv, h) if h is not None else (None, "no handle")
            gpus.append({"index": i, "name": name, "bus_id": _bus_id(pci), "nvlink_links": links, "nvlink_why": lwhy})
        pairs = []
        for a, b in itertools.combinations(range(len(gpus)), 2):
            anc, anc_why = nvml_call(nv.nvmlDeviceGetTopologyCommonAncestor, handles[a], handles[b])
            pairs.append({"a": a, "b": b, "p2p": _p2p(nv, handles[a], handles[b]),
                          "common_ancestor": ANCESTOR.get(anc, anc), "common_ancestor_why": anc_why})
        return {"available": True, "reason": why, "gpus": gpus, "pairs": pairs}
    finally:
        nvml_call(nv.nvmlShutdown)


def parse_topo(text: str) -> dict:
    """`nvidia-smi topo -m` → {"devices": ["GPU0", ...], "matrix": {"GPU0": {"GPU1": "NV18"}}, "affinity": {...}}.
    Only GPU and NIC columns are kept; ANSI underlining (newer drivers) is stripped."""
    lines = [_ANSI.sub("", ln).rstrip() for ln in text.splitlines()]
    header = next((ln for ln in lines if re.match(r"^\s+GPU0\b", ln)), None)
    if header is None:
        return {"devices": [], "matrix": {}, "affinity": {}}
    cols = re.split(r"\s{2,}|\t+", header.strip())
    devices = [c for c in cols if re.fullmatch(r"(GPU|NIC)\d+", c)]
    matrix, affinity = {}, {}
    for ln in lines:
        m = re.match(r"^(GPU\d+|NIC\d+)\s+(.*)$", ln)
        if not m:
            continue
        cells = re.split(r"\s+", m[2].strip())
        matrix[m[1]] = dict(zip(devices, cells[:len(devices)]))
        rest = cells[len(devices):]
        if m[1].startswith("GPU") and rest:
            affinity[m[1]] = {"cpu": rest[0], "numa": rest[1] if len(rest) > 1 else None}
    return {"devices": devices, "matrix": matrix, "affinity": affinity}


def nvidia_smi_topo(timeout_s: float = 30) -> dict:
    """Run and parse `nvidia-smi topo -m`; {"available": False, "reason"} when it cannot run."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {"available": False, "reason": "nvidia-smi not on PATH"}
    try:
        proc = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"available": False, "reason": why_failed(exc)}
    if proc.returncode != 0:
        return {"available": False, "reason": (proc.stderr or proc.stdout).strip()[-500:]}
    return {"available": True, "text": proc.stdout, **parse_topo(proc.stdout)}


def measure_peer_copy(size_mib: int = 256, repeats: int = 10, inner: int = 4) -> dict:
    """Time a copy from each GPU to each other one with PyTorch (one direction at a time; bytes counted once,
    unlike lab.measure.copy_bandwidth's device copy, which counts read + write). Keeps the raw samples."""
    try:
        import torch
    except ImportError as exc:
        return {"measured": False, "reason": f"PyTorch is not importable ({exc}): not measured"}
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return {"measured": False, "reason": f"PyTorch sees {n} CUDA GPU(s): a GPU-to-GPU copy needs 2"}
    nbytes = size_mib << 20
    rows = []
    for src, dst in itertools.permutations(range(torch.cuda.device_count()), 2):
        x = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{src}")
        y = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{dst}")
        y.copy_(x)  # warm-up: peer mappings and the copy engine's first use
        samples = []
        for _ in range(repeats):
            torch.cuda.synchronize(src), torch.cuda.synchronize(dst)
            t0 = time.perf_counter()
            for _ in range(inner):
                y.copy_(x, non_blocking=True)
            torch.cuda.synchronize(src), torch.cuda.synchronize(dst)
            samples.append(nbytes * inner / (time.perf_counter() - t0) / 1e9)
        rows.append({"src": src, "dst": dst, "gb_s": statistics.mean(samples),
                     "sd": statistics.stdev(samples) if len(samples) > 1 else None, "samples": samples,
                     "peer_access": torch.cuda.can_device_access_peer(src, dst)})
        del x, y
    return {"measured": True, "size_mib": size_mib, "repeats": repeats, "inner": inner,
            "method": "torch Tensor.copy_ between cuda:src and cuda:dst, timed with perf_counter around "
                      "synchronize; GB/s = bytes moved once / time", "torch": torch.__version__, "copies": rows}


def survey(copy_size_mib: int = 256) -> dict:
    """Everything notebook 01 shows about the links: NVML pairs, nvidia-smi topo, measured copies."""
    nvml = nvml_pairs()
    topo = nvidia_smi_topo() if len(nvml["gpus"]) > 1 else {"available": False, "reason": "fewer than 2 GPUs"}
    copy = measure_peer_copy(copy_size_mib) if len(nvml["gpus"]) > 1 else \
        {"measured": False, "reason": f"{len(nvml['gpus'])} GPU(s) seen by NVML: nothing to copy between"}
    out = {"nvml": {k: nvml[k] for k in ("available", "reason")}, "gpus": nvml["gpus"], "topo": topo, "copy": copy}
    out["pairs"] = [classify(p, nvml["gpus"], topo, copy) for p in nvml["pairs"]]
    return out


# ================================================================ judging (pure)
def pair_kind(pair: dict, gpus: list[dict], topo: dict | None) -> tuple[str, str]:
    """("nvlink" | "pcie" | "unknown", evidence): NVML's NVLink P2P status first, then links whose remote end
    is the other GPU, then the topo matrix's NV# cell; otherwise the PCIe path."""
    a, b = gpus[pair["a"]], gpus[pair["b"]]
    if pair.get("p2p", {}).get("nvlink"):
        return "nvlink", "NVML P2P status over NVLink: OK"
    direct = [l for l in a.get("nvlink_links") or [] if l["active"] and l.get("remote_bus_id")
              and b.get("bus_id") and l["remote_bus_id"].lower() == b["bus_id"].lower()]
    if direct:
        return "nvlink", f"{len(direct)} active NVLink link(s) from GPU {a['index']} end at GPU {b['index']}"
    cell = ((topo or {}).get("matrix") or {}).get(f"GPU{a['index']}", {}).get(f"GPU{b['index']}")
    if cell and cell.startswith("NV"):
        return "nvlink", f"nvidia-smi topo -m: {cell}"
    path = cell or pair.get("common_ancestor")
    if path:
        return "pcie", f"PCIe path {path}" + (f" (nvidia-smi topo -m: {cell})" if cell else " (NVML common ancestor)")
    return "unknown", "neither NVML nor nvidia-smi reported the path"


def _links_between(a: dict, b: dict) -> list[dict] | None:
    """GPU a's active NVLink links whose far end is GPU b; None when no link of a names its far end."""
    links = [l for l in a.get("nvlink_links") or [] if l.get("active")]
    if not b.get("bus_id") or not any(l.get("remote_bus_id") for l in links):
        return None
    return [l for l in links if (l.get("remote_bus_id") or "").lower() == b["bus_id"].lower()]


def classify(pair: dict, gpus: list[dict], topo: dict | None, copy: dict | None) -> dict:
    """A pair with its link kind, the NVLink details of both ends, its line rate and measured copies."""
    kind, evidence = pair_kind(pair, gpus, topo)
    a, b = gpus[pair["a"]], gpus[pair["b"]]
    out = {**pair, "kind": kind, "evidence": evidence,
           "nvlink_links_a": a.get("nvlink_links"), "nvlink_links_b": b.get("nvlink_links"),
           "nvlink_links_to_b": _links_between(a, b)}
    out["copies"] = [c for c in (copy or {}).get("copies", []) if {c["src"], c["dst"]} == {pair["a"], pair["b"]}]
    return out


def _expected_kind(profile: Profile) -> str:
    return "NVLink" if profile.nvlink_expected else "PCIe or NVLink (profile: nvlink_expected false)"


def link_checks(survey_: dict, profile: Profile, inventory: dict | None = None) -> list[Check]:
    """Per pair: the link against the profile's expectation, peer-to-peer access, and the measured copy
    against the link's line rate. `inventory` (lab.measure.inventory.collect) supplies PCIe generation/width."""
    src = f"profile {profile.name} ({'params/' + profile.name + '.yaml'})"
    if profile.gpu_count < 2:
        return [Check("GPU pair link", "skip", f"{len(survey_['gpus'])} GPU(s) seen", "-",
                      f"profile {profile.name} expects {profile.gpu_count} GPU: no pair to check", src)]
    if not survey_["pairs"]:
        seen = len(survey_["gpus"])
        return [Check("GPU pair link", "fail", f"{seen} GPU(s) seen"
                      + ("" if survey_["nvml"]["available"] else f" (NVML: {survey_['nvml']['reason']})"),
                      f"{profile.gpu_count} GPUs joined by {_expected_kind(profile)}",
                      "Fewer GPUs than the profile says: see 'GPU count' above for the usual causes.", src)]
    by_index = {g["index"]: g for g in (inventory or {}).get("gpus", [])}
    out = []
    for p in survey_["pairs"]:
        name = f"GPU {p['a']}-{p['b']}"
        out.append(_kind_check(name, p, profile, src))
        out.append(_p2p_check(name, p, profile))
        out.append(_copy_check(name, p, by_index.get(p["a"])))
    return out


def _kind_check(name: str, p: dict, profile: Profile, src: str) -> Check:
    observed = f"{p['kind']}: {p['evidence']}"
    if profile.nvlink_expected and p["kind"] != "nvlink":
        return Check(f"{name} link", "fail", observed, "NVLink",
                     "The profile expects NVLink between these GPUs and NVML/nvidia-smi show none. NVLink between "
                     "V100s needs SXM2 modules: the V100 PCIe card has no NVLink connector, so two PCIe V100s talk "
                     "over PCIe whatever bridge is fitted. Check `nvidia-smi nvlink -s`; without NVLink set "
                     "nvlink_expected: false (tensor parallelism then all-reduces over PCIe, see lab.predict.tp_model).",
                     "NVIDIA V100 datasheet (NVLink 300 GB/s on SXM2 only); Tesla V100 PCIe product brief "
                     f"PB-08744-001; {src}")
    return Check(f"{name} link", "pass", observed, _expected_kind(profile), "", f"{NVML_SOURCE}; {TOPO_SOURCE}")


def _p2p_check(name: str, p: dict, profile: Profile) -> Check:
    p2p = p.get("p2p") or {}
    observed = ", ".join(f"{k} {'OK' if v else ('?' if v is None else 'no')}" for k, v in p2p.items()
                         if k in P2P_CAPS)
    if p2p.get("read") and p2p.get("write"):
        return Check(f"{name} peer-to-peer", "pass", observed, "read and write OK", "", NVML_SOURCE)
    if p2p.get("read") is None:
        return Check(f"{name} peer-to-peer", "skip", p2p.get("read_why") or "not reported", "read and write OK", "",
                     NVML_SOURCE)
    fix = ("Without peer-to-peer, GPU-to-GPU traffic goes through host memory: llama.cpp's split modes still work "
           "(slower); vLLM's custom all-reduce needs peer access, so set nccl_p2p_disable: true (adds "
           "NCCL_P2P_DISABLE=1 and --disable-custom-all-reduce). On PCIe boards ACS or the IOMMU can route P2P "
           "through the root complex: ACS off in the BIOS and iommu=pt are the lasting fix.")
    if profile.engine == "vllm" and profile.nccl_p2p_disable:
        fix = "The profile already sets nccl_p2p_disable: vLLM will not rely on P2P."
    return Check(f"{name} peer-to-peer", "warn", observed, "read and write OK", fix,
                 f"{NVML_SOURCE}; NVIDIA/nccl #631; vllm-project/vllm #406")


def _copy_check(name: str, p: dict, gpu_a: dict | None) -> Check:
    rate, how = link_line_rate_gb_s(p, gpu_a)
    copies = p.get("copies") or []
    expected = f"≥ 50 % of the line rate ({rate:.1f} GB/s per direction: {how})" if rate else f"measured ({how})"
    if not copies:
        return Check(f"{name} copy bandwidth", "skip", "not measured (no PyTorch or fewer than 2 CUDA GPUs)",
                     expected, "", "lab.measure.gpu_links.measure_peer_copy")
    observed = "; ".join(f"{c['src']}→{c['dst']} {c['gb_s']:.1f} GB/s" for c in copies)
    if rate and min(c["gb_s"] for c in copies) < 0.5 * rate:
        return Check(f"{name} copy bandwidth", "warn", observed, expected,
                     "Well below the link's line rate: peer access off (copies staged through host memory), a "
                     "narrower or slower PCIe link than the card's maximum (riser, x8 slot, gen 3 board), or "
                     "another job on the link.", "lab/data/gpu_links.yaml line_rates")
    return Check(f"{name} copy bandwidth", "pass", observed, expected, "", "lab/data/gpu_links.yaml line_rates")


# ================================================================ view
def pair_table(survey_: dict):
    """One row per GPU pair (a DataFrame), or one row saying why there is none."""
    import pandas as pd

    if not survey_["pairs"]:
        why = survey_["nvml"].get("reason") if not survey_["nvml"]["available"] else \
            f"{len(survey_['gpus'])} GPU(s): no pair"
        return pd.DataFrame([{"pair": "none", "why": why or "no GPUs"}])
    rows = []
    for p in survey_["pairs"]:
        links = [l for l in p.get("nvlink_links_a") or [] if l["active"]]
        versions = sorted({l.get("version") for l in links if l.get("version")})
        names = _rates("nvlink")["versions"]
        copies = {f"copy {c['src']}→{c['dst']} GB/s": round(c["gb_s"], 1) for c in p.get("copies") or []}
        rows.append({"pair": f"GPU {p['a']} - GPU {p['b']}", "link": p["kind"], "evidence": p["evidence"],
                     "active NVLink links (GPU a)": len(links) if p.get("nvlink_links_a") is not None else None,
                     "NVLink version": ", ".join(names.get(v, str(v)) for v in versions) or None,
                     "remote end": ", ".join(sorted({str(l.get("remote_type")) for l in links})) or None,
                     "PCIe common ancestor": p.get("common_ancestor"),
                     "P2P read/write/NVLink": "/".join(str((p.get("p2p") or {}).get(k)) for k in ("read", "write", "nvlink")),
                     **copies})
    return pd.DataFrame(rows)


def pairs_text(record: dict) -> str:
    """Markdown lines about the GPU pairs, built only from notebook 01's record ("" when it has none); the second
    part of notebook 01's closing text (lab.pages.hardware.closing_text)."""
    links = record.get("gpu_links") or {}
    if not links.get("pairs"):
        n = len(links.get("gpus") or [])
        return f"- GPU pairs: none ({n} GPU seen), so nothing is split across cards on this box." if links else ""
    out = []
    for p in links["pairs"]:
        copies = ", ".join(f"{c['src']}→{c['dst']} {c['gb_s']:.0f} GB/s" for c in p.get("copies") or []) or "not measured"
        out.append(f"- GPU {p['a']}–{p['b']}: **{p['kind']}** ({p['evidence']}); copy {copies}. Splitting a model "
                   "over them: llama.cpp `-sm layer` barely uses the link; `-sm tensor` and vLLM tensor parallelism "
                   "all-reduce twice per layer over it (`.venv/bin/python -m lab multigpu` measures both).")
    return "\n".join(out)
