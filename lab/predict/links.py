"""The link between a profile's cards when an ask does not name one: the lab's own profile for that many cards of that
card (lab/data/routes.yaml `profiles` with a link: the seed's two V100 SXM2 over NVLink). Its own module so that the
speed of a profile (profile_speed) and the route table (routes), which calls it, need not import each other."""
from __future__ import annotations

from lab.core import facts
from lab.predict import public_speed, roofline


def default_link(card_id: str, n_gpus: int, base=None) -> str | None:
    """The link of the lab's own profile for `n_gpus` cards of `card_id` (routes.yaml profiles with a link: the seed's
    two V100 SXM2 over NVLink), or of `base` when it is such a profile; None when the lab has none."""
    from lab.core import profiles

    for name, spec in facts.load("routes")["profiles"].items():
        if not spec.get("link"):
            continue
        if base is not None and base.name == name:
            return spec["link"]
        try:
            prof = profiles.load(name)
        except profiles.ProfileError:
            continue
        g = roofline.gpu_spec_for(prof.gpu_name_pattern or prof.name)
        if g and public_speed.same_card(g["id"], card_id) and prof.gpu_count == n_gpus:
            return spec["link"]
    return None
