"""report.html: one self-contained page per run (opens offline; plotly.js embedded once).

Built only from manifest.json, records/*.json and the profiles' plans (pure), so a report can be rebuilt
from a shared run folder without re-running anything (`.venv/bin/python -m lab report RUN_DIR`).

The page reads answer first: the summary (lab.records.answer) right under the title, then a table of contents,
then one numbered section per notebook that opens with the notebook's own closing text ("what this means",
kept in its record as `what_this_means`), then its results, checks and charts; skipped checks and tables
that do not apply to the profile are one line each; run details (notebooks, files, packages) come last.
Tables go through lab.core.display, the same helper the notebooks use; figures are labelled, united and rounded by
the field schema (lab/data/fields.yaml), and a record written before it reads by today's names (`summary_of`).
"""
from __future__ import annotations

import html
import json
from pathlib import Path

from lab.core import display, evidence, fields, run_folder
from lab.core import session as core_session
from lab.records import manifest as manifest_file, report_commands
from lab.records.report_style import CSS

STATUS_COLOURS = display.STATUS_COLOURS


class NotARun(ValueError):
    """The folder given is not a run folder (missing, a file, or holding no manifest and no records)."""


def check_run_dir(run_dir: str | Path) -> Path:
    """The run folder, or NotARun saying what was given instead."""
    path = Path(run_dir)
    if not path.exists():
        raise NotARun(f"{path}: no such folder; give a run folder such as outputs/cpu-default/<UTC>_<sha>/")
    if not path.is_dir():
        raise NotARun(f"{path}: is a file, not a run folder")
    if not (path / "manifest.json").is_file() and not any((path / "records").glob("*.json")):
        raise NotARun(f"{path}: not a run folder (no manifest.json and no records/*.json); "
                      "give a folder under outputs/<profile>/")
    return path


def _e(value) -> str:
    return html.escape(display.fmt(value))


def badge(status: str) -> str:
    colour = STATUS_COLOURS.get(str(status), "#555")
    return f'<span class="badge" style="background:{colour}">{html.escape(str(status))}</span>'


def html_table(rows: list[dict], status_key: str | None = "status") -> str:
    """Rows as the lab shows every table (lab.core.display): never truncated, scrolling inside its box."""
    return display.rows_html(rows)


def markdown_html(text: str) -> str:
    """Markdown (the closing texts, the summary) as HTML; raw HTML in it is escaped, tables scroll."""
    import mistune

    md = mistune.create_markdown(escape=True, plugins=["table", "strikethrough"])
    out = report_commands.tidy_code(md(text or ""))
    return out.replace("<table>", '<div class="tablebox"><table>').replace("</table>", "</table></div>")


