"""The streamed final text (BR-02): what is shown is what the strict parser accepts.

The extractor decodes a final answer's ``text`` while it streams. Whatever the
split of the reply into deltas, the pieces joined are the parsed text when the
reply is valid, and never hold what the parser refuses (a lone surrogate, a
control character) when it is not. It looks at each delta once.
"""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labfy_ref.bridge.final_text import FinalTextExtractor
from labfy_ref.errors import ProtocolRefused
from labfy_ref.protocol import ActionParser, Final
from labfy_ref.text import has_surrogate
from labfy_ref.tools import default_catalog

PARSER = ActionParser(default_catalog())
any_char = st.one_of(st.characters(), st.characters(categories=["Cs"]),
                     st.sampled_from(['"', "\\", "\n", "\x00", "\x1f", "\u2028", "\ufffe"]))
texts = st.lists(any_char, max_size=30).map("".join)


def _feed(reply: str, cuts: list[int]) -> tuple[str, FinalTextExtractor]:
    extractor = FinalTextExtractor()
    points = sorted({min(c, len(reply)) for c in cuts} | {0, len(reply)})
    shown = "".join(extractor.feed(reply[a:b]) for a, b in itertools.pairwise(points))
    return shown, extractor


@pytest.mark.req("BR-02", "AV-02")
@settings(max_examples=300, deadline=None)
@given(text=texts, ascii_only=st.booleans(), space=st.sampled_from(["", " ", "\n\t ", "\r"]),
       cuts=st.lists(st.integers(0, 400), max_size=12))
def test_what_streams_is_what_the_parser_accepts(text: str, ascii_only: bool, space: str,
                                                 cuts: list[int]) -> None:
    body = json.dumps(text, ensure_ascii=ascii_only or has_surrogate(text))  # as a client sends
    reply = f'{space}{{{space}"type"{space}:{space}"final"{space},{space}"text"{space}:{space}' \
            f"{body}{space}}}{space}"
    shown, extractor = _feed(reply, cuts)
    assert extractor.content == reply
    try:
        parsed = PARSER.parse(reply)
    except ProtocolRefused:
        assert not has_surrogate(shown), "nothing the parser refuses is ever shown"
        return
    assert isinstance(parsed, Final)
    assert shown == parsed.text


@pytest.mark.req("BR-02")
@pytest.mark.parametrize("reply", [
    '{"type":"tool_call","tool_id":"files.list","arguments":{}}',
    '{"text":"x","type":"final"}', '["final"]', "Sure! {", ' {"type" :"finale"'])
def test_other_replies_stream_nothing(reply: str) -> None:
    shown, extractor = _feed(reply, [3, 7, 11])
    assert (shown, extractor.started, extractor.content) == ("", False, reply)


@pytest.mark.req("BR-02", "AV-02")
@pytest.mark.parametrize(("escaped", "shown"), [
    ('abc\\udc00def', "abc"), ('\\ud800\\u0041', ""), ('ok\\ud83d\\ude00', "ok\U0001f600"),
    ('a\\x', "a"), ('tab\\tend', "tab\tend")])
def test_escapes_are_decoded_and_bad_ones_stop_the_stream(escaped: str, shown: str) -> None:
    reply = '{"type":"final","text":"' + escaped + '"}'
    for size in (1, 2, 5, len(reply)):
        got, _ = _feed(reply, list(range(size, len(reply), size)))
        assert got == shown


@pytest.mark.req("BR-02", "AV-01")
def test_a_long_whitespace_reply_is_read_once_not_again_per_delta() -> None:
    """25,000 deltas of 100 spaces (3.65 MB on the wire) took ~50 s when each re-read all."""
    extractor = FinalTextExtractor()
    pieces = [" " * 100] * 25_000
    assert all(extractor.feed(piece) == "" for piece in pieces)
    assert len(extractor.content) == 2_500_000 and not extractor.started
