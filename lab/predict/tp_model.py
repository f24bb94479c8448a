"""What tensor parallelism costs and buys in decode (pure: numbers in, numbers out).

One decode step of a batch of B sequences on one GPU takes

    t1 = W / bw  +  t_fixed

W the weight bytes read, bw the memory bandwidth reached, t_fixed what does not shrink with bandwidth (kernel
launches, the recurrent layers' small kernels, sampling). From one measured single-GPU speed and a bandwidth,
`split_time` separates the two. Under tensor parallelism over n GPUs each GPU reads W/n, and every layer adds
two all-reduces of the hidden state (after attention's output projection and after the MLP's down
projection: Megatron-LM, arXiv 1909.08053 §3), each of hidden × B × element bytes:

    tn = W / (n · bw)  +  t_fixed  +  n_allreduce · (α + S · 2(n-1)/n / link_bw)

α is one all-reduce's fixed latency and link_bw the bus bandwidth (nccl-tests' convention: algorithm
bandwidth × 2(n-1)/n, comparable with the link's per-direction rate). Whether t_fixed shrinks with n is
not known from one point, so `tp_decode` gives two bounds: `pessimistic` keeps t_fixed whole on every GPU,
`optimistic` divides it by n too (as if all of it were bandwidth-like).

Pipeline parallelism (llama.cpp -sm layer, vLLM --pipeline-parallel-size) runs the stages one after another
for one sequence: a single stream gets no faster (each hop adds α + hidden × B × bytes / link_bw), while
several sequences can fill the stages — at most n × the one-GPU aggregate (`pp_decode`).

llama.cpp's `-sm tensor` (`tensor_split_decode`): the one-GPU time comes from the lab's per-token model
(lab.predict.roofline: bytes ÷ achieved bandwidth + a fixed cost per token), then `tp_decode` over the link. Its
pessimistic bound (fixed cost whole on each GPU) is the prediction: against the public two-card tensor-split rows
(lab.predict.public_check.tensor_check) it is within 8 % (median 1.0 %, 6 shallow rows; the two Tesla P40 rows
among them are also what fits Pascal's bandwidth fraction through this bound), the optimistic bound up to +20 %;
each card left out of the fit (lab.predict.public_validate), the P40 is +113 % (Pascal's fraction then unknown).
The pinned llama.cpp reduces in F32 (ggml-cuda.cu: NCCL "reduces as FP32 for small tensors"), hence 4-byte
elements there.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Link:
    """A link between two GPUs or two nodes: bus bandwidth per direction (GB/s) and one all-reduce's fixed
    latency (µs). `source` says where each figure came from (datasheet, spec, measurement, assumption)."""

    name: str
    bandwidth_gb_s: float
    latency_us: float
    source: str = ""

    def __post_init__(self) -> None:
        if self.bandwidth_gb_s <= 0 or self.latency_us < 0:
            raise ValueError(f"link {self.name}: bandwidth must be > 0 and latency ≥ 0, found "
                             f"{self.bandwidth_gb_s} GB/s, {self.latency_us} µs")


def allreduce_s(nbytes: float, n_gpus: int, link: Link) -> float:
    """Seconds for one all-reduce of `nbytes` over n GPUs: α + S · 2(n-1)/n / bus bandwidth (ring)."""
    if n_gpus < 1 or nbytes < 0:
        raise ValueError(f"n_gpus must be ≥ 1 and nbytes ≥ 0, found {n_gpus}, {nbytes}")
    if n_gpus == 1:
        return 0.0
    return link.latency_us * 1e-6 + nbytes * 2 * (n_gpus - 1) / n_gpus / (link.bandwidth_gb_s * 1e9)


def allreduces_per_token(n_layers: int) -> int:
    """Megatron-style TP: two all-reduces per transformer layer (attention output, MLP output), plus one
    for the vocabulary-parallel input embedding."""
    if n_layers < 1:
        raise ValueError(f"n_layers must be ≥ 1, found {n_layers}")
    return 2 * n_layers + 1


def message_bytes(hidden: int, batch: int = 1, element_bytes: int = 2) -> int:
    """One all-reduce's payload in a decode step: the hidden state of every sequence in the batch."""
    if hidden < 1 or batch < 1 or element_bytes < 1:
        raise ValueError(f"hidden, batch and element_bytes must be ≥ 1, found {hidden}, {batch}, {element_bytes}")
    return hidden * batch * element_bytes


