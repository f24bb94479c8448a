"""Notebook 04's page (serve): the views of a started server — the steps as one call each whether or not a server
could start here (start or say why not, smoke test, ask it, read its log, stop), the lines printed between them, the
smoke test as rows, the serve checks (started, health time, both routes answer, stopped with nothing left), the
04_serve record (`record`) and its closing text (`what_this_means`) — from what lab.serving.serve did and measured
(the process, its health, its smoke test, its stop) and what its log said (lab.serving.engine_logs). The notebook's
steps (`command(s, context_tokens=..., parallel_slots=..., kv_cache_dtype=...)`, `seed_corrections(s, cmd)`,
`then_and_now(s, cmd)`, `start_server(s, cmd)`, `by_hand(s)`, ..., and `start`, `answer`, `show` from
lab.pages.session) are here too: the notebook imports this page and nothing else from lab. Each step keeps what it
built, started or was told in the session (`s.results`: command, seed_corrections, then_and_now, server,
why_not_started, smoke_test, discovery, reported, stop); `record(s)` builds the record from those and the serve
checks they give (`serve_checks`)."""
from __future__ import annotations

from lab.core import display, evidence, fields, profiles
from lab.core.checks import Check
from lab.core.display import markdown_text
from lab.core.profiles import Profile
from lab.core.session import Session
from lab.diagnose import endpoint_diagnose
from lab.pages import session
from lab.pages.session import answer, checks_table, keep, show, start  # noqa: F401  (what every notebook calls, through its page)
from lab.serving import byhand, endpoint, engine_logs, engines, flag_table, seed_commands, serve
from lab.serving.engines import Command
from lab.serving.serve import DEFAULT_HEALTH_TIMEOUT_S, Server, health_timeout_for

NAME = "04_serve"


# ---------------------------------------------------------------- the notebook's steps, with or without a server
def command(s: Session, *, context_tokens: int | None = None, parallel_slots: int | None = None,
            kv_cache_dtype: str | None = None) -> Command:
    """The exact command that serves the profile with the notebook's values (-c, -np, -ctk/-ctv; None: the profile's
    own), each flag with its reason and source; version-dependent flags follow the engine version installed here when
    there is one, else the version the profile declares (lab.serving.engines.build_command). A value the engine does
    not take fails here with the fix (lab.core.profiles.varied)."""
    values = {"context_tokens": context_tokens, "parallel_slots": parallel_slots, "kv_cache_dtype": kv_cache_dtype}
    served = profiles.varied(s.profile, **{k: v for k, v in values.items() if v is not None})
    return keep(s, "command", engines.build_command(served, installed_version=engines.installed_version(served)))


def seed_corrections(s: Session, cmd: Command) -> list:
    """The seeds' serve commands for the profile's engine, corrected for the engine version `cmd` was built for
    (lab.serving.seed_commands.seed_corrections_for)."""
    return keep(s, "seed_corrections", seed_commands.seed_corrections_for(s.profile, installed_version=cmd.engine_version))


def then_and_now(s: Session, cmd: Command) -> list:
    """On a vLLM profile, the seeds' vLLM commands as the seed ran them (vLLM 0.4.2), for the version `cmd` was built
    for and for the newest vLLM run here (lab.serving.seed_commands.seed_then_and_now); empty for other engines."""
    return keep(s, "then_and_now", seed_commands.seed_then_and_now(s.profile, installed_version=cmd.engine_version))


def then_and_now_rows(then_and_now: list) -> list[dict]:
    """One row per (seed command, vLLM version): whether it runs as corrected, and the command."""
    return seed_commands.then_and_now_rows(then_and_now)


def then_and_now_changes(then_and_now: list) -> list[dict]:
    """Every change of every (seed command, vLLM version), with its reason and source."""
    return seed_commands.then_and_now_changes(then_and_now)


def target_line(profile: Profile) -> str:
    """Whether the lab starts the profile's server or connects to one you run."""
    if profile.endpoint_url:
        return f"endpoint: {profile.endpoint_url} (model {profile.served_model!r}; the lab starts nothing)"
    return "the lab starts the server itself"


def corrections_text(corrections: list) -> str:
    """Each seed command as printed and as corrected for this profile's engine version."""
    blocks = []
    for corr in corrections:
        rec = corr.to_record()
        blocks.append(f"{corr.seed_file} · {corr.section}\n  seed:      {rec['original']}\n"
                      f"  corrected: {rec['corrected']}  ({corr.target})\n")
    return "\n".join(blocks)


def corrections_rows(corrections: list) -> list[dict]:
    """Every change of every corrected seed command, one row each, named by the command."""
    return [{"command": c.command_id, **row} for c in corrections for row in c.rows()]


