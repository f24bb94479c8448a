"""Hardware profiles: one flat, commented YAML per box in params/, validated by one strict schema.

Every error names the file, the field, what was found and what is allowed, because a user who
typed `gpu_memory_utilisation` instead of `gpu_memory_utilization` deserves better than a silent
default (papermill itself only warns on unknown parameters). The file before the schema (size, text, strict
YAML, editing it with its comments kept): lab.core.profile_file.
"""
from __future__ import annotations

import difflib
import hashlib
import os
import re
import stat
import unicodedata
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lab.core import paths, profile_file, redaction
from lab.core.server_flags import GUARDED_FLAGS, guarded_flag
from lab.core.profile_file import ProfileError, parse

Engine = Literal["llama.cpp", "llama-cpp-python", "vllm", "external"]
KvDtype = Literal["f16", "bf16", "q8_0", "q4_0", "fp8", "fp8_e5m2", "fp8_e4m3", "auto"]
Dtype = Literal["auto", "half", "float16", "bfloat16", "float32"]
SplitMode = Literal["none", "layer", "row", "tensor"]  # llama.cpp -sm (common/arg.cpp of the pinned release)
QUANT_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_0", "Q5_1", "Q4_K_M",
               "Q4_K_S", "Q4_0", "Q4_1", "Q3_K_L", "Q3_K_M", "Q3_K_S", "Q2_K", "Q2_K_S", "IQ4_XS", "IQ4_NL",
               "IQ3_M", "IQ3_S", "IQ3_XS", "IQ3_XXS", "IQ2_M", "IQ2_S", "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S",
               "UD-Q5_K_XL", "UD-Q4_K_XL", "UD-Q4_K_M", "UD-IQ4_XS", "UD-Q3_K_XL", "UD-Q2_K_XL", "UD-IQ2_XXS",
               "AWQ-INT4", "GPTQ-INT4", "GPTQ-INT8", "FP8", "BNB-NF4")  # each sized in lab/data/weight_bits.yaml


# The name becomes folder and file names (outputs/<name>/, <name>.yaml copies): a file name holds at most 255 bytes,
# and a run folder adds its own parts; 100 leaves room.
MAX_NAME_CHARS = 100
# Free text (shown, never run): line breaks and tabs are fine there. Every other string becomes a command-line
# argument, a path, a URL or a file name, where a control character is an error at best (a NUL byte: "embedded
# null byte") and a smuggled second line at worst.
TEXT_FIELDS = ("description", "model_stand_in_reason")


