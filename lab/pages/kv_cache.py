"""Notebook 05's page (KV-cache math): its tables, charts, checks, the 05_kv_cache record (`record`) and its closing
text (`what_this_means`), from lab.predict.kvcache / memory_plan predictions and the llama.cpp grid
(lab.measure.kvcache_verify) and vLLM (lab.measure.vllm_kv) measurements, so the notebook's cells stay one call each.
Its steps (`read_architecture(s)`, `with_values`, `plan_for(s, profile, arch)`, `seeds_target(s, ...)`,
`longest_context(s, ...)`, `check_against_llama_cpp(s)`, `check_against_vllm(s, arch)`, `seed_kv_claims(s)`,
`ask_server(s)`, `plan_beside_server(s, ...)`) keep their results in the session (`s.results`); `record(s)` builds the
record from those and what follows from them alone (the parity checks, the memory and parity charts)."""
from __future__ import annotations

from lab.core.units import GB, GIB, MIB
from lab.core import display, evidence, profiles, run_folder
from lab.core.checks import Check
from lab.core.session import Session
from lab.model import models
from lab.model import weights as weights_mod
from lab.model.models import ArchSpec
from lab.measure import kvcache_verify, vllm_kv
from lab.predict import claims, claims_views, kvcache, memory_plan
from lab.pages import session
from lab.pages.session import answer, keep, show, start  # noqa: F401  (what every notebook calls, through its page)
from lab.pages.kv_cache_try import try_these  # noqa: F401  (section 1's Try lines, computed for the profile)
from lab.serving import endpoint

NAME = "05_kv_cache"
PARITY_SOURCE = ("llama.cpp src/llama-kv-cache.cpp (the size line), src/llama-context.cpp (n_ctx padding, "
                 "per-slot split), src/llama-kv-cache-iswa.cpp (SWA cache size)")
CLAIM_COLUMNS = ["id", "claim", "value", "verdict", "why"]  # the claims table as section 4 shows it


# ---------------------------------------------------------------- the notebook's steps
def read_architecture(s: Session) -> ArchSpec:
    """The profile's model architecture: from the GGUF itself, or from a real config.json in lab/data/
    (lab.model.models.arch_for)."""
    return keep(s, "architecture", models.arch_for(s.profile))


def with_values(profile: profiles.Profile, **values) -> profiles.Profile:
    """The profile with the values a learner changed in a "Try" cell (context_tokens, parallel_slots, kv_cache_dtype,
    host_ram_gib_min, gpu_count, ...), validated as a profile; the profile itself when nothing changed
    (lab.core.profiles.varied)."""
    return profiles.varied(profile, **values)


def plan_memory(profile: profiles.Profile, arch: ArchSpec) -> dict:
    """Weights + KV + runtime overhead against the device's memory: the longest context and the most sequences that
    fit (lab.predict.memory_plan.plan_memory)."""
    return memory_plan.plan_memory(profile, arch)


def plan_for(s: Session, profile: profiles.Profile, arch: ArchSpec) -> dict:
    """`plan_memory` for the notebook's values (`with_values`), kept as the plan the record holds (the latest)."""
    return keep(s, "plan", plan_memory(profile, arch))


def check_against_llama_cpp(s: Session) -> tuple[list[dict], str | None]:
    """Section 3: llama-server started over the grid of contexts, slots and KV dtypes (logs in the run folder), each
    KV buffer it reports beside the prediction (lab.measure.kvcache_verify); (rows, why it was skipped or None)."""
    rows, skip_reason = kvcache_verify.run_for_profile(s.profile, s.logs, vllm_kv.llama_grid_skip_reason(s.profile))
    return keep(s, "llama_cpp_grid", rows), keep(s, "llama_cpp_skipped", skip_reason)


def check_against_vllm(s: Session, arch: ArchSpec) -> dict:
    """Section 3b: on a vLLM profile, the KV cache predicted, the profile's vLLM started once, its log line and
    /metrics read and compared, the server stopped (lab.measure.vllm_kv.verify); skipped elsewhere."""
    return keep(s, "vllm_check", vllm_kv.verify(s.profile, arch, s.logs))


def vllm_checks(result: dict) -> list[Check]:
    """One check per quantity vLLM reports; pass only when it is exactly the predicted value."""
    return vllm_kv.checks(result)


