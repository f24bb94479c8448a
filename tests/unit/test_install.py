"""lab.install (notebook 02): what is installed on this machine, the facts the compatibility rules read (seen
here where the machine shows them, else the profile's word), and the checks. The first test looks at this
machine for real; the others give `machine_facts` and the checks versions as another machine would report them
(pure logic, no tool run)."""
from lab.core import profiles
from lab.measure import install
from lab.pages import install as page


V100 = {"name": "Tesla V100-PCIE-32GB", "compute_capability": "7.0"}  # NVML's name for the profile's card


def _versions(gpus=(), driver=None, nvcc=None, torch=None, offload=None, vllm=None) -> dict:
    """What installed_versions returns, as a given machine would report it."""
    return {"driver": driver, "cuda_driver_api": None, "gpus": list(gpus), "gpu_note": None,
            "nvcc": {"version": nvcc, "path": "/usr/local/cuda/bin/nvcc" if nvcc else None},
            "torch": torch or {"version": None, "reason": "not installed"},
            "llama_cpp_python": {"version": "0.3.36", "gpu_offload": offload, "system_info": "CPU : AVX2 = 1"},
            "llama_cpp_tools": {}, "vllm": {"version": vllm}, "jupyter": {"papermill": "2.6.0"}, "python": "3.11.7"}


def test_machine_facts_take_what_is_seen_over_what_the_profile_declares():
    prof = profiles.load("v100-32g-x1")
    seen = _versions(gpus=[V100], driver="580.65.06", nvcc="12.8", offload=True,
                     torch={"version": "2.7.1+cu126", "cuda": "12.6", "arch_list": ["sm_70", "sm_80"]})
    facts = install.machine_facts(prof, seen)
    assert facts["compute_capability"] == 7.0 and facts["gpu_count"] == 1 and facts["driver_version"] == "580.65.06"
    assert facts["torch_version"] == "2.7.1" and facts["torch_cuda_wheel"] == "cu126"
    assert facts["torch_arch_list"] == ["sm_70", "sm_80"] and facts["llama_cpp_gpu_offload"] is True
    assert {k: facts["origin"][k] for k in ("compute_capability", "cuda_toolkit", "torch_cuda_wheel")} == \
        {"compute_capability": "seen here", "cuda_toolkit": "seen here", "torch_cuda_wheel": "seen here"}
    # the card but no driver or nvcc seen: the profile's word, and the facts say so
    blind = install.machine_facts(prof, _versions(gpus=[V100]))
    assert blind["compute_capability"] == 7.0 and blind["origin"]["compute_capability"] == "seen here"
    assert blind["driver_version"] == prof.driver_version and blind["origin"]["driver_version"] == "declared"
    # no V100 at all (plan mode): only the profile's word, even where this machine shows an nvcc (13 here would
    # have been paired with the profile's driver for a box the user will not run on)
    plan = install.machine_facts(prof, _versions(nvcc="13.0"))
    assert plan["cuda_toolkit"] == "12.8" and set(plan["origin"].values()) == {"declared (plan mode)"}


def test_a_gpu_profile_on_a_build_without_offload_fails_with_the_rebuild_command():
    checks = {c.name: c for c in install.install_checks(profiles.load("v100-32g-x1"), _versions(gpus=[V100],
                                                                                              offload=False))}
    offload = checks["llama.cpp can offload to the GPU"]
    assert offload.status == "fail" and "LAB_CUDA_ARCH=70 make setup" in offload.fix
    assert checks["llama-cpp-python imports"].status == "pass"
    assert checks["llama-server built"].status == "fail" and checks["llama-server built"].fix == "run `make setup`"


def test_what_this_means_lists_failures_before_warnings():
    record = {"checks": [
        {"name": "w", "status": "warn", "observed": "a", "expected": "b", "fix": "f1", "source": "s1"},
        {"name": "ok", "status": "pass", "observed": "", "expected": "", "fix": "", "source": ""},
        {"name": "x", "status": "fail", "observed": "c", "expected": "d", "fix": "f2", "source": "s2"}]}
    text = page.closing_text(record)
    assert text.startswith("2 thing(s) to fix") and text.index("**fail: x**") < text.index("**warn: w**")
    assert "Fix: f2 *(source: s2)*" in text
    assert page.closing_text({"checks": []}).startswith("Everything the profile needs is installed")
