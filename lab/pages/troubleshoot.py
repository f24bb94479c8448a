"""Notebook 07's page (troubleshooting): this run's findings as a table, the reproductions (what happened, rows),
the severity chart, the checks, the 07_troubleshooting and 07_endpoint records and their closing texts. `lab doctor`'s
terminal text and exit code are lab.diagnose.doctor's; the diagnosis itself lab.diagnose.troubleshoot's. Each step
keeps its result in the session (`s.results`: run_findings, endpoint, reproductions by pitfall, captured);
`record(s)` and `endpoint_record(s)` build the records from those."""
from __future__ import annotations

from pathlib import Path

from lab.core import display, evidence
from lab.core.checks import Check
from lab.core.session import Session
from lab.diagnose import endpoint_diagnose, run_inputs, troubleshoot, troubleshoot_repro
from lab.diagnose.knowledge_base import SEVERITIES, load_kb
from lab.diagnose.troubleshoot import Finding
from lab.diagnose.troubleshoot_repro import SOURCE, Reproduction
from lab.pages import session
from lab.pages.session import answer, keep, show, start  # noqa: F401  (what every notebook calls, through its page)

NAME, ENDPOINT = "07_troubleshooting", "07_endpoint"
# The pitfalls notebook 07 makes happen, in its order (lab.diagnose.troubleshoot_repro): name → the reproduction.
PITFALLS = {"port in use": troubleshoot_repro.port_conflict, "truncated GGUF": troubleshoot_repro.truncated_gguf,
            "rejected flag": troubleshoot_repro.rejected_flag, "context overflow": troubleshoot_repro.context_overflow,
            "KV cache too big": troubleshoot_repro.kv_cache_too_big}


# ---------------------------------------------------------------- the notebook's steps
def knowledge_base_line() -> str:
    return f"knowledge base: {len(load_kb())} entries (lab/data/troubleshooting.yaml)"


def diagnose_run(s: Session) -> list[Finding]:
    """This run folder diagnosed (lab.diagnose.troubleshoot.diagnose: logs, checks, records, notebook errors)."""
    return keep(s, "run_findings", troubleshoot.diagnose(s.run_dir))


def diagnose_endpoint(s: Session) -> dict:
    """The profile's endpoint asked five questions, each answer read with the knowledge base."""
    return keep(s, "endpoint", endpoint_diagnose.run(s.profile))


def endpoint_rows(result: dict) -> list[dict]:
    return endpoint_diagnose.rows(result)


def reproduce(s: Session, pitfall: str):
    """One pitfall made to happen in this run folder (PITFALLS; "port in use" gives a list: one per way)."""
    if pitfall not in PITFALLS:
        raise ValueError(f"unknown pitfall {pitfall!r}; the ones notebook 07 reproduces: {', '.join(PITFALLS)}")
    s.results.setdefault("reproductions", {})[pitfall] = PITFALLS[pitfall](s.run_dir)
    return s.results["reproductions"][pitfall]


def reproductions(s: Session) -> list[Reproduction]:
    """Every pitfall reproduced so far, in the order they ran ("port in use" counts one per way)."""
    done = (s.results.get("reproductions") or {}).values()
    return [r for rep in done for r in (rep if isinstance(rep, list) else [rep])]


def captured(s: Session) -> list[dict]:
    """The GPU-only pitfalls, diagnosed from the real texts kept in lab/data/captured_errors.yaml."""
    return keep(s, "captured", troubleshoot_repro.diagnose_captured())



def findings_table(findings: list[Finding]):
    """Findings as a pandas DataFrame, in rank order (for notebooks and the report)."""
    import pandas as pd

    cols = ["severity", "entry_id", "title", "evidence", "where", "count", "cause", "fix", "commands", "source",
            "score", "matched_by", "confirmed_by"]
    rows = [{**f.to_dict(), "commands": "\n".join(f.commands), "source": "\n".join(f.source)} for f in findings]
    return pd.DataFrame(rows, columns=cols)


