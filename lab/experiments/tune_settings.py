"""What a `lab tune` point is (pure): a `Setting` (one llama-server configuration), the profile's own (`baseline`),
the grid of one change at a time (`grid`), and why llama.cpp would refuse one or it cannot serve the load
(`invalid`). lab.experiments.tune measures the points, lab.experiments.tune_choice picks the winner."""
from __future__ import annotations

from dataclasses import dataclass, replace

from lab.core import paths
from lab.core.profiles import Profile

SINGLE_STREAM_TOLERANCE = 0.95
BASELINE_NAME = "baseline (the profile)"
REPEAT_NAME = "baseline (the profile), again"  # dimension "repeat": measures noise, never a candidate
SOURCE_FA_V = "llama.cpp src/llama-context.cpp: 'quantized V cache requires flash_attn to be enabled'"
# llama-server keeps finished prompts' state in host RAM (--cache-ram, PR #16391) and, for models whose memory
# cannot be rolled back (recurrent / Gated DeltaNet hybrids, SWA), copies each slot's state into "context
# checkpoints" (-ctxcp, PR #15293). For Qwen3.8-27B one state is 149.6 MiB: every request copies it off the
# GPU, on the server's one loop thread, while the other streams wait.
SOURCE_SERVER_STATE = ("llama.cpp common/arg.cpp: '-cram, --cache-ram N: set the maximum cache size in MiB (default: "
                       "8192, -1 - no limit, 0 - disable)', '-ctxcp, --ctx-checkpoints N: max number of context "
                       "checkpoints to create per slot (default: 32)'; tools/server/server-context.cpp creates "
                       "checkpoints only when the memory cannot be partially removed (recurrent/hybrid) or uses SWA")
LLAMA_DEFAULT_VERBOSITY = 3  # common/common.h: verbosity = 3 (LOG_LEVEL_INFO); the lab's servers run -lv 4
SHORT_PROMPT_TOKENS = 32  # prompt_length's other value: a chat turn's size, where prefill is a small share
# What each dimension changes in a Setting (the grid varies only these; `combined` carries them over). The "load"
# dimensions change what the client sends, not the server: measured to explain a gap, never chosen as a winner.
DIM_FIELDS = {"threads": ("threads",), "batch": ("batch", "ubatch"), "flash_attn": ("flash_attn",),
              "kv_cache": ("kv", "flash_attn"), "slots": ("parallel_slots",), "sampling": ("sampling", "backend_sampling"),
              "server_state": ("prompt_cache_mib", "ctx_checkpoints"), "log_level": ("log_verbosity",),
              "context": ("context",), "prompt_length": ("prompt_tokens",), "mtp": ("spec_n_max",)}
LOAD_DIMENSIONS = ("prompt_length",)
SAMPLING = {  # request-side variants (llama-server /v1/completions fields); the lab's client asks temperature 0
    "greedy (temperature 0, default chain)": {},
    "top_k 1 only (samplers: [top_k])": {"samplers": ["top_k"], "top_k": 1},
    "temperature 0.8 (default chain)": {"temperature": 0.8},
}


@dataclass(frozen=True)
class Setting:
    """One server configuration. batch None = llama.cpp's default; flash_attn as -fa takes it."""

    name: str
    dimension: str
    threads: int
    kv: str
    parallel_slots: int
    flash_attn: str = "auto"
    batch: int | None = None
    ubatch: int | None = None
    sampling: str = "greedy (temperature 0, default chain)"
    backend_sampling: bool = False
    prompt_cache_mib: int | None = None  # --cache-ram; None = llama-server's default (8192 MiB)
    ctx_checkpoints: int | None = None  # -ctxcp; None = llama-server's default (32 per slot)
    prompt_tokens: int | None = None  # the load's prompt length; None = the profile's bench_prompt_tokens
    log_verbosity: int | None = None  # -lv; None = the lab's (lab.serving.engines.LLAMA_LOG_VERBOSITY)
    context: int | None = None  # -c; None = the profile's context_tokens
    spec_n_max: int | None = None  # --spec-type draft-mtp --spec-draft-n-max N (the model's MTP block); None = off

    def server_args(self) -> list[str]:
        """Flags beyond what lab.serving.engines builds from the profile fields (threads, kv, slots); -fa, -lv and -c
        are already in that command and are replaced there (`measure_point`)."""
        args = []
        if self.prompt_cache_mib is not None:
            args += ["--cache-ram", str(self.prompt_cache_mib)]
        if self.ctx_checkpoints is not None:
            args += ["-ctxcp", str(self.ctx_checkpoints)]
        if self.batch is not None:
            args += ["-b", str(self.batch)]
        if self.ubatch is not None:
            args += ["-ub", str(self.ubatch)]
        if self.backend_sampling:
            args += ["-bs"]
        if self.spec_n_max is not None:
            args += ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(self.spec_n_max)]
        return args

    def replaced(self) -> dict[str, str]:
        """The flags of the profile's command whose value this setting replaces: {flag: value}."""
        out = {"-fa": self.flash_attn}
        if self.log_verbosity is not None:
            out["-lv"] = str(self.log_verbosity)
        if self.context is not None:
            out["-c"] = str(self.context)
        return out


def baseline(profile: Profile) -> Setting:
    """The profile's own settings, -fa as its command has it (lab.serving.engines.llama_flash_attn)."""
    from lab.serving import engines, flag_table

    kv = flag_table.llama_kv_type(profile.kv_cache_dtype)
    return Setting(BASELINE_NAME, "baseline", profile.threads, kv, profile.parallel_slots,
                   engines.llama_flash_attn(kv, profile.split_mode))


