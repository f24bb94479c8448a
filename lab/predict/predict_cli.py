"""`.venv/bin/python -m lab predict`: what will my card do? Decode tok/s of Qwen3.8-27B for a card as people write it ("Tesla
P40", "3090", "V100 32GB"), one set-up on the command line or many in a TSV file, by the lab's one speed model
(lab.predict.card_speed: the functions `lab plan` uses for a profile's card).

Exit status (lab.core.exit_codes): 0 every row has a prediction; 1 a row has none (its why_not says why: an unknown
card, does not fit, a bad cell), or the file or profile given cannot be read; 2 bad usage (a flag's value).
"""
from __future__ import annotations

import json
import sys

from lab.core import cli, display, exit_codes
from lab.predict import card_speed, rows_file
from lab.predict.card_speed import Ask

# The TSV's columns and the type of each cell (an empty cell = not given); other columns are refused (lab.predict.
# rows_file: --ignore-unknown, or a `comment` column).
COLUMNS = {"gpu": str, "gpus": int, "split": str, "engine": str, "weights_gb": float, "kv": str, "context": int,
           "depth": int, "spec": str, "n_max": int, "p_min": float, "acceptance": float,
           "quant": str, "link": str, "slots": int,  # these three and the next: optional, beyond the documented twelve
           "backend": str, "os": str, "gpu_util": float}
REQUIRED = ("gpu",)
EXAMPLES = ('.venv/bin/python -m lab predict --gpu "Tesla P40" --gpus 2 --split tensor --weights-gb 17.9 \\\n'
            "      --kv q4_0 --context 131072 --depth 32768 --mtp 3 --p-min 0.75 --acceptance 0.7",
            ".venv/bin/python -m lab predict --gpu 3090", '.venv/bin/python -m lab predict --gpu "V100 32GB" --json',
            ".venv/bin/python -m lab predict --rows mine.tsv --json",
            ".venv/bin/python -m lab predict --profile v100-32g-x2-nvlink --depth 32768",
            ".venv/bin/python -m lab predict --list-gpus", ".venv/bin/python -m lab predict --validate --json",
            '.venv/bin/python -m lab predict --gpu "R9700" --backend vulkan --context 262144 --kv q4_0 \\\n'
            "      --quant UD-Q4_K_XL",
            ".venv/bin/python -m lab predict --gpu H200 --rows-dataset mine.json  # lab share RUN --json")
DESCRIPTION = (
    "What will my card do? Single-stream decode tok/s of Qwen3.8-27B (llama.cpp by default, or vLLM) on a card as "
    "people write it, by the lab's one speed model - the functions `lab plan` uses for a profile's card (per-token "
    "model, memory plan, -sm tensor over the link, MTP step model) - with the route, the roofline ceiling, the model "
    "terms and the calibration used (FALLBACK when the card's architecture has no rows), or why not (unknown card, "
    "does not fit). --rows FILE.tsv: one set-up per line, a header row with the columns gpu gpus split engine "
    "weights_gb kv context depth spec n_max p_min acceptance (and quant, link, slots, backend, os, gpu_util); an empty "
    "cell is not given, the flags fill it, another column is refused (--ignore-unknown skips it; a `comment` column "
    "holds notes). weights_gb: the GGUF as listed for download (GB, MTP block "
    "included; default: the lab's Q4_K_M mix). Inputs the model has no term for (p_min; depth beyond the KV it "
    "reads) are reported as notes, not modelled. Exit 1 when a row has no prediction. --validate: how the model "
    "fares on the public rows held out of its fit - each card, then each architecture, left out and the fit redone "
    "(lab.predict.public_validate) - beside the in-sample errors, for plain, MTP, tensor-split and deep rows.")


