"""plan against real vLLM startup records (dsa_kvcalc/records.py): KV tokens and KV memory as vLLM printed them.

Given the KV memory a log prints, do plan's KV-cache groups give the tokens it printed? No constant is fitted to any of
these records here: the groups come from the model's config and vLLM's rules in engine.py. From the serving arguments
alone, with the activation peak and non-torch memory fitted without the record, see tests/test_leave_one_out.py
(benchmarks/leave_one_out.py prints the table); weights against the logs' "Model loading took", tests/test_weights.py.
Printed GiB are rounded to 0.01: a record is matched when plan's tokens fall within what [GiB - 0.005, GiB + 0.005]
gives, or within the tolerance.
"""

import pytest

from dsa_kvcalc import capacity, planning
from dsa_kvcalc.recipe import load
from dsa_kvcalc.records import RECORDS, Record, record
from dsa_kvcalc.units import GIB

V4_TOLERANCE = 0.01  # the bound for the DeepSeek-V4 family
MLA_TOLERANCE = 0.001  # V3.2 and GLM-5.x


def plan_of(record: Record) -> capacity.Plan:
    return planning.plan(load(record.recipe))


def tokens_at(plan: capacity.Plan, gib: float) -> int:
    return plan.memory.kv.tokens(round(gib * GIB))


def tolerance(record: Record) -> float:
    return V4_TOLERANCE if "V4" in record.name else MLA_TOLERANCE


def tokens_from_logged_memory(record: Record) -> tuple[int, int, int]:
    plan = plan_of(record)
    return (tokens_at(plan, record.available_gib), tokens_at(plan, record.available_gib - 0.005),
            tokens_at(plan, record.available_gib + 0.005))


@pytest.mark.parametrize("record", [r for r in RECORDS if r.available_gib is not None and r.tokens is not None],
                         ids=lambda r: r.name)
def test_logged_kv_memory_gives_the_logged_tokens(record):
    tokens, low, high = tokens_from_logged_memory(record)
    assert low <= record.tokens <= high or abs(tokens / record.tokens - 1) <= tolerance(record), (tokens, low, high)


def serving_prediction(record: Record) -> tuple[int, int]:
    """KV bytes and tokens from the serving arguments alone, as this vLLM version logs them."""
    plan = plan_of(record)
    selected = plan.backend(plan.recipe.topk_backend)
    return selected.kv_cache_bytes, selected.kv_cache_tokens


@pytest.mark.parametrize("version, tokens", [("0.30.0", 443_628), ("0.31.0", 443_628), ("0.32.0", 433_621),
                                             ("0.33.0", 433_621)])
def test_glm53_flash_record_exactly_under_030_and_031_rules_only(version, tokens):
    # 6 GiB // 14,611,968 B = 440 blocks over 114 + 1 + 3 x (2 + 3) = 130 pages: int(440 / 130 x 131,072) = 443,628,
    # the record's "GPU KV cache size" to the token; 0.32.0's rules (14,631,936 B, 133 pages) would not give it
    glm53 = next(r for r in RECORDS if r.name.startswith("GLM-5.3-Flash"))
    plan = planning.plan(load(glm53.recipe | {"vllm-version": version}))
    assert tokens_at(plan, glm53.available_gib) == tokens
    assert plan.backend(plan.recipe.topk_backend).kv_cache_tokens == tokens  # kv-cache-memory-bytes pins the 6 GiB


def test_glm51_moves_by_the_default_utilisation_between_019_and_020():
    # Same weights, KV memory 32.06 -> 34.86 GiB: 0.02 x 139.80 GiB = 2.80 GiB (vLLM PR #38284, 0.90 -> 0.92).
    old, new = (record(f"GLM-5.1-FP8 8xH200 TP8 bf16 KV, vLLM {version}") for version in ("0.19.1rc1", "0.20.0"))
    moved = serving_prediction(new)[0] - serving_prediction(old)[0]
    assert abs(moved / GIB - (34.86 - 32.06)) <= 0.01


def test_gh200_refusal_needs_the_logged_bytes_per_request():
    # vllm-project/vllm#44376 (the error message): "To serve at least one request with the model's max seq len (30000),
    # (6.66 GiB KV cache is needed ...". LLM() defaults to 16384 batched tokens on a >= 70 GiB GPU (vLLM 0.22).
    plan = planning.plan(load(dict(model="deepseek-ai/DeepSeek-V4-Flash", gpu="GH200", **{
        "tensor-parallel-size": 2, "enable-expert-parallel": True, "kv-cache-dtype": "fp8", "max-model-len": 30000,
        "max-num-batched-tokens": 16384, "vllm-version": "0.22.0"})))
    assert round(plan.memory.kv.request_bytes / GIB, 2) == 6.66
