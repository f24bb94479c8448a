"""The answer first: what a reader should learn from a run in its first screen.

For a GPU profile: what fits on the card (model, quant, context, sequences), the expected and — when
measured — the actual decode speed, the checks that failed with their fixes, and the seeds' claims that
do not hold. For a CPU profile: what was measured here, and what it means for the GPU cards the lab has
profiles for (each card's `lab.predict.plan`). Built from the run's records and the profiles' plans only (plans
are pure: they need no hardware), so report.html and the top of every notebook say the same thing.
"""
from __future__ import annotations

import html
import re
from pathlib import Path

from lab.core import display
from lab.core.paths import PARAMS
from lab.predict import claims_ledger

MAX_FAILED_CHECKS = 8


def _gib(n) -> str:
    return "—" if n is None else display.human_bytes(n)


def _tok(x) -> str:
    return "—" if x is None else f"{display.sig3(x)} tok/s"


def card_row(profile, records: dict | None = None) -> dict:
    """One GPU profile's plan as a row: what fits and how fast one stream can go (lab.predict.plan, no hardware); the
    speed figures from lab.predict.profile_speed.expectation, with the run's records when given (one ceiling per card:
    the one notebook 06 measured against, and how far under the expectation the measurement came)."""
    from lab.predict import plan, profile_speed

    p = plan.plan(profile)
    speed = profile_speed.expectation(profile, records)
    mem = p["memory"]
    used = (mem.get("weights_bytes_per_device") or 0) + (mem.get("kv_bytes_per_device") or 0) + (mem.get("overhead_bytes") or 0)
    model = profile.model_name + (f" (stand-in for {profile.model_stand_in_for})" if profile.model_stand_in_for else "")
    # the answer's columns first (the card, its speed, whether it fits): a narrow window scrolls the rest
    return {"card (profile)": f"{profile.gpu_count} × GPU · {profile.name}",
            "expected, one stream": _tok(speed["expected_tok_s"]),
            "ceiling, one stream": _tok(speed["ceiling_tok_s"]),
            "fits": p["fits"], "memory used per GPU": f"{_gib(used)} of {_gib(mem['budget_bytes'])}",
            "context × sequences": f"{mem['context_tokens_per_sequence']:,} × {mem['parallel_slots']}",
            # two answers to "how long a context?", both lab.predict.memory_plan's (this column once showed
            # the per-slot figure under "one sequence")
            "longest context per slot, every slot allocated": p["max_context_tokens"],
            "longest context, one sequence alone": mem.get("max_context_one_sequence"),
            "model": model, "quant": profile.model_quant, "engine": profile.engine,
            **({"measured against expected": speed["sentence"]} if speed["sentence"] else {})}


def gpu_profiles() -> list:
    """Every GPU profile shipped in params/ (the cards the lab has a plan for)."""
    from lab.core import profiles

    out = []
    for path in sorted(PARAMS.glob("*.yaml")):
        try:
            prof = profiles.load(path)
        except profiles.ProfileError:
            continue  # `lab validate` reports it; the summary shows the cards it can
        if prof.gpu_count > 0:
            out.append(prof)
    return out


def failed_checks(records: dict) -> list[dict]:
    return [{"notebook": name[:2], **c} for name, rec in records.items() for c in rec.get("checks") or []
            if c.get("status") == "fail"]


def claims_not_holding(profile, records: dict) -> list[dict]:
    """The seeds' claims judged false: from notebook 06's ledger when it ran (it may hold measurements),
    else from the profile's plan (physics and arithmetic)."""
    ledger = (records.get("06_benchmark") or {}).get("claims")
    if ledger is None:
        from lab.predict import claims

        ledger = [v.to_dict() for v in claims.verdicts(profile)]
    return [c for c in ledger if c.get("verdict") in claims_ledger.NOT_HOLDING]


def _summary(records: dict, name: str) -> dict:
    """A record's summary; {} when that notebook did not run or wrote none."""
    return (records.get(name) or {}).get("summary") or {}


