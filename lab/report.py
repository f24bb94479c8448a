"""report.html: one self-contained page per run (opens offline; plotly.js embedded once).

Built only from manifest.json and records/*.json, so a report can be rebuilt from a shared run
folder without re-running anything (`python -m lab report RUN_DIR`).
"""
from __future__ import annotations

import html
import json
from pathlib import Path

from lab import evidence

STATUS_COLOURS = {"pass": "#2ca02c", "ok": "#2ca02c", "warn": "#ff7f0e", "fail": "#d62728", "failed": "#d62728",
                  "skip": "#7f7f7f", "skipped": "#7f7f7f", "error": "#d62728", "info": "#1f77b4"}
MAX_TABLE_ROWS = 60


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

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1200px;color:#222;padding:0 1rem}
h1{margin-bottom:.2rem} h2{border-bottom:2px solid #ddd;padding-bottom:.2rem;margin-top:2.5rem}
table{border-collapse:collapse;margin:.6rem 0;font-size:.88rem;width:100%}
th,td{border:1px solid #ddd;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:#f4f4f4} .badge{color:#fff;border-radius:3px;padding:0 .4rem;font-weight:600}
.meta{color:#555;font-size:.9rem} .err{color:#d62728;white-space:pre-wrap;font-family:monospace}
code{background:#f4f4f4;padding:0 .2rem}
"""


def _e(value) -> str:
    if isinstance(value, float):
        value = f"{value:.4g}"
    elif isinstance(value, (dict, list)):
        value = json.dumps(value, ensure_ascii=False)
    return html.escape("" if value is None else str(value))


def badge(status: str) -> str:
    colour = STATUS_COLOURS.get(str(status), "#555")
    return f'<span class="badge" style="background:{colour}">{_e(status)}</span>'


def html_table(rows: list[dict], status_key: str | None = "status") -> str:
    if not rows:
        return "<p class='meta'>(no rows)</p>"
    cols = list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    body = []
    for r in rows[:MAX_TABLE_ROWS]:
        cells = "".join(f"<td>{badge(r.get(c)) if c in (status_key, 'severity', 'verdict') and r.get(c) in STATUS_COLOURS else _e(r.get(c))}</td>"
                        for c in cols)
        body.append(f"<tr>{cells}</tr>")
    more = f"<p class='meta'>… {len(rows) - MAX_TABLE_ROWS} more rows in the record</p>" if len(rows) > MAX_TABLE_ROWS else ""
    return f"<table><tr>{head}</tr>{''.join(body)}</table>{more}"


def _chart(figure: dict, first: bool) -> str:
    import plotly.io as pio

    fig = pio.from_json(json.dumps(figure), skip_invalid=True)
    return pio.to_html(fig, include_plotlyjs=True if first else False, full_html=False, config={"displaylogo": False})


def record_section(record: dict, plotly_included: bool) -> tuple[str, bool]:
    parts = [f"<h2 id='{_e(record['record'])}'>{_e(record.get('title', record['record']))}</h2>",
             f"<p class='meta'>record <code>records/{_e(record['record'])}.json</code> · {_e(record.get('created_utc'))}</p>"]
    if record.get("problem"):
        parts.append(f"<p class='err'>This record could not be used: {_e(record['problem'])}</p>")
    summary = record.get("summary")
    if isinstance(summary, dict) and summary:
        parts.append(html_table([{"result": k, "value": v} for k, v in summary.items()], status_key=None))
    if record.get("checks"):
        checks = record["checks"]
        counts = {s: sum(c.get("status") == s for c in checks) for s in ("pass", "warn", "fail", "skip")}
        parts.append("<h3>Checks</h3><p>" + " ".join(f"{badge(s)} {n}" for s, n in counts.items()) + "</p>")
        parts.append(html_table(checks))
    for finding_key in ("findings",):
        if record.get(finding_key):
            parts.append(f"<h3>{finding_key.title()}</h3>" + html_table(record[finding_key], status_key="severity"))
    for tbl in record.get("tables", []) or []:
        parts.append(f"<h3>{_e(tbl.get('title'))}</h3>" + html_table(tbl.get("rows", [])))
    for chart in record.get("charts", []) or []:
        try:
            parts.append(f"<h3>{_e(chart.get('title'))}</h3>" + _chart(chart["figure"], not plotly_included))
            plotly_included = True
        except Exception as exc:  # a broken chart must not hide the rest of the evidence
            parts.append(f"<p class='err'>chart {_e(chart.get('title'))} could not be drawn: {_e(exc)}</p>")
    return "\n".join(parts), plotly_included


def read_manifest(run_dir: Path) -> tuple[dict, str | None]:
    """manifest.json as a dict, and what was wrong with it (None when fine or absent)."""
    path = run_dir / "manifest.json"
    if not path.exists():
        return {}, None
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError) as exc:
        return {}, f"manifest.json is not readable JSON: {exc}"
    if not isinstance(data, dict):
        return {}, f"manifest.json holds a {type(data).__name__}, not an object"
    return data, None


def interrupted_banner(manifest: dict) -> str:
    """'This run was cut …' when the runner recorded an interruption, else ''."""
    cut = manifest.get("interrupted")
    if not isinstance(cut, dict):
        return ""
    return (f"<p class='err'>This run was cut: {_e(cut.get('signal'))} at {_e(cut.get('utc'))} during "
            f"{_e(cut.get('notebook') or 'start-up')}. Notebooks after it did not run; records written before "
            f"the cut are shown below.</p>")


def build(run_dir: str | Path, require_run: bool = False) -> Path:
    """Write report.html of a run folder; with require_run, a folder that is not a run raises NotARun
    (`lab report` on a typo should not write an empty report into it)."""
    run_dir = check_run_dir(run_dir) if require_run else Path(run_dir)
    manifest, manifest_problem = read_manifest(run_dir)
    records = evidence.read_records(run_dir)
    prof = manifest.get("profile", {})
    git = manifest.get("git", {})
    host = manifest.get("host", {})
    gpus = manifest.get("gpus") or []
    gpu_text = ", ".join(f"{g['name']} ({g['compute_capability']})" for g in gpus) or f"none ({manifest.get('gpu_note')})"
    nb_rows = [{"notebook": n.get("notebook"), "status": n.get("status"), "duration_s": n.get("duration_s"),
                "error": n.get("error") or ""} for n in manifest.get("notebooks") or [] if isinstance(n, dict)]
    overall = manifest.get("status", "unknown")
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>LLM lab report · {_e(prof.get('name'))} · {_e(manifest.get('run_id'))}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>LLM lab report: {_e(prof.get('name'))} {badge(overall)}</h1>",
        "<p class='meta'>"
        f"run <code>{_e(manifest.get('run_id'))}</code> · {_e(manifest.get('started_utc'))} → {_e(manifest.get('finished_utc'))}<br>"
        f"git {_e(git.get('sha'))}{' (dirty: uncommitted changes)' if git.get('dirty') else ''} · "
        f"profile sha256 {_e(str(prof.get('sha256'))[:16])}…<br>"
        f"host {_e(host.get('hostname'))}: {_e(host.get('cpu_model'))}, {_e(host.get('cpu_logical_cores'))} cores, "
        f"{_e(round((host.get('ram_bytes') or 0) / 2**30, 1))} GiB RAM · GPUs: {_e(gpu_text)} · "
        f"driver {_e(manifest.get('driver'))} · CUDA {_e(manifest.get('cuda_driver'))}</p>",
        interrupted_banner(manifest),
        *(f"<p class='err'>Model file changed since run {_e(c.get('previous_run'))}: {_e(c.get('path'))} had sha256 "
          f"{_e(str(c.get('previous_sha256'))[:16])}…, now {_e(str(c.get('sha256'))[:16])}…; numbers of the two runs "
          "are not comparable.</p>" for c in manifest.get("model_changed") or [] if isinstance(c, dict)),
        f"<p class='err'>{_e(manifest_problem)}</p>" if manifest_problem else "",
        "<h2>Notebooks</h2>", html_table(nb_rows),
    ]
    if manifest.get("model_files"):
        parts += ["<h2>Model files</h2>", html_table(manifest["model_files"], status_key=None)]
    plotly_included = False
    for record in records.values():
        section, plotly_included = record_section(record, plotly_included)
        parts.append(section)
    if not records:
        parts.append("<p class='err'>No records were written: see the notebooks' errors above.</p>")
    parts.append(f"<h2>Packages</h2>{html_table([{'package': k, 'version': v} for k, v in (manifest.get('packages') or {}).items()], None)}")
    parts.append("</body></html>")
    out = run_dir / "report.html"
    out.write_text("\n".join(parts), encoding="utf-8")
    return out


def compare_rows(run_dirs: list[str | Path]) -> list[dict]:
    """One row per (record, result) with one column per run: many runs' key results side by side."""
    runs = []
    for rd in run_dirs:
        rd = check_run_dir(rd)
        manifest, _ = read_manifest(rd)
        name = (manifest.get("profile") or {}).get("name") if isinstance(manifest.get("profile"), dict) else None
        label = f"{name}/{rd.name}" if name else rd.name
        runs.append((label, evidence.read_records(rd)))
    keys: list[tuple[str, str]] = []
    for _, records in runs:
        for name, rec in records.items():
            for k in (rec.get("summary") or {}):
                if (name, k) not in keys:
                    keys.append((name, k))
    rows = [{"record": name, "result": "problem", **{label: recs[name]["problem"] if name in recs else None
                                                     for label, recs in runs}}
            for name in dict.fromkeys(n for _, recs in runs for n, r in recs.items() if r.get("problem"))]
    for name, k in keys:
        row = {"record": name, "result": k}
        for label, records in runs:
            row[label] = (records.get(name, {}).get("summary") or {}).get(k)
        rows.append(row)
    return rows


def build_compare(run_dirs: list[str | Path], out: str | Path) -> Path:
    rows = compare_rows(run_dirs)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>LLM lab: compare runs</title>"
            f"<style>{CSS}</style></head><body><h1>Compare runs</h1>{html_table(rows, None)}</body></html>")
    out = Path(out)
    out.write_text(page, encoding="utf-8")
    return out
