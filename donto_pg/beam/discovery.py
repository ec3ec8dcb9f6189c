"""Finding BEAM data under a path: which layout or file kind it is, in which order.

:func:`iter_beam` dispatches to the readers by format: the GitHub layout and
``.json`` row arrays (:mod:`.json_reader`), JSON Lines (:mod:`.jsonl_reader`),
Parquet (:mod:`.parquet_reader`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from donto_pg.beam.json_reader import _is_conv_dir, _load_conv_dir, iter_json_rows
from donto_pg.beam.jsonl_reader import iter_jsonl
from donto_pg.beam.parquet_reader import iter_parquet
from donto_pg.beam.parse import (
    _PLAN_RE,
    _SCALE_IN_NAME_RE,
    _SCALE_RE,
    BeamFormatError,
    _Filter,
    _guard,
    _id_sort_key,
    _scale_sort_key,
)
from donto_pg.core.conversation import Conversation


def _scale_from_name(path: Path) -> str | None:
    m = _SCALE_IN_NAME_RE.search(path.name)
    return m.group(1).upper() if m else None


def _scale_of_dir(name: str, scale: str | None) -> tuple[str, bool]:
    """(scale label, whether the directory itself tells the scale)."""
    if _SCALE_RE.match(name):
        return name.upper(), True
    return (scale or name), False


def _iter_scale_dir(
    scale_dir: Path, scale: str, keep: _Filter
) -> Iterator[Conversation | BeamFormatError]:
    children = [
        c for c in scale_dir.iterdir() if c.is_dir() and (c.name.isdigit() or _is_conv_dir(c))
    ]
    for child in sorted(children, key=lambda c: _id_sort_key(c.name)):
        if keep(scale, child.name):
            yield _guard(
                _load_conv_dir,
                child,
                scale,
                conversation_id=f"{scale}/{child.name}",
            )


def _iter_chats_dir(
    chats: Path, scale: str | None, keep: _Filter
) -> Iterator[Conversation | BeamFormatError]:
    scale_dirs = [c for c in chats.iterdir() if c.is_dir() and not c.name.startswith(".")]
    for sdir in sorted(scale_dirs, key=lambda c: _scale_sort_key(c.name)):
        label, _ = _scale_of_dir(sdir.name, None)
        if scale is not None and label.lower() != scale.lower():
            continue
        yield from _iter_scale_dir(sdir, label, keep)


def _iter_rows_file(
    path: Path, scale: str | None, keep: _Filter
) -> Iterator[Conversation | BeamFormatError]:
    label = scale or _scale_from_name(path) or "hf"
    suffix = path.name.lower()
    if suffix.endswith(".parquet"):
        rows = iter_parquet(path, label, keep)
    elif suffix.endswith(".json"):
        rows = iter_json_rows(path, label, keep)
    else:
        rows = iter_jsonl(path, label, keep)
    # A file holds a conversation once: a second row of the same id would silently
    # supersede the first (a changed conversation), so it fails alone instead.
    seen: dict[str, str] = {}
    for item in rows:
        if isinstance(item, Conversation):
            if item.conversation_id in seen:
                yield BeamFormatError(f"conversation {item.conversation_id} appears twice in "
                                      f"the file (first at {seen[item.conversation_id]}): "
                                      "this row is not loaded", source=item.source,
                                      conversation_id=item.conversation_id)
                continue
            seen[item.conversation_id] = item.source
        yield item


def iter_beam(
    path: str | Path,
    *,
    scale: str | None = None,
    conversations: str | int | Iterable[str | int] | None = None,
) -> Iterator[Conversation | BeamFormatError]:
    """Yield each BEAM conversation under ``path``, ordered by scale then numeric id.

    ``path`` may be a BEAM root (holding ``chats/``), a ``chats/`` directory, a scale
    directory, one conversation directory, one ``chat.json``, or a Hugging Face rows
    file (``.jsonl``, ``.parquet``, or a ``.json`` array). ``scale`` labels data whose
    path does not tell its scale (rows files, where it overrides the scale found in
    the file name, else ``'hf'``) and filters the scale directories of a root or
    ``chats/`` directory. ``conversations`` keeps only the given ids (``'1'`` or
    ``'100K/1'``).

    A conversation that cannot be loaded is yielded as a :class:`BeamFormatError`
    and the others still load; so is each filter id that matched nothing. A path
    that does not exist raises ``FileNotFoundError``; a layout that is not
    recognised raises :class:`BeamFormatError`.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no such file or directory: {p}")
    keep = _Filter(conversations)
    yield from _iter_path(p, scale, keep)
    for tok in keep.unmatched():
        yield BeamFormatError(f"conversation {tok!r} not found", source=str(p))


def _iter_path(
    p: Path, scale: str | None, keep: _Filter
) -> Iterator[Conversation | BeamFormatError]:
    """Dispatch on what ``p`` is (file kind or directory layout)."""
    if p.is_file():
        name = p.name.lower()
        if name == "chat.json":
            yield from _iter_chat_file(p, scale, keep)
        elif name.endswith((".jsonl", ".parquet")):
            yield from _iter_rows_file(p, scale, keep)
        elif name.endswith(".json"):
            yield from _iter_rows_file(p, scale, keep)
        else:
            raise BeamFormatError(
                "not a BEAM file (expected chat.json, .jsonl, .parquet or .json rows)",
                source=str(p),
            )
        return
    if (p / "chats").is_dir():
        yield from _iter_chats_dir(p / "chats", scale, keep)
    elif _is_conv_dir(p):
        label, told = _scale_of_dir(p.parent.name, scale)
        if told and scale is not None and label.lower() != scale.lower():
            return
        if keep(label, p.name):
            yield _guard(_load_conv_dir, p, label, conversation_id=f"{label}/{p.name}")
    elif p.name == "chats":
        yield from _iter_chats_dir(p, scale, keep)
    elif any(c.is_dir() and _is_conv_dir(c) for c in p.iterdir()):
        label, told = _scale_of_dir(p.name, scale)
        if told and scale is not None and label.lower() != scale.lower():
            return
        yield from _iter_scale_dir(p, label, keep)
    else:
        raise BeamFormatError(
            "no BEAM layout found (expected chats/<scale>/<id>/chat.json or <id>/plan-K/chat.json)",
            source=str(p),
        )


def _iter_chat_file(
    p: Path, scale: str | None, keep: _Filter
) -> Iterator[Conversation | BeamFormatError]:
    """A single chat.json: its conversation directory, or one plan of a 10M conversation."""
    plan = _PLAN_RE.match(p.parent.name)
    conv_dir = p.parent.parent if plan else p.parent
    label, told = _scale_of_dir(conv_dir.parent.name, scale)
    if told and scale is not None and label.lower() != scale.lower():
        return
    if not keep(label, conv_dir.name):
        return
    only = int(plan.group(1)) if plan else None
    yield _guard(
        _load_conv_dir,
        conv_dir,
        label,
        only,
        conversation_id=f"{label}/{conv_dir.name}",
    )
