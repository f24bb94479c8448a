"""One GPU against two: llama.cpp's split modes measured, the two-over-one ratios, where the KV cache and the
recurrent state land on each card, and tensor parallelism's cost predicted next to what was measured.

For each mode — `none` (one GPU: CUDA_VISIBLE_DEVICES=0) and, when two GPUs are visible, `layer`, `row`,
`tensor` — the same model is measured twice with the lab's own parts:

* llama-bench pp/tg (lab.model.llama_bench) with the mode's -sm/-ts/-mg and CUDA environment
  (lab.serving.engines.llama_gpu_settings, the flags llama-server gets too);
* llama-server from lab.serving.engines.build_command, swept by lab.measure.load_levels at the given concurrency levels; its
  start-up log, parsed by lab.serving.engine_logs.parse_llama_log, gives the KV and recurrent-state buffers per device,
  compared with lab.predict.kvcache.llama_cpp_device_split.

Then: two-over-one ratios (tg, pp, served single stream, aggregate at each level), and lab.predict.tp_model's
prediction for -sm tensor (from the one-GPU tg, the measured copy bandwidth and the measured all-reduce:
records/08_allreduce.json when lab.experiments.allreduce_bench ran first) beside what -sm tensor measured; the same
model applied to two V100s over NVLink 2.0 and PCIe 3.0, and to two nodes (pipeline parallel over
Ethernet), with the link figures of lab/data/gpu_links.yaml. Records: 08_multigpu_scaling, 08_tp_model.
Modes that cannot run here (fewer GPUs, a CPU profile) are recorded as skipped with the reason.

    .venv/bin/python -m lab multigpu --profile h200-x2 --model M.gguf --out RUN_DIR [--levels 1,8,16] [--modes ...]
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
import traceback
from pathlib import Path

from lab.core import display, evidence, fields, run_folder
from lab.measure.metrics import ratio

MODES = ("none", "layer", "tensor", "row")  # row last: deprecated upstream, the first to drop when time runs out
# V100 + 27B on one card: the lab's calibration entry (lab/data/calibration.yaml) this page scales from
# the seeds' model, for the on-paper V100 and two-node rows (whatever file was measured here)
PAPER_MODELS = ("qwen3.8-27b", "qwen3.5-27b")  # the second until the first is in lab/data/model_configs.yaml
PAPER_QUANT = "Q4_K_M"


# ---------------------------------------------------------------- the runs (side effects)
def variant(profile, mode: str):
    """The profile as run in one split mode: `none` is one GPU (CUDA_VISIBLE_DEVICES=0 on a GPU box)."""
    if mode == "none":
        update = {"split_mode": None, "tensor_split": None, "main_gpu": None}
        if profile.gpu_count > 0:
            update.update(split_mode="none", cuda_visible_devices="0", gpu_count=1)
        return profile.model_copy(update=update)
    return profile.model_copy(update={"split_mode": mode, "main_gpu": 0 if mode == "row" else profile.main_gpu})


def bench_mode(profile, model: Path, prompt: int, gen: int, reps: int) -> dict:
    from lab.model import llama_bench
    from lab.serving import engines

    argv, env, _ = engines.llama_gpu_settings(profile)
    gpu = profile.gpu_count > 0
    return llama_bench.run(model, threads=profile.threads, n_prompt=prompt, n_gen=gen, reps=reps,
                           n_gpu_layers=-1 if gpu else None, flash_attn="1" if gpu else None, extra_args=tuple(argv),
                           env=env, timeout_s=180)


def serve_mode(profile, model: Path, logs: Path, mode: str, levels: list[int], output_tokens: int,
               prompt_tokens: int) -> dict:
    """llama-server in this mode, started and stopped by lab.serving.serve.measure, measured at `levels`
    (lab.measure.load_levels.measure: two waves a level); raises with the engine's words when it would not serve."""
    from lab.measure import load_levels
    from lab.serving import engines, serve

    cmd = engines.build_command(profile, port=serve.free_port(), model_path=model)
    seen: dict = {}

    def how(server) -> dict:
        seen["server"] = server
        target, words, _ = load_levels.against(server, prompt_tokens, output_tokens)
        # two waves per level (lab.measure.metrics calls a run of < 4 requests invalid)
        plan = [load_levels.Level(level, max(4, 2 * level)) for level in levels]
        summaries = []
        for m in load_levels.measure(target, plan, words, budget_s=profile.bench_duration_s, what="bench_duration_s",
                                     seed=200, tag=mode):
            summaries.append(m.summary)
            print(f"[multigpu] {mode}: {m.run.spec.concurrency} stream(s) {m.summary['output_throughput']} tok/s total",
                  flush=True)
        return {"summaries": summaries}

    row = serve.measure(cmd, logs, f"llama-server-{mode}", how, health_timeout_s=180)
    server = seen.get("server")
    if row["status"] != "ok":
        raise RuntimeError(f"llama-server -sm {mode}: {row['error']}\n{row.get('log_tail', '')}")
    # whether -sm tensor/row reduced through NCCL: a build without it says so once ("NCCL is unavailable")
    nccl = [display.clip(ln.strip(), 200) for ln in server.log_text().splitlines() if "NCCL" in ln][:5]
    return {"command": cmd.to_record(), "load_and_health_s": row["load_s"], "summaries": row["summaries"],
            "reported": server.reported(), "stop": server.stop(), "nccl_log_lines": nccl}


