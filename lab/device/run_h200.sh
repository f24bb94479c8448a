#!/usr/bin/env bash
# `lab run --profile h200-x1` on a lent GPU machine (the device tool), from this repo's own files, offline.
#
# Here, once:  python3 -m lab.setup.device_prep --models (fills the git-ignored .device/: stripped llama.cpp source
#                                                 + the wheels the GPU image lacks, ≈ 25 MiB; and
#                                                 .device-models/0..3: SmolLM2 for notebooks 03 and 05 in parts)
# There, the device tool's command, the same line every call:
#   LAB_GIT_SHA=<full sha of this checkout: git rev-parse HEAD> bash lab/device/run_h200.sh
# with carry [".device", ".device-models/0"] on the first call, [".device-models/1", ".device-models/2"] on the
# second, [".device-models/3"] on the third, nothing after (each call's parts are kept there and joined once
# all have come: the tool carries ≤ 64 MiB a call).
#
# The first call copies the tree to $WORK and starts the pipeline detached (setsid): set-up (builds llama.cpp
# for the GPU's arch with -j$(nproc)), the synthetic Qwen3.8-27B-shaped Q4_K file (lab.model.standin, while the
# build runs), then `lab run --profile $PROFILE --synth-if-missing`. Every call then waits up to $WAIT_S
# seconds, printing the pipeline's new log lines; call again right away (the machine goes back after 30 s
# idle) until it prints "PIPELINE DONE". That call packs the run folder (notebooks, records, manifest, report,
# small logs: no model, no build) into $OUT/run.tar.xz (in 15 MiB parts if larger), with $OUT/pipeline.log and
# $OUT/status.txt.
#
# Before the suite, `lab tune` measures the server-state settings (prompt cache, context checkpoints) for
# PRETUNE_S seconds (default 200; 0 = skip) and the suite runs with the winner applied to the profile (the
# copy there; the run folder's profile copy and 00_pretune/ say what was measured).
# MODE=isolate (carry [".device"] alone; no suite): instead of `lab run`, the served ÷ in-process gap one lever at a
# time — llama-batched-bench at 1/8/16 sequences with 512- and 32-token prompts (the yardstick), then
# `lab tune --levels 1,8,16 --repetitions 3` over the sampling body, -fa on, -np 8, -lv 3, -c ÷ 4 and 32-token
# prompts against the profile (ISO_BUDGET_S, default 950 s), then draft-mtp n-max 1-3 at one stream (MTP_BUDGET_S,
# default 150 s; 0 = skip) — into $WORK/isolate-run, packed like a suite run. ISO_OUTPUT: tokens per request (128).
# MODE=peers (carry [".device", ".device-peers"]; no suite; python3 -m lab.setup.device_prep --peers fills .device-peers/):
# the lab's client against llama-benchy and guidellm (PEER_TOOLS; lab.experiments.peer_clients) on the profile's llama-server with the
# stand-in, at 1, 8 and 16 streams (PEER_LEVELS), PEER_REPS repetitions (3), PEER_REQUESTS requests a level (16; at
# least 2 a stream), PEER_INPUT/PEER_OUTPUT tokens (512/128), the clients through the wire clock's proxy unless
# PEER_WIRE=0 (lab.measure.wire_clock: TTFT of every request of both runs on one clock) — into
# $WORK/peers-run/peer_clients/, packed like a suite run;
# then the busy-host check (lab.experiments.busy_host: the lab's client at 8 streams with BUSY_CORES cores kept busy,
# default 0,2,8; empty = skip) into $WORK/peers-run/busy_host/.
# MODE=smoke (carry [".device"] alone; kind nvidia-h200): the GPU smoke a change to measurement, records, pages or the
# schema runs before it is called done (README "Contributing"). Set-up (the same llama.cpp build for the GPU's arch, from
# the cache when there) and the stand-in as above, no pre-tune, no SmolLM2 (01, 04 and 06 do not use it), then
# `lab run --profile $PROFILE --synth-if-missing
# --only 01,04,06` on the copy's profile with bench_concurrency: [1] (notebook 06 always measures level 1, so its sweep
# is that one level) and tune_budget_s: 1 (lab tune and speculative decoding measure their baselines only); LAB_RUN_ARGS
# is not used. Target: one call, ≤ 10 min of device time on a fresh machine (a target, not a measurement). The last line
# is `SMOKE PASS` (exit 0) or `SMOKE FAIL: <what>` (exit 1) — PASS: set-up and the stand-in ok, notebooks 01, 04 and 06
# ok, measure mode (not plan) with llama.cpp built for the GPU's compute capability, manifest status ok (0 failed
# checks, no errors), 06's sweep exactly level 1 with every request answered, nothing cut and the level valid, and no
# ValidationError in the manifest, the 06 record or the three notebooks' outputs. A call that ends first prints
# `SMOKE PENDING: ...` (exit 75): call again, the same command. $OUT gets pipeline.log, status.txt (with the verdict),
# manifest.json, 06_benchmark.json and run.tar.xz (in parts as above; past 8 files in all, packed again without the
# executed notebooks and report.html). The call after a verdict starts a fresh smoke (build and stand-in from the
# cache). Here, no GPU: `bash -n lab/device/run_h200.sh` (syntax), and
# `bash lab/device/run_h200.sh --smoke-verdict RUN_DIR` judges a run folder the same way (no set-up step to judge).
# Environment: PROFILE (default h200-x1), LAB_RUN_ARGS (more `lab run` flags, e.g. "--only 01,06"),
# WAIT_S (default 540: a call must end inside the tool's 600 s), WORK (default /root/lab-device; MODE=smoke:
# /root/lab-smoke), LAB_GIT_SHA / LAB_GIT_DIRTY (the commit, recorded in every record: the copy there has no .git).
set -uo pipefail
PROFILE=${PROFILE:-h200-x1}
if [ "${MODE:-suite}" = smoke ]; then WORK=${WORK:-/root/lab-smoke}; else WORK=${WORK:-/root/lab-device}; fi
WAIT_S=${WAIT_S:-540}
OUT=${OUT:-$WORK/out}
say() { echo "[$(date -u +%H:%M:%S)] $*"; }
# the records trust LAB_GIT_SHA only as a full sha (lab.core.evidence.git_state); a short one fell back to the copied
# tree's stale .git and recorded the wrong commit (the 2026-12-01 22:50 run says ca156936, dirty; it ran cbb58bd)
if [ -n "${LAB_GIT_SHA:-}" ] && ! [[ "$LAB_GIT_SHA" =~ ^[0-9a-f]{40}$ ]]; then
  echo "LAB_GIT_SHA must be the full 40-character sha (git rev-parse HEAD), got '$LAB_GIT_SHA'"; exit 2