def seed_kv_claims(s: Session) -> list:
    """The seeds' KV, layer and memory claims, judged by the claims ledger (lab.predict.claims: the same verdicts
    notebook 06 and `lab plan` show)."""
    return keep(s, "kv_claims", claims_views.of_kinds(claims.verdicts(s.profile), "kv", "layers"))


def claims_table(kv_claims: list):
    """The claims with their verdicts and why (the record keeps every column)."""
    return claims_views.table(kv_claims)[CLAIM_COLUMNS]


def claims_arithmetic_table(kv_claims: list):
    """The arithmetic behind each verdict, one row per model: the judged model, then the comparisons."""
    return claims_views.models_table(kv_claims)


def ask_server(s: Session) -> dict | None:
    """What the profile's server says about itself: notebook 04's record of this run, or (an endpoint profile) asked
    now; None when no server reported (lab.serving.endpoint.discovery_for)."""
    return keep(s, "server", endpoint.discovery_for(s.profile, run_folder.read_records(s.run_dir)))


def plan_beside_server(s: Session, arch: ArchSpec, plan: dict, served: dict | None) -> list[dict]:
    """Each quantity the server reports beside the plan's, row by row; none when it reported nothing."""
    return keep(s, "plan_vs_server", endpoint.plan_vs_server(s.profile, arch, plan, served))


def _pd():
    import pandas as pd

    return pd


# ---------------------------------------------------------------- KV per token and in total
def arch_table(arch: ArchSpec):
    """The architecture as field / value rows."""
    return _pd().DataFrame([{"field": k, "value": v} for k, v in arch.summary().items()])


def kv_dtype_table(arch: ArchSpec, tokens: int, n_seqs: int, tensor_parallel: int = 1,
                   dtypes: tuple[str, ...] = ("f16", "q8_0", "q4_0", "fp8"), split_by: str = "heads"):
    """Per KV dtype: bytes per token (inside / beyond the window) and the cache for n_seqs × tokens, per device
    as the plan divides it (`split_by`: the memory plan's, heads or layers)."""
    rows = []
    for d in dtypes:
        b = kvcache.kv_cache_breakdown(arch, tokens, n_seqs, d, tensor_parallel, split_by)
        rows.append({"kv_dtype": d, "bytes_per_element": kvcache.bytes_per_element(d),
                     "bytes_per_token": kvcache.kv_bytes_per_token(arch, d),
                     "bytes_per_token_beyond_window": kvcache.kv_bytes_per_token(arch, d, "global"),
                     "sequences": n_seqs, "tokens_per_sequence": tokens,
                     "cache_MiB_per_device": round(b["per_gpu_bytes"] / MIB, 2),
                     "of_which_linear_state_MiB": round(b["linear_state_bytes"] / MIB, 2)})
    return _pd().DataFrame(rows)


def stand_in_table(contexts: tuple[int, ...] = (32_768, 65_536), kv_dtype: str = "f16"):
    """Every shipped stand-in: KV bytes per token and the cache of one sequence at each context, next to
    what a calculator that ignores GQA, windows and hybrid layers would say (2 × layers × q heads × head_dim)."""
    rows = []
    for mid in models.stand_in_ids():
        arch = models.stand_in(mid)
        naive_tok = 2 * arch.n_layers * arch.n_heads * arch.head_dim_k * kvcache.bytes_per_element(kv_dtype)
        row = {"model": mid, "layers": arch.n_layers, "global/local/linear":
               f"{len(arch.global_layers)}/{len(arch.local_layers)}/{len(arch.linear_layers)}",
               "kv_heads": arch.n_kv_heads, "head_dim": arch.head_dim_k,
               "KiB_per_token": kvcache.kv_bytes_per_token(arch, kv_dtype) / 1024}
        for ctx in contexts:
            real = kvcache.kv_cache_bytes(arch, ctx, 1, kv_dtype)
            row[f"GiB_at_{ctx // 1024}K"] = round(real / GIB, 2)
            row[f"naive_GiB_at_{ctx // 1024}K"] = round(naive_tok * ctx / GIB, 2)
            row[f"naive_overstates_{ctx // 1024}K"] = f"{naive_tok * ctx / real:.1f}x"
        rows.append(row)
    return _pd().DataFrame(rows)


# ---------------------------------------------------------------- the fit
def plan_table(plan: dict):
    """The memory plan as field / value rows (findings shown separately)."""
    keep = [k for k in plan if k != "findings"]
    return _pd().DataFrame([{"field": k, "value": plan[k]} for k in keep])


