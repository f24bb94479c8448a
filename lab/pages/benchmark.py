"""Notebook 06's page (benchmarking), the notebook's one lab import: its steps, named as the notebook says them
(the steps' results kept as the cells run them, lab.pages.benchmark_steps.Steps, which lab.pages.benchmark_run runs), the
lines printed between them, the sweep's charts, the 06_benchmark record built from the steps (`record`), the 06_tune
and 06_speculative records, and the closing text (`what_this_means`) — all from numbers measured elsewhere
(lab.pages.benchmark_run over lab.measure.loadgen, metrics, bench, peer_bench, tune and speculative). Its tables are
lab.pages.benchmark_tables, shown through this page."""
from __future__ import annotations

from functools import partial

from lab.core import checks as lab_checks
from lab.core import display, evidence, profiles
from lab.core.profiles import Profile
from lab.core.session import Session
from lab.diagnose import endpoint_diagnose
from lab.experiments import speculative, tune
from lab.measure import gpumon, metrics, peer_bench
from lab.pages import benchmark_run
from lab.pages.benchmark_run import ServedSweep
from lab.pages.benchmark_steps import Steps
from lab.measure.loadgen import RunResult
from lab.pages import session
from lab.pages.benchmark_tables import (  # noqa: F401  (the notebook's tables, through its page)
    calibration_table, capacity_rows, decode_speeds_table, llama_bench_rows, repetitions_table, requests_table,
    resource_windows, resources_table, roofline_rows, summary_row, sweep_table, yardstick_table)
from lab.pages.session import answer, checks_table, keep, show, start  # noqa: F401  (what every notebook calls, through its page)
from lab.predict import claims, claims_views

NAME = "06_benchmark"


# ---------------------------------------------------------------- the notebook's steps
def profile_with(profile: Profile, **values) -> Profile:
    """The profile with the values a cell sets (lab.core.profiles.varied: checked as the profile file is)."""
    return profiles.varied(profile, **values)


def steps(s: Session) -> Steps:
    """Where every step's result is kept as its cell runs it (lab.pages.benchmark_steps), for the record at the end;
    kept in the session (`s.results["steps"]`) for `record(s)`."""
    return keep(s, "steps", Steps(s))


def serve_and_sweep(steps: Steps, profile: Profile) -> ServedSweep:
    """Start the profile's server, size the prompts, run the sweep (and the peer check), stop it (lab.measure.
    benchmark_run.serve_and_sweep); a server you run that does not answer fails first, saying why. The sweep's
    record is written as soon as it is measured (marked `partial`): nothing after it can lose the sweep."""
    endpoint_diagnose.require_reachable(steps.s.profile)
    served = steps.serve_and_sweep(profile)
    _write_record(steps.s, partial="written right after the sweep: llama-bench, llama-batched-bench, the client's capacity "
           "and the claims had not run yet; the notebook's record cell replaces this record")  # the sweep kept first
    return served


def peer_text(served: ServedSweep) -> str:
    """The peer check against `vllm bench serve`: the load both clients sent and how many metrics agree."""
    return peer_bench.text(served.peer)


def single_stream(served: ServedSweep) -> dict | None:
    """The one-stream level's summary (None when nothing was served)."""
    return benchmark_run.single_stream(served.summaries)


def in_process_tok_s(llama_bench_result: dict | None) -> float | None:
    """llama-bench's tg, one stream in-process (None when it did not run)."""
    return benchmark_run.in_process_tok_s(llama_bench_result)


def tune_settings(s: Session, profile: Profile) -> dict:
    """`lab tune` on this profile: the profile's settings, then one changed at a time, each on its own server."""
    return keep(s, "tune", benchmark_run.tune_settings(profile, s.logs))


def tune_chart(s: Session, tuned: dict):
    return keep(s, "tune_chart", tune.chart(tuned, title=f"{s.profile.name}: throughput vs latency per setting"))


def tune_rows(tuned: dict) -> list[dict]:
    return tune.rows(tuned)


