"""Work's SQL store (SPEC §13): one SQLAlchemy Core code path for SQLite and PostgreSQL.

``tasks.py`` holds :class:`~labfy_ref.work.store.tasks.WorkStore` (tasks, runs, claims and
leases), ``records.py`` what a run records (messages, approvals, events, replies,
effects), ``schema.py`` and ``migrations.py`` the tables and their versions,
``engine.py`` the connection, ``url.py`` the one rule that picks the database and
``pages.py`` the listing page. Nothing here drives a turn: that is ``work/run/``.
The public names are re-exported by :mod:`labfy_ref.work`.
"""
