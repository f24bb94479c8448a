"""GPU-shaped figures through the real pipeline, without a GPU (issue 32): a window of NVML samples from one GPU and
from two goes through gpumon.summarise_window → metrics.summarise_run → the typed RunSummary, a tune level and the
records' shape check; a record of schema_version 1 (lists under the totals' names) reads as today's (the committed
records: tests/unit/test_committed_runs.py)."""
from pathlib import Path

import pytest

from lab.core import evidence, fields
from lab.core.run_summary import RunSummary, level_figures
from lab.measure import gpumon, metrics
from lab.measure.gpumon import Sample
from lab.measure.loadgen import LoadSpec, RequestResult, RunResult


def _run(window: dict) -> RunResult:
    """A level of two requests that streamed 64 tokens each, with `window` as its sampler's account."""
    ok = [RequestResult(index=i, success=True, ttft_s=0.05, e2el_s=0.7, output_tokens=64, prompt_tokens=32,
                        chunk_times_s=[0.05 + 0.01 * k for k in range(64)]) for i in range(2)]
    return RunResult(spec=LoadSpec(concurrency=2, max_requests=2), target="http://127.0.0.1:8080", results=ok,
                     duration_s=0.7, warmup=[], started_utc="2026-12-04T00:00:00Z", client_cpu_s=0.1, prompt_words=24,
                     resources=window)


def _window(n_gpus: int) -> dict:
    # an H200 under decode (power and memory as outputs/h200-x1 recorded them), n_gpus alike
    before = Sample(0.9, [33_900.0] * n_gpus, [114.7] * n_gpus, [5_000_000.0] * n_gpus)
    inside = [Sample(1.0 + i / 10, [33_950.0 + i] * n_gpus, [480.0 + i] * n_gpus,
                     [5_000_000.0 + 48_000.0 * (i + 1)] * n_gpus) for i in range(6)]
    return gpumon.summarise_window(inside, before, 1.0, 1.5, output_tokens=128,
                                   gpu_names=["NVIDIA H200"] * n_gpus)


@pytest.mark.parametrize("n_gpus", [1, 2])
def test_a_gpu_window_through_summarise_run_gives_numbers(n_gpus):
    s = metrics.summarise_run(_run(_window(n_gpus)))  # raised a ValidationError at 4d9dec8 (mean_power_w: a list)
    assert isinstance(s, RunSummary)
    assert s.mean_power_w == pytest.approx(482.5 * n_gpus) and s.mean_power_w_per_gpu == [pytest.approx(482.5)] * n_gpus
    assert s.peak_vram_mib == 33_955.0 * n_gpus and s.peak_vram_mib_per_gpu == [33_955.0] * n_gpus
    assert s.joules_per_token == pytest.approx(288.0 * n_gpus / 128)  # 6 × 48 J per GPU over 128 tokens
    level = level_figures(s)
    assert level["mean_power_w"] == s.mean_power_w and level["peak_vram_mib_per_gpu"] == [33_955.0] * n_gpus
    assert fields.gpu_shape_problems(s.model_dump()) == [] and fields.gpu_shape_problems(level) == []


def test_every_gpu_figure_is_declared_with_its_shape():
    """The run summary's type and the schema agree on each GPU figure's shape: a total is a float, a per-GPU figure a
    list. Declaring `mean_power_w_per_gpu` a float (or `mean_power_w` a list) again fails here."""
    gpu = {n: f.gpus for n, f in fields.schema().items() if f.gpus}
    assert {"mean_power_w", "mean_power_w_per_gpu", "peak_vram_mib", "peak_vram_mib_per_gpu", "joules_per_token",
            "energy_j", "peak_vram_mib_load", "peak_vram_mib_load_per_gpu"} <= set(gpu)
    for name, info in RunSummary.model_fields.items():
        if name in gpu:
            declared = str(info.annotation)
            assert declared.startswith("list") == (gpu[name] == "per_gpu"), (name, declared, gpu[name])


def test_a_wrong_gpu_shape_is_refused_when_written(tmp_path):
    with pytest.raises(ValueError, match=r"sweep\[0\]\.mean_power_w: a total over the GPUs is one number"):
        evidence.write_record(tmp_path, "06_benchmark", {"sweep": [{"mean_power_w": [486.7]}]})
    evidence.write_record(tmp_path, "06_benchmark", {"sweep": [{"mean_power_w": 486.7, "mean_power_w_per_gpu": [486.7]}]})


def test_a_version_1_record_reads_as_today():
    old = {"peak_vram_mib": [33953.875], "peak_vram_mib_total": 33953.875, "mean_power_w": [480.5, None],
           "sweep": [{"peak_vram_mib": [1.0, 2.0], "mean_power_w": [100.0, 200.0]}], "peak_vram_mib_load": [7.0]}
    new = fields.canonical(old)
    assert new["peak_vram_mib"] == 33953.875 and new["peak_vram_mib_per_gpu"] == [33953.875]
    assert new["mean_power_w"] is None and new["mean_power_w_per_gpu"] == [480.5, None]  # a GPU unread: no total
    assert new["sweep"][0] == {"peak_vram_mib": 3.0, "peak_vram_mib_per_gpu": [1.0, 2.0], "mean_power_w": 300.0,
                               "mean_power_w_per_gpu": [100.0, 200.0]}
    assert new["peak_vram_mib_load"] == 7.0 and new["peak_vram_mib_load_per_gpu"] == [7.0]
    assert fields.gpu_shape_problems(old) and fields.gpu_shape_problems(new) == []


def test_what_llama_server_allocated_per_device_has_its_shape():
    """Two CUDA devices' buffers from a published `-sm layer` log (tests/data/cuda_logs/SOURCES.yaml) are mappings
    by device name, as fields.yaml declares them (gpus: per_device); a list in their place is refused."""
    from lab.serving import engine_logs

    logs = Path(__file__).resolve().parents[1] / "data" / "cuda_logs"
    reported = engine_logs.parse_llama_log((logs / "published_llama_server_sm_layer_2080ti_p100.log").read_text())
    assert {"CUDA0", "CUDA1"} <= set(reported["model_buffers_mib"]) and {"CUDA0", "CUDA1"} <= set(reported["kv_buffers_mib"])
    assert fields.gpu_shape_problems({"server": {"reported": reported}}) == []
    assert fields.gpu_shape_problems({"kv_buffers_mib": [1.0, 2.0]})[0].startswith("kv_buffers_mib: a per-device figure")
