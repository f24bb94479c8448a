"""Notebooks a learner can play with (issue 23, deliver 7): the values a learner would vary stand as plain assignments at
the top of the first code cell of the section that uses them, a profile field defaults to the profile's own value (so
a papermill run is the profile's run), and the section's "Try" text quotes numbers the lab computes — checked here
against the lab, so a changed formula or profile cannot leave a stale number in the narrative."""
import ast
import json
from pathlib import Path

import pytest

from lab.core import profiles
from lab.pages import kv_cache
from lab.model import models, quant_targets
from lab.predict import memory_plan, profile_speed
from lab.serving import engines

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
MIB, GIB = 2**20, 2**30

# notebook → section heading (start of its markdown cell) → the learner values its first code cell starts with
LEARNER_VALUES = {
    "03_quantize": {"## 7 · The 27B-class target": ["target_types"]},
    "04_serve": {"## The exact command": ["context_tokens", "parallel_slots", "kv_cache_dtype"]},
    "05_kv_cache_math": {
        "## 1. KV bytes per token": ["context_tokens", "parallel_slots"],
        "## 2. Does it fit?": ["kv_cache_dtype", "host_ram_gib_min", "gpu_count"],
        "### The seeds' target": ["card_profile", "weights_quant", "kv_cache_dtypes"],
    },
    "06_benchmarking": {
        "## The roofline": ["bench_prompt_tokens", "bench_output_tokens", "bench_concurrency"],
        "## Start the profile's server": ["bench_requests", "bench_duration_s"],
    },
}


def _cells(stem: str) -> list[dict]:
    return json.loads((NOTEBOOKS / f"{stem}.ipynb").read_text())["cells"]


def _section(stem: str, heading: str) -> tuple[str, str]:
    """(the section's markdown, the source of its first code cell)."""
    cells = _cells(stem)
    start = next(i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and "".join(c["source"]).startswith(heading))
    code = next(c for c in cells[start + 1:] if c["cell_type"] == "code")
    return "".join(cells[start]["source"]), "".join(code["source"])


def _leading_assignments(source: str) -> list[ast.Assign]:
    """The cell's first statements after its imports, while they assign one name."""
    out = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not out:
            continue
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            break
        out.append(node)
    return out


CASES = [(stem, heading, names) for stem, sections in LEARNER_VALUES.items() for heading, names in sections.items()]


@pytest.mark.parametrize("stem,heading,names", CASES, ids=[f"{s}:{h.lstrip('# ')[:20]}" for s, h, _ in CASES])
def test_learner_values_open_their_section(stem, heading, names):
    markdown, source = _section(stem, heading)
    assigned = _leading_assignments(source)
    assert [a.targets[0].id for a in assigned][:len(names)] == names, source
    lines = source.splitlines()
    for a in assigned[:len(names)]:
        name = a.targets[0].id
        assert "# " in lines[a.lineno - 1], f"{stem}: {name} has no comment saying what it is and what to try"
        if name in profiles.Profile.model_fields:  # the profile is the one source of its default
            assert ast.unparse(a.value) == f"s.profile.{name}", f"{stem}: {name} must default to s.profile.{name}"
    assert "**Try" in markdown, f"{stem}: section {heading!r} does not say what to try"


def test_the_papermill_parameters_cell_holds_no_learner_values():
    for stem, sections in LEARNER_VALUES.items():
        params = next(c for c in _cells(stem) if "parameters" in c["metadata"].get("tags", []))
        names = {n for ns in sections.values() for n in ns}
        assert not names & {a.targets[0].id for a in _leading_assignments("".join(params["source"]))
                            if isinstance(a.targets[0], ast.Name)}


def test_varied_is_the_profile_when_nothing_changes_and_validated_when_something_does():
    p = profiles.load("cpu-default")
    assert profiles.varied(p, context_tokens=p.context_tokens, parallel_slots=p.parallel_slots) is p
    q = profiles.varied(p, context_tokens=8192, parallel_slots=2)
    assert (q.context_tokens, q.parallel_slots, q.name) == (8192, 2, "cpu-default")
    assert q.description.endswith("(varied in the notebook: context_tokens 8192, parallel_slots 2)")
    with pytest.raises(profiles.ProfileError, match="field 'kv_cache_dtype': found 'q5_0'"):
        profiles.varied(p, kv_cache_dtype="q5_0")
    with pytest.raises(profiles.ProfileError, match="'contxt' is not a profile field: did you mean 'context_tokens'"):
        profiles.varied(p, contxt=8192)
    # a server you run (an endpoint profile may not name host or port): only the fields the profile set are carried
    ep = profiles.load("endpoint-example")
    e = profiles.varied(ep, context_tokens=8192)
    assert e.context_tokens == 8192 and e.endpoint_url == ep.endpoint_url
    assert {k: v for k, v in e.model_dump().items() if k not in ("context_tokens", "description")} == {
        k: v for k, v in ep.model_dump().items() if k not in ("context_tokens", "description")}


