"""`lab doctor`'s output: the findings as terminal text and its exit code (the diagnosis is
lab.diagnose.troubleshoot's; notebook 07 shows the same findings as a table, lab.pages.troubleshoot)."""
from __future__ import annotations

import stat
from pathlib import Path

from lab.core import cli
from lab.diagnose.knowledge_base import SEVERITY_RANK
from lab.diagnose.troubleshoot import Finding


def format_findings(findings: list[Finding], run_state: str | None = None) -> str:
    """Plain text for a terminal (`lab doctor`), without a control character or terminal escape whatever the logs
    and records held (a handed-over run folder's). `run_state`: why the run folder is not a complete run
    (lab.core.run_folder.not_complete), said first: an interrupted run is never "No known problem found"."""
    head = f"Not a complete run: {run_state}\n\n" if run_state else ""
    return cli.printable(head + _findings_text(findings, bool(run_state)))


def _findings_text(findings: list[Finding], cut: bool) -> str:
    if not findings:
        return "No known problem found in its logs and records." if cut else "No known problem found."
    blocks = []
    for i, f in enumerate(findings, 1):
        lines = [f"{i}. [{f.severity}] {f.title}  ({f.entry_id})",
                 f"   seen: {f.evidence}" + (f"  [{f.where}]" if f.where else "") + (f"  (x{f.count})" if f.count > 1 else ""),
                 f"   cause: {f.cause}", f"   fix: {f.fix}"]
        lines += [f"     $ {c}" for c in f.commands]
        if f.confirmed_by and f.matched_by == "log":
            lines.append(f"   confirmed by: {f.confirmed_by}")
        lines += [f"   source: {s}" for s in f.source]
        blocks.append("\n".join(_wrap(line) for line in lines))
    return "\n\n".join(blocks)


def _wrap(line: str, width: int = 100) -> str:
    """A prose line wrapped to the terminal's 100 columns under its label; a command ('$ ...') stays whole so it
    pastes as it is."""
    import textwrap

    if len(line) <= width or line.lstrip().startswith("$ "):
        return line
    indent = " " * (len(line) - len(line.lstrip()) + 3)
    return "\n".join(textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False))


def doctor_exit_code(findings: list[Finding], min_severity: str = "warn") -> int:
    """0 when nothing at or above `min_severity` matched, 1 when something did.

    The default ignores "info" findings (notes such as "vLLM disabled its custom all-reduce", or
    "no GPU offload" on a machine that has no GPU); pass min_severity="info" to count them too."""
    limit = SEVERITY_RANK[min_severity]
    return 1 if any(SEVERITY_RANK[f.severity] <= limit for f in findings) else 0


def log_problem(path: Path) -> str | None:
    """Why `path` cannot be read as a log (None when it can): missing, a folder, a device or pipe."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if stat.S_ISDIR(mode):
        return f"{path}: is a folder; give a log file with --log, or a run folder with --run"
    if not stat.S_ISREG(mode):
        return f"{path}: not a regular file (a device, pipe or socket); give a log file"
    return None
