"""lab.serving.engines (commands per engine and version), lab.serving.seed_commands (the seeds' commands corrected)
and lab.serving.engine_logs (the log parsers), all pure."""
from pathlib import Path

import pytest

from lab.core import facts
from lab.serving import engine_logs, engines, seed_commands
from lab.core.profiles import Profile

DATA = Path(__file__).resolve().parents[1] / "data"

V100X2 = dict(name="v100-test", description="two V100 32G with NVLink", gpu_name_pattern="V100", gpu_count=2,
              gpu_vram_mib=32768, gpu_compute_capability="7.0", gpu_memory_bandwidth_gb_s=900,
              nvlink_expected=True, engine="vllm", engine_version="0.10.1", model_name="Qwen/Qwen3-32B-GPTQ",
              model_architecture="config:Qwen/Qwen3-32B", model_quant="GPTQ-INT4", context_tokens=32768,
              parallel_slots=16, tensor_parallel_size=2, gpu_memory_utilization=0.92)
CPU = dict(name="cpu-test", description="cpu", gpu_count=0, engine="llama.cpp", engine_version="0.3.36",
           model_name="SmolLM2-135M-Instruct", model_file="/models/smol.gguf",
           model_architecture="gguf:/models/smol.gguf", model_quant="Q4_1", context_tokens=4096,
           parallel_slots=4, threads=2, port=8080)


def profile(base: dict, **changes) -> Profile:
    return Profile(**{**base, **changes})


def flag_value(argv, flag):
    return argv[argv.index(flag) + 1]


# ---------------------------------------------------------------- data files
def test_rule_and_seed_files_have_sources():
    rules = facts.load("engine_rules", "rules")["rules"]
    assert len({r["id"] for r in rules}) == len(rules)
    assert all(r["text"] and r["source"] for r in rules)
    assert all(c["argv"] and c["seed"] for c in seed_commands.seed_commands())


# ---------------------------------------------------------------- llama-server
def test_llama_server_command_has_every_setting_with_a_reason():
    cmd = engines.build_command(profile(CPU), model_path="/models/smol.gguf")
    argv = list(cmd.argv)
    assert Path(argv[0]).name == "llama-server"
    assert flag_value(argv, "-m") == "/models/smol.gguf"
    assert flag_value(argv, "-c") == "4096" and flag_value(argv, "-np") == "4" and flag_value(argv, "-t") == "2"
    assert flag_value(argv, "-ngl") == "0" and flag_value(argv, "-ctk") == "f16" and flag_value(argv, "-fa") == "auto"
    assert flag_value(argv, "--host") == "127.0.0.1" and flag_value(argv, "--port") == "8080"
    assert flag_value(argv, "-lv") == "4" and "-v" not in argv
    assert cmd.health_path == "/health" and cmd.base_url == "http://127.0.0.1:8080"
    flags = {n.flag for n in cmd.notes}
    assert {"-c", "-np", "-t", "-ngl", "-ctk/-ctv", "-fa", "--host", "-lv"} <= flags
    assert all(n.source for n in cmd.notes) and not cmd.problems


def test_llama_server_quantized_kv_forces_flash_attention_and_all_layers_is_999():
    cmd = engines.build_command(profile(CPU, kv_cache_dtype="q8_0", n_gpu_layers=-1), model_path="/m.gguf")
    assert flag_value(list(cmd.argv), "-ctv") == "q8_0" and flag_value(list(cmd.argv), "-fa") == "on"
    assert flag_value(list(cmd.argv), "-ngl") == "999"


def test_api_key_travels_in_the_environment_never_in_argv(monkeypatch):
    monkeypatch.setenv("LAB_TEST_KEY", "sk-secret-value-123456")
    cmd = engines.build_command(profile(CPU, host="0.0.0.0", api_key_env="LAB_TEST_KEY"), model_path="/m.gguf")
    assert "--api-key" not in cmd.argv and "sk-secret-value-123456" not in cmd.shell()
    assert cmd.secret_env == {"LLAMA_API_KEY": "LAB_TEST_KEY"}
    assert 'LLAMA_API_KEY="$LAB_TEST_KEY"' in cmd.shell()
    assert engines.env_with_secrets(cmd)["LLAMA_API_KEY"] == "sk-secret-value-123456"
    assert cmd.base_url == "http://127.0.0.1:8080"  # a client on this machine reaches 0.0.0.0 via loopback
    assert "sk-secret" not in str(cmd.to_record())


