"""Char-offset anchoring: find where a quoted passage lies in a conversation body.

:func:`anchor` tries, in order:

``exact``
    ``str.find`` over the whole body; the occurrence nearest ``near`` wins (score 1.0).
``normalized``
    Both sides compared after :func:`normalize` (case folding, whitespace runs collapsed,
    curly quotes made straight, dashes and minus made ``-``, markdown emphasis markers
    ``*``, ``_`` and `````` removed).  First in ``near +- window`` (exact semantics, through an
    offset map), then in the whole body (small bodies: same map; large bodies: a regular
    expression built from the quote, each hit checked with :func:`normalize`).  The span
    returned covers the original characters, without leading or trailing markers or
    blanks.  Score 0.95.
``fuzzy``
    The normalized window with the best ``difflib`` ratio against the normalized quote,
    if it reaches ``fuzzy_threshold``; only near ``near``, or over the whole body when it
    is smaller than ``small_body`` characters.  Score = ratio.

Known limits: on a large body, outside the near window, a letter whose case folding is
several letters (``ß`` -> ``ss``, ``ﬁ`` -> ``fi``) only matches when written the same way
in the quote and in the body, and a normalized match longer than ``2 * len(quote) + 256``
characters (a quote spread over huge blank runs) is not found; fuzzy matching is tried
only for quotes of at most :data:`FUZZY_MAX_QUOTE` normalized characters (``difflib`` is
quadratic).

Bounded work: every loop calls ``check()`` (when given) now and then; the server passes
one that lets PostgreSQL act on a pending cancel or ``statement_timeout``
(``donto_pg.plpy_entry``), so a caller can always stop a search.
"""

from __future__ import annotations

import bisect
import difflib
import re
from collections.abc import Callable, Iterator

__all__ = ["FUZZY_MAX_QUOTE", "anchor", "normalize"]

#: Longest normalized quote tried by the fuzzy pass (one ``difflib`` ratio is quadratic
#: in it; at 1,000 characters it takes at most a few tenths of a second).
FUZZY_MAX_QUOTE = 1000
#: Characters of body searched per regular-expression call (a cancel is seen in between).
_SLICE = 2048


def _never() -> None:
    """The default ``check``: never interrupts."""

_QUOTES = {
    "\u2018": "'",
    "\u2019": "'",
    "\u201a": "'",
    "\u201b": "'",
    "\u2032": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u201e": '"',
    "\u201f": '"',
    "\u2033": '"',
}
_DASHES = {
    "\u2010": "-",
    "\u2011": "-",
    "\u2012": "-",
    "\u2013": "-",
    "\u2014": "-",
    "\u2015": "-",
    "\u2212": "-",
}
_TRANSLATE = str.maketrans({**_QUOTES, **_DASHES})
_MARKERS = "*_`"
_TOKEN = re.compile(r"(\s+)|([*_`]+)|([^\s*_`]+)")
# Characters of the body that may stand for a normalized character (besides itself).
_VARIANTS = {
    "'": "'" + "".join(k for k, v in _QUOTES.items() if v == "'"),
    '"': '"' + "".join(k for k, v in _QUOTES.items() if v == '"'),
    "-": "-" + "".join(_DASHES),
}
_SEP = r"[*_`]*+"
_WS = r"[*_`]*+\s[\s*_`]*+"


def _normalize_map(text: str, start: int = 0, end: int | None = None,
                   check: Callable[[], None] = _never) -> tuple[str, list[int]]:
    """Normalize ``text[start:end]``; also return, per output char, its source index."""
    if end is None:
        end = len(text)
    out: list[str] = []
    src: list[int] = []
    pending = -1  # index of the first blank of a run waiting to become one space
    for k, m in enumerate(_TOKEN.finditer(text, start, end)):
        if not k & 4095:
            check()
        if m.group(1) is not None:
            if pending < 0:
                pending = m.start()
            continue
        if m.group(2) is not None:
            continue
        word = m.group(3)
        a = m.start()
        if pending >= 0:
            if out:
                out.append(" ")
                src.append(pending)
            pending = -1
        folded = word.casefold().translate(_TRANSLATE)
        if len(folded) == len(word):
            out.append(folded)
            src.extend(range(a, a + len(word)))
        else:
            for k, ch in enumerate(word):
                f = ch.casefold().translate(_TRANSLATE)
                out.append(f)
                src.extend([a + k] * len(f))
    return "".join(out), src