def findings_table(plan: dict):
    return _pd().DataFrame(plan["findings"], columns=["id", "severity", "message", "fix", "source"])


def _contexts_up_to(limit: int, start: int = 256) -> list[int]:
    out, c = [], start
    while c < limit:
        out.append(c)
        c *= 2
    return out + [limit]


def memory_stack_chart(arch: ArchSpec, plan: dict, contexts: list[int] | None = None):
    """Stacked memory per device (weights, overhead, global KV, window KV, linear state) against context per
    sequence, for the plan's number of sequences and KV dtype, with the budget as a line."""
    import plotly.graph_objects as go

    contexts = contexts or _contexts_up_to(arch.max_context)
    rows = kvcache.memory_stack(arch, contexts, weights_bytes=plan["weights_bytes"], device_bytes=plan["device_bytes"],
                                n_seqs=plan["parallel_slots"], kv_dtype=plan["kv_dtype"],
                                utilization=plan["utilization"], overhead_bytes=plan["overhead_bytes"],
                                tensor_parallel=plan["devices"], split_by=plan.get("split_by", "heads"))
    fig = go.Figure()
    parts = [("weights_bytes", "weights"), ("overhead_bytes", "runtime overhead"), ("kv_global_bytes", "KV, global layers"),
             ("kv_local_bytes", "KV, sliding-window layers"), ("linear_state_bytes", "linear-attention state")]
    for key, label in parts:
        if any(r[key] for r in rows):
            fig.add_trace(go.Scatter(x=contexts, y=[r[key] / GIB for r in rows], name=label, stackgroup="mem",
                                     mode="lines"))
    fig.add_trace(go.Scatter(x=contexts, y=[r["budget_bytes"] / GIB for r in rows], name="budget",
                             mode="lines", line={"dash": "dash", "color": "black"}))
    fig.add_vline(x=plan["context_tokens_per_sequence"], line_dash="dot",
                  annotation_text=f"profile: {plan['context_tokens_per_sequence']} tokens/seq")
    fig.update_layout(title=f"Memory per device vs context: {arch.name}, {plan['parallel_slots']} sequence(s), "
                            f"KV {plan['kv_dtype']} ({plan['memory_kind']})",
                      xaxis_title="context tokens per sequence", yaxis_title="GiB", xaxis_type="log", height=420)
    return fig


def device_bytes(profile_name: str) -> int:
    """One card's memory in bytes, from a shipped profile (`gpu_vram_mib`): the budget of the seeds' target."""
    return profiles.load(profile_name).gpu_vram_mib * 2**20


# The seeds' model first, then the comparisons (same-shape Qwen3.5-27B, sliding-window Gemma-3-27B, dense Qwen 32Bs)
TARGET_MODELS = ("qwen3.8-27b", "gemma-3-27b", "qwen3.5-27b", "qwen3-32b", "qwen2.5-32b")


def _card_weights(weights_format: str, arch, model_id: str) -> int:
    """The weights llama.cpp puts on the card, as lab.predict.memory_plan counts them: the loaded weights less the
    token embedding it keeps in host memory (this table once counted 15.40 GiB where the plan counted 14.73)."""
    from lab.model import quant_targets

    parts = quant_targets.gguf_parts(model_id, weights_format)  # the exact mix: the plan's own split
    if parts is not None:
        return parts["gpu"]
    return weights_mod.weights_bytes(weights_format, arch=arch, model_id=model_id)[0] - \
        weights_mod.embedding_bytes(weights_format, arch)


