"""The 19-action contract: order, validity rules, canonicalisation, sglang arguments."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specband.contract.actions import (
    ACTIONS,
    BASELINE_INDEX,
    GRID_DRAFT_TOKENS,
    GRID_STEPS,
    GRID_TOPK,
    NUM_ACTIONS,
    REFERENCE_ACTION,
    REFERENCE_INDEX,
    Action,
    action_index,
    canonicalize,
    check_baseline_or_nonzero,
    check_draft_budget,
    enumerate_actions,
    parse_action,
    server_args_kwargs,
    sglang_cli_args,
    validate_action,
)
from specband.core.errors import InvalidActionError, SpecbandError

# docs/FACTS.md §1, verbatim: index i in every published file means this tuple.
PUBLISHED_ORDER = [
    (0, 0, 0),
    (1, 1, 2),
    (1, 2, 2),
    (1, 4, 2),
    (1, 4, 4),
    (3, 1, 4),
    (3, 2, 2),
    (3, 2, 4),
    (3, 4, 2),
    (3, 4, 4),
    (3, 4, 8),
    (5, 1, 6),
    (5, 2, 2),
    (5, 2, 4),
    (5, 2, 8),
    (5, 4, 2),
    (5, 4, 4),
    (5, 4, 8),
    (5, 4, 16),
]

RAW_GRID = list(itertools.product(GRID_STEPS, GRID_TOPK, GRID_DRAFT_TOKENS))


def test_contract_order_is_the_published_one() -> None:
    assert [tuple(a) for a in ACTIONS] == PUBLISHED_ORDER
    assert NUM_ACTIONS == 19
    assert ACTIONS[REFERENCE_INDEX] == REFERENCE_ACTION == (3, 4, 8)
    assert REFERENCE_INDEX == 10
    assert ACTIONS[BASELINE_INDEX] == (0, 0, 0)
    assert enumerate_actions() == ACTIONS


def test_grid_yields_nineteen_from_eighty_raw_triples() -> None:
    valid = []
    for triple in RAW_GRID:
        try:
            valid.append(validate_action(triple))
        except InvalidActionError:
            pass
    assert len(RAW_GRID) == 80
    # (3,1,2) and (3,1,4) both canonicalise to (3,1,4); (5,1,2),(5,1,4) to (5,1,6)
    assert len(valid) == 21
    assert len(set(valid)) == 19


@given(st.sampled_from(RAW_GRID))
def test_every_raw_grid_triple_is_valid_contract_action_or_named_rule(triple: tuple[int, int, int]) -> None:
    steps, topk, draft = triple
    zeros = (steps == 0) + (topk == 0) + (draft == 0)
    try:
        idx = action_index(triple)
    except InvalidActionError as exc:
        message = str(exc)
        if 0 < zeros < 3:
            assert "rule 3" in message
        else:
            assert steps * topk + 1 < draft
            assert "rule 1" in message
        return
    action = ACTIONS[idx]
    assert zeros in (0, 3)
    assert steps * topk + 1 >= draft
    assert action.speculative_num_steps == steps and action.speculative_eagle_topk == topk
    if topk == 1:
        assert action.speculative_num_draft_tokens == steps + 1
    else:
        assert action.speculative_num_draft_tokens == draft


@given(st.sampled_from(ACTIONS))
def test_contract_actions_are_fixed_points(action: Action) -> None:
    assert canonicalize(action) == action
    assert validate_action(action) == action
    assert ACTIONS[action_index(action)] == action
    assert parse_action(",".join(map(str, action))) == action
    assert parse_action(str(action_index(action))) == action


@given(
    st.integers(min_value=0, max_value=8),
    st.integers(min_value=0, max_value=8),
    st.integers(min_value=0, max_value=40),
)
def test_any_triple_either_validates_or_names_its_rule(steps: int, topk: int, draft: int) -> None:
    try:
        action = validate_action((steps, topk, draft))
    except InvalidActionError as exc:
        assert "rule 1" in str(exc) or "rule 3" in str(exc)
        return
    assert action.speculative_num_steps * action.speculative_eagle_topk + 1 >= action.speculative_num_draft_tokens


def test_rule_functions_raise_with_rule_names() -> None:
    with pytest.raises(InvalidActionError, match="rule 3"):
        check_baseline_or_nonzero((0, 4, 8))
    with pytest.raises(InvalidActionError, match="rule 3"):
        check_baseline_or_nonzero((3, 0, 0))
    check_baseline_or_nonzero((0, 0, 0))
    with pytest.raises(InvalidActionError, match="rule 1"):
        check_draft_budget((3, 4, 16))  # the sglang docs' example breaks rule 1
    check_draft_budget((3, 4, 13))
    assert canonicalize((3, 1, 2)) == (3, 1, 4)
    assert canonicalize((5, 1, 4)) == (5, 1, 6)
    assert canonicalize((3, 2, 2)) == (3, 2, 2)


@pytest.mark.parametrize(
    ("triple", "message"),
    [
        ((2, 2, 2), "not one of the 19"),
        ((3, 4, 16), "rule 1"),
        ((0, 1, 1), "rule 3"),
        ((-1, 1, 1), ">= 0"),
        ((1.5, 1, 2), "integer"),
        ((True, 1, 2), "integer"),
        ((1, 2), "triple"),
    ],
)
def test_action_index_rejects(triple: object, message: str) -> None:
    with pytest.raises(InvalidActionError, match=message):
        action_index(triple)  # type: ignore[arg-type]


def test_invalid_action_is_a_specband_error() -> None:
    with pytest.raises(SpecbandError):
        action_index((9, 9, 9))


@pytest.mark.parametrize("text", ["", "a,b,c", "1,2", "19", "-1", "2,2,2"])
def test_parse_action_rejects(text: str) -> None:
    with pytest.raises(InvalidActionError):
        parse_action(text)


def test_sglang_cli_args() -> None:
    assert sglang_cli_args((0, 0, 0)) == []
    assert sglang_cli_args((0, 0, 0), "/d") == []
    assert sglang_cli_args((3, 2, 4), "/models/draft") == [
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "/models/draft",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "2",
        "--speculative-num-draft-tokens",
        "4",
    ]
    # topk=1 is canonicalised as sglang does
    assert sglang_cli_args((3, 1, 2))[-1] == "4"
    with pytest.raises(InvalidActionError, match="rule 1"):
        sglang_cli_args((1, 1, 8))


def test_server_args_kwargs() -> None:
    assert server_args_kwargs((0, 0, 0)) == {}
    assert server_args_kwargs((3, 4, 8), "d") == {
        "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": "d",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 4,
        "speculative_num_draft_tokens": 8,
    }


def test_cli_actions_lists_all(run_cli) -> None:  # type: ignore[no-untyped-def]
    import json

    result = run_cli("actions", "--json")
    assert result.exit_code == 0
    listed = json.loads(result.stdout)
    assert [tuple(entry["action"]) for entry in listed] == PUBLISHED_ORDER
    assert listed[10]["flags"][-1] == "8"
    table = run_cli("actions")
    assert table.exit_code == 0
    assert "(3,4,8) (reference)" in table.stdout


# ----------------------------------------------------------------------------- extended set (issue 19 item 5)
def test_extended_set_is_sglangs_full_grid_with_the_contract_first() -> None:
    from specband.contract.actions import EXTENDED_ACTIONS, action_set

    assert action_set("contract").actions == ACTIONS and len(ACTIONS) == 19
    assert action_set("extended").actions == EXTENDED_ACTIONS
    assert EXTENDED_ACTIONS[:19] == ACTIONS and len(EXTENDED_ACTIONS) == 44
    assert len(set(EXTENDED_ACTIONS)) == 44
    for action in EXTENDED_ACTIONS:
        assert validate_action(action) == action  # the same sglang rules, canonical already
    extra = set(EXTENDED_ACTIONS[19:])
    assert (7, 1, 8) in extra and (5, 8, 32) in extra and (7, 8, 32) in extra
    assert max(a[0] for a in extra) == 7 and max(a[2] for a in extra) == 32
    with pytest.raises(InvalidActionError, match="--actions must be one of contract, extended"):
        action_set("all")
