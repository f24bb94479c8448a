"""The tools tier of tests/unit/test_install.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
import pytest

from lab.core import profiles
from lab.measure import install
from lab.pages import install as page


@pytest.mark.tools
def test_this_machine_has_the_pinned_bindings_and_one_llama_cpp_build(smol_model):
    prof = profiles.load("cpu-default")
    versions = install.installed_versions(prof)
    lcp, server = versions["llama_cpp_python"], versions["llama_cpp_tools"]["llama-server"]
    assert lcp["version"] == "0.3.36" and lcp["system_info"] and lcp["gpu_offload"] is False  # the CPU build
    assert server["present"] and server["runs"] and server["build"] is not None and len(server["commit"]) >= 7
    nvcc = versions["nvcc"]
    assert (nvcc["path"] is None) == (nvcc["version"] is None)  # where nvcc is, its release is read
    checks = {c.name: c for c in install.install_checks(prof, versions)}
    assert checks["bindings and tools share one llama.cpp build"].status == "pass"
    assert all(checks[f"{t} built"].status == "pass" for t in ("llama-server", "llama-bench", "llama-quantize"))
    assert checks["llama.cpp can offload to the GPU"].status == "skip"  # a CPU profile does not need it
    rows = {r["what"]: r for r in page.versions_rows(versions)}
    assert rows["llama-cpp-python"]["version"] == "0.3.36" and rows["llama.cpp tools"]["version"].endswith(
        f"(commit {server['commit']})")
