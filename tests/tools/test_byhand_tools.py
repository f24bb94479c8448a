"""The tools tier of tests/unit/test_byhand.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
import re
import shlex
from pathlib import Path
import subprocess
import sys

import pytest
from conftest import setup_missing

from lab.core import profiles
from lab.serving import byhand, byhand_choices
from lab.core.paths import ROOT
from shared_byhand import LLAMA_GPU_PROFILES, V100, _step


def _help_flags() -> set[str]:
    from lab.core import paths

    try:
        server = paths.tool("llama-server")
    except paths.SetupMissing as exc:
        setup_missing(str(exc))
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

    from lab.core import paths

    sdist = paths.sdist_file(paths.cache_dir())
    if not sdist.exists():
        setup_missing(f"{sdist} is missing", "make setup")
    with tarfile.open(sdist) as tar:
        cmake = tar.extractfile(f"llama_cpp_python-{paths.LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp/ggml/CMakeLists.txt")
        options = set(re.findall(r"option\((\w+)", cmake.read().decode()))
    from lab.setup import llama_build

    # byhand's build step is the lab's set-up: the options it passes for the card's architecture
    used = set(re.findall(r"-D(GGML_\w+)=", " ".join(llama_build.cmake_flags(byhand_choices.cuda_arch(
        profiles.load("v100-32g-x1"))))))
    assert used and used <= options, used - options


# ---------------------------------------------------------------- the printed commands, run where they can run here
def _bash(script: str, **env):
    import os

    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})


@pytest.mark.tools
@pytest.mark.parametrize("name", V100)
def test_cli_script_is_valid_bash_with_this_clones_folder(name):
    out = run_cli("byhand", name)
    assert out.returncode == 0, out.stderr
    # the folder on the card's box (~/llm-lab, as README "Get the lab" clones it), this machine's only in a comment
    assert f"printed on {shlex.quote(str(ROOT))}" in out.stdout and 'export LAB="$PWD"' in out.stdout
    check = subprocess.run(["bash", "-n"], input=out.stdout, capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr
    ok = _bash(f"cd {shlex.quote(str(ROOT))}\n" + 'export LAB="$PWD"\ntest -f "$LAB/Makefile" && ls "$LAB/params"')
    assert ok.returncode == 0 and f"{name}.yaml" in ok.stdout


@pytest.mark.tools
def test_sha256_lines_run(tmp_path):
    (tmp_path / "models").mkdir()
    for name in ("v100-32g-x1", "rtx4060ti-16g"):
        prof = profiles.load(name)
        f = tmp_path / "models" / Path(prof.model_file).name
        f.write_bytes(b"GGUF" + name.encode())
        digest = __import__("hashlib").sha256(f.read_bytes()).hexdigest()
        line = _step(name, "Download").commands[-1]
        line = line.replace(byhand_choices.gguf_download(prof).get("sha256") or "$expected", digest)
        ok = _bash(line, LAB=str(tmp_path))
        assert ok.returncode == 0 and ": OK" in ok.stdout, (line, ok.stdout, ok.stderr)
        f.write_bytes(b"truncated")
        assert _bash(line, LAB=str(tmp_path)).returncode != 0


@pytest.mark.tools
def test_make_run_line_runs_lab_run_with_the_profile():
    from lab.__main__ import build_parser

    line = _step("v100-32g-x1", "Run the lab").commands[-1]
    words = shlex.split(line)
    env = {k: v for k, v in (w.split("=", 1) for w in words if "=" in w and w.split("=", 1)[0].isupper())}
    # as a user's shell runs it: not as a sub-make of `make test ARGS=...` (MAKEFLAGS would hand ARGS down)
    clean = {k: v for k, v in __import__("os").environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "ARGS")}
    out = subprocess.run(["make", "-n", *words[words.index("make") + 1:]], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env={**clean, **env})
    assert out.returncode == 0, out.stderr
    run_line = next(x for x in out.stdout.splitlines() if "-m lab run" in x)
    # the recipe prints the lab's exit code after `||` when lab run fails (lab.core.exit_codes): the command is before it
    argv = shlex.split(run_line.split("-m lab", 1)[1].split("||", 1)[0])
    args = build_parser().parse_args(argv)
    assert args.profile == "v100-32g-x1" and "python3 -m lab.setup" in out.stdout


@pytest.mark.tools
@pytest.mark.parametrize("name", V100)
def test_bench_flags_exist_in_the_pinned_llama_bench(name):
    from lab.core import paths

    try:
        bench = paths.tool("llama-bench")
    except paths.SetupMissing as exc:
        setup_missing(str(exc))
    out = subprocess.run([str(bench), "--help"], capture_output=True, text=True, timeout=60)
    flags = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", out.stdout + out.stderr))
    used = [w for w in shlex.split(_step(name, "Measure").commands[-1]) if w.startswith("-")]
    assert used and not [f for f in used if f not in flags], used


@pytest.mark.tools
def test_curl_lines_get_health_and_a_completion():
    """The smoke test's two curl lines, against a stand-in answering llama-server's routes on a free port."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen = []

    class H(BaseHTTPRequestHandler):
        def _send(self, body):
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            seen.append(self.path)
            self._send({"status": "ok"})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, body["max_tokens"], self.headers["Content-Type"]))
            self._send({"choices": [{"text": " Paris"}], "usage": {"prompt_tokens": 5, "completion_tokens": 1}})

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        port = srv.server_address[1]
        for cmd in _step("v100-32g-x1", "Try it with curl").commands:
            out = _bash(cmd.replace("127.0.0.1:8080", f"127.0.0.1:{port}"))
            assert out.returncode == 0 and out.stdout, (cmd, out.stderr)
    finally:
        srv.shutdown()
    assert seen == ["/health", ("/v1/completions", 16, "application/json")]


