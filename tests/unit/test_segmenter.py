"""Tests for donto_pg.core.segmenter (projection B: extraction blocks)."""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from donto_pg.beam import format_chat, iter_beam
from donto_pg.core.fences import fence_spans
from donto_pg.core.segmenter import iter_segments, segment, summarize
from tests.conftest import EXAMPLES

Message = tuple[str, str]  # (role, content)


def build(sessions: list[list[Message]]) -> tuple[str, list[dict]]:
    """A canonical body and turn table (same shape as the real renderer's)."""
    chunks: list[str] = []
    turns: list[dict] = []
    pos = 0
    seq = 0
    exchange = -1

    def emit(text: str) -> None:
        nonlocal pos
        chunks.append(text)
        pos += len(text)

    for si, messages in enumerate(sessions, start=1):
        date = f"2024-03-{si % 28 + 1:02d}" if si % 3 else None
        if si > 1:
            emit("\n")
        emit(f"=== session {si} | {date or 'undated'} ===\n")
        for role, content in messages:
            if role != "assistant" or exchange < 0:
                exchange += 1
            emit("\n")
            header = pos
            emit(f"[{role} #{seq}] ")
            start = pos
            emit(content)
            turns.append(
                {
                    "seq": seq,
                    "turn_id": seq,
                    "role": role,
                    "session": si,
                    "exchange": exchange,
                    "date": date,
                    "header_start": header,
                    "char_start": start,
                    "char_end": pos,
                }
            )
            emit("\n")
            seq += 1
    return "".join(chunks), turns


# ---------------------------------------------------------------- independent oracle


_ORACLE_OPEN = re.compile(r"(`{3,}|~{3,})(.*)")
_ORACLE_CLOSE = re.compile(r"(`{3,}|~{3,})[ \t\r]*")


def oracle_fences(content: str) -> list[tuple[int, int]]:
    """Fence regions of one message, read line by line (offsets in ``content``)."""
    out: list[tuple[int, int]] = []
    open_: tuple[str, int, int] | None = None
    offset = 0
    for line in content.split("\n"):
        stripped = line.lstrip(" \t")
        if open_ is None:
            m = _ORACLE_OPEN.fullmatch(stripped)
            if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
                open_ = (m.group(1)[0], len(m.group(1)), offset)
        else:
            m = _ORACLE_CLOSE.fullmatch(stripped)
            if m and m.group(1)[0] == open_[0] and len(m.group(1)) >= open_[1]:
                out.append((open_[2], offset + len(line)))
                open_ = None
        offset += len(line) + 1
    if open_ is not None:
        out.append((open_[2], len(content)))
    return out


