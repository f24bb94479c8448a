"""The notebooks tier of tests/unit/test_quantize.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
import pytest

from lab.model import quant_ladder
from shared_quantize import ladder


@pytest.mark.notebooks
def test_notebook_03_writes_its_record(cpu_default_run):
    """Notebook 03 in the session's one `lab run` on cpu-default (conftest.cpu_default_run): the record, not only
    that it ran."""
    from conftest import notebook_record

    rec = notebook_record(cpu_default_run, "03_quantize")
    assert {"title", "summary", "checks", "tables", "charts", "ladder", "claims", "vllm_plan"} <= set(rec)
    assert {c["name"]: c["status"] for c in rec["checks"]}["llama.cpp's per-tensor types reproduced"] == "pass"
    assert all(c["status"] in ("pass", "warn") for c in rec["checks"])
    kinds = [r["type"] for r in rec["ladder"]["quality"]["rows"]]
    assert kinds[1:] == list(quant_ladder.DEFAULT_LADDER) and kinds[0].startswith("shipped")
    assert all(r["agree"] for r in rec["ladder"]["crosscheck"])
    # the size claims come from the one ledger (lab.predict.claims), with its vocabulary of verdicts
    assert {v["id"]: v["verdict"] for v in rec["claims"]}["s1-fp16-weights-54gb"] == "consistent"
    assert rec["recommendation"]["type"] == "Q4_K_M"
    assert rec["charts"][0]["figure"]["data"]
