"""The predicate of each compatibility rule (lab/data/compat_rules.yaml), by rule id: given the known facts (none
None) and the rule's data (thresholds, tables, text), what is wrong, as [(severity, message[, fix])]; [] when the
rule holds. lab.predict.compat checks the data against PREDICATES and runs them.
"""
from __future__ import annotations

import re
from datetime import date
from typing import Callable

from lab.core import facts as lab_facts
from lab.core.versions import version_tuple


def _rule_by_id(rule_id: str) -> dict:
    """Another rule's data (a table one rule shares with another); lab.predict.compat.rules checks the file."""
    return next(r for r in lab_facts.load("compat_rules", "rules")["rules"] if r["id"] == rule_id)


# ---------------------------------------------------------------- small parsers
def wheel_cuda(wheel: str) -> str | None:
    """"cu126" → "12.6", "cu118" → "11.8", "cu130" → "13.0"; "cpu" → None."""
    m = re.fullmatch(r"cu(\d+)(\d)", wheel)
    return f"{m.group(1)}.{m.group(2)}" if m else None


def _model_id(architecture: str) -> str | None:
    return architecture.split(":", 1)[1] if architecture.startswith("config:") else None


def _cc_text(cc10: int) -> str:
    return f"{cc10 // 10}.{cc10 % 10}"


# ---------------------------------------------------------------- predicates
# Each takes (facts, rule) and returns [(severity, message), ...] or [(severity, message, fix)];
# [] means the rule holds. Inputs are guaranteed known (not None) when a predicate runs.
Outcome = list[tuple]


def _driver_vs_cuda(driver: str, cuda: str, table_rule: dict, what: str) -> Outcome:
    drv = version_tuple(driver)
    major = cuda.split(".")[0]
    floor = table_rule["minor_version_floor"].get(major)
    if floor is None:
        return []  # a CUDA major the table does not cover: nothing sourced to say
    table = table_rule["min_driver"]
    need = table.get(cuda)
    if drv < version_tuple(floor):
        return [("error", f"driver {driver} cannot run {what}: CUDA {major}.x needs a driver ≥ {floor} even with "
                          f"minor-version compatibility" + (f" (≥ {need} for CUDA {cuda})" if need else ""))]
    exact = need is not None
    if not exact:  # not in the table: the nearest older release of the same major is a lower bound
        older = [k for k in table if k.split(".")[0] == major and version_tuple(k) < version_tuple(cuda)]
        if not older:
            return []
        ref = max(older, key=version_tuple)
        need = table[ref]
    if drv < version_tuple(need):
        needs = f"CUDA {cuda} needs ≥ {need}" if exact else f"CUDA {cuda} needs at least what CUDA {ref} needs (≥ {need})"
        return [("warn", f"driver {driver} is older than {what} wants ({needs}); it runs only through "
                         f"minor-version compatibility (CUDA {major}.x on ≥ {floor}): no PTX JIT, no features "
                         f"that need the newer driver")]
    return []


def _driver_for_cuda_toolkit(f: dict, rule: dict) -> Outcome:
    return _driver_vs_cuda(f["driver_version"], f["cuda_toolkit"], rule, f"CUDA toolkit {f['cuda_toolkit']}")


def _driver_for_torch_wheel(f: dict, rule: dict) -> Outcome:
    cuda = wheel_cuda(f["torch_cuda_wheel"])
    if cuda is None:
        return []
    table_rule = _rule_by_id(rule["uses_table_of"])
    return _driver_vs_cuda(f["driver_version"], cuda, table_rule,
                           f"torch {f['torch_cuda_wheel']} wheels (bundled CUDA {cuda} runtime)")


def _cuda13_drops_pre_turing(f: dict, rule: dict) -> Outcome:
    cc = f["_cc10"]
    major = version_tuple(f["cuda_toolkit"])[0]
    if major >= rule["first_major_without"] and cc < rule["min_capability"]:
        return [("error", f"CUDA toolkit {f['cuda_toolkit']} cannot compile for sm_{cc} (compute capability "
                          f"{_cc_text(cc)}): CUDA {rule['first_major_without']}+ needs ≥ {_cc_text(rule['min_capability'])} "
                          f"(nvcc fatal : Unsupported gpu architecture 'sm_{cc}')")]
    return []


def _last_driver_branch_for_volta(f: dict, rule: dict) -> Outcome:
    cc = f["_cc10"]
    branch = version_tuple(f["driver_version"])[0]
    if cc < rule["applies_below_capability"] and branch > rule["last_branch"]:
        return [("error", f"driver {f['driver_version']} (branch {branch}) does not support compute capability "
                          f"{_cc_text(cc)}: the {rule['last_branch']} branch is the last for Volta/Pascal/Maxwell")]
    return []


