"""Every error answer of the server is ``{"error": {"code", "message"}}`` (SV-05)."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from labfy_ref.errors import (
    ErrorCode,
    LabfyError,
    ModelUnavailable,
    RuntimeRefused,
    ToolError,
    bounded,
)

log = logging.getLogger("labfy_ref.server")
_HTTP_CODES = {404: ErrorCode.NOT_FOUND, 405: ErrorCode.METHOD_NOT_ALLOWED,
               401: ErrorCode.UNAUTHENTICATED, 403: ErrorCode.FORBIDDEN}


def error_response(status: int, code: ErrorCode | str, message: str) -> JSONResponse:
    """A JSON error answer with a bounded one-line message."""
    value = code.value if isinstance(code, ErrorCode) else code
    return JSONResponse({"error": {"code": value, "message": bounded(message)}}, status_code=status)


def install_error_handlers(app: FastAPI) -> None:
    """Map every exception to the JSON error shape; never a traceback on the wire."""

    @app.exception_handler(RuntimeRefused)
    async def refused(_: Request, exc: RuntimeRefused) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message)

    @app.exception_handler(ToolError)
    async def tool_error(_: Request, exc: ToolError) -> JSONResponse:
        status = 404 if exc.code in (ErrorCode.CAMPAIGN_NOT_FOUND,
                                     ErrorCode.OBJECT_NOT_FOUND) else 409
        return error_response(status, exc.code, exc.message)

    @app.exception_handler(ModelUnavailable)
    async def unavailable(_: Request, exc: ModelUnavailable) -> JSONResponse:
        return error_response(503, exc.code, exc.message)

    @app.exception_handler(LabfyError)
    async def labfy_error(_: Request, exc: LabfyError) -> JSONResponse:
        return error_response(409, exc.code, exc.message)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        kind = first.get("type", "invalid")
        return error_response(422, ErrorCode.VALIDATION_FAILED, f"{where or 'body'}: {kind}")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, ErrorCode.INTERNAL_ERROR)
        return error_response(exc.status_code, code, str(exc.detail))

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.error("unexpected %s", type(exc).__name__)
        return error_response(500, ErrorCode.INTERNAL_ERROR, "internal error")
