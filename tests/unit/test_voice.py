"""Whose words (donto_pg.core.voice) after a third review: the user's own words that were
dropped as someone else's (F7) and others' words still taken for the user's (F8), through
both readers: the standing detector and the baseline extractor. (Speed is measured in
benchmarks/voice_speed.py, not here.)"""

from __future__ import annotations

import pytest

from donto_pg.core.rule_extractor import dialogue_facts
from donto_pg.core.standing import detect
from donto_pg.core.voice import others_words


def facts(text: str) -> set[tuple[str, str]]:
    return {(f["predicate"], f["object"]) for f in dialogue_facts(text, 1)}


# --- F7: the user's own words, kept ---------------------------------------------------

def test_a_quote_closing_after_its_full_stop_ends_the_reported_words() -> None:
    text = 'My brother said: "Coffee is better." I live in Oslo and I prefer tea.'
    assert ("lives in", "Oslo") in facts(text)
    assert [s.text for s in detect(text)] == ["I live in Oslo and I prefer tea."]
    text = 'My wife said "we need a budget." Please always show costs in euros.'
    assert [s.text for s in detect(text)] == ["Please always show costs in euros."]


@pytest.mark.parametrize("text", [
    'Always recommend books like "Dune" that people say are classics.',
    # the verb does not end the clause: no attribution
    'From now on, write "colour" not "color", my editor insists on British spelling.',
    # "the way my mom says": the user's words about what she says
    "Always reply the way my mom says, short and kind.",
])
def test_a_quote_or_a_verb_of_saying_the_words_do_not_attribute_stays_the_users(text) -> None:
    assert others_words(text) == []
    assert [s.text for s in detect(text)] == [text]


def test_a_nested_list_item_is_not_a_pasted_block() -> None:
    text = ("Preferences:\n- Formatting\n    - Always use bullet points in your answers.\n"
            "\t1. Never use emojis in your answers.\n    2) I prefer short answers.")
    assert others_words(text) == []
    assert [s.text for s in detect(text)] == [
        "- Always use bullet points in your answers.",
        "Never use emojis in your answers.", "2) I prefer short answers."]  # "1." ends one
    # an indented line of anything else is still a pasted block
    assert detect("Here:\n    Always use bullet points in your answers.") == []


@pytest.mark.parametrize("text", [
    "The doctor told me to avoid sugar, so please never suggest desserts.",
    "Always answer briefly; my manager told me I ramble, but I want short answers.",
    'My boss says "always CC him", but I want you to never CC him from now on.',
])
def test_the_users_instruction_beside_reported_words_in_one_sentence_is_kept(text) -> None:
    assert others_words(text) != []
    assert [(s.kind, s.text) for s in detect(text)] == [("instruction", text)]


@pytest.mark.parametrize("text", [
    # set off by a comma only, or not at all: the reported words' sentence is theirs
    "When I ask about recipes, the article I read says to use imperial units.",
    "My friend told me that from now on she will never eat meat, and I think so too.",
    "He said to use tabs; never spaces.",
])
def test_reported_words_in_a_sentence_without_a_clause_of_the_users_stay_out(text) -> None:
    assert detect(text) == []


# --- F8: others' words, kept out ------------------------------------------------------

def test_a_single_quoted_passage_after_a_verb_of_saying_is_not_the_users() -> None:
    text = "My boss said 'I live in Paris and my name is Claire.' I'm Bob."
    assert not {o for _, o in facts(text)} & {"Paris", "Claire"}
    assert ("name is", "Bob") in facts(text) or ("is", "Bob") in facts(text)
    assert others_words("He said 'I'm sure, don't worry.' I live in Oslo.") == [(0, 32)]
    assert detect("My boss said 'Always CC me on every reply.'") == []


def test_words_after_reads_colon_are_not_the_users() -> None:
    text = "The email from HR reads: I live in Paris. My name is Karen."
    assert facts(text) == set()
    assert detect("The sign reads: Always knock before entering.") == []


