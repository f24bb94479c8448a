"""What the tiers of tests/unit/test_byhand.py share (split by .ci/tier_tests.py): fixtures and helpers
used by tests in more than one tier, defined once."""
from lab.core import profiles
from lab.serving import byhand
from lab.core.paths import ROOT


LLAMA_GPU_PROFILES = [p.stem for p in sorted((ROOT / "params").glob("*.yaml"))
                      if profiles.load(p).gpu_count > 0 and profiles.load(p).engine in ("llama.cpp", "llama-cpp-python")]



# ---------------------------------------------------------------- end to end on the card (issue 23, deliver 5)
V100 = ("v100-32g-x1", "v100-32g-x2-nvlink")


def _step(name, prefix, ubuntu="22.04"):
    return next(st for st in byhand.steps(profiles.load(name), ubuntu) if st.title.startswith(prefix))
