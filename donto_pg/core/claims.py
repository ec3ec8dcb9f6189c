"""Parse and validate extractor responses; spot hijacked (injected) answers.

:func:`parse_response` turns a model's raw text into validated claims in the
output schema of :mod:`donto_pg.core.render`::

    [{"subject": str, "predicate": str, "object": str,
      "quote": str|null, "turn": int|null, "hypothesis": bool}]

An item may say its claim type (``"kind"``, the ``stated_fact/v2`` schema):
``"fact"`` (the default) or ``"standing"``, a standing statement whose
predicate is its standing kind (instruction, preference, constraint). A
standing claim keeps the six keys: its predicate becomes
``mem:standing/<kind>`` (:data:`STANDING_PREFIX`), a namespace no fact may
use, so the claim type is on the stored claim itself.

It tolerates the usual wrappers -- a ```json fence, prose around the array,
an object ``{"claims": [...]}`` -- and rejects everything else as
``broken``. Each item is validated and normalised on its own; invalid items
are counted in ``rejected`` rather than failing the whole response.

:func:`looks_like_injection` tells a hijacked answer (a tutorial, a poem, an
apology, an answer to the conversation's last question, claims behind
"Ignore previous instructions."...) from a valid response. Claims must come
alone: prose around them is a hijack. Without claims it is conservative: a
valid ``[]`` is never injection, nor is a truncated or malformed attempt at the
schema.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "MAX_FIELD_CHARS",
    "STANDING_KINDS",
    "STANDING_PREFIX",
    "ParsedResponse",
    "injection_signals",
    "looks_like_injection",
    "normalise_claim",
    "parse_response",
]

Status = Literal["ok", "empty", "broken"]

#: Longest subject/predicate/object/quote accepted (longer items are rejected).
MAX_FIELD_CHARS = 2000

#: The predicate of a standing claim is STANDING_PREFIX + one of STANDING_KINDS (the
#: predicates of the rule detector's statements, donto_pg.core.standing.KINDS).
STANDING_PREFIX = "mem:standing/"
STANDING_KINDS = ("instruction", "preference", "constraint")

#: How many '[' / '{' positions are tried when looking for JSON inside prose.
_MAX_CANDIDATES = 200

_WS = re.compile(r"\s+")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\r?\n(.*?)(?:```|\Z)", re.DOTALL)


@dataclass
class ParsedResponse:
    """The outcome of :func:`parse_response`.

    ``status`` is ``'ok'`` (at least one valid claim), ``'empty'`` (a valid
    empty array: nothing stated) or ``'broken'`` (no usable array, or every
    item invalid). ``rejected`` counts the invalid items; ``error`` says why a
    response is broken (or why the first item was rejected).
    """

    status: Status
    claims: list[dict[str, Any]] = field(default_factory=list)
    rejected: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True unless the response is broken."""
        return self.status != "broken"


class _Invalid(ValueError):
    """An item that does not fit the schema."""


def _text_field(item: dict[str, Any], key: str) -> str:
    value = item.get(key)
    if isinstance(value, bool) or value is None:
        raise _Invalid(f"{key} missing or not a string")
    if isinstance(value, int | float):
        value = str(value)
    if not isinstance(value, str):
        raise _Invalid(f"{key} is not a string")
    if "\x00" in value:  # "\u0000" in the JSON: PostgreSQL text cannot hold it
        raise _Invalid(f"{key} contains a NUL character")
    value = _WS.sub(" ", value).strip()
    if not value:
        raise _Invalid(f"{key} is empty")
    if len(value) > MAX_FIELD_CHARS:
        raise _Invalid(f"{key} longer than {MAX_FIELD_CHARS} characters")
    return value


