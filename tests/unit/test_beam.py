"""Tests for donto_pg.beam: BEAM loading, question normalisation, canonical text."""

from __future__ import annotations

import datetime
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from donto_pg.beam import (
    ABILITIES,
    BeamFormatError,
    Conversation,
    Message,
    clean_content,
    code_char_share,
    format_chat,
    iter_beam,
    parse_beam_date,
)
from donto_pg.core.transcript import HEADER_TEXT, escape_content
from tests.conftest import EXAMPLES, write_chat

CHATS = EXAMPLES / "chats"
HF_SAMPLE = EXAMPLES / "hf-sample" / "beam-100K-sample.jsonl"
# a generator marker left at the end of a message (" ->-> 1,1", "->-> 2,N/A", "->-> 1,5)")
MARKER_AT_END = re.compile(
    r"->->[ \t]*\d+[ \t]*,[ \t]*(?:\d+(?:[ \t]*,[ \t]*\d+)*|N/A)?[ \t]*\)?\s*\Z"
)


def load_one(path: Path | str, **kwargs: Any) -> Conversation:
    """Load exactly one conversation and fail loudly on anything else."""
    items = list(iter_beam(path, **kwargs))
    assert len(items) == 1, items
    item = items[0]
    assert isinstance(item, Conversation), item
    return item


def only_errors(path: Path | str, **kwargs: Any) -> list[BeamFormatError]:
    items = list(iter_beam(path, **kwargs))
    return [x for x in items if isinstance(x, BeamFormatError)]


@pytest.fixture(scope="module")
def conv1() -> Conversation:
    return load_one(CHATS / "100K" / "1")


@pytest.fixture(scope="module")
def conv13() -> Conversation:
    return load_one(CHATS / "100K" / "13")


@pytest.fixture(scope="module")
def conv10m() -> Conversation:
    return load_one(CHATS / "10M" / "5")


def msg(role: str, mid: Any, content: Any = "hello", **extra: Any) -> dict:
    out: dict[str, Any] = {"role": role, "id": mid, "content": content}
    out.update(extra)
    return out


def simple_batches(n_batches: int = 2, per_batch: int = 2, start: int = 0) -> list[dict]:
    """Valid GitHub-layout batches with one exchange of ``per_batch`` messages each."""
    batches = []
    mid = start
    for b in range(n_batches):
        ex = []
        for i in range(per_batch):
            role = "user" if i % 2 == 0 else "assistant"
            extra: dict[str, Any] = {}
            if i == 0:
                extra = {"time_anchor": f"March-{b + 1:02d}-2024", "question_type": "main_question"}
            elif role == "user":
                extra = {"question_type": "followup_question"}
            ex.append(msg(role, mid, f"message {mid} ->-> {b + 1},1", **extra))
            mid += 1
        batches.append({"batch_number": b + 1, "turns": [ex], "time_anchor": None})
    return batches


# --------------------------------------------------------------------------- real fixtures


def test_100k_1_messages_are_numbered_dated_and_cleaned(conv1: Conversation) -> None:
    raw = json.loads((CHATS / "100K" / "1" / "chat.json").read_text(encoding="utf-8"))
    raw_msgs = [m for b in raw for ex in b["turns"] for m in ex]
    assert conv1.conversation_id == "100K/1"
    assert conv1.scale == "100K"
    assert conv1.warnings == []
    assert "chat.json" in conv1.source and "probing_questions.json" in conv1.source
    assert len(conv1.messages) == len(raw_msgs) == 188
    assert [m.seq for m in conv1.messages] == list(range(188))
    assert [m.turn_id for m in conv1.messages] == [m["id"] for m in raw_msgs]
    assert [m.role for m in conv1.messages] == [m["role"] for m in raw_msgs]
    assert [m.question_type for m in conv1.messages] == [m.get("question_type") for m in raw_msgs]
    assert {m.session for m in conv1.messages} == {1, 2, 3}
    by_session = {m.session: m.date for m in conv1.messages}
    assert by_session == {
        1: datetime.date(2024, 3, 15),
        2: datetime.date(2024, 4, 5),
        3: datetime.date(2024, 4, 25),
    }
    # every message of a session carries the anchor, not only the first one
    assert all(m.date == by_session[m.session] for m in conv1.messages)
    # exchanges: 78 inner lists, each opened by a user main_question
    assert conv1.messages[-1].exchange == sum(len(b["turns"]) for b in raw) - 1 == 77
    firsts = [
        m
        for i, m in enumerate(conv1.messages)
        if i == 0 or m.exchange != conv1.messages[i - 1].exchange
    ]
    assert len(firsts) == 78
    assert all(m.role == "user" and m.question_type == "main_question" for m in firsts)
    # markers: raw message 0 ends with one, cleaned content does not
    assert raw_msgs[0]["content"].endswith("->-> 1,1")
    assert conv1.messages[0].content == raw_msgs[0]["content"][: -len(" ->-> 1,1")]
    n_markers = sum("->->" in m["content"] for m in raw_msgs)
    assert n_markers >= 78
    assert not any("->->" in m.content for m in conv1.messages)
    # the 'N/A' variant of the marker (id 108)
    m108 = next(m for m in conv1.messages if m.turn_id == 108)
    assert m108.content.endswith("create Messagepack")


