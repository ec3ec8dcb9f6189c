"""Whose words: the spans of a user turn that are not the user's own.

A user turn holds more than what the user says: pasted mail, code, a transcript, what
someone else said. Both rule-based readers of user turns skip those spans, so neither
takes them for the user's: the standing-statement detector (:mod:`donto_pg.core.standing`,
from rules-v5) and the offline baseline extractor (:mod:`donto_pg.core.rule_extractor`).

:func:`others_words` gives the spans [start, end) of TEXT that are someone else's:

* a code fence (:func:`donto_pg.core.fences.fence_spans`);
* a quoted line (``> ...``, ``＞ ...``, after any whitespace) and an indented line (four
  spaces or a tab: a pasted mail or code block);
* a ``<quote>`` or ``<blockquote>`` element (to the end of the text when left open);
* a line that starts with a role label (``Assistant:``, ``SYSTEM:``, ``ChatGPT:``,
  ``User:`` ... of a pasted transcript), to the end of the line, or to the next blank
  line when the label stands alone;
* reported speech: someone other than the user and what they said, from the speaker to
  the end of the sentence, or of the clause before ", but I ..." ("My friend told me
  that ...", "ChatGPT told me to ...", "the narrator says: ...", "He said "..."", "You
  (the assistant) wrote: ...");
* a double-quoted passage (straight or curly quotes) attributed to someone before it (in
  its line, or on the line before, ending with ":") or after it (""...," my brother
  said").

The user's own words about someone else stay the user's: "Always do what my doctor
says." (no words of the doctor's follow), "From now on, always answer in German." A
quoted rule the user adopts without naming another speaker ("Please follow this rule:
"Always cite sources."") is the user's too: nothing says it is anyone else's.

Pure Python, deterministic.
"""

from __future__ import annotations

import bisect
import re

from donto_pg.core.fences import fence_spans

__all__ = ["in_others_words", "others_words", "overlaps", "starts_in"]

_QUOTED_LINE = re.compile(r"^[^\S\n]*[>＞].*$", re.M)
_INDENTED_LINE = re.compile(r"^(?: {4}|\t).*\S.*$", re.M)
_QUOTE_ELEMENT = re.compile(r"<(blockquote|quote)\b[^>]*>.*?(?:</\1\s*>|\Z)", re.I | re.S)
_ROLE = (r"(?:system|assistant|ai|bot|chat ?gpt|gpt[-\w.]*|claude|gemini|bard|copilot|llama"
         r"|model|user|human|developer)")
_ROLE_LINE = re.compile(
    r"^[^\S\n]*(?:\*\*|__)?" + _ROLE + r"(?:[^\S\n]*\([^)\n]{0,40}\))?(?:\*\*|__)?[^\S\n]*:"
    r"(?:(?:\*\*|__)?[^\S\n]*(?P<alone>$)|.*$)", re.I | re.M)
_BLANK_LINE = re.compile(r"\n[^\S\n]*\n")

# Someone other than the user: "my friend", "the article I read", "ChatGPT", "he", "you
# (the assistant)". Not "I" or "we" ("the code I wrote to ..."), nor a capitalised
# function word taken for a name ("This tells us ...").
_SPEAKER = (r"(?:\b(?:my|his|her|their|our|your|a|an|this|that|the)(?: \w+){0,2} (?!i\b|we\b)\w+"
            r"|\b(?:he|she|they|it|you|someone|somebody|everyone|everybody|people)"
            r"|(?-i:\b(?!(?:I|This|That|These|Those|It|There|Here|What|Which|Who|How|Why"
            r"|And|But|So|Or|If|Then|The|A|An|My|Your|He|She|They|We|You)\b)"
            r"[A-Z][\w.-]*(?: [A-Z][\w.-]*)?))"
            r"(?:\s*\([^)\n]{0,40}\))?")
_SAID = (r"(?:said|says|say|wrote|writes|write|told|tells|tell|replied|replies|answered"
         r"|answers|posted|texted|messaged|tweeted|insisted|insists|explained|claimed|claims"
         r"|added|asked|asks|put it)")
_SAID_WORD = re.compile(r"\b" + _SAID + r"\b", re.I)  # found once, before _SAID_BEFORE
# Reported speech, with what was said after it: "told me (that/to) ...", "said that/to
# ...", "wrote: ...", "says, ...", "said "..."", "replied: ...".
_REPORTED = re.compile(
    _SPEAKER + r"\s+(?:told (?:me|us)\b|tells (?:me|us)\b"
    r"|(?:said|says|wrote|writes)(?:\s+(?:that|to)\b|\s*[:,]|\s+(?=[\"“”]))"
    r"|(?:replied|answered)(?:\s+that\b|\s*:|\s+(?=[\"“”])))", re.I)
