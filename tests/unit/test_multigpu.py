"""Several GPUs: profile settings, the commands they give, the per-device KV split, the scaling script on
this CPU (its GPU modes skipped with the reason) and the all-reduce benchmark on gloo."""
import dataclasses

import pytest

from conftest import v100_x2_vllm
from lab.core import processes, profiles
from lab.model import models
from lab.predict import kvcache
from lab.serving import engine_logs, engines
from lab.experiments import multigpu

from conftest import ROOT


# ---------------------------------------------------------------- profiles and commands
def test_h200_x2_serves_layer_split_on_both_cards_in_pci_order():
    cmd = engines.build_command(profiles.load("h200-x2"))
    argv = list(cmd.argv)
    assert argv[argv.index("-sm") + 1] == "layer" and argv[argv.index("-ts") + 1] == "1/1"
    assert cmd.env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0,1", **processes.llama_cpp_env()}
    flags = {n["flag"] for n in cmd.notes_rows()}
    assert {"-sm", "-ts", "CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES"} <= flags


def test_tensor_split_mode_forces_flash_attention_and_notes_its_limits():
    p = profiles.load("h200-x2").model_copy(update={"split_mode": "tensor"})
    argv = list(engines.build_command(p).argv)
    assert argv[argv.index("-fa") + 1] == "on"
    assert any("unquantized KV" in n.text for n in engines.build_command(p).notes)


def test_vllm_pipeline_parallel_and_the_pcie_p2p_workaround():
    # the seed's vLLM set-up on two V100s (the shipped x2 profile now serves with llama.cpp)
    p = v100_x2_vllm().model_copy(update={"nccl_p2p_disable": True, "tensor_parallel_size": 1,
                                          "pipeline_parallel_size": 2})
    cmd = engines.build_command(p, installed_version="0.10.1.1")
    argv = list(cmd.argv)
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "2"
    assert "--disable-custom-all-reduce" in argv and cmd.env["NCCL_P2P_DISABLE"] == "1"
    assert cmd.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert any("#631" in n.source for n in cmd.notes)