fi

isolate() {  # MODE=isolate, after set-up and the stand-in (see the top)
  local synth run out_tok=${ISO_OUTPUT:-128}
  synth="$(sed -n 's/^\(wrote\|found\) \(\S*\) .*/\2/p' "$WORK/standin.log" | tail -1)"
  run="$WORK/isolate-run"; mkdir -p "$run/records" "$run/logs"
  sed "s#^model_file:.*#model_file: $synth#" "params/$PROFILE.yaml" > "$run/profile-$PROFILE-synthetic.yaml"
  say "llama-batched-bench 1/8/16 sequences, 512- and 32-token prompts, $out_tok tokens out, 3 repetitions"
  .venv/bin/python - "$run/profile-$PROFILE-synthetic.yaml" "$run" "$out_tok" <<'PY'
import json, sys
from pathlib import Path
from lab.core import profiles
from lab.experiments import tune, tune_settings
from lab.measure import llama_batched_bench as bb

prof, run, n_gen = profiles.load(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
argv = list(tune.command_for(prof, tune_settings.baseline(prof)).argv)  # the baseline server's own -fa/-t/-ngl/-ctk/-ctv
out = {}
for n_prompt in (512, 32):
    try:
        r = bb.run(argv[argv.index("-m") + 1], n_prompt=n_prompt, n_gen=n_gen, n_parallel=[1, 8, 16], reps=3,
                   flags=bb.shared_flags(argv), timeout_s=300, log=run / "logs" / f"batched_bench_pp{n_prompt}.log")
    except bb.BatchedBenchError as exc:
        print(f"batched-bench pp{n_prompt}: {exc}", flush=True)
        continue
    out[n_prompt] = r
    print(f"batched-bench pp{n_prompt} S_TG: " + ", ".join(f"B={b} {v['speed_tg']:.1f} {v['samples_speed_tg']}"
                                                        for b, v in r["by_parallel"].items()), flush=True)
(run / "records" / "batched_bench.json").write_text(json.dumps(out, indent=1, default=str))
PY
  say "lab tune, one lever at a time at 1/8/16 streams (budget ${ISO_BUDGET_S:-950} s)"
  .venv/bin/python -m lab tune --profile "$run/profile-$PROFILE-synthetic.yaml" --levels 1,8,16 --repetitions 3 \
    --output-tokens "$out_tok" --dimensions sampling,flash_attn,slots,log_level,context,prompt_length \
    --points "top_k 1,-fa on,-np 8,-lv 3,context:,32-token" --budget-s "${ISO_BUDGET_S:-950}" --run-dir "$run" \
    --record 06_tune_isolate
  if [ "${MTP_BUDGET_S:-150}" -gt 0 ]; then
    say "lab tune, draft-mtp n-max 1-3 at one stream (budget ${MTP_BUDGET_S:-150} s)"
    .venv/bin/python -m lab tune --profile "$run/profile-$PROFILE-synthetic.yaml" --levels 1 --repetitions 3 \
      --output-tokens "$out_tok" --dimensions mtp --points "n-max 1,n-max 2,n-max 3" \
      --budget-s "${MTP_BUDGET_S:-150}" --run-dir "$run" --record 06_tune_mtp
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv > "$run/gpu.csv" 2>&1
  echo "run folder: $run"
}

peers() {  # MODE=peers, after set-up and the stand-in (see the top)
  local synth run site="$WORK/peers-site"
  synth="$(sed -n 's/^\(wrote\|found\) \(\S*\) .*/\2/p' "$WORK/standin.log" | tail -1)"
  run="$WORK/peers-run"; mkdir -p "$run/records"
  sed "s#^model_file:.*#model_file: $synth#" "params/$PROFILE.yaml" > "$run/profile-$PROFILE-synthetic.yaml"
  # the clients beside the image's torch/transformers/aiohttp, in their own folder: the lab's .venv never sees them
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
    .device-peers/whl/*.whl || { say "pip install of .device-peers/whl failed"; return 1; }
  say "peer clients: $(PYTHONPATH="$site:$WORK/site" python3 -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("llama-benchy", "guidellm", "transformers", "datasets", "pyarrow", "aiohttp", "torch")))' 2>&1 | tail -1)"
  # their tokenizer: the served file's own (HF copy made from the GGUF by lab.setup.hfmodel), and the info file
  # lab.experiments.peer_clients reads (LAB_PEERS_INFO): which python runs them, with which PYTHONPATH
  PYTHONPATH="$site:$WORK/site:$PWD" python3 - "$synth" "$run/lab-peers.json" "$site:$WORK/site" <<'PY' || { say "peer tokenizer failed"; return 1; }
import importlib.metadata as md, json, sys, time
from lab.core import paths
from lab.setup import hfmodel

try:  # the served file's own tokenizer (transformers 5.24 reads qwen35 GGUFs: Qwen3_5Tokenizer, 248,320 tokens)
    tok = hfmodel.tokenizer_here(sys.argv[1], paths.cache_dir())
except Exception as exc:  # an older transformers: the vocab GGUF it was copied from (qwen2 arch, the same ids)
    from lab.model import synth_metadata as sm
    print(f"peer tokenizer from {sys.argv[1]} failed ({str(exc)[:200]}); using {sm.QWEN35_VOCAB}", flush=True)
    tok = hfmodel.tokenizer_here(sm.default_vocab_path(sm.QWEN35_VOCAB), paths.cache_dir())
info = {"python": sys.executable, "modules": True, "pythonpath": sys.argv[3], "tokenizers": {"served": tok["path"]},
        "tools": {p: md.version(p) for p in ("llama-benchy", "guidellm")},
        "installed_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
open(sys.argv[2], "w").write(json.dumps(info, indent=2))
print(f"peer tokenizer: {tok['path']}", flush=True)
PY
  say "lab client vs llama-benchy, guidellm at ${PEER_LEVELS:-1,8,16} streams, ${PEER_REPS:-3} repetitions"
  LAB_PEERS_INFO="$run/lab-peers.json" .venv/bin/python -m lab.experiments.peer_clients \
    --profile "$run/profile-$PROFILE-synthetic.yaml" --run-dir "$run" --levels "${PEER_LEVELS:-1,8,16}" \
    --requests "${PEER_REQUESTS:-16}" --input-tokens "${PEER_INPUT:-512}" --output-tokens "${PEER_OUTPUT:-128}" \
    --repetitions "${PEER_REPS:-3}" --tools "${PEER_TOOLS:-llama-benchy,guidellm}" $([ "${PEER_WIRE:-1}" = 1 ] && echo --wire)
  cp "$run/peer_clients/peer_clients.json" "$run/records/" 2>/dev/null
  # does a busy host slow the server? (guidellm's clients burned 1-1.5 cores; lab.experiments.busy_host)
  if [ -n "${BUSY_CORES-0,2,8}" ]; then
    say "busy host: lab client at 8 streams with ${BUSY_CORES-0,2,8} busy cores beside the server, 3 repetitions"
    .venv/bin/python -m lab.experiments.busy_host --profile "$run/profile-$PROFILE-synthetic.yaml" --run-dir "$run" \
      --busy "${BUSY_CORES-0,2,8}" --concurrency 8 --requests "${PEER_REQUESTS:-16}" \
      --input-tokens "${PEER_INPUT:-512}" --output-tokens "${PEER_OUTPUT:-128}" --repetitions 3
    cp "$run/busy_host/busy_host.json" "$run/records/" 2>/dev/null
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv > "$run/gpu.csv" 2>&1
  echo "run folder: $run"
}

smoke() {  # MODE=smoke, after set-up and the stand-in (see the top)
  local f="params/$PROFILE.yaml" kv key
  # the copy's profile (this tree's params/ is untouched): one benchmark level, tune and speculative at their baselines
  for kv in "bench_concurrency: [1]" "tune_budget_s: 1"; do
    key=${kv%%:*}
    if grep -q "^$key:" "$f"; then sed -i "s|^$key:.*|$kv  # MODE=smoke|" "$f"
    else [ -n "$(tail -c1 "$f")" ] && echo >> "$f"; echo "$kv  # MODE=smoke" >> "$f"; fi
  done
  say "smoke profile: $(grep -E '^(bench_concurrency|bench_requests|bench_duration_s|bench_output_tokens|tune_budget_s):' "$f" | sed 's/ *#.*//' | tr '\n' ' ')"
  .venv/bin/python -m lab run --profile "$PROFILE" --synth-if-missing --only 01,04,06
}

smoke_verdict() {  # RUN_DIR RC WORK: the one SMOKE PASS / SMOKE FAIL line; exit 0 / 1 (RC, WORK empty: the folder alone)
  # the judge is lab/setup/smoke_verdict.py (standard library only; the vLLM smoke uses the same one)
  local line rc tmp; tmp=$(mktemp)
  python3 -m lab.setup.smoke_verdict "$1" --rc "$2" ${3:+--work "$3"} --engine llama.cpp --levels 1 > "$tmp"
  rc=$?; line=$(tail -1 "$tmp"); rm -f "$tmp"
  case "$rc:$line" in  # a verdict that crashed is a FAIL too, never a silent PASS
    "0:SMOKE PASS" | "1:SMOKE FAIL: "*) ;;
    *) line="SMOKE FAIL: the smoke's own verdict (python3 exit $rc: ${line:0:200})"; rc=1 ;;
  esac
  echo "$line"; return "$rc"
}

