"""Split a tool/message history into token-bounded pieces for map-reduce.

A long tool history does not fit one model call, so it is cut into *pieces*,
each a list of history entries small enough for one call; each piece is mapped
(summarised, searched, ...) and the results reduced. :func:`split_context_history`
does the cutting.

It is written against a known failure of a peer memory system (Hindsight
0.10.0): a recall result ``{"query", "memories": [...], "chunks": {...}}`` was
over budget, so its splitter cut the ``memories`` list and rebuilt every
candidate as ``{**output, "memories": piece}`` - copying the 20-30k-token
``chunks`` dict into every piece. Every candidate was then over budget, every
memory became a piece of its own, each re-carrying all the raw chunks (142 to
310 pieces where 7 to 14 were due). Here a large sibling is never copied: it
is left out of every piece, and its omission is recorded once.

Rules
-----
*Budget.* ``budget = floor(budget_ratio * max_context_tokens)``; the default
ratio 0.8 keeps a fifth of the model's window for what the caller adds around
a piece (instructions, the question, the answer it generates). A budget below
:data:`MIN_BUDGET` tokens is refused.

*Piece size.* A piece is measured as the model sees it: ``count_tokens(piece)``
of the whole list (with the default counter, the tokens of its compact JSON).
Every returned piece satisfies ``count_tokens(piece) <= budget``; this is
checked by counting each piece, not estimated.

*Packing.* Entries are packed greedily, in order; an entry is never reordered.
An entry that fits a piece alone is passed through unchanged (the same object).

*Over-budget entry with a list key* (any key of ``list_keys`` holding a list):
its list items are packed into *sub-entries* ``{kept siblings..., key: items}``
(one list key per sub-entry; several list keys are done one after the other,
each item landing in exactly one sub-entry). The other keys (*siblings*) are
taken in entry order and *kept* - copied into every sub-entry - only while
their total stays within the *sibling allowance*, ``floor(SIBLING_SHARE *
budget)`` (10 % of the budget): a ``query`` rides along, a ``chunks`` dict does
not. Each sibling not kept is left out of every sub-entry, and the first
sub-entry of that entry records it once::

    "_omitted": {"chunks": {"tokens": 25123,
                            "reason": "over sibling allowance (983 of 9830 tokens)"}}

(``tokens`` is ``count_tokens(value)``). If that marker itself would exceed the
allowance (many or huge keys) it is replaced by a compact one,
``"_omitted": {"_keys": <how many>, "tokens": <their sum>, "reason": ...}``.
So the duplication per sub-entry is bounded by the allowance, whatever the
siblings weigh; an empty list under a list key counts as a small sibling.
A sub-entry keeps the entry's key order, ``_omitted`` last; kept siblings and
items are shared with the input, not copied (the input is never modified).

*Item too large alone* (its sub-entry of one item is over budget): it is
truncated once, then packed. A dict item is copied, gets ``"_truncated": true``
and has its string leaves cut on token boundaries
(:func:`donto_pg.core.tokens.token_boundaries`), longest leaf first, each cut as
little as the budget allows. If cutting every string is not enough (many
keys or numbers), each top-level value, largest first, is replaced by a prefix
of its JSON text - a string - so the top-level keys survive. Only if the keys
alone are too many, or the item is not a dict, does it become
``{"_truncated": true, "text": <prefix of its JSON, or of the string itself>}``.

*Over-budget entry without a list key*: truncated once the same way (a dict
keeps its keys and gets ``"_truncated": true``).

Any ``count_tokens`` callable taking a JSON-able value can be passed (tests use
cheap character counters); every guarantee above is checked with it exactly.
Text cut points come from the default tokenizer's offsets in every case.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from donto_pg.core.tokens import count_json_tokens, render_json, token_boundaries

__all__ = [
    "DEFAULT_BUDGET_RATIO",
    "DEFAULT_LIST_KEYS",
    "MIN_BUDGET",
    "OMITTED_KEY",
    "SIBLING_SHARE",
    "TRUNCATED_KEY",
    "context_budget",
    "sibling_allowance",
    "split_context_history",
]

TokenCounter = Callable[[Any], int]

DEFAULT_BUDGET_RATIO = 0.8
"""Share of the model window given to one piece; the rest is for the caller's prompt."""

