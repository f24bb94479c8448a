"""manifest.json: the identity card of a run (what ran, where, on what, with which files)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from lab import evidence, paths
from lab.profiles import Profile

MANIFEST_VERSION = 1


def _hash_cache_file() -> Path:
    return Path(os.environ.get("LAB_CACHE", Path.home() / ".cache" / "llm-lab")) / "sha256-cache.json"


def model_file_sha256(path: Path) -> str:
    """sha256 of a model file, cached by (path, size, mtime): a 17 GB GGUF takes a minute to hash."""
    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{int(stat.st_mtime)}"
    cache_file = _hash_cache_file()
    try:
        cache = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cache = {}
    if key not in cache:
        cache[key] = evidence.sha256_file(path)
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            cache_file.write_text(json.dumps(cache, indent=1))
        except OSError:
            pass  # a read-only cache only costs time
    return cache[key]


def model_files(profile: Profile) -> list[dict]:
    """The profile's model file with size and sha256, or why it is not there."""
    if not profile.model_file:
        return []
    try:
        path = paths.model_path(profile.model_file)
    except (paths.SetupMissing, KeyError) as exc:
        return [{"spec": profile.model_file, "path": None, "present": False, "reason": str(exc)}]
    if not path.exists():
        return [{"spec": profile.model_file, "path": str(path), "present": False, "reason": "file not found"}]
    return [{"spec": profile.model_file, "path": str(path), "present": True, "bytes": path.stat().st_size,
             "sha256": model_file_sha256(path)}]


def write(run_dir: Path, profile: Profile, profile_path: Path, started_utc: str, notebooks: list[dict]) -> Path:
    gpu = evidence.gpu_summary()
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
        "model_files": model_files(profile),
        "notebooks": notebooks,
        "status": "ok" if all(n["status"] == "ok" for n in notebooks) else "failed",
    }
    path = run_dir / "manifest.json"
    path.write_text(json.dumps(body, indent=2, allow_nan=False, ensure_ascii=False))
    return path


def _llama_build_info() -> dict | None:
    try:
        info = Path(paths.setup_paths()["llama_bin"]).parent / "build-info.json"
        return json.loads(info.read_text())
    except (paths.SetupMissing, OSError, ValueError, KeyError):
        return None


def read(run_dir: str | Path) -> dict:
    return json.loads((Path(run_dir) / "manifest.json").read_text())
