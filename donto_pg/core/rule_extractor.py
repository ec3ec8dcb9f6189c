"""A deterministic, rule-based offline extractor (``donto-baseline-v3``).

It takes the SAME rendered prompt a model gets (see :mod:`donto_pg.core.render`),
parses the JSON-lines SOURCE section back out of it (the CONTEXT section is
ignored) and returns a JSON array text in the output schema::

    [{"subject": str, "predicate": str, "object": str,
      "quote": str|null, "turn": int|null, "hypothesis": bool}]

Rules:

* **Dialogue** -- first-person statements in *user* utterances ("I moved to
  Berlin in March", "I'm using Flask", "I've been learning Rust", "I prefer
  ...", "my first sprint ends on March 29"): subject ``user``, predicate a
  short third-person verb phrase ("moved to", "is using", "has been
  learning", "prefers", "first sprint ends on"), object the rest of the
  clause, quote the clause copied verbatim from the text, ``hypothesis``
  false. Questions and requests state nothing and are skipped, and so do words
  of a user turn that are not the user's own (a quoted line of a pasted mail, a
  role-labelled line, someone else's reported words: :mod:`donto_pg.core.voice`,
  shared with the standing detector). Assistant
  first-person sentences ("I'd recommend...", "I'm sorry") are boilerplate
  rather than memory, so assistant prose yields no facts.
* **Code** (fenced blocks, or definition lines in any utterance) -- type-facts
  as hypotheses with quote null: ``is_function`` / ``is_class`` /
  ``is_table`` / ``is_view`` (subject the name, object the language),
  ``is_method_of`` (object the class), ``has_signature``, ``inherits_from``,
  ``calls`` / ``uses`` (functions and classes defined in the same snippet),
  and, with subject ``code``, ``uses_library`` and ``written_in``.

Nothing in the text is ever obeyed: instructions, questions and fake markers
are just text that either states a fact or does not.
"""

from __future__ import annotations

import heapq
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from donto_pg.core.render import BEGIN_SOURCE, END_SOURCE
from donto_pg.core.voice import others_words, starts_in

__all__ = [
    "BASELINE_MODEL",
    "Utterance",
    "code_facts",
    "dialogue_facts",
    "extract",
    "extract_from_prompt",
    "parse_source",
]

#: The extractor's version, the model name its runs and claims record. A change of what it
#: extracts is a new version, so a run (keyed by its models) never mixes claims of two:
#: v2 skips words of a user turn that are not the user's own (quoted, role-labelled,
#: reported), which v1 took for facts about the user; v3 skips what rules-v6 adds to
#: them (a pasted mail to its end, a single-quoted passage attributed after it).
BASELINE_MODEL = "donto-baseline-v3"


@dataclass(frozen=True)
class Utterance:
    """One SOURCE line of a rendered prompt."""

    turn: int | None
    role: str
    date: str | None
    text: str


def parse_source(prompt: str) -> list[Utterance]:
    """Read the utterances back out of a rendered prompt's SOURCE section.

    Only lines between the ``BEGIN SOURCE`` and ``END SOURCE`` marker lines
    are read (so the CONTEXT section never is). Raises ``ValueError`` when the
    prompt has no SOURCE section or a SOURCE line is not an utterance object.
    """
    lines = prompt.split("\n")
    try:
        start = lines.index(BEGIN_SOURCE)
        end = lines.index(END_SOURCE, start + 1)
    except ValueError:
        raise ValueError("prompt has no BEGIN/END SOURCE section") from None
    out: list[Utterance] = []
    for line in lines[start + 1 : end]:
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"SOURCE line is not JSON: {exc}") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
            raise ValueError("SOURCE line is not an utterance object")
        turn = obj.get("turn")
        out.append(
            Utterance(
                turn=turn if isinstance(turn, int) and not isinstance(turn, bool) else None,
                role=str(obj.get("role") or ""),
                date=obj.get("date") if isinstance(obj.get("date"), str) else None,
                text=obj["text"],
            )
        )
    return out


# --- splitting text into code and prose --------------------------------------

_FENCE_OPEN = re.compile(r"^[ \t]*(```|~~~)[ \t]*([A-Za-z0-9_+#.-]*)[^\n]*$")

