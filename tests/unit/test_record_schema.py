"""The record schema (lab/data/records.yaml, lab.core.record_schema): every key a record holds is named there with its
meaning, checked when the record is written (never when an old one is read), and a record is written once."""
import json

import pytest
from conftest import ROOT

from lab.core import evidence, fields, record_schema, session

# Real records, committed: the lab's H200 runs (GPU-shaped records through this code in every clone) and the CPU
# backend-sampling run. The 2026-11-29 run predates the record names of today (03_synthetic_model, 06_llama_bench).
# (06_slot_placement.json of the isolate run is a table lab tune writes beside its records, not a record: no `record` key)
COMMITTED = sorted(p for p in (ROOT / "outputs").glob("*/2026120*/records/[0-9][0-9]_*.json")
                   if '"record":' in p.read_text())
# notebook 04's summary now says the profile's names for the server's figures (one name per quantity)
RENAMED_04 = {"slots": "parallel_slots", "n_ctx_slot": "context_per_request", "context_per_request_reported": "context_per_request",
              "layers_offloaded": "n_gpu_layers"}


def test_the_committed_runs_are_there():
    assert len(COMMITTED) >= 20 and any("h200-x1" in str(p) for p in COMMITTED)


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_every_record_of_a_real_run_is_in_the_schema(path):
    rec = json.loads(path.read_text())
    # records written before a figure was renamed are read by today's names (lab.core.fields.old_names), as the report does
    renamed = {**fields.old_names(), **(RENAMED_04 if rec["record"] == "04_serve" else {})}
    rec["summary"] = {renamed.get(k, k): v for k, v in (rec.get("summary") or {}).items()}
    assert record_schema.problems(rec["record"], rec) == []


def test_the_schema_covers_every_record_the_lab_writes_and_points_figures_at_fields_yaml():
    common, records = record_schema.schema()
    assert {"schema_version", "record", "created_utc", "provenance", "title", "summary", "checks", "tables", "charts",
            "mode", "plan_reason", "server_scope", "what_this_means"} <= set(common)
    assert {"00_model_stand_in", "01_hardware", "02_install", "03_quantize", "04_serve", "05_kv_cache", "06_benchmark",
            "06_speculative", "06_tune", "06_backend_sampling", "07_endpoint", "07_troubleshooting", "08_allreduce",
            "08_multigpu_scaling", "08_tp_model"} <= set(records)
    assert record_schema.spec("06_tune_isolate") is records["06_tune"]  # lab tune --record NAME
    # a figure's meaning is fields.yaml's, not said twice
    assert record_schema.meaning("06_benchmark", "best_aggregate_tok_s", in_summary=True).startswith(
        fields.get("best_aggregate_tok_s").meaning)
    assert record_schema.meaning("04_serve", "parallel_slots", in_summary=True)
    assert record_schema.meaning("03_quantize", "Q4_K_M", in_summary=True)  # one key per quant type: a pattern
    assert record_schema.meaning("05_kv_cache", "plan") and record_schema.meaning("05_kv_cache", "nope") is None


def test_an_unknown_key_is_named_with_the_nearest_name_and_the_record_is_written_marked_invalid(tmp_path):
    """Issue 45: a schema check never costs the measurement: the record is written, marked invalid with the reasons,
    and the write raises (the notebook fails loudly, the run exits non-zero)."""
    from lab.core import record_schema, run_folder

    with pytest.raises(record_schema.RecordSchemaError) as err:
        evidence.write_record(tmp_path, "04_serve", {"title": "Serve", "summary": {"paralel_slots": 4}})
    msg = str(err.value)
    assert "04_serve" in msg and "'paralel_slots'" in msg and "did you mean 'parallel_slots'" in msg
    assert "lab/data/records.yaml" in msg and "written, marked invalid" in msg
    kept = run_folder.read_record_file(tmp_path / "records" / "04_serve.json")
    assert kept["summary"] == {"paralel_slots": 4} and "paralel_slots" in kept["invalid"]["reasons"][0]
    assert kept["invalid_reason"].startswith("marked invalid when written")
    with pytest.raises(ValueError, match=r"key 'smokes' .*did you mean 'smoke'.*records: 04_serve: keys:"):
        evidence.write_record(tmp_path, "04_serve", {"smokes": {}})
    with pytest.raises(ValueError, match=r"record '01_hardwar' is not in the record schema \(did you mean '01_hardware'"):
        evidence.write_record(tmp_path, "01_hardwar", {"summary": {}})
    # no `.partial` left; a good record carries no `invalid`
    assert sorted(p.name for p in (tmp_path / "records").iterdir()) == ["01_hardwar.json", "04_serve.json"]
    good = evidence.write_record(tmp_path, "04_serve", {"title": "Serve", "summary": {"parallel_slots": 4}})
    assert "invalid" not in run_folder.read_record_file(good)


def test_session_record_writes_once_with_the_closing_built_from_the_record_as_written(tmp_path, clean_display,
                                                                                        monkeypatch):
    s = session.start("cpu-default", str(tmp_path / "run"))
    writes, seen = [], []
    real = evidence.write_whole
    monkeypatch.setattr(evidence, "write_whole", lambda path, text: writes.append(path) or real(path, text))

    def closing(rec):
        seen.append(rec)
        return f"{rec['summary']['kv_dtype']}: {rec['summary']['claims']}; {rec['mode']}"

    path = s.record("05_kv_cache", {"summary": {"kv_dtype": "f16", "claims": {1: (2, float("nan"))}}}, closing=closing)
    assert writes == [path]  # once
    rec = json.loads(path.read_text())
    assert rec["what_this_means"] == closing({k: v for k, v in rec.items() if k != "what_this_means"})
    assert rec["what_this_means"] == "f16: {'1': [2, None]}; measure"  # JSON's kinds: str keys, lists, NaN → None
    assert seen[0]["record"] == "05_kv_cache" and seen[0]["provenance"] == rec["provenance"]
    with pytest.raises(ValueError, match="did you mean 'kv_dtype'"):
        s.record("05_kv_cache", {"summary": {"kv_dtypes": "f16"}}, closing=closing)
    assert writes == [path, path]  # the invalid one written too, once, marked (issue 45)
    assert json.loads(path.read_text())["invalid"]["reasons"]


def test_the_experiments_records_are_in_the_schema():
    """Records no notebook run writes here (lab tune, speculative, all-reduce): built by their own builders."""
    from lab.core import profiles
    from lab.experiments import allreduce_bench, speculative, tune

    tuned = tune.build_record({"points": [], "skipped": [], "pareto_front": [], "winner": None, "patch_yaml": ""})
    assert record_schema.problems("06_tune_isolate", tuned) == []
    spec = speculative.build_record(speculative.summarise([], profiles.load("cpu-default"), None))
    assert record_schema.problems("06_speculative", spec) == []
    allreduce = allreduce_bench.record({"measured": True, "backend": "nccl", "rows": [
        {"case": "decode batch 1", "step_comm_ms": 0.5}]}, "qwen3.8-27b",
        {"latency_us": 8.0, "latency_at_bytes": 2048, "busbw_peak_gb_s": 300.0})
    assert record_schema.problems("08_allreduce", allreduce) == []
