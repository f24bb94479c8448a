"""The CLI side of tests/unit/test_reliability_hostile_servers.py (issue 36): `lab doctor --log` on a log full of
terminal escapes prints none of them (item 11), and `lab validate` refuses a profile whose server_args rebind the
server or carry a key, naming the field to use and never printing the key (item 1)."""
import pytest

from conftest import ROOT, cli_output, record_figure
from shared_reliability_hostile_servers import ESCAPES, KEY


@pytest.mark.tools
def test_lab_doctor_log_prints_no_terminal_escape(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("".join(f"CUDA error: out of memory {esc} line {i}\n" for i, esc in enumerate(ESCAPES.values()))
                   + "\x1b]52;c;cm0gLXJmIH4K\x07ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device\n",
                   encoding="utf-8", newline="")
    rc, text = cli_output(["doctor", "--log", str(log)])
    bad = sorted({f"U+{ord(ch):04X}" for ch in text if ch in "\x1b\x07\x08\r" or 0x80 <= ord(ch) <= 0x9f})
    record_figure("issue 36 item 11: lab doctor --log on a log of terminal escapes, printed without them", 1, int(not bad),
                  "kept: " + ", ".join(bad) if bad else f"{len(ESCAPES) + 1} escapes in the log")
    assert rc == 1 and "seen:" in text and not bad, (rc, bad, text[:2000])


@pytest.mark.tools
def test_lab_validate_refuses_server_args_that_rebind_or_carry_a_key(tmp_path):
    base = (ROOT / "params" / "cpu-default.yaml").read_text().replace("name: cpu-default", "name: {name}")
    cases = {"rebind": ('["--host", "0.0.0.0"]', "`host:`"), "key": (f'["--api-key", "{KEY}"]', "`api_key_env:`"),
             "key, =": (f'["--api_key={KEY}"]', "`api_key_env:`"), "port": ('["-b", "512", "--port", "80"]', "`port:`")}
    handled = 0
    for i, (case, (args, field)) in enumerate(cases.items()):
        path = tmp_path / f"p{i}.yaml"
        path.write_text(base.format(name=f"p{i}") + f"\nserver_args: {args}\n")
        rc, text = cli_output(["validate", str(path)])
        handled += rc == 1 and field in text and KEY not in text and "Traceback" not in text
    record_figure("issue 36 item 1: lab validate on server_args that rebind or carry a key", len(cases), handled)
    assert handled == len(cases)
