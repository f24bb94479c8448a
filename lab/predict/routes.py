"""Every route the lab knows for a V100 profile (lab/data/routes.yaml): llama.cpp -sm layer / tensor / one card,
with and without MTP, and the community vLLM fork (1Cat-vLLM) - single-stream tok/s, memory per card, what each
needs, and the published measurements nearest to it. `route_table(profile)` is the one function; `lab plan`
renders it (lab.predict.plan.routes_lines).

Speed bases: "predicted" (the lab's models: lab.predict.roofline's per-token model, lab.predict.tp_model),
"published" (a row of lab/data/public_speed.yaml on the same card and engine), or "predicted (MTP step model)":
llama.cpp MTP routes, lab.predict.mtp_model (expected tokens per step ÷ step cost: plain + n × (head pass + the
architecture's fitted verify ms), lab/data/calibration.yaml mtp_step_model). Every MTP figure goes through `mtp_speed`.
"""
from __future__ import annotations

import re

from lab.core import facts
from lab.predict import public_check, public_speed, roofline, tp_model

GB = 1e9


def data() -> dict:
    return facts.load("routes")


def mtp_speed(route: dict, plain_tok_s: float | None, rows: dict, gpu_id: str | None = None,
              split: str = "none") -> dict:
    """An MTP route's speed: {tok_s, basis, how, n_max, n_from, flags, sweep, published: {id, n_max, tok_s, predicted,
    error} | None}.

    llama.cpp routes: PREDICTED by lab.predict.mtp_model: the card's predicted plain speed, the step cost in plain
    tokens at each n-max 1-4 (head pass + the architecture's verify ms, fitted on the public rows) and the public
    rows' acceptance for the card; the n-max is the best of the sweep shown (mtp_model.best_of; a same-card published
    sweep that found another n-max is named beside it). The published row at that n-max (same card) stands beside it
    with the error. The fork's routes: `fork_speed` (lab.predict.vllm_speed)."""
    from lab.predict import mtp_model

    if plain_tok_s is None or gpu_id is None:
        return {"tok_s": None, "basis": "predicted (MTP step model)", "how": "plain speed unknown", "n_max": None,
                "n_from": None, "flags": route["flags"], "sweep": [], "published": None}
    sweep = mtp_model.sweep(plain_tok_s, gpu_id, split, list(rows.values()))
    by_n = {x["n_max"]: x for x in sweep}
    pick = mtp_model.best_of(sweep)  # the n-max the shown sweep says is fastest: one answer with its own figures
    n = pick["n_max"]
    measured = mtp_model.published_best_n(gpu_id, split, list(rows.values()))
    why_n = "the predicted best" + (f" (the card's published sweep: n-max {measured['n_max']}, {measured['id']})"
                                    if measured and measured["n_max"] != n else "")
    how = (f"{plain_tok_s:.1f} plain x {pick['tokens_per_step']:.2f} tok/step (rate {pick['rate']:.2f}) / step "
           f"{pick['step_over_plain']:.2f} plain tokens ({pick['step_from']})")
    pubs = [rows[i] for i in route["published"] if mtp_model.is_draft_mtp(rows[i])
            and rows[i].speculative.n_max in by_n]
    pub = (min(pubs, key=lambda r: (r.speculative.n_max != n, r.depth_tokens is not None, -r.decode_tok_s))
           if pubs else None)
    published = None
    if pub is not None:
        pred = by_n[pub.speculative.n_max]["tok_s"]
        published = {"id": pub.id, "n_max": pub.speculative.n_max, "tok_s": pub.decode_tok_s, "predicted": pred,
                     "error": pred / pub.decode_tok_s - 1,
                     "same_card": bool(pub.gpu_id and public_speed.same_card(pub.gpu_id, gpu_id))}
    base = route["flags"]
    return {"tok_s": pick["tok_s"], "basis": "predicted (MTP step model)", "how": how, "n_max": n, "n_from": why_n,
            "flags": f"{base} {mtp_model.flags(n)}".strip(), "sweep": sweep, "published": published}


def split_warning(engine: str, split: str, mtp: bool) -> str | None:
    """The known failures of llama.cpp -sm tensor with this model (routes.yaml llama_tensor_split.known_issues: with
    MTP the hangs, without it the instability), for every view that names the split (`lab plan`'s routes, `lab
    predict --split tensor`); None for other set-ups."""
    if engine != "llama.cpp" or split != "tensor":
        return None
    issues = data()["llama_tensor_split"]["known_issues"]
    return " ".join(issues["with_mtp" if mtp else "without_mtp"].split())


