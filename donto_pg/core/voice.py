"""Whose words: the spans of a user turn that are not the user's own.

A user turn holds more than what the user says: pasted mail, code, a transcript, what
someone else said. Both rule-based readers of user turns skip those spans, so neither
takes them for the user's: the standing-statement detector (:mod:`donto_pg.core.standing`,
from rules-v5) and the offline baseline extractor (:mod:`donto_pg.core.rule_extractor`).

:func:`others_words` gives the spans [start, end) of TEXT that are someone else's:

* a code fence (:func:`donto_pg.core.fences.fence_spans`);
* a quoted line (``> ...``, ``＞ ...``, after any whitespace) and an indented line (four
  spaces or a tab: a pasted mail or code block), unless it is a nested list item (its
  first word a list marker: ``-``, ``*``, ``+``, ``•``, ``1.``, ``1)``);
* a ``<quote>`` or ``<blockquote>`` element (to the end of the text when left open);
* a labelled block, to the end of the line, or, when the label ends its line, the next
  paragraph (to the next blank line): a role label that starts a line (``Assistant:``,
  ``SYSTEM:``, ``ChatGPT:``, ``User:`` ... of a pasted transcript), someone else's words
  after a colon ("Mr. Smith wrote: ...", "The email from HR reads: ...", "He told me:
  ..."); a pasted mail: after a line that ends with "email:", "mail:", "message:",
  "letter:" or "memo:" ("My boss's email:"; not when an e-mail address alone in its
  paragraph follows: "Please always sign off with my email:" and "jo@example.com"), or
  after a block of two or more mail headers (``From:``, ``To:``, ``Subject:`` ...), to the
  end of the text, or (from rules-v6) to where the user's words resume: the end of the
  paragraph of the mail's closing line ("Best regards,", "Thanks,", "--" ...), or a
  paragraph that turns back to the assistant ("What do you think?", "How should I reply
  to him?", a question about "this email" or "the message above");
* reported speech: someone other than the user and what they said, from the speaker to
  the end of the sentence, or to where the user resumes (:data:`_RESUME`: "...,
  but I ...", "..., so please ...") ("My friend told me that ...", "ChatGPT told me to
  ...", "the article says, ..."); not after "the way", "as", "like" or "how" ("Always
  reply the way my mom says, short and kind.": the user's words about what she says);
* a quote (double, or single: 'I live in Paris.') right after someone's verb of saying,
  from the speaker to the closing quote ("He said "..."", "My boss said '...'", "what my
  assistant said:" and the quote on the next line);
* a quoted passage (double or, from rules-v6, single: "'...,' my brother said.")
  attributed to someone after it: a comma (inside the quote or after it), then the
  speaker and the verb ending the clause (""...," my brother said."), or the verb first
  (""..." said my brother"). A capitalised adverb is no speaker ("Never say 'utilize'").

The user's own words about someone else stay the user's: "Always do what my doctor
says." (no words of the doctor's follow), "From now on, always answer in German." A
quoted rule the user adopts without naming another speaker ("Please follow this rule:
"Always cite sources."") is the user's too: nothing says it is anyone else's; and so is
a quote the words after it do not attribute ("Always recommend books like "Dune" that
people say are classics.", "write "colour" not "color", my editor insists on ...").

:func:`own_clauses` gives the clauses of a sentence that are the user's although others'
words interrupt it ("The doctor told me to avoid sugar, so please never suggest
desserts.").

Pure Python, deterministic, linear in the text (but for the fences).
"""

from __future__ import annotations

import bisect
import re

from donto_pg.core.fences import fence_spans

__all__ = ["others_words", "overlaps", "own_clauses", "starts_in"]

_QUOTED_LINE = re.compile(r"^[^\S\n]*[>＞].*$", re.M)
_INDENTED_LINE = re.compile(
    r"^(?: {4}|\t)(?![^\S\n]*(?:[-*+•]|\d{1,3}[.)])[^\S\n])[^\n]*\S[^\n]*$", re.M)
