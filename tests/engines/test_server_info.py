"""``/get_server_info`` parsing: every shape sglang versions produce."""

from __future__ import annotations

import numpy as np
import pytest

from specband.engines.client import p20, parse_server_info


def test_step_times_inside_internal_states_with_str_keys():
    info = parse_server_info(
        {"internal_states": [{"avg_spec_accept_length": 2.4, "step_time_dict": {"4": [0.02, 0.01], "1": [0.03]}}]}
    )
    assert info.accept_length == 2.4
    assert info.step_times == {4: [0.02, 0.01], 1: [0.03]}


def test_step_times_at_top_level_with_int_keys():
    info = parse_server_info({"internal_states": [{"avg_spec_accept_length": 1.9}], "step_time_dict": {16: [0.05]}})
    assert info.step_times == {16: [0.05]}
    assert info.accept_length == 1.9


@pytest.mark.parametrize("states", [None, [], {}, [None], "junk"])
def test_missing_or_empty_internal_states(states):
    info = parse_server_info({"internal_states": states})
    assert info.accept_length is None
    assert info.step_times == {}


def test_missing_internal_states_key():
    assert parse_server_info({"version": "0.5"}).accept_length is None


@pytest.mark.parametrize("value", [None, "2.4", float("nan"), 0.0, 0.7, True])
def test_a_missing_or_bad_accept_length_stays_null_not_one(value):
    assert parse_server_info({"internal_states": [{"avg_spec_accept_length": value}]}).accept_length is None


def test_pd_disaggregation_reads_the_decode_server():
    info = parse_server_info(
        {
            "prefill": [{}],
            "decode": [{"internal_states": [{"avg_spec_accept_length": 3.1, "step_time_dict": {"8": [0.1]}}]}],
        }
    )
    assert info.accept_length == 3.1 and info.step_times == {8: [0.1]}


def test_junk_step_time_entries_are_dropped():
    info = parse_server_info(
        {"internal_states": [{"step_time_dict": {"x": [1.0], "2": [0.1, None, "a", -1.0, float("inf"), 0.2], "3": 5}}]}
    )
    assert info.step_times == {2: [0.1, 0.2]}


def test_not_a_dict():
    assert parse_server_info(["no"]).step_times == {}


def test_p20_is_numpys_20th_percentile_like_sglangs_bench():
    values = [0.030, 0.010, 0.020, 0.050, 0.040]
    assert p20(values) == pytest.approx(float(np.percentile(values, 20)))
    assert p20(values) == pytest.approx(0.018)
    with pytest.raises(ValueError):
        p20([])
