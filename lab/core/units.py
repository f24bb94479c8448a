"""Byte units, one definition for every module: GB as the seeds, model cards and download pages write file sizes
(10^9 bytes), GiB and MiB as llama.cpp's logs, NVML and nvidia-smi report memory (2^30, 2^20)."""
GB = 10**9
GIB = 1 << 30
MIB = 1 << 20
