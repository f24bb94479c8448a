"""The speeds a plan-mode run predicts for one stream on the profile's card, plain and with MTP, each with its
uncertainty: the per-token model's error over the published measurements (lab.predict.public_check.check) and the
MTP model's held-out error over the public draft-mtp rows of the card's architecture (public_check.mtp_check). Pure: the
profile and lab/data; nothing here is a measurement, and every row says "predicted".
"""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def _checks() -> tuple[dict, dict]:
    from lab.predict import public_check

    return public_check.check(), public_check.mtp_check()


def _band(tok_s: float, median: float, worst: float) -> str:
    return (f"±{median:.0%} typical ({tok_s * (1 - median):.1f}-{tok_s * (1 + median):.1f}), ±{worst:.0%} worst "
            f"({tok_s * (1 - worst):.1f}-{tok_s * (1 + worst):.1f})")


def rows(profile) -> list[dict]:
    """[{what, tok_s, uncertainty, basis}]: the plain one-stream prediction, then MTP at n-max 1-4 when the public
    rows give the card's acceptance (the card's own rows, else its architecture's). [] for a CPU profile."""
    from lab.predict import mtp_model, profile_speed, roofline

    if profile.gpu_count == 0:
        return []
    plain = profile_speed.roofline_for(profile).get("predicted_decode_tok_s")
    if not plain:
        return []
    speed, mtp = _checks()
    spec = roofline.gpu_spec_for(profile.gpu_name_pattern or profile.name)
    out = [{"what": "one stream, plain (predicted)", "tok_s": round(plain, 1),
            "uncertainty": _band(plain, speed["comparable"]["median_abs_error"], speed["comparable"]["max_abs_error"]),
            "basis": f"per-token model vs {speed['comparable']['n']} published measurements (lab/data/public_speed.yaml)"}]
    if profile.engine == "vllm":  # the vLLM model's own error, on the fork's rows it was not fitted on
        from lab.predict import vllm_speed

        err = vllm_speed.held_out_plain_error(profile.tensor_parallel_size)
        out[0].update(uncertainty=f"±{err:.0%} held out ({plain * (1 - err):.1f}-{plain * (1 + err):.1f})" if err
                      is not None else "not known: no held-out vLLM row at this card count",
                      basis="vLLM model (lab.predict.vllm_speed) vs the fork's published rows (lab/data/public_speed.yaml)")
    if spec is None:
        return out
    if profile.engine == "vllm":
        return out + _vllm_mtp_rows(profile, spec)
    split = "layer" if profile.gpu_count > 1 else "none"
    # the band is the held-out error (each row predicted with verify ms refitted without it), not the in-sample one
    arch_err = (mtp["held_out"]["by_arch"].get(spec["arch"]) or mtp["held_out"])["row"]
    try:
        sweep = mtp_model.sweep(plain, spec["id"], split)
    except KeyError:  # a card public_speed.yaml has no spec for: no acceptance to carry over
        sweep = []
    for x in sweep:
        out.append({"what": f"one stream, MTP n-max {x['n_max']} (predicted)", "tok_s": round(x["tok_s"], 1),
                    "uncertainty": _band(x["tok_s"], arch_err["median_abs_error"], arch_err["max_abs_error"]),
                    "basis": f"{x['tokens_per_step']:.2f} tok/step at acceptance {x['rate']:.2f} ÷ step "
                             f"{x['step_over_plain']:.2f} plain tokens ({x['step_from']} step model); error over "
                             f"{arch_err['n']} public draft-mtp rows ({spec['arch']}, each held out of the fit); flags {mtp_model.flags(x['n_max'])}"})
    return out


def _vllm_mtp_rows(profile, spec: dict) -> list[dict]:
    """A vLLM profile's MTP rows (vLLM's speculative config, k = 1-4) by the lab's vLLM model
    (lab.predict.vllm_speed, as `lab predict --engine vllm --mtp K` and the fork's routes), its band the model's
    held-out error on the fork's plain rows at this card count (vllm_speed.held_out_plain_error)."""
    from lab.predict import links, vllm_speed

    tp = profile.tensor_parallel_size
    link = links.default_link(spec["id"], tp, profile) if tp > 1 else None
    depth = profile.bench_prompt_tokens + profile.bench_output_tokens // 2
    err = vllm_speed.held_out_plain_error(tp)
    out = []
    for k in (1, 2, 3, 4):
        x = vllm_speed.setup_speed(spec["id"], tp, profile.model_quant, depth, "f16" if profile.kv_cache_dtype == "auto"
                                   else profile.kv_cache_dtype, link, k)
        if x["tok_s"] is None:
            continue
        out.append({"what": f"one stream, vLLM MTP {k} speculative tokens (predicted)", "tok_s": round(x["tok_s"], 1),
                    "uncertainty": (f"at least ±{err:.0%} (the plain part's held-out error); the MTP draft cost is "
                                    "fitted on one public row, none held out") if err is not None else "not known",
                    "basis": x["how"]})
    return out
