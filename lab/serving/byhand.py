"""The by-hand track: the exact commands a GPU owner types, generated from the profile and the lab's data.

`steps(profile, ubuntu)` returns numbered steps, from a bare Ubuntu box to a served model and a `lab run` on the
card: the lab's folder, check the card, nouveau, the driver branch, Secure Boot (MOK), the NVLink check on a
multi-GPU profile, a CUDA 12.x toolkit (and what not to install), building llama.cpp for the card's architecture,
the GGUF into the lab's models/ (where the profile's model_file points) with its checksum, `make run` on the card,
llama-bench, the server, a curl smoke test, reading "offloaded N/N layers", an SSH tunnel for a headless box —
each with its commands, why, and the sources of the facts it uses (lab/data/byhand.yaml,
lab/data/compat_rules.yaml, lab/data/troubleshooting.yaml). Pure: it reads the profile and the data, runs
nothing. `.venv/bin/python -m lab byhand PROFILE` prints them; notebooks 02 and 04 show them (the CPU default shows them
for the seeds' card, byhand.yaml `default_card_profile`). What it picks per profile: lab.serving.byhand_choices.
"""
from __future__ import annotations

import re
import shlex
import textwrap
from dataclasses import dataclass, field

from lab.core import display
from lab.core import facts as lab_facts
from lab.serving.byhand_choices import Step, shell_word
from lab.serving.byhand_choices import (LAB_DIR_DEFAULT, card_cc10, card_profile, cuda_arch, data, driver_branch_for,
                                        gguf_download, model_path, n_offloadable, other_split, route_profile, rule,
                                        toolkit_for, ubuntu_release)



# The shell variables the by-hand commands use, each with the one line that sets it (step 1 sets $LAB, the build
# step $LLAMA_BIN); `runnable` puts them in front of commands shown on their own (the report's "Run this").
def _lab_line(lab_dir: str) -> str:
    home = lab_dir.replace("~/", "$HOME/", 1) if lab_dir.startswith("~/") else lab_dir
    return f'export LAB="{home}"   # the folder you cloned or unpacked the lab into on this box'


def _bin_line() -> str:
    return data()["llama_cpp_build"]["bin"]


# Set by the shell itself or by the user's session: a block may use them as they are.
SHELL_GIVES = frozenset({"PATH", "HOME", "PWD", "USER", "CUDA_VISIBLE_DEVICES"})


def variables_used(text: str) -> list[str]:
    """The shell variables `text` reads ($NAME, ${NAME}), in order, each once ("$(...)" is not one)."""
    return list(dict.fromkeys(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text)))


def variables_set(text: str) -> set[str]:
    """The variables `text` assigns (NAME=..., export NAME=..., read NAME, for NAME in), at a line's or a command's
    start."""
    found = set(re.findall(r"(?:^|[;&|(]\s*|\bexport\s+)([A-Za-z_][A-Za-z0-9_]*)=", text, flags=re.M))
    found |= set(re.findall(r"\b(?:read|for)\s+([A-Za-z_][A-Za-z0-9_]*)", text))
    return found


def runnable(commands, lab_dir: str = LAB_DIR_DEFAULT) -> str:
    """Commands as one block that runs as pasted into a fresh shell: the lines that set the variables it uses ($LAB,
    $LLAMA_BIN) first, a clear stop for one only the user can set (an API key's variable), and `set -o pipefail`
    when it pipes (`llama-server … | tee server.log` otherwise ends 0 when the server fails)."""
    text = "\n".join(commands)
    used = [v for v in variables_used(text) if v not in variables_set(text) and v not in SHELL_GIVES]
    head = []
    if "LAB" in used or "LLAMA_BIN" in used:
        head += [_lab_line(lab_dir), 'cd "$LAB"']
    if "LLAMA_BIN" in used:
        head.append(_bin_line())
    head += [f': "${{{v}:?set {v} first (the profile names it)}}"' for v in used if v not in ("LAB", "LLAMA_BIN")]
    if re.search(r"(?<![|])\|(?![|])", text):
        head.append("set -o pipefail")
    return "\n".join(head + list(commands))


