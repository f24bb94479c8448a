"""lab.experiments.backend_sampling's pure parts: the chi-square tail, the two-sample test, the greedy comparison, the
verdict (what blocks recommending -bs, what is only inconclusive) and `advice` over lab/data/backend_sampling.yaml.
The servers themselves: tests/tools/test_backend_sampling_tools.py."""
import random

import pytest

from lab.experiments import backend_sampling as bs
from lab.experiments import backend_sampling_verdict as bv


@pytest.mark.parametrize("x, df, p", [(3.841459, 1, 0.05), (5.991465, 2, 0.05), (18.307038, 10, 0.05),
                                      (10.827566, 1, 0.001), (0.5, 3, 0.918891), (30.0, 40, 0.875219)])
def test_chi2_tail_matches_the_tables(x, df, p):
    assert bv.chi2_sf(x, df) == pytest.approx(p, rel=1e-5)
    assert bv.chi2_sf(0, df) == 1.0


def test_two_sample_finds_a_shift_and_not_noise():
    r = random.Random(7)
    a = [r.choice("abcdefgh") for _ in range(300)]
    same = bv.two_sample(a, [r.choice("abcdefgh") for _ in range(300)])
    shifted = bv.two_sample(a, [r.choice("aaabcdefgh") for _ in range(300)])
    assert same["p_permutation"] > 0.01 and same["df"] == 7
    assert shifted["p_permutation"] < bv.ALPHA and shifted["p_chi2"] < bv.ALPHA
    assert bv.two_sample([1] * 50, [1] * 50)["p_permutation"] == 1.0  # one token: nothing to tell apart
    # a rare token shares the "other" cell; too few there: folded into the smallest cell
    assert bv.cells([1] * 20 + [2] * 12, [1] * 20 + [3]) == {1: 0, 2: 1, 3: 1}


def test_compare_greedy_names_the_first_difference():
    out = bv.compare_greedy([[1, 2, 3], [4, 5], [6]], [[1, 2, 3], [4, 9], [6, 7]])
    assert out["identical"] == 1 and [r["first_difference"] for r in out["rows"]] == [None, 1, 1]


def _result(greedy=(3, 3), conc=None, settings=()):
    model = {"model": "m", "status": "ok", "greedy": {"identical": greedy[0], "prompts": greedy[1]},
             "settings": [{"setting": n, "verdict": v, "expect": e} for n, v, e in settings]}
    if conc:
        model["greedy_concurrent"] = dict(zip(("backend_vs_host", "host_vs_one_stream", "prompts"), conc))
    return {"models": [model]}


def test_verdict_blocks_on_differences_and_keeps_known_ones_apart():
    assert bv.verdict(_result())["recommend"] is True
    assert bv.verdict(_result(greedy=(2, 3)))["recommend"] is False
    assert bv.verdict(_result(settings=[("x", "differs", "same")]))["distributions_differ"] == ["m: x"]
    known = bv.verdict(_result(settings=[("min_keep", "differs", "differs")]))
    assert known["recommend"] is True and known["except"] == ["m: min_keep"]
    missed = bv.verdict(_result(settings=[("min_keep", "same distribution", "differs")]))
    assert missed["recommend"] is False and missed["controls_missed"] == ["m: min_keep"]
    # batching changed the host's own greedy output: a 4-stream difference is not put on -bs
    assert bv.verdict(_result(conc=(15, 9, 24)))["concurrent_greedy"] == {"m": "inconclusive"}
    assert bv.verdict(_result(conc=(15, 24, 24)))["recommend"] is False
    assert bv.verdict(_result())["paths_unlike_source"] == []


def test_advice_reads_the_data():
    assert bs.advice({"temperature": 0, "ignore_eos": True}) == {
        "recommend": True, "not_safe": [], "samplers": [
            {k: e.get(k) for k in ("id", "runs", "verdict", "note", "source")}
            for e in bs.data()["samplers"] if e["id"] in ("greedy", "logit_bias")]}
    said = bs.advice({"temperature": 0.7, "top_p": 0.8, "min_keep": 4, "grammar": "root ::= [a-z]+"})
    assert said["recommend"] is False and said["not_safe"] == ["min_keep"]
    assert {s["id"]: s["runs"] for s in said["samplers"]}["grammar"] == "fallback"
    assert all(e["source"] for e in bs.data()["samplers"]) and len(bs.data()["greedy_prompts"]) == 24


# llama-server -bs -lv 4 "sampler chain:" lines seen here (SmolLM2, 2026-12-05)
@pytest.mark.parametrize("chain, path", [
    ("logits -> ?penalties -> ?dry -> ?top-n-sigma -> +top-k -> ?typical -> +top-p -> +min-p -> ?xtc -> +temp-ext -> "
     "+dist", "backend"),
    ("logits -> ?penalties -> ?dry -> ?top-n-sigma -> +top-k -> typical -> top-p -> min-p -> ?xtc -> ?temp-ext -> dist",
     "mixed"),
    ("logits -> ?penalties -> dry -> ?top-n-sigma -> top-k -> ?typical -> top-p -> min-p -> ?xtc -> ?temp-ext -> dist",
     "host"),
    ("logits -> ?temp -> mirostat-v2", "host"), ("", "")])
def test_chain_path_reads_the_plus_marks(chain, path):
    assert bv.chain_path(chain) == path
