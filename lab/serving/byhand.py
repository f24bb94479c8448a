"""The by-hand track: the exact commands a GPU owner types, generated from the profile and the lab's data.

`steps(profile, ubuntu)` returns numbered steps — check the card, nouveau, the driver branch, a CUDA 12.x
toolkit (and what not to install), building llama.cpp for the card's architecture, the GGUF with its
checksum, the server, a curl smoke test, reading "offloaded N/N layers" — each with its commands, why,
and the sources of the facts it uses (lab/data/byhand.yaml, lab/data/compat_rules.yaml). Pure: it reads
the profile and the data, runs nothing. `python -m lab byhand PROFILE` prints them; notebooks 02 and 04
show them (the CPU default shows them for the seeds' card, byhand.yaml `default_card_profile`).
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from lab.core import facts as lab_facts
from lab.core.versions import cc_x10, version_tuple
from lab.predict import compat

UBUNTU_RELEASES = ("22.04", "24.04")


@dataclass(frozen=True)
class Step:
    title: str
    commands: tuple[str, ...]
    why: str
    sources: tuple[str, ...]
    do_not: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        return {"title": self.title, "commands": list(self.commands), "why": self.why,
                "sources": list(self.sources), "do_not": list(self.do_not)}


def data() -> dict:
    return lab_facts.load("byhand")


def _rule(rule_id: str) -> dict:
    return next(r for r in compat.rules() if r["id"] == rule_id)


def _cc10(profile) -> int | None:
    cc = profile.gpu_compute_capability
    return cc_x10(cc) if cc else None


def cuda_arch(profile) -> str:
    """CMAKE_CUDA_ARCHITECTURES for the card: compute capability 7.0 → "70"."""
    cc = _cc10(profile)
    if cc is None:
        raise ValueError(f"profile {profile.name}: gpu_compute_capability is not set; the build needs the card's "
                         "architecture (nvidia-smi --query-gpu=compute_cap --format=csv)")
    return str(cc)


def toolkit_for(profile, ubuntu: str) -> str:
    """The CUDA 12.x toolkit to install: the profile's when NVIDIA publishes it for this Ubuntu release and it can
    build for the card, else the newest 12.x in the driver table that does."""
    table = _rule("driver_for_cuda_toolkit")["min_driver"]
    first = _ubuntu(ubuntu)["first_cuda"]
    no_arch_from = _rule("cuda13_drops_pre_turing")["first_major_without"]
    needs_12 = (_cc10(profile) or 999) < _rule("cuda13_drops_pre_turing")["min_capability"]
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
    need = version_tuple(_rule("driver_for_cuda_toolkit")["min_driver"][toolkit])[0]
    declared = version_tuple(profile.driver_version)[0] if profile.driver_version else None
    branch = declared if declared and declared >= need else need
    last = _rule("last_driver_branch_for_volta")
    if (_cc10(profile) or 999) < last["applies_below_capability"]:
        branch = min(branch, last["last_branch"])
    return branch


def _ubuntu(release: str) -> dict:
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
    repo = next((r for r in data()["gguf_repos"] if profile.model_name.startswith(r["model_prefix"])), None)
    if repo is None:
        return None
    from lab.model import weights

    name = PurePosixPath(profile.model_file).name
    pub = weights.published_file(name) or {}
    return {"repo": repo["repo"], "file": name, "source": repo["source"], "bytes": pub.get("bytes"),
            "sha256": pub.get("sha256")}


def _model_file(profile) -> str:
    d = gguf_download(profile)
    if d:
        return f"models/{d['file']}"
    return profile.model_file if profile.model_file and not profile.model_file.startswith("embedded:") else "models/MODEL.gguf"


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


# ---------------------------------------------------------------- the steps
def _check_step(profile, ubuntu: str) -> Step:
    return Step("Check the card and the system", (
        "lspci -nn | grep -i nvidia",
        "lsb_release -rs",
        "uname -r",
    ), f"the card must show on the PCIe bus before any driver; this track is for Ubuntu {ubuntu} "
       f"(`lsb_release -rs`). The profile expects {profile.gpu_count} GPU(s) of compute capability "
       f"{profile.gpu_compute_capability}.", ("lab.serving.byhand (profile gpu_count, gpu_compute_capability)",))


def _nouveau_step() -> Step:
    n = data()["nouveau"]
    body = "\\n".join(n["lines"]) + "\\n"
    return Step("Keep nouveau off the card", (
        "lsmod | grep nouveau",
        f"printf '{body}' | sudo tee {n['file']}",
        "sudo update-initramfs -u",
        "sudo reboot",
    ), n["note"].strip(), (n["source"],))


def _driver_step(profile, toolkit: str) -> Step:
    d = data()
    branch = driver_branch_for(profile, toolkit)
    pkg = d["driver_package"].format(branch=branch)
    last = _rule("last_driver_branch_for_volta")
    volta = (_cc10(profile) or 999) < last["applies_below_capability"]
    need = _rule("driver_for_cuda_toolkit")["min_driver"][toolkit]
    do_not = [f"a driver branch past {last['last_branch']} ({last['description'].strip()})"] if volta else []
    do_not += [f"`{a['name']}` ({a['why']})" for a in d["avoid_packages"] if a["name"] == "cuda-drivers" and volta]
    return Step(f"Install the NVIDIA driver, branch {branch}", (
        "sudo apt-get update",
        f"sudo apt-get install -y {pkg}",
        f"sudo apt-mark hold {pkg}",
        "sudo reboot",
        "nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv",
    ), f"CUDA {toolkit} needs a driver ≥ {need}; "
       + (f"branch {last['last_branch']} is the last that drives this card, so hold the package." if volta else
          "hold the package so an upgrade does not change it under a working set-up."),
        (d["driver_source"].strip(), _rule("driver_for_cuda_toolkit")["source"].strip())
        + ((last["source"].strip(),) if volta else ()), tuple(do_not))


def _toolkit_step(profile, ubuntu: str, toolkit: str) -> Step:
    d = data()
    u = _ubuntu(ubuntu)
    major, minor = toolkit.split(".")
    pkg = d["toolkit_package"].format(major=major, minor=minor)
    keyring = d["cuda_keyring"]
    url = keyring["url"].format(repo=u["repo"])
    rule13 = _rule("cuda13_drops_pre_turing")
    needs_12 = (_cc10(profile) or 999) < rule13["min_capability"]
    do_not = [f"CUDA {rule13['first_major_without']}.x ({rule13['description'].strip()})"] if needs_12 else []
    do_not += [f"`{a['name']}` ({a['why']})" for a in d["avoid_packages"] if a["name"] != "cuda-drivers"]
    note = "" if toolkit == profile.cuda_toolkit else (
        f" The profile declares CUDA {profile.cuda_toolkit}, which NVIDIA does not publish for Ubuntu {ubuntu}"
        f" (first there: {u['first_cuda']}); {toolkit} is the nearest that is and still builds for this card.")
    return Step(f"Install the CUDA {toolkit} toolkit" + (f" (not {rule13['first_major_without']}.x)" if needs_12 else ""), (
        f"wget {url}",
        f"sudo dpkg -i {keyring['package']}",
        "sudo apt-get update",
        f"sudo apt-get install -y {pkg}",
        f"export PATH=/usr/local/cuda-{toolkit}/bin:$PATH",
        "nvcc --version",
    ), f"a versioned toolkit package installs exactly that release.{note}",
        (keyring["source"], u["source"], d["meta_packages_source"], rule13["source"].strip()), tuple(do_not))


def _build_step(profile, toolkit: str) -> Step:
    b = data()["llama_cpp_build"]
    v = profile.engine_version
    arch = cuda_arch(profile)
    folder = b["folder"].format(version=v)
    return Step(f"Build llama.cpp for compute capability {profile.gpu_compute_capability} (sm_{arch})", (
        "sudo apt-get install -y " + " ".join(b["packages"]),
        f"python3 -m pip download --no-deps --no-binary :all: {b['sdist'].format(version=v)}",
        f"tar xzf llama_cpp_python-{v}.tar.gz",
        f"cd {folder}",
        f"cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES={arch} "
        f"-DCMAKE_CUDA_COMPILER=/usr/local/cuda-{toolkit}/bin/nvcc",
        "cmake --build build --config Release -j $(nproc) --target llama-server llama-bench",
        "./build/bin/llama-server --version",
    ), f"the same llama.cpp the lab pins (vendored in llama-cpp-python {v}), built with CUDA for this card only "
       f"(CMAKE_CUDA_ARCHITECTURES={arch}): a binary without the card's architecture fails with \"no kernel image "
       "is available for execution on the device\".", (b["source"].strip(), _rule("llama_cpp_build_has_gpu")["source"].strip()))


def _download_step(profile) -> Step:
    d = gguf_download(profile)
    if not d:
        return Step("Get the model file", (
            f"sha256sum {_model_file(profile)}",
        ), f"the lab has no published download for {profile.model_name}; put the GGUF at {_model_file(profile)} "
           "and compare its sha256 with the one its publisher lists.", (data()["hf_sha256_source"].strip(),))
    url = f"https://huggingface.co/{d['repo']}/resolve/main/{d['file']}"
    path = f"models/{d['file']}"
    return Step(f"Download {d['file']} and check its sha256", (
        "mkdir -p models",
        f"curl -L --fail -C - -o {path} {url}",
        f"expected=$(curl -sI {url} | grep -i '^x-linked-etag' | tr -d '\"\\r' | awk '{{print $2}}')",
        f"echo \"$expected  {path}\" | sha256sum -c -",
    ), "the file is large: `-C -` resumes an interrupted download, and a truncated file fails the checksum "
       f"instead of failing later inside llama-server. (`{data()['hf_cli']['command'].format(repo=d['repo'], file=d['file'])}` "
       "does the same and checks the sha256 itself; `huggingface-cli download` was removed in huggingface_hub 1.0.)"
       + (f" Expect {d['bytes']:,} bytes, sha256 {d['sha256']}." if d.get("sha256") else ""),
        (d["source"], data()["hf_sha256_source"].strip(), data()["hf_cli"]["source"].strip()))


def _server_argv(profile, model_path: str) -> list[str]:
    from lab.serving import engines

    cmd = engines.build_command(profile)
    argv = ["./build/bin/llama-server"] + list(cmd.argv[1:])
    if "-m" in argv:
        argv[argv.index("-m") + 1] = model_path
    return argv


def server_command(profile) -> str:
    """The llama-server command line, as typed from the build folder (keys stay in $VARS)."""
    from lab.serving import engines

    cmd = engines.build_command(profile)
    words = [f'LLAMA_API_KEY="${src}"' for src in cmd.secret_env.values()]
    words += [shlex.quote(a) for a in _server_argv(profile, _model_file(profile))]
    return " ".join(words) + " 2>&1 | tee server.log"


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


def _server_step(profile) -> Step:
    from lab.serving import engines

    cmd = engines.build_command(profile)
    commands, why = (server_command(profile),), ""
    alt = other_split(profile)
    if alt is not None:
        commands += (f"# or -sm {alt.split_mode} instead (one of the two, not both): " + server_command(alt),)
        why = (f" The second line is the -sm {alt.split_mode} alternative: `python -m lab plan {profile.name}` "
               "lists both routes with their predicted single-stream speed and memory per card; -sm tensor is "
               "EXPERIMENTAL in the pinned llama.cpp (flash attention on, f16 KV, -c and -np fitted by hand).")
    return Step("Start the server", commands,
                "every flag is the one notebook 04 explains (its table gives each flag's reason and source); it "
                f"listens on {cmd.host}:{cmd.port} only." + why,
                ("lab.serving.engines.build_command (notebook 04)",
                 *(("lab/data/routes.yaml llama_tensor_split (llama.cpp docs/multi-gpu.md, src/llama-arch.cpp)",)
                   if alt is not None else ())))


def _smoke_step(profile) -> Step:
    from lab.serving import engines

    cmd = engines.build_command(profile)
    auth = f" -H \"Authorization: Bearer ${cmd.api_key_env}\"" if cmd.api_key_env else ""
    body = '{"prompt": "The capital of France is", "max_tokens": 16, "temperature": 0}'
    return Step("Try it with curl (a second terminal)", (
        f"curl -s {cmd.base_url}/health",
        f"curl -s {cmd.base_url}/v1/completions -H 'Content-Type: application/json'{auth} -d '{body}'",
    ), "/health answers {\"status\":\"ok\"} once the model is loaded; the completion returns JSON with `choices` "
       "and a `usage` block (prompt and completion tokens).", ("llama.cpp tools/server/README.md (/health, /v1/completions)",))


def _offload_step(profile) -> Step:
    o = data()["offload_log"]
    n = n_offloadable(profile)
    expect = o["pattern"].format(n=n if n else "N")
    return Step("Check that every layer is on the GPU", (
        "grep -E 'offloaded [0-9]+/[0-9]+ layers to GPU|CUDA[0-9]+ model buffer size' server.log",
        "nvidia-smi --query-gpu=memory.used,memory.total,utilization.gpu --format=csv",
    ), f"expect \"{expect}\"" + (f" ({n - 1} blocks in the file + the output layer)" if n else "") + ". "
       + o["note"].strip(),
        (o["source"],))


def steps(profile, ubuntu: str = "22.04") -> list[Step]:
    """The by-hand steps for a GPU profile served by llama.cpp (ValueError for profiles the track does not cover)."""
    if profile.gpu_count == 0:
        raise ValueError(f"profile {profile.name} has no GPU: the by-hand track is for GPU profiles "
                         f"(e.g. {data()['default_card_profile']})")
    if profile.engine not in ("llama.cpp", "llama-cpp-python"):
        raise ValueError(f"profile {profile.name} serves with {profile.engine}: the by-hand track covers llama.cpp "
                         "profiles; notebook 04 shows this engine's command and the seeds' commands corrected")
    toolkit = toolkit_for(profile, ubuntu)
    return [_check_step(profile, ubuntu), _nouveau_step(), _driver_step(profile, toolkit),
            _toolkit_step(profile, ubuntu, toolkit), _build_step(profile, toolkit), _download_step(profile),
            _server_step(profile), _smoke_step(profile), _offload_step(profile)]


def card_profile(profile):
    """The profile whose by-hand track a notebook shows: this one when it has a GPU, else the seeds' card."""
    from lab.core import profiles

    return profile if profile.gpu_count > 0 else profiles.load(data()["default_card_profile"])


