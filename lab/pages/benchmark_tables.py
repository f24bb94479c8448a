"""Notebook 06's tables (lab.pages.benchmark, the notebook's page, shows them and keeps them in its record): the
roofline's inputs, the calibration runs, every request, the sweep and its repetitions, llama-bench, served ÷
in-process, one stream's decode speed three ways, memory and energy, the client's capacity; and a run summary as one
flat row by the schema's names (lab/data/fields.yaml) — all from numbers measured or predicted elsewhere."""
from __future__ import annotations

from lab.core import display, fields
from lab.core.display import sig3
from lab.measure import gpumon, metrics
from lab.measure.loadgen import RunResult
from lab.predict import roofline


# ---------------------------------------------------------------- the tables shown between the steps
def roofline_rows(rl: dict) -> list[dict]:
    """The roofline's inputs and results as (quantity, value, where it comes from) rows."""
    def gb(x):
        return None if x is None else display.rounded(x / 1e9)

    return [
        {"quantity": "bandwidth (GB/s)", "value": rl.get("bandwidth_gb_s"), "from": rl.get("bandwidth_source") or rl.get("reason")},
        {"quantity": "weights read per token (GB)", "value": gb(rl.get("weights_bytes")), "from": rl.get("weights_how")},
        {"quantity": f"KV read per token at {rl.get('context_tokens')} tokens (GB)", "value": gb(rl.get("kv_bytes_per_seq")),
         "from": "lab.predict.kvcache"},
        {"quantity": "decode ceiling, one stream (tok/s)", "value": rl.get("decode_ceiling_tok_s"), "from": "bandwidth ÷ bytes per token"},
        {"quantity": "efficiency (calibrated)", "value": rl.get("efficiency"), "from": rl.get("calibration_id")},
        {"quantity": "predicted decode, one stream (tok/s)", "value": rl.get("predicted_decode_tok_s"),
         "from": "ceiling × efficiency"},
    ] + [{"quantity": f"{r['what']} (tok/s)", "value": r["tok_s"], "from": f"{r['uncertainty']}; {r['basis']}"}
         for r in rl.get("plan_speeds") or []]  # plan mode (lab.predict.plan_speeds): plain and MTP, with uncertainty


def calibration_table():
    """The measured runs the roofline's efficiency is calibrated on (lab/data/calibration.yaml), with their sources."""
    import pandas as pd

    cols = ["id", "device", "engine", "mode", "batch", "tok_s", "efficiency_vs_copy", "efficiency_vs_datasheet",
            "quality", "source"]
    return pd.DataFrame([c.row() for c in roofline.calibrations()])[cols]


def requests_table(runs: list[RunResult]):
    """Every request of the one-stream level, or one line when nothing was measured."""
    return display.show(requests_frame(runs[0]) if runs else [], empty="benchmark skipped")


def sweep_table(summaries: list[dict]):
    return display.show(sweep_frame(summaries), empty="benchmark skipped")


REPETITION_COLUMNS = ("duration_s", "output_throughput", "stream_decode_tok_s", "decode_tok_s_summed", "steady_decode_tok_s",
                      "full_concurrency_fraction", "ttft_p50_ms")


def repetitions_table(summaries: list[dict]):
    """Every repetition of every level (its own figures), then each level's mean ± sd and range, and the warm-up."""
    r = display.rounded
    out = []
    for s in summaries:
        for rep in s.get("repetitions") or []:
            out.append({"streams": s.get("concurrency"), "repetition": rep["repetition"], "requests": rep["requests"],
                        **{k: r(rep.get(k), k) for k in REPETITION_COLUMNS}})
        sp = (s.get("spread") or {}).get("output_throughput") or {}
        if sp.get("n"):
            warm = s.get("warmup") or {}
            out.append({"streams": s.get("concurrency"), "repetition": "mean ± sd [min–max]", "requests": s["requests"],
                        "duration_s": r(s["duration_s"], "duration_s"),
                        "output_throughput": f"{sig3(sp['mean'])} ± {sig3(sp['sd']) if sp['sd'] is not None else '—'} "
                                             f"[{sig3(sp['min'])}–{sig3(sp['max'])}]",
                        "stream_decode_tok_s": r(s["stream_decode_tok_s"]),
                        "decode_tok_s_summed": r(s.get("decode_tok_s_summed")),
                        "steady_decode_tok_s": r(s.get("steady_decode_tok_s")),
                        "full_concurrency_fraction": r(s.get("full_concurrency_fraction")),
                        "ttft_p50_ms": r(s["ttft_ms"]["p50"]),
                        "warm-up": f"{len(warm.get('rounds') or [])} round(s), "
                                   + ("steady" if warm.get("steady") else "not steady") if warm else None})
    return display.show(out, empty="benchmark skipped")


def llama_bench_rows(result: dict | None) -> list[dict]:
    """llama-bench's pp and tg: the median the lab reports (lab.model.llama_bench says why), its mean ± sd, the samples
    (no rows when it did not run)."""
    result = result or {}
    return [{"test": r["test"], "tok_s (median)": r["tok_s"], "tok_s_mean": r["tok_s_mean"], "tok_s_sd": r["tok_s_sd"],
             "samples_tok_s": r["samples_tok_s"]} for r in (result.get("pp"), result.get("tg")) if r]