def explain(reps: Reproduction | list[Reproduction]) -> str:
    """What was done, the real error text, and the diagnosis (entry, cause, fix, source), as text."""
    reps = [reps] if isinstance(reps, Reproduction) else reps
    blocks = []
    for r in reps:
        lines = [f"■ {r.title}", f"What you did: {r.did}"]
        if r.skipped:
            blocks.append("\n".join(lines + [f"Not tried here: {r.skipped}"]))
            continue
        lines += ["Command:", *(f"  $ {c}" for c in r.command.splitlines()), f"What happened: {r.outcome}",
                  f"Real error text (last lines; all of it in {r.log}):",
                  *(f"  | {line}" for line in r.error_text.splitlines())]
        if not r.findings:
            lines.append(f"Diagnosis: NOTHING recognised (expected {r.expected_entry})")
        else:
            f = r.findings[0]
            verdict = "as expected" if r.correct else f"EXPECTED {r.expected_entry}"
            lines += [f"Diagnosis: {f['entry_id']} — {f['title']}  [{f['severity']}, {verdict}]",
                      f"  seen:   {f['evidence']}", f"  cause:  {f['cause']}", f"  fix:    {f['fix']}",
                      *(f"          $ {c}" for c in f["commands"]), *(f"  source: {s}" for s in f["source"])]
            if len(r.findings) > 1:
                lines.append("  also matched: " + ", ".join(x["entry_id"] for x in r.findings[1:]))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def reproductions_rows(reps: list[Reproduction]) -> list[dict]:
    """One row per reproduction: pitfall, expected and diagnosed entry, verdict, seconds, log."""
    return [{"pitfall": r.title, "expected": r.expected_entry, "diagnosed": r.diagnosed_as,
             "correct": r.correct, "outcome": r.skipped and f"skipped: {r.skipped}" or r.outcome,
             "seconds": r.seconds, "log": r.log} for r in reps]


def run_summary(run_dir: str | Path, findings: list[Finding]) -> str:
    """In words: what was read from the run folder and what was found (plainly, when nothing)."""
    chunks, found = run_inputs.run_folder_inputs(run_dir)
    logs = sum(o.startswith("logs/") for _, o in chunks)
    failed_books = sum(o.startswith("notebooks/") for _, o in chunks)
    books = len(list((Path(run_dir) / "notebooks").glob("*.ipynb")))
    bad = [c for c in found["checks"] if c["status"] in ("fail", "warn")]
    read = (f"Read {logs} server/tool log(s), {len(found['records'])} record(s) holding {len(found['checks'])} "
            f"checks ({len(bad)} failed or warned) and {books} executed notebook(s) ({failed_books} with an error) "
            f"in {run_dir}.")
    read += plan_pitfalls(found)
    if not findings:
        return read + "\nNothing the knowledge base knows was found: no error, warning or note in this run."
    counts = {s: sum(f.severity == s for f in findings) for s in SEVERITIES}
    return read + f"\nFound {len(findings)}: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n) + "."


def plan_pitfalls(found: dict) -> str:
    """In a plan-mode run (records with mode: plan), the pitfalls the profile is exposed to: `lab plan`'s findings
    on its declared hardware and software (lab.predict.plan), since no log of the profile's box exists to read."""
    from lab.core import profiles
    from lab.predict import compat, plan

    recs = [r for r in found["records"].values() if isinstance(r, dict)]
    reason = next((r.get("plan_reason") for r in recs if r.get("mode") == "plan"), None)
    if reason is None:
        return ""
    named = [((found.get("manifest") or {}).get("profile") or {}).get("file")]
    named += [(r.get("provenance") or {}).get("profile_file") for r in recs]
    for name in filter(None, named):
        try:
            prof = profiles.load(name)
        except (profiles.ProfileError, OSError):
            continue
        items = plan.plan(prof)["findings"]
        applies = [r for r in compat.evaluate_all(compat.facts_from_profile(prof)) if r.status != "skip"]
        lines = [f"\nPlan mode ({reason}): no log of the profile's box exists here. The pitfalls profile "
                 f"{prof.name} is exposed to, from its declared hardware and software: lab plan finds "
                 f"{len(items) or 'nothing to fix'}"]
        lines += [f"  [{f['severity']}] {f['message']}" + (f" — fix: {f['fix']}" if f.get("fix") else "") for f in items]
        lines.append(f"  the {len(applies)} compatibility rules that apply to this box, and how it stands:")
        lines += [f"  [{r.status}] {r.id}: {display.clip(' '.join(r.description.split()), 150)}" for r in applies]
        return "\n".join(lines)
    return f"\nPlan mode ({reason}): the profile file is not readable, so its pitfalls cannot be listed."