def test_100k_1_questions_per_ability(conv1: Conversation) -> None:
    qs = {(q.ability, q.index): q for q in conv1.questions}
    assert len(conv1.questions) == 20
    assert {q.ability for q in conv1.questions} == set(ABILITIES)
    assert all(q.skipped == [] for q in conv1.questions)
    assert all(isinstance(q.answer, str) and q.answer for q in conv1.questions)
    assert all(isinstance(q.rubric, list) and q.rubric for q in conv1.questions)
    ab = qs[("abstention", 0)]
    assert ab.gold == [] and ab.answer == ab.raw["ideal_response"]
    assert qs[("contradiction_resolution", 0)].gold == [[58, 24]]
    assert (
        qs[("contradiction_resolution", 0)].answer
        == qs[("contradiction_resolution", 0)].raw["ideal_answer"]
    )
    assert qs[("event_ordering", 0)].gold == [[4], [60], [116]]
    assert qs[("information_extraction", 0)].gold == [[28]]
    assert qs[("information_extraction", 0)].answer == "My first sprint ends on March 29."
    assert qs[("instruction_following", 0)].gold == [[54, 56]]
    assert (
        qs[("instruction_following", 0)].answer
        == qs[("instruction_following", 0)].raw["expected_compliance"]
    )
    ku = qs[("knowledge_update", 0)]
    assert ku.gold == [[114]] and ku.stale == [86]
    assert qs[("multi_session_reasoning", 0)].gold == [[14, 106, 162]]
    summ = qs[("summarization", 0)]
    assert summ.answer == summ.raw["ideal_summary"]
    assert summ.gold == [[4, 5, 8, 9, 116, 117, 150, 151, 176, 177]]
    tr = qs[("temporal_reasoning", 0)]
    assert tr.gold == [
        tr.raw["source_chat_ids"]["first_event"] + tr.raw["source_chat_ids"]["second_event"]
    ]
    # every gold id of a complete conversation is one of its messages
    ids = {m.turn_id for m in conv1.messages}
    assert all(i in ids for q in conv1.questions for g in q.gold for i in g)


def test_100k_13_mixed_event_ordering(conv13: Conversation) -> None:
    eo = next(q for q in conv13.questions if q.ability == "event_ordering" and q.index == 1)
    # raw: [20, 22, [70, 72, 74], [174, 176], 232, 282] -> one group per element
    assert eo.gold == [[20], [22], [70, 72, 74], [174, 176], [232], [282]]
    assert len({m.session for m in conv13.messages}) == 5
    assert conv13.warnings == []


def test_hf_jsonl_matches_github_layout(conv1: Conversation, conv13: Conversation) -> None:
    rows = list(iter_beam(HF_SAMPLE))
    assert [c.conversation_id for c in rows] == ["100K/1", "100K/13"]  # scale from file name
    for hf, gh in zip(rows, (conv1, conv13), strict=True):
        assert isinstance(hf, Conversation)
        assert hf.messages == gh.messages  # exchanges re-derived from the flat batches
        assert [(q.ability, q.index, q.gold, q.stale, q.answer) for q in hf.questions] == [
            (q.ability, q.index, q.gold, q.stale, q.answer) for q in gh.questions
        ]
        assert hf.warnings == []
        assert "line" in hf.source


def test_hf_scale_argument_and_default(tmp_path: Path) -> None:
    assert [c.conversation_id for c in iter_beam(HF_SAMPLE, scale="X")] == ["X/1", "X/13"]
    plain = tmp_path / "rows.jsonl"
    plain.write_bytes(HF_SAMPLE.read_bytes())
    got = list(iter_beam(plain, conversations=["13"]))
    assert [c.conversation_id for c in got] == ["hf/13"]


def test_10m_fixture_global_ids_sessions_and_partial_warning(conv10m: Conversation) -> None:
    plan0 = json.loads((CHATS / "10M" / "5" / "plan-0" / "chat.json").read_text(encoding="utf-8"))
    n0 = sum(len(ex) for b in plan0 for ex in b["turns"])
    assert n0 == 386
    assert conv10m.conversation_id == "10M/5"
    assert len(conv10m.messages) == 696
    assert [m.turn_id for m in conv10m.messages] == list(range(696))  # ids made global
    assert [m.seq for m in conv10m.messages] == list(range(696))
    assert sorted({m.session for m in conv10m.messages}) == [1, 2, 3, 4]
    first_plan1 = conv10m.messages[n0]
    assert first_plan1.session == 3 and first_plan1.turn_id == 386
    assert first_plan1.date == datetime.date(2024, 7, 16)
    assert conv10m.messages[0].date == datetime.date(2025, 3, 31)  # BEAM dates are not monotone
    partial = [w for w in conv10m.warnings if w.startswith("partial 10M conversation")]
    assert len(partial) == 1 and "plan-0, plan-1" in partial[0] and "plan-9" in partial[0]