DEFAULT_LIST_KEYS: tuple[str, ...] = ("memories", "results", "observations")
"""Keys whose list value may be split across pieces."""

SIBLING_SHARE = 0.1
"""Share of the budget that the siblings copied into every sub-entry may take."""

MIN_BUDGET = 128
"""Smallest budget (tokens) accepted: below it markers and framing crowd out content."""

OMITTED_KEY = "_omitted"
TRUNCATED_KEY = "_truncated"


def context_budget(max_context_tokens: int, budget_ratio: float = DEFAULT_BUDGET_RATIO) -> int:
    """Token budget of one piece: ``floor(budget_ratio * max_context_tokens)``.

    A tiny epsilon absorbs binary floating-point error (``0.29 * 100`` is 29,
    not 28). Raises ValueError for a ratio outside (0, 1] or a budget below
    :data:`MIN_BUDGET`.
    """
    if not 0 < budget_ratio <= 1:
        raise ValueError(f"budget_ratio must be in (0, 1], got {budget_ratio}")
    budget = math.floor(budget_ratio * max_context_tokens + 1e-9)
    if budget < MIN_BUDGET:
        raise ValueError(
            f"budget {budget} (= {budget_ratio} * {max_context_tokens}) is below "
            f"the minimum of {MIN_BUDGET} tokens"
        )
    return budget


def sibling_allowance(budget: int) -> int:
    """Tokens the kept siblings of one sub-entry may take together."""
    return math.floor(SIBLING_SHARE * budget)


def split_context_history(
    entries: Sequence[dict[str, Any]],
    max_context_tokens: int,
    *,
    count_tokens: TokenCounter = count_json_tokens,
    budget_ratio: float = DEFAULT_BUDGET_RATIO,
    list_keys: Iterable[str] = DEFAULT_LIST_KEYS,
) -> list[list[dict[str, Any]]]:
    """Cut ``entries`` into pieces of at most ``context_budget(...)`` tokens each.

    See the module docstring for the rules (budget, sibling allowance, the
    ``_omitted`` and ``_truncated`` markers). Returns the pieces in order;
    an empty history gives no pieces. The input is not modified.
    """
    budget = context_budget(max_context_tokens, budget_ratio)
    return _Splitter(budget, count_tokens, tuple(list_keys)).split(list(entries))


