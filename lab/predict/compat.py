"""Compatibility rules: driver × CUDA × torch × engine × quantization × GPU, judged without hardware.

The rules' text, sources, fixes and thresholds are data (lab/data/compat_rules.yaml); each rule id has a small
predicate (lab/predict/compat_predicates.py), which this module runs. `evaluate(facts)` takes a flat dict of what is known —
declared by a profile (`facts_from_profile`) or seen on a machine (lab.measure.install) — and returns the
findings. A rule whose inputs are unknown (None) is skipped, never failed: "we cannot tell" is not
"it is broken".

Fact keys (all optional; unknown keys are refused so a typo cannot silently skip a rule):
    compute_capability float (7.0)      gpu_count int                nvlink_expected bool
    driver_version str ("535.129.03")   cuda_toolkit str ("12.2")    torch_version str ("2.7.1")
    torch_cuda_wheel str ("cu126"|"cpu") torch_arch_list list[str]    engine str ("vllm", "llama.cpp")
    engine_version str                  engine_command str (a whole command line, e.g. a guide's)
    model_architecture str ("config:qwen3-32b")  model_quant str ("GPTQ-INT4")
    vllm_quantization str (--quantization)  dtype str  kv_cache_dtype str  n_gpu_layers int
    tensor_parallel_size int            llama_cpp_gpu_offload bool
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from lab.core import facts as lab_facts
from lab.core.checks import Check
from lab.core.versions import cc_x10
from lab.predict.compat_predicates import PREDICATES

Severity = Literal["error", "warn", "info"]
SEVERITY_ORDER = {"error": 0, "warn": 1, "info": 2}

FACT_KEYS = (
    "compute_capability", "gpu_count", "nvlink_expected",
    "driver_version", "cuda_toolkit",
    "torch_version", "torch_cuda_wheel", "torch_arch_list",
    "engine", "engine_version", "engine_command", "engine_build",
    "model_architecture", "model_quant", "vllm_quantization",
    "dtype", "kv_cache_dtype", "n_gpu_layers", "tensor_parallel_size",
    "llama_cpp_gpu_offload",
)
# keys callers may attach for their own bookkeeping (lab.measure.install adds where each value came from)
IGNORED_KEYS = ("origin",)


@dataclass(frozen=True)
class Finding:
    """One violated (or noteworthy) rule: the message carries the actual numbers."""

    id: str
    severity: Severity
    message: str
    fix: str
    source: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RuleResult:
    """How one rule came out: "pass", "skip" (inputs unknown), or the worst of its findings."""

    id: str
    status: Literal["pass", "skip", "error", "warn", "info"]
    description: str
    findings: list[Finding] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    skip_reason: str = ""
    inputs: dict = field(default_factory=dict)
    fix: str = ""
    source: str = ""

    def to_check(self) -> Check:
        status = {"error": "fail", "warn": "warn", "info": "pass"}.get(self.status, self.status)
        if self.status == "skip":
            observed = self.skip_reason
        elif self.findings:
            observed = " | ".join(f.message for f in self.findings)
        else:
            observed = ", ".join(f"{k}={v}" for k, v in self.inputs.items())
        fix = " | ".join(dict.fromkeys(f.fix for f in self.findings)) if self.findings else ""
        return Check(self.id, status, observed, self.description, fix, self.source)


# ---------------------------------------------------------------- the rules as data
def rules() -> list[dict]:
    """The rules of lab/data/compat_rules.yaml, checked: each has an id with a predicate, a fix and a source."""
    data = lab_facts.load("compat_rules", "rules")
    entries = data["rules"]
    ids = [r.get("id") for r in entries]
    for rule in entries:
        for key in ("id", "description", "inputs", "fix", "source", "severity"):
            if not rule.get(key):
                raise lab_facts.DataError(f"compat_rules.yaml: rule {rule.get('id')!r} has no {key!r}")
        if rule["id"] not in PREDICATES:
            raise lab_facts.DataError(f"compat_rules.yaml: rule {rule['id']!r} has no predicate in lab/predict/compat_predicates.py")
        unknown = [k for k in list(rule["inputs"]) + list(rule.get("when", {})) if k not in FACT_KEYS]
        if unknown:
            raise lab_facts.DataError(f"compat_rules.yaml: rule {rule['id']!r} reads unknown facts {unknown}")
    missing = sorted(set(PREDICATES) - set(ids))
    if missing or len(ids) != len(set(ids)):
        raise lab_facts.DataError(f"compat_rules.yaml: predicates without a rule {missing}, or duplicate ids")
    return entries


def _normalise(facts: dict) -> dict:
    unknown = sorted(set(facts) - set(FACT_KEYS) - set(IGNORED_KEYS))
    if unknown:
        raise ValueError(f"unknown fact key(s) {unknown}; known: {', '.join(FACT_KEYS)}")
    f: dict[str, Any] = {k: facts.get(k) for k in FACT_KEYS}
    if f["engine"] == "vllm" and f["engine_build"] is None:  # vLLM's own release unless a known fork is named
        f["engine_build"] = "official"
    cc = f["compute_capability"]
    f["_cc10"] = cc_x10(cc) if cc is not None else None
    if f["compute_capability"] is not None:
        f["compute_capability"] = float(f["compute_capability"])
    if f["vllm_quantization"] is None and f["engine_command"]:  # `--quantization awq` / `-q awq` in a command
        m = re.search(r"(?:--quantization|\s-q)[ =]([a-z0-9_]+)", f["engine_command"])
        f["vllm_quantization"] = m.group(1) if m else None
    return f


def _applies(rule: dict, f: dict) -> tuple[bool, list[str], str]:
    """(applies, missing inputs, why not). A `when` on an unknown fact counts as a missing input."""
    missing = [k for k in rule["inputs"] if f.get(k) is None]
    for key, allowed in rule.get("when", {}).items():
        if f.get(key) is None:
            missing.append(key)
        elif f[key] not in allowed:
            return False, [], f"does not apply: {key} is {f[key]}, the rule is for {', '.join(allowed)}"
    return not missing, missing, f"unknown: {', '.join(missing)}" if missing else ""


def _run(rule: dict, f: dict) -> RuleResult:
    base = {"id": rule["id"], "description": " ".join(rule["description"].split()),
            "fix": " ".join(rule["fix"].split()), "source": " ".join(rule["source"].split())}
    ok, missing, why = _applies(rule, f)
    if not ok:
        return RuleResult(status="skip", missing=missing, skip_reason=why, **base)
    findings = []
    for outcome in PREDICATES[rule["id"]](f, rule):
        severity, message = outcome[0], outcome[1]
        fix = outcome[2] if len(outcome) > 2 else base["fix"]
        findings.append(Finding(rule["id"], severity, message, fix, base["source"]))
    status = min((x.severity for x in findings), key=SEVERITY_ORDER.get) if findings else "pass"
    inputs = {k: f[k] for k in rule["inputs"]}
    return RuleResult(status=status, findings=findings, inputs=inputs, **base)


# ---------------------------------------------------------------- public API
def evaluate_all(facts: dict) -> list[RuleResult]:
    """Every rule's result, in the data file's order (pass, skip or its findings)."""
    f = _normalise(facts)
    return [_run(rule, f) for rule in rules()]


def evaluate(facts: dict) -> list[Finding]:
    """The findings of every applicable rule, errors first. Rules with unknown inputs are skipped."""
    found = [x for result in evaluate_all(facts) for x in result.findings]
    return sorted(found, key=lambda x: SEVERITY_ORDER[x.severity])


def checks(facts: dict) -> list[Check]:
    """Every rule as a lab.core.checks.Check (fail/warn/pass/skip), for tables and charts."""
    return [r.to_check() for r in evaluate_all(facts)]


def facts_from_profile(profile) -> dict:
    """What a profile declares, as compat facts (run-time-only facts stay None)."""
    p = profile
    return {
        "compute_capability": float(p.gpu_compute_capability) if p.gpu_compute_capability else None,
        "gpu_count": p.gpu_count,
        "nvlink_expected": p.nvlink_expected,
        "driver_version": p.driver_version,
        "cuda_toolkit": p.cuda_toolkit,
        "torch_version": p.torch_version,
        "torch_cuda_wheel": p.torch_cuda_wheel,
        "torch_arch_list": None,          # only torch itself knows: lab.measure.install fills it in
        "engine": p.engine,
        "engine_version": p.engine_version,
        "engine_build": (p.engine_build or "").split("==")[0] or None,  # "1cat-vllm", or None (official)
        "engine_command": None,           # the lab builds commands itself; a guide's command can be checked
        "model_architecture": p.model_architecture,
        "model_quant": p.model_quant,
        "vllm_quantization": None,
        "dtype": p.dtype,
        "kv_cache_dtype": p.kv_cache_dtype,
        "n_gpu_layers": p.n_gpu_layers,
        "tensor_parallel_size": p.tensor_parallel_size,
        "llama_cpp_gpu_offload": None,    # only the built library knows: lab.measure.install fills it in
    }
