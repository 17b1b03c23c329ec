"""The draft-tree acceptance model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specband.contract.actions import ACTIONS
from specband.core.errors import ConfigError
from specband.sim.draft_tree import AcceptParams, accept_length, tree_node_values

#: Published accept lengths (docs/FACTS.md §6/§7; means of the published rows).
PUBLISHED = {
    (1, 1, 2): 1.593,
    (3, 1, 4): 2.039,
    (3, 2, 4): 2.143,
    (3, 4, 8): 2.400,
    (5, 4, 8): 2.475,
    (5, 4, 16): 2.699,
    (1, 4, 2): 1.591,
    (5, 2, 8): 2.412,
}


@settings(max_examples=60, deadline=None)
@given(
    action=st.sampled_from(ACTIONS),
    a1=st.floats(0.01, 0.99),
    decay=st.floats(0.1, 1.5),
    b=st.floats(0.0, 1.0),
    c=st.floats(0.0, 1.0),
    rho=st.floats(0.0, 1.5),
    h=st.floats(0.0, 1.0),
    chain=st.floats(0.0, 1.5),
)
def test_accept_length_within_bounds(action, a1, decay, b, c, rho, h, chain) -> None:
    value = accept_length(action, AcceptParams(a1, decay, b, c, rho, h, chain))
    assert 1.0 <= value <= action[0] + 1.0


def test_baseline_accepts_one_token() -> None:
    assert accept_length((0, 0, 0), AcceptParams()) == 1.0
    assert tree_node_values((0, 0, 0), AcceptParams()) == ()


def test_tree_size_and_budget_monotonicity() -> None:
    p = AcceptParams()
    assert len(tree_node_values((3, 4, 8), p)) == 4 + 2 * 16
    # more verified draft tokens never lowers the accept length
    assert accept_length((5, 4, 4), p) <= accept_length((5, 4, 8), p) <= accept_length((5, 4, 16), p)
    # a budget of one draft token keeps only the best depth-1 node, whatever topk
    assert accept_length((1, 4, 2), p) == pytest.approx(accept_length((1, 1, 2), p))


def test_calibrated_profile_reproduces_published_accept_lengths(rtx_model) -> None:
    for action, measured in PUBLISHED.items():
        assert rtx_model.accept_length(action) == pytest.approx(measured, abs=0.03), action


def test_bad_params_raise() -> None:
    with pytest.raises(ConfigError, match="first_token_accept"):
        AcceptParams(first_token_accept=1.5)
    with pytest.raises(ConfigError, match="rank_decay"):
        AcceptParams(rank_decay=float("nan"))
