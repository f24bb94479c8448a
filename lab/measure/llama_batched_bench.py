"""The lab's one wrapper of llama.cpp's `llama-batched-bench --output-format jsonl`: in-process batched decoding of
N sequences at once — the yardstick for a server's throughput at N concurrent streams, as llama-bench (this
package's llama_bench) is for one stream.

    result = llama_batched_bench.run(model, n_prompt=512, n_gen=256, n_parallel=[1, 4, 8, 16], reps=2)
    result["by_parallel"][16]["speed_tg"]   # S_TG: generated tokens of all 16 sequences ÷ the generation time

What the tool does (tools/batched-bench/batched-bench.cpp of the llama.cpp vendored in llama-cpp-python 0.3.36):
for each (PP, TG, B) it clears the cache, prefills B separate random prompts of PP tokens in one batch (T_PP), then
decodes TG steps of B tokens each, one per sequence, all in lockstep (T_TG); S_PP = B·PP ÷ T_PP, S_TG = B·TG ÷ T_TG,
S = all tokens ÷ (T_PP + T_TG). It warms up once (16 tokens) and runs each configuration ONCE; a configuration
whose B·(PP + TG) exceeds the context (-c) is skipped silently, which `run` turns into an error. Repetitions here
repeat the -npl list (`-npl 1,4,1,4` runs each twice in one process, interleaved), so the model loads once; every
repetition's figures are kept, the median is reported. Flags (common/arg.cpp): -npp, -ntg, -npl (comma lists),
-c, -b, -ub, -fa on|off|auto, -ngl N|auto|all, -t, -ctk/-ctv, -pps (shared prompt; not used: the served
benchmark's prompts share nothing), --output-format md|jsonl (jsonl: one JSON object per configuration on stdout).
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Sequence

from lab.core import display, paths, processes
from lab.model import llama_bench

SOURCE = "llama.cpp vendored in llama-cpp-python 0.3.36: tools/batched-bench/batched-bench.cpp, common/arg.cpp"
# Flags of a llama-server command that mean the same to llama-batched-bench (common/arg.cpp options both accept):
# with a value / without. Server-only settings (slots, context checkpoints, the prompt cache, host, port) have no
# counterpart in-process: they are part of what the served ÷ in-process ratio measures.
SHARED_FLAGS = ("-t", "-tb", "-ngl", "-ctk", "-ctv", "-fa", "-b", "-ub", "-sm", "-ts", "-mg", "-dev", "-ot",
                "--override-tensor")
SHARED_SWITCHES = ("-kvu", "-no-kvu", "--no-mmap", "--mlock")


class BatchedBenchError(RuntimeError):
    """llama-batched-bench failed, ran too long, or printed fewer rows than asked for."""


def parse_jsonl(text: str) -> list[dict]:
    """The tool's JSONL rows (n_kv_max, n_batch, n_ubatch, flash_attn, is_pp_shared, n_gpu_layers, n_threads,
    n_threads_batch, pp, tg, pl, n_kv, t_pp, speed_pp, t_tg, speed_tg, t, speed) from its output; other lines
    (model loading, the perf summary) are skipped."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and '"speed_tg"' in line:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise BatchedBenchError(f"llama-batched-bench row did not parse: {display.clip(line, 160)!r} ({exc})") from exc
    return rows


def shared_flags(server_argv: Sequence[str]) -> list[str]:
    """The flags of a llama-server argv that llama-batched-bench takes with the same meaning (SHARED_FLAGS with
    their values, SHARED_SWITCHES), in order (pure): the in-process run then uses the server's own settings."""
    argv, out = list(server_argv), []
    for i, a in enumerate(argv):
        if a in SHARED_FLAGS and i + 1 < len(argv):
            out += [a, str(argv[i + 1])]
        elif a in SHARED_SWITCHES:
            out.append(a)
    return out


def context_for(n_prompt: int, n_gen: int, n_parallel: Sequence[int]) -> int:
    """The -c every configuration fits in: the largest B × (PP + TG) (prompts not shared)."""
    return max(n_parallel) * (n_prompt + n_gen)


def command(model: str | Path, *, n_prompt: int, n_gen: int, n_parallel: Sequence[int], reps: int = 1,
            flags: Sequence[str] = (), context: int | None = None) -> list[str]:
    """The argv (pure but for finding the tool): -npl repeats the levels `reps` times; -c fits the largest."""
    levels = [int(n) for n in n_parallel] * max(1, reps)
    ctx = context or context_for(n_prompt, n_gen, n_parallel)
    return [str(paths.tool("llama-batched-bench")), "-m", str(model), "-c", str(ctx), "-npp", str(n_prompt),
            "-ntg", str(n_gen), "-npl", ",".join(map(str, levels)), "--output-format", "jsonl", *map(str, flags)]


def summarise(rows: list[dict], n_parallel: Sequence[int]) -> dict:
    """Per B: the median of the repetitions' S_TG, S_PP and S (and each repetition's rows), plus the output rate
    end to end, B·TG ÷ (T_PP + T_TG) — the counterpart of a served level's output tok/s (pure). Raises
    BatchedBenchError when a level has no row (the tool skips what does not fit its context)."""
    out = {}
    for b in sorted(set(int(n) for n in n_parallel)):
        mine = [r for r in rows if r["pl"] == b]
        if not mine:
            raise BatchedBenchError(f"llama-batched-bench printed no row for {b} sequences: B × (PP + TG) must fit -c")
        out[b] = {"pl": b, "pp": mine[0]["pp"], "tg": mine[0]["tg"], "reps": len(mine),
                  "speed_tg": statistics.median(r["speed_tg"] for r in mine),
                  "speed_pp": statistics.median(r["speed_pp"] for r in mine),
                  "speed": statistics.median(r["speed"] for r in mine),
                  "output_tok_s": statistics.median(r["pl"] * r["tg"] / r["t"] for r in mine if r["t"] > 0),
                  "samples_speed_tg": [r["speed_tg"] for r in mine], "samples_t_tg": [r["t_tg"] for r in mine],
                  "samples_t_pp": [r["t_pp"] for r in mine]}
    return out


def run(model: str | Path, *, n_prompt: int, n_gen: int, n_parallel: Sequence[int], reps: int = 1,
        flags: Sequence[str] = (), context: int | None = None, env: dict[str, str] | None = None,
        timeout_s: float = 900, log: str | Path | None = None) -> dict:
    """Run llama-batched-bench and return {"command", "env", "rows" (the tool's JSONL rows, in order),
    "by_parallel" ({B: `summarise`'s figures}), "duration_s", "source"}. `log` receives the command, exit status
    and both output streams. Raises BatchedBenchError on failure."""
    cmd = command(model, n_prompt=n_prompt, n_gen=n_gen, n_parallel=n_parallel, reps=reps, flags=flags, context=context)
    t0 = time.perf_counter()
    env = processes.llama_cpp_env(env)
    proc = llama_bench.run_logged(cmd, env=env, timeout_s=timeout_s, log=log, error=BatchedBenchError,
                                  hint="give it a longer timeout_s, fewer levels or fewer tokens")
    rows = parse_jsonl(proc.stdout + "\n" + proc.stderr)  # LOG() writes to stdout; read both to be safe
    return {"command": cmd, "env": dict(env or {}), "rows": rows, "by_parallel": summarise(rows, n_parallel),
            "duration_s": time.perf_counter() - t0, "source": SOURCE}


__all__ = ["BatchedBenchError", "SOURCE", "SHARED_FLAGS", "SHARED_SWITCHES", "parse_jsonl", "shared_flags",
           "context_for", "command", "summarise", "run"]
