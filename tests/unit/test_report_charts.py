"""lab.records.report_charts: report.html draws a chart only where it carries information."""
import plotly.graph_objects as go

from lab.core import evidence
from lab.pages import benchmark
from lab.records import report_charts


def fig(f) -> dict:
    return evidence.chart_entry("x", f)["figure"]


def test_counts_by_status_or_severity_are_one_line():
    bars = fig(go.Figure([go.Bar(name="this run", x=["error", "warn", "info"], y=[0, 2, 1]),
                          go.Bar(name="captured", x=["error", "warn", "info"], y=[5, 0, 0])]))
    assert report_charts.curate(bars) == ("text", "this run: 2 warn, 1 info; captured: 5 error", [])
    assert report_charts.is_status_chart(fig(go.Figure(go.Bar(x=["pass", "warn", "fail", "skip"], y=[4, 0, 0, 17]))))


def test_energy_without_nvml_keeps_the_memory_panel_and_says_why_in_full():
    why = "NVML not available (NVMLError_LibraryNotFound: NVML Shared Library Not Found)"
    summaries = [{"concurrency": c, "joules_per_token": None, "peak_vram_mib": None, "peak_host_rss_mib": 270.0 + c,
                  "energy_not_measured": why} for c in (1, 2, 4)]
    kind, drawn, notes = report_charts.curate(fig(benchmark.energy_chart(summaries)))
    assert kind == "chart" and notes == [f"GPU energy not measured: {why}"]
    assert [t["name"] for t in drawn["data"]] == ["peak host RSS, server tree"]
    assert drawn["layout"]["xaxis2"]["domain"] == [0, 1] and "xaxis" not in drawn["layout"]
    assert [a["text"] for a in drawn["layout"]["annotations"]] == ["peak memory (MiB)"]


def test_one_point_is_a_sentence_and_log_axes_get_readable_ticks():
    one = fig(go.Figure(go.Scatter(x=[52.2], y=[45.7])).update_layout(xaxis_title="TPOT (ms)", yaxis_title="tok/s"))
    assert report_charts.curate(one)[:2] == ("text", "one point measured (TPOT (ms) 52.2, tok/s 45.7): a chart needs "
                                                      "two; the section's table has it")
    xs = [256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
    kind, drawn, _ = report_charts.curate(fig(go.Figure(go.Scatter(x=xs, y=[1.0] * 10)).update_xaxes(type="log")))
    assert drawn["layout"]["xaxis"]["ticktext"] == ["200", "500", "1k", "2k", "5k", "10k", "20k", "50k", "100k"]
    kind, drawn, _ = report_charts.curate(fig(go.Figure(go.Scatter(x=xs[4:], y=[1.0] * 6)).update_xaxes(type="log")))
    assert drawn["layout"]["xaxis"]["ticktext"] == ["4k", "8k", "16k", "32k", "64k", "128k"]


def test_a_plan_runs_not_run_counts_and_an_empty_parity_chart_are_lines_of_text():
    """The V100 plan run's report drew three pass/warn/fail/skip/not-run bar charts (its checks' counts, said in the
    Checks line above them) and notebook 05's "prediction vs llama.cpp" as its y = x diagonal alone (nothing was
    measured): 1,500 px of charts that said less than a line. Now the counts are left out, and the parity chart is
    left out by the notebook (its record keeps the one line of why) or, in a record written before, said as text."""
    from lab.pages import kv_cache
    from lab.records import report

    plan_counts = fig(go.Figure(go.Bar(x=["pass", "warn", "fail", "skip", "not-run"], y=[0, 0, 0, 0, 21])))
    assert report_charts.is_status_chart(plan_counts)
    assert kv_cache.parity_chart([]) is None
    entry = kv_cache.parity_chart_entry(None, "plan mode")
    assert entry["figure"] is None and entry["text"].endswith("(plan mode)")
    old = fig(go.Figure(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="identical", line={"dash": "dash"})))
    assert report_charts.curate(old)[:2] == ("text", "nothing measured: the chart would hold only its guide line")
    row = {"model": "m", "n_ctx": 4096, "n_parallel": 1, "type_k": "f16", "type_v": "f16", "kv_unified": False,
           "cache": "kv", "predicted_mib": 90.0, "reported_mib": 90.0}
    measured = kv_cache.parity_chart([row, {**row, "n_ctx": 8192, "predicted_mib": 180.0, "reported_mib": 180.0}])
    assert report_charts.curate(fig(measured))[0] == "chart"
    record = {"record": "05_kv_cache", "checks": [{"name": "a", "status": "not-run"}],
              "charts": [evidence.chart_entry("Checks", go.Figure(go.Bar(x=["pass", "not-run"], y=[0, 1]))), entry]}
    page, _ = report.record_section(record, False)
    assert "<div class='chart'>" not in page and f"{kv_cache.PARITY_CHART}</b>: {entry['text']}" in page


def test_whole_number_axes_close_ticks_and_a_one_colour_scale():
    """Issue 44: "1.00 2.00 4.00" on a concurrency axis, two log ticks too close to read (4.19 over 3.90), and a plan
    run's colour bar from −0.4 to 0.4 (every quant's generation speed 0: not measured)."""
    conc = fig(go.Figure(go.Scatter(x=[1, 2, 4], y=[56.2, 111.0, 217.0])).update_yaxes(type="log"))
    kind, drawn, _ = report_charts.curate(conc)
    assert drawn["layout"]["xaxis"]["ticktext"] == ["1", "2", "4"] and drawn["layout"]["xaxis"]["tickvals"] == [1, 2, 4]
    close = fig(go.Figure(go.Scatter(x=[1, 2, 3], y=[3.90, 4.19, 40.0])).update_yaxes(type="log"))
    assert report_charts.curate(close)[1]["layout"]["yaxis"]["ticktext"] == ["3.90", "40"]
    flat = fig(go.Figure(go.Scatter(x=[87.0, 100.0], y=[0.3, 0.07], mode="markers",
                                    marker={"color": [0, 0], "showscale": True, "colorbar": {"title": {"text": "tg tok/s"}}})))
    kind, drawn, notes = report_charts.curate(flat)
    assert drawn["data"][0]["marker"]["showscale"] is False and "colorbar" not in drawn["data"][0]["marker"]
    assert notes == ["colour (tg tok/s): 0 for every point, so no colour scale (not measured)"]
