"""Redaction: API keys, bearer tokens and passwords hidden before text goes into a record, notebook, log or report
(`redact`, `redacted_excerpt`, `redact_all`; lab.core.evidence names them too, where callers find them). Every string
a server sends back and every log passes through it: a server may echo the key it was given, in any form."""
from __future__ import annotations

import functools
import itertools
import json
import os
import re
from typing import Any

# how much of a settings value the secret walk looks at (items of a mapping or list), and of a key
WALK_ITEMS = 256
SECRET_CHARS = 256

_SECRET_PATTERNS = [
    (re.compile(r"(?i)(authorization:\s*bearer\s+)\S+"), r"\1[REDACTED]"),
    # Values of 8+ characters only: "EOS token = 2" in a llama.cpp log is not a secret.
    (re.compile(r"(?i)((?:api[_-]?key|token|password|secret)[\"']?\s*[=:]\s*[\"']?)[^\s\"',&]{8,}"), r"\1[REDACTED]"),
    (re.compile(r"\b(sk-[A-Za-z0-9_-]{8,})\b"), "[REDACTED]"),
    (re.compile(r"\b(hf_[A-Za-z0-9]{8,})\b"), "[REDACTED]"),
]


# A variable whose name says it holds a secret (the profile's api_key_env, the runner's LAB_RUN_API_KEY, the
# engines' LLAMA_API_KEY / VLLM_API_KEY / API_KEY, HF_TOKEN...): never handed to a server's environment unasked
# (lab.serving.engines.minimal_env), and its value is redacted wherever it appears (`redact`).
SECRET_NAME = re.compile(r"(?i)(TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)")
MIN_SECRET_CHARS = 8  # shorter values ("1", "false") are settings, not secrets, and would redact half a log


# ---------------------------------------------------------------- what a key must be, which variable may hold one
# Variables every shell sets: naming one as api_key_env would make its value (`$PATH`: long, not secret, readable by
# anyone who can run `env`) the key of a server on the network. Refused by name, whatever SECRET_NAME says.
WELL_KNOWN_VARIABLES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "LANG", "LANGUAGE", "TERM", "HOSTNAME", "TMPDIR",
    "DISPLAY", "EDITOR", "VISUAL", "PAGER", "MAIL", "SHLVL", "PS1", "IFS", "TZ", "PYTHONPATH", "LD_LIBRARY_PATH",
    "VIRTUAL_ENV", "CONDA_PREFIX", "CUDA_HOME", "CUDA_VISIBLE_DEVICES", "SSH_AUTH_SOCK", "SSH_AGENT_PID",
    "XAUTHORITY", "KEYTIMEOUT", "GPG_AGENT_INFO", "XDG_RUNTIME_DIR", "XDG_SESSION_ID", "DBUS_SESSION_BUS_ADDRESS",
    "LS_COLORS", "HISTFILE", "HISTSIZE", "MANPATH", "INFOPATH", "TERM_PROGRAM", "COLORTERM"})
MIN_KEY_CHARS = 16  # a key guarding a network-facing server: shorter ones are guessed
MIN_KEY_BITS_PER_CHAR = 3.0  # `secrets.token_urlsafe(24)`: ~4.6; `openssl rand -hex 16`: ~3.6; "k" * 16: 0


def key_variable_problem(name: str) -> str | None:
    """Why `name` cannot be the variable holding a server's key (None when it can): a variable every shell sets, or
    a name that does not say it holds a secret (SECRET_NAME: such a value is redacted everywhere; another is not)."""
    if name.upper() in WELL_KNOWN_VARIABLES or name.startswith(("LC_", "XDG_")):
        return f"{name} is a variable every shell sets, not a secret; name your own, such as MY_SERVER_KEY"
    if not SECRET_NAME.search(name):
        return (f"{name} does not say it holds a secret (KEY, TOKEN, SECRET, PASSWORD in its name), so the lab would "
                "not redact its value from logs and records; name it like MY_SERVER_KEY")
    return None


def bits_per_char(text: str) -> float:
    """Shannon entropy of the characters of `text`, in bits per character."""
    import math
    from collections import Counter

    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values()) if n else 0.0


