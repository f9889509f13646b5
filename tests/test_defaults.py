"""vLLM's defaults that depend on the GPU (dsa_kvcalc/defaults.py), checked against the release's own code."""

import dataclasses

from dsa_kvcalc import engine
from dsa_kvcalc.catalog import GPUS
from dsa_kvcalc.defaults import batch_tier
from dsa_kvcalc.units import GIB


def test_a_gpu_of_exactly_70_or_160_gib_takes_the_larger_tier():
    # vllm==0.33.0 vllm/engine/arg_utils.py:2973-2996, the OpenAI server: device_memory >= 160 * GiB_bytes: 1024
    # sequences, 16384 tokens; >= 70 * GiB_bytes (not an A100, not GB10): 1024, 8192; else (:2997-3006) 256, 2048.
    # The boundaries are inclusive; no catalog GPU sits on one, so a GPU of exactly that memory is made here.
    h100 = next(gpu for gpu in GPUS if gpu.name == "H100")
    values = {"engine": engine.vllm("0.33.0"), "enable_expert_parallel": False, "data_parallel_size": 1,
              "all2all_backend": "allgather_reducescatter", "performance_mode": "balanced"}
    tier = {gib: batch_tier(values | {"gpu": dataclasses.replace(h100, total_memory_bytes=gib * GIB)})
            for gib in (160, 70)}
    below = batch_tier(values | {"gpu": dataclasses.replace(h100, total_memory_bytes=70 * GIB - 1)})
    assert tier == {160: (1024, 16384), 70: (1024, 8192)} and below == (256, 2048)
