"""report.html's "Commands" section: every command a reader must type, one per copyable <pre> block.

For a GPU profile: the by-hand track on that card (lab.serving.byhand.steps: driver, toolkit, build, the model
with its checksum, the server with the profile's flags, a curl test, the offload check), then the lab itself
on the card. For the CPU default: how to run this lab again, and the by-hand track for the seeds' card
(byhand.yaml `default_card_profile`), folded. Built from the profile and the lab's data only (byhand is
pure), so a shared report carries the same commands `.venv/bin/python -m lab byhand PROFILE` prints.
"""
from __future__ import annotations

import html
import re

from lab.core import display

LAB_COMMANDS = ("make run",)


def pre(command: str) -> str:
    return f"<pre class='cmd'>{display.code_html(command)}</pre>"


def tidy_code(markup: str) -> str:
    """Rendered Markdown with its code blocks as the Commands section's (wrapping at spaces, never sideways out of
    sight: the answer's server command is read on the first screen) and its inline code wrapping only at spaces."""
    markup = re.sub(r"<pre><code[^>]*>(.*?)</code></pre>",
                    lambda m: f"<pre class='cmd'>{display.code_html(html.unescape(m[1]).rstrip(chr(10)))}</pre>",
                    markup, flags=re.S)
    return re.sub(r"<code>([^<]*)</code>", lambda m: f"<code>{display.code_html(html.unescape(m[1]), 24)}</code>",
                  markup)


def _steps_html(steps) -> str:
    parts = []
    for number, step in enumerate(steps, start=1):
        parts.append(f"<h4>{number}. {display.inline_code(step.title)}</h4>")
        parts += [pre(c) for c in step.commands]
        why = html.escape(step.why) + "".join(f"<br>do not install: {html.escape(d)}" for d in step.do_not)
        parts.append(f"<details class='why'><summary>why, and the sources</summary><p>{why}</p><ul>"
                     + "".join(f"<li>{html.escape(s)}</li>" for s in step.sources) + "</ul></details>")
    return "\n".join(parts)


def on_card(profile, alone: bool = False) -> list[str]:
    """After the by-hand track (which set $LAB): the lab's own run on the card, which checks it all and writes a
    report, one command a block; `alone` (no track before it): one block that sets $LAB itself."""
    from lab.serving import byhand

    commands = ['cd "$LAB"', display.lab_command(f"run --profile {profile.name}")]
    return [byhand.runnable(commands)] if alone else commands


def section(profile) -> str:
    """The Commands section's HTML ('' when the run's profile is unknown); its inline code wraps at spaces only."""
    return tidy_code(_section(profile))


def _section(profile) -> str:
    from lab.serving import byhand, byhand_choices

    if profile is None:
        return ""
    head = "<section id='commands'><h2>Commands</h2>"
    if profile.gpu_count > 0:
        try:
            steps = byhand.steps(profile)
        except ValueError as exc:  # another engine: notebook 04's command is the one to run
            return (head + f"<p>{html.escape(str(exc))}.</p>"
                    + "".join(pre(c) for c in on_card(profile, alone=True)) + "</section>")
        return (head + f"<p>On the {profile.gpu_count} × GPU box of profile <code>{html.escape(profile.name)}</code>, "
                "Ubuntu 22.04, in this order (<code>" + html.escape(display.lab_command("byhand " + profile.name))
                + "</code> prints the same; <code>--ubuntu 24.04</code> for 24.04):</p>"
                + _steps_html(steps)
                + f"<h4>{len(steps) + 1}. The lab on the card: every check, measured, in a report like this one</h4>"
                + "".join(pre(c) for c in on_card(profile)) + "</section>")
    card = byhand_choices.card_profile(profile)
    return (head + "<p>Run this lab again, in a checkout of it (Linux, Python 3.10+, a C/C++ compiler, cmake and ninja; no GPU):</p>"
            + "".join(pre(c) for c in LAB_COMMANDS)
            + f"<details class='table'><summary>By hand on the seeds' card (<code>{html.escape(card.name)}</code>): "
              f"driver, CUDA, build, model, server</summary>{_steps_html(byhand.steps(card))}"
            + "".join(pre(c) for c in on_card(card)) + "</details></section>")