def then_and_now_text(profile: Profile, then_and_now: list) -> str:
    if then_and_now:
        return f"{len(then_and_now)} command/version pairs"
    return f"engine {profile.engine}: the seeds' vLLM commands are compared on vLLM profiles (cpu-vllm)"


def start_server(s: Session, command: Command, name: str = NAME) -> tuple[Server | None, str | None]:
    """(the started server, None), or (None, why it cannot start on this machine: lab.serving.serve.why_not_startable);
    its log is logs/<name>.log in the run folder. A server you run (an endpoint profile) that does not answer fails
    here, saying why (lab.diagnose.endpoint_diagnose.require_reachable). Whether this machine can start it is the
    profile's (its GPUs, its engine): the values `command` takes change the command's flags, not that."""
    endpoint_diagnose.require_reachable(s.profile)
    keep(s, "server", None)
    skip_reason = keep(s, "why_not_started", serve.why_not_startable(s.profile, command))
    if skip_reason:
        return None, skip_reason
    return keep(s, "server", serve.start(command, log_dir=s.logs, name=name)), None


def start_text(server: Server | None, skip_reason: str | None) -> str:
    if skip_reason:
        return f"skipped: {skip_reason}"
    return f"{server!r}: healthy and answering after {server.health_s} s"


def smoke_test(s: Session, server: Server | None) -> dict | None:
    """One greedy request on each OpenAI route (lab.serving.serve.smoke_test); None without a server."""
    return keep(s, "smoke_test", serve.smoke_test(server) if server else None)


def discover(s: Session, server: Server | None) -> dict | None:
    """What the server says about itself through its API (lab.serving.endpoint.discover_server); None without one."""
    return keep(s, "discovery", endpoint.discover_server(server) if server else None)


def discovery_text(found: dict | None) -> str:
    if not found:
        return "no server to ask"
    odd = found.get("findings") or []
    return (f"{found['engine_name']} {found['version'] or ''} — {found['identified_by']}"
            + (f"\n{len(odd)} field(s) of an unexpected type, not used: " + "; ".join(odd) if odd else ""))


def facts_rows(found: dict | None) -> list[dict]:
    """What the server says about itself, one fact a row with the route it came from (lab.serving.endpoint)."""
    return endpoint.facts_rows(found)


def routes_rows(found: dict | None) -> list[dict]:
    """The routes asked, by engine, and what each answered (lab.serving.endpoint)."""
    return endpoint.probe_rows(found)


def reported(s: Session, server: Server | None) -> dict:
    """What the server's start-up log reported (empty without a server)."""
    return keep(s, "reported", server.reported() if server else {})


def reported_rows(reported: dict) -> list[dict]:
    """What the start-up log reported as rows: layers offloaded, KV cache, slots, context (lab.serving.engine_logs)."""
    return engine_logs.reported_rows(reported)


def stop(s: Session, server: Server | None) -> dict | None:
    """Stop the server and check no process of its group is left (None: no server was started)."""
    return keep(s, "stop", server.stop() if server else None)


def smoke_rows(smoke: dict | None) -> list[dict]:
    """The smoke test as table rows: route, ok, HTTP status, seconds, prompt, reply, tokens."""
    if not smoke:
        return []
    rows = []
    for key, route in (("completions", "/v1/completions"), ("chat", "/v1/chat/completions")):
        res = smoke[key]
        usage = res.get("usage") or {}
        rows.append({"route": route, "ok": res["ok"], "status": res["status"], "seconds": res["latency_s"],
                     "prompt": res["prompt"], "reply": res["text"] or res.get("error"),
                     "prompt_tokens": usage.get("prompt_tokens"), "completion_tokens": usage.get("completion_tokens")})
    return rows




def by_hand(s: Session):
    """The serving half of the by-hand track for the profile's card (lab.serving.byhand), as Markdown for a notebook
    cell: the model file and its sha256, llama-bench, llama-server, curl, the offload line, reaching it over SSH."""
    from IPython.display import Markdown

    return Markdown(byhand.markdown(s.profile, part="serve"))


def shape_findings(smoke: dict | None, discovery: dict | None) -> list[str]:
    """What the server sent of another type than its documented shape (lab.serving.shapes): smoke test and discovery."""
    return [f for key in ("completions", "chat") for f in ((smoke or {}).get(key) or {}).get("findings") or []] + \
        list((discovery or {}).get("findings") or [])


