"""The tools tier of tests/unit/test_multigpu.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.experiments import multigpu

from conftest import ROOT, setup_missing


# ---------------------------------------------------------------- the script on this CPU
@pytest.mark.tools
def test_multigpu_cli_on_cpu_measures_one_device_and_skips_the_splits(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "lab", "multigpu", "--profile", "cpu-default", "--out", str(tmp_path),
                           "--levels", "1", "--prompt-tokens", "32", "--output-tokens", "8", "--reps", "1"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rec = json.loads((tmp_path / "records" / "08_multigpu_scaling.json").read_text())
    assert rec["summary"]["modes_run"] == ["none"]
    assert set(rec["summary"]["modes_skipped"]) == {"layer", "row", "tensor"}
    none = rec["results"]["none"]
    assert none["bench"]["tg"]["tok_s"] > 0 and none["server"]["summaries"][0]["successes"] >= 4
    kv = next(t for t in rec["tables"] if t["title"].startswith("KV cache"))["rows"][0]
    assert kv["KV match"] is True  # the CPU buffer llama-server printed = lab.predict.kvcache's prediction
    tp = json.loads((tmp_path / "records" / "08_tp_model.json").read_text())
    paper = tp["tables"][1]["rows"]
    assert any("v100-sxm2-nvlink2" in r["set-up"] for r in paper) and any("ethernet-10g" in r["set-up"] for r in paper)
    from lab.records import report

    assert "Two GPUs against one" in report.build(tmp_path).read_text()


def _torch_python() -> str | None:
    for python in (sys.executable, str(ROOT / ".venv-vllm" / "bin" / "python")):
        if Path(python).exists() and subprocess.run([python, "-c", "import torch.distributed as d; "
                                                     "assert d.is_gloo_available()"], capture_output=True).returncode == 0:
            return python
    return None


@pytest.mark.tools
def test_allreduce_bench_runs_on_gloo(tmp_path):
    python = _torch_python()
    if python is None:
        if os.environ.get("LAB_VLLM") != "1":
            pytest.skip("opt-in: no Python with PyTorch here (the lab venv has none; .venv-vllm has: `make test`)")
        setup_missing("no Python with PyTorch here (the lab venv has none; .venv-vllm has)",
                      "python3 -m lab.setup --engine vllm --profile cpu-vllm")
    proc = subprocess.run([python, "-m", "lab.experiments.allreduce_bench", "--backend", "gloo", "--arch", "qwen3.5-27b",
                           "--batches", "1", "--sizes", "4096", "--samples", "2", "--iters", "2", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rec = json.loads((tmp_path / "records" / "08_allreduce.json").read_text())
    rows = rec["tables"][0]["rows"]
    assert [r["bytes"] for r in rows] == [20480, 10240, 4096]  # 5120 × f32, 5120 × bf16, the sweep size
    assert all(r["correct_sum"] for r in rows)
    assert rows[0]["allreduces_per_step"] == 129
    assert rec["summary"]["fit_latency_at_bytes"] == 4096
