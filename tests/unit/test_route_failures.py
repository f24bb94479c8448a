"""`lab doctor` knows the failures of the routes the lab recommends (lab/data/routes.yaml: MTP, -sm tensor, -bs, the
1Cat-vLLM fork): each error text of the pinned llama.cpp (llama-cpp-python 0.3.36's vendor) and of the fork's threads,
one line of its sample under tests/troubleshoot_logs/ (INDEX.yaml says captured or quoted), diagnosed on its own as
its entry first; and each whole captured log is diagnosed with that entry first."""
from __future__ import annotations

from pathlib import Path

import pytest

from lab.diagnose import doctor
from lab.diagnose import troubleshoot as ts

LOGS = Path(__file__).resolve().parents[1] / "troubleshoot_logs"

# (sample file, a piece of the line, the entry that owns it): one row per text the source prints
TEXTS = [
    ("llamacpp-mtp-block-missing__llama_server_smollm2.txt", "doesn't contain MTP layers", "llamacpp-mtp-block-missing"),
    ("llamacpp-mtp-block-missing__llama_server_smollm2.txt", "E srv    load_model: failed to create MTP context",
     "llamacpp-mtp-block-missing"),
    ("llamacpp-sm-tensor-architecture__llama_server_olmo2.txt", "not implemented for architecture",
     "llamacpp-sm-tensor-architecture"),
    ("llamacpp-sm-tensor-no-gpu__llama_server_cpu.txt", "needs >= 1 devices", "llamacpp-sm-tensor-no-gpu"),
    ("llamacpp-sm-tensor-no-gpu__llama_server_cpu.txt", "llama_params_fit is not implemented", "llamacpp-sm-tensor-no-fit"),
    ("llamacpp-sm-tensor-needs-flash-attn__source.txt", "requires flash_attn", "llamacpp-sm-tensor-needs-flash-attn"),
    ("llamacpp-sm-tensor-single-device__source.txt", "single device", "llamacpp-sm-tensor-single-device"),
    ("llamacpp-sm-tensor-allreduce-fallback__source.txt", "NCCL not compiled in", "llamacpp-sm-tensor-allreduce-fallback"),
    ("llamacpp-sm-tensor-allreduce-fallback__source.txt", "internal AllReduce init failed",
     "llamacpp-sm-tensor-allreduce-fallback"),
    ("llamacpp-backend-sampling-fallback__llama_server_grammar.txt", "not compatible with grammar",
     "llamacpp-backend-sampling-fallback"),
    ("llamacpp-backend-sampling-fallback__source.txt", "with SPLIT_MODE_TENSOR; using CPU", "llamacpp-backend-sampling-fallback"),
    ("llamacpp-backend-sampling-fallback__source.txt", "reasoning budget", "llamacpp-backend-sampling-fallback"),
    ("fork-flash-attn-v100-missing__1catvllm72.txt", "flash_attn_v100_cuda", "fork-flash-attn-v100-missing"),
    ("fork-fa2-unavailable-v100__1catvllm71.txt", "_vllm_fa2_C", "fork-fa2-unavailable-v100"),
]


def _line(file: str, piece: str) -> str:
    lines = [line for line in (LOGS / file).read_text(encoding="utf-8").splitlines() if piece in line]
    assert lines, f"{piece!r} is not in {file}"
    return lines[0]


@pytest.mark.parametrize("file,piece,entry", TEXTS, ids=[f"{e}:{p}" for _, p, e in TEXTS])
def test_each_route_text_alone_is_its_entry(file, piece, entry):
    found = ts.match_text(_line(file, piece))
    assert found and found[0].entry_id == entry, [f.entry_id for f in found]


@pytest.mark.parametrize("file,entry", [
    ("llamacpp-mtp-block-missing__llama_server_smollm2.txt", "llamacpp-mtp-block-missing"),
    ("llamacpp-sm-tensor-architecture__llama_server_olmo2.txt", "llamacpp-sm-tensor-architecture"),
    ("llamacpp-sm-tensor-no-gpu__llama_server_cpu.txt", "llamacpp-sm-tensor-no-gpu"),
    ("llamacpp-backend-sampling-fallback__llama_server_grammar.txt", "llamacpp-backend-sampling-fallback"),
])
def test_captured_route_logs_lead_with_their_entry(file, entry):
    found = ts.diagnose(LOGS / file)
    assert found[0].entry_id == entry, [f.entry_id for f in found]
    assert entry in doctor.format_findings(found)


def test_the_mtp_fix_names_the_file_that_has_the_block():
    found = ts.match_text(_line("llamacpp-mtp-block-missing__llama_server_smollm2.txt", "doesn't contain MTP layers"))
    fix = found[0].fix
    assert "Qwen3.8-27B-Q4_K_M.gguf" in fix and "-md mtp-" in fix and "drop --spec-type draft-mtp" in fix
    assert doctor.doctor_exit_code(found) == 1


def test_backend_sampling_fallback_is_a_note_not_a_failure():
    found = ts.diagnose(LOGS / "llamacpp-backend-sampling-fallback__llama_server_grammar.txt")
    assert [f.severity for f in found] == ["info"] and doctor.doctor_exit_code(found) == 0
