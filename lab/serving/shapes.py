"""What the lab reads from an engine's HTTP API, one pydantic schema per endpoint, and `clean`, the one place a
reply is checked against it.

Servers are not trusted to send the types their documentation shows (a proxy in front, another release, a
hostile endpoint): `/props` with "default_generation_settings": "x", or n_ctx as a list, crashed notebook 04 with an
AttributeError and then the manifest. `clean(shape, data, where)` returns the reply with every field of the wrong
type removed (as if the server had not sent it: the lab then says "not reported") and one finding per removed
field, naming the route, the field, what was expected and what came; it never raises. Fields the lab does not read
pass as they came (extra="allow"); numbers that arrive as numeric strings are read as numbers (pydantic's lax
mode), so a value the lab computes with always has the type it computes with.

Sources of the shapes: llama.cpp tools/server/README.md (GET /props, /slots, /v1/models `meta`, streamed
`timings`); docs.vllm.ai OpenAI-compatible server (/version, /v1/models max_model_len); the OpenAI API reference
(completions, chat completions, streamed chunks, usage); docs.ollama.com/api (/api/version, /api/ps, /api/show);
lmstudio.ai/docs/developer/rest/endpoints (/api/v0/models, /api/v0/completions).
"""
from __future__ import annotations

import copy
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, RootModel, ValidationError

MAX_PASSES = 5  # each pass removes every wrong field pydantic reported; nested wrong fields can need a second
SHOWN_CHARS = 60  # of a wrong value, in a finding


# A count a server reports (tokens, a context length, slots): a whole number from 0 to MAX_COUNT. Past it (10^18 prompt
# tokens, a negative count) it is no count, removed like a field of the wrong type, and never reaches a record or a
# local command (llama-bench's -d took it). 10^8 tokens is 100 times the longest context any engine serves.
MAX_COUNT = 100_000_000


def _not_a_bool(value):
    if isinstance(value, bool):  # pydantic's lax mode reads true as 1
        raise ValueError("a count, not true/false")
    return value


Count = Annotated[int, BeforeValidator(_not_a_bool), Field(ge=0, le=MAX_COUNT)]


class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


# ---------------------------------------------------------------- llama-server
class GenerationSettings(_Shape):
    n_ctx: Count | None = None


class LlamaProps(_Shape):
    """GET /props."""
    default_generation_settings: GenerationSettings | None = None
    total_slots: Count | None = None
    model_path: str | None = None
    build_info: str | None = None


class Slot(_Shape):
    id: int | None = None
    n_ctx: Count | None = None
    is_processing: bool | None = None


class Slots(RootModel[list[Slot]]):
    """GET /slots (501 unless --slots)."""


# ---------------------------------------------------------------- any OpenAI-compatible server
class ModelMeta(_Shape):
    n_ctx_train: Count | None = None
    size: int | None = None
    n_params: int | None = None


class ModelEntry(_Shape):
    id: str | None = None
    owned_by: str | None = None
    meta: ModelMeta | None = None  # llama-server
    max_model_len: Count | None = None  # vLLM
    root: str | None = None
    state: str | None = None  # LM Studio /api/v0/models
    quantization: str | None = None
    max_context_length: Count | None = None
    compatibility_type: str | None = None
    arch: str | None = None


class ModelList(_Shape):
    """GET /v1/models (and LM Studio's GET /api/v0/models)."""
    data: list[ModelEntry] | None = None


class Message(_Shape):
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None


class Choice(_Shape):
    index: int | None = None
    text: str | None = None
    message: Message | None = None
    delta: Message | None = None
    finish_reason: str | None = None


class PromptDetails(_Shape):
    cached_tokens: Count | None = None


class Usage(_Shape):
    prompt_tokens: Count | None = None
    completion_tokens: Count | None = None
    total_tokens: Count | None = None
    prompt_tokens_details: PromptDetails | None = None


class Completion(_Shape):
    """POST /v1/completions or /v1/chat/completions, not streamed."""
    model: str | None = None
    choices: list[Choice] | None = None
    usage: Usage | None = None


class Timings(_Shape):
    cache_n: Count | None = None


class Chunk(Completion):
    """One `data:` event of a streamed completion (llama-server adds `timings` to the last)."""
    timings: Timings | None = None
    error: Any = None


class Tokenized(_Shape):
    """POST /tokenize (llama-server: tokens; vLLM: tokens and count)."""
    tokens: list[Any] | None = None
    count: int | None = None


# ---------------------------------------------------------------- vLLM, Ollama, LM Studio
class Version(_Shape):
    """vLLM GET /version, Ollama GET /api/version."""
    version: str | None = None


class OllamaDetails(_Shape):
    quantization_level: str | None = None
    parameter_size: str | None = None


class OllamaRunning(_Shape):
    name: str | None = None
    model: str | None = None
    size: int | None = None
    size_vram: int | None = None
    context_length: int | None = None
    details: OllamaDetails | None = None


class OllamaPs(_Shape):
    models: list[OllamaRunning] | None = None


class OllamaShow(_Shape):
    parameters: str | None = None
    details: OllamaDetails | None = None
    model_info: dict[str, Any] | None = None


