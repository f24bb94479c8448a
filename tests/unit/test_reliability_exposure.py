"""Exposure: who can reach what the lab starts. Servers bind 127.0.0.1 unless the profile asks; 0.0.0.0
needs a strong key; the lab's own servers always have a key (the per-run one on loopback), CORS limited to
local origins, a minimal environment; the real llama-server answers 401 without the key (the real vLLM
server: tests/tools/test_vllm_cpu.py); JupyterLab listens on loopback with a token. Figure: checks tried /
checks holding."""
import pytest

from lab.core import profiles
from lab.serving import engines, serve
from shared_reliability_exposure import check, figure


def test_every_profile_binds_loopback_unless_it_asks():
    for path in profiles.all_profiles():
        prof = profiles.load(path)
        cmd = engines.build_command(prof, model_path="/m.gguf")
        if cmd.external:  # an endpoint the user runs: nothing of ours binds anything
            continue
        assert check(f"{prof.name} binds {prof.host}", cmd.host == prof.host == "127.0.0.1"
                     and cmd.argv[list(cmd.argv).index("--host") + 1] == "127.0.0.1")


@pytest.mark.parametrize("key,allowed", [(None, False), ("", False), ("x", False), ("k" * 15, False), ("k" * 16, False),
                                         ("/usr/local/bin:/usr/bin:/bin", False), ("Zq3x9VbN7mKp2Lr8Tw5YhG4d", True)])
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
        check("0.0.0.0 with a random 24-character key allowed", True)
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
