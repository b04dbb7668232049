"""Every error a user of labfy-ref can see, defined once.

Each error carries a stable ``code`` (the strings of SPEC.md) and a one-line,
bounded ``message``. Foreign exceptions are translated at the boundary that
meets them and re-raised ``from`` the original, so nothing below this module
ever shows a traceback to a user.

Hierarchy::

    LabfyError
    ├── ConfigRefused            -- exit 2 at configuration time
    │   └── EndpointRefused      -- ENDPOINT_REFUSED (MC-01)
    ├── ModelUnavailable         -- MODEL_UNAVAILABLE (MC-02, MC-03)
    └── ProtocolRefused          -- one refused model output (PR-01, PR-02)
"""

from __future__ import annotations

import enum

#: Longest message an error may carry (GW-05 asks for at most 300 characters).
MAX_MESSAGE_CHARS = 300


class ErrorCode(enum.StrEnum):
    """Stable error codes; the wire and the CLI show these strings verbatim."""

    CONFIG_INVALID = "CONFIG_INVALID"
    ENDPOINT_REFUSED = "ENDPOINT_REFUSED"
    HOST_REFUSED = "HOST_REFUSED"
    PORT_REFUSED = "PORT_REFUSED"
    MODEL_UNAVAILABLE = "MODEL_UNAVAILABLE"
    MODEL_PROTOCOL_ERROR = "MODEL_PROTOCOL_ERROR"
    REPORT_INVALID = "REPORT_INVALID"


def bounded(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """Return ``text`` on one line, cut to ``limit`` characters with an ellipsis.

    Control characters are replaced so a message can never forge a second
    log line or carry terminal escapes.
    """
    flat = "".join(ch if ch.isprintable() else " " for ch in text)
    if len(flat) <= limit:
        return flat
    return flat[: limit - 1] + "…"


class LabfyError(Exception):
    """Base of every labfy-ref error: a stable code and a bounded one-line message."""

    code: ErrorCode = ErrorCode.CONFIG_INVALID

    def __init__(self, message: str, *, code: ErrorCode | None = None) -> None:
        if code is not None:
            self.code = code
        self.message = bounded(message)
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"{self.code.value}: {self.message}"

    def as_dict(self) -> dict[str, str]:
        """The JSON error shape of SV-05: ``{"code", "message"}``."""
        return {"code": self.code.value, "message": self.message}


class ConfigRefused(LabfyError):
    """A configuration value was refused; the CLI exits 2."""

    code = ErrorCode.CONFIG_INVALID


class EndpointRefused(ConfigRefused):
    """The model endpoint is not one of the two canonical loopback forms (MC-01)."""

    code = ErrorCode.ENDPOINT_REFUSED


class ModelUnavailable(LabfyError):
    """The configured model could not be reached or answered outside the bounds."""

    code = ErrorCode.MODEL_UNAVAILABLE


class ProtocolRefused(LabfyError):
    """One model output was refused by the action contract.

    ``defect`` names what was wrong in a few fixed words; it is what the single
    repair message (PR-03) tells the model, so it never quotes the model's text.
    """

    code = ErrorCode.MODEL_PROTOCOL_ERROR

    def __init__(self, defect: str, message: str) -> None:
        self.defect = defect
        super().__init__(message)
