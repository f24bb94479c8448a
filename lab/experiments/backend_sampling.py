"""What llama-server's `-bs` / `--backend-sampling` (experimental) changes in the answers, measured before the lab
recommends it: the same requests to two servers of the same model, one without and one with the flag.

1. Greedy (temperature 0, ignore_eos, the lab's own load): the fixed prompts of lab/data/backend_sampling.yaml
   (greedy_prompts), token ids compared: one stream, then the same prompts four at a time (several sequences share
   one sampling graph).
2. Seeded sampling: for each SETTINGS entry (the samplers the notebooks and chat clients ask for), many one-token
   requests of one prompt with different seeds; the two servers' draws compared by a two-sample chi-square test
   (permutation p-value, fixed seed) on disjoint seeds, and by how often the same seed gives the same token.

Which samplers run on the backend (the pinned source; file:line in lab/data/backend_sampling.yaml, pinned_source):
llama_sampler_chain_backend_init offloads the chain's leading run of samplers that have a backend version
(greedy, dist, top-k, top-p, min-p, temperature, penalties, logit-bias; a sampler switched off by its value is an
empty one, which has a backend version too); from the first one without (DRY, typical-p, XTC, mirostat,
top-n-sigma, adaptive-p, infill) the rest of the chain runs on the host. A request with a grammar or a reasoning
budget, or one asking for pre-sampling probabilities (n_probs without post_sampling_probs), is sampled wholly on the
host. What the lab then says about -bs, sampler by sampler, with the
figures measured here: lab/data/backend_sampling.yaml (`advice` reads it for a request's fields).

Each request's "sampler chain:" log line (-lv 4) marks the samplers that ran on the backend with "+": the record keeps
the -bs server's chain per setting and checks it against the source. On a CPU build (-ngl 0) the backend is the CPU:
the ggml sampling graph runs (the server log says "setting backend sampler"), not CUDA's kernels; --gpu-layers 999 on
a GPU build samples on the GPU. The statistics, the verdict and the record: lab.experiments.backend_sampling_verdict.
"""
from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from lab.core import display
# the statistics and the verdict (pure): lab.experiments.backend_sampling_verdict
from lab.experiments.backend_sampling_verdict import (ALPHA, PERMUTATION_SEED, PERMUTATIONS, build_record, chain_path,
                                                  compare_greedy, two_sample)

PINNED = "llama.cpp vendored in llama-cpp-python 0.3.36"
MODELS = ("smollm2", "gemma3-270m")  # lab.core.paths.embedded_model keys: the real GGUFs set-up fetches
GREEDY_TOKENS = 48
CONCURRENCY = 4  # the concurrent greedy pass: that many requests in flight, -np CONCURRENCY slots
DIST_PROMPT = "Once upon a time, there was a"  # a broad next-token distribution
# Penalties and DRY act on tokens already in the context (the prompt's are accepted into the chain:
# tools/server/server-context.cpp:368-385 init_sampler), so their prompt repeats itself.
REPEAT_PROMPT = "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat sat on the"
SEED = 20261205  # first sampling seed: the host server draws seeds SEED.., the -bs server SEED+samples.. (disjoint)
# Draws per server per setting (independent seeds): 200 + 200 find a total variation of ~0.15 between the two;
# gemma3-270m costs 30-70 ms a draw on one core of the 2-core test machine, so more would take minutes a model.
SAMPLES = 200
PAIRED = 50  # the -bs server also draws the host server's first PAIRED seeds: same seed, same token?


@dataclass(frozen=True)
class Setting:
    """One request-side sampler configuration. path: where llama.cpp samples it with -bs, by the pinned source:
    "backend" (the whole chain), "mixed" (a backend prefix, then the host), "host" (nothing on the backend: the
    request falls back, or the first sampler that acts has no backend version)."""

    name: str
    body: dict
    path: str
    why: str
    prompt: str = DIST_PROMPT
    fallback_log: str | None = None  # what the -bs server's log says when it falls back
    share: float = 1.0  # of the draws: a request both servers sample on the host needs fewer
    expect: str = "same"  # "differs": the source says -bs changes it (a control: the test must find it)


