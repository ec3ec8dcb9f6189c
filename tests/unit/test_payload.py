"""Packing of token-budgeted recall payloads (donto_pg.core.payload), without a database."""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from donto_pg import beam
from donto_pg.core import payload
from donto_pg.core.payload import (
    Hit,
    PayloadError,
    build_payload,
    default_chunk_tokens,
    format_valid,
    jsonb_ordered,
)
from donto_pg.core.tokens import count_json_tokens, count_tokens, render_json
from donto_pg.server.payload import recall_payload_sql
from tests.conftest import EXAMPLES

_WORD = re.compile(r"\w+|[^\w\s]")


class WordCounter:
    """Additive stub: a word or a punctuation character is a token (like BERT pre-tokenizing)."""

    def count(self, text: str) -> int:
        return len(_WORD.findall(text))

    def boundaries(self, text: str) -> list[int]:
        return [m.end() for m in _WORD.finditer(text)]


class Mod3Counter(WordCounter):
    """A digit run costs 1 token if its value is divisible by 3, else 2.

    A third of payload sizes then have no self-consistent ``tokens`` value,
    which exercises the fallback variants.
    """

    def count(self, text: str) -> int:
        return sum((1 if int(w) % 3 == 0 else 2) if w.isdigit() else 1
                   for w in _WORD.findall(text))


class QuarterCounter:
    """Non-additive stub: ceil(chars / 4); cut points every 4 characters."""

    def count(self, text: str) -> int:
        return math.ceil(len(text) / 4)

    def boundaries(self, text: str) -> list[int]:
        return [*range(4, len(text), 4), len(text)] if text else []


def make_hits(texts: list[str], start_id: int = 100) -> list[Hit]:
    hits, pos = [], 0
    for i, text in enumerate(texts):
        hits.append(Hit(statement_id=start_id + i, revision_id=7, char_start=pos,
                        char_end=pos + len(text), chunk_text=text, score=1 / (61 + i),
                        valid_from="2024-03-15", valid_to="2024-03-16" if i % 2 else "2024-03-15"))
        pos += len(text)
    return hits


def sentences(n: int, words: int = 40) -> list[str]:
    vocab = ("I moved to Berlin in March and my sister visited , then we talked about the "
             "new job at the bakery ; it was \"great\" .").split()
    return [" ".join(vocab[(i * 7 + j) % len(vocab)] for j in range(words)) + "\n"
            for i in range(n)]


def keys_in_jsonb_order(obj) -> bool:
    if isinstance(obj, dict):
        keys = list(obj)
        ok = keys == sorted(keys, key=lambda k: (len(k.encode()), k.encode()))
        return ok and all(keys_in_jsonb_order(v) for v in obj.values())
    if isinstance(obj, list):
        return all(keys_in_jsonb_order(v) for v in obj)
    return True


def check(p: dict, query: str, hits: list[Hit], budget: int, chunk_cap: int, counter) -> None:
    """Every promise of the payload format, for any counter."""
    assert set(p) == {"query", "memories", "chunks", "truncated", "tokens", "omitted"}
    assert keys_in_jsonb_order(p)
    size = counter.count(render_json(p))
    assert size == p["tokens"] <= budget
    cap = min(chunk_cap, budget)
    assert p["chunks"] == {} or counter.count(render_json(p["chunks"])) <= cap
    n = len(p["memories"])
    listed = [m["id"] for m in p["memories"]]
    assert listed == [h.statement_id for h in hits[:n]]
    by_id = {h.statement_id: h for h in hits}
    cut = []
    for key, entry in p["chunks"].items():
        hit = by_id[int(key)]
        assert int(key) in listed
        assert hit.chunk_text.startswith(entry["chunk_text"])
        assert entry["char_start"] == hit.char_start and entry["revision_id"] == hit.revision_id
        assert entry["char_end"] == hit.char_start + len(entry["chunk_text"])
        if entry["chunk_text"] != hit.chunk_text:
            cut.append(int(key))
    missing = [i for i in listed if str(i) not in p["chunks"]]
    dropped = [h.statement_id for h in hits[n:]]
    om = p["omitted"]
    assert om.get("memories", 0) == len(dropped) and om.get("memory_ids", dropped) == dropped
    assert om.get("chunks", 0) == len(missing) and om.get("chunk_ids", missing) == missing
    assert om.get("cut", 0) == len(cut) <= 1 and om.get("cut_ids", cut) == cut
    query_cut = p["query"] != query
    assert query_cut == ("query" in om)
    if query_cut:
        assert query.startswith(p["query"])
    cut_anything = bool(dropped or missing or cut or query_cut)
    assert p["truncated"] is cut_anything and (om != {}) is cut_anything
    # record fields other than the gist are the hit's own
    for m, h in zip(p["memories"], hits, strict=False):
        assert (m["id"], m["rev"], m["span"]) == (h.statement_id, h.revision_id,
                                                  [h.char_start, h.char_end])
        assert " ".join(h.chunk_text.split()).startswith(m["text"])


