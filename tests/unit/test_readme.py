"""README.md keeps its numbers true: the V100 answer before the reference part, within 150 lines, its commands the ones `lab byhand`
prints, its predictions what `lab plan` computes, and the `make run` / `make test` times the newest records in
outputs/loop/ (written by .ci/loop_record.py)."""
import json
import re
from pathlib import Path

import pytest

from lab.core import profiles
from lab.core.paths import ROOT
from lab.serving import byhand, byhand_choices

README = (ROOT / "README.md").read_text(encoding="utf-8")
LINES = README.splitlines()


def _section(title: str) -> str:
    start = next(i for i, line in enumerate(LINES) if line.startswith("## ") and title in line)
    end = next((i for i in range(start + 1, len(LINES)) if LINES[i].startswith("## ")), len(LINES))
    return "\n".join(LINES[start:end]), start, end


def _latest(kind: str) -> tuple[Path, dict]:
    """The newest GREEN record of `kind` (what the README quotes as the time it takes); red runs stay in
    outputs/loop/ as evidence, listed in its README with what failed."""
    files = sorted((ROOT / "outputs" / "loop").glob(f"{kind}-2*.json"))  # make-run-<UTC>.json sorts by time; not make-test-quick-*
    green = [(f, r) for f in files if not ((r := json.loads(f.read_text())).get("failures") or r.get("errors"))]
    assert green, f"no green outputs/loop/{kind}-*.json"
    return green[-1]


def _min_s(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s} s"


def test_answer_first_the_two_commands_then_the_v100_path_before_the_reference_within_150_lines():
    """Issue 44: what a V100 owner runs first on the card, in ≤ 150 lines before the reference part."""
    two, start2, _ = _section("Two commands")
    v100, start, _ = _section("I have a V100")
    reference = LINES.index("# Reference")
    assert start2 < start < reference <= 150, (start2, start, reference)
    assert not [line for line in LINES[start + 1:reference] if line.startswith("## ")]  # nothing else between
    assert "make run" in two and "make test" in two
    for what in ("Get the model", "The first command on the card", "What you will see", "Serve it", "Run this"):
        assert what in v100, what


def test_v100_commands_are_the_ones_lab_byhand_prints():
    v100, _, _ = _section("I have a V100")
    hf = byhand_choices.data()["hf_cli"]
    for name in ("v100-32g-x1", "v100-32g-x2-nvlink"):
        prof = profiles.load(name)
        d = byhand_choices.gguf_download(prof)
        assert d["file"] == Path(prof.model_file).name and Path(prof.model_file).parent == ROOT / "models"
        assert hf["command"].format(repo=d["repo"], file=d["file"], dir="models") in v100
        assert f"`models/{d['file']}`" in v100
        assert f"PROFILE={name}" in v100
    assert hf["install"] in v100
    for ubuntu in byhand_choices.UBUNTU_RELEASES:  # the same line on both releases (CUDA 12.8 is published for both)
        steps = byhand.steps(profiles.load("v100-32g-x1"), ubuntu)
        line = next(st for st in steps if st.title.startswith("Run the lab")).commands[-1]
        assert f"\n{line}\n" in v100, line


def test_v100_predictions_are_what_lab_plan_computes():
    from lab.predict import plan

    v100, _, _ = _section("I have a V100")
    v100 = " ".join(v100.split())  # the sentences wrap
    prof = profiles.load("v100-32g-x1")
    mem = plan.memory_part(prof)
    speed = plan.speed_part(prof)
    assert f"weights {mem['weights_bytes'] / 1e9:.2f} GB" in v100
    kv = mem["kv_bytes_per_token"] * prof.context_tokens  # kv_bytes_total adds the recurrent state
    assert kv + mem["recurrent_state_bytes_total"] == mem["kv_bytes_total"]
    assert f"KV cache {kv / 1e9:.2f} GB for {prof.parallel_slots} slots of " \
           f"{prof.context_tokens // prof.parallel_slots // 1024}K tokens" in v100
    assert f"{mem['recurrent_state_bytes_total'] / 2**20:.1f} MiB of recurrent state" in v100 and mem["fits"]
    assert f"{speed['predicted_decode_tok_s']:.1f} tok/s for one stream" in v100
    from lab.records import answer

    assert f", {answer.what_to_run(prof)['tok_s']:.1f} with MTP" in v100  # the report's "Run this" figure
    n = byhand_choices.n_offloadable(prof)
    assert f"offloaded {n}/{n} layers to GPU" in v100


@pytest.mark.parametrize("kind", ["make-run", "make-test"])
def test_loop_times_are_the_newest_records(kind):
    path, rec = _latest(kind)
    what = kind.replace("-", " ", 1)
    line = next(line for line in LINES if line.startswith(f"- `{what}` took"))
    i = LINES.index(line)
    text = " ".join(" ".join(LINES[i:i + 2]).split())
    assert text.startswith(f"- `{what}` took {_min_s(rec['wall_s'])} "), (text, rec["wall_s"])
    assert f"`outputs/loop/{path.name}`" in text and f"fresh clone of {rec['git_sha'][:7]}" in text
    if "on the same machine" in text:
        assert rec["host"] == _latest("make-run")[1]["host"]
    if kind == "make-test":
        passed = rec["tests"] - rec["skipped"] - rec["failures"] - rec["errors"]
        assert f"for its {rec['tests']:,} tests ({passed:,} passed, {rec['skipped']} skipped)" in text
    else:
        host = rec["host"]
        assert f"{host['cores']}-core" in text and f"{host['ram_gib']} GiB" in text
        assert host["cpu"].startswith("Intel") == ("Intel" in text)
    assert f"`{path.name}`" in (ROOT / "outputs" / "loop" / "README.md").read_text()  # listed with its details


def test_no_test_count_but_the_records():
    """A test count in the README is the one of a dated record (the suite grows with every change)."""
    _, rec = _latest("make-test")
    counts = set(re.findall(r"(\d[\d,]*) tests\b", README))
    assert counts == {f"{rec['tests']:,}"}, counts
