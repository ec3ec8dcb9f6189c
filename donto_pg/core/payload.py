"""Token-budgeted recall payloads (the body of ``donto.recall_payload``).

A recall payload is what a model is handed as the result of a recall tool
call. It is built from the hits of ``donto.recall`` and is bounded: its
rendered size never exceeds ``max_tokens``. This is written against a known
failure of a peer memory system, whose recall result carried a ``chunks`` dict
of raw texts that no budget bounded (20-30k tokens per call).

Format (shown in reading order; the returned ``jsonb`` prints its keys in its
own order: query, chunks, tokens, omitted, memories, truncated)::

    {"query": "where did I move in March?",
     "memories": [                                  # recall hits, best first
        {"id": 812, "rev": 3, "span": [52800, 54000], "valid": "2024-03-15",
         "score": 0.0328, "text": "[user #212] I moved to Berlin in March ..."}],
     "chunks": {                                    # raw texts of listed memories
        "812": {"chunk_text": "...", "revision_id": 3,
                "char_start": 52800, "char_end": 54000}},
     "standing": [                                  # standing statements (recall's slots)
        {"id": 77, "rev": 3, "span": [1200, 1268], "kind": "instruction",
         "valid": "2024-03-15..", "text": "Always give exact dates when I ask ..."}],
     "truncated": true,                             # something was cut (= omitted non-empty)
     "tokens": 957,                                 # exact size of this very payload
     "omitted": {"memories": 15, "memory_ids": [...],   # hits not listed (lowest ranks)
                 "chunks": 2, "chunk_ids": [...],       # listed memories without chunk text
                 "cut": 1, "cut_ids": [...]}}           # chunk texts cut to a prefix

*memories* - one compact record per recall hit, in rank order: statement id
(``id``), revision (``rev``), the chunk's char span in that revision
(``span``, ``[start, end)``), its valid time (``valid``: ``"FROM"`` for one
day, ``"FROM..TO"`` inclusive, ``"FROM.."``/``"..TO"`` half-open, null when
unknown), the fused recall score rounded to 4 decimals, and ``text``: the
first :data:`SNIPPET_TOKENS` tokens of the chunk with whitespace runs folded
to one space (a gist, not provenance; the exact text is in ``chunks``; the
last memory's gist may be a few tokens shorter, see *Self-consistent count*).

*chunks* - ``{statement id: {chunk_text, revision_id, char_start, char_end}}``
for listed memories only, added in rank order. ``chunk_text`` is always the
exact text of ``[char_start, char_end)`` of the revision. The chunk texts stop
being added when the rendered ``chunks`` object (``{}`` is always allowed)
would exceed its own budget ``chunk_tokens`` (default
``floor(DEFAULT_CHUNK_SHARE * max_tokens)``, i.e. 60 %; at most ``max_tokens``);
the chunk that crosses the line is cut on a token boundary (its ``char_end``
then ends the kept prefix, while the memory's ``span`` keeps the full chunk)
if at least :data:`MIN_CUT_TOKENS` of its tokens fit, and left out otherwise;
no chunk after it is added.

*standing* - present when recall returned standing statements (its reserved
slots, see ``donto.recall_by_vector``): one record per statement in recall's
order with its full text (a standing statement is one sentence of at most
``donto_pg.core.standing.MAX_CHARS`` characters), never in ``memories``. The
section is never cut before the chunks are: the payload is packed with every
standing statement first (memories and chunk texts then fill what is left, down
to none); only when even that does not fit are standing statements dropped
from the end (``omitted.standing`` counts them).

*omitted* - what the budget cut, relative to the same call without limits:
counts always, statement ids (in rank order) while each list takes at most
``IDS_SHARE`` (10 %) of ``max_tokens`` (then the count alone). Keys with a
count of zero are absent; ``omitted == {}`` exactly when ``truncated`` is false,
and then the payload is the one an unlimited call gives. (Rarely,
``"query": n`` says the query echo lost its last n tokens.)

Budget rules
------------
*Size.* The payload is measured as the model sees it: the tokens of
``donto_pg.core.tokens.render_json(payload)`` (compact JSON) under the embedding
model's tokenizer, offline. ``tokens`` is that exact count, the ``tokens``
field itself included (found as a fixed point). With the WordPiece tokenizer
of the default model whitespace is not a token, so psql's ``jsonb::text``
(``", "`` and ``": "``) counts the same.

*Key order.* PostgreSQL's ``jsonb`` orders object keys by length, then bytes;
the payload is built in that order, so that rendering the returned ``jsonb``
gives back exactly the text that was counted.

*Sharing.* Memories are listed in rank order while their records, the
envelope and the chunk reservation ``min(chunk_tokens, chunk texts of the
memories listed so far)`` fit ``max_tokens`` (the first memory needs only its
record to fit). Then chunk texts fill at most ``chunk_tokens`` and whatever
the memories left. Every choice is checked by counting the whole payload;
when the count is over (a non-additive tokenizer), the chunk texts shrink,
then memories are dropped from the end, until it fits.

*Self-consistent count.* A number's own size varies with its value, so a
payload may have no value t that renders to exactly t tokens (with WordPiece
about 5 % of sizes above 340). Then a variant a few tokens smaller is used
(see :meth:`_Packer.finalize`): the cut chunk or the last memory's gist a few
tokens shorter, ``omitted`` without its id lists, or at last the query echo
shortened (``omitted.query``). For the default tokenizer every size below
341 tokens has a count, and runs of sizes without one are at most 2 long.

*Too small.* If even the envelope (query, empty lists, counts-only
``omitted``) does not fit ``max_tokens``, :class:`PayloadError` is raised.

The packing is pure Python (:func:`build_payload`) over any
:class:`Counter`; the PL/Python entry point is
:func:`donto_pg.server.payload.recall_payload_sql`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from donto_pg.core.tokens import count_tokens, render_json, token_boundaries

__all__ = [
    "DEFAULT_CHUNK_SHARE",
    "IDS_SHARE",
    "MIN_CUT_TOKENS",
    "SNIPPET_TOKENS",
    "TOP_KEYS",
    "Counter",
    "Hit",
    "PayloadError",
    "TokenizerCounter",
    "build_payload",
    "default_chunk_tokens",
    "format_valid",
    "jsonb_ordered",
    "standing_record",
    "tokenizer_for_model",
]

DEFAULT_CHUNK_SHARE = 0.6
"""Default budget of the ``chunks`` object: this share of ``max_tokens``."""

SNIPPET_TOKENS = 32
"""Tokens of chunk text kept as the ``text`` gist of a memory record."""

MIN_CUT_TOKENS = 16
"""A chunk text cut to fit keeps at least this many tokens, or is left out."""

IDS_SHARE = 0.1
"""An id list of ``omitted`` is given only while it takes at most this share of max_tokens."""

TOP_KEYS = ("query", "memories", "chunks", "standing", "truncated", "tokens", "omitted")


class PayloadError(ValueError):
    """The arguments cannot give a payload (budget too small, bad value)."""


class Counter(Protocol):
    """Counts tokens of a text and says where a text may be cut."""

    def count(self, text: str) -> int:
        """Tokens of ``text``."""
        ...

    def boundaries(self, text: str) -> list[int]:
        """Character offsets ending each token of ``text`` (non-decreasing)."""
        ...


@dataclass(frozen=True)
class TokenizerCounter:
    """:class:`Counter` of an embedding model's tokenizer (None: the default model)."""

    model: str | None = None

    def count(self, text: str) -> int:
        return count_tokens(text, self.model)

    def boundaries(self, text: str) -> list[int]:
        return token_boundaries(text, self.model)


