"""Load BEAM conversations and probing questions, and render the canonical chat text.

BEAM ("Beyond a Million Tokens", Tavakoli et al.) ships very long synthetic
user/assistant conversations plus 20 probing questions per conversation. This
module is pure Python (stdlib only; ``pyarrow`` is imported lazily, and only to
read ``.parquet`` files).

Inputs accepted by :func:`iter_beam`
------------------------------------
* the GitHub layout: a BEAM root (holding ``chats/``), a ``chats/`` directory, a
  scale directory (``chats/100K``), one conversation directory (``chats/100K/1``
  or ``chats/10M/5``) or one ``chat.json``;
* Hugging Face rows: a ``.jsonl`` file (JSON Lines), a ``.parquet`` file, or a
  ``.json`` array of rows. Each row has ``conversation_id``, ``chat`` (a list of
  batches, each a flat list of messages; in BEAM-10M a list of dicts keyed
  ``plan-1`` .. ``plan-10`` whose ids are already global) and
  ``probing_questions`` (a Python-literal string, parsed with
  :func:`ast.literal_eval`).

Normalisation
-------------
* ``Message.seq`` is the 0-based position in the whole conversation;
  ``turn_id`` is BEAM's message id in ONE global numbering (10M GitHub layout:
  local id + number of messages in all earlier plans); ``session`` is the
  1-based batch position across the whole conversation (10M: across plans);
  ``exchange`` is the 0-based index of the exchange (an inner list of
  ``turns``; in flat Hugging Face batches a new exchange starts at each user
  ``main_question``).
* ``date`` is the session's time anchor (BEAM puts ``time_anchor`` such as
  ``March-15-2024`` on the first message of a batch only); it is copied to every
  message of the session. ISO dates (``2024-03-15``) are accepted too.
* Content is cleaned by :func:`clean_content`: ``\\r\\n`` and lone ``\\r`` become
  ``\\n``, the generator marker at the end (`` ->-> 1,1``, ``->-> 2,N/A``,
  ``->-> 1,5)`` ...) is removed and trailing whitespace is stripped. Nothing
  else is changed.
* Duplicate message ids (a known defect of some 1M conversations) are kept and
  reported in ``Conversation.warnings``; a gold id then stands for every message
  that carries it.
* Bad input yields a :class:`BeamFormatError` naming the file and the place
  (batch, ``turns[e][m]`` position, message id, field); other conversations
  still load.

Canonical chat text (:func:`format_chat`)
-----------------------------------------
One deterministic text per conversation, a pure function of its messages::

    === session 1 | 2024-03-15 ===

    [user #0] I'm working on a project ...

    [assistant #1] Certainly! ...

    === session 2 | undated ===

    [user #2] ...

* a header line ``=== session <session> | <YYYY-MM-DD or 'undated'> ===``
  opens each session (a new header whenever ``session`` changes);
* each message is one block: the prefix ``[<role> #<turn_id>] `` followed by
  the content verbatim (code fences, brackets and header-like lines included);
* blocks (headers and messages) are separated by one blank line, and the body
  ends with a single ``\\n``;
* :class:`TurnSpan` offsets are Python ``str`` indices (Unicode code points):
  ``body[span.char_start:span.char_end] == message.content`` and
  ``body[span.header_start:span.char_start] == "[<role> #<turn_id>] "``.
"""

from __future__ import annotations

import ast
import datetime
import json
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "ABILITIES",
    "ANSWER_KEYS",
    "BeamFormatError",
    "Conversation",
    "Message",
    "Question",
    "TurnSpan",
    "clean_content",
    "code_char_share",
    "format_chat",
    "iter_beam",
    "parse_beam_date",
]

ABILITIES: tuple[str, ...] = (
    "abstention",
    "contradiction_resolution",
    "event_ordering",
    "information_extraction",
    "instruction_following",
    "knowledge_update",
    "multi_session_reasoning",
    "preference_following",
    "summarization",
    "temporal_reasoning",
)

#: Keys holding the reference answer, tried in this order. instruction_following and
#: preference_following have no answer key in BEAM: their ``expected_compliance`` is used.
ANSWER_KEYS: tuple[str, ...] = (
    "answer",
    "ideal_answer",
    "ideal_response",
    "ideal_summary",
    "expected_compliance",
)

_SCALE_ORDER = ("100K", "500K", "1M", "10M")
_SCALE_RE = re.compile(r"^\d+(?:\.\d+)?[KMB]$", re.IGNORECASE)
_SCALE_IN_NAME_RE = re.compile(r"(?<![0-9a-z])(100k|500k|1m|10m)(?![0-9a-z])", re.IGNORECASE)
_PLAN_RE = re.compile(r"^plan-(\d+)$")
_GITHUB_PLANS = range(0, 10)
_HF_PLANS = range(1, 11)

# The generator's bookkeeping marker at the end of (mostly user) messages: " ->-> 1,1",
# and the variants seen in the data: "->-> 2,N/A", "->-> 1,5)", "->-> 3,", "->-> 2,22, 24".
_MARKER_RE = re.compile(
    r"[ \t]*->->[ \t]*\d+[ \t]*,[ \t]*(?:\d+(?:[ \t]*,[ \t]*\d+)*|N/A)?[ \t]*\)?\s*\Z"
)
_MARKER_WINDOW = 200