_LANG_ALIASES = {
    "py": "python",
    "python3": "python",
    "js": "javascript",
    "jsx": "javascript",
    "mjs": "javascript",
    "node": "javascript",
    "ts": "typescript",
    "tsx": "typescript",
    "sh": "shell",
    "bash": "shell",
    "zsh": "shell",
    "console": "shell",
    "postgres": "sql",
    "postgresql": "sql",
    "psql": "sql",
    "plpgsql": "sql",
    "rs": "rust",
    "golang": "go",
    "c++": "cpp",
    "cs": "csharp",
    "c#": "csharp",
    "rb": "ruby",
    "yml": "yaml",
    "kt": "kotlin",
}
_NOT_LANGUAGES = {"", "text", "txt", "plain", "plaintext", "output", "none"}


def _norm_lang(tag: str) -> str | None:
    tag = tag.strip().lower()
    if tag in _NOT_LANGUAGES:
        return None
    return _LANG_ALIASES.get(tag, tag)


@dataclass
class _Segment:
    code: bool
    lang: str | None  # fence tag, normalised; None when unknown
    lines: list[str]


def _segments(text: str) -> list[_Segment]:
    """Split text into prose and fenced-code segments (an unclosed fence runs to the end)."""
    segs: list[_Segment] = []
    current = _Segment(code=False, lang=None, lines=[])
    fence: str | None = None
    for line in text.split("\n"):
        m = _FENCE_OPEN.match(line)
        if fence is None and m:
            segs.append(current)
            fence = m.group(1)
            current = _Segment(code=True, lang=_norm_lang(m.group(2)), lines=[])
        elif fence is not None and line.strip().startswith(fence):
            segs.append(current)
            fence = None
            current = _Segment(code=False, lang=None, lines=[])
        else:
            current.lines.append(line)
    segs.append(current)
    return [s for s in segs if s.lines or s.code]


# --- code facts ---------------------------------------------------------------


@dataclass(frozen=True)
class _Def:
    name: str
    kind: str  # function | class | table | view
    lang: str
    signature: str | None
    bases: tuple[str, ...]
    line: int
    indent: int


_PY_DEF = re.compile(r"^(\s*)(?:async\s+)?def\s+([A-Za-z_]\w*)\s*(\([^)]*\))\s*(->\s*[^:]+)?:")
_PY_CLASS = re.compile(r"^(\s*)class\s+([A-Za-z_]\w*)\s*(?:\(([^)]*)\))?\s*:")
_JS_FUNC = re.compile(
    r"^(\s*)(?:export\s+)?(?:default\s+)?(?:async\s+)?function\s*\*?\s*([A-Za-z_$][\w$]*)\s*"
    r"(\([^)]*\))"
)
_JS_ARROW = re.compile(
    r"^(\s*)(?:export\s+)?(?:const|let|var)\s+([A-Za-z_$][\w$]*)\s*(?::[^=]+)?=\s*"
    r"(?:async\s+)?(\([^)]*\)|[A-Za-z_$][\w$]*)\s*(?::[^=]+)?=>"
)
_JS_CLASS = re.compile(
    r"^(\s*)(?:export\s+)?(?:default\s+)?(?:abstract\s+)?class\s+([A-Za-z_$][\w$]*)"
    r"(?:\s*<[^>]*>)?(?:\s+extends\s+([A-Za-z_$][\w$.]*))?[^{:]*\{"
)
_GO_FUNC = re.compile(r"^(\s*)func\s+(?:\([^)]*\)\s*)?([A-Za-z_]\w*)\s*(\([^)]*\))")
_RS_FN = re.compile(
    r"^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?fn\s+([A-Za-z_]\w*)\s*(?:<[^>]*>)?\s*(\([^)]*\))"
)
_RS_STRUCT = re.compile(r"^(\s*)(?:pub\s+)?(?:struct|enum|trait)\s+([A-Za-z_]\w*)")
_SQL_TABLE = re.compile(
    r"^(\s*)create\s+(?:or\s+replace\s+)?(?:(?:temp|temporary|unlogged)\s+)?"
    r"(table|view|materialized\s+view|function|procedure)\s+(?:if\s+not\s+exists\s+)?"
    r"([A-Za-z_][\w.\"]*)",
    re.IGNORECASE,
)
_PY_MODULE = r"[A-Za-z_][\w.]*(?:\s+as\s+\w+)?"
_PY_IMPORT = re.compile(rf"^\s*import\s+({_PY_MODULE}(?:\s*,\s*{_PY_MODULE})*)\s*(?:#.*)?$")
_PY_FROM = re.compile(r"^\s*from\s+([A-Za-z_][\w.]*)\s+import\s+\S")
_JS_IMPORT = re.compile(r"""^\s*import\s+(?:[^'"]*?\s+from\s+)?['"]([^'"]+)['"]""")
_JS_REQUIRE = re.compile(r"""\brequire\(\s*['"]([^'"]+)['"]\s*\)""")
_CALL = re.compile(r"(?<![\w.$])([A-Za-z_$][\w$]*)\s*\(")