def serve_checks(skip_reason: str | None, server: Server | None, smoke: dict | None,
                 stop_report: dict | None, health_timeout_s: float | None = None,
                 discovery: dict | None = None) -> list[Check]:
    """started, health time, /v1/completions, /v1/chat/completions, replies of the documented shape, stopped with
    no process left."""
    src = "lab.serving.serve (this run)"
    if health_timeout_s is None:
        health_timeout_s = health_timeout_for(server.command) if server else DEFAULT_HEALTH_TIMEOUT_S
    if skip_reason:
        names = ("server started", "health time", "/v1/completions answers", "/v1/chat/completions answers",
                 "replies of the documented shape", "stopped, no process left")
        return [Check(n, "skip", None, None, skip_reason, src) for n in names]
    checks = [Check("server started", "pass" if server else "fail", server.pid if server else None,
                    "a running process (or a reachable external server)", "" if server else "see the error above", src)]
    health = server.health_s if server else None
    checks.append(Check("health time", "pass" if health is not None else "fail",
                        f"{health:.1f} s" if health is not None else None, f"< {health_timeout_s:.0f} s",
                        "" if health is not None else "read the server log", src))
    for key, route in (("completions", "/v1/completions"), ("chat", "/v1/chat/completions")):
        res = (smoke or {}).get(key) or {}
        checks.append(Check(f"{route} answers", "pass" if res.get("ok") else "fail",
                            f"HTTP {res.get('status')}: {display.clip(res.get('text', ''), 60)!r}" if res else None,
                            "HTTP 200 with text", "" if res.get("ok") else (res.get("error") or "no response"), src))
    odd = shape_findings(smoke, discovery)
    checks.append(Check("replies of the documented shape", "warn" if odd else "pass",
                        f"{len(odd)} field(s) of an unexpected type: " + "; ".join(odd[:3]) if odd else "as documented",
                        "the types the engine's API documents (lab.serving.shapes)",
                        "those fields were not used (shown as not reported); a proxy or another engine release in "
                        "front of the server may change its replies" if odd else "", "lab.serving.shapes (this run)"))
    if server is not None and server.external:
        checks.append(Check("stopped, no process left", "skip", None, None, "external server: not ours to stop", src))
    else:
        rep = stop_report or {}
        clean = bool(rep) and not rep.get("left_running") and rep.get("returncode") is not None
        checks.append(Check("stopped, no process left", "pass" if clean else "fail",
                            f"{rep.get('signal') or 'already exited'} → exit {rep.get('returncode')} in "
                            f"{rep.get('stop_s')} s; left running: {rep.get('left_running')}" if rep else None,
                            "exit after SIGTERM, no process of its group left",
                            "" if clean else "kill the pids listed; report the engine's shutdown bug", src))
    return checks


def build_record(command: Command, corrections: list, skip_reason: str | None, server: Server | None,
                 smoke: dict | None, reported: dict, stop_report: dict | None, checks: list[Check],
                 then_and_now: list | None = None, discovery: dict | None = None) -> dict:
    """The 04_serve record: summary, checks, tables, command, seed corrections, reported, smoke, stop;
    for a vLLM profile also the seeds' vLLM commands then (vLLM 0.4.2) and now (seed_commands.seed_then_and_now);
    `discovery` (lab.serving.endpoint.discover): what the server said about itself through its API. What the server
    says of a setting a profile field makes (its log, else its API) sits under the profile's name
    (lab/data/flag_table.yaml: parallel_slots, context_tokens, ...; context_per_request)."""
    kv = reported.get("kv_caches") or []
    vllm_kv_gib = reported.get("kv_cache_memory_gib")
    summary = {"engine": command.engine, "engine_version": command.engine_version, "started": server is not None,
               "skipped": skip_reason, "health_s": server.health_s if server else None,
               "completions_ok": smoke["completions"]["ok"] if smoke else None,  # None: not tried
               "chat_ok": smoke["chat"]["ok"] if smoke else None,
               "stopped_clean": None if skip_reason or command.external else  # not ours to stop
               any(c.name.startswith("stopped") and c.status == "pass" for c in checks),
               "kv_cache_mib": round(sum(float(k["size_mib"]) for k in kv if k["cache"] != "recurrent"), 2) if kv else
               (round(vllm_kv_gib * 1024, 2) if vllm_kv_gib is not None else None),
               "kv_cache_tokens": reported.get("kv_cache_tokens"),
               **flag_table.reported_values(command.engine, reported, (discovery or {}).get("facts")),
               "serialises_requests": command.serialises_requests, "external": command.external,
               "endpoint_url": command.base_url if command.external else None,
               "engine_found": discovery["engine"] if discovery else None,
               "engine_found_version": discovery["version"] if discovery else None,
               "shape_findings": len(shape_findings(smoke, discovery))}
    tables = [evidence.table_entry("Command flags and why", command.notes_rows()),
              evidence.table_entry("Smoke test", smoke_rows(smoke)),
              evidence.table_entry("What the server reported", engine_logs.reported_rows(reported))]
    if discovery:
        tables += [evidence.table_entry("What the server says about itself (its API)", endpoint.facts_rows(discovery)),
                   evidence.table_entry("Routes asked, by engine", endpoint.probe_rows(discovery))]
    if shape_findings(smoke, discovery):
        tables.append(evidence.table_entry("Replies of an unexpected shape (fields not used)",
                                           [{"finding": f} for f in shape_findings(smoke, discovery)]))
    for corr in corrections:
        tables.append(evidence.table_entry(f"Seed command {corr.command_id} corrected for {corr.target}", corr.rows()))
    then_and_now = then_and_now or []
    if then_and_now:
        summary["seed_vllm_then_and_now"] = {f"{c.command_id} @ {c.target}": c.runs for c in then_and_now}
        tables += [evidence.table_entry("The seeds' vLLM commands, then and now", seed_commands.then_and_now_rows(then_and_now)),
                   evidence.table_entry("The seeds' vLLM commands, then and now: every change",
                                        seed_commands.then_and_now_changes(then_and_now))]
    return {"title": f"Serve: {command.engine} on {command.host}:{command.port}", "summary": summary,
            "checks": [c.to_dict() for c in checks], "tables": tables, "command": command.to_record(),
            "seed_corrections": [c.to_record() for c in corrections],
            "seed_then_and_now": [c.to_record() for c in then_and_now], "reported": reported,
            "smoke": smoke, "stop": stop_report, "skip_reason": skip_reason, "discovery": discovery,
            "log": str(server.log_path) if server and server.log_path else None}