_MONTHS = {
    name: i
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
_BEAM_DATE_RE = re.compile(r"^([A-Za-z]+)[- ](\d{1,2}),?[- ](\d{4})$")
_ID_STR_RE = re.compile(r"^\s*\d+\s*$")
_FENCE_RE = re.compile(r"^[ \t]*(`{3,}|~{3,})(.*)$")


# --------------------------------------------------------------------------- data model


@dataclass(frozen=True)
class Message:
    """One message of a conversation, in conversation order."""

    seq: int
    turn_id: int
    role: str
    session: int
    date: datetime.date | None
    content: str
    question_type: str | None
    exchange: int


@dataclass
class Question:
    """One probing question with its gold turns normalised to global turn ids."""

    ability: str
    index: int
    question: str
    answer: str | None
    rubric: list | None
    gold: list[list[int]]
    stale: list[int]
    skipped: list[str]
    raw: dict


@dataclass
class Conversation:
    """A loaded conversation: messages in order, questions, and load warnings."""

    conversation_id: str
    scale: str
    messages: list[Message]
    questions: list[Question]
    warnings: list[str] = field(default_factory=list)
    source: str = ""

    def turn_seqs(self) -> dict[int, list[int]]:
        """Map each turn id to the ``seq`` of every message carrying it (duplicates)."""
        out: dict[int, list[int]] = defaultdict(list)
        for m in self.messages:
            out[m.turn_id].append(m.seq)
        return dict(out)


class BeamFormatError(ValueError):
    """Malformed BEAM input. ``str(err)`` reads ``<file>: <problem> at <place>``."""

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        where: str | None = None,
        conversation_id: str | None = None,
    ) -> None:
        self.message = message
        self.source = source
        self.where = where
        self.conversation_id = conversation_id
        text = message
        if where:
            text = f"{text} at {where}"
        if source:
            text = f"{source}: {text}"
        super().__init__(text)


@dataclass(frozen=True)
class TurnSpan:
    """Where one message sits in the canonical body (``str`` indices)."""

    seq: int
    turn_id: int
    role: str
    session: int
    exchange: int
    date: datetime.date | None
    header_start: int
    char_start: int
    char_end: int


# --------------------------------------------------------------------------- small helpers


def clean_content(text: str) -> str:
    """Normalise newlines, drop trailing generator markers (`` ->-> 1,1``), strip the end."""
    s = text.replace("\r\n", "\n").replace("\r", "\n").rstrip()
    while True:
        tail = s[-_MARKER_WINDOW:]
        m = _MARKER_RE.search(tail)
        if m is None:
            return s
        s = s[: len(s) - len(tail) + m.start()].rstrip()


def parse_beam_date(value: str) -> datetime.date:
    """Parse a BEAM time anchor (``March-15-2024``, ``Mar-15-2024``) or an ISO date.

    Raises ``ValueError`` with a readable message for anything else
    (``February-30-2024``, ``not a date``).
    """
    s = value.strip()
    m = _BEAM_DATE_RE.match(s)
    if m:
        month = _MONTHS.get(m.group(1).lower())
        if month is None:
            raise ValueError(f"unknown month name {m.group(1)!r} in date {value!r}")
        try:
            return datetime.date(int(m.group(3)), month, int(m.group(2)))
        except ValueError as exc:
            raise ValueError(f"invalid date {value!r}: {exc}") from None
    try:
        return datetime.date.fromisoformat(s)
    except ValueError:
        pass
    try:
        return datetime.datetime.fromisoformat(s).date()
    except ValueError:
        pass
    raise ValueError(f"invalid date {value!r} (expected like 'March-15-2024' or '2024-03-15')")


def _id_sort_key(cid: str) -> tuple[int, int, str]:
    return (0, int(cid), cid) if cid.isdigit() else (1, 0, cid)


def _scale_sort_key(name: str) -> tuple[int, str]:
    upper = name.upper()
    if upper in _SCALE_ORDER:
        return (_SCALE_ORDER.index(upper), upper)
    return (len(_SCALE_ORDER), name)


def _as_id(value: Any) -> int | None:
    """An id as int, or None when it is not a non-negative integer (or numeric string)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and _ID_STR_RE.match(value):
        return int(value)
    return None


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _too_deep() -> str:
    """The message for input nested past the interpreter's recursion limit."""
    return ("JSON nested too deeply to read (arrays or objects inside one another past "
            f"Python's recursion limit of {sys.getrecursionlimit()})")


