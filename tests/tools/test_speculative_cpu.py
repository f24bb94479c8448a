"""lab.experiments.speculative against the real llama-server on this CPU: a 4-layer random-weight target and a 1-layer draft of
the same (tiny) shape and vocabulary. Random weights: the acceptance rate is what it is; what is checked is that
drafting happened and was counted from the server's own timings, that a file without MTP layers is refused with
llama.cpp's reason, that a qwen35 file with lab synth's MTP block drafts with it, and that --spec-synth-len gives
the acceptance it was asked for."""
from dataclasses import replace

import pytest
import yaml

from lab.core import profiles
from lab.model import models, synth
from lab.experiments import speculative
from lab.predict import kvcache
from lab.serving import engine_logs

pytestmark = pytest.mark.tools
TINY = replace(models.stand_in("qwen3-14b"), name="tiny-qwen3", hidden_size=256, ffn_size=512,
               n_heads=4, n_kv_heads=2, head_dim_k=64, head_dim_v=64)


def _write(arch, out):
    a, kvs, plan, size = synth.plan_file(arch)
    return synth.write_file(out, a, kvs, plan, size, 0, progress=False)


def test_draft_ngram_mtp_and_synthetic_acceptance(tmp_path):
    target = _write(replace(TINY, n_layers=4), tmp_path / "target.gguf")
    draft = _write(replace(TINY, n_layers=1), tmp_path / "draft.gguf")
    data = yaml.safe_load(profiles.resolve("cpu-default").read_text())
    data.update(name="spec-cpu", model_file=str(target), model_architecture=f"gguf:{target}", model_quant="Q4_K_M",
                model_synthetic=True, model_name="tiny-synthetic", bench_output_tokens=24, bench_prompt_tokens=48)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    prof = profiles.load(tmp_path / "p.yaml")
    res = speculative.measure(prof, str(draft), tmp_path / "logs", requests=1, synth_lengths=(2.0,))
    rows = {r["kind"]: r for r in res["rows"]}
    assert rows["none"]["status"] == "ok" and rows["none"]["draft_n"] is None and res["baseline_decode_tok_s"] > 0
    assert rows["draft"]["status"] == "ok" and rows["draft"]["draft_n"] > 0  # drafting happened and was counted
    assert res["acceptance_rate"] is not None and res["acceptance_rate_valid_for_real_model"] is False
    assert rows["mtp"]["status"] == "failed" and "MTP" in rows["mtp"]["error"]
    syn = rows["synthetic"]
    # L = 2 with 8 drafted per step: one accepted draft per step on average, 1/8 of the drafts
    assert syn["status"] == "ok" and 0.05 < syn["acceptance_rate"] < 0.3
    rec = speculative.build_record(res)
    assert rec["summary"]["synthetic_length_decode_tok_s"]["2"] > 0


def _tiny_qwen35_with_mtp():
    """Qwen3.8-27B's config (lab/data/model_configs.yaml: qwen35 hybrid, full attention every 4th layer,
    mtp_num_hidden_layers 1) shrunk to a CPU-sized width; head dims kept (256 attention, 128 Gated DeltaNet)
    so rope and the delta-net kernels run the real model's paths; the vocabulary stays 248,320 rows."""
    cfg = dict(models.stand_in_entry("qwen3.8-27b")["config"], hidden_size=512, intermediate_size=512,
               num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1, linear_num_key_heads=2,
               linear_num_value_heads=4)
    return models.from_hf_config(cfg, name="tiny-qwen35-mtp", source="tests/tools/test_speculative_cpu.py")


def test_draft_mtp_drafts_with_the_synthetic_mtp_layer(tmp_path):
    """A qwen35 file that lab synth wrote with its MTP block: llama-server starts with --spec-type draft-mtp
    (instead of refusing it), the MTP layer drafts tokens, the server's own timings count them, and its caches
    are lab.predict.kvcache's draft-mtp prediction exactly (the MTP context's one-layer KV cache, 3 more state
    rows). Random weights: the acceptance says nothing about the real model, and the record says so."""
    arch = _tiny_qwen35_with_mtp()
    assert arch.mtp_layers == 1
    target = _write(arch, tmp_path / "target-mtp.gguf")
    data = yaml.safe_load(profiles.resolve("cpu-default").read_text())
    data.update(name="spec-mtp-cpu", model_file=str(target), model_architecture=f"gguf:{target}",
                model_quant="Q4_K_M", model_synthetic=True, model_name="tiny-qwen35-mtp", bench_output_tokens=24,
                bench_prompt_tokens=48)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    prof = profiles.load(tmp_path / "p.yaml")
    res = speculative.measure(prof, None, tmp_path / "logs", requests=1, synth_lengths=(), kinds=("mtp",))
    # (the file has an MTP block: draft-mtp runs at --spec-draft-n-max 1, 2, 3 and 4)
    assert [(r["kind"], r["n_max"]) for r in res["rows"]] == [("none", None)] + [("mtp", n) for n in (1, 2, 3, 4)]
    assert res["rows"][0]["status"] == "ok"
    by_n = {r["n_max"]: r for r in res["rows"] if r["kind"] == "mtp"}
    for n, row in by_n.items():  # every n-max drafts with the MTP layer, at most n tokens a step
        assert row["status"] == "ok", row.get("error")
        assert row["draft_n"] > 0 and 0 <= row["draft_n_accepted"] <= row["draft_n"] and row["stream_decode_tok_s"] > 0
    steps = {s["n_max"]: s for s in res["mtp_steps"]}
    assert sorted(steps) == [1, 2, 3, 4] and all(0 < s["drafts_per_step"] <= n for n, s in steps.items())
    assert all(s["ms_per_step"] == pytest.approx(1000 * s["tokens_per_step"] / s["stream_decode_tok_s"]) for s in steps.values())
    mtp = by_n[3]  # the summary's MTP row is n-max 3, as before the sweep over n
    assert res["mtp"]["draft_n"] == mtp["draft_n"] and res["mtp"]["acceptance_rate_valid_for_real_model"] is False
    rec = speculative.build_record(res)
    assert any(c["name"] == "MTP acceptance speaks for the real model" and c["status"] == "warn" for c in rec["checks"])
    log = next((tmp_path / "logs").glob("spec_draft_mtp_n_max_3*.log")).read_text()
    reported = engine_logs.parse_kv_lines(log)
    from_file = models.from_gguf(target)
    assert from_file.mtp_layers == 1
    ctx = next(c["cells"] * c["streams"] for c in reported if c["cache"] == "kv")
    pred = kvcache.llama_cpp_kv_prediction(from_file, ctx, 1, "f16", draft_mtp=3)  # the variant's --spec-draft-n-max 3
    assert [(c["cache"], c["size_mib"], c["layers"]) for c in reported] == \
        [(c["cache"], c["size_mib"], c["layers"]) for c in pred["caches"]]
    assert [c["cache"] for c in reported] == ["kv", "recurrent", "mtp"]
