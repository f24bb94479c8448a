"""What an ask's card, backend, quant and OS mean for `lab predict` (lab.predict.card_speed): which calibration of the
per-token model a card on a backend uses, how a quant the lab has no per-tensor mix for is sized, the MTP answer at
the asked or published acceptance, a public row as an ask (`ask_of`), and the notes on what the published rows say
beside an answer (depth, a fallback calibration, -sm tensor with a quantized KV, Windows). Pure: lab/data and the public rows, never a GPU, a process or the network.
"""
from __future__ import annotations

import functools
import re

from lab.core import paths
from lab.predict import public_speed, roofline

MODEL_ID = "qwen3.8-27b"  # the model every public row and the lab's GPU profiles run (lab/data/public_speed.yaml)


def fraction_from(arch: str | None) -> tuple[float, str]:
    """(achieved fraction of datasheet bandwidth, where it came from): the architecture's own fitted rows, or, for an
    architecture without rows, the per-token model's fallback (the median of the fitted ones), said so."""
    ptm = roofline.per_token_model()
    if arch in ptm.fraction_by_arch:
        rows = ptm.rows_by_arch.get(arch, ())
        return ptm.fraction_by_arch[arch], f"{arch}: fitted on its own {len(rows)} row(s) ({', '.join(rows)})"
    fitted = ", ".join(f"{a} {v:.2f}" for a, v in sorted(ptm.fraction_by_arch.items()))
    return ptm.default_fraction, (f"FALLBACK: no {arch or 'unknown-architecture'} rows in the fit; the median of the "
                                  f"fitted architectures ({fitted}) is used")


def quant_plan(a) -> tuple[float | None, str | None, str | None]:
    """(weights_gb, mix_quant, note) for a llama.cpp ask whose quant the lab has no per-tensor mix for (IQ1-IQ3,
    Q2_K_S, Q3_K_L, unsloth's UD mixes): the download is the stated weights_gb, else params x the type's bits
    (lab/data/weight_bits.yaml: a UD mix at its published size, an i-quant at its nominal bpw), and its MTP block
    and token embedding are sized by the base type's mix (public_speed.gguf_type), as the public rows are. Nothing
    changes for a type the lab mixes exactly (Q4_K_M, IQ4_XS, ...) or for vLLM."""
    from lab.model import models, quant_targets, weights as weights_mod

    if a.engine != "llama.cpp" or quant_targets.gguf_parts(MODEL_ID, a.quant) is not None:
        return a.weights_gb, None, None
    base = public_speed.gguf_type(a.quant)
    if a.weights_gb is not None:
        return a.weights_gb, base, f"{a.quant}: the stated {a.weights_gb:g} GB download; its MTP block and token " \
                                   f"embedding sized as llama.cpp's {base} mix"
    if not weights_mod.is_known(a.quant):
        return None, None, None  # the schema names the allowed types
    size, basis = weights_mod.weights_bytes(a.quant, arch=models.stand_in(MODEL_ID))
    return size / 1e9, base, (f"{a.quant}: no per-tensor mix in the lab; sized {size / 1e9:.2f} GB = {basis}; give "
                              f"weights_gb for your file's own size")


def backend_plan(a, card: dict) -> tuple[str, list[str], list[str]]:
    """(calibration key, notes, problems) of the asked llama.cpp backend on this card: its own backend uses the
    card's architecture; another one (an AMD card on Vulkan) its own calibration "<arch>+<backend>"
    (public_speed.calibration_key), FALLBACK (the median fitted fraction) when no public row of it was fitted."""
    own = card.get("backend", "cuda")
    backend = a.backend or own
    bad = [] if backend in (own, "vulkan") else [f"backend {backend!r} does not run {card['name']}: {own} or vulkan"]
    key = public_speed.calibration_key(card["id"], backend)
    notes = []
    if key != card["arch"]:
        frac, how = fraction_from(key)
        notes.append(f"backend {backend} on {card['name']}: calibrated apart from {own} ({how})")
    return key, notes, bad


