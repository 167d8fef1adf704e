"""Questions worded unlike their statement are still answered from the record (issue 41):
other word forms, synonyms, frame words, the kind of value asked for, polite wrappers,
corrections phrased in other ways; and nothing is answered from the record that the
participant did not state. Scripted model, no model call: fast.

The facts and phrasings here are not the eval's (``edge eval conversation --part long``):
the matching is checked on its own cases."""

from __future__ import annotations

import pytest
from conversation_helpers import Clock, manager, responder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge.eval._long import PARTICIPANTS
from edge.eval._recall import FILLERS
from edge.llm import ScriptedLLM
from edge.recall import NOT_STATED, asked_of_record, lemma, repairs, spoken

pytestmark = pytest.mark.anyio

FACTS = {
    # statement: (value the answer must name, questions asked directly, clauses for wrappers)
    "My office is in building 4.": (
        "building 4",
        ("Where do I work?", "Where is my office?", "Which building is my office in?"),
        ("where my office is", "where I work"),
    ),
    "The autoclave runs at 9 every morning.": (
        "9",
        (
            "When does the autoclave run?",
            "What time is the autoclave run?",
            "At what time does the autoclave start?",
            "When is the autoclave running?",
        ),
        ("when the autoclave runs", "what time the autoclave starts"),
    ),
    "My dentist appointment is on Friday at 3 pm.": (
        "friday",
        (
            "When is my dentist appointment?",
            "What day is my appointment with the dentist?",
            "When do I see the dentist?",
            "When is my dentist booked?",
        ),
        ("when my dentist appointment is",),
    ),
    "My sister's name is Priya.": (
        "priya",
        ("What is my sister's name?", "What's my sister called?", "Who is my sister?"),
        ("what my sister is called", "my sister's name"),
    ),
    "I parked the car on level 3 of the garage.": (
        "level 3",
        (
            "Where did I park?",
            "Where is my car?",
            "Where did I leave the car?",
            "Which level did I park on?",
        ),
        ("where I parked", "where my car is"),
    ),
    "The wifi password is tulip42.": (
        "tulip42",
        (
            "What's the wifi password?",
            "What is the wifi code?",
            "Which password does the wifi use?",
        ),
        ("the wifi password", "what the wifi password is"),
    ),
    "Professor Lindqvist teaches my statistics course.": (
        "lindqvist",
        ("Who teaches my statistics course?", "Who is my statistics teacher?"),
        ("who teaches my statistics course", "who my statistics teacher is"),
    ),
    "My badge number is 5521.": (
        "5521",
        ("What number is on my badge?", "What's my badge number?", "Which badge number is mine?"),
        ("my badge number", "what my badge number is"),
    ),
}
OTHERS = (
    "The coffee machine is on the second floor.",
    "I like my tea with milk.",
    "The printer on floor 2 is broken.",
    "My bike is blue.",
    "My train home leaves at 17:42.",
)
"""Other statements in the same record (the matching must pick the right one)."""
WRAPPERS = (
    "Could you tell me {}?",
    "Can you remind me {}?",
    "Do you remember {}?",
    "Do you know {}?",
    "Remind me, {}.",
    "Sorry, could you tell me {} again?",
)


async def stated(ctx, pid: str, question: str) -> str | None:
    answer = ctx.stated(pid, question)
    return None if answer is None else answer.text


async def record(ctx, pid: str, *texts: str) -> None:
    for text in texts:
        await ctx.record_exchange(pid, text, "Okay, noted.")


def make():
    llm = ScriptedLLM(responder("S.", answer="The model's answer."))
    return manager(llm, Clock(step_us=1_000))


def test_word_forms_meet() -> None:
    for a, b in (
        ("supervisor", "supervises"),
        ("supervised", "supervise"),
        ("manager", "manages"),
        ("teacher", "teaches"),
        ("runs", "running"),
        ("booked", "booking"),
        ("briefing", "briefings"),
        ("held", "hold"),
        ("goes", "go"),
        ("pipettes", "pipette"),
        ("parties", "party"),
        ("stopped", "stop"),
        ("glasses", "glass"),
    ):
        assert lemma(a) == lemma(b), (a, b)
    for a, b in (("number", "numb"), ("locker", "lock"), ("sister", "sist"), ("code", "coat")):
        assert lemma(a) != lemma(b), (a, b)


@pytest.mark.parametrize("statement", list(FACTS))
async def test_questions_in_other_words_are_told_from_the_record(statement: str) -> None:
    value, questions, clauses = FACTS[statement]
    ctx = make()
    async with ctx:
        await record(ctx, "ann", OTHERS[0], statement, *OTHERS[1:])
        asked = list(questions) + [w.format(c) for w in WRAPPERS for c in clauses]
        for question in asked:
            reply = await stated(ctx, "ann", question)
            assert reply is not None and value in reply.lower(), (question, reply)
        # nothing else she said answers it, and nobody else's record does
        for question in asked:
            assert await stated(ctx, "bob", question) in (None, NOT_STATED), question


async def test_a_question_nothing_stated_answers_is_not_guessed() -> None:
    ctx = make()
    async with ctx:
        await record(ctx, "ann", *FACTS, *OTHERS)
        # a word of it was said ("the wifi *password*"): the model answers
        assert await stated(ctx, "ann", "What is my locker code?") is None
        for question in (
            "Who is my supervisor?",  # no one of that role was named
            "Where did I put the spare key?",
            "Do you remember my flight number?",
        ):
            assert await stated(ctx, "ann", question) == NOT_STATED, question
        for question in (  # not about her record: the model answers
            "What's the capital of Canada?",
            "How do I spell centrifuge?",
            "Where should I go for lunch?",
            "Who wrote Hamlet?",
            "When does the sun set in winter?",
        ):
            assert await stated(ctx, "ann", question) is None, question
        # asked for a time, the office's building is no answer; nor a place for a person,
        # nor a time for a place
        for question in ("When is my office open?", "Who is in my office?", "Where do I live?"):
            assert await stated(ctx, "ann", question) in (None, NOT_STATED), question