def target_rows(device_bytes: int, weights_format: str = "Q4_K_M", kv_dtypes: tuple[str, ...] = ("f16", "q8_0"),
                contexts: tuple[int, ...] = (4096, 8192, 16384, 32768, 65536, 131072),
                overhead_id: str = "llama.cpp-gpu") -> list[dict]:
    """The seeds' target: Qwen3.8-27B and the real 27-32B comparisons on one card with llama.cpp, one sequence,
    at each context: weights (lab.model.weights, exact for the llama-quantize mix) + KV and, for the hybrid, the
    recurrent state (as llama.cpp allocates them) + overhead, against the card's memory."""
    over = int(memory_plan.runtime_overhead(overhead_id)["bytes"])
    rows = []
    for mid in TARGET_MODELS:
        arch = models.stand_in(mid)
        weights = _card_weights(weights_format, arch, mid)
        for d in kv_dtypes:
            for ctx in contexts:
                caches = kvcache.llama_cpp_kv_prediction(arch, ctx, 1, d)["caches"]
                kv = sum(c["size_bytes"] for c in caches)
                state = sum(c["size_bytes"] for c in caches if c["cache"] == "recurrent")
                total = weights + kv + over
                rows.append({"model": mid, "kv_dtype": d, "context_tokens": ctx, "weights_GiB": round(weights / GIB, 2),
                             "kv_GiB": round((kv - state) / GIB, 2), "recurrent_state_GiB": round(state / GIB, 3),
                             "overhead_GiB": round(over / GIB, 2),
                             "total_GiB": round(total / GIB, 2), "fits": total <= device_bytes,
                             "beyond_trained_context": ctx > arch.max_context})
    return rows


def seeds_target(s: Session, card_profile: str, weights_quant: str, kv_dtypes):
    """The seeds' target on one card of `card_profile` (`target_rows`), kept with its chart (`target_chart`): the chart."""
    card = device_bytes(card_profile)
    rows = keep(s, "seeds_target", target_rows(card, weights_quant, kv_dtypes))
    title = f"{weights_quant} weights + KV (llama.cpp) + overhead on one card of {card_profile}"
    return keep(s, "seeds_target_chart", target_chart(rows, card, title))


def longest_context(s: Session, card_profile: str, weights_quant: str, kv_dtypes):
    """`target_max_context_table` on one card of `card_profile`, kept for the record."""
    return keep(s, "longest_context", target_max_context_table(device_bytes(card_profile), weights_quant, kv_dtypes))


def target_max_context_table(device_bytes: int, weights_format: str = "Q4_K_M",
                             kv_dtypes: tuple[str, ...] = ("f16", "q8_0"), overhead_id: str = "llama.cpp-gpu"):
    """Longest single-sequence context (llama.cpp allocation, capped at the trained context) on the card."""
    over = int(memory_plan.runtime_overhead(overhead_id)["bytes"])
    rows = []
    for mid in TARGET_MODELS:
        arch = models.stand_in(mid)
        weights = _card_weights(weights_format, arch, mid)
        row = {"model": mid, "weights_GiB": round(weights / GIB, 2), "trained_context": arch.max_context}
        for d in kv_dtypes:
            budget = device_bytes - weights - over
            row[f"max_context_{d}"] = memory_plan.bisect_max(
                arch.max_context, lambda t: kvcache.llama_cpp_kv_prediction(arch, t, 1, d)["total_bytes"] <= budget)
        rows.append(row)
    return _pd().DataFrame(rows)


def target_chart(rows: list[dict], device_bytes: int, title: str):
    import plotly.graph_objects as go

    fig = go.Figure()
    for (mid, d) in sorted({(r["model"], r["kv_dtype"]) for r in rows}):
        sel = [r for r in rows if r["model"] == mid and r["kv_dtype"] == d]
        fig.add_trace(go.Scatter(x=[r["context_tokens"] for r in sel], y=[r["total_GiB"] for r in sel],
                                 name=f"{mid} (KV {d})", mode="lines+markers",
                                 line={"dash": "solid" if d == "f16" else "dot"}))
    fig.add_hline(y=device_bytes / GIB, line_dash="dash", annotation_text=f"{device_bytes / GIB:.0f} GiB card")
    fig.update_layout(title=title, xaxis_title="context tokens (one sequence)", yaxis_title="GiB",
                      xaxis_type="log", height=440)
    return fig


# ---------------------------------------------------------------- parity with llama.cpp
PARITY_COLUMNS = ["model", "n_ctx", "n_parallel", "type_k", "type_v", "kv_unified", "flash_attn", "cache",
                  "predicted_cells", "reported_cells", "predicted_layers", "reported_layers",
                  "predicted_mib", "reported_mib", "predicted_k_mib", "reported_k_mib",
                  "predicted_v_mib", "reported_v_mib", "error_pct", "match", "buffer"]


def parity_table(rows: list[dict]):
    return _pd().DataFrame(rows, columns=PARITY_COLUMNS)


