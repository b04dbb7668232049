"""PR-02, AV-02: the exact bounds and the string scanner of the strict JSON reader.

Each bound is pinned on both sides (the last value accepted, the first refused),
and the nesting scan is driven through documents with more openers than the
depth bound, so the character loop (not the fast opener count) decides: strings
holding brackets, quotes and escapes, siblings, whitespace, mixed objects and
arrays. These are the cases the mutation run (QR-04) found unpinned.
"""

from __future__ import annotations

import pytest

from labfy_ref.errors import ProtocolRefused
from labfy_ref.protocol.strict_json import (
    MAX_DEPTH,
    MAX_DOCUMENT_CHARS,
    MAX_INT_DIGITS,
    Defect,
    loads_strict,
)


def _refused(text: str, **kwargs: int) -> ProtocolRefused:
    with pytest.raises(ProtocolRefused) as caught:
        loads_strict(text, **kwargs)
    return caught.value


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.req("PR-02")
def test_the_bounds_are_the_published_numbers() -> None:
    # The constants are the contract the tests below pin from both sides.
    assert (MAX_DEPTH, MAX_INT_DIGITS, MAX_DOCUMENT_CHARS) == (32, 20, 256 * 1024)


@pytest.mark.req("PR-02")
def test_nesting_32_deep_is_read_and_33_deep_is_too_deep() -> None:
    value = loads_strict(_nested(32))
    for _ in range(31):
        assert isinstance(value, list) and len(value) == 1
        value = value[0]
    assert value == []
    assert _refused(_nested(33)).defect == Defect.TOO_DEEP


@pytest.mark.req("PR-02")
def test_more_openers_than_the_bound_but_shallow_is_read() -> None:
    # 33 openers, depth 32: only the exact scan can tell it apart from 33 deep.
    assert loads_strict("[" + _nested(31) + ",[]]") == [loads_strict(_nested(31)), []]
    # Forty siblings: closers must bring the depth back down one each.
    wide = "[" + ",".join(["[]"] * 40) + "]"
    assert loads_strict(wide) == [[]] * 40


@pytest.mark.req("PR-02")
def test_closers_count_one_each_before_a_deep_tail() -> None:
    # Outer array + three closed siblings + 32 deep = depth 33.
    assert _refused("[[],[],[]," + _nested(32) + "]").defect == Defect.TOO_DEEP
    assert loads_strict("[[],[],[]," + _nested(31) + "]")[:3] == [[], [], []]


@pytest.mark.req("PR-02")
def test_objects_and_arrays_alternating_33_deep_are_too_deep() -> None:
    # 17 objects and 16 arrays: the openers must be added, not combined bit-wise.
    text = '{"a":[' * 16 + '{"a":1}' + "]}" * 16
    assert text.count("{") == 17 and text.count("[") == 16
    assert _refused(text).defect == Defect.TOO_DEEP
    shallow = '{"a":[' * 16 + "1" + "]}" * 16  # 32 deep, 32 openers
    assert loads_strict(shallow)["a"][0]["a"][0]["a"]


@pytest.mark.req("PR-02")
def test_whitespace_between_openers_is_not_a_string() -> None:
    spaced = "[ " + " [" * 33 + " ]" * 33 + " ]"
    assert _refused(spaced).defect == Defect.TOO_DEEP


@pytest.mark.req("PR-02")
@pytest.mark.parametrize(
    "string", ['"a"', '"a b!"', '"\\n"', '"\\""', '"\\\\"', '"a\\"b"', '"]]]"'])
def test_a_string_before_deep_nesting_ends_where_json_says(string: str) -> None:
    # The scan must leave the string at its real closing quote, or the deep tail is missed.
    assert _refused(f"[{string}," + _nested(33) + "]").defect == Defect.TOO_DEEP
    assert loads_strict(f"[{string}," + _nested(31) + "]")[1] == loads_strict(_nested(31))


@pytest.mark.req("PR-02")
@pytest.mark.parametrize("inside", ["[" * 40, "{" * 40, "[{" * 20 + "\\\"" + "[" * 5])
def test_brackets_inside_strings_do_not_nest(inside: str) -> None:
    text = '["' + inside + '",{"k":"' + inside + '"}]'
    assert text.count("[") + text.count("{") > MAX_DEPTH
    assert loads_strict(text)[1]["k"] == loads_strict('"' + inside + '"')


@pytest.mark.req("PR-02")
def test_integers_of_20_digits_are_read_and_of_21_refused() -> None:
    twenty = "9" * 20
    assert loads_strict(f"[{twenty},-{twenty}]") == [int(twenty), -int(twenty)]
    for literal in ("1" + "0" * 20, "-1" + "0" * 20):
        assert _refused(f"[{literal}]").defect == Defect.NUMBER_OUT_OF_RANGE


@pytest.mark.req("PR-02")
def test_a_document_of_exactly_the_size_bound_is_read_one_more_character_is_not() -> None:
    exact = '"' + "a" * (MAX_DOCUMENT_CHARS - 2) + '"'
    assert len(exact) == 256 * 1024
    assert loads_strict(exact) == "a" * (MAX_DOCUMENT_CHARS - 2)
    assert _refused(exact + " ").defect == Defect.TOO_LARGE
    assert _refused('"' + "a" * MAX_DOCUMENT_CHARS + '"').defect == Defect.TOO_LARGE
    # A caller's own bound is applied the same way (the model client's body cap).
    assert loads_strict("[1]  ", max_chars=5) == [1]
    assert _refused("[1]   ", max_chars=5).defect == Defect.TOO_LARGE


@pytest.mark.req("PR-02")
def test_an_object_of_many_distinct_keys_is_read() -> None:
    text = "{" + ",".join(f'"k{i}":{i}' for i in range(300)) + "}"
    assert loads_strict(text) == {f"k{i}": i for i in range(300)}
    assert _refused(text[:-1] + ',"k299":0}').defect == Defect.DUPLICATE_KEY


@pytest.mark.req("PR-02", "AV-02")
def test_a_refusal_names_its_defect_and_only_then_its_detail() -> None:
    surrogate = _refused('{"a":"x\ud800"}')
    assert surrogate.message == f"{Defect.LONE_SURROGATE.value}: at position 7"
    assert _refused("[1").message.startswith(f"{Defect.NOT_JSON.value}: ")
    # No detail: the message is the defect alone, with no dangling separator.
    assert _refused("[1] [2]").message == Defect.TRAILING_DATA.value
    assert _refused("").message == Defect.EMPTY.value


@pytest.mark.req("PR-02")
@pytest.mark.parametrize("text", ['{"a":"abc', '{"a":"\x01"}', "[1,]", "{'a':1}", "nul"])
def test_a_syntax_error_is_not_json_never_trailing_data(text: str) -> None:
    # Decoder messages that sort after "Extra data" ("Invalid…", "Unterminated…") too.
    assert _refused(text).defect == Defect.NOT_JSON