def check_invariants(
    body: str,
    turns: list[dict],
    blocks: list[dict],
    cap: int,
    *,
    min_prose: int = 40,
    keep_exchange: bool = True,
) -> None:
    """Assert every documented invariant of a segmentation."""
    by_seq = {t["seq"]: t for t in turns}
    fences: list[tuple[int, int]] = []
    for t in turns:
        cs = t["char_start"]
        fences.extend((cs + a, cs + b) for a, b in oracle_fences(body[cs : t["char_end"]]))
    fence_starts = [f[0] for f in fences]

    def in_fence(i: int) -> tuple[int, int] | None:
        k = bisect.bisect_right(fence_starts, i) - 1
        if k >= 0 and fences[k][0] <= i < fences[k][1]:
            return fences[k]
        return None

    parts_of: dict[int, list[tuple[int, int]]] = defaultdict(list)
    prev_end = 0
    prev_block: dict | None = None
    for n, b in enumerate(blocks):
        assert b["seq"] == n
        assert b["char_start"] >= prev_end, "blocks overlap or are out of order"
        assert b["char_end"] - b["char_start"] <= cap
        parts = b["turns"]
        assert parts, "empty block"
        assert parts[0]["char_start"] == b["char_start"]
        assert parts[-1]["char_end"] == b["char_end"]
        sessions = {p["session"] for p in parts}
        assert len(sessions) == 1, "block crosses sessions"
        last = b["char_start"]
        inside = outside = 0
        for p in parts:
            t = by_seq[p["seq"]]
            assert t["char_start"] <= p["char_start"] <= p["char_end"] <= t["char_end"]
            assert p["char_start"] >= last
            last = p["char_end"]
            assert (p["turn_id"], p["role"], p["session"], p["date"]) == (
                t["turn_id"],
                t["role"],
                t["session"],
                t["date"],
            )
            parts_of[p["seq"]].append((p["char_start"], p["char_end"]))
            if p["split"]:
                assert t["char_end"] - t["char_start"] > cap
                assert b["split"]
            for i in range(p["char_start"], p["char_end"]):
                if not body[i].isspace():
                    if in_fence(i):
                        inside += 1
                    else:
                        outside += 1
        roles = {by_seq[p["seq"]]["role"] for p in parts}
        if b["kind"] == "system":
            assert roles == {"system"}
        else:
            assert "system" not in roles
        if b["kind"] == "dialogue":
            assert inside == 0, "dialogue block holds code"
        elif b["kind"] == "code":
            assert outside == 0, "code block holds prose"
            assert inside > 0
        elif b["kind"] == "mixed":
            assert inside > 0 and outside > 0
            assert min_prose > 0
        else:
            assert b["kind"] == "system", b["kind"]
        if b["split"]:
            assert any(p["split"] for p in parts)
        # prefix: the previous block's last part, same session only
        if prev_block is not None and prev_block["turns"][-1]["session"] == parts[0]["session"]:
            lp = prev_block["turns"][-1]
            assert b["prefix"] == {
                "char_start": lp["char_start"],
                "char_end": lp["char_end"],
                "turn_seq": lp["seq"],
            }
        else:
            assert b["prefix"] is None
        prev_end = b["char_end"]
        prev_block = b
    # every character of every content in exactly one part; parts tile each content (an
    # empty message may be in no block: one with nothing but empty messages is not cut)
    for t in turns:
        spans = parts_of.get(t["seq"], [])
        assert spans or t["char_start"] == t["char_end"], f"turn {t['seq']} missing"
        pos = t["char_start"]
        for s, e in spans:
            assert s == pos, f"turn {t['seq']}: gap or overlap at {pos}"
            pos = e
        assert pos == t["char_end"]
    # cuts: never inside a fence that fits the cap
    for spans in parts_of.values():
        for (_, e), (s2, _) in zip(spans, spans[1:], strict=False):
            assert e == s2
            f = in_fence(e)
            if f is not None and e > f[0]:
                assert f[1] - f[0] > cap, f"cut at {e} inside fence {f}"
    # whole turns stay together: a fence-free turn that fits is one part
    block_of: dict[int, set[int]] = defaultdict(set)
    for b in blocks:
        for p in b["turns"]:
            block_of[p["seq"]].add(b["seq"])
    fence_free: dict[int, bool] = {}
    for t in turns:
        fence_free[t["seq"]] = not oracle_fences(body[t["char_start"] : t["char_end"]])
        if t["char_end"] - t["char_start"] <= cap and fence_free[t["seq"]]:
            empty = t["char_end"] == t["char_start"]
            assert len(parts_of[t["seq"]]) in ((0, 1) if empty else (1,)), f"turn {t['seq']} cut"
    # a question with its answer: a fence-free exchange that fits is in one block
    if keep_exchange:
        exchanges: dict[tuple, list[dict]] = defaultdict(list)
        for t in turns:
            exchanges[(t["session"], t["exchange"])].append(t)
        for ex in exchanges.values():
            if (
                all(fence_free[t["seq"]] and t["role"] != "system" for t in ex)
                and ex[-1]["char_end"] - ex[0]["char_start"] <= cap
            ):
                held = set.union(*(block_of[t["seq"]] for t in ex))
                empty = all(t["char_end"] == t["char_start"] for t in ex)
                assert len(held) == 1 or (empty and not held)


