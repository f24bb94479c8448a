"""A profile file as text and YAML, before the schema sees it: a regular, small, UTF-8 file (MAX_PROFILE_BYTES), parsed
strictly (no anchors or aliases, no duplicate keys, a mapping at the top), every refusal a ProfileError naming the
file and what to fix; and `set_keys`, which edits a profile's text keeping its comments. lab.core.profiles validates
what `parse` returns.
"""
from __future__ import annotations

import difflib
import os
import re
import stat
from pathlib import Path

import yaml

from lab.core import redaction


class ProfileError(ValueError):
    """A profile file could not be used; the message says where and how to fix it."""


# A profile is a page of settings; anything bigger is not one (and is not parsed: YAML parsing is
# where a hostile file costs memory and time).
MAX_PROFILE_BYTES = 64 * 1024


def clip_text(text: str, width: int) -> str:
    """lab.core.display.clip (imported when a message needs it: this module is read before pydantic is)."""
    from lab.core import display

    return display.clip(text, width)


def clip(value, width: int = 80) -> str:
    """A found value for a message, as Python writes it, cut at a word."""
    return clip_text(repr(value), width)


class _YamlRefused(yaml.YAMLError):
    """A YAML feature a profile may not use (the message says which, and where)."""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader without the two features that make a short file mean something else or something huge:
    anchors/aliases (refused before expansion, so a 'billion laughs' file costs nothing) and duplicate
    keys (PyYAML keeps the last one silently)."""

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise _YamlRefused(f"line {event.start_mark.line + 1}: YAML anchors and aliases (&name, *name) are "
                               "not allowed in a profile; write each value out")
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise _YamlRefused(f"line {line}: duplicate key {key!r} (first on line {seen[key]}); "
                                   "give each setting once")
            if isinstance(key, (str, int, float, bool)):
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def read_text(path: Path) -> str:
    """The profile file's text: a regular, small, UTF-8 text file, or a ProfileError saying what it is."""
    try:
        info = path.stat()
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {exc.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ProfileError(f"{path}: is a folder, not a profile file; give a .yaml file such as params/cpu-default.yaml")
    if not stat.S_ISREG(info.st_mode):
        raise ProfileError(f"{path}: not a regular file (a device, pipe or socket); give a .yaml file")
    real = Path(os.path.realpath(path))
    if real.suffix.lower() not in (".yaml", ".yml"):  # /etc/shadow, or a link to it named x.yaml: never parsed, so
        # no line of it can come back in a message as "an unknown setting"
        link = f" (a link to {real})" if real != Path(path).absolute() else ""
        raise ProfileError(f"{path}: not a .yaml file{link}; a profile is a YAML file such as params/cpu-default.yaml")
    if info.st_size > MAX_PROFILE_BYTES:
        raise ProfileError(f"{path}: {info.st_size:,} bytes; a profile is at most {MAX_PROFILE_BYTES:,} bytes "
                           "(one page of settings)")
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_PROFILE_BYTES + 1)
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {exc.strerror}") from None
    nul = raw.find(b"\0")
    if nul >= 0:
        raise ProfileError(f"{path}: binary data (a NUL byte at offset {nul}), not YAML text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
                           "save the file as UTF-8") from None
    if not text.strip():
        raise ProfileError(f"{path}: empty file; a profile is a mapping of settings (see params/cpu-default.yaml)")
    return text


def parse(path: Path) -> dict:
    """The profile's YAML as a dict (anchors, duplicate keys, non-mappings refused)."""
    text = read_text(path)
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except _YamlRefused as exc:
        raise ProfileError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:  # what and where, never the line itself (PyYAML's snippet would quote the file)
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = getattr(exc, "problem", None) or type(exc).__name__
        raise ProfileError(f"{path}: not valid YAML: {where}{what}") from None
    except RecursionError:
        raise ProfileError(f"{path}: nested too deeply to be a profile") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: expected a mapping of settings at the top level, found {type(data).__name__} "
                           "(not shown: a file that is not a profile may hold anything)")
    return data


