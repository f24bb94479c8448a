"""Notebook 06's benchmark around the load itself: the in-process reference (llama-bench for the profile's
model and threads), the client's own capacity (against lab.measure.bench_source), whether other work shared the
machine, and the benchmark's verdicts over all of it (`bench_checks`).

The load is lab.measure.loadgen, its arithmetic lab.measure.metrics, the tables, charts, record and closing
text lab.pages.benchmark.
"""
from __future__ import annotations

import time

from lab.core import evidence, paths
from lab.core.checks import Check
from lab.measure import llama_batched_bench
from lab.model import llama_bench
from lab.serving import endpoint
from lab.measure import bench_source, loadgen, metrics


# ================================================================ in-process speed: llama-bench
def in_process_for(profile, depth: int, reps: int = 3) -> tuple[dict | None, str | None]:
    """llama-bench for the profile's own model, threads and GPU layers, at pp<bench_prompt_tokens> and
    tg<bench_output_tokens> at context depth `depth`; (None, why) when this machine cannot run it.
    The result is lab.model.llama_bench.run's: its `tok_s` is the median of the `reps` repetitions."""
    model, why = llama_cpp_model(profile, "llama-bench")
    if why:
        return None, why
    result = llama_bench.run(model, threads=profile.threads, n_prompt=profile.bench_prompt_tokens,
                             n_gen=profile.bench_output_tokens, depth=depth, reps=reps,
                             n_gpu_layers=profile.n_gpu_layers if profile.gpu_count > 0 else None)
    return result, None


def llama_cpp_model(profile, tool: str):
    """(model path, None) when this machine can run llama.cpp's `tool` on the profile's model, else (None, why)."""
    from lab.core import planmode

    if planmode.reason(profile):
        return None, f"{planmode.reason(profile)}; {tool} would run on the profile's machine"
    if profile.engine not in ("llama.cpp", "llama-cpp-python"):
        return None, f"{tool} measures llama.cpp only; this profile serves with {profile.engine}"
    if profile.endpoint_url:
        if not endpoint.is_loopback(profile.endpoint_url):
            return None, (f"the server runs on another machine ({profile.endpoint_url}): {tool} there "
                          "(same model file and threads) gives its in-process speed")
        if not profile.model_file:
            return None, "endpoint profile without model_file: the lab does not know which file the server loaded"
    if profile.gpu_count > 0 and len(evidence.gpu_summary()["gpus"]) < profile.gpu_count:
        return None, f"profile {profile.name} needs {profile.gpu_count} GPU(s); this machine has fewer"
    try:
        model = paths.model_path(profile.model_file) if profile.model_file else None
        paths.tool(tool)  # located only to give a clear reason when set-up has not built it
    except Exception as exc:
        return None, str(exc)
    if model is None or not model.is_file():
        return None, f"model file {model} not found"
    return model, None


def batched_for(profile, server_argv, levels: list[int], n_prompt: int, reps: int = 1, env: dict | None = None,
                log=None) -> tuple[dict | None, str | None]:
    """llama-batched-bench (lab.measure.llama_batched_bench) for the profile's model at the served benchmark's
    concurrency `levels`, `n_prompt` prompt tokens (the served requests' length) and the profile's output length,
    with the llama-server command's own shared settings (threads, -ngl, KV type, -fa, batch sizes, GPU split);
    (None, why) when this machine cannot run it."""
    model, why = llama_cpp_model(profile, "llama-batched-bench")
    if why:
        return None, why
    try:
        return llama_batched_bench.run(model, n_prompt=n_prompt, n_gen=profile.bench_output_tokens,
                                       n_parallel=levels, reps=reps,
                                       flags=llama_batched_bench.shared_flags(server_argv), env=env or None,
                                       log=log), None
    except llama_batched_bench.BatchedBenchError as exc:
        return None, str(exc)