async def test_ordinary_turns_are_never_told_from_the_record() -> None:
    """The eval's ordinary turns, asked by someone who stated every eval fact: the model
    answers each (none is a question about what they said)."""
    ctx = make()
    said = [t for p in PARTICIPANTS for t in p.said] + list(FACTS)
    async with ctx:
        await record(ctx, "ann", *said)
        for user, _ in FILLERS:
            assert await stated(ctx, "ann", user) is None, user


CORRECTIONS = (
    # (statement, correction, question, new value, old value)
    ("The team meeting is at 10.", "Actually it moved to 11.", "When is the team meeting?"),
    ("The seminar is in room 204.", "Scratch that, the seminar is in room 310.", "Where is it?"),
    ("My flight leaves at 6:40.", "Change of plan: my flight now leaves at 9:15.", ""),
    ("The centrifuge is booked for 10:30.", "Sorry, I meant 11:30.", ""),
    ("The briefing is at 14:00.", "No wait, it's at 16:00.", ""),
    ("My locker code is 4711.", "Correction: my locker code is 4712.", ""),
    ("The delivery comes on Tuesday.", "The delivery was postponed to Thursday.", ""),
    ("My partner's name is Dana.", "Make that Mira.", ""),
    ("The courier arrives at 13:00.", "I was wrong, the courier arrives at 15:00.", ""),
)
QUESTIONS = {
    "The team meeting is at 10.": ("When is the team meeting?", "11", "10"),
    "The seminar is in room 204.": ("Which room is the seminar in?", "310", "204"),
    "My flight leaves at 6:40.": ("When does my flight leave?", "9:15", "6:40"),
    "The centrifuge is booked for 10:30.": ("What time is my centrifuge slot?", "11:30", "10:30"),
    "The briefing is at 14:00.": ("When is the briefing now?", "16:00", "14:00"),
    "My locker code is 4711.": ("Do you remember my locker code?", "4712", "4711"),
    "The delivery comes on Tuesday.": ("When does the delivery come?", "thursday", "tuesday"),
    "My partner's name is Dana.": ("What is my partner called?", "mira", "dana"),
    "The courier arrives at 13:00.": ("When is the courier coming?", "15:00", "13:00"),
}


@pytest.mark.parametrize("pair", CORRECTIONS, ids=[c[1] for c in CORRECTIONS])
async def test_corrections_in_other_words_win(pair) -> None:
    statement, correction, _ = pair
    question, new, old = QUESTIONS[statement]
    ctx = make()
    async with ctx:
        await record(ctx, "ann", OTHERS[0], statement, correction, *OTHERS[1:])
        reply = await stated(ctx, "ann", question)
    assert reply is not None and new in reply.lower() and old not in reply.lower(), reply


def test_a_repair_naming_only_the_new_value_replaces_the_old_one() -> None:
    assert repairs("Sorry, I meant 11:30.", "The centrifuge is booked for 10:30.")
    assert repairs("Make that Mira.", "My partner's name is Dana.")
    assert not repairs("Sorry, I meant 11:30.", "I like tea.")  # nothing to replace
    said = spoken("No, 16:00.", None, ("The briefing is at 14:00 in room 5.",))
    assert said == "The briefing is at 16:00 in room 5."
    assert spoken("Make that Mira.", None, ("My name is Dana.",)) == "Your name is Mira."


def test_polite_wrappers_ask_for_a_stated_fact() -> None:
    for question in (
        "Do you remember my locker code?",
        "Could you tell me my badge number?",
        "Can you remind me of my badge number?",
        "Do you know where my car is?",
        "Remind me who mentors me.",
        "Sorry, could you remind me who mentors me?",
    ):
        assert asked_of_record(question) is not None, question
    for question in ("Tell me a fun fact.", "Could you tell me a joke?", "Do you know any songs?"):
        assert asked_of_record(question) is None, question


STATEMENTS = list(FACTS)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mine=st.lists(st.sampled_from(STATEMENTS), min_size=1, max_size=4, unique=True),
    theirs=st.lists(st.sampled_from(STATEMENTS), min_size=1, max_size=4, unique=True),
    asked=st.sampled_from(STATEMENTS),
    wrapper=st.sampled_from(("{}", *WRAPPERS)),
)
async def test_only_the_askers_own_record_answers(mine, theirs, asked, wrapper) -> None:
    """Two participants state some facts each; a question about one fact, asked by the
    first, is told from their record if they stated it, and never names a value only
    the other stated."""
    value, questions, clauses = FACTS[asked]
    question = questions[0] if wrapper == "{}" else wrapper.format(clauses[0])
    ctx = make()
    async with ctx:
        await record(ctx, "ann", *mine)
        await record(ctx, "bob", *[s.replace("My", "Bob's") for s in theirs])
        reply = await stated(ctx, "ann", question) or ""
    if asked in mine:
        assert value in reply.lower(), (question, reply)
    for other in set(theirs) - set(mine):
        assert FACTS[other][0] not in reply.lower() or FACTS[other][0] in asked.lower()


async def test_the_same_word_ranks_above_a_synonym() -> None:
    ctx = make()
    async with ctx:
        await record(ctx, "ann", "My supervisor is Dr. Okafor.", "My boss at the cafe is Sam.")
        assert "Okafor" in (await stated(ctx, "ann", "Who is my supervisor?") or "")
        assert "Sam" in (await stated(ctx, "ann", "Who's my boss?") or "")
