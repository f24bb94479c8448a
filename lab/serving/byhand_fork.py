"""The by-hand track for a profile served by the community Volta fork of vLLM (engine_build 1cat-vllm==VERSION,
lab/data/routes.yaml fork): the same system steps as llama.cpp's track (lab.serving.byhand: the card, nouveau, the
580 driver branch, Secure Boot, NVLink, the CUDA 12.8 toolkit), then the fork's one wheel in its own venv (Python
3.12, torch 2.10 cu128: a cu130 torch drops sm_70), the AWQ checkpoint into the lab's models/, the server command the
lab builds for the profile (lab.serving.vllm_command: the flag table's flags + the fork's), a curl smoke test and
`lab run` on the cards. Pure: the profile and the data. Every command runs as printed in a fresh shell once $LAB is
set (step 1); a piped command sets pipefail so a failing server is not hidden by tee.
"""
from __future__ import annotations

from lab.core import facts


def _fork() -> dict:
    return facts.load("routes")["fork"]


def fork_version(profile) -> str:
    return profile.engine_build.split("==", 1)[1]


def wheel_name(profile) -> str:
    return f"1cat_vllm-{fork_version(profile)}-cp312-cp312-linux_x86_64.whl"


def _venv(profile) -> str:
    return f"$LAB/{(profile.engine_python or '.venv-1cat/bin/python').rsplit('/bin/', 1)[0]}"


def _model_dir(profile) -> str:
    """The checkpoint folder under $LAB when it is in the lab's folder (as byhand_choices.model_path says a GGUF)."""
    from pathlib import Path

    from lab.core.paths import ROOT

    p = Path(profile.model_dir)
    if not p.is_absolute():
        return f"$LAB/{p.as_posix()}"
    try:
        return f"$LAB/{p.relative_to(ROOT).as_posix()}"
    except ValueError:
        return p.as_posix()


def _install_step(profile):
    from lab.serving.byhand_choices import Step

    f, venv, whl = _fork(), _venv(profile), wheel_name(profile)
    url = f"{f['repository']}/releases/download/v{fork_version(profile)}/{whl}"
    return Step(f"Install the Volta fork of vLLM ({profile.engine_build}) in its own venv", (
        "sudo apt-get install -y python3.12 python3.12-venv curl",
        f'python3.12 -m venv "{venv}"',
        f'curl -fL -o "/tmp/{whl}" {url}',
        f'"{venv}/bin/python" -m pip install --prefer-binary --no-cache-dir --extra-index-url '
        f'https://download.pytorch.org/whl/cu128 "/tmp/{whl}"',
        f'cd /tmp && "{venv}/bin/python" -c "import torch, vllm; print(vllm.__version__, torch.__version__, '
        'torch.cuda.get_arch_list())"',
    ), f"the fork ships one wheel since 1.2.1, bundling its V100 attention kernels (flash_attn_v100) and SM70 CUDA "
       f"extensions; it installs as the distribution 1cat-vllm and imports as `vllm` (engine_version "
       f"{profile.engine_version}: the upstream vLLM it is built on). Its torch is 2.10 for CUDA 12.8: expect "
       "'sm_70' in the arch list printed last (a cu130 torch has none). Python 3.12 and glibc >= 2.38 (Ubuntu "
       f"24.04) are what the wheel needs ({' '.join(f['needs'].split())}). The venv is the profile's engine_python, "
       "so `lab run` starts this vLLM. The import check runs from /tmp: inside a source checkout of the fork its "
       "vllm/ folder would shadow the wheel's compiled extensions.",
        (f"lab/data/routes.yaml fork install ({f['repository']}/blob/main/README.md; releases/tag/v{fork_version(profile)})",
         " ".join(f["install_note"].split())),
        do_not=("pip install vllm (PyPI's wheels from 0.20 on carry no sm_70 kernels: lab/data/vllm_volta.yaml)",
                "a cu130 torch (CUDA 13 cannot build or run sm_70)"))


