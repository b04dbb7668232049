"""WK-08: a Work field is stored exactly or refused with a code, the same on both engines.

Hypothesis draws text from every category, lone surrogates and NUL included, raw
bytes and values of the wrong type; each value is either read back equal or refused
with the code its defect predicts, never a driver error.
"""

from __future__ import annotations

import datetime
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labfy_ref.clock import iso
from labfy_ref.errors import ErrorCode, LabfyError
from labfy_ref.work import State, WorkStore
from labfy_ref.work.store.fields import MAX_JSON_BYTES, MAX_TEXT_CHARS
from qualification.work.conftest import Clock

SETTINGS = settings(deadline=None, max_examples=60,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
ANY_TEXT = st.text(st.characters(codec=None, categories=None), max_size=80)
HOSTILE_TEXT = st.one_of(
    ANY_TEXT,
    st.text(st.characters(codec=None, categories=["Cs", "Cc"]), min_size=1, max_size=8),
    st.builds(lambda a, b: f"{a}\x00{b}", ANY_TEXT, ANY_TEXT),
    st.builds(lambda a, b: f"{a}\ud800{b}", ANY_TEXT, ANY_TEXT),
)
#: Largest step, call or cursor: PostgreSQL's ``integer`` (written out here, not imported,
#: so the bound under test is the column's, whatever the store declares).
LARGEST_COUNT = 2**31 - 1
#: Longest lease a worker may take: one day.
LONGEST_LEASE = 24 * 3600
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | HOSTILE_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(HOSTILE_TEXT, inner,
                                                                max_size=4),
    max_leaves=12)


def text_defect(value: str) -> ErrorCode | None:
    """The code a text field's value must be refused with, or None if it must be stored."""
    if not value or "\x00" in value or any(0xD800 <= ord(ch) <= 0xDFFF for ch in value):
        return ErrorCode.VALIDATION_FAILED
    return None


def json_defect(value: Any) -> ErrorCode | None:
    """The code a JSON field's value must be refused with, or None if it must be stored."""
    if isinstance(value, float) and not math.isfinite(value):
        return ErrorCode.VALIDATION_FAILED
    if isinstance(value, str):
        return ErrorCode.VALIDATION_FAILED if any(
            0xD800 <= ord(ch) <= 0xDFFF for ch in value) else None
    items = list(value.items()) if isinstance(value, dict) else \
        [(None, v) for v in value] if isinstance(value, list) else []
    for key, item in items:
        found = (json_defect(key) if key is not None else None) or json_defect(item)
        if found is not None:
            return found
    return None


def refused(call: Any) -> ErrorCode:
    """The code ``call`` is refused with."""
    with pytest.raises(LabfyError) as caught:
        call()
    return caught.value.code


@pytest.mark.req("WK-08", "WK-02")
@SETTINGS
@given(message=HOSTILE_TEXT)
def test_a_task_message_is_stored_exactly_or_refused(store: WorkStore, message: str) -> None:
    expected = text_defect(message)
    if expected is not None:
        assert refused(lambda: store.submit(message)) is expected
        return
    submitted = store.submit(message)
    assert store.get_task(submitted.task.id).message == message
    assert store.list_messages(submitted.run.id)[0].content == message
    assert store.show(submitted.task.id)["task"]["message"] == message


@pytest.mark.req("WK-08", "WK-02")
@SETTINGS
@given(value=JSON_VALUES)
def test_event_data_is_stored_exactly_or_refused(store: WorkStore, value: Any) -> None:
    task = store.list_tasks(limit=1) or [store.submit("events").task]
    expected = json_defect(value)
    if expected is not None:
        assert refused(lambda: store.append_event(task[0].id, "data", value)) is expected
        return
    event = store.append_event(task[0].id, "data", value)
    [stored] = store.list_events(task[0].id, after=event.seq - 1, limit=1)
    assert stored.data == value
    assert stored == event


@pytest.mark.req("WK-08", "WK-02")
@SETTINGS
@given(request=JSON_VALUES, response=JSON_VALUES, final_text=HOSTILE_TEXT)
def test_replies_effects_and_final_texts_are_stored_exactly_or_refused(
        store: WorkStore, request: Any, response: Any, final_text: str) -> None:
    store.submit("values")
    claim = store.claim("w", 600)
    assert claim is not None
    if json_defect(request) or json_defect(response):
        assert refused(lambda: store.record_reply(claim, 1, request, response)) is \
            ErrorCode.VALIDATION_FAILED
        assert store.get_reply(claim.run_id, 1) is None
    else:
        store.record_reply(claim, 1, request, response)
        reply = store.get_reply(claim.run_id, 1)
        assert reply is not None and (reply.request, reply.response) == (request, response)
    if json_defect(response):
        assert refused(lambda: store.begin_effect(claim, 1, 0, "files.write", response)) is \
            ErrorCode.VALIDATION_FAILED
    else:
        effect = store.begin_effect(claim, 1, 0, "files.write", response)
        done = store.complete_effect(claim, effect.id, response)
        assert (done.arguments, done.result) == (response, response)
    defect = text_defect(final_text) if final_text else None  # an empty final text is kept
    if defect is not None:
        assert refused(lambda: store.finish(claim, State.COMPLETED,
                                            final_text=final_text)) is defect
        store.finish(claim, State.COMPLETED)  # so the next example claims a run of its own
    else:
        assert store.finish(claim, State.COMPLETED, final_text=final_text).final_text == \
            final_text


