"""The lab's one decode-speed model (lab.predict.roofline's per-token model) checked against the published rows of
lab/data/public_speed.yaml (lab.predict.public_speed): for every row without speculation that the model can predict,
the prediction and the error (predicted ÷ published − 1), and a summary (n, median and max |error|) over the
budget cards' comparable rows and over all predicted rows. Pure: rows and model in, numbers out.
"""
from __future__ import annotations

from lab.predict import roofline, tp_model
from lab.predict.public_speed import (FAMILY, HIDDEN, N_LAYERS, Row, bytes_per_token, comparable, fitted, is_deep,
                                      link_figures, load, row_key, same_card, tensor_reason, unpredictable_reason)

TARGET_MEDIAN = 0.10  # median |predicted ÷ published − 1| over the budget cards' comparable rows
TARGET_MAX = 0.20


# ---------------------------------------------------------------- the check
def plain_tok_s(row: Row, model: roofline.PerTokenModel | None = None) -> float:
    """The lab's plain (no speculation) prediction for a row's set-up: the per-token model on one card's bandwidth
    (one card or a layer split), tp_model's pessimistic bound for a tensor split."""
    model = model or roofline.per_token_model()
    if row.split_mode == "tensor":
        return tensor_tok_s(bytes_per_token(row), row.gpu_id, row.link, row.gpu_count, model,
                            row_key(row)).pessimistic_tok_s
    g = roofline.gpu_spec(row.gpu_id)
    return model.predict_tok_s(bytes_per_token(row), g["bandwidth_gb_s"], "datasheet", FAMILY, row_key(row))


