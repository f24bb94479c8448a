"""All-reduce latency and bus bandwidth between GPUs (PyTorch + NCCL), at the sizes one decode step sends.

One process per GPU (torch.multiprocessing spawn, torch.distributed over a local TCP rendezvous). For each
message size: warm-up, then `iters` timed all-reduces per sample (a barrier before, a device synchronise
after), several samples, all kept. Reported as nccl-tests does (NVIDIA/nccl-tests doc/PERFORMANCE.md):
algorithm bandwidth = bytes / time, bus bandwidth = algbw × 2(n-1)/n, which is comparable with the link's
per-direction rate. A "decode step" case runs the step's 2 × layers + 1 all-reduces back to back, the
communication lab.predict.tp_model adds per token.

The gloo backend runs the same code on CPUs (tests use it, so the path is exercised without a GPU).
NVLink multicast (NVLS) stays off: on shared hosts a program that uses it can take the GPUs out of service,
so NCCL_NVLS_ENABLE=0 is set here unless the caller set it.

    python -m lab.experiments.allreduce_bench --backend nccl --arch qwen3.8-27b --out RUN_DIR
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from lab.core.ports import free_port

DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}
SWEEP_BYTES = [2 ** k for k in range(11, 29, 2)]  # 2 KiB .. 128 MiB


def decode_cases(n_layers: int, hidden: int, batches: list[int]) -> list[dict]:
    """The all-reduces of one decode step under TP: llama.cpp -sm tensor reduces small messages in float32
    (ggml-cuda.cu ggml_backend_cuda_comm_allreduce_nccl: < 32768 elements on 2 GPUs), vLLM in the model's
    16-bit dtype."""
    from lab.predict import tp_model

    cases = []
    for batch in batches:
        for engine, dtype in (("llama.cpp -sm tensor", "float32"), ("vLLM TP", "bfloat16")):
            cases.append({"case": f"decode step, batch {batch}, {engine}", "batch": batch, "dtype": dtype,
                          "nbytes": tp_model.message_bytes(hidden, batch, DTYPES[dtype]),
                          "per_step": tp_model.allreduces_per_token(n_layers)})
    return cases


def _worker(rank: int, world: int, backend: str, port: int, cases: list[dict], samples: int, iters: int, out_q) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":  # bind the rank to its GPU before NCCL starts (else it guesses, and barriers warn)
        torch.cuda.set_device(device)
        dist.init_process_group(backend, rank=rank, world_size=world, device_id=device)
    else:
        dist.init_process_group(backend, rank=rank, world_size=world)

    def sync():
        if backend == "nccl":
            torch.cuda.synchronize(device)

    results = []
    for case in cases:
        dtype = getattr(torch, case["dtype"])
        n = max(1, case["nbytes"] // DTYPES[case["dtype"]])
        x = torch.ones(n, dtype=dtype, device=device)
        calls = case.get("per_step", 1) * iters
        for _ in range(2):  # warm-up: communicator set-up and the first launch are not the steady state
            dist.all_reduce(x)
        sync()
        times = []
        for _ in range(samples):
            dist.barrier(device_ids=[rank]) if backend == "nccl" else dist.barrier()
            sync()
            t0 = time.perf_counter()
            for _ in range(calls):
                dist.all_reduce(x)
            sync()
            times.append((time.perf_counter() - t0) / calls)
        x.fill_(1)
        dist.all_reduce(x)
        sync()
        correct = bool(torch.all(x == world).item())
        results.append({**case, "elements": n, "seconds_per_allreduce": times, "correct_sum": correct})
        del x
    if rank == 0:
        out_q.put(results)
    dist.destroy_process_group()


def run(cases: list[dict], world: int = 2, backend: str = "nccl", samples: int = 5, iters: int = 20) -> dict:
    """Spawn `world` processes and time every case; the summary per case is rank 0's."""
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError as exc:
        return {"measured": False, "backend": backend, "world": world,
                "reason": f"PyTorch is not importable here ({exc}): not measured"}
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off: see the module docstring
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    if backend == "nccl" and torch.cuda.device_count() < world:
        return {"measured": False, "reason": f"{torch.cuda.device_count()} CUDA GPU(s) visible, {world} needed"}
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    t0 = time.perf_counter()
    procs = [ctx.Process(target=_worker, args=(r, world, backend, port, cases, samples, iters, q)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        results = q.get(timeout=600)
    finally:
        for p in procs:
            p.join(timeout=60)
    codes = [p.exitcode for p in procs]
    return {"measured": True, "backend": backend, "world": world, "samples": samples, "iters": iters,
            "torch": torch.__version__, "nccl": _nccl_version(torch) if backend == "nccl" else None,
            "env": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL",
                                                    "CUDA_VISIBLE_DEVICES")},
            "wall_s": time.perf_counter() - t0, "exit_codes": codes, "rows": summarise(results, world)}