def measured(records: dict) -> list[str]:
    """One line per thing this run measured, from the records that exist (a line is None where nothing was)."""
    hw, q, s, kv, b = (_summary(records, name) for name in
                       ("01_hardware", "03_quantize", "04_serve", "05_kv_cache", "06_benchmark"))
    recommended = q.get("recommended for the 27B target")
    lines = [
        f"memory copy bandwidth {display.sig3(hw['bandwidth_gb_s'])} GB/s ({hw.get('bandwidth_kind')}, read + write)"
        if hw.get("bandwidth_gb_s") else None,
        f"one stream decoded at {_tok(b['served_single_stream_decode_tok_s'])} through the server (in-process "
        f"llama-bench {_tok(b.get('llama_bench_tg_tok_s'))}; ceiling {_tok(b.get('decode_ceiling_tok_s'))})"
        if b.get("served_single_stream_decode_tok_s") else None,
        f"{_tok(b['best_aggregate_tok_s'])} in total at {b.get('best_aggregate_concurrency')} concurrent streams"
        if b.get("best_aggregate_tok_s") else
        f"speed not measured here: {b['benchmark_skipped']}" if b.get("benchmark_skipped") else None,
        f"KV cache: llama.cpp allocated exactly the predicted bytes for {kv['parity_caches_identical']} of "
        f"{kv['parity_caches_compared']} caches" if kv.get("parity_caches_compared") else None,
        f"quantization ladder: {recommended} recommended for the 27B target" if recommended else None,
        f"{s.get('engine')} served completions {'and chat ' if s.get('chat_ok') else ''}on 127.0.0.1 and stopped "
        f"{'cleanly' if s.get('stopped_clean') else 'NOT cleanly'}" if s and not s.get("skipped") else None,
    ]
    return [line for line in lines if line]


def what_to_run(profile) -> dict | None:
    """The answer a card's owner acts on: the fastest route the lab runs (llama.cpp) with its exact server
    command, its predicted speed, the plain route beside it, and what would change the choice (what the route needs;
    a faster route on another engine). None for a profile lab/data/routes.yaml has no routes for."""
    from lab.predict import routes
    from lab.serving import byhand, byhand_choices

    table = routes.route_table(profile)
    if not table or not table["fastest_llama_cpp"]:
        return None
    by_id = {r["id"]: r for r in table["routes"]}
    best = by_id[table["fastest_llama_cpp"]]
    split = profile.split_mode or ("layer" if profile.gpu_count > 1 else "none")
    plain = next((r for r in table["routes"] if r["engine"] == "llama.cpp" and not r["mtp"] and r["split"] == split),
                 None)
    other = by_id.get(table["fastest"])

    def needs(route: dict) -> str:  # routes.yaml writes "as llama-tensor, plus …": said in full here
        m = re.match(r"as ([\w-]+)(.*)", route["needs"])
        return f"{by_id[m[1]]['needs']}{m[2]}" if m and m[1] in by_id else route["needs"]

    return {"route": best["id"], "tok_s": best["tok_s"], "basis": best["basis"], "needs": needs(best),
            # as pasted into a fresh shell: $LAB and $LLAMA_BIN set first, pipefail for its `| tee`
            "command": byhand.runnable([byhand.server_command(byhand_choices.route_profile(profile, best), best["flags"])]),
            "plain": None if plain is None or plain is best else {"route": plain["id"], "tok_s": plain["tok_s"],
                                                                   "basis": plain["basis"]},
            "faster_elsewhere": None if other is None or other is best else {
                "route": other["id"], "engine": other["engine"], "tok_s": other["tok_s"], "basis": other["basis"],
                "needs": needs(other)}}


def facts(profile, records: dict, notebooks: list[dict] | None = None) -> dict:
    """Everything the summary shows, as data (the report and the notebooks render it)."""
    gpu = profile.gpu_count > 0
    cards = [card_row(profile, records)] if gpu else [card_row(p) for p in gpu_profiles()]
    return {"profile": profile.name, "gpu_profile": gpu, "model": profile.model_name, "engine": profile.engine,
            "run_this": what_to_run(profile) if gpu else None,
            "cards": cards, "measured": measured(records), "failed_checks": failed_checks(records),
            # plan mode (lab.core.planmode): nothing here was measured on the profile's hardware
            "plan": next((r.get("plan_reason") for r in records.values() if r.get("mode") == "plan"), None),
            "warned_checks": sum(c.get("status") == "warn" for r in records.values() for c in r.get("checks") or []),
            "claims_not_holding": claims_not_holding(profile, records),
            "notebooks_not_ok": [n for n in notebooks or [] if n.get("status") != "ok"],
            "records": sorted(records)}


