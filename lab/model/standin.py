"""A synthetic stand-in for a profile's model file, made only when the user allows it.

A profile may name `model_synth: <stand-in id>` (e.g. "qwen3.8-27b"): the shape `lab synth` writes as a
random-weight GGUF when `model_file` is not on this machine. `lab run --synth-if-missing` (or
LAB_SYNTH_IF_MISSING=1) allows it; then the run uses a copy of the profile, written into the run folder, whose
model_file is the synthetic file and whose `model_synthetic: true` and model_name say so, and the run gets a
record (`00_model_stand_in`) with a warning check. Without the permission nothing is substituted: the run says
how to allow it and goes on as before (notebooks that need the model say it is missing).

Speed and memory of a random-weight file of the right shape and quant are the model's (decode reads every
weight once per token, whatever the values); its text is garbage and any acceptance rate of speculative
decoding measured on it is not the real model's.

    python -m lab.model.standin --profile h200-x1     make (or find) the profile's synthetic file, print its path
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

from lab.core import evidence, paths, profiles
from lab.core.profiles import Profile
from lab.model import hf_standin, models

RECORD = "00_model_stand_in"
SYNTH_SEED = 0
QUANT = "Q4_K"  # every weight matrix in Q4_K, the main type of the seeds' Q4_K_M (INT4) files
ENV_ALLOW = "LAB_SYNTH_IF_MISSING"


def allowed(flag: bool = False) -> bool:
    return flag or os.environ.get(ENV_ALLOW) == "1"


def missing_model(profile: Profile) -> Path | None:
    """The profile's model path when it is not there: a local GGUF (llama.cpp), or vLLM's HF-format model_dir
    without a config.json; None when present or n/a."""
    if profile.engine == "vllm":
        spec = profile.model_dir or ""
        if not spec or spec.startswith("hf:"):
            return None  # no folder named, or set-up's converted copy of an embedded model
        folder = paths.model_path(spec)
        return None if (folder / "config.json").exists() else folder
    if not profile.model_file or profile.engine not in ("llama.cpp", "llama-cpp-python"):
        return None
    if profile.model_file.startswith("embedded:"):
        return None  # set-up's business, never substituted
    path = paths.model_path(profile.model_file)
    return None if path.exists() else path


def make(arch_id: str, layers: int | None = None, progress: bool = True) -> dict:
    """The synthetic file of `arch_id` (`layers` to cut it short) from lab.model.synth's cache (written once, reused
    while its size is the predicted one: synth.ensure_written). Returns path, bytes, params, shape, made (written
    now), seconds."""
    import time

    from lab.model import synth

    t0 = time.time()
    path, planned = synth.cached_path(arch_id, layers, QUANT, SYNTH_SEED)
    arch, _kvs, plan, size = planned
    path = synth.ensure_written(path, planned, SYNTH_SEED, progress)
    return {"path": str(path), "bytes": path.stat().st_size, "params": size["params"],
            "description": synth.describe(arch, plan, size, QUANT), "made": path.stat().st_mtime >= t0,
            "seconds": round(time.time() - t0, 1)}


def make_vllm(profile: Profile) -> dict:
    """vLLM's stand-in: the config + tokenizer folder served with --load-format dummy (lab.model.hf_standin); the
    weights vLLM fills at load time are what a bf16 checkpoint of that shape holds (or its --quantization's)."""
    import time

    t0 = time.time()
    arch = models.stand_in(profile.model_synth)
    folder = hf_standin.make(profile.model_synth, paths.cache_dir(), paths.engine_python(profile))
    params = models.params_billions(arch)
    return {"path": str(folder), "bytes": 0, "params": params,
            "description": f"{profile.model_synth}: config and tokenizer only; vLLM draws random weights at load "
                           f"(--load-format dummy), ≈ {params:.1f} B parameters" if params else profile.model_synth,
            "made": True, "seconds": round(time.time() - t0, 1)}


def cached_path(arch_id: str, layers: int | None = None) -> Path:
    """Where `make` keeps (or will keep) that stand-in: `lab cache` asks which synthetic files are still used."""
    from lab.model import synth

    return synth.cached_path(arch_id, layers, QUANT, SYNTH_SEED)[0]


def substituted_profile(profile: Profile, source_path: Path, synth_path: Path) -> dict:
    """The profile's settings with the synthetic file in place of the model, labelled as such."""
    data = yaml.safe_load(source_path.read_text())
    data.update(model_file=str(synth_path), model_synthetic=True,
                model_name=f"{profile.model_name} [synthetic random weights]")
    return data


def check_row(profile: Profile, made: dict, original: Path) -> dict:
    from lab.core.checks import Check

    size = (f"{made['bytes'] / 1e9:.2f} GB, " if made["bytes"] else "config and tokenizer; vLLM draws the weights, ")
    return Check("model is a synthetic stand-in", "warn",
                 f"{made['path']} ({size}random weights of {profile.model_synth}'s shape)",
                 f"the real model file {original}",
                 "Speed and memory numbers hold for the real model's shape and quant; text quality, perplexity and "
                 "speculative-decoding acceptance do not. Put the real GGUF at model_file to measure those.",
                 "lab/model/synth.py (random-weight GGUF of a stand-in's shape)").to_dict()


def for_run(profile: Profile, profile_path: Path, run_dir: Path, allow: bool, progress: bool = True) -> Path | None:
    """Called by `lab run`: the path of the substituted profile written into run_dir, or None (no substitution:
    the model is there, the profile names no model_synth, or the user did not allow it — then it says how)."""
    original = missing_model(profile)
    if original is None or not profile.model_synth:
        return None
    if not allow:
        print(f"[run] note: {original} is missing; profile {profile.name} can use a synthetic random-weight "
              f"stand-in of {profile.model_synth}'s shape (speed and memory only): rerun with --synth-if-missing "
              f"or {ENV_ALLOW}=1", file=sys.stderr, flush=True)
        return None
    print(f"[run] {original} is missing: using a synthetic stand-in of {profile.model_synth}'s shape",
          file=sys.stderr, flush=True)
    if profile.engine == "vllm":
        made = make_vllm(profile)
        data = yaml.safe_load(profile_path.read_text())
        data.update(model_dir=made["path"], model_synthetic=True,
                    model_name=f"{profile.model_name} [synthetic random weights]",
                    server_args=[*(data.get("server_args") or []), *hf_standin.LOAD_FORMAT])
    else:
        made = make(profile.model_synth, profile.model_synth_layers, progress=progress)
        data = substituted_profile(profile, profile_path, Path(made["path"]))
    sub_path = run_dir / f"profile-{profile.name}-synthetic.yaml"
    evidence.write_whole(sub_path, f"# Written by `lab run --synth-if-missing` from {profile_path}: {original} was missing, so\n"
                        f"# model_file is a random-weight GGUF of {profile.model_synth}'s shape (lab.model.synth, seed "
                        f"{SYNTH_SEED}).\n" + yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    profiles.load(sub_path)  # the substituted profile must still be valid
    record = {"title": "Model: a synthetic stand-in (random weights), not the real file",
              "summary": {"real_model_file": str(original), "synthetic_file": made["path"],
                          "synthetic_bytes": made["bytes"], "params": made["params"], "shape": made["description"],
                          "arch": profile.model_synth, "layers_override": profile.model_synth_layers,
                          "seed": SYNTH_SEED, "made_now": made["made"], "write_seconds": made["seconds"],
                          "profile_used": str(sub_path), "profile_given": str(profile_path),
                          "valid_for": "speed, memory, energy", "not_valid_for": "text quality, perplexity, "
                          "speculative-decoding acceptance rate"},
              "checks": [check_row(profile, made, original)]}
    evidence.write_record(run_dir, RECORD, record, sub_path)
    return sub_path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.model.standin", description=__doc__.split("\n")[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    try:
        prof = profiles.load(args.profile)
    except profiles.ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not prof.model_synth:
        print(f"error: profile {prof.name} names no model_synth (the stand-in id to write)", file=sys.stderr)
        return 2
    made = make(prof.model_synth, prof.model_synth_layers, progress=not args.no_progress)
    print(f"{'wrote' if made['made'] else 'found'} {made['path']} ({made['bytes']} bytes, {made['seconds']} s): "
          f"{made['description']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
