"""Quant targets: the 27B-class models' weight bytes per quant type, the published sizes that check them, and
which vLLM checkpoint formats a profile's GPU runs.

`target_sizes` applies lab.model.quant_formats' size model to the 27B-class stand-ins of
lab/data/quant_types.yaml (the seeds' size claims are judged once, in lab.predict.claims, and shown in
notebook 03); `exact_gguf_bytes` is the exact answer lab.model.weights and the claims ledger ask for;
`published_size_checks` and `published_download_table` set the model beside published file sizes; and
`vllm_quant_plan` says which checkpoint formats the profile's GPU can run in vLLM and how to make them.
Pure over the shipped data (only `vllm_quant_plan` without `gpu_present` asks whether a GPU is here).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from lab.core.units import GB, GIB, MIB
from lab.core import evidence, facts
from lab.model import models
from lab.model.quant_formats import (DATA, QuantError, arch_tensor_specs, bits_per_weight,
                                     int4_group_bytes, naive_weight_bytes, predict_size)

TARGET_TYPES = ("F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_K_S", "Q4_0")


def target_model_ids(profile) -> list[str]:
    """The 27B-class stand-ins of quant_types.yaml, plus the profile's own stand-in when it names one."""
    ids = [e["id"] for e in facts.load(DATA, "target_models")["target_models"]]
    kind, _, ref = profile.model_architecture.partition(":")
    if kind == "config" and ref not in ids:
        ids.append(ref)
    return ids


