"""Exposure: who can reach what the lab starts. Servers bind 127.0.0.1 unless the profile asks; 0.0.0.0
needs a strong key; the lab's own servers always have a key (the per-run one on loopback), CORS limited to
local origins, a minimal environment; the real llama-server answers 401 without the key (the real vLLM
server: tests/test_vllm_cpu.py); JupyterLab listens on loopback with a token. Figure: checks tried /
checks holding."""
import os
import re
import subprocess
import sys
import time

import httpx
import psutil
import pytest

from conftest import ROOT, record_figure
from lab.core import profiles
from lab.serving import engines, serve

RESULTS: dict[str, bool] = {}




def check(name: str, ok: bool) -> bool:
    RESULTS[name] = bool(ok)
    return ok


@pytest.fixture(scope="session", autouse=True)  # once, after all: the unit tier runs this file's pure tests first
def figure():
    yield
    record_figure("exposure checks", len(RESULTS), sum(RESULTS.values()),
                  "failed: " + ", ".join(k for k, v in RESULTS.items() if not v) if not all(RESULTS.values()) else "")


def test_every_profile_binds_loopback_unless_it_asks():
    for path in profiles.all_profiles():
        prof = profiles.load(path)
        cmd = engines.build_command(prof, model_path="/m.gguf")
        if cmd.external:  # an endpoint the user runs: nothing of ours binds anything
            continue
        assert check(f"{prof.name} binds {prof.host}", cmd.host == prof.host == "127.0.0.1"
                     and cmd.argv[list(cmd.argv).index("--host") + 1] == "127.0.0.1")


@pytest.mark.parametrize("key,allowed", [(None, False), ("", False), ("x", False), ("k" * 15, False), ("k" * 16, True)])
def test_all_interfaces_needs_a_strong_key(monkeypatch, key, allowed):
    base = profiles.load("cpu-default").model_dump()
    prof = profiles.Profile(**{**base, "host": "0.0.0.0", "api_key_env": "LAB_TEST_BIND_KEY"})
    if key is None:
        monkeypatch.delenv("LAB_TEST_BIND_KEY", raising=False)
    else:
        monkeypatch.setenv("LAB_TEST_BIND_KEY", key)
    cmd = engines.build_command(prof, model_path="/m.gguf")
    if allowed:
        serve.check_bind_allowed(cmd)
        check("0.0.0.0 with a 16-character key allowed", True)
    else:
        with pytest.raises(serve.UnsafeBind):
            serve.check_bind_allowed(cmd)
        check(f"0.0.0.0 refused with key {key!r:.6}", True)


def test_all_interfaces_without_a_key_variable_is_an_invalid_profile():
    with pytest.raises(ValueError, match="exposes the server"):
        profiles.Profile(**{**profiles.load("cpu-default").model_dump(), "host": "0.0.0.0"})
    check("0.0.0.0 without api_key_env: invalid profile", True)


def test_server_environment_is_minimal(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_x" * 5)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y" * 20)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("LLAMA_ARG_HOST", "0.0.0.0")  # llama-server reads LLAMA_ARG_* as flags
    env = engines.env_with_secrets(engines.build_command(profiles.load("cpu-default"), model_path="/m.gguf"),
                                   api_key="k" * 24)
    assert check("server env: no tokens, CUDA_* and PATH kept, key in LLAMA_API_KEY",
                 "HF_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env and env["CUDA_VISIBLE_DEVICES"] == "0"
                 and "LLAMA_ARG_HOST" not in env
                 and "PATH" in env and env["LLAMA_API_KEY"] == "k" * 24)