# ---------------------------------------------------------------- unit tests


PROSE = "I am working on a small parser and I would like some advice on the design. "
CODE = "```python\ndef f(x):\n    return x + 1\n```"


def kinds(blocks: list[dict]) -> list[str]:
    return [b["kind"] for b in blocks]


def test_prose_code_prose_in_one_message() -> None:
    msg = (
        "Here is the code you asked for, with comments.\n"
        + CODE
        + "\nAnd here is more text after it, explaining what the function does."
    )
    body, turns = build([[("user", PROSE), ("assistant", msg)]])
    blocks = segment(body, turns, {"target": 10_000})
    assert kinds(blocks) == ["dialogue", "code", "dialogue"]
    t = turns[1]
    code_part = blocks[1]["turns"][0]
    assert body[code_part["char_start"] : code_part["char_end"]] == CODE
    # the assistant turn is cut in three parts that tile its content
    spans = [(p["char_start"], p["char_end"]) for b in blocks for p in b["turns"] if p["seq"] == 1]
    assert spans[0][0] == t["char_start"] and spans[-1][1] == t["char_end"]
    assert [s for s, _ in spans[1:]] == [e for _, e in spans[:-1]]
    assert blocks[0]["turns"][0]["seq"] == 0  # question and first answer part together
    assert not any(b["split"] for b in blocks)
    check_invariants(body, turns, blocks, 4000)


def test_fence_variants() -> None:
    content = (
        "Intro line with ```inline``` code, and a few more words here.\n"
        "~~~\nplain tilde fence\n```\nnot a close\n~~~\n"
        "middle prose that is long enough to stand alone as a dialogue piece here\n"
        "````markdown\n```python\nnested\n```\n````\n"
        "prose again, quite long, more than forty non-blank characters in it\n"
        "  ```js\n  let open = 1;\n  still open at the end"
    )
    body, turns = build([[("assistant", content)]])
    cs = turns[0]["char_start"]
    got = [(s - cs, e - cs) for s, e in fence_spans(body, cs, turns[0]["char_end"])]
    assert got == oracle_fences(content)
    assert len(got) == 3
    assert content[got[0][0] : got[0][1]].endswith("~~~")
    assert content[got[1][0] : got[1][1]].endswith("````")
    assert got[2][1] == len(content)  # unclosed fence closes at the message end
    blocks = segment(body, turns, {"target": 10_000})
    assert kinds(blocks) == ["dialogue", "code", "dialogue", "code", "dialogue", "code"]
    check_invariants(body, turns, blocks, 4000)


def test_fence_does_not_leak_into_next_message() -> None:
    body, turns = build(
        [[("user", "```\nunclosed code"), ("assistant", "plain answer with words " * 3)]]
    )
    blocks = segment(body, turns)
    assert kinds(blocks) == ["code", "dialogue"]
    assert blocks[0]["char_end"] == turns[0]["char_end"]


def test_sessions_are_hard_boundaries() -> None:
    body, turns = build([[("user", "hi " * 10)], [("assistant", "yes " * 10)]])
    blocks = segment(body, turns)
    assert len(blocks) == 2
    assert [b["turns"][0]["session"] for b in blocks] == [1, 2]
    assert blocks[1]["prefix"] is None


def test_exchange_kept_together_and_target_closes() -> None:
    q, a = "q" * 300, "a" * 900
    body, turns = build([[("user", q), ("assistant", a)] * 6])
    blocks = segment(body, turns, {"cap": 4000, "target": 2000})
    for b in blocks:
        exchanges = {turns[p["seq"]]["exchange"] for p in b["turns"]}
        seqs = [p["seq"] for p in b["turns"]]
        # whole exchanges only
        assert len(seqs) == 2 * len(exchanges)
    # each exchange is ~1.2k: two fit (~2.4k >= target) and the block closes there
    assert [len(b["turns"]) for b in blocks] == [4, 4, 4]
    assert blocks[1]["prefix"] == {
        "char_start": turns[3]["char_start"],
        "char_end": turns[3]["char_end"],
        "turn_seq": 3,
    }
    check_invariants(body, turns, blocks, 4000)