def draft_for(profile: Profile) -> tuple[str | None, str]:
    """The draft model speculative decoding uses here, and why (lab.experiments.speculative.draft_for)."""
    return speculative.draft_for(profile)


def speculative_variants(s: Session, profile: Profile, draft: str | None) -> dict:
    """One stream with and without speculative decoding, each variant on its own one-slot server."""
    return keep(s, "speculative", benchmark_run.speculative_variants(profile, s.logs, draft))


def speculative_rows(spec: dict) -> list[dict]:
    return speculative.table_rows(spec)


def step_table(spec: dict):
    """MTP's step cost by n-max (measured or modelled), the break-even acceptance, the speed by acceptance."""
    return speculative.step_table(spec)


def claim_counts(verdicts: list) -> dict:
    return claims.counts(verdicts)


def claims_table(verdicts: list):
    """The claims ledger, one row per claim (lab.predict.claims_views.table)."""
    return claims_views.table(verdicts)



# ---------------------------------------------------------------- the lines between the steps
def start_text(served: ServedSweep) -> str:
    """The command the benchmark started, and how the start went (or why it was skipped)."""
    state = f"skipped: {served.skip_reason}" if served.skip_reason else served.started
    return f"{served.command.shell()}\n{state}"


def prompt_text(served: ServedSweep) -> str:
    return (f"{served.prompt_words} words per prompt ({served.tokens_per_word} tokens per word on this tokenizer); "
            f"target: {served.target}")


def stop_text(served: ServedSweep) -> str:
    """How the server stopped, and how much other work shared the machine during the sweep."""
    busy = served.busy
    lines = [f"server stopped: {served.stop_report}"]
    if busy:
        lines.append(f"other processes during the sweep: {busy['others_cores']:.2f} cores' worth "
                     f"({busy['others_s']:.1f} CPU s in {busy['wall_s']:.0f} s)")
    return "\n".join(lines)


def client_cpu_text(runs: list[RunResult]) -> str:
    if not runs:
        return "no runs"
    return "client CPU time per level: " + ", ".join(
        f"{r.spec.concurrency} streams {r.client_cpu_s:.2f} s of {r.duration_s:.1f} s" for r in runs)


def llama_bench_text(result: dict | None, skip_reason: str | None) -> str:
    return f"llama-bench skipped: {skip_reason}" if skip_reason else " ".join(result["command"])


def batched_bench_text(result: dict | None, skip_reason: str | None) -> str:
    return f"llama-batched-bench skipped: {skip_reason}" if skip_reason else " ".join(result["command"])


def draft_text(draft: str | None, why: str) -> str:
    return f"draft model: {draft or 'none'} ({why})"


def model_load_text(load_window: dict) -> str:
    return f"model load: {gpumon.rows({'load': load_window})}"


# ---------------------------------------------------------------- the charts
def checks_chart(found: list, profile):
    return lab_checks.chart(found, f"Benchmark checks · {profile.name}")


def sweep_chart(summaries: list[dict], ceilings: list[dict] | None = None, predicted_single: float | None = None,
                title: str = "Throughput and latency by concurrency"):
    """Two panels: output tok/s (measured aggregate, and the roofline's aggregate ceiling when known)
    and latency (TTFT p50, TPOT p50, E2EL p50) against concurrency."""
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    xs = [s.get("concurrency") for s in summaries]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("output tokens per second (all streams)", "latency, p50 (ms)"))
    fig.add_trace(go.Scatter(x=xs, y=[s["output_throughput"] for s in summaries], mode="lines+markers",
                             name="measured (served)"), row=1, col=1)
    fig.add_trace(go.Scatter(x=xs, y=[s["stream_decode_tok_s"] for s in summaries], mode="lines+markers",
                             name="per-stream decode", line={"dash": "dot"}), row=1, col=1)
    if ceilings:
        fig.add_trace(go.Scatter(x=[c["concurrency"] for c in ceilings], y=[c["aggregate_ceiling_tok_s"] for c in ceilings],
                                 mode="lines+markers", name="roofline ceiling", line={"dash": "dash"}), row=1, col=1)
    if predicted_single is not None:
        fig.add_trace(go.Scatter(x=[1], y=[predicted_single], mode="markers", marker={"symbol": "x", "size": 11},
                                 name="calibrated prediction (1 stream)"), row=1, col=1)
    for key, name in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2el_ms", "E2E latency")):
        fig.add_trace(go.Scatter(x=xs, y=[s[key]["p50"] for s in summaries], mode="lines+markers", name=name),
                      row=1, col=2)
    ticks = xs or [c["concurrency"] for c in ceilings or []]
    fig.update_xaxes(title_text="concurrent streams", type="log", tickvals=ticks)
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_layout(title=title, height=420)
    return fig