class _Splitter:
    """One split run: the budget, the counter, and the counter's framing costs."""

    def __init__(self, budget: int, count: TokenCounter, list_keys: tuple[str, ...]) -> None:
        self.budget = budget
        self.count = count
        self.list_keys = list_keys
        self.allowance = sibling_allowance(budget)
        # Framing costs measured on the counter itself (for compact JSON and a
        # WordPiece tokenizer: "[]" = 2, "{}" = 2, a comma = 1). They only steer
        # the greedy estimate; every piece is then counted exactly.
        self.empty_list = count([])
        self.empty_dict = count({})
        self.frame = max(0, count([{}]) - self.empty_dict)
        self.sep = max(0, count([{}, {}]) - 2 * count([{}]) + self.empty_list)

    # -- top level ---------------------------------------------------------
    def split(self, entries: list[Any]) -> list[list[Any]]:
        units: list[Any] = []
        costs: list[int] = []
        exact: list[int | None] = []
        for entry in entries:
            alone = self.count([entry])
            if alone <= self.budget:
                units.append(entry)
                costs.append(alone - self.frame)
                exact.append(alone)
            else:
                for sub, sub_alone in self._split_entry(entry):
                    units.append(sub)
                    costs.append(sub_alone - self.frame)
                    exact.append(sub_alone)

        def build(group: list[Any], _index: int) -> list[Any]:
            return list(group)

        # A unit alone always fits here (its size alone is known and within
        # budget), so no truncation hook is needed at the top level.
        groups, _ = self._pack(units, costs, exact, lambda _i: self.empty_list, build, None)
        return groups

    # -- splitting one entry ----------------------------------------------
    def _split_entry(self, entry: Any) -> list[tuple[Any, int]]:
        """Sub-entries of an over-budget entry, each with its exact size as a piece."""
        if not isinstance(entry, dict) or not any(
            isinstance(entry.get(k), list) for k in self.list_keys if k in entry
        ):
            fixed = self._truncate(entry, lambda cand: self.count([cand]) <= self.budget)
            return [(fixed, self.count([fixed]))]

        split_keys = [
            k for k in entry if k in self.list_keys and isinstance(entry[k], list) and entry[k]
        ]
        kept, omitted = self._choose_siblings(entry, split_keys)
        marker = self._omission_marker(omitted)

        def make(key: str | None, items: list[Any], first: bool) -> dict[str, Any]:
            sub: dict[str, Any] = {}
            for k in entry:
                if k in kept:
                    sub[k] = entry[k]
                elif k == key:
                    sub[k] = items
            if first and marker is not None:
                sub[OMITTED_KEY] = marker
            return sub

        out: list[tuple[Any, int]] = []
        if not split_keys:
            # Only empty lists under the list keys: one sub-entry of the kept
            # siblings (the empty lists among them) and the marker.
            sub = make(None, [], True)
            fixed = self._truncate_if_needed(sub)
            return [(fixed, self.count([fixed]))]

        for key in split_keys:
            items = list(entry[key])
            costs = [self.count(item) for item in items]
            first_group_of_entry = not out

            def is_first(index: int, _first: bool = first_group_of_entry) -> bool:
                return _first and index == 0

            def base(index: int, _key: str = key) -> int:
                return self.count([make(_key, [], is_first(index))])

            def build(group: list[Any], index: int, _key: str = key) -> list[Any]:
                return [make(_key, group, is_first(index))]

            def fix(item: Any, index: int, _key: str = key) -> Any:
                first = is_first(index)
                return self._truncate(
                    item, lambda cand: self.count([make(_key, [cand], first)]) <= self.budget
                )

            groups, sizes = self._pack(items, costs, [None] * len(items), base, build, fix)
            for index, (group, size) in enumerate(zip(groups, sizes, strict=True)):
                out.append((make(key, group, is_first(index)), size))
        return out

    def _choose_siblings(
        self, entry: dict[str, Any], split_keys: list[str]
    ) -> tuple[set[str], dict[str, int]]:
        """Keep siblings in entry order while they fit the allowance together.

        Returns the kept keys and, for each omitted key, ``count(value)``.
        """
        kept: dict[str, Any] = {}
        omitted: dict[str, int] = {}
        for k, v in entry.items():
            if k in split_keys:
                continue
            value_tokens = self.count(v)
            if value_tokens <= self.allowance:
                candidate = {**kept, k: v}
                if self.count(candidate) - self.empty_dict <= self.allowance:
                    kept = candidate
                    continue
            omitted[k] = value_tokens
        return set(kept), omitted

    def _omission_marker(self, omitted: dict[str, int]) -> dict[str, Any] | None:
        """The ``_omitted`` value recording left-out siblings, or None if none were."""
        if not omitted:
            return None
        reason = f"over sibling allowance ({self.allowance} of {self.budget} tokens)"
        marker: dict[str, Any] = {
            k: {"tokens": tokens, "reason": reason} for k, tokens in omitted.items()
        }
        if self.count({OMITTED_KEY: marker}) - self.empty_dict > self.allowance:
            marker = {"_keys": len(omitted), "tokens": sum(omitted.values()), "reason": reason}
        return marker

    # -- packing -------------------------------------------------------------
    def _pack(
        self,
        units: list[Any],
        costs: list[int],
        exact_alone: list[int | None],
        base: Callable[[int], int],
        build: Callable[[list[Any], int], Any],
        fix: Callable[[Any, int], Any] | None,
    ) -> tuple[list[list[Any]], list[int]]:
        """Greedy in-order packing; returns the groups and their exact counts.

        ``costs[i]`` estimates what unit ``i`` adds to a group, ``base(g)`` the
        cost of empty group ``g``, ``build(group, g)`` renders group ``g`` in the
        form that is counted against the budget. Each group is counted exactly
        and shrunk from the end while over budget; a unit over budget alone is
        replaced by ``fix(unit, g)``, which must return a unit that fits (with
        ``fix=None`` the caller guarantees that every unit fits alone).
        """
        groups: list[list[Any]] = []
        sizes: list[int] = []
        units = list(units)
        i, n = 0, len(units)
        while i < n:
            g = len(groups)
            estimate = base(g)
            j = i
            while j < n:
                add = costs[j] + (self.sep if j > i else 0)
                if j > i and estimate + add > self.budget:
                    break
                estimate += add
                j += 1
            while True:
                known = exact_alone[i] if j == i + 1 else None
                size = known if known is not None else self.count(build(units[i:j], g))
                if size <= self.budget:
                    break
                if j == i + 1:
                    if fix is None:  # pragma: no cover - callers guarantee singletons fit
                        raise AssertionError("a unit alone is over budget")
                    units[i] = fix(units[i], g)
                    size = self.count(build(units[i:j], g))
                    if size > self.budget:  # pragma: no cover - _truncate guarantees fit
                        raise AssertionError("truncated unit still over budget")
                    break
                j -= 1
            groups.append(units[i:j])
            sizes.append(size)
            i = j
        return groups, sizes

    # -- truncation ----------------------------------------------------------
    def _truncate_if_needed(self, unit: Any) -> Any:
        if self.count([unit]) <= self.budget:
            return unit
        return self._truncate(unit, lambda cand: self.count([cand]) <= self.budget)

    def _truncate(self, value: Any, fits: Callable[[Any], bool]) -> Any:
        """A truncated stand-in for ``value`` that satisfies ``fits``, with a marker."""
        if isinstance(value, dict):
            work = copy.deepcopy(value)
            work[TRUNCATED_KEY] = True
            if fits(work):
                return work
            leaves = sorted(_string_leaves(work), key=lambda p: -len(_get(work, p)))
            for path in leaves:
                text = _get(work, path)
                cut = _longest_fitting_prefix(
                    text, lambda prefix, _p=path: fits(_set(work, _p, prefix))
                )
                if cut is not None:
                    _set(work, path, cut)
                    return work
                _set(work, path, "")
            flat = self._truncate_values(value, fits)
            if flat is not None:
                return flat
            text = render_json(value)
        elif isinstance(value, str):
            text = value
        else:
            text = render_json(value)
        wrapper: dict[str, Any] = {TRUNCATED_KEY: True, "text": text}
        cut = _longest_fitting_prefix(text, lambda prefix: fits({**wrapper, "text": prefix}))
        if cut is not None:
            return {TRUNCATED_KEY: True, "text": cut}
        bare = {TRUNCATED_KEY: True}
        if fits(bare):
            return bare
        raise ValueError(f"budget {self.budget} is too small to hold even a truncation marker")

    @staticmethod
    def _truncate_values(value: dict[str, Any], fits: Callable[[Any], bool]) -> Any:
        """Second stage for a dict whose strings alone cannot be cut enough.

        Each top-level value, largest first, is replaced by a prefix of its
        JSON text (a string itself is cut as it is), emptied if even that does
        not fit. Returns None if the keys and scalars alone are too many.
        """
        work: dict[str, Any] = {**value, TRUNCATED_KEY: True}
        order = sorted(
            (k for k in value if k != TRUNCATED_KEY), key=lambda k: -len(render_json(value[k]))
        )
        for key in order:
            v = value[key]
            if not isinstance(v, str | dict | list):
                continue  # a number, boolean or null does not shrink
            text = v if isinstance(v, str) else render_json(v)
            cut = _longest_fitting_prefix(text, lambda p, _k=key: fits({**work, _k: p}))
            if cut is not None:
                work[key] = cut
                return work
            work[key] = ""
        return None


def _string_leaves(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every string value inside ``obj`` (dict values and list items)."""
    if isinstance(obj, str):
        return [path]
    out: list[tuple[Any, ...]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.extend(_string_leaves(v, (*path, k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.extend(_string_leaves(v, (*path, i)))
    return out


def _get(obj: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        obj = obj[step]
    return obj


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    """Set the leaf at ``path`` in place; returns ``obj`` (for use in predicates)."""
    parent = _get(obj, path[:-1])
    parent[path[-1]] = value
    return obj


def _longest_fitting_prefix(text: str, fits: Callable[[str], bool]) -> str | None:
    """Longest token-boundary prefix of ``text`` accepted by ``fits``, or None.

    Cut points are the default tokenizer's token end offsets; binary search
    assumes that a shorter prefix never fits worse than a longer one.
    """
    if not fits(""):
        return None
    bounds = token_boundaries(text)
    lo, hi = 0, len(bounds)  # lo tokens are known to fit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(text[: bounds[mid - 1]]):
            lo = mid
        else:
            hi = mid - 1
    return text[: bounds[lo - 1]] if lo else ""
