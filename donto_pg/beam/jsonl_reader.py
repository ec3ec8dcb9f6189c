"""BEAM Hugging Face rows as JSON Lines (one conversation per line)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from donto_pg.beam.parse import (
    BeamFormatError,
    _Filter,
    _guard_row,
    _id_sort_key,
    _too_deep,
)
from donto_pg.core.conversation import Conversation


def iter_jsonl(
    path: Path, label: str, keep: _Filter
) -> Iterator[Conversation | BeamFormatError]:
    """Conversations of a ``.jsonl`` file, in id order."""
    # JSON Lines: a first pass records each row's id and byte offset, rows are parsed again
    # in id order so that only one conversation is held in memory at a time.
    index: list[tuple[tuple[int, int, str], int, int, str]] = []
    errors: list[BeamFormatError] = []
    with path.open("rb") as fh:
        line_no = 0
        while True:
            offset = fh.tell()
            line = fh.readline()
            if not line:
                break
            line_no += 1
            if not line.strip():
                continue
            src = f"{path} (line {line_no})"
            try:
                row = json.loads(line.decode("utf-8"))
            except UnicodeDecodeError as exc:
                errors.append(BeamFormatError(f"not UTF-8 text ({exc.reason})", source=src))
                continue
            except json.JSONDecodeError as exc:
                errors.append(
                    BeamFormatError(
                        f"malformed JSON at line {line_no}, column {exc.colno}: {exc.msg}",
                        source=str(path),
                    )
                )
                continue
            except RecursionError:
                errors.append(BeamFormatError(_too_deep(), source=src))
                continue
            cid = str(row.get("conversation_id", "")).strip() if isinstance(row, dict) else ""
            index.append((_id_sort_key(cid), line_no, offset, cid))
    yield from errors
    with path.open("rb") as fh:
        for _key, line_no, offset, cid in sorted(index):
            if cid and not keep(label, cid):
                continue
            fh.seek(offset)
            row = json.loads(fh.readline().decode("utf-8"))
            src = f"{path} (line {line_no})"
            yield _guard_row(row, label, src, cid)
