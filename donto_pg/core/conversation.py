"""BEAM's data model and the canonical chat text of a conversation.

Pure Python (stdlib only). The readers of :mod:`donto_pg.beam` build these
objects from BEAM's files; the loader, the segmenter's tests, the A/B gate and
the evaluation read them.

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
  the content verbatim (code fences and brackets included), except that text in it
  that reads as a header, ``[<x> #<n>] `` or ``=== session `` (anywhere, possibly
  behind backslashes), gets one backslash more in front
  (:func:`donto_pg.core.transcript.escape_content`): no message can pose as two;
* blocks (headers and messages) are separated by one blank line, and the body
  ends with a single ``\\n``;
* :class:`TurnSpan` offsets are Python ``str`` indices (Unicode code points):
  ``body[span.char_start:span.char_end] == escape_content(message.content)`` (the
  content itself but for such lines) and
  ``body[span.header_start:span.char_start] == "[<role> #<turn_id>] "``.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from donto_pg.core.fences import fence_spans

__all__ = ["Conversation", "Message", "Question", "TurnSpan", "code_char_share", "format_chat"]


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


def format_chat(conv: Conversation | Sequence[Message]) -> tuple[str, list[TurnSpan]]:
    """Render the canonical text of a conversation and where each message sits in it.

    See the module docstring for the format. Deterministic: a pure function of the
    messages (their session, date, role, turn_id and content).
    """
    from donto_pg.core.transcript import render

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
    """Characters on fence lines and between them, the newline ending a closing line
    included (``` or ~~~; an unclosed fence runs to the end), per :func:`fence_spans`."""
    inside = 0
    for fs, fe in fence_spans(text, 0, len(text)):
        inside += fe - fs + (1 if fe < len(text) and text[fe] == "\n" else 0)
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