def parity_checks(rows: list[dict], skip_reason: str | None = None) -> list[Check]:
    """One check per cache llama.cpp reported: pass only when cells, layers, streams and the K, V and total
    MiB it prints are identical to the prediction."""
    if skip_reason:
        return [Check("llama.cpp KV parity", "skip", None, None, skip_reason, PARITY_SOURCE)]
    out = []
    for r in rows:
        run = (f"{r['model']} -c {r['n_ctx']} -np {r['n_parallel']} -ctk {r['type_k']} -ctv {r['type_v']}"
               f"{' -kvu' if r['kv_unified'] else ''}")
        out.append(Check(
            name=f"llama.cpp KV parity: {run} ({r['cache']} cache)", status="pass" if r["match"] else "fail",
            observed=f"{r['reported_mib']} MiB, {r['reported_cells']} cells, {r['reported_layers']} layers"
                     + (f" in {r['buffer']} memory" if r.get("buffer") else ""),
            expected=f"{r['predicted_mib']} MiB, {r['predicted_cells']} cells, {r['predicted_layers']} layers",
            fix="" if r["match"] else (f"the server did not start ({r['error']}): see {r.get('log', 'its log')}"
                                       if r.get("error") else
                                       f"prediction differs from llama.cpp: see {r.get('log', 'the server log')}"),
            source=PARITY_SOURCE))
    return out


def parity_text(parity: list[Check], skip_reason: str | None) -> str:
    """One line under the grid: why it was skipped, or how many caches matched the prediction."""
    if skip_reason:
        return skip_reason
    return f"{sum(c.status == 'pass' for c in parity)} of {len(parity)} caches identical to the prediction"


PARITY_CHART = "KV cache: prediction vs llama.cpp"


def parity_chart(rows: list[dict]):
    """Predicted against reported MiB for every cache; all points on the diagonal means 0 % error. None when no cache
    was measured (a plan-mode run, no llama-server): the chart would be its diagonal alone (`no_parity_chart`)."""
    import plotly.graph_objects as go

    if not any(r.get("reported_mib") is not None for r in rows):
        return None
    fig = go.Figure()
    for model in sorted({r["model"] for r in rows}):
        sel = [r for r in rows if r["model"] == model and r["reported_mib"] is not None]
        fig.add_trace(go.Scatter(
            x=[float(r["predicted_mib"]) for r in sel], y=[float(r["reported_mib"]) for r in sel], mode="markers",
            name=model, marker={"size": 10},
            text=[f"-c {r['n_ctx']} -np {r['n_parallel']} {r['type_k']}/{r['type_v']}{' kvu' if r['kv_unified'] else ''}"
                  f" {r['cache']}" for r in sel]))
    top = max([float(r["predicted_mib"]) for r in rows if r["predicted_mib"]] + [1])
    fig.add_trace(go.Scatter(x=[0, top], y=[0, top], mode="lines", name="identical", meta="guide",
                             line={"dash": "dash", "color": "grey"}))
    fig.update_layout(title="KV cache: lab prediction vs llama.cpp's report (MiB)", xaxis_title="predicted MiB",
                      yaxis_title="llama.cpp reported MiB", height=420)
    return fig


def no_parity_chart(skip_reason: str | None) -> str:
    """The one line said instead of the parity chart when no cache was measured."""
    return f"no chart: no cache was measured against the prediction ({skip_reason or 'the grid ran no cache'})"


def parity_view(parity_fig, skip_reason: str | None):
    """What the notebook shows: the chart, or (printed) the one line saying why there is none."""
    if parity_fig is None:
        print(no_parity_chart(skip_reason))
    return parity_fig


def parity_chart_entry(parity_fig, skip_reason: str | None) -> dict:
    """The record's parity chart, or its one line of why when there is none (report.html shows the line)."""
    if parity_fig is None:
        return {"title": PARITY_CHART, "figure": None, "text": no_parity_chart(skip_reason)}
    return evidence.chart_entry(PARITY_CHART, parity_fig)


# ---------------------------------------------------------------- parity with vLLM, the server beside the plan
def vllm_text(result: dict, parity: list[Check]) -> str:
    """The vLLM comparison in two lines: the prediction's arithmetic and how many checks passed, or why skipped."""
    if result["skipped"]:
        return f"skipped: {result['skipped']}"
    return (f"prediction: {vllm_kv.arithmetic(result)}\nvLLM started in {result['health_s']} s; "
            f"{sum(c.status == 'pass' for c in parity)} of {len(parity)} checks pass")


