#!/usr/bin/env python3
"""A benchmark record of the feedback loop (not a test: a timing is evidence, and a shared machine's load moves it),
with the git sha and the machine, written to outputs/loop/. Standard library only.

`make test`: its wall time, pytest's own, and the seconds of each test file from pytest's JUnit XML
(make-test-<UTC>.json):

    git clone /work/main /tmp/clone && cd /tmp/clone
    uptime; /usr/bin/time -f %e -o /tmp/wall make test ARGS=--junitxml=/tmp/junit.xml; uptime
    python3 .ci/loop_record.py /tmp/junit.xml --wall-s "$(cat /tmp/wall)" --note "fresh clone, warm cache, ..."

`make run`: its wall time and each notebook's seconds from the run's manifest (make-run-<UTC>.json):

    /usr/bin/time -f %e -o /tmp/wall make run; python3 .ci/loop_record.py outputs/cpu-default/<run> --wall-s ...
"""
import argparse
import json
import os
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def per_file(junit: Path) -> tuple[dict, dict]:
    """(counts and pytest's seconds, {test file: seconds}) from a JUnit XML written by pytest."""
    root = ET.parse(junit).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    seconds: Counter = Counter()
    for case in suite.iter("testcase"):
        seconds[case.get("classname", "").split(".")[-1] + ".py"] += float(case.get("time") or 0)  # unique names: tests/unit/test_tiers.py
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    started = datetime.fromisoformat(suite.get("timestamp"))  # pytest's start time (with its offset)
    utc = started.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return {"pytest_started_utc": utc, **counts, "pytest_s": round(float(suite.get("time", 0)), 1)}, \
        {name: round(s, 1) for name, s in seconds.most_common()}


def per_notebook(run_dir: Path) -> tuple[dict, dict]:
    """(the run's id, status and start, {notebook: seconds}) from a `lab run` folder's manifest.json."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    books = {nb["notebook"]: nb["duration_s"] for nb in manifest["notebooks"]}
    statuses = Counter(nb["status"] for nb in manifest["notebooks"])
    started = datetime.fromisoformat(manifest["started_utc"].replace("Z", "+00:00"))
    return {"run_started_utc": started.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ"),
            "run_id": manifest["run_id"], "profile": manifest["profile"]["name"], "status": manifest["status"],
            "notebooks": dict(statuses), "notebooks_s": round(sum(books.values()), 1),
            "run_git_sha": (manifest.get("git") or {}).get("sha")}, books


def host() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), None)
    mem_kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal:"))
    return {"cores": os.cpu_count(), "cpu": model, "ram_gib": round(mem_kib / 2**20, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", type=Path, help="pytest's --junitxml file (make test) or a `lab run` folder (make run)")
    ap.add_argument("--wall-s", type=float, required=True, help="wall seconds of the whole make command (set-up included)")
    ap.add_argument("--sha", default=None, help="git sha that ran (default: this checkout's HEAD)")
    ap.add_argument("--note", default="", help="how it ran: fresh clone or not, cache, the load average seen")
    ap.add_argument("--what", default=None, help="the command measured, for a JUnit XML: `make test` (default) or "
                    "`make test-quick` (the file is then make-test-quick-<UTC>.json)")
    ap.add_argument("--out", type=Path, default=ROOT / "outputs" / "loop")
    args = ap.parse_args()
    sha = args.sha or subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                     text=True).stdout.strip()
    if args.source.is_dir():
        what, (counts, parts), parts_key, started = "make run", per_notebook(args.source), "per_notebook_s", "run_started_utc"
    else:
        what, (counts, parts), parts_key, started = args.what or "make test", per_file(args.source), "per_file_s", \
            "pytest_started_utc"
    record = {"schema_version": 1, "what": what, "git_sha": sha, "host": host(), "wall_s": round(args.wall_s, 1),
              **counts, "note": args.note, parts_key: parts}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{what.replace(' ', '-')}-{counts[started]}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(path)


if __name__ == "__main__":
    main()
