"""Notebook 01's page (hardware checks): every check put together, the tables, the chart, the summary,
the 01_hardware record (`record`) and its closing text (`what_this_means`), built from lab.measure.inventory
(what the box has), lab.measure.copy_bandwidth (how fast its memory is), lab.measure.hardware_checks (whether it is
healthy for the profile), lab.measure.gpu_links (how its GPUs are joined) and lab.measure.psu_sizing (the power
supply it needs). The notebook's steps (`take_inventory(s)`, `survey_gpu_links(s)`, `measure_bandwidth(s)`,
`size_psu(s, inv)`, and `start`, `answer`, `show` from lab.pages.session) are here too: the notebook imports this
page and nothing else from lab. Each step keeps what it measured in the session (`s.results`: inventory,
gpu_links, bandwidth, power_supply); `record(s)` builds the record from those and the checks they give (`check_all`).
"""
from __future__ import annotations

from lab.core import checks, evidence, planmode
from lab.core.checks import Check, worst
from lab.core.profiles import Profile
from lab.core.session import Session
from lab.measure import copy_bandwidth, gpu_links, hardware_checks, inventory, psu_sizing
from lab.measure.hardware_checks import gib
from lab.pages import session
from lab.pages.session import answer, checks_table, keep, show, start  # noqa: F401  (what every notebook calls, through its page)
from lab.predict import profile_speed

NAME = "01_hardware"


# ---------------------------------------------------------------- the notebook's steps
def take_inventory(s: Session) -> dict:
    """What this box has: NVML's GPUs, the host, the model file and its disk (lab.measure.inventory.collect)."""
    return keep(s, "inventory", inventory.collect(s.profile))


def survey_gpu_links(s: Session) -> dict:
    """How this box's GPUs are joined, pair by pair: peer-to-peer, NVLink or the PCIe path, and a copy from each GPU
    to the other timed (lab.measure.gpu_links.survey; no pair with one GPU or none)."""
    return keep(s, "gpu_links", gpu_links.survey())


def pair_table(links: dict):
    """One row per GPU pair (a DataFrame), or one row saying why there is none."""
    return gpu_links.pair_table(links)


def measure_bandwidth(s: Session) -> dict:
    """Copy bandwidth, read + write counted: on the GPU when there is one, else host RAM (lab.measure.copy_bandwidth;
    raw samples, mean and sd)."""
    return keep(s, "bandwidth", copy_bandwidth.measure())



def size_psu(s: Session, inv: dict) -> dict:
    """The power supply this box needs, with the arithmetic (lab.measure.psu_sizing.advice)."""
    return keep(s, "power_supply", psu_sizing.advice(inv, s.profile))


def psu_table(psu: dict):
    """The PSU arithmetic as rows (a DataFrame)."""
    return psu_sizing.table(psu)


def check_all(inv: dict, bw: dict | None, profile: Profile, links: dict | None = None) -> list[Check]:
    """Every check of notebook 01: GPUs, host, PSU advice, (when measured) bandwidth and (when surveyed,
    lab.measure.gpu_links) the links between the GPUs."""
    found = (hardware_checks.gpu_checks(inv, profile) + hardware_checks.host_checks(inv, profile)
             + [psu_sizing.check(psu_sizing.advice(inv, profile))])
    if bw is not None:
        found.append(hardware_checks.check_bandwidth(bw, profile))
    if links is not None:
        found += gpu_links.link_checks(links, profile, inv)
    why = planmode.reason(profile, [g.get("name") for g in inv.get("gpus") or []])
    # plan mode: this box is not the profile's (or the user asked for no measurement): every check is listed with
    # what it expects on the profile's box, status not-run; nothing of this machine is held against the profile
    return planmode.not_run(found, why) if why else found


def checks_chart(found: list[Check], profile: Profile):
    return checks.chart(found, f"Hardware checks: {profile.name}")


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
            ("RAM total / available", f"{gib(h.get('ram_bytes'))} / {gib(h.get('ram_available_bytes'))}"),
            ("OS", h.get("os")), ("NVIDIA driver / CUDA", f"{nv.get('driver')} / {nv.get('cuda_driver')}"),
            ("NVML", "available" if nv["available"] else f"unavailable: {nv.get('reason')}"),
            ("model file", f"{mf.get('spec')}: {gib(mf.get('size_bytes'))} ({mf.get('how')})"),
            ("free disk there", f"{gib(mf.get('disk_free_bytes'))} at {mf.get('disk_path')}")]
    return pd.DataFrame(rows, columns=["field", "value"])


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


def _ceiling(profile: Profile | None, bw: dict) -> tuple[float | None, float | None]:
    """(tok/s, bytes read per token): the profile's one decode ceiling (lab.predict.profile_speed.roofline_for, the
    figure `lab plan` shows) at this measured bandwidth; (None, None) without a profile or when an input is unknown."""
    if profile is None or not bw.get("gb_s"):
        return None, None
    rl = profile_speed.roofline_for(profile, {"bandwidth": bw})
    return rl["decode_ceiling_tok_s"], rl["bytes_per_token"]


