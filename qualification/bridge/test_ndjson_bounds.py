"""BR-04, AV-02 (framing): NDJSON's exact bytes, its line bound and its refusals.

One chunk per line means the encoder's bytes are pinned (UTF-8 as is, no
``NaN``), and the decoder's bound is pinned on both sides: a pending partial
line of exactly the bound is kept, one byte more is refused. These are the
cases the mutation run (QR-04) found unpinned.
"""

from __future__ import annotations

import math

import pytest

from labfy_ref.bridge.ndjson import NdjsonDecoder, NdjsonError, encode_line

#: The decoder's default bound on a line still waiting for its ``\n``.
EIGHT_MIB = 8 * 1024 * 1024


@pytest.mark.req("BR-04")
def test_a_line_is_compact_utf8_not_ascii_escapes() -> None:
    assert encode_line({"text": "é ü 漢 😀", "n": [1, 2]}) == (
        '{"text":"é ü 漢 😀","n":[1,2]}\n'.encode())


@pytest.mark.req("BR-04")
@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_a_non_finite_number_is_never_written(number: float) -> None:
    with pytest.raises(ValueError, match="JSON compliant"):
        encode_line({"value": number})


@pytest.mark.req("BR-04")
def test_a_partial_line_of_exactly_8_mib_is_kept_one_byte_more_is_refused() -> None:
    decoder = NdjsonDecoder()
    body = b'"' + b"a" * (EIGHT_MIB - 2) + b'"'
    assert list(decoder.feed(body[:-1])) == []
    assert list(decoder.feed(body[-1:])) == []  # exactly the bound, still waiting
    assert list(decoder.feed(b"\n")) == ["a" * (EIGHT_MIB - 2)]
    decoder.close()
    over = NdjsonDecoder()
    with pytest.raises(NdjsonError, match="too long"):
        list(over.feed(body + b" "))


@pytest.mark.req("BR-04")
@pytest.mark.parametrize("bound", [1, 10, 300])
def test_a_chosen_bound_is_applied_exactly(bound: int) -> None:
    decoder = NdjsonDecoder(max_line_bytes=bound)
    assert list(decoder.feed(b"1" * bound)) == []
    assert list(decoder.feed(b"\n")) == [int("1" * bound)]
    with pytest.raises(NdjsonError, match="too long"):
        list(NdjsonDecoder(max_line_bytes=bound).feed(b"1" * (bound + 1)))


@pytest.mark.req("BR-04")
@pytest.mark.parametrize("stream", [b"\n{}\n", b"\n\n{}\n", b"\r\n{}\n", b" \n{}\n"])
def test_blank_lines_first_are_skipped_not_stalling(stream: bytes) -> None:
    decoder = NdjsonDecoder()
    assert list(decoder.feed(stream)) == [{}]
    decoder.close()


@pytest.mark.req("BR-04", "AV-02")
@pytest.mark.parametrize("line", [b'"\xff"\n', b'"\xed\xa0\x80"\n', b'{"a":"\xc3"}\n'])
def test_a_line_that_is_not_utf8_is_an_ndjson_error(line: bytes) -> None:
    with pytest.raises(NdjsonError, match="UnicodeDecodeError"):
        list(NdjsonDecoder().feed(line))


@pytest.mark.req("BR-04")
def test_a_line_that_is_not_json_is_an_ndjson_error() -> None:
    with pytest.raises(NdjsonError, match="JSONDecodeError"):
        list(NdjsonDecoder().feed(b"{nope}\n"))