def _trouble(entry_id: str) -> dict:
    """One entry of lab doctor's knowledge base (lab/data/troubleshooting.yaml), read as data."""
    return next(e for e in lab_facts.load("troubleshooting", "entries")["entries"] if e["id"] == entry_id)


# ---------------------------------------------------------------- the steps
def _lab_step(profile, lab_dir: str) -> Step:
    return Step("The lab's folder", (
        f"cd {LAB_DIR_DEFAULT}   # where you cloned or unpacked the lab on this box (README \"Get the lab\")"
        + ("" if lab_dir == LAB_DIR_DEFAULT else f"; printed on {lab_dir}"),
        'export LAB="$PWD"',
        'test -f "$LAB/Makefile" && ls "$LAB/params"',
    ), f"the folder you cloned or unpacked the lab into, on the card's box: the profile's model_file "
       f"({model_path(profile)}) is resolved from it, and the later steps use $LAB (set it again in a new shell, "
       "e.g. after a reboot).",
        ("README \"Profiles\" (relative model paths are resolved from the project folder, the one with the Makefile)",))


def _check_step(profile, ubuntu: str) -> Step:
    return Step("Check the card and the system", (
        "lspci -nn | grep -i nvidia",
        "lsb_release -rs",
        "uname -r",
        "mokutil --sb-state",
    ), f"the card must show on the PCIe bus before any driver; this track is for Ubuntu {ubuntu} "
       f"(`lsb_release -rs`). The profile expects {profile.gpu_count} GPU(s) of compute capability "
       f"{profile.gpu_compute_capability}. \"SecureBoot enabled\" means the driver's module must be signed with an "
       "enrolled key: the step after the driver says how.",
        ("lab.serving.byhand (profile gpu_count, gpu_compute_capability)", data()["secure_boot"]["source"].strip()))


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
    last = rule("last_driver_branch_for_volta")
    volta = (card_cc10(profile) or 999) < last["applies_below_capability"]
    need = rule("driver_for_cuda_toolkit")["min_driver"][toolkit]
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
        (d["driver_source"].strip(), rule("driver_for_cuda_toolkit")["source"].strip())
        + ((last["source"].strip(),) if volta else ()), tuple(do_not))


def _secure_boot_step() -> Step:
    sb = data()["secure_boot"]
    entry = _trouble(sb["troubleshooting_id"])
    symptom = entry["matchers"][0]
    return Step("Secure Boot: enrol the driver's signing key (only when nvidia-smi fails)", (
        "nvidia-smi 2>&1 | head -2",
        *entry["commands"],
        f"sudo mokutil --import {sb['mok_der']}",
        "sudo reboot",
    ), f"with Secure Boot on, the kernel refuses a module signed with a key the firmware does not know and "
       f"nvidia-smi prints \"{symptom}\" (`lab doctor` recognises it: {entry['id']}). mokutil asks for a one-time "
       f"password; {sb['enroll'].strip()}. Then nvidia-smi lists the card. Skip this step when nvidia-smi already does.",
        (sb["source"].strip(), f"lab/data/troubleshooting.yaml {entry['id']}: " + "; ".join(entry["source"])))


def _nvlink_step(profile) -> Step:
    entry = _trouble("nvlink-inactive")
    n = profile.gpu_count
    if profile.nvlink_expected:
        expect = (f"`nvlink -s` lists each link of each of the {n} GPUs with a speed (25.781 GB/s per link on a "
                  "V100-SXM2), none <inactive>; `topo -m` shows NV# (bonded NVLinks) between the GPUs. "
                  f"Otherwise: {entry['fix']}")
    else:
        expect = ("the profile expects no NVLink: `topo -m` shows a PCIe path (PIX/PXB/PHB/NODE/SYS) between the GPUs, "
                  "which llama.cpp's layer split is fine with.")
    return Step(f"Check the link between the {n} GPUs", tuple(c for c in entry["commands"] if c.startswith("nvidia-smi")),
                expect, ("lab.measure.gpu_links (notebook 01 checks the same against the profile's nvlink_expected)",
                         "lab/data/captured_errors.yaml nvlink-inactive (a V100-SXM2's `nvidia-smi nvlink -s`)",
                         f"lab/data/troubleshooting.yaml {entry['id']}: " + "; ".join(entry["source"])))


