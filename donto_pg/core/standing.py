"""Standing statements: what a user asked once and expects applied every later time.

A *standing statement* is a sentence of a user turn that states an instruction
("Always include narrator details when I ask about audiobooks"), a preference
("I prefer positive reinforcement") or a constraint ("I'm allergic to nuts").
Unlike an episodic fact it is meant to hold for every later question, so
recall keeps it in a tier of its own (``sql/086-standing.sql``).

:func:`detect` is the rule-based detector (no LLM, no database): it splits a
user turn into sentences and keeps those with a standing marker. Each result
carries its character offsets in the text it was given, its kind, and a
*subject key*: the normalised words of what the statement is about (the
"when I ask about X" clause when there is one, else the statement's own
content words). Two statements of the same kind with the same subject key are
about the same thing, so the later one supersedes the earlier one (the
knowledge-update rule, applied by ``donto.standing``).

Pure Python, deterministic: the same text gives the same statements.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass

from donto_pg.core.voice import others_words, overlaps, own_clauses, starts_in

__all__ = ["KINDS", "MAX_CHARS", "RULES_VERSION", "Standing", "condition", "detect",
           "quote_not_the_users", "sentences", "subject_key"]

RULES_VERSION = "rules-v6"
KINDS = ("instruction", "preference", "constraint")
#: Sentences longer than this are not standing statements (a long sentence is a story).
MAX_CHARS = 400
_MIN_CHARS = 12

# BEAM's generator marker at the end of user turns (" ->-> 1,32").
_MARKER = re.compile(r"\s*->->\s*\d+\s*,\s*\d+\s*$")
# A sentence ends at . ! ? (and any closing quote) followed by space, or at a line break.
# (Testing for a space first only makes the search faster.)
_SENT_END = re.compile(r"(?=\s)(?:(?:(?<=[.!?])|(?<=[.!?][\"\u201d'\u2019)]))\s+|\n+)")
# A word that each standing statement holds: every pattern of _INSTRUCTION, _PREFERENCE
# and _CONSTRAINT needs one of these at a word start ("veg" of "vegan", "favo" of
# "favourite"); a sentence without any is not read. (The lookahead of first letters only
# makes the search faster.)
_CUE = re.compile(
    r"\b(?=[abdefghilmnoprstuvw])(?:always|never|whenever|from now on|going forward|future"
    r"|every time|each time|any ?time|i (?:ask|request|want|need|talk)|prefer|favo|dislike"
    r"|like|hate|stand|rather|fan of|love|enjoy|allergic|intolerant|veg|lactose|eat|drink|use"
    r"|afford|travel|work on|exceed|budget|limit|deadline|only have|more than|at most)", re.I)
# A list item's marker, which does not make its sentence any less a statement.
_LIST_MARKER = re.compile(r"^(?:[-*+\u2022]|\d{1,3}[.)])\s+")

_GENERAL = r"(?:always|never|from now on|going forward|in (?:the )?future|every time|each time"\
           r"|whenever|any ?time)"
_ASK = r"(?:when(?:ever)?|if|any ?time|each time|every time) i (?:ask|request|want|need|talk)"
_INSTRUCTION = [
    re.compile(r"^(?:(?:and|so|also|but|ok(?:ay)?|please)[, ]+)*(?:always|never)\b", re.I),
    re.compile(r"^(?:(?:and|so|also|but|please)[, ]+)*(?:from now on|going forward|in (?:the )?"
               r"future|whenever|every time|each time)\b", re.I),
    re.compile(r"\b(?:from now on|going forward)\b", re.I),
    re.compile(r"\b" + _ASK + r"\b", re.I),
    re.compile(r"\b(?:i want you to|i'd like you to|i would like you to|make sure (?:to|you)"
               r"|be sure to|remember to|don't ever|do not ever)\b.*\b" + _GENERAL + r"\b", re.I),
    re.compile(r"\b" + _GENERAL + r"\b.*\b(?:make sure|be sure|remember) to\b", re.I),
]
_PREFERENCE = re.compile(
    r"\b(?:i (?:really |much |generally |usually |definitely |strongly )?"
    r"(?:prefer|favou?r|dislike|hate|can't stand|don't like|do not like|would rather|'d rather)"
    r"|i'd (?:really |much )?(?:prefer|rather)|i would (?:really |much )?(?:prefer|rather)"
    r"|my (?:preference|preferred|favou?rite)|i(?:'m| am) (?:a big |a )?fan of"
    r"|i (?:really )?(?:like|love|enjoy) (?:it|them) (?:when|better)"
    r"|i (?:really |absolutely |just )?(?:love|enjoy) (?!doing\b|getting\b|hearing\b|seeing\b"
    r"|knowing\b|being\b|having\b)[a-z]+ing\b"
    r"|i like [^.?!]{1,60}\bbetter\b)", re.I)
_CONSTRAINT = re.compile(
    r"\b(?:i(?:'m| am) (?:allergic|intolerant|vegetarian|vegan|lactose)"
    r"|i (?:can't|cannot|can not|must not|mustn't|shouldn't|don't|do not) (?:eat|drink|use|afford"
    r"|travel|work on|exceed)"
    r"|my (?:budget|limit|deadline) is|i only have|no more than|not more than|at most)\b", re.I)
_QUESTION = re.compile(r"\?\s*$")
# A tag that asks for assent, not for an answer: "Always ..., okay?" is an instruction.
# (Not "right?" or "yeah?": those ask to confirm a fact.)
_TAG = re.compile(r",\s*(?:ok(?:ay)?|alright|all right|got it|understood|deal|sound good|"
                  r"is that ok(?:ay)?|is that clear)\s*\?\s*$", re.I)
_REQUEST = re.compile(r"\b(?:can|could|will|would) you\b|\bplease\b|\bwould you mind\b"
                      r"|\b(?:would|will) it be possible\b|\bis it possible\b", re.I)
# Where a clause of a long sentence ends: a comma before a conjunction or a question word,
# a semicolon, a question mark (a preference said in passing: "..., and I prefer simple,
# minimal dependencies, how can I ...?").
_CLAUSE_END = re.compile(
    r",\s*(?=(?:so|but|and|or|yet|how|what|which|where|when|why|who|can|could|would|will|"
    r"should|do|does|did|is|are|am|considering|while|since|because|though|although|if)\b)"
    r"|[;?]|\s+(?:so|but) (?:can|could|would|will) you\b", re.I)

_STOP = frozenset("""
a an the and or but so if then than that this these those of to in on at by for from with without
about as into over under up down out off is are was were be been being am do does did doing have
has had having i me my mine myself you your yours we our us it its they them their he him his she
her what which who whom whose when whenever where why how all any both each few more most other
some such no nor not only own same too very can will just should would could may might must
shall s t don't dont i'm im i'd id i've ive let's lets please also always never every time times
ask asking asked request want need like prefer preferred preference rather really make sure
remember give provide include use keep tell answer respond reply going forward future now later
one ones thing things something anything everything way ways
""".split())
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_ABOUT = re.compile(
    r"\b" + _ASK + r"(?: you)?(?: to)?(?: (?:about|for|regarding|on|with|to))?"
    r"\s+(?P<topic>[^,.;!?]+)", re.I)
_PREFER_OBJ = re.compile(
    r"\b(?:prefer|favou?r|rather|dislike|hate|like|love|enjoy|fan of|preference is"
    r"|preference for)\s+(?P<topic>[^,.;!?]+)", re.I)


# The condition of an instruction: "... when I ask about <questions about X>".
_CONDITION = re.compile(
    r"\bwhen(?:ever)?\s+(?:i|we)\s+(?:ask|am asking|inquire|talk|discuss)\s+(?:you\s+)?"
    r"(?:about|for|regarding|on)\s+(?P<topic>[^.?!,;]+)", re.I)


@dataclass(frozen=True)
class Standing:
    """One standing statement found in a text: [start, end) offsets into that text."""

    kind: str
    start: int
    end: int
    text: str
    subject: str


def sentences(text: str) -> Iterator[tuple[int, int]]:
    """Spans [start, end) of the sentences of TEXT, whitespace and BEAM's marker trimmed."""
    pos = 0
    for m in [*_SENT_END.finditer(text), None]:
        span = _trimmed(text, pos, m.start() if m else len(text))
        if span is not None:
            yield span
        if m:
            pos = m.end()