def steady_state_chart(summaries: list[dict], yard: list[dict] | None, title: str = "Decode summed over the streams"):
    """Per level: llama-batched-bench's S_TG, the steady state (all N decoding; each repetition a dot), the level's
    decode summed (per-stream speed × N) and its decode over the whole window, in tok/s, with the share of the window
    at N streams under each group: where the served gap is the server's per-step work and where the level's ramp."""
    import plotly.graph_objects as go

    levels = [s for s in summaries if (s.get("concurrency") or 0) > 1]
    xs = [f"{s['concurrency']} streams<br>" + (f"{s['full_concurrency_fraction']:.0%} of the time at N"
                                                 if s.get("full_concurrency_fraction") is not None else "never at N")
          for s in levels]
    s_tg = {y["concurrency"]: y["in_process_tok_s"] for y in yard or [] if y["yardstick"].startswith("llama-batched")}
    fig = go.Figure()
    for name, ys in (("llama-batched-bench S_TG (in-process)", [s_tg.get(s["concurrency"]) for s in levels]),
                     ("steady state (all N decoding)", [s.get("steady_decode_tok_s") for s in levels]),
                     ("decode summed (per-stream × N)", [s.get("decode_tok_s_summed") for s in levels]),
                     ("decode over the whole window", [s.get("window_decode_tok_s") for s in levels])):
        fig.add_trace(go.Bar(x=xs, y=ys, name=name))
    reps = [(x, r.get("steady_decode_tok_s")) for x, s in zip(xs, levels) for r in s.get("repetitions") or []]
    fig.add_trace(go.Scatter(x=[x for x, _ in reps], y=[y for _, y in reps], mode="markers", name="steady, each repetition",
                             marker={"color": "black", "size": 8}))
    fig.update_layout(title=title, barmode="group", height=420, yaxis_title="tok/s")
    return fig


def energy_chart(summaries: list[dict], title: str = "Energy and memory by concurrency"):
    """Joules per output token and peak VRAM (all GPUs) against concurrency; on a machine where NVML measured
    nothing the chart says "not measured" instead of drawing zeros."""
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    xs = [s.get("concurrency") for s in summaries]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("joules per output token (GPU)", "peak memory (MiB)"))
    jpt = [s.get("joules_per_token") for s in summaries]
    vram = [s.get("peak_vram_mib") for s in summaries]  # all GPUs (fields.yaml: gpus total)
    rss = [s.get("peak_host_rss_mib") for s in summaries]
    fig.add_trace(go.Scatter(x=xs, y=jpt, mode="lines+markers", name="J / token"), row=1, col=1)
    fig.add_trace(go.Scatter(x=xs, y=vram, mode="lines+markers", name="peak VRAM, all GPUs"), row=1, col=2)
    fig.add_trace(go.Scatter(x=xs, y=rss, mode="lines+markers", name="peak host RSS, server tree"), row=1, col=2)
    if all(v is None for v in jpt):
        why = next((s.get("energy_not_measured") for s in summaries if s.get("energy_not_measured")), "no GPU")
        fig.add_annotation(text=f"GPU energy not measured: {why}", xref="x domain", yref="y domain", x=0.5, y=0.5,
                           showarrow=False, row=1, col=1)
    fig.update_xaxes(title_text="concurrent streams", type="log", tickvals=xs)
    fig.update_layout(title=title, height=380)
    return fig


