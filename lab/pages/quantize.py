"""Notebook 03's page (quantization): the ladder summarised, one row per type with its size, quality and speed
(`summarise`), what to use by a rule stated once (`recommend`, for this model and the 27B class on the profile's
card), the notebook's verdicts (`make_checks`); the ladder's table and chart, the 27B-class size table, the
recommendation and the vLLM route as Markdown, the 03_quantize record (`record`) and its closing text
(`what_this_means`) — all over what lab.model's quant modules (quant_ladder, quant_quality, quant_targets) measured
and predicted. The notebook's steps (`f16_reference(s)`, `build_ladder(s, ref)`, `size_check`, `published_sizes`,
`measure_quality(s, ladder)`, `crosscheck`, `measure_speed(s, ladder)`, `target_sizes(s, types)`, `size_claims(s)`,
`vllm_plan(s)`, and `start`, `answer`, `show` from lab.pages.session) are here too: the notebook imports this page and
nothing else from lab. Each step keeps what it made or measured in the session (`s.results`: reference, ladder, sizes,
quality, crosscheck, speed, targets, size_claims, vllm_plan); `record(s)` builds the record from those and what
follows from them alone (the published sizes, the summary rows, the chart, the recommendation, the checks)."""
from __future__ import annotations

from dataclasses import asdict

from lab.core.units import GB, GIB, MIB
from lab.core import checks as lab_checks
from lab.core import evidence, facts
from lab.core.session import Session
from lab.model import quant_ladder, quant_quality, quant_targets
from lab.model.quant_formats import DATA
from lab.model.quant_ladder import Ladder, Reference, SizeCheck, Speed
from lab.model.quant_quality import XCHECK_KLD_ABS, XCHECK_KLD_REL, XCHECK_PPL_REL, XCHECK_TOP1_PP, Quality, heldout_text
from lab.pages import session
from lab.pages.session import answer, checks_table, keep, show, start  # noqa: F401  (what every notebook calls, through its page)
from lab.predict import claims, claims_views

NAME = "03_quantize"
# The types section 7 sizes unless the learner lists others (F16 … Q4_0; lab.model.quant_targets).
TARGET_TYPES = quant_targets.TARGET_TYPES

# The shipped file against its own F16 copy: identical weights, but llama.cpp's quantized dot products
# quantize the activations to 8 bits (vec_dot_type Q8_1/Q8_0/Q8_K) where the F16 path keeps 16, which
# alone gave KLD ≈ 0.003 here. Above 0.01 the reference would not be the shipped model.
SHIPPED_KLD_MAX = 0.01


# ---------------------------------------------------------------- the notebook's steps
def f16_reference(s: Session) -> Reference:
    """The F16 reference written from the profile's ladder source (the shipped SmolLM2 file), every metadata key
    kept, itself dequantized from that file's type (lab.model.quant_ladder.f16_reference); reused when present."""
    return keep(s, "reference", quant_ladder.f16_reference(s.profile))


def build_ladder(s: Session, reference: Reference) -> Ladder:
    """Q8_0 → Q6_K → Q5_K_M → Q4_K_M → Q4_0 made by llama-quantize from the reference, cached outside the checkout
    (free disk checked first, files reused when present), llama-quantize's output in the run folder's logs."""
    return keep(s, "ladder", quant_ladder.build_ladder(reference, log_dir=s.logs))


def size_check(s: Session, ladder: Ladder) -> SizeCheck:
    """Each file's size against parameters × bits per weight and against llama.cpp's per-tensor choice."""
    return keep(s, "sizes", quant_ladder.size_check(ladder))


def published_sizes() -> list[dict]:
    """The size model against sizes published by others (llama.cpp's Llama-3-8B table, bartowski's Qwen3-32B
    files, the all-Q4_K Qwen3-32B-shaped model measured on an H200)."""
    return quant_targets.published_size_checks()


def measure_quality(s: Session, ladder: Ladder) -> Quality:
    """Mean KLD, top-1 agreement and perplexity of each file against the reference on the held-out text
    (llama-perplexity --kl-divergence; cached by the files', the text's and the build's identity)."""
    return keep(s, "quality", quant_quality.measure_quality(ladder, log_dir=s.logs))