def test_exchange_that_does_not_fit_opens_a_new_block() -> None:
    body, turns = build(
        [
            [
                ("user", "x" * 500),
                ("assistant", "y" * 2000),
                ("user", "z" * 1000),
                ("assistant", "w" * 2500),
            ]
        ]
    )
    blocks = segment(body, turns, {"cap": 4000, "target": 3000})
    assert [[p["seq"] for p in b["turns"]] for b in blocks] == [[0, 1], [2, 3]]
    blocks = segment(body, turns, {"cap": 4000, "target": 3000, "keep_exchange": False})
    # turn by turn: turn 2 still fits after 0 and 1
    assert [[p["seq"] for p in b["turns"]] for b in blocks] == [[0, 1, 2], [3]]


def test_huge_prose_splits_at_paragraphs() -> None:
    paras = [f"Paragraph {i}. " + "word " * 60 for i in range(40)]
    text = "\n\n".join(paras)
    body, turns = build([[("user", "short question? " * 3), ("assistant", text)]])
    blocks = segment(body, turns, {"cap": 1000, "target": 500})
    check_invariants(body, turns, blocks, 1000)
    cuts = [p["char_start"] for b in blocks for p in b["turns"] if p["split"]]
    assert len(cuts) > 5
    for c in cuts[1:]:
        assert body[c - 2 : c] == "\n\n", "cut not at a paragraph boundary"
    assert all(b["split"] for b in blocks if any(p["seq"] == 1 for p in b["turns"]))
    s = summarize(blocks, turns)
    assert s["split_turn_share"] == 0.5


def test_huge_fence_splits_at_lines_and_small_fence_stays_whole() -> None:
    big = "```\n" + "".join(f"line_{i} = {i} * 2\n" for i in range(400)) + "```"
    small = "```\n" + "x = 1\n" * 50 + "```"
    body, turns = build([[("assistant", big + "\n" + small)]])
    blocks = segment(body, turns, {"cap": 1000, "target": 500})
    check_invariants(body, turns, blocks, 1000)
    for b in blocks:
        for p in b["turns"]:
            if p["char_start"] != turns[0]["char_start"]:
                assert body[p["char_start"] - 1] == "\n"
    small_start = body.index(small)
    assert any(
        p["char_start"] <= small_start and small_start + len(small) <= p["char_end"]
        for b in blocks
        for p in b["turns"]
    )
    assert {b["kind"] for b in blocks} == {"code"}


def test_fence_that_fits_exactly_is_not_cut_by_its_glued_blanks() -> None:
    fence = "~~~ sh\n" + "echo one two three\n" * 5 + "~~~"
    body, turns = build([[("user", "\n\n" + fence + "\n  ")]])
    cap = len(fence)
    blocks = segment(body, turns, {"cap": cap, "target": 0})
    check_invariants(body, turns, blocks, cap)
    start = body.index(fence)
    assert [(p["char_start"], p["char_end"]) for b in blocks for p in b["turns"]][1] == (
        start,
        start + cap,
    )
    assert all(b["split"] for b in blocks)


def test_single_long_line_is_hard_cut_at_cap() -> None:
    body, turns = build([[("user", "x" * 2500)]])
    blocks = segment(body, turns, {"cap": 1000})
    assert [b["char_end"] - b["char_start"] for b in blocks] == [1000, 1000, 500]
    assert all(b["split"] for b in blocks)


