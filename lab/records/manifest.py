"""manifest.json: the identity card of a run (what ran, where, on what, with which files)."""
from __future__ import annotations

import json
from pathlib import Path

from lab.core import evidence, paths, run_folder
from lab.core.profiles import Profile

MANIFEST_VERSION = 1


def _hash_cache_file() -> Path:
    return paths.cache_dir() / "sha256-cache.json"


def model_file_sha256(path: Path, compute: bool = True) -> str | None:
    """sha256 of a model file, cached by (path, size, mtime): a 17 GB GGUF takes a minute to hash. With
    compute False (a cut run's bounded clean-up) only a cached hash is returned, else None."""
    stat = path.stat()
    # inode and nanosecond mtime too: a file replaced in the same second with the same size is a new file
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ino}"
    cache_file = _hash_cache_file()
    try:
        cache = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cache = {}
    if key not in cache and not compute:
        return None
    if key not in cache:
        cache[key] = evidence.sha256_file(path)
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            cache_file.write_text(json.dumps(cache, indent=1))
        except OSError:
            pass  # a read-only cache only costs time
    return cache[key]


def model_files(profile: Profile, hash_now: bool = True) -> list[dict]:
    """The profile's model file with size and sha256, or why it is not there; without hash_now, the sha256
    only when it is cached (None otherwise)."""
    if not profile.model_file:
        return []
    try:
        path = paths.model_path(profile.model_file)
    except (paths.SetupMissing, KeyError) as exc:
        return [{"spec": profile.model_file, "path": None, "present": False, "reason": str(exc)}]
    if not path.exists():
        return [{"spec": profile.model_file, "path": str(path), "present": False, "reason": "file not found"}]
    if not path.is_file():  # never hash a device (/dev/zero never ends) or a folder
        return [{"spec": profile.model_file, "path": str(path), "present": False, "reason": "not a regular file"}]
    if profile.model_synthetic:  # reproducible from (stand-in id, layers, seed, lab commit); hashing 17 GB costs a minute
        return [{"spec": profile.model_file, "path": str(path), "present": True, "bytes": path.stat().st_size,
                 "sha256": None, "synthetic": {"arch": profile.model_synth, "layers": profile.model_synth_layers,
                                               "note": "random weights written by lab.model.synth (see records/00_model_stand_in.json)"}}]
    return [{"spec": profile.model_file, "path": str(path), "present": True, "bytes": path.stat().st_size,
             "sha256": model_file_sha256(path, compute=hash_now)}]


def previous_run(run_dir: Path) -> Path | None:
    """The newest other run folder beside this one (same profile, same parent) that has a manifest. Called while this
    run writes its manifest, so every other run is older whatever its name says: one named in the future (a clock set
    ahead, a folder copied from such a machine) is the one to compare with, not one to skip (skipping it hid a
    changed model sha256)."""
    runs = sorted((p for p in run_dir.parent.iterdir() if p.is_dir() and p != run_dir
                   and (p / "manifest.json").is_file()), key=lambda p: p.name)
    return runs[-1] if runs else None


def model_changes(run_dir: Path, files: list[dict]) -> list[dict]:
    """Model files whose sha256 differs from the previous run of this profile: the same path holding other
    bytes makes two runs' numbers incomparable, so it is said, not left for a user to notice."""
    prev = previous_run(run_dir)
    if prev is None:
        return []
    # a broken neighbour is not this run's problem: read_manifest gives {} or the fields of the lab's kinds
    before = {f.get("path"): f.get("sha256") for f in run_folder.read_manifest(prev)[0].get("model_files") or []
              if isinstance(f.get("path"), str)}
    return [{"path": f["path"], "previous_run": prev.name, "previous_sha256": before[f["path"]], "sha256": f.get("sha256")}
            for f in files if f.get("path") in before and before[f["path"]] and f.get("sha256")
            and before[f["path"]] != f.get("sha256")]


CHECK_STATUSES = ("pass", "warn", "fail", "skip", "not-run")


def check_counts(run_dir: Path) -> dict:
    """{status: how many} over every check of the run's records (lab.core.checks statuses)."""
    statuses = [c.get("status") for r in run_folder.read_records(run_dir).values() for c in r.get("checks") or []
                if isinstance(c, dict)]
    return {s: statuses.count(s) for s in CHECK_STATUSES}