def _step(what: str, fn):
    t0 = time.perf_counter()
    print(f"[multigpu] {what} ...", flush=True)
    try:
        out = fn()
        print(f"[multigpu] {what}: done in {time.perf_counter() - t0:.1f} s", flush=True)
        return out, None
    except Exception as exc:
        print(f"[multigpu] {what}: FAILED {exc!r}", flush=True)
        return None, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"


# ---------------------------------------------------------------- judging and tables (pure)
def mode_plan(profile, visible_gpus: int, modes: list[str]) -> list[dict]:
    """Which modes run here, and why the others do not."""
    out = []
    for m in modes:
        if m == "none":
            out.append({"mode": m, "run": True, "why": "one GPU" if visible_gpus else "one device (CPU profile)"})
        elif profile.gpu_count < 2:
            out.append({"mode": m, "run": False, "why": f"profile {profile.name} has gpu_count {profile.gpu_count}"})
        elif visible_gpus < 2:
            out.append({"mode": m, "run": False, "why": f"{visible_gpus} GPU(s) visible to NVML: a split needs 2"})
        else:
            out.append({"mode": m, "run": True, "why": f"{visible_gpus} GPUs"})
    return out


def _by_level(server: dict | None) -> dict[int, dict]:
    return {s["concurrency"]: s for s in (server or {}).get("summaries", [])}


def scaling_rows(results: dict[str, dict], levels: list[int]) -> list[dict]:
    """One row per mode: llama-bench pp/tg, served single-stream decode, aggregate tok/s per level, and each
    as a ratio over the one-GPU run."""
    base = results.get("none") or {}

    def metrics(r: dict) -> dict:
        b, lv = r.get("bench") or {}, _by_level(r.get("server"))
        out = {"pp_tok_s": (b.get("pp") or {}).get("tok_s"), "tg_tok_s": (b.get("tg") or {}).get("tok_s"),
               fields.at("stream_decode_tok_s", 1): (lv.get(1) or {}).get("stream_decode_tok_s")}
        for level in levels:
            out[fields.at("output_throughput", level)] = (lv.get(level) or {}).get("output_throughput")
        return out

    b0, rows = metrics(base), []
    for mode, r in results.items():
        m = metrics(r)
        row = {"mode": mode, "status": r.get("status"), **{k: display.rounded(v, k) for k, v in m.items()}}
        if mode != "none":
            for k, v in m.items():
                row[f"{k.removesuffix('_tok_s')} ×1-GPU"] = display.rounded(ratio(v, b0.get(k)))
        rows.append(row)
    return rows


def _device_index(name: str) -> int | None:
    m = re.search(r"(\d+)$", name)
    return int(m[1]) if m else None


