"""lab.model.standin: a missing model file becomes a labelled synthetic stand-in only when allowed."""
from dataclasses import replace

import yaml

from lab.core import evidence, profiles, run_folder
from lab.model import models, standin, synth, synth_metadata

TINY = replace(models.stand_in("qwen3-14b"), name="tiny-qwen3", n_layers=1, hidden_size=256, ffn_size=512,
               n_heads=4, n_kv_heads=2, head_dim_k=64, head_dim_v=64)


def _profile(tmp_path, **extra):
    data = yaml.safe_load(profiles.resolve("cpu-default").read_text())
    data.update(name="synth-trial", model_file=str(tmp_path / "absent.gguf"), model_name="Trial-14B",
                model_architecture="config:qwen3-14b", model_quant="Q4_K_M", **extra)
    path = tmp_path / "synth-trial.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, profiles.load(path)


def test_not_allowed_changes_nothing(tmp_path, capsys):
    path, prof = _profile(tmp_path, model_synth="qwen3-14b")
    run = evidence.new_run_dir("synth-trial", tmp_path / "runs")
    assert standin.for_run(prof, path, run, allow=False) is None
    assert "--synth-if-missing" in capsys.readouterr().err
    assert not (run / "records" / f"{standin.RECORD}.json").exists()


def test_no_model_synth_no_substitution(tmp_path):
    path, prof = _profile(tmp_path)
    assert standin.for_run(prof, path, evidence.new_run_dir("x", tmp_path / "runs"), allow=True) is None


def test_allowed_writes_labelled_profile_and_record(tmp_path, monkeypatch):
    # lab.model.synth's cache, with a tiny shape instead of a 14B one (the same code writes both)
    vocab = synth_metadata.default_vocab_path()  # from the real cache, before LAB_CACHE moves
    monkeypatch.setenv("LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LAB_VOCAB_GGUF", str(vocab))
    real_plan = synth.plan_file
    monkeypatch.setattr(synth, "plan_file", lambda arch, *a, **k: real_plan(TINY, *a, **k))
    path, prof = _profile(tmp_path, model_synth="qwen3-14b")
    run = evidence.new_run_dir("synth-trial", tmp_path / "runs")
    sub = standin.for_run(prof, path, run, allow=True, progress=False)
    used = profiles.load(sub)
    assert used.model_synthetic and used.model_name == "Trial-14B [synthetic random weights]"
    assert used.model_file == str(tmp_path / "cache" / "synth" / "qwen3-14b-1L-Q4_K-seed0.gguf")
    rec = run_folder.read_records(run)[standin.RECORD]
    assert rec["checks"][0]["status"] == "warn" and rec["summary"]["not_valid_for"].startswith("text quality")
    assert rec["summary"]["made_now"] is True
    # a second run finds the file (same predicted size) instead of writing it again
    again = evidence.new_run_dir("synth-trial", tmp_path / "runs")
    standin.for_run(prof, path, again, allow=True, progress=False)
    assert run_folder.read_records(again)[standin.RECORD]["summary"]["made_now"] is False