_FULL = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
SETTINGS = (
    Setting("server defaults at temperature 0.8 (top_k 40, top_p 0.95, min_p 0.05)", {"temperature": 0.8}, "backend",
            "llama-server's default chain; tune's 'temperature 0.8' variant", ),
    Setting("temperature 1, no truncation (the whole vocabulary)", dict(_FULL), "backend",
            "dist over every token: the backend's float cumulative sum against the host's double"),
    Setting("top_k 10 at temperature 1.5", {**_FULL, "top_k": 10, "temperature": 1.5}, "backend", "top-k alone"),
    Setting("top_p 0.9 alone", {**_FULL, "top_p": 0.9}, "backend", "top-p alone (a sort of the whole vocabulary)"),
    Setting("min_p 0.1 alone", {**_FULL, "min_p": 0.1}, "backend", "min-p alone"),
    Setting("penalties: repeat 1.3, frequency 0.5, presence 0.5", {"temperature": 1.0, "repeat_penalty": 1.3,
            "frequency_penalty": 0.5, "presence_penalty": 0.5, "repeat_last_n": 64}, "backend",
            "penalties over the last 64 tokens (the prompt's included)", REPEAT_PROMPT),
    Setting("chat client: temperature 0.7, top_k 20, top_p 0.8, min_p 0, presence 1.5", {"temperature": 0.7,
            "top_k": 20, "top_p": 0.8, "min_p": 0.0, "presence_penalty": 1.5}, "backend",
            "settings chat front-ends send (presence penalty on the prompt's tokens)"),
    # min_keep > 0: the backend's top-p and min-p ignore it (pinned_source min_keep). A peaked prompt, where the host
    # keeps min_keep tokens and the backend one; temperature 2 (applied after the cut) lifts the kept minor tokens,
    # which at 1 Gemma drew 2 times in 200
    Setting("min_p 0.3 with min_keep 8, temperature 2", {**_FULL, "min_p": 0.3, "min_keep": 8, "temperature": 2.0},
            "backend", "min_keep ignored on the backend", REPEAT_PROMPT, expect="differs"),
    Setting("top_p 0.5 with min_keep 8, temperature 2", {**_FULL, "top_p": 0.5, "min_keep": 8, "temperature": 2.0},
            "backend", "min_keep ignored on the backend", REPEAT_PROMPT, expect="differs"),
    Setting("typical_p 0.9", {"temperature": 1.0, "typical_p": 0.9}, "mixed",
            "no backend typical-p: top-k on the backend, typical-p and the rest on the host"),
    Setting("XTC probability 0.5, threshold 0.1", {"temperature": 1.0, "xtc_probability": 0.5, "xtc_threshold": 0.1},
            "mixed", "no backend XTC: top-k, top-p, min-p on the backend, XTC, temperature and dist on the host"),
    Setting("DRY multiplier 0.8", {"temperature": 1.0, "dry_multiplier": 0.8}, "host",
            "no backend DRY, second in the chain: only the penalties (off) before it, so all of it on the host",
            REPEAT_PROMPT),
    Setting("mirostat 2 (tau 5, eta 0.1) at temperature 0.8", {"temperature": 0.8, "mirostat": 2}, "mixed",
            "temperature on the backend, mirostat v2 on the host"),
    Setting("grammar (root ::= [ a-z]+)", {"temperature": 1.0, "grammar": "root ::= [ a-z]+"}, "host",
            "a grammar: the request is sampled on the host", fallback_log="not compatible with grammar", share=0.25),
    Setting("n_probs 5 (pre-sampling probabilities)", {"temperature": 1.0, "n_probs": 5}, "host",
            "pre-sampling probabilities: the request is sampled on the host", share=0.25),
)


# ---------------------------------------------------------------- what the lab says (lab/data/backend_sampling.yaml)
def data() -> dict:
    from lab.core import facts

    return facts.load("backend_sampling", "samplers")


def _entries_for(body: dict) -> list[str]:
    """The backend_sampling.yaml sampler ids a request's fields call on (pure): a field left out counts as off,
    but temperature as llama-server's default 0.8 (sampled)."""
    g = body.get
    on = {"greedy": g("temperature", 1) <= 0, "dist": g("temperature", 1) > 0,
          "temperature": g("temperature", 1) > 0 or g("dynatemp_range", 0) > 0, "top_k": g("top_k", 0) > 0,
          "top_p": g("top_p", 1) < 1, "min_p": g("min_p", 0) > 0,
          "penalties": any(g(k, d) != d for k, d in (("repeat_penalty", 1), ("frequency_penalty", 0),
                                                       ("presence_penalty", 0))),
          "logit_bias": bool(g("logit_bias")) or bool(g("ignore_eos")), "typical_p": g("typical_p", 1) < 1,
          "xtc": g("xtc_probability", 0) > 0, "dry": g("dry_multiplier", 0) > 0, "mirostat": g("mirostat", 0) > 0,
          "top_n_sigma": g("top_n_sigma", -1) > 0,
          "min_keep": g("min_keep", 0) > 0 and (g("top_p", 1) < 1 or g("min_p", 0) > 0),
          "grammar": any(g(k) for k in ("grammar", "json_schema", "response_format")),
          "n_probs": (g("n_probs") or g("logprobs") or 0) > 0 and not g("post_sampling_probs")}
    return [k for k, v in on.items() if v]


