"""PR-07: free strings bounded in shape — the bounds of a :class:`Shape`, the words of a
vocabulary, and the passages a final answer may quote."""

from __future__ import annotations

import pytest

from labfy_ref.protocol.text_shape import PASSAGE_CHARS, Shape, passages, vocabulary


@pytest.mark.req("PR-07")
def test_a_shape_takes_from_one_word_up_to_one_more_than_a_run() -> None:
    """``1 <= min_words <= words_per_run + 1``: both ends are valid shapes, and each
    admits exactly the word counts it says."""
    one = Shape(min_words=1, words_per_run=3)
    assert one.admits("Ivy.") and one.admits("Ivy bees fly late.")
    assert not one.admits("Ivy bees fly late now.")
    full = Shape(min_words=4, words_per_run=3)
    assert full.admits("Ivy bees fly late.")
    assert not full.admits("Ivy bees fly.") and not full.admits("Ivy bees fly late now.")
    for min_words in (0, 5, -1):
        with pytest.raises(ValueError, match="1 <= min_words <= words_per_run"):
            Shape(min_words=min_words, words_per_run=3)
    with pytest.raises(ValueError, match="a shape needs"):
        Shape(min_words=1, words_per_run=3, numbers=-1)


@pytest.mark.req("PR-07")
def test_a_vocabulary_holds_each_word_as_said_and_capitalised() -> None:
    assert vocabulary("ivy bees", "Ivy flowers") == (
        "ivy", "Ivy", "bees", "Bees", "flowers", "Flowers")
    assert vocabulary("l'île mi-août") == ("l'île", "L'île", "mi-août", "Mi-août")
    assert vocabulary("ştiinţă") == ("ştiinţă", "Ştiinţă")


@pytest.mark.req("PR-07")
def test_a_passage_has_a_word_of_at_least_two_letters() -> None:
    """A sentence of one-letter words only ("A b c.") is nothing an answer can quote."""
    assert passages("A b c.\nI a.\nIvy flowers late.\nI am.") == [
        "Ivy flowers late.", "I am."]
    assert passages("à è é") == []


@pytest.mark.req("PR-07")
def test_a_long_sentence_is_cut_at_a_word_within_the_passage_bound() -> None:
    """A sentence of exactly :data:`PASSAGE_CHARS` characters is kept whole; one
    character more and it is cut before the word that crosses the bound, and ends with
    an ellipsis."""
    assert PASSAGE_CHARS == 300
    exact = " ".join(["abcd"] * 60) + "."
    assert len(exact) == PASSAGE_CHARS
    assert passages(exact) == [exact]
    longer = " ".join(["abcd"] * 60) + "e."
    assert len(longer) == PASSAGE_CHARS + 1
    assert passages(longer) == [" ".join(["abcd"] * 59) + "\u2026"], \
        "the last word does not fit whole: it is left out, not cut in the middle"
    sentence = " ".join(["Ivy", "flowers", "late"] * 40) + "."
    [cut] = passages(f"{sentence}\nNext line.")[:1]
    assert cut.endswith("\u2026") and len(cut) <= PASSAGE_CHARS
    assert sentence.startswith(cut[:-1] + " ") and len(cut) > PASSAGE_CHARS - 20