pipeline() {  # runs detached, in $WORK/repo
  cd "$WORK/repo" || exit 1
  export PATH="/usr/local/cuda/bin:$PATH" PYTHONUNBUFFERED=1 LAB_WHEELS="$PWD/.device/whl" \
         LAB_LLAMA_SRC="$PWD/.device/llama-src.tar.xz" LAB_SYNTH_IF_MISSING=1
  say "nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1)"
  say "nvcc: $(nvcc --version 2>&1 | tail -2 | head -1); python3: $(command -v python3) $(python3 --version 2>&1); nproc $(nproc)"
  # The synthetic model needs only gguf + numpy: install the wheels for the system python3 and write it while
  # lab.setup compiles (one core against fifteen).
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
    .device/whl/*.whl || { say "pip install of .device/whl failed"; return 1; }
  PYTHONPATH="$WORK/site:$PWD" python3 -c "from lab.core import paths; from lab.setup import llama_source; llama_source.extract_vocabs(paths.cache_dir())"
  ( PYTHONPATH="$WORK/site:$PWD" python3 -m lab.model.standin --profile "$PROFILE" --no-progress > "$WORK/standin.log" 2>&1
    echo $? > "$WORK/standin.rc" ) &
  local synth_pid=$!
  python3 -m lab.setup || { say "lab.setup failed"; return 1; }
  wait "$synth_pid"; say "standin rc=$(cat "$WORK/standin.rc"): $(tail -1 "$WORK/standin.log")"
  if [ "${MODE:-suite}" = isolate ]; then isolate; return; fi
  if [ "${MODE:-suite}" = peers ]; then peers; return; fi
  if [ "${MODE:-suite}" = smoke ]; then smoke; return; fi
  local smol; smol="$(python3 -c 'from lab.core import paths; from lab.setup import models; print(paths.models_dir(paths.cache_dir()) / models.SMOLLM2_FILE)')"
  for _ in $(seq 24); do [ -e "$smol" ] && break; sleep 5; done
  say "embedded SmolLM2: $([ -e "$smol" ] && echo "there ($smol)" || echo "missing: notebook 03 fails, 05 runs without it")"
  if [ "${PRETUNE_S:-200}" -gt 0 ]; then
    local synth; synth="$(sed -n 's/^\(wrote\|found\) \(\S*\) .*/\2/p' "$WORK/standin.log" | tail -1)"
    sed "s#^model_file:.*#model_file: $synth#" "params/$PROFILE.yaml" > "$WORK/pretune-profile.yaml"
    say "pre-tune: lab tune --dimensions server_state for ${PRETUNE_S:-200} s on $synth"
    .venv/bin/python -m lab tune --profile "$WORK/pretune-profile.yaml" --dimensions server_state \
      --budget-s "${PRETUNE_S:-200}" --run-dir "$WORK/pretune" --write-profile "$WORK/tuned.yaml" \
      && sed "s#^model_file:.*#$(grep '^model_file:' "params/$PROFILE.yaml")#" "$WORK/tuned.yaml" > "params/$PROFILE.yaml"
    say "profile for the suite: $(grep -E '^(server_args|threads|parallel_slots):' "params/$PROFILE.yaml" | tr '\n' ' ')"
  fi
  # shellcheck disable=SC2086
  .venv/bin/python -m lab run --profile "$PROFILE" --synth-if-missing ${LAB_RUN_ARGS:-}
}

