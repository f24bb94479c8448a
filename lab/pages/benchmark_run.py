"""Notebook 06's measured steps, one call each.

`serve_and_sweep` starts the profile's server (or connects to yours), sizes prompts with its tokenizer, runs the
concurrency sweep and, on vLLM and endpoint profiles, the peer check against `vllm bench serve`, then stops the
server — also when any of it fails — and returns everything measured (`ServedSweep`). `in_process` runs llama-bench
at the depth the served requests decoded at; `tune_settings` and `speculative_variants` run lab tune and the
speculative-decoding variants, each watched by its own NVML sampler; `roofline` uses notebook 01's bandwidth when
this run has it; `claim_verdicts` hands the sweep to the claims judge and `checks` gives every verdict of the
benchmark. What the notebook shows of all this — texts, tables, charts, the record and its closing text — is
lab.pages.benchmark.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lab.core import display, evidence, run_folder
from lab.core.checks import Check
from lab.core.profiles import Profile
from lab.experiments import speculative, tune
from lab.measure import bench, copy_bandwidth, gpumon, load_levels, metrics, peer_bench, yardstick
from lab.measure.loadgen import RunResult
from lab.predict import claims, profile_speed
from lab.serving import engines, serve
from lab.serving.command import Command

# Notebook 06's lab tune and speculative runs send shorter outputs than the sweep: enough tokens for a stable
# decode speed per setting, few enough that the budget covers more settings.
TUNE_OUTPUT_TOKENS = 64
SPECULATIVE_OUTPUT_TOKENS = 128
# llama-batched-bench runs each configuration once. One pass: in-process runs on a GPU vary little (llama-bench tg on
# the H200, 2026-12-01: 90.8 / 92.7 / 92.0 tok/s) and a second pass over 1/4/8/16 streams × 256 tokens would cost
# ~25 s of notebook 06's ~9 minutes there; pass reps=2 for a range (-npl repeats the levels, the model loads once)
BATCHED_BENCH_REPS = 1


@dataclass
class ServedSweep:
    """What `serve_and_sweep` measured. `started` is the server as it was when healthy (None: not started);
    `load_window` the NVML/RSS window from start to healthy; `busy` how much other work shared the machine."""

    command: Command
    skip_reason: str | None
    started: str | None
    load_window: dict
    prompt_words: int
    tokens_per_word: float | None
    target: str | None
    runs: list[RunResult]
    summaries: list[dict]
    busy: dict | None
    peer: dict
    stop_report: dict | None
    reported: dict


def roofline(profile: Profile, run_dir: str | Path) -> dict:
    """The profile's roofline on notebook 01's measured bandwidth when this run folder has it, else on a copy
    measured now (host RAM on a CPU profile) or the profile's datasheet figure (lab.predict.profile_speed)."""
    hw_record = run_folder.read_records(run_dir).get("01_hardware")
    from lab.core import planmode

    if planmode.reason(profile):  # plan mode: the profile's datasheet, plus MTP, each with its uncertainty
        from lab.predict import plan_speeds

        return {**profile_speed.roofline_for(profile), "plan_mode": planmode.reason(profile),
                "plan_speeds": plan_speeds.rows(profile)}
    if hw_record is None:
        hw_record = {"bandwidth": copy_bandwidth.measure(host_size_mib=256, repeats=5)}
    return profile_speed.roofline_for(profile, hw_record)


def bench_command(profile: Profile) -> Command:
    """The command notebook 04 shows, on a free loopback port (the benchmark needs a server, not a given port)."""
    port = None if profile.engine == "external" else serve.free_port()
    return engines.build_command(profile, installed_version=engines.installed_version(profile), port=port)


def serve_and_sweep(profile: Profile, run_dir: str | Path, log_dir: str | Path,
                    name: str = "06_bench_server") -> ServedSweep:
    """Start → size prompts → one stream and the concurrency sweep → peer check → stop, the server stopped and the
    sampler closed whatever happens in between; a profile that cannot start here is measured as skipped."""
    cmd = bench_command(profile)
    skip_reason = serve.why_not_startable(profile, cmd)
    mon = gpumon.Sampler().start()  # NVML (VRAM, power, energy) + the server tree's RSS, 10 times a second
    srv = None
    try:
        t_load = mon.mark()
        srv = None if skip_reason else serve.start(cmd, log_dir=log_dir, name=name)
        started = f"{srv!r}: healthy after {srv.health_s} s" if srv else None
        mon.watch(srv.pid if srv else None)
        load_window = mon.window(t_load, mon.mark())
        measured = _sweep(profile, srv, mon, Path(run_dir)) if srv else _nothing_measured(profile, srv, Path(run_dir))
    finally:
        stop_report = srv.stop() if srv else None
        reported = srv.reported() if srv else {}
        mon.stop()
    summaries = [metrics.summarise_run(r, slo=metrics.DEFAULT_SLO, criteria=metrics.criteria_for(profile))
                 for r in measured["runs"]]
    return ServedSweep(command=cmd, skip_reason=skip_reason, started=started, load_window=load_window,
                       summaries=summaries, stop_report=stop_report, reported=reported, **measured)


