"""Tests for donto_pg.core.tokens: offline token counts with the embedding model's tokenizer.

Real text comes from the BEAM fixture examples/beam/chats/100K/13/chat.json
(BEAM, CC-BY-SA-4.0, from mohammadtavakoli78/BEAM).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from donto_pg.core import tokens
from donto_pg.core.tokens import (
    count_json_tokens,
    count_tokens,
    default_model_path,
    get_tokenizer,
    render_json,
    token_boundaries,
    truncate_to_tokens,
)
from tests.conftest import ROOT

BEAM_CHAT = ROOT / "examples" / "beam" / "chats" / "100K" / "13" / "chat.json"


@functools.cache
def beam_messages() -> tuple[str, ...]:
    """Every message text of one BEAM 100K chat, in order."""
    batches = json.loads(BEAM_CHAT.read_text(encoding="utf-8"))
    return tuple(m["content"] for b in batches for turn in b["turns"] for m in turn)


@functools.cache
def beam_corpus() -> str:
    return "\n\n".join(beam_messages())


@functools.cache
def raw_tokenizer() -> Tokenizer:
    """The default tokenizer.json loaded directly, without truncation or padding."""
    tok = Tokenizer.from_file(str(Path(default_model_path()) / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return tok


def direct_count(text: str) -> int:
    return len(raw_tokenizer().encode(text, add_special_tokens=False).ids)


def test_default_model_is_bundled_minilm() -> None:
    path = Path(default_model_path())
    assert (path / "tokenizer.json").is_file()
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "bert"
    assert config["hidden_size"] == 384  # all-MiniLM-L6-v2


def test_counts_match_tokenizers_on_real_text() -> None:
    messages = beam_messages()
    assert len(messages) > 100
    for text in messages[:60]:
        assert count_tokens(text) == direct_count(text)
    # A real message is not trivially one token per word or per character.
    sample = messages[1]
    assert len(sample.split()) * 0.8 < count_tokens(sample) < len(sample)


def test_long_text_counts_fully() -> None:
    text = beam_corpus()[:50_000]
    assert len(text) == 50_000
    n = count_tokens(text)
    assert n == direct_count(text)
    assert n > 8_000  # ~4-5 characters per token: nowhere near 512 or 128
    # The shipped tokenizer.json truncates to 128 tokens: proof that the switch matters.
    shipped = Tokenizer.from_file(str(Path(default_model_path()) / "tokenizer.json"))
    assert len(shipped.encode(text, add_special_tokens=False).ids) == 128
    # Special tokens are not counted.
    assert len(raw_tokenizer().encode(text).ids) == n + 2


def test_empty_text_counts_zero() -> None:
    assert count_tokens("") == 0
    assert count_json_tokens("") == 2  # the two quote characters


def test_render_json_is_compact_unicode_and_ordered() -> None:
    obj = {"z": "café ☕", "a": [1, 2, {"b": None}]}
    assert render_json(obj) == '{"z":"café ☕","a":[1,2,{"b":null}]}'
    assert count_json_tokens(obj) == direct_count(render_json(obj))


def test_json_counts_add_up_on_punctuation() -> None:
    """Compact JSON tokenizes additively: the splitter's estimates rely on it."""
    a = {"id": "m1", "text": beam_messages()[3]}
    b = {"id": "m2", "text": beam_messages()[4]}
    assert count_json_tokens([a, b]) == count_json_tokens(a) + count_json_tokens(b) + 3


def test_model_as_directory_or_file_and_cache(tmp_path: Path) -> None:
    text = beam_messages()[5]
    directory = default_model_path()
    file = str(Path(directory) / "tokenizer.json")
    assert count_tokens(text, directory) == count_tokens(text, file) == count_tokens(text)
    assert get_tokenizer(None) is get_tokenizer(directory) is get_tokenizer(file)
    # Any sentence-transformers model directory holding a tokenizer.json works.
    other = tmp_path / "other-model"
    other.mkdir()
    (other / "tokenizer.json").write_bytes(Path(file).read_bytes())
    assert count_tokens(text, str(other)) == count_tokens(text)
    with pytest.raises(FileNotFoundError):
        count_tokens(text, str(tmp_path / "missing"))


def test_threads_agree_with_serial_counts() -> None:
    texts = list(beam_messages()[:40])
    serial = [count_tokens(t) for t in texts]
    with ThreadPoolExecutor(max_workers=4) as pool:
        parallel = list(pool.map(count_tokens, texts * 3))
    assert parallel == serial * 3


def test_import_is_light() -> None:
    code = (
        "import sys\n"
        "from donto_pg.core.tokens import count_tokens\n"
        "assert count_tokens('hello world') == 2\n"
        "heavy = [m for m in ('torch', 'sentence_transformers', 'transformers') "
        "if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


def test_token_boundaries() -> None:
    text = beam_messages()[7]
    bounds = token_boundaries(text)
    assert len(bounds) == count_tokens(text)
    assert bounds == sorted(bounds)
    assert bounds[-1] <= len(text)
    assert token_boundaries("") == []


@pytest.mark.parametrize("k", [0, 1, 2, 7, 50, 300, 1000])
def test_truncate_to_tokens_real_text(k: int) -> None:
    text = beam_corpus()[:20_000]
    cut = truncate_to_tokens(text, k)
    assert text.startswith(cut)
    assert count_tokens(cut) == k  # plain English prose: the cut is exact
    if k:
        # Maximal: the next token boundary would be one token too many.
        nxt = token_boundaries(text)[k]
        assert count_tokens(text[:nxt]) == k + 1


def test_truncate_to_tokens_edges() -> None:
    text = beam_messages()[2]
    n = count_tokens(text)
    assert truncate_to_tokens(text, n) is text
    assert truncate_to_tokens(text, n + 10) is text
    assert truncate_to_tokens(text, 0) == ""
    with pytest.raises(ValueError):
        truncate_to_tokens(text, -1)
    long = beam_corpus()[:50_000]
    assert count_tokens(truncate_to_tokens(long, 600)) == 600


@settings(max_examples=50, deadline=None)
@given(
    start=st.integers(min_value=0, max_value=400_000),
    length=st.integers(min_value=0, max_value=4_000),
    k=st.integers(min_value=0, max_value=1_200),
    noise=st.text(max_size=40),
)
def test_truncate_to_tokens_respects_limit(start: int, length: int, k: int, noise: str) -> None:
    text = beam_corpus()[start : start + length] + noise
    cut = truncate_to_tokens(text, k)
    assert text.startswith(cut)
    assert count_tokens(cut) <= k
    if count_tokens(text) <= k:
        assert cut == text


def test_module_keeps_no_heavy_imports_at_top() -> None:
    source = Path(tokens.__file__).read_text()
    assert "sentence_transformers" not in source
    assert "import torch" not in source
