"""Instruments: each measures one thing on this machine or its servers and returns numbers (one module, one job; no
`main`: what runs instruments in a planned order is an experiment, lab.experiments, or a notebook's page).

hardware probes      inventory (NVML, host, model file), copy_bandwidth, hardware_checks (pure checks), psu_sizing,
                     gpumon (VRAM, power, energy while something runs), gpu_links (NVLink/PCIe, GPU-to-GPU copy),
                     wheel_arch (CUDA architectures in a wheel), install (what is installed: versions, machine facts)
load and benchmark   loadgen (the client: one streamed request, one run), load_levels (measure these levels against
                     this server: deadline, warm-up, repetitions, monitor, summary — notebook 06's sweep and every
                     experiment use it), metrics (the arithmetic), bench (llama-bench reference, contention),
                     llama_batched_bench (llama-batched-bench: the in-process batched speed), bench_source (a local
                     source to time the client; it runs as its own process: `running()` starts it with -m),
                     yardstick (served ÷ in-process rows)
KV against engines   kvcache_verify (llama-server's caches against lab.predict.kvcache, each point built by
                     lab.serving.engines), vllm_kv (vLLM's)
peer clients         peer_bench (vllm bench serve and the lab's client on the same load), peer_tools (llama-benchy,
                     guidellm, aiperf: where, command lines, their exports), server_clock (the server's own log as
                     referee between two runs), wire_clock (a timing proxy between clients and server: every request
                     of both runs on one clock), slot_placement (which slots a run's requests landed in; a log's
                     slot blocks against decode speed; its waves with the compute graphs they reused)

llama-bench itself (lab.model.llama_bench) sits in the model layer: the quant ladder (lab.model.quant_ladder) and the
by-hand track (lab.serving.byhand) below this layer call it. Servers are started and stopped by lab.serving.serve
(`start`, `measure`), their commands built by lab.serving.engines (`build_command`, `with_flags`); whether a server can
start here is lab.serving.serve's `why_not_startable` / `why_not_flag_sweep`. What a notebook shows of these (tables,
charts, its record and closing text) is in its page, lab.pages.
"""