def markdown(f: dict) -> str:
    """The summary as Markdown: a few sentences, the cards table, failed checks, wrong claims."""
    out = []
    run = f.get("run_this")
    if run:  # what to run comes first; the card's fit, the checks and the seeds' claims follow
        out.append(f"**Run this** — the fastest route the lab runs on this profile, `{run['route']}`, "
                   f"**{display.sig3(run['tok_s'])} tok/s** for one stream ({run['basis']}; the plan's routes, "
                   f"`{display.lab_command('plan ' + f['profile'])}`):")
        out.append(f"```bash\n{run['command']}\n```")
        beside = []
        if run.get("plain"):
            p = run["plain"]
            beside.append(f"the plain route `{p['route']}` (the profile's command without these flags): "
                          f"{display.sig3(p['tok_s'])} tok/s ({p['basis']})")
        beside.append(f"it needs {run['needs']}")
        other = run.get("faster_elsewhere")
        if other:
            beside.append(f"faster on another engine: `{other['route']}` ({other['engine']}) "
                          f"{display.sig3(other['tok_s'])} tok/s ({other['basis']}), which needs {other['needs']}")
        out.append("Beside it: " + "; ".join(beside) + ".")
    if f["gpu_profile"]:
        c = f["cards"][0]
        out.append(f"**On this card ({c['card (profile)']}):** {c['model']} at {c['quant']} with {c['engine']}, "
                   f"{c['context × sequences'].replace(' × ', ' tokens × ')} sequences "
                   f"**{'fit' if c['fits'] else 'do NOT fit'}** "
                   f"({c['memory used per GPU']}); one stream is expected at **{c['expected, one stream']}** "
                   f"(ceiling {c['ceiling, one stream']})"
                   + (f"; {c['measured against expected']}." if c.get("measured against expected") else "."))
    else:
        out.append(f"**This run ({f['profile']}, {f['model']} on the CPU) demonstrates the method; its speeds are a "
                   "CPU's.** What it means for a real card is each GPU profile's plan (memory arithmetic checked against "
                   "llama.cpp here, speed from bandwidth and calibrated runs):")
    if f.get("plan"):
        out.append(f"**Plan mode** ({f['plan']}): every number here is predicted; nothing was measured on the "
                   "profile's hardware." + (" Done on this machine:" if f["measured"] else ""))
        # the benchmark's "not measured here" repeats the plan-mode reason just given
        out += [f"- {line}" for line in f["measured"] if not line.startswith("speed not measured here")]
    elif f["measured"]:
        out.append("**Measured in this run:**")
        out += [f"- {line}" for line in f["measured"]]
    elif f["records"] == []:
        out.append("**Measured in this run:** nothing yet (no records in this run folder).")
    if not f["gpu_profile"]:
        out.append(_md_table([compact_card(c) for c in f["cards"]]))
    bad = f["failed_checks"]
    if bad:
        out.append(f"**{len(bad)} failed check(s)** ({f['warned_checks']} warning(s) in the sections below):")
        out += [f"- {display.label(c['name'])} (notebook {c['notebook']}): {c.get('fix') or 'see the section'}"
                for c in bad[:MAX_FAILED_CHECKS]]
        if len(bad) > MAX_FAILED_CHECKS:
            out.append(f"- … and {len(bad) - MAX_FAILED_CHECKS} more in the sections below.")
    elif f["records"]:
        out.append(f"**No check failed** ({f['warned_checks']} warning(s) in the sections below).")
    for n in f["notebooks_not_ok"]:
        kind = (n.get("error") or "").split(":", 1)[0]  # the error's type; its whole text is in Run details
        out.append(f"- notebook **{n['notebook']}** {n['status']}" + (f" ({kind}; the full error is under Run details)"
                                                                       if kind else ""))
    claims = f["claims_not_holding"]
    if claims:
        guides = seed_guides()
        named = "; ".join(f"seed {k}: {v}" for k, v in guides.items())
        out.append(f"**{len(claims)} of the seeds' claims do not hold** for this profile. The seeds are the two "
                   f"deployment guides this lab checks ({named}); the numbers behind each verdict are in the claims "
                   "ledger, notebook 06:")
        out.append(_md_table([{"seed": (c.get("seed") or "")[:3], "claim": _flags_as_code(c.get("english") or c.get("id")),
                               "verdict": c["verdict"]} for c in claims]))
    return _join(out)


