"""Endpoint profiles, discovery and diagnosis: pure logic, and FAKE Ollama / LM Studio servers built from their
documented responses (tests/fake_endpoints.py says which page each answer comes from). The real llama-server and
vLLM are measured as endpoints in tests/notebooks/test_endpoint_llama.py and tests/notebooks/test_endpoint_vllm.py."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fake_endpoints import LMSTUDIO_MODEL, OLLAMA_CONTEXT, OLLAMA_MODEL, fake_server

from lab.core import profiles
from lab.model import models
from lab.predict import memory_plan
from lab.serving import endpoint, engines, serve
from lab.measure import bench, load_levels, loadgen, metrics
from lab.diagnose import endpoint_diagnose

EXAMPLE = Path(__file__).resolve().parents[2] / "params" / "endpoint-example.yaml"


def write_profile(tmp_path: Path, **changes) -> Path:
    data = {**yaml.safe_load(EXAMPLE.read_text()), "name": "ep-unit", **changes}
    data = {k: v for k, v in data.items() if v is not None}
    path = tmp_path / "ep-unit.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# ---------------------------------------------------------------- the profile
def test_example_profile_validates_and_strips_v1():
    p = profiles.load("endpoint-example")
    assert p.endpoint_url == "http://127.0.0.1:8081/v1" and p.endpoint_base == "http://127.0.0.1:8081"
    assert p.served_model == "SmolLM2-135M-Instruct" and p.api_key_env is None


@pytest.mark.parametrize("changes, says", [
    ({"served_model": None}, "served_model is required"),
    ({"port": 9000}, "port only apply to a server the lab starts"),
    ({"engine_python": ".venv-vllm/bin/python"}, "engine_python only apply"),
    ({"endpoint_url": "http://user:secret@127.0.0.1:8081/v1"}, "no user:password@"),
    ({"endpoint_url": "127.0.0.1:8081"}, "field 'endpoint_url'"),
    ({"endpoint_url": None}, "served_model names the model of a server you run"),
])
def test_bad_endpoint_profiles_say_what_to_fix(tmp_path, changes, says):
    with pytest.raises(profiles.ProfileError) as err:
        profiles.load(write_profile(tmp_path, **changes))
    assert says in str(err.value) and "ep-unit.yaml" in str(err.value)


def test_command_for_an_endpoint_starts_nothing_and_keeps_the_url(tmp_path):
    p = profiles.load(write_profile(tmp_path, endpoint_url="http://10.0.0.5:11434/v1/", served_model="qwen3:8b",
                                    api_key_env="OLLAMA_PROXY_KEY"))
    cmd = engines.build_command(p, port=serve.free_port())  # notebook 06 passes a port: ignored for an endpoint
    assert cmd.external and cmd.argv == () and cmd.base_url == "http://10.0.0.5:11434"
    assert (cmd.host, cmd.port, cmd.served_model, cmd.api_key_env) == ("10.0.0.5", 11434, "qwen3:8b", "OLLAMA_PROXY_KEY")
    assert engines.installed_version(p) is None  # what is installed here does not serve it
    assert serve.why_not_startable(p, cmd) is None


def test_where_says_what_a_remote_box_hides(tmp_path):
    remote = profiles.load(write_profile(tmp_path, endpoint_url="http://gpu-box.lan:8000/v1"))
    assert not endpoint.where(remote)["local"] and "ANOTHER machine" in endpoint.where(remote)["text"]
    assert endpoint.where(profiles.load("endpoint-example"))["local"]
    assert endpoint.is_loopback("http://[::1]:8080") and endpoint.is_loopback("http://localhost:1234/v1")
    assert not endpoint.is_loopback("http://192.168.1.20:11434")


# ---------------------------------------------------------------- discovery (FAKE servers)
def test_discovers_ollama_from_its_documented_answers():
    with fake_server("ollama") as base:
        found = endpoint.discover(base, None, OLLAMA_MODEL)
    assert (found["engine"], found["version"], found["reachable"]) == ("ollama", "0.12.6", True)
    f = found["facts"]
    assert f["context_per_request"] == OLLAMA_CONTEXT and f["context_trained"] == 40960 and f["layers"] == 36
    assert f["quantization"] == "Q4_K_M" and f["vram_bytes"] == 5333539264 and f["gpu_share"] == 0.809
    assert f["served_model_listed"] is True and f["loaded"] is True
    rows = {r["fact"]: r for r in endpoint.facts_rows(found)}
    assert rows["context per request (tokens)"]["from"].startswith("GET /api/ps context_length")


def test_discovers_lmstudio_and_its_runtime():
    with fake_server("lmstudio") as base:
        found = endpoint.discover(base, None, LMSTUDIO_MODEL)
    assert found["engine"] == "lmstudio" and found["version"] == "llama.cpp-linux-x86_64-nvidia-cuda-avx2 1.52.1"
    f = found["facts"]
    assert (f["context_per_request"], f["context_trained"], f["quantization"], f["loaded"]) == (4096, 40960, "Q4_K_M", True)


def test_unreachable_endpoint_is_named():
    base = f"http://127.0.0.1:{serve.free_port()}"
    found = endpoint.discover(base)
    assert not found["reachable"] and found["engine"] == "unknown"
    assert "Connection refused" in found["probes"]["openai"]["models"]["error"] or "ConnectError" in found["probes"]["openai"]["models"]["error"]


def test_plan_beside_an_ollama_that_gives_less_context(tmp_path):
    p = profiles.load(write_profile(tmp_path, served_model=OLLAMA_MODEL, model_quant="Q4_K_M", context_tokens=8192,
                                    parallel_slots=1))
    arch = models.arch_for(p)
    plan = memory_plan.plan_memory(p, arch)
    with fake_server("ollama") as base:
        found = endpoint.discover(base, None, OLLAMA_MODEL)
    rows = {r["quantity"]: r for r in endpoint.plan_vs_server(p, arch, plan, found)}
    assert rows["context per request (tokens)"]["verdict"] == "differs"  # planned 8192, Ollama gives 4096
    assert rows["context per request (tokens)"]["server"] == OLLAMA_CONTEXT
    assert rows["quantization"]["verdict"] == "matches"
    assert rows["layers"]["verdict"] == "differs"  # SmolLM2 planned, a Qwen3 served: the plan is not this server
    checks = {c.name: c.status for c in endpoint.plan_checks(list(rows.values()))}
    assert checks["plan vs server: context per request (tokens)"] == "warn"


# ---------------------------------------------------------------- diagnosis (FAKE servers)
def test_ollama_truncation_and_unknown_model_are_diagnosed(tmp_path):
    with fake_server("ollama") as base:
        p = profiles.load(write_profile(tmp_path, endpoint_url=base + "/v1", served_model=OLLAMA_MODEL))
        assert endpoint_diagnose.why_unreachable(p) is None
        result = endpoint_diagnose.run(p)
    probes = {x["probe"]: x for x in result["probes"]}
    assert probes["reach"]["severity"] == "pass" and probes["model"]["severity"] == "pass"
    ctx = probes["context"]
    assert ctx["severity"] == "fail" and ctx["usage_prompt_tokens"] == OLLAMA_CONTEXT and ctx["tokens_sent"] > OLLAMA_CONTEXT
    assert ctx["kb"][0] == "ollama-prompt-truncated"
    assert probes["name"]["kb"] == ["endpoint-model-not-found"]  # the text a wrong served_model gets
    record = endpoint_diagnose.build_record(result)
    assert record["summary"]["failed"] == 1 and "ollama-prompt-truncated" in record["summary"]["kb_entries"]
    closing = endpoint_diagnose.what_this_means(record).splitlines()  # the 07_endpoint closing, from the record
    assert f"- context: {ctx['verdict']} — fix: {ctx['fix']}" in closing and not any("- reach" in x for x in closing)
    skipped = endpoint_diagnose.build_record({"skipped": "the lab starts this server", "probes": []})
    assert endpoint_diagnose.what_this_means(skipped) == "- Endpoint probes not run: the lab starts this server."


def test_wrong_served_model_is_diagnosed(tmp_path):
    with fake_server("ollama") as base:
        p = profiles.load(write_profile(tmp_path, endpoint_url=base + "/v1", served_model="qwen3:8B"))
        result = endpoint_diagnose.run(p)
    model = next(x for x in result["probes"] if x["probe"] == "model")
    assert model["severity"] == "error" and model["kb"][0] == "endpoint-model-not-found" and "ollama pull" in " ".join(
        e.commands[-1] for e in __import__("lab.diagnose.knowledge_base", fromlist=["x"]).load_kb() if e.id == "endpoint-model-not-found")


def test_connection_refused_fails_with_the_fix(tmp_path):
    p = profiles.load(write_profile(tmp_path, endpoint_url=f"http://127.0.0.1:{serve.free_port()}/v1"))
    with pytest.raises(endpoint_diagnose.EndpointUnreachable, match="nothing usable answers"):
        endpoint_diagnose.require_reachable(p)
    result = endpoint_diagnose.run(p)
    assert [x["probe"] for x in result["probes"]] == ["reach"] and result["probes"][0]["kb"][0] == "endpoint-unreachable"


def test_key_variable_named_but_unset_is_said(tmp_path, monkeypatch):
    monkeypatch.delenv("EP_UNIT_KEY", raising=False)
    p = profiles.load(write_profile(tmp_path, api_key_env="EP_UNIT_KEY"))
    key, note = endpoint.api_key_for(p)
    assert key is None and "EP_UNIT_KEY, which is not set" in note


# ---------------------------------------------------------------- measurement
def test_stream_without_usage_is_counted_by_chunks_and_marked():
    with fake_server("ollama") as base:
        target = loadgen.Target(base, model=OLLAMA_MODEL, max_tokens=5)
        run = loadgen.run_load(target, loadgen.make_prompts(4, 8), loadgen.LoadSpec(concurrency=1, max_requests=3))
    assert all(r.success and r.output_tokens == 5 and r.tokens_from == "chunks" and r.prompt_tokens is None
               for r in run.results)
    s = metrics.summarise(run.results, run.duration_s)
    assert s["tokens_counted_from"] == "chunks" and s["requests_without_usage"] == 3
    assert any("counted as streamed chunks" in w for w in s["validity"]["warnings"])


def test_a_busy_machine_still_sends_the_minimum_count_a_valid_run_needs():
    """The time budget (0.01 s) passes before the first request ends; the sweep's repetitions still send their share
    of MIN_VALID_REQUESTS (a busy 2-core CI machine left a level at 3 of 4 and its validity check failed)."""
    with fake_server("ollama", token_s=0.01) as base:
        target = loadgen.Target(base, model=OLLAMA_MODEL, max_tokens=5)
        run = loadgen.run_load(target, loadgen.make_prompts(8, 8), loadgen.LoadSpec(
            concurrency=1, max_requests=6, duration_s=0.01, warmup_requests=0, min_requests=3))
        only_time = loadgen.run_load(target, loadgen.make_prompts(8, 8), loadgen.LoadSpec(
            concurrency=1, max_requests=6, duration_s=0.01, warmup_requests=0))
        runs = load_levels.sweep(target, [1], 6, 8, duration_s=0.03, repetitions=3, seed=3)
    assert len(run.results) == 3 and len(only_time.results) == 1
    assert len(runs[0].results) >= loadgen.MIN_VALID_REQUESTS == metrics.Criteria.min_successes
    reasons = metrics.summarise_run(runs[0])["validity"]["reasons"]
    assert not [r for r in reasons if "successful requests" in r], reasons  # (its 0.03 s budget fails the 5 s rule)


def _summary(c, ttft_ms, e2el_ms, tok_s):
    return {"concurrency": c, "successes": 4, "ttft_ms": {"p50": ttft_ms}, "e2el_ms": {"p50": e2el_ms},
            "output_throughput": tok_s}


def test_queueing_flags_a_serial_server_not_a_batching_one():
    serial = metrics.queueing([_summary(1, 50, 1000, 60), _summary(2, 1040, 2000, 61), _summary(4, 3050, 4000, 60)])
    assert [q["queued"] for q in serial] == [None, True, True]
    assert serial[1]["serial_wait_ms"] == 1000 and round(serial[1]["wait_vs_serial"], 2) == 0.99
    batched = metrics.queueing([_summary(1, 50, 1000, 60), _summary(2, 90, 1100, 110), _summary(4, 160, 1300, 190)])
    assert [q["queued"] for q in batched] == [None, False, False]
    checks = bench.bench_checks([], None, None, None, queue=serial)
    assert [c.status for c in checks if "batched" in c.name] == ["warn", "warn"]
