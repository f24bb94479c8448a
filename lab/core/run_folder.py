"""A run folder's files as every reader of one sees them (`lab report`, `lab compare`, `lab doctor --run`, the answer,
the runner's own check counts): run folders are handed around, so nothing in one is trusted to be small, regular,
shallow or of the lab's shape. Each file is capped in bytes and JSON depth (`read_capped`, `parse_json`), the folder
as a whole in bytes, files and depth (`folder_files`), and the manifest and records are checked for the kinds of
their fields (`read_manifest`, `read_records`): what cannot be used is flagged in one line, the rest is shown.
Re-exported by lab.core.evidence, where the writers are."""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from lab.core import display

MAX_RECORD_BYTES = 64 << 20  # a record holds samples and charts; 64 MB is far past any the lab writes
MAX_JSON_DEPTH = 200  # a record nests ~10 deep (a plotly figure included); deeper is not one, and costs recursion


class UnreadableJson(ValueError):
    """A run folder's JSON file (record, manifest) that is not read: one line naming the file and why."""


def read_capped(path: str | Path, max_bytes: int = MAX_RECORD_BYTES) -> bytes:
    """A run folder's file, as bytes: a regular file (a symlink to /dev/zero never ends) of at most `max_bytes`,
    else UnreadableJson naming it. Run folders are handed around: nothing in one is trusted to be small."""
    path = Path(path)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableJson(f"{path}: not a regular file ({'a folder' if stat.S_ISDIR(info.st_mode) else 'a device, pipe or socket'}); "
                                 "a run folder holds files the lab wrote")
        if info.st_size > max_bytes:
            raise UnreadableJson(f"{path}: {info.st_size:,} bytes, more than the {max_bytes:,} the lab reads")
        with open(path, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise UnreadableJson(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > max_bytes:  # grew between stat and read
        raise UnreadableJson(f"{path}: more than the {max_bytes:,} bytes the lab reads")
    return raw


# A run folder as a whole: what one reader (a report, a compare, a doctor) reads of it, however its files are laid
# out. The per-file cap alone lets 40 links to one 58 MB record cost 40 reads and gigabytes of parsed JSON (the
# lab's own runs: records under 2 MB together), a logs/ tree 1,500 folders deep cost a RecursionError.
MAX_FOLDER_BYTES = 128 << 20
MAX_FOLDER_FILES = 2_000
MAX_FOLDER_DEPTH = 8  # the lab writes logs/ and logs/repro/...: 2 deep


def folder_files(folder: str | Path, match, max_bytes: int = MAX_FOLDER_BYTES,
                 max_depth: int = MAX_FOLDER_DEPTH) -> tuple[list[Path], list[tuple[Path, str]]]:
    """The files under `folder` that `match(path)` accepts, sorted, and what was left out, one line each: walked
    without recursion and without following links to folders, at most `max_depth` folders deep and MAX_FOLDER_FILES
    files, and their sizes together at most `max_bytes` (a link counts as the file it points to, each time). Entries
    that are not regular files are kept, at no cost: read_capped names what they are. Left out: (path, why) pairs,
    a folder too deep among them."""
    root = Path(folder)
    kept, left, total = [], [], 0
    stack, paths_ = [(root, 1)], []
    while stack:
        here, depth = stack.pop()
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if depth < max_depth:
                    stack.append((Path(entry.path), depth + 1))
                else:
                    left.append((Path(entry.path), f"more than {max_depth} folders deep: not read"))
            elif match(Path(entry.path)) and not entry.is_dir():
                paths_.append(Path(entry.path))
    for path in sorted(paths_):
        try:
            size = path.stat().st_size if path.is_file() else 0
        except OSError:
            size = 0
        if len(kept) >= MAX_FOLDER_FILES or total + size > max_bytes:
            left.append((path, f"not read: with it, what is read of {root.name}/ would pass {max_bytes:,} bytes or "
                               f"{MAX_FOLDER_FILES:,} files, the most the lab reads of one run folder"))
            continue
        kept.append(path)
        total += size
    return kept, left


def _depth_over(obj: Any, limit: int) -> bool:
    """Whether lists/objects nest deeper than `limit` (iterative: the check must not recurse itself)."""
    stack = [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def parse_json(raw: bytes, path: str | Path, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Strict JSON from a run folder's file, or UnreadableJson naming it: not UTF-8, not JSON (truncated or
    corrupt), or nested deeper than `max_depth` (which would end in RecursionError in whatever walks it)."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UnreadableJson(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise UnreadableJson(f"{path}: not valid JSON (truncated or corrupt?): {exc}") from None
    except RecursionError:
        data = None
    else:
        if not isinstance(data, (dict, list)) or not _depth_over(data, max_depth):
            return data
    raise UnreadableJson(f"{path}: JSON nested deeper than {max_depth} levels; the lab's files nest about 10")


def read_json_file(path: str | Path, max_bytes: int = MAX_RECORD_BYTES) -> Any:
    """A run folder's JSON file (manifest.json, a record), capped in size and depth: see read_capped, parse_json."""
    return parse_json(read_capped(path, max_bytes), path)


# manifest.json's fields as lab.records.manifest writes them, by kind: a field of another kind is dropped and named,
# so every reader (report, compare, answer, doctor) sees these kinds or no field. The lists' entries are objects
# (`errors`: strings); a notebook's entry is named and has a status.
MANIFEST_FIELDS = {"schema_version": int, "run_id": str, "status": str, "mode": str, "started_utc": str,
                   "finished_utc": str, "plan_reason": str, "profile": dict, "git": dict, "host": dict,
                   "packages": dict, "records": dict, "check_counts": dict, "interrupted": dict, "server": dict,
                   "gpus": list, "notebooks": list, "model_files": list, "model_changed": list, "errors": list}


def read_manifest(run_dir: str | Path) -> tuple[dict, str | None]:
    """A run folder's manifest.json in the shape MANIFEST_FIELDS says, and what was wrong with it (None when fine or
    absent): a file that cannot be read or is not an object gives {} and one line; fields of the wrong kind, and
    list entries that are not what the lab writes, are left out and named."""
    path = Path(run_dir) / "manifest.json"
    if not path.exists() and not path.is_symlink():
        return {}, None
    try:
        data = read_json_file(path)
    except UnreadableJson as exc:
        return {}, str(exc)
    if not isinstance(data, dict):
        return {}, f"{path}: holds a {type(data).__name__}, not an object"
    wrong = []
    for key, kind in MANIFEST_FIELDS.items():
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, kind) or isinstance(value, bool):
            wrong.append(f"field {key!r} is a {type(value).__name__}, not a {kind.__name__}")
            del data[key]
        elif kind is list:
            kept = [v for v in value if isinstance(v, str)] if key == "errors" else [
                v for v in value if isinstance(v, dict) and (key != "notebooks" or (
                    isinstance(v.get("notebook"), str) and isinstance(v.get("status"), str)))]
            if len(kept) < len(value):
                wrong.append(f"{len(value) - len(kept)} of its {key!r} entries are not what the lab writes")
                data[key] = kept
    return data, (f"{path}: " + "; ".join(wrong) + " (not shown)") if wrong else None


# The name lab.core.evidence.new_run_dir gives a run folder (`<UTC>_<sha>`, `-N` for a second in the same second): a
# folder so named was made by `lab run`, which writes manifest.json last, whatever cut it short but SIGKILL
RUN_FOLDER_NAME = re.compile(r"\d{8}T\d{6}Z_[0-9a-z]+(-\d+)?")


def not_complete(run_dir: str | Path) -> str | None:
    """Why a run folder is not a complete run, in one line (None when it is one, or is an interactive folder of
    notebooks run by hand): cut by a signal (its manifest says "interrupted"), cut before it wrote its manifest
    (SIGKILL, out of memory, the machine stopped, or still running), or a notebook that did not run to its end. What
    `lab report` and `lab doctor --run` say first, with a non-zero exit: a cut run is never reported complete."""
    run_dir = Path(run_dir)
    manifest, problem = read_manifest(run_dir)
    if not manifest:
        if problem is None and RUN_FOLDER_NAME.fullmatch(run_dir.name):
            return ("cut before it wrote manifest.json (killed, out of memory, the machine stopped; or still "
                    "running): it did not finish")
        return None
    cut = manifest.get("interrupted") if isinstance(manifest.get("interrupted"), dict) else {}
    if cut or manifest.get("status") == "interrupted":
        said = " ".join(f"{k} {display.clip(str(cut[k]), 60)}" for k in ("signal", "during", "utc") if cut.get(k))
        return f"interrupted ({said or 'the manifest says so'}): it did not finish, its numbers are not the whole run"
    unfinished = [display.clip(str(n["notebook"]), 60) for n in manifest.get("notebooks") or []
                  if n.get("status") in ("interrupted", "not run")]
    if unfinished:
        return f"{len(unfinished)} notebook(s) did not run to their end ({', '.join(unfinished[:4])})"
    return None


# A record's fields as the report and compare use them: a field of another kind makes the record unusable (flagged);
# entries of these lists that are not objects are dropped, and said.
RECORD_FIELDS = {"record": str, "summary": dict, "checks": list, "tables": list, "charts": list, "findings": list,
                 "command": dict}


def _flagged(name: str, title: str, why: str) -> dict:
    """The stand-in for a record that cannot be shown: a report shows it flagged and renders the rest."""
    return {"record": name, "title": f"{name}: {title}", "problem": why, "summary": {}, "checks": [], "tables": [],
            "charts": [], "stand_in": True}


def read_record_file(path: Path, expected_sha256: str | None = None) -> dict:
    """One record file; a record that cannot be used (not a regular file, too big, too deep, truncated, not JSON,
    not an object, a field of the wrong kind) comes back as a stand-in with `problem` saying why, so a report shows
    it flagged and renders the rest. With `expected_sha256` (the manifest's), a record whose bytes differ gets
    `edited` saying so."""
    def flagged(why: str) -> dict:
        return _flagged(path.stem, "record not readable", why)

    try:
        raw = read_capped(path)
        data = parse_json(raw, path)
    except UnreadableJson as exc:
        return flagged(str(exc).removeprefix(f"{path}: "))
    if not isinstance(data, dict):
        return flagged(f"a record is a JSON object; this file holds a {type(data).__name__}")
    for key, kind in RECORD_FIELDS.items():
        if key in data and data[key] is not None and not isinstance(data[key], kind):
            return flagged(f"field {key!r} is a {type(data[key]).__name__}, not a {kind.__name__}")
    dropped = []
    for key in ("checks", "tables", "charts", "findings"):  # entries that are not objects cannot be shown: drop, and say so
        if data.get(key):
            # a check is named and has a status (lab.core.checks); a table's rows are a list of objects
            kept = [item for item in data[key] if isinstance(item, dict)
                    and (key != "checks" or (isinstance(item.get("name"), str) and isinstance(item.get("status"), str)))]
            if len(kept) < len(data[key]):
                dropped.append(f"{len(data[key]) - len(kept)} of its {key} entries are not objects"
                               + (" with a name and a status" if key == "checks" else "") + " and are not shown")
            data[key] = kept
    for table in data.get("tables") or []:
        rows = table.get("rows")
        if rows is not None and not (isinstance(rows, list) and all(isinstance(r, dict) for r in rows)):
            from lab.core import display  # pydantic's import only when a table is bad

            dropped.append(f"table {display.clip(table.get('title'), 80)!r}: its rows are not a list of objects and are not shown")
            table["rows"] = []
    if dropped:
        data["problem"] = "; ".join(dropped)
    data.setdefault("record", path.stem)
    data.update(_written_as(data))
    if expected_sha256 and hashlib.sha256(raw).hexdigest() != expected_sha256:
        data["edited"] = (f"edited after the run: records/{path.name} has sha256 {hashlib.sha256(raw).hexdigest()[:16]}…, "
                          f"the run's manifest recorded {str(expected_sha256)[:16]}…")
    return data


# The record format this lab writes (lab.core.evidence.SCHEMA_VERSION is this). 2 (2026-12-04): a GPU figure is a
# total (a number) or a `_per_gpu` list, never a list under a total's name (lab/data/fields.yaml `gpus:`); version-1
# records are read through lab.core.fields.canonical
RECORD_SCHEMA_VERSION = 2


def _written_as(data: dict) -> dict:
    """What a reader must be told about how a record was written: `invalid` (it failed the record schema when
    written: lab.core.evidence.write_record) and `newer` (a schema_version past this lab's: a newer lab wrote it,
    and its fields may not mean here what they meant there)."""
    out = {}
    invalid = data.get("invalid")
    if invalid is not None:
        reasons = invalid.get("reasons") if isinstance(invalid, dict) else invalid
        reasons = [str(r) for r in reasons] if isinstance(reasons, list) else [str(reasons)]
        out["invalid_reason"] = (f"marked invalid when written ({len(reasons)} problem(s) with the record schema): "
                                 + "; ".join(r[:300] for r in reasons[:3]))
    version = data.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > RECORD_SCHEMA_VERSION:
        out["newer"] = (f"written by a newer lab: schema_version {version}, this lab reads up to {RECORD_SCHEMA_VERSION}; "
                        "its fields may not mean what this lab shows (update the lab: git pull)")
    return out


def read_records(run_dir: str | Path, expected_sha256: dict | None = None) -> dict[str, dict]:
    """All records of a run, by name, in order (unusable ones flagged: see read_record_file), at most
    MAX_FOLDER_BYTES of them together (folder_files: the rest flagged, not read). `expected_sha256`: the manifest's
    `records` (name → sha256 when the run wrote it): a record whose bytes differ, or that the manifest does not
    list, is marked `edited`; one the manifest lists that is not in the folder is flagged missing."""
    folder = Path(run_dir) / "records"
    files, left = folder_files(folder, lambda p: p.suffix == ".json", max_depth=1)
    out = {}
    for path, why in left:
        if path.suffix == ".json":
            out[path.stem] = _flagged(path.stem, "record not read", why)
    for path in files:
        if not isinstance(expected_sha256, dict):
            out[path.stem] = read_record_file(path)
            continue
        out[path.stem] = read_record_file(path, expected_sha256.get(path.stem) or None)
        if path.stem not in expected_sha256:
            out[path.stem]["edited"] = f"added after the run: records/{path.name} is not in the run's manifest"
    for name, sha in (expected_sha256 if isinstance(expected_sha256, dict) else {}).items():
        if isinstance(name, str) and name not in out:  # the run wrote it (its sha256 is kept), the folder lost it
            out[name] = _flagged(name, "record missing", f"missing: the run's manifest lists records/{name}.json "
                                 f"(sha256 {str(sha)[:16]}…), the folder does not hold it (deleted after the run?)")
    return dict(sorted(out.items()))
