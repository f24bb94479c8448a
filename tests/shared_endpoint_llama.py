"""What the tiers of tests/notebooks/test_endpoint_llama.py share (split by .ci/tier_tests.py): fixtures and helpers
used by tests in more than one tier, defined once."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml
from conftest import ROOT, setup_missing

from lab.core import paths
from lab.serving import serve


@pytest.fixture(scope="module")
def llama_server_tool():
    try:
        return paths.tool("llama-server"), paths.embedded_model("smollm2")
    except paths.SetupMissing as exc:
        setup_missing(f"llama.cpp is not set up: {exc}")


def start_outside_the_lab(tool, model, log: Path, *, slots: int, ctx: int, key: str | None = None):
    """llama-server as a user starts it: its own process group, its own port, no lab code involved."""
    port = serve.free_port()
    argv = [str(tool), "-m", str(model), "-c", str(ctx), "-np", str(slots), "-t", "1",
            "--host", "127.0.0.1", "--port", str(port)] + (["--api-key", key] if key else [])
    proc = subprocess.Popen(argv, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # /health is public even with --api-key (tools/server/server-http.cpp)
        try:
            if httpx.get(base + "/health", timeout=2, trust_env=False).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.25)
    stop(proc)
    pytest.fail(f"llama-server did not become healthy: {log.read_text()[-2000:]}")


def stop(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)


def endpoint_profile(tmp_path: Path, base: str, *, key_env: str | None, ctx: int, slots: int) -> Path:
    data = yaml.safe_load((ROOT / "params" / "endpoint-example.yaml").read_text())
    data.update(name="ep-llama", endpoint_url=base + "/v1", context_tokens=ctx, parallel_slots=slots,
                bench_prompt_tokens=32, bench_output_tokens=16, bench_concurrency=[1, 2], bench_requests=4,
                bench_duration_s=10)
    if key_env:
        data["api_key_env"] = key_env
    path = tmp_path / "ep-llama.yaml"
    path.write_text(yaml.safe_dump(data))
    return path
