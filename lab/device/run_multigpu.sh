#!/usr/bin/env bash
# The two-GPU measurements (issue: one GPU against two) on a lent nvidia-h200-x2, after the suite pipeline.
#
# Usually started by lab/device/run_x2.sh (one line for every call). By hand:
# Call 1 (build + model + notebook 01; ~5-7 min; repeat the same line until it prints "PIPELINE DONE"):
#   PROFILE=h200-x2 LAB_RUN_ARGS="--only 01" LAB_GIT_SHA=<sha> bash lab/device/run_h200.sh
# Call 2 (this script, same warm machine, < 10 min):
#   bash lab/device/run_multigpu.sh
# It works in the copy call 1 made ($WORK/repo: its .venv, llama.cpp build and synthetic model), writes into
# the run folder call 1 made (records/08_allreduce.json, 08_multigpu_scaling.json, 08_tp_model.json, the
# servers' logs), rebuilds report.html and packs the folder into $OUT/run-x2.tar.gz (+ $OUT/multigpu.log).
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and friends): the host's GPUs are shared.
# Environment: WORK (default /root/lab-device), PROFILE (h200-x2), MODEL (a GGUF instead of the stand-in),
# CALL_S (570: the time this call may take), ALLREDUCE_BACKEND (nccl; gloo for a CPU trial of this script).
set -uo pipefail
WORK=${WORK:-/root/lab-device}
OUT=${OUT:-$WORK/out}
PROFILE=${PROFILE:-h200-x2}
CALL_S=${CALL_S:-570}             # this call must end inside the device tool's 600 s: everything is timed against it
t_start=$(date +%s)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
say() { echo "[$(date -u +%H:%M:%S)] $*"; }
mkdir -p "$OUT"
exec > >(tee "$OUT/multigpu.log") 2>&1
cd "$WORK/repo" || { say "no $WORK/repo: run call 1 (lab/device/run_h200.sh) first"; exit 1; }
py=.venv/bin/python
run_dir=$(sed -n 's/^run folder: *//p' "$WORK/pipeline.log" 2>/dev/null | tail -1)
if [ -z "$run_dir" ] || [ ! -d "$run_dir" ]; then
  run_dir=$($py -c "from lab.core import evidence; print(evidence.new_run_dir('$PROFILE'))")
  say "no run folder from call 1: writing into a new one, $run_dir"
fi
# lab.model.standin finds (or writes) the profile's synthetic file: "found|wrote PATH (N bytes, ...)"; MODEL overrides
model=${MODEL:-}
[ -n "$model" ] || model=$($py -m lab.model.standin --profile "$PROFILE" --no-progress 2>&1 | sed -n 's/^\(wrote\|found\) \([^ ]*\) (.*/\2/p' | tail -1)
[ -f "$model" ] || { say "no synthetic model ($model)"; exit 1; }
say "nvidia-smi topo -m:"; nvidia-smi topo -m 2>&1 | head -12
say "all-reduce (${ALLREDUCE_BACKEND:-nccl}, 2 processes) ..."
timeout 120 $py -m lab.experiments.allreduce_bench --backend "${ALLREDUCE_BACKEND:-nccl}" --arch qwen3.8-27b --out "$run_dir"; say "all-reduce rc=$?"
left=$(( CALL_S - ($(date +%s) - t_start) - 20 ))   # 20 s for the report and the tar
BUDGET_S=$(( left > 300 ? left - 150 : left / 2 ))  # start no new split mode after this (one mode takes ~1-2 min)
say "split modes (no new mode after ${BUDGET_S} s, stopped at ${left} s) ..."
timeout "$left" $py -m lab multigpu --profile "$PROFILE" --model "$model" --out "$run_dir" \
  --levels 1,8,16 --output-tokens 128 --prompt-tokens 512 --reps 3 --budget-s "$BUDGET_S"; say "multigpu rc=$?"
$py -m lab report "$run_dir"
find "$run_dir" -type f -size +4M -name '*.log' -exec sh -c 'tail -c 4M "$1" > "$1.t" && mv "$1.t" "$1"' _ {} \;
tar czf "$OUT/run-x2.tar.gz" -C "$(dirname "$run_dir")" --exclude='*.gguf' "$(basename "$run_dir")"
say "packed $(du -h "$OUT/run-x2.tar.gz" | cut -f1) into \$OUT/run-x2.tar.gz; DONE"