if [ "${1:-}" = "--pipeline" ]; then
  pipeline; rc=$?
  say "pipeline rc=$rc"; echo "$rc" > "$WORK/DONE"; exit "$rc"
fi
if [ "${1:-}" = "--smoke-verdict" ]; then  # here, no GPU: MODE=smoke's verdict on a run folder (see the top)
  [ -d "${2:-}" ] || { echo "usage: bash lab/device/run_h200.sh --smoke-verdict RUN_DIR (a run folder)"; exit 2; }
  smoke_verdict "$2" "" ""; exit $?
fi

if [ "${MODE:-suite}" = smoke ]; then
  if ! [ -d .device/whl ] || ! [ -e .device/llama-src.tar.xz ]; then
    echo "SMOKE FAIL: set-up: no .device/ here (python3 -m lab.setup.device_prep on your machine; carry [\".device\"])"
    exit 1
  fi
  # the call after a verdict starts a fresh smoke (the same command for the next change); build and stand-in stay cached
  if [ -e "$WORK/REPORTED" ]; then
    rm -rf "$WORK/repo" "$WORK/started" "$WORK/DONE" "$WORK/seen" "$WORK/REPORTED" "$WORK/pipeline.log" \
      "$WORK/standin.log" "$WORK/standin.rc" "$WORK/out"
  fi