def _toolkit_step(profile, ubuntu: str, toolkit: str) -> Step:
    d = data()
    u = ubuntu_release(ubuntu)
    major, minor = toolkit.split(".")
    pkg = d["toolkit_package"].format(major=major, minor=minor)
    keyring = d["cuda_keyring"]
    url = keyring["url"].format(repo=u["repo"])
    rule13 = rule("cuda13_drops_pre_turing")
    needs_12 = (card_cc10(profile) or 999) < rule13["min_capability"]
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
    arch = cuda_arch(profile)
    return Step(f"Build llama.cpp for compute capability {profile.gpu_compute_capability} (sm_{arch})", (
        "sudo apt-get install -y " + " ".join(b["packages"]),
        'cd "$LAB"',
        b["command"].format(arch=arch, toolkit=toolkit),
        b["bin"],
        '"$LLAMA_BIN/llama-server" --version',
    ), f"the lab's own set-up compiles the llama.cpp it pins (vendored in llama-cpp-python {profile.engine_version}) "
       f"with CUDA for this card only (CMAKE_CUDA_ARCHITECTURES={arch}, the CUDA {toolkit} nvcc) into its cache, "
       "once: `make run` later finds this build and skips the step, and $LLAMA_BIN is where its tools are. It takes "
       "minutes (README \"What set-up does\" has the measured time). A binary without the card's architecture fails "
       "with \"no kernel image is available for execution on the device\".",
        (b["source"].strip(), rule("llama_cpp_build_has_gpu")["source"].strip()))


def _download_step(profile) -> Step:
    d = gguf_download(profile)
    path = model_path(profile)
    if not d:
        return Step("Get the model file", (
            f"sha256sum {shell_word(path)}",
        ), f"the lab has no published download for {profile.model_name}; put the GGUF at {path} "
           "and compare its sha256 with the one its publisher lists.", (data()["hf_sha256_source"].strip(),),
            stage="serve")
    url = f"https://huggingface.co/{d['repo']}/resolve/main/{d['file']}"
    hf = data()["hf_cli"]
    folder = path.rsplit("/", 1)[0]
    check = (f"echo \"{d['sha256']}  {path}\" | sha256sum -c -" if d.get("sha256") else
             f"expected=$(curl -sI {url} | grep -i '^x-linked-etag' | tr -d '\"\\r' | awk '{{print $2}}')")
    return Step(f"Download {d['file']} into the lab's models/ and check its sha256", (
        f'mkdir -p {shell_word(folder)}',
        hf["install"],
        hf["command"].format(repo=d["repo"], file=d["file"], dir=shell_word(folder)),
        check,
        *(() if d.get("sha256") else (f"echo \"$expected  {path}\" | sha256sum -c -",)),
    ), f"{d['file']} is the file the profile names (model_file), in the folder it names; `hf download` resumes an "
       "interrupted download and checks the file's sha256 itself; `sha256sum -c` checks it again against "
       + ("the sha256 the lab's data lists" if d.get("sha256") else
          "the sha256 Hugging Face serves for it (its X-Linked-Etag header)")
       + ": a truncated file fails here, not later inside llama-server ("
       "`huggingface-cli download` was removed in huggingface_hub 1.0)."
       + (f" Expect {d['bytes']:,} bytes." if d.get("bytes") else ""),
        (d["source"].strip(), data()["hf_sha256_source"].strip(), hf["source"].strip()), stage="serve")


def _lab_run_step(profile, toolkit: str) -> Step:
    r = data()["lab_run"]
    line = r["command"].format(arch=cuda_arch(profile), toolkit=toolkit, profile=profile.name)
    return Step(f"Run the lab on the card: `make run PROFILE={profile.name}`", (
        'cd "$LAB"',
        line,
    ), f"set-up (cached in ~/.cache/llm-lab) finds the llama.cpp the build step compiled for sm_{cuda_arch(profile)} "
       f"(same LAB_CUDA_ARCH and CUDACXX: same cache key) and skips it, then every notebook runs on {profile.name}: it prints the run folder, the path of its "
       "report.html and the count of passed, warned and failed checks. On the card the GPU checks of notebook 01 "
       "read the real card, 04 serves the model from models/, 05 compares the KV cache llama.cpp allocates with the "
       f"plan, 06 measures the speed against `{display.lab_command('plan ' + profile.name)}`. Run it before starting a server of your own: the lab starts its own on port {profile.port}.",
        (r["source"].strip(),), stage="serve")