_QUOTE_ELEMENT = re.compile(r"<(blockquote|quote)\b[^>]*>.*?(?:</\1\s*>|\Z)", re.I | re.S)
_ROLE = (r"(?:system|assistant|ai|bot|chat ?gpt|gpt[-\w.]*|claude|gemini|bard|copilot|llama"
         r"|model|user|human|developer)")
_ROLE_LINE = re.compile(
    r"^[^\S\n]*(?:\*\*|__)?" + _ROLE + r"(?:[^\S\n]*\([^)\n]{0,40}\))?(?:\*\*|__)?[^\S\n]*:"
    r"(?:\*\*|__)?", re.I | re.M)
# A line that introduces a pasted mail ("My boss's email:", "the message I got from HR:"),
# and a block of mail headers.
_MAIL_INTRO = re.compile(r"\b(?:e-?mail|mail|message|letter|memo)\b[^\n:]{0,40}:[^\S\n]*$",
                         re.I | re.M)
_MAIL_HEADERS = re.compile(
    r"(?:^[^\S\n]*(?:from|to|cc|bcc|subject|date|sent|reply-to)[^\S\n]*:[^\n]*(?:\n|\Z)){2,}",
    re.I | re.M)
# A mail's body that is one e-mail address alone in its paragraph: the line before it names
# an address ("Please always sign off with my email:" and "jo@example.com"), not a mail.
_ADDRESS_PARAGRAPH = re.compile(
    r"[^\S\n]*<?[\w.+-]+@[\w-]+(?:\.[\w-]+)+>?[^\S\n]*(?:\n[^\S\n]*(?:\n|\Z)|\Z)")
# Where the user's own words resume after a pasted mail (rules-v6): after the paragraph of
# its closing line ("Best regards," "Thanks," "--" ...), or at a paragraph that turns back
# to the assistant: a short question on a line of its own ("What do you think?", "Any
# advice?", "How should I reply to him?") or a question about the mail ("Can you summarize
# this email?", "Is the message above rude?").
_CLOSING_LINE = re.compile(
    r"^[^\S\n]*(?:(?:best|kind|warm|warmest)[^\S\n]+(?:regards|wishes)|best|regards|warmly"
    r"|(?:many[^\S\n]+)?thanks(?:[^\S\n]+again)?|thank[^\S\n]+you|cheers|sincerely"
    r"|yours(?:[^\S\n]+(?:truly|sincerely|faithfully))?|all[^\S\n]+the[^\S\n]+best"
    r"|take[^\S\n]+care|respectfully|--)[^\S\n]*[,.!]?[^\S\n]*$", re.I | re.M)
_MAIL = r"(?:e-?mail|mail|message|letter|memo)"
_IT = r"(?:it|this|that|him|her|them|(?:this|that|the)[^\S\n]+" + _MAIL + ")"
_TURN_BACK = re.compile(
    r"\n[^\S\n]*\n[^\S\n]*(?=(?:(?:so|now|ok(?:ay)?|anyway|well),?[^\S\n]+)?(?:what do you"
    r" think(?: (?:of|about) " + _IT + r")?|thoughts|any (?:advice|thoughts|ideas|suggestions)"
    r"|how (?:should|do|would|can) i (?:reply|respond|answer)(?: to " + _IT + r")?"
    r"|what should i (?:say|reply|write|do)(?: now)?|(?:can|could) you help(?: me)?"
    r"(?: (?:reply|respond|answer)(?: to " + _IT + r")?)?)[^\S\n]*[?.!]*[^\S\n]*(?:\n|\Z)"
    r"|[^\n]*\b(?:(?:this|that)[^\S\n]+" + _MAIL + r"|" + _MAIL + r"[^\S\n]+above)\b[^\n]*\?"
    r"[^\S\n]*(?:\n|\Z))", re.I)
_BLANK_LINE = re.compile(r"\n[^\S\n]*\n")
_NEWLINE = re.compile(r"\n")
_NON_SPACE = re.compile(r"\S")

