"""`lab tune`: measure which llama-server settings are worth changing on this box, instead of folklore.

A bounded one-factor-at-a-time sweep: the profile's own settings (the baseline), then one setting changed at a
time — the server's per-request state copies (prompt cache --cache-ram, context checkpoints -ctxcp: 149.6 MiB per
copy on Qwen3.8-27B), threads, batch/micro-batch (-b/-ub), flash attention (-fa), KV cache type (-ctk/-ctv), slots
(-np), the sampling path (what the request asks for, and llama-server's experimental backend sampling), the log level
(-lv), the context (-c), draft-mtp n-max (models with an MTP block) and, as a load rather than a setting, the prompt
length — and at the end the best value of every dimension together. Every point starts its own server and is
measured with the lab's client (lab.measure.loadgen) at one stream and at the profile's highest concurrency, or at
`Method.levels` with repetitions (isolating one lever at a time), with lab.measure.gpumon's energy and memory where
NVML is present. Combinations llama.cpp refuses or that cannot serve the load are skipped with the reason;
points that do not fit the time budget are listed as not run.

The winner: the highest aggregate throughput at the profile's concurrency among points whose single-stream
decode is within 5 % of the best single stream (a setting that buys throughput by slowing every user's stream
is reported, not chosen). When anything else was measured and the budget allows, the profile's own settings are
measured a second time at the end: the two baseline runs' spread is this box's run-to-run noise, and a winner whose
gain is within it is reported as noise, not suggested. On the 2-core CI machine (2026-12-01) the profile's own
settings gave 62.5 to 83.8 tok/s at 4 streams in five runs within ten minutes, and a sweep without the repeat
suggested `-ctxcp 0` for +27.6 % on SmolLM2, a model with no recurrent layers for context checkpoints to
matter. The winner is written as a profile patch (YAML) with the measured gain.

    python -m lab tune --profile cpu-default --budget-s 60
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from functools import partial

from lab.core import display, fields
from lab.core.profiles import Profile
from lab.core.run_summary import at_level

LLAMA_DEFAULT_BATCH = (2048, 512)  # llama.cpp common/common.h: n_batch 2048, n_ubatch 512
SINGLE_STREAM_TOLERANCE = 0.95
BASELINE_NAME = "baseline (the profile)"
REPEAT_NAME = "baseline (the profile), again"  # dimension "repeat": measures noise, never a candidate
SOURCE_FA_V = "llama.cpp src/llama-context.cpp: 'quantized V cache requires flash_attn to be enabled'"
# llama-server keeps finished prompts' state in host RAM (--cache-ram, PR #16391) and, for models whose memory
# cannot be rolled back (recurrent / Gated DeltaNet hybrids, SWA), copies each slot's state into "context
# checkpoints" (-ctxcp, PR #15293). For Qwen3.8-27B one state is 149.6 MiB: every request copies it off the
# GPU, on the server's one loop thread, while the other streams wait.
SOURCE_SERVER_STATE = ("llama.cpp common/arg.cpp: '-cram, --cache-ram N: set the maximum cache size in MiB (default: "
                       "8192, -1 - no limit, 0 - disable)', '-ctxcp, --ctx-checkpoints N: max number of context "
                       "checkpoints to create per slot (default: 32)'; tools/server/server-context.cpp creates "
                       "checkpoints only when the memory cannot be partially removed (recurrent/hybrid) or uses SWA")
LLAMA_DEFAULT_VERBOSITY = 3  # common/common.h: verbosity = 3 (LOG_LEVEL_INFO); the lab's servers run -lv 4
SHORT_PROMPT_TOKENS = 32  # prompt_length's other value: a chat turn's size, where prefill is a small share
# What each dimension changes in a Setting (the grid varies only these; `combined` carries them over). The "load"
# dimensions change what the client sends, not the server: measured to explain a gap, never chosen as a winner.
DIM_FIELDS = {"threads": ("threads",), "batch": ("batch", "ubatch"), "flash_attn": ("flash_attn",),
              "kv_cache": ("kv", "flash_attn"), "slots": ("slots",), "sampling": ("sampling", "backend_sampling"),
              "server_state": ("prompt_cache_mib", "ctx_checkpoints"), "log_level": ("log_verbosity",),
              "context": ("context",), "prompt_length": ("prompt_tokens",), "mtp": ("spec_n_max",)}
LOAD_DIMENSIONS = ("prompt_length",)
SAMPLING = {  # request-side variants (llama-server /v1/completions fields); the lab's client asks temperature 0
    "greedy (temperature 0, default chain)": {},
    "top_k 1 only (samplers: [top_k])": {"samplers": ["top_k"], "top_k": 1},
    "temperature 0.8 (default chain)": {"temperature": 0.8},
}


@dataclass(frozen=True)
class Setting:
    """One server configuration. batch None = llama.cpp's default; flash_attn as -fa takes it."""

    name: str
    dimension: str
    threads: int
    kv: str
    slots: int
    flash_attn: str = "auto"
    batch: int | None = None
    ubatch: int | None = None
    sampling: str = "greedy (temperature 0, default chain)"
    backend_sampling: bool = False
    prompt_cache_mib: int | None = None  # --cache-ram; None = llama-server's default (8192 MiB)
    ctx_checkpoints: int | None = None  # -ctxcp; None = llama-server's default (32 per slot)
    prompt_tokens: int | None = None  # the load's prompt length; None = the profile's bench_prompt_tokens
    log_verbosity: int | None = None  # -lv; None = the lab's (lab.serving.engines.LLAMA_LOG_VERBOSITY)
    context: int | None = None  # -c; None = the profile's context_tokens
    spec_n_max: int | None = None  # --spec-type draft-mtp --spec-draft-n-max N (the model's MTP block); None = off

    def server_args(self) -> list[str]:
        """Flags beyond what lab.serving.engines builds from the profile fields (threads, kv, slots); -fa, -lv and -c
        are already in that command and are replaced there (`measure_point`)."""
        args = []
        if self.prompt_cache_mib is not None:
            args += ["--cache-ram", str(self.prompt_cache_mib)]
        if self.ctx_checkpoints is not None:
            args += ["-ctxcp", str(self.ctx_checkpoints)]
        if self.batch is not None:
            args += ["-b", str(self.batch)]
        if self.ubatch is not None:
            args += ["-ub", str(self.ubatch)]
        if self.backend_sampling:
            args += ["-bs"]
        if self.spec_n_max is not None:
            args += ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(self.spec_n_max)]
        return args

    def replaced(self) -> dict[str, str]:
        """The flags of the profile's command whose value this setting replaces: {flag: value}."""
        out = {"-fa": self.flash_attn}
        if self.log_verbosity is not None:
            out["-lv"] = str(self.log_verbosity)
        if self.context is not None:
            out["-c"] = str(self.context)
        return out


