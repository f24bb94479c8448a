"""What a server said about itself in its log: one parser per engine, over the lines each engine prints.

* llama.cpp (llama-server, and llama_cpp.server, which logs the same llama.cpp lines): `parse_llama_log` —
  build, threads, model, hparams, layers offloaded, buffers per device, slots, context, flash attention, and
  every KV / recurrent-state cache (`parse_kv_lines`, the same reading the KV parity grid compares with
  lab.predict.kvcache's prediction);
* vLLM: `parse_vllm_log` — version, engine, KV cache tokens and memory, blocks, max concurrency, weights,
  attention backend; `kv_cache_report_from_log` is its KV line alone (the vLLM KV parity check).

`request_timings` is llama-server's own clock for each request it finished (the peer check's referee).
`parse_log(engine, text)` picks the parser, `failure_said` gives the engine's own words for a refusal, and
`reported_rows` shows a parsed log as (what, value) rows. Each line's pattern is written once, here.
"""
from __future__ import annotations

import re

# ---------------------------------------------------------------- llama.cpp
# The cache lines llama.cpp prints once per cache it allocates (src/llama-kv-cache.cpp, src/llama-memory-recurrent.cpp):
#   llama_kv_cache:        CPU KV buffer size =    67.50 MiB
#   llama_kv_cache: size =   67.50 MiB (  1024 cells,  30 layers,  3/3 seqs), K (f16):   33.75 MiB, V (f16):   33.75 MiB
#   llama_memory_recurrent: size =   18.70 MiB (     2 cells,   4 layers,  2 seqs  0 rs_seq), R (f32):    0.70 MiB, S (f32):   18.00 MiB, ...
# Models with sliding-window layers get two KV caches, announced by "llama_kv_cache_iswa: creating SWA KV cache".
KV_SIZE_LINE = re.compile(
    r"llama_kv_cache: size =\s*(?P<size>[\d.]+) MiB \(\s*(?P<cells>\d+) cells,\s*(?P<layers>\d+) layers,"
    r"\s*(?P<seqs>\d+)/(?P<streams>\d+) seqs\), K \((?P<type_k>\w+)\):\s*(?P<k>[\d.]+) MiB,"
    r" V \((?P<type_v>\w+)\):\s*(?P<v>[\d.]+) MiB")
RECURRENT_SIZE_LINE = re.compile(
    r"llama_memory_recurrent: size =\s*(?P<size>[\d.]+) MiB \(\s*(?P<cells>\d+) cells,\s*(?P<layers>\d+) layers,"
    r"\s*(?P<seqs>\d+) seqs\s+(?P<rs_seq>\d+) rs_seq\), R \((?P<type_k>\w+)\):\s*(?P<k>[\d.]+) MiB,"
    r" S \((?P<type_v>\w+)\):\s*(?P<v>[\d.]+) MiB")
KV_BUFFER_LINE = re.compile(r"llama_kv_cache:\s+(?P<dev>\S+) KV buffer size =\s*(?P<mib>[\d.]+) MiB")
RS_BUFFER_LINE = re.compile(r"llama_memory_recurrent:\s+(?P<dev>\S+) RS buffer size =\s*(?P<mib>[\d.]+) MiB")
ISWA_LINE = re.compile(r"llama_kv_cache_iswa: creating\s+(?P<kind>non-SWA|SWA) KV cache")
# `--spec-type draft-mtp`: a second context on the same weights, whose KV cache holds the MTP layers only
# (common/speculative.cpp common_speculative_init_result logs this line before creating it)
MTP_CONTEXT_LINE = re.compile(r"creating MTP draft context")
_NUM = r"([0-9]+(?:\.[0-9]+)?)"
_LLAMA_PATTERNS = {
    "build": re.compile(r"build (\d+) \(([0-9a-f]+)\) with (.+?) for (.+?)\s*$"),
    "system_threads": re.compile(r"system_info: n_threads = (\d+) \(n_threads_batch = (\d+)\) / (\d+)"),
    "file_type": re.compile(r"print_info: file type\s+= (.+?)\s*$"),
    "file_size": re.compile(rf"print_info: file size\s+= {_NUM} (MiB|GiB) \({_NUM} BPW\)"),
    "model_params": re.compile(rf"print_info: model params\s+= {_NUM} ([KMBT])"),
    "model_name": re.compile(r"print_info: general.name\s+= (.+?)\s*$"),
    "offloaded": re.compile(r"offloaded (\d+)/(\d+) layers to GPU"),
    "model_buffer": re.compile(rf"load_tensors:\s+(\S+) model buffer size =\s+{_NUM} MiB"),
    "compute_buffer": re.compile(rf"(\S+) compute buffer size =\s+{_NUM} MiB"),
    "slots": re.compile(r"initializing, n_slots = (\d+), n_ctx_slot = (\d+), kv_unified = '(\w+)'"),
    "listening": re.compile(r"listening on (\S+)"),
    "flash_attn": re.compile(r"Flash Attention (enabled|disabled)"),
    "prompt_cache": re.compile(r"prompt cache is enabled, size limit: (\d+) MiB"),
}
_CONTEXT_KEYS = ("n_seq_max", "n_ctx", "n_ctx_seq", "n_batch", "n_ubatch", "flash_attn", "kv_unified")
_PRINT_INFO_KEYS = ("n_ctx_train", "n_layer", "n_head", "n_head_kv", "n_embd", "n_embd_head_k", "n_swa")
_UNITS = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def _typed(value: str):
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(value, value)


