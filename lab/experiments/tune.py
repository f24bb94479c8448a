"""`lab tune`: measure which llama-server settings are worth changing on this box, instead of folklore.

A bounded one-factor-at-a-time sweep: the profile's own settings (the baseline), then one setting changed at a
time — the server's per-request state copies (prompt cache --cache-ram, context checkpoints -ctxcp: 149.6 MiB per
copy on Qwen3.8-27B), threads, batch/micro-batch (-b/-ub), flash attention (-fa), KV cache type (-ctk/-ctv), slots
(-np), the sampling path (what the request asks for, and llama-server's experimental backend sampling), the log level
(-lv), the context (-c), draft-mtp n-max (models with an MTP block) and, as a load rather than a setting, the prompt
length — and at the end the best value of every dimension together. Every point starts its own server and is
measured with the lab's client (lab.measure.load_levels) at one stream and at the profile's highest concurrency, or at
`Method.levels` with repetitions (isolating one lever at a time), with lab.measure.gpumon's energy and memory where
NVML is present. Combinations llama.cpp refuses or that cannot serve the load are skipped with the reason;
points that do not fit the time budget are listed as not run.

What a point is: lab.experiments.tune_settings; which point wins, the noise it must beat and the profile patch:
lab.experiments.tune_choice.

    .venv/bin/python -m lab tune --profile cpu-default --budget-s 60
"""
from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field, replace
from functools import partial

from lab.core import display, fields
from lab.core.profiles import Profile
from lab.experiments.tune_choice import (all_streams, apply_patch, at, choose, combined, noise, one_stream, pareto_front,
                                     patch_yaml, within_noise)
from lab.experiments.tune_settings import (BASELINE_NAME, DIM_FIELDS, REPEAT_NAME, SAMPLING, SINGLE_STREAM_TOLERANCE,
                                       Setting, grid, invalid)


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
    (lab.measure.load_levels.sweep), so a setting's gain can be told from the noise of one server."""

    levels: tuple[int, ...] | None = None
    repetitions: int = 1
    requests_single: int = 3

    def plan(self, profile: Profile, setting: Setting) -> list[tuple[int, int, int, int]]:
        """(level, requests, repetitions, warm-up rounds) per measured level. Levels above the setting's slots would
        queue in the server, so `levels` keeps those ≤ -np (the -np = streams comparison)."""
        if not self.levels:
            conc = max(profile.bench_levels)
            return [(1, self.requests_single, 1, 0), (conc, 2 * conc, 1, 0)]
        from lab.measure.load_levels import WARMUP_MAX_ROUNDS as rounds

        return [(n, n * self.repetitions, self.repetitions, rounds)
                for n in [n for n in self.levels if n <= setting.parallel_slots] or [min(self.levels)]]


def command_for(profile: Profile, setting: Setting):
    """The llama-server command of `setting`: the profile's, with the setting's fields, extra flags and replaced
    values (-fa, -lv, -c)."""
    from lab.serving import engines, serve

    variant = profile.model_copy(update={"threads": setting.threads, "kv_cache_dtype": setting.kv,
                                         "parallel_slots": setting.parallel_slots})
    cmd = engines.build_command(variant, installed_version=engines.installed_version(variant), port=serve.free_port(),
                                extra_args=setting.server_args())
    return engines.with_flags(cmd, setting.replaced())


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
    """Every level of `method.plan` against a running server with `setting` (lab.measure.load_levels.measure: warm-up,
    repetitions, the level's deadline), summarised; the one-stream and top-level figures are the point's headline fields."""
    from lab.core import run_summary
    from lab.experiments import speculative
    from lab.measure import load_levels

    target, words, _ = load_levels.against(srv, setting.prompt_tokens or profile.bench_prompt_tokens,
                                           output_tokens or profile.bench_output_tokens,
                                           extra_body=SAMPLING[setting.sampling] or None)
    plan = [load_levels.Level(level, n, reps, rounds) for level, n, reps, rounds in method.plan(profile, setting)]
    measured = load_levels.measure(target, plan, words, budget_s=profile.bench_duration_s, seed=len(setting.name) * 7,
                                   monitor=monitor)
    runs = {m.run.spec.concurrency: m.summary for m in measured}
    raw = {m.run.spec.concurrency: m.run for m in measured}
    failures = sum(r["failures"] for r in runs.values())
    # the headline figures are levels[1] (`one_stream`) and levels[concurrency] (`all_streams`)
    out = dict(failures=failures, levels={n: run_summary.level_figures(r) for n, r in runs.items()},
               speculative=({n: speculative.acceptance(r.results) for n, r in raw.items()}
                            if setting.spec_n_max is not None else None))
    if failures:
        out.update(status="failed", error=display.clip("; ".join(e for r in runs.values() for e in r["errors"]), 300))
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
    """Per point and level (pure): output, summed decode and steady decode tok/s (all N streams decoding:
    lab.measure.metrics.concurrency_window) as mean ± sd over the repetitions (the values kept), and each as a fraction
    of the baseline's at the same level — one lever at a time against the profile."""
    base = next((p for p in result["points"] if p["dimension"] == "baseline" and p["status"] == "ok"), None)
    out = []
    for p in result["points"]:
        for n, lv in sorted((p.get("levels") or {}).items(), key=lambda kv: int(kv[0])):
            b = ((base or {}).get("levels") or {}).get(n) or {}
            row = {"setting": p["name"], "streams": int(n), "status": p["status"]}
            for key in ("output_throughput", "decode_tok_s_summed", "steady_decode_tok_s"):
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


