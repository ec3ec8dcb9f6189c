"""Load BEAM conversations and probing questions, and render the canonical chat text.

BEAM ("Beyond a Million Tokens", Tavakoli et al.) ships very long synthetic
user/assistant conversations plus 20 probing questions per conversation. This
package is pure Python (stdlib only; ``pyarrow`` is imported lazily, and only to
read ``.parquet`` files). The data model (:class:`Message`, :class:`Question`,
:class:`Conversation`, :class:`TurnSpan`) and the canonical chat text
(:func:`format_chat`, :func:`code_char_share`) live in the pure floor,
:mod:`donto_pg.core.conversation`, and are re-exported here.

Modules: :mod:`.discovery` (which layout a path holds, :func:`iter_beam`),
:mod:`.json_reader` (GitHub layout, ``.json`` row arrays), :mod:`.jsonl_reader`,
:mod:`.parquet_reader`, :mod:`.parse` (messages and questions, whatever the file).

Inputs accepted by :func:`iter_beam`
------------------------------------
* the GitHub layout: a BEAM root (holding ``chats/``), a ``chats/`` directory, a
  scale directory (``chats/100K``), one conversation directory (``chats/100K/1``
  or ``chats/10M/5``) or one ``chat.json``;
* Hugging Face rows: a ``.jsonl`` file (JSON Lines), a ``.parquet`` file, or a
  ``.json`` array of rows. Each row has ``conversation_id``, ``chat`` (a list of
  batches, each a flat list of messages; in BEAM-10M a list of dicts keyed
  ``plan-1`` .. ``plan-10`` whose ids are already global) and
  ``probing_questions`` (a Python-literal string, parsed with
  :func:`ast.literal_eval`).

Normalisation
-------------
* ``Message.seq`` is the 0-based position in the whole conversation;
  ``turn_id`` is BEAM's message id in ONE global numbering (10M GitHub layout:
  local id + number of messages in all earlier plans); ``session`` is the
  1-based batch position across the whole conversation (10M: across plans);
  ``exchange`` is the 0-based index of the exchange (an inner list of
  ``turns``; in flat Hugging Face batches a new exchange starts at each user
  ``main_question``).
* ``date`` is the session's time anchor (BEAM puts ``time_anchor`` such as
  ``March-15-2024`` on the first message of a batch only); it is copied to every
  message of the session. ISO dates (``2024-03-15``) are accepted too.
* Content is cleaned by :func:`clean_content`: ``\\r\\n`` and lone ``\\r`` become
  ``\\n``, the generator marker at the end (`` ->-> 1,1``, ``->-> 2,N/A``,
  ``->-> 1,5)`` ...) is removed and trailing whitespace is stripped. Nothing
  else is changed.
* Duplicate message ids (a known defect of some 1M conversations) are kept and
  reported in ``Conversation.warnings``; a gold id then stands for every message
  that carries it.
* Bad input yields a :class:`BeamFormatError` naming the file and the place
  (batch, ``turns[e][m]`` position, message id, field); other conversations
  still load.
"""

from donto_pg.beam.discovery import iter_beam
from donto_pg.beam.parse import (
    ABILITIES,
    ANSWER_KEYS,
    BeamFormatError,
    clean_content,
    parse_beam_date,
)
from donto_pg.core.conversation import (
    Conversation,
    Message,
    Question,
    TurnSpan,
    code_char_share,
    format_chat,
)

__all__ = [
    "ABILITIES",
    "ANSWER_KEYS",
    "BeamFormatError",
    "Conversation",
    "Message",
    "Question",
    "TurnSpan",
    "clean_content",
    "code_char_share",
    "format_chat",
    "iter_beam",
    "parse_beam_date",
]
