"""MC-01: the endpoint grammar, each refusal by its exact reason, each bound on both sides.

The security forms test proves that every bad spelling is refused; this one pins
*which* reason the operator reads for each (MC-01: "refused ... with a reason"),
the length and port bounds from both sides, and the canonical value of every
admitted spelling — so the mutation run of QR-04 sees every step of the parse.
"""

from __future__ import annotations

import dataclasses

import pytest

from labfy_ref.errors import EndpointRefused
from labfy_ref.model.endpoint import (
    MAX_ENDPOINT_CHARS,
    LoopbackHost,
    ModelEndpoint,
    ModelPath,
    parse_endpoint,
)


@pytest.mark.req("MC-01")
@pytest.mark.parametrize(("text", "host", "port"), [
    ("http://127.0.0.1:1", LoopbackHost.IPV4, 1), ("http://127.0.0.1:65535", LoopbackHost.IPV4,
                                                   65535),
    ("http://[::1]:9", LoopbackHost.IPV6, 9), ("http://127.0.0.1:43117/", LoopbackHost.IPV4, 43117),
    ("http://[::1]:43117/v1", LoopbackHost.IPV6, 43117),
    ("http://127.0.0.1:10000/v1/", LoopbackHost.IPV4, 10000),
])
def test_the_admitted_spellings_and_their_canonical_form(text: str, host: LoopbackHost,
                                                          port: int) -> None:
    endpoint = parse_endpoint(text)
    assert endpoint == ModelEndpoint(host, port)
    shown = f"[{host.value}]" if host is LoopbackHost.IPV6 else host.value
    assert str(endpoint) == endpoint.base_url == f"http://{shown}:{port}"
    assert endpoint.url(ModelPath.CHAT) == f"http://{shown}:{port}/v1/chat/completions"
    assert endpoint.url(ModelPath.MODELS) == f"http://{shown}:{port}/v1/models"
    assert endpoint.url(ModelPath.HEALTH) == f"http://{shown}:{port}/health"


@pytest.mark.req("MC-01")
@pytest.mark.parametrize(("text", "reason"), [
    ("", "endpoint is empty"),
    ("http://127.0.0.1:1/" + "v" * 45, "nothing but '/' or '/v1' may follow the port"),
    ("http://127.0.0.1:1/" + "v" * 46, f"endpoint is longer than {MAX_ENDPOINT_CHARS} characters"),
    ("http://127.0.0.1:1 ", "character U+0020 SPACE at position 18 is not allowed (whitespace, "
                            "control and non-ASCII characters are refused)"),
    ("http://127.0.0.1:\x7f1", "character U+007F at position 17 is not allowed (whitespace, "
                               "control and non-ASCII characters are refused)"),
    ("\x00", "character U+0000 at position 0 is not allowed (whitespace, control and non-ASCII "
             "characters are refused)"),
    ("http://127.0.0.1:٤٣", "character U+0664 ARABIC-INDIC DIGIT FOUR at position 17 is not "
                            "allowed (whitespace, control and non-ASCII characters are refused)"),
    ("!http", "scheme must be exactly 'http://' (https is not used on loopback)"),
    ("~", "scheme must be exactly 'http://' (https is not used on loopback)"),
    ("http://u@127.0.0.1:1", "userinfo is not allowed"),
    ("http:\\\\127.0.0.1:1", "backslashes are not allowed"),
    ("http://127.0.0.1:1?x", "a query is not allowed"),
    ("http://127.0.0.1:1#x", "a fragment is not allowed"),
    ("http://127.0.0.1:1%30", "percent-encoding is not allowed"),
    ("https://127.0.0.1:1", "scheme must be exactly 'http://' (https is not used on loopback)"),
    ("HTTP://127.0.0.1:1", "scheme must be exactly 'http://' (https is not used on loopback)"),
    ("http://localhost:1", "host must be exactly 127.0.0.1 or [::1] (names are not resolved)"),
    ("http://127.1:1", "host must be exactly 127.0.0.1 or [::1] (names are not resolved)"),
    ("http://::1:1", "host must be exactly 127.0.0.1 or [::1] (names are not resolved)"),
    ("http://127.0.0.1", "a ':' and an explicit port must follow the host"),
    ("http://127.0.0.10:1", "a ':' and an explicit port must follow the host"),
    ("http://[::1]/", "a ':' and an explicit port must follow the host"),
    ("http://127.0.0.1:", "port is missing or not written in ASCII digits"),
    ("http://127.0.0.1:+80", "port is missing or not written in ASCII digits"),
    ("http://127.0.0.1:/v1", "port is missing or not written in ASCII digits"),
    ("http://127.0.0.1:0", "port must be 1-65535 without leading zeros"),
    ("http://127.0.0.1:080", "port must be 1-65535 without leading zeros"),
    ("http://127.0.0.1:65536", "port must be 1-65535"),
    ("http://127.0.0.1:99999", "port must be 1-65535"),
    ("http://127.0.0.1:100000", "port must be 1-65535"),
    ("http://127.0.0.1:1" + "0" * 20, "port must be 1-65535"),
    ("http://127.0.0.1:1/v2", "nothing but '/' or '/v1' may follow the port"),
    ("http://127.0.0.1:1//", "nothing but '/' or '/v1' may follow the port"),
    ("http://127.0.0.1:1/v1/chat", "nothing but '/' or '/v1' may follow the port"),
    ("http://127.0.0.1:1x", "nothing but '/' or '/v1' may follow the port"),
])
def test_each_refusal_names_its_reason(text: str, reason: str) -> None:
    with pytest.raises(EndpointRefused) as caught:
        parse_endpoint(text)
    assert caught.value.message == reason


@pytest.mark.req("MC-01")
def test_the_length_bound_is_64_characters() -> None:
    assert MAX_ENDPOINT_CHARS == 64
    assert len("http://127.0.0.1:1/" + "v" * 45) == 64


@pytest.mark.req("MC-01")
def test_a_parsed_endpoint_cannot_be_changed_afterwards() -> None:
    # The client keeps the endpoint it was given: nothing may point it elsewhere later.
    endpoint = parse_endpoint("http://127.0.0.1:43117")
    with pytest.raises(dataclasses.FrozenInstanceError):
        endpoint.port = 43118  # type: ignore[misc]
    assert endpoint.base_url == "http://127.0.0.1:43117"