@dataclass(frozen=True)
class Hit:
    """One recall hit (a row of ``donto.recall``).

    ``valid_from``/``valid_to`` are the inclusive ISO dates of the valid time
    (None where unbounded).
    """

    statement_id: int
    revision_id: int
    char_start: int
    char_end: int
    chunk_text: str
    score: float = 0.0
    valid_from: str | None = None
    valid_to: str | None = None
    kind: str | None = None
    """The kind of a standing statement (instruction, preference, constraint); None: a chunk."""


def default_chunk_tokens(max_tokens: int) -> int:
    """Default ``chunk_tokens``: ``floor(DEFAULT_CHUNK_SHARE * max_tokens)``."""
    return math.floor(DEFAULT_CHUNK_SHARE * max_tokens + 1e-9)


def _key_order(key: str) -> tuple[int, bytes]:
    raw = key.encode("utf-8")
    return (len(raw), raw)


def jsonb_ordered(obj: Any) -> Any:
    """``obj`` with every object's keys in PostgreSQL ``jsonb`` order (length, then bytes)."""
    if isinstance(obj, dict):
        return {k: jsonb_ordered(obj[k]) for k in sorted(obj, key=_key_order)}
    if isinstance(obj, list):
        return [jsonb_ordered(v) for v in obj]
    return obj