def _load_json_text(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BeamFormatError(
            f"malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", source=source
        ) from None
    except RecursionError:
        raise BeamFormatError(_too_deep(), source=source) from None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise BeamFormatError(
            f"not UTF-8 text (byte offset {exc.start}: {exc.reason})", source=str(path)
        ) from None
    except OSError as exc:
        raise BeamFormatError(
            f"cannot read file: {exc.strerror or exc}", source=str(path)
        ) from None


def _load_json_file(path: Path) -> Any:
    return _load_json_text(_read_text(path), str(path))


# --------------------------------------------------------------------------- chat parsing


@dataclass
class _Part:
    """One stretch of batches: a whole chat.json, or one plan of a 10M conversation."""

    batches: Any
    source: str
    label: str | None  # 'plan-1' for 10M parts, None otherwise
    id_offset: int  # added to local ids (GitHub 10M layout), else 0
    flat_prefix: str  # place prefix for Hugging Face rows, e.g. 'chat' or "chat[0]['plan-1']"


def _split_flat(items: list[Any]) -> list[list[tuple[str, Any]]]:
    """Split a flat list of messages into exchanges (new one at each user main_question)."""
    exchanges: list[list[tuple[str, Any]]] = []
    prev_role: Any = None
    for i, msg in enumerate(items):
        starts = not exchanges
        if isinstance(msg, dict) and msg.get("role") == "user":
            qt = msg.get("question_type")
            if qt == "main_question" or (qt is None and prev_role == "assistant"):
                starts = True
        if starts:
            exchanges.append([])
        exchanges[-1].append((f"[{i}]", msg))
        prev_role = msg.get("role") if isinstance(msg, dict) else None
    return exchanges


def _batch_exchanges(
    batch: Any, where: str, source: str
) -> tuple[list[list[tuple[str, Any]]], Any, Any, str]:
    """Return (exchanges of (place, message)), batch time_anchor, batch_number, place prefix."""
    if isinstance(batch, dict):
        if "turns" not in batch:
            raise BeamFormatError("missing field 'turns'", source=source, where=where)
        turns = batch["turns"]
        anchor, number, prefix = batch.get("time_anchor"), batch.get("batch_number"), "turns"
    elif isinstance(batch, list):
        turns, anchor, number, prefix = batch, None, None, ""
    else:
        raise BeamFormatError(
            f"a batch must be an object or a list, got {type(batch).__name__}",
            source=source,
            where=where,
        )
    if not isinstance(turns, list):
        raise BeamFormatError(
            f"field 'turns' must be a list, got {type(turns).__name__}", source=source, where=where
        )
    if all(isinstance(t, list) for t in turns):
        exchanges = [
            [(f"[{e}][{m}]", msg) for m, msg in enumerate(ex)] for e, ex in enumerate(turns) if ex
        ]
    elif all(not isinstance(t, list) for t in turns):
        exchanges = _split_flat(turns)
    else:
        raise BeamFormatError(
            "a batch mixes exchanges (lists) and bare messages", source=source, where=where
        )
    return exchanges, anchor, number, prefix


def _parse_message(msg: Any, source: str, where: str) -> tuple[int, str, str, str | None, Any]:
    """Validate one raw message; return (local id, role, raw content, question_type, anchor)."""
    if not isinstance(msg, dict):
        raise BeamFormatError(
            f"a message must be an object, got {type(msg).__name__}", source=source, where=where
        )
    raw_id = msg.get("id")
    for key in ("role", "id", "content"):
        if msg.get(key) is None:
            raise BeamFormatError(f"missing field {key!r}", source=source, where=where)
    role = msg["role"]
    if not isinstance(role, str) or role.strip().lower() not in ("user", "assistant"):
        raise BeamFormatError(
            f"unknown role {_describe(role)} (expected 'user' or 'assistant')",
            source=source,
            where=f"{where}, field 'role'",
        )
    local_id = _as_id(raw_id)
    if local_id is None:
        raise BeamFormatError(
            f"field 'id' must be a non-negative integer, got {_describe(raw_id)}",
            source=source,
            where=where,
        )
    content = msg["content"]
    if not isinstance(content, str):
        raise BeamFormatError(
            f"message content must be a string, got {type(content).__name__}",
            source=source,
            where=f"{where}, field 'content'",
        )
    if "\x00" in content:
        raise BeamFormatError(
            "NUL byte in message content",
            source=source,
            where=f"{where}, field 'content', character {content.index(chr(0))}",
        )
    qt = msg.get("question_type")
    if qt is not None and not isinstance(qt, str):
        raise BeamFormatError(
            f"field 'question_type' must be a string, got {type(qt).__name__}",
            source=source,
            where=where,
        )
    return local_id, role.strip().lower(), content, qt, msg.get("time_anchor")


def _parse_anchor(value: Any, source: str, where: str) -> datetime.date | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str):
        raise BeamFormatError(
            f"field 'time_anchor' must be a string, got {type(value).__name__}",
            source=source,
            where=where,
        )
    try:
        return parse_beam_date(value)
    except ValueError as exc:
        raise BeamFormatError(f"{exc} in field 'time_anchor'", source=source, where=where) from None


def _build_messages(parts: Sequence[_Part], warnings: list[str]) -> list[Message]:
    """Turn parts (whole chats or 10M plans) into globally numbered messages."""
    messages: list[Message] = []
    session = 0
    exchange = 0
    for part in parts:
        base = f"{part.label}, " if part.label else ""
        if not isinstance(part.batches, list):
            raise BeamFormatError(
                f"the chat must be a list of batches, got {type(part.batches).__name__}",
                source=part.source,
                where=part.label or part.flat_prefix or None,
            )
        for b, batch in enumerate(part.batches):
            session += 1
            number = batch.get("batch_number") if isinstance(batch, dict) else None
            if part.flat_prefix:
                bwhere = f"{base}{part.flat_prefix}[{b}]"
            else:
                shown = number if isinstance(number, int) else b + 1
                bwhere = f"{base}batch {shown}"
            exchanges, batch_anchor, number, prefix = _batch_exchanges(batch, bwhere, part.source)
            if number is not None and number != b + 1:
                warnings.append(
                    f"{part.source}: {bwhere} has batch_number {_describe(number)} at position "
                    f"{b + 1}; sessions follow file order"
                )
            rows: list[tuple[int, str, str, str | None, int]] = []
            anchors: list[tuple[datetime.date, str]] = []
            for ex in exchanges:
                for place, msg in ex:
                    if part.flat_prefix:
                        where = f"{bwhere}{'.' + prefix if prefix else ''}{place}"
                    else:
                        where = f"{bwhere}, {prefix or 'messages'}{place}"
                    if isinstance(msg, dict) and msg.get("id") is not None:
                        where = f"{where} (id {_describe(msg['id'])})"
                    local_id, role, content, qt, anchor = _parse_message(msg, part.source, where)
                    day = _parse_anchor(anchor, part.source, where)
                    if day is not None:
                        anchors.append((day, where))
                    rows.append((local_id + part.id_offset, role, content, qt, exchange))
                exchange += 1
            day = anchors[0][0] if anchors else _parse_anchor(batch_anchor, part.source, bwhere)
            others = sorted({d.isoformat() for d, _ in anchors if d != day})
            if others:
                warnings.append(
                    f"{part.source}: {bwhere} has several time anchors; session {session} uses "
                    f"the first ({day.isoformat() if day else 'none'}), ignored {', '.join(others)}"
                )
            for turn_id, role, content, qt, ex_no in rows:
                messages.append(
                    Message(
                        seq=len(messages),
                        turn_id=turn_id,
                        role=role,
                        session=session,
                        date=day,
                        content=clean_content(content),
                        question_type=qt,
                        exchange=ex_no,
                    )
                )
    return messages


