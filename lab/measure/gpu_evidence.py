"""Measure a GPU box with the lab's own code and write the results as lab records.

Runs on the GPU machine after llama.cpp is built and the synthetic model is written (lab/device/gpu_evidence.sh
does all three). Steps, each recorded even when a later one fails:

  01_hardware            lab.measure.inventory + hardware checks against the profile, GPU copy-bandwidth probe
  03_synthetic_model     the lab.model.synth file: predicted vs written bytes, shape, seed, time to write
  06_llama_bench         lab.model.llama_bench: pp512/tg128 with -fa 0 and 1, tg64 at depth 16384
  06_server_concurrency  llama-server (the profile's command, -fa on) + lab.measure.loadgen streaming sweep

Every record compares with the lab's earlier H200 measurements (2026-11-29) where there is one.

    python3 -m lab.measure.gpu_evidence --profile h200-x1 --model M.gguf --llama-bin build/bin --out DIR
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import time
import traceback
from pathlib import Path

from lab.core import evidence
from lab.measure.metrics import ratio

# The lab's first H200 measurement (2026-11-29, same model shape), before this evidence script existed.
FACTS_H200 = {
    "copy_gb_s": 4227.0,
    "pp512_tok_s": 2406.0, "pp512_sd": 219.0,
    "tg128_tok_s": 86.6, "tg128_sd": 0.4,
    "tg64_d16384_fa1_tok_s": 74.9,
    "second_machine_tg128_fa0_tok_s": 74.1, "second_machine_tg128_fa1_tok_s": 86.2,
    "server_total_tok_s": {1: 80.5, 4: 191.0, 8: 232.0, 16: 452.0}, "server_ttft_1_ms": 74.0,
    "source": "measured for this lab on a lent H200, 2026-11-29 (driver 580.159.04, CUDA 13.0, llama.cpp from "
              "llama-cpp-python 0.3.36)",
}
LEVEL_REQUESTS = {1: 4, 2: 4, 4: 8, 8: 16, 16: 32}  # two waves per level; lab.measure.metrics calls < 4 requests invalid


def checkout() -> dict:
    """The lab commit this ran from: git when the tree has .git, else what the caller passed in LAB_GIT_SHA."""
    state = evidence.git_state()
    # Outside a git tree `git rev-parse HEAD` prints "HEAD" and fails: only a 40-hex answer is a commit.
    if not re.fullmatch(r"[0-9a-f]{40}", str(state.get("sha"))) and os.environ.get("LAB_GIT_SHA"):
        state = {"sha": os.environ["LAB_GIT_SHA"], "short": os.environ["LAB_GIT_SHA"][:8],
                 "dirty": os.environ.get("LAB_GIT_DIRTY"), "how": "LAB_GIT_SHA from the caller (no .git on the GPU machine)"}
    return state


# ---------------------------------------------------------------- 01 hardware
def hardware_record(profile) -> dict:
    from lab.measure import copy_bandwidth, inventory, psu_sizing
    from lab.pages import hardware  # until this module is retired (issue 24): the suite on the GPU replaces it

    inv = inventory.collect(profile)
    bw = copy_bandwidth.measure()
    found = hardware.check_all(inv, bw, profile)
    psu = psu_sizing.advice(inv, profile)
    summ = hardware.summary(inv, bw, found, psu, profile)
    summ["facts_copy_gb_s"] = FACTS_H200["copy_gb_s"]
    summ["copy_vs_facts"] = ratio(bw["gb_s"], FACTS_H200["copy_gb_s"], 3)
    return {"title": f"Hardware checks on the GPU machine ({profile.name})", "summary": summ,
            "checks": [c.to_dict() for c in found],
            "tables": [evidence.table_entry("GPUs (NVML)", hardware.gpu_table(inv)),
                       evidence.table_entry("Host and disk", hardware.host_table(inv))],
            "inventory": inv, "bandwidth": bw, "psu": psu}


# ---------------------------------------------------------------- 03 the synthetic model
def synth_record(model: Path, arch_id: str, vocab: Path, synth_seconds: float | None,
                 layers: int | None = None) -> dict:
    from lab.model import gguf_file, synth

    arch, _, plan, size = synth.plan_file(arch_id, "Q4_K", vocab, layers)
    header = gguf_file.read_gguf_header(model)
    written = model.stat().st_size
    return {"title": f"Synthetic {arch.name}-shaped model (lab.model.synth, random Q4_K weights)",
            "summary": {"file": str(model), "bytes_written": written, "bytes_predicted": size["total_bytes"],
                        "size_matches": written == size["total_bytes"], "tensor_bytes": size["tensor_bytes"],
                        "tensor_gib": round(size["tensor_bytes"] / 2**30, 3), "params": size["params"],
                        "seconds_to_write": synth_seconds,
                        "write_gb_s": round(written / 1e9 / synth_seconds, 2) if synth_seconds else None,
                        "describe": synth.describe(arch, plan, size, "Q4_K")},
            "metadata": {k: v for k, v in header.metadata.items() if not k.startswith("tokenizer.")},
            "arch": arch.to_dict(), "predicted": size, "vocab_file": vocab.name,
            "vocab_sha256": evidence.sha256_file(vocab)}


# ---------------------------------------------------------------- 06 llama-bench
def bench_run(model: Path, **settings) -> dict:
    """One lab.model.llama_bench run on every GPU layer; a failure is kept in the record (command, error)
    instead of losing the runs before and after it."""
    from lab.model import llama_bench

    try:
        return llama_bench.run(model, n_gpu_layers=-1, timeout_s=900, **settings)
    except llama_bench.LlamaBenchError as exc:
        return {"command": llama_bench.command(model, n_gpu_layers=-1, **settings), "error": evidence.redact(str(exc)),
                "rows": [], "tests": []}


def bench_rows(runs: list[dict]) -> list[dict]:
    """One row per llama-bench test: `tok_s` the median of the repetitions (lab.model.llama_bench says why)."""
    rows = []
    for run in runs:
        for t, r in zip(run["tests"], run["rows"]):
            rows.append({"test": t["test"], "flash_attn": t["flash_attn"], "tok_s": round(t["tok_s"], 2),
                         "mean": round(t["tok_s_mean"], 2), "sd": round(t["tok_s_sd"], 2), "reps": t["reps"],
                         "samples_tok_s": t["samples_tok_s"], "threads": t["n_threads"],
                         "gpu": r.get("gpu_info"), "build": f"{r.get('build_commit')} ({r.get('build_number')})"})
    return rows


def bench_record(model: Path, bandwidth_gb_s: float | None, tensor_bytes: int) -> dict:
    runs = [bench_run(model, n_prompt=512, n_gen=128, flash_attn="0,1", reps=5),
            bench_run(model, n_prompt=0, n_gen=64, depth=16384, flash_attn="1,0", reps=3)]
    rows = bench_rows(runs)

    def tok_s(test, fa):
        return next((r["tok_s"] for r in rows if r["test"] == test and bool(r["flash_attn"]) == fa), None)

    ceiling = bandwidth_gb_s * 1e9 / tensor_bytes if bandwidth_gb_s else None
    f = FACTS_H200
    comparison = [
        {"test": "pp512", "fa": 1, "measured": tok_s("pp512", True), "facts": f["pp512_tok_s"]},
        {"test": "pp512", "fa": 0, "measured": tok_s("pp512", False), "facts": f["pp512_tok_s"]},
        {"test": "tg128", "fa": 1, "measured": tok_s("tg128", True), "facts": f["second_machine_tg128_fa1_tok_s"]},
        {"test": "tg128", "fa": 0, "measured": tok_s("tg128", False), "facts": f["second_machine_tg128_fa0_tok_s"]},
        {"test": "tg128 (FACTS headline, fa not stated)", "fa": None, "measured": tok_s("tg128", True),
         "facts": f["tg128_tok_s"]},
        {"test": "tg64@d16384", "fa": 1, "measured": tok_s("tg64@d16384", True), "facts": f["tg64_d16384_fa1_tok_s"]},
        {"test": "tg64@d16384", "fa": 0, "measured": tok_s("tg64@d16384", False), "facts": None},
    ]
    for c in comparison:
        c["measured_over_facts"] = ratio(c["measured"], c["facts"], 3)
    tg = tok_s("tg128", True)
    build = next((r["build"] for r in rows), None)
    return {"title": "llama-bench on the synthetic Qwen3-32B-shaped Q4_K model",
            "summary": {"pp512_fa1_tok_s": tok_s("pp512", True), "pp512_fa0_tok_s": tok_s("pp512", False),
                        "tg128_fa1_tok_s": tg, "tg128_fa0_tok_s": tok_s("tg128", False),
                        "tg64_d16384_fa1_tok_s": tok_s("tg64@d16384", True),
                        "tg64_d16384_fa0_tok_s": tok_s("tg64@d16384", False),
                        "copy_roofline_tok_s": round(ceiling, 1) if ceiling else None,
                        "tg128_fa1_of_roofline": ratio(tg, ceiling, 3), "llama_cpp_build": build,
                        "failed_runs": [r["command"] for r in runs if r.get("error")]},
            "tables": [{"title": "llama-bench results", "rows": [{k: v for k, v in r.items() if k != "samples_tok_s"}
                                                                 for r in rows]},
                       {"title": "vs the earlier H200 measurement (2026-11-29)", "rows": comparison}],
            "facts": f, "runs": runs}


# ---------------------------------------------------------------- 06 llama-server + lab.measure.loadgen
def server_record(profile, model: Path, out: Path, levels: list[int], output_tokens: int,
                  prompt_tokens: int) -> dict:
    from lab.serving import engines, serve
    from lab.measure import loadgen, metrics
    from lab.pages import benchmark as bench_views  # until this module is retired (issue 24)

    cmd = engines.build_command(profile, port=serve.free_port(), model_path=model)
    argv = list(cmd.argv)
    argv[argv.index("-fa") + 1] = "on"  # as in the earlier measurement (`-fa on`); auto picks on for CUDA anyway
    cmd = dataclasses.replace(cmd, argv=tuple(argv))
    t0 = time.perf_counter()
    server = serve.start(cmd, out / "logs", name="llama-server", health_timeout_s=300)
    load_s = time.perf_counter() - t0
    summaries, raw = [], []
    try:
        words, per_word = loadgen.words_for_tokens(server.base_url, prompt_tokens, server.headers())
        target = loadgen.Target(server.base_url, model=cmd.served_model or "default", max_tokens=output_tokens,
                                api_key=server.api_key)
        for k, level in enumerate(levels):
            n = LEVEL_REQUESTS.get(level, 2 * level)
            prompts = loadgen.make_prompts(1 + n, words, seed=100 + k)
            run = loadgen.run_load(target, prompts, loadgen.LoadSpec(concurrency=level, max_requests=n,
                                                                     warmup_requests=1, seed=100 + k),
                                   limit=loadgen.level_limit(level, profile.bench_duration_s))
            s = metrics.summarise_run(run)
            s["facts_total_tok_s"] = FACTS_H200["server_total_tok_s"].get(level)
            s["output_over_facts"] = ratio(s["output_throughput"], s["facts_total_tok_s"], 3)
            summaries.append(s)
            raw.append(run.to_dict())
            print(f"[server] concurrency {level}: {s['output_throughput']} tok/s total", flush=True)
    finally:
        stopped = server.stop()
        reported = server.reported()
    rows = [bench_views.summary_row(s) | {"facts_total_tok_s": s["facts_total_tok_s"], "vs_facts": s["output_over_facts"]}
            for s in summaries]
    return {"title": "llama-server concurrency sweep (lab.measure.loadgen, streaming /v1/completions)",
            "summary": {"command": argv, "load_and_health_s": round(load_s, 1), "prompt_words": words,
                        "tokens_per_word": per_word, "output_tokens": output_tokens,
                        "total_tok_s_by_concurrency": {s["concurrency"]: s["output_throughput"] for s in summaries},
                        "facts_total_tok_s": FACTS_H200["server_total_tok_s"]},
            "tables": [{"title": "Sweep", "rows": rows}], "summaries": summaries, "runs": raw,
            "server_reported": reported, "server_stop": stopped,
            "notes": [n.text for n in cmd.notes if n.level != "info"]}


# ---------------------------------------------------------------- main
def step(name: str, fn, failures: dict):
    t0 = time.perf_counter()
    print(f"[evidence] {name} ...", flush=True)
    try:
        result = fn()
        print(f"[evidence] {name}: done in {time.perf_counter() - t0:.1f} s", flush=True)
        return result
    except Exception as exc:
        failures[name] = traceback.format_exc()[-3000:]
        print(f"[evidence] {name}: FAILED {exc!r}", flush=True)
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="h200-x1")
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--arch", default="qwen3-32b")
    ap.add_argument("--vocab", required=True, type=Path)
    ap.add_argument("--llama-bin", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--layers", type=int, default=None, help="the synthetic model's layer override, if any")
    ap.add_argument("--synth-seconds", type=float, default=None)
    ap.add_argument("--levels", default="1,4,8,16")
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--skip", default="", help="comma-separated: hardware,synth,bench,server")
    args = ap.parse_args(argv)
    os.environ["LAB_LLAMA_BIN"] = str(args.llama_bin)
    from lab.core import profiles

    profile = profiles.load(args.profile).model_copy(update={"model_file": str(args.model)})
    skip = set(filter(None, args.skip.split(",")))
    failures: dict = {}
    extra = {"lab_checkout": checkout(), "profile": args.profile}
    written = []

    def record(name, data):
        if data is not None:
            written.append(evidence.write_record(args.out, name, {**data, **extra}))

    hw = None
    if "hardware" not in skip:
        hw = step("hardware", lambda: hardware_record(profile), failures)
        record("01_hardware", hw)
    size = None
    if "synth" not in skip:
        syn = step("synthetic model", lambda: synth_record(args.model, args.arch, args.vocab, args.synth_seconds,
                                                        args.layers),
                   failures)
        record("03_synthetic_model", syn)
        # decode reads the trunk: the MTP block (lab synth writes the real model's) stays unloaded without draft-mtp
        size = syn["predicted"]["tensor_bytes"] - syn["predicted"].get("mtp_bytes", 0) if syn else None
    if "bench" not in skip:
        from lab.model import gguf_file

        tensor_bytes = size or gguf_file.gguf_weights_bytes(args.model)
        bw = hw["bandwidth"]["gb_s"] if hw and hw["bandwidth"]["kind"] == "gpu" else None
        record("06_llama_bench", step("llama-bench", lambda: bench_record(args.model, bw, tensor_bytes),
                                      failures))
    if "server" not in skip:
        levels = [int(x) for x in args.levels.split(",")]
        record("06_server_concurrency",
               step("llama-server sweep", lambda: server_record(profile, args.model, args.out, levels,
                                                                args.output_tokens, args.prompt_tokens), failures))
    if failures:
        (args.out / "logs").mkdir(parents=True, exist_ok=True)
        (args.out / "logs" / "failures.txt").write_text("\n\n".join(f"## {k}\n{v}" for k, v in failures.items()))
    print("[evidence] records:", *[p.name for p in written], flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