def yardstick_table(rows: list[dict]):
    """Served ÷ in-process per concurrency level (lab.measure.yardstick.rows), rounded for reading."""
    r = display.rounded
    return display.show([{"streams": x["concurrency"], "yardstick": x["yardstick"], "served tok/s": r(x["served_tok_s"]),
                          "in-process tok/s": r(x["in_process_tok_s"]), "served ÷ in-process": r(x["served_over_in_process"]),
                          "steady tok/s": r(x.get("steady_tok_s")), "steady ÷ in-process": r(x.get("steady_over_in_process")),
                          "time at N streams": r(x.get("full_concurrency_fraction")),
                          "served output tok/s": r(x["served_output_tok_s"]),
                          "in-process output tok/s": r(x["in_process_output_tok_s"]),
                          "output ratio": r(x["output_ratio"]), "extra ms per step": r(x["extra_ms_per_step"]),
                          "limited by": x["limited_by"]} for x in rows], empty="nothing to compare")


def decode_speeds_table(single: dict | None, in_process_tok_s: float | None, rl: dict):
    """One stream's decode speed three ways (llama-bench, what the server reports, what the client measured) and
    the roofline's ceiling and prediction, each ÷ the in-process speed."""
    import pandas as pd

    tg = in_process_tok_s
    speeds = [("llama-bench tg (in-process)", tg),
              ("server-reported (timings)", single["server_decode_tok_s"] if single else None),
              ("client-measured (served)", single["stream_decode_tok_s"] if single else None),
              ("roofline ceiling", rl["decode_ceiling_tok_s"]),
              ("calibrated prediction", rl["predicted_decode_tok_s"])]
    return pd.DataFrame([{"decode speed, one stream": what, "tok/s": tok_s, "÷ in-process": metrics.served_ratio(tok_s, tg)}
                         for what, tok_s in speeds])


def resource_windows(summaries: list[dict], runs: list[RunResult]) -> dict[str, dict]:
    """The NVML/RSS window of each concurrency level, named by its streams."""
    return {f"{s.get('concurrency')} streams": r.resources for s, r in zip(summaries, runs)}


def resources_table(summaries: list[dict], runs: list[RunResult]):
    import pandas as pd

    return pd.DataFrame(gpumon.rows(resource_windows(summaries, runs)))


def capacity_rows(capacity: dict) -> list[dict]:
    flat, paced = capacity["flat_out"], capacity["paced"]
    return [{"measure": "concurrent streams served", "value": flat["successes"], "target": "≥ 64"},
            {"measure": "tokens parsed per second (flat out)", "value": flat["parsed_tok_s"], "target": ""},
            {"measure": "tokens parsed per client CPU second", "value": flat["tok_per_client_cpu_s"], "target": "≥ 5000"},
            {"measure": f"ITL mean at {capacity['paced_interval_ms']:g} ms pacing (ms)", "value": paced["itl_ms"]["mean"],
             "target": f"{capacity['paced_interval_ms']:g}"},
            {"measure": "added ITL, mean (ms): client ITL − source send gap", "value": capacity["added_itl_ms_mean"],
             "target": "≤ 1"},
            {"measure": "added ITL, p50 (ms)", "value": capacity["added_itl_ms"]["p50"], "target": ""},
            {"measure": "added ITL, p99 (ms)", "value": capacity["added_itl_ms_p99"], "target": ""}]


# ---------------------------------------------------------------- a run summary as rows
def summary_row(summary: dict) -> dict:
    """One flat table row of a run's summary, by the schema's names (lab/data/fields.yaml), rounded for reading."""
    def r(key):
        return display.rounded(summary.get(key), key)

    def stat(name, which):  # ttft_ms p50 → ttft_p50_ms
        return {fields.flat(name, which): display.rounded((summary.get(name) or {}).get(which), name)}

    v = summary["validity"]
    return {"concurrency": summary.get("concurrency"), "requests": summary["requests"],
            "successes": summary["successes"], "failures": summary["failures"], "duration_s": r("duration_s"),
            "output_throughput": r("output_throughput"), "stream_decode_tok_s": r("stream_decode_tok_s"),
            "decode_tok_s_summed": r("decode_tok_s_summed"), "steady_decode_tok_s": r("steady_decode_tok_s"),
            "full_concurrency_fraction": r("full_concurrency_fraction"),
            "output_throughput_sd": display.rounded(((summary.get("spread") or {}).get("output_throughput") or {}).get("sd")),
            "reps": len(summary.get("repetitions") or []) or None, "server_decode_tok_s": r("server_decode_tok_s"),
            **stat("ttft_ms", "p50"), **stat("ttft_ms", "p99"), **stat("tpot_ms", "p50"), **stat("itl_ms", "p50"),
            **stat("itl_ms", "p99"), **stat("e2el_ms", "p50"),
            "prompt_tokens_mean": r("prompt_tokens_mean"), "cached_fraction": r("cached_fraction"),
            "joules_per_token": r("joules_per_token"),
            "peak_vram_mib": r("peak_vram_mib"), "mean_power_w": r("mean_power_w"),
            "peak_host_rss_mib": r("peak_host_rss_mib"),
            "valid": v["valid"], "why_not": "; ".join(v["reasons"] + v["warnings"])}


def sweep_frame(summaries: list[dict]):
    import pandas as pd

    return pd.DataFrame([summary_row(s) for s in summaries])


def requests_frame(run: RunResult):
    """Every request of a run: start, TTFT, E2EL, tokens, error — for a closer look."""
    import pandas as pd

    return pd.DataFrame([{"index": r.index, "repetition": r.repetition, "success": r.success, "start_s": r.start_s, "ttft_s": r.ttft_s,
                          "e2el_s": r.e2el_s, "chunks": len(r.chunk_times_s), "output_tokens": r.output_tokens,
                          "prompt_tokens": r.prompt_tokens, "cached_tokens": r.cached_tokens, "error": r.error}
                         for r in run.results])
