"""lab.pages.kv_cache (notebook 05's tables, charts and closing text): the numbers it shows are the KV arithmetic of
the architectures themselves — checked here against the per-layer shapes, not against a snapshot of the tables."""
from conftest import ROOT

from lab.core import profiles
from lab.model import models, quant_targets, weights
from lab.pages import kv_cache, session
from lab.predict import claims, claims_views, kvcache, memory_plan

GIB = 2**30
V100_BYTES = 32768 * 2**20


def f16_kv_bytes_per_token(arch) -> int:
    """K and V, 2 bytes each, for every layer that keeps a KV cache (a Gated DeltaNet layer keeps none)."""
    return 2 * len(arch.global_layers + arch.local_layers) * arch.n_kv_heads * arch.head_dim_k * 2


def test_kv_per_dtype_for_the_seeds_model():
    arch = models.stand_in("qwen3.8-27b")
    assert len(arch.global_layers) == 16 and len(arch.linear_layers) == 48  # 1 in 4 layers is full attention
    table = kv_cache.kv_dtype_table(arch, 4096, 1).set_index("kv_dtype")
    per_token = f16_kv_bytes_per_token(arch)
    assert per_token == 65_536 and table.loc["f16", "bytes_per_token"] == per_token
    # q8_0: blocks of 32 values in 34 bytes; q4_0: 32 values in 18 bytes
    assert table.loc["q8_0", "bytes_per_token"] == per_token // 2 * 34 // 32 == 34_816
    assert table.loc["q4_0", "bytes_per_token"] == per_token // 2 * 18 // 32 == 18_432
    state_mib = table.loc["f16", "of_which_linear_state_MiB"]
    assert state_mib == 149.62 and set(table["of_which_linear_state_MiB"]) == {state_mib}  # state is f32 whatever the KV
    assert table.loc["f16", "cache_MiB_per_device"] == round(4096 * per_token / 2**20 + state_mib, 2)


def test_the_naive_calculator_overstates_by_query_over_kv_heads():
    rows = kv_cache.stand_in_table().set_index("model")
    for mid in ("qwen3-32b", "qwen2.5-32b", "llama-3.1-8b"):  # dense GQA: every layer keeps KV
        arch = models.stand_in(mid)
        assert rows.loc[mid, "naive_overstates_32K"] == f"{arch.n_heads / arch.n_kv_heads:.1f}x"
        assert rows.loc[mid, "KiB_per_token"] == f16_kv_bytes_per_token(arch) / 1024
    hybrid = rows.loc["qwen3.8-27b"]
    assert hybrid["global/local/linear"] == "16/0/48" and float(hybrid["naive_overstates_32K"][:-1]) > 20


def test_the_27b_class_on_one_v100():
    rows = {(r["model"], r["context_tokens"]): r for r in kv_cache.target_rows(V100_BYTES, contexts=(4096, 65536),
                                                                              kv_dtypes=("f16",))}
    q = rows[("qwen3.8-27b", 4096)]
    assert q["kv_GiB"] == 0.25 and q["recurrent_state_GiB"] == round(149.62 / 1024, 3)  # 4096 × 64 KiB; the state
    assert q["total_GiB"] == round(q["weights_GiB"] + 0.25 + 149.62 / 1024 + q["overhead_GiB"], 2) and q["fits"]
    dense = rows[("qwen3-32b", 65536)]
    assert dense["kv_GiB"] == 16.0 and not dense["fits"] and dense["beyond_trained_context"]  # trained on 40,960
    table = kv_cache.target_max_context_table(V100_BYTES, kv_dtypes=("f16",)).set_index("model")
    arch = models.stand_in("qwen3.8-27b")
    # the weights on the card: the loaded file less the token embedding llama.cpp keeps in host memory, as the
    # memory plan counts them (issue 37: this table counted the whole 15.40 GiB)
    wbytes = weights.weights_bytes("Q4_K_M", arch=arch, model_id="qwen3.8-27b")[0] - \
        quant_targets.gguf_parts("qwen3.8-27b", "Q4_K_M")["token_embd"]
    over = int(memory_plan.runtime_overhead("llama.cpp-gpu")["bytes"])
    state = round(149.62 * 2**20)
    by_hand = (V100_BYTES - wbytes - over - state) / 65_536  # tokens of KV left once weights, overhead, state fit
    assert 0 <= by_hand - table.loc["qwen3.8-27b", "max_context_f16"] < 512  # llama.cpp pads n_ctx to 256
    assert table.loc["qwen3-32b", "max_context_f16"] == 40_960  # capped at the trained context