def _last_load(lines: list[str]) -> list[str]:
    """The lines from the last model load on: llama.cpp's fitting pass loads the model once without
    allocating (its KV line can read 0.00 MiB), then again for real."""
    starts = [i for i, line in enumerate(lines) if "llama_model_loader: loaded meta data" in line]
    return lines[starts[-1]:] if starts else lines


def parse_llama_log(text: str) -> dict:
    """What llama-server (or llama_cpp.server, which logs the same llama.cpp lines) reported at start-up.

    Keys (absent when the log has no such line): build, threads, model {name, file_type, file_size_mib,
    bpw, params}, hparams {n_layer, n_ctx_train, ...}, offloaded {layers, of}, model_buffers_mib
    {device: MiB}, kv_buffers_mib, rs_buffers_mib (recurrent state of hybrid models), kv_caches (`parse_kv_lines`
    of the last load: a global and a sliding-window entry for models like Gemma 3, a recurrent one for hybrids),
    context {n_ctx, n_ctx_seq, ...}, slots {n_slots, n_ctx_slot, kv_unified}, flash_attention, listening,
    warnings, errors. `cells` is per stream: with -np N and no -kvu there are N streams of n_ctx/N cells.
    """
    lines = text.splitlines()
    out: dict = {}
    for line in lines:
        if m := _LLAMA_PATTERNS["build"].search(line):
            out["build"] = {"number": int(m[1]), "commit": m[2], "compiler": m[3], "target": m[4]}
        elif m := _LLAMA_PATTERNS["system_threads"].search(line):
            out["threads"] = {"n_threads": int(m[1]), "n_threads_batch": int(m[2]), "cpus": int(m[3])}
        elif m := _LLAMA_PATTERNS["slots"].search(line):
            out["slots"] = {"n_slots": int(m[1]), "n_ctx_slot": int(m[2]), "kv_unified": m[3] == "true"}
        elif m := _LLAMA_PATTERNS["listening"].search(line):
            out["listening"] = m[1]
        elif m := _LLAMA_PATTERNS["prompt_cache"].search(line):
            out["prompt_cache_limit_mib"] = int(m[1])
    out.update(_parse_load(_last_load(lines)))
    out["warnings"] = [ln.strip() for ln in lines if re.search(r"^(warning:|\S+ W )", ln.strip())][:50]
    out["errors"] = [ln.strip() for ln in lines if re.search(r"^(error:|\S+ E )", ln.strip())][:50]
    return out


