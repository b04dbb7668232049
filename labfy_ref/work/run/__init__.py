"""Work's runner (SPEC §13): a worker claims a stored run and drives it through the one
agent loop (``runtime/driver.py``) behind Work's port.

``worker.py`` is the claim/heartbeat/release loop of ``labfy-ref work worker``,
``driver.py`` the port that replays and records a run, ``effects.py`` the ledger that
makes each write happen once across crashes, ``crash.py`` the test-only crash points and
``composition.py`` the host composition a run's gateway is built from.
"""
