"""lab/data/flag_table.yaml (lab.serving.flag_table): one table from profile field to engine flag to record field.
Every row puts its flag with the profile's value and a sourced note into llama-server's and vLLM's command; notebook
04's record names what the server said back by the profile's field. Pure: no process, no server."""
import json
import re
from pathlib import Path

import pytest

from lab.core import facts, fields, record_schema
from lab.core.paths import ROOT
from lab.core.profiles import Profile
from lab.pages import serve as page
from lab.serving import endpoint, engine_logs, engines, flag_table

DATA = Path(__file__).resolve().parents[1] / "data"
LLAMA = dict(name="table-test", description="flag table", gpu_count=2, gpu_compute_capability="9.0",
             gpu_name_pattern="H200", gpu_vram_mib=143771, gpu_memory_bandwidth_gb_s=4800,
             engine="llama.cpp", engine_version="0.3.36", model_name="SmolLM2-135M-Instruct",
             model_file="/models/smol.gguf", model_architecture="gguf:/models/smol.gguf", model_quant="Q4_1",
             context_tokens=4096, parallel_slots=4, threads=2, port=8080)
VLLM = {**LLAMA, "engine": "vllm", "engine_version": "0.11.0", "model_file": None, "model_quant": "BF16",
        "model_architecture": "config:HuggingFaceTB/SmolLM2-135M-Instruct"}
# Per (engine, field): a value other than the default, and the words the command must then hold. Written here, not
# derived from the table, so the table is checked against what each engine takes (llama.cpp common/arg.cpp; vLLM's
# engine args); a new row needs its line here.
EXPECTED = {
    ("llama.cpp", "context_tokens"): (8192, ["-c", "8192"]),
    ("llama.cpp", "parallel_slots"): (3, ["-np", "3"]),
    ("llama.cpp", "threads"): (5, ["-t", "5"]),
    ("llama.cpp", "n_gpu_layers"): (-1, ["-ngl", "999"]),
    ("llama.cpp", "kv_cache_dtype"): ("q8_0", ["-ctk", "q8_0", "-ctv", "q8_0"]),
    ("llama.cpp", "split_mode"): ("row", ["-sm", "row"]),
    ("llama.cpp", "tensor_split"): ([1.0, 2.5], ["-ts", "1/2.5"]),
    ("llama.cpp", "main_gpu"): (1, ["-mg", "1"]),
    ("vllm", "context_tokens"): (8192, ["--max-model-len", "8192"]),
    ("vllm", "parallel_slots"): (3, ["--max-num-seqs", "3"]),
    ("vllm", "gpu_memory_utilization"): (0.8, ["--gpu-memory-utilization", "0.8"]),
    ("vllm", "tensor_parallel_size"): (2, ["--tensor-parallel-size", "2"]),
    ("vllm", "pipeline_parallel_size"): (2, ["--pipeline-parallel-size", "2"]),
    ("vllm", "nccl_p2p_disable"): (True, ["--disable-custom-all-reduce"]),
    ("vllm", "dtype"): ("bfloat16", ["--dtype", "bfloat16"]),
    ("vllm", "kv_cache_dtype"): ("fp8", ["--kv-cache-dtype", "fp8"]),
    ("vllm", "enforce_eager"): (True, ["--enforce-eager"]),
}
BASE = {"llama.cpp": LLAMA, "vllm": VLLM}


def _holds(argv, words) -> bool:
    return any(list(argv[i:i + len(words)]) == words for i in range(len(argv)))


def test_the_table_loads_its_fields_are_profile_fields_and_its_notes_are_rules():
    rows = flag_table.rows()  # checked on load: fields, writers, `when`s and every note id
    rule_ids = {r["id"] for r in facts.load("engine_rules", "rules")["rules"]}
    assert [r.field for r in rows][:4] == ["context_tokens", "parallel_slots", "threads", "n_gpu_layers"]
    for r in rows:
        assert r.field in Profile.model_fields and r.source and r.meaning
        for engine, col in r.columns.items():
            assert engine in flag_table.ENGINES
            assert {col.note, col.env_note, (col.also_if or {}).get("note")} - {None} <= rule_ids, (r.field, engine)
    assert {"context_tokens", "parallel_slots", "threads", "n_gpu_layers", "kv_cache_dtype", "split_mode",
            "tensor_split", "main_gpu"} <= {r.field for r in rows if "llama.cpp" in r.columns}
    assert {"context_tokens", "parallel_slots", "gpu_memory_utilization", "kv_cache_dtype", "tensor_parallel_size",
            "pipeline_parallel_size", "dtype", "enforce_eager"} <= {r.field for r in rows if "vllm" in r.columns}


def test_every_row_of_both_engines_has_its_expected_value_here():
    in_table = {(e, r.field) for r in flag_table.rows() for e in ("llama.cpp", "vllm") if e in r.columns}
    assert in_table == set(EXPECTED)


@pytest.mark.parametrize("engine,field", sorted(EXPECTED), ids=lambda x: x)
def test_each_row_puts_its_flag_with_the_profiles_value_and_a_sourced_note(engine, field):
    value, words = EXPECTED[(engine, field)]
    profile = Profile(**BASE[engine]).model_copy(update={field: value})
    cmd = engines.build_command(profile, installed_version=BASE[engine]["engine_version"], model_path="/m")
    assert _holds(cmd.argv, words), (words, cmd.argv)
    col = flag_table.row(field).columns[engine]
    notes = [n for n in cmd.notes if n.flag.startswith(col.said)]
    assert notes and all(n.source and n.level == "info" for n in notes), (col.said, cmd.notes)
    assert flag_table.flag(field, engine) == words[0]