class LmsModelInfo(_Shape):
    context_length: int | None = None
    quant: str | None = None


class LmsRuntime(_Shape):
    name: str | None = None
    version: str | None = None


class LmsCompletion(_Shape):
    model_info: LmsModelInfo | None = None
    runtime: LmsRuntime | None = None


SHAPES: dict[str, type[BaseModel]] = {
    "llama.props": LlamaProps, "llama.slots": Slots, "models": ModelList, "completion": Completion,
    "chunk": Chunk, "tokenize": Tokenized, "version": Version, "ollama.ps": OllamaPs, "ollama.show": OllamaShow,
    "lmstudio.completion": LmsCompletion,
}


# ---------------------------------------------------------------- the one check
def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def _show(value: Any) -> str:
    text = repr(value)
    return f"{_kind(value)} {text[:SHOWN_CHARS]}{'…' if len(text) > SHOWN_CHARS else ''}"


def _drop(data: Any, loc: tuple) -> None:
    """Remove the deepest part of `loc` that exists in `data` (pydantic adds union-member names to a loc)."""
    parent, key = None, None
    node = data
    for part in loc:
        if isinstance(node, dict) and isinstance(part, str) and part in node:
            parent, key, node = node, part, node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            parent, key, node = node, part, node[part]
        else:
            break
    if parent is None:
        return
    if isinstance(parent, dict):
        parent.pop(key, None)
    else:
        parent[key] = None  # marked; removed after the pass so the other indexes stay right


def _prune_lists(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _prune_lists(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_prune_lists(v) for v in data if v is not None]
    return data


def clean(shape: str, data: Any, where: str) -> tuple[Any, list[str]]:
    """(`data` with every field of an unexpected type removed, one finding per removed field). `where` names the
    route in the findings ("GET /props"). A reply of the wrong kind altogether (a list for an object) gives None
    and one finding. Never raises."""
    model = SHAPES[shape]
    if data is None:
        return None, []
    want_list = issubclass(model, RootModel)
    if not isinstance(data, list if want_list else dict):
        return None, [f"{where}: expected {'a list' if want_list else 'an object'}, got {_show(data)}; not used"]
    try:  # the common case: as documented, no copy needed
        return model.model_validate(data).model_dump(exclude_unset=True), []
    except (ValidationError, RecursionError, ValueError, TypeError):
        pass
    try:
        data, findings = copy.deepcopy(data), []
    except RecursionError:
        return None, [f"{where}: nested too deep to read; not used"]
    for _ in range(MAX_PASSES):
        try:
            return model.model_validate(data).model_dump(exclude_unset=True), findings
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
        except (RecursionError, ValueError, TypeError) as exc:  # pydantic's own limits on hostile input
            return None, findings + [f"{where}: not readable ({type(exc).__name__}); not used"]
        for err in errors:
            _drop(data, tuple(err["loc"]))
        findings += _grouped(where, errors)
        data = _prune_lists(data)
    return None, findings + [f"{where}: still not of the expected shape after removing the fields above; not used"]


MAX_FINDINGS_PER_REPLY = 10  # kinds of wrong field said per reply; 20,000 bad entries are one finding, counted


def _grouped(where: str, errors: list[dict]) -> list[str]:
    """One finding per kind of wrong field (its place with list positions as `*`, and what was wrong), the first
    value seen and how many entries had it: /v1/models with 20,000 malformed entries put one finding 20,009 times
    into report.html (7.4 MB)."""
    kinds: dict = {}
    for err in errors:
        field = ".".join("*" if isinstance(p, int) else str(p) for p in err["loc"]) or "(the reply)"
        key = (field, err["msg"][:1].lower() + err["msg"][1:])
        kinds.setdefault(key, [0, err])[0] += 1
    out = [f"{where}: {'.'.join(map(str, first['loc'])) or field if n == 1 else field}: {msg}, got "
           f"{_show(first.get('input'))}; not used" + (f" ({n:,} entries)" if n > 1 else "")
           for (field, msg), (n, first) in list(kinds.items())[:MAX_FINDINGS_PER_REPLY]]
    if len(kinds) > MAX_FINDINGS_PER_REPLY:
        out.append(f"{where}: {len(kinds) - MAX_FINDINGS_PER_REPLY:,} more kinds of wrong field; not used")
    return out


def not_json(where: str, content_type: str | None) -> str:
    """The finding for a 200 whose body is not JSON at all (an HTML sign-in page or a proxy's page answering every
    route): not the API's answer, so not of its documented shape (`clean` of no data finds nothing to say)."""
    return (f"{where}: HTTP 200 but the body is not JSON (Content-Type {(content_type or 'none')[:SHOWN_CHARS]!r}): not the API's "
            "answer (a sign-in page or a proxy in front of the server?); not used")


def findings_of(probes: dict) -> list[str]:
    """Every shape finding of a discovery's probes (each answer dict may carry `findings`)."""
    return [f for answers in probes.values() if isinstance(answers, dict)
            for a in answers.values() if isinstance(a, dict) for f in a.get("findings") or []]
