"""Strict JSON: the one decoder for documents from outside, and readable JSON out of the log.

In (request bodies, hook payloads, handler and reflector answers, TACHOGRAPH_HOOKS):
only what RFC 8259 calls JSON and every store can hold. `NaN` and `Infinity` are not
JSON; a lone UTF-16 surrogate (`\\ud800` unpaired) is text no UTF-8 store or encoder
can hold; a document nested deeper than MAX_JSON_DEPTH levels is refused everywhere
with the same limit (Python's decoder would otherwise fail with RecursionError around
a thousand levels, and encoders give up on deep values). Refused, not repaired, so a
value is never recorded other than as it was sent.

Out (the log as stored by any release): `readable` turns what is not JSON into what
is, the same way everywhere: non-finite numbers become the strings "NaN", "Infinity"
and "-Infinity", lone surrogates become U+FFFD. The stored bytes are never changed.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, NoReturn

from eventsourcing.persistence import JSONTranscoder

# The deepest nesting accepted anywhere a JSON document comes in (docs/api.md).
MAX_JSON_DEPTH = 64

# What a refusal is about; the API answers 400 for the first two (not JSON at all).
SYNTAX = "syntax"
CONSTANT = "constant"
TEXT = "text"
DEPTH = "depth"
DUPLICATE = "duplicate"

_SURROGATE = re.compile("[\ud800-\udfff]")


class StrictJSONError(ValueError):
    """A document refused; `problem` is a verb phrase, `where` the field path ("" for all)."""

    def __init__(self, kind: str, problem: str, where: str = "") -> None:
        super().__init__(f"{problem} at {where}" if where else problem)
        self.kind = kind
        self.problem = problem
        self.where = where


def _reject_constant(name: str) -> NoReturn:
    raise StrictJSONError(CONSTANT, f"contains {name}, which is not JSON")


# One decoder for every call: json.loads with options builds a new one each time.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def plainly_clean(raw: bytes) -> bool:
    """True only if the JSON document `raw` cannot hold anything `check_json` refuses.

    A cheap look at the bytes instead of a walk over the decoded value: NUL and lone
    surrogates can only arrive as `\\u` escapes, or (bytes are decoded as json.loads
    does, with `surrogatepass`) as UTF-8-style surrogate bytes, which start with 0xED;
    and a document with at most MAX_JSON_DEPTH brackets cannot nest deeper. NaN and
    Infinity need no look: the decoder refuses them as it meets them. False means
    "walk it".
    """
    return json.detect_encoding(raw) == "utf-8" and _plain_bytes(raw)


def _plain_bytes(raw: bytes) -> bool:
    # UTF-16/32 bodies could carry any code unit: the caller checked it is UTF-8.
    return (
        b"\\u" not in raw
        and b"\xed" not in raw
        and raw.count(b"{") + raw.count(b"[") <= MAX_JSON_DEPTH
    )


def _plain_text(text: str) -> bool:
    return (
        "\\u" not in text
        and (text.isascii() or not _SURROGATE.search(text))
        and text.count("{") + text.count("[") <= MAX_JSON_DEPTH
    )


def strict_loads(
    raw: bytes | str,
    *,
    refuse_nul: bool = False,
    object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
) -> Any:
    """Decode one strict JSON document; raise StrictJSONError naming what is wrong.

    Bytes are read as json.loads reads them (UTF-8, -16 or -32). `refuse_nul`: NUL
    characters are refused too (PostgreSQL text cannot hold them). The common document
    costs what json.loads costs plus a glance at its bytes; only the others are walked.
    """
    if isinstance(raw, bytes):
        encoding = json.detect_encoding(raw)
        clean = encoding == "utf-8" and _plain_bytes(raw)
        try:
            text = raw.decode(encoding, "surrogatepass")
        except UnicodeDecodeError:
            raise StrictJSONError(SYNTAX, "is not UTF-8 text") from None
    else:
        clean, text = _plain_text(raw), raw
    decoder = _DECODER
    if object_pairs_hook is not None:
        decoder = json.JSONDecoder(
            parse_constant=_reject_constant, object_pairs_hook=object_pairs_hook
        )
    try:
        value = decoder.decode(text)
    except json.JSONDecodeError as exc:
        problem = f"is not valid JSON ({exc.msg}: line {exc.lineno} column {exc.colno})"
        raise StrictJSONError(SYNTAX, problem) from None
    except RecursionError:
        raise StrictJSONError(DEPTH, f"is nested deeper than {MAX_JSON_DEPTH} levels") from None
    if not clean:
        check_json(value, refuse_nul=refuse_nul)
    return value


def check_json(value: Any, *, refuse_nul: bool = True, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise StrictJSONError for lone surrogates (in keys too), NUL if `refuse_nul` and
    nesting deeper than `max_depth` in a decoded value (NaN is refused while decoding)."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item, where, refuse_nul)
        elif isinstance(item, dict | list):
            if depth >= max_depth:
                problem = f"is nested deeper than {max_depth} levels"
                raise StrictJSONError(DEPTH, problem, where.split(".", 1)[0])
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in pairs:
                if isinstance(key, str):
                    _check_text(key, where, refuse_nul)
                stack.append((child, f"{where}.{key}" if where else str(key), depth + 1))


def _check_text(text: str, where: str, refuse_nul: bool) -> None:
    where = where if len(where) <= 80 else where[:80] + "…"
    if refuse_nul and "\x00" in text:
        raise StrictJSONError(TEXT, "contains a NUL character, which no store can hold", where)
    if not text.isascii() and _SURROGATE.search(text):
        raise StrictJSONError(TEXT, "contains a lone UTF-16 surrogate, which is not text", where)


def strict_json_object(body: bytes) -> dict[str, Any]:
    """Decode a UTF-8 JSON object without duplicate keys (an answer from outside)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise StrictJSONError(SYNTAX, "is not valid UTF-8 JSON") from None
    value = strict_loads(text, object_pairs_hook=_unique_pairs)
    if not isinstance(value, dict):
        raise StrictJSONError(SYNTAX, "is not a JSON object")
    return value


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise StrictJSONError(DUPLICATE, "has a duplicate key")
        obj[key] = value
    return obj


