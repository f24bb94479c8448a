"""What the by-hand track picks for a profile, from the lab's data and nothing else: the card's architecture, the
CUDA toolkit and driver branch for an Ubuntu release, the GGUF to download and its path under $LAB, the layers
llama.cpp offloads, the other multi-GPU split mode, and the card a CPU run shows the track for. Pure: it reads the
profile and lab/data (byhand.yaml, compat_rules.yaml), runs nothing. lab.serving.byhand turns these into steps.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from lab.core import facts as lab_facts
from lab.core.versions import cc_x10, version_tuple
from lab.predict import compat


@dataclass(frozen=True)
class Step:
    title: str
    commands: tuple[str, ...]
    why: str
    sources: tuple[str, ...]
    do_not: tuple[str, ...] = field(default=())
    stage: str = "install"  # "install" (notebook 02 shows it) or "serve" (notebook 04)

    def to_dict(self) -> dict:
        return {"title": self.title, "commands": list(self.commands), "why": self.why,
                "sources": list(self.sources), "do_not": list(self.do_not), "stage": self.stage}


def shell_word(word: str) -> str:
    """A shell word: "$LAB/..." in double quotes (the variable expands), anything else shlex-quoted."""
    return f'"{word}"' if word.startswith("$") else shlex.quote(word)


UBUNTU_RELEASES = ("22.04", "24.04")


# Every command that touches the lab's folder says "$LAB": the first step sets it (the profile's model_file,
# models/<file>, is resolved from that folder, not from the folder llama.cpp is built in).
LAB_VAR = "$LAB"
LAB_DIR_DEFAULT = "~/llm-lab"


def data() -> dict:
    """lab/data/byhand.yaml."""
    return lab_facts.load("byhand")


def rule(rule_id: str) -> dict:
    """One rule of lab/data/compat_rules.yaml by id."""
    return next(r for r in compat.rules() if r["id"] == rule_id)


def card_cc10(profile) -> int | None:
    cc = profile.gpu_compute_capability
    return cc_x10(cc) if cc else None


def cuda_arch(profile) -> str:
    """CMAKE_CUDA_ARCHITECTURES for the card: compute capability 7.0 → "70"."""
    cc = card_cc10(profile)
    if cc is None:
        raise ValueError(f"profile {profile.name}: gpu_compute_capability is not set; the build needs the card's "
                         "architecture (nvidia-smi --query-gpu=compute_cap --format=csv)")
    return str(cc)


def toolkit_for(profile, ubuntu: str) -> str:
    """The CUDA 12.x toolkit to install: the profile's when NVIDIA publishes it for this Ubuntu release and it can
    build for the card, else the newest 12.x in the driver table that does."""
    table = rule("driver_for_cuda_toolkit")["min_driver"]
    first = ubuntu_release(ubuntu)["first_cuda"]
    no_arch_from = rule("cuda13_drops_pre_turing")["first_major_without"]
    needs_12 = (card_cc10(profile) or 999) < rule("cuda13_drops_pre_turing")["min_capability"]
    usable = [t for t in table
              if version_tuple(t) >= version_tuple(first) and (not needs_12 or version_tuple(t)[0] < no_arch_from)]
    if profile.cuda_toolkit in usable:
        return profile.cuda_toolkit
    if not usable:
        raise ValueError(f"no CUDA toolkit in lab/data/compat_rules.yaml is published for Ubuntu {ubuntu} and builds "
                         f"for compute capability {profile.gpu_compute_capability}")
    return max(usable, key=version_tuple)


def driver_branch_for(profile, toolkit: str) -> int:
    """The driver branch: the profile's when it runs the toolkit, else the toolkit's minimum branch; never past the
    last branch for the card (580 for Volta)."""
    need = version_tuple(rule("driver_for_cuda_toolkit")["min_driver"][toolkit])[0]
    declared = version_tuple(profile.driver_version)[0] if profile.driver_version else None
    branch = declared if declared and declared >= need else need
    last = rule("last_driver_branch_for_volta")
    if (card_cc10(profile) or 999) < last["applies_below_capability"]:
        branch = min(branch, last["last_branch"])
    return branch


def ubuntu_release(release: str) -> dict:
    """lab/data/byhand.yaml's entry for an Ubuntu release the track covers."""
    for u in data()["ubuntu"]:
        if u["release"] == release:
            return u
    raise ValueError(f"Ubuntu {release}: the by-hand track covers {', '.join(UBUNTU_RELEASES)}")


