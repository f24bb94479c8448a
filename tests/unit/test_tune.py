"""lab.experiments.tune and lab.experiments.speculative: the pure parts (grid, invalid combinations, Pareto front, winner, patch,
acceptance arithmetic). The measuring runs in notebook 06 (tests/notebooks/test_suite_06.py)."""
from dataclasses import replace

from lab.core import profiles
from lab.experiments import speculative, tune, tune_choice, tune_settings
from lab.measure.loadgen import RequestResult


def test_grid_is_one_factor_at_a_time():
    prof = profiles.load("cpu-default")
    g = tune_settings.grid(prof, n_cores=2)
    base = g[0]
    assert base.dimension == "baseline" and (base.threads, base.kv, base.parallel_slots) == (2, "f16", 4)
    dims = {s.dimension for s in g}
    assert {"threads", "batch", "flash_attn", "kv_cache", "slots", "sampling", "server_state"} <= dims
    # backend sampling first (the biggest server lever seen), then the per-request state copies: a short budget
    # answers them
    assert (g[1].dimension, g[1].backend_sampling) == ("sampling", True) and g[2].dimension == "server_state"
    for s in g[1:]:  # every other point changes exactly its own dimension (kv may switch -fa on with it)
        changed = {k for k in ("threads", "kv", "parallel_slots", "batch", "ubatch", "sampling", "backend_sampling", "flash_attn",
                               "prompt_cache_mib", "ctx_checkpoints", "prompt_tokens", "log_verbosity", "context",
                               "spec_n_max")
                   if getattr(s, k) != getattr(base, k)}
        assert changed and changed <= set(tune_settings.DIM_FIELDS[s.dimension]), (s.name, changed)
    assert len({s.name for s in g}) == len(g)


def test_invalid_combinations_say_why():
    prof = profiles.load("cpu-default")
    base = tune_settings.baseline(prof)
    assert tune_settings.invalid(base, prof, 2) is None
    assert "needs -fa on" in tune_settings.invalid(replace(base, kv="q8_0", flash_attn="off"), prof, 2)
    assert "clamps ub" in tune_settings.invalid(replace(base, batch=256, ubatch=512), prof, 2)
    assert "cores" in tune_settings.invalid(replace(base, threads=8), prof, 2)
    # llama.cpp rounds each slot's share up to 256 (4096 / 64 = 64 -> 256): enough for 128 + 64 + 16, not for 512 + 64 + 16
    assert tune_settings.invalid(replace(base, parallel_slots=64), prof, 2) is None
    assert "leaves 256 tokens per slot" in tune_settings.invalid(replace(base, parallel_slots=64, prompt_tokens=512), prof, 2)


def _pt(name, dim, single, total, concurrency=4):
    """A measured point: one stream's decode at 1 stream, the total output at `concurrency` (lab.experiments.tune_choice.at)."""
    return {"name": name, "dimension": dim, "status": "ok", "concurrency": concurrency,
            "levels": {1: {"stream_decode_tok_s": single}, concurrency: {"output_throughput": total}}}


def test_pareto_winner_and_patch():
    pts = [_pt("baseline (the profile)", "baseline", 100.0, 200.0, 4),
           _pt("batch: -b 512 -ub 512", "batch", 99.0, 260.0, 4),
           _pt("slots: -np 2", "slots", 80.0, 300.0, 4),
           _pt("threads: -t 1", "threads", 60.0, 100.0, 4)]
    assert set(tune_choice.pareto_front(pts)) == {"baseline (the profile)", "batch: -b 512 -ub 512", "slots: -np 2"}
    win = tune_choice.choose(pts)
    assert win["name"] == "batch: -b 512 -ub 512"  # -np 2 has more throughput but slows one stream by 20 %
    prof = profiles.load("cpu-default")
    setting = replace(tune_settings.baseline(prof), name=win["name"], dimension="batch", batch=512, ubatch=512)
    patch = tune_choice.patch_yaml(prof, win, pts[0], setting, "2026-12-01")
    assert 'server_args: ["-b", "512", "-ub", "512"]' in patch and "+30.0%" in patch
    import yaml

    assert yaml.safe_load(patch) == {"server_args": ["-b", "512", "-ub", "512"]}
    assert "nothing to change" in tune_choice.patch_yaml(prof, pts[0], pts[0], tune_settings.baseline(prof), "now")


