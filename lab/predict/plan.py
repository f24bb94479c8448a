"""What should happen on a profile's hardware, worked out without the hardware.

`plan(profile)` is pure: it reads only the profile object, the lab's own data (lab/data/) and the model
files the profile names when they are on this machine (headers and sizes; the weight figure says which basis it
used: lab.model.weights.profile_weights), never a GPU, a process or the network. It composes parts — the
compatibility findings, the memory fit (lab.predict.memory_plan), the speed ceiling — so `lab plan --json` and
the notebooks read one shape.
"""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

from lab.core import cli, display
from lab.predict import compat
from lab.core.profiles import Profile, load


def compat_part(profile: Profile) -> dict:
    """The compatibility rules judged on what the profile declares."""
    findings = compat.evaluate(compat.facts_from_profile(profile))
    return {"findings": [f.to_dict() for f in findings]}


MEMORY_KEYS = ("weights_bytes", "kv_bytes_per_token", "kv_bytes_total", "recurrent_state_bytes_per_sequence",
               "recurrent_state_bytes_total", "max_context_tokens", "max_concurrent_sequences", "fits")


def memory_part(profile: Profile) -> dict:
    """Weights + KV cache + runtime overhead against the memory the profile has (lab.predict.memory_plan)."""
    from lab.model import models
    from lab.predict import memory_plan

    arch = models.arch_for(profile)
    mem = memory_plan.plan_memory(profile, arch)
    part = {k: mem[k] for k in MEMORY_KEYS}
    part["model_source"] = arch.source
    part["memory"] = {k: v for k, v in mem.items() if k != "findings"}
    part["findings"] = mem.get("findings", [])
    return part


def speed_part(profile: Profile) -> dict:
    """Decode ceiling (bandwidth ÷ bytes read per token), the calibrated prediction, and the seeds'
    claims judged for this profile on physics and arithmetic (lab.predict.claims; a plan measures nothing)."""
    from lab.predict import claims

    return claims.plan_part(profile)


def projection_part(profile: Profile, weights_bytes: float | None, read_bytes: float | None = None) -> list[dict]:
    """Single-stream decode of this profile's model projected on a V100, an RTX 4090 and the H200 by the
    per-token model calibrated on the lab's H200 (lab.predict.roofline.projection_rows), beside the plain roofline.
    `read_bytes`: the bytes read per token the profile's own ceiling uses (weights + KV and recurrent state at the
    benchmark's depth, lab.predict.profile_speed), so one plan prints one ceiling per card."""
    from lab.predict import roofline

    if not weights_bytes:
        return []
    return roofline.projection_rows(weights_bytes, roofline.profile_family(profile), read_bytes=read_bytes)


def public_check_part(profile: Profile) -> dict | None:
    """The per-token model against published measurements on this profile's card (lab.predict.public_check):
    the card's rows (published, predicted, error, source) and the summary over all comparable rows; None when the
    profile's GPU has no public rows."""
    from lab.predict import public_check, roofline

    spec = roofline.gpu_spec_for(profile.gpu_name_pattern or profile.name) if profile.gpu_count else None
    if spec is None:
        return None
    result = public_check.check()
    rows = public_check.rows_for_gpu(spec["id"], result)
    if not rows:
        return None
    return {"gpu": spec["name"], "rows": rows, "summary": result["comparable"], "all": result["all"],
            "depth": result["depth"], "outliers": public_check.summary([r["error"] for r in result["rows"] if r["outlier"]]),
            "targets": result["targets"]}


def served_part(profile: Profile, plain_tok_s: float | None) -> dict | None:
    """Decode summed over 8 and 16 streams through llama-server, with host sampling and with -bs
    (lab.predict.served_speed: batched step + the server's per-stream and per-step terms); None for a profile it does
    not cover (CPU, vLLM)."""
    from lab.predict import served_speed

    rows = served_speed.profile_rows(profile, plain_tok_s)
    return {"rows": rows, "how": served_speed.how()} if rows else None


