"""The pure floor: plain Python, no database driver, no ``plpy``.

Everything here is a function of its arguments (plus models and tokenizers read
from disk): the line-respecting windows of projection A, the segmenter of
projection B and its fence parser, anchoring, the claims parser, prompt
rendering, the rule-based extractor, token counting, the recall payload packer,
the tool-history splitter, the sentence-transformers encoder and BEAM's data
model with its canonical text. Both the server (PL/Python, :mod:`donto_pg.server`)
and the client modules import it; it imports nothing else of donto_pg.
"""