# Notebook 02 shows the installation (system → build), notebook 04 the serving half (model → offload check).
PARTS = {"install": slice(0, 5), "serve": slice(5, None), "all": slice(0, None)}


def markdown(profile, ubuntu: str = "22.04", part: str = "all") -> str:
    """The steps as Markdown (numbered, commands in bash blocks, what not to install, sources); `part` picks
    the installation ("install") or serving ("serve") half."""
    card = card_profile(profile)
    head = (f"**By hand on {card.name}** (Ubuntu {ubuntu}; `python -m lab byhand {card.name} --ubuntu 24.04` for "
            "the other release)" + ("" if card is profile else
                                   f" — this run's profile, {profile.name}, has no GPU: these are the steps for the "
                                   "seeds' card."))
    try:
        found = steps(card, ubuntu)
    except ValueError as exc:
        return head + f"\n\n{exc}"
    out = [head]
    numbered = list(enumerate(found, 1))[PARTS[part]]
    for i, st in numbered:
        out.append(f"**{i}. {st.title}** — {st.why}")
        out.append("```bash\n" + "\n".join(st.commands) + "\n```")
        out += [f"- do not install: {d}" for d in st.do_not]
        out.append("<small>sources: " + "; ".join(st.sources) + "</small>")
    return "\n\n".join(out)


def script(profile, ubuntu: str = "22.04") -> str:
    """The steps as one commented shell listing (what `python -m lab byhand` prints)."""
    lines = [f"# By hand on {profile.name}, Ubuntu {ubuntu} (generated by `python -m lab byhand`)"]
    for i, st in enumerate(steps(profile, ubuntu), 1):
        lines += ["", f"# {i}. {st.title}", f"#    why: {st.why}"]
        lines += [f"#    do not install: {d}" for d in st.do_not]
        lines += [f"#    source: {s}" for s in st.sources]
        lines += list(st.commands)
    return "\n".join(lines)