def routes_part(profile: Profile) -> dict | None:
    """Every route for a V100 profile (lab.predict.routes.route_table) with the MTP model's check on the public rows
    (lab.predict.public_check.mtp_check: summary, per architecture, held out, targets); None for other profiles."""
    from lab.predict import public_check, routes

    part = routes.route_table(profile)
    if part is not None:
        check = public_check.mtp_check()
        part["mtp_check"] = {k: check[k] for k in ("comparable", "by_arch", "held_out", "targets")}
    return part


def plan(profile: Profile | str | Path) -> dict:
    """{"profile": name, "findings": [{"id", "severity", "message", "fix", "source"}, ...]}.

    A name or path is loaded (and validated) first; a Profile is used as given.
    """
    prof = profile if isinstance(profile, Profile) else load(profile)
    result: dict = {"profile": prof.name}
    findings = compat_part(prof)["findings"]
    mem = memory_part(prof)
    findings += mem.pop("findings")
    result.update(mem)
    result.update(speed_part(prof))
    result["projections"] = projection_part(prof, result.get("weights_bytes"),
                                            (result.get("roofline") or {}).get("bytes_per_token"))
    result["served_streams"] = served_part(prof, result.get("predicted_decode_tok_s"))
    result["public_check"] = public_check_part(prof)
    result["routes"] = routes_part(prof)
    result["findings"] = sorted(findings, key=lambda f: ("error", "warn", "info").index(f["severity"]))
    return result


UNITS = "sizes in GiB (2^30 bytes), bandwidth in GB/s and bytes read per token in GB (10^9 bytes)"


def memory_sum(result: dict, mem: dict) -> str:
    """The memory line as a sum that adds up, per device: the weights it holds (the file's weights less what stays
    in host memory, the token embedding), KV and recurrent state, overhead, against its budget, and what is spare
    (budget − the parts; it once printed 15.40 + 8.00 + 0.58 + 1.23 printed beside "7.45 GiB spare" of 32)."""
    gib = 2**30
    state = result.get("recurrent_state_bytes_total") or 0
    kv_dtype = f" at {mem['kv_dtype']}" if mem else ""
    kv_dev = mem.get("kv_bytes_per_device", result["kv_bytes_total"])
    weights = f"weights {mem.get('weights_bytes_per_device', result['weights_bytes']) / gib:.2f} GiB"
    if mem.get("weights_host_bytes"):
        weights += (f" (of {mem['weights_bytes'] / gib:.2f}: the {mem['weights_host_bytes'] / gib:.2f} GiB token "
                    "embedding stays in host memory)")
    if mem.get("devices", 1) > 1:  # the fullest device's share; the lines per GPU below give each card
        kv_part = (f"KV and state {mem['kv_bytes_per_device'] / gib:.2f} GiB (of {result['kv_bytes_total'] / gib:.2f} "
                   f"over {mem['devices']} devices, {result['kv_bytes_per_token'] / 1024:.0f} KiB/token{kv_dtype})")
    elif state:
        # vLLM's kv_bytes_per_device is one full-length sequence (--max-model-len; the pool takes what is left), so it
        # holds one sequence's state, not every slot's (the line once read "KV -0.19 GiB" for 16 slots on an H100)
        one = mem.get("engine") == "vllm"
        if one:
            state = result["recurrent_state_bytes_per_sequence"]
        kv_part = (f"KV {(kv_dev - state) / gib:.2f} GiB ({result['kv_bytes_per_token'] / 1024:.0f} "
                   f"KiB/token{kv_dtype}, full-attention layers{', one full-length sequence' if one else ''}) + "
                   f"recurrent state {state / gib:.2f} GiB "
                   f"({result['recurrent_state_bytes_per_sequence'] / 2**20:.2f} MiB/sequence, Gated DeltaNet layers)")
    else:
        kv_part = f"KV {kv_dev / gib:.2f} GiB ({result['kv_bytes_per_token'] / 1024:.0f} KiB/token{kv_dtype})"
    if not mem:  # a plan without its memory part (a caller's few keys): the parts alone, no budget to add up to
        return f"{weights} + {kv_part}"
    used = mem["weights_bytes_per_device"] + mem["kv_bytes_per_device"] + mem["overhead_bytes"]
    spare = mem.get("spare_bytes")
    verdict = ("fits" if result["fits"] else "does NOT fit") + (
        f", {spare / gib:.2f} GiB spare per device" if spare is not None and result["fits"] else "")
    return (f"{weights} + {kv_part} + overhead {mem['overhead_bytes'] / gib:.2f} GiB = {used / gib:.2f} of "
            f"{mem['budget_bytes'] / gib:.2f} GiB per device ({mem['memory_kind']}, {mem['devices']} device(s); "
            f"{mem['context_tokens']} tokens over {mem['parallel_slots']} slot(s)) → {verdict}")


