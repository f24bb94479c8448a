"""lab.experiments.backend_sampling on the real llama-server (the CPU build) with the embedded SmolLM2-135M-Instruct and
Gemma 3 270M: two servers of each model, one without and one with -bs. What lab/data/backend_sampling.yaml says is
asserted as measured: greedy token ids identical for every prompt; seeded one-token draws from the same distribution
for a backend chain, penalties, a mixed chain (typical-p on the host) and a host fallback (grammar, which the -bs
server logs); a fixed seed not reproducing the first token at top_k 10 (ggml_top_k's order); and the control that
shows the test can see a difference: min_keep, which the backend's min-p ignores. Fixed seeds (printed); a
distribution "differs" only at p < 0.001, so the verdicts are not a loaded machine's luck."""
import pytest

from conftest import record_figure, setup_missing
from lab.core import paths
from lab.experiments import backend_sampling as bs

pytestmark = pytest.mark.tools
# Fewer than the module's defaults so both models stay under a minute on 2 cores (Gemma's 262k-token vocabulary
# costs 30-70 ms a draw there); the full run is `python -m lab.experiments.backend_sampling --out DIR`.
SETTINGS = {"smollm2": ("server defaults", "top_k 10", "penalties", "min_p 0.3 with min_keep", "typical_p", "grammar"),
            "gemma3-270m": ("server defaults", "penalties")}
PROMPTS = {"smollm2": 24, "gemma3-270m": 12}
TOKENS, SAMPLES, PAIRED = 32, 150, 30


@pytest.mark.parametrize("model", bs.MODELS)
def test_backend_sampling_changes_no_answer(model, tmp_path):
    try:
        paths.tool("llama-server")
        paths.embedded_model(model)
    except paths.SetupMissing as exc:
        setup_missing(str(exc), "make setup")
    chosen = [s for s in bs.SETTINGS if s.name.startswith(SETTINGS[model])]
    assert len(chosen) == len(SETTINGS[model])
    prompts = bs.data()["greedy_prompts"][:PROMPTS[model]]
    res = bs.measure_model(model, tmp_path / "logs", chosen, SAMPLES, PAIRED, TOKENS, prompts, concurrent=False,
                           progress=print)
    assert res["status"] == "ok", res.get("error")
    # the -bs server really handed its chains to the context (else both servers sampled on the host)
    assert res["backend_sampler_log_lines"]["backend"] > 0 and res["backend_sampler_log_lines"]["host"] == 0

    g = res["greedy"]
    parted = [r["first_difference"] for r in g["rows"] if not r["identical"]]
    record_figure(f"backend sampling (-bs), {model}: greedy prompts with identical token ids ({TOKENS} tokens)",
                  g["prompts"], g["identical"], f"first differences: {parted or 'none'}")
    assert g["identical"] == g["prompts"] == len(prompts) and all(len(t) == TOKENS for t in g["backend_tokens"])

    by_name = {s["setting"]: s for s in res["settings"]}
    for s in res["settings"]:
        record_figure(f"backend sampling (-bs), {model}: {s['setting']} [{s['path']}], draws compared "
                      f"({'same' if s['expect'] == 'same' else 'differs'} expected)", 2 * s["samples"],
                      2 * s["samples"], f"chi2 {s['statistic']:.2f}, df {s['df']}, p {s['p_chi2']:.3g}, permutation p "
                      f"{s['p_permutation']:.3g} ({s['permutations']} permutations, seed {s['permutation_seed']}), "
                      f"sampling seeds from {bs.SEED}, same seed same token {s['paired_same_token']}/{s['paired']}: "
                      f"{s['verdict']}")
        assert s["observed_path"] == s["path"], (s["setting"], s["backend_chain"])  # where the log says it ran
        if s["expect"] == "same":
            assert s["p_permutation"] >= bs.ALPHA, s["setting"]
        else:  # the control: the backend's min-p keeps one token where the host keeps min_keep
            assert s["p_permutation"] < bs.ALPHA and s["distinct_tokens"] > 1, s["setting"]
            assert set(s["raw"]["backend"]) < set(s["raw"]["host"])
    defaults = next(s for n, s in by_name.items() if n.startswith("server defaults"))
    assert defaults["backend_sampling_said"] == {"host": False, "backend": True}
    if model == "smollm2":
        top_k = next(s for n, s in by_name.items() if n.startswith("top_k 10"))
        assert top_k["paired_same_token"] < top_k["paired"]  # same distribution, another first token for some seeds
        grammar = next(s for n, s in by_name.items() if n.startswith("grammar"))
        assert grammar["backend_sampling_said"]["backend"] is False  # common_sampler_init switched it off
        assert res["backend_log_fallbacks"]["not compatible with grammar"] >= grammar["samples"] + grammar["paired"]


def test_the_data_names_what_the_module_measures():
    """lab/data/backend_sampling.yaml's `measured` names are SETTINGS names, every setting is named by an entry, and
    an entry's verdict agrees with what its settings expect (a known difference is not-safe)."""
    data = bs.data()
    entries = {e["id"]: e for e in data["samplers"]}
    names = {s.name: s for s in bs.SETTINGS}
    named = {n for e in entries.values() for n in e["measured"]}
    assert named <= set(names) and set(names) <= named
    for e in entries.values():
        assert (e["verdict"] == "not-safe") == any(names[n].expect == "differs" for n in e["measured"]), e["id"]
    assert bs.advice({"temperature": 0, "ignore_eos": True})["recommend"] is True
    assert bs.advice({"temperature": 0.8, "min_p": 0.3, "min_keep": 8})["not_safe"] == ["min_keep"]
