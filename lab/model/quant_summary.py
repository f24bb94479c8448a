"""The quant ladder summarised (notebook 03): one row per type with its size, quality and speed (`summarise`),
what to use by a rule stated once (`recommend`, for this model and the 27B class on the profile's card), and the
notebook's verdicts (`make_checks`) — pure over what lab.model.quant_ladder, quant_quality and quant_targets
measured and predicted. What notebook 03 shows of it is lab.measure.quantize_views.
"""
from __future__ import annotations

from lab.core.units import GIB, MIB
from lab.core import checks as lab_checks
from lab.core import facts
from lab.model.quant_formats import DATA
from lab.model.quant_ladder import Ladder, Reference, SizeCheck, Speed
from lab.model.quant_quality import XCHECK_KLD_ABS, XCHECK_KLD_REL, XCHECK_PPL_REL, XCHECK_TOP1_PP, Quality

# The shipped file against its own F16 copy: identical weights, but llama.cpp's quantized dot products
# quantize the activations to 8 bits (vec_dot_type Q8_1/Q8_0/Q8_K) where the F16 path keeps 16, which
# alone gave KLD ≈ 0.003 here. Above 0.01 the reference would not be the shipped model.
SHIPPED_KLD_MAX = 0.01


def summarise(ladder: Ladder, sizes: SizeCheck, quality: Quality, speed: Speed) -> list[dict]:
    """One row per type: size, quality against F16, speed — the ladder table and the chart's data."""
    q = {r["type"]: r for r in quality.rows}
    s = {r["type"]: r for r in speed.rows}
    z = {r["type"]: r for r in sizes.rows}
    ref_speed = s.get("F16 (reference)", {})
    rows = [{"type": "F16 (reference)", "file_mib": ladder.reference.bytes / MIB, "effective_bpw": 16.0,
             "kld": 0.0, "top1_pct": 100.0, "ppl": quality.base["ppl"], "ppl_ratio": 1.0,
             "pp_tok_s": ref_speed.get("pp_tok_s"), "tg_tok_s": ref_speed.get("tg_tok_s"), "tg_sd": ref_speed.get("tg_sd")}]
    for f in ladder.files:
        rows.append({"type": f.qtype, "file_mib": f.bytes / MIB, "effective_bpw": z[f.qtype]["effective_bpw"],
                     "kld": q[f.qtype]["kld"], "kld_unc": q[f.qtype]["kld_unc"], "top1_pct": q[f.qtype]["top1_pct"],
                     "ppl": q[f.qtype]["ppl"], "ppl_ratio": q[f.qtype]["ppl_ratio"],
                     "pp_tok_s": s.get(f.qtype, {}).get("pp_tok_s"), "tg_tok_s": s.get(f.qtype, {}).get("tg_tok_s"),
                     "tg_sd": s.get(f.qtype, {}).get("tg_sd")})
    for label, r in q.items():
        if label.startswith("shipped"):
            rows.append({"type": label, "file_mib": ladder.reference.source.stat().st_size / MIB,
                         "effective_bpw": None, "kld": r["kld"], "kld_unc": r["kld_unc"], "top1_pct": r["top1_pct"],
                         "ppl": r["ppl"], "ppl_ratio": r["ppl_ratio"], "pp_tok_s": None, "tg_tok_s": None, "tg_sd": None})
    return rows


def published_quality() -> dict:
    """llama.cpp's own perplexity increase per type on Llama-3-8B (quant_types.yaml `published_quality`)."""
    return facts.load(DATA, "published_quality")["published_quality"][0]


# The recommendation rule, stated once: the smallest llama.cpp type whose published perplexity increase
# on Llama-3-8B is at most PPL_DELTA_MAX, among those whose weights leave at least KV_SHARE_MIN of the
# card for the KV cache and buffers (notebook 05 sizes those).
PPL_DELTA_MAX = 0.2
KV_SHARE_MIN = 1 / 3
SEED_VRAM_MIB = 32768  # the seeds' card, a V100 32GB, for profiles without a GPU