def windows_note(card: dict) -> str:
    """The OS is not modelled: each published row measured on Windows against the model's Linux prediction for its
    set-up (published ÷ predicted, lab/data/public_speed.yaml through public_check), this card's first."""
    check, rows = checked_rows()
    win = sorted((x for x in check["rows"] if public_speed.is_windows(rows[x["id"]]) and not x["outlier"]),
                 key=lambda x: not public_speed.same_card(x["gpu_id"], card["id"]))
    said = "; ".join(f"{x['id']} {x['published'] / x['predicted']:.2f}x" for x in win)
    return ("os windows is not modelled (predicted as Linux). Published Windows rows against the model's Linux "
            f"prediction for each (lab/data/public_speed.yaml; this card's first): {said or 'none'} - faster and "
            "slower both, so no one factor fits them")


def laptop_note(card: dict) -> str:
    """A laptop part (calibration.yaml gpus `laptop`) runs at its maker's power limit (TGP), which the model has no
    term for: the published laptop rows (plain decode) against the model's prediction for each, this card's first."""
    check, rows = checked_rows()
    lap = sorted((x for x in check["rows"] if public_speed.gpu_specs()[x["gpu_id"]].get("laptop")),
                 key=lambda x: not public_speed.same_card(x["gpu_id"], card["id"]))
    said = "; ".join(f"{x['id']} {x['published'] / x['predicted']:.2f}x" for x in lap)
    return (f"{card['name']} is a laptop part: its power limit (TGP) is not modelled, so the prediction is what the "
            "chip's datasheet bandwidth gives at the desktop cards' fitted fraction - an upper bound. Published laptop "
            f"rows against the model (lab/data/public_speed.yaml; this card's first): {said or 'none'}")


def mtp_answer(a, card: dict, plain: float, key: str | None = None) -> tuple[float | None, dict, str | None]:
    """(MTP tok/s, its terms, why_not) by lab.predict.mtp_model at the asked acceptance (else the public rows' for the
    card: same card first) and the asked n-max, else the n-max lab plan's routes pick (lab.predict.routes.mtp_speed):
    the predicted best of 1-4 (mtp_model.best_of), the one the routes table shows."""
    from lab.predict import mtp_model

    rows = public_speed.load()
    found = []
    for n in ([a.n_max] if a.n_max else list(mtp_model.N_VALUES)):
        rate, ids = (a.acceptance, []) if a.acceptance is not None else mtp_model.acceptance_for(card["id"], n, a.split, rows)
        if rate is not None:
            found.append((mtp_model.predict(plain, n, rate, key or card["arch"]), ids))
    if not found:
        return None, {}, (f"no acceptance rate for draft-mtp at n-max {a.n_max}: no public draft-mtp row at that n-max "
                          "(lab/data/public_speed.yaml); give --acceptance")
    best = mtp_model.best_of([f[0] for f in found])  # the n-max lab plan's routes pick (routes.mtp_speed)
    p, ids = next(f for f in found if f[0] is best)
    n_from = "given" if a.n_max else "the predicted best of n-max 1-4, as lab plan's routes"
    by_id = {r.id: r for r in rows}
    same = any(by_id[i].gpu_id and public_speed.same_card(by_id[i].gpu_id, card["id"]) for i in ids)
    terms = {"n_max": p["n_max"], "n_max_from": n_from,
             "acceptance_rate": p["rate"], "acceptance_from": "given" if not ids else
             f"public draft-mtp rows ({'same card' if same else 'FALLBACK: another card, none on this one'}): "
             + ", ".join(ids), "tokens_per_step": p["tokens_per_step"], "step_over_plain": p["step_over_plain"],
             "step_ms": p["step_ms"], "verify_ms_from": ("FALLBACK: " if "(no " in p["step_from"] else "")
             + p["step_from"] + " (lab/data/calibration.yaml mtp_step_model)", "break_even_rate": p["break_even_rate"],
             "flags": mtp_model.flags(p["n_max"]), "source": mtp_model.SOURCE}
    return p["tok_s"], terms, None


# ---------------------------------------------------------------- does it fit (the memory plan's verdict)
def _gib(n: float) -> str:
    return f"{n / 2**30:.2f}"


