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