def crosscheck(s: Session, ladder: Ladder, quality: Quality) -> list[dict]:
    """The first two chunks' KLD computed again, independently (llama-cpp-python's raw logits, a float64 softmax),
    beside llama-perplexity's."""
    return keep(s, "crosscheck", quant_quality.crosscheck_kld(ladder, quality))


def measure_speed(s: Session, ladder: Ladder) -> Speed:
    """llama-bench's prompt processing and generation speed for every file (median of 3 after a warm-up)."""
    return keep(s, "speed", quant_ladder.measure_speed(ladder, log_dir=s.logs))


def target_sizes(s: Session, types=TARGET_TYPES) -> list[dict]:
    """The 27B-class weights at each type: the profile's model and real neighbours, through the per-tensor rules
    that matched the ladder; a type the lab does not model is refused with the list of those it does."""
    return keep(s, "targets", quant_targets.target_sizes(s.profile, types))


def size_claims(s: Session) -> list:
    """The seeds' size claims as the ledger judged them (lab.predict.claims: the verdicts notebook 06 and `lab plan`
    show)."""
    return keep(s, "size_claims", claims_views.of_kinds(claims.verdicts(s.profile), "size"))


def claims_table(verdicts: list):
    """The size claims, one row each: id, claim, value, verdict, why (a DataFrame)."""
    return claims_views.table(verdicts)[["id", "claim", "value", "verdict", "why"]]


def claims_by_model(verdicts: list):
    """The arithmetic behind each verdict, one row per model (a DataFrame)."""
    return claims_views.models_table(verdicts)


def vllm_plan(s: Session) -> dict:
    """For vLLM users: which checkpoint formats this GPU can run, and the commands that make them."""
    return keep(s, "vllm_plan", quant_targets.vllm_quant_plan(s.profile))



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




def ladder_table(rows: list[dict]):
    import pandas as pd

    return pd.DataFrame(rows).round({"file_mib": 1, "effective_bpw": 3, "kld": 4, "kld_unc": 4, "top1_pct": 2,
                                     "ppl": 3, "ppl_ratio": 4, "pp_tok_s": 1, "tg_tok_s": 1, "tg_sd": 1})


def ladder_chart(rows: list[dict], title: str = "Quant ladder: size vs quality (KLD to F16), marker = generation speed"):
    """Size (x) against mean KL divergence (y, log), marker area and colour = generation tok/s."""
    import plotly.graph_objects as go

    pts = [r for r in rows if r.get("kld") and r["kld"] > 0 and not r["type"].startswith("shipped")]
    tg = [r.get("tg_tok_s") or 0 for r in pts]
    top = max(tg) if tg and max(tg) > 0 else 1
    fig = go.Figure(go.Scatter(
        x=[r["file_mib"] for r in pts], y=[r["kld"] for r in pts], mode="markers+text",
        text=[r["type"] for r in pts], textposition="top center",
        marker={"size": [14 + 26 * (t / top) for t in tg], "color": tg, "colorscale": "Viridis", "showscale": True,
                "colorbar": {"title": "tg tok/s"}, "line": {"width": 1, "color": "#333"}},
        customdata=[[r["top1_pct"], r["ppl"], r.get("tg_tok_s") or float("nan"), r.get("pp_tok_s") or float("nan")] for r in pts],
        hovertemplate=("%{text}<br>%{x:.1f} MiB<br>KLD %{y:.4f}<br>top-1 %{customdata[0]:.1f} %<br>"
                       "PPL %{customdata[1]:.2f}<br>tg %{customdata[2]:.1f} tok/s<br>pp %{customdata[3]:.0f} tok/s<extra></extra>")))
    ref = next((r for r in rows if r["type"].startswith("F16")), None)
    if ref:
        fig.add_vline(x=ref["file_mib"], line_dash="dot", annotation_text="F16 reference (KLD 0)")
    fig.update_layout(title=title, xaxis_title="file size (MiB)", yaxis_title="mean KL divergence to F16 (log)",
                      yaxis_type="log", height=460)
    return fig


