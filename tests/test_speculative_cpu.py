"""lab.measure.speculative against the real llama-server on this CPU: a 4-layer random-weight target and a 1-layer draft of
the same (tiny) shape and vocabulary. Random weights: the acceptance rate is what it is; what is checked is that
drafting happened and was counted from the server's own timings, that a file without MTP layers is refused with
llama.cpp's reason, and that --spec-synth-len gives the acceptance it was asked for."""
from dataclasses import replace

import pytest
import yaml

from lab.core import profiles
from lab.model import models, synth
from lab.measure import speculative

pytestmark = pytest.mark.integration
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