def kv_split_rows(arch, profile, reported: dict, n_devices: int) -> list[dict]:
    """Predicted KV and recurrent-state MiB per device against the server log's `KV buffer` / `RS buffer`
    lines (device names ending in the device index: CUDA0, CUDA1; others are listed as they come)."""
    from lab.predict import kvcache
    from lab.serving import flag_table

    kv_dtype = flag_table.llama_kv_type(profile.kv_cache_dtype)
    pred = kvcache.llama_cpp_device_split(arch, profile.context_tokens, profile.parallel_slots, kv_dtype,
                                          n_devices, profile.split_mode, profile.tensor_split)
    kv, rs = reported.get("kv_buffers_mib", {}), reported.get("rs_buffers_mib", {})
    names = sorted(set(kv) | set(rs))
    by_index = {_device_index(n): n for n in names if _device_index(n) is not None}
    if n_devices == 1 and len(names) == 1:  # one device, whatever its name ("CPU" on a CPU profile)
        by_index = {0: names[0]}
    rows = []
    for p in pred:
        name = by_index.get(p["device"])
        got_kv, got_rs = kv.get(name) if name else None, rs.get(name) if name else None
        rows.append({"device": p["device"], "log name": name, "layers (predicted)": p["layers"],
                     "KV MiB predicted": float(p["kv_mib"]), "KV MiB reported": got_kv,
                     "KV match": None if got_kv is None else abs(got_kv - float(p["kv_mib"])) < 0.01,
                     "RS MiB predicted": float(p["rs_mib"]), "RS MiB reported": got_rs,
                     "RS match": None if got_rs is None else abs(got_rs - float(p["rs_mib"])) < 0.01})
    for n in names:
        if n not in by_index.values():
            rows.append({"device": None, "log name": n, "KV MiB reported": kv.get(n), "RS MiB reported": rs.get(n)})
    return rows


def tp_prediction_rows(results: dict, arch, weights_bytes: int, copy_gb_s: float | None, link_fit: dict) -> list[dict]:
    """lab.predict.tp_model on this box: from the one-GPU tg and the measured bandwidth + all-reduce, predicted -sm
    tensor and -sm layer single-stream decode beside what was measured."""
    from lab.predict import tp_model

    tg1 = (((results.get("none") or {}).get("bench") or {}).get("tg") or {}).get("tok_s")
    if not tg1 or not copy_gb_s or not link_fit.get("busbw_peak_gb_s"):
        return [{"prediction": "not made", "why": "needs the one-GPU tg, a GPU copy bandwidth and the all-reduce fit "
                 f"(tg {tg1}, copy {copy_gb_s}, all-reduce {link_fit or 'not measured'})"}]
    # the copy probe counts read + write; decode reads only, so a read stream runs at about that figure
    link = tp_model.Link("this box's GPU pair (measured)", link_fit["busbw_peak_gb_s"], link_fit["latency_us"],
                         "records/08_allreduce.json")
    tp = tp_model.tp_decode(tok_s_one_gpu=tg1, weights_bytes=weights_bytes, bandwidth_gb_s=copy_gb_s,
                            n_layers=arch.n_layers, hidden=arch.hidden_size, link=link, element_bytes=4)
    pp = tp_model.pp_decode(tok_s_one_gpu=tg1, n_stages=2, hidden=arch.hidden_size, link=link, element_bytes=4)

    def measured(mode):
        return (((results.get(mode) or {}).get("bench") or {}).get("tg") or {}).get("tok_s")

    return [{"mode": "tensor (TP=2)", "predicted_tok_s": f"{tp.pessimistic_tok_s:.1f}..{tp.optimistic_tok_s:.1f}",
             "measured_tg_tok_s": measured("tensor"), "one_gpu_tg_tok_s": tg1,
             "model": f"weights {tp.weights_ms:.2f} ms/2 + fixed {tp.fixed_ms:.2f} ms (or /2) + {tp.allreduces} "
                      f"all-reduces of {tp.message_bytes} B = {tp.comm_ms:.2f} ms"},
            {"mode": "layer (pipeline, 1 stream)", "predicted_tok_s": f"{pp['single_batch_tok_s']:.1f}",
             "measured_tg_tok_s": measured("layer"), "one_gpu_tg_tok_s": tg1,
             "model": f"one-GPU step + 1 hop of {pp['hop_ms'] * 1e3:.1f} µs"}]