def advice(body: dict) -> dict:
    """Whether the lab recommends -bs for requests like `body` (llama-server /completion fields): each sampler it
    uses, where it runs with -bs and the lab's verdict, with its source; recommend only when the file recommends
    -bs and no entry is not-safe."""
    d = data()
    by_id = {e["id"]: e for e in d["samplers"]}
    used = [by_id[i] for i in _entries_for(body) if i in by_id]
    bad = [e["id"] for e in used if e["verdict"] == "not-safe"]
    return {"recommend": bool(d["recommend"]) and not bad, "not_safe": bad,
            "samplers": [{k: e.get(k) for k in ("id", "runs", "verdict", "note", "source")} for e in used]}


# ---------------------------------------------------------------- servers
def profile_for(model: str, threads: int = 1, slots: int = CONCURRENCY, gpu_layers: int = 0):
    """cpu-default with `model` (an embedded GGUF's key, or a .gguf path), `threads` threads (two servers share the
    cores), `slots`, and -ngl `gpu_layers` (999 on a GPU build: the output layer, so the sampling, on the GPU)."""
    from lab.core import profiles

    spec = model if model.endswith(".gguf") else f"embedded:{model}"
    return profiles.load("cpu-default").model_copy(update={
        "name": f"backend-sampling-{Path(model).stem}", "model_file": spec, "model_name": Path(model).stem,
        "model_architecture": f"gguf:{spec}", "threads": threads, "parallel_slots": slots,
        "context_tokens": 1024 * slots, "n_gpu_layers": gpu_layers})


def _post(client, srv, body: dict) -> dict:
    r = client.post(srv.base_url + "/completion", json=body, headers=srv.headers())
    if r.status_code != 200:
        raise RuntimeError(f"/completion answered {r.status_code}: {display.clip(r.text, 300)}")
    return r.json()


def greedy(client, srv, prompts, tokens: int = GREEDY_TOKENS, concurrency: int = 1) -> list[list[int]]:
    """Token ids of each prompt's greedy continuation (temperature 0, ignore_eos: the lab's benchmark requests)."""
    def one(p):
        r = _post(client, srv, {"prompt": p, "n_predict": tokens, "temperature": 0, "ignore_eos": True,
                                "return_tokens": True, "cache_prompt": True, "seed": SEED})
        return [int(t) for t in r.get("tokens") or []]

    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, prompts))


def draws(client, srv, setting: Setting, seeds) -> tuple[list[int], dict]:
    """The first token of one n_predict=1 request per seed (-1: the model ended at once), and the last response's
    generation_settings (what the server says it did)."""
    out, said = [], {}
    for s in seeds:
        r = _post(client, srv, {"prompt": setting.prompt, "n_predict": 1, "cache_prompt": True, "return_tokens": True,
                                **setting.body, "seed": int(s)})
        toks = r.get("tokens") or []
        out.append(int(toks[0]) if toks else -1)
        said = r.get("generation_settings") or {}
    return out, said


def post_sampling_probs(client, srv, setting: Setting, n: int = 10) -> dict[int, float]:
    """The distribution the chain leaves (post_sampling_probs: the backend path stays on), top n: {token: p}."""
    if "n_probs" in setting.body:
        return {}
    r = _post(client, srv, {"prompt": setting.prompt, "n_predict": 1, "cache_prompt": True, **setting.body,
                            "seed": SEED, "n_probs": n, "post_sampling_probs": True})
    first = (r.get("completion_probabilities") or [{}])[0]
    return {int(p["id"]): float(p["prob"]) for p in first.get("top_probs") or []}


@dataclass
class Pair:
    """The two servers of one model: `host` without -bs, `backend` with it."""

    host: object
    backend: object
    clients: list = field(default_factory=list)

    def both(self, fn):
        """fn(client, server) on both servers at once (one thread each): (host's result, backend's)."""
        with ThreadPoolExecutor(2) as pool:
            a = pool.submit(fn, self.clients[0], self.host)
            b = pool.submit(fn, self.clients[1], self.backend)
            return a.result(), b.result()


