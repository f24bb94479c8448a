"""lab.serving.byhand: the commands a GPU owner types, generated from the profile and the lab's data, each tested."""
import re
import shlex
from pathlib import Path

import pytest

from lab.core import profiles
from lab.serving import byhand, byhand_choices
from lab.core.paths import ROOT
from lab.core.versions import version_tuple
from shared_byhand import LLAMA_GPU_PROFILES, V100, _step


def _all(profile_name):
    prof = profiles.load(profile_name)
    return [(u, st) for u in byhand_choices.UBUNTU_RELEASES for st in byhand.steps(prof, u)]


def test_there_are_gpu_profiles_to_cover():
    assert "v100-32g-x1" in LLAMA_GPU_PROFILES


@pytest.mark.parametrize("name", LLAMA_GPU_PROFILES)
def test_every_command_parses_as_shell_and_every_step_is_sourced(name):
    for ubuntu, st in _all(name):
        assert st.commands and st.sources, st.title
        for cmd in st.commands:
            words = shlex.split(cmd)  # raises on an unbalanced quote
            assert words, cmd



def test_v100_track_says_what_to_install_and_what_not():
    v100 = profiles.load("v100-32g-x1")
    for ubuntu in byhand_choices.UBUNTU_RELEASES:
        toolkit = byhand_choices.toolkit_for(v100, ubuntu)
        assert toolkit.startswith("12."), toolkit
        assert byhand_choices.driver_branch_for(v100, toolkit) <= 580
        text = byhand.script(v100, ubuntu)
        assert "LAB_CUDA_ARCH=70 CUDACXX=" in text  # what set-up then passes to cmake:
        from lab.setup import llama_build
        assert {"-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=70"} <= set(llama_build.cmake_flags("70"))
        assert f"cuda-toolkit-{toolkit.replace('.', '-')}" in text
        assert "do not install: CUDA 13.x" in text and "past 580" in text
        assert "blacklist nouveau" in text and "sha256sum -c -" in text
        # Qwen3.8-27B's GGUF: 64 blocks + the MTP block (block_count 65) + output; llama.cpp counts n_layer_all + 1
        assert "offloaded 66/66 layers to GPU" in text and "65 blocks in the file" in text
        # the profile's plain Q4_K_M: lmstudio-community's file of that name (unsloth removed its plain Q4_K_M)
        assert "hf download lmstudio-community/Qwen3.8-27B-GGUF Qwen3.8-27B-Q4_K_M.gguf" in text
        assert "huggingface-cli download" not in text.replace("`huggingface-cli download` was removed", "")
    assert byhand_choices.toolkit_for(v100, "22.04") == v100.cuda_toolkit  # the profile's 12.2 where NVIDIA publishes it
    assert byhand_choices.toolkit_for(v100, "24.04") >= "12.5"  # ubuntu2404 starts at 12.5


def test_profiles_the_track_does_not_cover_say_why():
    with pytest.raises(ValueError, match="no GPU"):
        byhand.steps(profiles.load("cpu-default"))
    assert byhand_choices.card_profile(profiles.load("cpu-default")).name == byhand_choices.data()["default_card_profile"]


def test_both_v100_profiles_and_byhand_give_one_driver_and_cuda_answer():
    """One answer for a V100 owner (issue 22): the same supported driver branch (R580: R535 reached its end of life
    in June 2026) and CUDA toolkit in both V100 profiles and in every `lab byhand` track built from them."""
    answers = set()
    for name in ("v100-32g-x1", "v100-32g-x2-nvlink"):
        prof = profiles.load(name)
        answers.add((version_tuple(prof.driver_version)[0], prof.cuda_toolkit))
        for ubuntu in byhand_choices.UBUNTU_RELEASES:
            toolkit = byhand_choices.toolkit_for(prof, ubuntu)
            answers.add((byhand_choices.driver_branch_for(prof, toolkit), toolkit))
    assert answers == {(580, "12.8")}, answers