# Someone other than the user: "my friend", "the article I read", "ChatGPT", "he", "you
# (the assistant)". Not "I" or "we" ("the code I wrote to ..."), nor a capitalised
# function word taken for a name ("This tells us ...").
_SPEAKER = (r"(?:\b(?:my|his|her|their|our|your|a|an|this|that|the)(?: \w+){0,2} (?!i\b|we\b)\w+"
            r"|\b(?:he|she|they|it|you|someone|somebody|everyone|everybody|people)"
            r"|(?-i:\b(?!(?:I|This|That|These|Those|It|There|Here|What|Which|Who|How|Why"
            r"|And|But|So|Or|If|Then|The|A|An|My|Your|He|She|They|We|You|Always|Never|Please"
            r"|Just|Also|Only|Simply|Kindly|Now|Again|Instead|Sometimes|Usually|Often|Do)\b)"
            r"[A-Z][\w.-]*(?: [A-Z][\w.-]*)?))"
            r"(?:\s*\([^)\n]{0,40}\))?")
_SAID = (r"(?:said|says|say|wrote|writes|write|told|tells|tell|replied|replies|answered"
         r"|answers|posted|texted|messaged|tweeted|insisted|insists|explained|claimed|claims"
         r"|added|asked|asks|put it)")
_OBJECT = r"(?:\s+(?:to\s+)?(?:me|us|him|her|them))?"
# Where the user resumes after someone else's words in the same sentence: a comma or
# semicolon, then "but/and/so/yet" and "I" or "please" (", so please never ...").
_RESUME = r"[,;][^\S\n]*(?:but|and|so|yet)\s+(?:i|please)\b"
_RESUMES = re.compile(_RESUME, re.I)
# A verb of saying (or "reads"): where to look for an attribution (see _ATTRIBUTION).
# (The lookahead of first letters only makes the search faster.)
_SAYING = re.compile(r"\b(?=[aceimprstw])(?:" + _SAID + r"|reads|read)\b", re.I)
# Someone and a verb of saying, with what they said after it (which group matched tells
# where their words end): a quote ("He said "..."", "what my assistant said:" and the
# quote on the next line), words after a colon ("Mr. Smith wrote: ...", "The email from HR
# reads: ..."), reported words ("told me (that/to) ...", "said that/to ...", "says, ...").
# (Every speaker starts with a word character after a word boundary: testing that first
# makes the search twice as fast.)
_ATTRIBUTION = re.compile(
    r"\b(?=\w)(?<!\bthe way )(?<!\bas )(?<!\blike )(?<!\bhow )(?!the way\b)" + _SPEAKER + r"\s+(?:"
    r"(?P<quote>" + _SAID + _OBJECT + r"(?:\s+(?:that|this|the following))?"
    r"[^\S\n]*(?:[:,][^\S\n]*|:[^\S\n]*\n[^\S\n]*)?(?=[\"“'‘]))"
    r"|(?P<label>(?:(?:told|tells)\s+(?:me|us)|said|says|wrote|writes|replied|answered|reads"
    r"|read)[^\S\n]*:)"
    r"|(?:told|tells)\s+(?:me|us)\b|(?:said|says|wrote|writes)(?:\s+(?:that|to)\b|[^\S\n]*,)"
    r"|(?:replied|answered)\s+that\b)", re.I)
# How far before its verb a speaker starts, and how far after it what they said starts.
_SPEAKER_REACH, _VERB_REACH = 120, 80
_QUOTE = re.compile(r"[\"“](?:[^\"“”\n]|\n(?![^\S\n]*\n))+?[\"”]")
# Where a single quote closes: not an apostrophe ("I'm", "don’t").
_SINGLE_CLOSE = re.compile(r"(?<=\S)['’](?!\w)")
# A single-quoted passage in a paragraph line: it opens after no word character and closes
# at the first single quote that is not an apostrophe inside a word ('Don't ever ...,').
_SINGLE_QUOTE = re.compile(
    r"(?<![\w'’‘])['‘](?=[^\s'’])(?:[^\n'‘’]|(?<=\w)['’](?=\w))*+(?<=\S)['’](?!\w)")