_WS = re.compile(r"\s+")


def _flat(text: str) -> str:
    return _WS.sub(" ", text).strip()


def _match_def(line: str, idx: int, lang_hint: str | None) -> _Def | None:
    """Recognise a definition line; the language comes from the fence tag, else the syntax."""

    def make(
        m: re.Match[str], kind: str, default_lang: str, sig: str | None = None,
        bases: tuple[str, ...] = (),
    ) -> _Def:
        lang = "sql" if default_lang == "sql" else (lang_hint or default_lang)
        return _Def(m.group(2), kind, lang, sig, bases, idx, len(m.group(1)))

    if m := _PY_DEF.match(line):
        sig = f"{m.group(2)}{_flat(m.group(3))}"
        if m.group(4):
            sig += " " + _flat(m.group(4))
        return make(m, "function", "python", sig)
    if m := _PY_CLASS.match(line):
        bases = tuple(
            b.strip() for b in (m.group(3) or "").split(",") if b.strip() and "=" not in b
        )
        return make(m, "class", "python", bases=bases)
    for pattern in (_JS_FUNC, _JS_ARROW):
        if m := pattern.match(line):
            params = m.group(3) if m.group(3).startswith("(") else f"({m.group(3)})"
            default = "typescript" if ":" in params else "javascript"
            return make(m, "function", default, f"{m.group(2)}{_flat(params)}")
    if m := _JS_CLASS.match(line):
        return make(m, "class", "javascript", bases=(m.group(3),) if m.group(3) else ())
    if m := _GO_FUNC.match(line):
        return make(m, "function", "go", f"{m.group(2)}{_flat(m.group(3))}")
    if m := _RS_FN.match(line):
        return make(m, "function", "rust", f"{m.group(2)}{_flat(m.group(3))}")
    if (m := _RS_STRUCT.match(line)) and lang_hint in (None, "rust"):
        return make(m, "class", "rust")
    if m := _SQL_TABLE.match(line):
        what = _flat(m.group(2).lower())
        kind = {"table": "table", "function": "function", "procedure": "function"}.get(
            what, "view"
        )
        return _Def(m.group(3).replace('"', ""), kind, "sql", None, (), idx, len(m.group(1)))
    return None


def _body(lines: list[str], d: _Def) -> list[str]:
    """A definition's body: by indentation (Python), else by matching braces."""
    first = lines[d.line]
    if d.lang == "python" or (first.rstrip().endswith(":") and "{" not in first):
        body: list[str] = []
        for line in lines[d.line + 1 :]:
            if line.strip() and len(line) - len(line.lstrip()) <= d.indent:
                break
            body.append(line)
        return body
    if "{" not in first:
        return []
    body = [first.split("{", 1)[1]]
    depth = first.count("{") - first.count("}")
    for line in lines[d.line + 1 :]:
        if depth <= 0:
            break
        body.append(line)
        depth += line.count("{") - line.count("}")
    return body


def _imports(line: str) -> list[tuple[str, str]]:
    """(library, language) pairs imported by one line."""
    found: list[tuple[str, str]] = []
    if m := _PY_FROM.match(line):
        if not m.group(1).startswith("."):
            found.append((m.group(1).split(".")[0], "python"))
    elif m := _PY_IMPORT.match(line):
        for part in m.group(1).split(","):
            found.append((part.split()[0].split(".")[0], "python"))
    elif m := _JS_IMPORT.match(line):
        found.append((m.group(1), "javascript"))
    for m in _JS_REQUIRE.finditer(line):
        found.append((m.group(1), "javascript"))
    return [(lib, lang) for lib, lang in found if lib and not lib.startswith((".", "/"))]


