"""The FastAPI application of the workspace server (SV-01..SV-07).

The security checklist is the one added middleware; Starlette puts its own
``ServerErrorMiddleware`` outside it, so the checklist answers unexpected
errors itself (with every security header) and no ``Exception`` handler is
registered. Swagger/ReDoc pages are off (they load remote assets the CSP
forbids); the OpenAPI document itself is served at ``/api/openapi.json``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources

from fastapi import FastAPI
from fastapi.responses import Response

from labfy_ref import __version__
from labfy_ref.server.bridge_routes import router as bridge_router
from labfy_ref.server.errors import install_error_handlers
from labfy_ref.server.routes import router
from labfy_ref.server.security import SecurityMiddleware
from labfy_ref.server.state import ServerState

_UI_FILES = {"/": ("index.html", "text/html; charset=utf-8"),
             "/ui/app.js": ("app.js", "text/javascript; charset=utf-8"),
             "/ui/app.css": ("app.css", "text/css; charset=utf-8")}


def _ui_route(name: str, media_type: str) -> Callable[[], Awaitable[Response]]:
    body = resources.files("labfy_ref.ui").joinpath(name).read_bytes()

    async def serve() -> Response:
        return Response(body, media_type=media_type)

    return serve


def create_app(state: ServerState,
               on_started: Callable[[], None] | None = None) -> FastAPI:
    """Build the app around ``state``; the lifespan starts and closes the runtime."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await state.start()
        if on_started is not None:
            on_started()
        try:
            yield
        finally:
            await state.close()

    app = FastAPI(title="labfy-ref workspace server", version=__version__, lifespan=lifespan,
                  openapi_url="/api/openapi.json", docs_url=None, redoc_url=None)
    app.state.server = state
    install_error_handlers(app)
    app.include_router(router)
    app.include_router(bridge_router)
    for path, (name, media_type) in _UI_FILES.items():
        app.add_api_route(path, _ui_route(name, media_type), methods=["GET"],
                          include_in_schema=False)
    app.add_middleware(SecurityMiddleware, port=state.port, auth=state.auth)
    return app
