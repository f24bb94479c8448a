"""Which `lab tune` point wins, and the profile patch that says so (pure): the Pareto front of single-stream decode
and aggregate throughput, the rule (`choose`), the run-to-run noise of the baseline measured twice (`noise`), the
combination of every dimension's best (`combined`), and the YAML patch (`patch_yaml`, `apply_patch`); lab.experiments.tune
measures the points (lab.experiments.tune_settings: what a point is).

The winner: the highest aggregate throughput at the profile's concurrency among points whose single-stream
decode is within 5 % of the best single stream (a setting that buys throughput by slowing every user's stream
is reported, not chosen). When anything else was measured and the budget allows, the profile's own settings are
measured a second time at the end: the two baseline runs' spread is this box's run-to-run noise, and a winner whose
gain is within it is reported as noise, not suggested. On the 2-core CI machine (2026-12-01) the profile's own
settings gave 62.5 to 83.8 tok/s at 4 streams in five runs within ten minutes, and a sweep without the repeat
suggested `-ctxcp 0` for +27.6 % on SmolLM2, a model with no recurrent layers for context checkpoints to
matter. The winner is written as a profile patch (YAML) with the measured gain.
"""
from __future__ import annotations

from dataclasses import replace

from lab.core import display
from lab.core.profiles import Profile
from lab.core.run_summary import at_level
from lab.experiments.tune_settings import (BASELINE_NAME, DIM_FIELDS, LOAD_DIMENSIONS, SINGLE_STREAM_TOLERANCE, Setting,
                                       baseline)


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
    if setting.parallel_slots != profile.parallel_slots:
        lines.append(f"parallel_slots: {setting.parallel_slots}")
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
    """`base` with `extra`'s flags (lab.serving.engines.with_flags: a flag already there takes extra's value, a new
    one is appended; pure). A token starting with '-' followed by one that does not is a flag with its value;
    otherwise a switch."""
    from lab.serving import engines

    flags, i = {}, 0
    while i < len(extra):
        has_value = i + 1 < len(extra) and not extra[i + 1].startswith("-")
        flags[extra[i]] = extra[i + 1] if has_value else True
        i += 1 + has_value
    return engines.with_flags(base, flags)


def apply_patch(profile_text: str, patch: str) -> str:
    """The profile YAML with the patch's keys set (lab.core.profile_file.set_keys); the patch's comment lines go above
    them, so the copy says what was measured."""
    import yaml

    from lab.core import profile_file

    return profile_file.set_keys(profile_text, yaml.safe_load(patch) or {},
                             [ln for ln in patch.splitlines() if ln.startswith("#")])