def baseline(profile: Profile) -> Setting:
    kv = "f16" if profile.kv_cache_dtype == "auto" else profile.kv_cache_dtype
    return Setting(BASELINE_NAME, "baseline", profile.threads, kv, profile.parallel_slots,
                   "on" if kv in ("q8_0", "q4_0") else "auto")


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def grid(profile: Profile, n_cores: int | None = None) -> list[Setting]:
    """The baseline, then each dimension's other values with everything else at the baseline."""
    n_cores = n_cores or cores()
    base = baseline(profile)
    out = [base]

    def vary(dim: str, label: str, **changes):
        out.append(replace(base, name=f"{dim}: {label}", dimension=dim, **changes))

    # Most telling first, so a short budget still answers it: the server's state copies (prompt cache, context
    # checkpoints: per request on a hybrid model), the sampling path (the fixed per-token cost inside
    # llama-server), flash attention, batch sizes, KV type, slots, threads.
    vary("server_state", "prompt cache off (--cache-ram 0)", prompt_cache_mib=0)
    vary("server_state", "context checkpoints off (-ctxcp 0)", ctx_checkpoints=0)
    vary("server_state", "both off (--cache-ram 0 -ctxcp 0)", prompt_cache_mib=0, ctx_checkpoints=0)
    for label in SAMPLING:
        if label != base.sampling:
            vary("sampling", label, sampling=label)
    vary("sampling", "backend sampling (-bs, experimental)", backend_sampling=True)
    for fa in ("on", "off"):
        if fa != base.flash_attn:
            vary("flash_attn", f"-fa {fa}", flash_attn=fa)
    for b, ub in ((512, 128), (512, 512), (4096, 1024)):
        vary("batch", f"-b {b} -ub {ub}", batch=b, ubatch=ub)
    for kv in ("f16", "q8_0", "q4_0"):
        if kv != base.kv:
            vary("kv_cache", f"-ctk/-ctv {kv}", kv=kv, flash_attn="on" if kv != "f16" else base.flash_attn)
    conc = max(profile.bench_levels)
    for np_ in sorted({conc, max(1, profile.parallel_slots // 2)} - {profile.parallel_slots}):
        vary("slots", f"-np {np_}", slots=np_)
    for t in sorted({1, max(1, profile.threads // 2), n_cores} - {profile.threads}):
        vary("threads", f"-t {t}", threads=t)
    # What the lab's own benchmark adds to a plain server (served ÷ in-process): its log level, its
    # context size, its prompt length. Last, so notebook 06's short budget still answers the ones above first.
    vary("log_level", f"-lv {LLAMA_DEFAULT_VERBOSITY} (llama.cpp's default)", log_verbosity=LLAMA_DEFAULT_VERBOSITY)
    if profile.context_tokens // 4 >= profile.parallel_slots:
        vary("context", f"-c {profile.context_tokens // 4}", context=profile.context_tokens // 4)
    if profile.bench_prompt_tokens != SHORT_PROMPT_TOKENS:
        vary("prompt_length", f"{SHORT_PROMPT_TOKENS}-token prompts (load, not a setting)", prompt_tokens=SHORT_PROMPT_TOKENS)
    for n in mtp_n_max(profile):
        vary("mtp", f"--spec-type draft-mtp --spec-draft-n-max {n}", spec_n_max=n)
    return out


def mtp_n_max(profile: Profile) -> tuple[int, ...]:
    """The draft-mtp n-max values to sweep: lab.measure.speculative's when the model has an MTP block, else none."""
    from lab.measure import speculative

    values = speculative.mtp_n_max_for(profile)
    return values if values == speculative.MTP_N_MAX else ()


def invalid(setting: Setting, profile: Profile, n_cores: int | None = None) -> str | None:
    """Why llama.cpp would refuse this setting or why it cannot serve the profile's load (None: valid)."""
    n_cores = n_cores or cores()
    if setting.kv in ("q8_0", "q4_0") and setting.flash_attn == "off":
        return f"quantized V cache ({setting.kv}) needs -fa on ({SOURCE_FA_V})"
    if setting.batch is not None and setting.ubatch is not None and setting.ubatch > setting.batch:
        return f"-ub {setting.ubatch} > -b {setting.batch}: llama.cpp clamps ub to b, so this is another point's setting"
    if setting.threads > n_cores:
        return f"-t {setting.threads} > {n_cores} cores: oversubscribed threads only measure contention"
    ctx = setting.context or profile.context_tokens
    per_slot = ctx // setting.slots
    need = (setting.prompt_tokens or profile.bench_prompt_tokens) + profile.bench_output_tokens + 16
    if per_slot < need:
        return (f"-np {setting.slots} leaves {per_slot} tokens per slot (-c {ctx} split), "
                f"below the {need} a request needs")
    return None


def at(point: dict, streams, key: str):
    """A point's figure `key` (the run summary's name) at `streams` streams (lab.core.run_summary.at_level)."""
    return at_level(point.get("levels"), streams, key)


def one_stream(point: dict) -> float | None:  # one stream's decode: stream_decode_tok_s at 1 stream
    return at(point, 1, "stream_decode_tok_s")


def all_streams(point: dict) -> float | None:  # the "aggregate": output_throughput at the point's concurrency
    return at(point, point.get("concurrency"), "output_throughput")


def pareto_front(points: list[dict]) -> list[str]:
    """Names of the points no other point beats on both one stream's decode and the total (higher is better)."""
    ok = [(p["name"], one_stream(p), all_streams(p)) for p in points if one_stream(p) is not None and all_streams(p) is not None]
    return [n for n, x, y in ok if not any(qx >= x and qy >= y and (qx > x or qy > y) for _, qx, qy in ok)]


def choose(points: list[dict]) -> dict | None:
    """The best total among points whose single stream is within SINGLE_STREAM_TOLERANCE of the best one."""
    ok = [p for p in points if all_streams(p) is not None and one_stream(p) is not None
          and p.get("dimension") not in ("repeat", *LOAD_DIMENSIONS)]
    if not ok:
        return None
    best_single = max(one_stream(p) for p in ok)
    fair = [p for p in ok if one_stream(p) >= SINGLE_STREAM_TOLERANCE * best_single]
    return max(fair, key=lambda p: (all_streams(p), one_stream(p)))


def noise(points: list[dict]) -> dict | None:
    """Run-to-run spread of the profile's own settings measured twice (|a − b| ÷ their mean), per quantity;
    None when the repeat was not measured."""
    runs = [p for p in points if p.get("dimension") in ("baseline", "repeat") and p.get("status", "ok") == "ok"]
    if len(runs) < 2:
        return None

    def spread(figure) -> float | None:
        a, b = figure(runs[0]), figure(runs[1])
        return None if a is None or b is None or not a + b else abs(a - b) / ((a + b) / 2)

    return {"output_throughput": spread(all_streams), "stream_decode_tok_s": spread(one_stream)}


def within_noise(winner: dict | None, base: dict | None, spread: dict | None) -> bool | None:
    """Whether the winner's aggregate gain over the baseline is no larger than the measured noise (None: no
    winner other than the baseline, or the noise was not measured)."""
    if not winner or not base or winner.get("dimension") == "baseline" or not spread:
        return None
    if spread.get("output_throughput") is None or not all_streams(base):
        return None
    return all_streams(winner) / all_streams(base) - 1 <= spread["output_throughput"]


def combined(points: list[dict], settings: dict[str, Setting], profile: Profile) -> Setting | None:
    """Every dimension's best measured value together (by the same rule as the winner), when that differs from
    all measured points: one-factor-at-a-time misses interactions, so the combination is measured, not assumed."""
    base = settings[BASELINE_NAME]
    chosen = base
    changed = []
    for dim, fields in DIM_FIELDS.items():
        if dim in LOAD_DIMENSIONS:
            continue
        cands = [p for p in points if p["dimension"] in (dim, "baseline")]
        best = choose(cands)
        if best and best["dimension"] == dim:
            s = settings[best["name"]]
            chosen = replace(chosen, **{f: getattr(s, f) for f in fields})  # only what this dimension changed
            changed.append(best["name"])
    if len(changed) < 2:
        return None
    return replace(chosen, name="combined: " + " + ".join(changed), dimension="combined")


def patch_yaml(profile: Profile, winner: dict | None, base: dict | None, setting: Setting | None, when: str,
               spread: dict | None = None) -> str:
    """The winner as lines to paste into params/<profile>.yaml (comments say what was measured); none when its
    gain is within the run-to-run noise `spread` (from `noise`)."""
    if not winner or not setting or not base:
        return f"# lab tune ({when}): nothing measured, no patch\n"
    gain = all_streams(winner) / all_streams(base) - 1 if all_streams(base) else None
    one = one_stream(winner) / one_stream(base) - 1 if one_stream(base) else None
    lines = [f"# lab tune on {profile.name}, {when}: winner '{winner['name']}'",
             f"# aggregate at {winner['concurrency']} streams: {display.fmt(all_streams(winner))} tok/s"
             + (f" ({gain:+.1%} vs the profile's settings)" if gain is not None else ""),
             f"# single-stream decode: {display.fmt(one_stream(winner))} tok/s"
             + (f" ({one:+.1%})" if one is not None else "")]
    if winner["name"] == BASELINE_NAME:
        lines.append("# the profile's own settings won: nothing to change"
                     + (f" (run-to-run noise {spread['output_throughput']:.1%})"
                        if spread and spread.get("output_throughput") is not None else ""))
        return "\n".join(lines) + "\n"
    if within_noise(winner, base, spread):
        lines.append(f"# that gain is within the run-to-run noise: the profile's own settings measured twice differed "
                     f"by {spread['output_throughput']:.1%}: nothing to change")
        return "\n".join(lines) + "\n"
    if not spread or spread.get("output_throughput") is None:
        lines.append("# run-to-run noise not measured (the repeat of the profile's settings did not fit the time "
                     "budget): a gain of a few percent may be noise")
    else:
        lines.append(f"# larger than the run-to-run noise ({spread['output_throughput']:.1%} between two runs of the "
                     "profile's own settings)")
    if setting.threads != profile.threads:
        lines.append(f"threads: {setting.threads}")
    if setting.slots != profile.parallel_slots:
        lines.append(f"parallel_slots: {setting.slots}")
    if setting.kv != (profile.kv_cache_dtype if profile.kv_cache_dtype != "auto" else "f16"):
        lines.append(f"kv_cache_dtype: {setting.kv}")
    if setting.context is not None and setting.context != profile.context_tokens:
        lines.append(f"context_tokens: {setting.context}")
    # a repeated llama.cpp flag takes its last value (common/arg.cpp), so -fa/-lv after the lab's own win
    extra = (setting.server_args() + (["-fa", setting.flash_attn] if setting.flash_attn != baseline(profile).flash_attn else [])
             + (["-lv", str(setting.log_verbosity)] if setting.log_verbosity is not None else []))
    if extra:  # server_args replaces the profile's list: keep its flags, the winner's values override theirs
        lines.append(f"server_args: {merge_args(list(profile.server_args or []), extra)!r}".replace("'", '"'))
    if setting.sampling != Setting.sampling:
        lines.append(f"# sampling: '{setting.sampling}' is what clients should ask for (a request field, not a "
                     "server setting)")
    return "\n".join(lines) + "\n"


def merge_args(base: list[str], extra: list[str]) -> list[str]:
    """`base` with `extra`'s flags: a flag already there takes extra's value, a new one is appended (pure). A token
    starting with '-' followed by one that does not is a flag with its value; otherwise a switch."""
    out, i = list(base), 0
    while i < len(extra):
        flag = extra[i]
        has_value = i + 1 < len(extra) and not extra[i + 1].startswith("-")
        value = [extra[i + 1]] if has_value else []
        if flag in out:
            j = out.index(flag)
            if value and j + 1 < len(out) and not out[j + 1].startswith("-"):
                out[j + 1] = value[0]
        else:
            out += [flag, *value]
        i += 1 + len(value)
    return out


def apply_patch(profile_text: str, patch: str) -> str:
    """The profile YAML with the patch's keys set (lab.core.profiles.set_keys); the patch's comment lines go above
    them, so the copy says what was measured."""
    import yaml

    from lab.core import profiles

    return profiles.set_keys(profile_text, yaml.safe_load(patch) or {},
                             [ln for ln in patch.splitlines() if ln.startswith("#")])


# ---------------------------------------------------------------- measuring (needs llama-server)
@dataclass
class Budget:
    seconds: float
    started: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.started)


@dataclass(frozen=True)
class Method:
    """How each point is measured. The default (no `levels`): one stream (3 requests) and the profile's top
    concurrency (2 × N requests), one warm-up request each — notebook 06's quick sweep. With `levels` (`lab tune
    --levels 1,8,16 --repetitions 3`, isolating one lever at a time): every level warmed up until steady and measured
    `repetitions` times as closed batches of N requests, with the spread recorded — notebook 06's own method
    (lab.measure.loadgen.sweep), so a setting's gain can be told from the noise of one server."""

    levels: tuple[int, ...] | None = None
    repetitions: int = 1
    requests_single: int = 3

    def plan(self, profile: Profile, setting: Setting) -> list[tuple[int, int, int, int]]:
        """(level, requests, repetitions, warm-up rounds) per measured level. Levels above the setting's slots would
        queue in the server, so `levels` keeps those ≤ -np (the -np = streams comparison)."""
        if not self.levels:
            conc = max(profile.bench_levels)
            return [(1, self.requests_single, 1, 0), (conc, 2 * conc, 1, 0)]
        from lab.measure.loadgen import WARMUP_MAX_ROUNDS as rounds

        return [(n, n * self.repetitions, self.repetitions, rounds)
                for n in [n for n in self.levels if n <= setting.slots] or [min(self.levels)]]


def command_for(profile: Profile, setting: Setting):
    """The llama-server command of `setting`: the profile's, with the setting's fields, extra flags and replaced
    values (-fa, -lv, -c)."""
    from lab.serving import engines, serve

    variant = profile.model_copy(update={"threads": setting.threads, "kv_cache_dtype": setting.kv,
                                         "parallel_slots": setting.slots})
    cmd = engines.build_command(variant, installed_version=engines.installed_version(variant), port=serve.free_port(),
                                extra_args=setting.server_args())
    argv = list(cmd.argv)
    for flag, value in setting.replaced().items():
        argv[argv.index(flag) + 1] = value
    return replace(cmd, argv=tuple(argv))


def measure_point(profile: Profile, setting: Setting, log_dir, monitor=None, output_tokens: int | None = None,
                  method: Method = Method()) -> dict:
    """Start the server with `setting`, measure its levels (`method`), stop it."""
    from lab.serving import serve

    how = partial(_levels, profile=profile, setting=setting, monitor=monitor, output_tokens=output_tokens,
                  method=method)
    return {"name": setting.name, "dimension": setting.dimension, "setting": asdict(setting),
            "concurrency": max(method.levels or profile.bench_levels),
            **serve.measure(command_for(profile, setting), log_dir,
                            "tune_" + "".join(c if c.isalnum() else "_" for c in setting.name)[:60], how, monitor=monitor)}


def _levels(srv, *, profile: Profile, setting: Setting, monitor, output_tokens: int | None, method: Method) -> dict:
    """Every level of `method.plan` against a running server with `setting` (lab.measure.loadgen.sweep: warm-up,
    repetitions), summarised; the one-stream and top-level figures are the point's headline fields."""
    from lab.core import run_summary
    from lab.measure import loadgen, metrics, speculative
    from lab.serving import serve

    words, _ = loadgen.words_for_tokens(srv.base_url, setting.prompt_tokens or profile.bench_prompt_tokens, srv.headers())
    target = loadgen.Target(srv.base_url, model=serve.model_name(srv),
                            max_tokens=output_tokens or profile.bench_output_tokens, api_key=srv.api_key,
                            extra_body=SAMPLING[setting.sampling] or None)
    runs, raw = {}, {}
    for level, n, reps, rounds in method.plan(profile, setting):
        run = loadgen.sweep(target, [level], n, words, warmup_requests=1, seed=len(setting.name) * 7 + level,
                            repetitions=reps, warmup_max_rounds=rounds, budget_s=profile.bench_duration_s)[0]
        if monitor is not None:
            run.resources = monitor.window(run.t0_perf, run.t1_perf, run.output_tokens)
        runs[level], raw[level] = metrics.summarise_run(run), run
    failures = sum(r["failures"] for r in runs.values())
    # the headline figures are levels[1] (`one_stream`) and levels[concurrency] (`all_streams`)
    out = dict(failures=failures, levels={n: run_summary.level_figures(r) for n, r in runs.items()},
               speculative=({n: speculative.acceptance(r.results) for n, r in raw.items()}
                            if setting.spec_n_max is not None else None))
    if failures:
        out.update(status="failed", error="; ".join(e for r in runs.values() for e in r["errors"])[:300])
    return out


def run(profile: Profile, log_dir, budget_s: float = 120.0, dimensions: list[str] | None = None,
        monitor=None, output_tokens: int | None = None, progress=print, method: Method = Method(),
        only: list[str] | None = None) -> dict:
    """The whole sweep within `budget_s` seconds; returns the tune result (points, skipped, winner, patch)."""
    from pathlib import Path

    from lab.serving import serve

    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    budget = Budget(budget_s)
    reason = serve.why_not_flag_sweep(profile)
    if reason:
        progress(f"[tune] skipped: {reason}")
        return {"profile": profile.name, "budget_s": budget_s, "elapsed_s": 0.0, "concurrency": max(method.levels or profile.bench_levels),
                "points": [], "skipped": [{"name": "every setting", "dimension": "all", "reason": reason}],
                "pareto_front": [], "winner": None, "winner_vs_baseline": None, "skip_reason": reason,
                "patch_yaml": f"# lab tune: not run here ({reason})\n", "rule": ""}
    settings = [s for s in grid(profile) if (dimensions is None or s.dimension in (*dimensions, "baseline"))
                and (only is None or s.dimension == "baseline" or any(o in s.name for o in only))]
    by_name = {s.name: s for s in settings}
    points, skipped = [], []
    durations: list[float] = []

    def attempt(s: Setting, k: int, total: int):
        why = invalid(s, profile)
        if why:
            skipped.append({"name": s.name, "dimension": s.dimension, "reason": why})
            progress(f"[tune] {k}/{total} {s.name}: skipped — {why}")
            return
        typical = sorted(durations)[len(durations) // 2] if durations else 0.0
        # a point other than the baseline and its repeat keeps room for the repeat: without it no gain can be
        # told from noise
        needed = typical if s.dimension in ("baseline", "repeat") else 2 * typical
        if budget.left() < needed:
            skipped.append({"name": s.name, "dimension": s.dimension,
                            "reason": f"time budget: {budget_s - budget.left():.0f} s of {budget_s:.0f} s spent, "
                                      f"a point takes ~{typical:.0f} s here"
                                      + ("" if needed == typical else " (and the baseline's repeat keeps its time)")})
            progress(f"[tune] {k}/{total} {s.name}: not run (time budget)")
            return
        row = measure_point(profile, s, log_dir, monitor, output_tokens=output_tokens, method=method)
        durations.append(row["seconds"])
        points.append(row)
        progress(f"[tune] {k}/{total} {s.name}: {row['status']}, 1 stream {display.fmt(one_stream(row))} tok/s, "
                 f"{row['concurrency']} streams {display.fmt(all_streams(row))} tok/s ({row['seconds']} s; "
                 f"{budget.left():.0f} s of budget left)" + (f" — {row['error']}" if row["error"] else ""))

    total = len(settings) + 2  # + the combination + the baseline's repeat
    for k, s in enumerate(settings, 1):
        attempt(s, k, total)
    combo = combined([p for p in points if p["status"] == "ok"], by_name, profile)
    if combo is not None:
        by_name[combo.name] = combo
        attempt(combo, len(settings) + 1, total)
    if any(p["status"] == "ok" and p["dimension"] != "baseline" for p in points):  # something to judge against noise
        attempt(replace(by_name[BASELINE_NAME], name=REPEAT_NAME, dimension="repeat"), total, total)
    ok = [p for p in points if p["status"] == "ok"]
    candidates = [p for p in ok if p["dimension"] != "repeat"]
    winner = choose(candidates)
    base_row = next((p for p in ok if p["dimension"] == "baseline"), None)
    spread = noise(ok)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    patch = patch_yaml(profile, winner, base_row, by_name.get(winner["name"]) if winner else None, when, spread)
    return {"profile": profile.name, "budget_s": budget_s, "elapsed_s": round(budget_s - budget.left(), 1),
            "concurrency": max(method.levels or profile.bench_levels), "points": points, "skipped": skipped,
            "pareto_front": pareto_front(candidates), "winner": winner["name"] if winner else None,
            "winner_vs_baseline": (all_streams(winner) / all_streams(base_row)
                                   if winner and base_row and all_streams(base_row) else None),
            "noise": spread, "winner_within_noise": within_noise(winner, base_row, spread), "method": asdict(method),
            "patch_yaml": patch, "rule": f"best aggregate at the top concurrency among points whose single-stream "
                                         f"decode is ≥ {SINGLE_STREAM_TOLERANCE:.0%} of the best single stream, "
                                         f"and more than the run-to-run noise above the profile's own settings"}


# ---------------------------------------------------------------- show and record
# The table's figures, by the run summary's names (lab/data/fields.yaml), at one stream and at the point's concurrency
ROW_FIGURES_ONE_STREAM = ("stream_decode_tok_s", "server_decode_tok_s")
ROW_FIGURES_ALL_STREAMS = ("output_throughput", "tpot_p50_ms", "e2el_p50_ms", "joules_per_token")


def rows(result: dict) -> list[dict]:
    """The points' figures at one stream and at their concurrency ("output_throughput@16"), schema-rounded."""
    out = []
    for p in result["points"]:
        n = p["concurrency"]
        out.append({"setting": p["name"], "status": p["status"],
                    **{fields.at(k, 1): display.rounded(at(p, 1, k), k) for k in ROW_FIGURES_ONE_STREAM},
                    **{fields.at(k, n): display.rounded(at(p, n, k), k) for k in ROW_FIGURES_ALL_STREAMS},
                    "pareto": p["name"] in result["pareto_front"],
                    "winner": p["name"] == result["winner"], "error": p.get("error")})
    for s in result["skipped"]:
        out.append({"setting": s["name"], "status": "skip", "error": s["reason"]})
    return out


def level_rows(result: dict) -> list[dict]:
    """Per point and level (pure): output and summed decode tok/s as mean ± sd over the repetitions (the values
    kept), and each as a fraction of the baseline's at the same level — one lever at a time against the profile."""
    base = next((p for p in result["points"] if p["dimension"] == "baseline" and p["status"] == "ok"), None)
    out = []
    for p in result["points"]:
        for n, lv in sorted((p.get("levels") or {}).items(), key=lambda kv: int(kv[0])):
            b = ((base or {}).get("levels") or {}).get(n) or {}
            row = {"setting": p["name"], "streams": int(n), "status": p["status"]}
            for key in ("output_throughput", "decode_tok_s_summed"):
                label = display.label(key)
                sp = (lv.get("spread") or {}).get(key) or {}
                mean = sp.get("mean", lv.get(key))
                bm = ((b.get("spread") or {}).get(key) or {}).get("mean", b.get(key))
                row |= {label: display.rounded(mean, key), label + " sd": display.rounded(sp.get("sd"), key),
                        label + " ÷ baseline": display.rounded(mean / bm) if mean and bm else None,
                        label + " values": display.rounded(list(sp.get("values") or []), key)}
            row["warm-up steady"] = (lv.get("warmup") or {}).get("steady")
            out.append(row)
    return out


def chart(result: dict, title: str = "lab tune: throughput vs latency per setting"):
    """x: per-token latency at the top concurrency (TPOT p50), y: aggregate tok/s; one colour per dimension,
    the Pareto front (by single-stream decode and aggregate) as a line, the winner starred."""
    import plotly.graph_objects as go

    def tpot(p):  # TPOT p50 at the point's concurrency
        return at(p, p["concurrency"], "tpot_p50_ms")

    fig = go.Figure()
    ok = [p for p in result["points"] if p["status"] == "ok" and all_streams(p) is not None]
    for dim in dict.fromkeys(p["dimension"] for p in ok):
        pts = [p for p in ok if p["dimension"] == dim]
        fig.add_trace(go.Scatter(x=[tpot(p) for p in pts], y=[all_streams(p) for p in pts],
                                 mode="markers", name=dim, text=[p["name"] for p in pts], marker={"size": 10},
                                 hovertemplate="%{text}<br>TPOT %{x:.1f} ms<br>%{y:.1f} tok/s<extra></extra>"))
    front = sorted((p for p in ok if p["name"] in result["pareto_front"]), key=lambda p: tpot(p) or 0)
    if front:
        fig.add_trace(go.Scatter(x=[tpot(p) for p in front], y=[all_streams(p) for p in front],
                                 mode="lines", name="Pareto front (1-stream decode × total)", line={"dash": "dot"}))
    win = next((p for p in ok if p["name"] == result["winner"]), None)
    if win:
        fig.add_trace(go.Scatter(x=[tpot(win)], y=[all_streams(win)], mode="markers", name="winner",
                                 marker={"symbol": "star", "size": 18, "color": "gold", "line": {"width": 1}}))
    fig.update_layout(title=title, xaxis_title=f"TPOT p50 at {result['concurrency']} streams (ms)",
                      yaxis_title=f"total output tok/s at {result['concurrency']} streams", height=450)
    return fig


def build_record(result: dict, fig=None) -> dict:
    from lab.core import evidence
    from lab.core.checks import Check

    ok = [p for p in result["points"] if p["status"] == "ok"]
    if result.get("skip_reason"):
        found = [Check("tuning measured the baseline", "skip", "not run", "the profile's own settings measured",
                       result["skip_reason"], "lab.measure.tune")]
    else:
        found = [Check("tuning measured the baseline", "pass" if any(p["dimension"] == "baseline" for p in ok) else "fail",
                       f"{len(ok)} points ok, {len(result['points']) - len(ok)} failed, {len(result['skipped'])} skipped",
                       "the profile's own settings measured", "" if ok else "see the failed points' errors", "lab.measure.tune")]
    charts = [evidence.chart_entry("Throughput vs latency per setting (Pareto front)", fig)] if fig is not None else []
    return {"title": "Tuning: llama-server settings measured one at a time",
            "summary": {k: result.get(k) for k in ("winner", "winner_vs_baseline", "noise", "winner_within_noise",
                                                    "budget_s", "elapsed_s", "concurrency", "rule")}
            | {"points_ok": len(ok), "points_skipped": len(result["skipped"]), "patch_yaml": result["patch_yaml"]},
            "checks": [c.to_dict() for c in found], "tables": [evidence.table_entry("Settings measured", rows(result))]
            + ([evidence.table_entry("Per level: mean ± sd over the repetitions, ÷ the baseline", level_rows(result))]
               if (result.get("method") or {}).get("levels") else []),
            "charts": charts, "tune": result}


def main(argv: list[str] | None = None) -> int:
    from lab.core import cli, evidence, profiles
    from lab.measure import gpumon, loadgen

    ap = cli.parser("python -m lab tune", __doc__.split("\n")[0], "python -m lab tune",
                    "python -m lab tune --profile v100-32g-x1 --budget-s 900",
                    "python -m lab tune --dimensions slots,threads --write-profile tuned.yaml")
    ap.add_argument("--profile", default="cpu-default")
    ap.add_argument("--budget-s", type=float, default=None, help="time budget in seconds (default: the profile's tune_budget_s)")
    ap.add_argument("--dimensions", default=None, help="comma-separated subset: " + ",".join(DIM_FIELDS))
    ap.add_argument("--points", default=None, help="comma-separated parts of point names to keep (e.g. '-fa on,-np 8')")
    ap.add_argument("--levels", default=None, type=lambda v: tuple(int(n) for n in v.split(",")), help="comma-separated stream counts to measure each point at, each warmed "
                    "up until steady and repeated --repetitions times (default: 1 and the profile's top, once)")
    ap.add_argument("--repetitions", type=int, default=None, help="with --levels: repetitions per level (default: "
                    "lab.measure.loadgen.REPETITIONS, 3)")
    ap.add_argument("--output-tokens", type=int, default=None, help="tokens per request (default: the profile's)")
    ap.add_argument("--record", default="06_tune", help="record name in the run folder (default 06_tune)")
    ap.add_argument("--run-dir", default=None, help="run folder to write records/06_tune.json into (default: a new one)")
    ap.add_argument("--write-profile", default=None, metavar="PATH",
                    help="also write a copy of the profile with the winner's settings applied to PATH")
    args = ap.parse_args(argv)
    try:
        path = profiles.resolve(args.profile)
        prof = profiles.load(path)
    except profiles.ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    run_dir = evidence.notebook_run_dir(args.run_dir or "", prof.name)
    method = Method(args.levels, args.repetitions or (loadgen.REPETITIONS if args.levels else 1))
    with gpumon.Sampler() as mon:
        result = run(prof, run_dir / "logs" / args.record, args.budget_s or prof.tune_budget_s,
                     args.dimensions.split(",") if args.dimensions else None, monitor=mon,
                     output_tokens=args.output_tokens, method=method,
                     only=args.points.split(",") if args.points else None)
    evidence.write_record(run_dir, args.record, build_record(result, chart(result)), path)
    (run_dir / "tune-patch.yaml").write_text(result["patch_yaml"])
    if args.write_profile:
        from pathlib import Path

        Path(args.write_profile).write_text(apply_patch(Path(path).read_text(), result["patch_yaml"]))
        print(f"profile with the winner applied: {args.write_profile}")
    print(result["patch_yaml"])
    print(f"record: {run_dir / 'records' / (args.record + '.json')}; patch: {run_dir / 'tune-patch.yaml'}")
    return 0 if result["points"] else 1