def memory_verdict(a, mem: dict, owners=None) -> tuple[dict, str | None]:
    """The memory plan's verdict for the fullest card, and the why_not when it does not fit; `owners`: a callable giving
    `owners_overhead`'s spread (a set-up that fits only at its low end is tight, not refused)."""
    w, kv, oh, budget = (mem["weights_bytes_per_device"], mem["kv_bytes_per_device"], mem["overhead_bytes"],
                         mem["budget_bytes"])
    part = {"fits": mem["fits"], "per_card_gib": round((w + kv + oh) / 2**30, 2), "budget_gib": round(budget / 2**30, 2),
            "weights_per_card_gib": round(w / 2**30, 2), "kv_and_state_per_card_gib": round(kv / 2**30, 2),
            "overhead_gib": round(oh / 2**30, 2), "max_context_per_slot": mem["max_context_tokens"],
            "source": "lab.predict.memory_plan (as lab plan)"}
    errors = [f["message"] for f in mem["findings"] if f["severity"] == "error"
              and f["id"] not in ("weights-do-not-fit", "kv-does-not-fit")]
    if w + oh > budget:
        return part, (f"does not fit: weights {_gib(w)} GiB + overhead {_gib(oh)} GiB per card > {_gib(budget)} GiB "
                      "before any KV cache (a smaller quant or more cards)")
    if not mem["fits"]:
        low = owners() if owners and a.engine == "llama.cpp" else None
        if low and w + kv + low["min_bytes"] <= budget:  # fits at what owners' loaded cards show: tight, not refused
            part["tight"] = (f"tight: {_gib(w + kv + oh)} GiB per card with the lab's {_gib(oh)} GiB for llama.cpp's "
                             f"buffers > {_gib(budget)} GiB, but owners' loaded cards imply {_gib(low['min_bytes'])}-"
                             f"{_gib(low['max_bytes'])} GiB for them ({low['n']} published rows that state their "
                             "loaded VRAM), so it fits at the low end; check nvidia-smi after loading")
            return part, (errors[0] if errors else None)
        return part, (f"does not fit: weights {_gib(w)} + KV and state {_gib(kv)} + overhead {_gib(oh)} = "
                      f"{_gib(w + kv + oh)} GiB per card > {_gib(budget)} GiB ({a.context:,} tokens over {a.slots} "
                      f"slot(s), {a.kv} KV; {mem['max_context_tokens']:,} tokens per slot would fit)")
    return part, (errors[0] if errors else None)


_computing: list = []  # owners_overhead's rows are predicted through card_speed, whose verdict asks it back
_OVERHEAD: dict = {}


def owners_overhead(predict, ask_type) -> dict | None:
    """What llama.cpp's own buffers (CUDA context, compute and output buffers) take on the published cards that state
    their loaded VRAM (public_speed.Row.vram_mib): that VRAM less the lab's own plan of the row's weights and KV (the
    row asked as typed, `ask_of`, and predicted by `predict`: lab.predict.card_speed.predict with its Ask).
    {"min_bytes", "max_bytes", "n", "ids"}; None while it is being computed or when no row states its VRAM. The lab's
    flat figure (runtime_overhead.yaml llama.cpp-gpu) sits inside the spread (`memory_verdict`)."""
    if _computing:
        return None
    rows = [r for r in public_speed.load() if r.vram_mib and r.engine == "llama.cpp" and r.speculative is None]
    key = tuple(r.id for r in rows)
    if key not in _OVERHEAD:
        _computing.append(True)
        try:
            implied = {r.id: r.vram_mib * 2**20 - (m["weights_per_card_gib"] + m["kv_and_state_per_card_gib"]) * 2**30
                       for r in rows if (m := predict(ask_of(r, ask_type))["memory"])}
        finally:
            _computing.clear()
        _OVERHEAD.clear()
        _OVERHEAD[key] = ({"min_bytes": min(implied.values()), "max_bytes": max(implied.values()), "n": len(implied),
                           "ids": ", ".join(sorted(implied))} if implied else None)
    return _OVERHEAD[key]


# ---------------------------------------------------------------- a public row as an ask
KV_TYPES = ("f16", "bf16", "q8_0", "q4_0")  # llama.cpp's -ctk types the lab models; others (turbo3) are asked as f16
VLLM_KV_TYPES = ("fp8", "fp8_e5m2", "fp8_e4m3")  # vLLM's --kv-cache-dtype the profile schema takes; "fp16 (auto)": f16
VLLM_QUANTS = (("awq", "AWQ-INT4"), ("gptq", "GPTQ-INT4"), ("fp8", "FP8"))
PROFILE_QUANT = re.compile(r"(?<![A-Z0-9])(UD-)?(IQ\d_(?:XXS|XS|NL|S|M)|Q\d_K(?:_(?:XL|S|M|L))?|Q\d_\d|BF16)(?![A-Z0-9])")