def _bench_step(profile) -> Step:
    from lab.model import llama_bench

    argv = llama_bench.command(model_path(profile), threads=profile.threads, n_prompt=profile.bench_prompt_tokens,
                               n_gen=profile.bench_output_tokens, n_gpu_layers=profile.n_gpu_layers,
                               tool="$LLAMA_BIN/llama-bench", output=None)
    return Step("Measure the card in-process with llama-bench", (
        'cd "$LAB"',
        " ".join(shell_word(a) for a in argv),
    ), f"pp{profile.bench_prompt_tokens} (prompt processing) and tg{profile.bench_output_tokens} (generation) in "
       "tokens per second, without a server: the ceiling the served speed is compared with (notebook 06 runs "
       "llama-bench with the same model, threads, lengths and GPU layers, from the lab's own build).", ("lab.model.llama_bench.command (notebook 06's in-process run: lab.measure.bench)",),
        stage="serve")


def _server_argv(profile, model_path: str) -> list[str]:
    from lab.serving import engines

    cmd = engines.build_command(profile, model_path=model_path)
    return ["$LLAMA_BIN/llama-server"] + list(cmd.argv[1:])


def server_command(profile, route_flags: str = "", env: dict | None = None) -> str:
    """The llama-server command line, as typed from the build folder (keys stay in $VARS). `route_flags`: a route's
    flags (lab/data/routes.yaml, e.g. "--spec-type draft-mtp --spec-draft-n-max 2") appended where the profile's
    command lacks them (a route of the other split runs as `byhand_choices.route_profile`); `env`: variables the
    route adds (a known issue's workaround, lab/data/routes.yaml llama_tensor_split known_issues)."""
    from lab.serving import engines

    cmd = engines.build_command(profile)
    words = [f"{k}={shlex.quote(str(v))}" for k, v in sorted({**cmd.env, **(env or {})}.items())]
    words += [f'LLAMA_API_KEY="${src}"' for src in cmd.secret_env.values()]
    argv = _server_argv(profile, model_path(profile))
    if route_flags.strip():  # the route's flags the command lacks (its split flags come from the profile's own)
        argv = engines.with_flags(argv, {f: v for f, v in engines.flag_values(route_flags).items() if f not in argv})
    words += [shell_word(a) for a in argv]
    return " ".join(words) + " 2>&1 | tee server.log"


def _server_step(profile) -> Step:
    from lab.predict import routes
    from lab.serving import engines

    cmd = engines.build_command(profile)
    issues = routes.data()["llama_tensor_split"]["known_issues"]
    commands, why, tensor = (server_command(profile),), "", profile.split_mode == "tensor"
    alt = other_split(profile)
    if alt is not None:
        commands += (f"# or -sm {alt.split_mode} instead (one of the two, not both):", server_command(alt))
        why = (f" The line after \"# or -sm {alt.split_mode}\" is the alternative: `{display.lab_command('plan ' + profile.name)}` "
               "lists both routes with their predicted single-stream speed and memory per card; -sm tensor is "
               "EXPERIMENTAL in the pinned llama.cpp (flash attention on, f16 KV, -c and -np fitted by hand).")
        tensor = True
    if tensor:
        why += " " + issues["without_mtp"]
    best = fastest_route(profile)
    if best is not None:
        mtp_tensor = best["split"] == "tensor" and best["mtp"]
        env = issues["mtp_workaround_env"] if mtp_tensor else None
        commands += (f"# or the fastest route the lab predicts ({best['id']}, {best['tok_s']:.1f} tok/s for one stream; "
                     f"{display.lab_command('plan ' + profile.name)}), instead of the line above:",
                     server_command(route_profile(profile, best), best["flags"], env))
        why += (f" The last line is the plan's fastest llama.cpp route, {best['id']}: the profile's command with "
                f"{best['flags']} (it needs {best['needs']}).")
        if mtp_tensor:
            why += (" " + issues["with_mtp"] + " That line sets "
                    + " ".join(f"{k}={v}" for k, v in env.items()) + " for this reason.")
    return Step("Start the server", ('cd "$LAB"', "set -o pipefail") + commands,
                "every flag is the profile's, the one command notebook 04 explains (its table gives each flag's "
                f"reason and source); it listens on {cmd.host}:{cmd.port} only." + why,
                ("lab.serving.engines.build_command (notebook 04)",
                 *(("lab/data/routes.yaml llama_tensor_split (llama.cpp docs/multi-gpu.md, src/llama-arch.cpp)",
                    *issues["sources"]) if tensor else ())), stage="serve")


