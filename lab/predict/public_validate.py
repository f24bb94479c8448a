"""Held-out errors of the lab's speed model on the public rows (lab/data/public_speed.yaml): leave one card out (LOCO)
and leave one architecture out (LOAO), beside the in-sample errors, for four groups of rows on the budget cards
without an outlier note:

* plain:  one card or a layer split, no speculation, shallower than public_speed.DEEP_TOKENS (lab.predict.public_check
  .check's comparable rows);
* mtp:    llama.cpp draft-mtp with a published n-max and acceptance, drafts not gated by --spec-draft-p-min, shallow
          (public_check.mtp_check's comparable rows);
* tensor: llama.cpp -sm tensor without speculation, shallow (public_check.tensor_check's comparable rows);
* depth:  any of the three decoded at DEEP_TOKENS or more (checked, never fitted: public_speed's docstring).

Rows with gated drafts (p-min > 0) are reported apart ("p-min"): the MTP step model assumes p-min 0. Rows measured
on Windows are reported apart ("windows"): the published Windows/Linux pairs disagree in sign, so the OS is not
modelled. Rows kept apart (public_speed.Row.heldout, on any card) are never fitted: "kept apart" is the model's error
on rows it did not see, judged against TARGET_KEPT_MEDIAN / TARGET_KEPT_MAX (the criterion for rows the fit has not seen).

A fold removes every row of the held-out card (same_card: the same architecture and datasheet bandwidth, so the 16
and 32 GB V100s are one card), architecture (both backends of an AMD one) or llama.cpp backend (cuda, rocm =
HIP, vulkan: LOBO), of every kind, and refits with the lab's own fit functions on what is
left: lab.predict.roofline.fit_model (the per-token model: fraction per architecture, the shared fixed cost, Hopper's
own from the lab's H100 + H200 pair) and lab.predict.mtp_model.fit (verify ms per architecture, on the MTP rows left +
the lab's H200 steps, at the refit's fixed cost of each architecture). The held-out rows are then predicted with that refit exactly as public_check predicts them in sample
(public_check.plain_tok_s, mtp_model.predict at the row's own published acceptance). An architecture left with no
rows takes the models' fallbacks (the median fitted fraction, the most expensive fitted verify ms): so a card alone
in its architecture (the V100s, the P40, the 2080 Ti) has LOCO = LOAO, the fallback's error. Pure: rows in, numbers
out; `.venv/bin/python -m lab predict --validate` prints it.
"""
from __future__ import annotations

import functools

from lab.predict import mtp_model, public_check, public_speed, roofline
from lab.predict.public_speed import FAMILY, Row

GROUPS = ("plain", "mtp", "tensor", "depth")
APART = ("p-min", "windows", "kept apart")  # reported beside the groups, never in their targets
FOLDS = ("loco", "loao", "lobo")  # card, architecture, backend left out
TARGET_LOCO_MEDIAN = 0.08  # the held-out targets asked of the model on the budget cards (plain, mtp, tensor)
TARGET_LOCO_MAX = 0.25
TARGET_KEPT_MEDIAN = 0.10  # rows the fit never saw, any card, Windows aside
TARGET_KEPT_MAX = 0.30


# ---------------------------------------------------------------- which rows, which group
def _spec(row: Row) -> dict:
    return public_speed.gpu_specs()[row.gpu_id]


def card_key(gpu_id: str) -> str:
    """One card for LOCO: the cards same_card joins (architecture and datasheet bandwidth) share a key."""
    g = public_speed.gpu_specs()[gpu_id]
    return f"{g['arch']}-{g['bandwidth_gb_s']:g}"


def kind(row: Row) -> str | None:
    """How the row is predicted: "plain" (per-token model on one card), "tensor" (tp_model), "mtp" (mtp_model on
    either); None when the model cannot predict it (public_check's reasons)."""
    if row.engine != "llama.cpp" or row.gpu_id is None or row.file_gb is None or not row.all_layers_on_gpu:
        return None
    if row.split_mode == "tensor" and row.link is None:
        return None
    if row.speculative is not None:
        return "mtp" if mtp_model.is_draft_mtp(row) and mtp_model.acceptance_rate(row) is not None else None
    return "tensor" if row.split_mode == "tensor" else "plain"