def summary(inv: dict, bw: dict, found: list[Check], psu: dict, profile: Profile | None = None) -> dict:
    """The key results of notebook 01, for the record's `summary` and the report."""
    model_bytes = inv["model_file"].get("size_bytes")
    ceiling, read = _ceiling(profile, bw)
    return {"verdict": worst(found),
            "checks": {s: sum(c.status == s for c in found) for s in ("pass", "warn", "fail", "skip", "not-run")},
            "gpus_seen": len(inv["gpus"]), "gpu_names": [g.get("name") for g in inv["gpus"]],
            "nvml": "available" if inv["nvml"]["available"] else inv["nvml"].get("reason"),
            "driver": inv["nvml"].get("driver"), "cpu": inv["host"].get("cpu_model"),
            "ram_gib": round(inv["host"]["ram_bytes"] / 2**30, 1) if inv["host"].get("ram_bytes") else None,
            "bandwidth_kind": bw["kind"], "bandwidth_gb_s": round(bw["gb_s"], 2),
            "bandwidth_sd": round(bw["sd"], 2) if bw.get("sd") is not None else None,
            "model_file_bytes": model_bytes, "model_file_how": inv["model_file"].get("how"),
            # the one ceiling (lab/data/calibration.yaml read_per_token), at the bandwidth measured here
            "decode_ceiling_tok_s": ceiling, "bytes_read_per_token": read,
            "disk_free_gib": round(inv["model_file"]["disk_free_bytes"] / 2**30, 1),
            "psu_recommended_w": psu["recommended_w"]}


def build_record(profile: Profile, inv: dict, bw: dict, links: dict, psu: dict, found: list[Check]) -> dict:
    """The 01_hardware record: summary, checks, the tables and charts shown, the raw inventory, bandwidth samples,
    GPU-pair survey and PSU arithmetic (what this notebook can see of the server, `server_scope`, the session adds)."""
    plan = planmode.reason(profile, [g.get("name") for g in inv.get("gpus") or []])
    summ = summary(inv, bw, found, psu, profile)
    if plan:  # this machine says nothing about the profile's box: its values stay in the record's inventory only
        summ = {"verdict": summ["verdict"], "checks": summ["checks"], "plan_mode": plan,
                "expected_hardware": expected_hardware(profile), "psu_recommended_w": summ["psu_recommended_w"],
                "decode_ceiling_tok_s": None}
    return {
        "title": "Hardware checks",
        "summary": summ,
        "checks": [c.to_dict() for c in found],
        "tables": [evidence.table_entry("GPUs (NVML)", gpu_table(inv)),
                   evidence.table_entry("Host and disk", host_table(inv)),
                   evidence.table_entry("GPU pairs: link, peer-to-peer, copy", gpu_links.pair_table(links)),
                   evidence.table_entry("PSU arithmetic", psu["rows"])],
        "charts": [evidence.chart_entry("Checks by status", checks_chart(found, profile)),
                   evidence.chart_entry("Copy bandwidth samples", bandwidth_chart(bw, profile))],
        "inventory": inv,
        "bandwidth": bw,
        "gpu_links": links,
        "psu": psu,
    }


def record(s: Session):
    """Write records/01_hardware.json with its closing text, built (`build_record`) from what the steps kept in
    `s.results` and the checks they give (`check_all`, as the notebook shows them); its path."""
    inv, bw, links = (s.results.get(k) for k in ("inventory", "bandwidth", "gpu_links"))
    found = check_all(inv, bw, s.profile, links)
    return s.record(NAME, build_record(s.profile, inv, bw, links, s.results.get("power_supply"), found),
                    closing=closing_text)


def what_this_means(s: Session):
    """The closing text as the record keeps it (written by `record`), as Markdown for the notebook's last cell."""
    return session.closing(s, NAME)


def closing_text(record: dict) -> str:
    """Markdown built only from the written record: the box, then its GPU pairs."""
    if record["summary"].get("plan_mode"):  # this machine's GPU pairs say nothing about the profile's box
        return _plan_text(record)
    pairs = gpu_links.pairs_text(record)
    return _box_text(record) + (f"\n{pairs}" if pairs else "")


def expected_hardware(profile: Profile) -> str:
    """The profile's box in one line: what its checks would be made against."""
    if profile.gpu_count == 0:
        return f"CPU only, ≥ {profile.host_ram_gib_min or '?'} GiB host RAM"
    parts = [f"{profile.gpu_count} × GPU matching /{profile.gpu_name_pattern}/",
             f"{profile.gpu_vram_mib} MiB VRAM each" if profile.gpu_vram_mib else None,
             f"compute capability {profile.gpu_compute_capability}" if profile.gpu_compute_capability else None,
             f"{profile.gpu_memory_bandwidth_gb_s} GB/s" if profile.gpu_memory_bandwidth_gb_s else None,
             f"{profile.gpu_tdp_w} W each" if profile.gpu_tdp_w else None,
             f"≥ {profile.host_ram_gib_min} GiB host RAM" if profile.host_ram_gib_min else None]
    return ", ".join(p for p in parts if p)


def _plan_text(record: dict) -> str:
    s = record["summary"]
    lines = [f"**Plan mode** — {s['plan_mode']}.", f"- The profile's box: {s['expected_hardware']}.",
             f"- {s['checks']['not-run']} checks would run there (status not-run in the table above: each row says "
             "what it expects); none of this machine's values is held against the profile.",
             f"- PSU for the profile's box: {record['psu']['arithmetic']}."]
    return "\n".join(lines)


def _box_text(record: dict) -> str:
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
        lines.append(f"- Single-stream decode cannot beat bandwidth ÷ bytes read per token = {bw['gb_s']:.1f} GB/s ÷ "
                     f"{s['bytes_read_per_token'] / 1e9:.2f} GB ≈ **{s['decode_ceiling_tok_s']:.0f} tok/s** on this "
                     "memory (the weights one token reads, less the token embedding kept in host memory, + KV and "
                     "state: `lab plan`'s definition; `lab plan` predicts the speed). Notebook 06 measures the real figure.")
    lines.append(f"- PSU: {record['psu']['arithmetic']}.")
    return "\n".join(lines)
