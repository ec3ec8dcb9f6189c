"""PL/Python body of standing memory (sql/086-standing.sql)."""

from __future__ import annotations

from donto_pg.core.standing import (
    RULES_VERSION,
    condition,
    detect,
    quote_not_the_users,
    subject_key,
)
from donto_pg.server.revision import revision_body, turn_rows


def standing_rows(plpy, revision_id: int) -> list[tuple]:
    """Rows (ord, kind, subject_key, turn_seq, turn_id, char_start, char_end, text, said_on)
    of ``donto._standing_detect``: the detector run over every user turn of a revision.

    Refused (55000) when this backend's detector is not the version the schema names
    (``donto.standing_rules()``): a backend that loaded another donto_pg (before a
    migrate, or another ``donto.python_path``) would label its findings wrongly."""
    schema = plpy.execute("select donto.standing_rules() as v")[0]["v"]
    if schema != RULES_VERSION:
        plpy.error(f"donto.project_standing: this server's donto_pg detects standing "
                   f"statements with {RULES_VERSION}, the schema names {schema}",
                   hint="reconnect (a backend keeps the donto_pg it loaded first), or run "
                        "donto-pg migrate with the donto_pg the server uses",
                   sqlstate="55000")
    body = revision_body(plpy, revision_id)
    out: list[tuple] = []
    for t in turn_rows(plpy, revision_id):
        if t["role"] != "user":
            continue
        base = t["char_start"]
        for s in detect(body[base:t["char_end"]]):
            out.append((len(out), s.kind, s.subject, t["seq"], t["turn_id"],
                        base + s.start, base + s.end, s.text, t["date"]))
    return out


def claim_subject_key(plpy, subject: str | None, text: str | None, kind: str) -> str:
    """Body of ``donto._standing_claim_key``: the subject key of an LLM standing claim.

    The key of the subject the model named (what the statement is about), else, when
    that leaves no content word, the key of the anchored text itself (the rule
    detector's key), so the two detectors' statements on one subject supersede each
    other alike."""
    return subject_key(subject or "", kind) or subject_key(text or "", kind)


def statement_condition(plpy, text: str | None) -> str | None:
    """Body of ``donto._standing_condition``: the questions a standing statement applies to
    ("when I ask about X": X), or None (:func:`donto_pg.core.standing.condition`)."""
    return condition(text or "")


def not_the_users(plpy, turn: str | None, start: int, end: int) -> bool:
    """Body of ``donto._standing_not_the_users``: is ``turn[start:end]`` (an LLM standing
    claim's quote in a user turn) not the user's own words, by the rule detector's filter:
    any of it in others' words, or in a sentence shared with them outside the user's own
    clauses of it (:func:`donto_pg.core.standing.quote_not_the_users`)?"""
    return quote_not_the_users(turn or "", start, end)
