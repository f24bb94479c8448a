"""lab.model.llama_bench, the lab's one llama-bench wrapper: its JSON parsing, the median it reports (and the
mean beside it), the command it builds; and one real run of the tool on the embedded model."""
import statistics

import pytest

from lab.core import paths
from lab.model import llama_bench

ROW = {"model_filename": "a.gguf", "model_size": 1000, "n_prompt": 0, "n_gen": 32, "n_depth": 0, "n_threads": 2,
       "flash_attn": True, "avg_ts": 153.0, "stddev_ts": 86.0,
       "samples_ts": [190.0, 1.3, 188.0, 191.0, 195.0], "samples_ns": [1, 2, 3, 4, 5]}


def test_parse_json_skips_text_before_the_array():
    rows = llama_bench.parse_json('main: warm-up\n[{"model_filename": "a.gguf", "n_prompt": 64, "n_gen": 0, '
                                  '"avg_ts": 100.0, "stddev_ts": 1.0, "samples_ts": [99, 101]}]')
    assert rows[0]["avg_ts"] == 100.0


def test_parse_errors_say_what_was_printed():
    with pytest.raises(llama_bench.LlamaBenchError, match="no JSON array; first lines:\nerror: unknown argument"):
        llama_bench.parse_json("error: unknown argument")
    with pytest.raises(llama_bench.LlamaBenchError, match="did not parse"):
        llama_bench.parse_json("[{broken")


def test_the_median_ignores_one_stalled_repetition_and_the_mean_stays_beside_it():
    s = llama_bench.stats(ROW)
    assert s["tok_s"] == 190.0 == statistics.median(ROW["samples_ts"])
    assert s["tok_s_mean"] == 153.0 and s["tok_s_sd"] == 86.0 and s["reps"] == 5
    assert s["test"] == "tg32" and s["samples_tok_s"] == ROW["samples_ts"]


def test_test_names_follow_llama_bench():
    assert llama_bench.test_name({"n_prompt": 512, "n_gen": 0, "n_depth": 0}) == "pp512"
    assert llama_bench.test_name({"n_prompt": 0, "n_gen": 64, "n_depth": 16384}) == "tg64@d16384"
    assert llama_bench.test_name({"n_prompt": 128, "n_gen": 32, "n_depth": 0}) == "pp128+tg32"


def test_command_places_every_setting(monkeypatch, tmp_path):
    (tmp_path / "llama-bench").write_text("")
    monkeypatch.setenv("LAB_LLAMA_BIN", str(tmp_path))
    cmd = llama_bench.command(["a.gguf", "b.gguf"], threads=2, n_prompt=0, n_gen=64, depth=16384, reps=3,
                              n_gpu_layers=-1, flash_attn="0,1", extra_args=("-sm", "row"))
    assert cmd[0] == str(tmp_path / "llama-bench") and cmd[1:5] == ["-m", "a.gguf", "-m", "b.gguf"]
    flags = dict(zip(cmd[5::2], cmd[6::2]))
    assert flags == {"-t": "2", "-p": "0", "-n": "64", "-d": "16384", "-r": "3", "-o": "json", "-ngl": "99",
                     "-fa": "0,1", "-sm": "row"}


@pytest.mark.tools
def test_a_real_run_on_the_embedded_model(smol_model, tmp_path):
    try:
        paths.tool("llama-bench")
    except paths.SetupMissing as exc:
        pytest.skip(str(exc))
    log = tmp_path / "llama-bench.log"
    result = llama_bench.run(smol_model, threads=2, n_prompt=16, n_gen=8, reps=2, timeout_s=300, log=log)
    assert [t["test"] for t in result["tests"]] == ["pp16", "tg8"]
    assert result["pp"]["test"] == "pp16" and result["tg"]["test"] == "tg8"
    tg = result["tg"]
    assert len(tg["samples_tok_s"]) == 2 and tg["tok_s"] == statistics.median(tg["samples_tok_s"]) > 0
    assert log.read_text().startswith("$ " + " ".join(result["command"]))
