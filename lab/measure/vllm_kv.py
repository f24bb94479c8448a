"""Notebook 05 on a vLLM profile: the KV-cache prediction against what the real vLLM server reports.

One server start (lab.serving.serve, the command lab.serving.engines builds for the profile), two readings while it runs —
the "<CPU|GPU> KV cache size: N tokens, Maximum concurrency for L tokens per request: X" line of its log
and the `vllm:cache_config_info` labels of /metrics — then stop. The prediction (lab.predict.kvcache) is made
from the model's shape and the profile alone, before the server starts, so the comparison is honest.

Exact from the profile alone where vLLM's KV budget is fixed in advance: the CPU build with VLLM_CPU_KVCACHE_SPACE
(`vllm_cpu_kvcache_gib`). On a GPU vLLM sizes the cache from free memory measured at start-up ("Available KV cache
memory: X GiB"); for a hybrid model (Gated DeltaNet + attention) what follows from that budget is predicted
(lab.predict.vllm_hybrid_kv): the attention block raised to hold one state and the padding (from the shape alone),
the blocks (from the logged budget, to its two decimals), the tokens and max concurrency (from the blocks reported).
A GPU profile of a model without linear layers is still skipped, saying so.
"""
from __future__ import annotations

import math
import time

import httpx

from lab.core import deadline
from lab.core.checks import Check
from lab.core.deadline import Deadline
from lab.predict import kvcache, vllm_hybrid_kv
from lab.serving import engine_logs, engines, serve, vllm_env

SOURCE = "lab.predict.kvcache prediction vs vLLM's start-up log and /metrics (vllm/v1/core/kv_cache_utils.py)"
TABLE_COLUMNS = ["what", "predicted", "reported", "match"]


def llama_grid_skip_reason(profile) -> str | None:
    """Why notebook 05 skips its llama.cpp grid for this profile (a vLLM profile is checked against vLLM; plan mode
    measures nothing: the memory plan above is the answer)."""
    from lab.core import planmode

    if planmode.reason(profile):
        return f"{planmode.reason(profile)}; the memory plan above is predicted from the profile and the model's shape"
    if profile.engine == "vllm":
        return ("vLLM profile: its KV cache is checked against vLLM itself (next section); the llama.cpp grid runs "
                "on llama.cpp profiles such as cpu-default")
    return None


def predicted_max_concurrency(pred: kvcache.VllmKvPrediction) -> float | None:
    """num_blocks / blocks per max_model_len request, as vLLM computes it before printing it with 2 decimals."""
    if not pred.max_model_len:
        return None
    return pred.num_blocks / math.ceil(pred.max_model_len / pred.block_size)


def compare_with_reported(pred: kvcache.VllmKvPrediction, log_tokens: int | None, metrics: dict | None) -> list[dict]:
    """Rows of (what, predicted, reported, match) for the notebook and the record."""
    rows = [{"what": "KV tokens (start-up log)", "predicted": pred.tokens, "reported": log_tokens}]
    if metrics:
        rows += [
            {"what": "KV tokens (/metrics kv_cache_size_tokens)", "predicted": pred.tokens,
             "reported": metrics.get("kv_cache_size_tokens")},
            {"what": "KV blocks (/metrics num_gpu_blocks)", "predicted": pred.num_blocks,
             "reported": metrics.get("num_gpu_blocks")},
            {"what": "block size (/metrics)", "predicted": pred.block_size, "reported": metrics.get("block_size")},
            {"what": "KV bytes (/metrics kv_cache_memory_bytes)", "predicted": pred.kv_bytes,
             "reported": metrics.get("kv_cache_memory_bytes")},
        ]
    for row in rows:
        row["match"] = row["reported"] is not None and row["reported"] == row["predicted"]
    return rows


def compare(pred: kvcache.VllmKvPrediction, log_text: str, metrics_text: str) -> list[dict]:
    """Prediction vs report, row by row: tokens (log, /metrics), blocks, block size, bytes, concurrency."""
    log = engine_logs.kv_cache_report_from_log(log_text) or {}
    metrics = vllm_env.cache_config_from_metrics(metrics_text)
    rows = compare_with_reported(pred, log.get("tokens"), metrics)
    conc = predicted_max_concurrency(pred)
    if conc is not None:
        reported = log.get("max_concurrency")
        rows.append({"what": f"max concurrency at {pred.max_model_len} tokens (log, 2 decimals)",
                     "predicted": round(conc, 2), "reported": reported,
                     "match": reported is not None and round(conc, 2) == reported})
    return rows


