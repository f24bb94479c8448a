"""Check lab.predict.kvcache against the real engine: start llama-server, read the caches it reports, stop it.

llama.cpp logs one line per cache it allocates (src/llama-kv-cache.cpp, src/llama-memory-recurrent.cpp):

    llama_kv_cache: size =   67.50 MiB (  1024 cells,  30 layers,  3/3 seqs), K (f16):   33.75 MiB, V (f16):   33.75 MiB
    llama_memory_recurrent: size =   18.70 MiB (     2 cells,   4 layers,  2 seqs  0 rs_seq), R (f32):    0.70 MiB, S (f32):   18.00 MiB, P (f32):    0.00 MiB

Models with sliding-window layers get two KV lines (the global cache, then the SWA cache); a Gated DeltaNet
hybrid (qwen35: Qwen3.5 / Qwen3.8) gets a KV line for its full-attention layers and a recurrent line (R: conv
state, S: delta-net state, one cell per sequence, F32 whatever -ctk/-ctv say). With `--spec-type draft-mtp` a
second context on the same weights follows ("common_speculative_init_result: creating MTP draft context"), whose
KV line is the MTP layer's cache ("mtp" here). When llama.cpp first fits
parameters to device memory it does a dry run whose buffer size is 0.00 MiB; those lines are skipped (and
`-fit off` avoids the dry run altogether). The lines are read by lab.serving.engine_logs.parse_kv_lines, the
same reading that llama-server's start-up report (parse_llama_log) gives. Each grid point starts a fresh server
through lab.serving.serve (the lab's one launcher: 127.0.0.1, a free port, the per-run key, the log kept) with
`--no-warmup`, two at a time.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lab.core import disk, paths
from lab.predict import kvcache
from lab.model.models import ArchSpec
from lab.serving import engine_logs, flag_table

HYBRID_MODEL = "qwen3.8-27b-4L"  # Qwen3.8-27B's per-layer shape, 4 layers (3 Gated DeltaNet + 1 full attention) + its MTP layer
HYBRID_SYNTH = {"arch_id": "qwen3.8-27b", "layers": 4}  # the synthetic file behind it (lab.model.synth.cached_file)
FAILED = "[lab] server failed to start:"  # how a grid point's text says its server never served


@dataclass(frozen=True)
class KvRun:
    """One grid point: a llama-server configuration whose KV caches are compared with the prediction."""

    model: str  # label, e.g. "smollm2"
    n_ctx: int
    n_parallel: int = 1
    type_k: str = "f16"
    type_v: str = "f16"
    kv_unified: bool = False
    draft_mtp: int = 0  # --spec-type draft-mtp --spec-draft-n-max N (a model with MTP layers)

    @property
    def flash_attn(self) -> str:
        """-fa as lab.serving.engines decides it for this V cache type (the lab's one rule)."""
        from lab.serving import engines

        return engines.llama_flash_attn(self.type_v)


def kv_command(profile, model_file: Path, run: KvRun, threads: int, port: int, n_gpu_layers: int | None = None):
    """The llama-server command of one grid point: the profile's (lab.serving.engines.build_command: the lab's flags,
    key and CORS settings; a profile that is not a llama.cpp one is measured on cpu-default's) with the point's
    context, slots, threads and KV types, and `--no-warmup -fit off` (no warm-up decode, no dry run: only the
    allocation is read)."""
    from lab.core import profiles
    from lab.serving import engines

    if profile is None or profile.engine != "llama.cpp" or getattr(profile, "endpoint_url", None):
        profile = profiles.load(profiles.resolve("cpu-default"))
    point = profile.model_copy(update={
        "context_tokens": run.n_ctx, "parallel_slots": run.n_parallel, "threads": threads, "kv_cache_dtype": run.type_v,
        "n_gpu_layers": 0 if n_gpu_layers is None else (-1 if n_gpu_layers >= 999 else n_gpu_layers),
        "server_args": [], "host": "127.0.0.1"})
    cmd = engines.build_command(point, port=port, model_path=model_file)
    spec = {"--spec-type": "draft-mtp", "--spec-draft-n-max": str(run.draft_mtp)} if run.draft_mtp else {}
    return engines.with_flags(cmd, {"-ctk": run.type_k, "-ctv": run.type_v, "--no-warmup": True, "-fit": "off",
                                    "-kvu": run.kv_unified, **spec})


def _start_llama_server_for_kv(profile, model_file: Path, run: KvRun, log_dir: Path, name: str,
                               threads: int, timeout_s: float = 120.0, n_gpu_layers: int | None = None,
                               port: int | None = None) -> str:
    """Start llama-server for one grid point through lab.serving.serve (on `port`, or a free one), wait until it
    serves a token (or fails), stop it; return its log (the whole log of a server that failed to start)."""
    from lab.serving import serve

    cmd = kv_command(profile, model_file, run, threads, port or serve.free_port(), n_gpu_layers)
    log_path = Path(log_dir) / f"{name}.log"
    try:
        with serve.start(cmd, log_dir=log_dir, name=name, health_timeout_s=timeout_s):
            pass
    except serve.ServeError as exc:
        text = log_path.read_text(errors="replace") if log_path.exists() else getattr(exc, "log_tail", "")
        return f"{text}\n{FAILED} {exc}\n"
    return log_path.read_text(errors="replace")


def compare(run: KvRun, arch: ArchSpec, reported: list[dict], n_ubatch: int = kvcache.LLAMA_CPP_N_UBATCH) -> list[dict]:
    """One row per cache: the prediction next to what llama.cpp reported, and whether they are identical."""
    pred = kvcache.llama_cpp_kv_prediction(arch, run.n_ctx, run.n_parallel, run.type_k, run.type_v,
                                           kv_unified=run.kv_unified, n_ubatch=n_ubatch, draft_mtp=run.draft_mtp)
    predicted = pred["caches"]
    rows = []
    for i in range(max(len(predicted), len(reported))):
        p = predicted[i] if i < len(predicted) else None
        r = reported[i] if i < len(reported) else None
        row = {"model": run.model, "n_ctx": run.n_ctx, "n_parallel": run.n_parallel, "type_k": run.type_k,
               "type_v": run.type_v, "kv_unified": run.kv_unified, "draft_mtp": run.draft_mtp,
               "flash_attn": run.flash_attn,
               "cache": (p or r)["cache"],
               "predicted_cells": p and p["cells"], "reported_cells": r and r["cells"],
               "predicted_layers": p and p["layers"], "reported_layers": r and r["layers"],
               "predicted_streams": p and p["streams"], "reported_streams": r and r["streams"],
               "predicted_bytes": p and p["size_bytes"],
               "predicted_mib": p and p["size_mib"], "reported_mib": r and r["size_mib"],
               "predicted_k_mib": p and p["k_mib"], "reported_k_mib": r and r["k_mib"],
               "predicted_v_mib": p and p["v_mib"], "reported_v_mib": r and r["v_mib"],
               "buffer": r and r.get("buffer")}
        keys = ("cells", "layers", "streams", "mib", "k_mib", "v_mib")
        row["match"] = bool(p and r) and all(row[f"predicted_{k}"] == row[f"reported_{k}"] for k in keys)
        row["error_pct"] = (round((float(p["size_mib"]) - float(r["size_mib"])) / float(r["size_mib"]) * 100, 4)
                            if p and r and float(r["size_mib"]) else None)
        rows.append(row)
    return rows


def default_grid() -> list[KvRun]:
    """Contexts, slot counts, unified/split KV and KV dtypes on both embedded models and on the 4-layer
    Qwen3.8-27B hybrid (≈ 12 s on 2 cores, two servers of one thread at a time)."""
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
        KvRun(HYBRID_MODEL, 4096),
        KvRun(HYBRID_MODEL, 8192, 2, "q8_0", "q8_0"),  # quantized KV: the recurrent state stays F32
        KvRun(HYBRID_MODEL, 3000, 3, "q4_0", "q4_0"),  # 3072 cells in 3 slots; one state cell per slot
        KvRun(HYBRID_MODEL, 16384, 4),
        KvRun(HYBRID_MODEL, 4096, 4, kv_unified=True),
        # --spec-type draft-mtp: 3 more state rows per slot, and the MTP context's own KV cache (its one layer)
        KvRun(HYBRID_MODEL, 4096, 2, draft_mtp=3),
    ]