def _parse_load(lines: list[str]) -> dict:
    out: dict = {"model": {}, "hparams": {}, "context": {}}
    model_buf, kv_buf, rs_buf, compute_buf = {}, {}, {}, {}
    for line in lines:
        p = _LLAMA_PATTERNS
        if m := p["file_type"].search(line):
            out["model"]["file_type"] = m[1]
        elif m := p["file_size"].search(line):
            mib = float(m[1]) * (1024 if m[2] == "GiB" else 1)
            out["model"].update(file_size_mib=mib, bpw=float(m[3]))
        elif m := p["model_params"].search(line):
            out["model"]["params"] = round(float(m[1]) * _UNITS[m[2]])
        elif m := p["model_name"].search(line):
            out["model"]["name"] = m[1]
        elif m := p["offloaded"].search(line):
            out["offloaded"] = {"layers": int(m[1]), "of": int(m[2])}
        elif m := p["model_buffer"].search(line):
            model_buf[m[1]] = float(m[2])
        elif m := KV_BUFFER_LINE.search(line):
            kv_buf[m["dev"]] = kv_buf.get(m["dev"], 0.0) + float(m["mib"])  # one line per cache (global + SWA)
        elif m := RS_BUFFER_LINE.search(line):  # hybrid models (qwen35): recurrent + conv state, per device
            rs_buf[m["dev"]] = rs_buf.get(m["dev"], 0.0) + float(m["mib"])
        elif m := p["compute_buffer"].search(line):
            compute_buf[m[1]] = float(m[2])
        elif m := p["flash_attn"].search(line):
            out["flash_attention"] = m[1] == "enabled"
        elif m := re.search(r"print_info: (\w+)\s+= (\S+)\s*$", line):
            if m[1] in _PRINT_INFO_KEYS:
                out["hparams"][m[1]] = _typed(m[2])
        elif m := re.search(r"llama_context: (\w+)\s+= (\S+)\s*$", line):
            if m[1] in _CONTEXT_KEYS:
                out["context"][m[1]] = _typed(m[2])
    if model_buf:
        out["model_buffers_mib"] = model_buf
    if kv_buf:
        out["kv_buffers_mib"] = kv_buf
    if rs_buf:
        out["rs_buffers_mib"] = rs_buf
    if compute_buf:
        out["compute_buffers_mib"] = compute_buf
    if kv_caches := parse_kv_lines("\n".join(lines)):
        out["kv_caches"] = kv_caches
    return {k: v for k, v in out.items() if v != {}}


def parse_kv_lines(log_text: str) -> list[dict]:
    """The caches a llama.cpp log reports, in order; a cache whose buffer line reads 0.00 MiB (the dry run
    llama.cpp makes when it first fits parameters to device memory) is skipped.

    Each dict has lab.predict.kvcache's prediction shape, so the two compare key by key: cache ("kv",
    "global", "swa", "recurrent", or "mtp" for the MTP draft context's cache), size_mib, k_mib, v_mib (strings, as printed: %.2f; R and S for the
    recurrent state), cells (per stream), layers, seqs, streams, type_k, type_v, buffer (the devices that
    hold it: "CPU", "CUDA0+CUDA1"), and rs_seq for the recurrent state."""
    caches: list[dict] = []
    pending_kind = None
    in_mtp_context = False
    last_buffer = None
    devices: list[str] = []  # where the cache's buffers live ("CPU", "CUDA0", ...): one line per device
    for line in log_text.splitlines():
        if MTP_CONTEXT_LINE.search(line):
            in_mtp_context = True
        elif m := ISWA_LINE.search(line):
            pending_kind = "swa" if m["kind"] == "SWA" else "global"
        elif (m := KV_BUFFER_LINE.search(line)) or (m := RS_BUFFER_LINE.search(line)):
            last_buffer = float(m["mib"])
            devices.append(m["dev"])
        elif m := KV_SIZE_LINE.search(line):
            dry_run = last_buffer == 0.0
            last_buffer = None
            kind, pending_kind = pending_kind or ("mtp" if in_mtp_context else "kv"), None
            if dry_run:
                devices = []
                continue
            caches.append({"cache": kind, "size_mib": m["size"], "k_mib": m["k"], "v_mib": m["v"],
                           "cells": int(m["cells"]), "layers": int(m["layers"]), "seqs": int(m["seqs"]),
                           "streams": int(m["streams"]), "type_k": m["type_k"], "type_v": m["type_v"],
                           "buffer": "+".join(devices) or None})
            devices = []
        elif m := RECURRENT_SIZE_LINE.search(line):
            dry_run = last_buffer == 0.0
            last_buffer = None
            if dry_run:
                devices = []
                continue
            caches.append({"cache": "recurrent", "size_mib": m["size"], "k_mib": m["k"], "v_mib": m["v"],
                           "cells": int(m["cells"]), "layers": int(m["layers"]), "seqs": int(m["seqs"]),
                           "streams": int(m["seqs"]), "rs_seq": int(m["rs_seq"]), "type_k": m["type_k"],
                           "type_v": m["type_v"], "buffer": "+".join(devices) or None})
            devices = []
    return caches



