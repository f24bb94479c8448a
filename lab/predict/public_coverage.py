"""Does `lab predict` answer the set-ups people published? Every public row (lab/data/public_speed.yaml) is asked of
lab.predict.card_speed.predict exactly as a user would type it (its card, count, split, backend, OS, engine, quant,
download size, KV type, context, slots, depth, MTP n-max and acceptance), and the answer is sorted: a prediction
(with its error against the published speed), or the reason there is none. A reason that contradicts the row is a
wrong answer, not a missing one: a "does not fit" for a set-up its owner ran. Pure: rows in, answers out;
`.venv/bin/python -m lab predict --validate` prints the summary.
"""
from __future__ import annotations

from lab.core import display
from lab.predict import public_check, public_speed
from lab.predict.card_setup import ask_of, quant_of
from lab.predict.card_speed import Ask


def kind_of_answer(row: public_speed.Row, answer: dict) -> str:
    """"predicted", "does not fit" (wrong: the row ran), or the reason's kind."""
    if answer["predicted_tok_s"] is not None:
        return "predicted"
    why = answer["why_not"] or ""
    return ("does not fit" if why.startswith("does not fit") else "unknown card" if why.startswith("unknown card")
            else "not modelled" if "not modelled" in why else "other")


def coverage(rows: list[public_speed.Row] | None = None) -> dict:
    """Every row of a modelled engine (llama.cpp, vLLM and its forks, asked as vLLM; ik_llama.cpp is reported as not
    asked) asked of
    lab predict: {"rows": [{id, kind, predicted, published, error, why_not}], "asked", "answered", "by_kind":
    {kind: n}, "wrong": [ids of "does not fit"], "answered_summary": public_check.summary of the errors of answered
    llama.cpp rows without an outlier note, not on Windows, drafts not gated by p-min, "vllm_summary": the same over
    the vLLM and fork rows}. A row with neither a file size nor a
    type the lab sizes is "no file size" (a true reason: nothing to size the bytes read per token by)."""
    from lab.predict import card_speed

    rows = public_speed.load() if rows is None else rows
    out = []
    for r in rows:
        if r.engine not in ("llama.cpp", "vLLM", "fork") or not r.all_layers_on_gpu:
            out.append({"id": r.id, "kind": "not asked", "why_not": f"{r.engine}, all layers on the GPU: "
                        f"{r.all_layers_on_gpu} (lab predict models llama.cpp and vLLM, fully offloaded)"})
            continue
        if r.file_gb is None and quant_of(r) is None:
            out.append({"id": r.id, "kind": "no file size", "why_not": f"the row states neither a file size nor a "
                        f"type the lab sizes ({r.quant!r}): no bytes to read per token", "published": r.decode_tok_s,
                        "predicted": None})
            continue
        a = card_speed.predict(ask_of(r, Ask))
        k = kind_of_answer(r, a)
        x = {"id": r.id, "kind": k, "why_not": a["why_not"], "published": r.decode_tok_s, "engine": a["engine"],
             "predicted": a["predicted_tok_s"], "windows": public_speed.is_windows(r),
             "outlier": bool(r.outlier) or bool(r.speculative and r.speculative.p_min)}  # gated drafts: not modelled
        if a["predicted_tok_s"] is not None:
            x["error"] = a["predicted_tok_s"] / r.decode_tok_s - 1
        out.append(x)
    asked = [x for x in out if x["kind"] != "not asked"]
    by_kind: dict = {}
    for x in asked:
        by_kind[x["kind"]] = by_kind.get(x["kind"], 0) + 1
    def fair(engine):
        return public_check.summary([x["error"] for x in asked if "error" in x and not x["outlier"]
                                     and not x["windows"] and x["engine"] == engine])

    return {"rows": out, "asked": len(asked), "answered": by_kind.get("predicted", 0), "by_kind": by_kind,
            "wrong": [x["id"] for x in asked if x["kind"] == "does not fit"],
            "answered_summary": fair("llama.cpp"), "vllm_summary": fair("vllm")}


def text(result: dict) -> str:
    """Lines for --validate: how many rows were answered, the reasons for the rest, every wrong "does not fit"."""
    s = result["answered_summary"]
    lines = [f"coverage: lab predict asked each of the {result['asked']} llama.cpp / vLLM public rows as typed: "
             f"{result['answered']} answered ({result['answered'] / max(result['asked'], 1):.0%}); "
             + ", ".join(f"{k} {n}" for k, n in sorted(result["by_kind"].items()) if k != "predicted")
             + (f"; over the answered llama.cpp rows (outliers, gated drafts and Windows aside, MTP at each row's own "
                f"acceptance) median {s['median_abs_error']:.1%}, max {s['max_abs_error']:.1%}" if s["n"] else "")
             + (f"; vLLM and its forks ({v['n']} rows, the vLLM model lab.predict.vllm_speed, MTP at each row's own "
                f"tokens per step; its depth and one-card rows included): median "
                f"{v['median_abs_error']:.1%}, max {v['max_abs_error']:.1%}" if (v := result["vllm_summary"])["n"]
                else "")]
    for x in result["rows"]:
        if x["kind"] not in ("predicted", "not asked"):
            lines.append(f"  {x['id']}: {x['kind']}: {display.clip(x['why_not'] or '', 160)}")
    return "\n".join(lines)


__all__ = ["kind_of_answer", "coverage", "text"]
