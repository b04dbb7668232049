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
    ├── LlamaServerFailed        -- LLAMA_SERVER_*: our llama-server did not start (SM-05)
    ├── ProtocolRefused          -- one refused model output (PR-01, PR-02)
    ├── WorkspaceError           -- WORKSPACE_* (WS-01)
    ├── ToolError                -- a tool's bounded diagnostic (GW-05), given to the model
    ├── RuntimeRefused           -- a refused request (RT-03, RT-08, BR-*), HTTP 4xx/5xx
    │   └── FieldRefused         -- one field at fault (VALIDATION_FAILED, OpenAI's param)
    ├── SessionInvalid           -- SESSION_INVALID: a corrupt or unsafe session log (BR-07)
    ├── RecordTooLarge           -- RECORD_TOO_LARGE: one log record over its bound
    ├── SessionFull              -- SESSION_FULL: a session log at its size limit
    ├── IllegalTransition        -- a turn state change outside the table (RT-02), a bug
    ├── HostStartupError         -- CORDIS_UNAVAILABLE: mandatory services missing (HO-04)
    └── ReportInvalid            -- REPORT_INVALID: unreadable requirements or results

The HTTP status of every code is decided once, in :data:`HTTP_STATUS`, next to
the codes; no raise site names a status.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

#: Longest message an error may carry (GW-05 asks for at most 300 characters).
MAX_MESSAGE_CHARS = 300


class ErrorCode(enum.StrEnum):
    """Stable error codes; the wire and the CLI show these strings verbatim."""

    CONFIG_INVALID = "CONFIG_INVALID"
    ENDPOINT_REFUSED = "ENDPOINT_REFUSED"
    HOST_REFUSED = "HOST_REFUSED"
    PORT_REFUSED = "PORT_REFUSED"
    MODEL_UNAVAILABLE = "MODEL_UNAVAILABLE"
    MODEL_BUSY = "MODEL_BUSY"  # too many calls wait for the model's slots (BR-20)
    MODEL_PROTOCOL_ERROR = "MODEL_PROTOCOL_ERROR"
    REPORT_INVALID = "REPORT_INVALID"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    SERVE_FAILED = "SERVE_FAILED"  # serve could not write its ready or log file, or start
    # real model stage (SM)
    GGUF_INVALID = "GGUF_INVALID"
    GGUF_SHA256_MISMATCH = "GGUF_SHA256_MISMATCH"
    GGUF_CHANGED = "GGUF_CHANGED"  # the verified file changed before or while it ran
    RESOURCES_INSUFFICIENT = "RESOURCES_INSUFFICIENT"  # the model cannot fit (SM-04)
    LLAMA_SERVER_NOT_FOUND = "LLAMA_SERVER_NOT_FOUND"
    LLAMA_SERVER_EXITED = "LLAMA_SERVER_EXITED"
    LLAMA_SERVER_NOT_OURS = "LLAMA_SERVER_NOT_OURS"
    LLAMA_SERVER_START_TIMEOUT = "LLAMA_SERVER_START_TIMEOUT"
    # workspace (WS)
    WORKSPACE_INVALID = "WORKSPACE_INVALID"
    WORKSPACE_EXISTS = "WORKSPACE_EXISTS"
    WORKSPACE_LOCKED = "WORKSPACE_LOCKED"
    WORKSPACE_OUTDATED = "WORKSPACE_OUTDATED"  # an older store: `workspace upgrade` migrates it
    # tools and gateway (GW): returned to the model as normal tool results
    TOOL_UNAVAILABLE = "TOOL_UNAVAILABLE"
    INVALID_ARGUMENTS = "INVALID_ARGUMENTS"
    OBJECT_NOT_FOUND = "OBJECT_NOT_FOUND"
    CAMPAIGN_NOT_FOUND = "CAMPAIGN_NOT_FOUND"
    PATH_OUTSIDE_WORKSPACE = "PATH_OUTSIDE_WORKSPACE"
    PATH_LOOP = "PATH_LOOP"  # a symlink loop, or more than 40 links in one path (GW-06)
    PATH_NOT_FOUND = "PATH_NOT_FOUND"  # a dangling symlink inside files/ (GW-06)
    FILE_NOT_FOUND = "FILE_NOT_FOUND"
    NOT_A_FILE = "NOT_A_FILE"
    NOT_A_DIRECTORY = "NOT_A_DIRECTORY"
    FILE_TOO_LARGE = "FILE_TOO_LARGE"
    NOT_UTF8 = "NOT_UTF8"
    FILE_CHANGED = "FILE_CHANGED"  # a conditional write found other content than expected
    PERMISSION_DENIED = "PERMISSION_DENIED"
    RESEARCH_ADAPTER_UNAVAILABLE = "RESEARCH_ADAPTER_UNAVAILABLE"
    RESULT_TOO_LARGE = "RESULT_TOO_LARGE"
    # runtime (RT)
    GRANT_REQUIRED = "GRANT_REQUIRED"
    GRANT_NOT_FOUND = "GRANT_NOT_FOUND"
    TURN_NOT_FOUND = "TURN_NOT_FOUND"
    TURN_NOT_RESUMABLE = "TURN_NOT_RESUMABLE"
    QUEUE_FULL = "QUEUE_FULL"
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"
    REPEATED_TOOL_FAILURE = "REPEATED_TOOL_FAILURE"
    RUNTIME_CLOSED = "RUNTIME_CLOSED"
    CANCELLED = "CANCELLED"
    TURN_SUPERSEDED = "TURN_SUPERSEDED"
    # server (SV)
    HOST_NOT_ALLOWED = "HOST_NOT_ALLOWED"
    ORIGIN_NOT_ALLOWED = "ORIGIN_NOT_ALLOWED"
    CSRF_FAILED = "CSRF_FAILED"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    FORBIDDEN = "FORBIDDEN"
    NOT_FOUND = "NOT_FOUND"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    UNSUPPORTED_MEDIA_TYPE = "UNSUPPORTED_MEDIA_TYPE"
    BODY_TOO_LARGE = "BODY_TOO_LARGE"
    VALIDATION_FAILED = "VALIDATION_FAILED"
    AUTH_AMBIGUOUS = "AUTH_AMBIGUOUS"  # a session cookie and a bearer token together (SV-08)
    BEARER_NOT_ACCEPTED = "BEARER_NOT_ACCEPTED"  # a bearer on the cookie session's routes (SV-08)
    # bridge (HO, BR)
    CORDIS_DISABLED = "CORDIS_DISABLED"
    CORDIS_STARTING = "CORDIS_STARTING"
    CORDIS_UNAVAILABLE = "CORDIS_UNAVAILABLE"
    BRIDGE_TOGGLE_LOCKED = "BRIDGE_TOGGLE_LOCKED"  # serve --bridge-toggle locked (BR-16)
    SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
    SESSION_INVALID = "SESSION_INVALID"
    SESSION_BUSY = "SESSION_BUSY"
    APPROVAL_NOT_PENDING = "APPROVAL_NOT_PENDING"
    STREAM_LIMIT = "STREAM_LIMIT"
    STREAM_INVALID = "STREAM_INVALID"  # a turn stream line a client refused (UI-06)
    MODEL_NOT_FOUND = "MODEL_NOT_FOUND"
    UNKNOWN_MODEL = "UNKNOWN_MODEL"  # a chat request names no model the engine serves (BR-13)
    DELETE_UNSUPPORTED = "DELETE_UNSUPPORTED"
    RECORD_TOO_LARGE = "RECORD_TOO_LARGE"
    SESSION_FULL = "SESSION_FULL"
    TOO_MANY_SESSIONS = "TOO_MANY_SESSIONS"
    # connections (SV-09)
    REQUEST_TIMEOUT = "REQUEST_TIMEOUT"  # a request head that did not arrive in time
    TOO_MANY_CONNECTIONS = "TOO_MANY_CONNECTIONS"  # at the cap, with no idle one to close
    # isolated work (WK)
    WORK_DB_INVALID = "WORK_DB_INVALID"  # a work database URL refused (scheme, form, query)
    WORK_DB_UNAVAILABLE = "WORK_DB_UNAVAILABLE"  # the work database cannot be reached or read
    WORK_DB_TOO_NEW = "WORK_DB_TOO_NEW"  # its schema is newer than this labfy-ref
    TASK_NOT_FOUND = "TASK_NOT_FOUND"
    TASK_FINISHED = "TASK_FINISHED"  # a finished task cannot be cancelled
    APPROVAL_NOT_FOUND = "APPROVAL_NOT_FOUND"
    LEASE_NOT_HELD = "LEASE_NOT_HELD"  # a run written or extended by a worker not holding it
    EFFECT_NOT_STARTED = "EFFECT_NOT_STARTED"  # completing an effect that is not open
    EFFECT_UNRESOLVED = "EFFECT_UNRESOLVED"  # a crashed effect whose target cannot tell if it ran


#: The HTTP status of each code, decided once (a test checks every code has one).
HTTP_STATUS: Mapping[ErrorCode, int] = {
    ErrorCode.CONFIG_INVALID: 422, ErrorCode.ENDPOINT_REFUSED: 422,
    ErrorCode.HOST_REFUSED: 422, ErrorCode.PORT_REFUSED: 422,
    ErrorCode.MODEL_UNAVAILABLE: 503, ErrorCode.MODEL_BUSY: 503,
    ErrorCode.MODEL_PROTOCOL_ERROR: 502,
    ErrorCode.REPORT_INVALID: 422, ErrorCode.INTERNAL_ERROR: 500, ErrorCode.SERVE_FAILED: 500,
    ErrorCode.GGUF_INVALID: 422, ErrorCode.GGUF_SHA256_MISMATCH: 422,
    ErrorCode.GGUF_CHANGED: 409,
    ErrorCode.RESOURCES_INSUFFICIENT: 422, ErrorCode.LLAMA_SERVER_NOT_FOUND: 503,
    ErrorCode.LLAMA_SERVER_EXITED: 503, ErrorCode.LLAMA_SERVER_NOT_OURS: 503,
    ErrorCode.LLAMA_SERVER_START_TIMEOUT: 503,
    ErrorCode.WORKSPACE_INVALID: 409, ErrorCode.WORKSPACE_EXISTS: 409,
    ErrorCode.WORKSPACE_LOCKED: 409, ErrorCode.WORKSPACE_OUTDATED: 409,
    ErrorCode.TOOL_UNAVAILABLE: 409, ErrorCode.INVALID_ARGUMENTS: 422,
    ErrorCode.OBJECT_NOT_FOUND: 404, ErrorCode.CAMPAIGN_NOT_FOUND: 404,
    ErrorCode.PATH_OUTSIDE_WORKSPACE: 403, ErrorCode.FILE_NOT_FOUND: 404,
    ErrorCode.PATH_LOOP: 409, ErrorCode.PATH_NOT_FOUND: 404,
    ErrorCode.NOT_A_FILE: 409, ErrorCode.NOT_A_DIRECTORY: 409, ErrorCode.FILE_TOO_LARGE: 413,
    ErrorCode.NOT_UTF8: 422, ErrorCode.FILE_CHANGED: 409, ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.RESEARCH_ADAPTER_UNAVAILABLE: 409, ErrorCode.RESULT_TOO_LARGE: 413,
    ErrorCode.GRANT_REQUIRED: 409, ErrorCode.GRANT_NOT_FOUND: 404,
    ErrorCode.TURN_NOT_FOUND: 404, ErrorCode.TURN_NOT_RESUMABLE: 409,
    ErrorCode.QUEUE_FULL: 429, ErrorCode.BUDGET_EXHAUSTED: 409,
    ErrorCode.REPEATED_TOOL_FAILURE: 409, ErrorCode.RUNTIME_CLOSED: 503,
    ErrorCode.CANCELLED: 409, ErrorCode.TURN_SUPERSEDED: 409,
    ErrorCode.HOST_NOT_ALLOWED: 403, ErrorCode.ORIGIN_NOT_ALLOWED: 403,
    ErrorCode.CSRF_FAILED: 403, ErrorCode.UNAUTHENTICATED: 401, ErrorCode.FORBIDDEN: 403,
    ErrorCode.NOT_FOUND: 404, ErrorCode.METHOD_NOT_ALLOWED: 405,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: 415, ErrorCode.BODY_TOO_LARGE: 413,
    ErrorCode.VALIDATION_FAILED: 422, ErrorCode.AUTH_AMBIGUOUS: 400,
    ErrorCode.BEARER_NOT_ACCEPTED: 400,
    ErrorCode.CORDIS_DISABLED: 503, ErrorCode.CORDIS_STARTING: 503,
    ErrorCode.CORDIS_UNAVAILABLE: 503, ErrorCode.BRIDGE_TOGGLE_LOCKED: 409,
    ErrorCode.SESSION_NOT_FOUND: 404,
    ErrorCode.SESSION_INVALID: 409, ErrorCode.SESSION_BUSY: 409,
    ErrorCode.APPROVAL_NOT_PENDING: 409, ErrorCode.STREAM_LIMIT: 409,
    ErrorCode.STREAM_INVALID: 502,
    ErrorCode.MODEL_NOT_FOUND: 422, ErrorCode.UNKNOWN_MODEL: 404,
    ErrorCode.DELETE_UNSUPPORTED: 501,
    ErrorCode.RECORD_TOO_LARGE: 413, ErrorCode.SESSION_FULL: 409,
    ErrorCode.TOO_MANY_SESSIONS: 429,
    ErrorCode.REQUEST_TIMEOUT: 408, ErrorCode.TOO_MANY_CONNECTIONS: 503,
    ErrorCode.WORK_DB_INVALID: 422, ErrorCode.WORK_DB_UNAVAILABLE: 503,
    ErrorCode.WORK_DB_TOO_NEW: 409, ErrorCode.TASK_NOT_FOUND: 404,
    ErrorCode.TASK_FINISHED: 409, ErrorCode.APPROVAL_NOT_FOUND: 404,
    ErrorCode.LEASE_NOT_HELD: 409, ErrorCode.EFFECT_NOT_STARTED: 409,
    ErrorCode.EFFECT_UNRESOLVED: 409,
}


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

    @property
    def status(self) -> int:
        """The HTTP status of this error's code (:data:`HTTP_STATUS`)."""
        return HTTP_STATUS[self.code]


class ConfigRefused(LabfyError):
    """A configuration value was refused; the CLI exits 2."""

    code = ErrorCode.CONFIG_INVALID


class EndpointRefused(ConfigRefused):
    """The model endpoint is not one of the two canonical loopback forms (MC-01)."""

    code = ErrorCode.ENDPOINT_REFUSED


class ModelUnavailable(LabfyError):
    """The configured model could not be reached or answered outside the bounds."""

    code = ErrorCode.MODEL_UNAVAILABLE


class LlamaServerFailed(LabfyError):
    """The supervised llama-server exited, was not ours, or missed its deadline (SM-05)."""

    code = ErrorCode.LLAMA_SERVER_EXITED


class ProtocolRefused(LabfyError):
    """One model output was refused by the action contract.

    ``defect`` names what was wrong in a few fixed words; it is what the single
    repair message (PR-03) tells the model, so it never quotes the model's text.
    A refusal is repaired at most once per round, and never once the reply's
    text has been streamed to the user.
    """

    code = ErrorCode.MODEL_PROTOCOL_ERROR

    def __init__(self, defect: str, message: str, *, repairable: bool = True) -> None:
        self.defect = defect
        #: False once the reply's text has been shown to the user: no repair then (BR-02).
        self.repairable = repairable
        super().__init__(message)


class WorkspaceError(LabfyError):
    """A directory is not a usable workspace, or is locked by another server."""

    code = ErrorCode.WORKSPACE_INVALID


class ToolError(LabfyError):
    """A tool call failed; the model receives the code and the bounded message only."""

    code = ErrorCode.TOOL_UNAVAILABLE


class RuntimeRefused(LabfyError):
    """A request was refused; its HTTP status follows from the code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message, code=code)


class FieldRefused(RuntimeRefused):
    """A request refused because of one field: ``param`` names it (VALIDATION_FAILED; the
    OpenAI face sends it as the error's ``param``)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(ErrorCode.VALIDATION_FAILED, f"{param}: {message}")
        self.param = param

class SessionInvalid(LabfyError):
    """A session log is corrupt, a symlink, or not a regular file (409)."""

    code = ErrorCode.SESSION_INVALID


class RecordTooLarge(LabfyError):
    """One record is larger than a log admits; nothing was written."""

    code = ErrorCode.RECORD_TOO_LARGE


class SessionFull(LabfyError):
    """A session log reached its size limit: it stays readable, appends are refused."""

    code = ErrorCode.SESSION_FULL


class IllegalTransition(LabfyError):
    """A turn state change outside the table of RT-02 was attempted (a bug)."""

    code = ErrorCode.INTERNAL_ERROR


class HostStartupError(LabfyError):
    """Mandatory services are missing once the composition settled (HO-04)."""

    code = ErrorCode.CORDIS_UNAVAILABLE


class ReportInvalid(LabfyError):
    """The requirements file or a results file is unreadable or malformed."""

    code = ErrorCode.REPORT_INVALID
