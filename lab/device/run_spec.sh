#!/usr/bin/env bash
# Speculative decoding alone (notebook 06's section, lab.experiments.speculative) on a lent GPU machine, from this repo's own
# files, offline: set-up (llama.cpp built for the GPU from the carried source), the profile's synthetic stand-in
# and its synthetic draft, then every speculative variant at one stream, into a new run folder packed into
# $OUT/spec.tar.gz. For re-measuring speculation without re-running the whole suite (lab/device/run_h200.sh).
#   device tool, carry [".device"] (python3 -m lab.setup.device_prep): LAB_GIT_SHA=<sha> bash lab/device/run_spec.sh
# Environment: PROFILE (h200-x1), WORK (/root/lab-spec), BUDGET_S (variants started after this many seconds are
# listed as not run; default 200).
set -uo pipefail
PROFILE=${PROFILE:-h200-x1}
WORK=${WORK:-/root/lab-spec}
OUT=${OUT:-$WORK/out}
say() { echo "[$(date -u +%H:%M:%S)] $*"; }
mkdir -p "$WORK" "$OUT"
rm -rf "$WORK/repo" && mkdir -p "$WORK/repo" && cp -a . "$WORK/repo/" && cd "$WORK/repo" || exit 1
export PATH="/usr/local/cuda/bin:$PATH" PYTHONUNBUFFERED=1 LAB_WHEELS="$PWD/.device/whl" \
       LAB_LLAMA_SRC="$PWD/.device/llama-src.tar.xz" LAB_SYNTH_IF_MISSING=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
  .device/whl/*.whl || { say "pip install of .device/whl failed"; exit 1; }
PYTHONPATH="$WORK/site:$PWD" python3 -c "from lab.core import paths; from lab.setup import llama_source; llama_source.extract_vocabs(paths.cache_dir())"
# the stand-in (and its draft) need only gguf + numpy: written on one core while the others compile
( PYTHONPATH="$WORK/site:$PWD" python3 -m lab.model.standin --profile "$PROFILE" --no-progress > "$OUT/standin.log" 2>&1 ) &
python3 -m lab.setup > "$OUT/setup.log" 2>&1 || { say "lab.setup failed"; tail -20 "$OUT/setup.log"; exit 1; }
wait
say "set-up and stand-in done"
.venv/bin/python -m lab.experiments.speculative --profile "params/$PROFILE.yaml" --budget-s "${BUDGET_S:-200}"
rc=$?
run_dir=$(ls -d outputs/"$PROFILE"/*/ 2>/dev/null | tail -1)
[ -n "$run_dir" ] && tar czf "$OUT/spec.tar.gz" -C "$(dirname "$run_dir")" --exclude='*.gguf' "$(basename "$run_dir")"
say "DONE rc=$rc"