# -- deterministic cases --------------------------------------------------------------


def test_format_valid():
    assert format_valid("2024-03-15", "2024-03-15") == "2024-03-15"
    assert format_valid("2024-03-15", "2024-03-20") == "2024-03-15..2024-03-20"
    assert format_valid(None, "2024-03-20") == "..2024-03-20"
    assert format_valid("2024-03-15", None) == "2024-03-15.."
    assert format_valid(None, None) is None and format_valid("", "") is None


def test_jsonb_order_is_length_then_bytes():
    got = jsonb_ordered({"memories": 1, "query": {"bb": 1, "a": 2, "ab": 3}, "tokens": 2,
                         "chunks": 3, "é": 4, "zz": 5})
    assert list(got) == ["zz", "é", "query", "chunks", "tokens", "memories"]  # é is 2 bytes
    assert list(got["query"]) == ["a", "ab", "bb"]


def test_everything_fits_gives_the_full_payload():
    hits = make_hits(sentences(3))
    counter = WordCounter()
    p = build_payload("where did I move?", hits, 100_000, counter=counter)
    check(p, "where did I move?", hits, 100_000, default_chunk_tokens(100_000), counter)
    assert not p["truncated"] and p["omitted"] == {}
    assert [p["chunks"][str(h.statement_id)]["chunk_text"] for h in hits] == \
        [h.chunk_text for h in hits]
    assert len(p["memories"]) == 3


def test_chunk_budget_caps_raw_texts_and_says_so():
    hits = make_hits(sentences(10, words=60))
    counter = WordCounter()
    p = build_payload("q", hits, 2000, chunk_tokens=300, counter=counter)
    check(p, "q", hits, 2000, 300, counter)
    assert 0 < counter.count(render_json(p["chunks"])) <= 300
    assert p["truncated"] and p["omitted"]["cut"] == 1
    assert len(p["memories"]) == 10  # memories were not starved by the raw texts
    assert p["omitted"]["chunks"] == 10 - len(p["chunks"])
    zero = build_payload("q", hits, 2000, chunk_tokens=0, counter=counter)
    assert zero["chunks"] == {} and zero["omitted"]["chunks"] == len(zero["memories"]) > 0


def test_default_chunk_share():
    assert default_chunk_tokens(1000) == 600 and default_chunk_tokens(64) == 38


@pytest.mark.parametrize("bad", [0, -5, None, True, 2.5])
def test_bad_max_tokens(bad):
    with pytest.raises(PayloadError, match="max_tokens must be >= 1"):
        build_payload("q", [], bad, counter=WordCounter())


def test_bad_chunk_tokens():
    with pytest.raises(PayloadError, match="chunk_tokens must be >= 0"):
        build_payload("q", [], 100, chunk_tokens=-1, counter=WordCounter())


def test_too_small_budget_is_a_clear_error():
    hits = make_hits(sentences(3))
    with pytest.raises(PayloadError, match="cannot hold even the empty payload") as info:
        build_payload("where did I move in March?", hits, 12, counter=WordCounter())
    assert "max_tokens 12" in str(info.value) and "3 hits" in str(info.value)