def fastest_route(profile) -> dict | None:
    """The plan's fastest llama.cpp route for the profile (lab.predict.routes), when it is not the profile's own
    command: {id, tok_s, flags, needs}; None otherwise (no routes for the profile, or the profile is the fastest)."""
    from lab.predict import routes

    table = routes.route_table(profile)
    if not table or not table["fastest_llama_cpp"]:
        return None
    best = next(r for r in table["routes"] if r["id"] == table["fastest_llama_cpp"])
    return None if not best["flags"].strip() else best


def _smoke_step(profile) -> Step:
    from lab.serving import engines

    cmd = engines.build_command(profile)
    auth = f" -H \"Authorization: Bearer ${cmd.api_key_env}\"" if cmd.api_key_env else ""
    body = '{"prompt": "The capital of France is", "max_tokens": 16, "temperature": 0}'
    return Step("Try it with curl (a second terminal)", (
        f"curl -s {cmd.base_url}/health",
        f"curl -s {cmd.base_url}/v1/completions -H 'Content-Type: application/json'{auth} -d '{body}'",
    ), "/health answers {\"status\":\"ok\"} once the model is loaded; the completion returns JSON with `choices` "
       "and a `usage` block (prompt and completion tokens).", ("llama.cpp tools/server/README.md (/health, /v1/completions)",),
        stage="serve")


def _tunnel_step(profile) -> Step:
    from lab.serving import engines

    tn = data()["tunnel"]
    port = engines.build_command(profile).port
    return Step("From your laptop, when the box has no screen: an SSH tunnel", (
        "# on the laptop, not on the GPU box:",
        tn["command"].format(port=port),
        f"curl -s http://127.0.0.1:{port}/health",
        "# JupyterLab (`make lab` on the box), then open the URL with the token it prints:",
        tn["command"].format(port=tn["jupyter_port"]),
    ), f"the server and JupyterLab listen on 127.0.0.1 only (the profile's host, `make lab`): nothing on the "
       f"network reaches them. The tunnel forwards the laptop's port {port} (and {tn['jupyter_port']}) to the box's "
       "loopback over SSH, so no port is opened and no API key is needed; -N runs no remote command, -f puts the "
       "tunnel in the background (it lasts until that ssh process ends).",
        (tn["source"].strip(),), stage="serve")


def _offload_step(profile) -> Step:
    o = data()["offload_log"]
    n = n_offloadable(profile)
    expect = o["pattern"].format(n=n if n else "N")
    return Step("Check that every layer is on the GPU", (
        "grep -E 'offloaded [0-9]+/[0-9]+ layers to GPU|CUDA[0-9]+ model buffer size' server.log",
        "nvidia-smi --query-gpu=memory.used,memory.total,utilization.gpu --format=csv",
    ), f"expect \"{expect}\"" + (f" ({n - 1} blocks in the file + the output layer)" if n else "") + ". "
       + o["note"].strip(),
        (o["source"],), stage="serve")