def _hyp(subject: str, predicate: str, obj: str, turn: int | None) -> dict[str, Any]:
    return {
        "subject": subject,
        "predicate": predicate,
        "object": obj,
        "quote": None,
        "turn": turn,
        "hypothesis": True,
    }


def code_facts(text: str, turn: int | None) -> list[dict[str, Any]]:
    """Type-facts (hypotheses, quote null) from the code in one utterance's text.

    Fenced blocks are scanned in full; outside fences only unambiguous
    definition and import lines count.
    """
    facts: list[dict[str, Any]] = []
    languages: list[str] = []
    for seg in _segments(text):
        if seg.code and seg.lang:
            languages.append(seg.lang)
        defs: list[_Def] = []
        for idx, line in enumerate(seg.lines):
            d = _match_def(line, idx, seg.lang if seg.code else None)
            if d is not None:
                defs.append(d)
            for lib, lang in _imports(line):
                if seg.code or lang == "python":
                    facts.append(_hyp("code", "uses_library", lib, turn))
                    languages.append(seg.lang or lang)
        classes = [d for d in defs if d.kind == "class"]
        functions = {d.name for d in defs if d.kind == "function"}
        class_names = {d.name for d in classes}
        for d in defs:
            languages.append(d.lang)
            owner = next(
                (
                    c
                    for c in reversed(classes)
                    if c.line < d.line and c.indent < d.indent
                    and d.line - c.line <= len(_body(seg.lines, c))
                ),
                None,
            )
            if d.kind == "function" and owner is not None:
                facts.append(_hyp(d.name, "is_method_of", owner.name, turn))
            else:
                facts.append(_hyp(d.name, f"is_{d.kind}", d.lang, turn))
            if d.signature:
                facts.append(_hyp(d.name, "has_signature", d.signature, turn))
            for base in d.bases:
                facts.append(_hyp(d.name, "inherits_from", base, turn))
            if d.kind == "function":
                called: list[str] = []
                for line in _body(seg.lines, d):
                    for m in _CALL.finditer(line):
                        callee = m.group(1)
                        known = callee in functions or callee in class_names
                        if known and callee != d.name and callee not in called:
                            called.append(callee)
                for callee in called:
                    predicate = "uses" if callee in class_names else "calls"
                    facts.append(_hyp(d.name, predicate, callee, turn))
    seen: set[str] = set()
    for lang in languages:
        if lang not in seen:
            seen.add(lang)
            facts.append(_hyp("code", "written_in", lang, turn))
    return facts


# --- dialogue facts -----------------------------------------------------------

_APOS = "'\u2019"
# A sentence: the shortest run ending in ., ! or ? followed by a space or the line end.
_SENTENCE = re.compile(r".*?(?:(?<![.!?])[.!?]+[\"')\]]*(?=\s|$)|$)")
_LEAD_IN = re.compile(
    r"(?:(?:also|oh|ah|btw|by the way|actually|so|well|anyway|anyways|fyi|ok|okay|yes|yeah|"
    r"yep|no|nope|hi|hey|hello|update|quick update|just so you know|for context|note|"
    r"honestly|basically|plus|and|but|then|now|lol|haha|ps)\b[\s,:;!.\u2014-]*)+",
    re.IGNORECASE,
)
_HYPOTHETICAL = re.compile(
    r"^(?:if|unless|suppose|supposing|imagine|pretend|what if|let's say|say)\b", re.IGNORECASE
)
_ANCHOR = re.compile(
    rf"(?<![\w{_APOS}/-])(?:[Ii](?:[{_APOS}](?:m|ve|ll|d))?|[Mm]y)(?![\w/{_APOS}-])"
)
# A clause joiner at the end of a stretch of text (searched in a short window).
_JOINER_AT_END = re.compile(
    r"(?:[,;:(\u2014\u2013-]|(?<![\w'\u2019])(?:and|but|so|also|then|because|since|plus))$",
    re.IGNORECASE,
)
_JOINER_WINDOW = 16
# Where a clause stops (never starting inside a whitespace run: linear time).
_CLAUSE_STOP = re.compile(
    r"(?<!\s)(?:\s*;|,?\s+(?:but|because|although|though|while|whereas|since)\s"
    r"|,\s+(?:so|which)\s|\s+[\u2014\u2013-]\s+)"
)
_BULLET = re.compile(r"^\s*(?:[-*\u2022>]|\d+[.)])\s+")
_TOKEN = re.compile(rf"\w(?:[\w{_APOS}.+#/-]*[\w+#])?")

