"""Every error answer of the server is ``{"error": {"code", "message"}}`` (SV-05).

A :class:`~labfy_ref.errors.LabfyError` answers with the status its code maps
to (:data:`~labfy_ref.errors.HTTP_STATUS`); framework errors map to the codes
of their status. An unexpected exception is not handled here: the security
middleware, which wraps everything, answers it (with the security headers) and
logs one incident line.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from labfy_ref.errors import ErrorCode, LabfyError, bounded

_HTTP_CODES = {404: ErrorCode.NOT_FOUND, 405: ErrorCode.METHOD_NOT_ALLOWED,
               401: ErrorCode.UNAUTHENTICATED, 403: ErrorCode.FORBIDDEN}


def error_response(status: int, code: ErrorCode | str, message: str) -> JSONResponse:
    """A JSON error answer with a bounded one-line message."""
    value = code.value if isinstance(code, ErrorCode) else code
    return JSONResponse({"error": {"code": value, "message": bounded(message)}}, status_code=status)


def refusal(error: LabfyError) -> JSONResponse:
    """The answer to a refused request: the status of its code, its one-line message."""
    return error_response(error.status, error.code, error.message)


def install_error_handlers(app: FastAPI) -> None:
    """Map refusals and framework errors to the JSON error shape; never a traceback."""

    @app.exception_handler(LabfyError)
    async def labfy_error(_: Request, exc: LabfyError) -> JSONResponse:
        return refusal(exc)

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