def tp_size(route: dict, profile) -> int:
    """The tensor-parallel size a fork route runs (its --tensor-parallel-size flag, else the profile's cards)."""
    m = re.search(r"--tensor-parallel-size (\d+)", route["flags"])
    return int(m.group(1)) if m else profile.gpu_count


def fork_speed(route: dict, profile, gpu_id: str, link: str | None, rows: dict) -> dict:
    """A fork (vLLM) route's speed by the lab's one vLLM model (lab.predict.vllm_speed.setup_speed, as `lab predict
    --engine vllm`): {tok_s, basis, how, flags, published: {id, tok_s, predicted, error} | None, n_max}. The
    route's first published row stands beside the prediction with the error."""
    from lab.predict import vllm_speed

    depth = profile.bench_prompt_tokens + profile.bench_output_tokens // 2
    said = re.search(r"MTP (\d)", route["flags"])  # a route that names its speculative tokens (fork-tp1-mtp: MTP 3)
    k = (int(said.group(1)) if said else vllm_speed.MTP_K) if route["mtp"] else None
    x = vllm_speed.setup_speed(gpu_id, tp_size(route, profile), route.get("weights_quant"), depth, "f16", link, k)
    pub = rows[route["published"][0]] if route["published"] else None
    published = None
    if pub is not None and x["tok_s"]:
        pred = vllm_speed.row_prediction(pub) if pub.gpu_id else None
        published = {"id": pub.id, "tok_s": pub.decode_tok_s, "predicted": pred,
                     "error": pred / pub.decode_tok_s - 1 if pred else None, "same_card": True}
    return {"tok_s": x["tok_s"], "basis": "predicted (vLLM model)", "how": x["how"], "n_max": k,
            "flags": route["flags"], "published": published}


def _llama_memory(profile, arch, split: str = "layer") -> dict:
    """Per-card bytes of a llama.cpp route from the memory plan of the profile in the route's split mode: -sm layer
    puts whole layers on each card (the fullest card counts: memory_plan.llama_layer_split), -sm tensor splits every
    matrix and the KV heads evenly. The token embedding stays in host memory in every split mode (llama-model.cpp:
    dev_input is the CPU), so what -sm tensor mirrors on each card is only the small tensors (norms): no extra."""
    from lab.predict import memory_plan

    if split == "tensor" and profile.gpu_count > 1:
        profile = profile.model_copy(update={"split_mode": "tensor", "tensor_split": None})
    mem = memory_plan.plan_memory(profile, arch)
    per_card = mem["weights_bytes_per_device"] + mem["kv_bytes_per_device"] + mem["overhead_bytes"]
    return {"per_card_bytes": per_card, "budget_bytes": mem["budget_bytes"], "fits": per_card <= mem["budget_bytes"],
            "memory_how": f"weights {mem['weights_bytes_per_device'] / GB:.2f} + KV and state "
                          f"{mem['kv_bytes_per_device'] / GB:.2f} + overhead {mem['overhead_bytes'] / GB:.2f} GB per card"
                          f" ({profile.context_tokens} tokens over {profile.parallel_slots} slots)"}


def _fork_memory(profile, arch, route: dict) -> dict:
    """Per-card bytes of a fork route at the fork's public flags: one sequence of 262,144 tokens, f16 KV, weights
    of route["weights_quant"] split over the cards, 0.88 of each card's memory (its --gpu-memory-utilization)."""
    from lab.model import weights as weights_mod
    from lab.predict import kvcache

    n = profile.gpu_count
    w, _ = weights_mod.weights_bytes(route["weights_quant"], arch, _model_id(profile))
    kv = kvcache.kv_cache_bytes(arch, 262144, 1, "f16", n)
    budget = int(0.88 * profile.gpu_vram_mib * 2**20)
    per_card = w / n + kv
    return {"per_card_bytes": per_card, "budget_bytes": budget, "fits": per_card <= budget,
            "memory_how": f"{route['weights_quant']} weights {w / n / GB:.2f} + KV and state {kv / GB:.2f} GB per card "
                          f"(one 262,144-token sequence, f16 KV) vs 0.88 x VRAM"}


