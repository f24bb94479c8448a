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
# Environment: PROFILE (default h200-x1), LAB_RUN_ARGS (more `lab run` flags, e.g. "--only 01,06"),
# WAIT_S (default 540: a call must end inside the tool's 600 s), WORK (default /root/lab-device),
# LAB_GIT_SHA / LAB_GIT_DIRTY (the commit, recorded in every record: the copy there has no .git).
set -uo pipefail
PROFILE=${PROFILE:-h200-x1}
WORK=${WORK:-/root/lab-device}
WAIT_S=${WAIT_S:-540}
OUT=${OUT:-$WORK/out}
say() { echo "[$(date -u +%H:%M:%S)] $*"; }
# the records trust LAB_GIT_SHA only as a full sha (lab.core.evidence.git_state); a short one fell back to the copied
# tree's stale .git and recorded the wrong commit (the 2026-12-01 22:50 run says ca156936, dirty; it ran cbb58bd)
if [ -n "${LAB_GIT_SHA:-}" ] && ! [[ "$LAB_GIT_SHA" =~ ^[0-9a-f]{40}$ ]]; then
  echo "LAB_GIT_SHA must be the full 40-character sha (git rev-parse HEAD), got '$LAB_GIT_SHA'"; exit 2
fi

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
  PYTHONPATH="$WORK/site:$PWD" python3 -c "from lab import setup; setup.extract_vocabs(setup.cache_dir())"
  ( PYTHONPATH="$WORK/site:$PWD" python3 -m lab.model.standin --profile "$PROFILE" --no-progress > "$WORK/standin.log" 2>&1
    echo $? > "$WORK/standin.rc" ) &
  local synth_pid=$!
  python3 -m lab.setup || { say "lab.setup failed"; return 1; }
  wait "$synth_pid"; say "standin rc=$(cat "$WORK/standin.rc"): $(tail -1 "$WORK/standin.log")"
  local smol; smol="$(python3 -c 'from lab import setup; print(setup.cache_dir() / "models" / setup.SMOLLM2_FILE)')"
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

mkdir -p "$WORK" "$OUT"
# this call's share of the embedded model (see the top): kept there, joined once every part has come
[ -d .device-models ] && python3 -m lab.setup.device_prep --assemble .device-models --store "$WORK/model-parts"
if [ ! -e "$WORK/started" ]; then
  rm -rf "$WORK/repo" && mkdir -p "$WORK/repo" && cp -a . "$WORK/repo/" || { echo "copy failed"; exit 1; }
  date -u +%s > "$WORK/started"
  say "starting the pipeline detached (log: $WORK/pipeline.log)"
  LAB_GIT_SHA=${LAB_GIT_SHA:-} LAB_GIT_DIRTY=${LAB_GIT_DIRTY:-} PROFILE="$PROFILE" WORK="$WORK" \
    setsid nohup bash "$WORK/repo/lab/device/run_h200.sh" --pipeline > "$WORK/pipeline.log" 2>&1 < /dev/null &
fi

t0=$(date +%s); seen=$(cat "$WORK/seen" 2>/dev/null || echo 0)
while :; do
  n=$(wc -l < "$WORK/pipeline.log" 2>/dev/null || echo 0)
  if [ "$n" -gt "$seen" ]; then sed -n "$((seen + 1)),${n}p" "$WORK/pipeline.log" | cut -c1-300; seen=$n; echo "$seen" > "$WORK/seen"; fi
  [ -e "$WORK/DONE" ] && break
  if [ $(( $(date +%s) - t0 )) -ge "$WAIT_S" ]; then
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
