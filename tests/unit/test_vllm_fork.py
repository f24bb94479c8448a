"""The seed's own route, two V100s on the Volta fork of vLLM (params/v100-32g-x2-vllm.yaml): its command, its
compatibility findings, its plan and by-hand steps, and the lab's vLLM log reading replayed on the fork's published
log lines (tests/data/vllm_1cat_v100_published.log: 1Cat-vLLM issues #237 and #334)."""
from pathlib import Path

import pytest

from lab.core import profiles
from lab.predict import compat, plan, vllm_speed
from lab.serving import byhand, engine_logs, engines

LOG = (Path(__file__).resolve().parents[1] / "data" / "vllm_1cat_v100_published.log").read_text()


@pytest.fixture(scope="module")
def fork():
    return profiles.load("v100-32g-x2-vllm")


def test_notebook_04_reads_the_forks_start_up_lines():
    rep = engine_logs.parse_vllm_log(LOG)
    assert rep["kv_cache_tokens"] == 215_401 and rep["kv_cache_device"] == "GPU"
    assert rep["max_concurrency"] == {"tokens_per_request": 8192, "x": 26.29}
    assert rep["kv_cache_memory_gib"] == 5.35 and rep["errors"] == []


def test_notebook_05_reads_the_kv_report_it_compares():
    assert engine_logs.kv_cache_report_from_log(LOG) == {"device": "GPU", "tokens": 215_401, "max_model_len": 8192,
                                                         "max_concurrency": 26.29}


def test_notebook_06_reads_the_forks_mtp_windows():
    spec = engine_logs.vllm_spec_decoding(LOG)
    # 275 + 252 accepted of 294 + 297 drafted at k = 3: 197 steps, 3.68 tokens per step (the log's own 3.81, 3.55)
    assert (spec["accepted"], spec["drafted"], spec["k"], spec["windows"]) == (527, 591, 3, 2)
    assert spec["tokens_per_step"] == pytest.approx(527 / 197 + 1) and round(spec["tokens_per_step"], 2) == 3.68
    assert [round(x, 3) for x in spec["per_position"]] == [0.964, 0.899, 0.812]
    assert spec["generation_tok_s"] == [35.1, 36.4]
    assert engine_logs.vllm_spec_decoding("no speculation here") is None
    # the vLLM MTP model takes tokens per step as the fork's log gives them
    x = vllm_speed.setup_speed("v100-32g", 2, "AWQ-INT4", 640, "f16", "v100-sxm2-nvlink2", 3, spec["tokens_per_step"])
    assert x["mtp"]["tokens_per_step"] == spec["tokens_per_step"] and x["tok_s"] > x["plain_tok_s"]


def test_the_forks_command(fork):
    cmd = engines.build_command(fork)
    argv = list(cmd.argv)
    assert argv[1:3] == ["serve", str(fork.model_dir)] or argv[1] == "serve"
    for flag, value in (("--tensor-parallel-size", "2"), ("--gpu-memory-utilization", "0.88"), ("--dtype", "half"),
                        ("--attention-backend", "FLASH_ATTN_V100"), ("--quantization", "awq"),
                        ("--max-num-batched-tokens", "8096"), ("--max-model-len", "65536")):
        assert argv[argv.index(flag) + 1] == value, flag
    # stock vLLM's "AWQ needs 7.5" note is not the fork's: its TurboMind kernels are SM70's
    assert not any(n.level == "error" for n in cmd.notes)
    assert any("1cat-vllm==1.3.0" in n.text for n in cmd.notes)


def test_the_forks_plan_and_compat(fork):
    found = compat.evaluate(compat.facts_from_profile(fork))
    assert [f.severity for f in found] == ["info"] and found[0].id == "vllm_fork_on_volta"
    # the same profile on stock vLLM: AWQ on sm_70 is an error again
    stock = fork.model_copy(update={"engine_build": None})
    assert any(f.id == "quant_format_min_capability" and f.severity == "error"
               for f in compat.evaluate(compat.facts_from_profile(stock)))
    p = plan.plan(fork)
    # 56.4 since Hopper's own fixed cost (the shared one moved the Volta fraction the vLLM model takes, 0.703 -> 0.695)
    assert round(p["predicted_decode_tok_s"], 1) == 56.4 and p["fits"]  # as fork-tp2 and lab predict --engine vllm
    assert p["roofline"]["prediction_basis"].startswith("vLLM model")


def test_the_forks_byhand_steps(fork):
    steps = byhand.steps(fork, "24.04")
    titles = [s.title for s in steps]
    assert "Install the Volta fork of vLLM (1cat-vllm==1.3.0) in its own venv" in titles
    text = "\n".join(c for s in steps for c in s.commands)
    assert "releases/download/v1.3.0/1cat_vllm-1.3.0-cp312-cp312-linux_x86_64.whl" in text
    assert "https://download.pytorch.org/whl/cu128" in text and "pip install vllm" not in text
    server = next(s for s in steps if s.title.startswith("Start the server")).commands[0]
    assert server.startswith("cd /tmp && set -o pipefail && ") and '"$LAB/models/Qwen3.8-27B-W4A16-AWQ"' in server
    assert '"$LAB/.venv-1cat/bin/vllm" serve' in server and "--attention-backend FLASH_ATTN_V100" in server