def backend_of(row: Row) -> str:
    """The llama.cpp backend a row ran on: as stated, else its card's own (calibration.yaml gpus `backend`)."""
    return row.backend or _spec(row).get("backend", "cuda")


def group(row: Row) -> str | None:
    """The row's group (GROUPS, or one of APART: "p-min" for gated drafts, "windows", "kept apart"); None when it
    counts nowhere (not predictable, an outlier note, not a budget card unless kept apart)."""
    k = kind(row)
    if k is None or row.outlier is not None:
        return None
    if public_speed.is_windows(row):
        return "windows"
    if row.heldout:
        return "kept apart"
    if not _spec(row)["budget"]:
        return None
    if k == "mtp" and mtp_model.is_gated(row):
        return "p-min"
    return "depth" if public_speed.is_deep(row) else k


# ---------------------------------------------------------------- fit and predict with the lab's own functions
def mtp_points(rows: list[Row], model: roofline.PerTokenModel) -> list[dict]:
    """mtp_model.fit's points: the MTP group's rows among `rows` at `model`'s plain speed, + the H200's steps."""
    pts = []
    for r in rows:
        if group(r) == "mtp":
            pts.append({"id": r.id, "arch": public_speed.row_key(r), "gpu_id": r.gpu_id, "n": r.speculative.n_max,
                        "rate": mtp_model.acceptance_rate(r), "plain_tok_s": public_check.plain_tok_s(r, model),
                        "tok_s": r.decode_tok_s})
    return pts + mtp_model.h200_points()


def refit(rows: list[Row]) -> tuple[roofline.PerTokenModel, dict]:
    """(per-token model, MTP step params) fitted on `rows` by roofline.fit_model and mtp_model.fit."""
    model = roofline.fit_model(rows)
    return model, mtp_model.fit(mtp_points(rows, model), model.fixed_by_arch(FAMILY))


def predict(row: Row, model: roofline.PerTokenModel, params: dict) -> float:
    """The row's tok/s by `model` and `params`, as public_check predicts it."""
    plain = public_check.plain_tok_s(row, model)
    if kind(row) != "mtp":
        return plain
    return mtp_model.predict(plain, row.speculative.n_max, mtp_model.acceptance_rate(row), public_speed.row_key(row),
                             params)["tok_s"]


def _fold_note(model: roofline.PerTokenModel, params: dict, arch: str) -> str:
    frac = (f"fraction {model.fraction_by_arch[arch]:.2f}" if arch in model.fraction_by_arch
            else f"fraction FALLBACK {model.default_fraction:.2f}")
    verify, basis = mtp_model.verify_ms_for(arch, params)
    return f"{frac}, verify {verify:.2f} ms" + ("" if basis == arch else " FALLBACK") + \
        f", fixed {model.fixed_for(FAMILY, arch):.2f} ms"


# ---------------------------------------------------------------- the table
@functools.lru_cache(maxsize=2)
def _validate_cached(ids: tuple) -> dict:
    rows = [r for r in public_speed.load() if r.id in set(ids)]
    return _validate(rows)


def validate_cached_clear() -> None:
    """Forget the cached validation (lab.predict.user_rows: an owner's rows change the dataset it was run on)."""
    _validate_cached.cache_clear()


def validate(rows: list[Row] | None = None) -> dict:
    """In-sample, LOCO and LOAO errors (predicted ÷ published − 1) of every row in a group:
    {"groups": {group: {"in_sample", "loco", "loao": public_check.summary}}, "rows": [{id, group, card, arch,
    published, in_sample, loco, loao (predicted tok/s), in_sample_error, loco_error, loao_error, loco_fold,
    loao_fold}], "by_card": {card: {"in_sample", "loco"}} over the plain, MTP and tensor rows, "targets": {median,
    max, met, by_group: {group: met}, misses}, "fit": the in-sample model's how}.
    In sample is the lab's published model (roofline.per_token_model, calibration.yaml mtp_step_model)."""
    if rows is None:
        return _validate_cached(tuple(r.id for r in public_speed.load()))
    return _validate(rows)