# ---------------------------------------------------------------- vLLM
_VLLM_PATTERNS = {
    # "vLLM API server version X" (older releases) or the start-up banner's "version X" (0.11+)
    "version": re.compile(r"(?:vLLM API server version|█\s+version) (\S+)"),
    "engine": re.compile(r"Initializing an? (V\d) LLM engine \(v(\S+?)\)"),
    # one line on current releases ("CPU KV cache size: 23,296 tokens, Maximum concurrency for 4,096 tokens
    # per request: 5.69x"), two lines on older ones, and "GPU" instead of "CPU" on a GPU
    "kv_tokens": re.compile(r"\b([A-Z]+)(?: \+ host)? KV cache size: ([0-9,]+) tokens"),
    "max_concurrency": re.compile(r"Maximum concurrency for ([0-9,]+) tokens per request: ([0-9.]+)x"),
    "kv_memory": re.compile(r"Available KV cache memory: ([0-9.]+) GiB"),
    "kv_memory_cpu": re.compile(r"Explicitly set \(([0-9.]+)/([0-9.]+)\) GiB for KV cache"),
    "blocks": re.compile(r"# GPU blocks: (\d+), # CPU blocks: (\d+)"),
    "weights": re.compile(r"(?:Model loading took|Loading model weights took) ([0-9.]+) ?GiB"),
    "checkpoint": re.compile(r"Checkpoint size: ([0-9.]+) GiB"),
    "max_model_len": re.compile(r"Using max model len (\d+)"),
    "attention_backend": re.compile(r"Using (\w+) backend"),
    "listening": re.compile(r"Starting vLLM (?:API )?server on (\S+)"),
    # a hybrid model on a GPU: the attention block raised to hold one Gated DeltaNet state, the state padded to it
    "attention_block": re.compile(r"Setting attention block size to (\d+) tokens"),
    "mamba_padding": re.compile(r"Padding mamba page size by ([0-9.]+)%"),
    "init_engine": re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([0-9.]+) (?:s|seconds)"),
}


def parse_vllm_log(text: str) -> dict:
    """What vLLM reported at start-up: version (and engine V0/V1), KV cache tokens and the device that holds
    them (V1) or GPU/CPU blocks (V0), KV memory, max concurrency at max_model_len, max_model_len, weight
    memory, attention backend, where it listens, engine start-up time, errors."""
    out: dict = {}
    kv_tokens = []
    for line in text.splitlines():
        p = _VLLM_PATTERNS
        if m := p["version"].search(line):
            out["version"] = m[1]
        if m := p["engine"].search(line):
            out["engine"] = m[1]
            out.setdefault("version", m[2])
        if m := p["kv_tokens"].search(line):
            kv_tokens.append(int(m[2].replace(",", "")))
            out["kv_cache_device"] = m[1]
        if m := p["max_concurrency"].search(line):  # on the KV line itself in current releases
            out["max_concurrency"] = {"tokens_per_request": int(m[1].replace(",", "")), "x": float(m[2])}
        if m := p["kv_memory"].search(line):
            out["kv_cache_memory_gib"] = float(m[1])
        elif m := p["kv_memory_cpu"].search(line):  # the CPU build: VLLM_CPU_KVCACHE_SPACE of the node's RAM
            out["kv_cache_memory_gib"] = float(m[1])
            out["node_memory_gib"] = float(m[2])
        for key in ("weights", "checkpoint"):
            if m := p[key].search(line):
                out[f"{key}_gib"] = float(m[1])
        if m := p["blocks"].search(line):
            out["blocks"] = {"gpu": int(m[1]), "cpu": int(m[2])}
        if m := p["max_model_len"].search(line):
            out["max_model_len"] = int(m[1])
        if m := p["attention_backend"].search(line):
            out["attention_backend"] = m[1]
        if m := p["listening"].search(line):
            out["listening"] = m[1]
        if m := p["init_engine"].search(line):
            out["init_engine_s"] = float(m[1])
        if m := p["attention_block"].search(line):
            out["attention_block_size"] = int(m[1])
        if m := p["mamba_padding"].search(line):
            out["mamba_padding_pct"] = float(m[1])
    if kv_tokens:
        out["kv_cache_tokens"] = sum(kv_tokens)  # one line per engine core (data-parallel rank)
    out["errors"] = [ln.strip() for ln in text.splitlines() if re.search(r"\b(ERROR|Traceback)\b", ln)][:50]
    return out