def test_server_state_settings_become_flags_and_a_patch():
    prof = profiles.load("h200-x1").model_copy(update={"server_args": []})  # the state copies at llama.cpp's defaults
    both = next(s for s in tune_settings.grid(prof, n_cores=16) if s.name.startswith("server_state: both"))
    assert both.server_args() == ["--cache-ram", "0", "-ctxcp", "0"]
    pts = [_pt("baseline (the profile)", "baseline", 83.0, 176.0, 16),
           _pt(both.name, "server_state", 84.0, 352.0, 16)]
    patch = tune_choice.patch_yaml(prof, tune_choice.choose(pts), pts[0], both, "2026-12-01")
    import yaml

    assert yaml.safe_load(patch) == {"server_args": ["--cache-ram", "0", "-ctxcp", "0"]} and "+100.0%" in patch


def test_server_args_reach_the_command():
    from lab.serving import engines

    prof = profiles.load("cpu-default").model_copy(update={"server_args": ["-b", "512"]})
    argv = engines.build_command(prof, port=18080).argv
    assert argv[-2:] == ("-b", "512")


def test_speculative_variants_and_acceptance():
    names = [v["kind"] for v in speculative.variants("d.gguf")]
    # the baseline, the MTP step costs, the draft model, the synthetic lengths, n-gram: a time budget cuts from the end
    assert names == ["none", "mtp", "draft", "synthetic", "synthetic", "ngram"]
    syn = [v for v in speculative.variants(None) if v["kind"] == "synthetic"][0]
    assert syn["args"][:2] == ["--spec-type", "ngram-simple"] and syn["args"][-2:] == ["--spec-synth-len", "2"]
    rs = [RequestResult(0, True, server_timings={"draft_n": 40, "draft_n_accepted": 10}),
          RequestResult(1, True, server_timings={"draft_n": 60, "draft_n_accepted": 30}),
          RequestResult(2, False, server_timings={"draft_n": 99, "draft_n_accepted": 99})]
    assert speculative.acceptance(rs) == {"draft_n": 100, "draft_n_accepted": 40, "acceptance_rate": 0.4}
    assert speculative.acceptance([RequestResult(0, True, server_timings={})])["acceptance_rate"] is None


def test_speculative_summary_marks_random_weights():
    prof = profiles.load("cpu-default").model_copy(update={"model_synthetic": True})
    rows = [{"kind": "none", "status": "ok", "stream_decode_tok_s": 100.0},
            {"kind": "draft", "status": "ok", "stream_decode_tok_s": 80.0, "acceptance_rate": 0.02},
            {"kind": "synthetic", "status": "ok", "stream_decode_tok_s": 150.0, "synthetic_length": 2.0},
            {"kind": "mtp", "status": "failed", "error": "no MTP layers"}]
    s = speculative.summarise(rows, prof, "d.gguf")
    assert s["acceptance_rate"] == 0.02 and s["acceptance_rate_valid_for_real_model"] is False
    assert s["draft_speedup"] == 0.8 and s["synthetic_length_speedup"] == {"2": 1.5}
    assert s["mtp"]["status"] == "failed"
    rec = speculative.build_record(s)
    assert [c["status"] for c in rec["checks"]] == ["pass", "warn"]


def test_absent_draft_n_with_speculation_on_is_zero_drafts():
    rs = [RequestResult(0, True, server_timings={"predicted_n": 24})]
    assert speculative.acceptance(rs, speculating=True) == {"draft_n": 0, "draft_n_accepted": 0, "acceptance_rate": None}
    assert speculative.acceptance(rs, speculating=False)["draft_n"] is None


def test_patch_applies_to_the_profile_text():
    import yaml

    text = "# a profile\nname: x\nthreads: 8   # cores\nparallel_slots: 16\n"
    patch = "# lab tune on x: winner 'both off'\nserver_args: [\"--cache-ram\", \"0\", \"-ctxcp\", \"0\"]\nthreads: 16\n"
    out = tune_choice.apply_patch(text, patch)
    assert yaml.safe_load(out) == {"name": "x", "threads": 16, "parallel_slots": 16,
                                   "server_args": ["--cache-ram", "0", "-ctxcp", "0"]}
    assert out.startswith("# a profile\n") and "# lab tune on x: winner 'both off'" in out
    assert tune_choice.apply_patch(text, "# the profile's own settings won: nothing to change\n") == text
    prof = profiles.load("h200-x1")
    from pathlib import Path

    patched = yaml.safe_load(tune_choice.apply_patch(Path(profiles.resolve("h200-x1")).read_text(), patch))
    assert profiles.Profile(**patched).server_args == ["--cache-ram", "0", "-ctxcp", "0"] and prof.threads == 8