def _model_id(profile) -> str:
    arch = profile.model_architecture or ""
    return arch.split(":", 1)[1] if arch.startswith("config:") else arch


def route_table(profile) -> dict | None:
    """The routes of a V100 profile (None for a profile routes.yaml does not cover): {"profile", "routes": [{id,
    engine, split, mtp, flags, needs, tok_s, basis, how, per_card_bytes, budget_bytes, fits, memory_how,
    published: [{id, gpu, tok_s, source}]}], "fastest", "fastest_llama_cpp"}. Pure: the profile and lab/data."""
    from lab.model import models
    from lab.predict import profile_speed

    spec = data()["profiles"].get(profile.name)
    if spec is None:
        return None
    rows = {r.id: r for r in public_speed.load()}
    arch = models.arch_for(profile)
    rl = profile_speed.roofline_for(profile)
    # bytes read per token on the card (weights + KV at the benchmark's depth), whatever bandwidth the profile declares
    bpt = rl["bytes_per_token"] or roofline.bytes_per_token(rl["weights_bytes"], rl["kv_bytes_per_seq"])
    gpu = roofline.gpu_spec_for(profile.gpu_name_pattern or profile.name)
    model = roofline.per_token_model()
    one = model.predict_tok_s(bpt, gpu["bandwidth_gb_s"], "datasheet", public_speed.FAMILY, gpu["arch"])
    link = spec.get("link")
    plain = {"none": (one, "per-token model, one card")}
    if link:
        hop = tp_model.pp_decode(tok_s_one_gpu=one, n_stages=profile.gpu_count, hidden=arch.hidden_size,
                                 link=tp_model.link_from(public_speed.link_figures()[link]))
        tp = public_check.tensor_tok_s(bpt, gpu["id"], link, profile.gpu_count, model)
        plain["layer"] = (hop["single_batch_tok_s"], f"per-token model, one card + {profile.gpu_count - 1} hop(s)")
        plain["tensor"] = (tp.pessimistic_tok_s, f"tp_model over {link}: comm {tp.comm_ms:.2f} ms/token "
                                                 f"(optimistic bound {tp.optimistic_tok_s:.1f})")
    out = []
    for r in spec["routes"]:
        llama = r["engine"] == "llama.cpp"
        base = plain.get(r["split"]) if llama else None
        mtp, fork = None, None
        if not llama:
            fork = fork_speed(r, profile, gpu["id"], link, rows)
            tok_s, basis, how = fork["tok_s"], fork["basis"], fork["how"]
        elif r["mtp"]:
            mtp = mtp_speed(r, base[0] if base else None, rows, gpu["id"], r["split"])
            tok_s, basis, how = mtp["tok_s"], mtp["basis"], mtp["how"]
        else:
            (tok_s, how), basis = base, "predicted"
        mem = (_llama_memory(profile, arch, r["split"]) if llama
               else _fork_memory(profile, arch, r))
        out.append({"id": r["id"], "engine": r["engine"], "split": r["split"], "mtp": r["mtp"],
                    "flags": mtp["flags"] if mtp else r["flags"], "needs": r["needs"], "tok_s": tok_s,
                    "basis": basis, "how": how, "mtp_n_max": mtp["n_max"] if mtp else None,
                    "mtp_n_from": mtp["n_from"] if mtp else None,
                    "mtp_sweep": mtp["sweep"] if mtp else [],
                    "mtp_published": (mtp or fork or {}).get("published"),
                    # a route for another model or set-up (routes.yaml applies: false): shown, never ranked
                    "applies": r.get("applies", True), "why_not": r.get("why_not"),
                    "warning": split_warning(r["engine"], r["split"], r["mtp"]),
                    **mem,
                    "published": [{"id": i, "gpu": rows[i].gpu, "tok_s": rows[i].decode_tok_s,
                                   "source": rows[i].source} for i in r["published"]]})
    ok = [x for x in out if x["fits"] and x["tok_s"] and x["applies"]]
    fastest = max(ok, key=lambda x: x["tok_s"])["id"] if ok else None
    llama_ok = [x for x in ok if x["engine"] == "llama.cpp"]
    return {"profile": profile.name, "bytes_per_token": bpt, "routes": out, "fastest": fastest,
            "fastest_llama_cpp": max(llama_ok, key=lambda x: x["tok_s"])["id"] if llama_ok else None}


__all__ = ["route_table", "mtp_speed", "fork_speed", "tp_size", "split_warning", "data"]