def describe(result: dict) -> str:
    """The plan as plain text for a terminal: one block per finding, errors first. One unit per quantity (UNITS):
    memory sizes in GiB, as llama.cpp and nvidia-smi count them; bandwidth and the bytes a token reads in decimal
    GB, as the datasheets count them (the ceiling divides one by the other). The notes about this machine
    (`on_this_machine`, added by `lab plan`) are counted and shown with the profile's."""
    findings = result["findings"]
    machine = result.get("on_this_machine") or []
    counts = {s: sum(f["severity"] == s for f in findings) for s in ("error", "warn", "info")}
    lines = [f"profile {result['profile']}: {counts['error']} error(s), {counts['warn']} warning(s), "
             f"{counts['info'] + len(machine)} note(s); {UNITS}"]
    if "fits" in result:
        gib, mem = 2**30, result.get("memory") or {}
        state = result.get("recurrent_state_bytes_total") or 0
        if mem:
            lines.append(f"  model: {mem['model']} ({result.get('model_source', '')})")
            lines.append(f"  weights: {result['weights_bytes'] / gib:.2f} GiB ({mem['weights_basis']})")
        one = (f"; one sequence alone (parallel_slots 1): {mem['max_context_one_sequence']}"
               if mem and mem.get("max_context_one_sequence") not in (None, result["max_context_tokens"]) else "")
        lines.append(f"  memory: {memory_sum(result, mem)}; max context {result['max_context_tokens']} tokens"
                     f"{' (' + mem['max_context_basis'] + ')' if mem else ''}{one}, max concurrent sequences "
                     f"{result['max_concurrent_sequences']}")
        for card in (mem.get("per_device") or []):  # -sm layer: what llama.cpp puts on each card
            extra = " + output" if card["output_layer"] else ""
            extra += f" + MTP block {', '.join(map(str, card['mtp_blocks']))}" if card["mtp_blocks"] else ""
            total = card["weights_bytes"] + card["kv_bytes"] + mem["overhead_bytes"]
            lines.append(f"    GPU {card['device']}: layers {card['layers']}{extra}: weights "
                         f"{card['weights_bytes'] / gib:.2f} + KV/state {card['kv_bytes'] / gib:.2f} + overhead "
                         f"{mem['overhead_bytes'] / gib:.2f} = {total / gib:.2f} GiB")
            if card["mtp_blocks"]:
                lines.append("      (the MTP block is loaded only with --spec-type draft-mtp)")
    for f in findings:
        lines.append(f"  [{f['severity']}] {f['id']}: {f['message']}")
        lines.append(f"      fix:    {f['fix']}")
        lines.append(f"      source: {f['source']}")
    if not findings:
        lines.append("  no compatibility problems found in what the profile declares")
    if result.get("decode_ceiling_tok_s") is not None:
        rl = result["roofline"]
        lines.append(f"  speed: single-stream decode ceiling {result['decode_ceiling_tok_s']:.0f} tok/s "
                     f"({rl['bandwidth_gb_s']:g} GB/s ÷ {rl['bytes_per_token'] / 1e9:.2f} GB read per token, no "
                     f"speculation; {rl.get('bandwidth_source')}), predicted {result['predicted_decode_tok_s'] or float('nan'):.0f} "
                     f"tok/s ({rl.get('prediction_basis')})")
        read = rl.get("weights_read_bytes")
        if read is not None:  # the one definition of the ceiling, stated once (calibration.yaml read_per_token)
            lines.append(f"      read per token: {read / 1e9:.2f} GB of weights (of {result['weights_bytes'] / 1e9:.2f} GB "
                         f"loaded: the token embedding stays in host memory, a token reads one row of it) + "
                         f"{rl['kv_bytes_per_seq'] / 1e9:.2f} GB KV and state at {rl['context_tokens']} tokens; every "
                         "ceiling the lab shows uses this definition (lab/data/calibration.yaml read_per_token)")
        if rl.get("per_token_predicted_tok_s") is None and rl.get("calibration_source") and not rl.get("vllm_how"):
            lines.append(f"      calibration source: {' '.join(str(rl['calibration_source']).split())}")
    for row in result.get("projections", []):
        lines.append(f"  projection, one stream: {row['gpu']}: {row['projected_tok_s']:.0f} tok/s (roofline "
                     f"{row['roofline_tok_s']:.0f}; weights fit in VRAM: {row['weights_fit_in_vram']})")
    served = result.get("served_streams")
    if served:
        rows = served["rows"]
        lines.append("  served, streams summed (lab.predict.served_speed): " + "; ".join(
            f"{r['streams']} streams {r['host_tok_s']:.0f} tok/s, with -bs {r['bs_tok_s']:.0f} ({r['gain']:+.0%})"
            for r in rows) + (" - the profile passes -bs" if rows[0]["profile_has_bs"] else
                              " - the profile samples on the host (add -bs to server_args)"))
        lines.append(f"      batched step: {rows[0]['batched_from']}; {served['how']}")
    lines += _public_check_lines(result.get("public_check"))
    lines += routes_lines(result.get("routes"))
    claim_counts = result.get("claim_counts")
    if claim_counts:
        lines.append("  seed claims (lab/data/seed_claims.yaml): "
                     + ", ".join(f"{n} {v}" for v, n in claim_counts.items() if n))
    for c in result.get("claims", []):
        if c["verdict"] not in ("consistent", "not testable here"):
            lines.append(f"  claim {c['id']}: {c['verdict']} — {c['why']}")
    lines += [f"  [on this machine] {note}" for note in machine]
    return "\n".join(lines)


