"""Charts of evaluation reports (matplotlib, headless).

:func:`plot_recall` draws the report of :func:`donto_pg.evaluate.eval_recall`
(``donto-pg eval recall --plot FILE.png``): for each k, grouped bars of hit@k per
ability, one bar per recall arm (``vector``, ``lexical``, ``hybrid``, the
``random`` floor, and any arm a later report adds), with the overall (micro) and
macro means at the right. Only the summary parts of the report are read:
``ks``, ``arms``, ``by_ability[ability][arm]["hit@k"]``, ``overall``, ``macro``,
``evaluated``.

matplotlib is imported lazily with the ``Agg`` backend (no display needed); a
missing matplotlib raises :class:`RuntimeError` saying what to install.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RecallPlot", "plot_recall"]

# Colour-blind-safe (Okabe-Ito); the random floor is grey.
ARM_COLOURS = {
    "vector": "#0072B2",
    "lexical": "#E69F00",
    "hybrid": "#009E73",
    "random": "#999999",
}
_SPARE_COLOURS = ["#CC79A7", "#D55E00", "#56B4E9", "#F0E442", "#000000"]


@dataclass
class RecallPlot:
    """What :func:`plot_recall` drew: the file, the panels (k), the groups and arms on
    the x axis, and every text on the figure (titles, tick labels, legend)."""

    path: str
    metric: str
    ks: list[int]
    groups: list[str]
    arms: list[str]
    texts: list[str] = field(default_factory=list)


def _colour(arm: str, i: int) -> str:
    return ARM_COLOURS.get(arm) or _SPARE_COLOURS[i % len(_SPARE_COLOURS)]


def _value(block: Mapping[str, Any], arm: str, key: str) -> float:
    try:
        v = block[arm][key]
    except (KeyError, TypeError):
        return float("nan")
    return float("nan") if v is None else float(v)


def plot_recall(
    report: Mapping[str, Any],
    path: str | Path,
    *,
    ks: Sequence[int] | None = None,
    metric: str = "hit",
    title: str | None = None,
    dpi: int = 120,
) -> RecallPlot:
    """Write a PNG chart of ``metric@k`` per ability and arm from an eval_recall REPORT.

    KS: the panels, one per k (default: every k of the report). METRIC: ``hit``
    (hit@k) or ``turn_recall`` (fraction of a question's gold turns hit). Returns a
    :class:`RecallPlot`. Raises ValueError for a k the report did not evaluate or an
    empty report, RuntimeError when matplotlib is missing.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.text import Text
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError("plotting needs matplotlib: pip install matplotlib") from exc
    if metric not in ("hit", "turn_recall"):
        raise ValueError(f"metric must be 'hit' or 'turn_recall', got {metric!r}")
    report_ks = [int(k) for k in report.get("ks") or []]
    panels = [int(k) for k in (ks or report_ks)]
    missing = [k for k in panels if k not in report_ks]
    if missing:
        raise ValueError(f"k={missing} not evaluated (the report has ks {report_ks})")
    by_ability: Mapping[str, Any] = report.get("by_ability") or {}
    if not panels or not by_ability:
        raise ValueError("the report has no per-ability results to plot")
    arms = [str(a) for a in report.get("arms") or []]
    abilities = list(by_ability)
    groups = abilities + [g for g in ("overall", "macro") if isinstance(report.get(g), Mapping)]
    blocks = [by_ability[a] for a in abilities] + [report[g] for g in groups[len(abilities):]]
    labels = [
        f"{g.replace('_', ' ')}\n(n={b.get('n', '?')})" if g in by_ability
        else ("overall\n(micro)" if g == "overall" else "macro\n(mean of\nabilities)")
        for g, b in zip(groups, blocks, strict=True)
    ]

    width = 0.8 / max(len(arms), 1)
    fig, axes = plt.subplots(len(panels), 1, squeeze=False, sharex=True,
                             figsize=(max(8.0, 0.95 * len(groups) + 2), 2.6 * len(panels) + 1.2))
    for row, k in enumerate(panels):
        ax = axes[row][0]
        key = f"{metric}@{k}"
        for i, arm in enumerate(arms):
            xs = [j + (i - (len(arms) - 1) / 2) * width for j in range(len(groups))]
            ax.bar(xs, [_value(b, arm, key) for b in blocks], width, label=arm,
                   color=_colour(arm, i), edgecolor="white", linewidth=0.4)
        if len(groups) > len(abilities):
            ax.axvline(len(abilities) - 0.5, color="#444444", linewidth=0.8, linestyle=":")
        ax.set_ylim(0, 1.0)
        ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
        ax.grid(axis="y", color="#dddddd", linewidth=0.6)
        ax.set_axisbelow(True)
        ax.set_ylabel(key)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    axes[-1][0].set_xticks(range(len(groups)))
    axes[-1][0].set_xticklabels(labels, fontsize=8)
    axes[0][0].legend(ncols=max(len(arms), 1), fontsize=8, loc="lower left",
                      bbox_to_anchor=(0, 1.02), frameon=False)
    name = "hit" if metric == "hit" else "turn recall"
    fig.suptitle(title or f"donto.recall {name}@k per ability "
                 f"({report.get('evaluated', '?')} questions)", fontsize=11)
    fig.tight_layout()
    out = str(path)
    fig.savefig(out, dpi=dpi, format="png")
    texts = list(dict.fromkeys(t.get_text() for t in fig.findobj(Text) if t.get_text()))
    plt.close(fig)
    return RecallPlot(path=out, metric=metric, ks=panels, groups=groups, arms=arms, texts=texts)
