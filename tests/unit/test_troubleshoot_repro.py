"""Notebook 07's pieces without starting servers: the captured GPU texts, the lab's own port error,
the record's shape (it must not feed facts to `lab doctor`), and the wording of the run summary."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from lab.serving import serve
from lab.diagnose import troubleshoot
from lab.diagnose import troubleshoot_repro as tr
from lab.pages import troubleshoot as views
from lab.diagnose.knowledge_base import derive_facts

LOGS = Path(__file__).resolve().parents[1] / "troubleshoot_logs"
EXAMPLES = tr.captured_examples()


@pytest.mark.parametrize("ex", EXAMPLES, ids=lambda e: e["entry"])
def test_captured_text_is_an_exact_excerpt_of_its_sample(ex):
    if ex["kind"] == "facts":
        assert ex["facts"] and not ex["text"]
        return
    full = (LOGS / ex["file"]).read_text(encoding="utf-8")
    assert ex["text"] and ex["text"] in full
    if ex["lines"] != "all":
        first, last = (int(n) for n in ex["lines"].split("-"))
        assert ex["text"] == "\n".join(full.splitlines()[first - 1:last])


def test_captured_examples_cover_the_gpu_only_pitfalls_and_are_diagnosed_first():
    rows = tr.diagnose_captured()
    assert all(r["correct"] for r in rows), [r for r in rows if not r["correct"]]
    assert {r["expected"] for r in rows} >= {
        "cuda-no-kernel-image", "vllm-awq-needs-sm75", "vllm-bf16-needs-sm80", "nvcc-unsupported-arch",
        "driver-too-old-for-cuda", "nccl-collective-timeout", "nvlink-inactive", "xid79-fallen-off-bus",
        "xid-ecc-memory", "thermal-throttling"}
    assert all(r["entry_source"] and r["text_source"] for r in rows)


def test_the_labs_own_port_error_is_recognised():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        with pytest.raises(serve.PortInUse) as err:
            serve.check_port_free("127.0.0.1", sock.getsockname()[1])
    assert troubleshoot.match_text(str(err.value))[0].entry_id == "port-in-use"


def test_flags_replace_the_profiles_values_instead_of_repeating_them():
    cmd = tr._command(8099, set_flags={"-c": "256", "-np": "1"}, extra=("--swap-space", "16"))
    argv = list(cmd.argv)
    assert argv.count("-c") == 1 and argv[argv.index("-c") + 1] == "256"
    assert argv[argv.index("-np") + 1] == "1" and argv[-2:] == ["--swap-space", "16"]
    assert argv[argv.index("--port") + 1] == "8099"


def _rep(entry: str, skipped: str | None = None) -> tr.Reproduction:
    """A reproduction whose text was llama.cpp's unknown-flag error (diagnosed llamacpp-invalid-argument)."""
    text = "error: invalid argument: --foo"
    findings = [] if skipped else [f.to_dict() for f in troubleshoot.match_text(text)]
    return tr.Reproduction("r", "A pitfall", "did a thing", entry, command="llama-server --foo", outcome="exit 1",
                           error_text=text, log="logs/repro/r.log", findings=findings, seconds=0.1, skipped=skipped)


def test_correct_only_when_the_expected_entry_is_first():
    assert _rep("llamacpp-invalid-argument").correct
    assert not _rep("port-in-use").correct
    assert not _rep("llamacpp-invalid-argument", skipped="no tools").correct
    text = views.explain([_rep("llamacpp-invalid-argument"), _rep("port-in-use")])
    assert "as expected" in text and "EXPECTED port-in-use" in text and "source: ggml-org/llama.cpp common/arg.cpp" in text


def test_record_checks_and_no_facts_leak_into_doctor():
    reps = [_rep("llamacpp-invalid-argument"), _rep("port-in-use"), _rep("gguf-truncated", "no tools")]
    record = views.build_record([], reps, tr.diagnose_captured())
    assert [c["status"] for c in record["checks"]] == ["pass", "fail", "skip", "pass"]
    assert record["summary"]["reproductions_diagnosed"] == "1/2" and record["summary"]["reproductions_skipped"] == 1
    assert record["summary"]["run_findings"] == 0 and record["findings"] == []
    # The captured V100 thermal facts must not become this run's facts when `lab doctor --run` reads the record.
    derived = derive_facts({"records": {"07_troubleshooting": record}})
    assert not {"gpu_count", "thermal_throttle", "min_compute_capability", "driver"} & set(derived)
    assert "NOT recognised as expected: r (got llamacpp-invalid-argument)" in views.closing_text(record)


def test_run_summary_says_plainly_when_nothing_was_found(tmp_path):
    assert "Nothing the knowledge base knows was found" in views.run_summary(tmp_path, [])
    (tmp_path / "logs" / "repro").mkdir(parents=True)
    (tmp_path / "logs" / "repro" / "x.log").write_text("error: invalid argument: --foo\n")
    (tmp_path / "logs" / "server.log").write_text("couldn't bind HTTP server socket, hostname: 127.0.0.1\n")
    findings = troubleshoot.diagnose(tmp_path)
    assert [f.entry_id for f in findings] == ["port-in-use"]  # the repro log is not the run's problem
    assert "Read 1 server/tool log(s)" in views.run_summary(tmp_path, findings)
    assert "Found 1: 1 error." in views.run_summary(tmp_path, findings)
