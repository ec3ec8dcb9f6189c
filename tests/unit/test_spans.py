"""Where a forgotten span's text stands in a changed text (donto_pg.core.spans)."""

from __future__ import annotations

import random

from donto_pg.core import spans as spans_mod
from donto_pg.core.spans import carried_spans, common_prefix, common_suffix


def test_common_prefix_and_suffix_agree_with_a_character_loop():
    rng = random.Random(7)
    for _ in range(300):
        a = "".join(rng.choice("ab\n") for _ in range(rng.randrange(0, 40)))
        b = "".join(rng.choice("ab\n") for _ in range(rng.randrange(0, 40)))
        p = 0
        while p < min(len(a), len(b)) and a[p] == b[p]:
            p += 1
        assert common_prefix(a, b) == p
        limit = min(len(a), len(b)) - p
        s = 0
        while s < limit and a[len(a) - 1 - s] == b[len(b) - 1 - s]:
            s += 1
        assert common_suffix(a, b, limit) == s


def texts_of(old: str, new: str, text: str) -> list[str]:
    start = old.index(text)
    return [new[s:e] for _, s, e in carried_spans(old, new, [(start, start + len(text))])]


def test_text_before_or_after_the_edit_keeps_its_place():
    old = "[user #0] My password hint is blue dog.\n[assistant #1] Okay.\n[user #2] Bye now.\n"
    new = old.replace("Okay.", "Okay, noted!")
    assert texts_of(old, new, "My password hint is blue dog.") == ["My password hint is blue dog."]
    assert texts_of(old, new, "Bye now.") == ["Bye now."]
    # a span over the edit: its text around the edit in place, the edited line as it is now
    assert texts_of(old, new, old[:old.index("[user #2]")]) == [new[:new.index("[user #2]")]]


def test_a_line_found_all_over_the_text_is_not_taken_for_the_forgotten_one():
    """Found by review: a forgotten chunk whose text was edited was looked for line by
    line in the whole text; its line "### Example Conversation", which the conversation
    has 173 times, hid 173 chunks."""
    filler = "".join(f"### Example Conversation\nexchange {i} about Scott\n" for i in range(50))
    secret = "so Scott feels comfortable sharing his thoughts\n"
    old = filler + "### Example Conversation\n" + secret + filler
    new = old.replace("feels comfortable", "feel comfortable")
    start = old.index("### Example Conversation\n" + secret)
    end = start + len("### Example Conversation\n" + secret)
    got = carried_spans(old, new, [(start, end)])
    assert [new[s:e] for _, s, e in got] == [new[start:end - 1]]  # one place: where it was
    assert "feel comfortable" in new[got[0][1]:got[0][2]]


def test_moved_and_deleted_text():
    secret = "My password hint is blue dog.\n"
    old = "intro\n" + secret + "middle\nend\n"
    moved = "intro\nmiddle\n" + secret + "end\n"
    got = texts_of(old, moved, secret)
    assert got == [secret]  # the diff keeps it, where it stands now
    gone = "intro\nmiddle\nend\n"
    assert texts_of(old, gone, secret) == []  # deleted: nothing holds it


def test_spans_keep_their_numbers_and_an_unchanged_text_maps_to_itself():
    body = "one line\nanother line\n"
    spans = [(0, 3), (4, 8), (9, 21)]
    assert carried_spans(body, body, spans) == [(i, s, e) for i, (s, e) in enumerate(spans)]


def test_a_rewritten_middle_past_the_diff_limit_maps_to_the_whole_middle(monkeypatch):
    monkeypatch.setattr(spans_mod, "MAX_DIFF_LINES", 3)
    old = "head\n" + "".join(f"old {i}\n" for i in range(10)) + "tail\n"
    new = "head\n" + "".join(f"new {i}\n" for i in range(10)) + "tail\n"
    start = old.index("old 4")
    got = carried_spans(old, new, [(start, start + 6)])
    assert [(s, e) for _, s, e in got] == [(len("head\n"), len(new) - len("tail\n"))]