def _duplicate_warning(messages: Sequence[Message], limit: int = 10) -> str | None:
    where: dict[int, list[Message]] = defaultdict(list)
    for m in messages:
        where[m.turn_id].append(m)
    dups = sorted(tid for tid, ms in where.items() if len(ms) > 1)
    if not dups:
        return None
    shown = []
    for tid in dups[:limit]:
        places = ", ".join(f"seq {m.seq} in session {m.session}" for m in where[tid])
        shown.append(f"{tid} ({places})")
    more = f"; ... and {len(dups) - limit} more" if len(dups) > limit else ""
    return (
        f"duplicate message ids: {len(dups)} id(s) occur more than once, every message kept "
        f"(a gold id stands for all its messages): {'; '.join(shown)}{more}"
    )


# --------------------------------------------------------------------------- questions


def _collect_ids(value: Any, path: str, notes: list[str], depth: int = 0) -> list[int]:
    """Flatten ids from a scalar or (nested) list; note every non-integer entry."""
    if isinstance(value, list):
        out: list[int] = []
        for i, item in enumerate(value):
            out.extend(_collect_ids(item, f"{path}[{i}]", notes, depth + 1))
        return out
    tid = _as_id(value)
    if tid is None:
        notes.append(f"skipped non-integer id {_describe(value)} at {path}")
        return []
    return [tid]


def _dedupe(ids: Iterable[int]) -> list[int]:
    return list(dict.fromkeys(ids))


_PAIR_SHAPES: tuple[tuple[str, str], ...] = (
    ("first_statement", "second_statement"),
    ("first_event", "second_event"),
)


def _normalise_gold(ability: str, raw: dict) -> tuple[list[list[int]], list[int], list[str]]:
    """Gold groups, stale ids and notes from ``source_chat_ids`` (before prefix checks)."""
    notes: list[str] = []
    value = raw.get("source_chat_ids")
    path = "source_chat_ids"
    if value is None:
        if ability != "abstention":
            notes.append("no source_chat_ids: no gold turn")
        return [], [], notes
    if isinstance(value, dict):
        keys = set(value)
        if {"original_info", "updated_info"} <= keys:
            stale = _dedupe(_collect_ids(value["original_info"], f"{path}.original_info", notes))
            updated = _dedupe(_collect_ids(value["updated_info"], f"{path}.updated_info", notes))
            if not updated:
                notes.append("updated_info is empty: no gold turn")
            extra = keys - {"original_info", "updated_info"}
            if extra:
                notes.append(f"ignored unexpected keys {sorted(extra)} in {path}")
            return ([updated] if updated else []), stale, notes
        for first, second in _PAIR_SHAPES:
            if {first, second} <= keys:
                extra = keys - {first, second}
                if extra:
                    notes.append(f"ignored unexpected keys {sorted(extra)} in {path}")
                ids = _collect_ids(value[first], f"{path}.{first}", notes)
                ids += _collect_ids(value[second], f"{path}.{second}", notes)
                ids = _dedupe(ids)
                return ([ids] if ids else []), [], notes
        notes.append(f"unexpected keys {sorted(keys)} in {path}: used the ids of all of them")
        ids = _dedupe(i for k in value for i in _collect_ids(value[k], f"{path}.{k}", notes))
        return ([ids] if ids else []), [], notes
    if isinstance(value, list):
        if ability == "event_ordering":
            groups: list[list[int]] = []
            for i, item in enumerate(value):
                ids = _dedupe(_collect_ids(item, f"{path}[{i}]", notes))
                if ids:
                    groups.append(ids)
            return groups, [], notes
        ids = _dedupe(_collect_ids(value, path, notes))
        return ([ids] if ids else []), [], notes
    ids = _collect_ids(value, path, notes)
    return ([ids] if ids else []), [], notes


def _answer_of(raw: dict) -> str | None:
    for key in ANSWER_KEYS:
        value = raw.get(key)
        if value is None:
            continue
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return None