def build_parser():
    ap = cli.parser(".venv/bin/python -m lab predict", DESCRIPTION, *EXAMPLES)
    ap.add_argument("--gpu", help="the card as people write it: \"Tesla P40\", P40, 3090, \"RTX 3090\", \"V100 32GB\", "
                                  "v100-sxm2-32gb (--list-gpus: the known ones)")
    ap.add_argument("--gpus", type=int, help="how many cards (default 1)")
    ap.add_argument("--split", choices=card_speed.SPLITS, help="llama.cpp -sm (default layer for several cards; vLLM: "
                                                               "tensor = tensor parallel, layer = pipeline parallel)")
    ap.add_argument("--engine", choices=card_speed.ENGINES, help="default llama.cpp")
    ap.add_argument("--weights-gb", type=float, help="the GGUF's download size in GB (1e9 bytes), MTP block included")
    ap.add_argument("--quant", help="the weights' type, sizing the MTP block and token embedding inside weights_gb "
                                    "(default Q4_K_M; vLLM AWQ-INT4)")
    ap.add_argument("--kv", help="KV cache type: f16 (default), bf16, q8_0, q4_0 (vLLM: auto, fp8 ...)")
    ap.add_argument("--context", type=int, help=f"-c, the total over the slots (default {card_speed.DEFAULT_CONTEXT})")
    ap.add_argument("--slots", type=int, help="-np, parallel slots (default 1)")
    ap.add_argument("--depth", type=int, help="tokens in the sequence while it decodes (default "
                                              f"{card_speed.default_depth()}, as lab plan; a --profile: its benchmark's)")
    ap.add_argument("--spec", choices=card_speed.SPECS, help="speculative decoding (default none; draft-mtp when "
                                                             "--n-max or --acceptance is given)")
    ap.add_argument("--n-max", type=int, help="--spec-draft-n-max (default: the predicted best of 1-4)")
    ap.add_argument("--mtp", type=int, metavar="N", help="short for --spec draft-mtp --n-max N")
    ap.add_argument("--p-min", type=float, help="--spec-draft-p-min: reported, not modelled")
    ap.add_argument("--acceptance", type=float, help="draft acceptance rate, accepted / drafted (default: the public "
                                                     "rows' for the card)")
    ap.add_argument("--link", help=f"-sm tensor: the link between the cards, an id of lab/data/gpu_links.yaml "
                                   f"(default {card_speed.DEFAULT_LINK})")
    ap.add_argument("--backend", choices=card_speed.BACKENDS, help="llama.cpp's backend (default the card's own: cuda "
                                                                   "for NVIDIA, rocm for AMD; vulkan is calibrated apart)")
    ap.add_argument("--os", choices=card_speed.SYSTEMS, help="windows: reported with the published Windows/Linux "
                                                             "pairs, not modelled (predicted as Linux)")
    ap.add_argument("--gpu-util", type=float, help="vLLM --gpu-memory-utilization (default 0.9)")
    ap.add_argument("--rows-dataset", action="append", metavar="FILE", help="your own rows in the public-row format "
                    "(YAML/JSON/TSV, as `.venv/bin/python -m lab share RUN_DIR` prints; or a folder of them): added to the "
                    "public rows and the speed model refitted before answering; repeatable")
    ap.add_argument("--profile", help="fill what is not given from a profile (name in params/ or a path)")
    ap.add_argument("--rows", metavar="FILE.tsv", help="many set-ups, one per line (see above)")
    ap.add_argument("--ignore-unknown", action="store_true", help="--rows: skip columns the model does not know "
                                                                  "instead of refusing the file")
    ap.add_argument("--json", action="store_true", help="a JSON list, one object per row, in order")
    ap.add_argument("--list-gpus", action="store_true", help="the cards the lab knows, with their calibration")
    ap.add_argument("--validate", action="store_true", help="held-out errors on the public rows: leave one card out "
                                                             "and leave one architecture out, beside in sample")
    return ap


def ask_from_args(args) -> Ask:
    spec, n_max = args.spec, args.n_max
    if args.mtp is not None:
        spec, n_max = spec or "draft-mtp", n_max if n_max is not None else args.mtp
    return Ask(gpu=args.gpu, gpus=args.gpus, split=args.split, engine=args.engine, weights_gb=args.weights_gb,
               quant=args.quant, kv=args.kv, context=args.context, slots=args.slots, depth=args.depth, spec=spec,
               n_max=n_max, p_min=args.p_min, acceptance=args.acceptance, link=args.link, backend=args.backend,
               os=args.os, gpu_util=args.gpu_util)


def merged(flags: Ask, values: dict) -> Ask:
    """A row's cells over the flags (a cell wins; an empty cell takes the flag)."""
    base = {k: v for k, v in vars(flags).items() if v is not None}
    return Ask(**{**base, **values})


def _rounded(x):
    if isinstance(x, float):
        return round(x, 3)
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    return x


def _num(x, fmt: str = ".1f") -> str:
    return "-" if x is None else format(x, fmt)