# --- out: readable JSON of whatever the log holds ---------------------------------------


def _constant_name(number: float) -> str:
    return "NaN" if math.isnan(number) else ("Infinity" if number > 0 else "-Infinity")


def readable(value: Any) -> Any:
    """`value` with what JSON cannot carry replaced: non-finite numbers by their names as
    strings ("NaN", "Infinity", "-Infinity"), lone surrogates (in keys too) by U+FFFD."""
    if isinstance(value, str):
        return _readable_text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else _constant_name(value)
    if isinstance(value, dict):
        return {
            (_readable_text(k) if isinstance(k, str) else k): readable(v) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [readable(v) for v in value]
    return value


def _readable_text(text: str) -> str:
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def dumps_readable(value: Any, **options: Any) -> str:
    """json.dumps that always yields valid JSON text (UTF-8 encodable): see `readable`.

    Never ASCII-escaped (an escaped lone surrogate would pass unseen). The common value
    costs one json.dumps and a scan for surrogates in non-ASCII text.
    """
    options["ensure_ascii"] = False
    try:
        text = json.dumps(value, allow_nan=False, **options)
    except ValueError:  # a non-finite number
        return json.dumps(readable(value), allow_nan=False, **options)
    if not text.isascii() and _SURROGATE.search(text):
        return json.dumps(readable(value), allow_nan=False, **options)
    return text


class ReadableTranscoder(JSONTranscoder):
    """The log's transcoder: encodes as the library does; decodes anything any release
    stored into values every store and encoder can take (see `readable`).

    Reading never changes the stored bytes, so the hash chain still covers them. NaN and
    Infinity cost nothing on decoding (the decoder hands them to a hook); lone surrogates
    can only come from `\\ud8xx`-style escapes, so only payloads holding one are walked.
    """

    def __init__(self) -> None:
        super().__init__()
        self.decoder = json.JSONDecoder(object_hook=self._decode_obj, parse_constant=str)

    def decode(self, data: bytes) -> Any:
        value = super().decode(data)
        return readable(value) if b"\\ud" in data or b"\\uD" in data else value
