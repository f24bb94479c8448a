"""Check lab.kvcache against the real engine: start llama-server, read the KV cache it reports, stop it.

llama.cpp logs one line per cache it allocates (src/llama-kv-cache.cpp):

    llama_kv_cache: size =   67.50 MiB (  1024 cells,  30 layers,  3/3 seqs), K (f16):   33.75 MiB, V (f16):   33.75 MiB

Models with sliding-window layers get two (the global cache, then the SWA cache). When llama.cpp first
fits parameters to device memory it does a dry run whose "KV buffer size" is 0.00 MiB; those lines are
skipped (and `-fit off` avoids the dry run altogether). Each grid point starts a fresh server on
127.0.0.1 and a free port, with `--no-warmup` so it is ready in well under a second on 2 cores.

The launcher here is deliberately minimal and private; lab.serve owns general server processes.
"""
from __future__ import annotations

import re
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from lab import kvcache
from lab.models import ArchSpec

SIZE_LINE = re.compile(
    r"llama_kv_cache: size =\s*(?P<size>[\d.]+) MiB \(\s*(?P<cells>\d+) cells,\s*(?P<layers>\d+) layers,"
    r"\s*(?P<seqs>\d+)/(?P<streams>\d+) seqs\), K \((?P<type_k>\w+)\):\s*(?P<k>[\d.]+) MiB,"
    r" V \((?P<type_v>\w+)\):\s*(?P<v>[\d.]+) MiB")
BUFFER_LINE = re.compile(r"llama_kv_cache:\s+\S+ KV buffer size =\s*(?P<mib>[\d.]+) MiB")
ISWA_LINE = re.compile(r"llama_kv_cache_iswa: creating\s+(?P<kind>non-SWA|SWA) KV cache")
READY = ("server is listening", "listening on http", "model loaded")
FAILED = ("error:", "failed to", "exiting due to")
QUANTIZED = ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")


@dataclass(frozen=True)
class KvRun:
    """One grid point: a llama-server configuration whose KV caches are compared with the prediction."""

    model: str  # label, e.g. "smollm2"
    n_ctx: int
    n_parallel: int = 1
    type_k: str = "f16"
    type_v: str = "f16"
    kv_unified: bool = False

    @property
    def flash_attn(self) -> str:
        """A quantized V cache needs flash attention in llama.cpp; f16 runs use the default path."""
        return "on" if self.type_v in QUANTIZED else "off"


def parse_kv_lines(log_text: str) -> list[dict]:
    """The KV caches a llama.cpp log reports, in order, dry-run lines skipped.

    Each dict: cache ("kv", "global" or "swa"), size_mib, k_mib, v_mib (strings, as printed), cells,
    layers, seqs, streams, type_k, type_v."""
    caches: list[dict] = []
    pending_kind = None
    last_buffer = None
    for line in log_text.splitlines():
        if m := ISWA_LINE.search(line):
            pending_kind = "swa" if m["kind"] == "SWA" else "global"
        elif m := BUFFER_LINE.search(line):
            last_buffer = float(m["mib"])
        elif m := SIZE_LINE.search(line):
            dry_run = last_buffer == 0.0
            last_buffer = None
            kind, pending_kind = pending_kind or "kv", None
            if dry_run:
                continue
            caches.append({"cache": kind, "size_mib": m["size"], "k_mib": m["k"], "v_mib": m["v"],
                           "cells": int(m["cells"]), "layers": int(m["layers"]), "seqs": int(m["seqs"]),
                           "streams": int(m["streams"]), "type_k": m["type_k"], "type_v": m["type_v"]})
    return caches


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_llama_server_for_kv(server: Path, model_file: Path, run: KvRun, log_path: Path,
                               threads: int = 2, timeout_s: float = 60.0) -> str:
    """Start llama-server for one grid point, wait until it is ready (or fails), stop it; return its log."""
    cmd = [str(server), "-m", str(model_file), "--host", "127.0.0.1", "--port", str(_free_port()),
           "-c", str(run.n_ctx), "-np", str(run.n_parallel), "-ctk", run.type_k, "-ctv", run.type_v,
           "-fa", run.flash_attn, "-t", str(threads), "--no-warmup", "-fit", "off", "-lv", "4"]
    if run.kv_unified:
        cmd.append("-kvu")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and proc.poll() is None:
                text = log_path.read_text(errors="replace")
                if any(r in text for r in READY):
                    break
                time.sleep(0.1)
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    return log_path.read_text(errors="replace")