def test_two_card_track_prints_layer_and_tensor_commands():
    """`lab byhand v100-32g-x2-nvlink`: the profile's -sm layer command, then the -sm tensor alternative (f16 KV,
    flash attention on, no -ts) and the plan's fastest route, each a comment saying which it is and a line to paste
    (issue 44: the fastest route was inside its comment line, so it could not be pasted); pipefail before them, so a
    server that fails ends the pipe `| tee server.log` with its own status."""
    step = next(st for st in byhand.steps(profiles.load("v100-32g-x2-nvlink")) if st.title == "Start the server")
    cd, pipefail, layer, tensor_said, tensor, fastest_said, fastest = step.commands
    assert cd == 'cd "$LAB"' and pipefail == "set -o pipefail"
    assert "-sm layer -ts 1/1" in layer and "-fa auto" in layer
    assert tensor_said.startswith("# or -sm tensor instead") and "$LLAMA_BIN" not in tensor_said
    assert "-sm tensor" in tensor and "-fa on" in tensor and "-ts" not in tensor and "-ctk f16 -ctv f16" in tensor
    # the plan's fastest llama.cpp route (issue 37: it was in no command the lab printed)
    assert fastest_said.startswith("# or the fastest route the lab predicts (llama-tensor-mtp, ")
    assert fastest_said.endswith("instead of the line above:")
    assert "-sm tensor" in fastest and "-ts" not in fastest and "--spec-type draft-mtp --spec-draft-n-max" in fastest
    one = next(st for st in byhand.steps(profiles.load("v100-32g-x1")) if st.title == "Start the server")
    cd, pipefail, server, fastest_said, fastest = one.commands
    assert "--spec-type" not in server and fastest_said.startswith("# or the fastest route the lab predicts (llama-one-mtp")
    assert fastest.endswith("--spec-type draft-mtp --spec-draft-n-max 2 2>&1 | tee server.log")


def test_tensor_split_commands_carry_the_known_hangs_and_the_workaround():
    """-sm tensor + MTP hangs llama-server on Qwen3.8-27B (llama.cpp #27122, #28252): the by-hand track's -sm tensor +
    MTP line sets LLAMA_GRAPH_REUSE_DISABLE=1 (the workaround #27122 reports) and says why, with the issues as
    sources; -sm tensor without MTP carries the #27750 warning; the -sm layer line sets nothing."""
    step = next(st for st in byhand.steps(profiles.load("v100-32g-x2-nvlink")) if st.title == "Start the server")
    _, _, layer, _, tensor, _, fastest = step.commands
    assert "LLAMA_GRAPH_REUSE_DISABLE" not in layer and "LLAMA_GRAPH_REUSE_DISABLE" not in tensor
    assert "-sm tensor" in fastest and "--spec-type draft-mtp" in fastest
    assert "LLAMA_GRAPH_REUSE_DISABLE=1 " in fastest.split('"$LLAMA_BIN/llama-server"')[0]
    assert "#27122" in step.why and "#28252" in step.why and "#27750" in step.why and "WARNING" in step.why
    for url in ("https://github.com/ggml-org/llama.cpp/issues/27122", "https://github.com/ggml-org/llama.cpp/issues/28252",
                "https://github.com/ggml-org/llama.cpp/issues/27750"):
        assert any(src.startswith(url) for src in step.sources), url
    one = next(st for st in byhand.steps(profiles.load("v100-32g-x1")) if st.title == "Start the server")
    assert not any("LLAMA_GRAPH_REUSE_DISABLE" in c for c in one.commands) and "#27122" not in one.why


ORDER = ["The lab's folder", "Check the card and the system", "Keep nouveau off the card", "Install the NVIDIA driver",
         "Secure Boot", "Check the link between", "Install the CUDA", "Build llama.cpp", "Download", "Run the lab on the card",
         "Measure the card in-process with llama-bench", "Start the server", "Try it with curl",
         "Check that every layer is on the GPU", "From your laptop"]