_PRONOUNS = {"i", "i'm", "i've", "i'll", "i'd", "my"}
_ADVERBS = {
    "just", "recently", "also", "really", "actually", "still", "finally", "currently",
    "usually", "always", "already", "mostly", "often", "sometimes", "only", "even", "now",
    "definitely", "basically", "totally", "generally", "normally", "literally", "probably",
    "officially", "absolutely", "honestly", "mainly", "personally", "typically", "newly",
}
_PREPS = {
    "to", "in", "at", "for", "with", "on", "from", "into", "as", "about", "by", "of", "near",
    "onto", "toward", "towards", "over", "under", "off", "out", "up", "back", "around",
}
_DETERMINERS = {
    "a", "an", "the", "my", "our", "your", "his", "her", "their", "its", "this", "that",
    "these", "those", "some", "no", "every", "all", "two", "three", "several", "many",
}
_MODALS = {"will", "would", "can", "could", "should", "must", "might", "may", "shall"}
_NEGATIONS = {
    "don't": "does not", "dont": "does not", "didn't": "did not", "didnt": "did not",
    "can't": "cannot", "cant": "cannot", "cannot": "cannot", "won't": "will not",
    "wouldn't": "would not", "never": "never", "haven't": "has not", "wasn't": "was not",
}
# First-person verbs that state nothing durable (hedges, meta-talk, politeness).
_SKIP_VERBS = {
    "think", "guess", "wonder", "mean", "see", "suppose", "assume", "agree", "understand",
    "apologize", "apologise", "hope", "bet", "believe", "feel", "said", "say", "asked", "ask",
    "told", "tell", "do", "did", "does", "please", "thank", "appreciate", "forgot", "forget",
    "remember", "know", "knew", "get", "got", "let", "noticed", "notice", "tried", "try",
    "mentioned", "mention", "realize", "realise", "realized", "realised", "imagine", "doubt",
    "am", "is", "are", "were", "been", "be", "not",
}
# Participles after "I'm"/"I was" that introduce meta-talk, not facts.
_SKIP_PARTICIPLES = {
    "wondering", "asking", "thinking", "curious", "sorry", "sure", "not", "here", "back",
    "afraid", "glad", "happy", "confused", "going", "saying", "guessing", "hoping", "kidding",
    "joking", "done", "ok", "okay", "fine", "good", "great", "ready",
}
_IRREGULAR_PAST = {
    "went", "got", "bought", "met", "made", "took", "had", "did", "began", "left", "came",
    "ran", "saw", "found", "gave", "told", "wrote", "built", "sold", "lost", "won", "spent",
    "taught", "brought", "drove", "flew", "grew", "became", "paid", "kept", "felt", "heard",
    "held", "led", "meant", "sent", "stood", "understood", "fell", "broke", "chose", "ate",
    "drank", "swam", "sang", "quit", "set", "put", "cut", "hurt", "read", "shut", "born",
    "moved", "been", "gone", "done", "seen", "taken", "given", "written", "known",
}
# Present-tense verbs that end in -ed but are not past forms.
_EED_VERBS = {
    "need", "feed", "speed", "bleed", "breed", "proceed", "succeed", "exceed", "seed", "heed",
    "shred", "wed",
}
# Auxiliaries that end the noun phrase of "my <noun phrase> <verb>".
_NP_STOP = {
    "is", "are", "was", "were", "has", "have", "had", "does", "do", "did", "doesn't", "don't",
    "didn't", "isn't", "aren't", "wasn't", "weren't", "hasn't", "haven't", "won't", "can't",
    "cannot", "never",
}
_BE_HAVE = {"is", "are", "was", "were", "has", "have", "had"}
# Base forms that read as the verb of "my <noun> <verb> <prep/object>".
_BASE_VERBS = {
    "live", "work", "go", "come", "start", "end", "begin", "stay", "run", "play", "study",
    "use", "like", "love", "hate", "want", "need", "own", "have", "speak", "teach", "travel",
}
# Verbs that take an infinitive that belongs in the predicate ("wants to learn").
_TO_VERBS = {
    "like", "love", "want", "need", "plan", "prefer", "hate", "wants", "needs", "likes",
    "loves", "plans", "prefers", "hates", "wanted", "needed", "planned", "decided", "started",
    "trying", "planning", "hoping", "learning", "going", "has", "have", "had", "used",
    "decide", "start", "learn", "try", "hope", "intend", "intends", "intended", "began",
}
# Requests aimed at the assistant: "I want you to...", "I'd like you to...".
_REQUEST_OBJECT = re.compile(r"^(?:you|u|ya)\b", re.IGNORECASE)