fi
mkdir -p "$WORK" "$OUT"
# this call's share of the embedded model (see the top): kept there, joined once every part has come
[ -d .device-models ] && python3 -m lab.setup.device_prep --assemble .device-models --store "$WORK/model-parts"
if [ ! -e "$WORK/started" ]; then
  rm -rf "$WORK/repo" && mkdir -p "$WORK/repo" && cp -a . "$WORK/repo/" || { echo "copy failed"; exit 1; }
  date -u +%s > "$WORK/started"
  say "starting the pipeline detached (log: $WORK/pipeline.log)"
  LAB_GIT_SHA=${LAB_GIT_SHA:-} LAB_GIT_DIRTY=${LAB_GIT_DIRTY:-} PROFILE="$PROFILE" WORK="$WORK" MODE=${MODE:-suite} \
    setsid nohup bash "$WORK/repo/lab/device/run_h200.sh" --pipeline > "$WORK/pipeline.log" 2>&1 < /dev/null &
fi

t0=$(date +%s); seen=$(cat "$WORK/seen" 2>/dev/null || echo 0)
while :; do
  n=$(wc -l < "$WORK/pipeline.log" 2>/dev/null || echo 0)
  if [ "$n" -gt "$seen" ]; then sed -n "$((seen + 1)),${n}p" "$WORK/pipeline.log" | cut -c1-300; seen=$n; echo "$seen" > "$WORK/seen"; fi
  [ -e "$WORK/DONE" ] && break
  if [ $(( $(date +%s) - t0 )) -ge "$WAIT_S" ]; then
    if [ "${MODE:-suite}" = smoke ]; then
      echo "SMOKE PENDING: still running after $(( $(date +%s) - $(cat "$WORK/started") )) s: call again now (same command)"
      exit 75
    fi
    say "still running after $(( $(date +%s) - $(cat "$WORK/started") )) s: call again now (same command)"; exit 0
  fi
  sleep 5