def compact_card(c: dict) -> dict:
    """A card's row (`card_row`) in six columns instead of twelve: the table fits an 800 px window (its quant and
    engine columns were out of sight at the right), each figure as `card_row` shows it."""
    def tokens(n) -> str:
        return display.fmt(n)

    # the model's column second: the answer's last column does not wrap (a verdict stays on one line)
    return {"card (profile)": c["card (profile)"], "model · quant · engine": f"{c['model']} · {c['quant']} · {c['engine']}",
            "one stream: expected (ceiling)": f"{c['expected, one stream']} ({c['ceiling, one stream']})",
            "fits, memory per GPU": f"{'yes' if c['fits'] else 'NO'}: {c['memory used per GPU']}",
            "context × sequences": c["context × sequences"],
            "longest context: per slot, every slot allocated / one sequence alone":
                f"{tokens(c['longest context per slot, every slot allocated'])} / "
                f"{tokens(c['longest context, one sequence alone'])}"}


def _flags_as_code(text) -> str:
    """A claim's command-line flags as code ("--max-num-batched-tokens"): they then read as flags and are not wrapped
    at their hyphens in a narrow column."""
    return re.sub(r"(?<![\w`-])(--?[A-Za-z][\w-]*)", r"`\1`", str(text))


def seed_guides() -> dict[str, str]:
    """{'000': 'two V100s + vLLM (AWQ)', ...}: what each seed guide is about (lab/data/seed_claims.yaml `seeds`)."""
    from lab.core import facts as lab_facts

    return {str(k): v["what"] for k, v in (lab_facts.load("seed_claims").get("seeds") or {}).items()}


def _join(parts: list[str]) -> str:
    """Paragraphs separated by blank lines, list items kept together."""
    text = ""
    for p in parts:
        sep = "\n" if p.startswith("- ") and text.rstrip().split("\n")[-1].startswith(("- ", "**")) else "\n\n"
        text += (sep if text else "") + p
    return text


def _md_table(rows: list[dict]) -> str:
    if not rows:
        return "(no GPU profiles in params/)"
    cols = list(rows[0])

    def cell(v, k):
        return display.fmt(v, k).replace("|", "\\|")

    return "\n".join(["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
                     + ["| " + " | ".join(cell(r.get(c), c) for c in cols) + " |" for r in rows])


def first(session):
    """For the top of a notebook: the summary from whatever this run folder holds so far."""
    from IPython.display import Markdown

    from lab.core import run_folder

    records = run_folder.read_records(session.run_dir)
    head = f"### The answer so far · {html.escape(session.profile.name)}\n\n"
    return Markdown(head + markdown(escape_profile_text(facts(session.profile, records))))


def escape_profile_text(f: dict) -> dict:
    """`facts` with the profiles' free text (model names) HTML-escaped, for a notebook's Markdown output: IPython
    renders raw HTML in Markdown, and a profile is text anyone can hand over. The report does not need it (its
    Markdown renderer escapes HTML itself, and would show an escaped "&lt;" as such)."""
    return {**f, "model": html.escape(f["model"]), "cards": [{**c, "model": html.escape(c["model"])} for c in f["cards"]]}


def profile_for_run(run_dir: str | Path):
    """The run's profile (from its manifest, its records, or the folder it sits in); None when none loads."""
    from lab.core import profiles, run_folder
    from lab.records import manifest as manifest_file

    run_dir = Path(run_dir)
    manifest, _ = manifest_file.read_manifest(run_dir)  # its problem, if any, is the report's to show
    candidates = [*manifest_file.inputs_here(run_dir), (manifest.get("profile") or {}).get("file"),
                  (manifest.get("profile") or {}).get("name")]
    candidates += [(r.get("provenance") or {}).get("profile_file") for r in run_folder.read_records(run_dir).values()]
    candidates.append(run_dir.resolve().parent.name)  # outputs/<profile>/<run>: the folder names the profile
    for cand in filter(None, candidates):
        try:
            path = Path(cand) if Path(cand).exists() else profiles.resolve(cand)
            if not manifest_file.matches_run(path, run_dir):  # changed after the run: the report says so
                continue
            return profiles.load(path)
        except (profiles.ProfileError, FileNotFoundError, ValueError):
            continue
    return None


def for_run(run_dir: str | Path) -> dict | None:
    """The summary's facts for a finished run folder (None when its profile file cannot be loaded)."""
    from lab.core import run_folder
    from lab.records import manifest as manifest_file

    prof = profile_for_run(run_dir)
    if prof is None:
        return None
    manifest, _ = manifest_file.read_manifest(Path(run_dir))
    return facts(prof, run_folder.read_records(Path(run_dir)), manifest.get("notebooks"))