def _short_url(url: str) -> str:
    """A source URL that fits a terminal line: no scheme, a commit hash cut to 10 characters (GitHub resolves it)."""
    return re.sub(r"/blob/([0-9a-f]{10})[0-9a-f]{30}/", r"/blob/\1/", url.split("://", 1)[-1])


def _public_check_lines(part: dict | None) -> list[str]:
    """The "checked against published measurements" block: names and sources whole, wrapped at words within 100
    columns (lab.core.cli.fit), never cut."""
    if not part:
        return []
    s, d, o = part["summary"], part["depth"], part["outliers"]
    lines = [f"  checked against published measurements ({part['gpu']}; lab/data/public_speed.yaml):"]
    for r in part["rows"]:
        flag = ("" if r["comparable"] else "  [outlier]" if r["outlier"] else "  [not a budget card]"
                if not r.get("deep") else "  [8,192+ tokens: not fitted]")
        lines.append(f"    {r['gpu']}, {r['engine']}, {r['quant'] or '?'}: published "
                     f"{r['published']:5.1f}, predicted {r['predicted']:5.1f} ({r['error']:+.0%})")
        lines.append(f"      source: {_short_url(r['source'])}{flag}")
    lines.append(f"    all cards: median |error| {s['median_abs_error']:.1%}, max {s['max_abs_error']:.1%} over {s['n']} "
                 f"comparable rows (in sample: they fit the")
    lines.append(f"    model); 8,192+ tokens (not fitted): med {d['median_abs_error'] or 0:.0%}, max "
                 f"{d['max_abs_error'] or 0:.0%} of {d['n']}; {o['n']} outliers (power caps...) max "
                 f"{o['max_abs_error'] or 0:.0%}")
    return cli.fit("\n".join(lines)).splitlines()