def _parse_questions(
    data: Any, source: str, messages: Sequence[Message], warnings: list[str]
) -> list[Question]:
    """Normalise a probing_questions dict; drop gold ids that are not among the messages."""
    if not isinstance(data, dict):
        raise BeamFormatError(
            f"probing questions must be an object keyed by ability, got {type(data).__name__}",
            source=source,
        )
    known = {m.turn_id for m in messages}
    last = max(known)
    questions: list[Question] = []
    past = 0
    for ability, items in data.items():
        if not isinstance(items, list):
            raise BeamFormatError(
                f"ability {ability!r} must hold a list of questions, got {type(items).__name__}",
                source=source,
            )
        if ability not in ABILITIES:
            warnings.append(f"{source}: unknown ability {ability!r} (kept)")
        for index, raw in enumerate(items):
            where = f"{ability}[{index}]"
            if not isinstance(raw, dict):
                raise BeamFormatError(
                    f"a question must be an object, got {type(raw).__name__}",
                    source=source,
                    where=where,
                )
            text = raw.get("question")
            if not isinstance(text, str):
                problem = "missing field 'question'" if text is None else "'question' not a string"
                raise BeamFormatError(problem, source=source, where=where)
            gold, stale, notes = _normalise_gold(str(ability), raw)
            dropped: list[int] = []
            kept_groups: list[list[int]] = []
            for group in gold:
                kept = [i for i in group if i in known]
                dropped.extend(i for i in group if i not in known)
                if kept:
                    kept_groups.append(kept)
            stale_kept = [i for i in stale if i in known]
            stale_dropped = [i for i in stale if i not in known]
            for label, ids in (("gold", dropped), ("stale", stale_dropped)):
                beyond = _dedupe(i for i in ids if i > last)
                missing = _dedupe(i for i in ids if i <= last)
                if beyond:
                    notes.append(
                        f"{label} ids past the loaded messages (last loaded id {last}): "
                        + ", ".join(map(str, beyond))
                    )
                if missing:
                    notes.append(
                        f"{label} ids not found among the loaded messages: "
                        + ", ".join(map(str, missing))
                    )
            if dropped and not kept_groups and gold:
                notes.append("no gold turn left among the loaded messages")
            if dropped or stale_dropped:
                past += 1
            rubric = raw.get("rubric")
            if isinstance(rubric, str):
                rubric = [rubric]
            elif rubric is not None and not isinstance(rubric, list):
                rubric = [rubric]
            questions.append(
                Question(
                    ability=str(ability),
                    index=index,
                    question=text,
                    answer=_answer_of(raw),
                    rubric=rubric,
                    gold=kept_groups,
                    stale=stale_kept,
                    skipped=notes,
                    raw=raw,
                )
            )
    if past:
        warnings.append(
            f"{past} of {len(questions)} questions point at ids that are not among the loaded "
            f"messages (last loaded id {last}); the questions are kept, the ids are listed in "
            "Question.skipped"
        )
    return questions


def _assemble(
    *,
    cid: str,
    scale: str,
    parts: Sequence[_Part],
    questions_data: Any,
    questions_source: str | None,
    source: str,
    warnings: list[str],
) -> Conversation:
    conv_id = f"{scale}/{cid}"
    messages = _build_messages(parts, warnings)
    if not messages:
        raise BeamFormatError("empty conversation: no messages", source=source)
    dup = _duplicate_warning(messages)
    if dup:
        warnings.append(dup)
    questions: list[Question] = []
    if questions_source is None:
        warnings.append("no probing questions found: the conversation has no questions")
    else:
        questions = _parse_questions(questions_data, questions_source, messages, warnings)
    return Conversation(
        conversation_id=conv_id,
        scale=scale,
        messages=messages,
        questions=questions,
        warnings=warnings,
        source=source,
    )


# --------------------------------------------------------------------------- GitHub layout


def _questions_path(conv_dir: Path) -> Path | None:
    for candidate in (
        conv_dir / "probing_questions" / "probing_questions.json",
        conv_dir / "probing_questions.json",
    ):
        if candidate.is_file():
            return candidate
    return None


def _plan_dirs(conv_dir: Path) -> dict[int, Path]:
    out: dict[int, Path] = {}
    for child in conv_dir.iterdir():
        m = _PLAN_RE.match(child.name)
        if m and child.is_dir():
            out[int(m.group(1))] = child
    return out


def _is_conv_dir(path: Path) -> bool:
    return (path / "chat.json").is_file() or bool(_plan_dirs(path))


def _plan_warning(loaded: list[int], expected: range) -> str | None:
    if loaded == list(expected):
        return None
    names = ", ".join(f"plan-{k}" for k in loaded) or "none"
    missing = [k for k in expected if k not in loaded]
    miss = ", ".join(f"plan-{k}" for k in missing)
    return (
        f"partial 10M conversation: loaded {names} "
        f"(of plan-{expected[0]}..plan-{expected[-1]}; missing {miss or 'none'})"
    )