def test_a_gain_within_the_run_to_run_noise_is_not_suggested():
    prof = profiles.load("cpu-default")
    base, again = _pt(tune_settings.BASELINE_NAME, "baseline", 100.0, 200.0), _pt(tune_settings.REPEAT_NAME, "repeat", 98.0, 220.0)
    ctxcp = _pt("server_state: context checkpoints off (-ctxcp 0)", "server_state", 101.0, 215.0)
    spread = tune_choice.noise([base, ctxcp, again])
    assert round(spread["output_throughput"], 4) == round(20 / 210, 4) and round(spread["stream_decode_tok_s"], 4) == round(2 / 99, 4)
    assert tune_choice.choose([base, ctxcp, again])["name"] == ctxcp["name"]  # the repeat is never a candidate
    assert tune_choice.within_noise(ctxcp, base, spread) is True  # +7.5 % < 9.5 %
    setting = replace(tune_settings.baseline(prof), name=ctxcp["name"], dimension="server_state", ctx_checkpoints=0)
    patch = tune_choice.patch_yaml(prof, ctxcp, base, setting, "now", spread)
    import yaml

    assert yaml.safe_load(patch) is None and "within the run-to-run noise" in patch and "9.5%" in patch
    big = _pt("server_state: both off", "server_state", 100.0, 400.0)
    assert tune_choice.within_noise(big, base, spread) is False
    assert "larger than the run-to-run noise (9.5%" in tune_choice.patch_yaml(prof, big, base, setting, "now", spread)
    assert "noise not measured" in tune_choice.patch_yaml(prof, big, base, setting, "now", None)
    assert tune_choice.noise([base, ctxcp]) is None and tune_choice.within_noise(big, base, None) is None


def test_the_budget_keeps_room_for_the_baseline_repeat(monkeypatch, tmp_path):
    """Scheduling only: each point 'takes' 10 s of a fake clock, so a 35 s budget runs the baseline, one other
    setting and the repeat (a second setting would leave no time for the repeat)."""
    clock = {"t": 0.0}

    class FakeBudget(tune.Budget):
        def left(self):
            return self.seconds - clock["t"]

    def point(profile, setting, log_dir, monitor=None, output_tokens=None, method=None):
        clock["t"] += 10
        return _pt(setting.name, setting.dimension, 100.0, 200.0) | {"seconds": 10.0, "error": None}

    monkeypatch.setattr(tune, "Budget", FakeBudget)
    from lab.serving import serve

    monkeypatch.setattr(serve, "why_not_flag_sweep", lambda profile: None)
    monkeypatch.setattr(tune, "measure_point", point)
    result = tune.run(profiles.load("cpu-default"), tmp_path, budget_s=35, progress=lambda line: None)
    assert [p["dimension"] for p in result["points"]] == ["baseline", "sampling", "repeat"]  # -bs first
    assert result["noise"] == {"output_throughput": 0.0, "stream_decode_tok_s": 0.0}
    assert any("repeat keeps its time" in s["reason"] for s in result["skipped"])
    clock["t"] = 0.0
    only_base = tune.run(profiles.load("cpu-default"), tmp_path, budget_s=15, progress=lambda line: None)
    assert [p["dimension"] for p in only_base["points"]] == ["baseline"] and only_base["noise"] is None


def test_isolation_dimensions_in_the_grid():
    """The levers of the served ÷ in-process gap and, for a model with an MTP block, draft-mtp n-max 1-4;
    SmolLM2 has no MTP block, so cpu-default gets no mtp points."""
    h200 = {s.name: s for s in tune_settings.grid(profiles.load("h200-x1"), n_cores=16)}
    assert h200["log_level: -lv 3 (llama.cpp's default)"].log_verbosity == 3
    assert h200["context: -c 65536"].context == 65536  # the reporter's -c with -np 16
    assert h200["prompt_length: 32-token prompts (load, not a setting)"].prompt_tokens == 32
    assert h200["slots: -np 8"].parallel_slots == 8 and h200["flash_attn: -fa on"].flash_attn == "on"
    assert h200["sampling: top_k 1 only (samplers: [top_k])"].sampling in tune_settings.SAMPLING
    assert [s.spec_n_max for s in h200.values() if s.dimension == "mtp"] == [1, 2, 3, 4]
    assert h200["mtp: --spec-type draft-mtp --spec-draft-n-max 2"].server_args() == [
        "--spec-type", "draft-mtp", "--spec-draft-n-max", "2"]
    # h200-x1 already runs with --cache-ram 0 -ctxcp 0: no point measures its baseline again under another name
    assert not [s for s in h200.values() if s.dimension == "server_state"]
    cpu = tune_settings.grid(profiles.load("cpu-default"), n_cores=2)
    assert len([s for s in cpu if s.dimension == "server_state"]) == 3
    assert not [s for s in cpu if s.dimension == "mtp"] and {"log_level", "prompt_length"} <= {s.dimension for s in cpu}