def quant_of(row: public_speed.Row) -> str | None:
    """The profile schema's model_quant a row's quant text names ("unsloth UD-Q4_K_XL" -> UD-Q4_K_XL,
    "AtomicChat IQ3_XXS" -> IQ3_XXS, "AWQ 4-bit" -> AWQ-INT4); None when it names none the schema takes (the lab's
    default type then sizes only the MTP block and the embedding inside the stated download)."""
    from lab.core.profiles import QUANT_TYPES

    text = (row.quant or "").upper()
    if row.engine != "llama.cpp":
        return next((q for word, q in VLLM_QUANTS if word.upper() in text), None)
    for m in PROFILE_QUANT.finditer(text):
        for name in (m.group(0), m.group(2)):
            if name in QUANT_TYPES:
                return name
            if name + "_M" in QUANT_TYPES:  # "Q3_K" is llama-quantize's alias of Q3_K_M
                return name + "_M"
    return None


def ask_of(row: public_speed.Row, ask_type):
    """The row as `lab predict` takes it (`ask_type`: lab.predict.card_speed.Ask). A vLLM row is asked as the vLLM
    model reads it (lab.predict.vllm_speed row_link, row_tokens): its link, else the fork's NVLink, and an MTP row
    at its own k and published tokens per step (as a llama.cpp MTP row at its own acceptance), so `--validate`'s
    coverage and the vLLM check give a row one answer."""
    from lab.predict import mtp_model, speculative_speed, vllm_speed

    spec = row.speculative
    llama = row.engine == "llama.cpp"
    mtp = spec is not None and spec.type.startswith("draft-mtp") and llama
    n_max, acceptance = (spec.n_max, mtp_model.acceptance_rate(row)) if mtp else (None, None)
    link = row.link
    if not llama:
        link = vllm_speed.row_link(row) if row.gpu_count > 1 else row.link
        k, tokens = vllm_speed.row_tokens(row)
        n_max, acceptance = k, speculative_speed.acceptance_for(tokens, k) if tokens else None
    depth = row.depth_tokens or None
    # no context stated but a depth: the context held that depth (the next 4K above it)
    context = row.context_tokens or (-(-(depth + 1) // 4096) * 4096 if depth else None)
    return ask_type(gpu=row.gpu_id or row.gpu, gpus=row.gpu_count, split=row.split_mode, backend=row.backend, os=row.os,
               engine="llama.cpp" if llama else "vllm", weights_gb=row.file_gb,
               quant=quant_of(row), kv=row.kv_type if row.kv_type in (KV_TYPES if llama else VLLM_KV_TYPES) else None,
               context=context, slots=1, depth=depth, link=link,
               spec="draft-mtp" if spec is not None else "none", n_max=n_max,
               p_min=spec.p_min if mtp else None, acceptance=acceptance)


# ---------------------------------------------------------------- what the published rows say beside an answer
@functools.lru_cache(maxsize=1)
def checked_rows() -> tuple[dict, dict]:
    """The per-token model against the public rows (lab.predict.public_check.check, with tensor_check's rows added)
    and those rows by id."""
    from lab.predict import public_check

    check = public_check.check()
    tensor = public_check.tensor_check()
    checked = {x["id"] for x in tensor["rows"]}
    return ({**check, "rows": check["rows"] + tensor["rows"],
             "skipped": [x for x in check["skipped"] if x["id"] not in checked] + tensor["skipped"]},
            {r.id: r for r in public_speed.load()})


def depth_note(depth: int, bytes_per_token: float | None, kv_bytes: float | None, card_id: str | None = None) -> str:
    """What the model does with depth (the KV and state read per token, nothing else) and how it fares on the public
    rows measured at depth (lab/data/public_speed.yaml depth_tokens; plain and -sm tensor), computed from the rows,
    not typed in: this card's rows by name, then all of them summarised."""
    from lab.predict import public_check

    check, rows = checked_rows()
    share = f" ({kv_bytes / bytes_per_token:.0%} of the {bytes_per_token / 1e9:.2f} GB a token reads)" \
        if bytes_per_token and kv_bytes is not None else ""
    deep = [x for x in check["rows"] if (rows[x["id"]].depth_tokens or 0) >= public_speed.DEEP_TOKENS]
    mine = [x for x in deep if card_id and public_speed.same_card(x["gpu_id"], card_id)]
    seen = ", ".join(f"{x['id']} at {rows[x['id']].depth_tokens:,} tokens: predicted {x['predicted']:.1f} vs published "
                     f"{x['published']:g} ({x['error']:+.0%})" for x in mine)
    s = public_check.summary([x["error"] for x in deep])
    over = sum(x["error"] > 0 for x in deep)
    every = (f"over all {s['n']} predicted rows at {public_speed.DEEP_TOKENS:,}+ tokens the prediction is above the published speed "
             f"in {over}, median |error| {s['median_abs_error']:.0%}, max {s['max_abs_error']:.0%}, growing with depth "
             "(not fitted: `.venv/bin/python -m lab predict --validate`)" if s["n"] else "none the model can predict")
    unchecked = [x for x in check["skipped"] if (rows[x["id"]].depth_tokens or 0) >= public_speed.DEEP_TOKENS]
    return (f"depth {depth:,}: modelled only as the KV cache and state read per token{share}; attention's extra work "
            f"at depth is not modelled. Published rows at {public_speed.DEEP_TOKENS:,}+ tokens (lab/data/public_speed.yaml): "
            + (f"on this card {seen}; " if seen else "") + every
            + (f"; {len(unchecked)} more it cannot check (" + ", ".join(sorted({x['reason'] for x in unchecked})) + ")"
               if unchecked else ""))


def fallback_note(card: dict) -> str:
    """For a card whose architecture has no rows in the fit: its own published rows (lab/data/public_speed.yaml), with
    why the model could not use them, so the fallback's guess stands beside what the card was measured to do."""
    check, rows = checked_rows()
    skipped = {s["id"]: s["reason"] for s in check["skipped"]}
    own = [r for r in rows.values() if r.gpu_id and public_speed.same_card(r.gpu_id, card["id"])
           and r.speculative is None]
    seen = "; ".join(f"{r.id}: {r.gpu_count} x, -sm {r.split_mode}, {r.quant or '?'}, {r.engine}: {r.decode_tok_s:g} "
                     f"tok/s ({'not checked: ' + skipped[r.id] if r.id in skipped else 'an outlier' if r.outlier else 'checked'})"
                     for r in own)
    return (f"{card['name']} ({card['arch']}): no row of its architecture is in the fit, so its bandwidth fraction "
            "and MTP step cost are FALLBACKS (see model); published on this card: " + (seen or "nothing")
            + " - a prediction far above these says the fallback does not carry to this card")


def tensor_kv_note(kv: str) -> str:
    """The pinned llama.cpp refuses -sm tensor with a quantized KV cache (engine_rules.yaml); the later builds public
    rows ran it on anyway, each with its first row's id and how many rows."""
    _, rows = checked_rows()
    ran: dict = {}
    for r in rows.values():
        if r.split_mode == "tensor" and r.engine == "llama.cpp" and r.kv_type in ("q8_0", "q4_0"):
            ran.setdefault(r.build or "?", []).append(r.id)
    said = ", ".join(f"{b} ({ids[0]}" + (f" and {len(ids) - 1} more)" if len(ids) > 1 else ")") for b, ids in ran.items())
    return (f"-sm tensor with a {kv} KV cache: the lab's pinned llama.cpp ({paths.LLAMA_CPP_PYTHON_VERSION}) refuses it "
            "(lab/data/engine_rules.yaml llama-split-tensor; docs/multi-gpu.md)"
            + (f"; published rows ran it on later builds: {said}" if ran else "")
            + f"; predicted as asked, with {kv} KV bytes")


__all__ = ["memory_verdict", "owners_overhead", "laptop_note", "mtp_answer", "quant_of", "ask_of", "KV_TYPES", "checked_rows", "depth_note", "fallback_note",
           "tensor_kv_note", "MODEL_ID", "fraction_from", "quant_plan", "backend_plan", "windows_note"]