def normalize(text: str) -> str:
    """Return the comparison form of ``text``.

    Case-folded; curly quotes become straight; en/em dashes, figure dash, horizontal bar
    and minus become ``-``; markdown markers ``*``, ``_`` and `````` are removed; every
    whitespace run becomes one space; leading and trailing whitespace is dropped.
    """
    return _normalize_map(text)[0]


def _distance(near: int, s: int, e: int) -> int:
    """Distance from offset ``near`` to the span ``[s, e)`` (0 inside)."""
    if near < s:
        return s - near
    if near >= e:
        return near - max(s, e - 1)
    return 0


def _last_before(body: str, quote: str, end: int, stop: int,
                 check: Callable[[], None]) -> int:
    """Start of the last occurrence of ``quote`` inside ``body[stop:end]``, or -1.

    Forward ``str.find`` over windows walking back from ``end`` (``str.rfind`` is not
    linear in the worst case: a near-miss quote made it run for minutes)."""
    n = len(quote)
    width = 4 * n + 65536
    hi = end
    while hi - n >= stop:
        check()
        lo = max(stop, hi - width)
        last = -1
        i = body.find(quote, lo, hi)
        while i >= 0:
            last = i
            i = body.find(quote, i + 1, hi)
        if last >= 0:
            return last
        if lo == stop:
            break
        hi = lo + n - 1  # occurrences straddling lo were not inside [lo, hi)
    return -1


def _exact(body: str, quote: str, near: int | None,
           check: Callable[[], None] = _never) -> tuple[int, int] | None:
    n = len(quote)
    if near is None:
        i = body.find(quote)
        return (i, i + n) if i >= 0 else None
    right = body.find(quote, max(0, near - n + 1))  # occurrences containing or after near
    # occurrences ending at or before near, no farther from it than the right one
    stop = 0 if right < 0 else max(0, near - (right - near) - n)
    left = _last_before(body, quote, near, stop, check)
    best: tuple[int, int] | None = None
    for i in (left, right):
        if i >= 0 and (best is None or _distance(near, i, i + n) < _distance(near, *best)):
            best = (i, i + n)
    return best


def _mapped_hits(
    body: str, nq: str, lo: int, hi: int, nmap: tuple[str, list[int]] | None = None,
    check: Callable[[], None] = _never,
) -> Iterator[tuple[int, int]]:
    """Spans in ``body[lo:hi]`` whose normalization is exactly ``nq``.

    ``nmap`` is ``_normalize_map(body, lo, hi)`` when already computed.
    """
    norm, src = nmap if nmap is not None else _normalize_map(body, lo, hi, check)
    i = norm.find(nq)
    while i >= 0:
        check()
        s, e = src[i], src[i + len(nq) - 1] + 1
        if normalize(body[s:e]) == nq:
            yield s, e
        i = norm.find(nq, i + 1)


def _quote_regex(quote: str) -> re.Pattern[str]:
    """A pattern matching original text that may normalize like ``quote``."""
    q = quote.translate(_TRANSLATE)
    q = re.sub(r"[*_`]+", "", q)
    q = re.sub(r"\s+", " ", q).strip()
    parts: list[str] = []
    for k, ch in enumerate(q):
        if ch == " ":
            parts.append(_WS)
            continue
        if k and q[k - 1] != " ":
            parts.append(_SEP)
        variants = _VARIANTS.get(ch)
        parts.append("[" + re.escape(variants) + "]" if variants else re.escape(ch))
    return re.compile("".join(parts), re.IGNORECASE)