@pytest.mark.tools
def test_ssh_accepts_the_tunnel_lines():
    import shutil

    if not shutil.which("ssh"):
        setup_missing("no ssh client here", "sudo apt-get install -y openssh-client")
    for cmd in _step("v100-32g-x1", "From your laptop").commands:
        if cmd.startswith("ssh "):
            out = subprocess.run(["ssh", "-G", *shlex.split(cmd)[1:]], capture_output=True, text=True, timeout=30)
            assert out.returncode == 0 and "localforward" in out.stdout.lower(), (cmd, out.stderr)


@pytest.mark.tools
def test_make_dist_packs_the_lab_for_a_box_without_git(tmp_path):
    """README "Get the lab": `make dist` writes the committed files as llm-lab/..., which `tar xzf FILE -C ~` unpacks
    into ~/llm-lab, the folder byhand's first step goes to; no venv, cache, model or build tree travels."""
    import os
    import tarfile

    clean = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "ARGS")}
    out = subprocess.run(["make", "--no-print-directory", "dist", f"DIST={tmp_path}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env=clean)
    assert out.returncode == 0, out.stderr
    archive = Path(out.stdout.splitlines()[0])
    assert archive.parent == tmp_path and archive.name.startswith("llm-lab-") and archive.suffixes[-2:] == [".tar", ".gz"]
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert {"llm-lab/Makefile", "llm-lab/README.md", "llm-lab/params/v100-32g-x1.yaml", "llm-lab/lab/__main__.py"} <= set(names)
    assert all(n == "llm-lab" or n.startswith("llm-lab/") for n in names)
    assert not [n for n in names if n.startswith(("llm-lab/.venv", "llm-lab/models/")) or n.endswith(".gguf")]
    unpacked = tmp_path / "home"
    unpacked.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(unpacked, filter="data")
    ok = _bash('cd "$HOME/llm-lab" && export LAB="$PWD" && test -f "$LAB/Makefile" && ls "$LAB/params"', HOME=str(unpacked))
    assert ok.returncode == 0 and "v100-32g-x1.yaml" in ok.stdout