def summary(errors: list[float]) -> dict:
    """n, median and max of |error| (error = predicted ÷ published − 1)."""
    a = sorted(abs(e) for e in errors)
    n = len(a)
    if not n:
        return {"n": 0, "median_abs_error": None, "max_abs_error": None}
    med = a[n // 2] if n % 2 else (a[n // 2 - 1] + a[n // 2]) / 2
    return {"n": n, "median_abs_error": med, "max_abs_error": a[-1]}


def check(rows: list[Row] | None = None, model: roofline.PerTokenModel | None = None) -> dict:
    """The per-token model against every public row without speculation (pure given rows and model).

    {"rows": [{id, gpu, gpu_id, engine, quant, published, predicted, error, comparable, deep, outlier, source}],
     "skipped": [{id, reason}], "comparable": summary over the budget cards' comparable rows (shallower than
     public_speed.DEEP_TOKENS), "depth": summary over the budget cards' rows at that depth or more (no outlier note:
     checked, not fitted), "all": summary over every predicted row, "targets": {median, max, met}}."""
    rows = load() if rows is None else rows
    model = model or roofline.per_token_model()
    out, skipped = [], []
    for r in rows:
        if r.speculative is not None:
            continue
        why = unpredictable_reason(r)
        if why:
            skipped.append({"id": r.id, "gpu": r.gpu, "reason": why})
            continue
        pred = plain_tok_s(r, model)
        out.append({"id": r.id, "gpu": r.gpu, "gpu_id": r.gpu_id, "gpu_count": r.gpu_count, "engine": r.engine,
                    "build": r.build, "quant": r.quant, "published": r.decode_tok_s, "predicted": pred,
                    "error": pred / r.decode_tok_s - 1, "comparable": comparable(r), "deep": is_deep(r),
                    "budget": bool(roofline.gpu_spec(r.gpu_id)["budget"]), "outlier": r.outlier, "source": r.source})
    comp = summary([x["error"] for x in out if x["comparable"]])
    met = comp["n"] > 0 and comp["median_abs_error"] <= TARGET_MEDIAN and comp["max_abs_error"] <= TARGET_MAX
    return {"rows": out, "skipped": skipped, "comparable": comp, "all": summary([x["error"] for x in out]),
            "depth": summary([x["error"] for x in out if x["deep"] and x["budget"] and not x["outlier"]]),
            "targets": {"median": TARGET_MEDIAN, "max": TARGET_MAX, "met": met}}


def rows_for_gpu(gpu_id: str, result: dict | None = None, n: int = 4) -> list[dict]:
    """The checked rows of one card (by gpu_id; a v100-32g profile also sees the 16 GB V100 rows: same
    bandwidth and architecture), comparable ones first, then by published speed."""
    result = result or check()
    spec = roofline.gpu_spec(gpu_id)
    same = [x for x in result["rows"]
            if x["gpu_id"] == gpu_id or roofline.gpu_spec(x["gpu_id"])["match"] == spec["match"]
            or (roofline.gpu_spec(x["gpu_id"])["arch"] == spec["arch"]
                and roofline.gpu_spec(x["gpu_id"])["bandwidth_gb_s"] == spec["bandwidth_gb_s"])]
    return sorted(same, key=lambda x: (not x["comparable"], x["gpu_id"] != gpu_id, -x["published"]))[:n]


# ---------------------------------------------------------------- llama.cpp -sm tensor: tp_model on the public rows
def tensor_tok_s(bytes_per_tok: float, gpu_id: str, link_id: str, n_gpus: int = 2,
                 model: roofline.PerTokenModel | None = None, key: str | None = None) -> tp_model.TpPrediction:
    """llama.cpp -sm tensor on `n_gpus` cards of `gpu_id` joined by `link_id` (lab/data/gpu_links.yaml):
    the per-token model's one-GPU time split by lab.predict.tp_model.tensor_split_decode. `key`: the calibration
    (public_speed.calibration_key: a card on another backend than its own); default the card's architecture."""
    model = model or roofline.per_token_model()
    g = roofline.gpu_spec(gpu_id)
    return tp_model.tensor_split_decode(
        bytes_per_token=bytes_per_tok, achieved_gb_s=model.fraction_for(key or g["arch"]) * g["bandwidth_gb_s"],
        fixed_ms=model.fixed_for(FAMILY, key or g["arch"]), n_layers=N_LAYERS, hidden=HIDDEN,
        link=tp_model.link_from(link_figures()[link_id]), n_gpus=n_gpus)


def tensor_check(rows: list[Row] | None = None, model: roofline.PerTokenModel | None = None) -> dict:
    """tp_model's -sm tensor prediction (pessimistic bound; the optimistic one beside it) against every public
    llama.cpp tensor-split row without speculation. {"rows": [... comparable (a budget card, no outlier note,
    shallower than public_speed.DEEP_TOKENS), deep, fitted (a point of the per-token fit: an architecture without
    other rows)], "skipped": [{id, reason}], "summary": summary of the comparable rows' pessimistic errors,
    "optimistic": theirs of the optimistic bound, "depth": summary of the rows at depth}."""
    from lab.predict import public_speed

    rows = load() if rows is None else rows
    fit_ids = {p["id"] for p in public_speed.fit_points(rows)}
    out, skipped = [], []
    for r in rows:
        if r.split_mode != "tensor" or r.engine != "llama.cpp" or r.speculative is not None:
            continue
        why = tensor_reason(r)
        if why:
            skipped.append({"id": r.id, "reason": why})
            continue
        tp = tensor_tok_s(bytes_per_token(r), r.gpu_id, r.link, r.gpu_count, model, row_key(r))
        budget = bool(roofline.gpu_spec(r.gpu_id)["budget"])
        out.append({"id": r.id, "gpu": r.gpu, "gpu_id": r.gpu_id, "link": r.link, "published": r.decode_tok_s,
                    "predicted": tp.pessimistic_tok_s, "optimistic": tp.optimistic_tok_s,
                    "error": tp.pessimistic_tok_s / r.decode_tok_s - 1,
                    "optimistic_error": tp.optimistic_tok_s / r.decode_tok_s - 1, "comm_ms": tp.comm_ms,
                    "comparable": budget and fitted(r) and not is_deep(r), "deep": is_deep(r),
                    "budget": budget, "outlier": r.outlier, "fitted": r.id in fit_ids, "source": r.source})
    comp = [x for x in out if x["comparable"]]
    return {"rows": out, "skipped": skipped, "summary": summary([x["error"] for x in comp]),
            "optimistic": summary([x["optimistic_error"] for x in comp]),
            "depth": summary([x["error"] for x in out if x["deep"] and x["budget"] and not x["outlier"]])}


# ---------------------------------------------------------------- MTP: lab.predict.mtp_model on the public rows
def mtp_check(rows: list[Row] | None = None, model: roofline.PerTokenModel | None = None) -> dict:
    """lab.predict.mtp_model against every public llama.cpp draft-mtp row with an n-max, an acceptance and a file
    size: predicted = mtp_model.predict(the row's predicted plain speed (plain_tok_s), its n-max, its own published
    acceptance, its architecture) with lab/data/calibration.yaml mtp_step_model. Also the card's implied step cost
    in plain tokens (published tokens per step ÷ published tok/s × predicted plain tok/s) beside the model's.
    Comparable (the targets and the fit): a budget card, no outlier note, shallower than public_speed.DEEP_TOKENS
    (deeper rows: "depth", as the plain check), drafts not gated by --spec-draft-p-min (the model assumes p-min 0;
    gated rows are predicted as if ungated at their published acceptance and summarised apart under "gated": not
    modelled).

    In sample AND held out: each comparable row predicted again with verify_ms refitted without it (leave one row
    out) and without every row of its card (leave one card out; an architecture left with no rows takes the
    model's fallback, the most expensive fitted one). "refit" is mtp_model.fit on the comparable rows + the H200
    steps: what calibration.yaml should hold.
    {"rows": [...], "skipped": [{id, reason}], "comparable": summary, "all": summary, "gated": summary, "depth",
     "by_arch": {arch: summary},
     "held_out": {"row": summary, "card": summary, "by_arch": {arch: {"row", "card"}}}, "refit", "params",
     "targets": {median, max, met, misses}}."""
    from lab.predict import mtp_model

    rows = load() if rows is None else rows
    model = model or roofline.per_token_model()
    params = mtp_model.step_model()
    out, skipped = [], []
    for r in rows:
        if r.speculative is None or r.engine != "llama.cpp":
            continue
        rate = mtp_model.acceptance_rate(r)
        why = ("no n-max published" if not r.speculative.n_max else "no acceptance published" if rate is None
               else "GPU not in lab/data/calibration.yaml gpus" if r.gpu_id is None
               else "file size not published" if r.file_gb is None
               else "no link (lab/data/gpu_links.yaml id)" if r.split_mode == "tensor" and r.link is None else None)
        if why:
            skipped.append({"id": r.id, "gpu": r.gpu, "reason": why})
            continue
        plain = plain_tok_s(r, model)
        spec = roofline.gpu_spec(r.gpu_id)
        p = mtp_model.predict(plain, r.speculative.n_max, rate, row_key(r), params)
        out.append({"id": r.id, "gpu": r.gpu, "gpu_id": r.gpu_id, "arch": row_key(r), "split": r.split_mode,
                    "build": r.build, "n_max": p["n_max"], "n": p["n_max"], "rate": rate, "plain_predicted": plain,
                    "plain_tok_s": plain, "published": r.decode_tok_s, "tok_s": r.decode_tok_s,
                    "predicted": p["tok_s"], "error": p["tok_s"] / r.decode_tok_s - 1, "step_from": p["step_from"],
                    "step_over_plain": p["step_over_plain"],
                    "implied_step_over_plain": p["tokens_per_step"] * plain / r.decode_tok_s,
                    "p_min": r.speculative.p_min, "gated": mtp_model.is_gated(r), "deep": is_deep(r),
                    "budget": bool(spec["budget"]), "outlier": r.outlier, "source": r.source,
                    "comparable": (fitted(r) and bool(spec["budget"]) and not mtp_model.is_gated(r)
                                   and not is_deep(r))})
    comp_rows = [x for x in out if x["comparable"]]
    fit_set = comp_rows + mtp_model.h200_points()
    for x in comp_rows:
        for key, keep in (("row", lambda y: y is not x),
                          ("card", lambda y: not same_card(y["gpu_id"], x["gpu_id"]))):
            refit = mtp_model.fit([y for y in fit_set if keep(y)])
            x[f"held_out_{key}_error"] = (mtp_model.predict(x["plain_tok_s"], x["n"], x["rate"], x["arch"], refit)
                                          ["tok_s"] / x["published"] - 1)
    comp = summary([x["error"] for x in comp_rows])
    met = comp["n"] > 0 and comp["median_abs_error"] <= TARGET_MEDIAN and comp["max_abs_error"] <= TARGET_MAX
    archs = sorted({x["arch"] for x in comp_rows})

    def held(xs):
        return {k: summary([x[f"held_out_{k}_error"] for x in xs]) for k in ("row", "card")}

    return {"rows": out, "skipped": skipped, "comparable": comp, "all": summary([x["error"] for x in out]),
            "gated": summary([x["error"] for x in out if x["gated"] and x["outlier"] is None]),
            "depth": summary([x["error"] for x in out if x["deep"] and x["budget"] and x["outlier"] is None
                              and not x["gated"]]),
            "by_arch": {a: summary([x["error"] for x in comp_rows if x["arch"] == a]) for a in archs},
            "held_out": {**held(comp_rows), "by_arch": {a: held([x for x in comp_rows if x["arch"] == a])
                                                        for a in archs}},
            "refit": mtp_model.fit(fit_set), "params": params,
            "targets": {"median": TARGET_MEDIAN, "max": TARGET_MAX, "met": met,
                        "misses": [x["id"] for x in comp_rows if abs(x["error"]) > TARGET_MAX]}}


__all__ = ["summary", "check", "plain_tok_s", "mtp_check", "rows_for_gpu", "tensor_tok_s", "tensor_check", "TARGET_MEDIAN", "TARGET_MAX"]