def vllm_table(result: dict):
    return _pd().DataFrame(result["rows"], columns=vllm_kv.TABLE_COLUMNS)


def served_text(served: dict | None) -> str:
    """Which server's own report section 5 compares with the plan, or why none."""
    if served:
        return f"{served['engine_name']} at {served['base_url']}"
    return "no server reported here: the lab-started server is compared in notebook 04 (its log) and section 3 above"


# ---------------------------------------------------------------- summary, checks, record
def summary(arch: ArchSpec, plan: dict, grid_rows: list[dict], kv_claims: list, skip_reason: str | None) -> dict:
    """The record's summary: the profile's KV numbers and fit, the parity result, the claim verdicts
    (lab.predict.claims ClaimVerdicts of the KV and layer claims: the same verdicts notebook 06 and `lab plan` show)."""
    errors = [abs(r["error_pct"]) for r in grid_rows if r["error_pct"] is not None]
    return {
        "model": arch.name, "architecture": plan["architecture"], "memory_kind": plan["memory_kind"],
        "kv_dtype": plan["kv_dtype"], "kv_bytes_per_token": plan["kv_bytes_per_token"],
        "kv_bytes_total": plan["kv_bytes_total"], "weights_bytes": plan["weights_bytes"], "fits": plan["fits"],
        "max_context_tokens": plan["max_context_tokens"], "max_context_one_sequence": plan["max_context_one_sequence"],
        "max_concurrent_sequences": plan["max_concurrent_sequences"],
        "parity_caches_compared": len(grid_rows), "parity_caches_identical": sum(bool(r["match"]) for r in grid_rows),
        "parity_max_abs_error_pct": max(errors) if errors else None,
        "parity_skipped": skip_reason,
        "parity_buffers": sorted({r["buffer"] for r in grid_rows if r.get("buffer")}),
        "claims": {c.id: c.verdict for c in kv_claims},
    }


def fit_check(plan: dict) -> Check:
    """Does the memory plan fit the profile: weights + overhead + KV per device against the budget."""
    used = plan["weights_bytes_per_device"] + plan["overhead_bytes"] + plan["kv_bytes_per_device"]
    return Check("memory plan fits the profile", "pass" if plan["fits"] else "fail",
                 observed=f"{used:,} bytes", expected=f"≤ {plan['budget_bytes']:,} bytes ({plan['memory_kind']})",
                 fix="; ".join(f["fix"] for f in plan["findings"] if f["severity"] == "error"),
                 source="lab.predict.memory_plan")


def build_record(*, arch: ArchSpec, plan: dict, grid_rows: list[dict], skip_reason: str | None, parity: list[Check],
                 vllm_result: dict, vllm_parity: list[Check], kv_claims: list, target: list[dict], target_max,
                 plan_vs_server: list[dict], served: dict | None, stack_fig, target_fig, parity_fig) -> dict:
    """The 05_kv_cache record: summary, one check per cache and per vLLM quantity, the plan's fit and the plan
    beside the server; the notebook's tables and charts; the raw grid, vLLM comparison, plan and claims."""
    found = parity + vllm_parity + [fit_check(plan)] + endpoint.plan_checks(plan_vs_server)
    return {
        "title": "KV-cache math and memory fit, checked against llama.cpp",
        "summary": {**summary(arch, plan, grid_rows, kv_claims, skip_reason), "vllm_kv_parity": vllm_kv.summary(vllm_result)},
        "checks": [c.to_dict() for c in found],
        "tables": [evidence.table_entry("KV per token and for the profile's context", kv_dtype_table(
                       arch, plan["context_tokens_per_sequence"], plan["parallel_slots"], plan["devices"],
                       split_by=plan.get("split_by", "heads"))),
                   evidence.table_entry("Real configs: KV per token and per sequence (f16) vs a naive calculator",
                                        stand_in_table()),
                   evidence.table_entry("Memory plan", plan_table(plan)),
                   evidence.table_entry("27B-class on one V100 32G (llama.cpp, Q4_K_M): longest context", target_max),
                   evidence.table_entry("KV cache: prediction vs llama.cpp", parity_table(grid_rows)),
                   evidence.table_entry("KV cache: prediction vs vLLM", vllm_result["rows"]),
                   evidence.table_entry("The seeds' KV claims (lab.predict.claims)", claims_views.table(kv_claims)),
                   evidence.table_entry("The seeds' KV claims: arithmetic", claims_views.models_table(kv_claims)),
                   evidence.table_entry("The plan beside what the server reports", plan_vs_server)],
        "charts": [evidence.chart_entry("Memory per device vs context", stack_fig),
                   evidence.chart_entry("27B-class on one V100 32G", target_fig),
                   parity_chart_entry(parity_fig, skip_reason)],
        "architecture": arch.to_dict(), "plan": plan, "kv_grid": grid_rows, "vllm_kv": vllm_result,
        "claims": [v.to_dict() for v in kv_claims], "v100_target": target,
        "plan_vs_server": plan_vs_server, "server_discovery": served,
    }