def test_llama_cpp_python_says_it_serialises_requests():
    cmd = engines.build_command(profile(CPU, engine="llama-cpp-python"), model_path="/m.gguf")
    argv = list(cmd.argv)
    assert argv[1:3] == ["-m", "llama_cpp.server"] and cmd.serialises_requests
    assert flag_value(argv, "--n_threads") == "2" and flag_value(argv, "--interrupt_requests") == "false"
    assert cmd.health_path == "/v1/models"
    assert any("serialises" in n.text and n.level == "warn" for n in cmd.notes)
    assert any(n.flag == "parallel_slots" for n in cmd.notes)  # -np 4 has no equivalent there


# ---------------------------------------------------------------- vLLM by version
def test_vllm_new_version_uses_vllm_serve_without_removed_flags():
    cmd = engines.build_command(profile(V100X2, engine_version="0.18.0"))
    argv = list(cmd.argv)
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen3-32B-GPTQ"]
    assert "--swap-space" not in argv and "--disable-log-requests" not in argv and "--enable-log-requests" not in argv
    assert flag_value(argv, "--dtype") == "half"  # V100: compute capability 7.0 < 8.0
    assert flag_value(argv, "--tensor-parallel-size") == "2"
    assert flag_value(argv, "--gpu-memory-utilization") == "0.92"
    assert flag_value(argv, "--max-model-len") == "32768" and flag_value(argv, "--max-num-seqs") == "16"
    assert flag_value(argv, "--host") == "127.0.0.1"
    assert any(n.flag == "" and n.level == "warn" for n in cmd.notes)  # Volta wheels after v0.14


def test_vllm_old_version_uses_module_path_and_disable_log_requests():
    cmd = engines.build_command(profile(V100X2, engine_version="0.4.2"))
    argv = list(cmd.argv)
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"] and flag_value(argv, "--model")
    assert "--disable-log-requests" in argv


def test_vllm_log_flag_boundary_is_0_10_1():
    before = engines.build_command(profile(V100X2, engine_version="0.10.0"))
    after = engines.build_command(profile(V100X2, engine_version="0.10.1"))
    assert "--disable-log-requests" in before.argv and "--disable-log-requests" not in after.argv


def test_vllm_installed_version_wins_over_declared():
    cmd = engines.build_command(profile(V100X2, engine_version="0.4.2"), installed_version="0.11.0")
    assert cmd.argv[:2] == ("vllm", "serve") and cmd.version_source == "installed"


def test_vllm_no_dtype_on_ampere_and_awq_on_volta_is_a_problem():
    ampere = engines.build_command(profile(V100X2), compute_capability="8.0")
    assert "--dtype" not in ampere.argv
    awq = engines.build_command(profile(V100X2, model_quant="AWQ-INT4"))
    assert any("7.5" in n.text for n in awq.problems)
    fp8 = engines.build_command(profile(V100X2, kv_cache_dtype="fp8", engine_version="0.11.0"))
    assert any(n.flag == "--kv-cache-dtype" for n in fp8.problems)


def test_external_mode_starts_nothing():
    cmd = engines.build_command(profile(CPU, engine="external", port=11434, api_key_env="OLLAMA_KEY"))
    assert cmd.external and cmd.argv == () and cmd.base_url == "http://127.0.0.1:11434"
    assert cmd.api_key_env == "OLLAMA_KEY" and cmd.health_path == "/v1/models"


# ---------------------------------------------------------------- the seeds' commands
def test_seed000_corrected_for_vllm_0_18():
    corr = seed_commands.correct_seed_command("seed000-vllm-serve", vllm_version="0.18.0")
    assert corr.original[:3] == ("python", "-m", "vllm.entrypoints.openai.api_server")
    assert corr.corrected[:3] == ("vllm", "serve", "./qwen27b-awq")
    assert "--swap-space" not in corr.corrected and "--disable-log-requests" not in corr.corrected
    assert "--max-model-len" in corr.corrected and "65536" in corr.corrected
    assert ("--host", "127.0.0.1") == corr.corrected[corr.corrected.index("--host"):][:2]
    actions = {(c.action, c.before.split()[0] if c.before else c.after.split()[0]) for c in corr.changes if c.before or c.after}
    assert ("remove", "--swap-space") in actions and ("remove", "--disable-log-requests") in actions
    assert any(c.action == "blocker" and "awq" in c.before for c in corr.changes)  # AWQ on a V100
    assert all(c.why and c.source for c in corr.changes)
    swap = next(c for c in corr.changes if c.before.startswith("--swap-space"))
    assert "rejected" in swap.why and "36216" in swap.source