def _validate(rows: list[Row]) -> dict:
    members = [(r, group(r)) for r in rows if group(r) is not None]
    base = (roofline.per_token_model(), mtp_model.step_model())
    out = [{"id": r.id, "group": g, "card": card_key(r.gpu_id), "gpu_id": r.gpu_id, "arch": _spec(r)["arch"],
            "backend": backend_of(r), "key": public_speed.row_key(r), "published": r.decode_tok_s,
            "in_sample": predict(r, *base)} for r, g in members]
    names = {}
    for x in out:  # a card by the GPU table's ids its rows use ("v100-32g/v100-16g": one card for decode)
        names.setdefault(x["card"], set()).add(x["gpu_id"])
    for x in out:
        x["card"] = "/".join(sorted(names[x["card"]]))
    by_id = {x["id"]: x for x in out}
    for fold, key in (("loco", lambda r: card_key(r.gpu_id)), ("loao", lambda r: _spec(r)["arch"]),
                      ("lobo", backend_of)):
        for k in sorted({key(r) for r, _ in members}):
            kept = [r for r in rows if r.gpu_id is None or key(r) != k]
            try:
                model, params = refit(kept)
            except ValueError as exc:  # too few rows left to fit (every CUDA row out): no figure, and why
                for r, _ in members:
                    if key(r) == k:
                        by_id[r.id][fold], by_id[r.id][f"{fold}_fold"] = None, f"{k} left out: no refit ({exc})"
                continue
            for r, _ in members:
                if key(r) == k:
                    by_id[r.id][fold] = predict(r, model, params)
                    left = by_id[r.id]["card"] if fold == "loco" else k
                    by_id[r.id][f"{fold}_fold"] = f"{left} left out: " + _fold_note(model, params,
                                                                                     public_speed.row_key(r))
    for x in out:
        for f in ("in_sample",) + FOLDS:
            x[f"{f}_error"] = None if x[f] is None else x[f] / x["published"] - 1
    groups = {g: {f: public_check.summary([x[f"{f}_error"] for x in out if x["group"] == g
                                           and x[f"{f}_error"] is not None])
                  for f in ("in_sample",) + FOLDS} for g in GROUPS + APART}
    kept_apart = groups["kept apart"]["in_sample"]
    by_group = {g: groups[g]["loco"]["n"] > 0 and groups[g]["loco"]["median_abs_error"] <= TARGET_LOCO_MEDIAN
                and groups[g]["loco"]["max_abs_error"] <= TARGET_LOCO_MAX for g in ("plain", "mtp", "tensor")}
    misses = sorted((x for x in out if x["group"] in ("plain", "mtp", "tensor")
                     and abs(x["loco_error"]) > TARGET_LOCO_MAX), key=lambda x: -abs(x["loco_error"]))
    target_rows = [x for x in out if x["group"] in ("plain", "mtp", "tensor")]
    by_card = {c: {f: public_check.summary([x[f"{f}_error"] for x in target_rows if x["card"] == c])
                   for f in ("in_sample", "loco")} for c in sorted({x["card"] for x in target_rows})}
    return {"groups": groups, "rows": out, "fit": base[0].how, "by_card": by_card,
            "targets": {"median": TARGET_LOCO_MEDIAN, "max": TARGET_LOCO_MAX, "met": all(by_group.values()),
                        "by_group": by_group, "misses": [x["id"] for x in misses],
                        "kept_apart": {"median": TARGET_KEPT_MEDIAN, "max": TARGET_KEPT_MAX, **kept_apart,
                                       "met": bool(kept_apart["n"]) and kept_apart["median_abs_error"] <= TARGET_KEPT_MEDIAN
                                       and kept_apart["max_abs_error"] <= TARGET_KEPT_MAX}}}


def _pct(s: dict) -> str:
    return "-" if not s["n"] else f"{s['median_abs_error']:5.1%} / {s['max_abs_error']:5.1%}"