def measure_model(model: str, log_dir, settings=SETTINGS, samples: int = SAMPLES, paired: int = PAIRED,
                  tokens: int = GREEDY_TOKENS, prompts=None, concurrent: bool = True, progress=print,
                  gpu_layers: int = 0) -> dict:
    """Both servers of `model`, the greedy comparison, each setting's draws and test; {"status": "skip"|"failed"...}
    with why when a server cannot start here."""
    from contextlib import ExitStack

    import httpx

    from lab.serving import engines, serve

    prompts = prompts or data()["greedy_prompts"]
    profile, label = profile_for(model, gpu_layers=gpu_layers), Path(model).stem
    why = serve.why_not_flag_sweep(profile)
    if why:
        return {"model": model, "status": "skip", "error": why}
    # the lab's -lv 4 stays: its per-request "sampler chain:" line (a trace) says where each sampler ran, and the
    # context's "setting backend sampler" line is not printed at -lv 3 (seen here); ~3.5 kB of log a request
    cmds = {k: engines.build_command(profile, port=serve.free_port(), extra_args=args)
            for k, args in (("host", []), ("backend", ["-bs"]))}
    out = {"model": model, "status": "ok", "error": None, "commands": {k: c.shell() for k, c in cmds.items()},
           "device": f"-ngl {gpu_layers}: " + ("the CPU backend samples" if not gpu_layers
                                                else "the output layer's device samples")}
    t0 = time.monotonic()
    with ExitStack() as stack:
        srv = {k: stack.enter_context(serve.start(c, log_dir, f"bs_{label}_{k}")) for k, c in cmds.items()}
        pair = Pair(srv["host"], srv["backend"], [stack.enter_context(httpx.Client(timeout=120)) for _ in range(2)])
        said = {k: s.log_text().count("setting backend sampler for seq_id") for k, s in srv.items()}
        out["backend_sampler_log_lines"] = said
        host, backend = pair.both(lambda c, s: greedy(c, s, prompts, tokens))
        out["greedy"] = {**compare_greedy(host, backend), "output_tokens": tokens, "concurrency": 1,
                         "host_tokens": host, "backend_tokens": backend}
        progress(f"[bs] {model} greedy, one stream: {out['greedy']['identical']}/{len(prompts)} prompts identical "
                 f"({tokens} tokens each)")
        if concurrent:
            h4, b4 = pair.both(lambda c, s: greedy(c, s, prompts, tokens, CONCURRENCY))
            out["greedy_concurrent"] = {
                "concurrency": CONCURRENCY, "backend_vs_host": compare_greedy(h4, b4)["identical"],
                "host_vs_one_stream": compare_greedy(host, h4)["identical"],
                "backend_vs_one_stream": compare_greedy(backend, b4)["identical"], "prompts": len(prompts),
                "host_tokens": h4, "backend_tokens": b4}
            g = out["greedy_concurrent"]
            progress(f"[bs] {model} greedy, {CONCURRENCY} streams: -bs vs host {g['backend_vs_host']}/{len(prompts)}, "
                     f"host vs its one stream {g['host_vs_one_stream']}, "
                     f"-bs vs its one stream {g['backend_vs_one_stream']}")
        out["settings"] = [measure_setting(pair, s, samples, paired, progress, model) for s in settings]
        out["backend_log_fallbacks"] = {s.fallback_log: srv["backend"].log_text().count(s.fallback_log)
                                        for s in settings if s.fallback_log}
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out


def measure_setting(pair: Pair, s: Setting, samples: int, paired: int, progress, model: str) -> dict:
    """One setting: host draws seeds SEED.., -bs draws SEED+samples.. and the host's first `paired` seeds."""
    samples = max(20, round(samples * s.share))
    host_seeds = list(range(SEED, SEED + samples))
    bs_seeds = list(range(SEED + samples, SEED + 2 * samples)) + host_seeds[:paired]
    (host, said_h), (bs_all, said_b) = pair.both(
        lambda c, srv: draws(c, srv, s, host_seeds if srv is pair.host else bs_seeds))
    backend, bs_paired = bs_all[:samples], bs_all[samples:]
    test = two_sample(host, backend)
    probs_h, probs_b = pair.both(lambda c, srv: post_sampling_probs(c, srv, s))
    ids = set(probs_h) | set(probs_b)
    # the -bs server's last request was this setting's (the probabilities ask keeps the backend path)
    chain = next((ln.split("sampler chain:", 1)[1].strip() for ln in reversed(pair.backend.log_text().splitlines())
                  if "sampler chain:" in ln), "")
    row = {"setting": s.name, "path": s.path, "why": s.why, "body": s.body, "prompt": s.prompt, "samples": samples,
           "expect": s.expect, "backend_chain": chain, "observed_path": chain_path(chain),
           **test, "verdict": "differs" if test["p_permutation"] < ALPHA else "same distribution",
           "paired": len(bs_paired), "paired_same_token": sum(x == y for x, y in zip(host, bs_paired)),
           "distinct_tokens": len(set(host) | set(backend)),
           "post_sampling_top_max_abs_diff": max((abs(probs_h.get(t, 0.0) - probs_b.get(t, 0.0)) for t in ids),
                                                 default=None),
           "backend_sampling_said": {"host": said_h.get("backend_sampling"), "backend": said_b.get("backend_sampling")},
           "host_seeds_from": host_seeds[0], "backend_seeds_from": bs_seeds[0],
           "raw": {"host": host, "backend": backend, "backend_paired": bs_paired}}
    progress(f"[bs] {model} {s.name} [{s.path}; the log: {row['observed_path']}]: {samples}+{samples} draws, "
             f"chi2 {test['statistic']:.2f} df "
             f"{test['df']}, p {test['p_chi2']:.3g} (permutation {test['p_permutation']:.3g}), TV "
             f"{test['total_variation']:.3f}, same seed same token {row['paired_same_token']}/{row['paired']}: "
             f"{row['verdict']}")
    return row


