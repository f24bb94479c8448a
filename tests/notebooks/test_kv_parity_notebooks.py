"""The notebooks tier of tests/unit/test_kv_parity.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
import pytest

from lab.measure import kvcache_verify as kv


@pytest.fixture(scope="module")
def grid_rows(cpu_default_run):
    """The rows of notebook 05's grid (kvcache_verify.run_for_profile: `default_grid` on the embedded models and the
    4-layer hybrid, each point a real llama-server start) in the session's one `lab run` on cpu-default: the same
    grid this file used to run a second time."""
    from conftest import notebook_record

    record = notebook_record(cpu_default_run, "05_kv_cache_math", "05_kv_cache")
    if record["summary"]["parity_skipped"]:
        pytest.skip(record["summary"]["parity_skipped"])
    return record["kv_grid"]


@pytest.mark.notebooks
@pytest.mark.parametrize("model,runs,caches", [("smollm2", 6, {"kv"}), ("gemma3-270m", 6, {"global", "swa"}),
                                               (kv.HYBRID_MODEL, 6, {"kv", "recurrent", "mtp"})])
def test_llama_cpp_reports_exactly_the_prediction(grid_rows, model, runs, caches):
    rows = [r for r in grid_rows if r["model"] == model]
    assert len({(r["n_ctx"], r["n_parallel"], r["type_k"], r["kv_unified"]) for r in rows}) == runs
    bad = [r for r in rows if not r["match"]]
    assert not bad, bad
    assert all(r["error_pct"] == 0 for r in rows)
    # Gemma reports a global and an SWA cache per run; the hybrid a KV cache (its full-attention layer) and
    # the recurrent state of its Gated DeltaNet layers, and with --spec-type draft-mtp the MTP context's cache
    assert {r["cache"] for r in rows} == caches