# ================================================================ the client's own capacity
def client_capacity(streams: int = 64, tokens_per_stream: int = 200, paced_interval_ms: float = 20.0,
                    paced_tokens: int = 50) -> dict:
    """How much load this client can generate and time, against lab.measure.bench_source (a local SSE server
    in its own process, sending OpenAI-style chunks): `streams` concurrent streams flat out (parsed
    tok/s, client CPU seconds per 1000 tokens), then paced at one chunk every `paced_interval_ms` per
    stream (the ITL the client measured minus the gap between the source's own sends, chunk by chunk =
    what the client and the socket add). Targets: ≥ 64 streams, ≥ 5,000 tok/s parsed on one core,
    ≤ 1 ms added to ITL."""
    out = {"streams": streams, "tokens_per_stream": tokens_per_stream, "paced_interval_ms": paced_interval_ms}
    with bench_source.running() as base_url:
        for mode, interval, tokens in (("flat_out", 0.0, tokens_per_stream), ("paced", paced_interval_ms, paced_tokens)):
            target = loadgen.Target(f"{base_url}/i{interval:g}", model="source", max_tokens=tokens, ignore_eos=False)
            prompts = loadgen.make_prompts(streams + 1, 4, seed=1)
            run = loadgen.run_load(target, prompts, loadgen.LoadSpec(concurrency=streams, max_requests=streams, warmup_requests=1))
            s = metrics.summarise(run.results, run.duration_s)
            tokens_done = sum(r.output_tokens or 0 for r in run.results if r.success)
            out[mode] = {"successes": s["successes"], "failures": s["failures"], "duration_s": run.duration_s,
                         "tokens": tokens_done, "parsed_tok_s": tokens_done / run.duration_s if run.duration_s else None,
                         "client_cpu_s": run.client_cpu_s,
                         "client_cpu_ms_per_1000_tok": 1e6 * run.client_cpu_s / tokens_done if tokens_done else None,
                         "tok_per_client_cpu_s": tokens_done / run.client_cpu_s if run.client_cpu_s else None,
                         "itl_ms": s["itl_ms"], "errors": s["errors"]}
            if mode == "paced":  # client ITL minus the source's own send gap, chunk by chunk
                added = [itl * 1000 - gap for r in run.results if r.success and r.server_timings
                         for itl, gap in zip(r.itl_s, r.server_timings.get("send_gaps_ms") or [])]
                out["added_itl_ms"] = {"mean": sum(added) / len(added) if added else None,
                                       "p50": metrics.percentile(added, 50), "p99": metrics.percentile(added, 99),
                                       "max": max(added) if added else None, "n": len(added)}
    out["added_itl_ms_mean"] = out["added_itl_ms"]["mean"]
    out["added_itl_ms_p99"] = out["added_itl_ms"]["p99"]
    out["targets"] = {"streams": 64, "tok_per_client_cpu_s": 5000, "added_itl_ms": 1.0}
    flat = out["flat_out"]
    out["meets_targets"] = (flat["successes"] >= 64 and (flat["tok_per_client_cpu_s"] or 0) >= 5000
                            and out["added_itl_ms_mean"] is not None and out["added_itl_ms_mean"] <= 1.0)
    return out


# ================================================================ was the machine quiet?
def cpu_snapshot(server_pid: int | None = None) -> dict:
    """CPU seconds so far: the whole machine's busy time, this process's, and the server's (with its
    children). Two snapshots around a run tell how much *other* work shared the cores (`contention`)."""
    import psutil

    t = psutil.cpu_times()
    busy = t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0) + getattr(t, "steal", 0)
    server = None
    if server_pid:
        try:
            proc = psutil.Process(server_pid)
            c = proc.cpu_times()
            server = c.user + c.system + c.children_user + c.children_system  # children_*: exited ones only
            # live children count too: vLLM's API server does little itself, its EngineCore and worker decode
            for child in proc.children(recursive=True):
                try:
                    cc = child.cpu_times()
                    server += cc.user + cc.system
                except psutil.Error:
                    pass
        except psutil.Error:
            server = None
    return {"wall": time.monotonic(), "machine_busy_s": busy, "client_s": time.process_time(), "server_s": server,
            "cpus": psutil.cpu_count()}


def contention(before: dict, after: dict) -> dict:
    """CPU time used by processes other than this client and the server between two snapshots, as
    cores' worth of work: on a 2-core box, 0.5 means a quarter of the machine was busy with something else."""
    wall = after["wall"] - before["wall"]
    machine = after["machine_busy_s"] - before["machine_busy_s"]
    client = after["client_s"] - before["client_s"]
    server = (after["server_s"] - before["server_s"]) if after["server_s"] is not None and before["server_s"] is not None else None
    others = machine - client - (server or 0)
    return {"wall_s": wall, "cpus": after["cpus"], "machine_busy_s": machine, "client_s": client, "server_s": server,
            "others_s": max(others, 0.0), "others_cores": max(others, 0.0) / wall if wall > 0 else None}