def run(models=MODELS, log_dir=None, settings=SETTINGS, samples: int = SAMPLES, paired: int = PAIRED,
        tokens: int = GREEDY_TOKENS, prompts=None, concurrent: bool = True, progress=print,
        gpu_layers: int = 0) -> dict:
    """Every model in turn (a model whose server cannot start is a row saying why, not a crash)."""
    import tempfile

    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="lab-bs-"))
    prompts = list(prompts or data()["greedy_prompts"])
    progress(f"[bs] sampling seeds from {SEED}, permutation seed {PERMUTATION_SEED}, alpha {ALPHA}")
    rows = []
    for m in models:
        try:
            rows.append(measure_model(m, log_dir, settings, samples, paired, tokens, prompts, concurrent, progress,
                                      gpu_layers))
        except Exception as exc:  # noqa: BLE001 - a server that would not start or answer is a finding, with its words
            rows.append({"model": m, "status": "failed", "error": display.clip(f"{type(exc).__name__}: {exc}", 600)})
            progress(f"[bs] {m}: failed: {rows[-1]['error']}")
    return {"models": rows, "seed": SEED, "permutation_seed": PERMUTATION_SEED, "permutations": PERMUTATIONS,
            "alpha": ALPHA, "samples": samples, "paired": paired, "greedy_tokens": tokens, "prompts": list(prompts),
            "source": {k: f"{PINNED}: {v}" for k, v in data()["pinned_source"].items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="run folder: writes records/06_backend_sampling.json")
    ap.add_argument("--models", default=",".join(MODELS), help="embedded model keys or .gguf paths, comma-separated")
    ap.add_argument("--samples", type=int, default=SAMPLES, help="draws per server per setting")
    ap.add_argument("--paired", type=int, default=PAIRED, help="seeds both servers draw (same seed, same token?)")
    ap.add_argument("--tokens", type=int, default=GREEDY_TOKENS, help="greedy output tokens per prompt")
    ap.add_argument("--settings", default="",
                    help="only the settings whose name holds one of these words (comma-separated)")
    ap.add_argument("--no-concurrent", action="store_true", help="skip the concurrent greedy pass")
    ap.add_argument("--gpu-layers", type=int, default=0, help="-ngl (999 on a GPU build: sampling on the GPU)")
    args = ap.parse_args(argv)
    words = [w.strip().lower() for w in args.settings.split(",") if w.strip()]
    chosen = [s for s in SETTINGS if not words or any(w in s.name.lower() for w in words)]
    result = run([m for m in args.models.split(",") if m], (args.out / "logs") if args.out else None, chosen,
                 args.samples, args.paired, args.tokens, concurrent=not args.no_concurrent, gpu_layers=args.gpu_layers)
    record = build_record(result)
    if args.out:
        from lab.core import evidence

        print(evidence.write_record(args.out, "06_backend_sampling", record))
    v = record["summary"]
    print(f"[bs] verdict: {'recommend -bs' if v['recommend'] else 'do not recommend -bs'} "
          f"(greedy identical: {v['greedy_identical']}, concurrent: {v['concurrent_greedy'] or 'not run'}, "
          f"distributions that differ: {v['distributions_differ'] or 'none'}; known differences found: "
          f"{v['except'] or 'none'}; controls missed: {v['controls_missed'] or 'none'})")
    return 0 if any(m["status"] == "ok" for m in result["models"]) else 1


if __name__ == "__main__":
    sys.exit(main())
