"""`lab tune --levels` as a user runs it, on the CPU with SmolLM2: one lever (-lv 3) against the profile, each level
warmed up and measured twice, the per-level table with its spread in the record (lab.experiments.tune.Method)."""
import json
import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.mark.tools
def test_tune_levels_isolates_one_lever_with_repetitions(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "lab", "tune", "--profile", "cpu-default", "--levels", "1",
                           "--repetitions", "2", "--dimensions", "log_level", "--output-tokens", "4",
                           "--budget-s", "400", "--run-dir", str(tmp_path), "--record", "06_tune_isolate"],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    record = json.loads((tmp_path / "records" / "06_tune_isolate.json").read_text())
    points = {p["name"]: p for p in record["tune"]["points"]}
    lever = points["log_level: -lv 3 (llama.cpp's default)"]
    assert "-lv 3" in " ".join(lever["command"].split()) and lever["status"] == "ok", lever.get("error")
    assert record["tune"]["method"] == {"levels": [1], "repetitions": 2, "requests_single": 3}
    for p in points.values():  # the baseline, the lever and the baseline again: 2 repetitions each, warm-up recorded
        one = p["levels"]["1"]
        assert one["spread"]["output_throughput"]["n"] == 2 and one["warmup"]["rounds"], p["name"]
    table = next(t for t in record["tables"] if t["title"].startswith("Per level"))
    assert [r["setting"] for r in table["rows"]][:2] == ["baseline (the profile)", lever["name"]]
    assert table["rows"][0]["Output throughput (tok/s) ÷ baseline"] == 1.0  # the field schema's label
