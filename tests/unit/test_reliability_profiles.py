"""Bad profiles, as a hostile but fair user writes them: every one is refused by `lab validate`, `lab plan`
and `lab run` alike with exit 1, a message naming the file and the field (or what the file is), and never
a traceback. Figures: kinds tried / kinds handled."""
import os
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, cli_output, record_figure

from lab.core import profiles


BASE = yaml.safe_load((ROOT / "params" / "cpu-default.yaml").read_text())
GPU2 = yaml.safe_load((ROOT / "params" / "v100-32g-x2-nvlink.yaml").read_text())


def dump(base=BASE, drop=(), **changes) -> str:
    data = {k: v for k, v in {**base, **changes}.items() if k not in drop}
    return yaml.safe_dump(data, sort_keys=False)


TEXT = dump()
# (kind, file content (str/bytes) or a callable(tmp_path) -> path, what the message must name)
CASES = [
    ("misspelt key", TEXT + "threds: 2\n", "threds"),
    ("wrong type", dump(threads="two"), "threads"),
    ("bool for an int", dump(threads=True), "threads"),
    ("float for an int", dump(threads=2.5), "threads"),
    ("string for an int", dump(port="8080"), "port"),
    ("negative number", dump(context_tokens=-1), "context_tokens"),
    ("zero", dump(bench_requests=0), "bench_requests"),
    ("huge benchmark prompt", dump(bench_prompt_tokens=10**9), "bench_prompt_tokens"),
    ("huge concurrency level", dump(bench_concurrency=[1, 100000]), "bench_concurrency"),
    ("too many concurrency levels", dump(bench_concurrency=list(range(1, 100))), "bench_concurrency"),
    ("nested value where a number goes", dump(bench_concurrency=[{"a": 1}]), "bench_concurrency"),
    ("port 0", dump(port=0), "port"),
    ("port 70000", dump(port=70000), "port"),
    ("tensor parallel > GPU count", dump(GPU2, tensor_parallel_size=4), "tensor_parallel_size"),
    ("unknown engine", dump(engine="tensorrt"), "engine"),
    ("unknown KV type", dump(kv_cache_dtype="q3_k"), "kv_cache_dtype"),
    ("unknown quant type", dump(model_quant="Q9_K"), "model_quant"),
    ("invalid regex", dump(GPU2, gpu_name_pattern="(["), "gpu_name_pattern"),
    ("missing required field", dump(drop=("engine",)), "engine"),
    ("0.0.0.0 without a key variable", dump(host="0.0.0.0"), "host"),
    ("host with shell text", dump(host="127.0.0.1; rm -rf ~"), "host"),
    ("empty file", "", "empty file"),
    ("YAML list", "- a\n- b\n", "found list"),
    ("YAML scalar", "just words\n", "found str"),
    ("not YAML", "name: [unclosed\n", "not valid YAML"),
    ("binary garbage", bytes(range(256)) * 4, "binary data"),
    ("invalid UTF-8", TEXT.encode() + "# caf\u00e9\n".encode("latin-1"), "not UTF-8"),
    ("duplicate key", TEXT + "threads: 1\n", "duplicate key 'threads'"),
    ("YAML anchors (a bomb)", 'a: &a ["x","x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n'
                              'c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n', "anchors"),
    ("oversized file", TEXT + "#" * 70_000 + "\n", "at most"),
    ("model_file is a device", dump(model_file="/dev/zero", model_architecture="gguf:/dev/zero"), "model_file"),
    ("model_file outside (../../etc/passwd)", dump(model_file="../../../../../../etc/passwd",
                                                  model_architecture="config:qwen3-32b"), "model_file"),
    ("model_file is a folder", dump(model_file="/tmp", model_architecture="config:qwen3-32b"), "model_file"),
    ("NaN in tensor_split (was `-ts nan/1`)", dump(GPU2, tensor_split=[float("nan"), 1]), "finite number"),
    ("infinity in tensor_split", dump(GPU2, tensor_split=[1, float("inf")]), "tensor_split"),
    ("NaN in a bounded float", dump(gpu_memory_utilization=float("nan")), "finite number"),
    ("300-character name (was 'File name too long' at run)", dump(name="a" * 300), "at most 100"),
    ("name with a slash", dump(name="x/../../y"), "names folders and files"),
    ("NUL byte in server_args (was 'embedded null byte' in 04)", dump(server_args=["-b", "5\x0012"]), "control character"),
    ("newline in model_file", dump(model_file="models/x\n--evil.gguf"), "model_file"),
    ("escape character in model_name", dump(model_name="qwen\x1b[2J"), "model_name"),
    ("profile is a folder", lambda tmp: tmp, "is a folder"),
    ("profile is a device", lambda tmp: Path("/dev/null"), "not a regular file"),
    ("profile missing", lambda tmp: tmp / "nope.yaml", "no such file"),
    ("unknown profile name", lambda tmp: "no-such-profile", "unknown profile"),
]