def _plan(name: str, **values) -> dict:
    p = profiles.varied(profiles.load(name), **values)
    return memory_plan.plan_memory(p, models.arch_for(p))


def _try_text(stem: str, heading: str) -> str:
    return " ".join(_section(stem, heading)[0].split())  # one line: the numbers may wrap


def _mib(plan: dict) -> str:
    """A cache as the dtype table's column shows it (two decimals: lab/data/fields.yaml cache_MiB_per_device)."""
    return f"{plan['kv_bytes_per_device'] / MIB:,.2f} MiB"


@pytest.mark.parametrize("name", ["cpu-default", "v100-32g-x1", "rtx4090-24g"])
def test_notebook_05_try_lines_are_computed_for_the_profile_at_hand(name):
    """Issue 44: the invitations were the CPU default's words ("try 16384: the cache grows 4-fold") on every profile;
    on the V100 that value shrinks its cache 8,790.5 → 1,622.5 MiB. Now they are computed for the profile, by the plan
    the tables show, in the table's rounding."""
    from types import SimpleNamespace

    from lab.pages import kv_cache_try

    p = profiles.load(name)
    text = kv_cache_try.invitations(SimpleNamespace(profile=p), models.arch_for(p))
    base = _plan(name)
    trained, ctx = models.arch_for(p).max_context, p.context_tokens
    other = next((c for c in (ctx * 4, ctx * 2) if c <= trained), ctx // 4)
    changed = _plan(name, context_tokens=other)
    assert f"`context_tokens = {other}`" in text and f"from {_mib(base)} to {_mib(changed)}" in text
    ratio = changed["kv_bytes_per_device"] / base["kv_bytes_per_device"]
    assert (ratio < 1) == (other < p.context_tokens) and "4-fold" not in text
    one = _plan(name, parallel_slots=1 if p.parallel_slots > 1 else 4)
    assert f"{one['context_tokens_per_sequence']:,} tokens per sequence, the cache {_mib(one)}" in text
    q8 = _plan(name, kv_cache_dtype="q8_0")
    assert f"{base['max_context_tokens']:,} → {q8['max_context_tokens']:,} tokens" in text
    if p.gpu_count == 1:
        assert f"→ {_plan(name, gpu_count=2)['max_context_tokens']:,} tokens" in text
    if name == "v100-32g-x1":  # the case the issue found: at 131,072 tokens "try 16384" shrank the cache
        assert other == 262144 and ratio > 1
    for stem in ("## 1. KV bytes per token", "## 2. Does it fit?"):  # the prose carries no profile's numbers now
        assert "cpu-default's" not in _try_text("05_kv_cache_math", stem)


def test_notebook_05_seeds_target_try_numbers_are_the_lab_s():
    target = _try_text("05_kv_cache_math", "### The seeds' target")

    def qwen(card: str, quant: str) -> dict:
        t = kv_cache.target_max_context_table(kv_cache.device_bytes(card), quant, ("f16", "q8_0"))
        return t[t.model == "qwen3.8-27b"].iloc[0].to_dict()

    a, b, c = qwen("v100-32g-x1", "Q4_K_M"), qwen("v100-32g-x1", "Q6_K"), qwen("v100-32g-x1", "Q8_0")
    assert f"from {a['weights_GiB']} to {b['weights_GiB']} GiB" in target
    assert f"from {a['max_context_f16']:,} to {b['max_context_f16']:,} tokens" in target
    assert f"{c['weights_GiB']} GiB, {c['max_context_f16']:,} tokens, {c['max_context_q8_0']:,} with a q8_0 cache" in target
    d = qwen("rtx4090-24g", "Q4_K_M")
    assert f"{d['max_context_f16']:,} tokens at Q4_K_M with an f16 cache, {d['max_context_q8_0']:,} with q8_0" in target


def test_notebook_04_try_numbers_are_the_lab_s():
    text = _try_text("04_serve", "## The exact command")
    p = profiles.load("cpu-default")
    assert _plan("cpu-default")["context_tokens_per_sequence"] == 1024
    assert _plan("cpu-default", parallel_slots=1)["context_tokens_per_sequence"] == 4096
    assert _plan("cpu-default", context_tokens=8192)["context_tokens_per_sequence"] == 2048
    assert "`n_ctx_slot` 4,096" in text and "instead of 1,024" in text and "gives 2,048 per slot" in text
    args = engines.build_command(profiles.varied(p, kv_cache_dtype="q8_0"), installed_version=p.engine_version).argv
    assert args[args.index("-fa") + 1] == "on" and args[args.index("-ctv") + 1] == "q8_0"
    assert f"says {_plan('cpu-default', kv_cache_dtype='q8_0')['kv_bytes_total'] / MIB:.2f} MiB instead of 90" in text
    assert _plan("v100-32g-x1")["context_tokens_per_sequence"] == 32768 and "gives 32,768" in text


def test_notebook_03_try_numbers_are_the_lab_s():
    text = _try_text("03_quantize", "## 7 · The 27B-class target")
    rows = {r["type"]: r for r in quant_targets.target_sizes(profiles.load("v100-32g-x1"), ["Q4_K_M", "IQ4_XS", "Q3_K_M"])
            if r["model_id"] == "qwen3.8-27b"}
    assert rows["IQ4_XS"]["predicted_bytes"] == 15_182_923_776  # IQ4_XS's mix needs n_gqa: target_sizes passes it
    for q in ("Q4_K_M", "IQ4_XS", "Q3_K_M"):
        assert f"{rows[q]['predicted_gb']:.2f} GB at {q} ({rows[q]['effective_bpw']:.2f}" in text
    left = ", ".join(f"{rows[q]['vram_left_gib']:.2f}".rstrip("0") for q in ("Q4_K_M", "IQ4_XS"))
    assert f"{left} and {rows['Q3_K_M']['vram_left_gib']:.2f} GiB of the card" in text
    with pytest.raises(Exception, match="Q2_K: the lab does not model"):
        quant_targets.target_sizes(profiles.load("v100-32g-x1"), ["Q2_K"])


def test_notebook_06_try_numbers_are_the_lab_s():
    text = _try_text("06_benchmarking", "## The roofline")
    host = {"bandwidth": {}}  # the CPU ceiling's ratio does not depend on the bandwidth: bytes per token only
    base, long = (profile_speed.roofline_for(profiles.varied(profiles.load("cpu-default"), bench_prompt_tokens=n), host)
                  for n in (128, 896))
    assert f"from {base['kv_bytes_per_seq'] / 1e6:.1f} to {long['kv_bytes_per_seq'] / 1e6:.1f} MB beside " \
           f"{base['weights_bytes'] / 1e6:.1f} MB of weights" in text
    ratio = (base["weights_bytes"] + base["kv_bytes_per_seq"]) / (long["weights_bytes"] + long["kv_bytes_per_seq"])
    assert f"drops to {100 * ratio:.0f} %" in text
    v = profiles.load("v100-32g-x1")
    r0, r1 = (profile_speed.roofline_for(profiles.varied(v, bench_prompt_tokens=n), {}) for n in (512, 16384))
    agg = {c["concurrency"]: c["aggregate_ceiling_tok_s"] for c in r0["by_concurrency"]}
    agg1 = {c["concurrency"]: c["aggregate_ceiling_tok_s"] for c in r1["by_concurrency"]}
    assert f"from {r0['decode_ceiling_tok_s']:.1f} to {r1['decode_ceiling_tok_s']:.1f} tok/s" in text
    assert f"from {agg[4]:.1f} to {agg1[4]:.1f}" in text
    wide = profile_speed.roofline_for(profiles.varied(v, bench_concurrency=[1, 2, 4, 8, 16]), {})
    by = {c["concurrency"]: c["aggregate_ceiling_tok_s"] for c in wide["by_concurrency"]}
    assert f"{by[8]:.1f} tok/s at 8 streams and {by[16]:.1f} at 16" in text
    sweep = _try_text("06_benchmarking", "## Start the profile's server")
    from lab.measure import load_levels

    assert " + ".join(map(str, load_levels.shares(32, 3))) in sweep and " + ".join(map(str, load_levels.shares(8, 3))) in sweep
