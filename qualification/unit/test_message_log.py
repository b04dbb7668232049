"""The conversation sent to a model, encoded once (RT-03, PR-05): same bytes, same budget.

``MessageLog`` keeps each message's JSON and running sizes so a long session
costs no re-encoding and no walk per turn; these properties hold it to the
plain computation it replaces.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labfy_ref.protocol import EncodedMessage, MessageLog, encode_json, message_bytes

messages = st.lists(st.builds(
    lambda role, content, encoded: (EncodedMessage if encoded else dict)(
        {"role": role, "content": content}),
    st.sampled_from(["user", "assistant", "system"]), st.text(max_size=30), st.booleans()),
    max_size=25)


def _plain_tail(history: list[dict[str, Any]], max_bytes: int) -> list[dict[str, Any]]:
    kept: list[dict[str, Any]] = []
    total = 0
    for message in reversed(history):
        total += message_bytes(message)
        if total > max_bytes:
            break
        kept.append(message)
    kept.reverse()
    while kept and kept[0].get("role") != "user":
        kept.pop(0)
    return kept


@pytest.mark.req("RT-03", "PR-05", "AV-05")
@given(first=messages, second=messages, budget=st.integers(0, 400))
def test_a_log_is_the_plain_list_it_stands_for(first: list[dict[str, Any]],
                                              second: list[dict[str, Any]], budget: int) -> None:
    log = MessageLog(first)
    grown = log.copy()
    grown.add(MessageLog(second))
    whole = first + second
    assert grown == whole and log == first, "a copy grows on its own"
    assert json.loads(grown.json()) == whole
    assert grown.json() == encode_json(whole)
    assert grown.size == sum(message_bytes(m) for m in whole)
    tail = grown.tail(budget)
    assert tail == _plain_tail(whole, budget)
    assert tail.size == sum(message_bytes(m) for m in tail) <= budget
