"""Projection B: cut a canonical conversation body into extraction blocks.

The body is one long string; the turn table says where each message's content lies
(``body[char_start:char_end]``).  :func:`segment` walks the turns once, in body order,
and yields blocks that an extractor can read one at a time.

Pipeline (all streaming, one pass, no copy of the body):

1. **Modality.**  Each message is cut into *pieces*.  Code fences are read
   deterministically, line by line: an opening fence is a line whose first non-blank
   characters are at least three backticks or tildes (any indentation; a backtick
   fence's info string may not contain a backtick).  It is closed by a later line made
   only of the same fence character, at least as many of them, and blanks.  A fence left
   open runs to the end of the message.  A fence (from the first character of its
   opening line to the last character of its closing line) is a ``code`` piece; the
   prose around it is a ``dialogue`` piece.  Whitespace-only prose between or around
   fences of one message is glued to the neighbouring code piece (it carries no prose).
   Every message of role ``system`` gives ``system`` pieces only.
2. **Tiny prose.**  A maximal run of dialogue pieces (inside one session, between code
   pieces / session edges / system pieces) holding fewer than ``min_prose``
   non-whitespace characters *and* touching a code piece on at least one side cannot stand
   alone as a useful block ("Here is the test:" between two fences, "Thanks!" after a
   code answer at the end of a session).  It is packed with the code instead, and a
   block holding both code and such prose is of kind ``mixed`` (a block that ends up
   with the prose alone is ``dialogue``).  That is the only way ``mixed`` arises;
   ``min_prose=0`` disables it.
3. **Coherence.**  Consecutive pieces of the same kind and session are packed into a
   block while the block span stays within ``cap``.  Pieces of one *exchange* (a question
   with its answer; same ``exchange`` number) are kept together when they fit in one
   block: if they do not fit the open block, the block is closed and they open a new
   one.  At an exchange boundary a block that already reaches ``target`` is closed.
   Sessions and kind changes are hard boundaries.  A single piece larger than ``cap``
   is split (see :func:`_find_break`): at a paragraph (blank line) boundary, else at a
   line boundary, else hard at the cap.  A code piece is never cut inside its fence
   unless the fence alone exceeds the cap.  Parts coming from a split piece carry
   ``split=True`` and so does their block.

Block span (``char_start``..``char_end``) always satisfies ``char_end - char_start <= cap``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from donto_pg.core.fences import fence_spans

__all__ = ["DEFAULT_PARAMS", "iter_segments", "segment", "summarize"]

#: Default parameters (read-only).  ``min_prose`` is the tiny-prose threshold of step 2.
DEFAULT_PARAMS: Mapping[str, Any] = MappingProxyType(
    {"cap": 4000, "target": 2000, "keep_exchange": True, "min_prose": 40}
)

_NONWS = re.compile(r"\S")
_PARA = re.compile(r"\n[ \t\r]*\n")

_KIND_NAMES = {"d": "dialogue", "c": "code", "s": "system"}


class _Piece:
    """A homogeneous span inside one message."""

    __slots__ = ("kind", "start", "end", "fs", "fe", "turn", "nonws", "absorbed")

    def __init__(
        self, kind: str, start: int, end: int, turn: dict, fs: int = -1, fe: int = -1
    ) -> None:
        self.kind = kind  # 'd' dialogue, 'c' code, 's' system
        self.start = start
        self.end = end
        self.fs = fs  # fence span of a code piece (-1 if none)
        self.fe = fe
        self.turn = turn
        self.nonws = 0  # non-whitespace chars, counted up to min_prose (dialogue only)
        self.absorbed = False  # dialogue absorbed into code packing (tiny prose)


def _message_pieces(
    body: str, turn: dict, min_prose: int, enough: re.Pattern[str] | None
) -> list[_Piece]:
    """Cut one message's content into dialogue / code (or system) pieces.

    ``enough`` matches ``min_prose`` non-blank characters (``None``: no counting).
    """
    cs, ce = turn["char_start"], turn["char_end"]
    system = turn.get("role") == "system"
    raw: list[list[int]] = []  # [is_code, start, end, fs, fe]
    pos = cs
    for fs, fe in fence_spans(body, cs, ce):
        if fs > pos:
            raw.append([0, pos, fs, -1, -1])
        raw.append([1, fs, fe, fs, fe])
        pos = fe
    if pos < ce or not raw:
        raw.append([0, pos, ce, -1, -1])
    if len(raw) > 1:  # glue whitespace-only prose to a neighbouring code piece
        merged: list[list[int]] = []
        pending_ws: int | None = None  # start of whitespace waiting for the next code piece
        for r in raw:
            if r[0] == 0 and _NONWS.search(body, r[1], r[2]) is None:
                if merged and merged[-1][0] == 1:
                    merged[-1][2] = r[2]
                elif pending_ws is None:
                    pending_ws = r[1]
                continue
            if r[0] == 1 and pending_ws is not None:
                r[1] = pending_ws
                pending_ws = None
            elif pending_ws is not None:  # cannot happen (gaps alternate), keep safe
                r[1] = pending_ws
                pending_ws = None
            merged.append(r)
        raw = merged
    pieces: list[_Piece] = []
    for is_code, s, e, fs, fe in raw:
        if is_code:
            pieces.append(_Piece("s" if system else "c", s, e, turn, fs, fe))
        else:
            p = _Piece("s" if system else "d", s, e, turn)
            if not system and enough is not None:
                # counted up to min_prose: one C-level match answers "at least min_prose?"
                if enough.match(body, s, e) is not None:
                    p.nonws = min_prose
                else:
                    p.nonws = len(_NONWS.findall(body, s, e))
            pieces.append(p)
    return pieces


def _checked_turns(body: str, turns: Iterable[dict]) -> Iterator[dict]:
    """Yield turns after checking order and bounds (raises ``ValueError``)."""
    n = len(body)
    prev_end = 0
    for t in turns:
        cs, ce = t["char_start"], t["char_end"]
        hs = t.get("header_start", cs)
        if not (0 <= hs <= cs <= ce <= n) or cs < prev_end:
            raise ValueError(
                f"turn seq={t.get('seq')}: bad span {hs}/{cs}..{ce} "
                f"(previous end {prev_end}, body length {n})"
            )
        prev_end = ce
        yield t


def _all_pieces(body: str, turns: Iterable[dict], min_prose: int) -> Iterator[_Piece]:
    enough = re.compile(rf"(?:\s*\S){{{min_prose}}}") if min_prose > 0 else None
    for t in _checked_turns(body, turns):
        yield from _message_pieces(body, t, min_prose, enough)


def _resolve_tiny_prose(pieces: Iterable[_Piece], min_prose: int) -> Iterator[_Piece]:
    """Step 2: turn tiny dialogue runs touching code into code pieces with prose."""
    run: list[_Piece] = []
    run_count = 0
    run_big = False  # the current run already reached min_prose: stream it through
    before_code = False  # the piece before the current run (same session) is code
    last_kind: str | None = None
    last_session: object = object()

    def finish(after_code: bool) -> Iterator[_Piece]:
        absorb = (before_code or after_code) and run_count < min_prose
        for q in run:
            if absorb:
                q.kind = "c"
                q.absorbed = True
            yield q

    for p in pieces:
        session = p.turn.get("session")
        if session != last_session:
            if run:
                yield from finish(False)
                run = []
            run_big = False
            last_kind = None
            last_session = session
        if p.kind == "d":
            if run_big:
                yield p
                continue
            if not run:
                before_code = last_kind == "c"
                run_count = 0
            run.append(p)
            run_count += p.nonws
            last_kind = "d"
            if run_count >= min_prose:
                yield from run
                run = []
                run_big = True
            continue
        if run:
            yield from finish(p.kind == "c")
            run = []
        run_big = False
        last_kind = p.kind
        yield p
    if run:
        yield from finish(False)


def _find_break(body: str, pos: int, end: int, limit: int, ideal: int) -> int:
    """Where to cut ``body[pos:end]`` (longer than ``limit``) so the chunk is <= limit.

    Preference: a paragraph break (after a blank line), then a line break, each within
    ``[ideal/2, limit]`` of ``pos`` and closest to ``ideal``; then any line break before
    the limit; then a hard cut exactly at ``pos + limit``.
    """
    hi = pos + limit
    lo = pos + max(1, ideal // 2)
    aim = pos + ideal
    best = -1
    for m in _PARA.finditer(body, pos, hi):
        b = m.end()
        if lo <= b <= hi and (best < 0 or abs(b - aim) < abs(best - aim)):
            best = b
    if best > pos:
        return best
    left = body.rfind("\n", pos, min(aim, hi))
    right = body.find("\n", min(aim, hi), hi)
    cands = [i + 1 for i in (left, right) if i >= 0 and lo <= i + 1 <= hi]
    if cands:
        return min(cands, key=lambda b: (abs(b - aim), b))
    anywhere = body.rfind("\n", pos, hi)
    if anywhere >= pos and anywhere + 1 > pos:
        return anywhere + 1
    return hi


class _Block:
    __slots__ = ("kind", "session", "start", "end", "parts", "split", "prose", "code")

    def __init__(self, kind: str, session: object, start: int) -> None:
        self.kind = kind
        self.session = session
        self.start = start
        self.end = start
        self.parts: list[list[Any]] = []  # [turn, start, end, split]
        self.split = False
        self.prose = False  # holds absorbed prose (non-whitespace)
        self.code = False  # holds a real code piece


class _Packer:
    """Step 3: pack resolved pieces into blocks (one instance per :func:`segment` call)."""

    def __init__(self, body: str, cap: int, target: int) -> None:
        self.body = body
        self.cap = cap
        self.target = target
        self.cur: _Block | None = None
        self.out: list[dict] = []  # closed blocks waiting to be yielded
        self.seq = 0
        self.last_part: list[Any] | None = None
        self.last_session: object = object()

    # -- block management -------------------------------------------------------
    def _close(self) -> None:
        b = self.cur
        if b is None:
            return
        self.cur = None
        if b.end <= b.start:  # only empty messages: nothing to extract, no block
            return
        prefix = None
        if self.last_part is not None and self.last_session == b.session:
            lp = self.last_part
            prefix = {"char_start": lp[1], "char_end": lp[2], "turn_seq": lp[0]["seq"]}
        parts = []
        for t, s, e, sp in b.parts:
            parts.append(
                {
                    "seq": t["seq"],
                    "turn_id": t.get("turn_id"),
                    "role": t.get("role"),
                    "session": t.get("session"),
                    "date": t.get("date"),
                    "char_start": s,
                    "char_end": e,
                    "split": sp,
                }
            )
        kind = _KIND_NAMES[b.kind]
        if b.kind == "c" and not b.code:
            kind = "dialogue"  # only absorbed prose / blanks ended up here
        elif b.kind == "c" and b.prose:
            kind = "mixed"
        self.out.append(
            {
                "seq": self.seq,
                "kind": kind,
                "char_start": b.start,
                "char_end": b.end,
                "turns": parts,
                "prefix": prefix,
                "split": b.split,
            }
        )
        self.seq += 1
        self.last_part = b.parts[-1]
        self.last_session = b.session

    def _add(self, p: _Piece, s: int, e: int, split: bool) -> None:
        b = self.cur
        if b is None:
            b = self.cur = _Block(p.kind, p.turn.get("session"), s)
        parts = b.parts
        if parts and parts[-1][0] is p.turn and parts[-1][2] == s:
            parts[-1][2] = e
            parts[-1][3] = parts[-1][3] or split
        else:
            parts.append([p.turn, s, e, split])
        b.end = e
        b.split = b.split or split
        if p.absorbed:
            if not b.prose and p.nonws and _NONWS.search(self.body, s, e) is not None:
                b.prose = True
        elif p.kind == "c" and not b.code and _NONWS.search(self.body, s, e) is not None:
            b.code = True

    def _compatible(self, p: _Piece) -> bool:
        b = self.cur
        return b is not None and b.kind == p.kind and b.session == p.turn.get("session")

    def boundary(self, p: _Piece) -> None:
        """An exchange group starting with ``p`` arrives: close what must be closed."""
        b = self.cur
        if b is not None and (not self._compatible(p) or b.end - b.start >= self.target):
            self._close()

    # -- placement ----------------------------------------------------------------
    def place_group(self, group: list[_Piece]) -> None:
        """Place pieces of one exchange (same session and kind) that fit in a cap."""
        self.boundary(group[0])
        b = self.cur
        if b is not None and group[-1].end - b.start > self.cap:
            self._close()
        for p in group:
            self._add(p, p.start, p.end, False)

    def place_piece(self, p: _Piece) -> None:
        """Place one piece greedily (used when its exchange exceeds the cap)."""
        if p.end - p.start > self.cap:
            self._place_oversized(p)
            return
        b = self.cur
        if b is not None and (not self._compatible(p) or p.end - b.start > self.cap):
            self._close()
        self._add(p, p.start, p.end, False)

    def _place_oversized(self, p: _Piece) -> None:
        cap = self.cap
        if p.fs >= 0 and p.fe - p.fs <= cap:  # keep the fence whole
            segs = [(s, e) for s, e in ((p.start, p.fs), (p.fs, p.fe), (p.fe, p.end)) if e > s]
        else:
            segs = [(p.start, p.end)]
        for a, z in segs:
            pos = a
            while True:
                b = self.cur
                if b is not None and not self._compatible(p):
                    self._close()
                    b = None
                if b is not None:
                    room = cap - (pos - b.start)
                    if z - pos <= room:
                        self._add(p, pos, z, True)
                        break
                    if z - pos <= cap or room < max(1, cap // 4):  # fits alone / no room
                        self._close()
                        b = None
                if b is None:
                    if z - pos <= cap:
                        self._add(p, pos, z, True)
                        break
                    rest = z - pos
                    limit = cap
                    ideal = math.ceil(rest / math.ceil(rest / cap))
                else:
                    limit = cap - (pos - b.start)
                    ideal = limit
                brk = _find_break(self.body, pos, z, limit, ideal)
                self._add(p, pos, brk, True)
                self._close()
                pos = brk

    def drain(self) -> Iterator[dict]:
        if self.out:
            yield from self.out
            self.out.clear()


def iter_segments(
    body: str, turns: Iterable[dict], params: Mapping[str, Any] | None = None
) -> Iterator[dict]:
    """Yield extraction blocks one by one (see :func:`segment`)."""
    prm = dict(DEFAULT_PARAMS)
    if params:
        unknown = set(params) - set(prm)
        if unknown:
            raise ValueError(f"unknown segmenter params: {sorted(unknown)}")
        prm.update(params)
    cap, target = int(prm["cap"]), int(prm["target"])
    min_prose = int(prm["min_prose"])
    keep_exchange = bool(prm["keep_exchange"])
    if cap < 1 or target < 0 or min_prose < 0:
        raise ValueError("cap must be >= 1, target and min_prose >= 0")
    packer = _Packer(body, cap, target)
    group: list[_Piece] = []
    gkey: tuple | None = None
    overflowed = False
    pieces = _resolve_tiny_prose(_all_pieces(body, turns, min_prose), min_prose)
    for p in pieces:
        t = p.turn
        key = (
            t.get("session"),
            p.kind,
            t.get("exchange", t["seq"]) if keep_exchange else t["seq"],
        )
        if key != gkey:
            if group:
                packer.place_group(group)
                group = []
            gkey = key
            overflowed = False
        if overflowed:
            packer.place_piece(p)
        else:
            group.append(p)
            if p.end - group[0].start > cap:  # the exchange cannot fit: go piece by piece
                packer.boundary(group[0])
                for q in group:
                    packer.place_piece(q)
                group = []
                overflowed = True
        yield from packer.drain()
    if group:
        packer.place_group(group)
    packer._close()
    yield from packer.drain()


def segment(
    body: str, turns: Iterable[dict], params: Mapping[str, Any] | None = None
) -> list[dict]:
    """Cut ``body`` into extraction blocks (projection B).

    :param body: the canonical conversation text.
    :param turns: the turn table (list or iterator of dicts, in body order) with at least
        ``seq``, ``char_start``, ``char_end``, ``session`` and ``exchange``; ``turn_id``,
        ``role``, ``date`` and ``header_start`` are copied / checked when present.
    :param params: ``cap`` (4000), ``target`` (2000), ``keep_exchange`` (True),
        ``min_prose`` (40).
    :returns: blocks in body order, each ``{"seq", "kind", "char_start", "char_end",
        "turns": [{"seq", "turn_id", "role", "session", "date", "char_start", "char_end",
        "split"}], "prefix": {"char_start", "char_end", "turn_seq"} | None, "split"}``.
        ``kind`` is ``dialogue``, ``code``, ``mixed`` or ``system``.
    :raises ValueError: turns out of order, overlapping or outside the body.
    """
    return list(iter_segments(body, turns, params))


def summarize(blocks: Iterable[dict], turns: Iterable[dict]) -> dict[str, Any]:
    """Figures about a segmentation.

    Returns ``blocks_per_10k_chars`` (per 10,000 characters of message content),
    ``split_turn_share`` (turns with a part cut by the cap), ``mixed_share``,
    ``by_kind`` counts, plus ``n_blocks``, ``n_turns``, ``content_chars``,
    ``mean_block_chars`` and ``max_block_chars`` (block spans).
    """
    n_turns = 0
    content = 0
    for t in turns:
        n_turns += 1
        content += t["char_end"] - t["char_start"]
    by_kind: dict[str, int] = {}
    split_turns: set[Any] = set()
    n_blocks = 0
    span_total = 0
    span_max = 0
    for b in blocks:
        n_blocks += 1
        by_kind[b["kind"]] = by_kind.get(b["kind"], 0) + 1
        span = b["char_end"] - b["char_start"]
        span_total += span
        span_max = max(span_max, span)
        for part in b["turns"]:
            if part.get("split"):
                split_turns.add(part["seq"])
    return {
        "n_blocks": n_blocks,
        "n_turns": n_turns,
        "content_chars": content,
        "blocks_per_10k_chars": (n_blocks * 10_000 / content) if content else 0.0,
        "split_turn_share": (len(split_turns) / n_turns) if n_turns else 0.0,
        "mixed_share": (by_kind.get("mixed", 0) / n_blocks) if n_blocks else 0.0,
        "by_kind": by_kind,
        "mean_block_chars": (span_total / n_blocks) if n_blocks else 0.0,
        "max_block_chars": span_max,
    }
