"""The GPU smoke's judge (lab/setup/smoke_verdict.py) on the committed GPU run folders and on copies of them broken
one way at a time: the llama.cpp smoke of the lent H100 passes, the first vLLM attempt fails for what went wrong."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from lab.core.paths import ROOT
from lab.setup import smoke_verdict as sv

H100_SMOKE = ROOT / "outputs" / "h100-x1" / "20261207T162624Z_add993cf"
H100_SUITE = ROOT / "outputs" / "h100-x1" / "20261207T163707Z_add993cf"
H100_VLLM = ROOT / "outputs" / "h100-vllm" / "20261207T195530Z_96aab673"


def copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.log"))
    return dst


def test_the_committed_h100_smoke_passes():
    assert sv.judge(H100_SMOKE, levels=[1]) == []


def test_a_suite_is_not_a_smoke_unless_asked_for_its_own_levels():
    fails = sv.judge(H100_SUITE, levels=[1])
    assert "06 sweep: levels [1, 4, 8, 16]; the smoke measures [1] (bench_concurrency: [1])" in fails


def test_the_first_vllm_attempt_fails_for_its_health_timeout():
    fails = sv.judge(H100_VLLM, engine="vllm")
    assert fails[0].startswith("04_serve: failed (StartupFailed: http://127.0.0.1:8000/health did not answer 200")
    assert "06_benchmarking: skipped (skipped: depends on 04_serve, which did not succeed)" in fails
    assert "server: engine found None, not 'vllm'" in fails
    assert "manifest: status 'failed'" in fails
    assert sv.verdict_line(fails).startswith("SMOKE FAIL: 04_serve: failed")


def test_a_cpu_build_on_a_gpu_fails(tmp_path):
    run = copy(H100_SMOKE, tmp_path)
    m = json.loads((run / "manifest.json").read_text())
    m["llama_cpp_build"]["cuda_arch"] = None
    (run / "manifest.json").write_text(json.dumps(m))
    assert sv.judge(run, levels=[1]) == ["llama.cpp build: cuda_arch none (a CPU build), the GPU is sm_90"]


def test_a_vllm_server_of_another_version_fails(tmp_path):
    run = copy(H100_SMOKE, tmp_path)
    m = json.loads((run / "manifest.json").read_text())
    m["server"].update(engine_found="vllm", engine_version_declared="0.25.0", engine_version_used="0.24.1")
    (run / "manifest.json").write_text(json.dumps(m))
    assert sv.engine_fails(m, "vllm") == ["server: vLLM 0.24.1 answered, the profile declares 0.25.0"]
    m["server"]["engine_version_used"] = "0.25.0"
    assert sv.engine_fails(m, "vllm") == []


def test_a_broken_manifest_and_a_failed_request_are_named(tmp_path):
    run = copy(H100_SMOKE, tmp_path)
    rec = json.loads((run / "records" / "06_benchmark.json").read_text())
    rec["sweep"][0].update(failures=2, requests=8)
    (run / "records" / "06_benchmark.json").write_text(json.dumps(rec))
    assert any(f.startswith("06 sweep level 1: 2 of 8 requests failed") for f in sv.judge(run, levels=[1]))
    (run / "manifest.json").write_text("{not json")
    fails = sv.judge(run, levels=[1])
    assert fails[0].startswith("manifest.json: unreadable (JSONDecodeError")


def test_the_pipeline_is_judged_first(tmp_path):
    (tmp_path / "pipeline.log").write_text("[22:01:02] lab.setup failed\n")
    assert sv.judge(None, "1", tmp_path) == ["set-up: python3 -m lab.setup failed (the llama.cpp build?) (pipeline.log)"]
    (tmp_path / "pipeline.log").write_text("[22:01:02] lab run rc=1\nRuntimeError: it failed\n")
    (tmp_path / "standin.rc").write_text("0\n")
    assert sv.judge(None, "1", tmp_path) == [
        "lab run: no run folder with a manifest.json (rc=1; last error line: RuntimeError: it failed)"]
    assert sv.main(["", "--levels", "one"]) == 1