def test_smallest_working_budget_is_the_counts_only_envelope():
    hits = make_hits(sentences(20))
    counter = WordCounter()
    budget = 1
    while True:
        try:
            envelope = build_payload("q w e", hits, budget, counter=counter)
            break
        except PayloadError:
            budget += 1
    # the first budget that works is filled exactly by the counts-only envelope
    assert envelope["tokens"] == budget > 20
    assert envelope["memories"] == [] and envelope["omitted"] == {"memories": 20}
    assert build_payload("q w e", hits, budget + 5, counter=counter)["memories"] == []


def test_duplicate_hits_are_listed_once():
    hits = make_hits(sentences(2))
    p = build_payload("q", [hits[0], hits[1], hits[0]], 10_000, counter=WordCounter())
    assert [m["id"] for m in p["memories"]] == [100, 101] and not p["truncated"]


def test_memory_ids_are_listed_only_while_small():
    hits = make_hits(sentences(200, words=10))
    counter = WordCounter()
    p = build_payload("q", hits, 400, counter=counter)
    check(p, "q", hits, 400, default_chunk_tokens(400), counter)
    assert p["omitted"]["memories"] > 150 and "memory_ids" not in p["omitted"]
    p = build_payload("q", hits[:12], 400, counter=counter)
    assert p["omitted"]["memory_ids"] == [h.statement_id for h in hits[len(p["memories"]):12]]


def test_no_fixed_point_falls_back_to_a_variant():
    """With Mod3Counter some sizes have no self-consistent count; payloads stay exact."""
    counter = Mod3Counter()
    trimmed_query = trimmed_gist = 0
    for words in range(1, 40):
        query = " ".join(["word"] * words)
        p = build_payload(query, [], 10_000, counter=counter)
        check(p, query, [], 10_000, 6000, counter)
        trimmed_query += p["query"] != query
        hits = make_hits(sentences(1, words=80))
        p = build_payload(query, hits, 10_000, counter=counter)
        check(p, query, hits, 10_000, 6000, counter)
        gist = payload.snippet(hits[0].chunk_text, counter)
        trimmed_gist += p["memories"][0]["text"] != gist
    assert trimmed_query > 0 and trimmed_gist > 0


def test_real_tokenizer_peer_reproduction():
    """The peer's case: 20 raw texts of 3,000 chars of real dialogue at a 12,288 budget."""
    conv = next(beam.iter_beam(EXAMPLES / "chats" / "100K" / "13"))
    body, _ = beam.format_chat(conv)
    texts = [body[i * 3000:(i + 1) * 3000] for i in range(20)]
    hits = make_hits(texts)
    assert sum(count_tokens(t) for t in texts) > 12_288  # the raw texts alone are over
    p = build_payload("what fantasy series did I pick for the winter?", hits, 12_288)
    assert count_json_tokens(p) == p["tokens"] <= 12_288
    assert count_json_tokens(p["chunks"]) <= default_chunk_tokens(12_288)
    assert p["truncated"] and len(p["chunks"]) >= 5 and len(p["memories"]) >= len(p["chunks"])
    assert json.loads(render_json(p)) == p


def test_real_tokenizer_many_budgets():
    """The tokens field is exact for every budget (WordPiece numbers have no regular size)."""
    conv = next(beam.iter_beam(EXAMPLES / "chats" / "100K" / "13"))
    body, _ = beam.format_chat(conv)
    hits = make_hits([body[i * 1200:(i + 1) * 1200] for i in range(8)])
    counter = payload.TokenizerCounter()
    ok = 0
    for budget in range(40, 3200, 53):
        try:
            p = build_payload("where did I move?", hits, budget)
        except PayloadError:
            assert budget < 60
            continue
        check(p, "where did I move?", hits, budget, default_chunk_tokens(budget), counter)
        ok += 1
    assert ok > 50


# -- properties --------------------------------------------------------------------------

_TEXT = st.lists(
    st.sampled_from(list("ab cd\n\"\\{}[]:,é\u2028\x01\t") + ["word ", "42 ", "ignore "]),
    min_size=1, max_size=120).map("".join)