def _download_step(profile):
    from lab.serving.byhand_choices import Step

    d = _model_dir(profile)
    repo = "philbert440/Qwen3.8-27B-W4A16-AWQ"
    return Step("Download the AWQ checkpoint into the lab's models/", (
        f'"{_venv(profile)}/bin/python" -m pip install -U huggingface_hub',
        f'"{_venv(profile)}/bin/hf" download {repo} --local-dir "{d}"',
        f'ls "{d}"/config.json "{d}"/*.safetensors',
    ), f"vLLM serves a Hugging Face folder (config.json + safetensors), not the GGUF; {repo} is the Qwen3.8-27B AWQ "
       "W4A16 checkpoint a fork user serves on a V100 (1Cat-vLLM #334). The fork's own Qwen3.8 release is FP8 at "
       "four cards; for two 32 GB cards AWQ leaves room for the KV cache (lab plan: weights 8.3 GiB per card).",
        ("https://github.com/1CatAI/1Cat-vLLM/issues/334 (philbert440/Qwen3.8-27B-W4A16-AWQ on one V100)",),
        stage="serve")


def _server_step(profile):
    from lab.serving import engines
    from lab.serving.byhand_choices import Step, shell_word as quote_word

    cmd = engines.build_command(profile)
    argv = [_venv(profile) + "/bin/vllm" if a.endswith("/vllm") else a for a in cmd.argv]
    from pathlib import Path

    here = Path(profile.model_dir).name
    argv = [_model_dir(profile) if Path(a).name == here and "/" in a else a for a in argv]
    env = " ".join(f"{k}={v}" for k, v in sorted(cmd.env.items()))
    line = f"cd /tmp && set -o pipefail && {env + ' ' if env else ''}{' '.join(quote_word(a) for a in argv)} 2>&1 | tee \"$LAB/server.log\""
    return Step("Start the server (tensor parallel over both cards)", (line,),
                "every flag is the lab's for this profile (notebook 04's table gives each flag's reason): the flag "
                "table's (--tensor-parallel-size, --max-model-len, --max-num-seqs, --gpu-memory-utilization, "
                "--dtype, --kv-cache-dtype) and the fork's own (lab/data/routes.yaml fork serve_flags). It starts "
                "outside any checkout of the fork (its vllm/ folder shadows the wheel), and the first request spends "
                "1-3 minutes compiling and warming up: do not time it. It listens on "
                f"{cmd.host}:{cmd.port} only.", ("lab.serving.engines.build_command (notebook 04)",
                                                  "lab/data/routes.yaml fork serve_tp2 and caveats"), stage="serve")


def _smoke_step(profile):
    from lab.serving import engines
    from lab.serving.byhand_choices import Step

    cmd = engines.build_command(profile)
    body = ('{"model": "' + profile.model_name + '", "prompt": "The capital of France is", "max_tokens": 16, '
            '"temperature": 0}')
    return Step("Try it with curl (a second terminal)", (
        f"curl -sf {cmd.base_url}/health && echo healthy",
        f"curl -s {cmd.base_url}/v1/completions -H 'Content-Type: application/json' -d '{body}'",
    ), "vLLM's /health answers 200 with an empty body once the model is loaded (so `-f` and the echo); the completion "
       "returns JSON with `choices` and a `usage` block.", ("vLLM docs, OpenAI-compatible server (/health, "
                                                            "/v1/completions)",), stage="serve")


def _lab_run_step(profile):
    from lab.serving.byhand_choices import Step

    return Step(f"Run the lab on the cards: {profile.name}", (
        'cd "$LAB"',
        f'.venv/bin/python -m lab run --profile {profile.name}',
    ), "the lab's own venv (`make setup` made it) runs every notebook; notebook 04 starts the fork through the "
       "profile's engine_python (the venv above), 05 compares the KV cache vLLM reports with the plan, 06 measures "
       f"the speed against `.venv/bin/python -m lab plan {profile.name}` (the vLLM model's prediction).",
        ("README \"Profiles\"",), stage="serve")


def steps(profile, system: list, tunnel) -> list:
    """The fork's track: the system steps lab.serving.byhand makes for every card (lab folder, checks, driver, Secure
    Boot, NVLink, toolkit), then the fork's install, model, server, smoke and lab run, then byhand's tunnel."""
    return [*system, _install_step(profile), _download_step(profile), _server_step(profile), _smoke_step(profile),
            _lab_run_step(profile), tunnel]


__all__ = ["steps", "wheel_name", "fork_version"]
