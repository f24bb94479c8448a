"""The GPU smoke's one verdict line on a run folder: `SMOKE PASS` (exit 0) or `SMOKE FAIL: <what>` (exit 1).

One judge for both engines' smokes (lab/device/run_h200.sh MODE=smoke for llama.cpp, lab/device/run_vllm.sh MODE=smoke
for vLLM), so a change to measurement, records, pages or the schema is judged the same way on either path. Standard
library only: it runs with the lent machine's bare python3, before or without the lab's venv.

    python3 -m lab.setup.smoke_verdict RUN_DIR [--rc RC] [--work WORK] [--engine llama.cpp|vllm]
                                        [--notebooks 01_hardware_checks,04_serve,06_benchmarking] [--levels 1]

PASS: the notebooks named ran ok, in measure mode (not plan), on a GPU the manifest saw; for llama.cpp the build's
cuda_arch is the GPU's compute capability; for vLLM the server found is vLLM (the version the profile declares); the
06 record's sweep is exactly the levels named with every request answered, nothing cut and each level valid; no
ValidationError in the manifest, the 06 record or the notebooks' outputs; no failed check in any record; the manifest's
status ok; the pipeline's exit 0. With --work, the pipeline's own steps (set-up, the stand-in) are judged first.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from lab.core.text import clip

LLAMA_NOTEBOOKS = ("01_hardware_checks", "04_serve", "06_benchmarking")
VLLM_NOTEBOOKS = ("04_serve", "05_kv_cache_math", "06_benchmarking")


def read_json(path: Path, what: str, fails: list[str]) -> dict | None:
    try:
        data = json.loads(path.read_text(errors="replace"))
    except (OSError, ValueError) as exc:
        fails.append(f"{what}: unreadable ({type(exc).__name__}: {clip(exc, 100)})")
        return None
    if not isinstance(data, dict):
        fails.append(f"{what}: a JSON {type(data).__name__}, not an object")
        return None
    return data


def pipeline_fails(work: Path, engine: str) -> list[str]:
    """What the pipeline's log and rc files say went wrong before `lab run` (set-up, the stand-in)."""
    fails: list[str] = []
    log = (work / "pipeline.log").read_text(errors="replace") if (work / "pipeline.log").exists() else ""
    for needle, what in (("pip install of .device/whl failed", "set-up: pip install of .device/whl failed"),
                         ("lab.setup failed", "set-up: python3 -m lab.setup failed (the llama.cpp build?)"),
                         ("vLLM parts did not all come", "set-up: vLLM's parts did not all come"),
                         ("stand-in tokenizer failed", "set-up: the stand-in's tokenizer failed")):
        if needle in log:
            return [f"{what} (pipeline.log)"]
    if engine == "llama.cpp":
        st = (work / "standin.rc").read_text().strip() if (work / "standin.rc").exists() else "missing"
        if st != "0":
            fails.append(f"stand-in: lab.model.standin rc={st} (standin.log)")
    return fails


def engine_fails(m: dict, engine: str) -> list[str]:
    gpus = m.get("gpus") or []
    cc = str((gpus[0] if gpus and isinstance(gpus[0], dict) else {}).get("compute_capability") or "").replace(".", "")
    if not cc:
        return ["manifest: no GPU seen"]
    if engine == "vllm":
        server = m.get("server") if isinstance(m.get("server"), dict) else {}
        found, declared = server.get("engine_found"), server.get("engine_version_declared")
        if found != "vllm":
            return [f"server: engine found {found!r}, not 'vllm'"]
        used = server.get("engine_version_used") or server.get("engine_version_found")
        if declared and used and not str(used).startswith(str(declared)):
            return [f"server: vLLM {used} answered, the profile declares {declared}"]
        return []
    arch = str((m.get("llama_cpp_build") or {}).get("cuda_arch") or "")
    if arch != cc:
        return [f"llama.cpp build: cuda_arch {arch or 'none (a CPU build)'}, the GPU is sm_{cc}"]
    return []


def sweep_fails(r: dict, levels: list[int] | None) -> list[str]:
    fails: list[str] = []
    skipped = (r.get("summary") or {}).get("benchmark_skipped")
    if skipped:
        fails.append(f"06 sweep: skipped ({clip(skipped, 150)})")
    sweep = r.get("sweep")
    if not isinstance(sweep, list) or not sweep:
        return fails + ["06 sweep: no level in the record"]
    seen = [lv.get("concurrency") for lv in sweep if isinstance(lv, dict)]
    if levels is not None and seen != levels:
        fails.append(f"06 sweep: levels {seen}; the smoke measures {levels} (bench_concurrency: {levels})")
    for lv in (x for x in sweep if isinstance(x, dict)):
        c = lv.get("concurrency")
        if not isinstance(lv.get("failures"), int):
            fails.append(f"06 sweep level {c}: no 'failures' count")
        elif lv["failures"]:
            fails.append(f"06 sweep level {c}: {lv['failures']} of {lv.get('requests')} requests failed "
                         f"({clip(lv.get('errors'), 150)})")
        if not lv.get("successes"):
            fails.append(f"06 sweep level {c}: no request answered")
        if lv.get("cut"):
            fails.append(f"06 sweep level {c}: cut ({clip(lv['cut'], 150)})")
        validity = lv.get("validity") or {}
        if validity.get("valid") is not True:
            why = "; ".join(map(str, validity.get("reasons") or []))
            fails.append(f"06 sweep level {c}: not valid ({clip(why, 150)})")
    return fails


