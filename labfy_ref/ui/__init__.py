"""Static assets of the web UI (served by the workspace server)."""