def key_value_problem(value: str) -> str | None:
    """Why `value` does not look like a secret fit to guard a server on the network (None when it does): too short,
    whitespace or a path in it, or too few different characters (MIN_KEY_BITS_PER_CHAR). Never says the value."""
    value = value.strip()
    if len(value) < MIN_KEY_CHARS:
        return f"it has {len(value)} characters; a key guarding a server on the network needs at least {MIN_KEY_CHARS}"
    if any(ch.isspace() for ch in value) or value.startswith(("/", "~")) or ":/" in value:
        return "it holds whitespace or a path: it reads as a setting, not a key"
    runs = sum(abs(ord(b) - ord(a)) <= 1 for a, b in zip(value, value[1:]))
    if runs * 2 > len(value):
        return "it counts up or down or repeats (0123…, abcd…): it would be guessed"
    if bits_per_char(value) < MIN_KEY_BITS_PER_CHAR or len(set(value)) < 10:
        return (f"it repeats too few characters ({bits_per_char(value):.1f} bits per character, {len(set(value))} "
                f"different; a random key has over {MIN_KEY_BITS_PER_CHAR:g}): it would be guessed")
    return None


def setting_secrets(settings) -> list[str]:
    """The strings of a profile's settings (a mapping as given: a file's, papermill's -y) that may hold a secret, for
    `redact` before any profile message is shown: the value of a field whose name says it holds one (not `*_env`,
    which names a variable, nor `*_tokens`, a count), in server_args the word after a flag that binds, exposes or
    carries a secret (`--api-key K`: K; `--api-key=K`: K; lab.core.server_flags) and any word that looks like a key
    (`key_value_problem`), and a URL's user:password."""
    from lab.core.server_flags import guarded_flag

    out = []

    def add(name: str, text: str, after: str = "") -> None:
        if SECRET_NAME.search(name) and not name.endswith(("_env", "_tokens")):
            out.append(text)
        if name == "server_args":
            if guarded_flag(after) or key_value_problem(text) is None:
                out.append(text)
            if text.startswith("-") and "=" in text and guarded_flag(text):
                out.append(text.split("=", 1)[1])
        out.extend(m.group(1) for m in re.finditer(r"://([^\s@]+)@", text))

    def walk(name: str, value, depth: int = 0) -> None:
        if depth > 4:
            return
        if isinstance(value, dict):
            for k, v in itertools.islice(value.items(), WALK_ITEMS):
                walk(str(k), v, depth + 1)
        elif isinstance(value, (list, tuple)):
            words = list(itertools.islice(value, WALK_ITEMS))
            for before, v in zip([""] + words, words):
                add(name, v, before if isinstance(before, str) else "") if isinstance(v, str) else walk(name, v, depth + 1)
        elif isinstance(value, str):
            add(name, value)
    walk("", settings)
    return [w for w in out if len(w.strip()) >= 4]


_ENV_SEEN: dict = {"data": None, "values": frozenset()}


def _secret_env_values() -> frozenset[str]:
    """The values of the environment variables whose name says they are secrets. Read again only when the environment
    changed: `redact` runs for every string a server sends (10^5 model ids: 20 s of 26 were this read, per string).
    os.environ's own dict (CPython's `_data`, bytes) is compared with the one last read, in C, under the GIL; a copy is
    read, so another thread setting a variable meanwhile (pytest's PYTEST_CURRENT_TEST) cannot break the iteration."""
    live = getattr(os.environ, "_data", None)
    if live is not None and live == _ENV_SEEN["data"]:
        return _ENV_SEEN["values"]
    snapshot = dict(live) if live is not None else None
    for _ in range(100):
        try:
            values = frozenset(v for n, v in os.environ.copy().items() if SECRET_NAME.search(n) and len(v) >= MIN_SECRET_CHARS)
            break
        except (KeyError, RuntimeError):
            continue
    else:
        raise RuntimeError("the environment kept changing while the lab read it for secrets to redact")
    _ENV_SEEN.update(data=snapshot, values=values)
    return values


def _renderings(secret: str) -> set[str]:
    """Every form a server or a library prints a key in: as given, stripped (a key with a trailing CR from a Windows
    file or `$'…\\r'`: httpx prints b'Bearer …\\r', where the CR is two characters), JSON-escaped (`\\/`, `\\"`,
    `\\uXXXX`), Python's str and bytes reprs (`\\xNN`) and percent-encoded. Case is matched by the caller."""
    from urllib.parse import quote

    forms = set()
    for s in {secret, secret.strip()}:
        escaped = json.dumps(s)[1:-1]
        forms |= {s, escaped, escaped.replace("/", "\\/"), repr(s)[1:-1], repr(s.encode())[2:-1], quote(s, safe="")}
    return {f for f in forms if len(f) >= 4}  # a 1-character "key" would blank every such letter