_VLLM_SPEC = re.compile(r"SpecDecoding metrics: Mean acceptance length: ([0-9.]+).*?Accepted: (\d+) tokens, Drafted: "
                        r"(\d+) tokens, Per-position acceptance rate: ([0-9., ]+?), Avg Draft acceptance rate")
_VLLM_GEN = re.compile(r"Avg generation throughput: ([0-9.]+) tokens/s, Running: (\d+) reqs")


def vllm_spec_decoding(text: str) -> dict | None:
    """vLLM's speculative-decoding windows ("SpecDecoding metrics: Mean acceptance length: 3.81, ... Accepted: 275
    tokens, Drafted: 294 tokens, Per-position acceptance rate: 0.990, 0.939, 0.878") summed over the log:
    {windows, accepted, drafted, k (positions), tokens_per_step (bonus included: accepted ÷ steps + 1, steps =
    drafted ÷ k), per_position (drafted-weighted mean), generation_tok_s (the engine's "Avg generation throughput"
    windows with requests running)}; None without such a line. lab.predict.vllm_speed reads tokens per step from it."""
    wins = [(float(m[1]), int(m[2]), int(m[3]), [float(x) for x in m[4].split(",")]) for m in _VLLM_SPEC.finditer(text)]
    if not wins:
        return None
    k = len(wins[-1][3])
    accepted, drafted = sum(w[1] for w in wins), sum(w[2] for w in wins)
    steps = drafted / k
    per_pos = [sum(w[3][i] * w[2] for w in wins if len(w[3]) == k) / sum(w[2] for w in wins if len(w[3]) == k)
               for i in range(k)]
    gen = [float(m[1]) for m in _VLLM_GEN.finditer(text) if int(m[2]) > 0]
    return {"windows": len(wins), "accepted": accepted, "drafted": drafted, "k": k,
            "tokens_per_step": accepted / steps + 1 if steps else None, "per_position": per_pos,
            "mean_acceptance_length": [w[0] for w in wins], "generation_tok_s": gen}


def kv_cache_report_from_log(text: str) -> dict | None:
    """vLLM's last "<CPU|GPU> KV cache size: N tokens" line (one engine core's cache) and the max concurrency it
    states (on the same line in current releases, the next one in older): {device, tokens, max_model_len,
    max_concurrency}, None where not printed; None without such a line."""
    lines = text.splitlines()
    kv = [m for line in lines if (m := _VLLM_PATTERNS["kv_tokens"].search(line))]
    if not kv:
        return None
    conc = [m for line in lines if (m := _VLLM_PATTERNS["max_concurrency"].search(line))]
    return {"device": kv[-1][1], "tokens": int(kv[-1][2].replace(",", "")),
            "max_model_len": int(conc[-1][1].replace(",", "")) if conc else None,
            "max_concurrency": float(conc[-1][2]) if conc else None}