def gpu_hybrid(profile, arch) -> bool:
    """A GPU vLLM profile (no fixed CPU budget) of a hybrid model: the case compare_hybrid checks."""
    return (arch is not None and profile.vllm_cpu_kvcache_gib is None and bool(arch.linear_layers)
            and not arch.local_layers)


def compare_hybrid(profile, arch, log_text: str, metrics_text: str) -> tuple[dict, list[dict]]:
    """(prediction, rows) for a GPU hybrid: block size and padding from the shape; blocks from the logged budget
    (± what its 2-decimal GiB spans); tokens and max concurrency from the blocks vLLM reports."""
    log = engine_logs.parse_vllm_log(log_text)
    metrics = vllm_env.cache_config_from_metrics(metrics_text) or {}
    dtype = kvcache.vllm_kv_dtype_bytes(profile)
    # prefix caching (on by default for a generating model) puts a model without Mamba prefix caching (Qwen3.5/3.8)
    # in "align" mode: two state blocks a request (model_executor/models/config.py MambaModelConfig)
    mode = metrics.get("mamba_cache_mode")
    if mode not in ("none", "align"):
        mode = "none" if metrics.get("enable_prefix_caching") is False else "align"
    tp = profile.tensor_parallel_size
    budget_gib = log.get("kv_cache_memory_gib")
    exact_bytes = metrics.get("kv_cache_memory_bytes") if isinstance(metrics.get("kv_cache_memory_bytes"), int) else None
    budget = exact_bytes or (int(budget_gib * 2**30) if budget_gib is not None else 0)
    pred = vllm_hybrid_kv.predict(budget, arch, dtype, profile.context_tokens, tp=tp, mamba_cache_mode=mode)
    slack = 0 if exact_bytes or budget_gib is None else -(-int(0.005 * 2**30) // (pred.page_bytes * pred.group_size))
    reported_blocks = metrics.get("num_gpu_blocks")
    rows = [{"what": "attention block size (/metrics block_size)", "predicted": pred.block_size,
             "reported": metrics.get("block_size")},
            {"what": "Gated DeltaNet page padding % (log)", "predicted": pred.padding_pct,
             "reported": log.get("mamba_padding_pct")}]
    blocks_match = isinstance(reported_blocks, int) and abs(reported_blocks - pred.num_blocks) <= slack
    rows.append({"what": f"KV blocks (/metrics num_gpu_blocks) from the logged budget {budget_gib} GiB"
                 + (f" (± {slack}: the log's 2 decimals)" if slack else ""),
                 "predicted": pred.num_blocks, "reported": reported_blocks, "match": blocks_match})
    if isinstance(reported_blocks, int):  # what the reported blocks hold, vLLM's own arithmetic
        at = vllm_hybrid_kv.predict(reported_blocks * pred.page_bytes * pred.group_size, arch, dtype,
                                    profile.context_tokens, tp=tp, mamba_cache_mode=mode)
        kv = engine_logs.kv_cache_report_from_log(log_text) or {}
        rows += [{"what": "KV tokens (start-up log) from the blocks reported", "predicted": at.tokens,
                  "reported": kv.get("tokens")},
                 {"what": f"max concurrency at {profile.context_tokens} tokens (log, 2 decimals)",
                  "predicted": round(at.max_concurrency, 2), "reported": kv.get("max_concurrency")}]
    for row in rows:  # exact matches; the blocks row carries its own (± the log's rounding)
        row.setdefault("match", row["reported"] is not None and row["reported"] == row["predicted"])
    return {**pred.as_dict(), "mamba_cache_mode": mode, "budget_source":
            "/metrics kv_cache_memory_bytes" if exact_bytes else "log: Available KV cache memory (GiB, 2 decimals)",
            "source": vllm_hybrid_kv.SOURCE}, rows


def verify(profile, arch, log_dir, name: str = "05_vllm_kv") -> dict:
    """Predict, start the profile's vLLM, read its log line and /metrics, stop it, compare.

    Returns {"skipped": reason or None, "prediction", "rows", "log", "metrics", "command", "health_s",
    "stop", "seconds"}; never raises for a server that cannot start here (the reason says why)."""
    out: dict = {"skipped": None, "prediction": None, "rows": [], "log": None, "metrics": None,
                 "command": None, "health_s": None, "stop": None, "seconds": None}
    if profile.engine != "vllm":
        out["skipped"] = f"engine {profile.engine}: this check is for vLLM profiles"
        return out
    if profile.endpoint_url:
        out["skipped"] = ("endpoint profile: the lab starts no vLLM here; what the running server reports (/metrics) "
                          "is set beside the plan in section 5")
        return out
    hybrid = gpu_hybrid(profile, arch)
    try:
        pred = None if hybrid else kvcache.vllm_kv_for_profile(profile, arch)
        if hybrid:
            vllm_hybrid_kv.layout(arch, kvcache.vllm_kv_dtype_bytes(profile), tp=profile.tensor_parallel_size)
    except ValueError as exc:
        out["skipped"] = str(exc)
        return out
    out["prediction"] = pred.as_dict() if pred else None
    cmd = engines.build_command(profile, installed_version=engines.installed_version(profile), port=serve.free_port())
    out["command"] = cmd.shell(multiline=False)
    reason = serve.why_not_startable(profile, cmd)
    if reason:
        out["skipped"] = reason
        return out
    t0 = time.monotonic()
    with serve.start(cmd, log_dir=log_dir, name=name) as srv:
        with httpx.Client(trust_env=False, headers=srv.headers()) as client:
            metrics_text = deadline.get(client, "GET", srv.base_url + "/metrics", Deadline(30, "GET /metrics")).text
        out["health_s"] = srv.health_s
        out["stop"] = srv.stop()
        log_text = srv.log_text()
    out["seconds"] = round(time.monotonic() - t0, 1)
    out["log"] = engine_logs.kv_cache_report_from_log(log_text)
    out["metrics"] = vllm_env.cache_config_from_metrics(metrics_text)
    if hybrid:
        out["prediction"], out["rows"] = compare_hybrid(profile, arch, log_text, metrics_text)
    else:
        out["rows"] = compare(pred, log_text, metrics_text)
    return out


def checks(result: dict) -> list[Check]:
    """One check per compared quantity; pass only when vLLM reports exactly the predicted value."""
    if result["skipped"]:
        return [Check("vLLM KV parity", "skip", None, None, result["skipped"], SOURCE)]
    out = [Check(f"vLLM KV parity: {r['what']}", "pass" if r["match"] else "fail", r["reported"], r["predicted"],
                 "" if r["match"] else "the prediction differs from vLLM: read the server log in logs/", SOURCE)
           for r in result["rows"]]
    stop = result.get("stop") or {}
    clean = bool(stop) and not stop.get("left_running")
    out.append(Check("vLLM stopped, no process left", "pass" if clean else "fail", stop.get("left_running"), [],
                     "" if clean else "kill the pids listed", "lab.serving.serve"))
    return out


def summary(result: dict) -> dict:
    """What the 05 record keeps of the vLLM comparison."""
    pred = result.get("prediction") or {}
    rows = result["rows"]
    return {"skipped": result["skipped"], "compared": len(rows), "identical": sum(bool(r["match"]) for r in rows),
            "predicted_tokens": pred.get("tokens"), "predicted_blocks": pred.get("num_blocks"),
            "reported_tokens": (result.get("log") or {}).get("tokens"),
            "reported_blocks": (result.get("metrics") or {}).get("num_gpu_blocks"),
            "bytes_per_block": pred.get("bytes_per_block") or (pred.get("page_bytes") or 0) * (pred.get("group_size") or 0)
            or None, "server_seconds": result.get("seconds")}


def arithmetic(result: dict) -> str:
    """The prediction written out, for the notebook."""
    p = result.get("prediction")
    if not p:
        return "no prediction"
    if "page_bytes" in p:  # a GPU hybrid (compare_hybrid)
        a = vllm_hybrid_kv.KERNEL_BLOCK_ALIGNMENT
        return (f"attention block = {a} · cdiv({p['state_bytes']:,} B Gated DeltaNet state, {a} × {p['token_page_bytes']:,} B "
                f"per token) = {p['block_size']} tokens; page {p['page_bytes']:,} B (state padded "
                f"{p['padding_pct']} %); {p['groups']} groups of {p['group_size']} layers; {p['kv_bytes']:,} B "
                f"// {p['page_bytes']:,} // {p['group_size']} = {p['num_blocks']} blocks; a {p['max_model_len']:,}-token "
                f"request takes {p['blocks_per_request']} blocks ({p['mamba_cache_mode']} mode)")
    return (f"{p['kv_bytes']:,} B // ({p['n_layers']} layers × 2 (K, V) × {p['n_kv_heads']} KV heads × {p['head_dim']} "
            f"× {p['dtype_bytes']} B × {p['block_size']} tokens per block = {p['bytes_per_block']:,} B) "
            f"= {p['num_blocks']} blocks = {p['block_tokens']:,} tokens")
