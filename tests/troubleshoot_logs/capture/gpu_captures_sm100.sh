#!/bin/bash
# How the GPU-only texts in tests/troubleshoot_logs/ were captured on the device machine (2026-11-29):
# outputs/tscap/ held this folder's files, tiny.gguf (synth_tiny_gguf.py on models/ggml-vocab-llama-spm.gguf)
# and lcsrc.tgz (llama.cpp from llama-cpp-python 0.3.36's sdist); the device ran `bash outputs/tscap/<this script>`.
# GPU-only error captures for lab/data/troubleshooting.yaml (run on the device machine, repo root as cwd).
R=$PWD; T=$R/outputs/tscap; O=${OUT:-/tmp/out}; C=/tmp/cap; mkdir -p $C; START=$(date +%s)
cap() { local name=$1; shift; { echo "\$ $*"; "$@"; echo "[exit $?]"; } > $C/$name.txt 2>&1; }
# start the llama.cpp build first (longest), for sm_100 only: on this sm_90 GPU it is the V100 situation
mkdir -p /tmp/lc && tar xzf $T/lcsrc.tgz -C /tmp/lc
( cd /tmp/lc/llama.cpp && cmake -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=100-real -DGGML_CUDA_FA=OFF \
   -DGGML_NATIVE=OFF -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release \
   && cmake --build b --target llama-server -j 15 ) > /tmp/build.log 2>&1 &
BPID=$!
nvidia-smi > $C/clean_nvidia_smi.txt 2>&1
nvidia-smi -q -d PERFORMANCE,ECC,TEMPERATURE,PAGE_RETIREMENT > $C/clean_nvidia_smi_q.txt 2>&1
{ nvidia-smi nvlink -s; nvidia-smi topo -m; } > $C/clean_nvlink.txt 2>&1
cp $T/nokernel.cu /tmp/
cap nvcc_sm70 nvcc -arch=sm_70 -o /tmp/nk70 /tmp/nokernel.cu
nvcc -gencode arch=compute_100,code=sm_100 -o /tmp/nk100 /tmp/nokernel.cu && cap no_kernel_image_cuda /tmp/nk100
cap torch_oom python3 -c "import torch; x = torch.empty(200 * 2**30, dtype=torch.uint8, device='cuda')"
cap torch_arch python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_arch_list(), torch.cuda.get_device_capability())"
while kill -0 $BPID 2>/dev/null && [ $(( $(date +%s) - START )) -lt 500 ]; do sleep 5; done
echo "build ended after $(( $(date +%s) - START )) s" >> /tmp/build.log; tail -c 20000 /tmp/build.log > $O/build_tail.log
S=/tmp/lc/llama.cpp/b/bin/llama-server; M=$T/tiny.gguf
if [ -x $S ]; then
  timeout 40 $S -m $M -ngl 99 -c 512 --port 18500 -v > $C/llama_no_kernel_image.txt 2>&1; echo "[exit $?]" >> $C/llama_no_kernel_image.txt
  timeout 40 $S -m $M -ngl 99 -c 300000000 -fit off --port 18501 > $C/llama_cuda_oom.txt 2>&1; echo "[exit $?]" >> $C/llama_cuda_oom.txt
  CUDA_VISIBLE_DEVICES=-1 timeout 20 $S -m $M -ngl 99 -c 512 --port 18502 > $C/llama_no_visible_gpu.txt 2>&1 & sleep 12; kill %1 2>/dev/null
fi
cd $C && tar czf $O/captures.tgz *.txt