def _load_conv_dir(conv_dir: Path, scale: str, only_plan: int | None = None) -> Conversation:
    """Load ``chats/<scale>/<id>`` (flat chat.json or the 10M plan-K layout)."""
    cid = conv_dir.name
    warnings: list[str] = []
    parts: list[_Part] = []
    chat_file = conv_dir / "chat.json"
    plans = _plan_dirs(conv_dir)
    if only_plan is None and chat_file.is_file():
        if plans:
            warnings.append(
                f"{conv_dir}: has both chat.json and plan-K directories; used chat.json"
            )
        parts.append(_Part(_load_json_file(chat_file), str(chat_file), None, 0, ""))
        sources = [str(chat_file)]
    else:
        present = sorted(k for k, d in plans.items() if (d / "chat.json").is_file())
        if only_plan is not None:
            if only_plan != 0:
                raise BeamFormatError(
                    f"plan-{only_plan}/chat.json cannot be loaded on its own: ids restart in "
                    "every plan, so they can only be made global from plan-0 on (load the "
                    "conversation directory instead)",
                    source=str(plans[only_plan] / "chat.json"),
                )
            present = [0]
        if not present:
            raise BeamFormatError("no chat.json and no plan-K/chat.json", source=str(conv_dir))
        if present[0] != 0:
            raise BeamFormatError(
                f"plan-0 is missing (found {', '.join(f'plan-{k}' for k in present)}): "
                "ids restart in every plan, so they cannot be made global without the "
                "earlier plans",
                source=str(conv_dir),
            )
        loaded = [k for i, k in enumerate(present) if k == i]
        if len(loaded) < len(present):
            gap = ", ".join(f"plan-{k}" for k in present[len(loaded) :])
            warnings.append(
                f"skipped {gap}: plan-{len(loaded)} is missing, so their ids cannot be made global"
            )
        note = _plan_warning(loaded, _GITHUB_PLANS)
        if note:
            warnings.append(note)
        offset = 0
        sources = []
        for k in loaded:
            path = plans[k] / "chat.json"
            batches = _load_json_file(path)
            parts.append(_Part(batches, str(path), f"plan-{k}", offset, ""))
            offset += _count_messages(batches)
            sources.append(str(path))
    qpath = _questions_path(conv_dir)
    qdata = _load_json_file(qpath) if qpath else None
    if qpath:
        sources.append(str(qpath))
    return _assemble(
        cid=cid,
        scale=scale,
        parts=parts,
        questions_data=qdata,
        questions_source=str(qpath) if qpath else None,
        source=", ".join(sources),
        warnings=warnings,
    )


def _count_messages(batches: Any) -> int:
    """Messages in one plan (used for the global id offset of the next plan)."""
    if not isinstance(batches, list):
        return 0
    n = 0
    for batch in batches:
        turns = batch.get("turns") if isinstance(batch, dict) else batch
        if not isinstance(turns, list):
            continue
        for item in turns:
            n += len(item) if isinstance(item, list) else 1
    return n


# --------------------------------------------------------------------------- Hugging Face rows


