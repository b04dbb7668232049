"""UI-06: the engine page's NDJSON parser (``/ui/ndjson.js``), in the real browser.

The page's own parser is fed constructed chunk sequences through
``driver.execute_script``: a stream whose lines hold 2-, 3- and 4-byte UTF-8
characters, U+2028 (raw and escaped) and an escaped lone surrogate, cut at every
byte offset, one byte per read, and every line in one read. What it yields must
equal Python's ``json.loads`` of each line. Drawn lines (any character, lone
surrogates included, encoded by the product or raw with ``surrogatepass``) and raw
byte lines check the refusals: a line that is not UTF-8, not JSON or not an object
becomes one ``STREAM_INVALID`` error item and the next line still parses. Last, a
real paced turn from the server is rendered as it arrives.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fake_provider import Answer, Scenario
from labfy_ref.bridge.ndjson import encode_line
from qualification.browser.page import Page
from qualification.conftest import ProviderFactory, ServerFactory, local_agent
from qualification.harness import LAUNCH_CODE, LiveServer

# One sequence of reads: the stream cut at ``cuts`` (sorted byte offsets).
_FEED = """
const [bytes, sequences, max] = arguments;
const stream = Uint8Array.from(bytes);
return sequences.map((cuts) => {
  const parser = labfyNdjson.createParser(max ? {maxLineChars: max} : undefined);
  const items = [];
  let start = 0;
  for (const end of [...cuts, stream.length]) {
    items.push(...parser.feed(stream.subarray(start, end)));
    start = end;
  }
  items.push(...parser.end());
  return JSON.stringify(items);  // lone surrogates survive as \\ud800 escapes
});
"""

VALUES: list[dict[str, Any]] = [
    {"type": "text", "seq": 1, "text": "2 bytes: é ß ñ ø"},
    {"type": "text", "seq": 2, "text": "3 bytes: € 中文 ✓, raw U+2028 [\u2028], U+2029 [\u2029]"},
    {"type": "reasoning", "seq": 3, "text": "4 bytes: 𝄞 😀 🐝", "nested": {"list": ["𝄞", 1, None]}},
    {"type": "error", "seq": 4, "code": "X", "message": "lone surrogate \ud800 and \udfff"},
    {"type": "done", "seq": 5, "reason": "completed", "interrupted": False},
]


def _raw(value: Any) -> bytes:
    """A line as a careless writer sends it: every character raw (lone surrogates too)."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"


# Raw lines, except the one with lone surrogates, which the product's encoder escapes
# (raw, they are not UTF-8: a case of its own below); U+2028 stays raw in line 2.
STREAM = b"".join(encode_line(v) if "\ud800" in json.dumps(v, ensure_ascii=False) else _raw(v)
                  for v in VALUES)
MULTIBYTE = [i for i, byte in enumerate(STREAM) if byte >= 0x80]


def _feed(page: Page, stream: bytes, sequences: list[list[int]],
          max_line_chars: int | None = None) -> list[list[dict[str, Any]]]:
    outputs: list[str] = page.driver.execute_script(_FEED, list(stream), sequences,
                                                    max_line_chars)
    return [json.loads(output) for output in outputs]


def _page(page: Page, demo_server: LiveServer) -> Page:
    page.base_url = demo_server.url
    page.open("/cordis")
    page.wait(lambda: page.driver.execute_script("return typeof window.labfyNdjson"
                                                 " === 'object'"), what="ndjson.js loaded")
    return page


def _refused(item: dict[str, Any]) -> bool:
    return (item.get("type"), item.get("code"), item.get("local")) == (
        "error", "STREAM_INVALID", True)


@pytest.mark.req("UI-06")
def test_every_cut_of_a_multibyte_stream_decodes_as_python_does(
        page: Page, demo_server: LiveServer) -> None:
    _page(page, demo_server)
    expected = [json.loads(line) for line in STREAM.splitlines()]
    assert expected == VALUES, "the stream is what the test means it to be"
    assert len(MULTIBYTE) > 40 and b"\xe2\x80\xa8" in STREAM and b"\xf0\x9d\x84\x9e" in STREAM
    every_offset = [[cut] for cut in range(len(STREAM) + 1)]
    byte_by_byte = [list(range(1, len(STREAM)))]
    one_read: list[list[int]] = [[]]
    # Each multi-byte character's bytes in reads of their own, the line around it whole.
    inside = [[i, i + 1] for i in MULTIBYTE]
    outputs = _feed(page, STREAM, every_offset + byte_by_byte + one_read + inside)
    for sequence, output in zip(every_offset + byte_by_byte + one_read + inside, outputs,
                                strict=True):
        assert output == expected, f"{page.browser}: cut at {sequence[:3]}…"


