"""What a run folder holds for a diagnosis: its logs, the errors of its executed notebooks, and the facts
and checks of its manifest and records (outputs/<profile>/<run>/)."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from lab.core import evidence
from lab.diagnose.log_scan import file_blocks, strip_ansi


def _read(path: Path, limit: int = 5_000_000) -> str:
    with open(path, "rb") as fh:
        return fh.read(limit).decode("utf-8", "replace")


def notebook_errors(path: Path) -> str:
    """The error outputs of an executed notebook (ename: evalue and traceback), ANSI colours removed."""
    try:
        nb = json.loads(_read(path))
    except (OSError, json.JSONDecodeError, RecursionError):  # RecursionError: nested thousands deep
        return ""
    lines = []
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []) or []:
            if out.get("output_type") == "error":
                lines.append(f"{out.get('ename')}: {out.get('evalue')}")
                lines.extend(strip_ansi(t) for t in out.get("traceback", []))
    return "\n".join(lines)


def run_folder_inputs(run_dir: str | Path, include_repro: bool = False) -> tuple[list[tuple[str, str]], dict]:
    """(text chunks with their origin, facts) read from a run folder.

    Facts: manifest.json and every record are merged under "records"; checks from all records
    (and the manifest's statuses, if they hold checks) are listed under "checks"."""
    run = Path(run_dir)
    chunks: list[tuple[str, str]] = []
    logs = run / "logs"
    for path in sorted(logs.rglob("*")) if logs.is_dir() else []:
        rel = path.relative_to(run).as_posix()
        if not path.is_file() or path.suffix not in (".log", ".txt", ".out", ".err"):
            continue
        if not include_repro and "repro" in path.relative_to(logs).parts[:-1]:
            continue
        chunks.append((file_blocks(path), rel))
    for path in sorted((run / "notebooks").glob("*.ipynb")) if (run / "notebooks").is_dir() else []:
        text = notebook_errors(path)
        if text:
            chunks.append((text, path.relative_to(run).as_posix()))
    facts: dict = {"records": {}, "checks": []}
    manifest = run / "manifest.json"
    if manifest.exists() or manifest.is_symlink():
        try:
            facts["manifest"] = evidence.read_json_file(manifest)
        except evidence.UnreadableJson as exc:  # a device, huge, nested 10,000 deep, not JSON: one line
            chunks.append((f"manifest.json is not usable: {str(exc).removeprefix(str(manifest) + ': ')}", "manifest.json"))
    for path in sorted((run / "records").glob("*.json")) if (run / "records").is_dir() else []:
        try:
            rec = evidence.read_json_file(path)
        except evidence.UnreadableJson:
            continue
        facts["records"][path.stem] = rec
        for c in rec.get("checks", []) if isinstance(rec, dict) else []:
            if isinstance(c, dict) and "name" in c and "status" in c:
                facts["checks"].append({**c, "record": f"records/{path.name}"})
    expected = _profile_gpu_count(facts)
    if expected is not None:
        facts["profile_gpu_count"] = expected
    return chunks, facts


def _profile_gpu_count(facts: dict) -> int | None:
    """How many GPUs the run's profile expects, from the profile file the manifest or a record names
    (None when no file is named or it cannot be read: then GPU-only entries still apply)."""
    named = [((facts.get("manifest") or {}).get("profile") or {}).get("file")]
    named += [(r.get("provenance") or {}).get("profile_file") for r in facts["records"].values() if isinstance(r, dict)]
    for name in filter(None, named):
        try:
            count = (yaml.safe_load(Path(name).read_text()) or {}).get("gpu_count")
        except (OSError, yaml.YAMLError, AttributeError):
            continue
        if isinstance(count, int):
            return count
    return None
