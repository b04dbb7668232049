"""Timestamps are written one way, so their texts sort as the moments do (BR-06, AV-06)."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labfy_ref.clock import iso, parse_iso, utcnow

MOMENTS = st.datetimes(min_value=datetime.datetime(2000, 1, 1),
                       max_value=datetime.datetime(2999, 12, 31),
                       timezones=st.just(datetime.UTC)).map(
    lambda m: m.replace(microsecond=m.microsecond // 1000 * 1000))


@pytest.mark.req("BR-06", "AV-06")
@given(MOMENTS, MOMENTS)
def test_texts_sort_as_their_moments_even_on_a_whole_second(
        first: datetime.datetime, second: datetime.datetime) -> None:
    assert (iso(first) < iso(second)) == (first < second)
    assert parse_iso(iso(first)) == first
    assert len(iso(first)) == len("2026-11-30T09:53:26.123Z")


@pytest.mark.req("BR-06")
def test_a_whole_second_keeps_its_fraction() -> None:
    whole = datetime.datetime(2026, 11, 30, 16, 8, 44, tzinfo=datetime.UTC)
    assert iso(whole) == "2026-11-30T16:08:44.000Z"
    assert iso(whole) < iso(whole.replace(microsecond=100_000))
    assert iso(utcnow()).endswith("Z")