def _nccl_version(torch) -> str | None:
    try:
        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        return None


def summarise(results: list[dict], world: int) -> list[dict]:
    """Per case: median latency (µs), algorithm and bus bandwidth (GB/s), and for a decode step its total."""
    rows = []
    for r in results:
        med = statistics.median(r["seconds_per_allreduce"])
        nbytes = r["elements"] * DTYPES[r["dtype"]]
        algbw = nbytes / med / 1e9
        row = {"case": r["case"], "dtype": r["dtype"], "bytes": nbytes, "latency_us": med * 1e6,
               "latency_sd_us": statistics.stdev(r["seconds_per_allreduce"]) * 1e6 if len(r["seconds_per_allreduce"]) > 1 else None,
               "algbw_gb_s": algbw, "busbw_gb_s": algbw * 2 * (world - 1) / world, "correct_sum": r["correct_sum"],
               "samples_s": r["seconds_per_allreduce"]}
        if r.get("per_step", 1) > 1:
            row["allreduces_per_step"] = r["per_step"]
            row["step_comm_ms"] = med * r["per_step"] * 1e3
        rows.append(row)
    return rows


def fit_link(rows: list[dict]) -> dict:
    """α (µs) from the smallest sweep message and the peak bus bandwidth (GB/s) over the sweep: the two
    numbers lab.predict.tp_model.Link takes."""
    sweep = [r for r in rows if r["case"].startswith("sweep")]
    if not sweep:
        return {}
    small = min(sweep, key=lambda r: r["bytes"])
    return {"latency_us": small["latency_us"], "latency_at_bytes": small["bytes"],
            "busbw_peak_gb_s": max(r["busbw_gb_s"] for r in sweep)}


def sweep_cases(sizes: list[int] | None = None) -> list[dict]:
    return [{"case": f"sweep {n} B", "dtype": "bfloat16", "nbytes": n} for n in (sizes or SWEEP_BYTES)]


def record(result: dict, arch_name: str, link: dict) -> dict:
    """The record lab.core.evidence writes (records/NN_allreduce.json)."""
    rows = [{k: v for k, v in r.items() if k != "samples_s"} for r in result.get("rows", [])]
    return {"title": f"All-reduce between GPUs ({result.get('backend')}, {result.get('world')} processes)",
            "summary": {"measured": result.get("measured"), "reason": result.get("reason"),
                        "backend": result.get("backend"), "torch": result.get("torch"), "nccl": result.get("nccl"),
                        "model": arch_name, **{f"fit_{k}": v for k, v in link.items()},
                        **{f"step_comm_ms: {r['case']}": round(r["step_comm_ms"], 3) for r in rows if "step_comm_ms" in r}},
            "tables": [{"title": "Latency and bus bandwidth per message", "rows": rows}], "result": result}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--arch", default="qwen3.8-27b", help="stand-in id (lab/data/model_configs.yaml) for the decode sizes")
    ap.add_argument("--batches", default="1,8,16")
    ap.add_argument("--sizes", default="", help="comma-separated sweep sizes in bytes (default 2 KiB..128 MiB)")
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None, help="run folder: writes records/08_allreduce.json")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    from lab.model import models

    arch = models.stand_in(args.arch)
    sizes = [int(x) for x in args.sizes.split(",") if x] or None
    cases = decode_cases(arch.n_layers, arch.hidden_size, [int(b) for b in args.batches.split(",")]) + sweep_cases(sizes)
    result = run(cases, args.world, args.backend, args.samples, args.iters)
    link = fit_link(result.get("rows", []))
    if args.out:
        from lab.core import evidence

        print(evidence.write_record(args.out, "08_allreduce", record(result, arch.name, link)))
    if args.json:
        print(json.dumps({**result, "fit": link}, indent=1))
    for r in result.get("rows", []):
        print(f"{r['case']:<50} {r['bytes']:>11} B {r['latency_us']:9.1f} µs  busbw {r['busbw_gb_s']:8.2f} GB/s"
              + (f"  step {r['step_comm_ms']:.3f} ms" if "step_comm_ms" in r else ""), flush=True)
    return 0 if result.get("measured") else 1


if __name__ == "__main__":
    sys.exit(main())