# The attribution after a double quote: ", my brother said.", ", he told me.", "said my
# brother".
_SAID_AFTER = re.compile(
    r"[^\S\n]*(?:(?P<comma>,)[^\S\n]*)?(?:(?P<speaker_first>" + _SPEAKER + r"[^\S\n]+" + _SAID
    + _OBJECT + r"(?=[^\S\n]*(?:[.,;:!?]|$)))|" + _SAID + r"[^\S\n]+" + _SPEAKER + r")\b",
    re.I | re.M)
# Where reported words end: at the end of the sentence (. ! ? and any closing quote, then
# space), a line break, or where the user resumes ("it says that CORS is supported, but I'm
# still getting errors").
_REPORT_END = re.compile(r"[.!?][\"”'’)]*(?=\s|\Z)|(?=\n)|(?=" + _RESUME + ")", re.I)


def _first_after(starts: list[int], pos: int, default: int) -> int:
    """The first of sorted STARTS at or after POS, else DEFAULT."""
    i = bisect.bisect_left(starts, pos)
    return starts[i] if i < len(starts) else default


class _Next:
    """Where the first match of PATTERN in TEXT at or after a position starts (or ends, with
    END), else the text's end: searched when asked, from the position (a list of every
    match would hold an item per line of a turn of millions of lines). Asked in increasing
    order, each character is searched once. (With END, a match must not span a position
    asked: then the first match found from it is the first one of the whole text ending at
    or after it.)"""

    def __init__(self, pattern: re.Pattern[str], text: str, end: bool = False) -> None:
        self.pattern, self.text, self.end = pattern, text, end
        self.asked = self.found = -1

    def __call__(self, pos: int) -> int:
        if not self.asked <= pos <= self.found:
            m = self.pattern.search(self.text, pos)
            self.asked = pos
            self.found = len(self.text) if m is None else m.end() if self.end else m.start()
        return self.found