def cores() -> int:
    return paths.usable_cores()


def _profile_flags(profile: Profile) -> dict[str, str]:
    """The profile's own server_args as {flag: value} ("--cache-ram 0 -ctxcp 0" → {"--cache-ram": "0", "-ctxcp": "0"}):
    a point that sets what the profile already sets would measure the baseline twice."""
    args = list(profile.server_args or [])
    return {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("-") and not args[i + 1].startswith("-")}


def grid(profile: Profile, n_cores: int | None = None) -> list[Setting]:
    """The baseline, then each dimension's other values with everything else at the baseline."""
    n_cores = n_cores or cores()
    base = baseline(profile)
    out = [base]

    def vary(dim: str, label: str, **changes):
        out.append(replace(base, name=f"{dim}: {label}", dimension=dim, **changes))

    # Most telling first, so a short budget still answers it: backend sampling (the biggest server lever seen: +22 %
    # served output at 16 streams on a lent H200 in a hand-patched sweep, not yet a committed run), the state copies
    # (prompt cache, context checkpoints: per request on a hybrid model) unless the profile already turns them off,
    # the request's sampling chain, flash attention, batch sizes, KV type, slots, threads.
    vary("sampling", "backend sampling (-bs, experimental)", backend_sampling=True)
    has = _profile_flags(profile)
    if has.get("--cache-ram") != "0":
        vary("server_state", "prompt cache off (--cache-ram 0)", prompt_cache_mib=0)
    if has.get("-ctxcp") != "0":
        vary("server_state", "context checkpoints off (-ctxcp 0)", ctx_checkpoints=0)
    if has.get("--cache-ram") != "0" and has.get("-ctxcp") != "0":
        vary("server_state", "both off (--cache-ram 0 -ctxcp 0)", prompt_cache_mib=0, ctx_checkpoints=0)
    for label in SAMPLING:
        if label != base.sampling:
            vary("sampling", label, sampling=label)
    for fa in ("on", "off"):
        if fa != base.flash_attn:
            vary("flash_attn", f"-fa {fa}", flash_attn=fa)
    for b, ub in ((512, 128), (512, 512), (4096, 1024)):
        vary("batch", f"-b {b} -ub {ub}", batch=b, ubatch=ub)
    for kv in ("f16", "q8_0", "q4_0"):
        if kv != base.kv:
            vary("kv_cache", f"-ctk/-ctv {kv}", kv=kv, flash_attn="on" if kv != "f16" else base.flash_attn)
    conc = max(profile.bench_levels)
    for np_ in sorted({conc, max(1, profile.parallel_slots // 2)} - {profile.parallel_slots}):
        vary("slots", f"-np {np_}", parallel_slots=np_)
    for t in sorted({1, max(1, profile.threads // 2), n_cores} - {profile.threads}):
        vary("threads", f"-t {t}", threads=t)
    # What the lab's own benchmark adds to a plain server (served ÷ in-process): its log level, its
    # context size, its prompt length. Last, so notebook 06's short budget still answers the ones above first.
    vary("log_level", f"-lv {LLAMA_DEFAULT_VERBOSITY} (llama.cpp's default)", log_verbosity=LLAMA_DEFAULT_VERBOSITY)
    if profile.context_tokens // 4 >= profile.parallel_slots:
        vary("context", f"-c {profile.context_tokens // 4}", context=profile.context_tokens // 4)
    if profile.bench_prompt_tokens != SHORT_PROMPT_TOKENS:
        vary("prompt_length", f"{SHORT_PROMPT_TOKENS}-token prompts (load, not a setting)", prompt_tokens=SHORT_PROMPT_TOKENS)
    for n in mtp_n_max(profile):
        vary("mtp", f"--spec-type draft-mtp --spec-draft-n-max {n}", spec_n_max=n)
    return out


def mtp_n_max(profile: Profile) -> tuple[int, ...]:
    """The draft-mtp n-max values to sweep: lab.experiments.speculative's when the model has an MTP block, else none."""
    from lab.experiments import speculative

    values = speculative.mtp_n_max_for(profile)
    return values if values == speculative.MTP_N_MAX else ()


def invalid(setting: Setting, profile: Profile, n_cores: int | None = None) -> str | None:
    """Why llama.cpp would refuse this setting or why it cannot serve the profile's load (None: valid)."""
    n_cores = n_cores or cores()
    if setting.kv in ("q8_0", "q4_0") and setting.flash_attn == "off":
        return f"quantized V cache ({setting.kv}) needs -fa on ({SOURCE_FA_V})"
    if setting.batch is not None and setting.ubatch is not None and setting.ubatch > setting.batch:
        return f"-ub {setting.ubatch} > -b {setting.batch}: llama.cpp clamps ub to b, so this is another point's setting"
    if setting.threads > n_cores:
        return f"-t {setting.threads} > {n_cores} cores: oversubscribed threads only measure contention"
    from lab.predict import kvcache

    ctx = setting.context or profile.context_tokens
    per_slot = kvcache.context_per_request("llama.cpp", ctx, setting.parallel_slots)  # lab tune runs llama-server
    need = (setting.prompt_tokens or profile.bench_prompt_tokens) + profile.bench_output_tokens + 16
    if per_slot < need:
        return (f"-np {setting.parallel_slots} leaves {per_slot} tokens per slot (-c {ctx} split), "
                f"below the {need} a request needs")
    return None
