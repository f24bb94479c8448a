"""How big a power supply the box needs: advice from summed GPU TDP, since software cannot read the PSU."""
from __future__ import annotations

from lab.core.checks import Check
from lab.core.profiles import Profile
from lab.measure.hardware_checks import V100_BRIEF

# PSU sizing rule of thumb: keep the sustained load at or below 80 % of the PSU's rating.
LOAD_FRACTION = 0.8
CPU_BOARD_W = 150  # a desktop CPU under inference load + board, RAM, disks and fans
SIZES_W = (450, 550, 650, 750, 850, 1000, 1200, 1300, 1600, 2000, 2400, 3000)


def advice(inv: dict, profile: Profile, cpu_board_w: float = CPU_BOARD_W,
           load_fraction: float = LOAD_FRACTION) -> dict:
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
    size = next((s for s in SIZES_W if s >= minimum), None)
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


def check(psu: dict) -> Check:
    """The PSU cannot be read by software: this check is advice, so it is 'skip' with the arithmetic."""
    return Check("PSU size (advice: software cannot read the PSU)", "skip", psu["arithmetic"],
                 f">= {psu['minimum_w']:.0f} W ({psu['recommended_w']} W class)",
                 "Read the rating on your PSU's label. Tesla PCIe cards (P40, P100, V100) take an 8-pin CPU "
                 "(EPS-12V) power plug, not a PCIe 8-pin: use the adapter their product brief names.",
                 f"{V100_BRIEF}; rule of thumb (80 % continuous load)")


def table(psu: dict):
    """The PSU arithmetic of `advice` as rows (a DataFrame)."""
    import pandas as pd

    return pd.DataFrame(psu["rows"], columns=["item", "watts", "how"])

