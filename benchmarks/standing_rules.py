"""What rules-v4 changes in the standing statements of BEAM conversations: the detector
with and without its filter of words that are not the user's own rule (a code fence, a
quoted line, someone else's reported words), over the user turns of the conversations
given, in one run.

    .venv/bin/python benchmarks/standing_rules.py -c 500K/13 ... -c 500K/24 -c 100K/1 ...

Prints the statements found each way and the ones only rules-v3's way finds.
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
from donto_pg.core import standing  # noqa: E402


def main(conversation: list[str] = typer.Option(..., "-c", help="SCALE/ID, repeatable."),
         data: str = typer.Option(None, help="The BEAM root (default: the shared data)."),
         as_json: bool = typer.Option(False, "--json")) -> None:
    root = data or os.path.dirname(os.path.dirname(default_beam()))
    turns = [m.content for c in conversation
             for conv in beam.iter_beam(os.path.join(root, "chats", c))
             if isinstance(conv, beam.Conversation)
             for m in conv.messages if m.role == "user"]
    v4 = [s.text for t in turns for s in standing.detect(t)]
    with mock.patch.object(standing, "_not_the_users", lambda *_a: False):
        v3 = [s.text for t in turns for s in standing.detect(t)]
    only_v3 = [t for t in v3 if t not in set(v4)]
    out = {"conversations": len(conversation), "user_turns": len(turns),
           "without_the_filter": len(v3), "rules_v4": len(v4), "dropped": only_v3}
    if as_json:
        typer.echo(json.dumps(out, indent=2))
    else:
        typer.echo(f"{len(turns)} user turns of {len(conversation)} conversations: "
                   f"{len(v3)} statements without the filter, {len(v4)} with it (rules-v4); "
                   f"dropped: {only_v3 or 'none'}")


if __name__ == "__main__":
    typer.run(main)