def notebook_text(path: Path, what: str, fails: list[str]) -> str:
    """An executed notebook's outputs as text (tracebacks, plain and markdown), not its source or embedded scripts."""
    cells = ((read_json(path, what, fails) or {}) if path.is_file() else {}).get("cells") or []
    outs = [o for c in cells if isinstance(c, dict) for o in c.get("outputs") or [] if isinstance(o, dict)]
    return json.dumps([{k: v for k, v in o.items() if k != "data"} for o in outs]
                      + [{k: v for k, v in (o.get("data") or {}).items() if k in ("text/plain", "text/markdown")}
                         for o in outs])


def judge(run: Path | None, rc: str = "", work: Path | None = None, engine: str = "llama.cpp",
          notebooks: tuple[str, ...] | None = None, levels: list[int] | None = None) -> list[str]:
    """Every reason the smoke failed, in order; [] is a PASS."""
    notebooks = notebooks or (VLLM_NOTEBOOKS if engine == "vllm" else LLAMA_NOTEBOOKS)
    fails = pipeline_fails(work, engine) if work is not None else []
    if fails and fails[0].startswith("set-up:"):
        return fails
    if run is not None and not run.is_absolute() and work is not None:
        run = work / "repo" / run
    if run is None or not (run / "manifest.json").is_file():
        log = (work / "pipeline.log").read_text(errors="replace") if work and (work / "pipeline.log").exists() else ""
        errs = [line.strip() for line in log.splitlines() if re.search(r"(Error|error|failed)\b", line)]
        return fails + [f"lab run: no run folder with a manifest.json (rc={rc or '?'}"
                        + (f"; last error line: {clip(errs[-1], 200)}" if errs else "") + ")"]
    m = read_json(run / "manifest.json", "manifest.json", fails) or {}
    by_name = {n.get("notebook"): n for n in m.get("notebooks") or [] if isinstance(n, dict)}
    for nb in notebooks:
        n = by_name.get(nb)
        if n is None:
            fails.append(f"{nb}: not run")
        elif n.get("status") != "ok":
            fails.append(f"{nb}: {n.get('status')} ({clip(n.get('error'), 200)})")
    if m.get("mode") != "measure":
        fails.append(f"manifest: mode {m.get('mode')!r}, not 'measure' ({m.get('plan_reason')})")
    fails += engine_fails(m, engine)
    rec_path = run / "records" / "06_benchmark.json"
    r = read_json(rec_path, "06 record", fails) if rec_path.is_file() else None
    if not rec_path.is_file():
        fails.append("06 record: records/06_benchmark.json missing")
    if isinstance(r, dict):
        fails += sweep_fails(r, levels)
    texts = {"manifest.json": json.dumps(m), "06 record": json.dumps(r) if r is not None else ""}
    for nb in notebooks:
        texts[nb] = notebook_text(run / "notebooks" / f"{nb}.ipynb", f"{nb}.ipynb", fails)
    fails += [f"{what}: ValidationError" for what, text in texts.items() if "ValidationError" in text]
    failed_checks = []
    for f in sorted((run / "records").glob("*.json")):
        rec = read_json(f, f"records/{f.name}", fails)
        for chk in (rec.get("checks") or []) if isinstance(rec, dict) else []:
            if isinstance(chk, dict) and chk.get("status") == "fail":
                failed_checks.append(f"{f.stem}: {chk.get('name')}")
    if failed_checks:
        fails.append(f"{len(failed_checks)} failed check(s): " + ", ".join(failed_checks[:6]))
    if m.get("status") != "ok":
        fails.append(f"manifest: status {m.get('status')!r}" + (f" ({clip('; '.join(map(str, m['errors'])), 150)})"
                                                                if m.get("errors") else ""))
    if rc not in ("", "0") and not fails:
        fails.append(f"lab run: exit {rc}")
    return list(dict.fromkeys(fails))


def verdict_line(fails: list[str]) -> str:
    line = "SMOKE PASS" if not fails else "SMOKE FAIL: " + "; ".join(fails)
    return clip(line.replace("\n", " "), 600)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m lab.setup.smoke_verdict", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", nargs="?", default="", help="the run folder ('' when the pipeline made none)")
    ap.add_argument("--rc", default="", help="the pipeline's exit status")
    ap.add_argument("--work", default="", help="the device script's WORK folder (pipeline.log, standin.rc)")
    ap.add_argument("--engine", choices=("llama.cpp", "vllm"), default="llama.cpp")
    ap.add_argument("--notebooks", default="", help="comma-separated notebook names (default: the engine's smoke set)")
    ap.add_argument("--levels", default="", help="the 06 sweep's levels exactly, e.g. 1 (default: any)")
    a = ap.parse_args(argv)
    try:
        levels = [int(x) for x in a.levels.split(",") if x.strip()] or None
    except ValueError:
        print(f"SMOKE FAIL: --levels {a.levels!r}: whole numbers separated by commas, e.g. 1,8,16")
        return 1
    notebooks = tuple(x.strip() for x in a.notebooks.split(",") if x.strip()) or None
    fails = judge(Path(a.run_dir) if a.run_dir else None, a.rc, Path(a.work) if a.work else None, a.engine,
                  notebooks, levels)
    print(verdict_line(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
