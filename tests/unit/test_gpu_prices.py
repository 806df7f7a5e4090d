"""The default price per GPU-hour by model (gpuscope/core/gpu_prices.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscope.core.gpu_prices import DEFAULT_GPU_HOUR_PRICES, estimated_price, model_price


def test_a_model_is_priced_by_the_longest_fragment_its_name_contains() -> None:
    assert model_price("NVIDIA-H100-80GB-HBM3", DEFAULT_GPU_HOUR_PRICES) == 4.0
    assert model_price("NVIDIA GH200 480GB", DEFAULT_GPU_HOUR_PRICES) == 5.0  # not H200's
    assert model_price("NVIDIA-L40S", DEFAULT_GPU_HOUR_PRICES) == 1.5  # not L40's or L4's
    assert model_price("Tesla-T4", DEFAULT_GPU_HOUR_PRICES) == 0.5
    assert model_price("Quadro-RTX-8000", DEFAULT_GPU_HOUR_PRICES) is None


def test_a_mixed_cluster_averages_over_its_gpus_and_the_site_overrides() -> None:
    mix = {"NVIDIA-H100-80GB-HBM3": 24, "NVIDIA-A100-SXM4-80GB": 8, "": 4}
    assert estimated_price(mix) == pytest.approx((24 * 4.0 + 8 * 2.5) / 32)
    assert estimated_price(mix, {"H100": 3.0}) == pytest.approx((24 * 3.0 + 8 * 2.5) / 32)
    assert estimated_price({"unknown": 8}) is None
    assert estimated_price({}) is None


@given(st.dictionaries(st.sampled_from(sorted(DEFAULT_GPU_HOUR_PRICES)),
                       st.integers(min_value=1, max_value=64), min_size=1))  # fmt: skip
def test_the_estimate_lies_between_the_cheapest_and_dearest_model(mix: dict[str, int]) -> None:
    prices = [model_price(m, DEFAULT_GPU_HOUR_PRICES) for m in mix]
    got = estimated_price(mix)
    assert got is not None
    assert min(p for p in prices if p) - 1e-9 <= got <= max(p for p in prices if p) + 1e-9