def _third_person(verb: str) -> str:
    """'prefer' -> 'prefers', 'study' -> 'studies', 'go' -> 'goes'; past forms unchanged."""
    low = verb.lower()
    if low in _EED_VERBS:
        return low + "s"
    if low.endswith(("ed", "ing")) or low in _IRREGULAR_PAST:
        return low
    if low == "have":
        return "has"
    if low.endswith(("s", "sh", "ch", "x", "z", "o")):
        return low + "es"
    if len(low) > 2 and low.endswith("y") and low[-2] not in "aeiou":
        return low[:-1] + "ies"
    return low + "s"


class _Words:
    """The tokens of a clause, with their character offsets, and a cursor."""

    def __init__(self, text: str, start: int, end: int) -> None:
        self.items = [
            (m.group(), m.start(), m.end()) for m in _TOKEN.finditer(text, start, end)
        ]
        self.pos = 0

    def raw(self, k: int = 0) -> str:
        i = self.pos + k
        return self.items[i][0] if 0 <= i < len(self.items) else ""

    def peek(self, k: int = 0) -> str:
        return self.raw(k).lower().replace("\u2019", "'")

    def take(self) -> str:
        word = self.peek()
        self.pos += 1
        return word

    def skip_adverbs(self) -> None:
        while self.peek() in _ADVERBS:
            self.pos += 1

    def offset(self) -> int | None:
        return self.items[self.pos][1] if self.pos < len(self.items) else None

    def objectish(self, k: int) -> bool:
        """Does token k start an object/complement (end, preposition, determiner, name, number)?"""
        word, raw = self.peek(k), self.raw(k)
        return (
            not word
            or word in _PREPS
            or word in _DETERMINERS
            or raw[:1].isdigit()
            or raw[:1].isupper()
        )


def _take_infinitive(w: _Words, parts: list[str]) -> None:
    if parts and parts[-1] in _TO_VERBS and w.peek() == "to" and w.peek(1).isalpha():
        parts.append(w.take())
        parts.append(w.take())


def _take_prep(w: _Words, parts: list[str]) -> None:
    if w.peek() in _PREPS and w.peek(1):
        parts.append(w.take())


def _pronoun_predicate(w: _Words, head: str) -> str | None:
    """Predicate after "I"/"I'm"/"I've"/"I'll"/"I'd", in the third person."""
    aux = {"i'm": "is", "i've": "has", "i'll": "will", "i'd": "would"}.get(head)
    w.skip_adverbs()
    if aux is None:
        word = w.peek()
        if word == "am":
            aux = "is"
        elif word in {"have", "has"}:
            aux = "has"
        elif word in _MODALS or word in {"was", "used"}:
            aux = word
        elif word == "do" and w.peek(1) == "not":
            w.take()
            aux = "does not"
        elif word in _NEGATIONS:
            aux = _NEGATIONS[word]
        if aux is not None:
            w.take()
    parts: list[str] = []
    if aux is not None:
        parts.append(aux)
        w.skip_adverbs()
        if w.peek() in {"not", "never"}:
            parts.append(w.take())
            w.skip_adverbs()
        if aux == "has" and w.peek() == "got":
            w.take()
        if w.peek() == "been":
            parts.append(w.take())
            w.skip_adverbs()
        _take_infinitive(w, parts)
    word = w.peek()
    if not word.isalpha():
        return None
    if (word in _SKIP_VERBS and not (parts and word == "be")) or (
        parts and word in _SKIP_PARTICIPLES
    ):
        return None
    expects_verb = not parts or parts[-1] in (
        _MODALS | set(_NEGATIONS.values()) | {"to", "not", "never"}
    )
    if expects_verb or word.endswith("ing") or word in _IRREGULAR_PAST or word.endswith("ed"):
        verb = w.take()
        parts.append(_third_person(verb) if not parts else verb)
        _take_infinitive(w, parts)
    _take_prep(w, parts)
    return " ".join(parts) if parts else None