def _nearest(hits: Iterator[tuple[int, int]], near: int | None) -> tuple[int, int] | None:
    best: tuple[int, int] | None = None
    for s, e in hits:
        if near is None:
            return s, e
        if best is None or _distance(near, s, e) < _distance(near, *best):
            best = (s, e)
        elif s > near:
            break  # hits come in order: later ones are farther
    return best


def _regex_hits(body: str, quote: str, nq: str,
                check: Callable[[], None] = _never) -> Iterator[tuple[int, int]]:
    """Matches of the quote's pattern, in order, searched slice by slice (one regular
    expression call never runs over more than ``_SLICE`` start positions)."""
    pattern = _quote_regex(quote)
    reach = 2 * len(quote) + 256  # the longest match looked for
    n = len(body)
    pos = 0
    while pos < n:
        check()
        stop = min(n, pos + _SLICE)
        m = pattern.search(body, pos, min(n, stop + reach))
        if m is None or m.start() >= stop:
            pos = stop
            continue
        if normalize(m.group()) == nq:
            yield m.start(), m.end()
        pos = m.end() if m.end() > m.start() else m.start() + 1


def _fuzzy(
    norm: str, nq: str, near_n: int | None, threshold: float,
    check: Callable[[], None] = _never,
) -> tuple[int, int, float] | None:
    """Best window of ``norm`` against ``nq``: ``(start, end, ratio)`` or ``None``."""
    n, m = len(norm), len(nq)
    if m < 4 or n == 0 or m > FUZZY_MAX_QUOTE:
        return None
    q = 3
    grams: dict[str, list[int]] = {}
    for o in range(m - q + 1):
        grams.setdefault(nq[o : o + q], []).append(o)
    votes = [0] * (n + m + 1)  # index = window start + m
    get = grams.get
    for i in range(n - q + 1):
        if not i & 1023:
            check()
        offs = get(norm[i : i + q])
        if offs:
            for o in offs:
                votes[i - o + m] += 1
    band = max(2, min(32, m // 8))
    # band-smoothed votes (indels shift the diagonal a little), through prefix sums
    pref = [0]
    acc = 0
    for v in votes:
        acc += v
        pref.append(acc)
    size = len(votes)
    smooth = [pref[min(size, d + band + 1)] - pref[max(0, d - band)] for d in range(size)]
    top = max(smooth)
    if top == 0:
        return None

    def dnear(d: int) -> int:
        return 0 if near_n is None else abs(d - m - near_n)

    # Candidate alignments: diagonals with at least half the best vote, best first
    # (ties: nearest to near_n, then leftmost); at most eight, half a quote apart.
    strong = sorted(
        (d for d in range(size) if 2 * smooth[d] >= top), key=lambda d: (-smooth[d], dnear(d), d)
    )
    chosen: list[int] = []
    for d in strong:
        if all(abs(d - c) > m // 2 for c in chosen):
            chosen.append(d)
            if len(chosen) == 8:
                break
    sm = difflib.SequenceMatcher(None, autojunk=False)
    sm.set_seq2(nq)

    def ratio(s: int, e: int) -> float:
        check()
        sm.set_seq1(norm[s:e])
        return sm.ratio()

    def aligned(s0: int) -> tuple[int, int]:
        """Window of ``norm`` around ``s0`` whose matching blocks line up with ``nq``."""
        lo, hi = max(0, s0 - band), min(n, s0 + m + band)
        check()
        sm.set_seq1(norm[lo:hi])
        blocks = [b for b in sm.get_matching_blocks() if b.size]
        if not blocks:
            return s0, min(n, s0 + m)
        while len(blocks) > 1 and blocks[0].size < q:  # stray matches at the edges
            blocks.pop(0)
        while len(blocks) > 1 and blocks[-1].size < q:
            blocks.pop()
        first, last = blocks[0], blocks[-1]
        s = max(lo, lo + first.a - first.b)  # include unmatched quote ends
        e = min(hi, lo + last.a + last.size + (m - last.b - last.size))
        return s, max(e, s + 1)

    best: tuple[float, int, int, int] | None = None  # (ratio, -distance, -start, end)
    for d in chosen:
        s0 = max(0, min(n - 1, d - m))
        s1, e1 = aligned(s0)
        windows = {(s0, min(n, s0 + m)), (s1, e1)}
        windows.update((s1 + a, e1 + b) for a, b in ((-1, 0), (1, 0), (0, -1), (0, 1)))
        for s, e in sorted(windows):
            if s < 0 or e > n:  # a window nudged past either end of the text
                continue
            while s < e and norm[s] == " ":
                s += 1
            while e > s and norm[e - 1] == " ":
                e -= 1
            if e <= s:
                continue
            r = ratio(s, e)
            dist = 0 if near_n is None else _distance(near_n, s, e)
            cand = (r, -dist, -s, -e)
            if best is None or cand > best:
                best = cand
    if best is None or best[0] < threshold:
        return None
    return -best[2], -best[3], best[0]


def anchor(
    body: str,
    quote: str,
    near: int | None = None,
    *,
    window: int = 20000,
    fuzzy_threshold: float = 0.85,
    small_body: int = 200_000,
    check: Callable[[], None] = _never,
) -> tuple[int, int, str, float] | None:
    """Locate ``quote`` in ``body``.

    :param body: the full text (may be tens of millions of characters).
    :param quote: the passage to find; empty or blank -> ``None``.
    :param near: a char offset the quote is expected close to (e.g. its block start).
    :param window: half-width of the region around ``near`` searched first.
    :param fuzzy_threshold: minimal ``difflib`` ratio for a fuzzy hit.
    :param small_body: below this length the whole body is searched like the near region
        (mapped normalization, fuzzy allowed).
    :param check: called now and then during the search; raise from it to stop.
    :returns: ``(char_start, char_end, method, score)`` with ``method`` in ``exact``,
        ``normalized``, ``fuzzy``; or ``None``.
    """
    if not quote or quote.isspace():
        return None
    n = len(body)
    if near is not None:
        near = min(max(0, near), n)
    hit = _exact(body, quote, near, check)
    if hit is not None:
        return hit[0], hit[1], "exact", 1.0
    nq = normalize(quote)
    if not nq:
        return None
    small = n < small_body
    whole = (0, n)
    maps: dict[tuple[int, int], tuple[str, list[int]]] = {}

    def mapped(lo: int, hi: int) -> tuple[str, list[int]]:
        if (lo, hi) not in maps:
            maps[(lo, hi)] = _normalize_map(body, lo, hi, check)
        return maps[(lo, hi)]

    region: tuple[int, int] | None = None
    if near is not None:
        reach = window + 2 * len(quote)
        region = (max(0, near - reach), min(n, near + reach))
        found = _nearest(_mapped_hits(body, nq, *region, mapped(*region), check), near)
        if found is not None:
            return found[0], found[1], "normalized", 0.95
    if region != whole:
        if small:
            hits = _mapped_hits(body, nq, 0, n, mapped(0, n), check)
        else:
            hits = _regex_hits(body, quote, nq, check)
        found = _nearest(hits, near)
        if found is not None:
            return found[0], found[1], "normalized", 0.95
    if small:
        norm, src = mapped(0, n)
    elif region is not None:
        norm, src = mapped(*region)
    else:
        return None
    near_n = bisect.bisect_left(src, near) if near is not None and src else None
    fz = _fuzzy(norm, nq, near_n, fuzzy_threshold, check)
    if fz is None:
        return None
    s, e, r = fz
    return src[s], src[e - 1] + 1, "fuzzy", r