def test_seed000_for_its_own_version_keeps_what_worked_then():
    corr = seed_commands.correct_seed_command("seed000-vllm-serve")  # vLLM 0.4.2, as the seed pinned
    assert corr.corrected[:3] == ("python", "-m", "vllm.entrypoints.openai.api_server")
    assert "--swap-space" in corr.corrected and "--disable-log-requests" in corr.corrected


def test_seed_log_flag_deprecated_not_rejected_between_0_10_1_and_0_17():
    corr = seed_commands.correct_seed_command("seed000-vllm-serve", vllm_version="0.12.0")
    change = next(c for c in corr.changes if c.before == "--disable-log-requests")
    assert "deprecated" in change.why and "21739" in change.source


def test_seed_fp8_kv_dropped_on_volta_under_v1():
    corr = seed_commands.correct_seed_command("seed000-vllm-tuned", vllm_version="0.11.0")
    assert "--kv-cache-dtype" not in corr.corrected
    assert seed_commands.correct_seed_command("seed000-vllm-tuned", "0.11.0", compute_capability="9.0").corrected.count("fp8") == 1


def test_seed001_llama_server_renamed_and_not_exposed():
    corr = seed_commands.correct_seed_command("seed001-llama-server")
    assert corr.original[0] == "./server" and corr.corrected[0] == "llama-server"
    assert corr.corrected[corr.corrected.index("--host") + 1] == "127.0.0.1"
    assert any("7809" in c.source for c in corr.changes)


def test_seed_corrections_follow_the_profile_engine():
    cpu = seed_commands.seed_corrections_for(profile(CPU))
    assert [c.command_id for c in cpu] == ["seed001-llama-server"]
    gpu = seed_commands.seed_corrections_for(profile(V100X2, engine_version="0.18.0"))
    assert {c.command_id for c in gpu} == {"seed000-vllm-serve", "seed000-vllm-tuned", "seed001-vllm-serve"}
    assert all("0.18.0" in c.target for c in gpu)


def test_unknown_seed_command_names_the_known_ones():
    with pytest.raises(KeyError, match="seed000-vllm-serve"):
        seed_commands.correct_seed_command("nope")


# ---------------------------------------------------------------- log parsers on real logs
def test_parse_llama_server_log_smollm2():
    """Captured here from llama-server build 0c1e570, SmolLM2-135M Q4_1, -c 4096 -np 4 -t 2 -lv 4."""
    rep = engine_logs.parse_llama_log((DATA / "llama_server_smollm2_lv4.log").read_text())
    assert rep["build"] == {"number": 1, "commit": "0c1e570", "compiler": "GNU 12.2.0", "target": "Linux x86_64"}
    assert rep["slots"] == {"n_slots": 4, "n_ctx_slot": 1024, "kv_unified": False}
    assert rep["context"]["n_ctx"] == 4096 and rep["context"]["n_ctx_seq"] == 1024
    [kv] = rep["kv_caches"]
    assert kv["size_mib"] == "90.00" and kv["cells"] == 1024 and kv["streams"] == 4 and kv["buffer"] == "CPU"
    assert kv["layers"] == 30 and kv["type_k"] == "f16" and kv["k_mib"] == "45.00"
    assert rep["kv_buffers_mib"] == {"CPU": 90.0} and rep["model_buffers_mib"] == {"CPU_Mapped": 92.1}
    assert rep["model"]["params"] == 134_520_000 and rep["model"]["file_type"] == "Q4_1"
    assert rep["hparams"]["n_layer"] == 30 and rep["hparams"]["n_head_kv"] == 3
    assert rep["threads"]["n_threads"] == 2 and rep["flash_attention"] is True
    assert "offloaded" not in rep  # a CPU build prints no offload line
    # KV bytes check: 2 (K,V) × 30 layers × 3 KV heads × 64 × 4096 tokens × 2 bytes = 90 MiB
    assert 2 * 30 * 3 * 64 * 4096 * 2 / 2**20 == float(kv["size_mib"])


