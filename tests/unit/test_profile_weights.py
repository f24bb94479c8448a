"""One weight size per profile: `lab plan`, the memory plan (notebook 05) and the roofline (notebook 06) all show
lab.model.weights.profile_weights, for every shipped profile, with the model files absent and present.

Presence is made with temporary paths only (model_file / model_dir pointed at a tmp location); the GGUF that is
"present" is the real embedded SmolLM2 file set-up extracted, read by the lab's own header reader."""
from pathlib import Path

import pytest

from lab.core import paths, profiles
from lab.model import gguf_file, weights
from lab.predict import memory_plan, plan as plan_mod, profile_speed

from conftest import ROOT, setup_missing
PROFILES = sorted(p.stem for p in (ROOT / "params").glob("*.yaml"))


@pytest.fixture(scope="module")
def real_gguf() -> Path:
    try:
        return paths.embedded_model("smollm2")
    except paths.SetupMissing as exc:
        setup_missing(str(exc))


def three_answers(prof) -> dict:
    """Weight bytes and basis as `lab plan` (its JSON and its text), the memory plan and the roofline show them."""
    result = plan_mod.plan(prof)
    mem = memory_plan.plan_memory(prof)
    rl = profile_speed.roofline_for(prof)
    return {"plan": (result["weights_bytes"], result["memory"]["weights_basis"]),
            "memory_plan": (mem["weights_bytes"], mem["weights_basis"]),
            "roofline": (rl["weights_bytes"], rl["weights_how"]), "text": plan_mod.describe(result)}


def assert_one_answer(prof, expected: int, basis_start: str) -> None:
    got = three_answers(prof)
    b, basis = weights.profile_weights(prof)
    assert b == expected and basis.startswith(basis_start), basis
    for who in ("plan", "memory_plan", "roofline"):
        n, how = got[who]
        assert n == expected, f"{prof.name}: {who} shows {n} weight bytes, profile_weights {expected}"
        assert how.startswith(basis), f"{prof.name}: {who} says {how!r}, profile_weights {basis!r}"
    assert f"({basis})" in got["text"]  # `lab plan` says which basis it used


def uses_served_folder(prof) -> bool:
    return prof.engine == "vllm" and bool(prof.model_dir)


@pytest.mark.parametrize("name", PROFILES)
def test_weights_agree_with_the_model_files_absent(name, tmp_path, real_gguf):
    prof = profiles.load(name)
    prof = prof.model_copy(update={"model_file": str(tmp_path / "absent.gguf"),
                                   **({"model_dir": str(tmp_path / "absent-hf")} if prof.model_dir else {})})
    expected, basis = weights.profile_weights(prof)
    assert basis.startswith("predicted (") and "not on this machine" in basis
    assert_one_answer(prof, expected, "predicted (")


@pytest.mark.parametrize("name", PROFILES)
def test_weights_agree_with_the_model_files_present(name, tmp_path, real_gguf):
    prof = profiles.load(name)
    if uses_served_folder(prof):  # vLLM loads the HF folder's safetensors, not model_file
        folder = tmp_path / "hf"
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        (folder / "model-00001-of-00002.safetensors").write_bytes(b"\0" * 1000)
        (folder / "model-00002-of-00002.safetensors").write_bytes(b"\0" * 24)
        prof = prof.model_copy(update={"model_dir": str(folder)})
        assert_one_answer(prof, 1024, "file: the 2 safetensors vLLM loads from hf")
    else:
        name = Path(prof.model_file or "").name
        link = tmp_path / (name if name.endswith(".gguf") else "model.gguf")  # embedded:<name> → a path
        link.symlink_to(real_gguf)
        prof = prof.model_copy(update={"model_file": str(link)})
        assert_one_answer(prof, gguf_file.gguf_weights_bytes(real_gguf), f"file: tensor bytes of {link.name}")


def test_a_present_gguf_is_the_answer_even_when_it_differs_from_the_prediction(tmp_path, real_gguf):
    """The v100 profile's Q4_K_M prediction is 16.54 GB; with a (smaller) file at model_file, every view shows the file."""
    v100 = profiles.load("v100-32g-x1")
    absent = v100.model_copy(update={"model_file": str(tmp_path / "Qwen3.8-27B-Q4_K_M.gguf")})
    assert weights.profile_weights(absent)[0] == 16_536_406_016  # llama.cpp's Q4_K_M mix, exact (lab.model.quant_formats)
    (tmp_path / "Qwen3.8-27B-Q4_K_M.gguf").symlink_to(real_gguf)
    assert weights.profile_weights(absent)[0] == gguf_file.gguf_weights_bytes(real_gguf) < 16_536_406_016


def test_an_unreadable_gguf_names_the_file(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf")
    prof = profiles.load("v100-32g-x1").model_copy(update={"model_file": str(bad)})
    with pytest.raises(ValueError, match="broken.gguf: not a readable GGUF"):
        weights.profile_weights(prof)


def test_no_architecture_falls_back_to_the_size_in_the_name(tmp_path):
    prof = profiles.load("cpu-default").model_copy(update={
        "model_file": str(tmp_path / "absent.gguf"), "model_architecture": f"gguf:{tmp_path / 'absent.gguf'}"})
    b, basis = weights.profile_weights(prof)  # SmolLM2-135M at Q4_1
    assert b == pytest.approx(135e6 * weights.bits_per_weight("Q4_1") / 8, abs=1) and "size from the name" in basis