def test_10m_fixture_questions_past_prefix_are_kept(conv10m: Conversation) -> None:
    assert len(conv10m.questions) == 20
    msr = next(
        q for q in conv10m.questions if q.ability == "multi_session_reasoning" and q.index == 0
    )
    assert msr.gold == [[74]]
    assert any("3276, 3277" in note and "past the loaded" in note for note in msr.skipped)
    past = [q for q in conv10m.questions if any("past the loaded" in n for n in q.skipped)]
    assert len(past) == 17
    assert any(w.startswith("17 of 20 questions") for w in conv10m.warnings)
    summ0 = next(q for q in conv10m.questions if q.ability == "summarization" and q.index == 0)
    assert summ0.gold == [] and summ0.skipped == ["no source_chat_ids: no gold turn"]
    assert all(q.skipped == [] for q in conv10m.questions if q.ability == "abstention")
    # the fixture's truncated plan-0 shifts plan-1 ids: no question may cite the shifted range
    for q in conv10m.questions:
        raw_ids = re.findall(r"\d+", json.dumps(q.raw.get("source_chat_ids")))
        assert not any(386 <= int(i) <= 695 for i in raw_ids), q.raw


def test_root_order_and_filters() -> None:
    got = list(iter_beam(EXAMPLES))
    assert [c.conversation_id for c in got] == ["100K/1", "100K/13", "10M/5"]
    assert [c.conversation_id for c in iter_beam(CHATS, scale="10m")] == ["10M/5"]
    assert [c.conversation_id for c in iter_beam(EXAMPLES, conversations="13")] == ["100K/13"]
    sel = list(iter_beam(CHATS, conversations=["10M/5", "100K/1"]))
    assert [c.conversation_id for c in sel] == ["100K/1", "10M/5"]
    missing = list(iter_beam(EXAMPLES, conversations=["1", "99"]))
    assert isinstance(missing[0], Conversation) and missing[0].conversation_id == "100K/1"
    assert isinstance(missing[1], BeamFormatError) and "'99' not found" in str(missing[1])
    assert len(missing) == 2


def test_single_chat_json_paths(tmp_path: Path) -> None:
    c = load_one(CHATS / "100K" / "13" / "chat.json")
    assert c.conversation_id == "100K/13" and len(c.questions) == 20
    plan0 = load_one(CHATS / "10M" / "5" / "plan-0" / "chat.json")
    assert len(plan0.messages) == 386
    assert any("loaded plan-0 " in w for w in plan0.warnings)
    errs = only_errors(CHATS / "10M" / "5" / "plan-1" / "chat.json")
    assert len(errs) == 1 and "plan-1/chat.json cannot be loaded on its own" in str(errs[0])


def test_missing_path_raises() -> None:
    with pytest.raises(FileNotFoundError):
        list(iter_beam(EXAMPLES / "nope"))


# --------------------------------------------------------------------------- 10M plan layout


def write_plans(root: Path, plans: dict[int, list[dict]], questions: Any = None) -> Path:
    conv = root / "chats" / "10M" / "7"
    for k, batches in plans.items():
        (conv / f"plan-{k}").mkdir(parents=True)
        (conv / f"plan-{k}" / "chat.json").write_text(json.dumps(batches), encoding="utf-8")
    if questions is not None:
        (conv / "probing_questions").mkdir(parents=True)
        (conv / "probing_questions" / "probing_questions.json").write_text(
            json.dumps(questions), encoding="utf-8"
        )
    return conv


def test_10m_plans_made_global_and_gap_reported(tmp_path: Path) -> None:
    plans = {0: simple_batches(2, 2), 1: simple_batches(1, 4), 3: simple_batches(1, 2)}
    questions = {
        "information_extraction": [
            {"question": "q0", "answer": "a", "source_chat_ids": [5, "6", 9]},
        ]
    }
    conv = load_one(write_plans(tmp_path, plans, questions))
    assert [m.turn_id for m in conv.messages] == list(range(8))
    assert [m.session for m in conv.messages] == [1, 1, 2, 2, 3, 3, 3, 3]
    assert any("skipped plan-3: plan-2 is missing" in w for w in conv.warnings)
    assert any("loaded plan-0, plan-1 " in w for w in conv.warnings)
    q = conv.questions[0]
    assert q.gold == [[5, 6]]
    assert q.skipped == ["gold ids past the loaded messages (last loaded id 7): 9"]


