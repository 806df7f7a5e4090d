"""The scenario's records without pydantic: checked when made in code as pydantic checked
them, read from files and JSON through pydantic as before (issue 24, a lean agent)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpuscope.sim import NodeSpec, ProjectSpec, Scenario, WorkloadSpec, default_scenario


def test_values_are_taken_as_pydantic_took_them() -> None:
    """An int where a float is declared is a float; a list where a tuple is, a tuple."""
    w = WorkloadSpec(name="w", namespace="n", kind="batch", start=5, nodes=["a"], gpu_indices=[1])  # type: ignore[arg-type]
    assert (type(w.start), w.nodes, w.gpu_indices) == (float, ("a",), (1,))
    assert type(ProjectSpec(name="p", guaranteed_gpus=3).guaranteed_gpus) is float


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: NodeSpec(name="a", gpus=17), "NodeSpec.gpus: Input should be less than or equal to 16"),
        (lambda: NodeSpec(name="a", ib_rate_gbps=0), "NodeSpec.ib_rate_gbps: Input should be greater than 0"),
        (lambda: NodeSpec(name="a", gpu_model="V100"), "NodeSpec.gpu_model: Input should be 'H100' or 'A100'"),  # type: ignore[arg-type]
        (lambda: WorkloadSpec(name="w", namespace="n", kind="magic"), "WorkloadSpec.kind"),  # type: ignore[arg-type]
        (lambda: WorkloadSpec(name="w", namespace="n", kind="batch", gpus=2, gpu_fraction=0.5), "a fractional workload asks for gpus: 1"),
        (lambda: WorkloadSpec(name="w", namespace="n", kind="batch", replicas=0), "greater than or equal to 1"),
        (lambda: Scenario(nodes=(NodeSpec(name="a"), NodeSpec(name="a"))), "node names must be unique"),
        (lambda: Scenario(nodes=(NodeSpec(name="a"),), workloads=(WorkloadSpec(name="w", namespace="n", kind="batch", nodes=("zz",)),)), "unknown node zz"),
    ],
)  # fmt: skip
def test_a_bad_record_made_in_code_is_refused(make: object, message: str) -> None:
    with pytest.raises(ValueError) as err:
        make()  # type: ignore[operator]
    assert message in str(err.value)


def test_model_copy_checks_again_and_validate_names_the_field() -> None:
    node = NodeSpec(name="a")
    assert node.model_copy(update={"gpus": 4}) == NodeSpec(name="a", gpus=4)
    with pytest.raises(ValueError, match="less than or equal to 16"):
        node.model_copy(update={"gpus": 40})
    with pytest.raises(ValidationError) as err:
        Scenario.model_validate({"nodes": [{"name": "a", "gpus": 99}]})
    assert err.value.errors()[0]["loc"] == ("nodes", 0, "gpus")
    with pytest.raises(ValidationError):
        Scenario.model_validate({"nodes": [{"name": "a", "colour": "blue"}]})


def test_json_round_trip_of_the_default_scenario() -> None:
    """What the demo sends its reading workers (model_dump(mode="json")) comes back equal."""
    scenario = default_scenario(steady=False, dra=True)
    assert Scenario.model_validate(scenario.model_dump(mode="json")) == scenario
