"""Does a busy host slow the server? The lab's client at one level against one llama-server, with K processes
keeping K cores busy beside it and without, alternating, repeated; each run timed by the client and on the server's
own clock (lab.measure.server_clock: what llama-server logged for the run's requests).

The peer check's open question: on the lent H200, llama-server decoded at 56-57 ms a token during two of
guidellm's three 8-stream runs and at 44-47 ms during the lab client's runs right after; guidellm's nine client
processes used 37-44 s of CPU per 28-34 s run, the lab's client under 2 s. If busy cores beside the server slow its
decode, a benchmark client that burns CPU on the server's host measures a slower server than the one a user gets.

    python -m lab.experiments.busy_host --profile P --run-dir D --busy 0,2,8 --concurrency 8 --repetitions 3
"""
from __future__ import annotations

import json
import os
import subprocess
from dataclasses import asdict, replace
from pathlib import Path
from statistics import mean

from lab.measure import metrics, server_clock, slot_placement
from lab.serving import engine_logs
from lab.measure.peer_bench import PeerLoad, run_lab_client

LOAD = PeerLoad(num_prompts=16, concurrency=8, input_tokens=512, output_tokens=128)
BUSY = (0, 2, 8)
# one core at 100 % each: sh's busy loop (no Python start-up, nothing to install), as .ci/fresh_clones.sh uses
BURNER = ["sh", "-c", "while :; do :; done"]