def test_10m_without_plan_0_is_an_error(tmp_path: Path) -> None:
    errs = only_errors(write_plans(tmp_path, {1: simple_batches()}))
    assert len(errs) == 1
    assert "plan-0 is missing" in str(errs[0]) and errs[0].conversation_id == "10M/7"


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("batches", "expected"),
    [
        (
            [{"turns": [[{"id": 0, "content": "x"}]]}],
            "missing field 'role' at batch 1, turns[0][0]",
        ),
        (
            [{"turns": [[msg("user", 0), {"role": "assistant", "content": "x"}]]}],
            "missing field 'id' at batch 1, turns[0][1]",
        ),
        (
            [{"turns": [[{"role": "user", "id": 3}]]}],
            "missing field 'content' at batch 1, turns[0][0] (id 3)",
        ),
        ([{"turns": [[msg("user", 0, 42)]]}], "message content must be a string, got int"),
        (
            [{"turns": [[msg("user", 0, "a\x00b")]]}],
            "NUL byte in message content at batch 1, turns[0][0] (id 0), field 'content'",
        ),
        ([{"turns": [[msg("system", 0)]]}], "unknown role 'system'"),
        (
            [{"turns": [[msg("user", "abc")]]}],
            "field 'id' must be a whole number from 0 to 2147483647, got 'abc'",
        ),
        (
            [{"turns": [[msg("user", 2**31)]]}],
            "field 'id' must be a whole number from 0 to 2147483647, got 2147483648",
        ),
        (
            [{"turns": [[msg("user", 0, time_anchor="February-30-2024")]]}],
            "invalid date 'February-30-2024'",
        ),
        ([{"turns": [[msg("user", 0, time_anchor="not a date")]]}], "invalid date 'not a date'"),
        ([], "empty conversation: no messages"),
        ([{"batch_number": 1, "turns": []}], "empty conversation: no messages"),
        ({"turns": []}, "the chat must be a list of batches, got dict"),
        ([{"batch_number": 1}], "missing field 'turns' at batch 1"),
        ([{"turns": [[msg("user", 0)], msg("assistant", 1)]}], "mixes exchanges"),
    ],
)
def test_bad_chat_gives_clear_error(tmp_path: Path, batches: Any, expected: str) -> None:
    d = write_chat(tmp_path, "4", batches, None)
    errs = only_errors(d)
    assert len(errs) == 1
    text = str(errs[0])
    assert expected in text, text
    assert str(d / "chat.json") in text
    assert errs[0].conversation_id == "100K/4"


def test_invalid_date_error_names_field_and_place(tmp_path: Path) -> None:
    batches = simple_batches(2)
    batches[1]["turns"][0][0]["time_anchor"] = "February-30-2024"
    err = only_errors(write_chat(tmp_path, "4", batches, None))[0]
    assert "time_anchor" in str(err) and "batch 2, turns[0][0] (id 2)" in str(err)


def test_malformed_json_reports_line_and_column(tmp_path: Path) -> None:
    d = write_chat(tmp_path, "4", '[\n  {"turns": [\n    [}\n]', None)
    err = only_errors(d)[0]
    assert "malformed JSON at line 3, column" in str(err)
    assert "chat.json" in str(err)


def test_bad_conversation_does_not_stop_the_others(tmp_path: Path) -> None:
    write_chat(tmp_path, "1", simple_batches(), None)
    write_chat(tmp_path, "2", "{not json", None)
    write_chat(tmp_path, "10", simple_batches(), None)
    items = list(iter_beam(tmp_path))
    assert [type(x).__name__ for x in items] == ["Conversation", "BeamFormatError", "Conversation"]
    assert items[0].conversation_id == "100K/1" and items[2].conversation_id == "100K/10"
    assert isinstance(items[1], BeamFormatError) and items[1].conversation_id == "100K/2"
    # no probing questions: kept, with a warning
    assert any("no probing questions" in w for w in items[0].warnings)


def test_duplicate_ids_are_kept_and_reported(tmp_path: Path) -> None:
    batches = simple_batches(3, 2)
    batches[2]["turns"][0][0]["id"] = 0  # ids restart: 0 1 2 3 0 5
    batches[2]["turns"][0][1]["id"] = 1
    questions = {
        "information_extraction": [{"question": "q", "answer": "a", "source_chat_ids": [1]}]
    }
    conv = load_one(write_chat(tmp_path, "4", batches, questions))
    assert [m.turn_id for m in conv.messages] == [0, 1, 2, 3, 0, 1]
    dup = [w for w in conv.warnings if w.startswith("duplicate message ids")]
    assert len(dup) == 1
    assert "2 id(s)" in dup[0] and "0 (seq 0 in session 1, seq 4 in session 3)" in dup[0]
    assert conv.questions[0].gold == [[1]]
    assert conv.turn_seqs()[1] == [1, 5]


