"""Every error answer of the server is ``{"error": {"code", "message"}}`` (SV-05).

A :class:`~labfy_ref.errors.LabfyError` answers with the status its code maps
to (:data:`~labfy_ref.errors.HTTP_STATUS`); framework errors map to the codes
of their status. An unexpected exception is not handled here: the security
middleware, which wraps everything, answers it (with the security headers) and
logs one incident line.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from labfy_ref.errors import HTTP_STATUS, ErrorCode, LabfyError, bounded

_HTTP_CODES = {404: ErrorCode.NOT_FOUND, 405: ErrorCode.METHOD_NOT_ALLOWED,
               401: ErrorCode.UNAUTHENTICATED, 403: ErrorCode.FORBIDDEN}


#: Where refusals take OpenAI's error shape: the API that chat clients use (BR-13).
OPENAI_PREFIX = "/api/cordis/v1/"
_OPENAI_TYPES = {401: "authentication_error", 403: "permission_error",
                 404: "invalid_request_error", 429: "rate_limit_error"}


def status_of(code: str) -> int:
    """The HTTP status of an error code (500 for a code this build does not know)."""
    try:
        return HTTP_STATUS[ErrorCode(code)]
    except ValueError:  # a code of another build: the engine's, not a refusal of ours
        return 500


def openai_error(code: ErrorCode | str, message: str) -> dict[str, Any]:
    """The ``error`` object of an OpenAI-shaped answer (the server's code kept as ``code``)."""
    value = code.value if isinstance(code, ErrorCode) else code
    status = status_of(value)
    kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"message": bounded(message), "type": kind, "param": None, "code": value}


def error_response(status: int, code: ErrorCode | str, message: str, *,
                   openai: bool = False) -> JSONResponse:
    """A JSON error answer with a bounded one-line message (OpenAI-shaped when ``openai``)."""
    value = code.value if isinstance(code, ErrorCode) else code
    error = (openai_error(value, message) if openai
             else {"code": value, "message": bounded(message)})
    return JSONResponse({"error": error}, status_code=status)


def refusal(error: LabfyError, *, openai: bool = False) -> JSONResponse:
    """The answer to a refused request: the status of its code, its one-line message."""
    return error_response(error.status, error.code, error.message, openai=openai)


def _openai(request: Request) -> bool:
    """Whether ``request`` is one of the chat-client API's (even a route it does not have)."""
    path = request.url.path
    return path.startswith(OPENAI_PREFIX) or path == OPENAI_PREFIX.rstrip("/")


def install_error_handlers(app: FastAPI) -> None:
    """Map refusals and framework errors to the JSON error shape; never a traceback."""

    @app.exception_handler(LabfyError)
    async def labfy_error(request: Request, exc: LabfyError) -> JSONResponse:
        return refusal(exc, openai=_openai(request))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        kind = first.get("type", "invalid")
        return error_response(422, ErrorCode.VALIDATION_FAILED, f"{where or 'body'}: {kind}",
                              openai=_openai(request))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, ErrorCode.INTERNAL_ERROR)
        return error_response(exc.status_code, code, str(exc.detail), openai=_openai(request))