# What llama-server says when a request ends (tools/server/server-context.cpp print_timings; the figures are
# server-common.h's server_slot_stats): "prompt eval time" runs from its prompt's first batch ("new prompt", which
# can come after the slot took the request: queued_ms below) to the first token's sampling, "eval time" from there
# to the last token, and its ms per token is over n_gen − 1 decode steps (the first token
# comes from the prompt's logits) — TPOT's definition, on the server's clock. Each line starts with the log's time
# stamp (minutes.seconds.milliseconds.microseconds since the server started: common/log.cpp), then slot and task:
#   0.03.121.260 I slot print_timing: id 15 | task 0 | prompt eval time =      20.58 ms /     1 tokens (...)
#   0.03.121.266 I slot print_timing: id 15 | task 0 |        eval time =       0.00 ms /     1 tokens (...)
#   0.03.121.308 I slot      release: id 15 | task 0 | stop processing: n_tokens = 1, truncated = 0
LLAMA_TASK_LINE = re.compile(r"^(?P<m>\d+)\.(?P<s>\d+)\.(?P<ms>\d+)\.(?P<us>\d+) \S slot +\S+: id +(?P<slot>\d+) "
                             r"\| task (?P<task>\d+) \| (?P<rest>.*)$")
_PROMPT_TIME = re.compile(r"prompt eval time = +([\d.]+) ms / +(\d+) tokens")
_EVAL_TIME = re.compile(r"^ *eval time = +([\d.]+) ms / +(\d+) tokens")
_GRAPHS_REUSED = re.compile(r"^ *graphs reused = +(\d+)")


def request_timings(text: str) -> list[dict]:
    """Every request llama-server finished in `text` (a log or a slice of one), in the order they started: task,
    slot, start and end (seconds since the server started), queued ms (from the slot taking the request to its
    prompt's first batch: with many prompts at once, a 2048-token batch holds four 512-token prompts and the rest
    wait; 0 when the log has no "new prompt" line), prompt ms and tokens, decode ms, output tokens and tpot_ms
    (decode ms ÷ (output tokens − 1); None below 2 tokens), and graphs_reused: the context's count of compute graphs
    reused instead of rebuilt, so far, when the request ended (recent llama.cpp; absent from older logs). A request
    still running has no end: left out."""
    tasks: dict[int, dict] = {}
    for line in text.splitlines():
        m = LLAMA_TASK_LINE.match(line)
        if not m:
            continue
        t = int(m["m"]) * 60 + int(m["s"]) + int(m["ms"]) / 1e3 + int(m["us"]) / 1e6
        task = tasks.setdefault(int(m["task"]), {"task": int(m["task"]), "slot": int(m["slot"])})
        rest = m["rest"]
        if "processing task" in rest:
            task["start_s"] = t
        elif rest.startswith("new prompt"):
            task["prompt_start_s"] = t
        elif p := _PROMPT_TIME.search(rest):
            task["prompt_ms"], task["prompt_tokens"] = float(p[1]), int(p[2])
        elif e := _EVAL_TIME.search(rest):
            task["decode_ms"], task["output_tokens"] = float(e[1]), int(e[2])
        elif g := _GRAPHS_REUSED.search(rest):
            task["graphs_reused"] = int(g[1])
        elif "stop processing" in rest:
            task["end_s"] = t
    done = [d for d in tasks.values() if {"start_s", "end_s", "prompt_ms", "decode_ms"} <= d.keys()]
    for d in done:
        d["tpot_ms"] = d["decode_ms"] / (d["output_tokens"] - 1) if d["output_tokens"] > 1 else None
        # the slot took the request at start_s; its prompt got room in a batch at prompt_start_s (prompt eval time
        # counts from there: server-common.h update_prompt_start), so the first token came queued + prompt ms later
        d["queued_ms"] = max(0.0, (d.pop("prompt_start_s", d["start_s"]) - d["start_s"]) * 1000)
    return sorted(done, key=lambda d: (d["start_s"], d["task"]))


# ---------------------------------------------------------------- either engine
def parse_log(engine: str, text: str) -> dict:
    """The right parser for the engine's log."""
    if engine == "vllm":
        return parse_vllm_log(text)
    if engine in ("llama.cpp", "llama-cpp-python"):
        return parse_llama_log(text)
    return {}


def failure_said(engine: str, text: str, most: int = 3) -> list[str]:
    """The engine's own words for why it failed, from its log: llama.cpp states the cause as a warning just
    before its first error ("context type MTP requested but model doesn't contain MTP layers", then "E ...
    failed to create MTP context"), so that warning comes first; time stamp and level are left out."""
    if engine not in ("vllm", "llama.cpp", "llama-cpp-python"):
        return []
    errors = parse_log(engine, text)["errors"]
    if not errors or engine == "vllm":
        return errors[:most]
    lines = [ln.strip() for ln in text.splitlines()]
    first = lines.index(errors[0])
    cause = [lines[first - 1]] if first and re.search(r"^(warning:|\S+ W )", lines[first - 1]) else []
    return [re.sub(r"^(\S+ [EW] |error: |warning: )", "", ln).strip() for ln in cause + errors][:most]


