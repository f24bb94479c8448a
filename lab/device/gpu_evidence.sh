#!/usr/bin/env bash
# The lab's GPU evidence run, on a GPU machine, from the repo root: build llama.cpp for this GPU, write the
# synthetic model with lab.model.synth (while the build runs: one core against all the others), then measure
# with lab/measure/gpu_evidence.py. Writes records/ and logs/ under OUT_DIR; creates DONE in WORK_DIR at the end.
#
#   lab/device/gpu_evidence.sh WORK_DIR OUT_DIR [PROFILE] [ARCH] [CUDA_ARCH]
# Environment: SKIP_WHEELS=1 (the Python here has them), LAYERS (fewer layers: a quick trial),
# EVIDENCE_ARGS (more gpu_evidence.py flags, e.g. "--skip bench --levels 1,2 --output-tokens 16" for a CPU
# trial of the whole path), LAB_GIT_SHA / LAB_GIT_DIRTY (the lab commit, where the tree has no .git).
#
# Needs, in the checkout (ignored, carried to the device machine; outputs/h200-x1/*/README.md shows how to make them):
#   .device/llama-src   llama.cpp from the llama-cpp-python sdist (shared/tools/llama-src-for-device.sh)
#   .device/vocab/ggml-vocab-qwen2.gguf   the tokenizer to copy into the synthetic model
#   .device/whl/*.whl   Python packages the machine lacks (gguf, pydantic and its needs)
set -uo pipefail
work=$1 out=$2 profile=${3:-h200-x1} arch=${4:-qwen3-32b} cuda_arch=${5:-90}
mkdir -p "$work" "$out/logs"
rm -f "$work/DONE"
say() { echo "[$(date -u +%H:%M:%S)] $*"; }

if [ -z "${SKIP_WHEELS:-}" ] && ls .device/whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$work/site" \
    .device/whl/*.whl || { say "pip install failed"; touch "$work/DONE"; exit 1; }
  export PYTHONPATH="$work/site:$PWD"
fi
export PATH="/usr/local/cuda/bin:$PATH" PYTHONUNBUFFERED=1
vocab=.device/vocab/ggml-vocab-qwen2.gguf
model="$work/$arch-synthetic-Q4_K.gguf"
say "nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
say "nvcc: $(nvcc --version | tail -2 | head -1)"

if [ ! -s "$model" ]; then
  ( t0=$(date +%s.%N)
    python3 -m lab.model.synth --arch "$arch" --out "$model" --vocab "$vocab" --no-progress ${LAYERS:+--layers $LAYERS} \
      > "$out/logs/synth.log" 2>&1
    echo "$? $(python3 -c "print(round($(date +%s.%N) - $t0, 1))")" > "$work/synth.status" ) &
  synth_pid=$!
else
  synth_pid=
fi

if [ ! -x "$work/build/bin/llama-server" ]; then
  mapfile -t flags < <(python3 -c "from lab.setup import cmake_flags; print('\n'.join(cmake_flags('$cuda_arch')))")
  t0=$(date +%s)
  cmake -S .device/llama-src -B "$work/build" -G Ninja "${flags[@]}" > "$work/build.log" 2>&1 &&
    cmake --build "$work/build" -j"$(nproc)" --target llama-bench llama-server >> "$work/build.log" 2>&1
  rc=$?
  say "build rc=$rc in $(( $(date +%s) - t0 )) s (flags: ${flags[*]})"
  tail -30 "$work/build.log" > "$out/logs/build_tail.log"
  [ $rc -eq 0 ] || { touch "$work/DONE"; exit 1; }
fi
"$work/build/bin/llama-bench" --version 2>&1 | tail -2

[ -n "$synth_pid" ] && wait "$synth_pid"
read -r synth_rc synth_s < "$work/synth.status" || true
say "synth rc=$synth_rc in ${synth_s} s"; cat "$out/logs/synth.log"
[ "${synth_rc:-1}" = 0 ] || { touch "$work/DONE"; exit 1; }

python3 -m lab.measure.gpu_evidence --profile "$profile" --model "$model" --arch "$arch" --vocab "$vocab" \
  --llama-bin "$work/build/bin" --out "$out" --synth-seconds "$synth_s" ${LAYERS:+--layers $LAYERS} ${EVIDENCE_ARGS:-}
say "evidence rc=$?"
touch "$work/DONE"
