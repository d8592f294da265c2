"""The sandbox web's configuration, as ``POST /__admin__/web`` receives it from a test or a
person: a bad one is a clear error, a good one picks its slow and banning sites from the seed."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox.web import Web, WebConfig

SIZES = st.integers(-3, 40)


@given(
    st.fixed_dictionaries(
        {"sites": SIZES, "slow_sites": SIZES, "banning_sites": SIZES, "ban_after": SIZES}
    ),
    st.integers(0, 5),
)
def test_slow_and_banning_sites_are_distinct_seeded_and_never_site0(
    data: dict[str, Any], seed: int
) -> None:
    try:
        config = WebConfig.from_json({**data, "seed": seed})
    except ValueError:
        special = data["slow_sites"] + data["banning_sites"]
        assert min(data.values()) < 0 or data["sites"] < 1 or special >= data["sites"]
        return
    web = Web(config)
    assert len(web.slow) == config.slow_sites
    assert len(web.banning) == config.banning_sites
    assert not web.slow & web.banning
    assert 0 not in web.slow | web.banning
    assert max(web.slow | web.banning, default=0) < config.sites
    again = Web(config)
    assert (again.slow, again.banning, again.cross) == (web.slow, web.banning, web.cross)


def test_slow_and_banning_sites_leave_the_rest_of_the_web_as_it_was() -> None:
    """Same seed, same links and truth for the others; a banning site that has served nothing
    yet has no page a crawl must store."""
    plain = Web(WebConfig(sites=20, seed=3))
    special = Web(WebConfig(sites=20, seed=3, slow_sites=2, banning_sites=1))
    assert plain.cross == special.cross
    (banning,) = special.names(special.banning)
    assert special.truth() == {**plain.truth(), banning: []}


@pytest.mark.parametrize("field", ["slow_ms", "ban_after"])
def test_a_negative_time_or_count_is_refused(field: str) -> None:
    with pytest.raises(ValueError, match=">= 0"):
        WebConfig.from_json({field: -1})
