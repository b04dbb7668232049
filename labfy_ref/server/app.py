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
from importlib.resources.abc import Traversable
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import Response

from labfy_ref import __version__
from labfy_ref.server.bridge_routes import router as bridge_router
from labfy_ref.server.errors import install_error_handlers
from labfy_ref.server.openai_routes import router as openai_router
from labfy_ref.server.refusals import RefusalMiddleware
from labfy_ref.server.routes import router
from labfy_ref.server.security import SecurityMiddleware
from labfy_ref.server.state import ServerState
from labfy_ref.server.work_routes import router as work_router

_MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
_PAGES = {"/": "index.html", "/cordis": "cordis.html"}


def _ui_files() -> dict[str, str]:
    """URL path → file under ``labfy_ref.ui``: the two pages and every static asset, read once.

    The routes are fixed at start from what the package holds (vendored libraries under
    ``vendor/`` included), so no request path ever reaches the file system.
    """
    root = resources.files("labfy_ref.ui")
    files = {path: name for path, name in _PAGES.items() if root.joinpath(name).is_file()}

    def walk(folder: Traversable, prefix: str) -> None:
        for entry in folder.iterdir():
            if entry.is_dir():
                walk(entry, f"{prefix}{entry.name}/")
            elif Path(entry.name).suffix in _MEDIA_TYPES and not entry.name.endswith(".html"):
                files[f"/ui/{prefix}{entry.name}"] = f"{prefix}{entry.name}"

    walk(root, "")
    return files


def _ui_route(name: str) -> Callable[[], Awaitable[Response]]:
    body = resources.files("labfy_ref.ui").joinpath(name).read_bytes()
    media_type = _MEDIA_TYPES[Path(name).suffix]

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
    app.include_router(openai_router)
    app.include_router(work_router)
    for path, name in _ui_files().items():
        app.add_api_route(path, _ui_route(name), methods=["GET"],
                          include_in_schema=False)
    app.add_middleware(SecurityMiddleware, port=state.port, auth=state.auth)
    # added last, so outermost: it sees every answer, the checklist's refusals too
    app.add_middleware(RefusalMiddleware, port=state.port, cookie=state.auth.cookie,
                       refusals=state.refusals)
    return app