def _quote_field(item: dict[str, Any]) -> str | None:
    value = item.get("quote")
    if value is None:
        return None
    if not isinstance(value, str):
        raise _Invalid("quote is neither a string nor null")
    if "\x00" in value:
        raise _Invalid("quote contains a NUL character")
    # Only trim the ends: the quote must stay a verbatim substring of the source.
    value = value.strip()
    if not value:
        return None
    if len(value) > MAX_FIELD_CHARS:
        raise _Invalid(f"quote longer than {MAX_FIELD_CHARS} characters")
    return value


def _turn_field(item: dict[str, Any]) -> int | None:
    value = item.get("turn")
    if value is None:
        return None
    if isinstance(value, bool):
        raise _Invalid("turn is a boolean")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if not isinstance(value, int):
        raise _Invalid("turn is neither an integer nor null")
    if value < 0:
        raise _Invalid("turn is negative")
    return value


def _hypothesis_field(item: dict[str, Any]) -> bool:
    value = item.get("hypothesis", False)
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in {"true", "false"}:
        return value.strip().lower() == "true"
    raise _Invalid("hypothesis is not a boolean")


def _predicate_field(item: dict[str, Any]) -> str:
    """The predicate, by claim type: a fact's as given (never in the mem: namespace), a
    standing claim's ``mem:standing/<instruction|preference|constraint>``."""
    kind = item.get("kind", "fact")
    kind = "fact" if kind is None else kind
    if not isinstance(kind, str) or kind.strip().lower() not in {"fact", "standing"}:
        raise _Invalid("kind is neither 'fact' nor 'standing'")
    predicate = _text_field(item, "predicate")
    if kind.strip().lower() == "standing":
        standing = predicate.lower().removeprefix(STANDING_PREFIX)
        if standing not in STANDING_KINDS:
            raise _Invalid("a standing claim's predicate is not instruction, preference or "
                           "constraint")
        return STANDING_PREFIX + standing
    if predicate.lower().startswith("mem:"):
        raise _Invalid("a fact's predicate is in donto's reserved mem: namespace")
    return predicate


def normalise_claim(item: Any) -> dict[str, Any]:
    """Validate one item and return it normalised to exactly the schema's six keys.

    Subject, predicate and object must be non-empty strings (numbers are
    converted; inner whitespace is collapsed); ``quote`` is a string or None
    (ends trimmed, empty -> None); ``turn`` an int >= 0 or None (``"12"`` and
    ``12.0`` are accepted); ``hypothesis`` a bool (missing -> False). ``kind``
    (missing -> ``"fact"``) is ``"fact"`` or ``"standing"``: a standing claim's
    predicate must be instruction, preference or constraint and is returned as
    ``mem:standing/<it>``; a fact's predicate may not start with ``mem:``. Extra
    keys are dropped. Raises ``ValueError`` when the item does not fit.
    """
    if not isinstance(item, dict):
        raise _Invalid(f"item is a {type(item).__name__}, not an object")
    return {
        "subject": _text_field(item, "subject"),
        "predicate": _predicate_field(item),
        "object": _text_field(item, "object"),
        "quote": _quote_field(item),
        "turn": _turn_field(item),
        "hypothesis": _hypothesis_field(item),
    }