@st.composite
def cases(draw):
    texts = draw(st.lists(_TEXT, max_size=10))
    query = " ".join(draw(st.lists(st.sampled_from(["where", "did", "I", "move", "\"", "7"]),
                                   min_size=1, max_size=8)))
    budget = draw(st.integers(min_value=1, max_value=2500))
    chunk_tokens = draw(st.one_of(st.none(), st.integers(min_value=0, max_value=3000)))
    counter = draw(st.sampled_from([WordCounter(), Mod3Counter(), QuarterCounter()]))
    return query, make_hits(texts, draw(st.integers(1, 10**6))), budget, chunk_tokens, counter


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_properties(case):
    query, hits, budget, chunk_tokens, counter = case
    cap = default_chunk_tokens(budget) if chunk_tokens is None else chunk_tokens
    empty = {"query": query, "memories": [], "chunks": {}, "truncated": bool(hits),
             "tokens": 0, "omitted": {"memories": len(hits)} if hits else {}}
    floor = counter.count(render_json(jsonb_ordered(empty)))
    try:
        p = build_payload(query, hits, budget, chunk_tokens, counter=counter)
    except PayloadError as exc:
        assert "cannot hold even the empty payload" in str(exc)
        # only a budget about the envelope's size is refused (Mod3Counter is built to
        # lack self-consistent counts, an envelope of a short query may have none at all)
        if not isinstance(counter, Mod3Counter):
            assert budget < floor + 2
        return
    check(p, query, hits, budget, cap, counter)
    unbounded = build_payload(query, hits, 10**7, 10**7, counter=counter)
    assert not unbounded["truncated"] or "query" in unbounded["omitted"]
    fits = (unbounded["tokens"] <= budget and
            (not hits or counter.count(render_json(unbounded["chunks"])) <= min(cap, budget)))
    if fits:
        assert p == unbounded


# -- the PL/Python entry point with a fake plpy --------------------------------------


class FakePlpy:
    class Error(Exception):
        pass

    class Rows(list):
        def nrows(self) -> int:
            return len(self)

    def __init__(self, hits: list[Hit]) -> None:
        self.hits = hits
        self.calls: list[tuple[str, list]] = []
        self.errors: list[tuple[str, str]] = []

    def prepare(self, sql: str, types: list[str]) -> str:
        return sql

    def execute(self, plan: str, args: list | None = None) -> Rows:
        """Like plpy.execute: ``args`` is optional (the interrupt check runs a bare plan)."""
        self.calls.append((plan, args))
        if "donto.recall(" in plan:
            return self.Rows({"statement_id": h.statement_id, "revision_id": h.revision_id,
                              "char_start": h.char_start, "char_end": h.char_end,
                              "chunk_text": h.chunk_text, "score": h.score,
                              "valid_from": h.valid_from, "valid_to": h.valid_to}
                             for h in self.hits[:args[1]])
        return self.Rows([{"name": "all-MiniLM-L6-v2", "source": "/nowhere"}])

    def error(self, message: str, sqlstate: str | None = None) -> None:
        self.errors.append((message, sqlstate))
        raise self.Error(message)


def test_sql_entry_point_returns_the_rendered_payload():
    hits = make_hits(sentences(6))
    plpy = FakePlpy(hits)
    text = recall_payload_sql(plpy, "where did I move?", 512, 4, None, None, None, None)
    got = json.loads(text)
    assert got == build_payload("where did I move?", hits[:4], 512)
    assert text == render_json(got) and count_tokens(text) == got["tokens"] <= 512
    recall_args = next(a for sql, a in plpy.calls if "donto.recall(" in sql)
    assert recall_args == ["where did I move?", 4, None, None, None]


@pytest.mark.parametrize(("max_tokens", "chunk_tokens", "message"), [
    (3, None, "cannot hold even the empty payload"),
    (0, None, "max_tokens must be >= 1"),
    (None, None, "max_tokens must be >= 1"),
    (100, -2, "chunk_tokens must be >= 0"),
])
def test_sql_entry_point_errors_carry_sqlstate(max_tokens, chunk_tokens, message):
    plpy = FakePlpy(make_hits(sentences(2)))
    with pytest.raises(FakePlpy.Error, match=message):
        recall_payload_sql(plpy, "q", max_tokens, 5, chunk_tokens, None, None, None)
    assert plpy.errors[0][1] == "22023"
