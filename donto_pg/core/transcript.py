"""The canonical conversation text: one pure renderer for loading and appending.

``render(messages, start=0, prev_session=None)`` renders MESSAGES as they follow a
body of START characters whose last message was in session PREV_SESSION (None: the
messages open the body). It returns the text and, per message, its
``(header_start, char_start, char_end)`` in the whole body. Rendering a conversation
at once and rendering it in two parts (the second with ``start`` = length of the
first text and ``prev_session`` = session of the first part's last message) give
the same text: so a longer version of a conversation has the shorter one's body as
its prefix, and a revision can be extended by appending turns
(``donto.append_turns``). The format itself is described in :mod:`donto_pg.core.conversation`.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping
from typing import Any


def session_header(session: object, day: datetime.date | str | None) -> str:
    if isinstance(day, datetime.date):
        day = day.isoformat()
    return f"=== session {session} | {day or 'undated'} ===\n"


# Text in a message that reads as the renderer's own turn header (``[user #3] ``) or
# session header (``=== session ``), anywhere in it (a recall window may start in the
# middle of a line), possibly behind backslashes, and as it reads on a screen: any white
# space where the renderer puts a space (a tab, a no-break space), invisible characters
# (a zero-width space, a soft hyphen, a combining mark) anywhere in it, fullwidth
# brackets, signs and digits: it gets one backslash more in front, so that no message
# can pose as two (``hi\n\n[assistant #1] I am the assistant`` is one user turn, and
# reads as one), and the escaping stays reversible (one backslash less gives the message
# back). No BEAM conversation has such text.
_UNSEEN = "\u00ad\u034f\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff\u0300-\u036f"
_GAP = rf"[\s{_UNSEEN}]"
_SESSION = f"[{_UNSEEN}]*".join("session")
HEADER_TEXT = (rf"(?:[\[［][^\]］\n]{{1,80}}?{_GAP}+[#＃﹟]{_GAP}*-?[{_UNSEEN}]*\d+"
               rf"[{_UNSEEN}]*[\]］]|[=＝](?:[{_UNSEEN}]*[=＝]){{2}}{_GAP}+{_SESSION})"
               rf"(?={_GAP}|\Z)")
_POSES_AS_HEADER = re.compile(rf"(?<!\\)(?=\\*{HEADER_TEXT})")
# The same text, escaped: a recall window never starts inside its backslashes.
HEADER_LIKE = re.compile(rf"\\+{HEADER_TEXT}")


def escape_content(text: str) -> str:
    """TEXT with a backslash before each header-like text in it (see above)."""
    return _POSES_AS_HEADER.sub("\\\\", text)


def render(messages: Iterable[Mapping[str, Any]], start: int = 0,
           prev_session: object = None) -> tuple[str, list[tuple[int, int, int]]]:
    """Text and spans of MESSAGES (mappings with role, turn_id, session, date, content)."""
    parts: list[str] = []
    spans: list[tuple[int, int, int]] = []
    pos = start
    first = start == 0 and prev_session is None

    def emit(text: str) -> None:
        nonlocal pos
        parts.append(text)
        pos += len(text)

    for m in messages:
        if first or m["session"] != prev_session:
            if not first:
                emit("\n")
            emit(session_header(m["session"], m.get("date")))
            prev_session = m["session"]
            first = False
        emit("\n")
        header_start = pos
        emit(f"[{m['role']} #{m['turn_id']}] ")
        char_start = pos
        emit(escape_content(m["content"]))
        spans.append((header_start, char_start, pos))
        emit("\n")
    return "".join(parts), spans


# The generator's bookkeeping marker at the end of (mostly user) messages: " ->-> 1,1",
# and the variants seen in the data: "->-> 2,N/A", "->-> 1,5)", "->-> 3,", "->-> 2,22, 24".
_MARKER_RE = re.compile(
    r"[ \t]*->->[ \t]*\d+[ \t]*,[ \t]*(?:\d+(?:[ \t]*,[ \t]*\d+)*|N/A)?[ \t]*\)?\s*\Z"
)
_MARKER_WINDOW = 200


def clean_content(text: str) -> str:
    """Normalise newlines, drop trailing generator markers (`` ->-> 1,1``), strip the end."""
    s = text.replace("\r\n", "\n").replace("\r", "\n").rstrip()
    while True:
        tail = s[-_MARKER_WINDOW:]
        m = _MARKER_RE.search(tail)
        if m is None:
            return s
        s = s[: len(s) - len(tail) + m.start()].rstrip()


#: A role as the renderer writes it in a header (fullmatch): a word, not "user #0".
ROLE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")


def message_date(value: object) -> datetime.date | None:
    """The date of a message's timestamp: None; a date or datetime; an ISO 8601 date or
    date-time text (the date it names, in its own zone); Unix seconds (in UTC). A
    ValueError (or OverflowError, OSError: out of range) otherwise."""
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        return value.date()
    if isinstance(value, datetime.date):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.datetime.fromtimestamp(value, datetime.UTC).date()
    if isinstance(value, str):
        return datetime.datetime.fromisoformat(value.strip().replace("Z", "+00:00")).date()
    raise ValueError(f"a timestamp is a text or a number, not {type(value).__name__}")


def append_rows(messages: list[Mapping[str, Any]], start: int,
                prev: Mapping[str, Any] | None) -> tuple[str, list[dict[str, Any]]]:
    """Render MESSAGES appended to a body of START characters whose last turn is PREV
    (``{seq, turn_id, session, exchange, date}``, the date being the latest of its
    session; None for an empty body).

    A message is ``{role, content}`` with optional ``turn_id`` (default: the previous
    one + 1), ``session`` (default: the previous turn's), ``date`` (ISO; default, as the
    loaders date a message: the latest date before it in its session, else the first
    date after it in its session among MESSAGES) and ``exchange`` (default: a user
    message opens a new exchange, another continues the previous one). Contents are
    cleaned as the loaders clean them (:func:`clean_content`), so appending turns and
    loading the longer conversation give the same text and turn table; ids, sessions and
    exchanges are whole numbers >= 0, as the loaders require. Returns the appended text
    and the new turns as rows of ``donto.record_turns`` (spans in the whole body).
    Raises ``ValueError`` on a malformed message.
    """
    if not isinstance(messages, list) or not messages:
        raise ValueError("turns must be a non-empty JSON array of messages")
    seq = prev["seq"] + 1 if prev else 0
    turn_id = prev["turn_id"] if prev and prev.get("turn_id") is not None else seq - 1
    session = prev["session"] if prev and prev.get("session") is not None else 1
    exchange = prev["exchange"] if prev and prev.get("exchange") is not None else -1
    full: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise ValueError(f"turn {i}: a message is a JSON object, not {type(m).__name__}")
        role, content = m.get("role"), m.get("content")
        if not isinstance(role, str) or not ROLE.fullmatch(role):
            raise ValueError(f"turn {i}: role {role!r} is not a name (a letter, then letters, "
                             "digits, _ or -)")
        if not isinstance(content, str):
            raise ValueError(f"turn {i}: content must be a string")
        turn_id = _whole(m.get("turn_id", turn_id + 1), f"turn {i}: turn_id")
        last_session = session
        session = _whole(m.get("session", session), f"turn {i}: session")
        if (i or prev) and session < last_session:
            raise ValueError(f"turn {i}: session {session} comes after session {last_session} "
                             "(a session is one stretch of the conversation)")
        exchange = _whole(m.get("exchange", exchange + 1 if role == "user" or exchange < 0
                                else exchange), f"turn {i}: exchange")
        date = m.get("date")
        try:
            date = None if date is None else message_date(date).isoformat()
        except (ValueError, OverflowError, OSError) as exc:
            raise ValueError(f"turn {i}: date {date!r} is not a date (ISO 8601, such as "
                             "2024-03-02 or 2024-03-02T10:00:00Z, or Unix seconds)") from exc
        full.append({"seq": seq + i, "turn_id": turn_id, "role": role, "session": session,
                     "exchange": exchange, "date": date, "content": clean_content(content)})
    # Undated messages: the latest date before them in their session, else its first
    # date among these messages (api.conversation and the BEAM reader date them so).
    last = {prev["session"]: str(prev["date"])} if prev and prev.get("date") else {}
    first: dict[int, str] = {}
    for m in full:
        if m["date"] is not None:
            first.setdefault(m["session"], m["date"])
    for m in full:
        m["date"] = m["date"] or last.get(m["session"]) or first.get(m["session"])
        if m["date"] is not None:
            last[m["session"]] = m["date"]
    text, spans = render(full, start, prev["session"] if prev else None)
    rows = [{k: v for k, v in m.items() if k != "content"}
            | {"header_start": h, "char_start": s, "char_end": e}
            for m, (h, s, e) in zip(full, spans, strict=True)]
    return text, rows


def repeated_turn_ids(rows: list[dict[str, Any]], prev: Mapping[str, Any] | None) -> list[int]:
    """The turn ids of appended ROWS (:func:`append_rows`) that are not greater than the
    one before them (PREV, the body's last turn, first)."""
    before = prev.get("turn_id") if prev else None
    out = []
    for r in rows:
        if before is not None and r["turn_id"] <= before:
            out.append(r["turn_id"])
        before = r["turn_id"]
    return out


def dates_going_back(rows: list[dict[str, Any]], prev: Mapping[str, Any] | None,
                     since: int = 0) -> list[int]:
    """The turn ids of ROWS (turn table rows: turn_id, session, date as ISO YYYY-MM-DD or
    None, in conversation order) dated before a turn before them in their session (PREV,
    the body's last turn with the latest date of its session, first); only rows from
    position SINCE on are named (the others only date what follows them: the turns a
    revision extends, noticed when they were stored).

    Dates are compared by day: the turn table (donto.turn.time_anchor), the session
    headers and the statements' valid time hold days, BEAM dates by day ("March-15-2024",
    on the first message of a batch), and a chat log's date-time or Unix seconds is read
    to its day (:func:`message_date`) before anything is stored. Two turns of one day in
    the wrong order by the clock disagree with nothing the database keeps."""
    latest = {prev["session"]: str(prev["date"])} if prev and prev.get("date") else {}
    out = []
    for i, r in enumerate(rows):
        if r["date"] is not None:
            if r["date"] < latest.get(r["session"], r["date"]) and i >= since:
                out.append(r["turn_id"])
            latest[r["session"]] = max(r["date"], latest.get(r["session"], r["date"]))
    return out


def dated_back_note(turn_ids: list[int], shown: int = 5) -> str | None:
    """What a load or an append says of the turns TURN_IDS (:func:`dates_going_back`):
    how many, the first SHOWN of them, and why they are kept; None when there are none."""
    if not turn_ids:
        return None
    n = len(turn_ids)
    named = ", ".join(map(str, turn_ids[:shown])) + (f" and {n - shown} more" if n > shown
                                                     else "")
    return (f"{n} turn{'s' * (n != 1)} dated before a turn before {'them' if n != 1 else 'it'} "
            f"in {'their' if n != 1 else 'its'} session: turn id{'s' * (n != 1)} {named} "
            "(kept; what they say supersedes by the order of the conversation, not by date; "
            "dates are compared by day)")


def _whole(value: object, what: str) -> int:
    """VALUE as a turn table number: a whole number from 0 to 2**31 - 1."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
        raise ValueError(f"{what} must be a whole number from 0 to {2**31 - 1}, got {value!r}")
    return value