def _sweep(profile: Profile, srv, mon: gpumon.Sampler, run_dir: Path) -> dict:
    target, words, tokens_per_word = load_levels.against(srv, profile.bench_prompt_tokens, profile.bench_output_tokens)
    levels = sorted(set([1] + profile.bench_levels))
    before = bench.cpu_snapshot(srv.pid)
    # each level: warm-up rounds until steady, then REPETITIONS repetitions sharing the profile's per-level budget
    runs = load_levels.sweep(target, levels, profile.bench_requests, words, duration_s=profile.bench_duration_s,
                         monitor=mon, repetitions=load_levels.REPETITIONS, warmup_max_rounds=load_levels.WARMUP_MAX_ROUNDS)
    busy = bench.contention(before, bench.cpu_snapshot(srv.pid))
    peer = peer_bench.run(profile, srv, run_dir / "peer_bench")  # vLLM and endpoint profiles; otherwise it says why not
    return {"prompt_words": words, "tokens_per_word": tokens_per_word, "target": repr(target), "runs": runs,
            "busy": busy, "peer": peer}


def _nothing_measured(profile: Profile, srv, run_dir: Path) -> dict:
    return {"prompt_words": profile.bench_prompt_tokens, "tokens_per_word": None, "target": None, "runs": [],
            "busy": None, "peer": peer_bench.run(profile, srv, run_dir / "peer_bench")}


def in_process(profile: Profile, summaries: list[dict], reps: int = 3) -> tuple[dict | None, str | None]:
    """llama-bench (lab.measure.bench.in_process_for) at the depth the served requests decoded at: the single
    stream's mean prompt length as the server counted it, else the profile's prompt length (`served_depth`; its note,
    when the server's count was not used, is kept in the result as `depth_note`)."""
    depth, note = served_depth_checked(profile, summaries)
    result, why = bench.in_process_for(profile, depth=depth, reps=reps)
    return ({**result, "depth_note": note} if result and note else result), why


# A server's count of the prompt is taken as llama-bench's depth only within SERVED_DEPTH_FACTOR times the prompt the
# lab sent plus SERVED_DEPTH_SLACK tokens (a chat template, a proxy's short system prompt) and within the profile's
# context: an endpoint reporting 10^18 prompt tokens ran `llama-bench -d 500000000000000000`, one reporting 30,000
# (a proxy's system prompt) ran past 600 s, and either way notebook 06 lost its sweep.
SERVED_DEPTH_FACTOR = 4
SERVED_DEPTH_SLACK = 512


def served_depth_checked(profile: Profile, summaries: list[dict]) -> tuple[int, str | None]:
    """(the depth llama-bench and llama-batched-bench run at, and why the server's count was not used or None): the
    single stream's mean prompt length as the server counted it when it is a plain number in range, else the
    profile's prompt length (where llama-bench decodes and llama-batched-bench prefills)."""
    import math

    asked = profile.bench_prompt_tokens
    mean = summaries[0].get("prompt_tokens_mean") if summaries else None
    if mean is None:
        return asked, None
    most = max(asked, min(asked * SERVED_DEPTH_FACTOR + SERVED_DEPTH_SLACK,
                          profile.context_tokens - profile.bench_output_tokens))
    if isinstance(mean, bool) or not isinstance(mean, (int, float)) or not math.isfinite(mean) or not 1 <= mean <= most:
        return asked, (f"the server counted {display.clip(str(mean), 24)} prompt tokens per request for a prompt of about {asked}: "
                       f"not a count in 1..{most:,} (the prompt sent, a template's or proxy's additions, the context), "
                       f"so llama-bench runs at the profile's {asked} instead")
    return round(mean), None


def served_depth(profile: Profile, summaries: list[dict]) -> int:
    """The prompt length the served requests had, checked (`served_depth_checked`)."""
    return served_depth_checked(profile, summaries)[0]


