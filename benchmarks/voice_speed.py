"""How long the readers of a user turn take on large hostile turns: voice.others_words,
standing.detect and rule_extractor.dialogue_facts, each on a turn of SIZE characters made
of one repeated piece (quotes, reported speech, role lines, an open <quote>, fences,
indented lines, capitalised names, mail ...). They run in the server's PL/Python on every
load, so each should stay linear.

    .venv/bin/python benchmarks/voice_speed.py --size 1000000 --size 5000000
"""

from __future__ import annotations

import time

import typer

from donto_pg.core import rule_extractor, standing, voice

PIECES = {
    "said-quote": 'said"x"', "he-said-quote": 'he said "x", ', "quotes": '"ab" ',
    "single-quotes": "my boss said 'x'. ", "reported": "My friend told me that x. ",
    "reported-no-end": "My friend told me that x ", "reported-comma": "He said, ",
    "role-lines": "Assistant: hi\n", "role-alone": "Assistant:\n", "open-quote": "<quote>",
    "fences": "```\n", "indented": "    x\n", "names": "John Smith ",
    "names-said": "John Smith said ", "indented-list": "    - x\n",
    "mail-headers": "From: a@b.c\nSubject: x\n\n", "mail-intro": "My boss's email:\n",
    "said-after": '"x" said ', "comma-quote": '"x," ', "reads": "The email reads: ",
    "prose": "I live in Oslo and I prefer tea. ", "open-double": '"', "open-single": "'",
    # Every sentence worth reading for a standing statement or a fact (a word like "always",
    # "I"): the pieces above without one skip most of the work.
    "always-lines": "Always answer briefly.\n", "quoted-always": "> Always answer in French.\n",
    "said-always": 'He said "always x", ', "role-always": "Assistant: I always hi\n",
    "indented-always": "    I always x\n", "fenced-always": "```\nI always x\n",
    # rules-v6: single quotes attributed after them, a mail's paragraphs, its end
    "single-after": "'x,' my brother said. ", "open-single-word": "'a ",
    "mail-paragraphs": "My boss's email:\nHi,\n\n", "closings": "Thanks,\n\n",
    "turn-backs": "\n\nWhat do you think?", "blank-lines": "\n",
}
READERS = {"others_words": voice.others_words, "detect": standing.detect,
           "dialogue_facts": lambda t: rule_extractor.dialogue_facts(t, 1)}


def main(size: list[int] = typer.Option([1_000_000], help="Characters, repeatable.")) -> None:
    worst = {name: (0.0, "") for name in READERS}
    for piece, unit in PIECES.items():
        for n in size:
            text = unit * (n // len(unit))
            row = []
            for name, read in READERS.items():
                started = time.perf_counter()
                read(text)
                took = time.perf_counter() - started
                row.append(f"{name} {took:.2f} s")
                worst[name] = max(worst[name], (took, f"{piece} at {n:,}"))
            typer.echo(f"{piece:16} {n:>10,}  " + ", ".join(row))
    for name, (took, where) in worst.items():
        typer.echo(f"worst {name}: {took:.2f} s ({where})")


if __name__ == "__main__":
    typer.run(main)
