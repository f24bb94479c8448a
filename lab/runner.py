"""`lab run`: papermill runs the notebooks in order into one run folder, then the manifest and report.

A failing notebook does not stop the others, except those that depend on it (they are skipped,
saying why). The run exits non-zero when anything failed; the report shows what and the error.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lab import evidence, profiles
from lab.paths import NOTEBOOKS

KERNEL_NAME = "llm-lab"
# Which notebooks need another one to have succeeded first (by two-digit prefix).
DEPENDS_ON: dict[str, tuple[str, ...]] = {"06": ("04",)}


@dataclass
class NotebookResult:
    notebook: str
    status: str  # ok | failed | skipped
    duration_s: float = 0.0
    error: str | None = None
    output: str | None = None


@dataclass
class RunResult:
    run_dir: Path
    results: list[NotebookResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.status == "ok" for r in self.results)


def discover(only: list[str] | None = None) -> list[Path]:
    """notebooks/NN_*.ipynb in order, optionally only the given prefixes ("01", "02")."""
    books = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if only:
        known = {b.name[:2] for b in books}
        unknown = [o for o in only if o not in known]
        if unknown:
            raise ValueError(f"--only {','.join(unknown)}: no such notebook; known: {', '.join(sorted(known))}")
        books = [b for b in books if b.name[:2] in only]
    return books


def strip_unstable_metadata(path: Path) -> None:
    """Drop per-cell timings and similar noise so two runs' notebooks diff on content only."""
    nb = json.loads(path.read_text())
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {})
        meta.pop("execution", None)
        pm = meta.get("papermill")
        if isinstance(pm, dict):
            for key in ("start_time", "end_time", "duration"):
                pm.pop(key, None)
    pm = nb.get("metadata", {}).get("papermill")
    if isinstance(pm, dict):
        for key in ("start_time", "end_time", "duration", "input_path", "output_path"):
            pm.pop(key, None)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def _error_text(exc: Exception) -> str:
    ename = getattr(exc, "ename", type(exc).__name__)
    evalue = getattr(exc, "evalue", str(exc))
    return f"{ename}: {evalue}"


REQUIRED_PARAMETERS = ("profile", "run_dir")


def parameter_problem(book: Path) -> str | None:
    """papermill only *warns* when a notebook lacks a parameter it is given; the lab refuses."""
    import papermill as pm

    found = set(pm.inspect_notebook(str(book)))
    missing = [p for p in REQUIRED_PARAMETERS if p not in found]
    if missing:
        return (f"{book.name}: the cell tagged 'parameters' does not define {', '.join(missing)} "
                f"(papermill parsed: {', '.join(sorted(found)) or 'nothing'}); write them as typed literals, "
                f'e.g. run_dir: str = ""  # comment')
    return None


def run_notebook(book: Path, run_dir: Path, profile_path: Path) -> NotebookResult:
    import papermill as pm

    out = run_dir / "notebooks" / book.name
    t0 = time.monotonic()
    problem = parameter_problem(book)
    if problem:
        return NotebookResult(book.stem, "failed", 0.0, f"BadParameters: {problem}")
    try:
        pm.execute_notebook(str(book), str(out), parameters={"profile": str(profile_path), "run_dir": str(run_dir)},
                            kernel_name=KERNEL_NAME, progress_bar=True, cwd=str(NOTEBOOKS),
                            request_save_on_cell_execute=True)
        status, error = "ok", None
    except Exception as exc:  # papermill raises PapermillExecutionError; kernel deaths raise others
        status, error = "failed", _error_text(exc)
    if out.exists():
        strip_unstable_metadata(out)
    return NotebookResult(book.stem, status, round(time.monotonic() - t0, 2), error,
                          str(out.relative_to(run_dir)) if out.exists() else None)


def run(profile: str, only: list[str] | None = None, out: str | None = None) -> RunResult:
    from lab import manifest, report

    profile_path = profiles.resolve(profile).resolve()
    prof = profiles.load(profile_path)
    books = discover(only)
    run_dir = evidence.new_run_dir(prof.name, out)
    started = evidence.utc_now()
    result = RunResult(run_dir)
    print(f"[run] profile {prof.name} → {run_dir}", file=sys.stderr, flush=True)
    for book in books:
        prefix = book.name[:2]
        failed_deps = [r.notebook for r in result.results
                       if r.notebook[:2] in DEPENDS_ON.get(prefix, ()) and r.status != "ok"]
        if failed_deps:
            res = NotebookResult(book.stem, "skipped", error=f"skipped: depends on {', '.join(failed_deps)}, which did not succeed")
        else:
            print(f"[run] {book.stem} ...", file=sys.stderr, flush=True)
            res = run_notebook(book, run_dir, profile_path)
        result.results.append(res)
        print(f"[run] {book.stem}: {res.status} ({res.duration_s:.1f} s)" + (f" — {res.error}" if res.error else ""),
              file=sys.stderr, flush=True)
    manifest.write(run_dir, prof, profile_path, started, [asdict(r) for r in result.results])
    report.build(run_dir)
    return result