def target_table(rows: list[dict]):
    """The 27B-class size table: one row per model and type, GB (10^9) and GiB (2^30)."""
    import pandas as pd

    return pd.DataFrame([{"model": r["model"] + (" (this profile)" if r["profile_model"] else ""),
                          "params (B)": round(r["params"] / 1e9, 3), "type": r["type"],
                          "params × bpw/8 (GB)": round(r["naive_bytes"] / GB, 2), "weights (GB)": round(r["predicted_gb"], 2),
                          "weights (GiB)": round(r["predicted_gib"], 2), "effective bpw": round(r["effective_bpw"], 3),
                          "vs naive": f"{r['vs_naive_pct']:+.1f} %",
                          "left of the card (GiB)": None if r["vram_left_gib"] is None else round(r["vram_left_gib"], 2)}
                         for r in rows])


def recommendation_markdown(rec: dict) -> str:
    """What the ladder supports (`recommend`), then the rule it follows and the rule's source."""
    return f"{rec['text']}\n\n*{rec['rule']}* ({rec['source']})"


def recommendation_table(rec: dict):
    import pandas as pd

    return pd.DataFrame(rec["table"])


def plan_table(plan: dict):
    import pandas as pd

    return pd.DataFrame([{k: r[k] for k in ("format", "min_capability", "runs_here", "why", "tool", "serve")}
                         for r in plan["rows"]])


def plan_markdown(plan: dict) -> str:
    """The vLLM route as Markdown: status, then each format's commands."""
    lines = [f"**{plan['status']}** — GPU compute capability {plan['compute_capability']}"
             + (f" ({plan['note']})" if plan["note"] else "") + f"; model `{plan['model']}`.", ""]
    for r in plan["rows"]:
        lines.append(f"*{r['format']}* via {r['tool']} — runs on this GPU: **{r['runs_here']}**"
                     + (f" ({r['why']})" if r["why"] else ""))
        lines.append("```bash\n" + "\n".join(r["commands"] + [r["serve"]]) + "\n```")
        if r["note"]:
            lines.append(r["note"])
        lines.append("")
    return "\n".join(lines)


def build_record(*, reference: Reference, ladder: Ladder, sizes: SizeCheck, published: list[dict],
                 quality: Quality, xcheck: list[dict], speed: Speed, rows: list[dict], fig, targets: list[dict],
                 rec: dict, verdicts: list, plan: dict, checks: list) -> dict:
    """The 03_quantize record: title, summary, checks, tables, charts and the raw ladder data (what this notebook
    can see of the profile's server, `server_scope`, the session adds)."""
    by = {r["type"]: r for r in rows}
    summary = {"ladder source": f"{reference.source.name} ({reference.source_why})",
               "reference": "F16, dequantized from " + reference.source_type + " (not the BF16 original)",
               "held-out tokens scored": quality.settings["scored_tokens"],
               "recommended for the 27B target": rec["type"], "recommendation rule": rec["rule"],
               "checks": lab_checks.worst(checks)}
    for f in ladder.files:
        r = by[f.qtype]
        summary[f"{f.qtype}"] = (f"{r['file_mib']:.1f} MiB, KLD {r['kld']:.4f}, top-1 {r['top1_pct']:.1f} %, "
                                 f"PPL {r['ppl']:.2f}, tg {r['tg_tok_s']:.0f} tok/s" if r.get("tg_tok_s") else "")
    for v in verdicts:
        summary[f"seed {v.seed[:3]}: {v.id}"] = f"{v.verdict} ({v.explanation.split(' — ')[0]})"
    return {
        "title": "Quantization: size, quality and speed of the llama.cpp ladder; 27B-class sizes",
        "summary": summary,
        "checks": [c.to_dict() for c in checks],
        "tables": [evidence.table_entry("The ladder (embedded model, against its F16 reference)", ladder_table(rows)),
                   evidence.table_entry("File size: parameters × bpw vs llama.cpp's per-tensor choice", sizes.table()),
                   evidence.table_entry("Size model vs published file sizes", published),
                   evidence.table_entry("KLD cross-check: llama-cpp-python vs llama-perplexity", xcheck),
                   evidence.table_entry("27B-class weights at each type", target_table(targets)),
                   evidence.table_entry("The seeds' size claims (lab.predict.claims)", [v.row() for v in verdicts]),
                   evidence.table_entry("Recommendation: " + rec["rule"], rec["table"]),
                   evidence.table_entry("vLLM checkpoint formats on this GPU", plan_table(plan))],
        "charts": [evidence.chart_entry("Size vs KL divergence (marker: generation tok/s)", fig)],
        "ladder": {"reference": reference.to_dict(),
                   "files": [asdict(f) for f in ladder.files], "cache": str(ladder.folder), "build": ladder.build,
                   "sizes": sizes.rows, "size_breakdown": sizes.breakdown, "type_mismatches": sizes.mismatches,
                   "quality": {"settings": quality.settings, "base": quality.base, "rows": quality.rows,
                               "chunks": quality.raw_chunks},
                   "crosscheck": xcheck, "speed": {"settings": speed.settings, "rows": speed.rows, "raw": speed.raw},
                   "rows": rows},
        "targets": targets,
        "claims": [v.to_dict() for v in verdicts],
        "recommendation": rec,
        "vllm_plan": plan,
        "heldout_text": heldout_text()[1],
    }


