"""MC-01: the endpoint grammar accepts exactly the canonical loopback forms."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labfy_ref.errors import EndpointRefused, ErrorCode
from labfy_ref.model.endpoint import LoopbackHost, ModelPath, parse_endpoint


@pytest.mark.req("MC-01")
@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("http://127.0.0.1:43117", LoopbackHost.IPV4, 43117),
        ("http://127.0.0.1:43117/", LoopbackHost.IPV4, 43117),
        ("http://127.0.0.1:1/v1", LoopbackHost.IPV4, 1),
        ("http://127.0.0.1:65535/v1/", LoopbackHost.IPV4, 65535),
        ("http://[::1]:9000", LoopbackHost.IPV6, 9000),
        ("http://[::1]:9000/", LoopbackHost.IPV6, 9000),
    ],
)
def test_canonical_forms_are_accepted_into_a_typed_value(
        text: str, host: LoopbackHost, port: int) -> None:
    endpoint = parse_endpoint(text)
    assert (endpoint.host, endpoint.port) == (host, port)
    assert endpoint.base_url == f"http://{host.url_form}:{port}"


@pytest.mark.req("MC-01", "MC-02")
def test_only_the_three_admitted_paths_can_be_built() -> None:
    endpoint = parse_endpoint("http://[::1]:5000/v1/")
    assert [endpoint.url(p) for p in ModelPath] == [
        "http://[::1]:5000/v1/chat/completions",
        "http://[::1]:5000/v1/models",
        "http://[::1]:5000/health",
    ]


@pytest.mark.req("MC-01")
@given(st.integers(min_value=1, max_value=65535), st.sampled_from(list(LoopbackHost)))
def test_canonical_text_round_trips(port: int, host: LoopbackHost) -> None:
    endpoint = parse_endpoint(f"http://{host.url_form}:{port}")
    assert parse_endpoint(endpoint.base_url) == endpoint


@pytest.mark.req("MC-01")
@given(st.text(max_size=40))
def test_arbitrary_text_is_canonical_or_refused_with_the_code(text: str) -> None:
    try:
        endpoint = parse_endpoint(text)
    except EndpointRefused as exc:
        assert exc.code is ErrorCode.ENDPOINT_REFUSED
        assert "\n" not in exc.message and len(exc.message) <= 300
    else:
        assert text in {endpoint.base_url + suffix for suffix in ("", "/", "/v1", "/v1/")}


@pytest.mark.req("MC-01")
def test_refusal_names_the_offending_character_and_position() -> None:
    with pytest.raises(EndpointRefused) as caught:
        parse_endpoint("http://127.0.0.1:80\t")
    assert caught.value.message.startswith("character U+0009 at position 19 is not allowed")