def text(results: list[dict]) -> str:
    """The answers as a table within 100 columns, then each row's route, model terms, why not and notes."""
    table = [{"#": str(r["row"]), "card": display.clip(r["card_id"] or str(r["gpu"]), 16), "n": _num(r["gpus"], "d"),
              "split": r["split"] or "-", "KV": r["kv"] or "-", "context": _num(r["context"], ","),
              "depth": _num(r["depth"], ","), "spec": (r["spec"] or "-") + (f" {r['n_max']}" if r["n_max"] else ""),
              "tok/s": _num(r["predicted_tok_s"]) if not r["why_not"] else "no",
              "plain ceiling": _num(r["ceiling_tok_s"], ".0f")} for r in results]
    lines = [cli.text_table(table), ""]
    for r in results:
        m = r["model"]
        lines.append(f"[{r['row']}] " + (f"{r['route']}" if r["route"] else str(r["gpu"])))
        if r["why_not"]:
            lines.append(f"    why not: {r['why_not']}")
        if r["plain_tok_s"] is not None:
            mtp = m.get("mtp")
            lines.append(f"    predicted {_num(r['predicted_tok_s'])} tok/s" + (
                f" (plain {r['plain_tok_s']:.1f} x {mtp['tokens_per_step']:.2f} tok/step at acceptance "
                f"{mtp['acceptance_rate']:.2f} / step {mtp['step_over_plain']:.2f} plain tokens)" if mtp else "")
                + f"; ceiling {_num(r['ceiling_tok_s'])} tok/s = {r['ceiling']}")
        if "bandwidth_fraction" in m:
            lines.append(f"    model: {m['bytes_per_token_gb']:.2f} GB/token ({m['weights_read_gb']:.2f} weights + "
                         f"{m['kv_and_state_read_gb']:.2f} KV and state) at {m['bandwidth_fraction']:.2f} of "
                         f"{m['bandwidth_gb_s_per_card']:g} GB/s + {m['fixed_ms_per_token']:.2f} ms/token; fraction "
                         f"from {m['fraction_from']}")
        elif m.get("calibration"):
            lines.append(f"    model: {m['bytes_per_token_gb']:.2f} GB/token; calibration {m['calibration']}")
        if "comm_ms_per_token" in m:
            bound = f" (optimistic bound {m['optimistic_tok_s']:.1f} tok/s)" if "optimistic_tok_s" in m else ""
            lines.append(f"    tensor split over {m['link']}: {m['comm_ms_per_token']:.2f} ms/token of all-reduces{bound}")
        if m.get("vllm"):
            lines.append(f"    vLLM model: {m['vllm']}")
        if m.get("mtp"):
            x = m["mtp"]
            lines.append(f"    mtp: n-max {x['n_max']} ({x['n_max_from']}); acceptance {x['acceptance_rate']:.2f} "
                         f"({x['acceptance_from']}); verify ms: {x['verify_ms_from']}")
        if r["memory"]:
            mem = r["memory"]
            lines.append(f"    memory per card: {mem['per_card_gib']:.2f} of {mem['budget_gib']:.2f} GiB "
                         f"({'fits' if mem['fits'] else 'tight' if mem.get('tight') else 'does NOT fit'}; "
                         f"{mem['max_context_per_slot']:,} tokens per "
                         "slot would fit)")
        lines += [f"    note: {note}" for note in r["notes"]]
    return cli.fit("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if not args.rows_dataset:
        return answer(args)
    from lab.predict import public_speed, roofline, user_rows

    try:
        mine = [r for path in args.rows_dataset for r in user_rows.read(path)]
    except (user_rows.RowsDatasetError, public_speed.PublicSpeedError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exit_codes.PROBLEM
    before = roofline.per_token_model()
    with user_rows.using(mine):
        try:
            summary = user_rows.refit_summary(mine, before)
        except (ValueError, public_speed.PublicSpeedError) as exc:
            print(f"error: your rows cannot be fitted: {exc}", file=sys.stderr)
            return exit_codes.PROBLEM
        print("\n".join(summary), file=sys.stderr)
        return answer(args)


def answer(args) -> int:
    """The answer to parsed arguments (--list-gpus, --validate, or the rows), on the fit in effect."""
    if args.list_gpus:
        rows = card_speed.card_rows()
        print(json.dumps(rows, indent=1) if args.json else cli.text_table(rows))
        return exit_codes.OK
    if args.validate:
        from lab.predict import public_validate, vllm_speed

        from lab.predict import public_coverage

        result, covered = public_validate.validate(), public_coverage.coverage()
        vllm = vllm_speed.check()  # the vLLM model on the fork's rows, each held out of its fit
        print(json.dumps(_rounded({**result, "coverage": covered, "vllm": vllm}), indent=1, ensure_ascii=False,
                         allow_nan=True)
              if args.json else public_validate.text(result) + "\n\n" + cli.fit(public_coverage.text(covered))
              + "\n\n" + cli.fit(vllm_speed.check_text(vllm)))
        return exit_codes.OK
    base = None
    if args.profile:
        from lab.core import profiles

        try:
            base = profiles.load(args.profile)
        except profiles.ProfileError as exc:  # an invalid or unknown profile: a found problem, as in lab plan
            print(f"invalid {exc}", file=sys.stderr)
            return exit_codes.PROBLEM
    flags = ask_from_args(args)
    if args.rows:
        try:
            rows = rows_file.read_rows(args.rows, COLUMNS, REQUIRED, args.ignore_unknown)
        except (rows_file.RowsError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return exit_codes.PROBLEM
        results = []
        for i, (_, values, bad) in enumerate(rows, 1):
            r = card_speed.predict(merged(flags, values), base, i)
            # a bad cell is the row's answer: what the other cells gave stays shown, without a prediction
            results.append({**r, "predicted_tok_s": None, "why_not": bad} if bad else r)
    else:
        if flags.gpu is None and base is None:
            print("error: give --gpu CARD (or --profile NAME, or --rows FILE.tsv); `.venv/bin/python -m lab predict --list-gpus` "
                  "lists the cards", file=sys.stderr)
            return exit_codes.USAGE
        results = [card_speed.predict(flags, base)]
        if results[0]["card"] is None and not args.json:  # no card: one clear line instead of an empty table
            print(f"error: {results[0]['why_not']}", file=sys.stderr)
            return exit_codes.PROBLEM
    print(json.dumps(_rounded(results), indent=1, ensure_ascii=False, allow_nan=False) if args.json else text(results))
    return exit_codes.PROBLEM if any(r["why_not"] for r in results) else exit_codes.OK


if __name__ == "__main__":
    sys.exit(main())