@pytest.mark.parametrize("name", V100)
def test_steps_go_from_a_bare_box_to_a_served_model_in_order(name):
    titles = [st.title for st in byhand.steps(profiles.load(name))]
    want = [t for t in ORDER if t != "Check the link between" or name.endswith("nvlink")]
    assert len(titles) == len(want) and all(t.startswith(w) for t, w in zip(titles, want)), titles
    stages = [st.stage for st in byhand.steps(profiles.load(name))]
    assert stages == sorted(stages)  # install steps (notebook 02), then serve steps (notebook 04)
    serve, install = (byhand.markdown(profiles.load(name), part=part) for part in ("serve", "install"))
    assert "Download" in serve and "Install the NVIDIA driver" not in serve
    assert "Install the NVIDIA driver" in install and "Download" not in install


def test_the_model_goes_where_the_profile_expects_it():
    """Into the lab's models/ ($LAB/models/<the profile's file name>), not the sdist's vendor/llama.cpp/models/."""
    prof = profiles.load("v100-32g-x1")
    name = Path(prof.model_file).name
    assert Path(prof.model_file) == ROOT / "models" / name  # what `lab run` opens on this clone
    dl = _step("v100-32g-x1", "Download")
    assert f'--local-dir "$LAB/models"' in dl.commands[2] and f" {name} " in dl.commands[2]
    assert dl.commands[-1] == f'echo "$expected  $LAB/models/{name}" | sha256sum -c -'
    for cmd in (*_step("v100-32g-x1", "Measure").commands, *_step("v100-32g-x1", "Start the server").commands):
        assert "vendor/llama.cpp/models" not in cmd and " models/" not in cmd
    assert _step("v100-32g-x1", "The lab's folder").commands[:2] == (
        'cd ~/llm-lab   # where you cloned or unpacked the lab on this box (README "Get the lab")', 'export LAB="$PWD"')
    # a file whose sha256 the lab's data lists is checked against that sha256 directly
    small = _step("rtx4060ti-16g", "Download").commands
    assert "hf download unsloth/Qwen3.8-27B-GGUF Qwen3.8-27B-UD-IQ4_XS.gguf" in small[2]
    assert small[-1] == ('echo "40fac4050e940397dbf13087afd50f4734a11805bf9d65ef8ddd7483470e6199  '
                         '$LAB/models/Qwen3.8-27B-UD-IQ4_XS.gguf" | sha256sum -c -')


@pytest.mark.parametrize("name", V100)
def test_lab_run_line_builds_for_the_card_with_the_12x_toolkit(name, monkeypatch):
    from lab.__main__ import build_parser
    from lab.setup import llama_build

    prof = profiles.load(name)
    for ubuntu in byhand_choices.UBUNTU_RELEASES:
        toolkit = byhand_choices.toolkit_for(prof, ubuntu)
        line = _step(name, "Run the lab", ubuntu).commands[-1]
        assert line == f"LAB_CUDA_ARCH=70 CUDACXX=/usr/local/cuda-{toolkit}/bin/nvcc make run PROFILE={name}"
        # the build step is the lab's own set-up with the same environment: one cache key, so one compile on the box
        build = _step(name, "Build llama.cpp", ubuntu).commands
        assert f"LAB_CUDA_ARCH=70 CUDACXX=/usr/local/cuda-{toolkit}/bin/nvcc make setup" in build
        assert not any(c.split()[0] == "cmake" or "pip download" in c for c in build), build
        assert f"cuda-toolkit-{toolkit.replace('.', '-')}" in " ".join(_step(name, "Install the CUDA", ubuntu).commands)
    env = dict(w.split("=", 1) for w in shlex.split(line) if "=" in w and not w.startswith("PROFILE"))
    monkeypatch.setenv("LAB_CUDA_ARCH", env["LAB_CUDA_ARCH"])
    assert llama_build.detect_cuda_arch() == "70" == byhand_choices.cuda_arch(prof)  # what set-up builds for
    args = build_parser().parse_args(["run", "--profile", name])  # what `make run PROFILE=` runs (Makefile)
    assert args.verb == "run" and args.profile == name
    apt = _step(name, "Build llama.cpp").commands[0]
    assert "ninja-build" in apt and "python3-venv" in apt


