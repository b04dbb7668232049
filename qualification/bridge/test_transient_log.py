"""BR-13: a transient session's log is held in memory, bounded as a stored log, then deleted.

Its records are encoded by the session store's own ``encode``; a log takes records up to
its byte bound exactly and refuses, whole, the one that would cross it (``SESSION_FULL``);
once deleted it holds no record and no byte, and takes nothing more.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from labfy_ref.bridge.store.logs import JsonlSessionStore
from labfy_ref.bridge.store.transient import TransientLog, new_transient_id
from labfy_ref.errors import SessionFull

RECORDS: list[dict[str, Any]] = [{"kind": "context", "text": "be brief"},
                                 {"kind": "message", "role": "user", "text": "hé 😀"},
                                 {"kind": "message", "role": "assistant", "text": "ok"}]


@pytest.fixture
def store(tmp_path: Path) -> JsonlSessionStore:
    return JsonlSessionStore(tmp_path, max_record_bytes=1000, max_log_bytes=64 * 1024)


def sizes(store: JsonlSessionStore) -> list[int]:
    """The bytes each of :data:`RECORDS` takes in a transient log (timestamps are one width)."""
    probe = TransientLog(store.encode, new_transient_id(), 64 * 1024)
    return [len(probe.stage(record)) for record in RECORDS]


@pytest.mark.req("BR-13")
def test_a_transient_log_fills_to_its_bound_exactly_and_refuses_the_record_that_would_cross(
        store: JsonlSessionStore) -> None:
    exact = sum(sizes(store))
    full = TransientLog(store.encode, new_transient_id(), exact)
    for record in RECORDS:
        full.stage(record)
    assert (len(full), full.size) == (3, exact), "the bound itself is taken"
    with pytest.raises(SessionFull) as caught:
        full.stage({"kind": "message", "role": "user", "text": "one more"})
    assert (caught.value.code.value, caught.value.status) == ("SESSION_FULL", 409)
    assert f"is full ({exact} of {exact} bytes)" in caught.value.message
    assert (len(full), full.size) == (3, exact), "refused whole"

    short = TransientLog(store.encode, new_transient_id(), exact - 1)
    short.stage(RECORDS[0])
    short.stage(RECORDS[1])
    with pytest.raises(SessionFull):
        short.stage(RECORDS[2])  # one byte over
    assert (len(short), short.size) == (2, exact - sizes(store)[2])


@pytest.mark.req("BR-13")
def test_a_deleted_transient_log_holds_no_record_and_no_byte_and_takes_nothing_more(
        store: JsonlSessionStore) -> None:
    log = TransientLog(store.encode, new_transient_id(), 64 * 1024)
    for record in RECORDS:
        log.stage(record)
    assert log.size == sum(sizes(store))
    log.delete()
    assert (len(log), log.size, log.deleted) == (0, 0, True)
    with pytest.raises(SessionFull, match="has ended"):
        log.stage(RECORDS[0])
    log.delete()  # idempotent
    assert (len(log), log.size) == (0, 0)