def _write(tmp_path: Path, i: int, content) -> Path | str:
    if callable(content):
        return content(tmp_path)
    path = tmp_path / f"case{i:02d}.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


_cli = cli_output


def test_bad_profiles_are_refused_with_a_clear_error_by_validate_plan_and_run(tmp_path):
    handled, problems = 0, []
    for i, (kind, content, needle) in enumerate(CASES):
        target = _write(tmp_path, i, content)
        ok = True
        for argv in (["validate", str(target)], ["plan", str(target)],
                     ["run", "--profile", str(target), "--out", str(tmp_path / "runs")]):
            rc, text = _cli(argv)
            named = str(target) in text if not str(target).startswith("no-such") else "no-such-profile" in text
            if rc != 1 or "Traceback" in text or needle not in text or not named or len(text) > 4000:
                ok = False
                problems.append(f"{kind} / {argv[0]}: rc {rc}: {text[:300]}")
        handled += ok
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir()), "an invalid profile made a run folder"
    record_figure("bad profiles (validate, plan, run alike)", len(CASES), handled)
    assert handled == len(CASES) >= 25, "\n".join(problems)


def test_an_anchor_bomb_costs_nothing(tmp_path):
    bomb = "a: &a [" + ",".join(["lol"] * 10) + "]\n"
    for n, prev in zip("bcdefghi", "abcdefgh"):
        bomb += f"{n}: &{n} [" + ",".join([f"*{prev}"] * 10) + "]\n"
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb)
    with pytest.raises(profiles.ProfileError, match="anchors and aliases") as info:
        profiles.load(path)
    assert len(str(info.value)) < 500


def test_a_missing_model_file_is_a_finding_on_this_machine(tmp_path):
    path = tmp_path / "missing.yaml"
    path.write_text(dump(model_file="models/not-here.gguf", model_architecture="config:qwen3-32b"))
    rc, text = _cli(["validate", str(path)])
    assert rc == 0 and "no such file on this machine" in text and str(ROOT / "models" / "not-here.gguf") in text
    prof = profiles.load(path)
    assert prof.model_file == str(ROOT / "models" / "not-here.gguf")  # one resolution: the project folder


def test_relative_model_paths_resolve_from_the_project_folder_whatever_the_working_folder(tmp_path, monkeypatch):
    from lab.core import paths
    from lab.serving import engines
    from lab.records import manifest

    real = paths.embedded_model("smollm2")
    rel = os.path.relpath(real, ROOT)
    path = tmp_path / "rel.yaml"
    path.write_text(dump(model_file=rel, model_architecture=f"gguf:{rel}"))
    for cwd in (tmp_path, ROOT / "notebooks"):
        monkeypatch.chdir(cwd)
        prof = profiles.load(path)
        cmd = engines.build_command(prof)
        assert cmd.argv[cmd.argv.index("-m") + 1] == str(real.resolve())
        assert manifest.model_files(prof)[0]["path"] == str(real.resolve())


def test_engine_python_is_named_as_code_that_runs(tmp_path):
    script = tmp_path / "not-exec.py"
    script.write_text("print('hi')\n")
    base = yaml.safe_load((ROOT / "params" / "cpu-vllm.yaml").read_text())
    for exe, said in ((str(script), "not an executable file"), (sys.executable, "use profiles you trust"),
                      (str(tmp_path / "nope"), "not on this machine")):
        path = tmp_path / "ep.yaml"
        path.write_text(dump(base, engine_python=exe))
        rc, text = _cli(["validate", str(path)])
        assert rc == 0 and said in " ".join(text.split()), text  # `lab validate` wraps its notes at 100 columns


def test_a_port_in_use_is_named_with_its_holder(tmp_path):
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        path = tmp_path / "busy.yaml"
        path.write_text(dump(port=port))
        for verb in ("validate", "plan"):
            rc, text = _cli([verb, str(path)])
            assert f"port {port} on 127.0.0.1 is already in use" in text and "Traceback" not in text, text