def test_parse_llama_server_log_gemma3_has_global_and_sliding_window_caches():
    rep = engine_logs.parse_llama_log((DATA / "llama_server_gemma3_270m_lv4.log").read_text())
    kinds = [(k["cache"], k["layers"], k["size_mib"]) for k in rep["kv_caches"]]
    assert kinds == [("global", 3, "12.00"), ("swa", 15, "60.00")]
    assert rep["kv_buffers_mib"] == {"CPU": 72.0} and rep["hparams"]["n_swa"] == 512


def test_parse_keeps_only_the_real_load_after_the_fitting_pass():
    """-v logs a dry 'fit' load (KV buffer 0.00 MiB) before the real one."""
    text = (DATA / "llama_server_smollm2_verbose_excerpt.log").read_text()
    rep = engine_logs.parse_llama_log(text)
    assert len(rep["kv_caches"]) == 1 and rep["kv_buffers_mib"] == {"CPU": 90.0}
    # the KV parity grid reads the same lines with the same function, and skips the dry run without _last_load
    assert rep["kv_caches"] == engine_logs.parse_kv_lines(text)


def test_parse_gpu_offload_line():
    # The format string of llama.cpp src/llama-model.cpp (load_tensors); no GPU build on this machine.
    text = ("0.00.5 I load_tensors: offloaded 65/65 layers to GPU\n"
            "0.00.6 I load_tensors:        CUDA0 model buffer size = 17580.12 MiB\n"
            "0.00.7 I load_tensors:   CPU_Mapped model buffer size =   417.66 MiB\n")
    rep = engine_logs.parse_llama_log(text)
    assert rep["offloaded"] == {"layers": 65, "of": 65}
    assert rep["model_buffers_mib"]["CUDA0"] == 17580.12
    assert any(r["value"] == "65/65" for r in engine_logs.reported_rows(rep))


def test_parse_vllm_log_v1_and_v0():
    v1 = ("(EngineCore_DP0 pid=2412130) INFO 12-11 00:06:53 [gpu_worker.py:359] Available KV cache memory: 52.36 GiB\n"
          "(EngineCore_DP0 pid=2412130) INFO 12-11 00:06:53 [kv_cache_utils.py:1286] GPU KV cache size: 686,320 tokens\n"
          "(EngineCore_DP0 pid=2412130) INFO 12-11 00:06:54 [kv_cache_utils.py:1291] Maximum concurrency for "
          "100,000 tokens per request: 6.86x\n")
    rep = engine_logs.parse_vllm_log(v1)
    assert rep["kv_cache_tokens"] == 686_320 and rep["kv_cache_memory_gib"] == 52.36
    assert rep["max_concurrency"] == {"tokens_per_request": 100_000, "x": 6.86}
    v0 = "INFO 05-10 12:00:00 gpu_executor.py:94] # GPU blocks: 2048, # CPU blocks: 1024\n"
    assert engine_logs.parse_vllm_log(v0)["blocks"] == {"gpu": 2048, "cpu": 1024}


def test_reported_rows_show_slots_context_and_kv():
    rep = engine_logs.parse_llama_log((DATA / "llama_server_smollm2_lv4.log").read_text())
    rows = {r["what"]: r["value"] for r in engine_logs.reported_rows(rep)}
    assert rows["parallel_slots (n_slots)"] == 4 and rows["context_per_request (n_ctx_slot)"] == 1024
    assert rows["context_tokens (n_ctx)"] == 4096 and "90.00 MiB" in rows["KV cache (all layers)"]


def test_failure_said_puts_llama_cpp_s_cause_first_without_time_stamps():
    # the lines llama-server 0.3.36's build printed here for --spec-type draft-mtp on SmolLM2 (no MTP layers)
    log = ("0.00.840.603 W operator(): failed to measure the memory of the extra model\n"
           "0.02.301.520 I llama_init_from_model: n_ctx = 4096\n"
           "0.02.301.527 W llama_init_from_model: context type MTP requested but model doesn't contain MTP layers\n"
           "0.02.301.527 E common_speculative_init_result: failed to create MTP context\n"
           "0.02.301.534 E srv    load_model: failed to create MTP context\n"
           "0.02.319.168 E srv  llama_server: exiting due to model loading error\n")
    assert engine_logs.failure_said("llama.cpp", log) == [
        "llama_init_from_model: context type MTP requested but model doesn't contain MTP layers",
        "common_speculative_init_result: failed to create MTP context",
        "srv    load_model: failed to create MTP context"]
    assert engine_logs.failure_said("llama.cpp", "0.01 I all well\n") == []
    vllm = "INFO 01-01 api_server.py: starting\nERROR 01-01 core.py: EngineCore failed to start.\n"
    assert engine_logs.failure_said("vllm", vllm) == ["ERROR 01-01 core.py: EngineCore failed to start."]
    assert engine_logs.failure_said("external", vllm) == []


