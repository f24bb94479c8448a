"""lab.records.answer: the summary that opens report.html and every notebook, built from records and plans."""
from lab.core import profiles
from lab.records import answer


def test_gpu_profile_says_what_fits_and_how_fast():
    f = answer.facts(profiles.load("v100-32g-x1"), {})
    assert f["gpu_profile"] and len(f["cards"]) == 1
    card = f["cards"][0]
    assert card["fits"] in (True, False) and card["expected, one stream"].endswith("tok/s")
    text = answer.markdown(f)
    assert "On this card" in text and "tok/s" in text and "nothing yet" in text
    assert f["claims_not_holding"] and "do not hold" in text  # the seeds' 280 tok/s cannot hold on a V100


def test_the_answer_leads_with_what_to_run():
    """Issue 37: the answer gave 33.8 tok/s and 18 rows of claims; the lab's fastest route (MTP, 48.8 predicted) was in
    no command. Now its exact server command comes first, with the plain route and what the choice depends on."""
    from lab.predict import routes
    from lab.serving import byhand

    prof = profiles.load("v100-32g-x1")
    table = routes.route_table(prof)
    best = next(r for r in table["routes"] if r["id"] == table["fastest_llama_cpp"])
    text = answer.markdown(answer.facts(prof, {}))
    assert text.startswith(f"**Run this** — the fastest route the lab runs on this profile, `{best['id']}`, "
                           f"**{best['tok_s']:.1f} tok/s**")
    assert f"```bash\n{byhand.runnable([byhand.server_command(prof, best['flags'])])}\n```" in text and "--spec-type draft-mtp" in text
    assert "the plain route `llama-one`" in text and "it needs a GGUF with the MTP layer" in text
    assert text.index("Run this") < text.index("On this card") < text.index("do not hold")
    assert answer.facts(profiles.load("h200-x1"), {})["run_this"] is None  # no routes for it: no guess


def test_cpu_default_measures_here_and_points_at_every_gpu_profile():
    records = {
        "01_hardware": {"summary": {"bandwidth_gb_s": 27.4, "bandwidth_kind": "host_ram"}, "checks": []},
        "06_benchmark": {"summary": {"served_single_stream_decode_tok_s": 79.9, "llama_bench_tg_tok_s": 112.0,
                                     "decode_ceiling_tok_s": 280.0, "best_aggregate_tok_s": 150.0,
                                     "best_aggregate_concurrency": 4},
                         "checks": [{"name": "x", "status": "fail", "fix": "do y"}], "claims": []},
    }
    f = answer.facts(profiles.load("cpu-default"), records)
    assert not f["gpu_profile"] and {c["card (profile)"].split(" · ")[1] for c in f["cards"]} == \
        {p.name for p in answer.gpu_profiles()}
    text = answer.markdown(f)
    assert "79.9 tok/s" in text and "150 tok/s in total at 4" in text and "27.4 GB/s" in text
    assert "1 failed check(s)" in text and "X (notebook 06): do y" in text
    assert "do not hold" not in text  # 06's ledger (empty here) wins over the plan's


def test_measured_has_a_line_only_for_what_a_record_holds():
    records = {"03_quantize": {"summary": {"recommended for the 27B target": "IQ4_XS"}},
               "04_serve": {"summary": {"skipped": "a GPU profile on a CPU box"}},
               "05_kv_cache": {"summary": {"parity_caches_compared": 28, "parity_caches_identical": 28}},
               "06_benchmark": {"summary": {"benchmark_skipped": "no llama-server"}}}
    assert answer.measured(records) == [
        "speed not measured here: no llama-server",
        "KV cache: llama.cpp allocated exactly the predicted bytes for 28 of 28 caches",
        "quantization ladder: IQ4_XS recommended for the 27B target"]
    served = {"04_serve": {"summary": {"engine": "llama.cpp", "chat_ok": True, "stopped_clean": False}}}
    assert answer.measured(served) == ["llama.cpp served completions and chat on 127.0.0.1 and stopped NOT cleanly"]
    assert answer.measured({}) == [] and answer.measured({"01_hardware": {"summary": None}}) == []


def test_the_notebook_summary_escapes_html_from_a_profile(tmp_path):
    """A profile is text anyone can hand over, and IPython renders raw HTML in Markdown output: the model name
    reaches an executed notebook escaped (the report escapes through its own Markdown renderer)."""
    from types import SimpleNamespace

    import yaml

    hostile = "<img src=x onerror=alert(1)>Qwen"
    data = {**yaml.safe_load(profiles.resolve("cpu-default").read_text()), "name": "html-unit", "model_name": hostile}
    (tmp_path / "html-unit.yaml").write_text(yaml.safe_dump(data))
    prof = profiles.load(tmp_path / "html-unit.yaml")
    (tmp_path / "records").mkdir()
    shown = answer.first(SimpleNamespace(profile=prof, run_dir=tmp_path)).data
    assert "<img" not in shown and "&lt;img src=x onerror=alert(1)&gt;Qwen" in shown
    assert hostile in answer.markdown(answer.facts(prof, {}))  # unescaped for the report's renderer, which escapes


def test_the_cards_table_fits_an_800_px_window_in_six_columns():
    """Issue 44: the CPU run's answer table (twelve columns) was cut at 800 px, its quant and engine out of sight."""
    text = answer.markdown(answer.facts(profiles.load("cpu-default"), {}))
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert table[0] == ("| card (profile) | model · quant · engine | one stream: expected (ceiling) | fits, memory per GPU "
                        "| context × sequences | longest context: per slot, every slot allocated / one sequence alone |")
    v100 = next(line for line in table if "v100-32g-x1" in line)
    row = answer.card_row(profiles.load("v100-32g-x1"))
    assert f"{row['longest context per slot, every slot allocated']:,} / {row['longest context, one sequence alone']:,}" in v100
    assert f"{row['expected, one stream']} ({row['ceiling, one stream']})" in v100