def burn(k: int) -> list[subprocess.Popen]:
    """k processes each keeping a core busy until `stop`."""
    return [subprocess.Popen(BURNER, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL) for _ in range(k)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def run(server, load: PeerLoad = LOAD, busy: tuple[int, ...] = BUSY, repetitions: int = 3) -> dict:
    """Each repetition: the lab's client at `load` once per busy count (in order, so the counts alternate over the
    repetitions); per run the client's summary and the server's own figures."""
    runs = []
    for rep in range(repetitions):
        for k in busy:
            level = replace(load, seed=load.seed + 1000 * rep + k)  # fresh prompts: nothing cached between runs
            procs = burn(k)
            try:
                start = server_clock.mark(server)
                lab_run = run_lab_client(server, level)
                clock = server_clock.since(server, start, level.num_prompts)
            finally:
                stop(procs)
            s = metrics.summarise(lab_run.results, lab_run.duration_s)
            tasks = engine_logs.request_timings(server.log_text()[start:])[-level.num_prompts:] if start else []
            runs.append({"repetition": rep + 1, "busy_cores": k, "successes": s["successes"],
                         "requests": placed(tasks),
                         "output_throughput": s["output_throughput"], "tpot_ms": s["tpot_ms"]["mean"],
                         "ttft_ms": s["ttft_ms"]["mean"], "client_cpu_s": lab_run.client_cpu_s, "server_clock": clock})
    return {"load": asdict(load), "busy": list(busy), "repetitions": repetitions, "runs": runs,
            "by_busy": by_busy(runs), "by_placement": by_placement(runs)}


def placed(tasks: list[dict]) -> list[dict]:
    """Each request of a run: its slot, the runs of consecutive slot ids busy while it decoded, its decode ms a token
    (the server's log)."""
    return [{"slot": t["slot"], "blocks": slot_placement.blocks(slot_placement.busy_slots(t, tasks)),
             "tpot_ms": t["tpot_ms"]} for t in tasks]


def attach_requests(record: dict, log_text: str) -> dict:
    """For a record made before runs kept their requests: the log's requests in order — the first use (warm-ups +
    `concurrency` requests), then per run its warm-ups and its measured ones — given back to the runs."""
    n, c, w = record["load"]["num_prompts"], record["load"]["concurrency"], record["load"]["warmup_requests"]
    tasks = [t for t in engine_logs.request_timings(log_text) if t["output_tokens"] >= 2][w + c:]
    if len(tasks) != (n + w) * len(record["runs"]):
        raise ValueError(f"the log has {len(tasks)} requests after the first use, the record's runs "
                         f"{(n + w) * len(record['runs'])}: not this record's log")
    for i, run_ in enumerate(record["runs"]):
        run_["requests"] = placed(tasks[i * (n + w) + w:(i + 1) * (n + w)])
    return record


def by_placement(runs: list[dict]) -> list[dict]:
    """Per busy count and runs of busy slots: the requests and their mean decode ms a token — the busy host's effect
    with the placement held equal (slot_placement: the placement alone moves the speed by ~10 ms a run)."""
    groups: dict[tuple, list[float]] = {}
    for r in runs:
        for q in r.get("requests") or []:
            if q["tpot_ms"] is not None:
                groups.setdefault((r["busy_cores"], q["blocks"]), []).append(q["tpot_ms"])
    return [{"busy_cores": k, "blocks": b, "requests": len(v), "server_tpot_ms": round(mean(v), 1)}
            for (k, b), v in sorted(groups.items())]


def by_busy(runs: list[dict]) -> list[dict]:
    """Per busy count: the server's decode ms a token and the client's output tok/s, mean [min-max] over the
    repetitions, and each as a ratio to the idle host's mean."""
    out = []
    for k in sorted({r["busy_cores"] for r in runs}):
        rs = [r for r in runs if r["busy_cores"] == k]
        tpot = [r["server_clock"]["tpot_ms"] for r in rs if r["server_clock"] and r["server_clock"]["tpot_ms"]]
        thr = [r["output_throughput"] for r in rs if r["output_throughput"]]
        out.append({"busy_cores": k, "runs": len(rs), "server_tpot_ms": _spread(tpot), "output_throughput": _spread(thr)})
    idle = out[0] if out and out[0]["busy_cores"] == 0 else None
    for row in out:
        for key in ("server_tpot_ms", "output_throughput"):
            base = (idle or {}).get(key, {}).get("mean")
            row[key]["÷ idle"] = round(row[key]["mean"] / base, 3) if base and row[key]["mean"] else None
    return out


def _spread(xs: list[float]) -> dict:
    return {"mean": round(mean(xs), 2), "min": round(min(xs), 2), "max": round(max(xs), 2), "n": len(xs)} if xs \
        else {"mean": None, "min": None, "max": None, "n": 0}


def text(record: dict) -> str:
    lines = [f"lab client at {record['load']['concurrency']} streams, {record['load']['num_prompts']} requests of "
             f"≈ {record['load']['input_tokens']}/{record['load']['output_tokens']} tokens, "
             f"{record['repetitions']} repetitions, K busy cores beside the server:"]
    for row in record["by_busy"]:
        t, o = row["server_tpot_ms"], row["output_throughput"]
        lines.append(f"  K={row['busy_cores']}: server decode {t['mean']} ms/token [{t['min']}-{t['max']}] "
                     f"(÷ idle {t['÷ idle']}), client {o['mean']} tok/s [{o['min']}-{o['max']}] (÷ idle {o['÷ idle']})")
    lines += [f"  K={p['busy_cores']}, busy slots in {p['blocks']} run(s): {p['server_tpot_ms']} ms/token "
              f"({p['requests']} requests)" for p in record.get("by_placement") or []]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """python -m lab.experiments.busy_host --profile P --run-dir D [--busy 0,2,8 ...]: on P's llama-server."""
    import argparse

    from lab.core import evidence, profiles
    from lab.serving import engines, serve

    ap = argparse.ArgumentParser(prog="python -m lab.experiments.busy_host", description=main.__doc__)
    ap.add_argument("--profile", required=True, help="profile name or YAML file; its llama-server is started")
    ap.add_argument("--run-dir", required=True, type=Path, help="the record goes to RUN_DIR/busy_host/")
    ap.add_argument("--busy", default=",".join(map(str, BUSY)), help="busy-core counts, e.g. 0,2,8 (0 first)")
    ap.add_argument("--concurrency", type=int, default=LOAD.concurrency)
    ap.add_argument("--requests", type=int, default=LOAD.num_prompts)
    ap.add_argument("--input-tokens", type=int, default=LOAD.input_tokens)
    ap.add_argument("--output-tokens", type=int, default=LOAD.output_tokens)
    ap.add_argument("--repetitions", type=int, default=3)
    args = ap.parse_args(argv)
    busy = tuple(int(x) for x in args.busy.split(",") if x)
    load = replace(LOAD, concurrency=args.concurrency, num_prompts=args.requests, input_tokens=args.input_tokens,
                   output_tokens=args.output_tokens)
    prof = profiles.load(args.profile)
    out_dir = args.run_dir / "busy_host"
    out_dir.mkdir(parents=True, exist_ok=True)
    srv = serve.start(engines.build_command(prof, port=serve.free_port()), log_dir=out_dir, name="busy_host")
    try:
        run_lab_client(srv, replace(load, num_prompts=load.concurrency, seed=999))  # first use of the GPU, not measured
        record = run(srv, load, busy, args.repetitions)
    finally:
        srv.stop()
    record.update(server={"profile": prof.name, "threads": prof.threads, "argv": list(srv.command.argv)},
                  provenance={**evidence.provenance(), "cpu_count": os.cpu_count()})
    evidence.write_whole(out_dir / "busy_host.json", json.dumps(record, indent=2, default=str))
    print(text(record), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
