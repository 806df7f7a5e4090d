"""A default price per GPU-hour for each GPU model: the report's cost when a site has set
none (``report.price_per_gpu_hour``).

The figures are an estimate, in US dollars, of what an hour of one GPU of the model costs
on demand from a large cloud, rounded; they are here so that a report can show money on
first install, and the report says it is an estimate and how to set the site's own price
(``report.price_per_gpu_hour``, or per model ``report.gpu_hour_prices``). A cluster with
several models is priced at the average over its GPUs, each at its model's price.
"""

from __future__ import annotations

from collections.abc import Mapping

#: Model name fragment (as in ``nvidia.com/gpu.product``: ``NVIDIA-H100-80GB-HBM3``) ->
#: estimated USD per GPU-hour. Longer fragments first where one contains another.
DEFAULT_GPU_HOUR_PRICES: dict[str, float] = {
    "GH200": 5.0,
    "H200": 5.0,
    "H100": 4.0,
    "B200": 6.0,
    "A100": 2.5,
    "L40S": 1.5,
    "L40": 1.3,
    "A10G": 1.0,
    "A10": 1.0,
    "L4": 0.8,
    "V100": 1.5,
    "T4": 0.5,
}


def model_price(model: str, prices: Mapping[str, float]) -> float | None:
    """The price of ``model``: the longest fragment of ``prices`` its name contains
    (case-insensitive), or None."""
    name = model.upper()
    found = [(len(k), v) for k, v in prices.items() if k.upper() in name]
    return max(found)[1] if found else None


def estimated_price(
    gpus_by_model: Mapping[str, float], overrides: Mapping[str, float] | None = None
) -> float | None:
    """The average price per GPU-hour over a cluster's GPUs (model -> GPU count), each at
    its model's price (``overrides`` first, then the defaults); None when no GPU's model
    has a price (the report then shows no money)."""
    prices = {**DEFAULT_GPU_HOUR_PRICES, **(overrides or {})}
    total = weight = 0.0
    for model, count in gpus_by_model.items():
        price = model_price(model, prices)
        if price is not None and count > 0:
            total += price * count
            weight += count
    return total / weight if weight else None
