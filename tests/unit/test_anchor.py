"""Tests for donto_pg.core.anchor (char-offset anchoring of quotes)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from donto_pg.core.anchor import anchor, normalize

BODY = (
    "=== session 1 | 2024-03-15 ===\n\n"
    "[user #0] I\u2019m working on a **Flask** app \u2014 it\u2019s called \u201cLedger\u201d.\n\n"
    "[assistant #1] Great! Use the `--force` flag only when  needed.\n"
    "The quick brown fox jumps over the lazy dog near the river bank.\n\n"
    "[user #2] My street is Hauptstra\u00dfe 5, and the budget is \u2212200 dollars.\n"
)


def test_normalize_rules() -> None:
    assert normalize("  Hello\u00a0\n\t WORLD  ") == "hello world"
    assert normalize("\u201cit\u2019s\u201d \u2018x\u2019") == "\"it's\" 'x'"
    assert normalize("a\u2013b\u2014c\u2212d") == "a-b-c-d"
    assert normalize("**bold** _it_ `code`") == "bold it code"
    assert normalize("a * b") == "a b"
    assert normalize("Stra\u00dfe") == "strasse"
    assert normalize(" \n ") == ""


def test_exact() -> None:
    q = "Use the `--force` flag"
    s, e, method, score = anchor(BODY, q)
    assert (BODY[s:e], method, score) == (q, "exact", 1.0)


def test_exact_nearest_of_several_occurrences() -> None:
    unit = "filler text " * 50
    body = unit + "TARGET" + unit + "TARGET" + unit + "TARGET" + unit
    occ = [i for i in range(len(body)) if body.startswith("TARGET", i)]
    assert len(occ) == 3
    assert anchor(body, "TARGET")[0] == occ[0]
    assert anchor(body, "TARGET", near=occ[1] - 10)[0] == occ[1]
    assert anchor(body, "TARGET", near=occ[1] + 3)[0] == occ[1]  # inside it
    assert anchor(body, "TARGET", near=(occ[1] + occ[2]) // 2 + 20)[0] == occ[2]
    assert anchor(body, "TARGET", near=len(body) * 5)[0] == occ[2]  # clamped
    assert anchor(body, "TARGET", near=-100)[0] == occ[0]


def test_normalized_maps_back_to_original_chars() -> None:
    q = "i'm working on a flask app - it's called \"ledger\"."
    s, e, method, score = anchor(BODY, q)
    assert (method, score) == ("normalized", 0.95)
    assert (
        BODY[s:e]
        == "I\u2019m working on a **Flask** app \u2014 it\u2019s called \u201cLedger\u201d."
    )
    s, e, method, _ = anchor(BODY, "use the --force flag only when needed")
    assert method == "normalized"
    assert BODY[s:e] == "Use the `--force` flag only when  needed"
    s, e, method, _ = anchor(BODY, "HAUPTSTRASSE 5")
    assert (BODY[s:e], method) == ("Hauptstra\u00dfe 5", "normalized")
    s, e, method, _ = anchor(BODY, "budget is -200")
    assert (BODY[s:e], method) == ("budget is \u2212200", "normalized")


def test_normalized_excludes_outer_markers() -> None:
    s, e, method, _ = anchor(BODY, "**flask**  APP")
    assert (BODY[s:e], method) == ("Flask** app", "normalized")


def test_fuzzy_one_char_typo() -> None:
    phrase = "The quick brown fox jumps over the lazy dog near the river bank."
    typo = "The quick brown fox jumps over the lazy dgo near the river bank."
    s, e, method, score = anchor(BODY, typo)
    assert method == "fuzzy"
    assert BODY[s:e] == phrase
    assert 0.85 <= score < 1.0
    deletion = "the quick brwn fox jumps over the lazy dog near the river bank"
    s, e, method, score = anchor(BODY, deletion)
    assert (method, BODY[s:e]) == ("fuzzy", phrase[:-1])
    assert score > 0.95


def test_fuzzy_threshold_and_misses() -> None:
    assert anchor(BODY, "completely unrelated sentence about kangaroos") is None
    typo = "The quick brown fox jumps over the lazy dgo near the river bank."
    assert anchor(BODY, typo, fuzzy_threshold=0.999) is None
    assert anchor(BODY, "") is None
    assert anchor(BODY, "  \n\t") is None
    assert anchor(BODY, "** __ ``") is None


def _large_body() -> tuple[str, int, int]:
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    filler = " ".join(rng.choice(words) for _ in range(60_000))
    body = filler + " The \u201cMagic\u201d **number** is 42. " + filler
    body += " Quarterly revenue grew by eleven percent in the northern region. " + filler
    far = body.index("The \u201cMagic\u201d")
    rev = body.index("Quarterly revenue")
    return body, far, rev


def test_large_body_normalized_whole_body_and_fuzzy_only_near() -> None:
    body, far, rev = _large_body()
    assert len(body) > 1_000_000
    # normalized: not near `near`, found in the whole body (regular-expression path)
    got = anchor(body, 'the "magic" number is 42', near=len(body) - 1, small_body=1000)
    assert got is not None and got[2] == "normalized"
    assert body[got[0] : got[1]] == "The \u201cMagic\u201d **number** is 42"
    got = anchor(body, 'the "magic" number is 42', small_body=1000)
    assert got is not None and got[:2] == (far, far + len("The \u201cMagic\u201d **number** is 42"))
    # fuzzy: only in the near window of a large body
    typo = "Quarterly revenue grew by eleven percnet in the northern region."
    assert anchor(body, typo, near=0, small_body=1000, window=5000) is None
    assert anchor(body, typo, small_body=1000) is None
    got = anchor(body, typo, near=rev + 100, small_body=1000, window=5000)
    assert got is not None and got[2] == "fuzzy"
    assert body[got[0] : got[1]] == typo.replace("percnet", "percent")


def test_normalized_prefers_near_occurrence() -> None:
    unit = "lorem ipsum " * 30
    body = unit + "Hello  World" + unit + "HELLO world" + unit
    second = body.index("HELLO world")
    got = anchor(body, "hello world", near=second)
    assert got == (second, second + len("HELLO world"), "normalized", 0.95)
    got = anchor(body, "hello world", near=second, small_body=0, window=10)
    assert got == (second, second + len("HELLO world"), "normalized", 0.95)
    assert anchor(body, "hello world", near=0)[0] == body.index("Hello  World")


# ---------------------------------------------------------------- property test

FRAGMENTS = [
    "alpha",
    "Beta",
    "GAMMA",
    "it\u2019s",
    "\u201cquoted\u201d",
    "'plain'",
    '"dq"',
    "a\u2014b",
    "x\u2013y",
    "\u22121",
    "-2",
    "**bold**",
    "_em_",
    "`code`",
    "Stra\u00dfe",
    "\ufb01ne",
    "\u03a3\u03bf\u03c6\u03bf\u03c2",
    "na\u00efve",
    "end.",
    "(x)",
]
SIMPLE = [f for f in FRAGMENTS if len(f.casefold()) == len(f) and len(f.upper()) == len(f)]
SEPS = [" ", "  ", "\n", "\n\n", "\t", " * "]


@st.composite
def bodies(draw: st.DrawFn, fragments: list[str]) -> str:
    parts = draw(
        st.lists(
            st.tuples(st.sampled_from(fragments), st.sampled_from(SEPS)), min_size=2, max_size=40
        )
    )
    return "".join(f + s for f, s in parts)


_SWAP_QUOTES = {
    "\u2019": "'",
    "'": "\u2019",
    "\u201c": '"',
    "\u201d": '"',
    '"': "\u201d",
    "\u2014": "-",
    "-": "\u2013",
}


def perturb(text: str, ops: list[int]) -> str:
    out = []
    for ch, op in zip(text, ops, strict=False):
        if ch.isspace():
            out.append([" ", "\n  ", "\t", "  "][op % 4])
        elif op == 1:
            out.append(ch.upper())
        elif op == 2:
            out.append(ch.lower())
        elif op == 3:
            out.append(_SWAP_QUOTES.get(ch, ch))
        elif op == 4:
            out.append("**" + ch)
        else:
            out.append(ch)
    out.extend(text[len(ops) :])
    return "".join(out)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), use_near=st.booleans())
def test_perturbed_substring_normalizes_to_quote(data: st.DataObject, use_near: bool) -> None:
    body = data.draw(bodies(FRAGMENTS))
    i = data.draw(st.integers(0, len(body) - 1))
    j = data.draw(st.integers(i + 1, min(len(body), i + 80)))
    ops = data.draw(st.lists(st.integers(0, 5), min_size=j - i, max_size=j - i))
    quote = perturb(body[i:j], ops)
    nq = normalize(quote)
    assume(nq)
    near = data.draw(st.integers(0, len(body))) if use_near else None
    got = anchor(body, quote, near)
    assert got is not None
    s, e, method, score = got
    assert method in ("exact", "normalized")
    assert normalize(body[s:e]) == nq
    if method == "exact":
        assert body[s:e] == quote and score == 1.0
    else:
        assert score == 0.95
        assert body[s:e] == body[s:e].strip()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_perturbed_substring_whole_body_regex_path(data: st.DataObject) -> None:
    """Same property on the large-body path (no near window, no offset map)."""
    body = data.draw(bodies(SIMPLE))
    i = data.draw(st.integers(0, len(body) - 1))
    j = data.draw(st.integers(i + 1, min(len(body), i + 80)))
    ops = data.draw(st.lists(st.integers(0, 5), min_size=j - i, max_size=j - i))
    quote = perturb(body[i:j], ops)
    nq = normalize(quote)
    assume(nq)
    got = anchor(body, quote, small_body=0)
    assert got is not None
    s, e, method, _ = got
    assert method in ("exact", "normalized")
    assert normalize(body[s:e]) == nq


@pytest.mark.parametrize("near", [None, 0, 10_000])
def test_result_is_in_full_body_offsets(near: int | None) -> None:
    body = "x" * 20_000 + "Some *Quoted* text" + "y" * 20_000
    s, e, method, _ = anchor(body, "some quoted text", near, window=100)
    assert (body[s:e], method) == ("Some *Quoted* text", "normalized")


# -- bounded work (issue 10, section 5) ---------------------------------------------------


def _exact_by_rfind(body: str, quote: str, near: int) -> tuple[int, int] | None:
    """The former exact pass (str.rfind is quadratic on near-miss quotes)."""
    from donto_pg.core.anchor import _distance

    n = len(quote)
    left = body.rfind(quote, 0, near)
    right = body.find(quote, max(0, near - n + 1))
    best = None
    for i in (left, right):
        if i >= 0 and (best is None or _distance(near, i, i + n) < _distance(near, *best)):
            best = (i, i + n)
    return best


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_exact_near_matches_the_rfind_formulation(data: st.DataObject) -> None:
    from donto_pg.core.anchor import _exact

    alphabet = data.draw(st.sampled_from(["ab", "abc", "a b"]))
    unit = data.draw(st.text(alphabet, min_size=1, max_size=6))
    body = data.draw(st.text(alphabet, max_size=40)) + unit * data.draw(
        st.integers(0, 30000)) + data.draw(st.text(alphabet, max_size=40))
    quote = data.draw(st.text(alphabet, min_size=1, max_size=8))
    near = data.draw(st.integers(0, len(body)))
    assert _exact(body, quote, near) == _exact_by_rfind(body, quote, near)


class _Stop(Exception):
    pass


@pytest.mark.parametrize(("body", "quote", "near"), [
    ("a" * 2_000_000, "a" * 1999 + "b", None),
    ("a" * 2_000_000, "a" * 1999 + "b", 1_000_000),
    ("a" * 2_000_000, "a" * 999 + "b", 1_000_000),
    ("ab " * 50_000, "ab " * 333 + "x", None),
])
def test_a_check_that_raises_stops_the_search_soon(body: str, quote: str, near: int | None):
    """Every long stretch of the search calls check(): raising from it ends the search."""
    import time

    started = time.monotonic()

    def check() -> None:
        if time.monotonic() - started > 0.2:
            raise _Stop

    with pytest.raises(_Stop):
        anchor(body, quote, near, check=check)
    assert time.monotonic() - started < 1.0


def test_fuzzy_is_not_tried_for_quotes_over_its_cap() -> None:
    from donto_pg.core.anchor import FUZZY_MAX_QUOTE

    body = "x" * 50 + "the quick brown fox jumps over the lazy dog " * 40
    quote = ("the quick brown fox jumps over the lazy dog " * 40).replace("lazy", "lazzy", 1)
    assert len(quote) > FUZZY_MAX_QUOTE
    assert anchor(body, quote) is None
    short = quote[:200]
    assert anchor(body, short)[2] == "fuzzy"


@pytest.mark.parametrize("body, found", [
    ("Keep your garden advice short. Always water them at the base.", None),
    ("x Always answer me in Klingon from now", (2, 38)),
    ("Always answer me in Klingon from now on!", (0, 39)),
])
def test_fuzzy_windows_at_the_end_of_the_body_stay_inside_it(body, found):
    # a candidate window nudged one past the end of the text once raised IndexError
    got = anchor(body, "Always answer me in Klingon from now on.")
    assert (got if got is None else got[:2]) == found
    if got is not None:
        assert got[2] == "fuzzy" and got[3] >= 0.85
