"""Notebooks tier: notebook 04 (serve) in the session's one `lab run` on cpu-default (conftest.cpu_default_run), and
under papermill on a GPU profile on this CPU machine (it shows the command and starts nothing)."""
import json

import pytest
import yaml
from conftest import notebook_record

from lab.core import paths, profiles
from lab.serving import serve
from lab.serving.server import group_members

pytestmark = pytest.mark.notebooks


def run_notebook_04(tmp_path, profile_path):
    import papermill as pm

    run_dir = tmp_path / "run"
    pm.execute_notebook(str(paths.NOTEBOOKS / "04_serve.ipynb"), str(tmp_path / "out.ipynb"), kernel_name="llm-lab",
                        parameters={"profile": str(profile_path), "run_dir": str(run_dir)}, progress_bar=False)
    return json.loads((run_dir / "records" / "04_serve.json").read_text()), run_dir


def test_notebook_04_serves_the_default_profile(cpu_default_run):
    """Notebook 04 in the session's one `lab run` on cpu-default (conftest.cpu_default_run: on a free port, so a
    busy 8080 cannot fail it)."""
    run_dir = cpu_default_run
    record = notebook_record(run_dir, "04_serve")
    assert [c["status"] for c in record["checks"]] == ["pass"] * 6  # the 6th: replies of the documented shape
    s = record["summary"]
    assert s["completions_ok"] and s["chat_ok"] and s["stopped_clean"] and s["parallel_slots"] == 4 and s["kv_cache_mib"] == 90.0
    assert record["command"]["argv"][0].endswith("llama-server") and record["seed_corrections"]
    assert (run_dir / "logs" / "04_serve.log").exists()
    assert not group_members(record["stop"]["pid"])


def test_notebook_04_shows_a_gpu_command_and_skips_starting_on_a_cpu_machine(tmp_path):
    if serve.evidence.gpu_summary()["gpus"]:
        pytest.skip("not for this machine: it has a GPU")
    prof = {**profiles.load("cpu-default").model_dump(), "name": "v100-x2", "gpu_name_pattern": "V100",
            "gpu_count": 2, "gpu_vram_mib": 32768, "gpu_compute_capability": "7.0", "gpu_memory_bandwidth_gb_s": 900,
            "engine": "vllm", "engine_version": "0.18.0", "model_file": None, "model_name": "Qwen/Qwen3-32B-GPTQ",
            "model_architecture": "config:qwen3-32b", "model_quant": "GPTQ-INT4", "tensor_parallel_size": 2}
    (tmp_path / "v100.yaml").write_text(yaml.safe_dump(prof))
    record, _ = run_notebook_04(tmp_path, tmp_path / "v100.yaml")
    # plan mode: what only the card can answer is not run, not skipped (lab.core.planmode.card_only)
    assert {c["status"] for c in record["checks"]} == {"not-run"} and "GPU" in record["skip_reason"]
    assert record["command"]["argv"][:2] == ["vllm", "serve"] and "--swap-space" not in record["command"]["argv"]
    assert len(record["seed_corrections"]) == 3