@pytest.mark.parametrize("name", V100)
def test_server_and_bench_flags_are_the_profiles(name):
    """The one command builder (engines.build_command) with the model under $LAB; the V100 profiles turn the
    hybrid's state copies off (--cache-ram 0 -ctxcp 0, measured on the H200: params comments)."""
    from lab.serving import engines

    prof = profiles.load(name)
    assert prof.server_args == ["--cache-ram", "0", "-ctxcp", "0"]
    line = byhand.server_command(prof)
    want = engines.build_command(prof, model_path="$LAB/models/Qwen3.8-27B-Q4_K_M.gguf").argv[1:]
    words = shlex.split(line.split(" 2>&1")[0])
    assert words[words.index("$LLAMA_BIN/llama-server") + 1:] == list(want)
    assert "--cache-ram 0 -ctxcp 0" in line and "--spec-type" not in line  # MTP only once the profiles use it
    bench = shlex.split(_step(name, "Measure").commands[-1])
    assert bench[:3] == ["$LLAMA_BIN/llama-bench", "-m", "$LAB/models/Qwen3.8-27B-Q4_K_M.gguf"]
    assert bench[bench.index("-p") + 1] == str(prof.bench_prompt_tokens) and bench[bench.index("-ngl") + 1] == "99"
    assert "-o" not in bench  # llama-bench's table, for a person


def test_secure_boot_step_reuses_what_lab_doctor_knows():
    from lab.diagnose import troubleshoot

    st = _step("v100-32g-x1", "Secure Boot")
    assert "mokutil --sb-state" in " ".join(st.commands) and "sudo mokutil --import /var/lib/shim-signed/mok/MOK.der" in st.commands
    symptom = re.search(r'prints "([^"]+)"', st.why).group(1)
    found = troubleshoot.diagnose(symptom + "\nnvidia-smi output\n")
    assert found and found[0].entry_id == "driver-not-loaded", found


def test_nvlink_check_only_on_two_cards():
    st = _step("v100-32g-x2-nvlink", "Check the link between")
    assert st.commands == ("nvidia-smi nvlink -s", "nvidia-smi topo -m") and "NV#" in st.why
    assert not [s for s in byhand.steps(profiles.load("v100-32g-x1")) if s.title.startswith("Check the link")]


def test_tunnel_reaches_the_loopback_ports():
    import re as _re

    st = _step("v100-32g-x1", "From your laptop")
    make_port = _re.search(r"^LAB_PORT \?= (\d+)", (ROOT / "Makefile").read_text(), _re.M).group(1)
    assert "ssh -f -N -L 8080:127.0.0.1:8080 USER@GPU-BOX" in st.commands
    assert f"ssh -f -N -L {make_port}:127.0.0.1:{make_port} USER@GPU-BOX" in st.commands
    assert profiles.load("v100-32g-x1").host == "127.0.0.1"


def test_no_profile_downloads_a_file_the_lab_knows_was_withdrawn():
    from lab.core import facts

    gone = {(e["repo"], e["file_name"]) for e in facts.load("quant_types", "published_downloads")["published_downloads"]
            if e.get("withdrawn")}
    assert ("unsloth/Qwen3.8-27B-GGUF", "Qwen3.8-27B-Q4_K_M.gguf") in gone
    for path in profiles.all_profiles():
        d = byhand_choices.gguf_download(profiles.load(path))
        assert d is None or (d["repo"], d["file"]) not in gone, (path.name, d)


@pytest.mark.parametrize("name", ("v100-32g-x1", "v100-32g-x2-nvlink", "rtx4060ti-16g"))
def test_byhand_comments_fit_100_columns_and_commands_stay_whole(name):
    """The why/source lines wrap at 100 columns (a URL longer than that stays whole); a command is never cut."""
    text = byhand.script(profiles.load(name))
    commands = {cmd for st in byhand.steps(profiles.load(name)) for cmd in st.commands}  # some are "# or ..." lines
    long = [line for line in text.splitlines() if line.startswith("#") and len(line) > 100 and line not in commands
            and not any(len(word) > 60 for word in line.split())]
    assert not long, long
    for st in byhand.steps(profiles.load(name)):
        for cmd in st.commands:
            assert cmd in text.splitlines()