def _driver_branch_supported(f: dict, rule: dict) -> Outcome:
    branch = str(version_tuple(f["driver_version"])[0])
    eol = rule["end_of_life"].get(branch)
    # today's date, not a date in the data: a branch's end of life is a fact about the calendar
    if branch in rule["ended"] or (eol and eol < date.today().strftime("%Y-%m")):
        when = f" (end of life {eol})" if eol else ""
        return [("warn", f"driver {f['driver_version']}: branch R{branch} is past NVIDIA's end of life{when}; "
                         f"it runs, but gets no more fixes")]
    return []


def _torch_wheel_has_gpu_arch(f: dict, rule: dict) -> Outcome:
    wheel, cc = f["torch_cuda_wheel"], f["_cc10"]
    torch = f["torch_version"]
    if wheel == "cpu":
        return [("error", f"torch {torch} is the cpu wheel: it has no CUDA kernels for the GPU "
                          f"(compute capability {_cc_text(cc)})")]
    if cc not in rule["volta_capabilities"]:
        return []  # the lab's sourced table covers Volta only
    cuda = wheel_cuda(wheel)
    if cuda and int(cuda.split(".")[0]) in rule["no_volta_wheel_majors"]:
        return [("error", f"torch {torch}+{wheel} has no sm_{cc} kernels: no CUDA {cuda.split('.')[0]}.x wheel "
                          f"carries Volta")]
    entry = rule["volta_wheels"].get(wheel)
    if entry is None:
        return [("info", f"the lab has no record of whether torch {torch}+{wheel} wheels carry sm_{cc}; "
                         f"check torch.cuda.get_arch_list()")]
    if version_tuple(torch)[:2] > version_tuple(entry["last_torch"])[:2]:
        if entry["after"] == "error":
            return [("error", f"torch {torch}+{wheel} has no sm_{cc} kernels: {wheel} wheels dropped Volta after "
                              f"torch {entry['last_torch']}")]
        return [("warn", f"torch {torch}+{wheel}: {wheel} wheels are known to keep sm_{cc} only through torch "
                         f"{entry['last_torch']}; check torch.cuda.get_arch_list()")]
    return []


def _arch_number(arch: str) -> tuple[str, int] | None:
    m = re.fullmatch(r"(sm|compute)_(\d+)[a-z]?", arch.strip().lower())
    return (m.group(1), int(m.group(2))) if m else None