def recommend(rows: list[dict], targets: list[dict], profile, kld_good: float = 0.05) -> dict:
    """What the ladder supports: a measured part (this model) and a target part (the 27B class on the
    profile's card, or on the seeds' V100 32GB when the profile has none), by the rule above."""
    ladder = sorted((r for r in rows if not r["type"].startswith(("F16", "shipped"))), key=lambda r: r["file_mib"])
    by = {r["type"]: r for r in ladder}
    lines = []
    good = [r for r in ladder if r["kld"] <= kld_good]
    if good:
        g = good[0]
        lines.append(f"Measured here, the smallest file within mean KLD ≤ {kld_good} of the reference is {g['type']} "
                     f"({g['file_mib']:.1f} MiB, KLD {g['kld']:.4f}, top-1 {g['top1_pct']:.1f} %).")
    if "Q4_K_M" in by and "Q4_0" in by:
        a, b = by["Q4_K_M"], by["Q4_0"]
        lines.append(f"At 4 bits the K-quant mix wins: Q4_K_M has KLD {a['kld']:.3f} (top-1 {a['top1_pct']:.0f} %) "
                     f"against Q4_0's {b['kld']:.3f} ({b['top1_pct']:.0f} %) for {100 * (a['file_mib'] / b['file_mib'] - 1):.0f} % "
                     "more bytes.")
    odd = quality_monotone(rows)
    if odd:
        lines.append("Not monotone here: " + "; ".join(odd) + " — quality follows the tensor types each file really "
                     "got (the size breakdown), not the name on the file.")
    vram_mib = profile.gpu_vram_mib or SEED_VRAM_MIB
    where = (f"{profile.gpu_vram_mib / 1024:g} GiB card" if profile.gpu_vram_mib
             else "V100 32GB (the seeds' card; this profile has no GPU)")
    own = profile.model_architecture.split(":", 1)[1] if profile.model_architecture.startswith("config:") else None
    mids = [own] if own else sorted({r["model_id"] for r in targets if 26e9 <= r["params"] <= 28e9})
    deltas = published_quality()["deltas"]
    table, picks = [], {}
    for mid in mids:
        for r in targets:
            if r["model_id"] != mid or r["type"] not in deltas:
                continue
            left = vram_mib * MIB - r["predicted_bytes"]
            ok = left >= KV_SHARE_MIN * vram_mib * MIB and deltas[r["type"]] <= PPL_DELTA_MAX
            table.append({"model": r["model"], "type": r["type"], "weights_gb": round(r["predicted_gb"], 2),
                          "left_for_kv_gib": round(left / GIB, 2), "llama.cpp Δppl @ Llama-3-8B": deltas[r["type"]],
                          "KLD on the embedded model (this run)": by.get(r["type"], {}).get("kld"), "meets_rule": ok})
            if ok and (mid not in picks or r["predicted_bytes"] < picks[mid]["predicted_bytes"]):
                picks[mid] = r
    for mid, r in picks.items():
        lines.append(f"For {r['model']} on a {where}: **{r['type']}** — {r['predicted_gb']:.1f} GB of weights, "
                     f"{(vram_mib * MIB - r['predicted_bytes']) / GIB:.1f} GiB left for KV cache and buffers, "
                     f"+{deltas[r['type']]} PPL on Llama-3-8B by llama.cpp's own table.")
    rule = (f"rule: the smallest type with llama.cpp's published Δppl ≤ {PPL_DELTA_MAX} that leaves ≥ "
            f"{KV_SHARE_MIN:.0%} of the card for the KV cache")
    pick = next(iter(picks.values()), None)
    return {"type": pick["type"] if pick else None, "text": " ".join(lines), "rule": rule, "table": table,
            "source": published_quality()["source"]}


def quality_monotone(rows: list[dict]) -> list[str]:
    """Pairs where a smaller file has *lower* KLD than a larger one (worth a sentence when they occur)."""
    ladder = sorted((r for r in rows if not r["type"].startswith(("F16", "shipped"))), key=lambda r: -r["file_mib"])
    return [f"{b['type']} ({b['file_mib']:.1f} MiB) has lower KLD than {a['type']} ({a['file_mib']:.1f} MiB)"
            for a, b in zip(ladder, ladder[1:]) if b["kld"] < a["kld"]]