def counts_text(counts: dict) -> str:
    """'59 pass, 4 warn, 7 fail, 3 skip' (the statuses that occur; all five when none does)."""
    shown = [s for s in CHECK_STATUSES if counts.get(s)] or list(CHECK_STATUSES[:3])
    return ", ".join(f"{counts.get(s, 0)} {s}" for s in shown)


def run_status(notebooks: list[dict], counts: dict, interrupted: dict | None, allow_failed_checks: bool,
               errors: list[str] | None = None) -> str:
    """interrupted | failed (a notebook did not succeed, or the run's own files could not be written) | checks failed
    | checks failed (allowed) | ok: never "ok" over a failed check or a cut file (lab run's exit status says the same:
    lab.records.runner EXIT_*)."""
    if interrupted:
        return "interrupted"
    if errors or not all(n["status"] == "ok" for n in notebooks):
        return "failed"
    if counts.get("fail"):
        return "checks failed (allowed)" if allow_failed_checks else "checks failed"
    return "ok"


def write(run_dir: Path, profile: Profile, profile_path: Path, started_utc: str, notebooks: list[dict],
          interrupted: dict | None = None, ask: bool = True, errors: list[str] | None = None,
          allow_failed_checks: bool = False) -> Path:
    """Write manifest.json (whole or not at all). ask=False (a cut run's clean-up, during which signals are
    ignored): use only what the run already knows, never ask an endpoint or hash a model file, so the
    clean-up is bounded even when the endpoint hangs. `errors`: the run's own files that could not be written
    (lab.records.runner.write_manifest_and_report): the status is then "failed" (or "interrupted"), never "ok"."""
    from lab.core import planmode

    gpu = evidence.gpu_summary()
    files = model_files(profile, hash_now=ask)
    counts = check_counts(run_dir)
    status = run_status(notebooks, counts, interrupted, allow_failed_checks, errors)
    plan = planmode.reason(profile)
    body = {
        "schema_version": MANIFEST_VERSION,
        "run_id": run_dir.name,
        "profile": {"name": profile.name, "file": str(profile_path), "sha256": evidence.sha256_file(profile_path)},
        "git": evidence.git_state(),
        "started_utc": started_utc,
        "finished_utc": evidence.utc_now(),
        "host": evidence.host_info(),
        "gpus": gpu["gpus"],
        "driver": gpu["driver"],
        "cuda_driver": gpu["cuda_driver"],
        "gpu_note": gpu["reason"],
        "packages": evidence.package_versions(),
        "llama_cpp_build": _llama_build_info(),
        "model_files": files,
        # each record's sha256 as the run wrote it: `lab report` / `lab compare` flag one edited after the run
        "records": evidence.record_hashes(run_dir),
        "model_changed": model_changes(run_dir, files),
        "server": _server(profile, run_dir, ask and not plan),  # plan mode contacts no server
        "notebooks": notebooks,
        "status": status,
        "check_counts": counts,
        "mode": "plan" if plan else "measure",
        "plan_reason": plan,
        "interrupted": interrupted,
        "errors": errors or [],
    }
    return evidence.write_whole(run_dir / "manifest.json", json.dumps(body, indent=2, allow_nan=False, ensure_ascii=False))


def write_failed(run_dir: Path, notebooks: list[dict], errors: list[str], interrupted: dict | None = None) -> Path:
    """The short manifest of a run whose full one could not be written (a full disk, an error computing it): its
    status, what failed and the notebooks' results, nothing that needs more than this (a few hundred bytes)."""
    body = {"schema_version": MANIFEST_VERSION, "run_id": run_dir.name, "finished_utc": evidence.utc_now(),
            "status": "interrupted" if interrupted else "failed", "interrupted": interrupted, "errors": errors,
            "notebooks": notebooks, "note": "the short form: the full manifest could not be written (see errors)"}
    text, path = json.dumps(body, indent=2, default=str, ensure_ascii=False), run_dir / "manifest.json"
    try:
        return evidence.write_whole(path, text)
    except OSError:
        if not path.is_file() or path.is_symlink():
            raise
    # No inode for manifest.json.partial (or no space), and the manifest written before the failure may say "ok"
    # (seen: inodes ran out after the notebooks; stderr said "has no manifest", manifest.json said ok). In place
    # needs no new inode, and the old manifest's own blocks hold these few hundred bytes; failing that, it goes:
    # no manifest ever says ok over a failed write.
    try:
        return evidence.overwrite_in_place(path, text)
    except OSError:
        path.unlink(missing_ok=True)
        raise