@pytest.mark.req("UI-06")
def test_refused_lines_are_error_items_and_the_stream_goes_on(
        page: Page, demo_server: LiveServer) -> None:
    _page(page, demo_server)
    good = encode_line({"type": "text", "text": "ok ✓"})
    cases = {
        "not JSON": b"{nope\n",
        "not an object": b"[1, 2]\n",
        "not UTF-8": b'{"type": "text", "text": "\xff\xfe"}\n',
        "a raw lone surrogate": _raw({"type": "text", "text": "\ud800"}),
        "cut UTF-8 at the end of a line": b'{"type": "text", "text": "\xe2\x82"}\n',
    }
    for name, bad in cases.items():
        stream = good + bad + good
        cuts = [[], *([cut] for cut in range(len(good), len(good) + len(bad) + 1))]
        for output in _feed(page, stream, cuts):
            assert len(output) == 3 and _refused(output[1]), f"{page.browser}: {name}: {output}"
            assert output[0] == output[2] == json.loads(good), f"{page.browser}: {name}"
    long_line = encode_line({"type": "text", "text": "x" * 100})
    for output in _feed(page, good + long_line + good, [[], [len(good) + 50]],
                        max_line_chars=64):
        assert [_refused(item) for item in output] == [False, True, False], page.browser
        assert "longer than 64" in output[1]["message"]
    ended = _feed(page, good + b'{"type": "te', [[]])[0]
    assert ended[0] == json.loads(good) and _refused(ended[1]), "a stream cut inside a line"
    assert "ended inside line 2" in ended[1]["message"]
    blank = _feed(page, b"\n \r\n" + good + b"\t\n", [[], [1], [2]])
    assert blank == [[json.loads(good)]] * 3, "blank lines carry nothing"
    for space in ("\x0b", "\x0c", "\xa0", "\ufeff", "\u2028"):  # not JSON whitespace
        output = _feed(page, space.encode() + b"\n" + good, [[]])[0]
        assert _refused(output[0]) and output[1:] == [json.loads(good)], repr(space)


_CHARACTERS = st.one_of(st.characters(codec=None), st.characters(categories=["Cs"]),
                        st.sampled_from("\u2028\u2029\u0085\ufeff\n\r\"\\é€𝄞"))
_LINE = st.one_of(
    st.text(_CHARACTERS, max_size=12).map(lambda t: ("product", t)),
    st.text(_CHARACTERS, max_size=12).map(lambda t: ("raw", t)),
    st.binary(max_size=12).filter(lambda b: b"\n" not in b).map(lambda b: ("bytes", b)),
)


def _line_and_expected(kind: str, payload: Any) -> tuple[bytes, list[dict[str, Any] | None]]:
    """The line's bytes and what the parser must yield for it (None: a refusal)."""
    if kind == "product":
        value = {"type": "text", "text": payload}
        return encode_line(value), [value]
    if kind == "raw":
        value = {"type": "text", "text": payload}
        line = _raw(value)
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            return line, [None]
        return line, [value]
    line = payload + b"\n"
    if line.strip(b" \t\r\n") == b"":
        return line, []

    def no_constants(name: str) -> None:
        raise ValueError(name)  # NaN and Infinity are not JSON, and JSON.parse says so

    try:
        parsed = json.loads(payload.decode("utf-8"), parse_constant=no_constants)
    except ValueError:
        return line, [None]
    return line, [parsed if isinstance(parsed, dict) else None]


@pytest.mark.req("UI-06")
@settings(deadline=None, max_examples=40,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_LINE, min_size=1, max_size=5), data=st.data())
def test_drawn_lines_and_raw_bytes_at_drawn_cuts(page: Page, demo_server: LiveServer,
                                                 lines: list[tuple[str, Any]],
                                                 data: st.DataObject) -> None:
    if not page.driver.current_url.endswith("/cordis"):
        _page(page, demo_server)  # one page for every example: loads are what cost
    parts = [_line_and_expected(kind, payload) for kind, payload in lines]
    stream = b"".join(line for line, _ in parts)
    expected = [item for _, items in parts for item in items]
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(stream)), max_size=6))))
    output = _feed(page, stream, [cuts])[0]
    assert len(output) == len(expected), f"{page.browser}: {stream!r} at {cuts}: {output}"
    for got, want in zip(output, expected, strict=True):
        if want is None:
            assert _refused(got), f"{page.browser}: {stream!r}: {got}"
        else:
            assert got == want, f"{page.browser}: {stream!r} at {cuts}"


PACED = "Paced reply: é € 𝄞 — " + " ".join(f"word{i}" for i in range(40))

_RECORD = """
const reply = document.querySelector('[data-testid="assistant-message"]:last-of-type');
window.__lengths = [];
const observer = new MutationObserver(() => {
  const node = [...document.querySelectorAll('[data-testid="assistant-message"]')].pop();
  if (node) window.__lengths.push(node.textContent.length);
});
observer.observe(document.getElementById("conversation"),
                 {childList: true, subtree: true, characterData: true});
return reply === null;
"""


@pytest.mark.req("UI-06", "UI-04")
def test_a_real_paced_stream_is_rendered_as_it_arrives(
        page: Page, specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    answer = Answer(content=json.dumps({"type": "final", "text": PACED}, ensure_ascii=False),
                    chunk_chars=6, chunk_delay=0.04)
    provider = provider_factory(Scenario(name="paced", answers=(answer,)))
    server = server_factory(specimen, bridge=True, **local_agent(provider.base_url))
    page.base_url = server.url
    page.open("/cordis")
    page.login(LAUNCH_CODE)
    page.click("session-new")
    page.wait(lambda: page.all("session-item"), what="the new session listed")
    assert page.driver.execute_script(_RECORD), "no reply before the turn"
    page.type("message-input", "Pace yourself.")
    page.click("message-send")
    page.find("stop-turn")  # shown while the turn streams
    reply = page.find("assistant-message")
    page.wait(lambda: reply.text == PACED, timeout=30, what="the whole paced reply")
    lengths: list[int] = page.driver.execute_script("return window.__lengths")
    partial = sorted({n for n in lengths if 0 < n < len(PACED)})
    assert len(partial) >= 5, f"{page.browser}: the reply was not shown while it streamed: " \
                              f"{lengths}"
    page.wait(lambda: not page.all("stop-turn")[0].is_displayed(), what="stop hidden at done")
    assert page.all("copy-reply"), "a finished reply can be copied"