def table_rows(result: dict) -> list[dict]:
    """One line per group for a text table: n and median / max |error| in sample, LOCO and LOAO."""
    labels = {"plain": "plain", "mtp": "MTP", "tensor": "tensor split", "depth": "depth (8,192+ tokens)",
              "p-min": "p-min > 0 (not modelled)", "windows": "Windows (not modelled)",
              "kept apart": "kept apart (never fitted)"}
    return [{"group": labels[g], "n": str(s["in_sample"]["n"]), "in sample": _pct(s["in_sample"]),
             "card out": _pct(s["loco"]), "arch out": _pct(s["loao"]), "backend out": _pct(s["lobo"])}
            for g, s in result["groups"].items() if s["in_sample"]["n"]]


def _kept_line(k: dict) -> str:
    if not k["n"]:
        return "kept apart: no rows"
    return (f"kept apart (rows the fit never saw, any card, Windows aside): {k['n']} rows, median "
            f"{k['median_abs_error']:.1%}, max {k['max_abs_error']:.1%} (target median <= {k['median']:.0%}, max <= "
            f"{k['max']:.0%}: {'met' if k['met'] else 'NOT met'})")


def text(result: dict, worst: int = 8) -> str:
    """The table, the targets, the worst held-out rows with the fold's terms (FALLBACK where a term had no rows)."""
    from lab.core import cli

    t = result["targets"]
    lines = [cli.text_table(table_rows(result)), "",
             f"targets (LOCO, budget cards, plain / MTP / tensor split): median <= {t['median']:.0%}, max <= "
             f"{t['max']:.0%}: " + ", ".join(f"{g} {'met' if ok else 'NOT met'}" for g, ok in t["by_group"].items()),
             _kept_line(t["kept_apart"]),
             "median / max |predicted / published - 1|; \"in sample\" is the lab's fit (for rows kept apart: a fit "
             "that never saw them); card / arch / backend out: refitted without every row of the row's card, "
             "architecture (both backends), or llama.cpp backend (cuda, rocm, vulkan)",
             f"in sample: {result['fit']}", "",
             "LOCO by card (plain, MTP, tensor split rows; median / max): " + "; ".join(
                 f"{c} {s['loco']['n']} rows {_pct(s['loco']).replace(' ', '')}" for c, s in result["by_card"].items()),
             "", f"worst rows held out (LOCO; p-min rows aside; of {len(result['rows'])}):"]
    ranked = sorted((x for x in result["rows"] if x["group"] not in APART), key=lambda x: -abs(x["loco_error"]))[:worst]
    for x in ranked:
        lines.append(f"  {x['id']} [{x['group']}]: published {x['published']:g}, LOCO {x['loco']:.1f} "
                     f"({x['loco_error']:+.0%}), in sample {x['in_sample']:.1f} ({x['in_sample_error']:+.0%})")
        lines.append(f"      {x['loco_fold']}")
    apart = [x for x in result["rows"] if x["group"] == "kept apart"]
    if apart:
        lines += ["", "rows kept apart (never fitted), predicted by the lab's fit:"]
        lines += [f"  {x['id']} ({x['card']}, {x['backend']}): published {x['published']:g}, predicted "
                  f"{x['in_sample']:.1f} ({x['in_sample_error']:+.0%})" for x in apart]
    win = [x for x in result["rows"] if x["group"] == "windows"]
    if win:
        lines += ["", "Windows rows (not modelled; predicted as Linux): " + "; ".join(
            f"{x['id']} {x['in_sample_error']:+.0%}" for x in win)]
    lines += ["", "depth: the model reads K and V of the 16 full-attention layers at the row's KV type and the fixed "
              "recurrent state, nothing else; rows at 8,192+ tokens decode slower than those bytes explain "
              "(attention's work over every cached token is not modelled), so they are checked, not fitted.",
              "p-min: gated drafts (--spec-draft-p-min > 0) are predicted as if ungated at their published "
              "acceptance; the step model has no term for the gate."]
    return cli.fit("\n".join(lines))


__all__ = ["validate_cached_clear", "GROUPS", "APART", "FOLDS", "TARGET_LOCO_MEDIAN", "TARGET_LOCO_MAX", "TARGET_KEPT_MEDIAN",
           "TARGET_KEPT_MAX", "backend_of", "card_key", "kind", "group", "mtp_points", "refit",
           "predict", "validate", "table_rows", "text"]
