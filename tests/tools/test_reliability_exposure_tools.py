"""The tools tier of tests/unit/test_reliability_exposure.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
import os
import re
import subprocess
import sys
import time

import httpx
import psutil
import pytest

from conftest import ROOT
from lab.core import profiles
from lab.serving import engines, serve
from shared_reliability_exposure import RESULTS, check, figure


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
