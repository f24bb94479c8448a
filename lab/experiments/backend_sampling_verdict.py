"""lab.experiments.backend_sampling's pure half: the two-sample test of the seeded draws (a chi-square statistic, its
closed-form tail and a permutation p-value), the greedy comparison, where the -bs server's log says each sampler ran,
and the verdict and record over what the measurement found (lab/data/backend_sampling.yaml keeps the lab's words)."""
from __future__ import annotations

import math
from collections import Counter

PERMUTATION_SEED = 20261206  # numpy's generator for the permutation test
PERMUTATIONS = 4000
ALPHA = 0.001  # "differs" only below this p: 0.1 % false alarms per setting, fixed seeds make a run repeatable
MIN_CELL = 10  # tokens drawn fewer times (both servers together) are pooled, so no expected count is below 5


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for a chi-square variable with df degrees of freedom, in closed form: for even df
    exp(-h) * sum_{i < df/2} h^i / i!, for odd df erfc(sqrt(h)) + exp(-h) * sum_{i <= (df-3)/2} h^(i+1/2) / G(i+3/2),
    h = x/2 (Abramowitz & Stegun 26.4.4-5)."""
    if df <= 0 or x <= 0:
        return 1.0
    h = x / 2.0
    if df % 2 == 0:
        term = total = math.exp(-h)
        for i in range(1, df // 2):
            term *= h / i
            total += term
        return min(1.0, total)
    term, total = math.exp(-h) * math.sqrt(h) / math.gamma(1.5), math.erfc(math.sqrt(h))
    for i in range((df - 1) // 2):
        total += term
        term *= h / (i + 1.5)
    return min(1.0, total)


def cells(a: list, b: list, min_count: int = MIN_CELL) -> dict:
    """token -> cell index: tokens drawn >= min_count times in both samples together keep a cell each, the rest
    share one ("other"), folded into the smallest cell when it is itself too small. The map depends on the pooled
    counts only, so the permutation test may reuse it."""
    pooled = Counter(a) + Counter(b)
    kept = sorted((t for t, n in pooled.items() if n >= min_count), key=lambda t: (-pooled[t], str(t)))
    index = {t: i for i, t in enumerate(kept)}
    rest = [t for t in pooled if t not in index]
    other = len(kept) if (sum(pooled[t] for t in rest) >= min_count or not kept) else len(kept) - 1
    return {**index, **{t: other for t in rest}}


def two_sample(a: list, b: list, permutations: int = PERMUTATIONS, seed: int = PERMUTATION_SEED) -> dict:
    """Are `a` and `b` draws from one distribution? The chi-square statistic of the 2 x K table, its asymptotic
    p-value, a permutation p-value (labels shuffled `permutations` times with numpy's generator at `seed`), and the
    total variation distance between the two empirical distributions."""
    import numpy as np

    index = cells(a, b)
    k = max(index.values(), default=0) + 1
    lab = np.array([index[t] for t in [*a, *b]], dtype=np.int64)
    na, n = len(a), len(a) + len(b)
    total = np.bincount(lab, minlength=k).astype(float)
    ea, eb = total * na / n, total * (n - na) / n

    def stat(ca):
        cb = total - ca
        return (((ca - ea) ** 2 / ea) + ((cb - eb) ** 2 / eb)).sum(axis=-1)

    observed = float(stat(np.bincount(lab[:na], minlength=k).astype(float)))
    rng = np.random.default_rng(seed)
    perm = np.argsort(rng.random((permutations, n)), axis=1)[:, :na]
    rows = lab[perm] + k * np.arange(permutations)[:, None]
    shuffled = stat(np.bincount(rows.ravel(), minlength=k * permutations).reshape(permutations, k).astype(float))
    p_perm = (1 + int((shuffled >= observed - 1e-9).sum())) / (1 + permutations)
    ca, cb = Counter(a), Counter(b)
    tv = 0.5 * sum(abs(ca[t] / len(a) - cb[t] / len(b)) for t in set(ca) | set(cb))
    return {"statistic": observed, "df": k - 1, "cells": k, "p_chi2": chi2_sf(observed, k - 1), "p_permutation": p_perm,
            "permutations": permutations, "permutation_seed": seed, "total_variation": tv}


def compare_greedy(host: list[list[int]], backend: list[list[int]]) -> dict:
    """Per prompt: identical token ids or the first position where they part (pure)."""
    rows = []
    for i, (x, y) in enumerate(zip(host, backend)):
        first = next((j for j, (p, q) in enumerate(zip(x, y)) if p != q),
                     None if len(x) == len(y) else min(len(x), len(y)))
        rows.append({"prompt": i, "identical": first is None, "first_difference": first, "tokens": len(x)})
    return {"prompts": len(rows), "identical": sum(r["identical"] for r in rows), "rows": rows}


def chain_path(chain: str) -> str:
    """Where a request's chain ran, from llama-server's "sampler chain:" log line (-lv 4; a name with "+" runs on the
    backend, "?" is a sampler its value switched off, src/llama-sampler.cpp:529-532): "backend" (every sampler that
    does something), "mixed" (a prefix), "host" (none), "" (no line)."""
    names = [n.strip() for n in chain.split("->")[1:] if n.strip() and not n.strip().startswith("?")]
    on = [n.startswith("+") for n in names]
    return "" if not chain else "backend" if on and all(on) else "mixed" if any(on) else "host"


def concurrent_status(g: dict) -> str:
    """The concurrent greedy pass (pure): "identical"; "inconclusive" when batching alone changed the host server's
    output (its 4-stream tokens differ from its own one-stream tokens: float sums in a batch of several sequences,
    with or without -bs), so a difference cannot be put on -bs; "differs" when the host was batch-invariant and
    -bs was not."""
    if g["backend_vs_host"] == g["prompts"]:
        return "identical"
    return "inconclusive" if g["host_vs_one_stream"] < g["prompts"] else "differs"


def verdict(result: dict) -> dict:
    """What the measurement says about recommending -bs (pure): safe only when every model served, greedy was
    identical for every prompt at one stream, no concurrent pass differed where the host was batch-invariant, and
    no setting's distribution differed."""
    served = [m for m in result["models"] if m["status"] == "ok"]
    greedy_ok = bool(served) and all(m["greedy"]["identical"] == m["greedy"]["prompts"] for m in served)
    conc = {m["model"]: concurrent_status(g) for m in served if (g := m.get("greedy_concurrent"))}
    rows = [(m["model"], s) for m in served for s in m["settings"]]
    differs = sorted(f"{m}: {s['setting']}" for m, s in rows if s["verdict"] == "differs" and s["expect"] == "same")
    known = sorted(f"{m}: {s['setting']}" for m, s in rows if s["verdict"] == "differs" and s["expect"] != "same")
    missed = sorted(f"{m}: {s['setting']}" for m, s in rows if s["verdict"] != "differs" and s["expect"] != "same")
    safe = (greedy_ok and "differs" not in conc.values() and not differs and not missed
            and len(served) == len(result["models"]))
    unlike = sorted(f"{m}: {s['setting']}" for m, s in rows if s.get("observed_path") not in ("", None, s.get("path")))
    return {"recommend": safe, "except": known, "greedy_identical": greedy_ok, "concurrent_greedy": conc,
            "distributions_differ": differs, "controls_missed": missed, "paths_unlike_source": unlike,
            "models_served": [m["model"] for m in served]}


def build_record(result: dict) -> dict:
    """records/06_backend_sampling.json: checks, the figures as tables, every draw and token id kept (`result`)."""
    from lab.core.checks import Check

    src = result["source"]
    checks = []
    for m in result["models"]:
        if m["status"] != "ok":
            checks.append(Check(f"-bs compared on {m['model']}", "skip" if m["status"] == "skip" else "fail", None,
                                "both servers serve", m["error"] or "", src["flag"]))
            continue
        lines = m["backend_sampler_log_lines"]
        checks.append(Check(f"{m['model']}: the -bs server set a backend sampler, the other none",
                            "pass" if lines["backend"] > 0 and lines["host"] == 0 else "fail", lines,
                            "backend >= 1, host 0", "", src["context"]))
        g = m["greedy"]
        checks.append(Check(f"{m['model']}: greedy tokens identical with and without -bs",
                            "pass" if g["identical"] == g["prompts"] else "fail", f"{g['identical']}/{g['prompts']}",
                            f"{g['prompts']}/{g['prompts']}", "do not recommend -bs: it changes greedy output",
                            src["prefix"]))
        if (c := m.get("greedy_concurrent")):
            st = concurrent_status(c)
            checks.append(Check(f"{m['model']}: greedy tokens identical at {c['concurrency']} streams",
                                {"identical": "pass", "inconclusive": "warn", "differs": "fail"}[st],
                                f"{c['backend_vs_host']}/{c['prompts']} (host vs its own one stream: "
                                f"{c['host_vs_one_stream']}/{c['prompts']})", f"{c['prompts']}/{c['prompts']}",
                                "inconclusive: batching changes this model's greedy output without -bs too"
                                if st == "inconclusive" else "do not recommend -bs for concurrent serving" if st ==
                                "differs" else "", src["prefix"]))
        for s in m["settings"]:
            seen = s.get("observed_path")
            checks.append(Check(f"{m['model']}: {s['setting']}: the -bs server's chain ran where the source says",
                                "skip" if not seen else "pass" if seen == s["path"] else "fail", s.get("backend_chain"),
                                s["path"], "the pinned source was read wrong: correct lab/data/backend_sampling.yaml",
                                src["prefix"]))
            same = s["expect"] == "same"
            said = "same token distribution" if same else "differs, as the source says (a not-safe entry of the data)"
            checks.append(Check(f"{m['model']}: {s['setting']} [{s['path']}]: {said}",
                                "pass" if (s["verdict"] == "differs") != same else "fail",
                                f"p {s['p_permutation']:.3g} (chi2 {s['statistic']:.2f}, df {s['df']})",
                                f"p {'>=' if same else '<'} {result['alpha']}",
                                "do not recommend -bs with these samplers" if same
                                else "the test missed a difference the source predicts: too few draws?",
                                src["with_backend"] if s["path"] == "backend" else src["without_backend"]))
        for text, n in m.get("backend_log_fallbacks", {}).items():
            checks.append(Check(f"{m['model']}: -bs server logged its fallback ('{text}')", "pass" if n else "fail", n,
                                ">= 1", "", src["grammar_rbudget"]))
    from lab.core import evidence

    greedy_rows = [{"model": m["model"], "prompts": m["greedy"]["prompts"], "identical": m["greedy"]["identical"],
                    "output_tokens": m["greedy"]["output_tokens"],
                    **({f"identical at {c['concurrency']} streams": c["backend_vs_host"]}
                       if (c := m.get("greedy_concurrent")) else {})}
                   for m in result["models"] if m["status"] == "ok"]
    dist_rows = [{"model": m["model"], "setting": s["setting"], "path": s["path"], "ran (log)": s.get("observed_path"),
                  "samples": s["samples"],
                  "cells": s["cells"], "chi2": round(s["statistic"], 2), "df": s["df"], "p_chi2": f"{s['p_chi2']:.3g}",
                  "p_permutation": f"{s['p_permutation']:.3g}", "total_variation": round(s["total_variation"], 3),
                  "same seed, same token": f"{s['paired_same_token']}/{s['paired']}", "verdict": s["verdict"]}
                 for m in result["models"] if m["status"] == "ok" for s in m["settings"]]
    v = verdict(result)
    return {"title": "Backend sampling (-bs): the answers with and without it", "summary": v,
            "checks": [c.to_dict() for c in checks],
            "tables": [evidence.table_entry("Greedy output, token ids compared", greedy_rows),
                       evidence.table_entry("Seeded one-token draws: two-sample chi-square per setting", dist_rows)],
            "backend_sampling": result}


