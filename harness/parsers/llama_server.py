"""llama-server responses -> one row per response: the native ``/completion`` and the OpenAI-compatible
``/v1/chat/completions`` and ``/v1/completions``.

Reads a saved response (one JSON object, or an array of them), JSONL of responses (or of the runner's
requests.jsonl records, which keep ``timings`` at the top level), or a captured SSE stream (``data: {...}``
lines, ``data: [DONE]``). Native: a row per response that carries ``timings``; a stream's chunks up to the one with
``"stop": true`` are one response, with the last timings any of them carried (builds that send timings per token
repeat them). Older builds lack ``cache_n``; ``draft_n``/``draft_n_accepted`` appear only with speculative decoding:
those columns are None when absent. Builds before ``stop_type`` said why they stopped with ``stopped_eos``/
``stopped_limit``/``stopped_word``: those become ``stop_type`` eos/limit/word (none when all three are false).

OpenAI-compatible: a row per response (a stream's chunks, which share one ``id``, are one response) that carries
``timings``, ``usage`` or a ``finish_reason``; :data:`USAGE` columns from ``usage`` (``cached_tokens`` from
``usage.prompt_tokens_details``: how many prompt tokens the server took from its cache), ``finish_reason`` as
printed and ``stop_type`` from it in the native vocabulary: ``length`` -> limit; ``stop`` is an end-of-sequence or a
stop word, which the response does not tell apart, so stop_type stays None there. Values a response did not print
stay None (a server other than llama.cpp prints ``usage`` without ``timings``).
"""

from __future__ import annotations

import json

from ._common import Json, JsonObject, numbered_lines, text_of
from .base import ParseError, register_parser

_TIMINGS = ("prompt_n", "prompt_ms", "prompt_per_token_ms", "predicted_n", "predicted_ms",
            "predicted_per_token_ms", "cache_n", "draft_n", "draft_n_accepted")
_RESPONSE = ("stop_type", "tokens_predicted", "tokens_evaluated", "tokens_cached", "truncated")
# OpenAI-compatible rows only: what ``usage`` and ``choices`` print
USAGE = ("finish_reason", "prompt_tokens", "completion_tokens", "total_tokens", "cached_tokens")
_STOPPED = (("stopped_eos", "eos"), ("stopped_word", "word"), ("stopped_limit", "limit"))
_FINISH = {"length": "limit"}
# one response's row: the timings and response fields as the server printed them (JSON values), None where absent
ServerRow = dict[str, Json]


def stop_type(response: JsonObject) -> Json:
    """The native ``stop_type``, or what an older build's ``stopped_*`` flags say (None when it printed neither)."""
    if response.get("stop_type") is not None or not any(key in response for key, _ in _STOPPED):
        return response.get("stop_type")
    return next((kind for key, kind in _STOPPED if response.get(key)), "none")


def timings_row(response: JsonObject, *, require: bool = True) -> ServerRow:
    timings = response.get("timings")
    if not isinstance(timings, dict):
        if require:
            raise ParseError("response has no timings object")
        timings = {}
    row: ServerRow = {key: timings.get(key) for key in _TIMINGS}
    row["prefill_tps"] = timings.get("prompt_per_second")
    row["decode_tps"] = timings.get("predicted_per_second")
    for key, value in timings.items():  # whatever else a newer build reports
        if key not in ("prompt_per_second", "predicted_per_second"):
            row.setdefault(key, value)
    for key in _RESPONSE:
        row[key] = response.get(key)
    row["stop_type"] = stop_type(response)
    return row


def openai_row(chunks: list[JsonObject]) -> ServerRow:
    """One OpenAI-compatible response (a non-streamed object, or a stream's chunks in order) -> its row."""
    merged: dict[str, Json] = {}  # the last "timings" and "usage" objects of the chunks
    finish: Json = None
    for chunk in chunks:
        for key in ("timings", "usage"):
            if isinstance(value := chunk.get(key), dict):
                merged[key] = value
        choices = chunk.get("choices") or []
        for choice in choices if isinstance(choices, list | dict | str) else []:  # iterated as they were
            if isinstance(choice, dict) and choice.get("finish_reason") is not None:
                finish = choice["finish_reason"]
    row = timings_row(merged, require=False)
    usage = merged.get("usage")
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    usage = usage if isinstance(usage, dict) else {}
    row.update(finish_reason=finish, stop_type=_FINISH.get(finish) if isinstance(finish, str) and finish else None,
               prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"),
               total_tokens=usage.get("total_tokens"),
               cached_tokens=details.get("cached_tokens") if isinstance(details, dict) else None)
    return row


