"""BEAM JSON files: the GitHub layout (``chats/<scale>/<id>/chat.json``, 10M plans)
and a ``.json`` array of Hugging Face rows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from donto_pg.beam.parse import (
    _GITHUB_PLANS,
    _PLAN_RE,
    BeamFormatError,
    _assemble,
    _Filter,
    _guard_row,
    _id_sort_key,
    _load_json_file,
    _Part,
    _plan_warning,
)
from donto_pg.core.conversation import Conversation

# --------------------------------------------------------------------------- GitHub layout


def _questions_path(conv_dir: Path) -> Path | None:
    for candidate in (
        conv_dir / "probing_questions" / "probing_questions.json",
        conv_dir / "probing_questions.json",
    ):
        if candidate.is_file():
            return candidate
    return None


def _plan_dirs(conv_dir: Path) -> dict[int, Path]:
    out: dict[int, Path] = {}
    for child in conv_dir.iterdir():
        m = _PLAN_RE.match(child.name)
        if m and child.is_dir():
            out[int(m.group(1))] = child
    return out


def _is_conv_dir(path: Path) -> bool:
    return (path / "chat.json").is_file() or bool(_plan_dirs(path))


def _load_conv_dir(conv_dir: Path, scale: str, only_plan: int | None = None) -> Conversation:
    """Load ``chats/<scale>/<id>`` (flat chat.json or the 10M plan-K layout)."""
    cid = conv_dir.name
    warnings: list[str] = []
    parts: list[_Part] = []
    chat_file = conv_dir / "chat.json"
    plans = _plan_dirs(conv_dir)
    if only_plan is None and chat_file.is_file():
        if plans:
            warnings.append(
                f"{conv_dir}: has both chat.json and plan-K directories; used chat.json"
            )
        parts.append(_Part(_load_json_file(chat_file), str(chat_file), None, 0, ""))
        sources = [str(chat_file)]
    else:
        present = sorted(k for k, d in plans.items() if (d / "chat.json").is_file())
        if only_plan is not None:
            if only_plan != 0:
                raise BeamFormatError(
                    f"plan-{only_plan}/chat.json cannot be loaded on its own: ids restart in "
                    "every plan, so they can only be made global from plan-0 on (load the "
                    "conversation directory instead)",
                    source=str(plans[only_plan] / "chat.json"),
                )
            present = [0]
        if not present:
            raise BeamFormatError("no chat.json and no plan-K/chat.json", source=str(conv_dir))
        if present[0] != 0:
            raise BeamFormatError(
                f"plan-0 is missing (found {', '.join(f'plan-{k}' for k in present)}): "
                "ids restart in every plan, so they cannot be made global without the "
                "earlier plans",
                source=str(conv_dir),
            )
        loaded = [k for i, k in enumerate(present) if k == i]
        if len(loaded) < len(present):
            gap = ", ".join(f"plan-{k}" for k in present[len(loaded) :])
            warnings.append(
                f"skipped {gap}: plan-{len(loaded)} is missing, so their ids cannot be made global"
            )
        note = _plan_warning(loaded, _GITHUB_PLANS)
        if note:
            warnings.append(note)
        offset = 0
        sources = []
        for k in loaded:
            path = plans[k] / "chat.json"
            batches = _load_json_file(path)
            parts.append(_Part(batches, str(path), f"plan-{k}", offset, ""))
            offset += _count_messages(batches)
            sources.append(str(path))
    qpath = _questions_path(conv_dir)
    qdata = _load_json_file(qpath) if qpath else None
    if qpath:
        sources.append(str(qpath))
    return _assemble(
        cid=cid,
        scale=scale,
        parts=parts,
        questions_data=qdata,
        questions_source=str(qpath) if qpath else None,
        source=", ".join(sources),
        warnings=warnings,
    )


def _count_messages(batches: Any) -> int:
    """Messages in one plan (used for the global id offset of the next plan)."""
    if not isinstance(batches, list):
        return 0
    n = 0
    for batch in batches:
        turns = batch.get("turns") if isinstance(batch, dict) else batch
        if not isinstance(turns, list):
            continue
        for item in turns:
            n += len(item) if isinstance(item, list) else 1
    return n


def iter_json_rows(
    path: Path, label: str, keep: _Filter
) -> Iterator[Conversation | BeamFormatError]:
    """Conversations of a ``.json`` array of Hugging Face rows, in id order."""
    data = _load_json_file(path)
    if not isinstance(data, list):
        raise BeamFormatError("expected a JSON array of rows", source=str(path))
    entries = [
        (str(r.get("conversation_id", "")).strip() if isinstance(r, dict) else "", i, r)
        for i, r in enumerate(data)
    ]
    for cid, i, row in sorted(entries, key=lambda e: (_id_sort_key(e[0]), e[1])):
        if keep(label, cid) or not cid:
            src = f"{path} (row {i})"
            yield _guard_row(row, label, src, cid)
