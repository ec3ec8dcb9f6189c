"""Quick check: segment (and anchor into) a synthetic BEAM-10M-sized conversation.

Builds a ~50 million character canonical body with ~100,000 turns (prose, code fences,
unclosed fences, a few huge turns, many sessions), then runs
:func:`donto_pg.core.segmenter.iter_segments` and :func:`donto_pg.core.segmenter.segment` and a few
:func:`donto_pg.core.anchor.anchor` calls, printing the wall time of each step and the peak of
the Python allocations it makes (``tracemalloc``, measured in a second run; the body and
the turn table exist before and are not counted).  Not a timed test: just run it::

    .venv/bin/python benchmarks/segment_synthetic.py [--chars 50000000] [--turns 100000]
"""

from __future__ import annotations

import argparse
import random
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from donto_pg.core.anchor import anchor
from donto_pg.core.segmenter import iter_segments, segment, summarize

WORDS = (
    "the a of to and in is it that for you with on this be are as was I we can use "
    "project data model query index budget schedule meeting deploy server client test "
    "function value error result memory session user assistant plan week review"
).split()


def _prose(rng: random.Random, n: int) -> str:
    out: list[str] = []
    size = 0
    while size < n:
        sentence = " ".join(rng.choices(WORDS, k=rng.randint(6, 20))).capitalize() + "."
        out.append(sentence)
        size += len(sentence) + 1
        if rng.random() < 0.2:
            out.append("\n\n")
    return " ".join(out)


def _code(rng: random.Random, n: int) -> str:
    lines = []
    size = 0
    while size < n:
        line = f"    x_{rng.randint(0, 999)} = compute({rng.randint(0, 99)}, '{rng.choice(WORDS)}')"
        lines.append(line)
        size += len(line) + 1
    fence = rng.choice(["```", "```", "~~~", "````"])
    lang = rng.choice(["python", "", "sql", "bash"])
    closed = rng.random() > 0.03
    return f"{fence}{lang}\n" + "\n".join(lines) + (f"\n{fence}" if closed else "")


def _content(rng: random.Random, role: str, mean: int) -> str:
    r = rng.random()
    if r < 0.002:  # a huge turn (log dump or long document)
        return _prose(rng, mean * rng.randint(20, 80))
    if role == "assistant" and r < 0.35:
        parts = [_prose(rng, rng.randint(50, mean))]
        for _ in range(rng.randint(1, 3)):
            parts.append(_code(rng, rng.randint(100, mean * 2)))
            parts.append(_prose(rng, rng.randint(10, mean // 2)))
        return "\n".join(parts)
    if r < 0.40:
        return rng.choice(["ok", "Thanks!", "Sure."])
    return _prose(rng, rng.randint(mean // 4, mean * 2))


def build(chars: int, n_turns: int, seed: int = 1) -> tuple[str, list[dict]]:
    """A synthetic canonical body and its turn table."""
    rng = random.Random(seed)
    mean = max(40, chars // n_turns * 3 // 5)
    # A pool of contents keeps generation fast; bodies are copies of pool items.
    pool = {role: [_content(rng, role, mean) for _ in range(800)] for role in ("user", "assistant")}
    chunks: list[str] = []
    turns: list[dict] = []
    pos = 0
    session = 0
    exchange = -1
    seq = 0
    while pos < chars and seq < n_turns * 4:
        if seq % 50 == 0:
            session += 1
            header = f"{'' if seq == 0 else chr(10)}=== session {session} | 2024-03-15 ===\n"
            chunks.append(header)
            pos += len(header)
        role = "user" if seq % 2 == 0 else "assistant"
        if role == "user":
            exchange += 1
        text = rng.choice(pool[role])
        prefix = f"\n[{role} #{seq}] "
        chunks.append(prefix)
        start = pos + len(prefix)
        chunks.append(text)
        chunks.append("\n")
        turns.append(
            {
                "seq": seq,
                "turn_id": seq,
                "role": role,
                "session": session,
                "exchange": exchange,
                "date": "2024-03-15",
                "header_start": pos + 1,
                "char_start": start,
                "char_end": start + len(text),
            }
        )
        pos = start + len(text) + 1
        seq += 1
    return "".join(chunks), turns


def measure(label: str, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` twice: once for wall time, once under tracemalloc for the peak.

    tracemalloc slows allocation-heavy Python code several times over, hence two runs.
    """
    t0 = time.perf_counter()
    result = fn()
    dt = time.perf_counter() - t0
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"{label:<44} {dt:8.2f} s   peak {peak / 2**20:9.3f} MiB")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chars", type=int, default=50_000_000)
    ap.add_argument("--turns", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    t0 = time.perf_counter()
    body, turns = build(args.chars, args.turns, args.seed)
    print(
        f"synthetic body: {len(body):,} chars, {len(turns):,} turns, "
        f"{turns[-1]['session']:,} sessions (built in {time.perf_counter() - t0:.1f} s)"
    )

    def stream() -> int:
        return sum(1 for _ in iter_segments(body, iter(turns)))

    n = measure("iter_segments (streamed, blocks dropped)", stream)
    blocks = measure("segment (all blocks kept)", lambda: segment(body, turns))
    assert len(blocks) == n
    s = summarize(blocks, turns)
    print(
        f"blocks: {s['n_blocks']:,}  per 10k chars: {s['blocks_per_10k_chars']:.2f}  "
        f"mean/max chars: {s['mean_block_chars']:.0f}/{s['max_block_chars']}  "
        f"split turns: {s['split_turn_share']:.2%}  mixed: {s['mixed_share']:.2%}  "
        f"by kind: {s['by_kind']}"
    )

    # anchor on the full body
    rng = random.Random(args.seed)
    t = turns[len(turns) * 3 // 4]
    quote = body[t["header_start"] : t["header_start"] + 120]  # unique: holds the header
    measure("anchor exact", lambda: anchor(body, quote, t["char_start"]))
    shifted = "  " + quote.upper().replace(" ", "\n ") + " "
    got = measure("anchor normalized, near", lambda: anchor(body, shifted, t["char_start"]))
    print("   ->", got[2:] if got else None)
    got = measure("anchor normalized, whole body", lambda: anchor(body, shifted, 0))
    print("   ->", got[2:] if got else None)
    k = rng.randrange(10, 100)
    typo = quote[:k] + "#" + quote[k + 1 :]
    got = measure("anchor fuzzy, near", lambda: anchor(body, typo, t["char_start"]))
    print("   ->", got[2:] if got else None)
    got = measure("anchor miss (fuzzy near only)", lambda: anchor(body, "zq" * 60, 0))
    print("   ->", got)


if __name__ == "__main__":
    main()