def test_the_argv_keeps_its_order_around_the_flags_no_profile_field_sets():
    p = Profile(**{**LLAMA, "n_gpu_layers": -1, "kv_cache_dtype": "q8_0", "split_mode": "layer",
                   "tensor_split": [1, 1], "main_gpu": 0})
    argv = engines.build_command(p, model_path="/m.gguf").argv
    assert list(argv[1:]) == ["-m", "/m.gguf", "-c", "4096", "-np", "4", "-t", "2", "-ngl", "999", "-ctk", "q8_0",
                              "-ctv", "q8_0", "-fa", "on", "--host", "127.0.0.1", "--port", "8080", "--cors-origins",
                              "localhost", "--no-cors-credentials", "-lv", "4", "-sm", "layer", "-ts", "1/1", "-mg", "0"]
    v = Profile(**{**VLLM, "parallel_slots": 8, "tensor_parallel_size": 2, "kv_cache_dtype": "fp8"})
    argv = engines.build_command(v, installed_version="0.11.0", model_path="/m").argv
    assert list(argv[1:]) == ["serve", "/m", "--served-model-name", "SmolLM2-135M-Instruct", "--host", "127.0.0.1",
                              "--port", "8080", "--max-model-len", "4096", "--gpu-memory-utilization", "0.9",
                              "--tensor-parallel-size", "2", "--kv-cache-dtype", "fp8", "--max-num-seqs", "8"]


def test_llama_cpp_python_takes_its_column():
    p = Profile(**{**LLAMA, "engine": "llama-cpp-python", "kv_cache_dtype": "q8_0", "n_gpu_layers": -1})
    cmd = engines.build_command(p, model_path="/m.gguf")
    for words in (["--n_ctx", "4096"], ["--n_threads", "2"], ["--n_gpu_layers", "-1"],
                  ["--type_k", "8", "--type_v", "8", "--flash_attn", "true"]):
        assert _holds(cmd.argv, words), words
    assert any(n.flag == "parallel_slots" and n.level == "warn" for n in cmd.notes)  # -np has no equivalent there


# ---------------------------------------------------------------- the record: the profile's names
def _record(engine_log: dict, discovery: dict | None = None, profile: dict = LLAMA) -> dict:
    cmd = engines.build_command(Profile(**profile), model_path="/m")
    return page.build_record(cmd, [], None, None, None, engine_log, None, [], discovery=discovery)


def test_the_04_record_names_what_the_server_said_by_the_profiles_field():
    log = engine_logs.parse_llama_log((DATA / "llama_server_smollm2_lv4.log").read_text())
    rec = _record(log)
    s = rec["summary"]
    assert (s["parallel_slots"], s["context_per_request"], s["context_tokens"]) == (4, 1024, 4096)  # -c 4096 -np 4
    assert s["kv_cache_dtype"] == "f16" and s["threads"] == log["threads"]["n_threads"]
    assert set(flag_table.record_fields()) <= set(s)
    assert not {"slots", "n_ctx_slot", "context_per_request_reported", "layers_offloaded"} & set(s)
    assert record_schema.problems("04_serve", rec) == []
    assert "4 slots (parallel_slots) of 1024 tokens each" in page.closing_text(rec)


def test_an_endpoint_s_api_answer_sits_under_the_same_names():
    probes = {"openai": {"models": {"status": 200, "json": {"data": [{"id": "m", "meta": {"n_ctx_train": 8192}}]}}},
              "llama.cpp": {"props": {"status": 200, "json": {"default_generation_settings": {"n_ctx": 1024},
                                                               "total_slots": 2}},
                            "slots": {"status": 501, "json": None}}}
    said = endpoint.facts(probes, "llama.cpp", "m")
    assert said["sources"]["parallel_slots"] == "GET /props total_slots"  # the table's `reported` route
    found = {"engine": "llama.cpp", "engine_name": "llama-server (llama.cpp)", "identified_by": "GET /props",
             "version": "b1", "facts": said, "probes": {}}
    rec = _record({}, found)
    s = rec["summary"]
    assert (s["parallel_slots"], s["context_per_request"], s["context_tokens"]) == (2, 1024, 2048)
    facts_table = next(t for t in rec["tables"] if t["title"].startswith("What the server says"))["rows"]
    assert {"fact": "parallel_slots (requests decoded together)", "value": 2, "from": "GET /props total_slots"} in facts_table
    log = engine_logs.parse_vllm_log((DATA / "vllm_cpu_0.32.0_smollm2_fp32_start.log").read_text())
    s = _record(log, profile=VLLM)["summary"]
    assert s["context_tokens"] == s["context_per_request"] == log["max_model_len"] and s["parallel_slots"] is None


def test_an_old_04_record_reads_through_the_schema_s_old_names():
    old = json.loads((ROOT / "outputs" / "h200-x1" / "20261201T225010Z_ca156936" / "records" /
                      "04_serve.json").read_text())
    assert fields.canonical(old["summary"])["context_per_request"] == old["summary"]["n_ctx_slot"] == 16384
    assert "(context_per_request)" not in page.closing_text(old)  # its slots: an old name no alias reads yet


def test_the_serve_page_writes_no_old_name():
    import inspect

    source = inspect.getsource(page)
    assert [n for n in fields.old_names() if re.search(rf"[\"']{n}[\"']|\b{n}=", source)] == []
