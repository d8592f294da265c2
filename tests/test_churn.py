"""The churn sandbox's configuration: anything posted is used or refused with a clear 400, and
a configuration it takes serves its profiles."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox.churn import FIELDS, MAX_DOCUMENTS, Churn, ChurnError

VALUES = st.one_of(st.integers(-10, 2 * MAX_DOCUMENTS), st.floats(), st.booleans(), st.text())


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("name", sorted(FIELDS))
def test_nan_and_infinity_are_refused(name: str, value: float) -> None:
    with pytest.raises(ChurnError, match=name):
        Churn().configure({name: value})


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(FIELDS)), VALUES))
def test_any_configuration_is_used_or_refused(payload: dict[str, Any]) -> None:
    churn = Churn()
    try:
        churn.configure(payload)
    except ChurnError:
        return
    for unique_id in list(churn.documents)[:3]:
        assert churn.author(unique_id) is not None
