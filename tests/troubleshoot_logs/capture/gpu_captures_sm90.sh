#!/bin/bash
# How the GPU-only texts in tests/troubleshoot_logs/ were captured on the device machine (2026-11-29):
# outputs/tscap/ held this folder's files, tiny.gguf (synth_tiny_gguf.py on models/ggml-vocab-llama-spm.gguf)
# and lcsrc.tgz (llama.cpp from llama-cpp-python 0.3.36's sdist); the device ran `bash outputs/tscap/<this script>`.
# Clean CUDA llama-server logs (sm_90 build) + -ngl 0 + split-mode row, on the device machine.
R=$PWD; T=$R/outputs/tscap; O=${OUT:-/tmp/out}; C=/tmp/cap2; mkdir -p $C; START=$(date +%s)
mkdir -p /tmp/lc && tar xzf $T/lcsrc.tgz -C /tmp/lc
( cd /tmp/lc/llama.cpp && cmake -B b90 -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_CUDA_FA=OFF \
   -DGGML_NATIVE=OFF -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release \
   && cmake --build b90 --target llama-server -j 16 ) > /tmp/build.log 2>&1
echo "build ended after $(( $(date +%s) - START )) s" >> /tmp/build.log; tail -c 3000 /tmp/build.log > $O/build_tail.log
S=/tmp/lc/llama.cpp/b90/bin/llama-server; M=$T/tiny.gguf
run() { local name=$1 port=$2; shift 2; $S -m $M --port $port "$@" > $C/$name.txt 2>&1 & local p=$!
  for i in $(seq 60); do curl -sf localhost:$port/health >/dev/null && break; sleep 0.5; done
  curl -s localhost:$port/v1/completions -H 'Content-Type: application/json' -d '{"prompt":"Hello there","max_tokens":8}' > $C/$name.response.txt 2>&1
  kill $p; wait $p; echo "[exit $?]" >> $C/$name.txt; }
[ -x $S ] && {
  run clean_cuda_default 18600 -ngl 99 -c 2048
  run clean_cuda_verbose 18601 -ngl 99 -c 2048 -v
  run ngl0_cuda 18602 -ngl 0 -c 2048 -v
  run split_row 18603 -ngl 99 -c 2048 -sm row
}
cd $C && tar czf $O/captures2.tgz *.txt
