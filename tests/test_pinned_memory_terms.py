"""memory_terms.py's rules that no other test pins (found by tools/mutate.py)."""

from dsa_kvcalc.deployment import resolve
from dsa_kvcalc import memory_terms, report
from dsa_kvcalc.recipe import load

V32_H200 = {"model": "DeepSeek-V3.2", "gpu": "H200", "tensor-parallel-size": 8}


def test_a_term_estimated_or_measured_at_this_shape_carries_nothing():
    # carried_bytes is what plan's estimate of a shape change adds to a figure measured at another shape: an estimate,
    # or a figure measured at this very shape, carries 0 B, and the plan's JSON says so
    estimated = memory_terms.rank_memory(resolve(load(V32_H200)))
    measured = memory_terms.rank_memory(resolve(load(V32_H200 | {"memory": {"weights_gib": 80}})))
    assert (measured.weights.provenance, measured.weights.bytes) == ("measured", 80 * 2**30)
    for term in (estimated.weights, estimated.base_peak, estimated.non_torch, measured.weights):
        assert report.provenance(term)["carried_bytes"] == 0
