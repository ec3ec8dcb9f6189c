"""Benchmark: donto-pg's context splitter against the peer's copy-every-sibling splitter.

The peer (Hindsight 0.10.0) split an over-budget recall result on its
``memories`` list and rebuilt every candidate as ``{**output, "memories": piece}``,
copying the raw ``chunks`` dict into every piece. It was observed on entries of
69,496 / 131,955 / 123,572 tokens, giving 142 / 275 / 310 pieces where 7 to 14
were expected. This script rebuilds entries of those sizes, shaped like the
reproduction (a query, N memories, and a ``chunks`` dict of 20 raw texts of
about 25k tokens together), from real BEAM conversation text
(``examples/beam/chats/100K/*/chat.json``; BEAM is CC-BY-SA-4.0, from
mohammadtavakoli78/BEAM), and splits each with :func:`split_context_history`
and with :func:`naive_split` at ``max_context_tokens=12288`` (budget 9,830 at
the default ratio 0.8). N is the peer's observed piece count, since the peer
made one piece per memory.

Tokens are all-MiniLM-L6-v2 tokens of the compact JSON the model sees
(:func:`donto_pg.core.tokens.count_json_tokens`).

    python benchmarks/split.py            # table
    python benchmarks/split.py --json     # machine-readable
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from donto_pg.core.tokens import count_json_tokens, truncate_to_tokens
from donto_pg.core.tool_history_splitter import (
    DEFAULT_BUDGET_RATIO,
    DEFAULT_LIST_KEYS,
    split_context_history,
)

REPO = Path(__file__).resolve().parent.parent
BEAM_CHATS = REPO / "examples" / "beam" / "chats" / "100K"

MAX_CONTEXT_TOKENS = 12288
PEER_CASES: tuple[tuple[int, int], ...] = ((69_496, 142), (131_955, 275), (123_572, 310))
"""(entry tokens, peer's piece count) as observed on Hindsight 0.10.0."""
N_CHUNKS = 20
CHUNK_TEXT_TOKENS = 1_000
"""Tokens of each raw chunk text; as JSON (escapes, keys) the 20 come to about 25k."""

TokenCounter = Callable[[Any], int]


def naive_split(
    entries: Sequence[dict[str, Any]],
    max_context_tokens: int,
    *,
    count_tokens: TokenCounter = count_json_tokens,
    budget_ratio: float = DEFAULT_BUDGET_RATIO,
    list_keys: Iterable[str] = DEFAULT_LIST_KEYS,
    exact: bool = False,
) -> list[list[dict[str, Any]]]:
    """The peer's splitter, reproduced for comparison only (NOT product code).

    Entries are packed greedily; an entry over budget is split on its first
    list key, every candidate being ``{**output, key: piece}`` - all siblings,
    however large, copied in. A candidate over budget closes the piece before
    it, and an item over budget even alone becomes a piece of its own anyway.

    With ``exact=False`` a candidate's size is computed as
    ``count([{**output, key: []}]) + sum(count(item) + 1)`` minus one comma,
    which equals the exact count for the default JSON counter (compact JSON is
    split on punctuation, so counts add up); it saves re-tokenizing the copied
    siblings for every candidate. ``exact=True`` counts every candidate.
    """
    budget = math.floor(budget_ratio * max_context_tokens + 1e-9)
    keys = tuple(list_keys)
    pieces: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []

    def emit(unit: dict[str, Any]) -> None:
        nonlocal current
        if current and count_tokens([*current, unit]) > budget:
            pieces.append(current)
            current = []
        current.append(unit)

    for output in entries:
        key = next((k for k in keys if isinstance(output.get(k), list)), None)
        if key is None or count_tokens([output]) <= budget:
            emit(output)
            continue
        base = count_tokens([{**output, key: []}])
        items: list[Any] = []
        size = base
        for item in output[key]:
            if exact:
                grown = count_tokens([{**output, key: [*items, item]}])
            else:
                grown = size + count_tokens(item) + (1 if items else 0)
            if items and grown > budget:
                if current:
                    pieces.append(current)
                    current = []
                pieces.append([{**output, key: items}])
                items = [item]
                size = base + count_tokens(item)
            else:
                items.append(item)
                size = grown
        if current:
            pieces.append(current)
            current = []
        pieces.append([{**output, key: items}])
    if current:
        pieces.append(current)
    return pieces


def beam_texts(root: Path = BEAM_CHATS) -> list[str]:
    """Message texts of every BEAM chat under ``root``, in a stable order."""
    files = sorted(root.glob("*/chat.json"), key=lambda p: (len(p.parent.name), p.parent.name))
    if not files:
        raise FileNotFoundError(f"no BEAM chats under {root}")
    texts: list[str] = []
    for path in files:
        for batch in json.loads(path.read_text(encoding="utf-8")):
            for turn in batch["turns"]:
                texts.extend(m["content"] for m in turn if m.get("content"))
    return texts


class TextSource:
    """Consecutive, non-repeating (until the corpus wraps) slices of real text."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.corpus = "\n\n".join(texts)
        self.pos = 0

    def take_tokens(self, tokens: int) -> str:
        """The next slice of the corpus holding ``tokens`` tokens (cut on a token boundary)."""
        window = max(64, tokens * 8)
        if self.pos + window > len(self.corpus):
            self.pos = 0
        text = truncate_to_tokens(self.corpus[self.pos : self.pos + window], tokens)
        self.pos += len(text)
        return text.strip()


def build_entry(source_texts: Sequence[str], memory_tokens: Sequence[int]) -> dict[str, Any]:
    """A recall result: a query, one memory per ``memory_tokens`` and a 20-text ``chunks`` dict."""
    source = TextSource(source_texts)
    chunks = {
        f"chunk-{i:02d}": {
            "chunk_text": source.take_tokens(CHUNK_TEXT_TOKENS),
            "document_id": "beam-100k",
            "chunk_index": i,
        }
        for i in range(N_CHUNKS)
    }
    memories = [
        {
            "id": f"mem-{i:04d}",
            "text": source.take_tokens(tokens),
            "fact_type": "experience" if i % 3 else "world",
            "chunk_id": f"chunk-{i % N_CHUNKS:02d}",
            "mentioned_at": "2023-11-05",
        }
        for i, tokens in enumerate(memory_tokens)
    ]
    return {
        "query": "What did the user say about the reading plan?",
        "memories": memories,
        "chunks": chunks,
    }


def entry_of_size(
    source_texts: Sequence[str], target_tokens: int, n_memories: int
) -> dict[str, Any]:
    """An entry of about ``target_tokens`` tokens with ``n_memories`` memories.

    The memory lengths are solved iteratively: the gap to the target is spread
    over the memories, one token each at the finest, and the entry rebuilt.
    """
    lengths = [100] * n_memories
    best: tuple[int, dict[str, Any]] | None = None
    for _ in range(8):
        entry = build_entry(source_texts, lengths)
        gap = target_tokens - count_json_tokens(entry)
        if best is None or abs(gap) < best[0]:
            best = (abs(gap), entry)
        if abs(gap) <= 10:
            break
        step, rest = divmod(abs(gap), n_memories)
        sign = 1 if gap > 0 else -1
        lengths = [
            max(1, n + sign * (step + (1 if i < rest else 0))) for i, n in enumerate(lengths)
        ]
    assert best is not None
    return best[1]


def run_case(
    source_texts: Sequence[str], target_tokens: int, peer_pieces: int, max_context_tokens: int
) -> dict[str, Any]:
    """Split one rebuilt entry both ways and return the figures."""
    entry = entry_of_size(source_texts, target_tokens, peer_pieces)
    entry_tokens = count_json_tokens(entry)
    chunks_tokens = count_json_tokens(entry["chunks"])

    start = time.perf_counter()
    ours = split_context_history([entry], max_context_tokens)
    ours_seconds = time.perf_counter() - start
    ours_tokens = [count_json_tokens(piece) for piece in ours]

    start = time.perf_counter()
    naive = naive_split([entry], max_context_tokens)
    naive_seconds = time.perf_counter() - start
    # Each naive piece is one {**entry, "memories": items}; its JSON count is
    # "[" + base + items + commas + "]" (compact JSON adds up on punctuation),
    # which spares re-tokenizing the copied chunks for every piece. Checked
    # exactly on the first pieces below.
    base = count_json_tokens({**entry, "memories": []})
    item_tokens = {id(item): count_json_tokens(item) for item in entry["memories"]}
    naive_tokens = []
    for piece in naive:
        assert len(piece) == 1 and piece[0]["chunks"] is entry["chunks"]
        items = piece[0]["memories"]
        naive_tokens.append(
            2 + base + sum(item_tokens[id(i)] for i in items) + max(0, len(items) - 1)
        )
    for piece, tokens in list(zip(naive, naive_tokens, strict=True))[:3]:
        if count_json_tokens(piece) != tokens:
            raise RuntimeError("additive JSON count drifted from the exact count")

    return {
        "target_tokens": target_tokens,
        "entry_tokens": entry_tokens,
        "memories": len(entry["memories"]),
        "chunks_tokens": chunks_tokens,
        "max_context_tokens": max_context_tokens,
        "budget": math.floor(DEFAULT_BUDGET_RATIO * max_context_tokens + 1e-9),
        "peer_observed_pieces": peer_pieces,
        "ours_pieces": len(ours),
        "ours_total_tokens": sum(ours_tokens),
        "ours_max_piece_tokens": max(ours_tokens),
        "ours_seconds": round(ours_seconds, 3),
        "naive_pieces": len(naive),
        "naive_total_tokens": sum(naive_tokens),
        "naive_max_piece_tokens": max(naive_tokens),
        "naive_seconds": round(naive_seconds, 3),
        "pieces_ratio": round(len(naive) / len(ours), 1),
        "tokens_ratio": round(sum(naive_tokens) / sum(ours_tokens), 1),
    }


def _table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| entry tokens (target) | memories | chunks tokens | peer pieces (observed) "
        "| naive pieces | naive total tokens | donto-pg pieces | donto-pg total tokens "
        "| pieces ratio | tokens ratio | donto-pg s |"
    )
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        lines.append(
            f"| {r['entry_tokens']:,} ({r['target_tokens']:,}) | {r['memories']} "
            f"| {r['chunks_tokens']:,} | {r['peer_observed_pieces']} | {r['naive_pieces']} "
            f"| {r['naive_total_tokens']:,} | {r['ours_pieces']} | {r['ours_total_tokens']:,} "
            f"| {r['pieces_ratio']}x | {r['tokens_ratio']}x | {r['ours_seconds']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the three peer cases and print a table (or JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--max-context-tokens", type=int, default=MAX_CONTEXT_TOKENS)
    parser.add_argument(
        "--chats", type=Path, default=BEAM_CHATS, help="folder of BEAM chats (<id>/chat.json)"
    )
    args = parser.parse_args(argv)
    texts = beam_texts(args.chats)
    rows = [run_case(texts, target, peer, args.max_context_tokens) for target, peer in PEER_CASES]
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
    else:
        budget = rows[0]["budget"]
        print(f"max_context_tokens={args.max_context_tokens} budget={budget}")
        print(_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