def _obj(pairs: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """A dict with its (already ordered) values, keys in jsonb order."""
    items = list(pairs)
    return dict(sorted(items, key=lambda kv: _key_order(kv[0])))


def format_valid(valid_from: str | None, valid_to: str | None) -> str | None:
    """Compact valid time: ``FROM``, ``FROM..TO`` (inclusive), ``FROM..``, ``..TO`` or None."""
    lo = valid_from or None
    hi = valid_to or None
    if lo is None and hi is None:
        return None
    if lo is not None and lo == hi:
        return lo
    return f"{lo or ''}..{hi or ''}"


def _score(value: Any) -> float | None:
    try:
        score = float(value)
    except (TypeError, ValueError):
        return None
    return round(score, 4) if math.isfinite(score) else None


def snippet(text: str, counter: Counter, max_tokens: int = SNIPPET_TOKENS) -> str:
    """First ``max_tokens`` tokens of ``text`` with whitespace runs folded to one space."""
    folded = " ".join(text.split())
    bounds = counter.boundaries(folded)
    if len(bounds) <= max_tokens:
        return folded
    return folded[: bounds[max_tokens - 1]] if max_tokens > 0 else ""


def memory_record(hit: Hit, counter: Counter) -> dict[str, Any]:
    """The compact record of one hit in ``memories``."""
    return _obj([
        ("id", hit.statement_id),
        ("rev", hit.revision_id),
        ("span", [hit.char_start, hit.char_end]),
        ("valid", format_valid(hit.valid_from, hit.valid_to)),
        ("score", _score(hit.score)),
        ("text", snippet(hit.chunk_text, counter)),
    ])


def standing_record(hit: Hit) -> dict[str, Any]:
    """The record of one standing statement in ``standing`` (full text)."""
    return _obj([
        ("id", hit.statement_id),
        ("rev", hit.revision_id),
        ("span", [hit.char_start, hit.char_end]),
        ("kind", hit.kind),
        ("valid", format_valid(hit.valid_from, hit.valid_to)),
        ("text", hit.chunk_text),
    ])


def chunk_entry(hit: Hit, text: str | None = None) -> dict[str, Any]:
    """The ``chunks`` value of one hit; ``text`` (a prefix of its chunk) moves char_end."""
    body = hit.chunk_text if text is None else text
    return _obj([
        ("chunk_text", body),
        ("revision_id", hit.revision_id),
        ("char_start", hit.char_start),
        ("char_end", hit.char_start + len(body) if text is not None else hit.char_end),
    ])


def build_payload(
    query: str,
    hits: Sequence[Hit],
    max_tokens: int,
    chunk_tokens: int | None = None,
    *,
    counter: Counter | None = None,
) -> dict[str, Any]:
    """The payload for ``hits`` (best first) within ``max_tokens``; see the module docstring.

    ``chunk_tokens`` bounds ``count(render_json(payload["chunks"]))`` unless
    ``chunks`` is empty (default :func:`default_chunk_tokens`; values above
    ``max_tokens`` act as ``max_tokens``).
    Raises :class:`PayloadError` for a bad argument or a budget below the envelope.
    """
    if counter is None:
        counter = TokenizerCounter()
    if query is None:
        raise PayloadError("donto.recall_payload: query is null")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise PayloadError(f"donto.recall_payload: max_tokens must be >= 1, got {max_tokens!r}")
    if chunk_tokens is None:
        chunk_tokens = default_chunk_tokens(max_tokens)
    elif isinstance(chunk_tokens, bool) or not isinstance(chunk_tokens, int) or chunk_tokens < 0:
        raise PayloadError(
            f"donto.recall_payload: chunk_tokens must be >= 0 or null, got {chunk_tokens!r}")
    unique: list[Hit] = []
    standing: list[Hit] = []
    seen: set[int] = set()
    for hit in hits:
        if hit.statement_id not in seen:
            seen.add(hit.statement_id)
            (standing if hit.kind is not None else unique).append(hit)
    if not standing:
        return _Packer(query, unique, max_tokens, min(chunk_tokens, max_tokens), counter).pack()
    # The standing section is cut last: every statement first, memories and chunks
    # take what is left (down to none); then statements are dropped from the end.
    records = [standing_record(h) for h in standing]
    for n in range(len(records), -1, -1):
        packer = _Packer(query, unique, max_tokens, min(chunk_tokens, max_tokens), counter,
                         standing=records[:n], standing_cut=len(records) - n)
        try:
            return packer.pack()
        except PayloadError:
            if n == 0:
                raise
    raise AssertionError("unreachable")


@dataclass
class _Chunks:
    """Chunk texts chosen for the listed memories: (index, entry) pairs and the cut index."""

    entries: list[tuple[int, dict[str, Any]]]
    cut: int | None


class _Packer:
    def __init__(self, query: str, hits: list[Hit], budget: int, chunk_budget: int,
                 counter: Counter, standing: list[dict[str, Any]] | None = None,
                 standing_cut: int = 0) -> None:
        self.query = query
        self.standing = standing
        self.standing_cut = standing_cut
        self.hits = hits
        self.budget = budget
        self.chunk_budget = chunk_budget
        self.counter = counter
        self.ids_allowance = math.floor(IDS_SHARE * budget)
        self.records = [memory_record(h, counter) for h in hits]
        self.keys = [str(h.statement_id) for h in hits]
        self.empty_obj = self.tokens({})
        self.empty_list = self.tokens([])
        # Separator cost (a comma); framing only steers estimates, counts decide.
        self.sep = max(0, self.tokens([0, 0]) - 2 * self.tokens([0]) + self.empty_list)
        self.rec_cost = [self.tokens([r]) - self.empty_list for r in self.records]
        self.chunk_cost = [
            self.tokens({k: chunk_entry(h)}) - self.empty_obj
            for k, h in zip(self.keys, hits, strict=True)
        ]

    def tokens(self, obj: Any) -> int:
        return self.counter.count(render_json(obj))

    # -- assembling ------------------------------------------------------------
    def _id_list(self, ids: list[int], with_ids: bool) -> list[int] | None:
        if not with_ids or not ids:
            return None
        return ids if self.tokens(ids) <= self.ids_allowance else None

    def _omitted(self, m: int, chunks: _Chunks, with_ids: bool) -> dict[str, Any]:
        dropped = [h.statement_id for h in self.hits[m:]]
        present = {i for i, _ in chunks.entries}
        missing = [self.hits[i].statement_id for i in range(m) if i not in present]
        cut = [self.hits[chunks.cut].statement_id] if chunks.cut is not None else []
        pairs: list[tuple[str, Any]] = []
        if self.standing_cut:
            pairs.append(("standing", self.standing_cut))
        for count_key, ids_key, ids in (("memories", "memory_ids", dropped),
                                        ("chunks", "chunk_ids", missing),
                                        ("cut", "cut_ids", cut)):
            if ids:
                pairs.append((count_key, len(ids)))
                listed = self._id_list(ids, with_ids)
                if listed is not None:
                    pairs.append((ids_key, listed))
        return _obj(pairs)

    def assemble(self, m: int, chunks: _Chunks, with_ids: bool, tokens: int = 0
                 ) -> dict[str, Any]:
        omitted = self._omitted(m, chunks, with_ids)
        chunk_obj = _obj((self.keys[i], e) for i, e in chunks.entries)
        pairs = [
            ("query", self.query),
            ("memories", self.records[:m]),
            ("chunks", chunk_obj),
            ("truncated", bool(omitted)),
            ("tokens", tokens),
            ("omitted", omitted),
        ]
        if self.standing is not None:
            pairs.append(("standing", self.standing))
        return _obj(pairs)

    def _fixed_point(self, payload: dict[str, Any]) -> int | None:
        """Set payload["tokens"] to its own exact count, if such a value exists; else None."""
        payload["tokens"] = 0
        guess = self.tokens(payload)
        tried: set[int] = set()
        for _ in range(8):
            payload["tokens"] = guess
            got = self.tokens(payload)
            if got == guess:
                return got
            if guess in tried:
                break
            tried.add(guess)
            guess = got
        for candidate in range(max(0, guess - 8), guess + 9):
            payload["tokens"] = candidate
            if self.tokens(payload) == candidate:
                return candidate
        return None

    def finalize(self, payload: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
        """The payload with ``tokens`` equal to its own exact count, and that count.

        A number's own token count varies with its value (with WordPiece "430"
        is one token, "429" two), so a payload may have no self-consistent
        count: no t renders to exactly t tokens. Then the first of these
        variants that has one is taken, each a few tokens smaller: the cut
        chunk text 1-4 tokens shorter; the last memory's gist 1-6 tokens
        shorter; ``omitted`` without its id lists; and, last, the query echo
        1-3 tokens shorter (said in ``omitted.query``: the tokens left out).
        Returns (payload, None) if none has one.
        """
        for variant in self._variants(payload):
            total = self._fixed_point(variant)
            if total is not None:
                return variant, total
        return payload, None

    def _shorter(self, text: str, drop: int) -> str | None:
        """``text`` without its last ``drop`` tokens (None if it has fewer tokens)."""
        bounds = self.counter.boundaries(text)
        if len(bounds) < drop or drop < 1:
            return None
        return text[: bounds[len(bounds) - 1 - drop]] if len(bounds) > drop else ""

    def _variants(self, payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield payload
        cut_ids = payload["omitted"].get("cut_ids")
        if cut_ids:
            key = str(cut_ids[0])
            entry = payload["chunks"][key]
            for drop in range(1, 5):
                text = self._shorter(entry["chunk_text"], drop)
                if not text:
                    break
                chunks = dict(payload["chunks"])
                chunks[key] = _obj([*entry.items(), ("chunk_text", text),
                                    ("char_end", entry["char_start"] + len(text))])
                yield {**payload, "chunks": chunks}
        if payload["memories"]:
            last = payload["memories"][-1]
            for drop in range(1, 7):
                text = self._shorter(last["text"], drop)
                if text is None:
                    break
                memories = [*payload["memories"][:-1], {**last, "text": text}]
                yield {**payload, "memories": memories}
        omitted = payload["omitted"]
        counts_only = {k: v for k, v in omitted.items() if not k.endswith("_ids")}
        if counts_only != omitted:
            payload = {**payload, "omitted": counts_only}
            yield payload
        for drop in range(1, 4):
            query = self._shorter(self.query, drop)
            if query is None:
                break
            left_out = self.counter.count(self.query) - self.counter.count(query)
            marker = _obj([*payload["omitted"].items(), ("query", left_out)])
            yield {**payload, "query": query, "omitted": marker, "truncated": True}

    # -- choosing ---------------------------------------------------------------
    def _chunk_demand(self, m: int) -> int:
        if m == 0:
            return 0
        return self.empty_obj + sum(self.chunk_cost[:m]) + self.sep * (m - 1)

    def _memories_estimate(self, m: int, with_ids: bool, all_chunks: bool = False) -> int:
        """Estimated payload tokens with M memories and no chunk text.

        The ``omitted`` marker is counted as if every chunk were missing, or
        (ALL_CHUNKS) as if none were.
        """
        present = _Chunks([(i, {}) for i in range(m)] if all_chunks else [], None)
        skeleton = self.assemble(m, present, with_ids, tokens=self.budget)
        skeleton["memories"] = []  # counted below from the records' own costs
        skeleton["chunks"] = {}
        mem = sum(self.rec_cost[:m]) + self.sep * max(0, m - 1)
        return self.tokens(skeleton) + mem

    def choose_memories(self, with_ids: bool) -> int:
        best = 0
        for m in range(1, len(self.hits) + 1):
            demand = self._chunk_demand(m)
            need = self._memories_estimate(m, with_ids, all_chunks=demand <= self.chunk_budget)
            if m > 1:
                need += min(self.chunk_budget, demand)
            if need > self.budget:
                break
            best = m
        return best

    def select_chunks(self, m: int, allowance: int) -> _Chunks:
        """Chunk texts of memories [0, m) in rank order within ``allowance`` tokens."""
        while True:
            chunks = self._select_estimated(m, allowance)
            if not chunks.entries:
                return chunks
            actual = self.tokens(_obj((self.keys[i], e) for i, e in chunks.entries))
            if actual <= allowance:
                return chunks
            allowance -= actual - allowance  # a non-additive counter: shrink and retry

    def _select_estimated(self, m: int, allowance: int) -> _Chunks:
        entries: list[tuple[int, dict[str, Any]]] = []
        used = self.empty_obj
        for i in range(m):
            add = self.chunk_cost[i] + (self.sep if entries else 0)
            if used + add <= allowance:
                entries.append((i, chunk_entry(self.hits[i])))
                used += add
                continue
            room = allowance - used - (self.sep if entries else 0)
            prefix = self._cut(i, room)
            if prefix is None:
                break
            if prefix == self.hits[i].chunk_text:  # the estimate was pessimistic
                entries.append((i, chunk_entry(self.hits[i])))
                used += add
                continue
            entries.append((i, chunk_entry(self.hits[i], prefix)))
            return _Chunks(entries, i)
        return _Chunks(entries, None)

    def _cut(self, i: int, room: int) -> str | None:
        """Longest token-boundary prefix of hit i's text whose entry costs <= room tokens.

        None when not even :data:`MIN_CUT_TOKENS` tokens fit.
        """
        hit = self.hits[i]
        key = self.keys[i]

        def cost(text: str) -> int:
            return self.tokens({key: chunk_entry(hit, text)}) - self.empty_obj

        text = hit.chunk_text
        bounds = self.counter.boundaries(text)
        if len(bounds) < MIN_CUT_TOKENS or cost(text[: bounds[MIN_CUT_TOKENS - 1]]) > room:
            return None
        lo, hi = MIN_CUT_TOKENS, len(bounds)  # a prefix of lo tokens is known to fit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if cost(text[: bounds[mid - 1]]) <= room:
                lo = mid
            else:
                hi = mid - 1
        prefix = text[: bounds[lo - 1]]
        return text if lo == len(bounds) and cost(text) <= room else prefix

    # -- packing ------------------------------------------------------------------
    def pack(self) -> dict[str, Any]:
        everything = self._everything()
        if everything is not None:
            return everything
        for with_ids in (True, False):
            payload = self._pack(with_ids)
            if payload is not None:
                return payload
        envelope = self.assemble(0, _Chunks([], None), False)
        _, need = self.finalize(envelope)
        raise PayloadError(
            f"donto.recall_payload: max_tokens {self.budget} cannot hold even the empty "
            f"payload ({need if need is not None else 'over ' + str(self.budget)} tokens "
            f"for this query and {len(self.hits)} hits); give a larger max_tokens"
        )

    def _everything(self) -> dict[str, Any] | None:
        """The payload that cuts nothing, if it fits both budgets (checked exactly)."""
        m = len(self.hits)
        chunks = _Chunks([(i, chunk_entry(h)) for i, h in enumerate(self.hits)], None)
        payload = self.assemble(m, chunks, True)
        if m and self.tokens(payload["chunks"]) > self.chunk_budget:
            return None
        payload, total = self.finalize(payload)
        return payload if total is not None and total <= self.budget else None

    def _pack(self, with_ids: bool) -> dict[str, Any] | None:
        m = self.choose_memories(with_ids)
        allowance = self._chunk_allowance(m, with_ids)
        while True:
            chunks = self.select_chunks(m, allowance)
            payload, total = self.finalize(self.assemble(m, chunks, with_ids))
            if total is not None and total <= self.budget:
                return payload
            excess = 1 if total is None else total - self.budget
            if chunks.entries:
                used = self.tokens(payload["chunks"])
                allowance = min(allowance, used) - excess
            elif m > 0:
                m -= 1
                allowance = self._chunk_allowance(m, with_ids)
            else:
                return None

    def _chunk_allowance(self, m: int, with_ids: bool) -> int:
        if m == 0:
            return 0
        rest = self.budget - self._memories_estimate(m, with_ids)
        return max(0, min(self.chunk_budget, rest))


def tokenizer_for_model(name: str | None, source: str | None) -> str | None:
    """The tokenizer location for an embedding model row (None: the bundled default).

    A model given by a local directory (or a tokenizer.json) uses it; a hub
    name is looked up in the local Hugging Face cache only (offline).
    """
    from donto_pg.core import encoder

    if name is None or name in encoder.DEFAULT_NAMES:
        return None
    for candidate in (source, name):
        if candidate and os.path.exists(candidate):
            return candidate
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(source or name, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure means: not available offline
        raise PayloadError(
            f"donto.recall_payload: no offline tokenizer for embedding model {name!r} "
            f"(source {source!r}): {exc}") from exc


@dataclass(frozen=True)
class Interruptible:
    """A :class:`Counter` that calls ``check`` before each count, so that packing a large
    payload inside the server can be cancelled (server.payload passes interrupt_check)."""

    inner: Counter
    check: Callable[[], None]

    def count(self, text: str) -> int:
        self.check()
        return self.inner.count(text)

    def boundaries(self, text: str) -> list[int]:
        self.check()
        return self.inner.boundaries(text)