def test_numeric_string_ids_iso_dates_and_crlf(tmp_path: Path) -> None:
    batches = [
        {
            "turns": [
                [
                    msg("user", "0", "line one\r\nline two ->-> 1,2)  ", time_anchor="2024-02-29"),
                    msg("assistant", 1, "ok\r\n\r\n"),
                ]
            ]
        }
    ]
    conv = load_one(write_chat(tmp_path, "4", batches, None))
    assert conv.messages[0].turn_id == 0
    assert conv.messages[0].content == "line one\nline two"
    assert conv.messages[1].content == "ok"
    assert conv.messages[1].date == datetime.date(2024, 2, 29)


def test_batch_level_anchor_and_undated_sessions(tmp_path: Path) -> None:
    batches = [
        {"turns": [[msg("user", 0), msg("assistant", 1)]], "time_anchor": "May-05-2024"},
        {"turns": [[msg("user", 2), msg("assistant", 3)]], "time_anchor": None},
    ]
    conv = load_one(write_chat(tmp_path, "4", batches, None))
    assert [m.date for m in conv.messages] == [datetime.date(2024, 5, 5)] * 2 + [None] * 2
    body, _ = format_chat(conv)
    assert "=== session 2 | undated ===" in body


# --------------------------------------------------------------------------- questions


def test_question_shapes_are_normalised(tmp_path: Path) -> None:
    questions = {
        "abstention": [{"question": "a?", "ideal_response": "no info", "rubric": ["x"]}],
        "event_ordering": [
            {"question": "e?", "answer": "o", "source_chat_ids": [[0, "--", 2], 3, ["4"], []]},
        ],
        "contradiction_resolution": [
            {
                "question": "c?",
                "ideal_answer": "c",
                "source_chat_ids": {"first_statement": [1], "second_statement": ["3", 1]},
            },
        ],
        "knowledge_update": [
            {
                "question": "k?",
                "answer": "new",
                "source_chat_ids": {"original_info": [0], "updated_info": [2]},
            },
            {
                "question": "k2?",
                "answer": "new",
                "source_chat_ids": {"original_info": [0], "updated_info": []},
            },
        ],
        "temporal_reasoning": [
            {
                "question": "t?",
                "answer": "t",
                "source_chat_ids": {"first_event": [0], "second_event": [5]},
            },
        ],
        "summarization": [
            {"question": "s?", "ideal_summary": "sum", "rubric": "one", "source_chat_ids": []},
            {"question": "s2?", "ideal_summary": "sum", "source_chat_ids": [1, 2.5, True, -1]},
        ],
        "preference_following": [
            {"question": "p?", "expected_compliance": "comply", "source_chat_ids": [4, 40]},
        ],
    }
    conv = load_one(write_chat(tmp_path, "4", simple_batches(3, 2), questions))
    qs = {(q.ability, q.index): q for q in conv.questions}
    assert qs[("abstention", 0)].gold == [] and qs[("abstention", 0)].answer == "no info"
    eo = qs[("event_ordering", 0)]
    assert eo.gold == [[0, 2], [3], [4]]
    assert eo.skipped == ["skipped non-integer id '--' at source_chat_ids[0][1]"]
    assert qs[("contradiction_resolution", 0)].gold == [[1, 3]]
    ku = qs[("knowledge_update", 0)]
    assert (ku.gold, ku.stale, ku.answer) == ([[2]], [0], "new")
    ku2 = qs[("knowledge_update", 1)]
    assert ku2.gold == [] and ku2.stale == [0]
    assert ku2.skipped == ["updated_info is empty: no gold turn"]
    assert qs[("temporal_reasoning", 0)].gold == [[0, 5]]
    s0 = qs[("summarization", 0)]
    assert s0.gold == [] and s0.skipped == [] and s0.rubric == ["one"]
    s1 = qs[("summarization", 1)]
    assert s1.gold == [[1]]
    assert len(s1.skipped) == 3 and all("non-integer" in n for n in s1.skipped)
    pf = qs[("preference_following", 0)]
    assert pf.gold == [[4]] and pf.answer == "comply"
    assert pf.skipped == ["gold ids past the loaded messages (last loaded id 5): 40"]
    assert any(w.startswith("1 of 9 questions point at ids") for w in conv.warnings)


def test_bad_probing_questions_are_errors(tmp_path: Path) -> None:
    d = write_chat(tmp_path, "4", simple_batches(), {"information_extraction": [{"answer": "x"}]})
    err = only_errors(d)[0]
    assert "missing field 'question' at information_extraction[0]" in str(err)
    assert "probing_questions.json" in str(err)
    d2 = write_chat(tmp_path, "5", simple_batches(), ["not", "a", "dict"])
    assert "keyed by ability" in str(only_errors(d2)[0])


# --------------------------------------------------------------------------- Hugging Face rows


def hf_row(cid: str, chat: Any, questions: Any = "{}") -> dict:
    return {"conversation_id": cid, "chat": chat, "probing_questions": questions}