def gguf_download(profile) -> dict | None:
    """{repo, file, source} for the profile's GGUF: the repository from lab/data/byhand.yaml (by model family),
    the file name from the profile's model_file. None when the lab knows no repository for the model."""
    from pathlib import PurePosixPath

    if not profile.model_file or profile.model_file.startswith("embedded:"):
        return None
    name = PurePosixPath(profile.model_file).name
    repo = next((r for r in data()["gguf_repos"] if profile.model_name.startswith(r["model_prefix"])
                 and name in r.get("files", [name])), None)
    if repo is None:
        return None
    from lab.model import weights

    pub = weights.published_file(name) or {}
    return {"repo": repo["repo"], "file": name, "source": repo["source"], "bytes": pub.get("bytes"),
            "sha256": pub.get("sha256")}


def model_path(profile) -> str:
    """The model's path under $LAB: the profile's model_file (the loader resolves a relative one from the lab's
    folder, lab.core.paths.ROOT: said as $LAB/<relative>, the same file on the user's clone)."""
    from pathlib import Path

    from lab.core.paths import ROOT

    mf = profile.model_file
    if not mf or mf.startswith("embedded:"):
        return f"{LAB_VAR}/models/MODEL.gguf"
    path = Path(mf)
    if not path.is_absolute():
        return f"{LAB_VAR}/{path.as_posix()}"
    return f"{LAB_VAR}/{path.relative_to(ROOT).as_posix()}" if path.is_relative_to(ROOT) else mf


def n_offloadable(profile) -> int | None:
    """llama.cpp's N in "offloaded N/N layers": every block the GGUF holds (block_count, which counts a Qwen3.8
    file's MTP block: 64 + 1 = 65) plus the output layer; llama.cpp counts n_layer_all + 1 (src/llama-model.cpp
    load_tensors) even though it skips the MTP block's tensors for plain decoding."""
    from lab.model import models

    try:
        arch = models.arch_for(profile)
    except Exception:  # an architecture the lab cannot read without the file: the step says N
        return None
    return arch.n_layers + arch.mtp_layers + 1


def other_split(profile):
    """A multi-GPU llama.cpp profile with the other split mode (layer <-> tensor), or None: the by-hand track
    prints both commands (lab/data/routes.yaml: -sm tensor needs f16 KV and -fa on, which build_command adds)."""
    if profile.gpu_count < 2 or profile.engine not in ("llama.cpp", "llama-cpp-python"):
        return None
    mode = "layer" if profile.split_mode == "tensor" else "tensor"
    update = {"split_mode": mode}
    if mode == "tensor":
        update.update(tensor_split=None, kv_cache_dtype="f16")  # -sm tensor splits evenly; no quantized KV
    return profile.model_copy(update=update)


def route_profile(profile, route: dict):
    """The profile a route (lab.predict.routes) runs as: this one, or its other split (`other_split`) when the route
    splits the other way (-sm tensor on a -sm layer profile: no -ts, f16 KV, as build_command then writes it)."""
    own = profile.split_mode or ("layer" if profile.gpu_count > 1 else "none")
    if route.get("split") in (None, "none", own):
        return profile
    alt = other_split(profile)
    return alt if alt is not None and alt.split_mode == route["split"] else profile


def card_profile(profile):
    """The profile whose by-hand track a notebook shows: this one when it has a GPU, else the seeds' card."""
    from lab.core import profiles

    return profile if profile.gpu_count > 0 else profiles.load(data()["default_card_profile"])
