"""lab.measure.gpumon: window arithmetic (pure), the sampler on this machine, the offload check."""
from lab.core import profiles
from lab.measure import gpumon
from lab.measure.gpumon import Sample


def test_window_energy_from_counter_and_joules_per_token():
    before = Sample(0.9, [1000.0], [100.0], [5_000.0], 200.0)
    inside = [Sample(1.0, [2000.0], [300.0], [6_000.0], 250.0), Sample(2.0, [4000.0], [350.0], [306_000.0], 300.0),
              Sample(3.0, [3000.0], [320.0], [656_000.0], 280.0)]
    w = gpumon.summarise_window(inside, before, 1.0, 3.0, output_tokens=100, gpu_names=["NVIDIA H200"])
    assert w["peak_vram_mib_per_gpu"] == [4000.0] and w["peak_vram_mib"] == 4000.0
    assert w["energy_j"] == 651.0  # (656000 - 5000) mJ: from the sample before the window to the last inside
    assert w["energy_how"].startswith("NVML total-energy counter")
    assert w["joules_per_token"] == 6.51 and round(w["tokens_per_joule"], 4) == round(100 / 651, 4)
    assert w["mean_power_w_per_gpu"] == [(300 + 350 + 320) / 3] and w["mean_power_w"] == (300 + 350 + 320) / 3
    assert w["peak_host_rss_mib"] == 300.0


def test_window_integrates_power_without_counter():
    inside = [Sample(0.0, [10.0, 20.0], [100.0, 200.0], [None, None]), Sample(2.0, [11.0, 22.0], [100.0, 200.0], [None, None])]
    w = gpumon.summarise_window(inside, None, 0.0, 2.0, output_tokens=60)
    assert w["energy_j"] == 600.0 and "integrated" in w["energy_how"] and w["joules_per_token"] == 10.0
    assert w["peak_vram_mib"] == 33.0 and w["peak_vram_mib_per_gpu"] == [11.0, 22.0]  # the peak of the sum
    assert w["mean_power_w"] == 300.0 and w["mean_power_w_per_gpu"] == [100.0, 200.0]


def test_no_gpu_is_not_measured_never_zero():
    inside = [Sample(0.0, host_rss_mib=50.0), Sample(1.0, host_rss_mib=70.0)]
    w = gpumon.summarise_window(inside, None, 0.0, 1.0, 10, gpu_not_measured="NVML not available (x)")
    assert w["energy_j"] is None and w["joules_per_token"] is None and w["peak_vram_mib"] is None
    assert w["gpu_not_measured"] == "NVML not available (x)" and w["peak_host_rss_mib"] == 70.0
    row = gpumon.rows({"load": w})[0]
    assert row["gpu"].startswith("not measured") and row["energy_j"] is None


def test_sampler_here_measures_this_process_rss():
    import os

    from conftest import wait_for

    with gpumon.Sampler(interval_s=0.02) as mon:
        mon.watch(os.getpid())
        t0 = mon.mark()
        # the sampler's own thread adds samples after t0 (however loaded the machine, within the deadline)
        assert wait_for(lambda: sum(s.t > t0 for s in list(mon.samples)) >= 2, timeout_s=60)
        w = mon.window(t0, mon.mark(), output_tokens=5)
    assert w["samples"] >= 4 and w["peak_host_rss_mib"] > 10  # the two marks and the thread's samples between
    if mon.gpu_not_measured:  # a CPU box: GPU numbers stay None
        assert w["energy_j"] is None and w["peak_vram_mib"] is None


def test_offload_check():
    h200 = profiles.load("h200-x1")
    full = {"offloaded": {"layers": 65, "of": 65}, "kv_buffers_mib": {"CUDA0": 8192.0}}
    assert gpumon.offload_check(full, h200)["status"] == "pass"
    short = {"offloaded": {"layers": 40, "of": 65}, "kv_buffers_mib": {"CUDA0": 4000.0, "CPU": 4192.0}}
    c = gpumon.offload_check(short, h200)
    assert c["status"] == "warn" and "only 40 of 65" in c["fix"] and "CPU 4192 MiB" in c["fix"]
    assert gpumon.offload_check({}, profiles.load("cpu-default"))["status"] == "skip"
    pinned = {"offloaded": {"layers": 65, "of": 65}, "kv_buffers_mib": {"CUDA_Host": 8192.0}}  # --no-kv-offload
    assert gpumon.offload_check(pinned, h200)["status"] == "warn"