@pytest.mark.tools
def test_the_real_llama_server_has_a_key_local_cors_and_no_inherited_tokens(smol_model, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_PlantedToken0123456789")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted-0123456789abcdef")
    cmd = engines.build_command(profiles.load("cpu-default"), port=serve.free_port(), model_path=smol_model)
    with serve.start(cmd, log_dir=tmp_path, name="exposure") as srv:
        key = srv.api_key
        check("lab server has a per-run key on loopback", key and len(key) >= engines.MIN_API_KEY_CHARS)
        body = {"model": "x", "prompt": "Hi", "max_tokens": 1}
        url = srv.base_url + "/v1/completions"
        codes = {name: httpx.post(url, json=body, headers=h, trust_env=False, timeout=60).status_code
                 for name, h in (("none", {}), ("wrong", {"Authorization": "Bearer wrong-key-0123456789"}),
                                 ("right", srv.headers()))}
        check("llama-server: 401 without key", codes["none"] == 401)
        check("llama-server: 401 with a wrong key", codes["wrong"] == 401)
        check("llama-server: 200 with the key", codes["right"] == 200)
        evil = {"Origin": "https://evil.example", "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization"}
        pre = httpx.options(url, headers=evil, trust_env=False, timeout=30)
        got = httpx.get(srv.base_url + "/v1/models", headers={"Origin": "https://evil.example", **srv.headers()},
                        trust_env=False, timeout=30)
        check("CORS: a foreign origin is not echoed (preflight)", pre.headers.get("access-control-allow-origin")
              not in ("https://evil.example", "*"))
        check("CORS: credentials not allowed", pre.headers.get("access-control-allow-credentials") != "true")
        check("CORS: a foreign origin is not echoed (request)", got.headers.get("access-control-allow-origin")
              not in ("https://evil.example", "*"))
        environ = open(f"/proc/{srv.pid}/environ", "rb").read().split(b"\0")
        names = {e.split(b"=", 1)[0].decode() for e in environ if b"=" in e}
        check("server process: no HF_TOKEN / OPENAI_API_KEY inherited", not names & {"HF_TOKEN", "OPENAI_API_KEY"})
        check("key not in argv", key not in " ".join(psutil.Process(srv.pid).cmdline()))
        listening = {c.laddr.ip for c in psutil.Process(srv.pid).net_connections(kind="inet") if c.status == "LISTEN"}
        check("llama-server listens on 127.0.0.1 only", listening == {"127.0.0.1"})
    assert all(RESULTS.values()), {k: v for k, v in RESULTS.items() if not v}
    assert codes == {"none": 401, "wrong": 401, "right": 200}


def _lab_target_args() -> list[str]:
    """The `make lab` recipe's jupyter arguments, as the Makefile has them."""
    text = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^lab:.*\n((?:\t.*\n)+)", text, re.M).group(1)
    words = recipe.replace("\\\n", " ").split()
    start = words.index("jupyter")
    args = []
    for w in words[start + 1:]:
        if w.startswith("$$(") or w.startswith("--allow-root"):
            break
        args.append(w)
    return args


@pytest.mark.tools
def test_jupyterlab_listens_on_loopback_with_a_token(tmp_path):
    args = _lab_target_args()
    assert "--ip" in args and args[args.index("--ip") + 1] == "127.0.0.1"
    assert not any(re.search(r"token\s*=\s*(''|\"\"|$)", a) or "password=''" in a for a in args)
    port = serve.free_port()
    args = [a.replace("$(LAB_PORT)", str(port)) for a in args]
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"), "HOME": str(tmp_path)}
    extra = ["--allow-root"] if os.geteuid() == 0 else []
    proc = subprocess.Popen([sys.executable, "-m", "jupyter", *args, *extra], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        status = None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status = httpx.get(f"http://127.0.0.1:{port}/api/status", trust_env=False, timeout=5).status_code
                break
            except httpx.TransportError:
                time.sleep(0.5)
        listening = {c.laddr.ip for c in psutil.Process(proc.pid).net_connections(kind="inet") if c.status == "LISTEN"}
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
    check("JupyterLab refuses an API call without its token", status == 403)
    check("JupyterLab listens on 127.0.0.1 only", listening <= {"127.0.0.1"} and listening)
    assert status == 403 and listening == {"127.0.0.1"}, (status, listening)
