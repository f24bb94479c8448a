"""Instruments: what the lab measures on this machine and its servers, by kind (one module, one job).

hardware probes      inventory (NVML, host, model file), copy_bandwidth, hardware_checks (pure checks), psu_sizing,
                     gpumon (VRAM, power, energy while something runs), gpu_links (NVLink/PCIe, GPU-to-GPU copy),
                     wheel_arch (CUDA architectures in a wheel), install (what is installed: versions, machine facts)
load and benchmark   loadgen (the client: one streamed request, one run), load_levels (measure these levels against
                     this server: deadline, warm-up, repetitions, monitor, summary — the sweep, tune, speculative,
                     multi-GPU and the peer lab client all use it), metrics (the arithmetic), bench (llama-bench
                     reference, contention), bench_run (notebook 06's steps), bench_steps (each step's result
                     kept for the page), bench_source (a local source to time the client), yardstick (served ÷
                     in-process rows)
server sweeps        tune (lab tune: one setting at a time, each point its own server), tune_settings (what a
                     point is), tune_choice (which point wins, the profile patch), slot_placement (where a tune
                     point's requests landed; any log's slot blocks against decode speed), speculative (draft model,
                     n-grams, MTP at one stream), busy_host (busy cores beside the server, placement held equal),
                     backend_sampling (what -bs changes in the answers: greedy tokens, seeded draws per sampler;
                     backend_sampling_verdict: its statistics, verdict and record)
multi-GPU            multigpu (split modes, two over one), allreduce_bench (NCCL all-reduce at decode sizes)
KV against engines   kvcache_verify (llama-server's caches against lab.predict.kvcache, each point built by
                     lab.serving.engines), vllm_kv (vLLM's)
peer clients         peer_bench (vllm bench serve), peer_clients (llama-benchy, guidellm, aiperf against the lab's
                     client), peer_tools (those clients: where, command lines, their exports), peer_verdicts
                     (lab ÷ theirs and why), server_clock (the server's own log as referee between two runs),
                     wire_clock (a timing proxy between clients and server: every request of both runs on one clock)

Servers are started and stopped by lab.serving.serve (`start`, `measure`), their commands built by
lab.serving.engines (`build_command`, `with_flags`); whether a server can start here is lab.serving.serve's
`why_not_startable` / `why_not_flag_sweep`. What a notebook shows of these (tables, charts, its record and closing
text) is in its page, lab.pages.
"""