# ---------------------------------------------------------------- the records and the closing text
def build_record(profile, *, served: ServedSweep, llama_bench_result: dict | None, llama_bench_skip: str | None,
                 roofline_result: dict, capacity: dict | None, verdicts: list, found: list, queue: list[dict],
                 sweep_fig, energy_fig, batched: dict | None = None, batched_skip: str | None = None,
                 yardstick: list[dict] | None = None) -> dict:
    """The 06_benchmark record: summary, checks, tables, charts, every request, the sweep's summaries,
    llama-bench's rows, the roofline, the client's capacity, the claims' verdicts, the server (command, what its log
    reported, how it stopped), its memory and energy, and (vLLM and endpoint profiles) the peer check against
    `vllm bench serve` (lab.measure.peer_bench)."""
    runs, summaries, skip_reason, busy, peer = served.runs, served.summaries, served.skip_reason, served.busy, served.peer
    charts = [evidence.chart_entry("Throughput and latency by concurrency vs the roofline", sweep_fig),
              evidence.chart_entry("Decode summed: steady state vs the whole level vs llama-batched-bench",
                                   steady_state_chart(summaries, yardstick)),
              evidence.chart_entry("Energy and memory by concurrency", energy_fig),
              evidence.chart_entry("Benchmark checks", checks_chart(found, profile))]
    server = {"command": served.command.shell(), "reported": served.reported, "stop": served.stop_report}
    resources = {"load": served.load_window, "offload": gpumon.offload_check(served.reported, profile)}
    load = served.load_window or {}
    single = summaries[0] if summaries else None
    tg = (llama_bench_result or {}).get("tg") or {}
    served = single["stream_decode_tok_s"] if single else None
    ratio = metrics.served_ratio(served, tg.get("tok_s"))
    best = max(summaries, key=lambda s: s["output_throughput"] or 0) if summaries else None
    counts = {v: sum(x.verdict == v for x in verdicts) for v in dict.fromkeys(x.verdict for x in verdicts)}
    summary = {
        "served_single_stream_decode_tok_s": served,
        "server_reported_decode_tok_s": single["server_decode_tok_s"] if single else None,
        "llama_bench_tg_tok_s": tg.get("tok_s"), "llama_bench_test": tg.get("test"),
        "served_over_in_process": ratio,
        "decode_ceiling_tok_s": roofline_result.get("decode_ceiling_tok_s"),
        "predicted_decode_tok_s": roofline_result.get("predicted_decode_tok_s"),
        "served_fraction_of_ceiling": (served / roofline_result["decode_ceiling_tok_s"]
                                       if served and roofline_result.get("decode_ceiling_tok_s") else None),
        "best_aggregate_tok_s": best["output_throughput"] if best else None,
        "best_aggregate_concurrency": best.get("concurrency") if best else None,
        "ttft_p50_ms_single": single["ttft_ms"]["p50"] if single else None,
        "client_parsed_tok_per_cpu_s": capacity["flat_out"]["tok_per_client_cpu_s"] if capacity else None,
        "client_added_itl_ms": capacity["added_itl_ms_mean"] if capacity else None,
        "claims": counts, "benchmark_skipped": skip_reason, "llama_bench_skipped": llama_bench_skip,
        "other_work_cores_during_sweep": busy.get("others_cores") if busy else None,
        "queued_at_concurrency": [q["concurrency"] for q in queue or [] if q["queued"]],
        "tokens_counted_from": sorted({x["tokens_counted_from"] for x in summaries if x.get("tokens_counted_from")}),
        "joules_per_token_single": single.get("joules_per_token") if single else None,
        "joules_per_token_best_aggregate": best.get("joules_per_token") if best else None,
        "peak_vram_mib_load": load.get("peak_vram_mib"),
        "peak_vram_mib_load_per_gpu": load.get("peak_vram_mib_per_gpu"),
        "peak_vram_mib_sweep": max((s["peak_vram_mib"] for s in summaries if s.get("peak_vram_mib") is not None),
                                   default=None),
        "peak_host_rss_mib_sweep": max((s["peak_host_rss_mib"] for s in summaries if s.get("peak_host_rss_mib")), default=None),
        "energy_not_measured": single.get("energy_not_measured") if single else None,
        "batched_bench_skipped": batched_skip,
        "served_over_batched_decode": {str(y["concurrency"]): y["served_over_in_process"] for y in yardstick or []
                                       if y["yardstick"].startswith("llama-batched-bench")},
        "steady_over_batched_decode": {str(y["concurrency"]): y["steady_over_in_process"] for y in yardstick or []
                                       if y["yardstick"].startswith("llama-batched-bench")},
        "output_throughput_spread": {str(x.get("concurrency")): (x.get("spread") or {}).get("output_throughput")
                                     for x in summaries if x.get("spread")},
    }
    tables = [evidence.table_entry("Sweep by concurrency", [summary_row(s) for s in summaries]),
              evidence.table_entry("Roofline inputs and outputs", roofline_rows(roofline_result)),
              evidence.table_entry("Claims ledger", [v.row() for v in verdicts])]
    if queue:
        tables.insert(1, evidence.table_entry("Queued or batched: TTFT growth by concurrency", queue))
    if llama_bench_result:
        tables.insert(1, evidence.table_entry("llama-bench (in-process)", llama_bench_rows(llama_bench_result)))
    if yardstick:
        tables.insert(1, evidence.table_entry("Served ÷ in-process by concurrency (llama-bench, llama-batched-bench)",
                                              yardstick))
    if capacity:
        tables.append(evidence.table_entry("Client capacity", capacity_rows(capacity)))
    if resources:
        windows = {"model load (server start → healthy)": resources.get("load")}
        windows.update(resource_windows(summaries, runs))
        tables.append(evidence.table_entry("Memory and energy (NVML sampler + psutil)", gpumon.rows(windows)))
    if peer is not None:
        summary["peer_check"] = peer_bench.peer_summary(peer)
        if peer["rows"]:
            tables += [evidence.table_entry("Peer check: lab client vs vllm bench serve (same server, same load)", peer["rows"]),
                       evidence.table_entry("Peer check: where the definitions differ", peer["definitions"])]
    return {"title": "Benchmark: served and in-process speed, the roofline, and the seeds' claims",
            "summary": summary, "checks": [c.to_dict() for c in found], "tables": tables, "charts": charts,
            "runs": [r.to_dict() for r in runs], "sweep": summaries, "llama_bench": llama_bench_result,
            "roofline": roofline_result, "client_capacity": capacity,
            "claims": [v.to_dict() for v in verdicts], "server": server, "contention": busy, "peer_check": peer,
            "queueing": queue, "resources": resources, "batched_bench": batched, "yardstick": yardstick}