def test_hf_10m_rows_with_plan_dicts(tmp_path: Path) -> None:
    plan1 = [
        [
            msg("user", 0, "a", time_anchor="June-01-2024", question_type="main_question"),
            msg("assistant", 1, "b"),
        ]
    ]
    plan2 = [
        {
            "batch_number": 1,
            "turns": [
                [
                    msg(
                        "user",
                        2,
                        "c ->-> 1,1",
                        time_anchor="June-02-2024",
                        question_type="main_question",
                    ),
                    msg("assistant", 3, "d"),
                ]
            ],
        }
    ]
    questions = repr(
        {
            "temporal_reasoning": [
                {
                    "question": "t?",
                    "answer": "x",
                    "source_chat_ids": {"first_event": [1], "second_event": [3, 30]},
                }
            ]
        }
    )
    row = hf_row("5", [{"plan-1": plan1, "plan-2": None}, {"plan-2": plan2}], questions)
    path = tmp_path / "beam-10m.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    conv = load_one(path)
    assert conv.conversation_id == "10M/5"
    assert [(m.turn_id, m.session, m.exchange) for m in conv.messages] == [
        (0, 1, 0),
        (1, 1, 0),
        (2, 2, 1),
        (3, 2, 1),
    ]
    assert conv.messages[2].content == "c" and conv.messages[3].date == datetime.date(2024, 6, 2)
    assert conv.questions[0].gold == [[1, 3]]
    assert "past the loaded messages" in conv.questions[0].skipped[0]
    assert any("loaded plan-1, plan-2 (of plan-1..plan-10" in w for w in conv.warnings)


def test_hf_flat_batches_split_into_exchanges(tmp_path: Path) -> None:
    batch = [
        msg("user", 0, question_type="main_question", time_anchor="Jan-02-2024"),
        msg("assistant", 1),
        msg("user", 2, question_type="followup_question"),
        msg("assistant", 3),
        msg("user", 4, question_type="main_question"),
        msg("assistant", 5),
    ]
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([hf_row("2", [batch]), hf_row("1", [batch[:2]])]), encoding="utf-8")
    got = list(iter_beam(path, scale="1M"))
    assert [c.conversation_id for c in got] == ["1M/1", "1M/2"]
    assert [m.exchange for m in got[1].messages] == [0, 0, 0, 0, 1, 1]
    assert got[1].messages[5].date == datetime.date(2024, 1, 2)


def test_hf_bad_rows_are_yielded_as_errors(tmp_path: Path) -> None:
    good = hf_row("3", [[msg("user", 0), msg("assistant", 1)]])
    lines = [
        json.dumps(good),
        '{"conversation_id": "4", "chat": [',
        json.dumps(hf_row("5", [[msg("user", 0, "x\x00")]])),
        json.dumps(hf_row("6", [[msg("user", 0)]], "{'abstention': [")),
        json.dumps({"chat": []}),
    ]
    path = tmp_path / "beam-100K.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    items = list(iter_beam(path))
    convs = [x for x in items if isinstance(x, Conversation)]
    errs = [str(x) for x in items if isinstance(x, BeamFormatError)]
    assert [c.conversation_id for c in convs] == ["100K/3"]
    assert len(errs) == 4
    assert any("malformed JSON at line 2, column" in e for e in errs)
    assert any(
        "(line 3)" in e and "NUL byte in message content at chat[0][0] (id 0)" in e for e in errs
    )
    assert any("(line 4)" in e and "not a Python literal" in e for e in errs)
    assert any("(line 5)" in e and "missing field 'conversation_id'" in e for e in errs)