def test_parse_offload_line_of_a_file_with_its_mtp_block():
    """A published Qwen3.8-27B GGUF holds 64 blocks + its MTP block (block_count 65): llama.cpp prints n_layer = 65
    and offloads 66/66 (n_layer_all + 1, src/llama-model.cpp), which is what lab byhand tells the owner to expect."""
    from lab.core import profiles
    from lab.serving import byhand_choices

    text = ("0.00.4 I print_info: n_layer               = 65\n"
            "0.00.5 I load_tensors: offloaded 66/66 layers to GPU\n"
            "0.00.6 I load_tensors:   CPU_Mapped model buffer size =   682.03 MiB\n")
    rep = engine_logs.parse_llama_log(text)
    assert rep["offloaded"] == {"layers": 66, "of": 66}
    assert rep["offloaded"]["of"] == byhand_choices.n_offloadable(profiles.load("v100-32g-x1")) == 66
    assert rep["model_buffers_mib"]["CPU_Mapped"] == 682.03   # the token embedding, kept in host memory


def test_with_flags_sets_appends_switches_and_removes_on_a_command_or_an_argv():
    cmd = engines.build_command(profile(CPU), model_path="/m.gguf")
    changed = engines.with_flags(cmd, {"-fa": "on", "-c": "256", "-fit": "off", "-kvu": True, "-lv": None,
                                       "--no-warmup": False})
    argv = list(changed.argv)
    assert flag_value(argv, "-fa") == "on" and flag_value(argv, "-c") == "256" and flag_value(argv, "-fit") == "off"
    assert "-kvu" in argv and "-lv" not in argv and "4" not in argv[argv.index("-kvu"):]
    assert len(argv) == len(cmd.argv) + 3 - 2  # -fit off and -kvu appended, -lv 4 removed
    assert changed.notes[-1].flag == "-fa on -c 256 -fit off -kvu" and changed.notes[-1].source == "caller"
    assert engines.with_flags(["x", "-ngl", "-1", "-bs"], {"-ngl": "999", "-bs": "1"}) == ["x", "-ngl", "999", "-bs", "1"]
    assert engines.with_flags(["x"], {}) == ["x"]


def test_one_flash_attention_rule():
    assert [engines.llama_flash_attn(t) for t in ("f16", "bf16", "q8_0", "q4_0", "q5_1")] == [
        "auto", "auto", "on", "on", "on"]
    assert engines.llama_flash_attn("f16", "tensor") == "on"


def test_an_orphaned_llama_server_is_killed_outright_a_python_engine_asked_to_stop():
    """The kernel sends the death signal once per exiting parent thread; llama-server's second SIGTERM deadlocked its
    handler in free() (lab.serving.server.death_signal), so it gets SIGKILL; vLLM stops its engine on SIGTERM."""
    import dataclasses
    import signal

    from lab.serving.server import death_signal

    assert death_signal(engines.build_command(profile(CPU), model_path="/m.gguf")) == signal.SIGKILL
    llama = engines.build_command(profile(CPU), model_path="/m.gguf")
    assert death_signal(dataclasses.replace(llama, engine="vllm")) == signal.SIGTERM


def test_flag_values_read_a_routes_flags_as_with_flags_takes_them():
    from lab.serving import engines

    assert engines.flag_values("-sm layer -ts 1,1 -fa on --no-mmap -ngl -1") == {
        "-sm": "layer", "-ts": "1,1", "-fa": "on", "--no-mmap": True, "-ngl": "-1"}
    argv = engines.with_flags(["llama-server", "-fa", "auto"], engines.flag_values("-fa on -bs"))
    assert argv == ["llama-server", "-fa", "on", "-bs"]
