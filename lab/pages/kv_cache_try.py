"""Notebook 05's "Try" lines, computed for the profile at hand: what another context, slot count, KV type or card
count would do to this profile's cache and fit (lab.predict.memory_plan, the plan the notebook's tables show), so
the invitations are true on a V100 as on the CPU default. Shown under section 1's cell (`try_these`)."""
from __future__ import annotations

from lab.core import display, profiles
from lab.core.session import Session
from lab.core.units import MIB
from lab.model.models import ArchSpec
from lab.predict import memory_plan


def _cache(plan: dict) -> str:
    """A plan's KV cache on one device, as the dtype table's cache column shows it (the same key, so the same
    rounding: lab/data/fields.yaml cache_MiB_per_device)."""
    return f"{display.fmt(round(plan['kv_bytes_per_device'] / MIB, 2), 'cache_MiB_per_device')} MiB"


def try_these(s: Session, arch: ArchSpec):
    """Section 1's "Try" lines for the profile at hand (`invitations`), as Markdown for a notebook cell."""
    from IPython.display import Markdown

    return Markdown(invitations(s, arch))


def other_context(ctx: int, trained: int | None, slots: int) -> int:
    """The context the Try line proposes: 4 × the profile's, else 2 ×, within what the model was trained for; a
    quarter of it when even 2 × is past that (a profile already at its model's context)."""
    for longer in (ctx * 4, ctx * 2):
        if longer <= (trained or 0):
            return longer
    return max(ctx // 4, 256 * slots)


def invitations(s: Session, arch: ArchSpec) -> str:
    """The "Try" lines of sections 1 and 2, computed for the profile at hand (Markdown): what each value the next
    cells let a learner change would do to this profile's cache and fit, from the same memory plan the cells show —
    so a V100 run's "try 16384" says it shrinks the cache, never "grows 4-fold" (the CPU default's words)."""
    p = s.profile
    base = memory_plan.plan_memory(p, arch)

    def with_(**values) -> dict:
        return memory_plan.plan_memory(profiles.varied(p, **values), arch)

    ctx, slots = p.context_tokens, p.parallel_slots
    other_ctx = other_context(ctx, arch.max_context, slots)
    bigger = with_(context_tokens=other_ctx)
    grows = bigger["kv_bytes_per_device"] / base["kv_bytes_per_device"] if base["kv_bytes_per_device"] else None
    lines = [f"**Try, on {p.name}** ({ctx:,} tokens over {slots} slot{'s' if slots != 1 else ''}, "
             f"{p.kv_cache_dtype} cache of {_cache(base)} per device):",
             f"- section 1, `context_tokens = {other_ctx}`: each slot gets {bigger['context_tokens_per_sequence']:,} "
             f"tokens and the cache goes from {_cache(base)} to {_cache(bigger)}"
             + (f" (× {display.sig3(grows)})" if grows else "") + "."]
    one = with_(parallel_slots=1 if slots > 1 else 4)
    lines.append(f"- section 1, `parallel_slots = {one['parallel_slots']}`: "
                 f"{one['context_tokens_per_sequence']:,} tokens per sequence, the cache {_cache(one)} "
                 "(`-c` is divided over the slots; a per-sequence state, where the model has one, is counted per slot).")
    for dtype in ("q8_0", "q4_0"):
        if dtype == p.kv_cache_dtype or p.engine not in ("llama.cpp", "llama-cpp-python"):
            continue
        q = with_(kv_cache_dtype=dtype)
        lines.append(f"- section 2, `kv_cache_dtype = \"{dtype}\"`: the cache {_cache(q)}; the longest context per "
                     f"slot {base['max_context_tokens']:,} → {q['max_context_tokens']:,} tokens, sequences that fit "
                     f"{base['max_concurrent_sequences']:,} → {q['max_concurrent_sequences']:,}.")
    if p.gpu_count == 1:
        two = with_(gpu_count=2)
        lines.append(f"- section 2, `gpu_count = 2`: the layers split over two cards, the longest context per slot "
                     f"{base['max_context_tokens']:,} → {two['max_context_tokens']:,} tokens.")
    elif p.gpu_count == 0 and p.host_ram_gib_min:
        half = round(p.host_ram_gib_min / 2, 2)
        try:
            h = with_(host_ram_gib_min=half)
            said = (f"the longest context per slot {h['max_context_tokens']:,} tokens, {h['max_concurrent_sequences']:,} "
                    "sequences" if h["fits"] else "it does not fit")
        except profiles.ProfileError as exc:
            said = f"refused: {exc}"
        lines.append(f"- section 2, `host_ram_gib_min = {half}`: {said}.")
    return "\n".join(lines)
