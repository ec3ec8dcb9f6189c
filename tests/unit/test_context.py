"""Tests for donto_pg.core.tool_history_splitter.split_context_history.

The reproduction is the failure of a peer (Hindsight 0.10.0): a recall result
whose raw ``chunks`` dict was copied into every piece of a split. Real text
comes from the BEAM fixture examples/beam/chats/100K/13/chat.json (BEAM,
CC-BY-SA-4.0, from mohammadtavakoli78/BEAM).
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from donto_pg.core.tokens import count_json_tokens, render_json
from donto_pg.core.tool_history_splitter import (
    DEFAULT_LIST_KEYS,
    MIN_BUDGET,
    OMITTED_KEY,
    TRUNCATED_KEY,
    context_budget,
    sibling_allowance,
    split_context_history,
)
from tests.conftest import ROOT

BEAM_CHAT = ROOT / "examples" / "beam" / "chats" / "100K" / "13" / "chat.json"
MAX_CONTEXT = 12288

Count = Callable[[Any], int]


@functools.cache
def beam_corpus() -> str:
    batches = json.loads(BEAM_CHAT.read_text(encoding="utf-8"))
    return "\n\n".join(m["content"] for b in batches for turn in b["turns"] for m in turn)


@functools.cache
def bench() -> ModuleType:
    """benchmarks/split.py, which holds the peer's splitter (not product code)."""
    spec = importlib.util.spec_from_file_location("bench_split", ROOT / "benchmarks" / "split.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Slicer:
    """Consecutive, distinct slices of real conversation text."""

    def __init__(self, start: int = 0) -> None:
        self.pos = start

    def take(self, n: int) -> str:
        corpus = beam_corpus()
        if self.pos + n > len(corpus):
            self.pos = 0
        text = corpus[self.pos : self.pos + n]
        self.pos += n
        return text


def peer_reproduction() -> dict[str, Any]:
    """30 memories of ~300 chars and a chunks dict of 20 raw texts of 3,000 chars."""
    s = Slicer()
    memories = [{"id": f"m{i}", "text": s.take(300), "fact_type": "world"} for i in range(30)]
    chunks = {f"c{i}": {"chunk_text": s.take(3000), "chunk_index": i} for i in range(20)}
    return {"query": "which fantasy series did I pick?", "memories": memories, "chunks": chunks}


# --- checking a split ---------------------------------------------------------
def word_count(obj: Any) -> int:
    """Cheap deterministic counter: words and punctuation of the compact JSON.

    It splits like BERT's pre-tokenizer (minus sub-words), so it adds up on
    JSON punctuation the way the real tokenizer does.
    """
    return len(re.findall(r"\w+|[^\w\s]", render_json(obj)))


def char_count(obj: Any) -> int:
    """Cheap counter that does NOT add up (rounding): exercises exact re-checks."""
    return math.ceil(len(render_json(obj)) / 3)


PER_UNIT_SLACK = 48
"""Framing a split adds per sub-entry beyond its copied siblings (key, braces, marker share)."""


def check_split(
    entries: Sequence[dict[str, Any]],
    pieces: list[list[dict[str, Any]]],
    max_context_tokens: int,
    count: Count,
    list_keys: Sequence[str] = DEFAULT_LIST_KEYS,
    *,
    tight: bool = True,
) -> None:
    """Assert every guarantee of split_context_history; entries carry a unique "eid".

    ``tight`` also checks that packing is greedy (nothing would have fitted in
    the previous piece or sub-entry); it needs a counter that adds up, since
    the splitter packs on estimates and then only shrinks.
    """
    budget = context_budget(max_context_tokens)
    allowance = sibling_allowance(budget)

    # Every piece is non-empty and within budget, counted whole.
    for piece in pieces:
        assert piece, "empty piece"
        assert count(piece) <= budget, f"piece of {count(piece)} > budget {budget}"

    units = [u for piece in pieces for u in piece]
    by_eid: dict[Any, list[dict[str, Any]]] = {}
    for u in units:
        by_eid.setdefault(u["eid"], []).append(u)
    assert [e["eid"] for e in entries if e["eid"] in by_eid] == list(by_eid), "order changed"
    assert set(by_eid) == {e["eid"] for e in entries}, "an entry vanished"

    # Every item lands in exactly one piece, in order, unchanged or truncated once.
    expected: list[tuple[Any, str, Any]] = []
    originals: dict[tuple[Any, str, Any], Any] = {}
    for e in entries:
        for k in e:  # the splitter takes list keys in the entry's own order
            if k in list_keys and isinstance(e[k], list):
                for item in e[k]:
                    expected.append((e["eid"], k, item["id"]))
                    originals[(e["eid"], k, item["id"])] = item
    seen: list[tuple[Any, str, Any]] = []
    for u in units:
        for k in u:
            if k in list_keys and isinstance(u[k], list):
                for item in u[k]:
                    ref = (u["eid"], k, item["id"])
                    seen.append(ref)
                    original = originals[ref]
                    if item is not original:
                        assert item[TRUNCATED_KEY] is True
                        assert original["text"].startswith(item["text"])
                        assert len(item["text"]) < len(original["text"])
    assert Counter(seen) == Counter(expected)
    assert seen == expected, "items out of order"

    total_in = sum(count(e) for e in entries)
    extra_units = 0
    markers = 0
    for e in entries:
        mine = by_eid[e["eid"]]
        if len(mine) == 1 and mine[0] is e:
            continue  # passed through: it fitted
        assert count([e]) > budget, "an entry that fitted was altered"
        lists = [k for k in list_keys if isinstance(e.get(k), list)]
        if not lists:
            (only,) = mine
            assert only[TRUNCATED_KEY] is True
            assert set(only) <= set(e) | {TRUNCATED_KEY}
            continue
        extra_units += len(mine) - 1
        split_keys = {k for k in lists if e[k]}
        kept = {k for u in mine for k in u} - split_keys - {OMITTED_KEY}
        omitted = set(e) - split_keys - kept
        for u in mine:
            siblings = {k: u[k] for k in u if k not in split_keys and k != OMITTED_KEY}
            assert set(siblings) == kept, "siblings differ between sub-entries"
            for k, v in siblings.items():
                assert v is e[k], "a sibling was copied with changes"
                assert count(v) <= budget, "a piece holds a sibling larger than the budget"
            assert count(siblings) - count({}) <= allowance, "siblings over the allowance"
            assert sum(k in split_keys for k in u) <= 1
        with_marker = [u for u in mine if OMITTED_KEY in u]
        if not omitted:
            assert not with_marker
            continue
        assert with_marker == [mine[0]], "omission must be recorded once, on the first"
        marker = mine[0][OMITTED_KEY]
        markers += count({OMITTED_KEY: marker})
        if "_keys" in marker:
            assert marker["_keys"] == len(omitted)
            assert marker["tokens"] == sum(count(e[k]) for k in omitted)
        else:
            assert set(marker) == omitted
            for k in omitted:
                assert marker[k]["tokens"] == count(e[k])
                assert marker[k]["reason"]

    if tight:
        for a, b in zip(pieces, pieces[1:], strict=False):
            assert count([*a, b[0]]) > budget, "greedy packing left room in a piece"
        for prev, nxt in zip(units, units[1:], strict=False):
            if prev["eid"] != nxt["eid"] or OMITTED_KEY in nxt:
                continue
            shared = [k for k in list_keys if isinstance(prev.get(k), list) and k in nxt]
            for k in shared:
                if prev[k] and nxt[k]:
                    grown = {**prev, k: [*prev[k], nxt[k][0]]}
                    assert count([grown]) > budget, "greedy packing left room in a sub-entry"

    # No duplication factor: beyond the input, each extra sub-entry of a split
    # costs at most the sibling allowance plus framing.
    total_out = sum(count(piece) for piece in pieces)
    per_unit = allowance + PER_UNIT_SLACK
    bound = total_in + markers + (extra_units + len(pieces)) * per_unit
    assert total_out <= bound, f"{total_out} tokens out for {total_in} in"
    # ... and the extra sub-entries are few: same-key sub-entries never share a piece.
    n_keys = sum(sum(1 for k in list_keys if isinstance(e.get(k), list) and e[k]) for e in entries)
    assert extra_units <= max(0, len(pieces) - 1) + n_keys


# --- acceptance: the peer's reproduction -----------------------------------------
def test_peer_reproduction_gives_few_pieces() -> None:
    entry = {"eid": 0, **peer_reproduction()}
    budget = context_budget(MAX_CONTEXT)
    assert budget == 9830
    chunks_tokens = count_json_tokens(entry["chunks"])
    assert chunks_tokens > budget, "the chunks dict alone must be over budget"
    assert count_json_tokens(entry) > budget

    pieces = split_context_history([entry], MAX_CONTEXT)
    assert len(pieces) <= 3
    check_split([entry], pieces, MAX_CONTEXT, count_json_tokens)
    units = [u for p in pieces for u in p]
    assert all("chunks" not in u for u in units)
    assert all(u["query"] == entry["query"] for u in units)
    assert units[0][OMITTED_KEY]["chunks"]["tokens"] == chunks_tokens
    assert sum(len(u["memories"]) for u in units) == 30
    total = sum(count_json_tokens(p) for p in pieces)
    assert total < count_json_tokens(entry) - chunks_tokens + 100


def test_naive_splitter_reproduces_the_peer_bug() -> None:
    """The benchmark's naive splitter does what the peer did, and check_split sees it."""
    entry = {"eid": 0, **peer_reproduction()}
    naive = bench().naive_split([entry], MAX_CONTEXT)
    assert len(naive) == 30
    assert all(p[0]["chunks"] is entry["chunks"] for p in naive)
    assert all(count_json_tokens(p) > context_budget(MAX_CONTEXT) for p in naive[:3])
    # The additive shortcut of the naive splitter matches exact counting.
    assert bench().naive_split([entry], MAX_CONTEXT, exact=True) == naive
    with pytest.raises(AssertionError):
        check_split([entry], naive, MAX_CONTEXT, count_json_tokens)


def test_check_split_catches_copied_siblings() -> None:
    """Pieces within budget can still duplicate; check_split must catch both ways."""
    s = Slicer(1000)
    entry = {
        "eid": 0,
        "memories": [{"id": i, "text": s.take(400)} for i in range(40)],
        "notes": s.take(900),  # over the allowance, under the budget
    }
    pieces = split_context_history([entry], 2000, count_tokens=word_count)
    check_split([entry], pieces, 2000, word_count)
    assert OMITTED_KEY in pieces[0][0] and "notes" not in pieces[0][0]
    budget = context_budget(2000)
    # Copying a sibling over the allowance into every piece.
    copied = [[{"eid": 0, "notes": entry["notes"], "memories": [m]}] for m in entry["memories"]]
    assert all(word_count(p) <= budget for p in copied)
    with pytest.raises(AssertionError, match="siblings over the allowance"):
        check_split([entry], copied, 2000, word_count)
    # A small sibling, but one item per piece: the duplication shows as slack.
    small = {**entry, "notes": entry["notes"][:100]}
    one_each = [[{"eid": 0, "memories": [m], "notes": small["notes"]}] for m in small["memories"]]
    with pytest.raises(AssertionError, match="greedy packing left room"):
        check_split([small], one_each, 2000, word_count)


# --- rules ------------------------------------------------------------------------
def test_budget_rule() -> None:
    assert context_budget(12288) == 9830
    assert context_budget(12288, 0.5) == 6144
    assert context_budget(1000, 0.29) == 290
    assert sibling_allowance(9830) == 983
    with pytest.raises(ValueError):
        context_budget(1000, 0)
    with pytest.raises(ValueError):
        context_budget(1000, 1.5)
    with pytest.raises(ValueError):
        context_budget(MIN_BUDGET - 1, 1.0)
    assert split_context_history([], 1000) == []


def test_small_entries_pass_through_packed_in_order() -> None:
    s = Slicer(5000)
    entries = [{"eid": i, "role": "user", "content": s.take(600)} for i in range(12)]
    pieces = split_context_history(entries, 1000)
    budget = context_budget(1000)
    assert 1 < len(pieces) < len(entries)
    flat = [u for p in pieces for u in p]
    assert all(a is b for a, b in zip(flat, entries, strict=True))
    for a, b in zip(pieces, pieces[1:], strict=False):
        assert count_json_tokens([*a, b[0]]) > budget, "greedy packing left room"
    check_split(entries, pieces, 1000, count_json_tokens)


def test_item_too_large_alone_is_truncated_once() -> None:
    s = Slicer(20_000)
    big = {"id": "big", "text": s.take(30_000), "source": "beam"}
    entry = {
        "eid": 0,
        "query": "q",
        "memories": [{"id": "a", "text": s.take(200)}, big, {"id": "b", "text": s.take(200)}],
    }
    pieces = split_context_history([entry], 2000)
    check_split([entry], pieces, 2000, count_json_tokens)
    items = [m for p in pieces for u in p for m in u["memories"]]
    assert [m["id"] for m in items] == ["a", "big", "b"]
    cut = items[1]
    assert cut[TRUNCATED_KEY] is True and cut["source"] == "beam"
    assert big["text"].startswith(cut["text"]) and len(cut["text"]) > 1000
    assert TRUNCATED_KEY not in big, "the input was modified"
    assert sum(TRUNCATED_KEY in m for m in items) == 1


def test_string_item_too_large_is_wrapped() -> None:
    s = Slicer(40_000)
    long_text = s.take(20_000)
    entry = {"eid": 0, "results": ["short", long_text]}
    pieces = split_context_history([entry], 1500)
    items = [r for p in pieces for u in p for r in u["results"]]
    assert items[0] == "short"
    assert items[1][TRUNCATED_KEY] is True
    assert long_text.startswith(items[1]["text"]) and items[1]["text"]
    assert all(count_json_tokens(p) <= context_budget(1500) for p in pieces)


def test_entry_without_list_key_is_truncated_with_marker() -> None:
    s = Slicer(60_000)
    entry = {"eid": 0, "role": "tool", "content": s.take(40_000), "name": "recall"}
    pieces = split_context_history([entry], 3000)
    assert len(pieces) == 1
    (only,) = pieces[0]
    assert only[TRUNCATED_KEY] is True
    assert only["role"] == "tool" and only["name"] == "recall"
    assert entry["content"].startswith(only["content"])
    budget = context_budget(3000)
    assert budget - 30 <= count_json_tokens(pieces[0]) <= budget, "cut more than needed"
    check_split([entry], pieces, 3000, count_json_tokens)


def test_structure_without_strings_is_cut_as_json_text() -> None:
    s = Slicer(70_000)
    data = {f"k{i}": i for i in range(3000)}
    entry = {"eid": 0, "role": "tool", "content": s.take(200), "data": data}
    pieces = split_context_history([entry], 1000)
    (only,) = pieces[0]
    assert only[TRUNCATED_KEY] is True and only["role"] == "tool"
    assert isinstance(only["data"], str) and render_json(data).startswith(only["data"])
    assert len(only["data"]) > 500
    check_split([entry], pieces, 1000, count_json_tokens)
    # Too many keys to keep even empty: the whole entry becomes a text prefix.
    wide = {f"key_{i}": i for i in range(2000)}
    (wrapped,) = split_context_history([wide], 1000)[0]
    assert set(wrapped) == {TRUNCATED_KEY, "text"}
    assert render_json(wide).startswith(wrapped["text"]) and wrapped["text"]


def test_several_list_keys_and_an_empty_one() -> None:
    s = Slicer(80_000)
    entry = {
        "eid": 0,
        "query": "q",
        "memories": [{"id": f"m{i}", "text": s.take(500)} for i in range(20)],
        "observations": [],
        "results": [{"id": f"r{i}", "text": s.take(500)} for i in range(20)],
        "chunks": {f"c{i}": s.take(2000) for i in range(5)},
    }
    pieces = split_context_history([entry], 2500)
    check_split([entry], pieces, 2500, count_json_tokens)
    units = [u for p in pieces for u in p]
    assert all(u["observations"] is entry["observations"] for u in units)
    assert set(units[0][OMITTED_KEY]) == {"chunks"}


def test_only_empty_lists_and_a_huge_sibling() -> None:
    s = Slicer(90_000)
    entry = {"eid": 0, "query": "q", "memories": [], "chunks": {"c": s.take(20_000)}}
    pieces = split_context_history([entry], 2000)
    assert len(pieces) == 1 and len(pieces[0]) == 1
    only = pieces[0][0]
    assert list(only) == ["eid", "query", "memories", OMITTED_KEY]
    assert only["memories"] == [] and only["query"] == "q"
    assert only[OMITTED_KEY]["chunks"]["tokens"] == count_json_tokens(entry["chunks"])
    check_split([entry], pieces, 2000, count_json_tokens)


def test_many_omitted_keys_get_a_compact_marker() -> None:
    s = Slicer(100_000)
    entry: dict[str, Any] = {"eid": 0, "memories": [{"id": 1, "text": "x"}]}
    for i in range(40):
        entry[f"raw_{i}"] = s.take(400)
    pieces = split_context_history([entry], 1000)
    marker = pieces[0][0][OMITTED_KEY]
    assert marker["_keys"] == 40
    check_split([entry], pieces, 1000, count_json_tokens)


def test_input_is_not_modified() -> None:
    entries = [{"eid": 0, **peer_reproduction()}, {"eid": 1, "content": Slicer(7).take(50_000)}]
    before = copy.deepcopy(entries)
    split_context_history(entries, 4000)
    assert entries == before


def test_pieces_fit_the_real_tokenizer_exactly_and_the_non_additive_counter() -> None:
    entry = {"eid": 0, **peer_reproduction()}
    for counter in (count_json_tokens, word_count, char_count):
        pieces = split_context_history([entry], 1200, count_tokens=counter)
        check_split([entry], pieces, 1200, counter, tight=counter is not char_count)


# --- properties ---------------------------------------------------------------------
@st.composite
def texts(draw: st.DrawFn, max_size: int) -> str:
    corpus = beam_corpus()
    start = draw(st.integers(min_value=0, max_value=len(corpus) - 1))
    return corpus[start : start + draw(st.integers(min_value=0, max_value=max_size))]


@st.composite
def histories(draw: st.DrawFn, max_text: int, max_items: int) -> list[dict[str, Any]]:
    """Random tool results and messages; each entry has a unique "eid", items a unique "id"."""
    n = draw(st.integers(min_value=0, max_value=6))
    entries: list[dict[str, Any]] = []
    next_id = 0
    for eid in range(n):
        entry: dict[str, Any] = {"eid": eid}
        if draw(st.booleans()):
            entry["role"] = "tool"
            entry["content"] = draw(texts(max_text * 4))
            if draw(st.booleans()):  # structure with no strings to cut
                entry["data"] = {f"k{i}": i for i in range(draw(st.integers(0, 400)))}
            entries.append(entry)
            continue
        if draw(st.booleans()):
            entry["query"] = draw(texts(80))
        keys = draw(st.lists(st.sampled_from(DEFAULT_LIST_KEYS), max_size=3, unique=True))
        for key in keys:
            size = draw(st.integers(min_value=0, max_value=max_items))
            entry[key] = [{"id": next_id + i, "text": draw(texts(max_text))} for i in range(size)]
            next_id += size
        if draw(st.booleans()):
            n_chunks = draw(st.integers(min_value=0, max_value=8))
            entry["chunks"] = {
                f"c{i}": {"chunk_text": draw(texts(max_text * 3))} for i in range(n_chunks)
            }
        if draw(st.booleans()):
            entry["meta"] = {"k": draw(st.integers()), "note": draw(texts(300))}
        entries.append(entry)
    return entries


@settings(max_examples=50, deadline=None)
@given(
    entries=histories(max_text=2500, max_items=25),
    max_context=st.integers(min_value=200, max_value=4000),
)
def test_property_word_counter(entries: list[dict[str, Any]], max_context: int) -> None:
    before = copy.deepcopy(entries)
    pieces = split_context_history(entries, max_context, count_tokens=word_count)
    check_split(entries, pieces, max_context, word_count)
    assert entries == before


@settings(max_examples=40, deadline=None)
@given(
    entries=histories(max_text=2000, max_items=15),
    max_context=st.integers(min_value=200, max_value=3000),
)
def test_property_non_additive_counter(entries: list[dict[str, Any]], max_context: int) -> None:
    pieces = split_context_history(entries, max_context, count_tokens=char_count)
    check_split(entries, pieces, max_context, char_count, tight=False)


@settings(max_examples=20, deadline=None)
@given(
    entries=histories(max_text=1500, max_items=12),
    max_context=st.integers(min_value=300, max_value=3000),
)
def test_property_real_tokenizer(entries: list[dict[str, Any]], max_context: int) -> None:
    pieces = split_context_history(entries, max_context)
    check_split(entries, pieces, max_context, count_json_tokens)