def _is_openai(obj: JsonObject) -> bool:
    return isinstance(obj.get("choices"), list) or (isinstance(obj.get("usage"), dict) and "timings" not in obj
                                                    and "object" in obj)


Response = JsonObject | list[JsonObject]


def _native(chunks: list[JsonObject]) -> JsonObject:
    """A native stream's chunks -> its response: the last chunk, with the last ``timings`` any chunk carried (builds
    that send timings with every token repeat them; a stream cut before its end has them on an earlier chunk)."""
    timings = next((c["timings"] for c in reversed(chunks) if isinstance(c.get("timings"), dict)), None)
    return {**chunks[-1], **({"timings": timings} if timings is not None else {})}


def _responses(objects: list[tuple[int, Json]]) -> list[tuple[int, Response]]:
    """(line, native response | OpenAI chunks of one response). A stream is one response: OpenAI chunks sharing an
    ``id``; native chunks up to the one with ``"stop": true``. Objects without ``stop`` (the runner's records, errors)
    stand alone."""
    out: list[tuple[int, Response]] = []
    openai_id: Json = None
    native: list[JsonObject] = []
    native_line = 0

    def close_native() -> None:
        if native:
            out.append((native_line, _native(native)))
            native.clear()

    for number, obj in objects:
        if not isinstance(obj, dict):
            continue
        if _is_openai(obj):
            close_native()
            chunks = out[-1][1] if out and openai_id is not None and obj.get("id") == openai_id else None
            if isinstance(chunks, list):
                chunks.append(obj)
            else:
                out.append((number, [obj]))
            openai_id = obj.get("id")
            continue
        openai_id = None
        if "stop" not in obj:
            close_native()
            out.append((number, obj))
            continue
        native_line = native_line if native else number
        native.append(obj)
        if obj.get("stop") is True:
            close_native()
    close_native()
    return out


def _objects(text: str) -> list[tuple[int, Json]]:
    stripped = text.strip()
    if stripped.startswith(("{", "[")):
        try:
            doc = json.loads(stripped)  # one (possibly pretty-printed) response, or an array of them
            return [(1, item) for item in doc] if isinstance(doc, list) else [(1, doc)]
        except json.JSONDecodeError:
            pass  # JSONL: one response per line
    objects: list[tuple[int, Json]] = []
    for number, line in numbered_lines(text):
        if line.startswith("data:"):
            line = line[5:].strip()  # SSE
        if not line.startswith("{"):
            continue
        try:
            objects.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ParseError(f"invalid JSON: {exc.msg} (column {exc.colno})", line=number) from None
    return objects


@register_parser("llama-server")
def parse_llama_server(data: bytes) -> list[ServerRow]:
    """Rows in input order with ``response`` = 0-based position among the responses read (see the module)."""
    rows: list[ServerRow] = []
    for number, obj in _responses(_objects(text_of(data))):
        if isinstance(obj, list):
            row = openai_row(obj)
            if row["finish_reason"] is not None or any(isinstance(c.get(k), dict) for c in obj
                                                         for k in ("timings", "usage")):
                rows.append({"response": len(rows), **row})
            continue
        if "error" in obj and "timings" not in obj:
            message = obj["error"].get("message") if isinstance(obj["error"], dict) else obj["error"]
            raise ParseError(f"llama-server returned an error: {message}", line=number)
        if "timings" not in obj:
            continue  # a build that sent no timings (or a stream cut before them)
        try:
            row = timings_row(obj)
        except ParseError as exc:
            raise ParseError(str(exc), line=number) from None
        rows.append({"response": len(rows), **row})
    if not rows:
        raise ParseError("no llama-server response found (native with timings, or OpenAI-compatible with usage, "
                         "timings or a finish_reason)")
    return rows