def _possessive_predicate(w: _Words) -> str | None:
    """Predicate after "my": '<noun phrase> <verb> [prep]' ('first sprint ends on')."""
    np: list[str] = []
    while w.peek() and len(np) <= 4:
        word = w.peek()
        if np:
            if word in _NP_STOP or word in _MODALS:
                break
            verbish = (
                (
                    word.endswith(("s", "ed"))
                    and not word.endswith(("ss", "'s", "us", "is"))
                    and word not in _EED_VERBS
                )
                or word in _BASE_VERBS
            )
            if verbish and w.objectish(1):
                break
        np.append(w.take())
    if not np or len(np) > 4 or not w.peek():
        return None
    parts = [*np, w.take()]
    if parts[-1] in _MODALS or (parts[-1] in _NP_STOP and parts[-1] not in _BE_HAVE):
        if w.peek() == "not":
            parts.append(w.take())
        if w.peek().isalpha() and w.peek() not in _DETERMINERS and w.peek() != "been":
            parts.append(w.take())
    if parts[-1] in {"has", "have", "had"} and w.peek() == "been":
        parts.append(w.take())
    _take_infinitive(w, parts)
    _take_prep(w, parts)
    return " ".join(parts)


def _clause_fact(text: str, start: int, end: int) -> dict[str, Any] | None:
    """A fact from one first-person clause ``text[start:end]``, or None."""
    w = _Words(text, start, end)
    head = w.take()
    if head not in _PRONOUNS:
        return None
    predicate = _possessive_predicate(w) if head == "my" else _pronoun_predicate(w, head)
    obj_start = w.offset()
    if not predicate or obj_start is None:
        return None
    obj = text[obj_start:end].strip().rstrip(".!,;:").strip()
    if not obj or _REQUEST_OBJECT.match(obj):
        return None
    return {
        "subject": "user",
        "predicate": predicate,
        "object": obj,
        "quote": text[start:end].strip(),
        "turn": None,
        "hypothesis": False,
    }


def _rstrip_to(text: str, start: int, end: int) -> int:
    """``end`` moved left past whitespace, not beyond ``start``."""
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


def _joiner_before(text: str, start: int, anchor: int) -> bool:
    """Does ``text[start:anchor]`` end in a clause joiner (",", "and", "but"...)?"""
    end = _rstrip_to(text, start, anchor)
    if end == start:
        return False
    return _JOINER_AT_END.search(text, max(start, end - _JOINER_WINDOW), end) is not None


def _trim_joiners(text: str, start: int, end: int) -> int:
    """The end of ``text[start:end]`` without trailing whitespace and joiners."""
    end = _rstrip_to(text, start, end)
    while end > start:
        m = _JOINER_AT_END.search(text, max(start, end - _JOINER_WINDOW), end)
        if m is None:
            break
        end = _rstrip_to(text, start, m.start())
    return end


def _sentences(text: str, line_start: int, line_end: int) -> Iterator[tuple[int, int]]:
    """(start, end) offsets in ``text`` of the sentences of one prose line."""
    bullet = _BULLET.match(text, line_start, line_end)
    pos = bullet.end() if bullet else line_start
    for sent in _SENTENCE.finditer(text, pos, line_end):
        yield sent.span()


def _clauses(text: str, s: int, e: int) -> Iterator[tuple[int, int]]:
    """(start, end) offsets in ``text`` of the first-person clauses of the sentence
    ``text[s:e]`` (of :func:`_sentences`). They depend on that sentence's text only, and on
    whether it starts the text (a hypothetical is told by "^")."""
    sentence = text[s:e]
    if not sentence.strip() or sentence.rstrip().endswith("?"):
        return
    body = s + len(sentence) - len(sentence.lstrip())
    lead = _LEAD_IN.match(text, body, e)
    body = lead.end() if lead else body
    if _HYPOTHETICAL.match(text, body, e):
        return
    anchors = [
        m.start()
        for m in _ANCHOR.finditer(text, body, e)
        if m.start() == body or _joiner_before(text, body, m.start())
    ]
    for k, a in enumerate(anchors):
        limit = anchors[k + 1] if k + 1 < len(anchors) else e
        stop = _CLAUSE_STOP.search(text, a, limit)
        end = _trim_joiners(text, a, stop.start() if stop else limit)
        if end > a:
            yield a, end