def _near_verbs(text: str) -> list[tuple[int, int]]:
    """The stretches of TEXT an attribution can be in: around its verbs of saying, merged
    (so each character is searched once)."""
    out: list[tuple[int, int]] = []
    for m in _SAYING.finditer(text):
        a, b = max(0, m.start() - _SPEAKER_REACH), m.end() + _VERB_REACH
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def others_words(text: str) -> list[tuple[int, int]]:
    """The spans [start, end) of TEXT (one user turn) that are not the user's own words:
    sorted and disjoint (overlapping ones merged). Linear in TEXT but for the fences."""
    n = len(text)
    blanks = [m.start() for m in _BLANK_LINE.finditer(text)]
    newline = _Next(_NEWLINE, text)

    def block_end(pos: int) -> int:
        """The end of a labelled block whose label ends at POS: the end of its line, or
        when the label ends the line, of the next paragraph (unless that starts with lines
        already marked: "Here is the mail:" and "> ..." lines)."""
        eol = newline(pos)
        body = _NON_SPACE.search(text, pos)
        if body is None:
            return n
        if body.start() < eol:
            return eol
        line = text.rfind("\n", eol, body.start()) + 1
        return pos if line in marked else _first_after(blanks, body.start(), n)

    spans = list(fence_spans(text, 0, n))
    spans += [m.span() for m in _QUOTED_LINE.finditer(text)]
    spans += [m.span() for m in _INDENTED_LINE.finditer(text)]
    spans += [m.span() for m in _QUOTE_ELEMENT.finditer(text)]
    marked = {s for s, _ in spans}
    spans += [(m.start(), block_end(m.end())) for m in _ROLE_LINE.finditer(text)]
    closings = [m.end() for m in _CLOSING_LINE.finditer(text)]
    turn_backs = [m.start() for m in _TURN_BACK.finditer(text)]

    def mail_end(pos: int, intro: bool) -> int | None:
        """The end of a pasted mail whose intro line or headers end at POS: the end of the
        text, or where the user's own words resume (:data:`_TURN_BACK`, after the paragraph
        of a :data:`_CLOSING_LINE`); POS when its body starts with lines already marked;
        None when an intro names an address (:data:`_ADDRESS_PARAGRAPH`)."""
        body = _NON_SPACE.search(text, pos)
        if body is None:
            return n
        line = text.rfind("\n", pos, body.start()) + 1 or pos
        if line in marked:
            return pos
        if intro and _ADDRESS_PARAGRAPH.match(text, line):
            return None
        closing = _first_after(closings, line, n)
        return min(_first_after(blanks, closing, n) if closing < n else n,
                   _first_after(turn_backs, line, n))

    for intro, found in ((True, _MAIL_INTRO), (False, _MAIL_HEADERS)):
        for m in found.finditer(text):
            end = mail_end(m.end(), intro)
            if end is not None:
                spans.append((m.start(), end))

    quotes = {m.start(): m.end() for m in _QUOTE.finditer(text)}
    single_ends = [m.end() for m in _SINGLE_CLOSE.finditer(text)]
    # (An attribution ends in a letter, a space, ':' or ',': never inside a report's end.)
    report_end = _Next(_REPORT_END, text, end=True)
    quoted = set()
    for a, b in _near_verbs(text):
        for m in _ATTRIBUTION.finditer(text, a, min(b, n)):
            if m.group("quote") is not None:
                o = m.end()
                if text[o] in "\"“":
                    close = quotes.get(o)
                else:  # a single quote: to its closing quote, in the paragraph
                    close = _first_after(single_ends, o + 2, n + 1)
                    if close > _first_after(blanks, o, n):
                        close = None
                if close is not None:
                    quoted.add(o)
                    spans.append((m.start(), close))
                    continue
            if m.group("label") is not None:
                spans.append((m.start(), block_end(m.end())))
            else:
                spans.append((m.start(), report_end(m.end())))
    singles = {m.start(): m.end() for m in _SINGLE_QUOTE.finditer(text)}
    for start, end in [*quotes.items(), *singles.items()]:
        if start in quoted:
            continue
        after = _SAID_AFTER.match(text, end)
        if after and (after.group("speaker_first") is None or after.group("comma")
                      or text[end - 2] == ","):
            spans.append((start, end))
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


def own_clauses(text: str, spans: list[tuple[int, int]], start: int,
                end: int) -> list[tuple[int, int]]:
    """The user's own clauses of the sentence text[start:end] that words of someone else's
    (SPANS: :func:`others_words`) interrupt: each part of it outside SPANS that a clause
    boundary sets off from them, a ";" ending it before them ("Always answer briefly; my
    manager told me I ramble ...") or the user resuming after them (:data:`_RESUME`: "The
    doctor told me to avoid sugar, so please never suggest desserts."), without that
    punctuation. A part set off by a comma only is not a clause of its own ("When I ask
    about recipes, the article I read says to use imperial units.")."""
    i = bisect.bisect_right(spans, (start, float("inf")))
    i = i - 1 if i > 0 and spans[i - 1][1] > start else i
    out = []
    pos = start
    while pos < end:
        nxt = spans[i] if i < len(spans) and spans[i][0] < end else None
        stop = nxt[0] if nxt else end
        if stop > pos:
            part = text[pos:stop]
            after_others = pos > start or (i > 0 and spans[i - 1][1] == start)
            resumes = after_others and _RESUMES.match(text, pos)
            if resumes or (nxt and part.rstrip().endswith(";")):
                lead = len(part) - len(part.lstrip(" \t,;"))
                part = part.rstrip(" \t;")
                if len(part) > lead:
                    out.append((pos + lead, pos + len(part)))
        if nxt is None:
            break
        pos, i = nxt[1], i + 1
    return out

