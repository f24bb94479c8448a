"""vLLM's GPU path, the parts that run here: carrying vLLM to the lent machine (lab.setup.device_vllm), the stand-in
folder vLLM fills with random weights (lab.model.hf_standin, lab.model.standin), the MTP rows and vLLM's speculative
counters (lab.experiments.speculative), and the vLLM GPU profiles."""
import json
import zipfile

import pytest

from lab.core import profiles
from lab.experiments import speculative
from lab.model import hf_standin, standin
from lab.setup import device_vllm

# the lines of a vLLM 0.25.0 /metrics page with speculative decoding on (vllm/v1/spec_decode/metrics.py: prometheus
# counters get "_total"; "_created" lines carry a timestamp, not a count)
METRICS = """# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 120.0
vllm:spec_decode_num_draft_tokens_created{engine="0",model_name="m"} 1.7651e+09
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 3.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 3.0
"""


def test_the_wheel_loses_only_what_hopper_never_loads(tmp_path):
    src, dst = tmp_path / "vllm.whl", tmp_path / "stripped.whl"
    keep = ["vllm/__init__.py", "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so",
            "vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so"]
    drop = ["vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "vllm/_moe_C_stable_libtorch.abi3.so", "vllm/vllm-rs",
            "vllm/third_party/deep_gemm/_C.cpython-311-x86_64-linux-gnu.so"]
    with zipfile.ZipFile(src, "w") as z:
        for name in keep + drop:
            z.writestr(name, b"x" * 100)
        z.writestr("vllm-0.25.0.dist-info/RECORD", "\n".join(f"{n},sha256=x,100" for n in keep + drop)
                   + "\nvllm-0.25.0.dist-info/RECORD,,\n")
    stats = device_vllm.strip_wheel(src, dst)
    with zipfile.ZipFile(dst) as z:
        names = set(z.namelist())
        record = z.read("vllm-0.25.0.dist-info/RECORD").decode().split()
    assert names == set(keep) | {"vllm-0.25.0.dist-info/RECORD"} and stats["bytes_left_out_unpacked"] == 400
    assert [r.split(",")[0] for r in record] == keep + ["vllm-0.25.0.dist-info/RECORD"]


def test_the_carry_plan_fits_one_call_each():
    assert device_vllm.carry_plan(7) == [[".device", ".device-vllm/0"], [".device-vllm/1", ".device-vllm/2"],
                                         [".device-vllm/3", ".device-vllm/4"], [".device-vllm/5", ".device-vllm/6"]]
    # two parts and the tree (≈ 5 MiB with outputs/ left behind) stay under the tool's 64 MiB a call
    assert 2 * device_vllm.PART_BYTES + (5 << 20) < 64 << 20


def test_the_pins_hold_what_the_lent_h100_asked_for():
    pins = dict(p.split("==") for p in device_vllm.VLLM_DEVICE_WHEELS)
    # xgrammar 0.2.9 needs apache-tvm-ffi >= 0.1.11; llguidance and flashinfer are imported at start-up (2026-12-07)
    assert pins["apache_tvm_ffi"] == "0.1.15.post2" and pins["llguidance"] == "1.7.6"
    assert pins["flashinfer_python"] == "0.6.13" and pins["xgrammar"] == "0.2.9"


def test_parts_are_installed_only_when_all_came_and_match(tmp_path):
    parts, store = tmp_path / "parts", tmp_path / "store"
    (parts / "1").mkdir(parents=True)
    (parts / "1" / "b.tar.part01").write_bytes(b"second")
    said = device_vllm.install(parts, store, tmp_path / "site", tmp_path / "bin")
    assert said == "waiting for part 0 (it carries VLLM.json)"
    (parts / "0").mkdir()
    (parts / "0" / "b.tar.part00").write_bytes(b"first")
    manifest = {"vllm": "0.25.0", "file": "b.tar", "sha256": "0" * 64, "wheels": [],
                "parts": [{"file": "b.tar.part00"}, {"file": "b.tar.part01"}, {"file": "b.tar.part02"}]}
    (parts / "0" / device_vllm.MANIFEST).write_text(json.dumps(manifest))
    said = device_vllm.install(parts, store, tmp_path / "site", tmp_path / "bin")
    assert said == "2 of 3 parts here (missing part 02)"
    (parts / "0" / "b.tar.part02").write_bytes(b"third")
    said = device_vllm.install(parts, store, tmp_path / "site", tmp_path / "bin")
    assert said.startswith("parts joined but the sha256 differs") and not (tmp_path / "bin").exists()


def test_the_stand_in_config_is_qwen35s_with_the_real_shape():
    cfg = hf_standin.hf_config("qwen3.8-27b")
    text = cfg["text_config"]
    assert cfg["architectures"] == ["Qwen3_5ForConditionalGeneration"] and cfg["model_type"] == "qwen3_5"
    assert (text["model_type"], text["hidden_size"], text["num_hidden_layers"], text["vocab_size"]) == \
        ("qwen3_5_text", 5120, 64, 248_320)
    assert (text["num_key_value_heads"], text["head_dim"], text["full_attention_interval"]) == (4, 256, 4)
    # the rotary half (256 x 0.25 / 2 = 32) over (t, h, w), as Qwen3.5-27B's published config
    assert text["rope_parameters"]["mrope_section"] == [11, 11, 10] and text["rope_parameters"]["rope_theta"] == 1e7
    assert cfg["vision_config"]["out_hidden_size"] == 5120 and cfg["tie_word_embeddings"] is False


def test_a_vllm_profile_without_its_folder_takes_the_stand_in(tmp_path):
    prof = profiles.load("h100-vllm").model_copy(update={"model_dir": str(tmp_path / "Qwen3.8-27B-FP8")})
    assert standin.missing_model(prof) == tmp_path / "Qwen3.8-27B-FP8"
    (tmp_path / "Qwen3.8-27B-FP8").mkdir()
    (tmp_path / "Qwen3.8-27B-FP8" / "config.json").write_text("{}")
    assert standin.missing_model(prof) is None
    assert standin.missing_model(profiles.load("cpu-vllm")) is None  # set-up's converted copy: never substituted


def test_the_vllm_gpu_profiles():
    for name, card in (("h100-vllm", "H100"), ("h200-vllm", "H200")):
        p = profiles.load(name)
        assert (p.engine, p.engine_version, p.gpu_name_pattern, p.model_synth) == ("vllm", "0.25.0", card, "qwen3.8-27b")
        assert p.server_args[-2:] == ["--gdn-prefill-backend", "triton"]  # no FlashInfer JIT at the first start


def test_vllm_mtp_rows_and_counters():
    rows = speculative.vllm_variants((1, 2))
    assert [r["kind"] for r in rows] == ["none", "mtp", "mtp"]
    assert json.loads(rows[2]["args"][1]) == {"method": "mtp", "num_speculative_tokens": 2}
    counters = speculative.parse_spec_counters(METRICS)
    assert counters == {"draft_n": 120.0, "draft_n_accepted": 3.0}
    got = speculative.vllm_acceptance({"draft_n": 20.0, "draft_n_accepted": 1.0}, counters)
    assert got == {"draft_n": 100, "draft_n_accepted": 2, "acceptance_rate": pytest.approx(0.02)}
    assert speculative.vllm_acceptance({}, {})["acceptance_rate"] is None  # no speculation: no counters
