"""Notebooks tier: the GPU path without a GPU (issue 32). Notebooks 01, 04, 05 and 06 run end to end through
`lab run` on a GPU profile, one H200 and two NVLinked V100s, with NVML REPLAYED from what those cards reported
(tests/fake_gpu/pynvml.py serving tests/data/nvml/*.json: a fake of the hardware, never of an engine). The server is
this machine's real CPU llama-server with the real SmolLM2; the sampler, the hardware checks, the records, the schema
check at write time and the report see GPU shapes: one GPU's and two GPUs' lists, power, energy counters.

At 4d9dec8 every GPU profile's benchmark failed (`mean_power_w` a per-GPU list in a float field); nothing on CPU
noticed. This file is what notices now: declare a per-GPU figure a float again and notebook 06 fails here."""
import json
import os
import re

import pytest
import yaml
from conftest import CPU_DEFAULT_PLAN, ROOT, lab_run, notebook_record

from lab.core import fields

pytestmark = pytest.mark.notebooks
NVML = ROOT / "tests" / "data" / "nvml"
FAKE = ROOT / "tests" / "fake_gpu"
# the GPU fields of a shipped profile: the hardware the run expects (checked by notebook 01 against the replay)
GPU_KEYS = ("gpu_name_pattern", "gpu_count", "gpu_vram_mib", "gpu_compute_capability", "gpu_memory_bandwidth_gb_s",
            "gpu_tdp_w", "nvlink_expected", "split_mode", "tensor_split")
REPLAYS = {"h200-x1": "h200-x1.json", "v100-32g-x2-nvlink": "v100-sxm2-32g-x2-nvlink.json"}


def replay_profile(shipped: str, folder) -> "os.PathLike":
    """cpu-default (its model, server and the tests' short plan) with the GPU expectations of params/<shipped>.yaml,
    two levels (1 and 2 streams) so a level's sweep row and the best-aggregate selection both exist."""
    from lab.serving import serve

    base = yaml.safe_load((ROOT / "params" / "cpu-default.yaml").read_text())
    gpu = yaml.safe_load((ROOT / "params" / f"{shipped}.yaml").read_text())
    data = {**base, **{k: gpu[k] for k in GPU_KEYS if k in gpu}, **CPU_DEFAULT_PLAN, "name": f"replay-{shipped}",
            "description": f"cpu-default's model and server, {shipped}'s GPUs replayed (tests/test_gpu_replay.py)",
            "n_gpu_layers": -1, "bench_concurrency": [1, 2], "port": serve.free_port()}
    path = folder / f"replay-{shipped}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module", params=sorted(REPLAYS))
def replay(request, tmp_path_factory):
    shipped = request.param
    fixture = NVML / REPLAYS[shipped]
    profile = replay_profile(shipped, tmp_path_factory.mktemp("profile"))
    env = {"PYTHONPATH": os.pathsep.join([str(FAKE), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "LAB_FAKE_NVML": str(fixture)}
    run = lab_run(tmp_path_factory.mktemp("runs"), str(profile), "01,04,05,06", timeout=2400, require_ok=False,
                  env=env)
    return shipped, json.loads(fixture.read_text()), run


def test_the_run_measured_the_replayed_gpus_not_a_plan(replay):
    shipped, nvml, run = replay
    manifest = json.loads((run / "manifest.json").read_text())
    names = [g["name"] for g in nvml["gpus"]]
    assert manifest.get("mode") != "plan", manifest.get("mode")  # the profile's GPUs are "here": it measures
    assert [g.get("name") for g in manifest["gpus"]] == names
    hw = notebook_record(run, "01_hardware_checks", "01_hardware")
    text = json.dumps(hw)
    assert all(n in text for n in names)
    assert not [c for c in hw["checks"] if c["status"] == "not-run"]  # plan mode would mark the GPU checks not-run


def test_every_record_has_its_gpu_figures_in_the_schema_shape(replay):
    shipped, nvml, run = replay
    for name in ("01_hardware", "04_serve", "05_kv_cache", "06_benchmark"):
        record = json.loads((run / "records" / f"{name}.json").read_text())
        assert fields.gpu_shape_problems(record) == [], name


def test_the_benchmark_sweep_has_gpu_figures_per_gpu_and_in_total(replay):
    shipped, nvml, run = replay
    n = len(nvml["gpus"])
    record = notebook_record(run, "06_benchmarking", "06_benchmark")
    assert [x["concurrency"] for x in record["sweep"]] == [1, 2]
    for level in record["sweep"]:
        assert level["energy_not_measured"] is None, level["energy_not_measured"]
        assert len(level["mean_power_w_per_gpu"]) == n and len(level["peak_vram_mib_per_gpu"]) == n
        assert level["mean_power_w"] == pytest.approx(sum(level["mean_power_w_per_gpu"]))
        assert level["peak_vram_mib"] <= sum(level["peak_vram_mib_per_gpu"]) + 1e-6  # the peak of the sum
        assert level["joules_per_token"] > 0  # the replayed energy counter grew over the level
        # the replayed card's power range, every GPU: the fixture's samples bound the means
        watts = [mw / 1000 for g in nvml["gpus"] for mw in g["samples"]["power_mw"]]
        assert min(watts) - 1 <= min(level["mean_power_w_per_gpu"]) <= max(level["mean_power_w_per_gpu"]) <= max(watts) + 1
    s = record["summary"]
    assert s["joules_per_token_single"] == record["sweep"][0]["joules_per_token"]
    assert len(s["peak_vram_mib_load_per_gpu"]) == n and s["peak_vram_mib_load"] is not None
    assert s["peak_vram_mib_sweep"] == max(x["peak_vram_mib"] for x in record["sweep"])


def test_serve_and_kv_notebooks_ran_on_the_gpu_profile(replay):
    shipped, nvml, run = replay
    serve = notebook_record(run, "04_serve", "04_serve")
    kv = notebook_record(run, "05_kv_cache_math", "05_kv_cache")
    assert serve["checks"] and kv["checks"]
    # llama-server's log has no offload line on this CPU build: the check says so as a warning, never a crash
    offload = [c for r in (serve, notebook_record(run, "06_benchmarking", "06_benchmark"))
               for c in r["checks"] if c["name"] == "layers and KV cache on the GPU"]
    assert all(c["status"] in ("warn", "pass") for c in offload)


def test_the_report_renders_the_gpu_run(replay):
    shipped, nvml, run = replay
    page = (run / "report.html").read_text()
    assert nvml["gpus"][0]["name"] in page
    assert re.search(r"peak VRAM, all GPUs", page)