def compare(run: KvRun, arch: ArchSpec, reported: list[dict], n_ubatch: int = kvcache.LLAMA_CPP_N_UBATCH) -> list[dict]:
    """One row per cache: the prediction next to what llama.cpp reported, and whether they are identical."""
    pred = kvcache.llama_cpp_kv_prediction(arch, run.n_ctx, run.n_parallel, run.type_k, run.type_v,
                                           kv_unified=run.kv_unified, n_ubatch=n_ubatch)
    predicted = [c for c in pred["caches"] if c["cache"] != "recurrent"]
    rows = []
    for i in range(max(len(predicted), len(reported))):
        p = predicted[i] if i < len(predicted) else None
        r = reported[i] if i < len(reported) else None
        row = {"model": run.model, "n_ctx": run.n_ctx, "n_parallel": run.n_parallel, "type_k": run.type_k,
               "type_v": run.type_v, "kv_unified": run.kv_unified, "flash_attn": run.flash_attn,
               "cache": (p or r)["cache"],
               "predicted_cells": p and p["cells"], "reported_cells": r and r["cells"],
               "predicted_layers": p and p["layers"], "reported_layers": r and r["layers"],
               "predicted_streams": p and p["streams"], "reported_streams": r and r["streams"],
               "predicted_bytes": p and p["size_bytes"],
               "predicted_mib": p and p["size_mib"], "reported_mib": r and r["size_mib"],
               "predicted_k_mib": p and p["k_mib"], "reported_k_mib": r and r["k_mib"],
               "predicted_v_mib": p and p["v_mib"], "reported_v_mib": r and r["v_mib"]}
        keys = ("cells", "layers", "streams", "mib", "k_mib", "v_mib")
        row["match"] = bool(p and r) and all(row[f"predicted_{k}"] == row[f"reported_{k}"] for k in keys)
        row["error_pct"] = (round((float(p["size_mib"]) - float(r["size_mib"])) / float(r["size_mib"]) * 100, 4)
                            if p and r and float(r["size_mib"]) else None)
        rows.append(row)
    return rows


def default_grid() -> list[KvRun]:
    """Contexts, slot counts, unified/split KV and KV dtypes on both embedded models (≈ 15 s on 2 cores)."""
    return [
        KvRun("smollm2", 4096),
        KvRun("smollm2", 3000, 3),  # 3000 → 3072 cells, split in 3 slots of 1024
        KvRun("smollm2", 8192, 4, "q8_0", "q8_0"),
        KvRun("smollm2", 2048, 2, "q4_0", "q4_0"),
        KvRun("smollm2", 5000, 1, "q8_0", "q4_0"),
        KvRun("smollm2", 4096, 4, kv_unified=True),
        KvRun("gemma3-270m", 4096),
        KvRun("gemma3-270m", 1000),  # context below window + ubatch: the SWA cache is capped by n_ctx
        KvRun("gemma3-270m", 4096, 4),
        KvRun("gemma3-270m", 4096, 4, kv_unified=True),  # unified: SWA = window × slots + ubatch
        KvRun("gemma3-270m", 2000, 1, "q8_0", "q8_0"),
        KvRun("gemma3-270m", 8192, 2, "q4_0", "q4_0"),
    ]


def run_grid(models: dict[str, tuple[Path, ArchSpec]], grid: list[KvRun], log_dir: Path, server: Path,
             threads: int = 2) -> list[dict]:
    """Run every grid point whose model is in `models` ({label: (gguf path, ArchSpec)}); rows of `compare`.

    A run that reported nothing (the server failed) still yields rows, with match False and its log path."""
    rows = []
    for i, run in enumerate(grid):
        if run.model not in models:
            continue
        path, arch = models[run.model]
        log_path = Path(log_dir) / f"kv_{i:02d}_{run.model}_c{run.n_ctx}_np{run.n_parallel}_{run.type_k}.log"
        reported = parse_kv_lines(_start_llama_server_for_kv(server, path, run, log_path, threads))
        for row in compare(run, arch, reported):
            rows.append({**row, "log": str(log_path)})
    return rows
