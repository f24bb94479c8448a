"""Notebook 03's views (quantization): the ladder's table and chart, the 27B-class size table, the recommendation and
the vLLM route as Markdown, the 03_quantize record (`build_record`) and its closing text (`what_this_means`), all from
what lab.model's quant modules (quant_ladder, quant_quality, quant_targets, quant_summary) measured and
predicted."""
from __future__ import annotations

from dataclasses import asdict

from lab.core.units import GB
from lab.core import checks as lab_checks
from lab.core import evidence
from lab.model.quant_ladder import Ladder, Reference, SizeCheck, Speed
from lab.model.quant_quality import Quality, heldout_text
from lab.serving import endpoint


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
    """What the ladder supports (lab.model.quant_summary.recommend), then the rule it follows and the rule's source."""
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


def build_record(profile, *, reference: Reference, ladder: Ladder, sizes: SizeCheck, published: list[dict],
                 quality: Quality, xcheck: list[dict], speed: Speed, rows: list[dict], fig, targets: list[dict],
                 rec: dict, verdicts: list, plan: dict, checks: list) -> dict:
    """The 03_quantize record: title, summary, checks, tables, charts, the raw ladder data, and what this notebook
    can see of the profile's server (lab.serving.endpoint.where)."""
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
        "server_scope": endpoint.where(profile),
    }


def what_this_means(record: dict) -> str:
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
