#!/usr/bin/env bash
# The one command for a lent nvidia-h200-x2 (the device tool; carry: [".device"], made here by
# `python3 -m lab.setup.device_prep`). Send the same line until it prints "X2 DONE"; the machine stays warm between
# back-to-back calls:
#   LAB_GIT_SHA=<this checkout's sha> bash lab/device/run_x2.sh
# Calls 1..n: lab/device/run_h200.sh with PROFILE=h200-x2 and `--only 01` (llama.cpp built for sm_90 from
# the carried source, the synthetic Qwen3.8-27B Q4_K_M written while it builds, notebook 01 on both GPUs) until
# its "PIPELINE DONE". The call after that: lab/device/run_multigpu.sh (all-reduce, split modes, TP model)
# into the same run folder, packed into $OUT/run-x2.tar.gz.
set -uo pipefail
WORK=${WORK:-/root/lab-device}
export PROFILE=${PROFILE:-h200-x2} LAB_RUN_ARGS=${LAB_RUN_ARGS:---only 01}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ ! -e "$WORK/DONE" ] || [ ! -e "$WORK/suite-packed" ]; then
  bash lab/device/run_h200.sh
  if [ -e "$WORK/DONE" ]; then touch "$WORK/suite-packed"; echo "suite part done: send the same command again for the two-GPU part"; fi
  exit 0
fi
bash lab/device/run_multigpu.sh && echo "X2 DONE"
