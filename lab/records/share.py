"""`.venv/bin/python -m lab share RUN_DIR`: a measured run folder as one row in the lab's public-row format
(lab.predict.public_speed.Row, lab/data/public_speed.yaml's shape), printed as TSV and as JSON, for an owner to
publish, or to give back to `.venv/bin/python -m lab predict --rows-dataset FILE` so the lab's fit learns their card.

What the row holds, each from the run folder's own files (never recomputed): the card (manifest `gpus`, resolved
in the GPU table), the driver and the llama.cpp build (manifest), the set-up (the profile copy the run used:
quant, context, KV type, split, slots), the depth, tok/s with its spread and raw samples (records/06_benchmark.json
`llama_bench`, the tg test: llama-bench's mean, sd and samples), the flags it ran with (that command, paths
reduced to file names), with `--mtp N` the draft-mtp arm at n-max N and its acceptance (records/06_speculative.json
summary.mtp_steps), and the run's sha256 (manifest.json and every records/*.json, by name, hashed together).
Left out: the host name, user and home paths (every path becomes its file name), API keys and the --host/--port
the server listened on. The row is validated by the lab's own schema before it is printed (an unpublished run's
source is `lab-run:<run id>`; replace it with your URL when you publish).

Exit status: 0 a row was printed; 1 the folder has no row to give (no decode measurement, another model, an
unknown card), said on one line; 2 bad usage.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

import yaml

from lab.core import cli, exit_codes, run_folder
from lab.predict import public_speed, roofline

MODELS = {"config:qwen3.8-27b": "Qwen3.8-27B"}  # the public rows' model (lab/data/public_speed.yaml)
DROPPED_FLAGS = ("--host", "--port", "--api-key", "--api-key-file", "--ssl-key-file", "--ssl-cert-file")
TSV_COLUMNS = ("id", "model", "gpu", "gpu_id", "gpu_count", "engine", "backend", "os", "build", "driver", "quant",
               "file_gb", "context_tokens", "depth_tokens", "kv_type", "split_mode", "speculative", "decode_tok_s",
               "decode_tok_s_sd", "samples", "flags", "method", "notes", "source", "run_sha256", "quote", "read",
               "measured")
EXAMPLES = (".venv/bin/python -m lab share outputs/h200-x1/20261201T225010Z_ca156936",
            ".venv/bin/python -m lab share outputs/h200-x1/20261201T225010Z_ca156936 --json > mine.json",
            ".venv/bin/python -m lab share outputs/h200-x1/20261201T225010Z_ca156936 --mtp 2 --json",
            ".venv/bin/python -m lab predict --gpu H200 --rows-dataset mine.json")


class NothingToShare(ValueError):
    """The run folder holds no measurement the public-row format can carry."""


def run_sha256(run_dir: Path) -> str:
    """One digest of what the run measured and wrote: manifest.json and every records/*.json, each as its name and
    bytes, in name order."""
    h = hashlib.sha256()
    files = [run_dir / "manifest.json"] + sorted((run_dir / "records").glob("*.json"))
    for f in files:
        if f.is_file():
            h.update(f.relative_to(run_dir).as_posix().encode() + b"\0" + run_folder.read_capped(f) + b"\0")
    return h.hexdigest()


def clean_flags(argv: list) -> list[str]:
    """A command's arguments without the program, with every path reduced to its file name and the listening
    address and secrets dropped (DROPPED_FLAGS and their values)."""
    out, skip = [], False
    for word in [str(w) for w in argv[1:]]:
        if skip:
            skip = False
            continue
        if word.split("=", 1)[0] in DROPPED_FLAGS:
            skip = "=" not in word
            continue
        out.append(Path(word).name if "/" in word or "\\" in word else word)
    return out


def _profile(run_dir: Path) -> dict:
    copies = sorted(run_dir.glob("profile-*.yaml"))
    if not copies:
        raise NothingToShare(f"{run_dir}: no profile-*.yaml (the profile copy every lab run keeps): not a run folder")
    data = yaml.safe_load(run_folder.read_capped(copies[0]).decode("utf-8"))
    if not isinstance(data, dict):
        raise NothingToShare(f"{copies[0]}: not a profile")
    return data


def _tg_row(records: dict) -> tuple[dict, dict]:
    bench = (records.get("06_benchmark") or {}).get("llama_bench") or {}
    rows = [r for r in bench.get("rows") or [] if isinstance(r, dict) and r.get("n_gen") and not r.get("n_prompt")]
    if not rows or not rows[0].get("avg_ts"):
        raise NothingToShare("no decode measurement: records/06_benchmark.json has no llama-bench tg row (run "
                             "notebook 06 in measure mode on the card)")
    return rows[0], bench


def _backend(tg: dict) -> str | None:
    text = str(tg.get("backends") or "").lower()
    return next((b for b, words in (("cuda", ("cuda",)), ("rocm", ("rocm", "hip")), ("vulkan", ("vulkan",)),
                                    ("metal", ("metal",)), ("sycl", ("sycl",))) if any(w in text for w in words)), None)


def _mtp_arm(records: dict, n_max: int) -> tuple[dict, float, str]:
    spec = ((records.get("06_speculative") or {}).get("summary") or {})
    steps = [s for s in spec.get("mtp_steps") or [] if isinstance(s, dict) and s.get("n_max") == n_max]
    if not steps or not steps[0].get("decode_tok_s"):
        have = sorted(s.get("n_max") for s in spec.get("mtp_steps") or [] if isinstance(s, dict))
        raise NothingToShare(f"no draft-mtp arm at n-max {n_max} in records/06_speculative.json (measured: "
                             f"{', '.join(map(str, have)) or 'none'})")
    step = steps[0]
    rate = step.get("acceptance_rate")
    accepted = "unknown" if rate is None else f"{rate:.2f}"
    return {"type": "draft-mtp", "n_max": n_max, "acceptance": accepted}, float(step["decode_tok_s"]), (
        f"records/06_speculative.json summary.mtp_steps n_max {n_max}: decode_tok_s {step['decode_tok_s']:.2f}, "
        f"acceptance_rate {accepted}")


def share_row(run_dir: str | Path, mtp: int | None = None) -> dict:
    """The run folder's row (public-row format, validated by lab.predict.public_speed); NothingToShare says why not."""
    run = Path(run_dir)
    manifest, wrong = run_folder.read_manifest(run)
    if not manifest:
        raise NothingToShare(f"{run}: no readable manifest.json ({wrong or 'absent'}): not a lab run folder")
    profile = _profile(run)
    model = MODELS.get(str(profile.get("model_architecture")))
    if model is None:
        raise NothingToShare(f"the run's model is {profile.get('model_architecture')!r}; the public rows are of "
                             f"{', '.join(MODELS.values())} (lab/data/public_speed.yaml)")
    records = run_folder.read_records(run, manifest.get("records"))
    tg, bench = _tg_row(records)
    gpus = [g for g in manifest.get("gpus") or [] if isinstance(g, dict)]
    name = (gpus[0].get("name") if gpus else None) or str(tg.get("gpu_info") or "")
    spec = roofline.gpu_spec_for(name)
    build = manifest.get("llama_cpp_build") or {}
    files = [f for f in manifest.get("model_files") or [] if isinstance(f, dict) and f.get("bytes")]
    synthetic = bool(profile.get("model_synthetic") or (files and files[0].get("synthetic")))
    depth = int(tg.get("n_depth") or 0) + int(tg["n_gen"]) // 2
    row = {
        "id": re.sub(r"[^a-z0-9-]+", "-", f"{profile.get('name', 'run')}-{manifest.get('run_id', run.name)}".lower()),
        "model": model, "gpu": name, "gpu_id": spec["id"] if spec else None,
        "gpu_count": int(profile.get("gpu_count") or len(gpus) or 1),
        "engine": "llama.cpp" if str(profile.get("engine")).startswith("llama") else "vLLM", "backend": _backend(tg),
        "os": "windows" if "windows" in str((manifest.get("host") or {}).get("os", "")).lower() else "linux",
        "build": f"llama-cpp-python {build.get('llama_cpp_python')} ({build.get('key')})" if build else None,
        "driver": (f"{manifest.get('driver')} (CUDA {manifest.get('cuda_driver')})" if manifest.get("driver") else None),
        "quant": f"{profile.get('model_quant')}" + (" (synthetic random weights)" if synthetic else ""),
        "file_gb": round(files[0]["bytes"] / 1e9, 3) if files else None,
        "file_gb_basis": f"the run's model file, {files[0]['bytes']:,} B (manifest model_files)" if files else None,
        "context_tokens": profile.get("context_tokens"), "depth_tokens": depth,
        "kv_type": str(tg.get("type_k") or profile.get("kv_cache_dtype")),
        "split_mode": (profile.get("split_mode") or "layer") if int(profile.get("gpu_count") or 1) > 1 else "none",
        "speculative": None, "decode_tok_s": round(float(tg["avg_ts"]), 3),
        "decode_tok_s_sd": round(float(tg.get("stddev_ts") or 0), 3),
        "samples": [round(float(x), 3) for x in tg.get("samples_ts") or []],
        "flags": clean_flags(bench.get("command") or []),
        "method": f"llama-bench tg{tg['n_gen']} at depth {tg.get('n_depth', 0)}, {len(tg.get('samples_ts') or [])} "
                  "repetitions, mean and sd (records/06_benchmark.json llama_bench, notebook 06)",
        "notes": ("synthetic random-weight stand-in of the model's shape: decode speed is the real model's, any draft "
                  "acceptance is not" if synthetic else None),
        "source": f"{public_speed.UNPUBLISHED}{manifest.get('run_id', run.name)}", "run_sha256": run_sha256(run),
        "quote": (f"records/06_benchmark.json llama_bench: tg{tg['n_gen']} @ d{tg.get('n_depth', 0)} avg_ts "
                  f"{float(tg['avg_ts']):.3f} stddev_ts {float(tg.get('stddev_ts') or 0):.3f}"),
        "read": str(manifest.get("started_utc") or "")[:10] or None, "measured": True}
    if mtp is not None:
        row["speculative"], row["decode_tok_s"], row["quote"] = _mtp_arm(records, mtp)
        row.update(id=f"{row['id']}-mtp-n{mtp}", decode_tok_s_sd=None, samples=None, depth_tokens=None,
                   decode_tok_s=round(row["decode_tok_s"], 3),
                   flags=clean_flags((records.get("04_serve") or {}).get("command", {}).get("argv") or []),
                   method=f"llama-server draft-mtp n-max {mtp}, one stream (records/06_speculative.json, notebook 06)")
    if row["gpu_id"] is None:
        raise NothingToShare(f"card {name!r} is not in the lab's GPU table (lab/data/calibration.yaml gpus): add it "
                             "there with its datasheet bandwidth and source")
    row = {k: v for k, v in row.items() if v is not None or k == "speculative"}
    public_speed.validate_rows([row], f"{run} (lab share)", unpublished_ok=True)
    return row


def tsv(row: dict) -> str:
    """Header and the row, tab-separated; lists as space-separated words, the speculative mapping as JSON (the
    format lab.predict.user_rows reads)."""
    def cell(v):
        if isinstance(v, list):
            return " ".join(str(x) for x in v)
        if isinstance(v, dict):
            return json.dumps(v, separators=(",", ":"))
        if isinstance(v, bool):
            return "true" if v else "false"
        return "" if v is None else str(v).replace("\t", " ").replace("\n", " ")
    cols = [c for c in TSV_COLUMNS if c in row] + [c for c in row if c not in TSV_COLUMNS]
    return "\t".join(cols) + "\n" + "\t".join(cell(row[c]) for c in cols)


def build_parser() -> argparse.ArgumentParser:
    ap = cli.parser(".venv/bin/python -m lab share", __doc__.split("\n\n")[0].replace("\n", " "), *EXAMPLES)
    ap.add_argument("run_dir", metavar="RUN_DIR", help="a run folder: outputs/<profile>/<UTC>_<sha>")
    ap.add_argument("--mtp", type=int, metavar="N", help="the draft-mtp arm at n-max N (records/06_speculative.json) "
                                                          "instead of plain decode")
    ap.add_argument("--json", action="store_true", help="the JSON row only (what --rows-dataset reads)")
    ap.add_argument("--tsv", action="store_true", help="the TSV header and row only")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        row = share_row(args.run_dir, args.mtp)
    except (NothingToShare, public_speed.PublicSpeedError, run_folder.UnreadableJson, OSError,
            UnicodeError, yaml.YAMLError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return exit_codes.PROBLEM
    as_json = json.dumps(row, indent=1, ensure_ascii=False)
    if args.json:
        print(as_json)
    elif args.tsv:
        print(tsv(row))
    else:
        print(tsv(row) + "\n\n" + as_json)
    return exit_codes.OK


if __name__ == "__main__":
    sys.exit(main())