def _parquet(tmp_path: Path, name: str, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / name
    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return path


def test_parquet_rows_read_as_their_json_lines_twins(tmp_path: Path) -> None:
    """Real Parquet (pyarrow): nested structs come back with null for absent keys; the
    conversations equal those read from the same rows as JSON Lines."""
    rows = [json.loads(line) for line in HF_SAMPLE.read_text(encoding="utf-8").splitlines()]
    got = list(iter_beam(_parquet(tmp_path, "100K-00000-of-00001.parquet", rows[::-1])))
    want = list(iter_beam(HF_SAMPLE))
    assert [c.conversation_id for c in got] == ["100K/1", "100K/13"]
    for g, w in zip(got, want, strict=True):
        assert isinstance(g, Conversation) and format_chat(g) == format_chat(w)
        assert g.questions == w.questions and g.warnings == w.warnings


def test_parquet_10m_row_with_plan_structs(tmp_path: Path) -> None:
    """A BEAM-10M row: `chat` a list of one-key dicts plan-1..plan-K, which Parquet stores
    as structs with every plan field (null where absent)."""
    plan1 = [[msg("user", 0, "a", time_anchor="June-01-2024", question_type="main_question"),
              msg("assistant", 1, "b")]]
    plan2 = [[msg("user", 2, "c ->-> 1,1", time_anchor="June-02-2024",
                  question_type="main_question"),
              msg("assistant", 3, "d")]]
    questions = repr({"temporal_reasoning": [{"question": "t?", "answer": "x",
                                              "source_chat_ids": {"first_event": [1],
                                                                  "second_event": [3]}}]})
    row = hf_row("5", [{"plan-1": plan1}, {"plan-2": plan2}], questions)
    jsonl = tmp_path / "beam-10m.jsonl"
    jsonl.write_text(json.dumps(row) + "\n", encoding="utf-8")
    got = load_one(_parquet(tmp_path, "10M-00000-of-00001.parquet", [row]))
    want = load_one(jsonl)
    assert got.conversation_id == "10M/5" and format_chat(got) == format_chat(want)
    assert [(m.turn_id, m.session, m.content) for m in got.messages] == \
        [(0, 1, "a"), (1, 1, "b"), (2, 2, "c"), (3, 2, "d")]
    assert got.questions == want.questions and got.questions[0].gold == [[1, 3]]


def test_parquet_without_pyarrow_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    path = tmp_path / "beam.parquet"
    path.write_bytes(b"PAR1")
    with pytest.raises(ImportError, match="needs pyarrow"):
        list(iter_beam(path))


# --------------------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("hello ->-> 1,1", "hello"),
        ("hello? ->-> 2,N/A", "hello?"),
        ("hello ->-> 1,5)", "hello"),
        ("hello ->-> 3,", "hello"),
        ("hello ->-> 2,22, 24", "hello"),
        ("hello ->->  1,1\n", "hello"),
        ("a ->-> 1,1 ->-> 2,2", "a"),
        ("x -> y ->-> not a marker", "x -> y ->-> not a marker"),
        ("keep ->-> 1,1 in the middle\nok", "keep ->-> 1,1 in the middle\nok"),
        ("a\r\nb\rc  \n\n", "a\nb\nc"),
        ("```\ncode\n```", "```\ncode\n```"),
    ],
)
def test_clean_content(raw: str, clean: str) -> None:
    assert clean_content(raw) == clean


@pytest.mark.parametrize(
    ("text", "day"),
    [
        ("March-15-2024", datetime.date(2024, 3, 15)),
        ("Sept-01-2023", datetime.date(2023, 9, 1)),
        ("november-5-2023", datetime.date(2023, 11, 5)),
        ("2024-02-29", datetime.date(2024, 2, 29)),
        ("2024-02-29T10:00:00", datetime.date(2024, 2, 29)),
    ],
)
def test_parse_beam_date_ok(text: str, day: datetime.date) -> None:
    assert parse_beam_date(text) == day


@pytest.mark.parametrize("text", ["February-30-2024", "not a date", "Smarch-01-2024", "2023-02-29"])
def test_parse_beam_date_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid date|unknown month"):
        parse_beam_date(text)


def test_code_char_share() -> None:
    assert code_char_share("") == 0.0
    assert code_char_share("just words") == 0.0
    text = "ab\n```\ncd\n```\n"  # 'ab\n' outside, 11 characters inside
    assert code_char_share(text) == pytest.approx(11 / 14)
    assert code_char_share("x\n~~~\ny") == pytest.approx(5 / 7)  # unclosed: to the end
    assert code_char_share("x\n````\n```\n````\n") == pytest.approx(14 / 16)  # ``` can't close ````


def test_code_char_share_separates_code_and_dialogue(
    conv1: Conversation, conv13: Conversation
) -> None:
    assert code_char_share(conv1) > 0.4
    assert code_char_share(conv13) < 0.05
    body, _ = format_chat(conv1)
    assert code_char_share(body) > 0.4


# --------------------------------------------------------------------------- canonical text


def check_spans(messages: list[Message], body: str, spans: list[Any]) -> None:
    """The properties format_chat promises."""
    assert len(spans) == len(messages)
    prev_end = 0
    for m, s in zip(messages, spans, strict=True):
        assert body[s.char_start : s.char_end] == escape_content(m.content)
        assert body[s.header_start : s.char_start] == f"[{m.role} #{m.turn_id}] "
        assert prev_end < s.header_start < s.char_start <= s.char_end
        assert body[s.header_start - 1] == "\n" and body[s.char_end] == "\n"
        assert (s.seq, s.turn_id, s.role, s.session, s.exchange, s.date) == (
            m.seq,
            m.turn_id,
            m.role,
            m.session,
            m.exchange,
            m.date,
        )
        prev_end = s.char_end
    if messages:
        assert body.endswith("\n") and not body.endswith("\n\n")
        assert len(body) == spans[-1].char_end + 1
    # read back: the text that reads as a header (not behind a backslash, anywhere) is the
    # renderer's own, no message's
    turn_headers = [x.start() for x in re.finditer(r"(?<!\\)(?=\[[^\]\n]+ #-?\d+\](?:\s|\Z))",
                                                  body)]
    assert turn_headers == [s.header_start for s in spans]
    opened = sum(1 for i, m in enumerate(messages)
                 if i == 0 or m.session != messages[i - 1].session)
    assert len(re.findall(r"(?<!\\)===\s+session\s", body)) == opened
    # and the escaping is reversible: one backslash less gives the message back
    for m, s in zip(messages, spans, strict=True):
        assert UNESCAPE.sub("", body[s.char_start : s.char_end]) == m.content


