"""The workspace server (SPEC §9, §14): the FastAPI app, its security checklist and routes.

``serve.py`` turns a resolved :class:`~labfy_ref.config.ServeConfig` into a running
server; ``app.py`` composes the app; ``security.py`` and ``auth.py`` are the checklist
every request passes (Host, Origin/CSRF, sessions, bearers); the ``*_routes.py`` modules
are the runtime API, the bridge, the OpenAI face and Work. Routes know only the engine
contract and the gateway's services, never a store's files.
"""