def split_time(tok_s_one_gpu: float, weights_bytes: float, bandwidth_gb_s: float) -> dict:
    """Split one GPU's measured per-token time into the weight-reading part (at `bandwidth_gb_s`) and the
    fixed rest. The weight part is capped at the whole time (a speed above the roofline means the bandwidth
    given is too low: then nothing is left as fixed)."""
    if tok_s_one_gpu <= 0 or weights_bytes <= 0 or bandwidth_gb_s <= 0:
        raise ValueError("tok_s, weights_bytes and bandwidth must be > 0, found "
                         f"{tok_s_one_gpu}, {weights_bytes}, {bandwidth_gb_s}")
    t1 = 1.0 / tok_s_one_gpu
    t_weights = min(weights_bytes / (bandwidth_gb_s * 1e9), t1)
    return {"t1_ms": t1 * 1e3, "weights_ms": t_weights * 1e3, "fixed_ms": (t1 - t_weights) * 1e3}


@dataclass(frozen=True)
class TpPrediction:
    n_gpus: int
    batch: int
    one_gpu_tok_s: float
    weights_ms: float
    fixed_ms: float
    comm_ms: float
    allreduces: int
    message_bytes: int
    pessimistic_tok_s: float
    optimistic_tok_s: float
    link: str

    def row(self) -> dict:
        d = asdict(self)
        d["speed-up (pessimistic..optimistic)"] = (f"{self.pessimistic_tok_s / self.one_gpu_tok_s:.2f}.."
                                                   f"{self.optimistic_tok_s / self.one_gpu_tok_s:.2f}")
        return d


def tp_decode(*, tok_s_one_gpu: float, weights_bytes: float, bandwidth_gb_s: float, n_layers: int, hidden: int,
              link: Link, n_gpus: int = 2, batch: int = 1, element_bytes: int = 2) -> TpPrediction:
    """Decode tokens/s of one sequence (summed over `batch` sequences when batch > 1, with tok_s_one_gpu the
    one-GPU aggregate at that batch) under tensor parallelism over `n_gpus`."""
    parts = split_time(tok_s_one_gpu / batch, weights_bytes, bandwidth_gb_s)  # per step of the batch
    n_ar = allreduces_per_token(n_layers)
    msg = message_bytes(hidden, batch, element_bytes)
    comm_s = n_ar * allreduce_s(msg, n_gpus, link)
    w, f = parts["weights_ms"] / 1e3, parts["fixed_ms"] / 1e3
    pess = batch / (w / n_gpus + f + comm_s)
    opt = batch / ((w + f) / n_gpus + comm_s)
    return TpPrediction(n_gpus, batch, tok_s_one_gpu, parts["weights_ms"], parts["fixed_ms"], comm_s * 1e3, n_ar,
                        msg, pess, opt, link.name)


def pp_decode(*, tok_s_one_gpu: float, n_stages: int, hidden: int, link: Link, batch: int = 1,
              element_bytes: int = 2) -> dict:
    """Pipeline parallelism over `n_stages` (GPUs or nodes): one sequence walks the stages in turn, so a step
    costs the one-GPU time plus one hop per stage boundary; with at least n_stages batches in flight the
    stages overlap, up to n_stages × the one-GPU aggregate (minus the hops)."""
    if n_stages < 1:
        raise ValueError(f"n_stages must be ≥ 1, found {n_stages}")
    hop_s = link.latency_us * 1e-6 + message_bytes(hidden, batch, element_bytes) / (link.bandwidth_gb_s * 1e9)
    step_s = batch / tok_s_one_gpu + (n_stages - 1) * hop_s  # one batch through every stage
    stage_s = batch / tok_s_one_gpu / n_stages + (hop_s if n_stages > 1 else 0.0)  # each stage holds 1/n of the layers
    return {"n_stages": n_stages, "batch": batch, "hop_ms": hop_s * 1e3, "link": link.name,
            "single_batch_tok_s": batch / step_s, "pipelined_ceiling_tok_s": batch / stage_s}


def link_from(figure: dict) -> Link:
    """A Link from one entry of lab/data/gpu_links.yaml's links."""
    return Link(figure["name"], figure["bandwidth_gb_s_per_direction"], figure["latency_us"], figure.get("source", ""))


def tensor_split_decode(*, bytes_per_token: float, achieved_gb_s: float, fixed_ms: float, n_layers: int, hidden: int,
                        link: Link, n_gpus: int = 2, element_bytes: int = 4) -> TpPrediction:
    """llama.cpp -sm tensor, one stream: the per-token model's one-GPU time (bytes ÷ achieved bandwidth + fixed
    cost) split by `tp_decode`; use `pessimistic_tok_s` as the prediction (see the module docstring)."""
    if achieved_gb_s <= 0 or fixed_ms < 0:
        raise ValueError(f"achieved bandwidth must be > 0 and fixed cost ≥ 0, found {achieved_gb_s}, {fixed_ms}")
    one = 1.0 / (bytes_per_token / (achieved_gb_s * 1e9) + fixed_ms / 1e3)
    return tp_decode(tok_s_one_gpu=one, weights_bytes=bytes_per_token, bandwidth_gb_s=achieved_gb_s,
                     n_layers=n_layers, hidden=hidden, link=link, n_gpus=n_gpus, element_bytes=element_bytes)
