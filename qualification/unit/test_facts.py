"""PR-09: a final's facts are checked, never dictated — each number (digits or words in
English, French, Romanian), date, name and quoted phrase is ``found`` (which source, or
what the user said), ``derived`` (one operation over numbers read or said, or a count of
references read, operands named) or ``not_found``; bounded on any input."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labfy_ref.protocol.facts import (
    MAX_ANSWER_CHARS,
    MAX_FACTS,
    MAX_READ_CHARS,
    MAX_SOURCES,
    Fact,
    check_facts,
)


def facts_of(answer: str, read: dict[str, str] | None = None, said: tuple[str, ...] = (),
             read_refs: int = 0) -> tuple[Fact, ...]:
    return check_facts(answer, read or {}, said, read_refs)


def one(answer: str, kind: str, read: dict[str, str] | None = None,
        said: tuple[str, ...] = (), read_refs: int = 0) -> Fact:
    """The single fact of ``kind`` the answer holds."""
    found = [fact for fact in facts_of(answer, read, said, read_refs) if fact.kind == kind]
    assert len(found) == 1, found
    return found[0]


def numbers(answer: str) -> list[str]:
    return [fact.value for fact in facts_of(answer) if fact.kind == "number"]


# -- numbers ------------------------------------------------------------------------------

@pytest.mark.req("PR-09")
@pytest.mark.parametrize(("answer", "read"), [
    ("The hive held 12 frames.", "Hive A: 12 frames, checked."),           # English, digits
    ("La ruche avait douze cadres.", "Ruche A : 12 cadres."),               # French, words
    ("Stupul avea douăsprezece rame.", "Stupul A: 12 rame."),              # Romanian, words
    ("The hive held 12 frames.", "Stupul A avea douasprezece rame."),       # words in the source
])
def test_a_number_read_is_found_by_value_in_its_source(answer: str, read: str) -> None:
    fact = one(answer, "number", {"obj_hive": read, "files/other.md": "nothing"})
    assert (fact.value, fact.status, fact.where) == ("12", "found", "obj_hive")
    assert fact.text in answer and fact.operands == () and fact.operation is None


@pytest.mark.req("PR-09")
def test_where_is_the_first_source_in_read_order_that_holds_it() -> None:
    read = {"files/a.md": "nothing here", "obj_b": "7 bees", "obj_c": "seven bees"}
    assert one("There were 7 bees.", "number", read).where == "obj_b"
    assert one("There were 7 bees.", "number", dict(reversed(read.items()))).where == "obj_c"


@pytest.mark.req("PR-09")
@pytest.mark.parametrize(("words", "value"), [
    ("zero", "0"), ("twelve", "12"), ("forty-two", "42"), ("forty two", "42"),
    ("twenty-one", "21"), ("ninety-nine", "99"), ("one hundred", "100"), ("a hundred", "100"),
    ("three hundred", "300"),
    ("zéro", "0"), ("dix-sept", "17"), ("vingt et un", "21"), ("vingt-et-une", "21"),
    ("trente-deux", "32"), ("soixante-dix", "70"), ("soixante et onze", "71"),
    ("soixante-dix-neuf", "79"), ("quatre-vingts", "80"), ("quatre-vingt-un", "81"),
    ("quatre-vingt-dix", "90"), ("quatre-vingt-dix-sept", "97"), ("septante", "70"),
    ("nonante-deux", "92"), ("cent", "100"), ("deux cents", "200"),
    ("unu", "1"), ("două", "2"), ("unsprezece", "11"), ("douăsprezece", "12"),
    ("paisprezece", "14"), ("douăzeci", "20"), ("douăzeci și trei", "23"),
    ("douazeci si trei", "23"), ("DOUĂZECI ȘI UNU", "21"), ("șaizeci și șase", "66"),
    ("nouăzeci și nouă", "99"), ("o sută", "100"), ("două sute", "200"),
])
def test_number_words_of_each_language_read_as_their_value(words: str, value: str) -> None:
    fact = one(f"we counted {words} today", "number")
    assert (fact.text, fact.value) == (words, value)


@pytest.mark.req("PR-09")
@pytest.mark.parametrize("answer", [
    "a cat and an owl", "one of them", "un chat et une vache", "o pisică și una mare",
    "I opt out", "opt in", "five per cent",
])
def test_articles_and_lookalikes_are_no_number_on_their_own(answer: str) -> None:
    assert [v for v in numbers(answer) if v != "5"] == []


@pytest.mark.req("PR-09")
def test_articles_count_inside_a_compound_and_opt_is_eight_in_romanian() -> None:
    assert numbers("twenty-one, vingt et un, douăzeci și unu, o sută") == ["21", "100"]
    assert numbers("am găsit opt albine") == ["8"]
    assert numbers("unu") == ["1"]
    assert numbers("cinq pour cent, cent ans") == ["5", "100"]  # "pour cent" is a sign


@pytest.mark.req("PR-09")
@pytest.mark.parametrize(("written", "value"), [
    ("1,200", "1200"), ("1.200", "1200"), ("1 200", "1200"), ("1\u00a0200", "1200"),
    ("1,200,000", "1200000"), ("1,200.5", "1200.5"), ("1.200,5", "1200.5"),
    ("3,5", "3.5"), ("0.500", "0.5"), ("12.50", "12.5"), ("-4", "-4"), ("\u22124", "-4"),
    ("+4", "4"), ("007", "7"), ("2024", "2024"),
])
def test_digits_read_with_the_documented_separators(written: str, value: str) -> None:
    fact = one(f"it was {written} here", "number")
    assert (fact.text, fact.value) == (written, value)
    assert one(f"it was {written}km here", "number").text == written  # a unit may follow


@pytest.mark.req("PR-09")
def test_digits_inside_a_word_or_reference_are_no_number() -> None:
    assert numbers("see obj_12, v1.2 and A7") == []


@pytest.mark.req("PR-09")
def test_a_number_is_matched_whole_never_as_a_substring() -> None:
    read = {"obj_a": "125 sheep, see obj_12 and v3.12 and 1212"}
    fact = one("There were 12 sheep.", "number", read)
    assert fact.status == "not_found" and fact.where is None
    assert one("There were 125 sheep.", "number", read).status == "found"


@pytest.mark.req("PR-09")
def test_a_copied_figure_matches_whatever_its_separators() -> None:
    fact = one("The store holds 1,200 jars.", "number", {"obj_a": "Stoc: 1.200 borcane"})
    assert (fact.value, fact.status, fact.where) == ("1200", "found", "obj_a")


@pytest.mark.req("PR-09")
def test_a_number_only_the_user_said_is_found_in_what_was_said() -> None:
    said = ("Ce mai faci?", "Am 7 stupi.")  # this message and an earlier one
    fact = one("You have 7 hives.", "number", {"obj_a": "nothing"}, said)
    assert (fact.status, fact.where) == ("found", "said")
    assert one("Tu as sept ruches.", "number", {}, said).where == "said"


@pytest.mark.req("PR-09")
def test_a_read_source_wins_over_what_was_said() -> None:
    fact = one("7 hives", "number", {"obj_a": "7 hives"}, ("I have 7 hives",))
    assert fact.where == "obj_a"


# -- derived --------------------------------------------------------------------------------

READ = {"obj_a": "Hive A holds 12 frames.", "obj_b": "Hive B holds 30 frames."}


@pytest.mark.req("PR-09")
@pytest.mark.parametrize(("answer", "operation", "operands"), [
    ("Together they hold 42 frames.", "sum", ("12", "30")),
    ("Ensemble, quarante-deux cadres.", "sum", ("12", "30")),
    ("B holds 18 more frames.", "difference", ("30", "12")),
    ("B are cu optsprezece rame mai mult.", "difference", ("30", "12")),
    ("The product is 360.", "product", ("12", "30")),
    ("B holds 2.5 times as many.", "quotient", ("30", "12")),
    ("A holds 0,4 of B.", "quotient", ("12", "30")),
    ("A holds 40 % of what B holds.", "compare", ("12", "30")),
    ("B holds 150 % more than A.", "compare", ("30", "12")),
])
def test_a_number_one_operation_away_is_derived_with_its_operands(
        answer: str, operation: str, operands: tuple[str, ...]) -> None:
    fact = one(answer, "number", READ)
    assert (fact.status, fact.operation, fact.operands, fact.where) == (
        "derived", operation, operands, None)


@pytest.mark.req("PR-09")
def test_a_quotient_is_derived_exact_or_to_two_decimals_only() -> None:
    read = {"obj_a": "10 jars", "obj_b": "3 crates"}
    assert one("3.33 jars a crate", "number", read).operation == "quotient"
    assert one("3.333 jars a crate", "number", read).status == "not_found"
    assert one("3.3333 jars a crate", "number", read).status == "not_found"


@pytest.mark.req("PR-09")
def test_numbers_said_are_operands_too() -> None:
    fact = one("That makes 19 frames.", "number", {"obj_a": "12 frames"}, ("add 7 more",))
    assert (fact.status, fact.operation, fact.operands) == ("derived", "sum", ("7", "12"))


@pytest.mark.req("PR-09")
@pytest.mark.parametrize("answer", ["I read 3 notes.", "J'ai lu trois notes.",
                                    "Am citit trei note."])
def test_a_count_of_the_references_read_is_derived(answer: str) -> None:
    read = {"obj_a": "alpha", "obj_b": "beta", "obj_c": "gamma"}
    fact = one(answer, "number", read, read_refs=3)
    assert (fact.status, fact.operation, fact.operands) == ("derived", "count", ("3",))
    assert one(answer, "number", read, read_refs=0).status == "not_found"
    assert one(answer, "number", read, read_refs=4).status == "not_found"


@pytest.mark.req("PR-09")
@pytest.mark.parametrize("answer", ["There were 57 frames.", "Il y avait cinquante-sept cadres.",
                                    "Erau cincizeci și șapte de rame."])
def test_a_number_neither_read_said_nor_derived_is_not_found(answer: str) -> None:
    fact = one(answer, "number", {"obj_a": "Hive A holds 12 frames."}, ("How many frames?",))
    assert (fact.value, fact.status, fact.where, fact.operands, fact.operation) == (
        "57", "not_found", None, (), None)


# -- dates ----------------------------------------------------------------------------------

@pytest.mark.req("PR-09")
@pytest.mark.parametrize(("written", "value"), [
    ("2024-07-12", "2024-07-12"), ("12 July 2024", "2024-07-12"),
    ("July 12, 2024", "2024-07-12"), ("12th of July", "--07-12"), ("12 July", "--07-12"),
    ("Jul. 12", "--07-12"), ("12 juillet 2024", "2024-07-12"), ("1er mai", "--05-01"),
    ("3 février 2023", "2023-02-03"), ("3 fevrier 2023", "2023-02-03"),
    ("12 décembre", "--12-12"), ("12 iulie 2024", "2024-07-12"),
    ("12 IULIE 2024", "2024-07-12"), ("1 martie", "--03-01"), ("12 may 2024", "2024-05-12"),
    ("29 February 2024", "2024-02-29"),
])
def test_dates_of_each_language_read_as_iso_and_hold_their_numbers(
        written: str, value: str) -> None:
    facts = facts_of(f"it happened on {written} there")
    assert [(f.kind, f.text, f.value) for f in facts] == [("date", written, value)]


@pytest.mark.req("PR-09")
@pytest.mark.parametrize("answer", ["we may 12 times", "12 may be enough",
                                    "cu 12 mai mult decât ieri", "on 31 February 2024",
                                    "on 2024-13-45"])
def test_lookalikes_and_impossible_days_are_no_date(answer: str) -> None:
    assert [f.kind for f in facts_of(answer) if f.kind == "date"] == []


@pytest.mark.req("PR-09")
def test_a_date_is_found_across_languages_and_a_yearless_one_in_a_dated_source() -> None:
    read = {"obj_a": "Recoltat pe 12 iulie 2024.", "obj_b": "Visited 2023-03-01."}
    assert one("Harvested on July 12, 2024.", "date", read).where == "obj_a"
    assert one("Récolté le 12 juillet.", "date", read).where == "obj_a"
    assert one("Seen on 1 March 2023.", "date", read).where == "obj_b"
    assert one("Seen on 1 March 2022.", "date", read).status == "not_found"
    assert one("Seen on 12 July 2024.", "date", {"obj": "12 July"}).status == "not_found"
    assert one("Seen on 2 mai.", "date", {}, ("Vin pe 2 mai?",)).where == "said"


@pytest.mark.req("PR-09")
def test_a_year_or_day_of_a_source_date_counts_as_read() -> None:
    assert one("Harvested in 2024.", "number", {"obj_a": "12 iulie 2024"}).where == "obj_a"


# -- names and quotes -----------------------------------------------------------------------

@pytest.mark.req("PR-09")
def test_a_run_of_capitalised_words_is_one_name_found_as_whole_words() -> None:
    read = {"files/log.md": "Bees seen at field station north; Parisian honey."}
    fact = one("Bees were seen at Field Station North yesterday.", "name", read)
    assert (fact.text, fact.value, fact.status, fact.where) == (
        "Field Station North", "field station north", "found", "files/log.md")
    assert one("The honey came from Paris, they said.", "name", read).status == "not_found"
    assert one("The keeper is Ana.", "name", {"obj": "Mariana"}).status == "not_found"


@pytest.mark.req("PR-09")
@pytest.mark.parametrize(("answer", "names"), [
    ("Paris is big.", []),
    ("Yesterday Marie Curie came. Then Pierre left.", ["marie curie", "pierre"]),
    ("Ana came. Ion left!\nMaria stayed? Dan too\u2026 Eva went: Ioana too.", []),
    ("Note: Paris is big.\nLondon too.", []),
    ("Le miel de Brașov est bon.", ["brașov"]),
    ("Мы были в городе Москва.", ["москва"]),
    ("I think the bees left in July.", []),
    ("Ask O'Brien and Jean-Pierre.", ["brien", "jean-pierre"]),
])
def test_names_skip_the_word_that_opens_a_sentence(answer: str, names: list[str]) -> None:
    assert [f.value for f in facts_of(answer) if f.kind == "name"] == names


@pytest.mark.req("PR-09")
def test_a_name_is_found_without_its_accents_and_in_what_was_said() -> None:
    assert one("Le miel de Brașov est bon.", "name", {"obj": "BRASOV honey"}).where == "obj"
    assert one("Ask Ana Pop first.", "name", {}, ("Ana Pop knows",)).where == "said"
    assert one("We met in İzmir.", "name", {"obj": "IZMIR"}).where == "obj"
    assert one("Le miel de Brașov.", "name", {"obj": "Bras\u0326ov"}).where == "obj"


@pytest.mark.req("PR-09")
@pytest.mark.parametrize("written", ['"the bees  are calm"', "\u201cthe bees are calm\u201d",
                                     "\u00ab the bees are calm \u00bb",
                                     "\u201ethe bees are calm\u201c"])
def test_quoted_phrases_are_found_whitespace_and_case_normalised(written: str) -> None:
    read = {"obj_a": "Notes: The Bees\n are calm, 12 frames."}
    fact = one(f"The keeper wrote {written} today.", "quote", read)
    assert (fact.text, fact.status, fact.where) == (written, "found", "obj_a")
    assert fact.value == "the bees are calm"
    fact = one(f"The keeper wrote {written} today.", "quote", {"obj_a": "the bees are calmer"})
    assert fact.status == "not_found"


@pytest.mark.req("PR-09")
def test_what_is_inside_a_quote_is_the_quotes_and_a_short_quote_is_none() -> None:
    facts = facts_of('He wrote "12 bees at Field Station" and "ab".')
    assert [(f.kind, f.value) for f in facts] == [("quote", "12 bees at Field Station")]


# -- the shape of the answer ----------------------------------------------------------------

@pytest.mark.req("PR-09")
def test_a_fact_text_is_the_answers_own_slice_whatever_folding_does() -> None:
    """"ß", "ﬁ" and "İ" casefold to two characters; folding keeps one for one."""
    facts = facts_of("In the straße, the ﬁeld and İzmir: 12 bees at Köln.")
    assert [(f.kind, f.text) for f in facts] == [
        ("name", "İzmir"), ("number", "12"), ("name", "Köln")]

@pytest.mark.req("PR-09")
def test_facts_come_in_answer_order_once_each_and_as_json() -> None:
    facts = facts_of('On 12 July 2024 Ana Pop saw 12 bees, twelve bees and "calm bees".',
                     {"obj": "12 bees"})
    assert [(f.kind, f.value) for f in facts] == [
        ("date", "2024-07-12"), ("name", "ana pop"), ("number", "12"), ("quote", "calm bees")]
    encoded = json.loads(json.dumps([f.as_json() for f in facts]))
    assert encoded[2] == {"text": "12", "kind": "number", "value": "12", "status": "found",
                          "where": "obj", "operands": [], "operation": None}


@pytest.mark.req("PR-09")
def test_the_answer_is_scanned_within_its_bound_and_facts_are_capped() -> None:
    beyond = "x " * (MAX_ANSWER_CHARS // 2) + "then 77 bees"
    assert facts_of(beyond) == ()
    many = " ".join(str(n) for n in range(10, 10 + 3 * MAX_FACTS))
    facts = facts_of(many)
    assert len(facts) == MAX_FACTS and facts[0].value == "10"


@pytest.mark.req("PR-09")
def test_what_was_read_is_seen_within_its_bounds() -> None:
    far = {"obj_a": "x" * MAX_READ_CHARS + " 77 bees"}
    assert one("77 bees", "number", far).status == "not_found"
    near = {"obj_a": "x" * (MAX_READ_CHARS - 20) + " 77 bees"}
    assert one("77 bees", "number", near).status == "found"
    sources = {f"obj_{i}": "nothing" for i in range(MAX_SOURCES)} | {"obj_last": "77 bees"}
    assert one("77 bees", "number", sources).status == "not_found"


@pytest.mark.req("PR-09")
@pytest.mark.parametrize("answer", [
    "\ud800 Ana \udfff Pop 12 \x00\x01\x7f \u201c\ud800 bees \udc00\u201d",
    "\x00" * 10_000, "9" * 1_000_000, "\u0301\u0301 12 \u0301", "\n\t" * 5000,
    '"' * 5000, "douăzeci și " * 2000, "1,200," * 2000,
])
def test_hostile_answers_never_raise_and_stay_bounded(answer: str) -> None:
    read = {"\ud800": "\udfff 12 \x00 Ana Pop", "obj": "1 2 3 " * 30_000}
    facts = check_facts(answer, read, ("\ud800", "\x00 5"), read_refs=2)
    assert len(facts) <= MAX_FACTS
    assert all(f.text and f.text in answer[:MAX_ANSWER_CHARS] for f in facts)


ANSWER_ALPHABET = st.sampled_from([
    *"0123456789 ,.-:\n\"\u201c\u201d\u00ab\u00bb\u201eAaJjPpOoUuș\u0103\u00e9\u00a0\ud800\x00",
    "July", "iulie", "mai", "twenty", "vingt", "et", "un", "si", "trei", "Field", "may"])


@pytest.mark.req("PR-09")
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(answer=st.one_of(st.text(), st.lists(ANSWER_ALPHABET).map("".join)),
       read=st.dictionaries(st.text(max_size=8), st.lists(ANSWER_ALPHABET).map("".join),
                            max_size=4),
       said=st.lists(st.text(), max_size=3), read_refs=st.integers(-2, 40))
def test_check_facts_never_raises_and_every_fact_is_a_slice_of_the_answer(
        answer: str, read: dict[str, str], said: list[str], read_refs: int) -> None:
    facts = check_facts(answer, read, said, read_refs)
    assert len(facts) <= MAX_FACTS
    assert len({(f.kind, f.value) for f in facts}) == len(facts)
    for fact in facts:
        assert fact.text in answer
        assert (fact.where is not None) == (fact.status == "found")
        assert (fact.operation is not None) == (fact.status == "derived")
        assert fact.where in (None, "said", *read)