def _torch_arch_list_covers_gpu(f: dict, rule: dict) -> Outcome:
    cc = f["_cc10"]
    archs = [a for a in map(_arch_number, f["torch_arch_list"]) if a]
    cubin = any(kind == "sm" and n // 10 == cc // 10 and n <= cc for kind, n in archs)
    ptx = any(kind == "compute" and n <= cc for kind, n in archs)
    if cubin or ptx:
        return []
    return [("error", f"torch.cuda.get_arch_list() = {list(f['torch_arch_list'])} has no kernel for sm_{cc} "
                      f"(compute capability {_cc_text(cc)}): expect 'no kernel image is available for execution "
                      f"on the device'")]


def vllm_wheel_archs(version: str) -> dict | None:
    """The measured PyPI wheel of vLLM `version` (lab/data/vllm_volta.yaml, read by lab.measure.wheel_arch): its
    core kernels' cubin architectures and the torch it pins; the nearest measured release at or below `version`
    when that one was not measured but a later measured one agrees with it. None before the first measured one."""
    wheels = sorted(lab_facts.load("vllm_volta")["wheels"], key=lambda w: version_tuple(w["version"]))
    v = version_tuple(version)
    below = [w for w in wheels if version_tuple(w["version"]) <= v]
    if not below:
        return None
    w = below[-1]
    above = [x for x in wheels if version_tuple(x["version"]) > v]
    if w["version"] != version and above and (70 in above[0]["core"]) != (70 in w["core"]):
        return None  # between a measured release with sm_70 and one without: not known
    return w


def _vllm_supports_gpu_arch(f: dict, rule: dict) -> Outcome:
    cc, ver = f["_cc10"], f["engine_version"]
    v = version_tuple(ver)
    if cc < rule["min_capability"]:
        return [("error", f"vLLM needs compute capability ≥ {_cc_text(rule['min_capability'])}; this GPU has {_cc_text(cc)}")]
    if cc >= rule["volta_below"]:
        return []
    if v <= version_tuple(rule["last_v0_on_volta"]):
        return []
    wheel = vllm_wheel_archs(ver)
    if wheel is not None and cc not in wheel["core"]:
        return [("error", f"vLLM {ver}'s PyPI wheel carries no sm_{cc} kernels (measured: {wheel['wheel']} has "
                          f"{', '.join(f'sm_{a}' for a in wheel['core'] if a >= 70)}; torch {wheel['torch']}): "
                          f"the last release whose wheels carry sm_{cc} is {rule['last_wheel_with_sm70']}")]
    where = (f"its PyPI wheel carries sm_{cc} (measured, {wheel['wheel']}, torch {wheel['torch']})" if wheel else
             f"whether its wheel carries sm_{cc} was not measured (0.17-{rule['last_wheel_with_sm70']} do, 0.20 on do not)")
    if v[:2] <= version_tuple(rule["last_docs_listing_volta"])[:2]:
        return [("warn", f"vLLM {ver} on compute capability {_cc_text(cc)} runs only the V1 engine (V0 ran on Volta "
                         f"up to {rule['last_v0_on_volta']}): TRITON_ATTN, slow on V100; {where}")]
    return [("warn", f"vLLM {ver} no longer documents compute capability {_cc_text(cc)} (docs list it up to "
                     f"v{rule['last_docs_listing_volta']}), but {where}: it may run, untested by vLLM")]


def _vllm_supports_model(f: dict, rule: dict) -> Outcome:
    model = _model_id(f["model_architecture"])
    need = rule["min_vllm"].get(model) if model else None
    if need and version_tuple(f["engine_version"]) < version_tuple(need):
        return [("error", f"vLLM {f['engine_version']} cannot load {model}: its architecture needs vLLM ≥ {need}")]
    return []


def _vllm_serves_hybrid_on_volta(f: dict, rule: dict) -> Outcome:
    model = _model_id(f["model_architecture"])
    if model not in rule["hybrid_models"] or f["_cc10"] >= rule["volta_below"]:
        return []
    first, ver = rule["hybrid_models"][model], f["engine_version"]
    wheel = vllm_wheel_archs(ver)
    if version_tuple(ver) < version_tuple(first):
        return []  # vllm_supports_model says it cannot load the model at all
    if wheel is not None and f["_cc10"] not in wheel["core"]:
        return [("error", f"vLLM {ver} cannot serve {model} on compute capability {_cc_text(f['_cc10'])}: its wheel has "
                          f"no sm_{f['_cc10']} kernels (lab/data/vllm_volta.yaml); the releases that load {model} and "
                          f"still carry sm_70 are {first}-{rule['last_wheel_with_sm70']}")]
    return [("warn", f"{model} (Gated DeltaNet hybrid) on compute capability {_cc_text(f['_cc10'])} with vLLM {ver}: "
                     f"the wheels of {first}-{rule['last_wheel_with_sm70']} carry sm_70 kernels and their torch (2.10) "
                     f"and Triton (3.6) still target sm_70 (measured, lab/data/vllm_volta.yaml), so nothing in the "
                     f"binaries forbids it; but no public report shows an official release serving it on a V100 "
                     f"(none found, 2026-12). The route owners report working: the community fork "
                     f"{rule['community_route']}")]


def _quant_format_min_capability(f: dict, rule: dict) -> Outcome:
    quant, cc = f["model_quant"], f["_cc10"]
    entry = rule["formats"].get(quant)
    if entry is None and re.match(r"^I?Q\d", quant):
        entry = {"min": rule["gguf_min"]}
    if entry is None:
        return []
    if cc < entry["min"]:
        return [("error", f"{quant} needs compute capability ≥ {_cc_text(entry['min'])} in vLLM; this GPU has "
                          f"{_cc_text(cc)} (vLLM: 'Minimum capability: {entry['min']}. Current capability: {cc}.')")]
    if "fast_from" in entry and cc < entry["fast_from"]:
        return [("info", f"{quant} on compute capability {_cc_text(cc)} {entry['below_fast']}",
                 "nothing to fix: it runs, only slower per token than on GPUs with the faster kernel")]
    return []


def _vllm_fork_on_volta(f: dict, rule: dict) -> Outcome:
    """The Volta fork: sm_70 only; AWQ / FP8 / GPTQ weights; fp16 or fp8_e5m2 KV; Qwen3.8 at TP2 unverified."""
    cc, quant, kv = f["_cc10"], f["model_quant"], f["kv_cache_dtype"]
    out = []
    if cc != 70:
        out.append(("error", f"the fork 1Cat-vLLM is built for compute capability 7.0 only (sm_70 wheel); this GPU "
                             f"has {_cc_text(cc)}: use stock vLLM there"))
    if quant not in ("AWQ-INT4", "FP8", "GPTQ-INT4"):
        out.append(("warn", f"{quant} weights: the fork's published routes are AWQ 4-bit and FP8 checkpoints"))
    if kv in ("fp8", "fp8_e4m3"):
        out.append(("error", f"kv_cache_dtype {kv}: e4m3 fails on SM70 ('fp8e4nv not supported'); the fork's "
                             "--kv-cache-dtype fp8 means E5M2 since 1.3.0: write fp8_e5m2"))
    if _model_id(f["model_architecture"] or "") == "qwen3.8-27b":
        out.append(("info", "community code, not a vLLM release: Qwen3.8-27B at two cards has no published fork "
                            "figure (FP8 is accepted at TP4; an AWQ checkpoint has one user's report, 1Cat-vLLM #334)",
                    "run the lab's benchmark on the cards before relying on it"))
    return out


def _vllm_kernel_min_capability(f: dict, rule: dict) -> Outcome:
    kernel, cc = f["vllm_quantization"].lower(), f["_cc10"]
    need = rule["kernels"].get(kernel)
    if need is not None and cc < need:
        return [("error", f"--quantization {kernel} needs compute capability ≥ {_cc_text(need)}; this GPU has {_cc_text(cc)}")]
    return []


def _bf16_needs_ampere(f: dict, rule: dict) -> Outcome:
    dtype, cc, need = f["dtype"], f["_cc10"], rule["min_capability"]
    if cc >= need:
        return []
    if dtype == "bfloat16":
        return [("error", f"dtype bfloat16 needs compute capability ≥ {_cc_text(need)}; this GPU has {_cc_text(cc)}")]
    if dtype == "auto":
        ver = f.get("engine_version")
        if ver and version_tuple(ver) >= version_tuple(rule["auto_fallback_from"]):
            return [("info", f"dtype auto on compute capability {_cc_text(cc)}: vLLM {ver} falls back from the "
                             f"model's bfloat16 to float16 with a warning (from {rule['auto_fallback_from']})",
                     "set dtype half to say so explicitly")]
        return [("warn", f"dtype auto follows the model's config (bfloat16 for Qwen3/Gemma-3/Llama-3) and needs "
                         f"compute capability ≥ {_cc_text(need)} for it before vLLM {rule['auto_fallback_from']}; "
                         f"this GPU has {_cc_text(cc)}: set dtype half")]
    return []


def _fp8_kv_cache_capability(f: dict, rule: dict) -> Outcome:
    kv, cc = f["kv_cache_dtype"], f["_cc10"]
    if not kv.startswith("fp8") or cc >= rule["min_capability"]:
        return []
    ver = f["engine_version"]
    if version_tuple(ver) < version_tuple(rule["v1_only_from"]):
        return [("warn", f"kv_cache_dtype {kv} on compute capability {_cc_text(cc)}: only the old V0 engine of vLLM "
                         f"{ver} might run it (no FP8 hardware, software conversion); V1 needs ≥ "
                         f"{_cc_text(rule['min_capability'])} for e4m3")]
    if kv == "fp8_e5m2":
        return [("warn", f"kv_cache_dtype fp8_e5m2 on compute capability {_cc_text(cc)}: Triton can read e5m2 below "
                         f"8.9 (the limit is its e4m3 type), but no vLLM release documents an FP8 KV cache on this GPU; "
                         f"try it and compare outputs, or keep auto")]
    return [("error", f"kv_cache_dtype {kv} (e4m3) needs compute capability ≥ {_cc_text(rule['min_capability'])} under "
                      f"vLLM's V1 engine (the only engine in {ver}): Triton's fp8e4nv type does not exist on "
                      f"{_cc_text(cc)}")]


def _kv_cache_dtype_for_engine(f: dict, rule: dict) -> Outcome:
    engine, kv = f["engine"], f["kv_cache_dtype"]
    if kv in rule["unsupported"].get(engine, []):
        return [("error", f"engine {engine} has no KV cache type {kv}")]
    return []


def _llama_cpp_offloads_layers(f: dict, rule: dict) -> Outcome:
    if f["gpu_count"] > 0 and f["n_gpu_layers"] == 0:
        return [("error", f"n_gpu_layers is 0 with {f['gpu_count']} GPU(s): nothing is offloaded, every layer "
                          f"runs on the CPU")]
    return []


def _llama_cpp_build_has_gpu(f: dict, rule: dict) -> Outcome:
    if f["gpu_count"] > 0 and f["llama_cpp_gpu_offload"] is False:
        return [("error", f"this llama.cpp build has no GPU backend (llama_supports_gpu_offload() is False) but "
                          f"{f['gpu_count']} GPU(s) are expected: nothing will be offloaded")]
    return []


def _vllm_flags_current(f: dict, rule: dict) -> Outcome:
    command, ver = f["engine_command"], f["engine_version"]
    v = version_tuple(ver)
    used = set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", command))
    out: Outcome = []
    for entry in rule["flags"]:
        flag = entry["flag"]
        if flag not in used:
            continue
        fix = f"replace {flag} with {entry['replacement']}"
        if "removed_in" in entry and v >= version_tuple(entry["removed_in"]):
            out.append(("error", f"{flag} was removed in vLLM {entry['removed_in']} (this is {ver}): the server "
                                 f"refuses to start ({entry['source']})", fix))
        elif "noop_from" in entry and v >= version_tuple(entry["noop_from"]):
            out.append(("warn", f"{flag} does nothing in vLLM {ver} (V1 engine only, from {entry['noop_from']}); "
                                f"removed in {entry['removed_in']}", fix))
        elif "deprecated_from" in entry and v >= version_tuple(entry["deprecated_from"]):
            out.append(("warn", f"{flag} is deprecated in vLLM {ver} (from {entry['deprecated_from']}); removed in "
                                f"{entry['removed_in']}", fix))
    for entry in rule["entrypoints"]:
        if entry["old"] in command:
            out.append(("info", f"`python -m {entry['old']}` is deprecated in current vLLM in favour of "
                                f"`{entry['new']}`", f"use `{entry['new']}`"))
    return out


def _llama_cpp_tool_names(f: dict, rule: dict) -> Outcome:
    out: Outcome = []
    for token in f["engine_command"].split():
        name = token.rsplit("/", 1)[-1]
        new = rule["renamed"].get(name)
        if new and (token.startswith(("./", "/")) or name.endswith(".py")):
            out.append(("warn", f"`{token}` is the pre-June-2024 name: current llama.cpp builds `{new}` instead",
                        f"use `{new}`"))
    return out


def _tensor_parallel_uses_gpus(f: dict, rule: dict) -> Outcome:
    if f["gpu_count"] > 1 and f["tensor_parallel_size"] < f["gpu_count"]:
        return [("info", f"tensor_parallel_size {f['tensor_parallel_size']} with {f['gpu_count']} GPUs: "
                         f"{f['gpu_count'] - f['tensor_parallel_size']} GPU(s) stay idle for this server")]
    return []


PREDICATES: dict[str, Callable[[dict, dict], Outcome]] = {
    "driver_for_cuda_toolkit": _driver_for_cuda_toolkit,
    "driver_for_torch_wheel": _driver_for_torch_wheel,
    "cuda13_drops_pre_turing": _cuda13_drops_pre_turing,
    "last_driver_branch_for_volta": _last_driver_branch_for_volta,
    "driver_branch_supported": _driver_branch_supported,
    "torch_wheel_has_gpu_arch": _torch_wheel_has_gpu_arch,
    "torch_arch_list_covers_gpu": _torch_arch_list_covers_gpu,
    "vllm_supports_gpu_arch": _vllm_supports_gpu_arch,
    "vllm_supports_model": _vllm_supports_model,
    "vllm_serves_hybrid_on_volta": _vllm_serves_hybrid_on_volta,
    "quant_format_min_capability": _quant_format_min_capability,
    "vllm_fork_on_volta": _vllm_fork_on_volta,
    "vllm_kernel_min_capability": _vllm_kernel_min_capability,
    "bf16_needs_ampere": _bf16_needs_ampere,
    "fp8_kv_cache_capability": _fp8_kv_cache_capability,
    "kv_cache_dtype_for_engine": _kv_cache_dtype_for_engine,
    "llama_cpp_offloads_layers": _llama_cpp_offloads_layers,
    "llama_cpp_build_has_gpu": _llama_cpp_build_has_gpu,
    "vllm_flags_current": _vllm_flags_current,
    "llama_cpp_tool_names": _llama_cpp_tool_names,
    "tensor_parallel_uses_gpus": _tensor_parallel_uses_gpus,
}