def test_tiny_prose_between_fences_is_mixed() -> None:
    msg = CODE + "\nAnd the test:\n" + CODE
    body, turns = build([[("user", PROSE * 2), ("assistant", msg)]])
    blocks = segment(body, turns)
    assert kinds(blocks) == ["dialogue", "mixed"]
    s = summarize(blocks, turns)
    assert s["mixed_share"] == 0.5 and s["by_kind"] == {"dialogue": 1, "mixed": 1}
    check_invariants(body, turns, blocks, 4000)
    blocks = segment(body, turns, {"min_prose": 0})
    assert kinds(blocks) == ["dialogue", "code", "dialogue", "code"]
    check_invariants(body, turns, blocks, 4000, min_prose=0)


def test_long_prose_between_fences_is_not_mixed() -> None:
    msg = CODE + "\n" + PROSE + "\n" + CODE
    body, turns = build([[("assistant", msg)]])
    assert kinds(segment(body, turns)) == ["code", "dialogue", "code"]


def test_system_messages() -> None:
    body, turns = build(
        [[("system", "You are helpful.\n" + CODE), ("user", PROSE), ("assistant", PROSE)]]
    )
    blocks = segment(body, turns)
    assert kinds(blocks) == ["system", "dialogue"]
    check_invariants(body, turns, blocks, 4000)


def test_empty_and_blank_messages_are_covered() -> None:
    body, turns = build(
        [[("user", ""), ("assistant", "   \n  "), ("user", CODE), ("assistant", "")]]
    )
    blocks = segment(body, turns)
    check_invariants(body, turns, blocks, 4000)
    assert sorted(p["seq"] for b in blocks for p in b["turns"]) == [0, 1, 2, 3]


def test_a_session_of_empty_messages_gives_no_block() -> None:
    # an empty message alone in its session: a block of no characters would hold nothing
    # to extract (and the database refuses it); an empty one before code joins the code
    body, turns = build([[("user", "hello there, I live in Oslo."), ("assistant", "Nice.")],
                         [("assistant", "")], [("user", ""), ("assistant", CODE)]])
    blocks = segment(body, turns)
    check_invariants(body, turns, blocks, 4000)
    assert all(b["char_end"] > b["char_start"] for b in blocks)
    assert kinds(blocks) == ["dialogue", "code"]
    assert [p["seq"] for b in blocks for p in b["turns"]] == [0, 1, 3, 4]


def test_iterator_input_and_generator_api() -> None:
    body, turns = build([[("user", PROSE), ("assistant", CODE)]] * 3)
    assert segment(body, iter(turns)) == segment(body, turns) == list(iter_segments(body, turns))


def test_bad_input() -> None:
    body, turns = build([[("user", "a"), ("assistant", "b")]])
    with pytest.raises(ValueError):
        segment(body, list(reversed(turns)))
    with pytest.raises(ValueError):
        segment(body, [dict(turns[0], char_end=len(body) + 1)])
    with pytest.raises(ValueError):
        segment(body, turns, {"cpa": 3})


def test_summarize_figures() -> None:
    body, turns = build([[("user", "a" * 2000), ("assistant", "b" * 3000)]])
    blocks = segment(body, turns, {"cap": 4000, "target": 100})
    s = summarize(blocks, turns)
    assert s["n_turns"] == 2 and s["content_chars"] == 5000
    assert s["n_blocks"] == len(blocks) == 2
    assert s["blocks_per_10k_chars"] == pytest.approx(4.0)
    assert s["split_turn_share"] == 0.0
    assert s["by_kind"] == {"dialogue": 2}


# ---------------------------------------------------------------- property test


WORDS = ["alpha", "beta", "gamma", "delta", "the", "a", "of", "code", "```", "~~~", "`x`"]


@st.composite
def prose(draw: st.DrawFn) -> str:
    lines = draw(
        st.lists(
            st.lists(st.sampled_from(WORDS), min_size=0, max_size=12).map(" ".join),
            min_size=1,
            max_size=6,
        )
    )
    return "\n".join(lines)


