"""``tox -e eval``: ``labfy-ref eval`` on every model of the real-model matrix (EV-01)."""