def paper_model():
    """(arch, Q4_K_M weight bytes, how) of the seeds' model for the on-paper rows."""
    from lab.model import models, weights

    model_id = next(m for m in PAPER_MODELS if m in models.stand_in_ids())
    arch = models.stand_in(model_id)
    nbytes, how = weights.weights_bytes(PAPER_QUANT, arch, model_id)
    return arch, nbytes, f"{model_id} {PAPER_QUANT}: {how}"


def paper_rows() -> tuple[list[dict], str]:
    """The TP model for two V100s (NVLink 2.0, PCIe 3.0 x16 and x8) and for two nodes (pipeline parallel
    over 10/25/100 GbE), single stream, from the lab's sourced link figures and the lab's one-V100 projection (lab.predict.roofline).
    Batches above 1 are left out: the one-GPU aggregate they would start from is not measured on a V100."""
    from lab.predict import roofline, tp_model
    from lab.measure import gpu_links

    arch, weights_bytes, weights_how = paper_model()
    # one V100, one stream: the lab's one projection (roofline's per-token model, calibrated on the H200), the
    # same figure `lab plan` shows, never a second estimate
    one = roofline.projection_rows(weights_bytes, roofline.family_of(arch), gpu_ids=("v100-32g",))[0]
    bw, tok1 = one["bandwidth_gb_s"], one["projected_tok_s"]
    figs = gpu_links.link_figures()
    rows = []
    for link_id in ("v100-sxm2-nvlink2", "pcie3-x16", "pcie3-x8"):
        f = figs[link_id]
        link = tp_model.Link(f["name"], f["bandwidth_gb_s_per_direction"], f["latency_us"], f["source"])
        tp = tp_model.tp_decode(tok_s_one_gpu=tok1, weights_bytes=weights_bytes, bandwidth_gb_s=bw,
                                n_layers=arch.n_layers, hidden=arch.hidden_size, link=link, element_bytes=2)
        rows.append({"set-up": f"2 × V100, vLLM-style TP=2 over {link_id}", "one_gpu_tok_s": round(tok1, 1),
                     "predicted_tok_s": f"{tp.pessimistic_tok_s:.1f}..{tp.optimistic_tok_s:.1f}",
                     "comm_ms_per_token": round(tp.comm_ms, 3),
                     "link": f"{f['bandwidth_gb_s_per_direction']} GB/s/dir, {f['latency_us']} µs (latency assumed)",
                     "source": f["source"]})
    for link_id in ("ethernet-10g", "ethernet-25g", "ethernet-100g"):
        f = figs[link_id]
        link = tp_model.Link(f["name"], f["bandwidth_gb_s_per_direction"], f["latency_us"], f["source"])
        pp = tp_model.pp_decode(tok_s_one_gpu=tok1, n_stages=2, hidden=arch.hidden_size, link=link)
        rows.append({"set-up": f"2 nodes × 1 V100, vLLM Ray, pipeline parallel 2 over {link_id}",
                     "one_gpu_tok_s": round(tok1, 1),
                     "predicted_tok_s": f"{pp['single_batch_tok_s']:.1f} (one stream); ≤ "
                                        f"{pp['pipelined_ceiling_tok_s']:.1f} summed over ≥ 2 streams (stages full)",
                     "comm_ms_per_token": round(pp["hop_ms"], 3),
                     "link": f"{f['bandwidth_gb_s_per_direction']} GB/s/dir, {f['latency_us']} µs (latency assumed)",
                     "source": f["source"]})
    basis = (f"one V100: {weights_how} = {weights_bytes / 1e9:.2f} GB read per token at {bw} GB/s (datasheet) + a fixed "
             f"{one['fixed_ms']} ms per token (lab.predict.roofline per-token model: {display.clip(one['how'], 120)}) = {tok1:.1f} tok/s")
    return rows, basis