def _chart(figure: dict, first: bool) -> str:
    import plotly.io as pio

    fig = pio.from_json(json.dumps(figure), skip_invalid=True)
    # half the page wide (two charts a row from ~1,100 px): the legend goes under the plot, in small type,
    # so the plot keeps its width and a long title is not cut by it
    names = [t.name for t in fig.data if t.name and t.showlegend is not False]
    fig.update_layout(autosize=True, width=None, title_font_size=13, margin={"l": 55, "r": 15, "t": 55, "b": 40},
                      legend={"orientation": "h", "yanchor": "top", "y": -0.22, "x": 0, "font": {"size": 10}},
                      height=(fig.layout.height or 420) + 18 * ((len(names) + 2) // 3))
    return pio.to_html(fig, include_plotlyjs=True if first else False, full_html=False,
                       # no toolbar: it was drawn over the chart's title (its zoom and pan stay, by drag)
                       config={"displaylogo": False, "displayModeBar": False, "responsive": True}, default_width="100%")


def closing_text(record: dict, fallback=None) -> str | None:
    """The notebook's own closing text, as its page wrote it into the record (`what_this_means`: lab.pages, through
    lab.core.session.Session.record), so the report shows what the notebook showed and needs no page code. A record
    written before records kept it: `fallback(record)` when the caller passes one (`lab report` passes
    lab.pages.closing_text, from the layer above), else None (also for 06_tune, 06_speculative)."""
    text = record.get("what_this_means")
    if isinstance(text, str) and text.strip():
        return text
    if fallback is None:
        return None
    try:
        return fallback(record) or None
    except Exception as exc:  # a closing that cannot be written must not hide the rest of the evidence
        return f"(the closing text could not be written from this record: {type(exc).__name__}: {exc})"


def _checks_html(checks: list[dict], plan_reason: str | None = None) -> str:
    """The count line, the failed and warned checks as a table, the passed ones one click away, the skipped
    ones in a line: a section reads as what went wrong first."""
    # every status counted under its own name: a plan run's "not-run" checks are not passed ones
    statuses = list(dict.fromkeys(["pass", "warn", "fail", "skip", "not-run"]
                                  + [str(c.get("status")) for c in checks]))
    counts = {s: sum(str(c.get("status")) == s for c in checks) for s in statuses}
    # the counts on the heading's line: a line of badges under its own heading was 40 px a section
    parts = ["<h3>Checks <span style='font-size:1rem;font-weight:normal'>"
             + " ".join(f"{badge(s)} {n}" for s, n in counts.items() if n) + "</span></h3>"]
    order = {"fail": 0, "warn": 1}
    bad = sorted((c for c in checks if c.get("status") in order), key=lambda c: order[c["status"]])
    if bad:
        parts.append(display.rows_html(bad))
    passed = [c for c in checks if c.get("status") == "pass"]
    if passed:
        parts.append(f"<details class='table'><summary>{len(passed)} passed check{'s' if len(passed) != 1 else ''}: "
                     f"what was observed against what was expected</summary>{display.rows_html(passed)}</details>")
    not_run = [c for c in checks if c.get("status") == "not-run"]
    if not_run:
        parts.append(f"<details class='table'><summary>{len(not_run)} not run here (plan mode: they run on the "
                     f"profile's hardware): what each would expect</summary>{display.rows_html(not_run)}</details>")
    others = [c for c in checks if c.get("status") not in ("pass", "warn", "fail", "skip", "not-run")]
    if others:
        parts.append(display.rows_html(others))
    skipped = [c for c in checks if c.get("status") == "skip"]
    if skipped:
        why = sorted({str(c.get("observed") or c.get("fix") or "") for c in skipped} - {""})
        if plan_reason:  # the page's banner says it once at the top; each section repeated it in full
            why = [w.replace(plan_reason, "plan mode") for w in why]
        parts.append(f"<p class='skipline'>{len(skipped)} skipped (not on this profile or machine): "
                     + html.escape("; ".join(c.get("name", "") for c in skipped))
                     + (f" — {html.escape(why[0])}" if len(why) == 1 else "") + "</p>")
    return "\n".join(parts)


def _full_note(note: str, record: dict) -> str:
    """A chart's "not measured: why" note whole: records before the fix kept it cut at 90 characters."""
    why = (record.get("summary") or {}).get("energy_not_measured")
    return f"GPU energy not measured: {why}" if why and f"GPU energy not measured: {why}".startswith(note) else note


def _charts_html(record: dict, plotly_included: bool) -> tuple[list[str], bool]:
    """The record's charts that carry information (lab.records.report_charts); the rest as one line of text."""
    from lab.records import report_charts

    parts = []
    for chart in record.get("charts", []) or []:
        title = html.escape(str(chart.get("title")))
        try:
            if chart.get("figure") is None and chart.get("text"):  # a chart the notebook left out, and why
                parts.append(f"<p class='chartline'><b>{title}</b>: {_e(chart['text'])}</p>")
                continue
            if record.get("checks") and report_charts.is_status_chart(chart["figure"]):
                continue  # the Checks line above counts them
            kind, what, notes = report_charts.curate(chart["figure"])
            notes = [_full_note(n, record) for n in notes]
            if kind == "text":
                text = _full_note(str(what), record)
                parts.append(f"<p class='chartline'><b>{title}</b>: {html.escape(text)}"
                             + "".join(f"; {html.escape(n)}" for n in notes) + "</p>")
                continue
            parts.append(f"<div class='chart'><h3>{title}</h3>"
                         + "".join(f"<p class='skipline'>{html.escape(n)}</p>" for n in notes)
                         + _chart(what, not plotly_included) + "</div>")
            plotly_included = True
        except Exception as exc:  # a broken chart must not hide the rest of the evidence
            parts.append(f"<p class='err'>chart {title} could not be drawn: {html.escape(str(exc))}</p>")
    return parts, plotly_included


def _command_html(record: dict) -> str:
    """The server command a record planned (notebook 04), copyable: what to run on the profile's machine."""
    command = record.get("command") if isinstance(record.get("command"), dict) else {}
    if not command.get("shell") or not isinstance(command["shell"], str):  # a handed-over record's may be anything
        return ""
    if record.get("mode") == "plan":  # its paths are this machine's (its build, its folder): not a line for the card
        return ("<h3>The server command</h3><p class='meta'>planned on this machine, with this machine's paths to the "
                "server and the model: on the profile's machine run the answer's <b>Run this</b> box or the "
                "Commands section's, which set their paths there (the flags' reasons are in the table below)</p>")
    return ("<h3>The server command</h3><p class='meta'>as this run built it from the profile, on the machine that ran "
            "it: the line to run there (the flags' reasons are in the table below)</p>"
            + report_commands.pre(command["shell"]))


def record_section(record: dict, plotly_included: bool, number: int | None = None, anchor: str | None = None,
                   closing=None) -> tuple[str, bool]:
    title = _title(record)
    head = f"{number} · {title}" if number is not None else title
    parts = [f"<h2 id='{html.escape(anchor or record['record'])}'>{html.escape(head)}</h2>",
             f"<p class='meta'>record <code>{display.code_html('records/' + str(record['record']) + '.json', 24)}</code> · "
             f"{html.escape(str(record.get('created_utc')))}</p>"]
    if record.get("problem"):
        parts.append(f"<p class='err'>Problem with this record: {html.escape(str(record['problem']))}</p>")
    if record.get("edited"):
        parts.append(f"<p class='err'>Not the run's evidence as written: {html.escape(str(record['edited']))}</p>")
    for flag in ("invalid_reason", "newer"):  # how it was written (lab.core.run_folder.read_record_file)
        if record.get(flag):
            parts.append(f"<p class='err'>{html.escape(str(record[flag]))}</p>")
    closing = closing_text(record, closing) if not record.get("problem") else None
    if closing:
        parts.append(f"<div class='closing'><h3>What this means</h3>{markdown_html(closing)}</div>")
    parts.append(_command_html(record))
    summary = fields.canonical(record.get("summary"))  # an older record's names read as today's
    if isinstance(summary, dict) and summary:
        parts.append("<details><summary>Key results (the record's summary)</summary>"
                     + display.rows_html(display.as_rows(summary)) + "</details>")
    if record.get("checks"):
        parts.append(_checks_html(record["checks"], record.get("plan_reason")))
    if record.get("findings"):
        parts.append("<h3>Findings</h3>" + display.rows_html(record["findings"]))
    empty = []
    # Tables are evidence to consult, not to scroll past: each is one line (its title and size) that opens in
    # place, so a section reads as its closing text, its checks and its charts.
    for tbl in record.get("tables", []) or []:
        rows = tbl.get("rows") or []
        if rows:
            parts.append(f"<details class='table'><summary>{html.escape(str(tbl.get('title')))} "
                         f"<span class='meta'>({len(rows)} row{'s' if len(rows) != 1 else ''})</span></summary>"
                         + display.rows_html(rows) + "</details>")
        else:
            empty.append(str(tbl.get("title")))
    if empty:
        parts.append(f"<p class='skipline'>Not on this profile: {html.escape('; '.join(empty))}.</p>")
    charts, plotly_included = _charts_html(record, plotly_included)
    lines = [c for c in charts if not c.startswith("<div class='chart'>")]
    drawn = [c for c in charts if c.startswith("<div class='chart'>")]
    parts += lines + ([f"<div class='charts'>{''.join(drawn)}</div>"] if drawn else [])
    return "\n".join(parts), plotly_included


def _title(record: dict) -> str:
    """The record's title without a leading notebook number ("02 · Install …"): sections are numbered here."""
    import re

    return re.sub(r"^\d\d\s*·\s*", "", str(record.get("title") or record["record"]))


def _answer_html(run_dir: Path) -> str:
    from lab.records import answer

    try:
        facts = answer.for_run(run_dir)
    except Exception as exc:  # the summary is a view; a failure in it must not lose the report
        return f"<p class='err'>The summary could not be built: {html.escape(f'{type(exc).__name__}: {exc}')}</p>"
    if facts is None:
        return "<p class='err'>The summary needs the run's profile file, which could not be loaded.</p>"
    return markdown_html(answer.markdown(facts))


def _commands_html(run_dir: Path) -> str:
    from lab.records import answer, report_commands

    try:
        return report_commands.section(answer.profile_for_run(run_dir))
    except Exception as exc:  # a view: a failure in it must not lose the report
        return f"<p class='err'>The commands could not be listed: {html.escape(f'{type(exc).__name__}: {exc}')}</p>"


def _meta_line(manifest: dict, cut: str | None = None) -> str:
    if not manifest:
        return ("no manifest.json in this folder: " + ("the run was cut before it wrote one (see above)" if cut else
                "notebooks run by hand") + "; provenance is in each record")
    # the manifest's fields have their kinds (run_folder.read_manifest); what is inside them is shown as text
    git, host = manifest.get("git", {}), manifest.get("host", {})
    gpus = manifest.get("gpus") or []
    gpu_text = ", ".join(f"{g.get('name')} ({g.get('compute_capability')})" for g in gpus) or "no GPU"
    ram = host.get("ram_bytes") if isinstance(host.get("ram_bytes"), (int, float)) else 0
    return (f"run <code>{display.code_html(str(manifest.get('run_id')), 24)}</code> · {html.escape(str(manifest.get('finished_utc')))} · "
            f"git {html.escape(str(git.get('short') or git.get('sha')))}{' (uncommitted changes)' if git.get('dirty') else ''} · "
            f"{html.escape(str(host.get('cpu_model')))}, {html.escape(str(host.get('cpu_logical_cores')))} cores, "
            f"{html.escape(display.human_bytes(ram or 0))} RAM · {html.escape(gpu_text)}")


def interrupted_banner(manifest: dict) -> str:
    """'This run was cut …' when the runner recorded an interruption, else ''."""
    cut = manifest.get("interrupted")
    if not isinstance(cut, dict):
        return ""
    during = cut.get("during") or cut.get("notebook") or "start-up"  # runs before "during" named only the notebook
    return (f"<p class='err'>This run was cut: {_e(cut.get('signal'))} at {_e(cut.get('utc'))} during "
            f"{_e(during)}. Notebooks not started by then did not run; records written before the cut are shown "
            f"below.</p>")


def cut_without_manifest(run_dir: Path, manifest: dict, manifest_problem: str | None) -> str | None:
    """Why a folder that `lab run` made (evidence.RUN_FOLDER_NAME) has no manifest.json: the runner writes it last,
    after every notebook, even when cut by SIGINT/SIGTERM/SIGHUP/SIGQUIT, so a folder without one was cut harder
    (SIGKILL, out of memory, power) or is still running; None for any other folder (notebooks run by hand)."""
    if manifest or manifest_problem or not evidence.RUN_FOLDER_NAME.fullmatch(run_dir.name):
        return None
    return ("This run was cut before it wrote manifest.json (killed with SIGKILL, out of memory, the "
            "machine stopped; or it is still running): it did not finish, and nothing here says it went well. The "
            "records below are what it wrote before it ended; notebooks after them did not run or did not finish.")


def raw_logs_left(run_dir: Path) -> list[str]:
    """Raw server logs (`logs/.NAME.log.partial`) a run leaves only when cut before it stopped its server (the
    runner redacts them into logs/NAME.log as it ends): named, never shown; they may hold the run's API key."""
    found, _ = run_folder.folder_files(run_dir / "logs", lambda p: p.name.startswith(".") and p.name.endswith(".partial"))
    return [f"logs/{p.relative_to(run_dir / 'logs').as_posix()}" for p in found]


def status_line(manifest: dict) -> str:
    """The run's status in words under the badge: its checks counted, so "7 fail" never sits under a green "ok"."""
    counts = manifest.get("check_counts")
    if not isinstance(counts, dict):
        return ""
    return (f"<p class='meta'><b>Checks: {_e(manifest_file.counts_text(counts))}</b> · notebooks: "
            f"{_e(sum(n.get('status') == 'ok' for n in manifest.get('notebooks') or [] if isinstance(n, dict)))} of "
            f"{_e(len(manifest.get('notebooks') or []))} ok</p>")


def plan_banner(manifest: dict) -> str:
    """Once, at the top of a plan-mode run's report: why nothing was measured and what its numbers are."""
    if manifest.get("mode") != "plan":
        return ""
    return (f"<p class='plan' style='background:#eef0fb;border-left:4px solid #5c6bc0;padding:.3rem .8rem'>"
            f"<b>Plan mode</b>: {_e(manifest.get('plan_reason'))}. Every notebook did what needs no such hardware; "
            "checks that need it are listed as <i>not-run</i>, and every speed and size below is <b>predicted</b>, "
            "none measured.</p>")


def heading_badges(status: str, mode: str | None) -> str:
    """The run's badge: "plan" for a plan-mode run whose notebooks all ran (a green "ok" beside it read as checks
    passed on the card, when the card's checks were not run), its status beside "plan" when it is not ok."""
    if mode != "plan":
        return badge(status)
    return badge("plan") if status == "ok" else f"{badge(status)} {badge('plan')}"


def build(run_dir: str | Path, require_run: bool = False, closing=None) -> Path:
    """Write report.html of a run folder; with require_run, a folder that is not a run raises NotARun
    (`lab report` on a typo should not write an empty report into it)."""
    run_dir = check_run_dir(run_dir) if require_run else Path(run_dir)
    manifest, manifest_problem = manifest_file.read_manifest(run_dir)
    records = run_folder.read_records(run_dir, manifest.get("records"))
    prof = manifest.get("profile") if isinstance(manifest.get("profile"), dict) else {}
    if not prof.get("name"):  # a folder without a manifest (an interactive session's): the records name the profile
        named = [(r.get("provenance") or {}).get("profile_file") for r in records.values()]
        prof = {"name": next((core_session.profile_name_of(n) for n in named if n), run_dir.name)}
    cut = cut_without_manifest(run_dir, manifest, manifest_problem)
    overall = manifest.get("status", "cut" if cut else "interactive" if not manifest else "unknown")
    raw_logs = raw_logs_left(run_dir)
    sections, toc, plotly_included = [], [], False
    for number, record in enumerate(records.values(), start=1):
        anchor = f"s{number}"
        section, plotly_included = record_section(record, plotly_included, number, anchor, closing)
        sections.append(section)
        toc.append(f"<li><a href='#{anchor}'>{html.escape(_title(record))}</a></li>")
    details_n = len(records) + 1
    toc.append(f"<li><a href='#run'>Run details: notebooks, model files, packages</a></li>")
    nb_rows = [{"notebook": n.get("notebook"), "status": n.get("status"), "duration_s": n.get("duration_s"),
                "error": n.get("error") or ""} for n in manifest.get("notebooks") or [] if isinstance(n, dict)]
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>LLM lab report · {html.escape(str(prof.get('name')))} · {html.escape(str(manifest.get('run_id') or run_dir.name))}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>LLM lab report: {html.escape(str(prof.get('name')))} {heading_badges(overall, manifest.get('mode'))}</h1>",
        status_line(manifest),
        plan_banner(manifest),
        f"<p class='meta'>{_meta_line(manifest, cut)}</p>",
        f"<p class='err'>{_e(cut)}</p>" if cut else "",
        interrupted_banner(manifest),
        *(f"<p class='err'>Left behind: {_e(log)}, a server's raw log, not redacted (a run or server cut before "
          "it finished it): it may hold the run's API key and is not shown here; delete it before you share this "
          "folder.</p>" for log in raw_logs),
        *(f"<p class='err'>Not written: {_e(e)}</p>" for e in manifest.get("errors") or [] if isinstance(e, str)),
        *(f"<p class='err'>Model file changed since run {_e(c.get('previous_run'))}: {_e(c.get('path'))} had sha256 "
          f"{_e(str(c.get('previous_sha256'))[:16])}…, now {_e(str(c.get('sha256'))[:16])}…; numbers of the two runs "
          "are not comparable.</p>" for c in manifest.get("model_changed") or [] if isinstance(c, dict)),
        f"<p class='err'>{_e(manifest_problem)}</p>" if manifest_problem else "",
        *(f"<p class='err'>{_e(line)}</p>" for line in manifest_file.changed_inputs(run_dir)),
        f"<section class='answer' id='answer'><h2 style='margin-top:.6rem;border:0'>The answer</h2>{_answer_html(run_dir)}</section>",
        "<nav><h2>Contents</h2><p><a href='#commands'>Commands: what to type, one per block</a></p><ol>"
        + "".join(toc) + "</ol></nav>",
        _commands_html(run_dir),
        *sections,
    ]
    if not records:
        parts.append("<p class='err'>No records were written: see the notebooks' errors below.</p>")
    parts += [f"<h2 id='run'>{details_n} · Run details</h2>", "<h3>Notebooks</h3>", display.rows_html(nb_rows)]
    if manifest.get("model_files"):
        parts += ["<h3>Model files</h3>", display.rows_html(manifest["model_files"])]
    packages = [{"package": k, "version": v} for k, v in (manifest.get("packages") or {}).items() if v]
    parts.append(f"<details><summary>Packages ({len(packages)})</summary>{display.rows_html(packages)}</details>")
    # plotly sizes a chart once, when its script runs, to its box then; auto-fill keeps each chart's column the width
    # it will have (auto-fit let a first chart, alone in its row until the second was parsed, take the whole row and
    # then draw under its neighbour at 1400 px); one resize after load fits every chart to its final box anyway
    parts.append("<script>window.addEventListener('load',()=>window.dispatchEvent(new Event('resize')))</script>")
    parts.append("</body></html>")
    return evidence.write_whole(run_dir / "report.html", "\n".join(parts))


# compare's rows that say what is wrong with a record: shown whatever the other runs say
FLAG_ROWS = ("problem", "edited after the run", "marked invalid when written", "written by a newer lab")


def compare_rows(run_dirs: list[str | Path]) -> list[dict]:
    """One row per (record, result) with one column per run: many runs' key results side by side, by today's names
    (a run from before the field schema on the same row as a new one)."""
    runs = []
    for rd in run_dirs:
        rd = check_run_dir(rd)
        manifest, _ = manifest_file.read_manifest(rd)
        name = (manifest.get("profile") or {}).get("name") if isinstance(manifest.get("profile"), dict) else None
        # "profile/run id" always (a run without a manifest: the folder it sits in names the profile): a bare run id
        # with "_" read as a field name and its header became words ("20261129T173230Z 87d3b0f")
        label = f"{name or rd.resolve().parent.name}/{rd.name}"
        runs.append((label, run_folder.read_records(rd, manifest.get("records")), manifest))
    # a plan-mode run measured nothing: its values are labelled predicted, and "measured" ones say not measured
    head = [{"record": "run", "result": "mode", **{label: ("plan (predicted, nothing measured)" if m.get("mode") == "plan"
                                                          else "measured") for label, _, m in runs}},
            {"record": "run", "result": "status", **{label: m.get("status") for label, _, m in runs}},
            {"record": "run", "result": "checks", **{label: manifest_file.counts_text(m["check_counts"])
                                                     if isinstance(m.get("check_counts"), dict) else None
                                                     for label, _, m in runs}}]
    # records of different schema versions (evidence.SCHEMA_VERSION) are lined up by today's names
    # (fields.canonical), never silently: the versions are a row of their own
    versions = {label: sorted({r["schema_version"] for r in records.values() if isinstance(r.get("schema_version"), int)
                               and not isinstance(r["schema_version"], bool)}) for label, records, _ in runs}
    every = {v for vs in versions.values() for v in vs}
    if len(every) > 1 or any(v > evidence.SCHEMA_VERSION for v in every):
        newer = any(v > evidence.SCHEMA_VERSION for v in every)
        said = ("newer than this lab's " + str(evidence.SCHEMA_VERSION) + ": update the lab" if newer
                else "older records read by today's names")
        head.append({"record": "run", "result": f"schema_version: they differ ({said})",
                     **{label: ", ".join(map(str, vs)) or None for label, vs in versions.items()}})
    # each summary read once by today's names, the keys in first-seen order in a dict: 8,000 summary keys took 47 s
    # as a list searched for every key and a summary re-read for every row
    runs = [(label, {name: summary_of(rec) for name, rec in records.items()}, records) for label, records, _ in runs]
    plan_runs = {label for label, _, records in runs if any(r.get("mode") == "plan" for r in records.values())}
    keys = dict.fromkeys((name, k) for _, summaries, _ in runs for name, summary in summaries.items() for k in summary)
    rows = []
    for flag, result in zip(("problem", "edited", "invalid_reason", "newer"), FLAG_ROWS):
        rows += [{"record": name, "result": result, **{label: recs[name].get(flag) if name in recs else None
                                                       for label, _, recs in runs}}
                 for name in dict.fromkeys(n for _, _, recs in runs for n, r in recs.items() if r.get(flag))]
    for name, k in keys:
        values = {label: summaries.get(name, {}).get(k) for label, summaries, _ in runs}
        unit = display.bytes_unit(values.values()) if display.is_bytes_key(k) else None
        row = {"record": name, "result": k}
        for label, value in values.items():
            shown = display.fmt(value, k, unit=unit)
            predicted = label in plan_runs and not measured_here_in_plan_mode(name, k)
            row[label] = _plan_value(k, value, shown) if predicted and value is not None else shown
        rows.append(row)
    return head + rows


# What a plan-mode run measures on the machine it ran on (not the profile's): the versions installed here (02), the
# quantization ladder of the stand-ins (03), llama.cpp's KV buffers of the grid (05's parity), the reproductions (07).
# Those figures are measurements; everything else in a plan run is the profile's prediction.
MEASURED_HERE = {"02_install": (), "03_quantize": (), "07_troubleshooting": (), "05_kv_cache": ("parity_", "vllm_kv")}


def measured_here_in_plan_mode(record: str, key: str) -> bool:
    prefixes = MEASURED_HERE.get(record)
    return prefixes is not None and (not prefixes or str(key).startswith(prefixes))


def differing(rows: list[dict]) -> list[dict]:
    """`compare_rows` cut to what differs between the runs (as the table shows each value: the schema's unit and
    rounding), the run rows and each record's problem kept, and one closing row counting the results that are the
    same in every run."""
    def shown(row):
        return {display.fmt(v, str(row["result"])) for k, v in row.items() if k not in ("record", "result")}

    if len({k for r in rows for k in r} - {"record", "result"}) < 2:  # one column (a folder given twice): all of it
        return rows

    # the run rows, and what is wrong with a record (unreadable, missing, edited), are shown whatever the others say
    keep = [r for r in rows if r.get("record") == "run" or r.get("result") in FLAG_ROWS or len(shown(r)) > 1]
    same = len(rows) - len(keep)
    said = "1 more result is" if same == 1 else f"{same} more results are"
    tail = [{"record": "", "result": f"{said} the same in every run (--all shows them)"}] if same else []
    return keep + tail


def summary_of(record: dict) -> dict:
    """A record's summary by today's names (lab.core.fields.canonical): a run from before the field schema lines up
    with a new one, row by row."""
    summary = record.get("summary")
    return fields.canonical(summary) if isinstance(summary, dict) else {}


def _plan_value(key: str, value, shown: str):
    """A plan-mode run's predicted summary value for the fleet table (`shown`: as the table shows it): a number is a
    prediction and says so; a value whose key says it was measured (or served) is not shown as one."""
    if isinstance(value, bool):
        return shown
    if any(w in key.lower() for w in ("measured", "served", "llama_bench")):
        return "not measured (plan mode)"
    return f"{shown} (predicted)" if isinstance(value, (int, float)) else shown


def build_compare(run_dirs: list[str | Path], out: str | Path) -> Path:
    rows = [{**r, "result": display.label(r["result"])} for r in compare_rows(run_dirs)]  # its words, as the terminal's
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>LLM lab: compare runs</title>"
            f"<style>{CSS}</style></head><body><h1>Compare runs</h1>{html_table(rows, None)}</body></html>")
    return evidence.write_whole(out, page)  # never through a link planted where it writes