# A setting's name as a message may show it: a profile's own kind of name. Anything else (a line of a file that is not a
# profile, parsed as a key) is counted, never shown.
_SETTING_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# More unknown names than this, and none of the profile's: the file is not a profile, and is said to be one line.
MAX_UNKNOWN_SHOWN = 8


def errors_text(source, data: dict, exc, known) -> str:
    """A pydantic ValidationError of profile settings as lines fit to show a user: each problem with its field,
    what was found and what is allowed. Nothing in it may carry a secret or a file's contents: values go through the
    one redaction (`redaction.setting_secrets` of the settings, then `redaction.redact`), server_args is never shown
    (`--api-key K`), an unknown setting is named only when it has a setting's shape and never with its value, and a
    mapping that is mostly unknown names is said to be no profile, in one line."""
    errors = exc.errors()
    unknown = [e for e in errors if e["type"] == "extra_forbidden"]
    if len(unknown) > MAX_UNKNOWN_SHOWN and not set(data) & set(known):
        return (f"{source}: not a profile: {len(unknown)} names that are not settings and none of a profile's "
                "(name, engine, model_file, ...); give a profile such as params/cpu-default.yaml")
    lines = [f"{source}: {len(errors)} problem(s)"]
    for err in errors:
        field = ".".join(str(x) for x in err["loc"]) or "(whole profile)"
        if err["type"] == "extra_forbidden":
            shown = field if _SETTING_NAME.fullmatch(field) else "(a name that is not a setting's, not shown)"
            close = difflib.get_close_matches(field, known, n=1)
            hint = f" — did you mean '{close[0]}'?" if close else ""
            value = err.get("input")  # a short plain value helps ("colour: blue"); anything else is not shown
            found = f" (found {clip(value, 40)})" if isinstance(value, (int, float, bool)) or (
                isinstance(value, str) and len(value) <= 40) else ""
            lines.append(f"  - field {shown!r}: not a known setting{found}{hint}; allowed fields: {', '.join(known)}")
            continue
        if err["type"] == "missing":
            lines.append(f"  - field '{field}': missing; it is required")
            continue
        if not err["loc"]:  # a rule across fields: its message names the fields and their values
            lines.append(f"  - {err['msg'].removeprefix('Value error, ')}")
            continue
        found = data.get(err["loc"][0], "(missing)")
        if field.split(".")[0] == "server_args":  # it may hold a key (`--api-key K`): the message names the flag
            found = "(the list, not shown: it may hold a key)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "string_pattern_mismatch" and field == "name":
            msg = ("a profile name is lower-case letters, digits, '.', '_' and '-' (no '/', spaces or control "
                   "characters), starting with a letter or digit, because it names folders and files: rename it")
        if err["type"] == "finite_number":
            msg += " (NaN and infinity are refused): give a plain number"
        lines.append(f"  - field '{field}': found {clip(found)}; {msg}")
    return redact_settings("\n".join(lines), data)


def redact_settings(text: str, settings) -> str:
    """`text` (a message about `settings`) with anything in the settings that may be a secret hidden: the one
    redaction every profile message passes through."""
    return redaction.redact(text, *redaction.setting_secrets(settings))


def set_keys(profile_text: str, values: dict, comments: list[str] = ()) -> str:
    """A profile's YAML text with top-level `key: value` set for each of `values`: the key's line replaced, a
    missing key appended after `comments`. The profile's other lines and comments stay as they are (a YAML
    round trip would drop them). Used by `lab tune --write-profile` and the tests' profile copies."""
    if not values:
        return profile_text
    lines = profile_text.rstrip("\n").split("\n")
    appended = []
    for key, value in values.items():
        line = f"{key}: {yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}"
        hits = [i for i, ln in enumerate(lines) if ln.startswith(f"{key}:")]
        if hits:
            lines[hits[0]] = line
        else:
            appended.append(line)
    tail = [""] + list(comments) + appended if comments or appended else []  # only replaced: the file's own length
    return "\n".join(lines + tail) + "\n"