# A key cut short by the server that echoes it ("invalid key Zq3x/9VbN7mK…"): its first or last CUT_KEY_CHARS characters
# and whatever follows (or precedes) of it are redacted too, for a value that looks like a key (`key_value_problem`:
# not a path, which would take every path sharing its first characters with it).
CUT_KEY_CHARS = 8


def _cut_forms(secret: str) -> list[str]:
    """Regular expressions for `secret` cut at either end: its first CUT_KEY_CHARS characters and as much of the rest
    as follows, and its last CUT_KEY_CHARS with as much before them."""
    s = secret.strip()[:SECRET_CHARS]  # a key, never shown: only its cut forms are searched for
    if len(s) < 2 * CUT_KEY_CHARS or key_value_problem(s) is not None:
        return []
    head, tail = s[:CUT_KEY_CHARS], s[-CUT_KEY_CHARS:]
    more = "".join(f"(?:{re.escape(ch)}" for ch in s[CUT_KEY_CHARS:]) + ")?" * (len(s) - CUT_KEY_CHARS)
    less = "(?:" * (len(s) - CUT_KEY_CHARS) + "".join(f"{re.escape(ch)})?" for ch in s[:-CUT_KEY_CHARS])
    return [re.escape(head) + more, less + re.escape(tail)]


@functools.lru_cache(maxsize=64)
def _secrets_pattern(secrets: frozenset[str]) -> tuple[re.Pattern | None, int]:
    """One case-insensitive pattern of every rendering of `secrets`, the longest first (a key inside another is not
    left half shown), then each key cut short at either end (`_cut_forms`), and the longest rendering's length; built
    once per set of keys."""
    forms = sorted({f for s in secrets for f in _renderings(s)}, key=len, reverse=True)
    cut = [c for s in sorted(secrets) for c in _cut_forms(s)]
    pattern = "|".join([*map(re.escape, forms), *cut])
    return (re.compile(pattern, re.IGNORECASE) if pattern else None), len(forms[0]) if forms else 0


def _redactor(keys: tuple):
    """`redact`'s work as one function of the text, with the keys and the environment read once (`redact_all` walks
    a whole reply with it)."""
    pattern, longest = _secrets_pattern(frozenset({k for k in keys if k and len(k.strip()) >= 4}) | _secret_env_values())

    def redact_one(text: str) -> str:
        if pattern is not None:
            text = pattern.sub("[REDACTED]", text)
        for known, repl in _SECRET_PATTERNS:
            text = known.sub(repl, text)
        return text
    redact_one.longest = longest  # what a cut may leave of a key at a window's edge: `redacted_excerpt`
    return redact_one


def redact(text: str, *keys: str | None) -> str:
    """Hide API keys, bearer tokens and passwords before text goes into a record, notebook, log or report: `keys`
    (the key a request carried), the value of every environment variable whose name says it is a secret
    (SECRET_NAME), each in every form it is printed in (`_renderings`, any case), then the patterns of a key wherever
    it came from. The one redaction: every string a server sends back and every log passes through it (a server may
    echo the key it was given in an error)."""
    return _redactor(keys)(text)


# What a cut may leave of a secret at a window's edge beyond the longest key: `api_key=` and up to 7 characters the
# pattern does not take (it needs 8).
_EDGE_CHARS = 64


def redacted_excerpt(text: str, chars: int, *keys: str | None) -> str:
    """The first `chars` characters of text a server sent (an error body, a reply), redacted (`redact`) before it is
    cut: from a window of the text (a reply may be megabytes) made longer until what is shown cannot reach the
    window's edge, where a key cut in two is not recognised (a repeated key shrinks to [REDACTED] and pulls the edge
    into view: 16-32 of its 64 characters were shown)."""
    one = _redactor(keys)
    window = chars * 4
    while True:
        out = one(text[:window])
        if window >= len(text) or len(out) >= chars + one.longest + _EDGE_CHARS:
            return out[:chars]
        window *= 2


def redact_all(obj: Any, *keys: str | None) -> Any:
    """`obj` (dicts, lists, strings, numbers: what a server answered, as kept) with every string redacted."""
    return _redact_walk(obj, _redactor(keys))


def _redact_walk(obj: Any, one) -> Any:
    if isinstance(obj, str):
        return one(obj)
    if isinstance(obj, dict):
        return {_redact_walk(k, one): _redact_walk(v, one) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_redact_walk(v, one) for v in obj)
    return obj
