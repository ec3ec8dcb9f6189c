"""Tests for donto_pg.plots (the hit@k-per-ability chart of an eval_recall report)."""

from __future__ import annotations

import pytest

from donto_pg import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ABILITIES = ["information_extraction", "knowledge_update", "temporal_reasoning"]
ARMS = ["vector", "lexical", "hybrid", "random"]


def report(ks=(1, 5, 10)) -> dict:
    """A report in the shape of donto_pg.evaluate.eval_recall (summary parts only)."""

    def block(n: int, base: float) -> dict:
        return {"n": n} | {
            arm: {f"{m}@{k}": round(min(1.0, base * (a + 1) * k / 10), 4)
                  for k in ks for m in ("hit", "turn_recall")}
            for a, arm in enumerate(ARMS)}

    by_ability = {a: block(4 + i, 0.1 + 0.05 * i) for i, a in enumerate(ABILITIES)}
    return {"ks": list(ks), "arms": ARMS, "evaluated": 15, "by_ability": by_ability,
            "overall": block(15, 0.12), "macro": block(3, 0.13), "questions": []}


def test_plot_recall_writes_a_png_with_every_ability_and_arm(tmp_path) -> None:
    out = tmp_path / "recall.png"
    got = plots.plot_recall(report(), out)
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 10_000
    assert got.path == str(out) and got.ks == [1, 5, 10] and got.arms == ARMS
    assert got.groups == ABILITIES + ["overall", "macro"]
    text = "\n".join(got.texts)
    for ability in ABILITIES:
        assert ability.replace("_", " ") in text
    for arm in ARMS:
        assert arm in got.texts  # legend entries
    for k in (1, 5, 10):
        assert f"hit@{k}" in got.texts  # one panel per k
    assert "15 questions" in text


def test_plot_recall_one_k_turn_recall_and_extra_arm(tmp_path) -> None:
    r = report(ks=(10,))
    r["arms"] = ARMS + ["summary"]  # an arm the palette does not know gets a spare colour
    for block in [*r["by_ability"].values(), r["overall"], r["macro"]]:
        block["summary"] = {"hit@10": 0.5, "turn_recall@10": 0.25}
    got = plots.plot_recall(r, tmp_path / "t.png", metric="turn_recall", title="T")
    assert (tmp_path / "t.png").read_bytes()[:8] == PNG_MAGIC
    assert "turn_recall@10" in got.texts and "summary" in got.texts and "T" in got.texts


def test_plot_recall_refuses_bad_input(tmp_path) -> None:
    with pytest.raises(ValueError, match="not evaluated"):
        plots.plot_recall(report(), tmp_path / "x.png", ks=[3])
    with pytest.raises(ValueError, match="metric"):
        plots.plot_recall(report(), tmp_path / "x.png", metric="mrr")
    with pytest.raises(ValueError, match="no per-ability"):
        plots.plot_recall({"ks": [10], "arms": ["vector"], "by_ability": {}},
                          tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_the_table_shows_the_fraction_of_gold_turns_summarization_hits() -> None:
    """`eval recall --help` promises it; before, only --json had turn_recall@k."""
    from donto_pg.evaluate import format_table

    r = report() | {"span": "[header_start, char_end)", "excluded_abstention": 0,
                    "excluded_no_gold": 0}
    r["by_ability"]["summarization"] = r["by_ability"]["knowledge_update"] | {"n": 2}
    r["by_ability"]["summarization"]["hybrid"] = {
        **r["by_ability"]["summarization"]["hybrid"], "turn_recall@10": 0.4321}
    (line,) = [x for x in format_table(r).splitlines() if x.startswith("summarization, turns")]
    assert "0.432" in line
    assert "turns hit" not in format_table(report() | {
        "span": "", "excluded_abstention": 0, "excluded_no_gold": 0})
    assert "turns hit" not in format_table(r, metric="turn_recall")
