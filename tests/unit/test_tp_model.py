"""lab.predict.tp_model: the tensor/pipeline-parallel decode model, with exact arithmetic."""
import pytest

from lab.predict import tp_model

NVLINK = tp_model.Link("test NVLink", bandwidth_gb_s=150, latency_us=10)


def test_allreduce_two_gpus_is_latency_plus_bytes_over_bandwidth():
    # n = 2: 2(n-1)/n = 1, so 10 KiB over 150 GB/s + 10 µs
    assert tp_model.allreduce_s(10240, 2, NVLINK) == pytest.approx(10e-6 + 10240 / 150e9)
    assert tp_model.allreduce_s(10240, 1, NVLINK) == 0.0
    # four GPUs move 2 × 3/4 of the message over each link
    assert tp_model.allreduce_s(1e6, 4, NVLINK) == pytest.approx(10e-6 + 1e6 * 1.5 / 150e9)


def test_message_and_count_for_a_27b_hybrid():
    assert tp_model.message_bytes(5120, 1, 2) == 10240
    assert tp_model.message_bytes(5120, 16, 4) == 327680
    assert tp_model.allreduces_per_token(64) == 129


def test_split_time_separates_weights_from_fixed_cost():
    # H200 qwen35 synthetic (FACTS): 90.3 tok/s, 14.86 GB at 4227 GB/s copy → 3.52 ms weights of 11.07 ms
    parts = tp_model.split_time(90.3, 14.86e9, 4227)
    assert parts["t1_ms"] == pytest.approx(11.074, abs=1e-3)
    assert parts["weights_ms"] == pytest.approx(3.5155, abs=1e-3)
    assert parts["fixed_ms"] == pytest.approx(7.559, abs=1e-3)
    # faster than the roofline: nothing left as fixed, never negative
    assert tp_model.split_time(1000, 14.86e9, 4227)["fixed_ms"] == 0


def test_tp_decode_bounds_bracket_and_pay_for_the_link():
    p = tp_model.tp_decode(tok_s_one_gpu=33.0, weights_bytes=16.54e9, bandwidth_gb_s=900, n_layers=64,
                           hidden=5120, link=NVLINK)
    t1 = 1 / 33.0
    w = 16.54e9 / 900e9
    comm = 129 * (10e-6 + 10240 / 150e9)
    assert p.comm_ms == pytest.approx(comm * 1e3)
    assert p.pessimistic_tok_s == pytest.approx(1 / (w / 2 + (t1 - w) + comm))
    assert p.optimistic_tok_s == pytest.approx(1 / (t1 / 2 + comm))
    assert 33.0 < p.pessimistic_tok_s < p.optimistic_tok_s < 66.0
    # a slow link costs more, and no bound beats perfect 2× scaling
    pcie = tp_model.Link("PCIe 3.0 x16", 15.75, 20)
    q = tp_model.tp_decode(tok_s_one_gpu=33.0, weights_bytes=16.54e9, bandwidth_gb_s=900, n_layers=64,
                           hidden=5120, link=pcie)
    assert q.optimistic_tok_s < p.optimistic_tok_s and q.comm_ms > p.comm_ms


def test_pipeline_one_stream_gets_no_faster():
    eth = tp_model.Link("10 GbE", 1.25, 50)
    pp = tp_model.pp_decode(tok_s_one_gpu=33.0, n_stages=2, hidden=5120, link=eth)
    hop = 50e-6 + 10240 / 1.25e9
    assert pp["hop_ms"] == pytest.approx(hop * 1e3)
    assert pp["single_batch_tok_s"] == pytest.approx(1 / (1 / 33.0 + hop))
    assert pp["single_batch_tok_s"] < 33.0
    assert pp["pipelined_ceiling_tok_s"] == pytest.approx(1 / (1 / 33.0 / 2 + hop))


def test_bad_inputs_are_refused_with_the_values():
    with pytest.raises(ValueError, match="bandwidth must be > 0"):
        tp_model.Link("x", 0, 1)
    with pytest.raises(ValueError, match="tok_s"):
        tp_model.split_time(0, 1, 1)
    with pytest.raises(ValueError, match="n_layers"):
        tp_model.allreduces_per_token(0)
