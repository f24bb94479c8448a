"""The field schema (lab/data/fields.yaml, lab.core.fields): one name, unit, rounding and meaning per figure; the typed
run summary (lab.core.run_summary) the load generator returns; no module renames a figure; records written before
the schema still read (lab compare) by today's names."""
import inspect
import re
import shutil

import pytest
from pydantic import ValidationError

from lab.core import display, fields, run_summary
from lab.core.paths import ROOT
from lab.experiments import busy_host, multigpu, peer_verdicts, speculative, tune, tune_choice, tune_settings
from lab.measure import gpumon, load_levels, loadgen, metrics
from lab.measure.loadgen import RequestResult
from lab.pages import benchmark, benchmark_tables
from lab.predict import claims
from lab.records import report

H200_RUN = ROOT / "outputs" / "h200-x1" / "20261201T225010Z_ca156936"  # written before the schema (2026-12-01)


def _ok(index, ttft, e2el, out):
    return RequestResult(index=index, start_s=0.0, success=True, ttft_s=ttft, e2el_s=e2el,
                         chunk_times_s=[ttft, e2el], output_tokens=out, prompt_tokens=10, cached_tokens=0)


def _run():
    spec = loadgen.LoadSpec(concurrency=2, max_requests=2, warmup_requests=0)
    return loadgen.RunResult(spec, "t", [_ok(0, 0.1, 1.1, 11), _ok(1, 0.2, 2.2, 21)], 2.5, [],
                             "2026-12-02T00:00:00Z", 0.1, 8, 0.0, 2.5)


def test_every_entry_has_a_unit_a_rounding_and_a_meaning():
    schema = fields.schema()
    assert len(schema) > 50
    for f in schema.values():
        assert f.meaning.strip() and f.unit is not None and 1 <= f.sig <= 6, f.name
        assert f.decimals is None or 0 <= f.decimals <= 4, f.name
    # the load generator's definitions are vLLM bench serve's, and say so
    assert all("vllm/benchmarks/serve.py" in schema[k].source for k in ("ttft_ms", "tpot_ms", "itl_ms", "output_throughput"))


def test_every_figure_the_summaries_tables_and_rows_carry_is_in_the_schema():
    names = [*run_summary.RunSummary.model_fields, *run_summary.LEVEL_FIGURES, *metrics.SPREAD_KEYS,
             *speculative.TABLE_FIGURES, *tune.ROW_FIGURES_ONE_STREAM, *tune.ROW_FIGURES_ALL_STREAMS,
             *benchmark_tables.REPETITION_COLUMNS,
             *metrics.repetition_figures([_ok(0, 0.1, 1.1, 11)], 1.5, 1)]
    assert [n for n in names if fields.get(n) is None] == []
    row = benchmark_tables.summary_row(metrics.summarise_run(_run()))
    flat = [k for k in row if k not in ("reps", "valid", "why_not", "output_throughput_sd")]
    assert [k for k in flat if fields.get(k) is None] == []


@pytest.mark.parametrize("record", ["06_benchmark", "06_tune", "06_speculative"])
def test_every_figure_of_a_notebook_06_summary_is_in_the_schema(record):
    """The committed H200 run's summaries (older names read as today's), and lab tune's and the speculative
    summary as the code writes them now."""
    import json

    from lab.core import profiles

    summary = fields.canonical(json.loads((H200_RUN / "records" / f"{record}.json").read_text())["summary"])
    assert [k for k in summary if fields.get(k) is None] == []
    rows = [{"kind": "none", "status": "ok", "stream_decode_tok_s": 100.0}]
    spec = speculative.build_record(speculative.summarise(rows, profiles.load("cpu-default"), None))["summary"]
    tuned = tune.build_record({"points": [], "skipped": [], "pareto_front": [], "winner": None, "patch_yaml": ""})
    assert [k for k in [*spec, *tuned["summary"]] if fields.get(k) is None] == []


