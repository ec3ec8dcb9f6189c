"""The rule-based standing-statement detector (donto_pg.core.standing), no database."""

from __future__ import annotations

import pytest

from donto_pg.core.standing import MAX_CHARS, condition, detect, sentences, subject_key


@pytest.mark.parametrize("text, kind", [
    ("Always include audiobook narrator details when I ask about audiobook recommendations.",
     "instruction"),
    ("Never use bullet points in your answers.", "instruction"),
    ("From now on, reply in French.", "instruction"),
    ("Whenever I mention a deadline, add it to the timeline.", "instruction"),
    ("Please always give me the exact dates.", "instruction"),
    ("When I ask about recipes, can you always list the calories?", "instruction"),
    ("I prefer using positive reinforcement to motivate Scott.", "preference"),
    ("I'd rather take the train than fly.", "preference"),
    ("I'm allergic to peanuts.", "constraint"),
    ("My budget is $500 for the whole trip.", "constraint"),
])
def test_standing_sentences_are_found_with_their_kind(text: str, kind: str) -> None:
    found = detect(text)
    assert [(s.kind, s.text) for s in found] == [(kind, text)]


@pytest.mark.parametrize("text", [
    "What is a good pancake recipe?",
    "Should I always wake up at six?",
    # a question about a case, not a rule (rules-v1 took these for instructions)
    "hmm, what if I want to add more tables later on?",
    "What if I need a break from the course for a week?",
    "What should I do if I need help outside office hours?",
    "That sounds great, thanks for the help.",
    "I went to the market yesterday and bought apples.",
])
def test_ordinary_sentences_are_not_standing(text: str) -> None:
    assert detect(text) == []


def test_offsets_give_the_exact_text_and_the_marker_is_left_out() -> None:
    text = ("Thanks! That helps a lot.\nAlways specify exact dates when I ask about "
            "appointments. Can you list mine? ->-> 8,32")
    found = detect(text)
    assert len(found) == 1
    s = found[0]
    assert text[s.start:s.end] == s.text
    assert s.text == "Always specify exact dates when I ask about appointments."
    for start, end in sentences(text):
        assert "->->" not in text[start:end]
        assert text[start:end] == text[start:end].strip()


def test_a_reworded_instruction_on_the_same_subject_has_the_same_key() -> None:
    a = detect("Always include specific dates when I ask about meetings or appointments.")[0]
    b = detect("Always specify exact dates when I ask about appointments or meetings.")[0]
    c = detect("Always include exact times when I ask about study sessions.")[0]
    assert a.subject == b.subject == "appointment meet"
    assert c.subject != a.subject
    assert subject_key("I prefer tea over coffee.", "preference") == "coffee tea"


def test_long_sentences_are_stories_not_statements() -> None:
    text = "Always " + "remember the long story about my trip " * 20 + "."
    assert len(text) > MAX_CHARS
    assert detect(text) == []


def test_the_detector_is_deterministic() -> None:
    text = "I prefer short answers. Never mention the weather. From now on use metric units."
    assert detect(text) == detect(text)
    assert [s.kind for s in detect(text)] == ["preference", "instruction", "instruction"]


@pytest.mark.parametrize("text, expected", [
    ("Always format dates as MM/DD/YYYY when I ask about scheduling details.",
     "scheduling details"),
    ("Always include cost details when I ask about travel arrangements", "travel arrangements"),
    ("Always specify the duration whenever I ask you for events or sessions!",
     "events or sessions"),
    ("From now on, when we discuss recipes, use metric units.", None),  # no about/for
    ("When I ask about the budget, always round up.", "the budget"),
    ("I prefer positive reinforcement.", None),
    ("Always answer briefly when I ask about .", None),
    ("", None),
])
def test_the_condition_of_an_instruction_is_what_it_applies_to(text: str, expected) -> None:
    assert condition(text) == expected