_CODE_LINE = re.compile(r"^(?:\s{4,}|\t)|[{};]\s*$|^\s*(?://|#!|<\w|\$ |>>>)")


def dialogue_facts(text: str, turn: int | None) -> list[dict[str, Any]]:
    """First-person stated facts from the prose (not the code) of one user utterance.

    Every quote is an exact substring of ``text``. Words of the utterance that are not
    the user's own (:func:`donto_pg.core.voice.others_words`: a quoted or indented line
    of a pasted mail, a role-labelled line, reported or attributed speech, "the narrator
    says: ...") state nothing about the user: a clause that starts in them is skipped.
    """
    anchors = [m.start() for m in _ANCHOR.finditer(text)]
    if not anchors:
        return []
    others = others_words(text)
    # A clause starts at an anchor: one in others' words is skipped, so is a line with no other.
    anchors = [a for a in anchors if not starts_in(others, a)]
    facts: list[dict[str, Any]] = []
    # A line is code or prose, a sentence has the same clauses, and a clause gives the same
    # fact, wherever it stands (a long turn repeats many): each is read once.
    code: dict[str, bool] = {}
    clauses: dict[tuple[str, bool], list[tuple[int, int]]] = {}
    read: dict[str, dict[str, Any] | None] = {}
    fence: str | None = None
    for line_start, line_end in _lines_to_read(text, anchors):
        line = text[line_start:line_end]
        opening = _FENCE_OPEN.match(line)
        if fence is None and opening:
            fence = opening.group(1)
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            continue
        if line not in code:
            code[line] = bool(_CODE_LINE.search(line) or _match_def(line, 0, None)
                              or _imports(line))
        if code[line]:
            continue
        for s0, e0 in _sentences(text, line_start, line_end):
            key = (text[s0:e0], s0 == 0)
            if key not in clauses:
                clauses[key] = [(s - s0, e - s0) for s, e in _clauses(text, s0, e0)]
            for s, e in clauses[key]:
                s, e = s + s0, e + s0
                if starts_in(others, s):
                    continue
                clause = text[s:e]
                if clause not in read:
                    read[clause] = _clause_fact(text, s, e)
                fact = read[clause]
                if fact is not None:
                    facts.append(dict(fact, turn=turn))
    return facts


# A line that may open or close a fence (str.strip() strips what \s matches).
_FENCE_MARK = re.compile(r"^[^\S\n]*(?:```|~~~)", re.M)


def _lines_to_read(text: str, anchors: list[int]) -> Iterator[tuple[int, int]]:
    """The spans of the lines of TEXT that :func:`dialogue_facts` reads, in order: those
    with an anchor (at ANCHORS, sorted) and those that may open or close a fence. (No other
    line holds a clause, and a turn of millions of lines without one is not read line by
    line.)"""
    end = -1
    for pos in heapq.merge(anchors, (m.start() for m in _FENCE_MARK.finditer(text))):
        if pos <= end:
            continue  # in the line just read
        newline = text.rfind("\n", end + 1, pos)
        start = newline + 1 if newline >= 0 else end + 1
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        yield start, end


def extract(utterances: list[Utterance]) -> list[dict[str, Any]]:
    """All facts from a list of utterances: user prose facts plus code type-facts."""
    facts: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for u in utterances:
        found = dialogue_facts(u.text, u.turn) if u.role == "user" else []
        found += code_facts(u.text, u.turn)
        for f in found:
            key = (f["subject"], f["predicate"], f["object"], f["turn"], f["hypothesis"])
            if key not in seen:
                seen.add(key)
                facts.append(f)
    return facts


def extract_from_prompt(prompt: str) -> str:
    """Answer a rendered extraction prompt like a model would: a JSON array text."""
    return json.dumps(extract(parse_source(prompt)), ensure_ascii=False)