def target_sizes(profile, types: Sequence[str] = TARGET_TYPES) -> list[dict]:
    """For each 27B-class stand-in and type: naive (params × bpw/8) and llama.cpp-mix bytes, GB and GiB.

    One row per (model, type), plus an INT4-g128 (AWQ/GPTQ) row per model. `params_check` compares the
    tensor list's parameter count with lab.model.models' (they must be equal)."""
    rows = []
    own = profile.model_architecture.partition(":")[2] if profile.model_architecture.startswith("config:") else None
    vram = profile.gpu_vram_mib * MIB if profile.gpu_vram_mib else None
    for mid in target_model_ids(profile):
        arch = models.stand_in(mid)
        specs = arch_tensor_specs(mid)
        n = sum(t.n_elements for t in specs)
        if n != arch.params:
            raise QuantError(f"{mid}: tensor list has {n} parameters, lab.model.models counts {arch.params}")
        entry = models.stand_in_entry(mid)
        common = {"model": entry["hf_repo"], "model_id": mid, "profile_model": mid == own, "params": n,
                  "source": entry["source"]}
        for q in types:
            pred = predict_size(specs, q, arch.n_layers, n_gqa=arch.n_heads // arch.n_kv_heads)  # IQ4_XS's mix needs it
            naive = naive_weight_bytes(n, q)
            rows.append({**common, "type": q, "nominal_bpw": bits_per_weight(q), "naive_bytes": naive,
                         "predicted_bytes": pred.tensor_bytes, "predicted_gb": pred.tensor_bytes / GB,
                         "predicted_gib": pred.tensor_bytes / GIB, "effective_bpw": pred.bits_per_weight,
                         "vs_naive_pct": 100 * (pred.tensor_bytes - naive) / naive,
                         "vram_left_gib": (vram - pred.tensor_bytes) / GIB if vram else None,
                         "arithmetic": pred.arithmetic(), "basis": "llama.cpp mix, per tensor"})
        int4 = int4_group_bytes(specs)
        rows.append({**common, "type": "INT4-g128 (AWQ/GPTQ)", "nominal_bpw": 4.0,
                     "naive_bytes": n // 2,
                     "predicted_bytes": int4["bytes"], "predicted_gb": int4["bytes"] / GB,
                     "predicted_gib": int4["bytes"] / GIB, "effective_bpw": 8 * int4["bytes"] / n,
                     "vs_naive_pct": 100 * (int4["bytes"] - n / 2) / (n / 2),
                     "vram_left_gib": (vram - int4["bytes"]) / GIB if vram else None,
                     "arithmetic": int4["arithmetic"], "basis": "4-bit groups of 128 + 16-bit embeddings/head"})
    return rows


def published_size_checks() -> list[dict]:
    """The size model against published file sizes (quant_types.yaml `published_sizes`): one row each."""
    rows = []
    for entry in facts.load(DATA, "published_sizes")["published_sizes"]:
        arch = models.stand_in(entry["model"])
        specs = arch_tensor_specs(entry["model"])
        unit = GIB if entry["unit"] == "GiB" else GB
        for q, published in entry["sizes"].items():
            pred = predict_size(specs, q, arch.n_layers, pure=bool(entry.get("pure")),
                                n_gqa=arch.n_heads // arch.n_kv_heads, imatrix=bool(entry.get("imatrix")))
            value = pred.tensor_bytes / unit
            rows.append({"check": entry["id"], "model": entry["model"], "type": q + (" (pure)" if entry.get("pure") else ""),
                         "published": published, "predicted": round(value, 3), "unit": entry["unit"],
                         "diff_pct": 100 * (value - published) / published, "source": entry["source"]})
    return rows


@lru_cache(maxsize=256)  # pure in its arguments and the shipped data; the claims ledger asks ~280 times per notebook
def gguf_parts(model_id: str, quant: str, imatrix: bool = False) -> dict | None:
    """The GGUF people download of stand-in `model_id` at `quant`, tensor by tensor (llama-quantize's mix over the
    conversion's tensors, MTP block included when the model has one: the counters of the mix rules count its
    attn_v and ffn_down too, as llama.cpp's do over n_layer_all), split the way llama.cpp places it:
      file        tensor bytes of the whole file (the download, less its header of metadata and tokenizer)
      mtp         the MTP block (skipped at load unless --spec-type draft-mtp)
      token_embd  the token embedding, which llama.cpp keeps in host memory (the input layer is never offloaded:
                  src/llama-model.cpp load_tensors, "CPU_Mapped model buffer")
      loaded      file − mtp: what llama.cpp loads for plain decoding (GPU + host)
      gpu         loaded − token_embd: what a full offload puts in "CUDA0 model buffer"
    None when the lab does not model that mix (AWQ/GPTQ, MoE, unknown ids)."""
    try:
        arch = models.stand_in(model_id)
        pred = predict_size(arch_tensor_specs(model_id, mtp=True), quant, arch.n_layers + arch.mtp_layers,
                            n_gqa=arch.n_heads // arch.n_kv_heads, imatrix=imatrix)
    except (QuantError, models.ModelConfigError, KeyError, ValueError, FileNotFoundError):
        return None
    first_mtp = f"blk.{arch.n_layers}."
    mtp = sum(c.nbytes for c in pred.choices
              if c.name.startswith("blk.") and int(c.name.split(".")[1]) >= arch.n_layers) if arch.mtp_layers else 0
    embd = sum(c.nbytes for c in pred.choices if c.name == "token_embd.weight")
    embd_type = next((c.type for c in pred.choices if c.name == "token_embd.weight"), None)
    loaded = pred.tensor_bytes - mtp
    blocks = [0] * (arch.n_layers + arch.mtp_layers)
    for c in pred.choices:
        if c.name.startswith("blk."):
            blocks[int(c.name.split(".")[1])] += c.nbytes
    return {"file": pred.tensor_bytes, "mtp": mtp, "mtp_layers": arch.mtp_layers, "mtp_first_block": first_mtp,
            "token_embd": embd, "token_embd_type": embd_type, "loaded": loaded, "gpu": loaded - embd,
            "block_count": arch.n_layers + arch.mtp_layers,
            # per block (trunk, then MTP) and the output layer's tensors (output, output_norm): what -sm layer places
            "blocks": tuple(blocks), "output": pred.tensor_bytes - sum(blocks) - embd}


def exact_gguf_bytes(model_id: str, quant: str, imatrix: bool = False, with_mtp: bool = False) -> int | None:
    """Tensor bytes llama.cpp loads for plain decoding from the GGUF of stand-in `model_id` at `quant` (`gguf_parts`
    "loaded": the published file less its MTP block, as lab.model.gguf_file.gguf_weights_bytes reads a real file);
    `with_mtp`: the whole file's tensor bytes. `imatrix`: made with an importance matrix (changes IQ4_XS's first
    ffn_down layers; the published i1-/bartowski files are). None when the mix is not modelled."""
    parts = gguf_parts(model_id, quant, imatrix)
    return None if parts is None else parts["file" if with_mtp else "loaded"]


HEADER_ALLOWANCE = 20_000_000  # bytes a GGUF's header may add to its tensor bytes (Qwen3.8-27B's: ~10 MB of tokenizer)
DOWNLOAD_TYPES = ("Q3_K_M", "IQ4_XS", "Q4_K_S", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "BF16")


def published_download_table(model_id: str = "qwen3.8-27b", types: Sequence[str] = DOWNLOAD_TYPES) -> list[dict]:
    """The GGUF sizes users download (quant_types.yaml `published_downloads`, each with its source) beside the
    lab's exact size for the same llama-quantize type (`exact_gguf_bytes`, with or without an
    imatrix as the published file was made): one row per published figure, and one lab-only row for each
    type nobody published. `verdict`: "exact" (a standard mix, equal to the printed digits), "agrees"
    (a rounded figure the lab's rounds to), "differs", "custom mix" (unsloth UD / bartowski _L / other
    overrides: the lab's standard mix is shown for scale) or "no size published"."""
    arch = models.stand_in(model_id)
    entries = [e for e in facts.load(DATA, "published_downloads")["published_downloads"] if e["model"] == model_id]
    rows = []
    for t in types:
        matched = [e for e in entries if e["type"] == t] or [None]
        for e in matched:
            imatrix = bool(e and e.get("imatrix"))
            lab = exact_gguf_bytes(model_id, t, imatrix=imatrix, with_mtp=bool(e and e.get("mtp")))
            if lab is None:
                raise QuantError(f"{model_id}: the lab has no exact size for {t}")
            row = {"type": t, "listed_as": e["listed_as"] if e else "(lab only)", "mix": e["mix"] if e else "standard",
                   "mtp": bool(e and e.get("mtp")),
                   "imatrix": imatrix, "published": e and e["size"], "unit": e["unit"] if e else "GB",
                   "lab_bytes": lab, "lab_gb": round(lab / GB, 3), "lab_gib": round(lab / GIB, 3),
                   "lab_bpw": round(8 * lab / arch.params, 3), "diff_pct": None, "verdict": "no size published",
                   "source": e["source"] if e else "lab.model.quant_formats.predict_size over lab.model.models' Qwen3.8-27B tensors"}
            if e and e["size"] is not None:
                unit = GIB if e["unit"] == "GiB" else GB
                digits = 0 if e.get("rounded") else (2 if e.get("rounding") == 0.01 else 3)
                lab_in_unit = round(lab / unit, digits)
                row["diff_pct"] = round(100 * (lab / unit - e["size"]) / e["size"], 2)
                # a listing of whole files includes the GGUF header (metadata, a 248K-token vocabulary and its
                # merges: about 10 MB) that the lab's tensor bytes leave out
                with_header = round((lab + HEADER_ALLOWANCE) / unit, digits)
                if e["mix"] != "standard":
                    row["verdict"] = "custom mix"
                elif e.get("includes_header") and lab_in_unit <= e["size"] <= with_header:
                    row["verdict"] = "agrees"
                elif lab_in_unit == e["size"]:
                    row["verdict"] = "agrees" if e.get("rounded") else "exact"
                else:
                    row["verdict"] = "differs"
            rows.append(row)
    return rows


# ================================================================ vLLM formats (pure)
def _compat_rule(rule_id: str) -> dict | None:
    for rule in facts.load("compat_rules", "rules")["rules"]:
        if rule.get("id") == rule_id:
            return rule
    return None


def vllm_quant_plan(profile, gpu_present: bool | None = None) -> dict:
    """Which vLLM checkpoint formats the profile's GPU can run, and how to make each one.

    Thresholds come from lab/data/compat_rules.yaml (quant_format_min_capability); the tools and
    commands from quant_types.yaml `vllm_routes`. With no GPU here (or `gpu_present=False`) the commands
    are a plan to run on a GPU machine, not something this notebook runs."""
    rule = _compat_rule("quant_format_min_capability")
    if rule is None:
        raise facts.DataError("compat_rules.yaml has no rule 'quant_format_min_capability'")
    formats = dict(rule["formats"])
    formats["GGUF"] = {"min": int(rule.get("gguf_min", 60))}
    cc_text = profile.gpu_compute_capability
    note = ""
    if cc_text is None:
        cc_text, note = "7.0", "this profile has no GPU: evaluated for the seeds' V100 (compute capability 7.0)"
    cc = int(round(float(cc_text) * 10))
    if gpu_present is None:
        gpu_present = bool(evidence.gpu_summary()["gpus"])
    model = "Qwen/Qwen3-32B"
    if profile.model_architecture.startswith("config:"):
        model = models.stand_in_entry(profile.model_architecture.split(":", 1)[1])["hf_repo"]
    out_dir = model.split("/")[-1]
    rows = []
    for route in facts.load(DATA, "vllm_routes")["vllm_routes"]:
        f = formats.get(route["format"]) or ({"min": int(route["min_capability"])} if "min_capability" in route else {})
        need = f.get("min")
        if need is None:
            runs, kernel = "unknown", "no capability rule for this format"
        elif cc < need:
            runs, kernel = "no", f"needs compute capability ≥ {need / 10:.1f}, this GPU is {cc / 10:.1f}"
        elif f.get("fast_from") and cc < f["fast_from"]:
            runs, kernel = "yes (slow kernel)", f.get("below_fast", "")
        else:
            runs, kernel = "yes", ""
        fill = lambda s: s.replace("{model}", model).replace("{out}", f"{out_dir}-{route['format'].lower()}")  # noqa: E731
        rows.append({"format": route["format"], "min_capability": None if need is None else need / 10,
                     "runs_here": runs, "why": kernel, "tool": route["tool"],
                     "commands": [fill(c) for c in route["commands"]], "serve": fill(route["serve"]),
                     "note": route.get("note", "").strip(), "source": route["source"]})
    return {"compute_capability": cc / 10, "note": note, "model": model,
            "status": "runnable here" if gpu_present else "plan (no GPU on this machine: run the commands on a GPU box)",
            "thresholds_source": rule["source"], "rows": rows}