def routes_lines(part: dict | None) -> list[str]:
    """The route table (lab.predict.routes): one line per route, then its basis, needs and nearest published rows.
    Free text is never cut: a long line wraps at word boundaries under its own indentation (lab.core.cli.fit; a cut
    once printed "...f16 KV, -fa on; v" and "the MT"), every line within 100 columns."""
    if not part:
        return []
    gib = 2**30
    lines = [f"  routes, one stream (lab/data/routes.yaml): fastest {part['fastest']}, "
             f"llama.cpp {part['fastest_llama_cpp']}"]
    for r in part["routes"]:
        speed = f"{r['tok_s']:5.1f} tok/s" if r["tok_s"] else "    ? tok/s"
        applies = "" if r.get("applies", True) else "  NOT THIS MODEL (not ranked)"
        lines.append(f"    {r['id']:17} {speed} {r['basis']} {r['per_card_bytes'] / gib:5.1f}/"
                     f"{r['budget_bytes'] / gib:4.1f} GiB/card {'fits' if r['fits'] else 'NO FIT'}{applies}")
        if r.get("why_not"):
            lines.append(f"      not ranked: {r['why_not']}")
        lines.append(f"      how: {r['how']}")
        if r["flags"]:
            lines.append(f"      flags: {r['flags']}")
        lines.append(f"      needs: {r['needs']}")
        if r.get("warning"):
            lines.append(f"      WARNING: {' '.join(r['warning'].split())}")
        if r.get("mtp_sweep"):
            sweep = " ".join(f"{x['tok_s']:.1f}" for x in r["mtp_sweep"])
            lines.append(f"      mtp: n-max 1-4 {sweep} tok/s; n-max {r['mtp_n_max']} from {r['mtp_n_from']}")
        pub = r.get("mtp_published")
        if pub and pub.get("predicted"):
            where = "" if pub["same_card"] else "another card's "
            at = f" at n-max {pub['n_max']}" if pub.get("n_max") else ""
            lines.append(f"      vs {where}published {pub['tok_s']:g}{at} ({pub['id']}): predicted "
                         f"{pub['predicted']:.1f} ({pub['error']:+.0%})")
        near = ", ".join(f"{p['tok_s']:g} ({p['id']})" for p in r["published"][:2])
        lines.append(f"      published: {near}")
    lines.append("    (predicted = the lab's models: the per-token and MTP step models for llama.cpp, the vLLM model")
    lines.append("    (lab.predict.vllm_speed) for the fork; published rows beside them are the source's own harness")
    lines.append("    and checkpoint - the fork's MTP rows use Qwen3.6 FP8 weights and their own prompts)")
    lines += _mtp_check_lines(part.get("mtp_check"))
    return cli.fit("\n".join(lines)).splitlines()


def _mtp_check_lines(check: dict | None) -> list[str]:
    """The MTP model against the public draft-mtp rows (lab.predict.public_check.mtp_check), <= 100 columns."""
    if not check:
        return []
    c, t, h = check["comparable"], check["targets"], check["held_out"]

    def mm(s):
        return f"{s['median_abs_error']:.0%}/{s['max_abs_error']:.0%}"

    arch = ", ".join(f"{a} {mm(s)}" for a, s in check["by_arch"].items())
    held = ", ".join(f"{a} {mm(s['row'])}" for a, s in h["by_arch"].items())
    lines = [f"    MTP model vs {c['n']} public draft-mtp rows, in sample: median |error| {c['median_abs_error']:.1%}, "
             f"max {c['max_abs_error']:.1%}",
             f"      targets {t['median'] * 100:.0f}/{t['max']:.0%} {'met' if t['met'] else 'NOT met'}; by architecture:",
             f"        {arch}",
             f"      held out, one row left out of the fit: {mm(h['row'])}, by architecture:",
             f"        {held}",
             f"      held out, one card left out: {mm(h['card'])} (a card alone in its architecture takes",
             "      another architecture's step cost: the model does not carry across architectures);",
             "      each card and architecture out: `.venv/bin/python -m lab predict --validate`"]
    if t["misses"]:
        lines.append(f"      {len(t['misses'])} rows over {t['max']:.0%}: {', '.join(t['misses'])}")
    return lines
