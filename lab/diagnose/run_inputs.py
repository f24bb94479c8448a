"""What a run folder holds for a diagnosis: its logs, the errors of its executed notebooks, and the facts
and checks of its manifest and records (outputs/<profile>/<run>/)."""
from __future__ import annotations

from pathlib import Path

from lab.core import profile_file, run_folder
from lab.diagnose.log_scan import file_blocks, strip_ansi


# The logs a diagnosis scans, together: read in blocks (bounded memory), but 40 links to one 1 GB log would still be
# 40 GB of scanning; the lab's own logs are a few MB a run.
MAX_LOG_BYTES = 4 * run_folder.MAX_FOLDER_BYTES
LOG_SUFFIXES = (".log", ".txt", ".out", ".err")


def notebook_errors(nb) -> str:
    """The error outputs of an executed notebook (its JSON, as read: anything else gives ""): ename: evalue and
    traceback, ANSI colours removed."""
    lines = []
    for cell in nb.get("cells") or [] if isinstance(nb, dict) else []:
        outputs = cell.get("outputs") if isinstance(cell, dict) else None
        for out in outputs if isinstance(outputs, list) else []:
            if isinstance(out, dict) and out.get("output_type") == "error":
                lines.append(f"{out.get('ename')}: {out.get('evalue')}")
                trace = out.get("traceback")
                lines.extend(strip_ansi(str(t)) for t in (trace if isinstance(trace, list) else []))
    return "\n".join(lines)


def run_folder_inputs(run_dir: str | Path, include_repro: bool = False) -> tuple[list[tuple[str, str]], dict]:
    """(text chunks with their origin, facts) read from a run folder, every file and the folder as a whole capped
    (lab.core.run_folder): what is left out is one chunk of text saying so.

    Facts: manifest.json and every record are merged under "records"; checks from all records
    (and the manifest's statuses, if they hold checks) are listed under "checks"."""
    run = Path(run_dir)
    chunks: list[tuple[str, str]] = []
    logs = run / "logs"

    def wanted(path: Path) -> bool:
        return path.suffix in LOG_SUFFIXES and (include_repro or "repro" not in path.relative_to(logs).parts[:-1])

    files, left = run_folder.folder_files(logs, wanted, max_bytes=MAX_LOG_BYTES)
    for path in files:
        if path.is_file():  # a link to a device or pipe is not a log (a FIFO would never end)
            chunks.append((file_blocks(path), path.relative_to(run).as_posix()))
    nbs, left_nb = run_folder.folder_files(run / "notebooks", lambda p: p.suffix == ".ipynb", max_depth=1)
    for path in nbs:
        try:
            text = notebook_errors(run_folder.read_json_file(path))
        except run_folder.UnreadableJson:
            continue
        if text:
            chunks.append((text, path.relative_to(run).as_posix()))
    facts: dict = {"records": {}, "checks": []}
    manifest, problem = run_folder.read_manifest(run)
    if manifest:
        facts["manifest"] = manifest
    if problem:  # a device, huge, nested 10,000 deep, not JSON, a list: one line
        chunks.append((f"manifest.json is not usable: {problem.removeprefix(str(run / 'manifest.json') + ': ')}", "manifest.json"))
    for name, rec in run_folder.read_records(run).items():
        if rec.get("stand_in"):  # not read, not an object, missing: no facts (its problem is the report's to show)
            continue
        facts["records"][name] = rec
        for c in rec.get("checks") or []:
            facts["checks"].append({**c, "record": f"records/{name}.json"})
    not_read = [f"{p.relative_to(run).as_posix()}: {why}" for p, why in left + left_nb]
    if not_read:
        chunks.append(("not read (the most the lab reads of one run folder): " + "; ".join(not_read[:20]), "the run folder"))
    expected = _profile_gpu_count(facts)
    if expected is not None:
        facts["profile_gpu_count"] = expected
    return chunks, facts


def _profile_gpu_count(facts: dict) -> int | None:
    """How many GPUs the run's profile expects, from the profile file the manifest or a record names
    (None when no file is named or it cannot be read: then GPU-only entries still apply). Read as `lab validate`
    reads one (lab.core.profile_file: a regular file of at most 64 KiB; /dev/zero or a FIFO is refused, not read)."""
    named = [((facts.get("manifest") or {}).get("profile") or {}).get("file")]
    named += [(r.get("provenance") or {}).get("profile_file") for r in facts["records"].values()
              if isinstance(r.get("provenance"), dict)]
    for name in named:
        if not isinstance(name, str) or not name:
            continue
        try:
            count = profile_file.parse(Path(name)).get("gpu_count")
        except profile_file.ProfileError:
            continue
        if isinstance(count, int):
            return count
    return None