def _as_items(value: Any) -> list[Any] | None:
    """The claim list inside a decoded JSON value, or None if it is not one."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict) and isinstance(value.get("claims"), list):
        return value["claims"]
    return None


def _plausible(items: list[Any]) -> bool:
    """An empty list or a list of objects (not e.g. a citation like ``[1]``)."""
    return all(isinstance(i, dict) for i in items)


def _locate(text: str) -> tuple[list[Any] | None, str | None, tuple[int, int], list[str]]:
    """Locate the claim list in a response: (items, error, span of the JSON in TEXT, the
    texts beside the claims in a ``{"claims": [...]}`` object).

    The span covers what the schema allows around the list: the whole text, or a
    code fence with its markers; everything outside it is prose, and so is a "note" the
    model adds beside the claims.
    """
    stripped = text.strip()
    if not stripped:
        return None, "empty response", (0, 0), []
    decoder = json.JSONDecoder()
    # 1. The whole text is JSON.
    try:
        whole = json.loads(stripped)
    except (json.JSONDecodeError, RecursionError):
        whole = None
    else:
        items = _as_items(whole)
        if items is not None:
            return items, None, (0, len(text)), _beside(whole)
        return None, f"JSON {type(whole).__name__} without a claims array", (0, 0), []
    # 2. A fenced block (```json ... ```) holding the JSON.
    for match in _FENCE.finditer(text):
        body = match.group(2).strip()
        try:
            value = json.loads(body)
        except (json.JSONDecodeError, RecursionError):
            continue
        items = _as_items(value)
        if items is not None:
            return items, None, match.span(), _beside(value)
    # 3. The first array (or {"claims": [...]} object) embedded in prose.
    for n, match in enumerate(re.finditer(r"[\[{]", text)):
        if n >= _MAX_CANDIDATES:
            break
        try:
            value, end = decoder.raw_decode(text, match.start())
        except (json.JSONDecodeError, RecursionError):
            continue
        items = _as_items(value)
        if items is not None and _plausible(items):
            return items, None, (match.start(), end), _beside(value)
    return None, "no JSON array of claims found", (0, 0), []


def parse_response(text: str) -> ParsedResponse:
    """Parse a model response into validated claims.

    Accepts a bare JSON array, an array in a ```json fence or surrounded by
    prose, or an object with a ``"claims"`` array. Returns status ``'ok'`` with
    the valid claims (invalid items counted in ``rejected``), ``'empty'`` for a
    valid empty array, or ``'broken'`` with an ``error`` when there is no usable
    array or every item is invalid.
    """
    items, error, _span, _beside_texts = _locate(text or "")
    if items is None:
        return ParsedResponse(status="broken", error=error)
    if not items:
        return ParsedResponse(status="empty")
    claims: list[dict[str, Any]] = []
    first_error: str | None = None
    for item in items:
        try:
            claims.append(normalise_claim(item))
        except _Invalid as exc:
            first_error = first_error or str(exc)
    rejected = len(items) - len(claims)
    if not claims:
        return ParsedResponse(
            status="broken",
            rejected=rejected,
            error=f"all {rejected} items rejected (first: {first_error})",
        )
    return ParsedResponse(status="ok", claims=claims, rejected=rejected, error=first_error)


# --- injection detection ------------------------------------------------------

_OPENERS = re.compile(
    r"^\W*(certainly|sure|of course|absolutely|great question|good question|here'?s|"
    r"here is|here are|i'?m sorry|i am sorry|sorry|i apologi[sz]e|my apologies|"
    r"as an ai|as a language model|i cannot|i can'?t|i'?m unable|i am unable|"
    r"unfortunately|hello|hi there|dear|once upon)\b",
    re.IGNORECASE,
)
_ANYWHERE = re.compile(
    r"\b(as an ai( language model)?|as a large language model|i'?m sorry,? but|"
    r"i apologi[sz]e|i cannot (help|assist|comply|provide|extract)|"
    r"i can'?t (help|assist|comply|provide|extract)|step \d+:|in conclusion)\b",
    re.IGNORECASE,
)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+\S", re.MULTILINE)
_LIST_ITEM = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+\S", re.MULTILINE)
_SCHEMA_KEYS = re.compile(r'"(subject|predicate|object|claims)"\s*:')
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")  # letters of any script

#: Responses with at least this many words of prose and no claims are hijacked.
_PROSE_WORDS = 40


_INSTRUCTIONS = re.compile(
    r"\b(ignore|disregard|forget|override)\b.{0,40}\b(instructions?|prompt|rules|above)\b|"
    r"\b(new|updated|system|developer) (instructions?|prompt|message)\b|"
    r"^\s*(system|assistant|user|developer)\s*:",
    re.IGNORECASE | re.MULTILINE,
)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _beside(value: Any) -> list[str]:
    """The texts of a ``{"claims": [...]}`` object's other keys (a "note" the model adds
    beside the claims is prose all the same)."""
    if not isinstance(value, dict):
        return []
    return [t for k, v in value.items() if k != "claims" for t in _strings(v)]


def _signals_with_claims(text: str) -> list[str]:
    """Reasons a response that carries claims was hijacked: anything but the JSON.

    The schema allows a bare array (or ``{"claims": [...]}``), optionally in one
    code fence; prose before or after it is the model talking, not extracting, and
    instructions there (``Ignore previous instructions.``) are the source's voice.
    """
    _items, _error, (start, end), beside = _locate(text)
    outside = " ".join([text[:start], text[end:], *beside])
    signals = []
    if _INSTRUCTIONS.search(outside):
        signals.append("instructions outside the JSON array")
    if _WORD.search(outside):
        signals.append("prose outside the JSON array")
    return signals


def injection_signals(text: str) -> list[str]:
    """Return the reasons a response looks hijacked (empty if none).

    A response with claims is hijacked when anything but the JSON array (and a code
    fence around it) is in it: prose or instructions before or after the array.
    A response without claims is hijacked on: an answer-style opener ("Certainly",
    "Here's", "I'm sorry", "As an AI"...), refusal/apology phrases anywhere,
    markdown headings, code fences that are not JSON, list-shaped prose, a
    poem-like run of short lines, or a long stretch of prose with no JSON array at
    all. (Claims whose quotes mostly do not anchor in the source are judged by
    ``donto.ingest_extraction``, which alone sees the source.)
    """
    stripped = (text or "").strip()
    if not stripped:
        return []
    parsed = parse_response(stripped)
    if parsed.status == "ok":
        return _signals_with_claims(stripped)
    if _SCHEMA_KEYS.search(stripped):
        return []  # a (possibly truncated or malformed) attempt at the schema
    signals: list[str] = []
    if parsed.status == "empty":
        # A valid empty array; only count it as hijacked when it is buried in
        # a long answer rather than wrapped in a sentence or two.
        outside = re.sub(r"\[\s*\]", " ", stripped)
        if len(_WORD.findall(outside)) < _PROSE_WORDS * 2:
            return []
        signals.append("empty array buried in a long answer")
    if _OPENERS.search(stripped):
        signals.append("answer-style opener")
    if _ANYWHERE.search(stripped):
        signals.append("refusal, apology or tutorial phrasing")
    if _HEADING.search(stripped):
        signals.append("markdown heading")
    for match in _FENCE.finditer(stripped):
        lang = match.group(1).lower()
        if lang not in {"json", ""} or not match.group(2).lstrip().startswith(("[", "{")):
            signals.append(f"code fence ({lang or 'plain'})")
            break
    if len(_LIST_ITEM.findall(stripped)) >= 3:
        signals.append("list-shaped prose")
    lines = [ln for ln in stripped.splitlines() if ln.strip()]
    short = [ln for ln in lines if 2 <= len(_WORD.findall(ln)) <= 10 and "{" not in ln]
    if len(lines) >= 4 and len(short) >= 0.75 * len(lines):
        signals.append("poem-like short lines")
    has_array = "[" in stripped
    if not has_array and len(_WORD.findall(stripped)) >= _PROSE_WORDS:
        signals.append("long prose without a JSON array")
    return signals


def looks_like_injection(text: str) -> bool:
    """True when the response answers or obeys the source instead of extracting.

    A bare or fenced array of claims, a valid empty array (``[]``, also in a
    sentence or two), an empty response and a malformed attempt at the schema
    (e.g. truncated JSON) are not injection; claims with prose or instructions
    around them, an answer, tutorial, poem, apology or meta-error are.
    """
    return bool(injection_signals(text))