done

rc=$(cat "$WORK/DONE")
run_dir=$(sed -n 's/^run folder: *//p' "$WORK/pipeline.log" | tail -1)
cp "$WORK/pipeline.log" "$OUT/pipeline.log"
{ echo "pipeline rc=$rc"; echo "run folder: $run_dir"; echo "elapsed_s=$(( $(date +%s) - $(cat "$WORK/started") ))"; } > "$OUT/status.txt"
if [ -n "$run_dir" ] && [ -d "$run_dir" ]; then
  # Small files only: the model lives in the cache, server logs over 4 MiB are cut to their last 4 MiB.
  find "$run_dir" -type f -size +4M -name '*.log' -exec sh -c 'tail -c 4M "$1" > "$1.tail" && mv "$1.tail" "$1"' _ {} \;
  # xz: executed notebooks each embed plotly.js; the tool brings back files of at most 16 MiB, so a bigger
  # archive comes back in 15 MiB parts (cat run.tar.xz.part-* > run.tar.xz)
  [ -d "$WORK/pretune" ] && cp -r "$WORK/pretune" "$run_dir/00_pretune"
  XZ_OPT=-T0 tar cJf "$OUT/run.tar.xz" -C "$(dirname "$run_dir")" --exclude='*.gguf' "$(basename "$run_dir")"
  if [ "$(stat -c %s "$OUT/run.tar.xz")" -gt $((15 * 1024 * 1024)) ]; then
    split -b 15M "$OUT/run.tar.xz" "$OUT/run.tar.xz.part-" && rm "$OUT/run.tar.xz"
  fi
  say "packed $(du -ch "$OUT"/run.tar.xz* | tail -1 | cut -f1) into \$OUT/run.tar.xz*"
fi
say "PIPELINE DONE rc=$rc"
if [ "${MODE:-suite}" = smoke ]; then
  [ -n "$run_dir" ] && cp "$run_dir/manifest.json" "$run_dir/records/06_benchmark.json" "$OUT/" 2>/dev/null
  if [ "$(find "$OUT" -maxdepth 1 -type f | wc -l)" -gt 8 ]; then  # the tool brings back 8 files: the archive shrinks
    rm -f "$OUT"/run.tar.xz*
    XZ_OPT=-T0 tar cJf "$OUT/run.tar.xz" -C "$(dirname "$run_dir")" --exclude='*.gguf' --exclude='*.ipynb' \
      --exclude='report.html' "$(basename "$run_dir")"
    say "run.tar.xz without the executed notebooks and report.html (≤ 8 files in \$OUT)"
  fi
  verdict=$(smoke_verdict "$run_dir" "$rc" "$WORK"); smoke_rc=$?
  echo "$verdict" >> "$OUT/status.txt"
  touch "$WORK/REPORTED"
  echo "$verdict"; exit "$smoke_rc"
fi
