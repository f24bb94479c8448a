"""The troubleshooting knowledge base against real error texts (tests/troubleshoot_logs/INDEX.yaml
says which were captured from the real tools and which were quoted from the cited threads)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lab.core import facts as facts_data
from lab.diagnose import knowledge_base
from lab.diagnose import troubleshoot as ts
from lab.diagnose import doctor
from lab.pages import troubleshoot as views

LOGS = Path(__file__).resolve().parents[1] / "troubleshoot_logs"
INDEX = yaml.safe_load((LOGS / "INDEX.yaml").read_text())
SAMPLES = INDEX["samples"]
CLEAN = INDEX["clean"]


def _text(sample: dict) -> str:
    return (LOGS / sample["file"]).read_text(encoding="utf-8") if sample["file"] else ""


def _ids(findings) -> list[str]:
    return [f.entry_id for f in findings]


# ---------------------------------------------------------------- the data
def test_knowledge_base_is_big_enough_and_sourced():
    kb = knowledge_base.load_kb()
    assert len(kb) >= 30
    assert len({e.id for e in kb}) == len(kb)
    for e in kb:
        assert e.source and all(s.strip() for s in e.source), e.id
        assert e.cause and e.fix and e.title, e.id
        assert e.matchers or e.facts_alone, e.id


def test_every_entry_has_a_sample_and_every_sample_file_is_indexed():
    kb_ids = {e.id for e in knowledge_base.load_kb()}
    sampled = {s["entry"] for s in SAMPLES}
    assert kb_ids <= sampled, f"entries without a sample: {sorted(kb_ids - sampled)}"
    assert sampled <= kb_ids, f"samples for unknown entries: {sorted(sampled - kb_ids)}"
    listed = {s["file"] for s in SAMPLES + CLEAN if s["file"]}
    on_disk = {p.relative_to(LOGS).as_posix() for p in LOGS.rglob("*.txt")}
    assert on_disk == listed
    for s in SAMPLES:
        assert s["kind"] in ("captured", "quoted", "facts")
        assert s.get("how") or s.get("source"), s


def test_most_samples_are_real_text_not_facts():
    texts = [s for s in SAMPLES if s["kind"] in ("captured", "quoted")]
    assert {s["entry"] for s in texts} >= {e.id for e in knowledge_base.load_kb()} - {"thermal-throttling"}
    assert sum(s["kind"] == "captured" for s in SAMPLES) >= 20


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s["file"] or s["entry"])
def test_each_sample_is_matched_by_its_entry(sample):
    found = ts.match_text(_text(sample), sample.get("facts"))
    assert sample["entry"] in _ids(found)


@pytest.mark.parametrize("clean", CLEAN, ids=lambda s: s["file"])
def test_clean_logs_match_nothing(clean):
    assert ts.match_text((LOGS / clean["file"]).read_text(encoding="utf-8")) == []


def test_bad_regex_in_the_data_fails_loudly():
    raw = {"id": "x", "title": "t", "severity": "error", "cause": "c", "fix": "f", "source": ["s"],
           "matchers": ["(unclosed"]}
    with pytest.raises(facts_data.DataError, match="bad regex"):
        knowledge_base._entry(raw)
    with pytest.raises(facts_data.DataError, match="severity"):
        knowledge_base._entry({**raw, "matchers": ["ok"], "severity": "fatal"})


# ---------------------------------------------------------------- matching rules
def test_evidence_is_the_most_telling_line_and_has_a_location():
    text = (LOGS / "llamacpp-kv-alloc-failed__cpu_c8000000.txt").read_text()
    f = next(f for f in ts.match_text(text, origin="logs/server.log") if f.entry_id == "llamacpp-kv-alloc-failed")
    assert "failed to allocate buffer for kv cache" in f.evidence
    assert f.where.startswith("logs/server.log:") and f.count >= 3


def test_unless_gives_the_line_to_the_more_specific_entry():
    awq = "The quantization method awq is not supported for the current GPU. Minimum capability: 75. Current capability: 70."
    assert _ids(ts.match_text(awq)) == ["vllm-awq-needs-sm75"]


def test_supersedes_drops_the_generic_finding():
    text = (LOGS / "vllm-cudagraph-oom__worker_vllm40.txt").read_text()
    ids = _ids(ts.match_text(text))
    assert "vllm-cudagraph-oom" in ids and "cuda-oom-startup" not in ids
    assert "cuda-oom-startup" in _ids(ts.match_text((LOGS / "cuda-oom-startup__torch_h200.txt").read_text()))


def test_context_is_needed_unless_facts_confirm():
    line = "(EngineCore_DP0 pid=5917) INFO 09-29 08:17:19 [cuda.py:368] Using FlexAttention backend on V1 engine."
    assert ts.match_text(line) == []
    assert _ids(ts.match_text(line + "\nGPU 0: Tesla V100-SXM2-32GB")) == ["vllm-flexattention-slow-volta"]
    assert ts.match_text(line, {"gpus": [{"compute_capability": "9.0"}]}) == []
    assert _ids(ts.match_text(line, {"gpus": [{"compute_capability": "7.0"}]})) == ["vllm-flexattention-slow-volta"]


def test_facts_confirm_and_raise_the_score():
    text = "RuntimeError: CUDA error: no kernel image is available for execution on the device"
    plain = ts.match_text(text)[0]
    confirmed = ts.match_text(text, {"gpus": [{"compute_capability": "7.0"}]})[0]
    assert confirmed.score > plain.score
    assert "min_compute_capability=7.0" in confirmed.confirmed_by and plain.confirmed_by == ""


def test_facts_alone_entries():
    v100 = {"gpus": [{"compute_capability": "7.0"}], "driver": "595.71.05", "cuda_driver": "13.0"}
    ids = _ids(ts.match_text("", {**v100, "cuda_toolkit": "13.0"}))
    assert "nvcc-unsupported-arch" in ids and "driver-legacy-branch" in ids
    assert "nvcc-unsupported-arch" not in _ids(ts.match_text("", {"gpus": [{"compute_capability": "8.0"}],
                                                                   "cuda_toolkit": "13.0"}))
    old_driver = {"gpus": [{"compute_capability": "7.0"}], "driver": "470.82", "cuda_driver": "11.4",
                  "versions": {"torch": "2.5.1+cu121"}}
    assert "driver-too-old-for-cuda" in _ids(ts.match_text("", old_driver))
    no_sm70 = {"gpus": [{"compute_capability": "7.0"}], "torch_arch_list": ["sm_75", "sm_80", "sm_90"]}
    assert "pytorch-wheel-lacks-arch" in _ids(ts.match_text("", no_sm70))
    assert ts.match_text("", {"gpus": [{"compute_capability": "7.0"}], "torch_arch_list": ["sm_70", "sm_80"]}) == []
    assert ts.match_text("", None) == []


def test_no_offload_is_only_a_note_without_a_gpu():
    text = (LOGS / "llamacpp-no-gpu-offload__cpu_build_ngl99.txt").read_text()
    on_cpu_box = ts.match_text(text, {"gpus": []})
    assert [f.severity for f in on_cpu_box] == ["info"]
    assert doctor.doctor_exit_code(on_cpu_box) == 0 and doctor.doctor_exit_code(on_cpu_box, "info") == 1
    on_gpu_box = ts.match_text(text, {"gpus": [{"compute_capability": "7.0"}]})
    assert [f.severity for f in on_gpu_box] == ["warn"] and doctor.doctor_exit_code(on_gpu_box) == 1


def test_no_offload_never_matches_a_profile_that_expects_no_gpu():
    """cpu-default runs on the CPU by design: its logs must not tell the user to build with CUDA."""
    text = (LOGS / "llamacpp-no-gpu-offload__cpu_build_ngl99.txt").read_text()
    assert ts.match_text(text, {"gpus": [], "profile_gpu_count": 0}) == []
    expects_gpu = ts.match_text(text, {"gpus": [], "profile_gpu_count": 1})
    assert [f.entry_id for f in expects_gpu] == ["llamacpp-no-gpu-offload"]


def test_run_folder_reads_the_profiles_gpu_count(tmp_path):
    from lab.core.paths import ROOT

    (tmp_path / "records").mkdir()
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "04_serve.log").write_text((LOGS / "llamacpp-no-gpu-offload__cpu_build_ngl99.txt").read_text())
    record = {"record": "01_hardware", "provenance": {"profile_file": str(ROOT / "params" / "cpu-default.yaml")}}
    (tmp_path / "records" / "01_hardware.json").write_text(__import__("json").dumps(record))
    assert "llamacpp-no-gpu-offload" not in _ids(ts.diagnose(tmp_path))
    record["provenance"]["profile_file"] = str(ROOT / "params" / "v100-32g-x1.yaml")
    (tmp_path / "records" / "01_hardware.json").write_text(__import__("json").dumps(record))
    assert "llamacpp-no-gpu-offload" in _ids(ts.diagnose(tmp_path))


def test_ranking_puts_errors_before_warnings_and_notes():
    text = "\n".join([
        "WARNING custom_all_reduce.py:166] Custom allreduce is disabled because your platform lacks GPU P2P capability",
        "W llama_context: n_ctx_seq (16384) > n_ctx_train (8192) -- possible training context overflow",
        "E srv         start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080",
    ])
    found = ts.match_text(text)
    assert [f.severity for f in found] == ["error", "warn", "info"]
    assert found[0].entry_id == "port-in-use"
    assert ts.rank(list(reversed(found))) == found


def test_evidence_is_redacted_and_clipped():
    line = "Repository Not Found for url: https://huggingface.co/x token=hf_abcdefghijklmnop " + "x" * 400
    f = ts.match_text(line)[0]
    assert "hf_abcdefghijklmnop" not in f.evidence and "[REDACTED]" in f.evidence
    assert len(f.evidence) <= ts.EVIDENCE_CHARS


def test_derive_facts_from_hardware_inventory_shape():
    inv = {"nvml": {"available": True, "driver": "580.95.05", "cuda_driver": "13.0"},
           "gpus": [{"compute_capability": "7.0", "nvlink_links": [{"link": 0, "active": True},
                                                                    {"link": 1, "active": False}],
                     "ecc_uncorrected_volatile": 0, "retired_pages_dbe": 2,
                     "throttle_reasons": ["SW power cap"]},
                    {"compute_capability": "7.0", "ecc_uncorrected_volatile": 1, "throttle_reasons": []}],
           "host": {"os": "Linux-5.15.167.4-microsoft-standard-WSL2-x86_64-with-glibc2.35"}}
    d = knowledge_base.derive_facts(inv)
    assert d["gpu_count"] == 2 and d["min_compute_capability"] == 7.0 and d["driver_major"] == 580
    assert d["nvlink_links_inactive"] == 1 and d["ecc_uncorrected"] == 1 and d["retired_pages_dbe"] == 2
    assert d["thermal_throttle"] is False and d["is_wsl"] is True
    ids = _ids(ts.match_text("", inv))
    assert "xid-ecc-memory" in ids and "nvlink-inactive" in ids and "thermal-throttling" not in ids


def test_condition_operators_and_unknown_facts():
    assert knowledge_base.condition_holds({"fact": "cuda_toolkit", "op": ">=", "value": "13.0"}, {"cuda_toolkit": "13.0.88"})
    assert knowledge_base.condition_holds({"fact": "cuda_toolkit", "op": ">=", "value": "13.0"}, {"cuda_toolkit": "12.8"}) is False
    assert knowledge_base.condition_holds({"fact": "os", "op": "matches", "value": "(?i)windows-7"}, {"os": "Windows-7-6.1"})
    assert knowledge_base.condition_holds({"fact": "gpu_count", "op": ">", "value": 0}, {}) is None
    assert knowledge_base.conditions_hold([{"fact": "a", "op": "==", "value": 1}, {"fact": "b", "op": "==", "value": 2}],
                              {"a": 1}, "all") is None
    assert knowledge_base.conditions_hold([{"fact": "a", "op": "==", "value": 1}, {"fact": "b", "op": "==", "value": 2}],
                              {"a": 1}, "any") is True


# ---------------------------------------------------------------- diagnose() and run folders
def _make_run(tmp_path: Path) -> Path:
    run = tmp_path / "outputs" / "v100" / "20261129T120000Z_abc"
    (run / "logs" / "repro").mkdir(parents=True)
    (run / "records").mkdir()
    (run / "notebooks").mkdir()
    (run / "logs" / "llama-server.log").write_text((LOGS / "port-in-use__llama_server.txt").read_text())
    (run / "logs" / "clean.log").write_text((LOGS / "clean" / "llama_server_cpu_default.txt").read_text())
    (run / "logs" / "repro" / "truncated.log").write_text((LOGS / "gguf-truncated__head_50MB.txt").read_text())
    (run / "manifest.json").write_text(json.dumps({"hardware": {"gpus": [{"compute_capability": "7.0"}],
                                                                "driver": "580.95.05", "cuda_driver": "13.0"}}))
    (run / "records" / "01_hardware.json").write_text(json.dumps({"schema_version": 1, "checks": [
        {"name": "GPU 0 ECC uncorrectable errors", "status": "fail", "observed": 3, "expected": "0",
         "fix": "RMA", "source": "NVML"},
        {"name": "PSU size", "status": "warn", "observed": "unknown", "expected": ">= 850 W",
         "fix": "Check the PSU label.", "source": "V100 brief"},
        {"name": "GPU count", "status": "pass", "observed": 1, "expected": 1, "fix": "", "source": ""},
    ]}))
    nb = {"cells": [{"cell_type": "code", "source": "x", "outputs": [{
        "output_type": "error", "ename": "OutOfMemoryError",
        "evalue": "CUDA out of memory. Tried to allocate 20.00 GiB.",
        "traceback": ["\x1b[0;31m---------------------------------------------\x1b[0m",
                      "\x1b[0;31mOutOfMemoryError\x1b[0m: CUDA out of memory. Tried to allocate 20.00 GiB."]}]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (run / "notebooks" / "05_kv_cache.ipynb").write_text(json.dumps(nb))
    return run


def test_diagnose_run_folder(tmp_path):
    run = _make_run(tmp_path)
    found = ts.diagnose(run)
    ids = _ids(found)
    assert "port-in-use" in ids and "cuda-oom-startup" in ids and "xid-ecc-memory" in ids
    assert "gguf-truncated" not in ids  # logs/repro/ holds errors reproduced on purpose
    assert "check:PSU size" in ids and "check:GPU 0 ECC uncorrectable errors" not in ids  # ECC: the KB entry covers it
    assert not any(i.startswith("check:GPU count") for i in ids)
    where = {f.entry_id: f.where for f in found}
    assert where["port-in-use"].startswith("logs/llama-server.log:")
    assert where["cuda-oom-startup"].startswith("notebooks/05_kv_cache.ipynb:")
    assert "\x1b" not in next(f for f in found if f.entry_id == "cuda-oom-startup").evidence
    assert "gguf-truncated" in _ids(ts.diagnose(run, include_repro=True))
    assert doctor.doctor_exit_code(found) == 1
    assert ts.diagnose(str(run)) == found  # a one-line str naming a folder is a path


def test_diagnose_run_folder_with_nothing_wrong(tmp_path):
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "server.log").write_text((LOGS / "clean" / "llama_server_cpu_default.txt").read_text())
    (run / "records").mkdir()
    (run / "records" / "01_hardware.json").write_text(json.dumps({"checks": [
        {"name": "GPU count", "status": "skip", "observed": 0, "expected": 0}]}))
    found = ts.diagnose(run)
    assert found == [] and doctor.doctor_exit_code(found) == 0


def test_diagnose_log_file_and_text(tmp_path):
    log = tmp_path / "server.log"
    log.write_text((LOGS / "llamacpp-split-buffers__llama_server_h200.txt").read_text())
    by_path = ts.diagnose(log)
    assert _ids(by_path) == ["llamacpp-split-buffers"] and by_path[0].where.startswith("server.log:")
    assert _ids(ts.diagnose(str(log))) == ["llamacpp-split-buffers"]
    assert _ids(ts.diagnose(log.read_text())) == ["llamacpp-split-buffers"]
    assert ts.diagnose("no such file, just words") == []


def test_table_and_text_output():
    found = ts.match_text((LOGS / "gguf-truncated__head_50MB.txt").read_text())
    table = views.findings_table(found)
    assert list(table["entry_id"]) == ["gguf-truncated"]
    assert {"severity", "evidence", "cause", "fix", "source", "score"} <= set(table.columns)
    assert "gguf-truncated" in doctor.format_findings(found) and "sha256sum" in doctor.format_findings(found)
    assert doctor.format_findings([]) == "No known problem found."
    assert views.findings_table([]).empty


def test_captured_texts_keep_their_evidence_whole():
    """The report shows a long log line folded, whole; the diagnosis no longer cuts it at 300 characters."""
    from lab.diagnose import troubleshoot_repro

    rows = troubleshoot_repro.diagnose_captured()
    assert rows and not [r["seen"] for r in rows if str(r["seen"]).endswith("…")]