def test_a_setting_replaces_its_flags_in_the_command(monkeypatch):
    from lab.serving import engines

    monkeypatch.setattr(engines, "installed_version", lambda profile: None)
    prof = profiles.load("h200-x1")
    s = replace(tune_settings.baseline(prof), flash_attn="on", log_verbosity=3, context=65536, spec_n_max=2, parallel_slots=8)
    argv = list(tune.command_for(prof, s).argv)
    value = {f: argv[argv.index(f) + 1] for f in ("-fa", "-lv", "-c", "-np", "--spec-draft-n-max")}
    assert value == {"-fa": "on", "-lv": "3", "-c": "65536", "-np": "8", "--spec-draft-n-max": "2"}
    assert argv.count("-lv") == 1 and argv.count("-c") == 1
    base = list(tune.command_for(prof, tune_settings.baseline(prof)).argv)
    assert base[base.index("-lv") + 1] == "4" and base[base.index("-c") + 1] == "262144"


def test_the_method_plans_levels_within_the_slots():
    prof = profiles.load("h200-x1")
    base = tune_settings.baseline(prof)
    assert tune.Method().plan(prof, base) == [(1, 3, 1, 0), (16, 32, 1, 0)]  # notebook 06's quick sweep
    iso = tune.Method(levels=(1, 8, 16), repetitions=3)
    assert iso.plan(prof, base) == [(1, 3, 3, 3), (8, 24, 3, 3), (16, 48, 3, 3)]  # closed batches, warm-up rounds
    assert [n for n, *_ in iso.plan(prof, replace(base, parallel_slots=8))] == [1, 8]  # -np 8 is measured at 8, not queued at 16


def test_a_load_dimension_is_never_the_winner_and_combined_keeps_each_dimension():
    prof = profiles.load("h200-x1")
    base = _pt(tune_settings.BASELINE_NAME, "baseline", 80.0, 250.0)
    short = _pt("prompt_length: 32-token prompts (load, not a setting)", "prompt_length", 80.0, 320.0)
    fa = _pt("flash_attn: -fa on", "flash_attn", 80.0, 260.0)
    lv = _pt("log_level: -lv 3 (llama.cpp's default)", "log_level", 81.0, 270.0)
    assert tune_choice.choose([base, short, fa, lv])["name"] == lv["name"]
    settings = {s.name: s for s in tune_settings.grid(prof, n_cores=16)}
    combo = tune_choice.combined([base, short, fa, lv], settings, prof)
    assert (combo.flash_attn, combo.log_verbosity, combo.prompt_tokens) == ("on", 3, None)
    patch = tune_choice.patch_yaml(prof, _pt(combo.name, "combined", 81.0, 300.0), base, combo, "now")
    import yaml

    assert yaml.safe_load(patch) == {"server_args": ["--cache-ram", "0", "-ctxcp", "0", "-bs", "-fa", "on", "-lv", "3"]}
    ctx = replace(tune_settings.baseline(prof), context=65536)
    assert yaml.safe_load(tune_choice.patch_yaml(prof, _pt("context", "context", 80.0, 300.0), base, ctx, "now")) == {
        "context_tokens": 65536}  # the profile's server_args stay as they are
    assert tune_choice.merge_args(["--cache-ram", "0", "-ctxcp", "0"], ["-ctxcp", "8", "-bs", "-lv", "3"]) == [
        "--cache-ram", "0", "-ctxcp", "8", "-bs", "-lv", "3"]


def test_level_rows_give_mean_sd_and_the_ratio_to_the_baseline():
    def lv(values):
        import statistics

        return {"output_throughput": statistics.fmean(values), "decode_tok_s_summed": None,
                "spread": {"output_throughput": {"mean": statistics.fmean(values), "sd": statistics.stdev(values),
                                                 "values": values}},
                "warmup": {"steady": True}}

    result = {"points": [_pt(tune_settings.BASELINE_NAME, "baseline", 80.0, 150.0) | {"levels": {8: lv([140.0, 150.0, 160.0])}},
                         _pt("flash_attn: -fa on", "flash_attn", 80.0, 210.0) | {"levels": {8: lv([200.0, 210.0, 220.0])}}],
              "method": {"levels": (8,)}}
    rows = tune.level_rows(result)
    out = "Output throughput (tok/s)"  # the schema's label (lab/data/fields.yaml), rounded to its 3 figures
    assert rows[1][out] == 210.0 and rows[1][out + " sd"] == 10.0
    assert rows[1][out + " ÷ baseline"] == 1.4 and rows[1][out + " values"] == [200.0, 210.0, 220.0]
    assert rows[0]["Decode summed over the streams (tok/s)"] is None and rows[0]["warm-up steady"] is True
    assert rows[0]["Steady decode, all streams (tok/s)"] is None  # a point measured before the steady state was kept