class Profile(BaseModel):
    """One box: what hardware we expect, which engine and model, how to serve, what to measure."""

    # strict: `threads: true` or `port: "8080"` is a mistake to name, not a value to coerce (an int
    # is still accepted where a float is expected).
    # allow_inf_nan=False: NaN and infinity are refused in every float field and list (`tensor_split: [.nan, 1]`
    # would otherwise reach llama-server as `-ts nan/1`).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    # --- identity
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    description: str = Field(min_length=1)

    # --- expected hardware
    gpu_name_pattern: str | None = None  # regex over the NVML name, e.g. "V100.*32GB"
    gpu_count: int = Field(ge=0, le=16)
    gpu_vram_mib: int | None = Field(default=None, gt=0, le=1 << 22)
    gpu_compute_capability: str | None = Field(default=None, pattern=r"^\d+\.\d+$")
    nvlink_expected: bool = False
    gpu_memory_bandwidth_gb_s: float | None = Field(default=None, gt=0, le=100_000)  # datasheet, per GPU
    gpu_tdp_w: int | None = Field(default=None, gt=0, le=10_000)  # per GPU, for PSU advice
    host_ram_gib_min: float = Field(default=8, gt=0, le=65_536)

    # --- declared software (what the user installs or plans to; checked by `lab plan` without hardware)
    driver_version: str | None = Field(default=None, pattern=r"^\d+(\.\d+){0,2}$")
    cuda_toolkit: str | None = Field(default=None, pattern=r"^\d+\.\d+$")
    torch_cuda_wheel: str | None = Field(default=None, pattern=r"^(cpu|cu\d{3})$")  # e.g. cu126
    torch_version: str | None = Field(default=None, pattern=r"^\d+\.\d+(\.\d+)?$")

    # --- engine
    engine: Engine
    engine_version: str = Field(min_length=1)  # llama-cpp-python version for llama.cpp engines
    engine_python: str | None = None  # interpreter of a separate engine venv (e.g. .venv-vllm)
    # a community build of the engine the lab knows, NAME==VERSION: "1cat-vllm==1.3.0" (the Volta fork of vLLM,
    # lab/data/routes.yaml fork); engine_version is then the upstream vLLM it is built on, which its code reports
    engine_build: str | None = Field(default=None, pattern=r"^1cat-vllm==\d+(\.\d+){1,2}$")

    # --- model
    model_name: str = Field(min_length=1)
    model_file: str | None = None  # "embedded:smollm2", "embedded:gemma3-270m" or a path to a .gguf
    # HF-format folder for engines that cannot serve the GGUF (vLLM): "hf:embedded:smollm2" (the copy
    # `python3 -m lab.setup --engine vllm` makes of the embedded GGUF, see lab/setup/hfmodel.py) or a folder path.
    model_dir: str | None = None
    model_architecture: str = Field(min_length=1)  # "gguf:<model_file>" or "config:<stand-in id>"
    model_quant: str
    model_stand_in_for: str | None = None  # what the seeds called it, when it is not a real model
    model_stand_in_reason: str | None = None
    # A stand-in id `lab synth` writes as a random-weight GGUF of that shape when model_file is missing and the
    # run allows it (`lab run --synth-if-missing`, see lab/model/standin.py); model_synth_layers: fewer layers (trials).
    model_synth: str | None = None
    model_synth_layers: int | None = Field(default=None, ge=1, le=10_000)
    model_synthetic: bool = False  # set by the lab in the profile copy a run uses when it substituted the file

    # --- serving
    context_tokens: int = Field(gt=0, le=1_048_576)
    parallel_slots: int = Field(default=1, ge=1, le=1024)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    kv_cache_dtype: KvDtype = "f16"
    dtype: Dtype = "auto"
    tensor_parallel_size: int = Field(default=1, ge=1, le=16)
    # -1 = all layers. Left out: all layers on a GPU profile, none on a CPU one (`_default_offload`): a user's own
    # profile with only its card's facts must not plan a 27B in host RAM because one llama.cpp flag was not known.
    n_gpu_layers: int = Field(default=0, ge=-1, le=100_000)
    threads: int = Field(default=2, ge=1, le=512)
    enforce_eager: bool = False
    vllm_cpu_kvcache_gib: int | None = Field(default=None, ge=1, le=65_536)  # vLLM CPU build: VLLM_CPU_KVCACHE_SPACE (whole GiB)
    host: str = Field(default="127.0.0.1", pattern=r"^[A-Za-z0-9.:-]{1,253}$")  # an address or host name, nothing else
    port: int = Field(default=8080, ge=1024, le=65535)
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Z_][A-Z0-9_]*$")  # name of the env var
    # More llama-server flags, after the ones the lab derives from the fields above (what `lab tune` suggests,
    # e.g. ["-b", "512", "-ub", "512"]); shown with the reason "from the profile's server_args".
    server_args: list[str] = Field(default_factory=list, max_length=64)

    # --- several GPUs (lab/data/engine_rules.yaml says what each does, with sources)
    split_mode: SplitMode | None = None  # llama.cpp -sm; None = llama.cpp's default (layer)
    tensor_split: list[float] | None = None  # llama.cpp -ts: one share per visible GPU, e.g. [1, 1]
    main_gpu: int | None = Field(default=None, ge=0)  # llama.cpp -mg
    cuda_visible_devices: str | None = Field(default=None, pattern=r"^\d+(,\d+)*$")  # e.g. "0,1"
    pipeline_parallel_size: int = Field(default=1, ge=1, le=16)  # vLLM --pipeline-parallel-size
    nccl_p2p_disable: bool = False  # vLLM on a PCIe pair whose P2P hangs: NCCL_P2P_DISABLE=1 + --disable-custom-all-reduce

    # --- bring your own server: the lab starts nothing and measures this OpenAI-compatible server
    endpoint_url: str | None = None  # OpenAI-compatible base URL, e.g. http://127.0.0.1:11434/v1
    served_model: str | None = Field(default=None, min_length=1)  # the `model` name that server expects

    # --- benchmark plan
    bench_prompt_tokens: int = Field(default=128, gt=0, le=1_048_576)
    bench_output_tokens: int = Field(default=64, gt=0, le=131_072)
    bench_concurrency: list[int] = Field(default_factory=lambda: [1, 2, 4], min_length=1, max_length=32)
    bench_requests: int = Field(default=16, gt=0, le=100_000)
    bench_duration_s: float = Field(default=30, gt=0, le=86_400)
    tune_budget_s: float = Field(default=30, gt=0, le=86_400)  # `lab tune` + speculative decoding in notebook 06: time budget each
    # Speculative decoding's draft model for notebook 06: a GGUF path, or "synth:<layers>" = a random-weight file
    # of model_synth's shape with that many layers (lab/experiments/speculative.py); None: only ngram and MTP are tried.
    spec_draft: str | None = Field(default=None, pattern=r"^(synth:[1-9][0-9]*|[^:]+\.gguf)$")

    @field_validator("*")
    @classmethod
    def _no_control_characters(cls, v, info):
        for text in (v if isinstance(v, list) else [v]):
            if not isinstance(text, str):
                continue
            allowed = "\n\t\r" if info.field_name in TEXT_FIELDS else ""
            # Cf: invisible formatting characters, the direction overrides (U+202E) and zero-width ones (U+200B)
            # among them: a name, host or argument that reads as another ("127.0.0.1\u200b") or reorders what is
            # shown after it is refused, in every field
            bad = next((i for i, ch in enumerate(text) if ch not in allowed and
                        (unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"))), None)
            if bad is not None:
                where = "free text" if allowed else "a value that becomes a command-line argument, path or name"
                kind = "an invisible formatting" if unicodedata.category(text[bad]) == "Cf" else "a control"
                raise ValueError(f"holds {kind} character (U+{ord(text[bad]):04X} at position {bad} of {text!r:.60}); "
                                 f"{where} may not: remove it")
        return v

    @field_validator("server_args")
    @classmethod
    def _server_args(cls, v: list[str]) -> list[str]:
        for word in v:
            if flag := guarded_flag(word):
                raise ValueError(f"holds {word.split('=', 1)[0]!r}: {flag} binds, exposes or carries a secret, and the lab sets or refuses "
                                 f"it itself; {GUARDED_FLAGS[flag]}")
        return v

    @field_validator("api_key_env")
    @classmethod
    def _a_secret_variable(cls, v: str | None) -> str | None:
        problem = redaction.key_variable_problem(v) if v else None
        if problem:  # $PATH as the key of a server on every interface: refused however the settings came
            raise ValueError(problem)
        return v

    @field_validator("name")
    @classmethod
    def _name_fits_a_file_name(cls, v: str) -> str:
        if len(v) > MAX_NAME_CHARS:
            raise ValueError(f"{len(v)} characters; a profile name is at most {MAX_NAME_CHARS}, because it names the "
                             "run folders and files (outputs/<name>/...), and a file name holds at most 255 bytes: "
                             "shorten it (and the file's name)")
        return v

    @field_validator("model_quant")
    @classmethod
    def _known_quant(cls, v: str) -> str:
        if v not in QUANT_TYPES:
            raise ValueError(f"unknown quant type {v!r}; allowed: {', '.join(QUANT_TYPES)}")
        return v

    @field_validator("endpoint_url")
    @classmethod
    def _valid_url(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"https?://[^\s/?#@]+(/[^\s?#@]*)?", v):
            raise ValueError("must be an http(s) base URL such as http://127.0.0.1:11434/v1, with no user:password@ "
                             "(a key goes in the environment variable that api_key_env names)")
        return v

    @field_validator("gpu_name_pattern")
    @classmethod
    def _valid_regex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from exc
        return v

    @field_validator("bench_concurrency")
    @classmethod
    def _positive_levels(cls, v: list[int]) -> list[int]:
        if any(c < 1 or c > 4096 for c in v):
            raise ValueError("every concurrency level must be ≥ 1 and ≤ 4096")
        return v

    @field_validator("model_architecture")
    @classmethod
    def _arch_source(cls, v: str) -> str:
        if not re.match(r"^(gguf|config):.+", v):
            raise ValueError("must be 'gguf:<file or embedded:name>' or 'config:<stand-in id>'")
        return v

    @model_validator(mode="before")
    @classmethod
    def _default_offload(cls, data):
        if isinstance(data, dict) and "n_gpu_layers" not in data and isinstance(data.get("gpu_count"), int) \
                and data["gpu_count"] > 0 and data.get("engine") in ("llama.cpp", "llama-cpp-python"):
            return {**data, "n_gpu_layers": -1}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> "Profile":
        gpu_fields = ("gpu_name_pattern", "gpu_vram_mib", "gpu_compute_capability", "gpu_memory_bandwidth_gb_s")
        if self.gpu_count == 0:
            set_ = [f for f in gpu_fields if getattr(self, f) is not None]
            if set_ or self.nvlink_expected or self.tensor_parallel_size > 1:
                given = [f"{f}={getattr(self, f)!r}" for f in set_]
                given += ["nvlink_expected=True"] if self.nvlink_expected else []
                given += [f"tensor_parallel_size={self.tensor_parallel_size}"] if self.tensor_parallel_size > 1 else []
                raise ValueError(f"gpu_count is 0 but GPU settings are given ({', '.join(given)}); "
                                 "set gpu_count or remove them")
        else:
            missing = [f for f in gpu_fields if getattr(self, f) is None]
            if missing:
                raise ValueError(f"gpu_count is {self.gpu_count} so these are required: {', '.join(missing)}")
        if self.tensor_parallel_size * self.pipeline_parallel_size > max(self.gpu_count, 1):
            pp = f" x pipeline_parallel_size {self.pipeline_parallel_size}" if self.pipeline_parallel_size > 1 else ""
            raise ValueError(f"tensor_parallel_size {self.tensor_parallel_size}{pp} > gpu_count {self.gpu_count}")
        self._check_multi_gpu()
        if self.nvlink_expected and self.gpu_count < 2:
            raise ValueError(f"nvlink_expected is true but gpu_count is {self.gpu_count}; NVLink needs gpu_count ≥ 2")
        if self.engine_build is not None and self.engine != "vllm":
            raise ValueError(f"engine_build {self.engine_build} is a build of vLLM: it needs engine vllm")
        if self.vllm_cpu_kvcache_gib is not None and (self.engine != "vllm" or self.gpu_count > 0):
            raise ValueError("vllm_cpu_kvcache_gib sizes the KV cache of vLLM's CPU build: it needs engine vllm and gpu_count 0")
        if self.model_stand_in_for and not self.model_stand_in_reason:
            raise ValueError("model_stand_in_for is set: say why in model_stand_in_reason")
        if self.host not in ("127.0.0.1", "localhost", "::1") and not self.api_key_env:
            raise ValueError(f"host {self.host!r} exposes the server beyond this machine; "
                             "set api_key_env (the name of an env var holding the key) or use 127.0.0.1")
        if self.engine in ("llama.cpp", "llama-cpp-python") and self.model_quant in ("AWQ-INT4", "GPTQ-INT4", "GPTQ-INT8", "BNB-NF4"):
            raise ValueError(f"engine {self.engine!r} loads GGUF files; model_quant {self.model_quant!r} is a "
                             "vLLM/transformers format (use a GGUF type such as Q4_K_M, or engine vllm)")
        return self

    def _check_multi_gpu(self) -> None:
        llama = self.engine in ("llama.cpp", "llama-cpp-python")
        llama_set = [f for f in ("split_mode", "tensor_split", "main_gpu") if getattr(self, f) is not None]
        if llama_set and self.engine != "llama.cpp":
            raise ValueError(f"{', '.join(llama_set)}: llama-server settings (-sm/-ts/-mg); engine is {self.engine!r}")
        if (self.pipeline_parallel_size > 1 or self.nccl_p2p_disable) and self.engine != "vllm":
            raise ValueError("pipeline_parallel_size and nccl_p2p_disable are vLLM settings; engine is "
                             f"{self.engine!r} (llama.cpp spreads layers with split_mode: layer)")
        visible = len(self.cuda_visible_devices.split(",")) if self.cuda_visible_devices else self.gpu_count
        if llama_set and self.gpu_count == 0:
            raise ValueError(f"{', '.join(llama_set)} set but gpu_count is 0")
        if self.tensor_split is not None and (len(self.tensor_split) != visible or any(x < 0 for x in self.tensor_split)
                                              or not sum(self.tensor_split)):
            raise ValueError(f"tensor_split {self.tensor_split}: give one non-negative share per visible GPU "
                             f"({visible}), not all zero, e.g. {[1] * visible}")
        if self.main_gpu is not None and self.main_gpu >= visible:
            raise ValueError(f"main_gpu {self.main_gpu} but only {visible} GPU(s) visible (indices 0..{visible - 1})")
        if self.split_mode == "tensor" and llama and self.kv_cache_dtype not in ("f16", "bf16", "auto"):
            raise ValueError(f"split_mode tensor needs an unquantized KV cache (f16 or bf16), found kv_cache_dtype "
                             f"{self.kv_cache_dtype!r} (llama.cpp docs/multi-gpu.md)")

    @model_validator(mode="after")
    def _endpoint(self) -> "Profile":
        """An endpoint profile names a server the user already runs: what the lab needs to reach it, and
        nothing that only matters for a server the lab starts (that would be silently ignored)."""
        if self.endpoint_url is None:
            if self.served_model is not None:
                raise ValueError("served_model names the model of a server you run: set endpoint_url too, or remove it")
            return self
        if self.served_model is None:
            raise ValueError(f"endpoint_url is {self.endpoint_url!r} so served_model is required: the `model` name "
                             "that server expects (`ollama list`, LM Studio's model list, or GET <endpoint_url>/models)")
        start_only = [f for f in ("host", "port", "engine_python", "model_dir", "vllm_cpu_kvcache_gib")
                      if f in self.model_fields_set]
        if start_only:
            raise ValueError(f"endpoint_url is set, so the lab starts no server, and {', '.join(start_only)} only apply "
                             "to a server the lab starts: remove them (the URL says where the server is)")
        return self

    @property
    def endpoint_base(self) -> str | None:
        """endpoint_url without a trailing "/" or "/v1": the server's root, where the lab adds /v1/... and
        the engines' own routes (/props, /api/ps, /metrics)."""
        if self.endpoint_url is None:
            return None
        url = self.endpoint_url.rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url

    @property
    def bench_levels(self) -> list[int]:
        return sorted(set(self.bench_concurrency))


def resolve(name_or_path: str | Path) -> Path:
    """A profile name ("cpu-default") or a path to a YAML file → the file's path."""
    p = Path(name_or_path)
    # a line break (or other control or invisible character) in a file's name would print as two lines: a name
    # ending in "\nok      params/x.yaml" forged an "ok" line in `lab validate`; such a name is refused, shown escaped
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in str(name_or_path)):
        raise ProfileError(f"{str(name_or_path)!r}: the file name holds a control or invisible character; rename the file")
    if p.suffix in (".yaml", ".yml") or p.exists() or "/" in str(name_or_path):
        if not p.exists():
            raise ProfileError(f"{p}: no such file")
        return p
    candidate = paths.PARAMS / f"{name_or_path}.yaml"
    if not candidate.exists():
        known = ", ".join(sorted(x.stem for x in paths.PARAMS.glob("*.yaml")))
        raise ProfileError(f"unknown profile {str(name_or_path)!r}; known profiles: {known} (or give a path to a .yaml file)")
    return candidate


# Relative model paths in a profile are resolved from the project folder (lab.core.paths.ROOT, the one holding the
# Makefile and params/, so `model_file: models/x.gguf` means <project>/models/x.gguf), once, here: the manifest, the
# server command and every notebook then see the same absolute path whatever folder they run in (the
# notebooks run in notebooks/). "embedded:..." / "hf:..." names are left as they are.
_PATH_FIELDS = {"model_file": "embedded:", "model_dir": "hf:"}


def _absolute(spec: str, base: Path) -> str:
    p = Path(spec).expanduser()
    return str(p if p.is_absolute() else (base / p).resolve())


def _resolve_paths(profile: Profile) -> Profile:
    base = paths.ROOT
    update = {}
    for name, keep_prefix in _PATH_FIELDS.items():
        spec = getattr(profile, name)
        if spec and not spec.startswith(keep_prefix):
            update[name] = _absolute(spec, base)
    kind, _, ref = profile.model_architecture.partition(":")
    if kind == "gguf" and not ref.startswith("embedded:"):
        update["model_architecture"] = f"gguf:{_absolute(ref, base)}"
    return profile.model_copy(update=update) if update else profile


def _model_file_problem(profile: Profile, path: Path | str) -> str | None:
    """A model path that exists but cannot be a model (a device such as /dev/zero, a folder for a GGUF):
    refused here, before anything hashes or loads it. A *missing* file is not an error here: GPU profiles
    name files of another machine (see `findings`)."""
    checks = [("model_file", profile.model_file, "embedded:")]
    if profile.model_architecture.startswith("gguf:"):
        checks.append(("model_architecture", profile.model_architecture[5:], "embedded:"))
    for name, spec, keep_prefix in checks:
        if not spec or spec.startswith(keep_prefix):
            continue
        p = Path(spec)
        try:
            info = p.stat()
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode):
            what = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file (a device, pipe or socket)"
            return f"{path}: field '{name}': found {spec!r}; it is {what}; give the path of a .gguf file"
        with open(p, "rb") as fh:
            magic = fh.read(4)
        if magic != b"GGUF":
            return (f"{path}: field '{name}': found {spec!r}; it is not a GGUF file (first bytes {magic!r}, "
                    f"expected b'GGUF'); relative paths are resolved from the project folder {paths.ROOT}")
    return None


def load(name_or_path: str | Path) -> Profile:
    """Load and validate a profile; raise ProfileError with a message fit to show a user."""
    path = resolve(name_or_path)
    data = parse(path)
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(profile_file.errors_text(path, data, exc, Profile.model_fields)) from None
    if profile.name != path.stem and path.parent.resolve() == paths.PARAMS.resolve():
        raise ProfileError(f"{path}: field 'name': found {profile.name!r}; must equal the file name {path.stem!r}")
    return _checked_paths(profile, path)


def from_data(data: dict, source: str) -> Profile:
    """A profile from settings that came as a mapping, not a file (the keys papermill injected into a notebook
    from `-f params/X.yaml`): the same schema, rules and messages as `load`, each message starting with
    `source` where `load` names the file."""
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(profile_file.errors_text(source, data, exc, Profile.model_fields)) from None
    return _checked_paths(profile, source)


def _checked_paths(profile: Profile, source: Path | str) -> Profile:
    profile = _resolve_paths(profile)
    problem = _model_file_problem(profile, source)
    if problem:
        raise ProfileError(problem)
    return profile


def findings(profile: Profile) -> list[str]:
    """What is valid but will not work on *this* machine as written (a missing model file): notes for
    `lab validate` and `lab plan`, not errors, because a V100 profile names a file on the V100 box."""
    out = []
    if profile.model_file and profile.engine != "external":
        try:
            p = paths.model_path(profile.model_file)
            if not p.exists():
                out.append(f"model_file {profile.model_file!r}: no such file on this machine")
        except (paths.SetupMissing, KeyError) as exc:
            out.append(f"model_file {profile.model_file!r}: not available on this machine ({exc})")
    if profile.engine_python:  # a profile is code: this program is run; say what it is here
        exe = Path(profile.engine_python).expanduser()
        exe = exe if exe.is_absolute() else paths.ROOT / exe
        if not exe.exists():
            out.append(f"engine_python {profile.engine_python!r}: not on this machine (set-up makes it, or the "
                       "profile is for another box)")
        elif not (exe.is_file() and os.access(exe, os.X_OK)):
            out.append(f"engine_python {profile.engine_python!r}: not an executable file")
        else:
            out.append(f"engine_python {str(exe)!r} is run as the engine's Python: use profiles you trust")
    return out


def sha256_of(name_or_path: str | Path) -> str:
    return hashlib.sha256(resolve(name_or_path).read_bytes()).hexdigest()


def all_profiles() -> list[Path]:
    return sorted(paths.PARAMS.glob("*.yaml"))


def settings(profile: Profile) -> dict:
    """The settings a profile was given (not every default), as plain JSON values: what `lab run` passes each notebook
    (its `settings` parameter) and what `varied` changes. Validated again, they make the same profile; a dump of
    every field would not always validate (an endpoint profile may not name host or port: a rule of the schema)."""
    return profile.model_dump(mode="json", exclude_unset=True)


def varied(profile: Profile, **values) -> Profile:
    """The profile with the values a learner set at the top of a notebook section (e.g. `context_tokens=131072`),
    validated by the same schema and messages as a profile file, so a typo or a value llama.cpp does not take
    ("kv_cache_dtype: found 'q5_0'") fails there with the fix. Values equal to the profile's change nothing (the
    same object comes back: a papermill run, whose section values are the profile's, is the profile's run); a
    changed value is named in the description, so a record written from it does not pass for the profile as filed."""
    changed = {k: v for k, v in values.items() if getattr(profile, k, object()) != v}
    if not changed:
        return profile
    unknown = [k for k in changed if k not in Profile.model_fields]
    if unknown:
        near = difflib.get_close_matches(unknown[0], list(Profile.model_fields), n=1)
        raise ProfileError(f"notebook value {unknown[0]!r} is not a profile field"
                           + (f": did you mean {near[0]!r}?" if near else " (params/cpu-default.yaml lists them)"))
    note = ", ".join(f"{k} {v}" for k, v in changed.items())
    data = {**settings(profile), **changed,
            "description": f"{profile.description} (varied in the notebook: {note})"}
    return from_data(data, f"{profile.name} with the notebook's values")
