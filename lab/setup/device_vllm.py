"""vLLM for a lent GPU machine that has no internet: the PyPI wheel, stripped of what a Hopper card never loads,
and the packages the GPU image lacks, cut into parts the device tool carries (≤ 64 MiB a call with the tree).

    python3 -m lab.setup.device_vllm pack        here: fills .device-vllm/<i>/ (git-ignored), prints the carry plan
    python3 -m lab.setup.device_vllm install .device-vllm --store DIR --site DIR --bin DIR
                                                 there, every call: keeps this call's parts in DIR; once all have
                                                 come (sha256 checked) installs them into --site with the image's
                                                 python3 and writes --bin/python and --bin/vllm (the profile's
                                                 engine_python) - lab/device/run_vllm.sh does this

Why these choices (vllm 0.25.0, read 2026-12-07):
- vllm 0.25.0 requires torch==2.11.0 and links libcudart.so.13: the GPU image's torch 2.11.0+cu130 as it is, so
  vLLM goes into its own --target folder beside it and nothing of the image moves.
- Left out of the wheel (237.6 MiB → ≈ 106 MiB): vllm_flash_attn/_vllm_fa2_C (FlashAttention 2, used below sm_90;
  Hopper takes _vllm_fa3_C), _moe_C_stable_libtorch (mixture-of-experts kernels: vllm/platforms/cuda.py imports it
  under contextlib.suppress(ImportError); Qwen3.8-27B is dense), vllm-rs (the Rust front end, only with
  VLLM_RUST_FRONTEND_PATH) and deep_gemm's extension for the Pythons that are not 3.12. A V100 needs _vllm_fa2_C and
  is not served by this wheel anyway (CUDA 13 has no sm_70): see the Volta fork's profile.
- Requirements: the 2026-11-17 package list of the image (the device tool's KINDS.md) holds 28 of vLLM's 75; the
  rest that `vllm serve` imports are pinned below. Found on the lent H100 (2026-12-07), one start at a time: llguidance
  and xgrammar are imported when vllm/v1/structured_output's classes are defined (type annotations through a lazy
  loader), xgrammar 0.2.9 needs apache-tvm-ffi >= 0.1.11 (flashinfer's own pin, 0.1.9, fails with "load_lib_module()
  got an unexpected keyword argument 'extra_lib_paths'"), and the sampler's FlashInfer check imports flashinfer at
  start-up (vllm/v1/sample/ops/topk_topp_sampler.py). Left out as imported lazily or for other platforms/features:
  flashinfer-cubin (FlashInfer JIT-compiles what it needs: run_vllm.sh turns its sampler off and the profile picks
  the Triton Gated DeltaNet prefill), cudnn-frontend, fastsafetensors, torchcodec, PyNvVideoCodec, tilelang,
  cutlass-dsl, quack, tokenspeed-mla, humming-kernels, opentelemetry's sdk/exporters (tracing off).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

from lab.setup.device_prep import cut_into_parts, download_wheels, join_parts

VLLM_VERSION = "0.25.0"
VLLM_WHEEL = f"vllm-{VLLM_VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl"
# what `vllm serve` imports that the image lacks, at the versions PyPI served on 2026-12-07
VLLM_DEVICE_WHEELS = (
    "annotated_types==0.8.0", "anthropic==2.17.0", "apache_tvm_ffi==0.1.15.post2", "astor==0.8.1", "blake3==1.0.11",
    "cachetools==8.0.3", "cbor2==6.3.0", "compressed_tensors==0.17.0", "depyf==0.20.0", "dill==0.4.1",
    "diskcache==5.6.3", "distro==1.9.0", "dnspython==2.9.2", "docstring_parser==0.18.0", "email_validator==2.4.0",
    "fastapi==0.136.3", "flashinfer_python==0.6.13", "httpcore2==2.17.0", "httptools==0.9.0", "httpx2==2.17.0", "ijson==3.6.0",
    "importlib_metadata==10.2.0", "interegular==0.3.3", "jiter==0.19.0", "jmespath==1.1.0", "jsonschema==4.26.0",
    "jsonschema_specifications==2025.9.1", "lark==1.2.2", "llguidance==1.7.6", "lm_format_enforcer==0.11.3", "loguru==0.8.0",
    "mcp==2.3.0", "mcp_types==2.3.0", "mistral_common==1.13.1", "model_hosting_container_standards==0.1.16",
    "msgspec==0.23.0", "nvtx==0.2.15", "openai==3.63.0", "openai_harmony==0.0.8", "opentelemetry_api==1.45.3",
    "outlines_core==0.2.14", "partial_json_parser==0.2.1.1.post7", "prometheus_fastapi_instrumentator==8.1.0",
    "pybase64==1.5.1", "pycountry==26.2.16", "pydantic==2.14.4", "pydantic_core==2.50.5",
    "pydantic_extra_types==2.11.1", "pyjwt==2.15.1", "python_json_logger==4.2.0", "python_multipart==0.0.34",
    "pyzmq==27.3.0", "referencing==0.37.0", "rpds_py==2026.9.1", "setproctitle==1.3.8", "sniffio==1.3.1",
    "sse_starlette==3.7.1", "starlette==1.10.0", "supervisor==4.3.0", "truststore==0.10.5",
    "typing_inspection==0.4.5", "uvicorn==0.55.0", "watchfiles==1.3.0", "xgrammar==0.2.9",
)
# paths inside the vllm wheel that a Hopper card never loads (see the module docstring)
DROP = ("vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "vllm/_moe_C_stable_libtorch.abi3.so", "vllm/vllm-rs")
KEEP_PY = "cpython-312"  # deep_gemm ships one extension per Python; the image's is 3.12
# 1st call: the tree (≈ 5 MiB with outputs/ left untracked, ≈ 32 MiB without) + .device (≈ 25 MiB) + one part;
# later calls: two parts each
PART_BYTES = 27 << 20
MANIFEST = "VLLM.json"


def dropped(name: str) -> bool:
    if name.startswith(DROP):
        return True
    return "/deep_gemm/_C.cpython-" in name and KEEP_PY not in name


def strip_wheel(src: Path, dst: Path) -> dict:
    """Copy the vllm wheel without the DROP files; RECORD keeps only what is left (pip checks what it lists)."""
    kept = left = 0
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        names = {i.filename for i in zin.infolist() if not dropped(i.filename)}
        for info in zin.infolist():
            if info.filename not in names:
                left += info.file_size
                continue
            data = zin.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                rows = [r for r in data.decode().splitlines() if r.split(",", 1)[0] in names or r.endswith("RECORD,,")]
                data = ("\n".join(rows) + "\n").encode()
            zout.writestr(info, data, compress_type=zipfile.ZIP_STORED if info.compress_type == 0 else zipfile.ZIP_DEFLATED)
            kept += 1
    return {"files": kept, "bytes_left_out_unpacked": left, "bytes": dst.stat().st_size}


def pack(out: Path, cache: Path, part_bytes: int = PART_BYTES) -> dict:
    """Download (cached), strip, bundle into one tar and cut it into parts under out/<i>/; the manifest goes with
    part 0. Returns the manifest."""
    store = cache / "device-vllm"
    store.mkdir(parents=True, exist_ok=True)
    wheel = store / VLLM_WHEEL
    if not wheel.exists():
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
               "3.12", "--platform", "manylinux_2_28_x86_64", "-d", str(store), f"vllm=={VLLM_VERSION}"]
        if subprocess.run(cmd).returncode != 0 or not wheel.exists():
            sys.exit(f"[device_vllm] pip download vllm=={VLLM_VERSION} failed (PyPI reachable?)")
    stripped = store / VLLM_WHEEL.replace(".whl", ".stripped.whl")
    if not stripped.exists() or stripped.stat().st_mtime < wheel.stat().st_mtime:
        tmp = stripped.with_suffix(".partial")
        stats = strip_wheel(wheel, tmp)
        tmp.replace(stripped)
        print(f"[device_vllm] {VLLM_WHEEL}: {wheel.stat().st_size / 2**20:.1f} → {stats['bytes'] / 2**20:.1f} MiB "
              f"({stats['bytes_left_out_unpacked'] / 2**20:.0f} MiB unpacked left out)", flush=True)
    deps = download_wheels(store / "whl", cache, VLLM_DEVICE_WHEELS)
    bundle = store / f"vllm-{VLLM_VERSION}-device.tar"
    with tarfile.open(bundle, "w") as tar:  # wheels are zips already: a second compression gains ≈ nothing
        tar.add(stripped, arcname=f"whl/{VLLM_WHEEL}")
        for d in deps:
            tar.add(d, arcname=f"whl/{d.name}")
    return cut_into_parts(bundle, out, part_bytes, MANIFEST, vllm=VLLM_VERSION,
                          wheels=[VLLM_WHEEL, *(d.name for d in deps)],
                          made_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def carry_plan(n_parts: int) -> list[list[str]]:
    """Which folders each device call carries: .device with part 0, then two parts a call."""
    calls = [[".device", ".device-vllm/0"]]
    rest = [f".device-vllm/{i}" for i in range(1, n_parts)]
    calls += [rest[i:i + 2] for i in range(0, len(rest), 2)]
    return calls


WRAPPER = """#!/usr/bin/env bash
# written by lab.setup.device_vllm: the image's python3 (torch 2.11.0+cu130) with vLLM {version} from {site}
export PYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}"
exec {python} {tail}"$@"
"""


def install(parts_dir: Path, store: Path, site: Path, bin_dir: Path, python: str = "python3") -> str:
    """On the device, every call: keep this call's parts in `store`; when all are there, join (sha256), install
    into `site` (--no-deps --no-index: nothing of the image moves) and write bin_dir/python and bin_dir/vllm."""
    store.mkdir(parents=True, exist_ok=True)
    for f in parts_dir.glob("*/*"):
        shutil.copy2(f, store / f.name)
    if (bin_dir / "vllm").exists():
        return f"vLLM already installed ({bin_dir / 'vllm'})"
    mf = store / MANIFEST
    if not mf.exists():
        return "waiting for part 0 (it carries VLLM.json)"
    manifest = json.loads(mf.read_text())
    have = [p for p in manifest["parts"] if (store / p["file"]).exists()]
    if len(have) < len(manifest["parts"]):
        missing = [p["file"].rsplit("part", 1)[1] for p in manifest["parts"] if p not in have]
        return f"{len(have)} of {len(manifest['parts'])} parts here (missing part {', '.join(missing)})"
    bundle = store / manifest["file"]
    if not join_parts(store, manifest, bundle):
        return f"parts joined but the sha256 differs from {manifest['sha256'][:12]}: not installed"
    unpacked = store / "unpacked"
    shutil.rmtree(unpacked, ignore_errors=True)
    with tarfile.open(bundle) as tar:
        tar.extractall(unpacked, filter="data")
    t0 = time.monotonic()
    proc = subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                           "--no-cache-dir", "--upgrade", "--target", str(site), *map(str, sorted((unpacked / "whl").glob("*.whl")))],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return f"pip install failed: {proc.stderr[-1500:]}"
    bin_dir.mkdir(parents=True, exist_ok=True)
    py = shutil.which(python) or python
    for name, tail in (("python", ""), ("vllm", "-m vllm.entrypoints.cli.main ")):
        f = bin_dir / name
        f.write_text(WRAPPER.format(version=manifest["vllm"], site=site, python=py, tail=tail))
        f.chmod(0o755)
    return (f"vLLM {manifest['vllm']} installed into {site} in {time.monotonic() - t0:.0f} s "
            f"({len(manifest['wheels'])} wheels); engine_python {bin_dir / 'python'}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m lab.setup.device_vllm", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="here: fill .device-vllm/<i>/ with the parts")
    p.add_argument("--out", type=Path, default=None, help="default: .device-vllm in the checkout")
    p.add_argument("--cache", type=Path, default=None)
    i = sub.add_parser("install", help="there: keep this call's parts; install once all have come")
    i.add_argument("parts", type=Path)
    i.add_argument("--store", type=Path, required=True)
    i.add_argument("--site", type=Path, required=True)
    i.add_argument("--bin", type=Path, required=True)
    i.add_argument("--python", default="python3")
    args = ap.parse_args(argv)
    if args.cmd == "install":
        print(f"[device_vllm] {install(args.parts, args.store, args.site, args.bin, args.python)}", flush=True)
        return 0
    from lab.core.paths import ROOT, cache_dir

    out = args.out or ROOT / ".device-vllm"
    m = pack(out, cache_dir(args.cache).resolve())
    print(f"[device_vllm] {out}: {m['file']} ({m['bytes'] / 2**20:.1f} MiB) in {len(m['parts'])} parts of ≤ "
          f"{PART_BYTES >> 20} MiB; carry, one call each:")
    for n, carry in enumerate(carry_plan(len(m["parts"]))):
        print(f"  call {n + 1}: {json.dumps(carry)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