def findings_rows(findings: list[Finding]) -> list[dict]:
    """Findings flattened for a record (the report shows them as a table with severity badges)."""
    return [{"severity": f.severity, "entry_id": f.entry_id, "title": f.title, "evidence": f.evidence,
             "where": f.where, "count": f.count, "fix": f.fix, "commands": "\n".join(f.commands),
             "source": "\n".join(f.source)} for f in findings]


def severity_chart(findings: list[Finding], reps: list[Reproduction], captured: list[dict]):
    """Bars by severity: this run's findings, the first finding of each reproduction, of each captured text."""
    import plotly.graph_objects as go

    sev = {e.id: e.severity for e in load_kb()}
    groups = {"this run": [f.severity for f in findings],
              "reproduced here": [r.findings[0]["severity"] for r in reps if r.findings],
              "captured GPU errors": [sev[c["diagnosed"]] for c in captured if c["diagnosed"] in sev]}
    fig = go.Figure([go.Bar(name=name, x=list(SEVERITIES),
                            y=[vals.count(s) for s in SEVERITIES],
                            text=[vals.count(s) for s in SEVERITIES], textposition="auto")
                     for name, vals in groups.items()])
    fig.update_layout(title="Findings by severity", barmode="group", xaxis_title="severity",
                      yaxis_title="findings", height=340)
    return fig


def repro_checks(reps: list[Reproduction], captured: list[dict]) -> list[Check]:
    """One check per reproduction (pass: diagnose() put the expected entry first), one for the captured texts."""
    out = []
    for r in reps:
        if r.skipped:
            out.append(Check(f"reproduction diagnosed: {r.id}", "skip", None, r.expected_entry, r.skipped, SOURCE))
            continue
        out.append(Check(f"reproduction diagnosed: {r.id}", "pass" if r.correct else "fail", r.diagnosed_as,
                         r.expected_entry, "" if r.correct else
                         f"the knowledge base does not rank {r.expected_entry} first for this text: see {r.log}",
                         SOURCE))
    wrong = [c["expected"] for c in captured if not c["correct"]]
    out.append(Check("captured GPU errors diagnosed", "pass" if not wrong else "fail",
                     f"{len(captured) - len(wrong)}/{len(captured)}", f"{len(captured)}/{len(captured)}",
                     f"not recognised first: {', '.join(wrong)}" if wrong else "", "lab/data/captured_errors.yaml"))
    return out


def build_record(findings: list[Finding], reps: list[Reproduction], captured: list[dict]) -> dict:
    """The 07_troubleshooting record: summary, checks, tables, charts, this run's findings, reproductions."""
    tried = [r for r in reps if not r.skipped]
    checks = repro_checks(reps, captured)
    summary = {**{f"run_findings_{s}": sum(f.severity == s for f in findings) for s in SEVERITIES},
               "run_findings": len(findings),
               "reproductions_diagnosed": f"{sum(r.correct for r in tried)}/{len(tried)}",
               "reproductions_skipped": len(reps) - len(tried),
               "captured_diagnosed": f"{sum(c['correct'] for c in captured)}/{len(captured)}",
               "reproduction_seconds": round(sum(r.seconds or 0 for r in reps), 1)}
    tables = [evidence.table_entry("This run: findings", findings_rows(findings)),
              evidence.table_entry("Pitfalls reproduced here", reproductions_rows(reps)),
              evidence.table_entry("GPU-only pitfalls, from captured logs", captured)]
    return {"title": "Troubleshooting: this run diagnosed, pitfalls reproduced", "summary": summary,
            "checks": [c.to_dict() for c in checks], "tables": tables,
            "charts": [evidence.chart_entry("Findings by severity", severity_chart(findings, reps, captured))],
            "findings": findings_rows(findings), "reproductions": [r.to_record() for r in reps],
            "captured": captured}


