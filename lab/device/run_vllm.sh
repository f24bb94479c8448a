#!/usr/bin/env bash
# vLLM on a lent GPU machine (the device tool), offline, from this repo's files: notebooks 04, 05 and 06 of
# params/$PROFILE.yaml (default: h100-vllm or h200-vllm by the card lent; engine vllm) in measure mode, then vLLM's MTP step costs.
#
# Here, once:  python3 -m lab.setup.device_prep       (.device/: the llama.cpp source + the lab's wheels, ≈ 24 MiB)
#              python3 -m lab.setup.device_vllm pack  (.device-vllm/0..5: vllm 0.25.0 without what Hopper never loads,
#                                                      and the packages the image lacks: 145 MiB; it prints the plan)
# There, the same command every call:   LAB_GIT_SHA=<full sha: git rev-parse HEAD> bash lab/device/run_vllm.sh
# carrying [".device", ".device-vllm/0"] on the first call, then two parts a call ([".device-vllm/1", ".device-vllm/2"],
# ...): the tool carries ≤ 64 MiB a call with the tree, so the tree must be small (outputs/ untracked for these calls,
# or parts of 27 MiB will not fit beside it). Each call keeps its parts (python3 -m lab.setup.device_vllm install);
# the first also starts the pipeline detached (setsid), and every call then waits up to $WAIT_S seconds, printing its
# new log lines. Call again right away (the machine goes back after 30 s idle) until "PIPELINE DONE": that call packs
# the run folders (no model, no build) into $OUT/run.tar.xz (15 MiB parts when larger) with pipeline.log, status.txt.
#
# The pipeline: the lab's set-up with a CPU llama.cpp (LAB_FORCE_CPU=1: the vLLM notebooks never start llama.cpp, and a
# CUDA build costs 5 minutes of the lent machine), under nice so it does not slow vLLM; once vLLM is installed,
# `vllm --version` and the GPU torch sees; the stand-in's tokenizer (lab.setup.hfmodel with the image's transformers);
# `lab run --profile $PROFILE --synth-if-missing --only 04,05,06` (the stand-in: the real config, random weights drawn
# by vLLM itself, --load-format dummy; lab/model/hf_standin.py); then, within SPEC_BUDGET_S (default 420; 0 = skip),
# `python -m lab.experiments.speculative` on the same profile: the baseline and MTP at num_speculative_tokens 1-4, one
# stream, each its own server (step costs at ≈ 0 acceptance: random weights).
# While vLLM runs, a copy of the tree builds llama.cpp for the GPU under nice into the cache (PREBUILD_GPU=1, the
# default; $WORK/prebuild.rc when done), so that a MODE=smoke call of run_h200.sh after it starts from the cache.
# The last line judges the notebooks' run folder as the GPU smoke does (lab/setup/smoke_verdict.py, the same judge as
# run_h200.sh's MODE=smoke): `SMOKE PASS` or `SMOKE FAIL: <what>`. MODE=smoke (the vLLM smoke a change to the vLLM path
# runs before it is done): the same pipeline with bench_concurrency [1] in the copy's profile and no MTP rows, exit 0 /
# 1 by the verdict. The call after a verdict starts afresh, keeping vLLM's install (carry [".device"] only).
# Environment: PROFILE, WAIT_S (540), SPEC_BUDGET_S, VLLM_WAIT_S (how long the pipeline waits for the last part: 900),
# WORK (/root/lab-vllm-run), VLLM_HOME ($WORK/repo/.venv-vllm: the engine_python params/h100-vllm.yaml names,
# .venv-vllm/bin/python, relative to the checkout), LAB_GIT_SHA / LAB_GIT_DIRTY.
# Here, no GPU: `bash -n lab/device/run_vllm.sh`.
set -uo pipefail
# the profile of the card lent (a call may get an H200 where an H100 was asked for, and the other way round)
if [ -z "${PROFILE:-}" ]; then
  case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" in
    *H200*) PROFILE=h200-vllm ;;
    *) PROFILE=h100-vllm ;;
  esac
fi
WORK=${WORK:-/root/lab-vllm-run}
VLLM_HOME=${VLLM_HOME:-$WORK/repo/.venv-vllm}
WAIT_S=${WAIT_S:-540}
OUT=${OUT:-$WORK/out}
say() { echo "[$(date -u +%H:%M:%S)] $*"; }
if [ -n "${LAB_GIT_SHA:-}" ] && ! [[ "$LAB_GIT_SHA" =~ ^[0-9a-f]{40}$ ]]; then
  echo "LAB_GIT_SHA must be the full 40-character sha (git rev-parse HEAD), got '$LAB_GIT_SHA'"; exit 2
fi
# NVLink multicast stays off (the device tool's rule for every program started there)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# FlashInfer's top-k/top-p sampler JIT-compiles at first use; PyTorch's sampler needs nothing compiled
export VLLM_USE_FLASHINFER_SAMPLER=0