def test_parity_checks_pass_only_identical_caches_and_skip_with_the_reason():
    row = {"model": "smollm2", "n_ctx": 4096, "n_parallel": 4, "type_k": "f16", "type_v": "f16", "kv_unified": False,
           "cache": "kv", "predicted_mib": 90.0, "reported_mib": 90.0, "predicted_cells": 1024, "reported_cells": 1024,
           "predicted_layers": 30, "reported_layers": 30, "match": True, "error_pct": 0.0}
    off = {**row, "n_parallel": 1, "reported_mib": 91.0, "match": False, "error_pct": 1.1, "log": "logs/x.log"}
    checks = kv_cache.parity_checks([row, off])
    assert [c.status for c in checks] == ["pass", "fail"] and "-np 4" in checks[0].name and "logs/x.log" in checks[1].fix
    assert [c.status for c in kv_cache.parity_checks([], "no llama-server")] == ["skip"]
    assert list(kv_cache.parity_table([row]).columns) == kv_cache.PARITY_COLUMNS
    fig = kv_cache.parity_chart([row, off])
    assert [t.name for t in fig.data] == ["smollm2", "identical"] and list(fig.data[0].y) == [90.0, 91.0]


def test_summary_and_closing_text_come_from_the_plan_and_the_grid():
    prof = profiles.load("cpu-default")
    arch = models.arch_for(prof)
    plan = memory_plan.plan_memory(prof, arch)
    grid = [{"match": True, "error_pct": 0.0}, {"match": True, "error_pct": 0.0}, {"match": False, "error_pct": -2.5}]
    kv_claims = claims_views.of_kinds(claims.verdicts(prof), "kv", "layers")
    s = kv_cache.summary(arch, plan, grid, kv_claims, None)
    assert s["kv_bytes_per_token"] == f16_kv_bytes_per_token(arch) == kvcache.kv_bytes_per_token(arch, "f16")
    assert (s["parity_caches_compared"], s["parity_caches_identical"], s["parity_max_abs_error_pct"]) == (3, 2, 2.5)
    record = {"summary": {**s, "vllm_kv_parity": None}, "claims": [v.to_dict() for v in kv_claims]}
    text = kv_cache.closing_text(record)
    assert f"{s['kv_bytes_per_token']:,} bytes of KV per token" in text and "**2 of 3** caches" in text
    assert all(f"`{c.id}`: **{c.verdict}**" in text for c in kv_claims)
    skipped = kv_cache.closing_text({"summary": {**kv_cache.summary(arch, plan, [], [], "no tools"),
                                                    "vllm_kv_parity": None}, "claims": []})
    assert "The llama.cpp parity grid was skipped: no tools" in skipped
    fig = kv_cache.memory_stack_chart(arch, plan)
    names = [t.name for t in fig.data]
    assert names[0] == "weights" and names[-1] == "budget" and fig.data[0].x[-1] == arch.max_context


def test_fit_check_and_record_from_the_plan_and_the_grid():
    """The check the notebook's record carries for the plan's fit (was built in a cell), the record's keys and the
    one-line texts under the grid, the vLLM comparison and the server section."""
    prof = profiles.load("cpu-default")
    arch = models.arch_for(prof)
    plan = memory_plan.plan_memory(prof, arch)
    fit = kv_cache.fit_check(plan)
    used = plan["weights_bytes_per_device"] + plan["overhead_bytes"] + plan["kv_bytes_per_device"]
    assert (fit.status, fit.observed, fit.fix) == ("pass", f"{used:,} bytes", "") and plan["memory_kind"] in fit.expected
    too_big = {**plan, "fits": False, "findings": [{"severity": "error", "fix": "lower -c"}, {"severity": "info", "fix": "x"}]}
    assert (kv_cache.fit_check(too_big).status, kv_cache.fit_check(too_big).fix) == ("fail", "lower -c")

    row = {"model": "smollm2", "n_ctx": 4096, "n_parallel": 4, "type_k": "f16", "type_v": "f16", "kv_unified": False,
           "cache": "kv", "predicted_mib": 90.0, "reported_mib": 90.0, "predicted_cells": 1024, "reported_cells": 1024,
           "predicted_layers": 30, "reported_layers": 30, "match": True, "error_pct": 0.0}
    parity = kv_cache.parity_checks([row])
    assert kv_cache.parity_text(parity, None) == "1 of 1 caches identical to the prediction"
    assert kv_cache.parity_text([], "no llama-server") == "no llama-server"
    vllm_skipped = {"skipped": "not a vLLM profile", "rows": []}
    assert kv_cache.vllm_text(vllm_skipped, []) == "skipped: not a vLLM profile"
    assert kv_cache.served_text({"engine_name": "Ollama", "base_url": "http://h:11434"}) == "Ollama at http://h:11434"
    assert kv_cache.served_text(None).startswith("no server reported here")
    assert kv_cache.device_bytes("v100-32g-x1") == V100_BYTES

    kv_claims = claims_views.of_kinds(claims.verdicts(prof), "kv", "layers")
    rec = kv_cache.build_record(
        arch=arch, plan=plan, grid_rows=[row], skip_reason=None, parity=parity, vllm_result=vllm_skipped,
        vllm_parity=[], kv_claims=kv_claims, target=[], target_max=[], plan_vs_server=[], served=None,
        stack_fig=None, target_fig=None, parity_fig=None)
    assert [c["name"] for c in rec["checks"]] == [parity[0].name, "memory plan fits the profile"]
    assert rec["summary"]["parity_caches_identical"] == 1 and rec["summary"]["vllm_kv_parity"]["skipped"] == "not a vLLM profile"
    assert rec["kv_grid"] == [row] and rec["claims"] == [v.to_dict() for v in kv_claims]
    assert kv_cache.closing_text(rec).startswith(f"- **{arch.name}**")