# ================================================================ the verdicts
QUIET_CORES = 0.1  # other processes' CPU use during a sweep, in cores, above which its speeds are the machine's, not the server's


def machine_busy(busy: dict | None) -> str | None:
    """Why a sweep's speeds are not the server's ("machine busy: 1.22 cores of other work during the 40 s sweep"), or
    None when the machine was quiet (or nobody measured it): the cause a level that failed on a busy machine shows
    first (lab.measure.bench.contention)."""
    if not busy or busy.get("others_cores") is None or busy["others_cores"] <= QUIET_CORES:
        return None
    return (f"machine busy: {busy['others_cores']:.2f} cores of other work during the {busy['wall_s']:.0f} s sweep "
            f"(≤ {QUIET_CORES:.2f} is quiet)")


def bench_checks(summaries: list[dict], ratio: float | None, ceiling_tok_s: float | None,
                 capacity: dict | None, skip_reason: str | None = None, busy: dict | None = None,
                 queue: list[dict] | None = None) -> list:
    """The benchmark's verdicts as lab.core.checks.Check: each run valid, served ≈ in-process, measured
    below the roofline, and the client fast enough to measure what it measures."""
    out = []
    if skip_reason:
        out.append(Check("benchmark ran", "skip", "skipped", "a server to measure", skip_reason))
    busy_cause = machine_busy(busy)
    for s in summaries:
        v = s["validity"]
        seen = f"{s['successes']}/{s['requests']} ok in {s['duration_s']:.1f} s"
        why = "; ".join(v["reasons"] + v["warnings"])
        if not v["valid"] and busy_cause:  # the cause first: the machine, not the server, failed this level
            out.append(Check(f"run at concurrency {s.get('concurrency')} valid", "warn", f"invalid: machine busy ({seen})",
                             "valid run", f"{busy_cause}: rerun when the machine is idle (what this level hit: {why})",
                             "lab.measure.metrics.validity; lab.measure.bench.contention (psutil CPU times)"))
            continue
        out.append(Check(f"run at concurrency {s.get('concurrency')} valid", "pass" if v["valid"] and not v["warnings"]
                         else ("warn" if v["valid"] else "fail"), seen, "valid run", why,
                         "lab.measure.metrics.validity (MLPerf-loadgen style)"))
    for s in summaries:
        warm = s.get("warmup")
        if not warm or not warm.get("rounds"):
            continue
        last = warm["rounds"][-1]["change"]
        out.append(Check(f"concurrency {s.get('concurrency')}: warmed up to a steady speed", "pass" if warm["steady"] else "warn",
                         f"{len(warm['rounds'])} round(s), last change " + ("—" if last is None else f"{last:.1%}"),
                         f"two rounds within {warm['tolerance']:.0%} (≤ {warm['max_rounds']} rounds)",
                         "" if warm["steady"] else "the speed still moved between warm-up rounds: the first repetition "
                         "may be slower than the rest (compare the repetitions); other work on the machine keeps it moving, "
                         "and so does llama-server with more slots than streams on a hybrid model: a round whose requests "
                         "land in non-contiguous slots decodes slower (llama.cpp issue #25840; the H100's 4-stream warm-up "
                         "of 2026-12-07 went 116 / 83 / 116 tok/s so)",
                         "lab.measure.load_levels.warm_up"))
    if busy and busy.get("others_cores") is not None:
        quiet = busy["others_cores"] <= QUIET_CORES
        out.append(Check("machine quiet during the sweep", "pass" if quiet else "warn",
                         f"{busy['others_cores']:.2f} cores of other work", "≤ 0.10 cores",
                         "" if quiet else f"other processes used {busy['others_s']:.1f} CPU s during the "
                         f"{busy['wall_s']:.0f} s sweep on {busy['cpus']} cores: every speed here is lower than this "
                         "machine can do; rerun when it is idle", "lab.measure.bench.contention (psutil CPU times)"))
    for q in queue or []:
        if q["queued"] is None:
            continue
        out.append(Check(f"concurrency {q['concurrency']}: requests batched, not queued", "warn" if q["queued"] else "pass",
                         f"TTFT +{q['extra_wait_ms']:.0f} ms (serial server: +{q['serial_wait_ms']:.0f} ms); "
                         f"throughput ×{q['throughput_gain']:.2f}",
                         f"extra TTFT < {metrics.QUEUED_WAIT_FRACTION:g} × serial wait, or throughput ≥ ×{metrics.QUEUED_MAX_GAIN:g}",
                         "" if not q["queued"] else "the server runs one request at a time: concurrent users wait in line. "
                         "Ollama: OLLAMA_NUM_PARALLEL=4 ollama serve; llama-server: -np 4 (each slot gets -c ÷ np tokens); "
                         "vLLM batches by default (--max-num-seqs)",
                         "lab.measure.metrics.queueing; https://docs.ollama.com/faq (concurrent requests, OLLAMA_NUM_PARALLEL)"))
    single = summaries[0]["stream_decode_tok_s"] if summaries else None
    tg = single / ratio if single and ratio else None
    reach = metrics.reachable_ratio(tg)
    cost, cost_source = metrics.served_cost_s()
    if ratio is None:
        out.append(Check("served ÷ in-process decode", "skip", "unknown", f"≥ {metrics.SERVED_RATIO_TARGET}",
                         "needs both a served single stream and llama-bench" + (f" ({skip_reason})" if skip_reason else ""),
                         "lab.measure.metrics.served_ratio"))
    elif reach < metrics.SERVED_RATIO_TARGET:
        out.append(Check("served ÷ in-process decode", "skip", round(ratio, 3), f"≥ {metrics.SERVED_RATIO_TARGET} (not reachable here)",
                         f"the target does not apply to a model this fast: llama-server's fixed ≈ {cost * 1e3:.2f} ms per "
                         f"token caps the ratio at {reach:.2f} at {tg:.0f} tok/s in-process; it applies below "
                         f"{metrics.max_tok_s_for_target():.0f} tok/s (a 27B on a V100)",
                         f"lab/data/served_overhead.yaml: {cost_source}"))
    else:
        out.append(Check("served ÷ in-process decode", "pass" if ratio >= metrics.SERVED_RATIO_TARGET else "warn",
                         round(ratio, 3), f"≥ {metrics.SERVED_RATIO_TARGET}",
                         "" if ratio >= metrics.SERVED_RATIO_TARGET else
                         "compare the server-reported decode speed (timings): when it equals the client's, the gap is "
                         "inside llama-server, not HTTP or this client; other work on the machine lowers it too "
                         "(see 'machine quiet during the sweep')", f"lab/data/served_overhead.yaml: {cost_source}"))
    if single is not None and ceiling_tok_s is not None:
        out.append(Check("single-stream decode ≤ roofline", "pass" if single <= ceiling_tok_s else "fail",
                         round(single, 1), f"≤ {ceiling_tok_s:.1f} tok/s",
                         "" if single <= ceiling_tok_s else "faster than memory allows: the bandwidth or the bytes per "
                         "token used for the ceiling are wrong (is part of the model in a cache?)",
                         "lab.predict.roofline (decode reads every weight once per token: bandwidth ÷ bytes per token)"))
    if capacity:
        flat = capacity["flat_out"]
        for name, got, want, ok in (
                ("client: concurrent streams", flat["successes"], "≥ 64", flat["successes"] >= 64),
                ("client: tokens parsed per CPU second", round(flat["tok_per_client_cpu_s"] or 0),
                 "≥ 5000", (flat["tok_per_client_cpu_s"] or 0) >= 5000),
                ("client: added inter-token latency", None if capacity["added_itl_ms_mean"] is None
                 else round(capacity["added_itl_ms_mean"], 3), "≤ 1 ms (mean)",
                 capacity["added_itl_ms_mean"] is not None and capacity["added_itl_ms_mean"] <= 1.0)):
            out.append(Check(name, "pass" if ok else "warn", got, want,
                             "" if ok else "the client may limit what it measures: fewer streams, or a client on "
                             "another machine", "lab.measure.bench.client_capacity against lab.measure.bench_source"))
    return out


__all__ = ["in_process_for", "llama_cpp_model", "batched_for", "client_capacity", "cpu_snapshot", "contention", "bench_checks"]
