"""The tools tier of tests/unit/test_llama_bench.py (split from it by .ci/tier_tests.py): what these tests check, and
why, is that file's docstring."""
import statistics

import pytest
from conftest import setup_missing

from lab.core import paths
from lab.model import llama_bench


@pytest.mark.tools
def test_a_real_run_on_the_embedded_model(smol_model, tmp_path):
    try:
        paths.tool("llama-bench")
    except paths.SetupMissing as exc:
        setup_missing(str(exc))
    log = tmp_path / "llama-bench.log"
    result = llama_bench.run(smol_model, threads=2, n_prompt=16, n_gen=8, reps=2, timeout_s=300, log=log)
    assert [t["test"] for t in result["tests"]] == ["pp16", "tg8"]
    assert result["pp"]["test"] == "pp16" and result["tg"]["test"] == "tg8"
    tg = result["tg"]
    assert len(tg["samples_tok_s"]) == 2 and tg["tok_s"] == statistics.median(tg["samples_tok_s"]) > 0
    assert log.read_text().startswith("$ " + " ".join(result["command"]))


@pytest.mark.tools
def test_batched_bench_runs_on_the_embedded_model(tmp_path):
    from lab.measure import llama_batched_bench as bb

    res = bb.run(paths.embedded_model("smollm2"), n_prompt=16, n_gen=8, n_parallel=[1, 2], reps=2, flags=["-t", "2"],
                 log=tmp_path / "bb.log")
    assert res["command"][res["command"].index("-npl") + 1] == "1,2,1,2"
    assert [r["pl"] for r in res["rows"]] == [1, 2, 1, 2] and all(r["pp"] == 16 and r["tg"] == 8 for r in res["rows"])
    assert res["by_parallel"][2]["reps"] == 2 and res["by_parallel"][2]["speed_tg"] > 0