def in_process_batched(profile: Profile, served: ServedSweep, log_dir: str | Path,
                       reps: int = BATCHED_BENCH_REPS) -> tuple[dict | None, str | None]:
    """llama-batched-bench (lab.measure.bench.batched_for) at the sweep's levels, its prompt length and output
    length, with the server command's shared settings; after the server stopped, so the two never compete."""
    levels = [s["concurrency"] for s in served.summaries] or sorted(set([1] + profile.bench_levels))
    return bench.batched_for(profile, served.command.argv, levels, served_depth(profile, served.summaries), reps=reps,
                             env=served.command.env, log=Path(log_dir) / "06_batched_bench.log")


def yardstick_rows(served: ServedSweep, batched: dict | None, llama_bench_result: dict | None) -> list[dict]:
    """Served ÷ in-process per level, each with what limits it (lab.measure.yardstick)."""
    return yardstick.rows(served.summaries, batched, llama_bench_result)


def tune_settings(profile: Profile, log_dir: str | Path) -> dict:
    """lab tune within the profile's `tune_budget_s` (lab.experiments.tune.run), its servers watched by NVML."""
    with gpumon.Sampler() as mon:
        return tune.run(profile, Path(log_dir) / "tune", budget_s=profile.tune_budget_s, monitor=mon,
                        output_tokens=min(TUNE_OUTPUT_TOKENS, profile.bench_output_tokens))


def speculative_variants(profile: Profile, log_dir: str | Path, draft: str | None) -> dict:
    """One stream with and without speculative decoding (lab.experiments.speculative.measure), within `tune_budget_s`;
    then llama-bench's verification batches pp1..pp5 and the MTP speed model over the draft-mtp rows
    (lab.experiments.speculative.step_model)."""
    with gpumon.Sampler() as mon:
        spec = speculative.measure(profile, draft, Path(log_dir) / "speculative", requests=3, monitor=mon,
                                   budget_s=profile.tune_budget_s,
                                   output_tokens=min(SPECULATIVE_OUTPUT_TOKENS, profile.bench_output_tokens))
    # the verification half of MTP's step cost: llama-bench at the batch sizes it verifies
    batches, why = (speculative.verification_batches(profile, log=Path(log_dir) / "speculative" / "verify_batches.log")
                    if spec["baseline_decode_tok_s"] else (None, "the baseline did not serve"))
    spec.update(verification_batches=batches, verification_batches_skipped=why,
                step_model=speculative.step_model(spec, batches))
    return spec


def single_stream(summaries: list[dict]) -> dict | None:
    """The sweep's one-stream level (its first), or None when nothing was measured."""
    return summaries[0] if summaries else None


def in_process_tok_s(llama_bench_result: dict | None) -> float | None:
    """llama-bench's decode speed (tg, the median of its repetitions), or None when it did not run."""
    return llama_bench_result["tg"]["tok_s"] if llama_bench_result else None


def claim_verdicts(profile: Profile, summaries: list[dict]) -> list:
    """Every seed claim judged for this profile with what the sweep measured here (lab.predict.claims)."""
    single = single_stream(summaries)
    measured = claims.measured_from_sweep(
        profile, evidence.gpu_summary(), single["stream_decode_tok_s"] if single else None,
        {x["concurrency"]: x["output_throughput"] for x in summaries},
        _counted_depth(profile, summaries))
    return claims.verdicts(profile, measured)


def _counted_depth(profile: Profile, summaries: list[dict]) -> int | None:
    """The prompt length the server counted, when it is one (`served_depth_checked` took it), else None."""
    depth, note = served_depth_checked(profile, summaries)
    return depth if summaries and summaries[0].get("prompt_tokens_mean") is not None and note is None else None


def checks(profile: Profile, served: ServedSweep, llama_bench_result: dict | None, rl: dict, capacity: dict | None,
           queue: list[dict]) -> list[Check]:
    """Every verdict of the benchmark: each run valid, machine quiet, batched or queued, served ÷ in-process,
    below the roofline, the client fast enough (lab.measure.bench.bench_checks), the peer check
    (lab.measure.peer_bench.checks) and whether the server offloaded what it was asked to (lab.measure.gpumon)."""
    single = single_stream(served.summaries)
    ratio = metrics.served_ratio(single["stream_decode_tok_s"] if single else None, in_process_tok_s(llama_bench_result))
    found = bench.bench_checks(served.summaries, ratio, rl["decode_ceiling_tok_s"], capacity, served.skip_reason,
                               served.busy, queue)
    return found + peer_bench.checks(served.peer) + [Check(**gpumon.offload_check(served.reported, profile))]