def _trimmed(text: str, pos: int, end: int) -> tuple[int, int] | None:
    """The sentence text[pos:end] (between two sentence ends) without its surrounding
    whitespace and BEAM's marker: its span, None when nothing is left."""
    seg = text[pos:end]
    marker = _MARKER.search(seg)
    if marker:
        seg = seg[:marker.start()]
    lead = len(seg) - len(seg.lstrip())
    seg = seg.strip()
    return (pos + lead, pos + lead + len(seg)) if seg else None


def _cued_sentences(text: str, cues: list[int]) -> Iterator[tuple[int, int]]:
    """The spans of those :func:`sentences` of TEXT that hold one of CUES (positions of
    :data:`_CUE`, sorted), in order: the only ones that can be standing statements. (A turn
    of millions of short lines without one is not split sentence by sentence.)"""
    breaks = [m.span() for m in _SENT_END.finditer(text)]
    last = -1
    for cue in cues:
        i = bisect.bisect_left(breaks, (cue,))  # a cue is a letter: never in a break
        if i == last:
            continue
        last = i
        span = _trimmed(text, breaks[i - 1][1] if i else 0,
                        breaks[i][0] if i < len(breaks) else len(text))
        if span is not None:
            yield span


def _stem(word: str) -> str:
    word = word.split("'")[0]
    for suffix in ("ations", "ation", "ings", "ing", "ies", "es", "s", "ed"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def subject_key(sentence: str, kind: str = "instruction") -> str:
    """What SENTENCE is about, as sorted distinct stems ("" when nothing is left).

    The topic of a "when I ask about X" clause wins; for preferences the object
    of "prefer X"; otherwise every content word of the sentence.
    """
    topic = None
    m = _ABOUT.search(sentence)
    if m:
        topic = m.group("topic")
    elif kind == "preference":
        m = _PREFER_OBJ.search(sentence)
        if m:
            topic = m.group("topic")
    words = _content(topic) if topic else []
    if not words:
        words = _content(sentence)
    return " ".join(sorted(set(words))[:12])


def _content(text: str) -> list[str]:
    return [_stem(w) for w in _WORD.findall(text.lower().replace("\u2019", "'"))
            if w not in _STOP and w.split("'")[0] not in _STOP and len(w) > 1]


def _kind(sentence: str) -> str | None:
    s = _TAG.sub(".", _LIST_MARKER.sub("", sentence.replace("\u2019", "'")))
    if any(p.search(s) for p in _INSTRUCTION):
        # "Should I always ...?" is a question about the user's own habits, not an order;
        # "what if I need a break?" asks about a case, it does not set a rule. A question
        # is an instruction only when it asks the assistant for something from then on
        # ("When I ask about X, can you always ...?").
        if _QUESTION.search(s) and not (re.search(_ASK, s, re.I) and _REQUEST.search(s)):
            return None
        return "instruction"
    if _PREFERENCE.search(s):
        return "preference"
    if _CONSTRAINT.search(s) and not _QUESTION.search(s):
        return "constraint"
    return None


def _said_in_passing(sentence: str) -> tuple[int, int] | None:
    """The span [start, end) in SENTENCE of a preference said in passing inside a sentence
    too long to be a standing statement ("I'm trying to ..., and I prefer step-by-step
    explanations with concrete examples, so can you help me ...?" in 450 characters): from
    its "I prefer" to the end of its clause; None when there is none. (A shorter sentence
    with a preference is one whole, as rules-v2 kept it.)"""
    m = _PREFERENCE.search(sentence.replace("\u2019", "'"))
    if m is None:
        return None
    end = _CLAUSE_END.search(sentence, m.end())
    stop = end.start() if end else len(sentence)
    clause = sentence[m.start():stop].rstrip(" ,.!")
    if not _MIN_CHARS <= len(clause) <= MAX_CHARS:
        return None
    return m.start(), m.start() + len(clause)


def detect(text: str) -> list[Standing]:
    """The standing statements of one user turn's TEXT, in order of appearance: sentences
    that read as an instruction, a preference or a constraint, and (from rules-v3) the
    clause of a preference said in passing in a longer sentence or a question; (from
    rules-v4) none in a code fence, a quoted line or someone else's reported words; (from
    rules-v5) none in any words of the turn that are not the user's own
    (:func:`donto_pg.core.voice.others_words`: also an indented or ``<quote>`` block, a
    role-labelled line, a quote attributed to someone, a named speaker's reported words),
    unless a clause of the user's own in it, set off from those words, reads as one
    (:func:`donto_pg.core.voice.own_clauses`: "The doctor told me to avoid sugar, so please
    never suggest desserts." is kept whole); (from rules-v6) none in a pasted mail to its
    end, not only its first paragraph, nor in a single-quoted passage attributed after it,
    and a capitalised "Always"/"Never" before a verb of saying is no speaker."""
    out: list[Standing] = []
    cues = [m.start() for m in _CUE.finditer(text)]
    if not cues:
        return out
    others = others_words(text)
    # A cue in others' words is in no clause of the user's (and others' words never end
    # inside a word): only a sentence with a cue of the user's can be read as one.
    cues = [c for c in cues if not starts_in(others, c)]
    if not cues:
        return out
    # The same sentence reads the same wherever it stands in the user's own words (a long
    # turn repeats many): read once.
    read: dict[str, Standing | None] = {}
    for start, end in _cued_sentences(text, cues):
        sent = text[start:end]
        if overlaps(others, start, end):
            kind = next((k for a, b in own_clauses(text, others, start, end)
                         if _MIN_CHARS <= len(sent) <= MAX_CHARS
                         and len(text[a:b]) >= _MIN_CHARS and (k := _kind(text[a:b]))), None)
            if kind is not None:
                out.append(Standing(kind, start, end, sent, subject_key(sent, kind)))
            continue
        if sent not in read:
            read[sent] = _statement(sent)
        found = read[sent]
        if found is not None:
            out.append(Standing(found.kind, start + found.start, start + found.end,
                                found.text, found.subject))
    return out


def _statement(sent: str) -> Standing | None:
    """The standing statement of one SENT of the user's own words, offsets in SENT: the
    whole sentence when it reads as one, else a preference said in passing in it (from
    rules-v3), else None."""
    kind = _kind(sent) if _MIN_CHARS <= len(sent) <= MAX_CHARS else None
    if kind is not None:
        return Standing(kind, 0, len(sent), sent, subject_key(sent, kind))
    span = _said_in_passing(sent)
    if span is None:
        return None
    clause = sent[span[0]:span[1]]
    return Standing("preference", span[0], span[1], clause, subject_key(clause, "preference"))


def quote_not_the_users(text: str, start: int, end: int) -> bool:
    """Is the quote text[start:end] of a user turn's TEXT, which a model took for a standing
    statement, not the user's own: any of it in words that are not the user's own
    (:func:`donto_pg.core.voice.others_words`), or in a sentence that holds some of them
    outside that sentence's clauses of the user's own (:func:`own_clauses`)? The sentence
    rule of the rule detector (rules-v5): "When I ask about recipes" of "When I ask about
    recipes, the article I read says to use imperial units." is no rule of the user's,
    "please never suggest desserts" of "The doctor told me to avoid sugar, so please never
    suggest desserts." is."""
    others = others_words(text)
    if overlaps(others, start, end):
        return True
    for s, e in sentences(text):
        if s < end and start < e and overlaps(others, s, e):
            a, b = max(start, s), min(end, e)
            if not any(x <= a and b <= y for x, y in own_clauses(text, others, s, e)):
                return True
    return False


def condition(sentence: str) -> str | None:
    """The questions SENTENCE applies to, when it says so: the X of "... when I ask
    (you) about/for X" ("scheduling details" in "Always format dates as MM/DD/YYYY when
    I ask about scheduling details."), up to the end of its clause; None otherwise.

    Recall's standing slots match a question against it as well as against the whole
    statement (``donto._recall_standing``): the directive ("format dates as ...") says
    how to answer, the condition says which questions it is for.
    """
    m = _CONDITION.search(sentence or "")
    topic = m.group("topic").strip() if m else ""
    return topic or None