def sweep_chart_of(steps: Steps):
    """The sweep against the roofline (`sweep_chart`), for the steps' profile: the chart shown and kept in the record."""
    return sweep_chart(steps.served.summaries, steps.rl["by_concurrency"], steps.rl["predicted_decode_tok_s"],
                       title=f"{steps.profile.name}: measured vs roofline by concurrency")


def energy_chart_of(steps: Steps):
    return energy_chart(steps.served.summaries, title=f"{steps.profile.name}: energy and memory by concurrency")


def record(s: Session) -> dict:
    """Write records/06_benchmark.json from what the steps measured (`s.results["steps"]`, lab.pages.benchmark_steps),
    with its closing text; its summary, to show."""
    return _write_record(s)


def _write_record(s: Session, partial: str | None = None) -> dict:
    """`record`'s work. `partial`: what had not run yet, for the record `serve_and_sweep` writes as soon as the sweep
    is measured, so that nothing run after it (llama-bench at a depth the server reported, a schema error) can lose
    the sweep; the record cell writes the whole record over it."""
    steps = s.results["steps"]
    (lb, lb_skip), (batched, batched_skip) = steps.llama_bench, steps.batched
    s.record(NAME, ({"partial": partial} if partial else {}) | build_record(
        steps.profile, served=steps.served, llama_bench_result=lb, llama_bench_skip=lb_skip, roofline_result=steps.rl,
        capacity=steps.capacity, verdicts=steps.claim_verdicts(), found=steps.checks(), queue=steps.queue(),
        sweep_fig=sweep_chart_of(steps), energy_fig=energy_chart_of(steps), batched=batched, batched_skip=batched_skip,
        yardstick=steps.yardstick()), closing=closing_text)
    return s.read(NAME)["summary"]


