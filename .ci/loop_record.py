#!/usr/bin/env python3
"""A benchmark record of the test loop (not a test: a timing is evidence, and a shared machine's load moves it):
`make test`'s wall time, pytest's own, and the seconds of each test file from pytest's JUnit XML, with the git
sha and the machine, written to outputs/loop/make-test-<UTC>.json. Standard library only.

    git clone /work/main /tmp/clone && cd /tmp/clone
    uptime; /usr/bin/time -f %e -o /tmp/wall make test ARGS=--junitxml=/tmp/junit.xml; uptime
    python3 .ci/loop_record.py /tmp/junit.xml --wall-s "$(cat /tmp/wall)" --note "fresh clone, warm cache, ..."
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
        seconds[case.get("classname", "").split(".")[-1] + ".py"] += float(case.get("time") or 0)
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    started = datetime.fromisoformat(suite.get("timestamp"))  # pytest's start time (with its offset)
    utc = started.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return {"pytest_started_utc": utc, **counts, "pytest_s": round(float(suite.get("time", 0)), 1)}, \
        {name: round(s, 1) for name, s in seconds.most_common()}


def host() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), None)
    mem_kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal:"))
    return {"cores": os.cpu_count(), "cpu": model, "ram_gib": round(mem_kib / 2**20, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("junit", type=Path, help="pytest's --junitxml file of the run")
    ap.add_argument("--wall-s", type=float, required=True, help="wall seconds of the whole `make test` (set-up included)")
    ap.add_argument("--sha", default=None, help="git sha that ran (default: this checkout's HEAD)")
    ap.add_argument("--note", default="", help="how it ran: fresh clone or not, cache, the load average seen")
    ap.add_argument("--out", type=Path, default=ROOT / "outputs" / "loop")
    args = ap.parse_args()
    sha = args.sha or subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                     text=True).stdout.strip()
    counts, files = per_file(args.junit)
    record = {"schema_version": 1, "what": "make test", "git_sha": sha, "host": host(),
              "wall_s": round(args.wall_s, 1), **counts, "note": args.note, "per_file_s": files}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"make-test-{counts['pytest_started_utc']}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(path)


if __name__ == "__main__":
    main()