def _parse_probing(value: Any, source: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            pass
        line = getattr(exc, "lineno", None)
        col = getattr(exc, "offset", None)
        place = f" (line {line}, column {col})" if line else ""
        raise BeamFormatError(
            f"field 'probing_questions' is not a Python literal{place}: {exc}", source=source
        ) from None


def _row_to_conversation(row: Any, scale: str, source: str) -> Conversation:
    if not isinstance(row, dict):
        raise BeamFormatError(f"a row must be an object, got {type(row).__name__}", source=source)
    raw_cid = row.get("conversation_id")
    if raw_cid is None or str(raw_cid).strip() == "":
        raise BeamFormatError("missing field 'conversation_id'", source=source)
    cid = str(raw_cid).strip()
    chat = row.get("chat")
    if not isinstance(chat, list):
        raise BeamFormatError(
            "missing field 'chat'" if chat is None else "field 'chat' must be a list",
            source=source,
        )
    warnings: list[str] = []
    parts: list[_Part] = []
    if chat and all(
        isinstance(x, dict) and x and all(_PLAN_RE.match(str(k)) for k in x) for x in chat
    ):
        plans: dict[int, tuple[Any, str]] = {}
        for i, item in enumerate(chat):
            for key, batches in item.items():
                m = _PLAN_RE.match(str(key))
                assert m is not None  # checked above
                if batches is None:
                    continue  # Parquet structs carry every plan key, null where absent
                k = int(m.group(1))
                if k in plans:
                    raise BeamFormatError(f"plan-{k} appears twice", source=source)
                plans[k] = (batches, f"chat[{i}][{key!r}]")
        for k in sorted(plans):
            batches, prefix = plans[k]
            parts.append(_Part(batches, source, None, 0, prefix))
        note = _plan_warning(sorted(plans), _HF_PLANS)
        if note:
            warnings.append(note)
    else:
        parts.append(_Part(chat, source, None, 0, "chat"))
    qdata = _parse_probing(row.get("probing_questions"), source)
    return _assemble(
        cid=cid,
        scale=scale,
        parts=parts,
        questions_data=qdata,
        questions_source=source if qdata is not None else None,
        source=source,
        warnings=warnings,
    )


def _scale_from_name(path: Path) -> str | None:
    m = _SCALE_IN_NAME_RE.search(path.name)
    return m.group(1).upper() if m else None


# --------------------------------------------------------------------------- iteration


class _Filter:
    """Conversation filter: tokens like '1' or '100K/1'; remembers which matched."""

    def __init__(self, conversations: str | int | Iterable[str | int] | None) -> None:
        if conversations is None:
            self.tokens: list[str] | None = None
        elif isinstance(conversations, (str, int)):
            self.tokens = [str(conversations).strip()]
        else:
            self.tokens = [str(c).strip() for c in conversations]
        self.matched: set[str] = set()

    def __call__(self, scale: str, cid: str) -> bool:
        if self.tokens is None:
            return True
        hit = False
        for tok in self.tokens:
            if tok == cid or tok.lower() == f"{scale}/{cid}".lower():
                self.matched.add(tok)
                hit = True
        return hit

    def unmatched(self) -> list[str]:
        return [] if self.tokens is None else [t for t in self.tokens if t not in self.matched]


def _guard(load: Any, *args: Any, conversation_id: str | None) -> Conversation | BeamFormatError:
    """Run one conversation's loader; turn its BeamFormatError into a yielded value."""
    try:
        return load(*args)
    except BeamFormatError as exc:
        if exc.conversation_id is None:
            exc.conversation_id = conversation_id
        return exc
    except RecursionError:  # nesting that parsed but is too deep to walk
        return BeamFormatError(_too_deep(), source=str(args[0])[:200],
                               conversation_id=conversation_id)


def _scale_of_dir(name: str, scale: str | None) -> tuple[str, bool]:
    """(scale label, whether the directory itself tells the scale)."""
    if _SCALE_RE.match(name):
        return name.upper(), True
    return (scale or name), False


def _iter_scale_dir(
    scale_dir: Path, scale: str, keep: _Filter
) -> Iterator[Conversation | BeamFormatError]:
    children = [
        c for c in scale_dir.iterdir() if c.is_dir() and (c.name.isdigit() or _is_conv_dir(c))
    ]
    for child in sorted(children, key=lambda c: _id_sort_key(c.name)):
        if keep(scale, child.name):
            yield _guard(
                _load_conv_dir,
                child,
                scale,
                conversation_id=f"{scale}/{child.name}",
            )


def _iter_chats_dir(
    chats: Path, scale: str | None, keep: _Filter
) -> Iterator[Conversation | BeamFormatError]:
    scale_dirs = [c for c in chats.iterdir() if c.is_dir() and not c.name.startswith(".")]
    for sdir in sorted(scale_dirs, key=lambda c: _scale_sort_key(c.name)):
        label, _ = _scale_of_dir(sdir.name, None)
        if scale is not None and label.lower() != scale.lower():
            continue
        yield from _iter_scale_dir(sdir, label, keep)


def _iter_rows_file(
    path: Path, scale: str | None, keep: _Filter
) -> Iterator[Conversation | BeamFormatError]:
    label = scale or _scale_from_name(path) or "hf"
    suffix = path.name.lower()
    if suffix.endswith(".parquet"):
        yield from _iter_parquet(path, label, keep)
        return
    if suffix.endswith(".json"):
        data = _load_json_file(path)
        if not isinstance(data, list):
            raise BeamFormatError("expected a JSON array of rows", source=str(path))
        entries = [
            (str(r.get("conversation_id", "")).strip() if isinstance(r, dict) else "", i, r)
            for i, r in enumerate(data)
        ]
        for cid, i, row in sorted(entries, key=lambda e: (_id_sort_key(e[0]), e[1])):
            if keep(label, cid) or not cid:
                src = f"{path} (row {i})"
                yield _guard(
                    _row_to_conversation,
                    row,
                    label,
                    src,
                    conversation_id=f"{label}/{cid}" if cid else None,
                )
        return
    # JSON Lines: a first pass records each row's id and byte offset, rows are parsed again
    # in id order so that only one conversation is held in memory at a time.
    index: list[tuple[tuple[int, int, str], int, int, str]] = []
    errors: list[BeamFormatError] = []
    with path.open("rb") as fh:
        line_no = 0
        while True:
            offset = fh.tell()
            line = fh.readline()
            if not line:
                break
            line_no += 1
            if not line.strip():
                continue
            src = f"{path} (line {line_no})"
            try:
                row = json.loads(line.decode("utf-8"))
            except UnicodeDecodeError as exc:
                errors.append(BeamFormatError(f"not UTF-8 text ({exc.reason})", source=src))
                continue
            except json.JSONDecodeError as exc:
                errors.append(
                    BeamFormatError(
                        f"malformed JSON at line {line_no}, column {exc.colno}: {exc.msg}",
                        source=str(path),
                    )
                )
                continue
            except RecursionError:
                errors.append(BeamFormatError(_too_deep(), source=src))
                continue
            cid = str(row.get("conversation_id", "")).strip() if isinstance(row, dict) else ""
            index.append((_id_sort_key(cid), line_no, offset, cid))
    yield from errors
    with path.open("rb") as fh:
        for _key, line_no, offset, cid in sorted(index):
            if cid and not keep(label, cid):
                continue
            fh.seek(offset)
            row = json.loads(fh.readline().decode("utf-8"))
            src = f"{path} (line {line_no})"
            yield _guard(
                _row_to_conversation,
                row,
                label,
                src,
                conversation_id=f"{label}/{cid}" if cid else None,
            )


def _iter_parquet(
    path: Path, label: str, keep: _Filter
) -> Iterator[Conversation | BeamFormatError]:
    try:
        import pyarrow.parquet as pq  # optional dependency, imported lazily
    except ImportError as exc:
        raise ImportError(
            f"reading {path.name} needs pyarrow, which is not installed: "
            "install it with `pip install pyarrow`, or use the JSON Lines form of the rows"
        ) from exc
    table = pq.read_table(str(path))
    if "conversation_id" not in table.column_names:
        raise BeamFormatError("missing column 'conversation_id'", source=str(path))
    ids = [
        str(x).strip() if x is not None else "" for x in table.column("conversation_id").to_pylist()
    ]
    for i in sorted(range(len(ids)), key=lambda i: (_id_sort_key(ids[i]), i)):
        cid = ids[i]
        if cid and not keep(label, cid):
            continue
        src = f"{path} (row {i})"
        row = table.slice(i, 1).to_pylist()[0]
        yield _guard(
            _row_to_conversation,
            row,
            label,
            src,
            conversation_id=f"{label}/{cid}" if cid else None,
        )


def iter_beam(
    path: str | Path,
    *,
    scale: str | None = None,
    conversations: str | int | Iterable[str | int] | None = None,
) -> Iterator[Conversation | BeamFormatError]:
    """Yield each BEAM conversation under ``path``, ordered by scale then numeric id.

    ``path`` may be a BEAM root (holding ``chats/``), a ``chats/`` directory, a scale
    directory, one conversation directory, one ``chat.json``, or a Hugging Face rows
    file (``.jsonl``, ``.parquet``, or a ``.json`` array). ``scale`` labels data whose
    path does not tell its scale (rows files, where it overrides the scale found in
    the file name, else ``'hf'``) and filters the scale directories of a root or
    ``chats/`` directory. ``conversations`` keeps only the given ids (``'1'`` or
    ``'100K/1'``).

    A conversation that cannot be loaded is yielded as a :class:`BeamFormatError`
    and the others still load; so is each filter id that matched nothing. A path
    that does not exist raises ``FileNotFoundError``; a layout that is not
    recognised raises :class:`BeamFormatError`.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no such file or directory: {p}")
    keep = _Filter(conversations)
    yield from _iter_path(p, scale, keep)
    for tok in keep.unmatched():
        yield BeamFormatError(f"conversation {tok!r} not found", source=str(p))


def _iter_path(
    p: Path, scale: str | None, keep: _Filter
) -> Iterator[Conversation | BeamFormatError]:
    """Dispatch on what ``p`` is (file kind or directory layout)."""
    if p.is_file():
        name = p.name.lower()
        if name == "chat.json":
            yield from _iter_chat_file(p, scale, keep)
        elif name.endswith((".jsonl", ".parquet")):
            yield from _iter_rows_file(p, scale, keep)
        elif name.endswith(".json"):
            yield from _iter_rows_file(p, scale, keep)
        else:
            raise BeamFormatError(
                "not a BEAM file (expected chat.json, .jsonl, .parquet or .json rows)",
                source=str(p),
            )
        return
    if (p / "chats").is_dir():
        yield from _iter_chats_dir(p / "chats", scale, keep)
    elif _is_conv_dir(p):
        label, told = _scale_of_dir(p.parent.name, scale)
        if told and scale is not None and label.lower() != scale.lower():
            return
        if keep(label, p.name):
            yield _guard(_load_conv_dir, p, label, conversation_id=f"{label}/{p.name}")
    elif p.name == "chats":
        yield from _iter_chats_dir(p, scale, keep)
    elif any(c.is_dir() and _is_conv_dir(c) for c in p.iterdir()):
        label, told = _scale_of_dir(p.name, scale)
        if told and scale is not None and label.lower() != scale.lower():
            return
        yield from _iter_scale_dir(p, label, keep)
    else:
        raise BeamFormatError(
            "no BEAM layout found (expected chats/<scale>/<id>/chat.json or <id>/plan-K/chat.json)",
            source=str(p),
        )


def _iter_chat_file(
    p: Path, scale: str | None, keep: _Filter
) -> Iterator[Conversation | BeamFormatError]:
    """A single chat.json: its conversation directory, or one plan of a 10M conversation."""
    plan = _PLAN_RE.match(p.parent.name)
    conv_dir = p.parent.parent if plan else p.parent
    label, told = _scale_of_dir(conv_dir.parent.name, scale)
    if told and scale is not None and label.lower() != scale.lower():
        return
    if not keep(label, conv_dir.name):
        return
    only = int(plan.group(1)) if plan else None
    yield _guard(
        _load_conv_dir,
        conv_dir,
        label,
        only,
        conversation_id=f"{label}/{conv_dir.name}",
    )


# --------------------------------------------------------------------------- canonical text


def format_chat(conv: Conversation | Sequence[Message]) -> tuple[str, list[TurnSpan]]:
    """Render the canonical text of a conversation and where each message sits in it.

    See the module docstring for the format. Deterministic: a pure function of the
    messages (their session, date, role, turn_id and content).
    """
    from donto_pg.transcript import render

    messages = conv.messages if isinstance(conv, Conversation) else conv
    body, where = render({"role": m.role, "turn_id": m.turn_id, "session": m.session,
                          "date": m.date, "content": m.content} for m in messages)
    spans = [
        TurnSpan(seq=m.seq, turn_id=m.turn_id, role=m.role, session=m.session,
                 exchange=m.exchange, date=m.date, header_start=h, char_start=s, char_end=e)
        for m, (h, s, e) in zip(messages, where, strict=True)
    ]
    return body, spans


def _fenced_chars(text: str) -> int:
    """Characters on fence lines and between them (``` or ~~~; unclosed runs to the end)."""
    inside = 0
    fence_char = ""
    fence_len = 0
    lines = text.split("\n")
    for i, line in enumerate(lines):
        length = len(line) + (1 if i < len(lines) - 1 else 0)
        m = _FENCE_RE.match(line)
        if not fence_char:
            if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
                fence_char, fence_len = m.group(1)[0], len(m.group(1))
                inside += length
        else:
            inside += length
            if (
                m
                and m.group(1)[0] == fence_char
                and len(m.group(1)) >= fence_len
                and not m.group(2).strip()
            ):
                fence_char = ""
    return inside


def code_char_share(body_or_conv: str | Conversation | Sequence[Message]) -> float:
    """Share (0..1) of characters inside ``` or ~~~ fenced blocks, fence lines included.

    A string is scanned as one Markdown text. For a conversation (or messages) each
    message is scanned on its own, so an unclosed fence ends with its message, and the
    share is over message contents only (prefixes and headers excluded).
    """
    if isinstance(body_or_conv, str):
        return _fenced_chars(body_or_conv) / len(body_or_conv) if body_or_conv else 0.0
    messages = body_or_conv.messages if isinstance(body_or_conv, Conversation) else body_or_conv
    total = sum(len(m.content) for m in messages)
    if not total:
        return 0.0
    return sum(_fenced_chars(m.content) for m in messages) / total
