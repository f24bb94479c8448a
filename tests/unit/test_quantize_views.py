"""lab.pages.quantize (notebook 03's tables, Markdown and closing text): what they show is what
lab.model.quant_targets predicted, to the row and the sentence — pure, no tools run."""
from lab.core import profiles
from lab.pages import quantize
from lab.model import quant_targets


def test_target_table_and_recommendation_show_the_prediction():
    prof = profiles.load("cpu-default")
    targets = quant_targets.target_sizes(prof)
    table = quantize.target_table(targets)
    assert len(table) == len(targets) and list(table["weights (GB)"]) == [round(r["predicted_gb"], 2) for r in targets]
    rec = {"text": "Measured here, Q6_K.", "rule": "rule: the smallest type", "source": "llama.cpp README", "table": [{"a": 1}]}
    assert quantize.recommendation_markdown(rec) == "Measured here, Q6_K.\n\n*rule: the smallest type* (llama.cpp README)"
    assert quantize.recommendation_table(rec).to_dict(orient="records") == [{"a": 1}]


def test_vllm_plan_markdown_has_every_format_with_its_commands():
    plan = quant_targets.vllm_quant_plan(profiles.load("v100-32g-x1"), gpu_present=False)
    text = quantize.plan_markdown(plan)
    assert text.startswith(f"**{plan['status']}**") and text.count("```bash") == len(plan["rows"])
    assert list(quantize.plan_table(plan)["format"]) == [r["format"] for r in plan["rows"]]


def test_closing_text_reads_the_record():
    record = {"ladder": {"rows": []}, "recommendation": {"text": "Q4_K_M it is."}, "claims": [],
              "targets": [{"profile_model": True, "type": "Q4_K_M", "params": 27e9, "model": "org/Model-27B",
                           "predicted_gb": 16.5, "predicted_gib": 15.37, "vram_left_gib": 14.6}]}
    lines = quantize.closing_text(record).splitlines()
    assert lines[0] == "- Q4_K_M it is."
    assert lines[1] == "- A 27B-class model at Q4_K_M is 16.5 GB = 15.4 GiB (Model-27B) of weights."
    assert "leaving 14.6 GiB of the card" in lines[2]
