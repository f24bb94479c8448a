"""Measure these levels against this server: the one loop every served measurement of the lab runs.

A level is a number of concurrent streams. Each gets its own deadline (`level_limit`: its budget + grace), is warmed
up (single requests, or rounds until steady: `warm_up`), measured as one run or several repetitions (`pool`), given
its GPU/host window by a running lab.measure.gpumon.Sampler and summarised (lab.measure.metrics). The notebook 06
sweep (`sweep`), lab tune's points, the speculative variants, the multi-GPU modes and the peer clients' lab client all
measure through `measure`; lab.measure.loadgen is the client it drives (one streamed request, one run).
"""
from __future__ import annotations

from dataclasses import dataclass

from lab.core.deadline import Deadline
from lab.measure.loadgen import (MIN_VALID_REQUESTS, LoadSpec, RequestResult, RunResult, Target, cut_reason,
                                 make_prompts, run_load, words_for_tokens)


# Notebook 06's method per concurrency level: warm up until steady, then measure the level several times.
# Warm-up rounds send `concurrency` requests at once — the batch size the level measures, so every kernel, buffer and
# CUDA graph of that size exists before timing starts — until two consecutive rounds' output throughput differ by
# less than WARMUP_TOLERANCE, at most WARMUP_MAX_ROUNDS rounds (a noisy machine never settles; the record says so).
# Their outputs are capped at WARMUP_OUTPUT_TOKENS: the state warm-up exists for does not need the full length, and
# at 16 streams × 256 tokens a full-length round would cost as much as a measured repetition.
WARMUP_TOLERANCE = 0.05
WARMUP_MAX_ROUNDS = 3
WARMUP_OUTPUT_TOKENS = 64
REPETITIONS = 3  # measured repetitions per level: their spread is the level's run-to-run noise


def warm_up(target: Target, concurrency: int, prompt_words: int, seed: int = 0, max_rounds: int = WARMUP_MAX_ROUNDS,
            tolerance: float = WARMUP_TOLERANCE, output_tokens: int | None = WARMUP_OUTPUT_TOKENS,
            limit: Deadline | None = None) -> tuple[list[RequestResult], dict]:
    """Rounds of `concurrency` simultaneous requests until two consecutive rounds' output tok/s differ by less than
    `tolerance` (relative to the earlier one), at most `max_rounds`. Returns every warm-up request and the account
    ({"rounds": [...], "steady": bool, "tolerance", "max_rounds", "output_tokens"})."""
    from dataclasses import replace

    short = replace(target, max_tokens=min(target.max_tokens, output_tokens)) if output_tokens else target
    results, rounds, previous = [], [], None
    for k in range(max_rounds):
        if limit is not None and limit.expired:  # the level's deadline: no more rounds (the record says not steady)
            break
        prompts = make_prompts(concurrency, prompt_words, seed=seed * 100 + k)
        run = run_load(short, prompts, LoadSpec(concurrency=concurrency, max_requests=concurrency, warmup_requests=0),
                       limit=limit)
        tokens = run.output_tokens
        tok_s = tokens / run.duration_s if tokens and run.duration_s > 0 else None
        change = abs(tok_s - previous) / previous if tok_s and previous else None
        rounds.append({"round": k + 1, "requests": len(run.results), "ok": sum(r.success for r in run.results),
                       "output_tokens": tokens, "duration_s": run.duration_s, "output_throughput": tok_s, "change": change})
        results += run.results
        if change is not None and change < tolerance:
            break
        previous = tok_s
    steady = bool(rounds) and rounds[-1]["change"] is not None and rounds[-1]["change"] < tolerance
    return results, {"rounds": rounds, "steady": steady, "tolerance": tolerance, "max_rounds": max_rounds,
                     "output_tokens": short.max_tokens}