def record(s: Session):
    """Write records/03_quantize.json with its closing text, built (`build_record`) from what the steps kept in
    `s.results` and what follows from them alone, as the notebook shows it; its path."""
    r = s.results
    reference, ladder, sizes, quality, xcheck, speed, targets = (r.get(k) for k in (
        "reference", "ladder", "sizes", "quality", "crosscheck", "speed", "targets"))
    published = published_sizes()
    rows = summarise(ladder, sizes, quality, speed)
    return s.record(NAME, build_record(
        reference=reference, ladder=ladder, sizes=sizes, published=published, quality=quality, xcheck=xcheck,
        speed=speed, rows=rows, fig=ladder_chart(rows), targets=targets, rec=recommend(rows, targets, s.profile),
        verdicts=r.get("size_claims") or [], plan=r.get("vllm_plan"),
        checks=make_checks(reference, ladder, sizes, quality, xcheck, speed, published)), closing=closing_text)


def what_this_means(s: Session):
    """The closing text as the record keeps it (written by `record`), as Markdown for the notebook's last cell."""
    return session.closing(s, NAME)


def closing_text(record: dict) -> str:
    """Markdown: the short summary the notebook ends with, from the 03_quantize record."""
    rows, rec = record["ladder"]["rows"], record["recommendation"]
    verdicts, targets = record["claims"], record["targets"]
    own = [r for r in targets if r["profile_model"] and r["type"] == "Q4_K_M"]
    q4 = [r for r in targets if r["type"] == "Q4_K_M" and 26e9 <= r["params"] <= 28e9]
    lines = [f"- {rec['text']}"]
    if q4:
        lines.append("- A 27B-class model at Q4_K_M is " + " and ".join(
            f"{r['predicted_gb']:.1f} GB = {r['predicted_gib']:.1f} GiB ({r['model'].split('/')[-1]})" for r in q4)
            + " of weights.")
    if own:
        r = own[0]
        left = f", leaving {r['vram_left_gib']:.1f} GiB of the card for KV cache and buffers" if r["vram_left_gib"] is not None else ""
        lines.append(f"- This profile's model, {r['model']}, at Q4_K_M: {r['predicted_gb']:.2f} GB "
                     f"({r['predicted_gib']:.2f} GiB){left}.")
    for v in verdicts:  # the ledger's size claims (lab.predict.claims): the same verdicts notebook 06 and `lab plan` show
        lines.append(f"- Seed {v['seed'][:3]}: \"{v['english']}\" → **{v['verdict']}** ({v['explanation'].split(' — ')[0]}).")
    return "\n".join(lines)
