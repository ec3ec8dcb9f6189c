"""Where a forgotten span's text stands in a changed text (donto_pg.core.spans)."""

from __future__ import annotations

import random

from donto_pg.core.spans import MIN_LINE, carried_spans, common_prefix, common_suffix


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


def spans_of(old: str, new: str, text: str) -> list[str]:
    start = old.index(text)
    return [new[s:e] for _, s, e in carried_spans(old, new, [(start, start + len(text))])]


def test_text_before_or_after_the_edit_keeps_its_place():
    old = "[user #0] My password hint is blue dog.\n[assistant #1] Okay.\n[user #2] Bye now.\n"
    new = old.replace("Okay.", "Okay, noted!")
    assert spans_of(old, new, "My password hint is blue dog.") == ["My password hint is blue dog."]
    assert spans_of(old, new, "Bye now.") == ["Bye now."]
    # the edit inside a span: its text is not whole in NEW; its parts around the edit
    # and its lines long enough to be looked for alone are
    got = spans_of(old, new, old[:old.index("Bye")])
    assert "My password hint is blue dog." in "".join(got)


def test_a_touched_span_is_found_where_its_text_or_its_long_lines_stand():
    secret = "My password hint is blue dog."
    old = f"intro\n{secret}\nOkay.\nmiddle\nend\n"
    new = f"INTRO changed\nOkay.\nsomething new\n{secret}\nend\n"  # moved and edited around
    start = old.index("intro")
    end = old.index("middle")
    got = carried_spans(old, new, [(start, end)])
    texts = {new[s:e] for _, s, e in got}
    assert secret in texts
    assert "Okay." not in texts and len("Okay.") < MIN_LINE  # a short line is not taken
    # the whole text found elsewhere: found there, every time it occurs
    twice = f"a\n{secret}\nb\n{secret}\n"
    assert [twice[s:e] for _, s, e in carried_spans(old, twice, [(old.index(secret),
            old.index(secret) + len(secret))])] == [secret, secret]


def test_spans_keep_their_numbers_and_an_unchanged_text_maps_to_itself():
    body = "one line\nanother line\n"
    spans = [(0, 3), (4, 8), (9, 21)]
    assert carried_spans(body, body, spans) == [(i, s, e) for i, (s, e) in enumerate(spans)]
    assert carried_spans("abc", "xyz", [(0, 3)]) == []  # nothing of it survives