@pytest.mark.req("WK-08")
@SETTINGS
@given(value=st.one_of(st.binary(max_size=40), st.integers(), st.none(),
                       st.lists(st.text(max_size=3), max_size=2)))
def test_a_value_that_is_not_text_is_refused_where_text_is_due(store: WorkStore,
                                                               value: Any) -> None:
    assert refused(lambda: store.submit(value)) is ErrorCode.VALIDATION_FAILED
    assert refused(lambda: store.claim(value, 30)) is ErrorCode.VALIDATION_FAILED
    assert store.list_tasks() == []


@pytest.mark.req("WK-08")
def test_text_and_json_at_their_bounds_are_stored_and_one_more_is_refused(
        store: WorkStore) -> None:
    longest = "é" * MAX_TEXT_CHARS
    submitted = store.submit(longest)
    assert store.get_task(submitted.task.id).message == longest
    assert refused(lambda: store.submit(longest + "x")) is ErrorCode.RECORD_TOO_LARGE
    claim = store.claim("w", 600)
    assert claim is not None
    biggest = "x" * (MAX_JSON_BYTES - 2)  # two quotes make it exactly the bound
    store.record_reply(claim, 1, {}, biggest)
    reply = store.get_reply(claim.run_id, 1)
    assert reply is not None and reply.response == biggest
    assert refused(lambda: store.record_reply(claim, 2, {}, biggest + "x")) is \
        ErrorCode.RECORD_TOO_LARGE
    wide = "é" * (MAX_JSON_BYTES // 2)  # within the character count, over the byte bound
    assert refused(lambda: store.record_reply(claim, 2, {}, wide)) is ErrorCode.RECORD_TOO_LARGE
    assert store.get_reply(claim.run_id, 2) is None


@pytest.mark.req("WK-08")
@pytest.mark.parametrize(("value", "message"), [
    (float("nan"), "response is not a JSON value (ValueError)"),
    ({"a": {1, 2}}, "response is not a JSON value (TypeError)"),
    ({"k\ud800": 1}, "response holds a lone surrogate"),
    (b"raw", "response is not a JSON value (TypeError)"),
])
def test_a_value_that_is_not_json_is_refused_naming_the_field(store: WorkStore, value: Any,
                                                              message: str) -> None:
    store.submit("x")
    claim = store.claim("w", 600)
    assert claim is not None
    with pytest.raises(LabfyError) as caught:
        store.record_reply(claim, 1, {}, value)
    assert (caught.value.code, caught.value.message) == (ErrorCode.VALIDATION_FAILED, message)


def refusal(call: Any) -> tuple[ErrorCode, str]:
    """The code and the message ``call`` is refused with."""
    with pytest.raises(LabfyError) as caught:
        call()
    return caught.value.code, caught.value.message


@pytest.mark.req("WK-08")
def test_step_call_and_cursor_numbers_up_to_the_largest_integer_are_kept_and_one_more_refused(
        store: WorkStore) -> None:
    task = store.submit("counts").task
    claim = store.claim("w", 600)
    assert claim is not None
    assert store.record_reply(claim, LARGEST_COUNT, {}, "r").step == LARGEST_COUNT
    reply = store.get_reply(claim.run_id, LARGEST_COUNT)
    assert reply is not None and (reply.step, reply.response) == (LARGEST_COUNT, "r")
    assert refusal(lambda: store.record_reply(claim, LARGEST_COUNT + 1, {}, "r")) == (
        ErrorCode.VALIDATION_FAILED, "step must be 1-2147483647")
    effect = store.begin_effect(claim, LARGEST_COUNT, LARGEST_COUNT, "files.write", {})
    assert (effect.step, effect.call) == (LARGEST_COUNT, LARGEST_COUNT)
    assert refusal(lambda: store.begin_effect(claim, 1, LARGEST_COUNT + 1, "files.write",
                                              {})) == (
        ErrorCode.VALIDATION_FAILED, "call must be 0-2147483647")
    assert store.list_events(task.id, after=LARGEST_COUNT) == []
    assert refusal(lambda: store.list_events(task.id, after=LARGEST_COUNT + 1)) == (
        ErrorCode.VALIDATION_FAILED, "after must be 0-2147483647")


@pytest.mark.req("WK-08")
def test_a_lease_of_a_day_is_taken_and_one_a_moment_longer_is_refused(
        store: WorkStore, clock: Clock) -> None:
    store.submit("lease")
    too_long = "lease_seconds must be more than 0 and at most 86400"
    assert refusal(lambda: store.claim("w", LONGEST_LEASE + 0.001)) == (
        ErrorCode.VALIDATION_FAILED, too_long)
    claim = store.claim("w", LONGEST_LEASE)
    assert claim is not None
    day = datetime.timedelta(days=1)
    assert claim.lease_expires_at == iso(clock.now + day)
    clock.advance(60)
    assert store.heartbeat(claim, LONGEST_LEASE).lease_expires_at == iso(clock.now + day)
    assert refusal(lambda: store.heartbeat(claim, LONGEST_LEASE + 0.001)) == (
        ErrorCode.VALIDATION_FAILED, too_long)
