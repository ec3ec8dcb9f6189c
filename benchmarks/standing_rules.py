"""What the filter of words that are not the user's own changes in the standing statements
of BEAM conversations: the detector with and without it, over the user turns of the
conversations given, in one run. rules-v5's filter (donto_pg.core.voice.others_words): a
code fence, a quoted, indented or role-labelled line, a quote element, any speaker's
reported words, an attributed quote; rules-v4's: a code fence, a "> " line and the
reported words of a few speakers; rules-v3 had none.

    .venv/bin/python benchmarks/standing_rules.py -c 500K/13 ... -c 500K/24 -c 100K/1 ...

Prints the statements found each way and the ones only the unfiltered way finds, each
with the span of the turn's text that kept it out.
"""

from __future__ import annotations

import json
import os
import sys
from unittest import mock

import typer

sys.path.insert(0, os.path.dirname(__file__))
from _common import default_beam  # noqa: E402

from donto_pg import beam  # noqa: E402
from donto_pg.core import standing, voice  # noqa: E402


def main(conversation: list[str] = typer.Option(..., "-c", help="SCALE/ID, repeatable."),
         data: str = typer.Option(None, help="The BEAM root (default: the shared data)."),
         as_json: bool = typer.Option(False, "--json")) -> None:
    root = data or os.path.dirname(os.path.dirname(default_beam()))
    turns = [m.content for c in conversation
             for conv in beam.iter_beam(os.path.join(root, "chats", c))
             if isinstance(conv, beam.Conversation)
             for m in conv.messages if m.role == "user"]
    filtered = [s.text for t in turns for s in standing.detect(t)]
    dropped = []
    with mock.patch.object(standing, "others_words", lambda _t: []):
        unfiltered = 0
        for t in turns:
            for s in standing.detect(t):
                unfiltered += 1
                spans = [sp for sp in voice.others_words(t)
                         if voice.overlaps([sp], s.start, s.end)]
                if spans:
                    dropped.append({"sentence": s.text,
                                    "not_the_users": [t[a:b][:200] for a, b in spans]})
    out = {"conversations": len(conversation), "user_turns": len(turns),
           "without_the_filter": unfiltered, RULES: len(filtered), "dropped": dropped}
    if as_json:
        typer.echo(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        shown = json.dumps(dropped, indent=2, ensure_ascii=False) if dropped else "none"
        typer.echo(f"{len(turns)} user turns of {len(conversation)} conversations: "
                   f"{unfiltered} statements without the filter, {len(filtered)} with it "
                   f"({RULES}); dropped: {shown}")


RULES = standing.RULES_VERSION

if __name__ == "__main__":
    typer.run(main)
