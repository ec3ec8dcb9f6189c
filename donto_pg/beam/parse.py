"""Parsing BEAM's content, whatever file it came from: messages, probing questions.

Every reader (:mod:`.json_reader`, :mod:`.jsonl_reader`, :mod:`.parquet_reader`)
hands its batches here; :class:`BeamFormatError` names the file and the place of
bad input. See :mod:`donto_pg.beam` for the normalisation rules.
"""

from __future__ import annotations

import ast
import datetime
import json
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from donto_pg.core.conversation import Conversation, Message, Question
from donto_pg.core.transcript import clean_content

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


# --------------------------------------------------------------------------- small helpers


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
    """An id as int, or None when it is not a whole number from 0 to 2**31 - 1 (the
    database's integer), as an int or a numeric string."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and _ID_STR_RE.match(value):
        value = int(value)
    if isinstance(value, int):
        return value if 0 <= value < 2**31 else None
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
            f"field 'id' must be a whole number from 0 to 2147483647, got {_describe(raw_id)}",
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


# --------------------------------------------------------------------------- Hugging Face rows


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


def _guard_row(row: Any, label: str, source: str, cid: str) -> Conversation | BeamFormatError:
    """One Hugging Face row as a conversation, or its error (every rows reader)."""
    return _guard(_row_to_conversation, row, label, source,
                  conversation_id=f"{label}/{cid}" if cid else None)