def reported_rows(reported: dict) -> list[dict]:
    """The parsed log as (what, value) rows: layers offloaded, KV buffer, slots, context, model, build; a figure a
    profile field sets is named by the field (parallel_slots (n_slots))."""
    rows = []

    def add(what, value):
        if value not in (None, {}, []):
            rows.append({"what": what, "value": value})

    off = reported.get("offloaded")
    add("layers offloaded to GPU", f"{off['layers']}/{off['of']}" if off else "none (no GPU offload in this build/run)"
        if "model" in reported else None)
    names = {"kv": "KV cache (all layers)", "global": "KV cache (global)", "swa": "KV cache (sliding-window)",
             "recurrent": "recurrent state (hybrid layers)"}
    for c in reported.get("kv_caches", []):
        parts = ("R", "S") if c["cache"] == "recurrent" else ("K", "V")
        add(names.get(c["cache"], c["cache"]),
            f"{c['size_mib']} MiB = {c['streams']} × {c['cells']} cells × {c['layers']} layers "
            f"({parts[0]} {c['type_k']} {c['k_mib']} MiB, {parts[1]} {c['type_v']} {c['v_mib']} MiB)")
    for dev, mib in reported.get("kv_buffers_mib", {}).items():
        add(f"KV buffer on {dev}", f"{mib:.2f} MiB")
    for dev, mib in reported.get("rs_buffers_mib", {}).items():
        add(f"recurrent-state buffer on {dev}", f"{mib:.2f} MiB")
    for dev, mib in reported.get("model_buffers_mib", {}).items():
        add(f"model buffer on {dev}", f"{mib:.2f} MiB")
    # a figure a profile field sets is named as the profile names it (lab/data/flag_table.yaml), the log's word beside
    slots = reported.get("slots")
    if slots:
        add("parallel_slots (n_slots)", slots["n_slots"])
        add("context_per_request (n_ctx_slot)", slots["n_ctx_slot"])
        add("KV unified across slots", slots["kv_unified"])
    ctx = reported.get("context", {})
    add("context_tokens (n_ctx)", ctx.get("n_ctx"))
    add("context trained (n_ctx_train)", reported.get("hparams", {}).get("n_ctx_train"))
    add("flash attention", reported.get("flash_attention"))
    model = reported.get("model", {})
    add("model", model.get("name"))
    add("model params", model.get("params"))
    add("model file type", model.get("file_type"))
    if "file_size_mib" in model:
        add("model file size", f"{model['file_size_mib']:.2f} MiB ({model.get('bpw')} bits per weight)")
    build = reported.get("build")
    if build:
        add("llama.cpp build", f"{build['number']} ({build['commit']}), {build['compiler']}, {build['target']}")
    thr = reported.get("threads")
    if thr:
        add("threads", f"{thr['n_threads']} of {thr['cpus']} CPUs")
    for key, what in (("version", "vLLM version"), ("engine", "vLLM engine"), ("kv_cache_tokens", "KV cache (tokens)"),
                      ("kv_cache_device", "KV cache on"), ("kv_cache_memory_gib", "KV cache memory (GiB)"),
                      ("max_model_len", "context_tokens (max model len: tokens per request)"), ("weights_gib", "weights (GiB)"),
                      ("checkpoint_gib", "checkpoint size (GiB)"), ("attention_backend", "attention backend"),
                      ("init_engine_s", "engine init: profile, KV cache, warm-up (s)"), ("listening", "listening on")):
        add(what, reported.get(key))
    if reported.get("max_concurrency"):
        mc = reported["max_concurrency"]
        add("max concurrency at full length", f"{mc['x']}× at {mc['tokens_per_request']} tokens")
    if reported.get("blocks"):
        add("KV blocks (GPU, CPU)", f"{reported['blocks']['gpu']}, {reported['blocks']['cpu']}")
    return rows