def record(s: Session):
    """Write records/05_kv_cache.json with its closing text, built (`build_record`) from what the steps kept in
    `s.results` and what follows from them alone, as the notebook shows it; its path."""
    r = s.results
    arch, plan, grid, skip, vllm_result = (r.get(k) for k in (
        "architecture", "plan", "llama_cpp_grid", "llama_cpp_skipped", "vllm_check"))
    grid = grid or []
    return s.record(NAME, build_record(
        arch=arch, plan=plan, grid_rows=grid, skip_reason=skip, parity=parity_checks(grid, skip),
        vllm_result=vllm_result, vllm_parity=vllm_checks(vllm_result), kv_claims=r.get("kv_claims") or [],
        target=r.get("seeds_target") or [], target_max=r.get("longest_context", []),
        plan_vs_server=r.get("plan_vs_server") or [], served=r.get("server"),
        stack_fig=memory_stack_chart(arch, plan), target_fig=r.get("seeds_target_chart"),
        parity_fig=parity_chart(grid)), closing=closing_text)


def what_this_means(s: Session):
    """The closing text as the record keeps it (written by `record`), as Markdown for the notebook's last cell."""
    return session.closing(s, NAME)


def closing_text(record: dict) -> str:
    """A few sentences of Markdown from the written record."""
    s = record["summary"]
    kv_mib = s["kv_bytes_total"] / MIB
    lines = [f"- **{s['model']}** keeps **{s['kv_bytes_per_token']:,} bytes of KV per token** ({s['kv_dtype']}); "
             f"the profile's context needs **{display.fmt(round(kv_mib, 2), 'cache_MiB_per_device')} MiB** of KV "
             f"in {s['memory_kind']} (as the KV-dtype table rounds it), and the plan "
             f"**{'fits' if s['fits'] else 'does not fit'}** (longest context per slot with every slot allocated "
             f"{s['max_context_tokens']:,} tokens"
             + (f", one sequence alone {s['max_context_one_sequence']:,}" if s.get("max_context_one_sequence") else "")
             + f"; up to {s['max_concurrent_sequences']} sequences at this context)."]
    if s["parity_skipped"]:
        lines.append(f"- The llama.cpp parity grid was skipped: {s['parity_skipped']}")
    else:
        lines.append(f"- llama.cpp allocated exactly what the lab predicted for **{s['parity_caches_identical']} of "
                     f"{s['parity_caches_compared']}** caches (largest error {s['parity_max_abs_error_pct']} %), on a GQA "
                     "model, a sliding-window model and a 4-layer synthetic model of Qwen3.8-27B's real per-layer "
                     "shape (its attention KV cache and its Gated DeltaNet recurrent state), across contexts, slot "
                     "counts and KV dtypes — so the same arithmetic can be trusted for the 27B-class configs below.")
    vk = s.get("vllm_kv_parity")
    if vk and vk["skipped"]:
        lines.append(f"- The vLLM comparison was skipped: {vk['skipped']}")
    elif vk:
        lines.append(f"- vLLM reported exactly what the lab predicted for **{vk['identical']} of {vk['compared']}** "
                     f"quantities: **{vk['reported_tokens']:,} tokens** in {vk['reported_blocks']} blocks of "
                     f"{vk['bytes_per_block']:,} bytes (predicted {vk['predicted_tokens']:,} tokens, "
                     f"{vk['predicted_blocks']} blocks) — vLLM allocates whole blocks, so the budget ÷ bytes per "
                     "block, rounded down, is the cache.")
    for cid, verdict in s["claims"].items():
        why = next(c["explanation"] for c in record["claims"] if c["id"] == cid)
        lines.append(f"- Seed claim `{cid}`: **{verdict}** — {why}")
    return "\n".join(lines)