_QUOTE = re.compile(r"[\"“](?:[^\"“”\n]|\n(?![^\S\n]*\n))+?[\"”]")
# The attribution before a quote: "He said ", "what my assistant said:", "ChatGPT told me:".
_SAID_BEFORE = re.compile(
    _SPEAKER + r"\s+" + _SAID + r"(?:\s+(?:me|us|him|her|them))?"
    r"(?:\s+(?:that|this|the following))?\s*[:,]?\s*$", re.I)
# ... and after it: ", my brother said", "said my brother".
_SAID_AFTER = re.compile(
    r"\s*,?\s*(?:" + _SPEAKER + r"\s+" + _SAID + r"|" + _SAID + r"\s+" + _SPEAKER + r")\b",
    re.I)
# Where reported words end: at the end of the sentence (. ! ? followed by space, a line
# break) or of the clause ("it says that CORS is supported, but I'm still getting errors").
_REPORT_END = re.compile(r"(?<=[.!?])\s+|\n|[,;]\s*(?=(?:but|and|so|yet)\s+i\b)", re.I)


# How far before and after a quote its attribution is looked for: "what my assistant
# said: " is near it. (Bounded, so that a line of thousands of quotes costs linear time.)
_NEAR = 200


def _line_start(text: str, pos: int) -> int:
    """Where the line of POS starts, looking back at most _NEAR characters."""
    floor = max(0, pos - _NEAR)
    return text.rfind("\n", floor, pos) + 1 or floor


def _attributed(text: str, start: int, end: int, said_at: list[int]) -> bool:
    """Is the quote text[start:end] attributed to someone other than the user? (SAID_AT:
    where TEXT has a verb of saying, sorted.)"""
    if not said_at:
        return False
    line = _line_start(text, start)
    before = text[line:start]
    if not before.strip() and line > 0 and text[line - 1] == "\n":
        before = text[_line_start(text, line - 1):line - 1]
        if not before.rstrip().endswith(":"):  # the line before, ending ":"
            before = ""
    said_before = _first_after(said_at, start - 2 * _NEAR - 1, start) < start
    if said_before and before.strip() and _SAID_BEFORE.search(before):
        return True
    return bool(_SAID_AFTER.match(text[end:end + _NEAR].split("\n", 1)[0]))


def _first_after(starts: list[int], pos: int, default: int) -> int:
    """The first of sorted STARTS at or after POS, else DEFAULT."""
    i = bisect.bisect_left(starts, pos)
    return starts[i] if i < len(starts) else default


def others_words(text: str) -> list[tuple[int, int]]:
    """The spans [start, end) of TEXT (one user turn) that are not the user's own words:
    sorted and disjoint (overlapping ones merged). Linear in TEXT but for the fences."""
    spans = list(fence_spans(text, 0, len(text)))
    spans += [m.span() for m in _QUOTED_LINE.finditer(text)]
    spans += [m.span() for m in _INDENTED_LINE.finditer(text)]
    spans += [m.span() for m in _QUOTE_ELEMENT.finditer(text)]
    blanks = [m.start() for m in _BLANK_LINE.finditer(text)]
    for m in _ROLE_LINE.finditer(text):
        if m.group("alone") is None:
            spans.append(m.span())
        else:
            spans.append((m.start(), _first_after(blanks, m.end(), len(text))))
    ends = [m.start() for m in _REPORT_END.finditer(text)]
    for m in _REPORTED.finditer(text):
        spans.append((m.start(), _first_after(ends, m.end(), len(text))))
    said_at = [m.start() for m in _SAID_WORD.finditer(text)]
    spans += [m.span() for m in _QUOTE.finditer(text) if _attributed(text, *m.span(), said_at)]
    merged: list[tuple[int, int]] = []
    for s, e in sorted(spans):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def overlaps(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    """Does [start, end) overlap any of SPANS (sorted, disjoint: :func:`others_words`)?
    (A standing statement is a sentence: any words of someone else's in it make it no rule
    of the user's.)"""
    i = bisect.bisect_left(spans, (end,))  # the spans that start before END
    return i > 0 and spans[i - 1][1] > start


def starts_in(spans: list[tuple[int, int]], pos: int) -> bool:
    """Is POS inside any of SPANS (sorted, disjoint)? (A stated fact is a clause: one that
    starts in the user's own words is the user's, "I checked the docs and it says that
    ...".)"""
    i = bisect.bisect_right(spans, (pos, float("inf")))  # the spans that start at or before POS
    return i > 0 and spans[i - 1][1] > pos


def in_others_words(text: str, start: int, end: int) -> bool:
    """Is any of text[start:end] in words of TEXT that are not the user's own
    (:func:`others_words`)?"""
    return overlaps(others_words(text), start, end)
