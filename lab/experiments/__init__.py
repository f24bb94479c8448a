"""Experiments: questions about servers and GPUs answered by running instruments (lab.measure) against servers
(lab.serving) in a planned order. Each experiment has a `main` (`python -m lab.experiments.X`, or a `lab` verb in
lab/__main__.py); its parts, which have none, sit beside it and are imported by it alone or by a page.

server settings      tune (`lab tune`: one setting at a time, each point its own server; also notebook 06's
                     tune step), tune_settings (part: what a point is), tune_choice (part: which point wins, the
                     profile patch)
speculative          speculative (draft model, n-grams, MTP at one stream: `python -m lab.experiments.speculative`,
                     lab/device/run_spec.sh; also notebook 06's step and a tune axis)
multi-GPU            multigpu (`lab multigpu`: split modes, two GPUs against one), allreduce_bench (NCCL all-reduce at
                     decode sizes, lab/device/run_multigpu.sh)
peer checks          peer_clients (llama-benchy, guidellm, aiperf against the lab's client on one server),
                     peer_verdicts (part: lab ÷ theirs and why), busy_host (busy cores beside the server, placement
                     held equal)
sampling             backend_sampling (what -bs changes in the answers: greedy tokens, seeded draws per sampler),
                     backend_sampling_verdict (part: its statistics, verdict and record)

An experiment imports core, model, predict, serving and measure; pages import experiments (notebook 06 runs tune and
speculative as steps), nothing below does (tests/unit/test_layout.py). An instrument it needs goes into lab.measure,
with no `main`; what a notebook shows of an experiment goes into its page.
"""