def shares(total: int, parts: int) -> list[int]:
    """`total` split into `parts` near-equal whole shares, larger first (8 into 3: [3, 3, 2]); fewer parts when
    there are fewer than `parts` to share (every share ≥ 1)."""
    parts = max(1, min(parts, total))
    return [total // parts + (1 if j < total % parts else 0) for j in range(parts)]


def pool(runs: list[RunResult], warmup: list[RequestResult] | None = None, warmup_rounds: dict | None = None) -> RunResult:
    """A level's repetitions as one RunResult: every request (tagged with its repetition, its `start_s` counted from
    the first repetition's start), the durations summed (the measured time, without the moments between
    repetitions), client CPU summed, and each repetition's own budget and times in `repetitions`."""
    first = runs[0]
    results, reps = [], []
    for j, run in enumerate(runs):
        offset = run.t0_perf - first.t0_perf
        for r in run.results:
            r.repetition = j + 1
            r.start_s += offset
            results.append(r)
        reps.append({"repetition": j + 1, "max_requests": run.spec.max_requests, "duration_budget_s": run.spec.duration_s,
                     "requests": len(run.results), "duration_s": run.duration_s, "started_utc": run.started_utc,
                     "client_cpu_s": run.client_cpu_s, "t0_perf": run.t0_perf, "t1_perf": run.t1_perf})
    total = sum(run.spec.max_requests or 0 for run in runs) or None
    budget = sum(run.spec.duration_s for run in runs) if all(run.spec.duration_s for run in runs) else None
    spec = LoadSpec(concurrency=first.spec.concurrency, request_rate=first.spec.request_rate, max_requests=total,
                    duration_s=budget, warmup_requests=len(warmup or []), seed=first.spec.seed)
    cuts = [f"repetition {j + 1}: {run.cut}" for j, run in enumerate(runs) if run.cut]
    return RunResult(spec, first.target, results, sum(run.duration_s for run in runs), list(warmup or []),
                     first.started_utc, sum(run.client_cpu_s for run in runs), first.prompt_words, first.t0_perf,
                     runs[-1].t1_perf, repetitions=reps, warmup_rounds=warmup_rounds, deadline_s=first.deadline_s,
                     cut="; ".join(cuts) or None)


# A level's overall deadline is its measured budget (bench_duration_s) plus this grace, counted from the level's first
# warm-up request: the grace pays for the warm-up rounds before the budget (≤ WARMUP_MAX_ROUNDS short rounds) and for
# the requests still in flight when the budget ends, which are let finish (a request sent at the budget's last moment
# is measured whole). 120 s covers a 256-token output at 16 streams on the slowest card the lab profiles (V100, ~10
# tok/s per stream under load: ~30 s) four times over; it exists so that a stalled, trickling or frozen (SIGSTOPped)
# server ends the level there, its requests failed with the reason, instead of each waiting Target.timeout_s.
LEVEL_GRACE_S = 120.0


def level_limit(level: int, budget_s: float, grace_s: float | None = None, what: str = "bench_duration_s") -> Deadline:
    """The overall deadline of one level: its time budget (`what`, e.g. the profile's bench_duration_s) plus the
    grace, counted from its first request. Every level the lab runs has one (the sweep, lab tune's points, the
    speculative runs, the peer check), so a stalled server ends each of them there, never at Target.timeout_s per
    request. `grace_s` None: LEVEL_GRACE_S as it is when called."""
    grace_s = LEVEL_GRACE_S if grace_s is None else grace_s
    return Deadline(budget_s + grace_s, f"the level at concurrency {level} ({what} {budget_s:g} s + {grace_s:g} s grace)")


@dataclass(frozen=True)
class Level:
    """One level to measure: `concurrency` streams, `requests` requests shared among `repetitions` back-to-back
    repetitions (`shares`), after `warmup_rounds` warm-up rounds (`warm_up`; 0: the single warm-up requests that
    `measure` is given instead)."""

    concurrency: int
    requests: int
    repetitions: int = 1
    warmup_rounds: int = 0


@dataclass
class Measured:
    """One level measured: its run (every request, warm-up apart) and lab.measure.metrics' summary of it."""

    run: RunResult
    summary: dict


def against(server, prompt_tokens: int, max_tokens: int, model: str | None = None,
            **fields) -> tuple[Target, int, float | None]:
    """The load generator's target on a running lab.serving.serve.Server — its URL, key and served model (`model`,
    else lab.serving.serve.model_name) — with prompts of about `prompt_tokens` on its tokenizer: (target, words per
    prompt, tokens per word). `fields`: more Target fields (endpoint, extra_body)."""
    from lab.serving import serve

    words, per_word = words_for_tokens(server.base_url, prompt_tokens, server.headers())
    target = Target(server.base_url, model=model or serve.model_name(server), max_tokens=max_tokens,
                    api_key=server.api_key, **fields)
    return target, words, per_word


def measure(target: Target, plan: list[Level], prompt_words: int, *, duration_s: float | None = None,
            budget_s: float | None = None, what: str = "its budget", warmup_requests: int = 1, seed: int = 0,
            tag: str | None = None, monitor=None, warmup_tolerance: float = WARMUP_TOLERANCE,
            warmup_output_tokens: int | None = WARMUP_OUTPUT_TOKENS, grace_s: float | None = None,
            slo: dict | None = None, criteria=None) -> list[Measured]:
    """Measure these levels against this server: each level of `plan` in turn, with its own fresh prompts (no
    prefix shared with any other run, so the prompt cache cannot help; `tag` names them, else a random one), warmed
    up, measured (its repetitions pooled), given its window of `monitor` (a running lab.measure.gpumon.Sampler:
    peak VRAM, energy, host RSS over its measured part) and summarised (lab.measure.metrics.summarise_run with
    `slo` and `criteria`).

    Every level has a deadline (`level_limit`, counted from its first warm-up request): with `duration_s` the
    level's time budget (shared among its repetitions) + `grace_s`; without it (a level that counts requests) its
    `budget_s` + `grace_s`, named `what` in the reason. The requests it cut are failures with the reason, counted in
    the level's `cut`. A level cut with nothing answered (a server that stalled or froze) ends the measurement: the
    levels after it are not run, and its `cut` says so."""
    from lab.measure import metrics

    out: list[Measured] = []
    for k, lv in enumerate(plan):
        level = lv.concurrency
        limit = (level_limit(level, duration_s, grace_s) if duration_s
                 else level_limit(level, budget_s, grace_s, what) if budget_s else None)
        warm, account = (warm_up(target, level, prompt_words, seed=seed + k, max_rounds=lv.warmup_rounds,
                                 tolerance=warmup_tolerance, output_tokens=warmup_output_tokens, limit=limit)
                         if lv.warmup_rounds > 0 else (None, None))
        first_warmup = 0 if warm is not None else warmup_requests
        parts, split = [], shares(lv.requests, lv.repetitions)
        for j, n in enumerate(split):
            if parts and limit is not None and limit.expired:
                break  # the level's deadline passed: the repetitions left are not run (the cut says so)
            named = (tag if tag is None or (len(plan) == 1 and len(split) == 1)  # unique within this measurement
                     else f"{tag}-c{level}" + (f"r{j + 1}" if len(split) > 1 else ""))
            prompts = make_prompts(first_warmup + n, prompt_words, seed=seed + k + 1000 * j, tag=named)
            # each repetition sends at least its share of the validity rule's minimum count (MIN_VALID_REQUESTS):
            # a loaded machine's slow requests must not leave a level below it (3 of 4 on a busy 2-core box)
            spec = LoadSpec(concurrency=level, max_requests=n, duration_s=duration_s / len(split) if duration_s else None,
                            warmup_requests=first_warmup, seed=seed + k,
                            min_requests=min(n, -(-MIN_VALID_REQUESTS // len(split))))
            parts.append(run_load(target, prompts, spec, limit=limit))
            first_warmup = 0
        if len(parts) == 1 and warm is None:
            run = parts[0]
        else:
            run = pool(parts, (warm or []) + parts[0].warmup, account)
        warm_cut = cut_reason(warm or [], limit)
        if warm_cut or len(parts) < len(split):
            run.cut = "; ".join(filter(None, [f"warm-up: {warm_cut}" if warm_cut else None, run.cut,
                                              f"{len(split) - len(parts)} repetition(s) not run: the level's deadline "
                                              "had passed" if len(parts) < len(split) else None]))
        if monitor is not None:
            run.resources = monitor.window(run.t0_perf, run.t1_perf, run.output_tokens)
        stalled = run.cut and not any(r.success for r in run.results + run.warmup) and k + 1 < len(plan)
        if stalled:
            run.cut += (f"; nothing answered before the deadline: the server stalled, so the levels after it "
                        f"({', '.join(str(p.concurrency) for p in plan[k + 1:])}) were not run")
        out.append(Measured(run, metrics.summarise_run(run, slo=slo, **({"criteria": criteria} if criteria else {}))))
        if stalled:
            break
    return out


def sweep(target: Target, levels: list[int], requests_per_level: int, prompt_words: int,
          duration_s: float | None = None, warmup_requests: int = 1, seed: int = 0, monitor=None,
          repetitions: int = 1, warmup_max_rounds: int = 0, warmup_tolerance: float = WARMUP_TOLERANCE,
          warmup_output_tokens: int | None = WARMUP_OUTPUT_TOKENS, grace_s: float | None = None,
          budget_s: float | None = None) -> list[RunResult]:
    """Notebook 06's sweep: `measure` at every concurrency of `levels`, each with `requests_per_level` requests
    or `duration_s`, whichever first, shared among `repetitions`, after `warmup_max_rounds` warm-up rounds (0: the
    `warmup_requests` single requests); its RunResults (the summaries are made by the caller, with the profile's
    criteria). Without `duration_s`, `budget_s` gives each level its deadline."""
    plan = [Level(n, requests_per_level, repetitions, warmup_max_rounds) for n in levels]
    return [m.run for m in measure(target, plan, prompt_words, duration_s=duration_s, budget_s=budget_s,
                                   warmup_requests=warmup_requests, seed=seed, monitor=monitor,
                                   warmup_tolerance=warmup_tolerance, warmup_output_tokens=warmup_output_tokens,
                                   grace_s=grace_s)]