def test_the_notebook_s_steps_are_the_instruments_calls(tmp_path):
    """Notebook 05 calls its page only: each step is the lab's own call (the same architecture, plan, claims and
    server comparison), with the values a learner changes in a "Try" cell validated as a profile."""
    from lab.core.session import start
    from lab.serving import endpoint

    s = start("cpu-default", str(tmp_path / "run"))
    arch = kv_cache.read_architecture(s)
    assert arch == models.arch_for(s.profile)
    varied = kv_cache.with_values(s.profile, context_tokens=16384, parallel_slots=1)
    assert kv_cache.with_values(s.profile, context_tokens=s.profile.context_tokens) is s.profile
    assert kv_cache.plan_memory(varied, arch) == memory_plan.plan_memory(profiles.varied(s.profile, context_tokens=16384,
                                                                                        parallel_slots=1), arch)
    kv_claims = kv_cache.seed_kv_claims(s)
    assert [c.id for c in kv_claims] == [c.id for c in claims_views.of_kinds(claims.verdicts(s.profile), "kv", "layers")]
    assert list(kv_cache.claims_table(kv_claims).columns) == kv_cache.CLAIM_COLUMNS
    assert kv_cache.claims_arithmetic_table(kv_claims).equals(claims_views.models_table(kv_claims))
    plan = kv_cache.plan_memory(s.profile, arch)
    assert kv_cache.plan_beside_server(s, arch, plan, None) == endpoint.plan_vs_server(s.profile, arch, plan, None) == []
    assert kv_cache.vllm_checks({"skipped": "engine llama.cpp", "rows": []})[0].status == "skip"
    assert (kv_cache.start, kv_cache.answer, kv_cache.show) == (session.start, session.answer, session.show)

def test_how_long_a_context_has_one_answer_everywhere():
    """Issue 37 found four answers for v100-32g-x1 (the profile's comment 61,440 per slot and "the whole 262,144",
    lab plan 63,232, notebook 05's table 249,344). Now: per slot with every slot allocated, and one sequence alone,
    both from lab.predict.memory_plan, quoted the same by lab plan, notebook 05's table, the report's answer and the
    shipped profiles' comments."""
    from lab.predict import plan
    from lab.records import answer

    for name in ("v100-32g-x1", "rtx4090-24g"):
        prof = profiles.load(name)
        mem = plan.plan(prof)["memory"]
        per_slot, one = mem["max_context_tokens"], mem["max_context_one_sequence"]
        comment = " ".join((ROOT / "params" / f"{name}.yaml").read_text().split())
        assert f"a slot could go to {per_slot:,} tokens" in comment and f"one sequence alone" in comment
        assert f"{one:,}" in comment
        table = kv_cache.target_max_context_table(kv_cache.device_bytes(name), prof.model_quant, ("f16",))
        assert table.set_index("model").loc["qwen3.8-27b", "max_context_f16"] == one
        row = answer.card_row(prof)
        assert row["longest context per slot, every slot allocated"] == per_slot  # one column name for every card
        assert row["longest context, one sequence alone"] == one
        text = " ".join(plan.describe(plan.plan(prof)).split())
        assert f"max context {per_slot} tokens" in text and f"one sequence alone (parallel_slots 1): {one}" in text
        if name == "v100-32g-x1":
            readme = " ".join((ROOT / "README.md").read_text().split())
            assert f"a slot could reach {per_slot:,} tokens with all four allocated, one sequence alone {one:,}" in readme