# ---------------------------------------------------------------- records
def scaling_record(profile, plan: list[dict], results: dict, levels: list[int], arch, model: Path) -> dict:
    rows = scaling_rows(results, levels)
    kv_tables = []
    for mode, r in results.items():
        reported = (r.get("server") or {}).get("reported")
        if reported:
            n = 1 if mode == "none" else max(2, profile.gpu_count)
            kv_tables.append({"title": f"KV cache and recurrent state per device, -sm {mode}: predicted vs "
                                       "llama-server's log", "rows": kv_split_rows(arch, variant(profile, mode), reported, n)})
    two = [r for r in rows if r["mode"] != "none" and r.get("tg ×1-GPU") is not None]
    best = max(two, key=lambda r: r["tg ×1-GPU"]) if two else None
    summary = {"profile": profile.name, "model": str(model), "modes_run": list(results),
               "modes_not_reached": [p["mode"] for p in plan if p["run"] and p["mode"] not in results],
               "modes_skipped": {p["mode"]: p["why"] for p in plan if not p["run"]},
               "failed": {m: r["error"].splitlines()[0] for m, r in results.items() if r.get("error")},
               "nccl_log_lines": {m: (r.get("server") or {}).get("nccl_log_lines") for m, r in results.items()
                                  if (r.get("server") or {}).get("nccl_log_lines")},
               "best_two_gpu_tg_mode": best["mode"] if best else None,
               "best_two_gpu_tg_ratio": best["tg ×1-GPU"] if best else None}
    for r in rows:  # stable keys the claims ledger can cite: "<mode>: <metric>" and "<mode>: <metric> ×1-GPU"
        for key in ("tg_tok_s", fields.at("stream_decode_tok_s", 1), *[fields.at("output_throughput", lv) for lv in levels]):
            summary[f"{r['mode']}: {key}"] = r.get(key)
            if r["mode"] != "none":
                summary[f"{r['mode']}: {key.removesuffix('_tok_s')} ×1-GPU"] = r.get(f"{key.removesuffix('_tok_s')} ×1-GPU")
    return {"title": "Two GPUs against one: llama.cpp split modes (llama-bench + llama-server sweep)",
            "summary": summary,
            "tables": [{"title": "Modes", "rows": plan}, {"title": "Scaling: each mode and its ratio over one GPU",
                                                         "rows": rows}, *kv_tables],
            "results": results, "levels": levels, "arch": arch.to_dict()}


def tp_record(results: dict, arch, weights_bytes: int, copy_gb_s: float | None, link_fit: dict) -> dict:
    here = tp_prediction_rows(results, arch, weights_bytes, copy_gb_s, link_fit)
    paper, basis = paper_rows()
    return {"title": "Tensor parallelism's cost: lab.predict.tp_model predicted vs measured, and on paper for V100s and two nodes",
            "summary": {"weights_bytes": weights_bytes, "copy_gb_s": copy_gb_s, **{f"link_{k}": v for k, v in link_fit.items()},
                        **{f"{r['mode']}: predicted_tok_s": r.get("predicted_tok_s") for r in here if "mode" in r},
                        **{f"{r['mode']}: measured_tg_tok_s": r.get("measured_tg_tok_s") for r in here if "mode" in r},
                        **{f"paper: {r['set-up']}": r["predicted_tok_s"] for r in paper},
                        "allreduces_per_token": 2 * arch.n_layers + 1, "hidden": arch.hidden_size,
                        "on_paper_one_gpu_basis": basis},
            "tables": [{"title": "This box: prediction next to measurement", "rows": here},
                       {"title": "On paper: two V100s (NVLink 2.0 / PCIe 3.0) and two nodes (Ethernet)", "rows": paper}]}


# ---------------------------------------------------------------- main
def _copy_bandwidth(run_dir: Path) -> float | None:
    rec = run_folder.read_records(run_dir).get("01_hardware") or {}
    bw = rec.get("bandwidth") or {}
    return bw.get("gb_s") if bw.get("kind") == "gpu" else None


def _allreduce_fit(run_dir: Path) -> dict:
    rec = run_folder.read_records(run_dir).get("08_allreduce") or {}
    return {k.removeprefix("fit_"): v for k, v in (rec.get("summary") or {}).items() if k.startswith("fit_")}


