"""The model endpoint, parsed into a typed value by a positive grammar (MC-01).

The only admitted spellings are, exactly::

    endpoint = "http://" host ":" port [ "/" | "/v1" | "/v1/" ]
    host     = "127.0.0.1" | "[::1]"
    port     = %x31-39 *4DIGIT          ; 1..65535, no leading zero, ASCII digits only

Everything else is refused. We consume the text left to right and accept only
what the grammar allows; there is no list of bad inputs to keep up to date.
``httpx.URL`` and ``urllib.parse`` are deliberately not used: both accept
spellings (``+80``, non-ASCII digits, ``\\`` before ``@``) that we must refuse.

The optional ``/v1`` suffix is accepted because that is how OpenAI-style base
URLs are usually written; it carries no meaning and is dropped, so the
canonical form never has a path.
"""

from __future__ import annotations

import dataclasses
import enum
import unicodedata

from labfy_ref.errors import EndpointRefused

#: Longest endpoint text we read; the longest valid one is 30 characters.
MAX_ENDPOINT_CHARS = 64
_SCHEME = "http://"
_ALLOWED_SUFFIXES = ("", "/", "/v1", "/v1/")
_DIGITS = frozenset("0123456789")
_MAX_PORT = 65535
# Characters that are never part of the grammar; named in the refusal so the
# operator learns *why* (the positive parse would refuse them anyway).
_NAMED_DEFECTS = (
    ("@", "userinfo is not allowed"),
    ("\\", "backslashes are not allowed"),
    ("?", "a query is not allowed"),
    ("#", "a fragment is not allowed"),
    ("%", "percent-encoding is not allowed"),
)


class LoopbackHost(enum.Enum):
    """The two loopback addresses a model may live on."""

    IPV4 = "127.0.0.1"
    IPV6 = "::1"

    @property
    def url_form(self) -> str:
        """The host as written in a URL (IPv6 in brackets)."""
        return f"[{self.value}]" if self is LoopbackHost.IPV6 else self.value


_HOST_SPELLINGS = {host.url_form: host for host in LoopbackHost}


class ModelPath(enum.Enum):
    """The only paths the model client ever requests (MC-02)."""

    CHAT = "/v1/chat/completions"
    MODELS = "/v1/models"
    HEALTH = "/health"


@dataclasses.dataclass(frozen=True, slots=True)
class ModelEndpoint:
    """A validated model endpoint: one of the two loopback hosts and a port."""

    host: LoopbackHost
    port: int

    @property
    def base_url(self) -> str:
        """The canonical text form, e.g. ``http://127.0.0.1:43117``."""
        return f"http://{self.host.url_form}:{self.port}"

    def url(self, path: ModelPath) -> str:
        """The full URL of one of the admitted paths."""
        return self.base_url + path.value

    def __str__(self) -> str:
        return self.base_url


def _describe(ch: str) -> str:
    name = unicodedata.name(ch, "")
    return f"U+{ord(ch):04X}" + (f" {name}" if name else "")


def parse_endpoint(text: str) -> ModelEndpoint:
    """Parse ``text`` into a :class:`ModelEndpoint` or raise :class:`EndpointRefused`."""
    if len(text) > MAX_ENDPOINT_CHARS:
        raise EndpointRefused(f"endpoint is longer than {MAX_ENDPOINT_CHARS} characters")
    if not text:
        raise EndpointRefused("endpoint is empty")
    for index, ch in enumerate(text):
        if not "!" <= ch <= "~":
            raise EndpointRefused(
                f"character {_describe(ch)} at position {index} is not allowed "
                "(whitespace, control and non-ASCII characters are refused)"
            )
    for ch, reason in _NAMED_DEFECTS:
        if ch in text:
            raise EndpointRefused(reason)
    if not text.startswith(_SCHEME):
        raise EndpointRefused("scheme must be exactly 'http://' (https is not used on loopback)")
    rest = text[len(_SCHEME) :]
    host = next((h for s, h in _HOST_SPELLINGS.items() if rest.startswith(s)), None)
    if host is None:
        raise EndpointRefused("host must be exactly 127.0.0.1 or [::1] (names are not resolved)")
    rest = rest[len(host.url_form) :]
    if not rest.startswith(":"):
        raise EndpointRefused("a ':' and an explicit port must follow the host")
    rest = rest[1:]
    digits = ""
    while rest and rest[0] in _DIGITS:
        digits, rest = digits + rest[0], rest[1:]
    if not digits:
        raise EndpointRefused("port is missing or not written in ASCII digits")
    if digits[0] == "0":
        raise EndpointRefused("port must be 1-65535 without leading zeros")
    if len(digits) > 5 or int(digits) > _MAX_PORT:
        raise EndpointRefused("port must be 1-65535")
    if rest not in _ALLOWED_SUFFIXES:
        raise EndpointRefused("nothing but '/' or '/v1' may follow the port")
    return ModelEndpoint(host=host, port=int(digits))