def record(s: Session) -> dict:
    """Write records/04_serve.json with its closing text, built (`build_record`) from what the steps kept in
    `s.results` and the serve checks they give (`serve_checks`, as the notebook shows them); its summary, to show."""
    r = s.results
    skip_reason, server, smoke, stop_report, found = (r.get(k) for k in (
        "why_not_started", "server", "smoke_test", "stop", "discovery"))
    checks = serve_checks(skip_reason, server, smoke, stop_report, discovery=found)
    s.record(NAME, build_record(r.get("command"), r.get("seed_corrections") or [], skip_reason, server, smoke,
                                r.get("reported") or {}, stop_report, checks, then_and_now=r.get("then_and_now"),
                                discovery=found), closing=closing_text)
    return s.read(NAME)["summary"]


def what_this_means(s: Session):
    """The closing text as the record keeps it (written by `record`), as Markdown for the notebook's last cell."""
    return session.closing(s, NAME)


def closing_text(record: dict) -> str:
    """What notebook 04 means for the user, from its record (Markdown, one point per line); a record written before
    the profile's names were the record's reads through lab.core.fields.canonical (n_ctx_slot: context_per_request)."""
    s = fields.canonical(record["summary"])
    if s["skipped"]:
        return (f"- Not started here: {s['skipped']}\n- On the target machine, run the command shown above (or the "
                "by-hand steps in section 'By hand'); the seed commands beside it say which of their flags would fail "
                "there and why.")
    lines = [f"{s['engine']} {s['engine_version']} answered in {s['health_s']} s; completions "
             f"{'ok' if s['completions_ok'] else 'FAILED'}, chat {'ok' if s['chat_ok'] else 'FAILED'}."]
    if s.get("external"):
        found = s.get("engine_found")
        lines[0] = (f"The server at {s['endpoint_url']} (started by you, not the lab) answered in {s['health_s']} s; "
                    f"completions {'ok' if s['completions_ok'] else 'FAILED'}, chat {'ok' if s['chat_ok'] else 'FAILED'}. "
                    # the version is the server's own string (Ollama's /api/version): text, never markup
                    + (f"It is {found} {markdown_text(s['engine_found_version']) if s.get('engine_found_version') else '(version not reported)'}."
                       if found and found != "unknown" else "Its engine could not be identified from its routes."))
        if s.get("context_per_request"):
            lines.append(f"It gives one request {markdown_text(s['context_per_request'])} tokens of context (prompt + output), "
                         "as it reports itself; notebook 05 sets that beside the plan.")
    elif s.get("parallel_slots") and s.get("context_per_request"):
        lines.append(f"It runs {s['parallel_slots']} slots (parallel_slots) of {s['context_per_request']} tokens each "
                     f"(context_per_request): one request gets at most {s['context_per_request']} tokens of context "
                     "(prompt + output), whatever context_tokens says.")
    if s.get("kv_cache_mib") is not None:
        tokens = f" = {s['kv_cache_tokens']:,} tokens" if s.get("kv_cache_tokens") else ""
        lines.append(f"Its KV cache takes {s['kv_cache_mib']} MiB{tokens} (compare with notebook 05's prediction).")
    if s["serialises_requests"]:
        lines.append("llama_cpp.server serialises requests: concurrency numbers from it are not llama.cpp's.")
    if not s.get("external"):
        lines.append("Stopped cleanly, nothing left running." if s["stopped_clean"] else
                     "The server did NOT stop cleanly: see the checks.")
    return "\n".join(f"- {line}" for line in lines)