def record_tune(s: Session):
    """records/06_tune.json (lab.experiments.tune.build_record: the settings `tune_settings` tried, the patch, and the
    chart `tune_chart` drew)."""
    return s.record("06_tune", tune.build_record(s.results.get("tune"), s.results.get("tune_chart")))


def record_speculative(s: Session):
    """records/06_speculative.json (lab.experiments.speculative.build_record: one stream with and without it, as
    `speculative_variants` kept it)."""
    return s.record("06_speculative", speculative.build_record(s.results.get("speculative")))


def served_gap_markdown(single: dict | None, in_process_tok_s: float | None) -> str:
    """The served ÷ in-process paragraph of notebook 06, from this run's numbers (never typed in)."""
    if not single or not in_process_tok_s:
        return "Not measured here: it needs both a served single stream and llama-bench."
    client, server = single.get("stream_decode_tok_s"), single.get("server_decode_tok_s")
    cost, _ = metrics.served_cost_s()
    reach = metrics.reachable_ratio(in_process_tok_s)
    lines = [f"In this run: client-measured **{_f(client)}** tok/s, server-reported **{_f(server)}** tok/s, "
             f"llama-bench **{_f(in_process_tok_s)}** tok/s — served ÷ in-process **{_f(metrics.served_ratio(client, in_process_tok_s))}**."]
    if client and server:
        cost_pct = 100 * (1 - client / server)
        lines.append((f"The client and HTTP path cost {_f(cost_pct)} % (client vs server-reported)" if cost_pct >= 0.5
                      else "The client and HTTP path cost nothing measurable (client ≈ server-reported)")
                     + "; the rest of any gap is inside llama-server or taken by other work on the machine.")
    lines.append(f"llama-server spends a fixed ≈ {cost * 1e3:.2f} ms per token outside the compute graph (measured, "
                 f"lab/data/served_overhead.yaml), so at {_f(in_process_tok_s)} tok/s the best reachable ratio is "
                 f"1 ÷ (1 + {cost * 1e3:.2f} ms × {_f(in_process_tok_s)} tok/s) = **{_f(reach)}**"
                 + (f" — the ≥ {metrics.SERVED_RATIO_TARGET} target applies." if reach >= metrics.SERVED_RATIO_TARGET else
                    f" — below the {metrics.SERVED_RATIO_TARGET} target, which applies only to models slower than "
                    f"{_f(metrics.max_tok_s_for_target())} tok/s (a 27B-class model on a V100, for one)."))
    return " ".join(lines)


_f = partial(display.fmt, missing="unknown")  # a figure in a sentence: lab.core.display's text, "unknown" if missing


def what_this_means(s: Session):
    """The closing text as the record keeps it (written by `record`), as Markdown for the notebook's last cell."""
    return session.closing(s, NAME)