prebuild_gpu() {  # a copy of the tree (no venvs) whose set-up builds llama.cpp for this GPU into the shared cache
  rm -rf "$WORK/prebuild" "$WORK/prebuild.rc" && mkdir -p "$WORK/prebuild" || return 1
  tar -C "$WORK/repo" --exclude=./.venv --exclude=./.venv-vllm --exclude=./outputs -cf - . | tar -C "$WORK/prebuild" -xf -
  ( cd "$WORK/prebuild" && LAB_WHEELS="$PWD/.device/whl" LAB_LLAMA_SRC="$PWD/.device/llama-src.tar.xz" \
      nice -n 19 python3 -m lab.setup > "$WORK/prebuild.log" 2>&1; echo $? > "$WORK/prebuild.rc" )
}

pipeline() {  # runs detached, in $WORK/repo
  cd "$WORK/repo" || exit 1
  export PATH="/usr/local/cuda/bin:$PATH" PYTHONUNBUFFERED=1 LAB_WHEELS="$PWD/.device/whl" \
         LAB_LLAMA_SRC="$PWD/.device/llama-src.tar.xz" LAB_SYNTH_IF_MISSING=1
  say "nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1)"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
    .device/whl/*.whl || { say "pip install of .device/whl failed"; return 1; }
  ( LAB_FORCE_CPU=1 nice -n 19 python3 -m lab.setup > "$WORK/setup.log" 2>&1; echo $? > "$WORK/setup.rc" ) &
  local setup_pid=$! t0; t0=$(date +%s)
  until [ -x "$VLLM_HOME/bin/vllm" ]; do
    if [ $(( $(date +%s) - t0 )) -ge "${VLLM_WAIT_S:-900}" ]; then say "vLLM parts did not all come in ${VLLM_WAIT_S:-900} s"; return 1; fi
    sleep 5
  done
  say "vllm: $("$VLLM_HOME/bin/vllm" --version 2>&1 | tail -1)"
  say "torch sees: $("$VLLM_HOME/bin/python" -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))' 2>&1 | tail -1)"
  # the stand-in's tokenizer, made here with the image's transformers + the lab's gguf (lab.model.hf_standin finds it)
  PYTHONPATH="$WORK/site:$PWD" python3 - <<'PY' || { say "stand-in tokenizer failed"; return 1; }
from lab.core import paths
from lab.model import models, synth_metadata as sm
from lab.setup import hfmodel, llama_source

cache = paths.cache_dir()
llama_source.extract_vocabs(cache)
vocab = sm.default_vocab_path(sm.vocab_name_for(models.stand_in("qwen3.8-27b")))
print(f"stand-in tokenizer: {hfmodel.tokenizer_here(vocab, cache)['path']}", flush=True)
PY
  wait "$setup_pid"; say "lab.setup rc=$(cat "$WORK/setup.rc"): $(tail -1 "$WORK/setup.log")"
  [ "$(cat "$WORK/setup.rc")" = 0 ] || { say "lab.setup failed"; tail -20 "$WORK/setup.log"; return 1; }
  if [ "${PREBUILD_GPU:-1}" = 1 ] && command -v nvcc > /dev/null; then
    say "the CUDA llama.cpp build into the cache, under nice, beside vLLM (log: $WORK/prebuild.log)"
    prebuild_gpu &
  fi
  local rc=0
  if [ "${MODE:-run}" = smoke ]; then  # the copy's profile: one benchmark level; no MTP rows
    local f="params/$PROFILE.yaml"
    sed -i 's|^bench_concurrency:.*|bench_concurrency: [1]  # MODE=smoke|' "$f"
    grep -q '^bench_concurrency:' "$f" || echo "bench_concurrency: [1]  # MODE=smoke" >> "$f"
    SPEC_BUDGET_S=0
  fi
  .venv/bin/python -m lab run --profile "$PROFILE" --synth-if-missing --only 04,05,06 || rc=$?
  say "lab run rc=$rc"
  if [ "${SPEC_BUDGET_S:-420}" -gt 0 ]; then
    say "MTP step costs: python -m lab.experiments.speculative (budget ${SPEC_BUDGET_S:-420} s)"
    .venv/bin/python -m lab.experiments.speculative --profile "$PROFILE" --budget-s "${SPEC_BUDGET_S:-420}" \
      | sed 's/^run folder:/spec run folder:/'
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv > "$WORK/gpu.csv" 2>&1
  return "$rc"
}

if [ "${1:-}" = "--pipeline" ]; then
  pipeline; rc=$?
  say "pipeline rc=$rc"; echo "$rc" > "$WORK/DONE"; exit "$rc"
fi

# the call after a verdict starts a fresh run (the same command for the next change); vLLM's install is kept
if [ -e "$WORK/REPORTED" ]; then
  [ -d "$VLLM_HOME" ] && mv "$VLLM_HOME" "$WORK/vllm-home.keep"
  rm -rf "$WORK/repo" "$WORK/started" "$WORK/DONE" "$WORK/seen" "$WORK/REPORTED" "$WORK/pipeline.log" "$WORK/out"
fi
mkdir -p "$WORK" "$OUT"
# this call's parts of vLLM: kept there; installed once all have come
[ -d .device-vllm ] && python3 -m lab.setup.device_vllm install .device-vllm --store "$WORK/vllm-parts" \
  --site "$VLLM_HOME/site" --bin "$VLLM_HOME/bin"
if [ ! -e "$WORK/started" ]; then
  [ -d .device/whl ] || { echo "no .device/ here: carry [\".device\", \".device-vllm/0\"] on the first call"; exit 2; }
  rm -rf "$WORK/repo" && mkdir -p "$WORK/repo" && cp -a . "$WORK/repo/" && rm -rf "$WORK/repo/.device-vllm" \
    || { echo "copy failed"; exit 1; }
  [ -d "$WORK/vllm-home.keep" ] && mkdir -p "$(dirname "$VLLM_HOME")" && mv "$WORK/vllm-home.keep" "$VLLM_HOME"
  date -u +%s > "$WORK/started"
  say "starting the pipeline detached (log: $WORK/pipeline.log)"
  LAB_GIT_SHA=${LAB_GIT_SHA:-} LAB_GIT_DIRTY=${LAB_GIT_DIRTY:-} PROFILE="$PROFILE" WORK="$WORK" VLLM_HOME="$VLLM_HOME" MODE=${MODE:-run} \
    setsid nohup bash "$WORK/repo/lab/device/run_vllm.sh" --pipeline > "$WORK/pipeline.log" 2>&1 < /dev/null &
fi

t0=$(date +%s); seen=$(cat "$WORK/seen" 2>/dev/null || echo 0)
while :; do
  n=$(wc -l < "$WORK/pipeline.log" 2>/dev/null || echo 0)
  if [ "$n" -gt "$seen" ]; then sed -n "$((seen + 1)),${n}p" "$WORK/pipeline.log" | cut -c1-300; seen=$n; echo "$seen" > "$WORK/seen"; fi
  [ -e "$WORK/DONE" ] && break
  # parts still to come: return at once so the next call brings them
  [ -x "$VLLM_HOME/bin/vllm" ] || { say "waiting for more parts of vLLM: call again with the next carry"; exit 0; }
  if [ $(( $(date +%s) - t0 )) -ge "$WAIT_S" ]; then
    say "still running after $(( $(date +%s) - $(cat "$WORK/started") )) s: call again now (same command)"; exit 0
  fi
  sleep 5
done

rc=$(cat "$WORK/DONE")
cp "$WORK/pipeline.log" "$OUT/pipeline.log"
runs=$(sed -n 's/^\(spec \)\{0,1\}run folder: *//p' "$WORK/pipeline.log" | sort -u)
{ echo "pipeline rc=$rc"; echo "run folders: $runs"; echo "elapsed_s=$(( $(date +%s) - $(cat "$WORK/started") ))"; } > "$OUT/status.txt"
if [ -n "$runs" ]; then
  for d in $runs; do
    [ -d "$WORK/repo/$d" ] || [ -d "$d" ] || continue
    find "$WORK/repo/$d" "$d" -type f -size +4M -name '*.log' -exec sh -c 'tail -c 4M "$1" > "$1.tail" && mv "$1.tail" "$1"' _ {} \; 2>/dev/null
  done
  cp "$WORK/gpu.csv" "$WORK/setup.log" "$OUT/" 2>/dev/null
  (cd "$WORK/repo" && XZ_OPT=-T0 tar cJf "$OUT/run.tar.xz" --exclude='*.gguf' --exclude='*.safetensors' $runs)
  if [ "$(stat -c %s "$OUT/run.tar.xz")" -gt $((15 * 1024 * 1024)) ]; then
    split -b 15M "$OUT/run.tar.xz" "$OUT/run.tar.xz.part-" && rm "$OUT/run.tar.xz"
  fi
  say "packed $(du -ch "$OUT"/run.tar.xz* | tail -1 | cut -f1) into \$OUT/run.tar.xz*"
fi
say "PIPELINE DONE rc=$rc"
# the smoke's judge (lab/setup/smoke_verdict.py, the llama.cpp smoke's too) on the notebooks' run folder: MODE=smoke
# asks for exactly level 1; a full run is judged the same way on its own levels
lab_run=$(sed -n 's/^run folder: *//p' "$WORK/pipeline.log" | tail -1)
verdict=$(python3 -m lab.setup.smoke_verdict "$lab_run" --rc "$rc" --work "$WORK" --engine vllm \
  $([ "${MODE:-run}" = smoke ] && echo --levels 1)); smoke_rc=$?
case "$smoke_rc:$verdict" in
  "0:SMOKE PASS" | "1:SMOKE FAIL: "*) ;;
  *) verdict="SMOKE FAIL: the smoke's own verdict (python3 exit $smoke_rc: ${verdict:0:200})"; smoke_rc=1 ;;
esac
echo "$verdict" >> "$OUT/status.txt"
touch "$WORK/REPORTED"
echo "$verdict"
[ "${MODE:-run}" = smoke ] && exit "$smoke_rc"
exit 0
