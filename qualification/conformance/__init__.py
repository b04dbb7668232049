"""The suite as a conformance kit (QR-03): the HTTP contracts run against any target.

``pytest --target-url URL --target-token CODE`` (or ``tox -e conformance -- ...``)
runs every test marked ``conformance`` against the running target through
:mod:`qualification.target`; every other test needs a local build and is
skipped with that reason, so the target's report says NOT_RUN for its IDs.
``python -m qualification.conformance`` starts the kit's provider for a target
(``provider``) or runs the whole self-test against our own ``labfy-ref serve``
started as a separate process (``run``).
"""