@st.composite
def fence(draw: st.DrawFn) -> str:
    char = draw(st.sampled_from("`~"))
    n = draw(st.integers(3, 5))
    lang = draw(st.sampled_from(["", "python", " js", "sh"]))
    indent = draw(st.sampled_from(["", "  ", "    "]))
    body_lines = draw(
        st.lists(
            st.sampled_from(
                ["x = 1", "", "```", "~~~", "    return y", "# comment", "`" * 6, "~" * 3 + " x"]
            ),
            max_size=15,
        )
    )
    close = draw(st.sampled_from(["closed", "longer", "unclosed"]))
    text = indent + char * n + lang + "\n" + "\n".join(body_lines)
    if close == "closed":
        text += "\n" + indent + char * n
    elif close == "longer":
        text += "\n" + char * (n + 2) + "  "
    return text


@st.composite
def content(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["mix", "mix", "mix", "empty", "blank", "tiny", "huge", "line"]))
    if kind == "empty":
        return ""
    if kind == "blank":
        return " \n\n  "
    if kind == "tiny":
        return draw(st.sampled_from(["ok", "thanks!", "Here:"]))
    if kind == "line":
        return "z" * draw(st.integers(50, 700))
    segs = draw(st.lists(st.one_of(prose(), fence()), min_size=1, max_size=5))
    if kind == "huge":
        segs = segs * draw(st.integers(3, 12))
    return "\n".join(segs)


conversations = st.lists(
    st.lists(
        st.tuples(st.sampled_from(["user", "assistant", "assistant", "system"]), content()),
        min_size=1,
        max_size=7,
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    conv=conversations,
    cap=st.sampled_from([40, 120, 300, 1000]),
    target_share=st.sampled_from([0.0, 0.5, 1.0]),
    min_prose=st.sampled_from([0, 10, 40]),
    keep_exchange=st.booleans(),
)
def test_invariants_hold_on_random_conversations(
    conv: list[list[Message]], cap: int, target_share: float, min_prose: int, keep_exchange: bool
) -> None:
    body, turns = build(conv)
    params = {
        "cap": cap,
        "target": int(cap * target_share),
        "min_prose": min_prose,
        "keep_exchange": keep_exchange,
    }
    blocks = segment(body, iter(turns), params)
    check_invariants(body, turns, blocks, cap, min_prose=min_prose, keep_exchange=keep_exchange)
    assert segment(body, turns, params) == blocks  # deterministic
    for t in turns:  # the fence reader agrees with the line-by-line oracle
        cs = t["char_start"]
        got = [(s - cs, e - cs) for s, e in fence_spans(body, cs, t["char_end"])]
        assert got == oracle_fences(body[cs : t["char_end"]])


# ---------------------------------------------------------------- real BEAM conversations


def _beam_turns(path: Path) -> tuple[str, list[dict]]:
    convs = [c for c in iter_beam(path) if not isinstance(c, Exception)]
    assert len(convs) == 1
    body, spans = format_chat(convs[0])
    turns = []
    for sp in spans:
        d = dataclasses.asdict(sp)
        d["date"] = d["date"].isoformat() if d["date"] else None
        turns.append(d)
    return body, turns


@pytest.mark.parametrize("conv", ["100K/1", "100K/13"])
def test_real_beam_conversation(conv: str) -> None:
    body, turns = _beam_turns(EXAMPLES / "chats" / conv)
    assert len(turns) > 100
    blocks = segment(body, turns)
    check_invariants(body, turns, blocks, 4000)
    s = summarize(blocks, turns)
    assert s["n_turns"] == len(turns)
    assert s["mixed_share"] < 0.1
    assert s["split_turn_share"] < 0.2
    if conv == "100K/1":  # code-heavy: prose and fences alternate, blocks are shorter
        assert s["by_kind"]["code"] > 100
        assert 400 < s["mean_block_chars"]
    else:  # dialogue-heavy: blocks close to the target
        assert s["by_kind"]["dialogue"] > 10 * s["by_kind"].get("code", 0)
        assert 2000 <= s["mean_block_chars"] <= 4000
        assert s["blocks_per_10k_chars"] < 5
