"""How many bytes are the weights of a model at a quant type: the one answer every module uses.

`weights_bytes(quant, arch=..., model_id=..., params=...)` returns (bytes, basis):
1. exact, when `model_id` is a stand-in lab.model.models ships and lab.model.quant_formats models llama.cpp's
   per-tensor mix for `quant` (GGUF types: lab.model.quant_targets.exact_gguf_bytes, quant_formats.predict_size over
   the stand-in's tensors, checked against llama-quantize);
2. else parameters × bits per weight from lab/data/weight_bits.yaml (the single bits-per-weight table,
   with its sources). Formats with `embedding_bits` (vLLM's AWQ/GPTQ/FP8...) keep the embeddings and
   output head at that width when the architecture's embedding parameter count is known.

The byte count is the tensor data (what is read once per decoded token and what occupies memory); a
GGUF file adds its header (metadata, tokenizer) on top.

`profile_weights(profile)` is the one answer to "how many bytes are this profile's weights": `lab plan`,
the memory plan (notebook 05), the roofline (notebook 06) and the hardware check's disk estimate (notebook 01)
all call it, so one profile shows one weight size. It returns (bytes, basis), the basis saying which rule
answered: the files the engine loads when they are on this machine, else the prediction above.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import re
from pathlib import Path

from lab.core import facts, paths
from lab.model import gguf_file, models, quant_targets

# The ledger's generic "INT4" (a 4-bit GPU format without a named layout) is sized as AWQ at group 128.
ALIASES = {"INT4": "AWQ-INT4"}


def formats() -> list[dict]:
    return facts.load("weight_bits", "formats")["formats"]


def weight_format(fmt: str) -> dict:
    """The weight_bits.yaml entry of `fmt` (id, bits, optional embedding_bits, source); KeyError if unknown."""
    fmt = ALIASES.get(fmt, fmt)
    for entry in formats():
        if entry["id"] == fmt:
            return entry
    raise KeyError(f"unknown weight format {fmt!r}; known: {', '.join(e['id'] for e in formats())}")


def bits_per_weight(fmt: str) -> float:
    """Effective bits per weight of `fmt` over a whole model (weight_bits.yaml `bits`)."""
    return float(weight_format(fmt)["bits"])


def is_known(fmt: str) -> bool:
    try:
        weight_format(fmt)
    except KeyError:
        return False
    return True


def weights_bytes(quant: str, arch=None, model_id: str | None = None,
                  params: float | None = None) -> tuple[int, str]:
    """(bytes, basis) of the weights at `quant`: exact for a modelled stand-in `model_id`, else
    parameters (`arch.params`, or `params`) × weight_bits.yaml bits. KeyError for an unknown quant with
    no exact answer; ValueError when there is no parameter count to multiply."""
    if model_id and (exact := quant_targets.exact_gguf_bytes(model_id, quant)) is not None:
        return exact, (f"llama.cpp's per-tensor types for {quant} over {model_id}'s tensors, less the MTP block it "
                       "loads only for --spec-type draft-mtp (lab.model.quant_formats.predict_size via "
                       "lab.model.quant_targets.gguf_parts, exact against llama-quantize)")
    entry = weight_format(quant)
    n = (arch.params if arch is not None and arch.params else None) or params
    if not n:
        raise ValueError(f"no parameter count to size {quant} weights"
                         + (f" ({arch.source})" if arch is not None else ""))
    emb = getattr(arch, "embedding_params", 0) if arch is not None else 0
    if "embedding_bits" in entry and emb:
        body = n - emb
        return (math.ceil(body * entry["bits"] / 8 + emb * entry["embedding_bits"] / 8),
                f"{body / 1e9:.2f}e9 params × {entry['bits']:g} bits + {emb / 1e9:.2f}e9 embedding/output "
                f"params × {entry['embedding_bits']:g} bits ({entry['id']}, lab/data/weight_bits.yaml)")
    return (math.ceil(n * entry["bits"] / 8),
            f"{n / 1e9:.2f}e9 params × {entry['bits']:g} bits ({entry['id']}, lab/data/weight_bits.yaml)")


def params_from_name(*names: str | None) -> float | None:
    """"Qwen3-32B" -> 32e9, "SmolLM2-135M-Instruct" -> 135e6; None when no size is in the name."""
    for name in names:
        m = re.search(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)\s*([BM])(?![A-Za-z])", name or "")
        if m:
            return float(m.group(1)) * (1e9 if m.group(2) == "B" else 1e6)
    return None


def _served_safetensors(profile) -> tuple[tuple[int, str] | None, str]:
    """((bytes, basis), "") for the safetensors vLLM loads from the profile's HF folder (model_dir; cpu-vllm: a
    float32 copy of the GGUF, ~5x its size) when the folder is on this machine, else (None, why not)."""
    try:
        folder = paths.served_model_path(profile)
    except paths.VllmMissing as exc:  # the vLLM venv or its HF copy is not made yet
        return None, f"{profile.model_dir} is not on this machine: {exc}"
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None, f"{folder} has no *.safetensors"
    return (sum(f.stat().st_size for f in files),
            f"file: the {len(files)} safetensors vLLM loads from {folder.name} (on this machine)"), ""


def _model_file_gguf(profile) -> tuple[Path | None, str]:
    """The GGUF the engine loads (model_file) when it is on this machine, else (None, why not)."""
    if not profile.model_file:
        return None, "the profile sets no model_file"
    try:
        path = paths.model_path(profile.model_file)
    except (paths.SetupMissing, KeyError) as exc:  # embedded:<name> before set-up has run, or unknown
        return None, f"{profile.model_file} is not on this machine ({exc})"
    if not path.is_file():
        return None, f"{profile.model_file} is not on this machine"
    if path.suffix != ".gguf":
        return None, f"{profile.model_file} is not a .gguf file"
    return path, ""


def published_file(name: str) -> dict | None:
    """The published GGUF download named `name` (a file name, e.g. "Qwen3.8-27B-UD-IQ4_XS.gguf") when
    lab/data/quant_types.yaml `published_downloads` lists it with its exact byte count, else None."""
    for e in facts.load("quant_types", "published_downloads")["published_downloads"]:
        if e.get("file") == name and e.get("bytes"):
            return e
    return None


def published_checkpoints(int4_only: bool = True) -> list[dict]:
    """The published AWQ/GPTQ checkpoints of the seeds' model family (weight_bits.yaml `published_checkpoints`), each
    with `bytes` from its stated size and unit (GB = 1e9, GiB = 2^30 bytes)."""
    out = []
    for e in facts.load("weight_bits", "published_checkpoints")["published_checkpoints"]:
        if int4_only and "INT4" not in e["format"] and "W4" not in e["format"]:
            continue
        scale = {"GB": 1e9, "GiB": 2**30}[e["unit"]]
        out.append({**e, "bytes": e["size"] * scale})
    return out


# A download size the user states (`lab predict --weights-gb`): within `stated_download`, every weight answer for a
# profile starts from it, as from a published download (rule 3 of profile_weight_parts): its MTP block and token
# embedding sized by the lab's mix for model_quant. Scoped to the block, so no other caller sees it.
_STATED: contextvars.ContextVar[tuple[int, str] | None] = contextvars.ContextVar("stated_download", default=None)


@contextlib.contextmanager
def stated_download(file_bytes: int, basis: str):
    """Within the block, the profile's weights are a download of `file_bytes` bytes (MTP block included, as listed
    for download), `basis` saying who stated it; files on this machine and published sizes are not read."""
    token = _STATED.set((int(file_bytes), basis))
    try:
        yield
    finally:
        _STATED.reset(token)


def _parts(file: int, mtp: int, embd: int, basis: str, on_host_embd: bool = True) -> dict:
    loaded = file - mtp
    return {"file_bytes": file, "mtp_bytes": mtp, "token_embd_bytes": embd if on_host_embd else 0,
            "loaded_bytes": loaded, "gpu_bytes": loaded - (embd if on_host_embd else 0),
            "embedding_bytes": embd, "read_bytes": loaded - embd, "basis": basis}


def embedding_bytes(quant: str, arch) -> int:
    """Bytes of the token embedding alone (vocab × hidden) at `quant`'s embedding width (weight_bits.yaml
    `embedding_bits`, else `bits`): what a decoded token does not read in full (one row of it)."""
    entry = weight_format(quant)
    return math.ceil(arch.vocab_size * arch.hidden_size * float(entry.get("embedding_bits", entry["bits"])) / 8)


def profile_weight_parts(profile, arch=None) -> dict:
    """The profile's weights split the way its engine places them (bytes): file_bytes (the download), mtp_bytes (the
    MTP block a GGUF carries: llama.cpp skips it unless --spec-type draft-mtp), loaded_bytes (file − MTP: what
    plain decoding loads and reads per token), token_embd_bytes (llama.cpp keeps the token embedding in host memory:
    the input layer is never offloaded, its "CPU_Mapped model buffer"), gpu_bytes (loaded − host), and the basis.
    Rules in order, as `profile_weights` (which returns loaded_bytes), after a size stated within `stated_download`:
    1. vLLM's safetensors on this machine; 2. the GGUF model_file on this machine (its header);
    3. the published file of that name (quant_types.yaml published_downloads with `bytes`: the download as listed,
       its MTP block and embedding sized by the lab's mix for model_quant);
    4. predicted: llama.cpp's mix over the stand-in's tensors, MTP block included (quant_targets.gguf_parts);
    5. parameters × bits (no MTP, everything on the GPU: vLLM keeps its embedding there)."""
    from lab.model import quant_targets

    llama = profile.engine in ("llama.cpp", "llama-cpp-python")
    if (stated := _STATED.get()) is not None:
        kind, _, ref = profile.model_architecture.partition(":")
        mix = quant_targets.gguf_parts(ref, profile.model_quant) if kind == "config" and llama else None
        if mix is None:  # vLLM's checkpoint (or a GGUF the lab has no mix for): loaded whole, embedding on the card
            return _parts(stated[0], 0, 0, stated[1], on_host_embd=False)
        return _parts(stated[0], mix["mtp"], mix["token_embd"], f"{stated[1]}; its MTP block and token embedding "
                      f"sized as llama.cpp's {profile.model_quant} mix")
    if profile.engine == "vllm" and profile.model_dir:
        served, why = _served_safetensors(profile)
        if served is not None:
            return _parts(served[0], 0, 0, served[1], on_host_embd=False)
    else:
        path, why = _model_file_gguf(profile)
        if path is not None:
            try:
                h = gguf_file.read_gguf_header(path)
            except Exception as exc:  # a truncated download, a non-GGUF renamed .gguf
                raise ValueError(f"{path}: not a readable GGUF ({exc}); replace the file or fix model_file "
                                 f"in profile {profile.name}") from exc
            embd = sum(gguf_file._nbytes(shape, t) for name, shape, t in h.tensors if name == "token_embd.weight")
            return _parts(h.tensor_bytes, h.mtp_tensor_bytes, embd, f"file: tensor bytes of {path.name} (on this machine)",
                          on_host_embd=llama)
    kind, _, ref = profile.model_architecture.partition(":")
    mix = quant_targets.gguf_parts(ref, profile.model_quant) if kind == "config" and llama else None
    pub = published_file(Path(profile.model_file).name) if profile.model_file and llama else None
    if pub is not None and mix is not None:
        return _parts(int(pub["bytes"]), mix["mtp"], mix["token_embd"],
                      f"published ({why}): {pub['file']} is {int(pub['bytes']):,} bytes ({pub['source']}); its MTP "
                      f"block and token embedding sized as llama.cpp's {profile.model_quant} mix", on_host_embd=llama)
    if mix is not None:
        return _parts(mix["file"], mix["mtp"], mix["token_embd"],
                      f"predicted ({why}): llama.cpp's per-tensor types for {profile.model_quant} over {ref}'s tensors, "
                      f"MTP block included (lab.model.quant_targets.gguf_parts, exact against llama-quantize)")
    b, basis = profile_weights(profile, arch)
    return _parts(b, 0, 0, basis, on_host_embd=False)


def tied(arch) -> bool:
    """Does the model use its token embedding as the output head too (SmolLM2, Gemma)? Then every token reads it
    whole (llama.cpp duplicates it onto the output layer's device) and nothing is subtracted."""
    return arch is not None and arch.embedding_params is not None and arch.embedding_params == arch.vocab_size * arch.hidden_size


def decode_read_bytes(quant: str, arch, model_id: str | None = None) -> tuple[int, str]:
    """(bytes, basis) of the weights one decoded token reads at `quant` (lab/data/calibration.yaml
    `read_per_token`): the weights the engine loads (`weights_bytes`: no MTP block) less the token embedding, of
    which a token reads one row (llama.cpp keeps it in host memory); a tied embedding counts whole. Exact llama.cpp
    mix for a modelled GGUF type, else parameters × bits less vocab × hidden at the embedding width."""
    if model_id and not tied(arch) and (parts := quant_targets.gguf_parts(model_id, quant)) is not None:
        return parts["gpu"], (f"llama.cpp's {quant} mix over {model_id}'s tensors: {parts['loaded'] / 1e9:.2f} GB loaded "
                              f"(no MTP block) less token_embd {parts['token_embd'] / 1e9:.2f} GB (host memory)")
    b, basis = weights_bytes(quant, arch=arch, model_id=model_id)
    if tied(arch):
        return b, basis + " (tied embedding: the output head, read whole)"
    emb = embedding_bytes(quant, arch)
    return b - emb, f"{basis}, less the token embedding {emb / 1e9:.2f} GB (one row read per token)"


def profile_read_bytes(profile, arch=None) -> tuple[int, str]:
    """(bytes, basis) of the weights one decoded token of `profile` reads (lab/data/calibration.yaml
    `read_per_token`): `profile_weight_parts` loaded bytes less the token embedding (llama.cpp keeps it in host
    memory; an engine that keeps it on the card reads one row of it); a tied embedding counts whole. When the
    embedding's size is not in the parts (vLLM's own safetensors) it is sized from the architecture at model_quant."""
    parts = profile_weight_parts(profile, arch)
    loaded = parts["loaded_bytes"]
    if arch is None:
        try:
            arch = models.arch_for(profile)
        except Exception:  # noqa: BLE001 - a gguf: architecture whose file is absent: cannot tell, count it as read
            arch = None
    if arch is None or tied(arch):
        why = "tied embedding: the output head, read whole" if arch is not None else "architecture unknown"
        return loaded, f"{parts['basis']}; token embedding counted as read ({why})"
    emb = parts["embedding_bytes"]
    if not emb:
        try:
            emb = embedding_bytes(profile.model_quant, arch)
        except KeyError:
            return loaded, f"{parts['basis']}; token embedding not sized ({profile.model_quant}): counted as read"
    if emb >= loaded:  # the files hold less than the architecture's embedding alone: they are not this model's
        return loaded, (f"{parts['basis']}; token embedding counted as read (the files, {loaded / 1e9:.2f} GB, are "
                        f"smaller than {profile.model_architecture}'s embedding, {emb / 1e9:.2f} GB)")
    return loaded - emb, f"{parts['basis']}; {loaded / 1e9:.2f} GB loaded less the token embedding {emb / 1e9:.2f} GB"


def profile_layer_bytes(profile, arch=None) -> dict | None:
    """The GPU part of a llama.cpp profile's weights as its -sm layer split places them: `blocks` (bytes per block,
    trunk then MTP blocks, as llama.cpp's blk.N), `output` (output head + final norm: the output layer's device) and
    `n_trunk`; the token embedding is in host memory and not here. From the GGUF header when the file is on this
    machine, else llama.cpp's mix over the stand-in (a published download's bytes scale it). None for vLLM and
    for what the lab cannot split by tensor."""
    from lab.model import quant_targets

    if profile.engine not in ("llama.cpp", "llama-cpp-python"):
        return None
    path = None if _STATED.get() is not None else _model_file_gguf(profile)[0]
    if path is not None:
        h = gguf_file.read_gguf_header(path)
        n_all = max((int(n.split(".")[1]) + 1 for n, _, _ in h.tensors if n.startswith("blk.")), default=0)
        blocks = [0] * n_all
        other = 0
        for name, shape, t in h.tensors:
            if name.startswith("blk."):
                blocks[int(name.split(".")[1])] += gguf_file._nbytes(shape, t)
            elif name != "token_embd.weight":
                other += gguf_file._nbytes(shape, t)
        mtp = n_all - (arch.n_layers if arch is not None else n_all)
        return {"blocks": blocks, "output": other, "n_trunk": n_all - max(mtp, 0), "basis": f"tensors of {path.name}"}
    kind, _, ref = profile.model_architecture.partition(":")
    mix = quant_targets.gguf_parts(ref, profile.model_quant) if kind == "config" else None
    if mix is None:
        return None
    parts = profile_weight_parts(profile, arch)
    scale = parts["gpu_bytes"] / mix["gpu"]  # 1 for the lab's mix; a published download's own recipe otherwise
    n_trunk = mix["block_count"] - mix["mtp_layers"]
    return {"blocks": [round(b * scale) for b in mix["blocks"]], "output": round(mix["output"] * scale),
            "n_trunk": n_trunk, "basis": f"llama.cpp's {profile.model_quant} mix over {ref}'s tensors"
                                         + (f", scaled x {scale:.3f} to the published download" if scale != 1 else "")}


def profile_weights(profile, arch=None) -> tuple[int, str]:
    """(bytes, basis) of the weights `profile`'s engine loads; the basis names the rule that answered:
    1. vLLM serving an HF folder (model_dir) that is on this machine: its safetensors' bytes;
    2. else (not an HF folder for vLLM) the GGUF model_file when it is on this machine: its tensor bytes;
    3. else predicted for model_quant (`weights_bytes`): exact llama.cpp mix for a config:<stand-in> GGUF quant,
       else parameters of the profile's architecture (`arch`, default lab.model.models.arch_for) × bits;
    4. else, when the architecture cannot be read (a gguf: architecture whose file is absent), the
       parameter count in model_name / model_stand_in_for × bits.
    Reads only the profile, the lab's data and the files the profile names (GGUF header, file sizes).
    ModelConfigError when no rule applies; ValueError naming the file when a present GGUF is unreadable.
    `profile_weight_parts` splits the same answer into download, MTP block, host and GPU parts. Within
    `stated_download` the stated size answers first (its loaded part)."""
    if _STATED.get() is not None:
        parts = profile_weight_parts(profile, arch)
        return parts["loaded_bytes"], parts["basis"]
    if profile.engine == "vllm" and profile.model_dir:
        served, why = _served_safetensors(profile)
        if served is not None:
            return served
    else:
        path, why = _model_file_gguf(profile)
        if path is not None:
            try:
                return gguf_file.gguf_weights_bytes(path), f"file: tensor bytes of {path.name} (on this machine)"
            except Exception as exc:  # a truncated download, a non-GGUF renamed .gguf
                raise ValueError(f"{path}: not a readable GGUF ({exc}); replace the file or fix model_file "
                                 f"in profile {profile.name}") from exc
        if profile.model_file and profile.engine in ("llama.cpp", "llama-cpp-python"):
            pub = published_file(Path(profile.model_file).name)
            kind, _, ref = profile.model_architecture.partition(":")
            if pub is not None and kind == "config":
                parts = profile_weight_parts(profile, arch)
                return parts["loaded_bytes"], parts["basis"]
    kind, _, ref = profile.model_architecture.partition(":")
    if arch is None:
        try:
            arch = models.arch_for(profile)
        except Exception as exc:  # a gguf: architecture whose file is absent, set-up not run
            params = params_from_name(profile.model_name, profile.model_stand_in_for)
            if not params:
                raise models.ModelConfigError(f"profile {profile.name}: cannot size the weights: {why}, the "
                                              f"architecture is unreadable ({exc}) and model_name has no size "
                                              "(e.g. 27B)") from exc
            b, basis = weights_bytes(profile.model_quant, params=params)
            return b, f"predicted ({why}; size from the name {profile.model_name!r}): {basis}"
    try:
        b, basis = weights_bytes(profile.model_quant, arch=arch, model_id=ref if kind == "config" else None)
    except (KeyError, ValueError) as exc:
        raise models.ModelConfigError(f"profile {profile.name}: cannot size {profile.model_quant} weights "
                                      f"({why}): {exc}") from exc
    return b, f"predicted ({why}): {basis}"


__all__ = ["ALIASES", "stated_download", "formats", "weight_format", "bits_per_weight", "is_known", "weights_bytes",
           "params_from_name", "published_file", "profile_weight_parts", "profile_weights", "embedding_bytes",
           "published_checkpoints", "tied", "decode_read_bytes", "profile_read_bytes", "profile_layer_bytes"]