def test_summarise_run_returns_the_typed_summary_read_like_a_dict():
    s = metrics.summarise_run(_run())
    assert isinstance(s, run_summary.RunSummary)
    assert s.output_throughput == s["output_throughput"] == pytest.approx(32 / 2.5)  # (11 + 21) tokens ÷ 2.5 s
    assert s["stream_decode_tok_s"] == pytest.approx(30 / 3.0)  # (10 + 20) tokens ÷ (1.0 + 2.0) s
    assert s["ttft_ms"]["p50"] == pytest.approx(150.0) and s.get("spread") == {} and "cut" in s
    with pytest.raises(KeyError, match="not a field"):
        s["output_tok_s"]  # an old name is no field of today's summary
    with pytest.raises(ValidationError):
        run_summary.RunSummary.model_validate(s.model_dump() | {"aggregate_tok_s": 1.0})
    assert run_summary.level_figures(s)["tpot_p50_ms"] == pytest.approx(100.0)  # (1.0 s / 10, 2.0 s / 20) p50


def test_no_module_writes_an_old_name():
    old = fields.old_names()
    assert old == {"output_tok_s": "output_throughput", "aggregate_tok_s": "output_throughput",
                   "decode_tok_s": "stream_decode_tok_s", "single_decode_tok_s": "stream_decode_tok_s",
                   "output_tok_s_spread": "output_throughput_spread", "peak_vram_mib_total": "peak_vram_mib",
                   "n_ctx_slot": "context_per_request", "context_per_request_reported": "context_per_request"}
    for module in (metrics, loadgen, load_levels, tune, tune_choice, tune_settings, speculative, benchmark, benchmark_tables,
                   multigpu, gpumon,
                   peer_verdicts, busy_host, claims):
        source = inspect.getsource(module)
        assert [n for n in old if re.search(rf"[\"']{n}[\"']|\b{n}=", source)] == [], module.__name__


def test_old_names_read_as_todays_and_todays_win():
    assert fields.canonical({"aggregate_tok_s": 200.0, "noise": {"single_decode_tok_s": 0.01}, "other": 1}) == {
        "output_throughput": 200.0, "noise": {"stream_decode_tok_s": 0.01}, "other": 1}
    assert fields.canonical({"output_throughput": 2.0, "output_tok_s": 1.0}) == {"output_throughput": 2.0}
    assert fields.canonical({"output_tok_s": 1.0, "output_throughput": 2.0}) == {"output_throughput": 2.0}


def test_lab_compare_lines_an_old_run_up_by_todays_names(tmp_path):
    old = tmp_path / "old"
    shutil.copytree(H200_RUN / "records", old / "records")
    shutil.copy(H200_RUN / "manifest.json", old / "manifest.json")
    rows = {(r["record"], r["result"]): r for r in report.compare_rows([old])}
    assert ("06_benchmark", "output_throughput_spread") in rows and ("06_benchmark", "output_tok_s_spread") not in rows
    label = next(k for k in rows[("06_tune", "noise")] if k not in ("record", "result"))
    # each value as the table shows it (lab.core.display.fmt, the one rounding): today's labels, never the old names
    noise = rows[("06_tune", "noise")][label]
    assert noise.startswith(f"{display.label('output_throughput')}: ") and display.label("stream_decode_tok_s") in noise
    assert display.label("stream_decode_tok_s") in rows[("06_speculative", "mtp")][label]


def test_display_labels_and_rounds_from_the_schema():
    assert display.label("output_throughput") == "Output throughput (tok/s)"
    assert display.label("stream_decode_tok_s") == "Decode per stream (tok/s)"
    assert display.label(fields.at("output_throughput", 8)) == "Output throughput (tok/s), 8 streams"
    assert display.label(fields.at("stream_decode_tok_s", 1)) == "Decode per stream (tok/s), 1 stream"
    assert display.label("tpot_p50_ms") == "TPOT p50 (ms)" and fields.get("tpot_p50_ms").stat == "p50"
    assert display.rounded(141.234, "output_throughput") == 141 and display.rounded(0.012345, "joules_per_token") == 0.0123
    assert display.rounded([80123.4, None], "peak_vram_mib") == [80123, None]  # whole MiB (decimals: 0)
    assert display.rounded(2.3456, "duration_s") == 2.35 and display.fmt(2.3456, "duration_s") == "2.35"
    assert display.rounded(1234, "requests") == 1234 and display.rounded(None, "output_throughput") is None
    with pytest.raises(KeyError):
        fields.at("aggregate_tok_s", 8)  # an old name names no figure