@pytest.mark.parametrize("text", [
    "From: boss@example.com\nSubject: rules\n\nAlways use a formal tone in replies.",
    "From: boss@example.com\nTo: me@example.com\nAlways use a formal tone in replies.",
    "My boss's email:\nAlways CC me on every reply.",
    "Here is the message I got from HR:\n\nAlways CC me on every reply.\nNever use emojis.",
    # (rules-v6) a mail of several paragraphs is someone else's to its end: nothing says
    # the user's own words resume
    "My boss's email:\nAlways CC me on every reply.\n\nPlease always answer in English.",
    "My boss's email:\nHi team,\n\nAlways CC me on every reply.\n\nNever use emojis.",
    "From: boss@example.com\nSubject: rules\n\nHi,\n\nNever use emojis in replies.",
    "From: boss@example.com\nTo: me@example.com\nHi,\n\nAlways use a formal tone in replies.",
    # a question in the mail's own words is no turn back to the assistant
    "My boss's email:\nHi,\n\nWhat do you think about moving the call?\n\nAlways CC me.",
    # an address that starts a mail's paragraph does not make it an address
    "My boss's email:\nbob@example.com\nAlways CC me on every reply.",
])
def test_a_pasted_mail_is_not_the_users_rule(text: str) -> None:
    assert detect(text) == []


def test_the_users_own_rule_after_a_colon_or_after_the_mail_is_kept() -> None:
    assert [s.text for s in detect("Here is my rule:\nAlways CC me.")] == ["Always CC me."]
    # the user's own words resume after the mail's closing line and its paragraph
    for closing in ("Thanks,\nBob", "Best regards,\nBob Smith", "Cheers", "--\nBob"):
        text = (f"My boss's email:\nHi,\n\nAlways CC me on every reply.\n\n{closing}\n\n"
                "Please always answer in English.")
        assert [s.text for s in detect(text)] == ["Please always answer in English."]
    # a mail already marked as quoted lines: the user's lines after it stay the user's
    text = "Here is the mail:\n> Always CC me.\nAlways answer in English."
    assert [s.text for s in detect(text)] == ["Always answer in English."]


@pytest.mark.parametrize("back", [
    "What do you think?", "Thoughts?", "Any advice?", "How should I reply to him?",
    "Can you summarize this email for me?", "Is the message above rude?",
])
def test_the_users_words_resume_at_a_paragraph_that_turns_back_to_the_assistant(back) -> None:
    text = (f"Here is the message I got from HR:\nAlways CC me.\n\nNever use emojis.\n\n{back}"
            "\nAlso, always answer in English.")
    assert [s.text for s in detect(text)] == ["Also, always answer in English."]
    assert others_words(text)[-1][1] < text.index(back)


def test_a_line_of_the_users_ending_in_email_colon_before_an_address_is_no_mail() -> None:
    text = "Please always sign off with my email:\njo@example.com"
    assert others_words(text) == []
    assert [s.text for s in detect(text)] == ["Please always sign off with my email:"]
    text = ("Please always sign off with my email:\n  <jo@example.com>\n\n"
            "And always answer in English.")
    assert others_words(text) == []
    assert len(detect(text)) == 2


@pytest.mark.parametrize("text", [
    "'Always answer in French,' my brother said.",
    "‘Never use emojis,’ said my boss.",
    "'Don't ever use emojis from now on,' he told me.",
])
def test_a_single_quoted_passage_attributed_after_it_is_not_the_users(text) -> None:
    assert others_words(text)[0][0] == 0  # the quote is someone else's, not only the verb
    assert detect(text) == []


def test_a_single_quoted_passage_attributed_after_it_states_nothing_about_the_user() -> None:
    text = "'I live in Paris,' my brother said. I live in Oslo."
    assert ("lives in", "Oslo") in facts(text) and ("lives in", "Paris") not in facts(text)
    assert others_words(text) == [(0, 18)]


@pytest.mark.parametrize("text", [
    # no speaker and verb ending the clause after the quote: the user's own
    "Always write 'colour', my editor insists on British spelling.",
    "Never say 'never', it's bad luck.",
    "Always reply in 'plain English', my teacher said it best.",
    # apostrophes are no quotes; a capitalised adverb is no speaker ("Never say ...")
    "Always use the users' names and don't say 'sir'.",
    "Never say 'utilize' when 'use' will do.",
    'Always write "colour" and never "color".',
    "Always say 'thanks' at the end of every answer.",
])
def test_a_single_quoted_passage_the_words_after_it_do_not_attribute_stays_the_users(
        text) -> None:
    assert others_words(text) == []
    assert [s.text for s in detect(text)] == [text]
