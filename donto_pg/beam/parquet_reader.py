"""BEAM Hugging Face rows as Parquet (``pyarrow``, an optional dependency)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from donto_pg.beam.parse import BeamFormatError, _Filter, _guard_row, _id_sort_key
from donto_pg.core.conversation import Conversation


def iter_parquet(
    path: Path, label: str, keep: _Filter
) -> Iterator[Conversation | BeamFormatError]:
    try:
        import pyarrow.parquet as pq  # optional dependency, imported lazily
    except ImportError as exc:
        raise ImportError(
            f"reading {path.name} needs pyarrow, which is not installed: "
            "install it with `pip install pyarrow`, or use the JSON Lines form of the rows"
        ) from exc
    table = pq.read_table(str(path))
    if "conversation_id" not in table.column_names:
        raise BeamFormatError("missing column 'conversation_id'", source=str(path))
    ids = [
        str(x).strip() if x is not None else "" for x in table.column("conversation_id").to_pylist()
    ]
    for i in sorted(range(len(ids)), key=lambda i: (_id_sort_key(ids[i]), i)):
        cid = ids[i]
        if cid and not keep(label, cid):
            continue
        src = f"{path} (row {i})"
        row = table.slice(i, 1).to_pylist()[0]
        yield _guard_row(row, label, src, cid)