@pytest.mark.parametrize("change, message", [
    ({"tensor_split": [1, 1, 1]}, "one non-negative share per visible GPU (2)"),
    ({"main_gpu": 2}, "main_gpu 2 but only 2 GPU(s) visible"),
    ({"split_mode": "tensor", "kv_cache_dtype": "q8_0"}, "split_mode tensor needs an unquantized KV cache"),
    ({"nccl_p2p_disable": True}, "vLLM settings"),
    ({"cuda_visible_devices": "0", "tensor_split": [1, 1]}, "visible GPU (1)"),
])
def test_bad_multi_gpu_settings_name_the_field(tmp_path, change, message):
    import yaml

    data = yaml.safe_load((ROOT / "params" / "h200-x2.yaml").read_text()) | change
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data | {"name": "bad"}))
    with pytest.raises(profiles.ProfileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        profiles.load(path)


# ---------------------------------------------------------------- where the cache lands
def test_layer_split_places_layers_as_llama_cpp_does():
    dev = kvcache.llama_cpp_layer_devices(64, 2, [1, 1])
    assert dev[:33] == [0] * 33 and dev[33:] == [1] * 32  # 65 slots: 64 layers + output, il/65 < 0.5 → GPU 0
    assert kvcache.llama_cpp_layer_devices(64, 2, [3, 1]).count(0) == 49  # il/65 < 0.75 for il ≤ 48
    assert kvcache.llama_cpp_layer_devices(4, 2, [1, 1], n_gpu_layers=2) == [None, None, None, 0, 1]


def test_mtp_layer_counts_in_the_split_but_holds_no_cache():
    """A Qwen3.8-27B GGUF carries its MTP block as blk.64: llama.cpp splits n_layer_all = 65 layers + output
    (src/llama-model.cpp load_tensors), so at -ts 3,1 layers 0-49 go to GPU 0 (il/66 < 0.75), not 0-48."""
    arch = models.stand_in("qwen3.8-27b")
    assert arch.mtp_layers == 1
    split = kvcache.llama_cpp_device_split(arch, 32768, 1, "f16", 2, "layer", [3, 1])
    trunk_only = kvcache.llama_cpp_device_split(dataclasses.replace(arch, mtp_layers=0), 32768, 1, "f16", 2,
                                                "layer", [3, 1])
    assert [r["layers"] for r in split] == ["0-49", "50-63"] and [r["layers"] for r in trunk_only] == ["0-48", "49-63"]
    kv = kvcache.llama_cpp_kv_prediction(arch, 32768, 1, "f16")["caches"][0]["size_bytes"]
    assert [r["kv_bytes"] for r in split] == [kv * 12 // 16, kv * 4 // 16]  # full attention 3, 7, ..., 47 on GPU 0
    assert split[1]["output_layer"]


def test_the_memory_plan_puts_on_each_card_what_llama_cpp_does():
    """params/v100-32g-x2-nvlink.yaml (-sm layer -ts 1,1, a Qwen3.8-27B Q4_K_M with its MTP block as blk.64): llama.cpp
    splits 65 blocks + the output layer over 66 slots, so GPU 0 gets blocks 0-32 (il/66 < 0.5) and GPU 1 blocks
    33-63, the MTP block's slot (no bytes without --spec-type draft-mtp) and the output head; the token embedding
    stays in host memory. The plan judges the fuller card, not half of the total."""
    from lab.model import quant_targets
    from lab.predict import memory_plan

    prof = profiles.load("v100-32g-x2-nvlink")
    mem = memory_plan.plan_memory(prof)
    cards = mem["per_device"]
    assert [c["layers"] for c in cards] == ["0-32", "33-63"]
    assert [c["output_layer"] for c in cards] == [False, True] and [c["mtp_blocks"] for c in cards] == [[], [64]]
    parts = quant_targets.gguf_parts("qwen3.8-27b", "Q4_K_M")
    blocks = parts["blocks"]
    assert cards[0]["weights_bytes"] == sum(blocks[:33]) == 7_604_907_904
    assert cards[1]["weights_bytes"] == sum(blocks[33:64]) + parts["output"] == 8_216_336_512
    assert cards[0]["weights_bytes"] + cards[1]["weights_bytes"] == parts["gpu"]  # all but token_embd and MTP
    split = kvcache.llama_cpp_device_split(models.stand_in("qwen3.8-27b"), 262144, 8, "f16", 2, "layer", [1, 1])
    assert [c["kv_bytes"] for c in cards] == [r["kv_bytes"] + r["rs_bytes"] for r in split]
    # the fuller card (GPU 1) is what the plan reports and fits
    assert (mem["weights_bytes_per_device"], mem["kv_bytes_per_device"]) == (8_216_336_512, cards[1]["kv_bytes"])
    assert mem["fits"] and mem["max_context_tokens"] == 92160  # 93,440 when the weights were halved evenly


def test_hybrid_kv_and_state_split_per_card():
    arch = models.stand_in("qwen3.5-27b")  # 16 full-attention layers (3, 7, ..., 63), 48 Gated DeltaNet
    layer = kvcache.llama_cpp_device_split(arch, 32768, 16, "f16", 2, "layer", [1, 1])
    whole = kvcache.llama_cpp_kv_prediction(arch, 32768, 16, "f16")
    kv = next(c for c in whole["caches"] if c["cache"] != "recurrent")["size_bytes"]
    rs = next(c for c in whole["caches"] if c["cache"] == "recurrent")["size_bytes"]
    assert [r["kv_bytes"] for r in layer] == [kv // 2, kv // 2]  # 8 full-attention layers on each side
    assert [r["rs_bytes"] for r in layer] == [rs * 25 // 48, rs * 23 // 48]  # layers 0-32 hold 25 of 48
    assert layer[1]["output_layer"] and not layer[0]["output_layer"]
    tensor = kvcache.llama_cpp_device_split(arch, 32768, 16, "f16", 2, "tensor")
    assert [r["kv_bytes"] for r in tensor] == [kv // 2, kv // 2]
    one = kvcache.llama_cpp_device_split(arch, 32768, 16, "f16", 1, "none")
    assert one[0]["kv_bytes"] == kv and one[0]["rs_bytes"] == rs


def test_kv_split_rows_match_the_log_by_device_name():
    arch = models.stand_in("qwen3.5-27b")
    p = profiles.load("h200-x2")
    pred = kvcache.llama_cpp_device_split(arch, p.context_tokens, p.parallel_slots, "f16", 2, "layer", [1, 1])
    reported = engine_logs.parse_llama_log("\n".join(
        [f"llama_kv_cache:      CUDA{r['device']} KV buffer size =  {r['kv_mib']} MiB" for r in pred]
        + [f"llama_memory_recurrent:      CUDA{r['device']} RS buffer size =  {r['rs_mib']} MiB" for r in pred]))
    rows = multigpu.kv_split_rows(arch, p, reported, 2)
    assert [r["log name"] for r in rows] == ["CUDA0", "CUDA1"]
    assert all(r["KV match"] and r["RS match"] for r in rows)


def test_scaling_rows_are_ratios_over_one_gpu():
    def res(tg, pp, one, agg8):
        return {"status": "ok", "bench": {"tg": {"tok_s": tg}, "pp": {"tok_s": pp}},
                "server": {"summaries": [{"concurrency": 1, "stream_decode_tok_s": one, "output_throughput": one},
                                         {"concurrency": 8, "output_throughput": agg8}]}}
    rows = multigpu.scaling_rows({"none": res(90, 2500, 86, 280), "tensor": res(120, 3000, 110, 420)}, [1, 8])
    t = rows[1]
    assert t["tg ×1-GPU"] == 1.33 and t["output_throughput@8 ×1-GPU"] == 1.5
    assert "tg ×1-GPU" not in rows[0]


def test_mode_plan_says_why_a_mode_does_not_run():
    plan = multigpu.mode_plan(profiles.load("h200-x2"), 1, list(multigpu.MODES))
    assert [p["run"] for p in plan] == [True, False, False, False]
    assert "1 GPU(s) visible" in plan[1]["why"]


def test_tp_prediction_sits_beside_the_measured_tensor_split():
    arch = models.stand_in("qwen3.8-27b")
    results = {"none": {"bench": {"tg": {"tok_s": 90.3}}}, "tensor": {"bench": {"tg": {"tok_s": 101.0}}},
               "layer": {"bench": {"tg": {"tok_s": 88.0}}}}
    rows = multigpu.tp_prediction_rows(results, arch, 14_860_000_000, 4227.0,
                                       {"busbw_peak_gb_s": 350.0, "latency_us": 15.0})
    tensor, layer = rows
    lo, hi = (float(x) for x in tensor["predicted_tok_s"].split(".."))
    assert 90.3 < hi and lo < hi and tensor["measured_tg_tok_s"] == 101.0
    assert "129 all-reduces of 20480 B" in tensor["model"]  # 2 × 64 layers + 1, 5120 floats each
    assert float(layer["predicted_tok_s"]) < 90.3  # a pipeline cannot speed one stream up
    missing = multigpu.tp_prediction_rows(results, arch, 14_860_000_000, None, {})
    assert missing[0]["prediction"] == "not made"