def write_records(out: Path, profile, plan, results, levels, arch, model: Path) -> list[Path]:
    from lab.model import gguf_file

    weights = gguf_file.gguf_weights_bytes(model)
    return [evidence.write_record(out, "08_multigpu_scaling", scaling_record(profile, plan, results, levels, arch, model)),
            evidence.write_record(out, "08_tp_model", tp_record(results, arch, weights, _copy_bandwidth(out),
                                                                _allreduce_fit(out)))]


def main(argv: list[str] | None = None) -> int:
    from lab.core import cli

    ap = cli.parser(".venv/bin/python -m lab multigpu", __doc__.split("\n\n")[0], ".venv/bin/python -m lab multigpu --profile h200-x2",
                    ".venv/bin/python -m lab multigpu --profile v100-32g-x2-nvlink --budget-s 1800",
                    ".venv/bin/python -m lab multigpu --profile h200-x2 --skip server")
    ap.add_argument("--profile", default="h200-x2")
    ap.add_argument("--model", type=Path, default=None, help="GGUF to measure (default: the profile's model_file)")
    ap.add_argument("--out", type=Path, default=None, help="run folder (default: a new one under outputs/<profile>/)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--levels", default="1,8,16")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--skip", default="", help="comma-separated: bench,server")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="start no further mode once this many seconds have passed (recorded as skipped)")
    args = ap.parse_args(argv)
    # llama.cpp's -sm tensor all-reduces through NCCL when built with it. NVLink multicast (NVLS) stays off:
    # on a shared host a program that uses it can take every GPU out of service. The servers and llama-bench
    # inherit these (NCCL_* and TORCH_* pass lab.serving.engines.minimal_env).
    for var, value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
        os.environ.setdefault(var, value)
    from lab.core import paths, profiles
    from lab.model import models

    try:
        profile = profiles.load(args.profile)
    except profiles.ProfileError as exc:
        print(exc, file=sys.stderr)
        return 2
    bad = [m for m in args.modes.split(",") if m not in MODES]
    if bad:
        print(f"--modes: unknown {bad}; choose from {', '.join(MODES)}", file=sys.stderr)
        return 2
    model = args.model or paths.model_path(profile.model_file)
    if not Path(model).is_file():
        print(f"model file {model} not found: give --model or write it with `.venv/bin/python -m lab synth`", file=sys.stderr)
        return 2
    out = args.out or evidence.new_run_dir(profile.name)
    levels = [int(x) for x in args.levels.split(",")]
    skip = set(filter(None, args.skip.split(",")))
    visible = len(evidence.gpu_summary()["gpus"])
    plan = mode_plan(profile, visible, args.modes.split(","))
    arch = models.from_gguf(model, name=profile.model_name)
    results: dict[str, dict] = {}
    t_start = time.perf_counter()
    for p in plan:
        if not p["run"]:
            continue
        if args.budget_s is not None and time.perf_counter() - t_start > args.budget_s:
            p.update(run=False, why=f"time budget of {args.budget_s:g} s spent before this mode started")
            continue
        v = variant(profile, p["mode"])
        r: dict = {"status": "ok"}
        if "bench" not in skip:
            r["bench"], err = _step(f"llama-bench -sm {p['mode']}", lambda: bench_mode(v, model, args.prompt_tokens,
                                                                                       args.output_tokens, args.reps))
            r["error"] = err
        if "server" not in skip:
            r["server"], err = _step(f"llama-server -sm {p['mode']}", lambda: serve_mode(
                v, model, out / "logs", p["mode"], levels, args.output_tokens, args.prompt_tokens))
            r["error"] = r.get("error") or err
        if r.get("error"):
            r["status"] = "failed"
        results[p["mode"]] = r
        written = write_records(out, profile, plan, results, levels, arch, model)  # after every mode: a cut-off
        # run (the device call's time limit) keeps what it measured
    written = write_records(out, profile, plan, results, levels, arch, model)
    print(json.dumps({"run_dir": str(out), "records": [str(w) for w in written]}))
    return 1 if any(r.get("error") for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