def budget_checks(result: dict) -> list:
    """The time budget as it went: a point starts only while the budget has room for one and the profile's own settings
    are always measured, so a sweep can end past its budget (20 s given, 214 s taken); said as a warning with why, not
    left as two numbers that contradict each other."""
    from lab.core.checks import Check

    budget, elapsed = result.get("budget_s"), result.get("elapsed_s")
    if result.get("skip_reason") or not budget or elapsed is None:
        return []
    measured, skipped = len(result["points"]), len(result["skipped"])
    over = elapsed > budget
    return [Check("tuning kept to its time budget", "warn" if over else "pass",
                  f"{elapsed:.0f} s taken, {measured} point(s) measured, {skipped} not run",
                  f"≤ {budget:.0f} s (the budget: a point starts only while it has room for one)",
                  (f"the sweep ran {elapsed - budget:.0f} s past its {budget:.0f} s budget: the profile's own settings "
                   "are always measured, and a point once started runs to its end; give a larger budget "
                   "(tune_budget_s, or --budget-s) to measure more settings") if over else "",
                  "lab.experiments.tune.run")]


def build_record(result: dict, fig=None) -> dict:
    from lab.core import evidence
    from lab.core.checks import Check

    ok = [p for p in result["points"] if p["status"] == "ok"]
    if result.get("skip_reason"):
        found = [Check("tuning measured the baseline", "skip", "not run", "the profile's own settings measured",
                       result["skip_reason"], "lab.experiments.tune")]
    else:
        found = [Check("tuning measured the baseline", "pass" if any(p["dimension"] == "baseline" for p in ok) else "fail",
                       f"{len(ok)} points ok, {len(result['points']) - len(ok)} failed, {len(result['skipped'])} skipped",
                       "the profile's own settings measured", "" if ok else "see the failed points' errors", "lab.experiments.tune")]
    found += budget_checks(result)
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
    from lab.measure import gpumon, load_levels

    ap = cli.parser(".venv/bin/python -m lab tune", __doc__.split("\n")[0], ".venv/bin/python -m lab tune",
                    ".venv/bin/python -m lab tune --profile v100-32g-x1 --budget-s 900",
                    ".venv/bin/python -m lab tune --dimensions slots,threads --write-profile tuned.yaml")
    ap.add_argument("--profile", default="cpu-default")
    ap.add_argument("--budget-s", type=float, default=None, help="time budget in seconds (default: the profile's tune_budget_s)")
    ap.add_argument("--dimensions", default=None, help="comma-separated subset: " + ",".join(DIM_FIELDS))
    ap.add_argument("--points", default=None, help="comma-separated parts of point names to keep (e.g. '-fa on,-np 8')")
    ap.add_argument("--levels", default=None, type=lambda v: tuple(int(n) for n in v.split(",")), help="comma-separated stream counts to measure each point at, each warmed "
                    "up until steady and repeated --repetitions times (default: 1 and the profile's top, once)")
    ap.add_argument("--repetitions", type=int, default=None, help="with --levels: repetitions per level (default: "
                    "lab.measure.load_levels.REPETITIONS, 3)")
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
    method = Method(args.levels, args.repetitions or (load_levels.REPETITIONS if args.levels else 1))
    with gpumon.Sampler() as mon:
        result = run(prof, run_dir / "logs" / args.record, args.budget_s or prof.tune_budget_s,
                     args.dimensions.split(",") if args.dimensions else None, monitor=mon,
                     output_tokens=args.output_tokens, method=method,
                     only=args.points.split(",") if args.points else None)
    evidence.write_record(run_dir, args.record, build_record(result, chart(result)), path)
    evidence.write_whole(run_dir / "tune-patch.yaml", result["patch_yaml"])
    if args.write_profile:
        from pathlib import Path

        Path(args.write_profile).write_text(apply_patch(Path(path).read_text(), result["patch_yaml"]))
        print(f"profile with the winner applied: {args.write_profile}")
    print(result["patch_yaml"])
    for c in budget_checks(result):  # the budget as it went, said where the time is seen
        print(f"time: {c.observed}" + (f"; {c.fix}" if c.fix else f", within the {result['budget_s']:.0f} s budget"))
    print(f"record: {run_dir / 'records' / (args.record + '.json')}; patch: {run_dir / 'tune-patch.yaml'}")
    return 0 if result["points"] else 1