def _server(profile: Profile, run_dir: Path, ask: bool = True) -> dict:
    """Which server the run measured: engine and version as it reported them (lab.serving.endpoint.served_by)."""
    from lab.serving import endpoint

    try:
        return endpoint.served_by(profile, run_folder.read_records(run_dir), ask=ask)
    except Exception as exc:  # noqa: BLE001 — the manifest is written whatever the server said; this says what failed
        return {"error": f"{type(exc).__name__}: {exc}"}


def _llama_build_info() -> dict | None:
    try:
        info = Path(paths.setup_paths()["llama_bin"]).parent / "build-info.json"
        return json.loads(info.read_text())
    except (paths.SetupMissing, OSError, ValueError, KeyError):
        return None


# ---------------------------------------------------------------- the run's input files, as the run recorded them
def recorded_inputs(run_dir: str | Path) -> dict[str, str]:
    """{file: sha256} of the profile files the run read, as it recorded them when it ran: the manifest's profile and
    each record's provenance (the settings copy in the run folder, or the profile file a notebook opened)."""
    from lab.core import run_folder

    manifest, _ = read_manifest(run_dir)
    prof = manifest.get("profile") if isinstance(manifest.get("profile"), dict) else {}
    pairs = [(prof.get("file"), prof.get("sha256"))]
    pairs += [((r.get("provenance") or {}).get("profile_file"), (r.get("provenance") or {}).get("profile_sha256"))
              for r in run_folder.read_records(run_dir).values() if isinstance(r.get("provenance"), dict)]
    return {f: h for f, h in pairs if isinstance(f, str) and isinstance(h, str) and f and h}


def file_sha256(path: str | Path) -> str | None:
    """sha256 of a profile-sized file (a device, a folder or anything past a profile's size: None), read capped."""
    import hashlib

    from lab.core import profile_file, run_folder

    try:
        return hashlib.sha256(run_folder.read_capped(path, profile_file.MAX_PROFILE_BYTES)).hexdigest()
    except run_folder.UnreadableJson:
        return None


def where_now(name: str, run_dir: str | Path) -> Path | None:
    """Where a file the run recorded is now: its own path, else the file of that name in the run folder (a run folder
    moved, or made on another machine: the settings copy travels with it); None when neither is there."""
    for path in (Path(name), Path(run_dir) / Path(name).name):
        if path.exists() or path.is_symlink():
            return path
    return None


def inputs_here(run_dir: str | Path) -> list[Path]:
    """The run's input files that are here and hold what the run recorded (byte for byte)."""
    found = [(where_now(name, run_dir), recorded) for name, recorded in recorded_inputs(run_dir).items()]
    return [path for path, recorded in found if path is not None and file_sha256(path) == recorded]


def changed_inputs(run_dir: str | Path) -> list[str]:
    """One line per input file whose bytes are no longer what the run recorded (edited, replaced or gone after the
    run): the report says so instead of rebuilding its answer from today's file as if the run had used it."""
    out = []
    for name, recorded_sha in recorded_inputs(run_dir).items():
        path = where_now(name, run_dir)
        now = file_sha256(path) if path is not None else None
        if now != recorded_sha:
            state = f"sha256 now {now[:16]}…" if now else "no longer there (or not a readable profile file)"
            out.append(f"{name}: changed after the run ({state}, the run recorded {recorded_sha[:16]}…); nothing here is "
                       "rebuilt from it")
    return out


def matches_run(path: str | Path, run_dir: str | Path) -> bool:
    """Whether `path` holds one of the profile files the run recorded (byte for byte); True for a run that recorded
    none (written before the lab kept the sha256)."""
    recorded = set(recorded_inputs(run_dir).values())
    return not recorded or file_sha256(path) in recorded


def read(run_dir: str | Path) -> dict:
    """manifest.json of a run folder; run_folder.UnreadableJson (a ValueError: one line) when it cannot be used."""
    data = run_folder.read_json_file(Path(run_dir) / "manifest.json")
    if not isinstance(data, dict):
        raise run_folder.UnreadableJson(f"{Path(run_dir) / 'manifest.json'}: holds a {type(data).__name__}, not an object")
    return data


def read_manifest(run_dir: str | Path) -> tuple[dict, str | None]:
    """manifest.json as a dict, and what was wrong with it (None when fine or absent): for views of a run folder
    someone handed over (a symlink to /dev/zero, 1 GB, nested 10,000 deep, `"gpus": [1]`: refused or left out in
    one line; lab.core.run_folder.read_manifest, the one reader, which lab doctor uses too)."""
    return run_folder.read_manifest(run_dir)
