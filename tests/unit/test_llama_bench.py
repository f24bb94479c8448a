"""lab.model.llama_bench, the lab's one llama-bench wrapper: its JSON parsing, the median it reports (and the
mean beside it), the command it builds; and one real run of the tool on the embedded model."""
import statistics

import pytest

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


# ---------------------------------------------------------------- llama-batched-bench (lab.measure.llama_batched_bench)
# two rows of its README's JSONL example (tools/batched-bench/README.md), the second at B = 2, and a repetition of B = 1
JSONL = """llama_model_loader: loaded meta data
{"n_kv_max": 2048, "n_batch": 2048, "n_ubatch": 512, "flash_attn": 0, "is_pp_shared": 0, "n_gpu_layers": 99, "n_threads": 8, "n_threads_batch": 8, "pp": 128, "tg": 128, "pl": 1, "n_kv": 256, "t_pp": 0.233810, "speed_pp": 547.453064, "t_tg": 3.503684, "speed_tg": 36.532974, "t": 3.737494, "speed": 68.495094}
{"n_kv_max": 2048, "n_batch": 2048, "n_ubatch": 512, "flash_attn": 0, "is_pp_shared": 0, "n_gpu_layers": 99, "n_threads": 8, "n_threads_batch": 8, "pp": 128, "tg": 128, "pl": 2, "n_kv": 512, "t_pp": 0.422602, "speed_pp": 605.770935, "t_tg": 11.106112, "speed_tg": 23.050371, "t": 11.528713, "speed": 44.410854}
{"n_kv_max": 2048, "n_batch": 2048, "n_ubatch": 512, "flash_attn": 0, "is_pp_shared": 0, "n_gpu_layers": 99, "n_threads": 8, "n_threads_batch": 8, "pp": 128, "tg": 128, "pl": 1, "n_kv": 256, "t_pp": 0.233810, "speed_pp": 547.453064, "t_tg": 3.403684, "speed_tg": 37.6, "t": 3.637494, "speed": 70.0}

llama_perf_context_print:        load time =     100.00 ms"""


def test_batched_bench_rows_are_parsed_and_repetitions_give_the_median():
    from lab.measure import llama_batched_bench as bb

    rows = bb.parse_jsonl(JSONL)
    assert [r["pl"] for r in rows] == [1, 2, 1]
    by = bb.summarise(rows, [1, 2])
    assert by[1]["reps"] == 2 and by[1]["speed_tg"] == pytest.approx((36.532974 + 37.6) / 2)
    assert by[2]["speed_tg"] == pytest.approx(23.050371) and by[2]["output_tok_s"] == pytest.approx(2 * 128 / 11.528713)
    with pytest.raises(bb.BatchedBenchError, match="no row for 4 sequences"):
        bb.summarise(rows, [1, 4])


def test_batched_bench_takes_the_server_s_shared_settings():
    from lab.measure import llama_batched_bench as bb

    argv = ["llama-server", "-m", "m.gguf", "-c", "262144", "-np", "16", "-t", "8", "-ngl", "999", "-ctk", "f16",
            "-ctv", "f16", "-fa", "auto", "--host", "127.0.0.1", "--port", "8080", "--cache-ram", "0", "-ctxcp", "0",
            "-ub", "512", "--no-mmap"]
    assert bb.shared_flags(argv) == ["-t", "8", "-ngl", "999", "-ctk", "f16", "-ctv", "f16", "-fa", "auto",
                                     "-ub", "512", "--no-mmap"]
    assert bb.context_for(512, 256, [1, 4, 8, 16]) == 16 * 768