def steps(profile, ubuntu: str = "22.04", lab_dir: str = LAB_DIR_DEFAULT) -> list[Step]:
    """The by-hand steps for a GPU profile served by llama.cpp (ValueError for profiles the track does not cover)."""
    if profile.gpu_count == 0:
        raise ValueError(f"profile {profile.name} has no GPU: the by-hand track is for GPU profiles "
                         f"(e.g. {data()['default_card_profile']})")
    if profile.engine == "vllm" and profile.engine_build:  # the Volta fork of vLLM: its own track, around these steps
        from lab.serving import byhand_fork

        toolkit = toolkit_for(profile, ubuntu)
        system = [_lab_step(profile, lab_dir), _check_step(profile, ubuntu), _nouveau_step(),
                  _driver_step(profile, toolkit), _secure_boot_step(),
                  *([_nvlink_step(profile)] if profile.gpu_count > 1 else []), _toolkit_step(profile, ubuntu, toolkit)]
        return byhand_fork.steps(profile, system, _tunnel_step(profile))
    if profile.engine not in ("llama.cpp", "llama-cpp-python"):
        raise ValueError(f"profile {profile.name} serves with {profile.engine}: the by-hand track covers llama.cpp "
                         "profiles; notebook 04 shows this engine's command and the seeds' commands corrected")
    toolkit = toolkit_for(profile, ubuntu)
    links = [_nvlink_step(profile)] if profile.gpu_count > 1 else []
    return [_lab_step(profile, lab_dir), _check_step(profile, ubuntu), _nouveau_step(), _driver_step(profile, toolkit),
            _secure_boot_step(), *links, _toolkit_step(profile, ubuntu, toolkit), _build_step(profile, toolkit),
            _download_step(profile), _lab_run_step(profile, toolkit), _bench_step(profile), _server_step(profile),
            _smoke_step(profile), _offload_step(profile), _tunnel_step(profile)]


# Notebook 02 shows the installation (system → build), notebook 04 the serving half (model → tunnel).
PARTS = ("install", "serve", "all")


def markdown(profile, ubuntu: str = "22.04", part: str = "all") -> str:
    """The steps as Markdown (numbered, commands in bash blocks, what not to install, sources); `part` picks
    the installation ("install") or serving ("serve") half."""
    card = card_profile(profile)
    head = (f"**By hand on {card.name}** (Ubuntu {ubuntu}; `{display.lab_command('byhand ' + card.name)} --ubuntu 24.04` for "
            "the other release)" + ("" if card is profile else
                                   f" — this run's profile, {profile.name}, has no GPU: these are the steps for the "
                                   "seeds' card."))
    try:
        found = steps(card, ubuntu)
    except ValueError as exc:
        return head + f"\n\n{exc}"
    out = [head, "`$LAB` is the folder you cloned the lab into (step 1 sets it); `$LLAMA_BIN` the folder of the "
                 "lab's llama.cpp tools (the build step sets it)."]
    if part == "serve":  # the steps that set them are the installation's: set them here, for a fresh shell
        out.append("In a new shell, first:\n\n```bash\n" + "\n".join([_lab_line(LAB_DIR_DEFAULT), 'cd "$LAB"', _bin_line()])
                   + "\n```")
    numbered = [(i, st) for i, st in enumerate(found, 1) if part == "all" or st.stage == part]
    for i, st in numbered:
        out.append(f"**{i}. {st.title}** — {st.why}")
        out.append("```bash\n" + "\n".join(st.commands) + "\n```")
        out += [f"- do not install: {d}" for d in st.do_not]
        out.append("<small>sources: " + "; ".join(st.sources) + "</small>")
    return "\n\n".join(out)


def script(profile, ubuntu: str = "22.04", lab_dir: str = LAB_DIR_DEFAULT) -> str:
    """The steps as one commented shell listing (what `.venv/bin/python -m lab byhand` prints, with this lab's folder)."""
    def comment(label: str, text: str) -> list[str]:  # ≤ 100 columns; the commands stay whole, to copy and paste
        return textwrap.wrap(text, 100, initial_indent=f"#    {label}: ", subsequent_indent="#        ",
                             break_long_words=False, break_on_hyphens=False)

    lines = [f"# By hand on {profile.name}, Ubuntu {ubuntu} (generated by `{display.lab_command('byhand')}`):",
             "# step by step, not as one script (reboots in between)"]
    for i, st in enumerate(steps(profile, ubuntu, lab_dir), 1):
        lines += ["", f"# {i}. {st.title}", *comment("why", st.why)]
        lines += [line for d in st.do_not for line in comment("do not install", d)]
        lines += [line for s in st.sources for line in comment("source", s)]
        lines += list(st.commands)
    return "\n".join(lines)
