"""Notebooks tier: notebook 05 (KV-cache math) in the session's one `lab run` on cpu-default (conftest.cpu_default_run);
assertions on its record."""
import pytest
from conftest import notebook_record

pytestmark = pytest.mark.notebooks


@pytest.fixture(scope="module")
def record(cpu_default_run) -> dict:
    return notebook_record(cpu_default_run, "05_kv_cache_math", "05_kv_cache")


def test_kv_record_shows_zero_error_against_llama_cpp(record):
    s = record["summary"]
    assert s["parity_skipped"] is None
    assert s["parity_caches_compared"] == s["parity_caches_identical"] >= 18
    assert s["parity_max_abs_error_pct"] == 0
    parity = [c for c in record["checks"] if c["name"].startswith("llama.cpp KV parity")]
    assert parity and all(c["status"] == "pass" for c in parity)
    # both numbers are kept, for every model: global and SWA caches, and the hybrid's KV + recurrent state, and
    # its MTP draft context's own KV cache (the --spec-type draft-mtp point)
    assert {(r["model"], r["cache"]) for r in record["kv_grid"]} == {
        ("smollm2", "kv"), ("gemma3-270m", "global"), ("gemma3-270m", "swa"),
        ("qwen3.8-27b-4L", "kv"), ("qwen3.8-27b-4L", "recurrent"), ("qwen3.8-27b-4L", "mtp")}
    assert all(r["predicted_mib"] == r["reported_mib"] for r in record["kv_grid"])


def test_kv_record_plan_and_claims(record):
    s = record["summary"]
    assert s["memory_kind"] == "host RAM" and s["fits"] is True
    assert s["kv_bytes_per_token"] == 23_040 and s["kv_bytes_total"] == 90 << 20
    # the ledger's KV and layer claims (lab.predict.claims): the same verdicts notebook 06 and `lab plan` show
    assert s["claims"]["s0-kv-64k-12-14gb"] == "contradicted by facts"
    assert s["claims"]["s0-27b-40-layers"] == "contradicted by facts"
    assert s["claims"]["s1-context-32k-memory-30gb"] == "contradicted by facts"
    assert all(c["verdict"] and c["numbers"] for c in record["claims"])
    assert {c["title"] for c in record["charts"]} >= {"Memory per device vs context", "KV cache: prediction vs llama.cpp"}