def make_checks(reference: Reference, ladder: Ladder, sizes: SizeCheck, quality: Quality, xcheck: list[dict],
                speed: Speed, published: list[dict]) -> list[lab_checks.Check]:
    """The notebook's verdicts, one Check each."""
    C = lab_checks.Check
    out = [C("F16 reference keeps every metadata key", "pass" if reference.keys_kept else "fail",
             f"{len(set(reference.keys_source) & set(reference.keys_reference))}/{len(reference.keys_source)} keys",
             "all keys of the shipped file", "write_f16_reference copies every field", "lab.model.quant_ladder.write_f16_reference")]
    order = [f.bytes for f in ladder.files]
    out.append(C("ladder files get smaller down the ladder", "pass" if order == sorted(order, reverse=True) else "warn",
                 ", ".join(f"{f.qtype} {f.bytes / MIB:.1f} MiB" for f in ladder.files), "strictly decreasing sizes",
                 "a row-length fallback can make a 4-bit mix larger than expected; see the size table", ""))
    bad = {q: len(v) for q, v in sizes.mismatches.items() if v}
    out.append(C("llama.cpp's per-tensor types reproduced", "pass" if not bad else "fail",
                 bad or "every tensor of every file", "the type llama-quantize chose for each tensor",
                 "update lab.model.quant_formats.choose_tensor_types to the vendored src/llama-quant.cpp",
                 "src/llama-quant.cpp llama_tensor_get_type_impl, tensor_type_fallback"))
    exact = all(r["predicted_equals_file"] for r in sizes.rows)
    out.append(C("predicted tensor bytes equal the files'", "pass" if exact else "fail",
                 {r["type"]: r["tensor_bytes"] - r["predicted_bytes"] for r in sizes.rows}, "0 bytes difference",
                 "", "ggml/src/ggml-common.h block sizes"))
    worst_pub = max(published, key=lambda r: abs(r["diff_pct"])) if published else None
    if worst_pub:
        out.append(C("size model vs published file sizes", "pass" if abs(worst_pub["diff_pct"]) <= 1.0 else "warn",
                     f"worst {worst_pub['check']} {worst_pub['type']}: {worst_pub['diff_pct']:+.2f} %", "within 1 %",
                     "published figures include metadata and may come from older mixes", worst_pub["source"]))
    agree = [r for r in xcheck if r.get("agree") is not None]
    failed = [r for r in xcheck if r.get("error")]
    out.append(C("KLD cross-check (llama-cpp-python vs llama-perplexity)",
                 "warn" if failed else ("pass" if agree and all(r["agree"] for r in agree) else ("skip" if not agree else "warn")),
                 {r["type"]: f"KLD {r['lab_kld']:.4f} vs {r['tool_kld']:.4f}" for r in agree}
                 | {r["type"]: r["error"] for r in failed},
                 f"KLD within {100 * XCHECK_KLD_REL:g} % (or {XCHECK_KLD_ABS}), top-1 within {XCHECK_TOP1_PP:g} pp, "
                 f"PPL within {100 * XCHECK_PPL_REL:g} %",
                 ("llama-cpp-python failed in its own process (see observed): the ladder's KLD comes from "
                  "llama-perplexity alone; the crash is the bindings', not the quantized files'") if failed else "",
                 "tools/perplexity/perplexity.cpp kl_divergence"))
    shipped = next((r for r in quality.rows if r["type"].startswith("shipped")), None)
    if shipped:
        out.append(C("shipped file ≈ its F16 reference", "pass" if shipped["kld"] < SHIPPED_KLD_MAX else "warn",
                     f"KLD {shipped['kld']:.4f}, top-1 {shipped['top1_pct']:.2f} %", f"KLD < {SHIPPED_KLD_MAX}",
                     "same weights; the residual is the CPU kernels' 8-bit activations (a Q4_1 × Q8_1 dot product) "
                     "against the F16 path's 16-bit ones",
                     "ggml/src/ggml-cpu/ggml-cpu.c type_traits_cpu[GGML_TYPE_Q4_1].vec_dot_type = GGML_TYPE_Q8_1"))
    load = speed.settings["load_avg_before"]
    cores = speed.settings["cores"] or 1
    if speed.settings.get("skipped"):  # plan mode: nothing was timed
        out.append(C("speed measured on a quiet machine", "skip", speed.settings["skipped"], "a timed run", "", ""))
        return out
    out.append(C("speed measured on a quiet machine", "pass" if load <= cores else "warn",
                 f"load average {load:.1f} on {cores} cores", f"≤ {cores}",
                 "other processes shared the CPU: treat tok/s as rough and compare types within this run only", ""))
    return out