def grid_setup(skip_reason: str | None = None) -> tuple[Path | None, dict, str | None]:
    """(llama-server, {label: (gguf, ArchSpec)}, skip reason) for `run_grid`: the embedded SmolLM2 (GQA) and
    Gemma-3-270M (sliding window), and Qwen3.8-27B's real per-layer shape at 4 layers written by lab.model.synth
    (cached in ~/.cache/llm-lab/synth). A model that is not on this machine (an offline GPU box set up without
    the embedded models) is left out with a note and the others still run. Nothing is started when
    `skip_reason` is given or llama-server is missing."""
    from lab.core import paths
    from lab.model import models, synth, synth_shapes

    if skip_reason:
        return None, {}, skip_reason
    try:
        server = paths.tool("llama-server")
    except paths.SetupMissing as exc:
        return None, {}, f"llama.cpp is not set up: {exc}"
    found = {}
    for key in ("smollm2", "gemma3-270m"):
        try:
            found[key] = (paths.embedded_model(key), models.from_gguf(paths.embedded_model(key)))
        except paths.SetupMissing as exc:
            print(f"{key} left out of the grid: {exc}")
    try:
        hybrid = synth.cached_file(**HYBRID_SYNTH)
        found[HYBRID_MODEL] = (hybrid, models.from_gguf(hybrid))
    except (synth_shapes.SynthError, disk.DiskSpaceError) as exc:  # e.g. no room for the 2.3 GB file: the other models still run
        print(f"hybrid model skipped: {exc}")
    if not found:
        return None, {}, "no model for the grid on this machine (embedded models missing, no room for the synthetic one)"
    return server, found, None


