"""`make lab` as a user starts it: JupyterLab answers on loopback, lists the lab's kernel, refuses a request
without its token, and stops cleanly (no process left behind)."""
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from conftest import ROOT, wait_for
from lab.core.ports import free_port
from lab.setup import jupyter

pytestmark = pytest.mark.tools


def _get(url: str, token: str | None = None, method: str = "GET"):
    req = urllib.request.Request(url, method=method, headers={"Authorization": f"token {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def test_make_lab_serves_the_kernel_behind_a_token_and_stops_cleanly(tmp_path):
    port = free_port()
    log = tmp_path / "lab.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(["make", "-s", "lab", f"LAB_PORT={port}"], cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        token, deadline = None, time.monotonic() + 240
        while token is None and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-3000:]
            # the printed URL opens on notebooks/ (the Makefile's --LabApp.default_url)
            m = re.search(rf"http://127\.0\.0\.1:{port}/lab(?:/tree/notebooks)?\?token=([0-9a-f]+)", log.read_text())
            token = m.group(1) if m else None
            time.sleep(0.5)
        assert token, "JupyterLab printed no token URL:\n" + log.read_text()[-3000:]
        base = f"http://127.0.0.1:{port}"

        status, body = _get(f"{base}/api/status", token)
        assert status == 200 and "started" in json.loads(body)

        status, body = _get(f"{base}/api/kernelspecs", token)
        specs = json.loads(body)["kernelspecs"]
        # the lab's kernel alone, and the default (the stock "Python 3 (ipykernel)" was offered beside it)
        assert status == 200 and list(specs) == [jupyter.KERNEL_NAME]
        assert json.loads(body)["default"] == jupyter.KERNEL_NAME
        assert specs[jupyter.KERNEL_NAME]["spec"]["display_name"] == jupyter.KERNEL_DISPLAY_NAME
        # it opens on notebooks/
        opener = urllib.request.build_opener(type("NoRedirect", (urllib.request.HTTPRedirectHandler,),
                                                  {"redirect_request": lambda *a, **k: None}))
        try:
            opener.open(urllib.request.Request(f"{base}/", headers={"Authorization": f"token {token}"}), timeout=30)
            where = None
        except urllib.error.HTTPError as exc:
            where = exc.headers.get("Location")
        assert where and where.rstrip("?").endswith("/lab/tree/notebooks"), where

        # the file browser reaches the notebooks and the run folders (executed notebooks, report.html)
        status, body = _get(f"{base}/api/contents", token)
        names = {item["name"] for item in json.loads(body)["content"]}
        assert status == 200 and {"notebooks", "outputs"} <= names, names

        for path in ("/api/status", "/api/kernelspecs", "/api/contents"):
            status, _ = _get(base + path)
            assert status in (401, 403), f"{path} without the token answered {status}"

        status, _ = _get(f"{base}/api/shutdown", token, method="POST")
        assert status in (200, 202, 204)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
        assert wait_for(lambda: not _alive(proc.pid), timeout_s=60), "a process of `make lab` is still running after shutdown"
    finally:
        if proc.poll() is None or _alive(proc.pid):
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