def closing_text(record: dict) -> str:
    """What the benchmark means for the reader, from the record alone (Markdown, one point per line)."""
    s = record["summary"]
    lines = []
    speeds = (record.get("roofline") or {}).get("plan_speeds") or []
    if record.get("plan_reason"):
        lines.append(f"**Plan mode** — {record['plan_reason']}. No server was started and nothing was measured; "
                     "every speed below is predicted.")
        lines += [f"{r['what']}: **{_f(r['tok_s'])} tok/s**, {r['uncertainty']}" for r in speeds]
    elif s["benchmark_skipped"]:
        lines.append(f"No server was measured here: {s['benchmark_skipped']}")
    else:
        lines.append(f"One stream decoded at **{_f(s['served_single_stream_decode_tok_s'])} tok/s** through the server "
                     f"(llama-bench in-process: {_f(s['llama_bench_tg_tok_s'])} tok/s; ratio "
                     f"{_f(s['served_over_in_process'])}). The first token took {_f(s['ttft_p50_ms_single'])} ms (p50).")
        lines.append(_batching_sentence(record.get("sweep") or []))
    by_n = {n: r for n, r in (s.get("served_over_batched_decode") or {}).items() if r is not None}
    steady = s.get("steady_over_batched_decode") or {}
    if by_n:
        lines.append("Served decode summed over the streams ÷ llama-batched-bench's in-process S_TG at the same count: "
                     + ", ".join(f"{n} stream{'s' if n != '1' else ''} {_f(r)}"
                                 + (f" ({_f(steady[n])} while all {n} decoded)" if steady.get(n) is not None else "")
                                 for n, r in by_n.items())
                     + " (the table 'Served ÷ in-process by concurrency' says what limits each).")
    if s["decode_ceiling_tok_s"] is not None:
        lines.append(f"The memory-bandwidth ceiling for one stream of this model here is {_f(s['decode_ceiling_tok_s'])} tok/s; "
                     f"the calibrated prediction is {_f(s['predicted_decode_tok_s'])} tok/s. No engine beats the ceiling.")
    peer = s.get("peer_check")
    if peer and not peer["skipped"] and peer["metrics_judged"]:
        (lab_tok, vllm_tok) = peer["output_tok_s_lab_vs_vllm"]
        lines.append(f"Peer check: on the same server and load, the lab's client and `vllm bench serve` agree on "
                     f"{peer['metrics_agreeing']} of {peer['metrics_judged']} metrics within the noise "
                     f"(output {lab_tok} vs {vllm_tok} tok/s), so the sweep above measures the server, not the client.")
    elif peer and peer["skipped"] is None:
        lines.append("Peer check: `vllm bench serve` did not produce a result; see the checks.")
    if s.get("queued_at_concurrency"):
        lines.append(f"The server queued requests at concurrency {', '.join(map(str, s['queued_at_concurrency']))}: the "
                     "first token waited for the requests ahead of it and the total did not grow, so it serves one "
                     "request at a time (Ollama: raise OLLAMA_NUM_PARALLEL; llama-server: -np).")
    if "chunks" in " ".join(s.get("tokens_counted_from") or []):
        lines.append("The server sent no token usage in its stream: output tokens were counted as chunks (one token each).")
    if (s.get("other_work_cores_during_sweep") or 0) > 0.1:
        lines.append(f"Other processes kept {s['other_work_cores_during_sweep']:.2f} cores busy during the sweep: "
                     "the served numbers are lower than this machine can do when idle.")
    c = s["claims"]
    lines.append("Seed claims: " + ", ".join(f"{n} {v}" for v, n in c.items()) + ".")
    return "\n".join(f"- {line}" for line in lines)


def _batching_sentence(sweep: list[dict]) -> str:
    """Batching compared like with like: output tokens per second over the whole run (prefill included) at
    one stream and at the best concurrency — never one stream's decode-only speed against a total."""
    runs = [x for x in sweep if x.get("output_throughput")]
    if not runs:
        return "No concurrency sweep result to compare."
    one = next((x for x in runs if x.get("concurrency") == 1), None)
    best = max(runs, key=lambda x: x["output_throughput"])
    if one is None or best is one:
        return (f"Batching did not raise the total output here: {_f(runs[0]['output_throughput'])} tok/s at one stream "
                f"is the highest of the sweep ({', '.join(str(x.get('concurrency')) for x in runs)} streams).")
    per_stream = best["output_throughput"] / best["concurrency"]
    return (f"Batching: output over the whole run (prefill included) went from {_f(one['output_throughput'])} tok/s at "
            f"one stream to **{_f(best['output_throughput'])} tok/s in total at {best['concurrency']} streams** "
            f"(× {_f(best['output_throughput'] / one['output_throughput'])}), each stream getting {_f(per_stream)} tok/s — "
            "that total, not one stream's speed, is the kind of number the seeds' \"280 tok/s\" can only be.")