def gpu_layers(profile) -> int | None:
    """-ngl for the grid's servers: every layer on a GPU profile (so the table shows the CUDA buffers the
    profile's server would allocate), none on a CPU profile."""
    return 999 if profile.gpu_count > 0 else None


def profile_point(profile) -> tuple[str, Path, KvRun] | None:
    """The profile's own server configuration as one more grid point — its model, -c, -np and KV type — on a
    GPU profile whose model file is on this machine (on a CPU profile the embedded models already are the
    profile's models, and a 27B file would take minutes to load)."""
    from lab.core import paths

    if profile.gpu_count == 0 or not profile.model_file or profile.engine != "llama.cpp":
        return None
    path = paths.model_path(profile.model_file)
    if not path.exists():
        return None
    kv = flag_table.llama_kv_type(profile.kv_cache_dtype)
    return f"profile: {profile.model_name}", path, KvRun(f"profile: {profile.model_name}", profile.context_tokens,
                                                         profile.parallel_slots, kv, kv)


def run_for_profile(profile, log_dir: Path, skip_reason: str | None = None) -> tuple[list[dict], str | None]:
    """Notebook 05's grid for this profile: `default_grid` on the models found here, plus the profile's own
    configuration on a GPU profile; (rows, skip reason)."""
    from lab.model import models as lab_models

    server, found, skip = grid_setup(skip_reason)
    grid = default_grid()
    point = profile_point(profile) if server is not None else None
    if point:
        label, path, run = point
        found[label] = (path, lab_models.from_gguf(path))
        grid.append(run)
    return run_grid(found, grid, log_dir, server, n_gpu_layers=gpu_layers(profile), profile=profile), skip


def run_grid(models: dict[str, tuple[Path, ArchSpec]], grid: list[KvRun], log_dir: Path, server: Path | None,
             threads: int | None = None, n_gpu_layers: int | None = None, workers: int = 2, profile=None) -> list[dict]:
    """Run every grid point whose model is in `models` ({label: (gguf path, ArchSpec)}); rows of `compare`,
    in grid order. No server (a skipped grid, `grid_setup`): no rows. Each point's command is `kv_command` on
    `profile` (None: cpu-default's). `workers` servers start at a time: what a server
    allocates depends only on its own flags and model, and starting one is mostly single-threaded loading,
    so two at a time use both cores of a small machine. Each server gets `threads` (default: this machine's
    cores ÷ workers): llama.cpp's compute threads spin while they wait for each other, so two servers of
    2 threads on 2 cores took 28-38 s for the default grid here (each 1-token check 3-5 s instead of 0.5 s),
    two of 1 thread 12 s.

    A run that reported nothing (the server failed) still yields rows, with match False and its log path."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from lab.serving import serve

    if server is None:
        return []
    threads = threads or max(1, paths.usable_cores() // max(1, workers))
    points = [(i, run) for i, run in enumerate(grid) if run.model in models]
    lock, taken = threading.Lock(), set()

    def port_for_one() -> int:
        # The OS may hand a port just closed by free_port to the next caller: servers running together must
        # not get the same one.
        with lock:
            port = serve.free_port()
            while port in taken:
                port = serve.free_port()
            taken.add(port)
            return port

    def one(point: tuple[int, KvRun]) -> list[dict]:
        i, run = point
        path, arch = models[run.model]
        label = "".join(c if c.isalnum() or c in "-." else "_" for c in run.model)[:40]
        name = f"kv_{i:02d}_{label}_c{run.n_ctx}_np{run.n_parallel}_{run.type_k}" + (
            f"_mtp{run.draft_mtp}" if run.draft_mtp else "")
        port = port_for_one()
        try:
            text = _start_llama_server_for_kv(profile, path, run, Path(log_dir), name, threads,
                                              n_gpu_layers=n_gpu_layers, port=port)
        finally:
            with lock:
                taken.discard(port)
        failed = text.rpartition(FAILED)[2].strip() if FAILED in text else None
        return [{**row, "log": str(Path(log_dir) / f"{name}.log"), **({"error": failed} if failed else {})}
                for row in compare(run, arch, engine_logs.parse_kv_lines(text))]

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return [row for rows in pool.map(one, points) for row in rows]
