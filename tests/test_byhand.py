"""lab.serving.byhand: the commands a GPU owner types, generated from the profile and the lab's data, each tested."""
import re
import shlex
import subprocess
import sys

import pytest

from lab.core import profiles
from lab.serving import byhand
from lab.core.paths import ROOT
from lab.core.versions import version_tuple

LLAMA_GPU_PROFILES = [p.stem for p in sorted((ROOT / "params").glob("*.yaml"))
                      if profiles.load(p).gpu_count > 0 and profiles.load(p).engine in ("llama.cpp", "llama-cpp-python")]


def _all(profile_name):
    prof = profiles.load(profile_name)
    return [(u, st) for u in byhand.UBUNTU_RELEASES for st in byhand.steps(prof, u)]


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
    for ubuntu in byhand.UBUNTU_RELEASES:
        toolkit = byhand.toolkit_for(v100, ubuntu)
        assert toolkit.startswith("12."), toolkit
        assert byhand.driver_branch_for(v100, toolkit) <= 580
        text = byhand.script(v100, ubuntu)
        assert "-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=70" in text
        assert f"cuda-toolkit-{toolkit.replace('.', '-')}" in text
        assert "do not install: CUDA 13.x" in text and "past 580" in text
        assert "blacklist nouveau" in text and "sha256sum -c -" in text
        # Qwen3.8-27B's GGUF: 64 blocks + the MTP block (block_count 65) + output; llama.cpp counts n_layer_all + 1
        assert "offloaded 66/66 layers to GPU" in text and "65 blocks in the file" in text
        # unsloth withdrew its plain Q4_K_M; the standard mix the lab predicts is lmstudio-community's
        assert "hf download lmstudio-community/Qwen3.8-27B-GGUF Qwen3.8-27B-Q4_K_M.gguf" in text
        assert "huggingface-cli download" not in text.replace("`huggingface-cli download` was removed", "")
    assert byhand.toolkit_for(v100, "22.04") == v100.cuda_toolkit  # the profile's 12.2 where NVIDIA publishes it
    assert byhand.toolkit_for(v100, "24.04") >= "12.5"  # ubuntu2404 starts at 12.5


def test_profiles_the_track_does_not_cover_say_why():
    with pytest.raises(ValueError, match="no GPU"):
        byhand.steps(profiles.load("cpu-default"))
    assert byhand.card_profile(profiles.load("cpu-default")).name == byhand.data()["default_card_profile"]


def _help_flags() -> set[str]:
    from lab.core import paths

    try:
        server = paths.tool("llama-server")
    except paths.SetupMissing as exc:
        pytest.skip(str(exc))
    out = subprocess.run([str(server), "--help"], capture_output=True, text=True, timeout=60)
    return set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", out.stdout + out.stderr))


@pytest.mark.tools
@pytest.mark.parametrize("name", LLAMA_GPU_PROFILES)
def test_server_flags_exist_in_the_pinned_llama_server(name):
    flags = _help_flags()
    command = byhand.server_command(profiles.load(name))
    used = [w for w in shlex.split(command.split(" 2>&1")[0]) if w.startswith("-")]
    assert used and not [f for f in used if f not in flags], f"unknown to llama-server --help: {used}"


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "lab", *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.mark.tools
def test_cli_prints_the_track_and_refuses_a_cpu_profile():
    ok = run_cli("byhand", "v100-32g-x1", "--ubuntu", "24.04")
    assert ok.returncode == 0 and "cuda-toolkit-12-" in ok.stdout and "ubuntu2404" in ok.stdout
    bad = run_cli("byhand", "cpu-default")
    assert bad.returncode == 1 and "no GPU" in bad.stderr


@pytest.mark.tools
def test_cmake_options_exist_in_the_pinned_llama_cpp_source():
    """-DGGML_CUDA is an option of the vendored llama.cpp the lab pins (its sdist in the cache)."""
    import tarfile

    from lab import setup

    sdist = setup.cache_dir() / "sdist" / f"llama_cpp_python-{setup.LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    if not sdist.exists():
        pytest.skip(f"{sdist} missing: run `make setup`")
    with tarfile.open(sdist) as tar:
        cmake = tar.extractfile(f"llama_cpp_python-{setup.LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp/ggml/CMakeLists.txt")
        options = set(re.findall(r"option\((\w+)", cmake.read().decode()))
    text = byhand.script(profiles.load("v100-32g-x1"))
    used = set(re.findall(r"-D(GGML_\w+)=", text))
    assert used and used <= options, used - options


def test_both_v100_profiles_and_byhand_give_one_driver_and_cuda_answer():
    """One answer for a V100 owner (issue 22): the same supported driver branch (R580: R535 reached its end of life
    in June 2026) and CUDA toolkit in both V100 profiles and in every `lab byhand` track built from them."""
    answers = set()
    for name in ("v100-32g-x1", "v100-32g-x2-nvlink"):
        prof = profiles.load(name)
        answers.add((version_tuple(prof.driver_version)[0], prof.cuda_toolkit))
        for ubuntu in byhand.UBUNTU_RELEASES:
            toolkit = byhand.toolkit_for(prof, ubuntu)
            answers.add((byhand.driver_branch_for(prof, toolkit), toolkit))
    assert answers == {(580, "12.8")}, answers


def test_two_card_track_prints_layer_and_tensor_commands():
    """`lab byhand v100-32g-x2-nvlink`: the profile's -sm layer command, then the -sm tensor alternative (f16 KV,
    flash attention on, no -ts) as a commented line, so running the script starts one server."""
    step = next(st for st in byhand.steps(profiles.load("v100-32g-x2-nvlink")) if st.title == "Start the server")
    layer, tensor = step.commands
    assert "-sm layer -ts 1/1" in layer and "-fa auto" in layer
    assert tensor.startswith("# or -sm tensor instead") and "-sm tensor" in tensor and "-fa on" in tensor
    assert "-ts" not in tensor and "-ctk f16 -ctv f16" in tensor
    one = next(st for st in byhand.steps(profiles.load("v100-32g-x1")) if st.title == "Start the server")
    assert len(one.commands) == 1


def test_no_profile_downloads_a_file_the_lab_knows_was_withdrawn():
    from lab.core import facts

    gone = {(e["repo"], e["file_name"]) for e in facts.load("quant_types", "published_downloads")["published_downloads"]
            if e.get("withdrawn")}
    assert ("unsloth/Qwen3.8-27B-GGUF", "Qwen3.8-27B-Q4_K_M.gguf") in gone
    for path in profiles.all_profiles():
        d = byhand.gguf_download(profiles.load(path))
        assert d is None or (d["repo"], d["file"]) not in gone, (path.name, d)