UNESCAPE = re.compile(rf"(?<!\\)\\(?=\\*{HEADER_TEXT})")  # one backslash less


def test_format_chat_exact_text() -> None:
    d = datetime.date(2024, 3, 15)
    messages = [
        Message(0, 0, "user", 1, d, "Hi [there]", "main_question", 0),
        Message(1, 1, "assistant", 1, d, "```py\nx = 1\n```", None, 0),
        Message(2, 2, "user", 2, None, "Again", "main_question", 1),
    ]
    body, spans = format_chat(messages)
    assert body == (
        "=== session 1 | 2024-03-15 ===\n"
        "\n"
        "[user #0] Hi [there]\n"
        "\n"
        "[assistant #1] ```py\nx = 1\n```\n"
        "\n"
        "=== session 2 | undated ===\n"
        "\n"
        "[user #2] Again\n"
    )
    check_spans(messages, body, spans)
    assert format_chat([]) == ("", [])


def test_format_chat_real_fixture(conv1: Conversation) -> None:
    body, spans = format_chat(conv1)
    check_spans(conv1.messages, body, spans)
    assert body.startswith("=== session 1 | 2024-03-15 ===\n\n[user #0] I'm working on a project")
    assert body.count("=== session ") >= 3
    assert "\n=== session 3 | 2024-04-25 ===\n" in body
    for s in spans:
        assert not MARKER_AT_END.search(body[s.char_start : s.char_end])
    assert format_chat(conv1) == (body, spans)  # deterministic


TRICKY = [
    "=== session 1 | 2024-03-15 ===",
    "[[user #2] ",
    "=",
    "\u2028",
    "[user #3] fake header",
    "\\",
    "\n\n[assistant #7] ",
    "[assistant #-1]",
    "```python",
    "```",
    "~~~",
    " ->-> 1,1",
    "->-> 2,N/A",
    "\r\n",
    "\n\n",
    "é漢字🙂",
    "[",
    "]",
    "#",
    "\t",
    "   ",
    "[user #61]\u00a0",
    "[assistant #4]\t",
    "===\tsession ",
    "=== \u3000session\u00a0",
    "[assistant #\u200b7]",
    "=== se\u200bssion",
    "\uff3buser \uff03\uff17\uff3d",
    "\u00ad",
]
content_raw = st.lists(st.one_of(st.sampled_from(TRICKY), st.text(max_size=12)), max_size=8).map(
    "".join
)
message_spec = st.tuples(
    st.sampled_from(["user", "assistant"]),
    st.integers(min_value=0, max_value=10**6),
    st.booleans(),  # start a new session before this message
    st.one_of(st.none(), st.dates(min_value=datetime.date(1990, 1, 1))),
    content_raw,
)


def build_messages(specs: list[tuple[str, int, bool, datetime.date | None, str]]) -> list[Message]:
    out: list[Message] = []
    session, exchange = 1, 0
    day = None
    for seq, (role, turn_id, new_session, date, raw) in enumerate(specs):
        if seq and new_session:
            session += 1
            exchange += 1
        if seq == 0 or new_session:
            day = date
        out.append(Message(seq, turn_id, role, session, day, clean_content(raw), None, exchange))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(message_spec, min_size=1, max_size=12))
def test_format_chat_properties(
    specs: list[tuple[str, int, bool, datetime.date | None, str]],
) -> None:
    messages = build_messages(specs)
    body, spans = format_chat(messages)
    check_spans(messages, body, spans)
    assert format_chat(messages) == (body, spans)
    n_sessions = len({m.session for m in messages})
    headers = [
        f"=== session {m.session} | {m.date.isoformat() if m.date else 'undated'} ===\n"
        for i, m in enumerate(messages)
        if i == 0 or m.session != messages[i - 1].session
    ]
    assert len(headers) == n_sessions
    assert body.startswith(headers[0] + "\n")
    for s in spans:
        text = body[s.char_start : s.char_end]
        assert not MARKER_AT_END.search(text)
        assert "\r" not in text and text == text.rstrip()


@settings(max_examples=300, deadline=None)
@given(content_raw)
def test_clean_content_is_idempotent_and_marker_free(raw: str) -> None:
    once = clean_content(raw)
    assert clean_content(once) == once
    assert not MARKER_AT_END.search(once)
    assert once == once.rstrip() and "\r" not in once