def record(s: Session):
    """Write records/07_troubleshooting.json with its closing text, built (`build_record`) from what the steps kept in
    `s.results`; its checks as the table the notebook shows."""
    from lab.core import checks

    s.record(NAME, build_record(s.results.get("run_findings") or [], reproductions(s), s.results.get("captured") or []),
             closing=closing_text)
    return checks.table(checks.from_dicts(s.read(NAME)["checks"]))


def endpoint_record(s: Session):
    """Write records/07_endpoint.json (lab.diagnose.endpoint_diagnose: what the five requests `diagnose_endpoint` kept
    met) with its closing text, and show that text (Markdown)."""
    s.record(ENDPOINT, endpoint_diagnose.build_record(s.results.get("endpoint")), closing=endpoint_diagnose.what_this_means)
    return session.closing(s, ENDPOINT)


def what_this_means(s: Session):
    """The closing text as the record keeps it (written by `record`), as Markdown for the notebook's last cell."""
    return session.closing(s, NAME)


def findings_in_words(findings: list[dict]) -> str:
    """'1 error, 6 warned checks': the knowledge base's findings by severity, and a run's own failed or warned checks
    by the check's status, the word the report's counts at the top use for them (a warned check is listed among the
    findings as a note, lab.diagnose.troubleshoot, and was counted "0 warning, 6 note" beside the top's "6 warn")."""
    from_checks = [f for f in findings if str(f.get("entry_id", "")).startswith("check:")]
    known = [f for f in findings if f not in from_checks]
    parts = [f"{n} {word}" for word, n in (("error", sum(f["severity"] == "error" for f in known)),
                                           ("warning", sum(f["severity"] == "warn" for f in known)),
                                           ("note", sum(f["severity"] == "info" for f in known))) if n]
    for status in ("fail", "warn"):
        n = sum(str(f.get("title", "")).endswith(f"' {status}") for f in from_checks)
        if n:
            parts.append(f"{n} {'failed' if status == 'fail' else 'warned'} check{'s' if n != 1 else ''}")
    return ", ".join(parts) or "none"


def closing_text(record: dict) -> str:
    """What notebook 07 means for the user, from its record (Markdown, one point per line)."""
    s = record["summary"]
    lines = []
    if s["run_findings"] == 0:
        lines.append("This run shows no known problem: nothing in its logs, checks or notebooks matched.")
    else:
        top = record["findings"][0]
        lines.append(f"This run shows {s['run_findings']} known problem(s) ({findings_in_words(record['findings'])}). "
                     f"Start with the first — {top['title']} — fix: {top['fix']}")
    lines.append(f"The lab recognised {s['reproductions_diagnosed']} errors it made happen here with the real "
                 f"llama-server, and {s['captured_diagnosed']} real GPU error texts.")
    wrong = [r for r in record["reproductions"] if not r["skipped"] and not r["correct"]]
    if wrong:
        lines.append("NOT recognised as expected: " + ", ".join(f"{r['id']} (got {r['diagnosed_as']})" for r in wrong))
    if s["reproductions_skipped"]:
        lines.append(f"{s['reproductions_skipped']} reproduction(s) were not tried here: see the table.")
    lines.append(f"When something fails on your machine: `{display.lab_command('doctor --log server.log')}` (or "
                 f"pipe the error text into `{display.lab_command('doctor')}`, or `--run` a run folder); it exits 1 when it recognises "
                 "an error or warning, with the fix and where it comes from.")
    return "\n".join(f"- {line}" for line in lines)
