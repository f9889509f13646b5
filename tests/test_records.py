"""plan against real vLLM startup records: KV tokens and KV memory as vLLM printed them.

Two questions, kept apart:
- Given the KV memory a log prints, do plan's KV-cache groups give the tokens it printed? (No constant is fitted to
  any of these records: the groups come from the model's config and vLLM's rules in engine.py.)
- From the serving arguments and vllm-version alone, does plan give the KV memory and tokens? A record that a
  constant in estimates.py was fitted to reproduces that fit and is marked FITTED: it is no check.

Each record names its source; the logs are in tests/fixtures/vllm_logs (SOURCES.md) or shared/data's
dsa-startup-records.json (copied here as the figures in the table). Printed GiB are rounded to 0.01: a record is
matched when plan's tokens fall within what [GiB - 0.005, GiB + 0.005] gives, or within the tolerance.

    python tests/test_records.py   prints the error table over every record.
"""

from dataclasses import dataclass

import pytest

from dsa_kvcalc import capacity
from dsa_kvcalc.recipe import load
from dsa_kvcalc.units import GIB

V4_FLASH_NVL = dict(model="deepseek-ai/DeepSeek-V4-Flash", gpu="NVIDIA H200 NVL", **{
    "tensor-parallel-size": 2, "kv-cache-dtype": "fp8", "gpu-memory-utilization": 0.78, "enforce-eager": True,
    "vllm-version": "0.23.0"})
V4_FLASH_RTX = dict(model="deepseek-ai/DeepSeek-V4-Flash", gpu="RTX PRO 6000", **{
    "tensor-parallel-size": 2, "kv-cache-dtype": "fp8", "gpu-memory-utilization": 0.95, "max-model-len": 1048576,
    "max-num-seqs": 64, "max-num-batched-tokens": 4096, "vllm-version": "0.25.0",
    "speculative-config": {"method": "mtp", "num_speculative_tokens": 2}})
H20_MTP = {"tensor-parallel-size": 2, "kv-cache-dtype": "fp8", "gpu-memory-utilization": 0.95,
           "vllm-version": "0.26.0", "speculative-config": {"method": "mtp", "num_speculative_tokens": 1}}
GLM51_H200 = dict(model="zai-org/GLM-5.1-FP8", gpu="NVIDIA H200", **{"tensor-parallel-size": 8,
                                                                      "enforce-eager": True})


@dataclass(frozen=True)
class Record:
    name: str
    source: str
    recipe: dict
    available_gib: float | None  # "Available KV cache memory"
    tokens: int  # "GPU KV cache size"
    fitted: str = ""  # the estimates.py figure fitted to this record, if any


RECORDS = [
    Record("V4-Flash 2xH200 NVL TP2, vLLM 0.23.0, L=131,072",
           "shared/data/dsa-startup-records.json ('vLLM Remote H200 128K Context Health Probe')",
           V4_FLASH_NVL | {"max-model-len": 131072}, 32.08, 1_247_687, fitted="V4_FLASH_CHECKPOINT (weights)"),
    Record("V4-Flash 2xH200 NVL TP2, vLLM 0.23.0, L=262,144", "deepseek-v4-flash-2xh200nvl-tp2-eager-v0.23.0-mml262144",
           V4_FLASH_NVL | {"max-model-len": 262144}, 32.08, 2_175_276, fitted="V4_FLASH_CHECKPOINT (weights)"),
    Record("V4-Flash 2xH200 NVL TP2, vLLM 0.23.0, L=4,096", "deepseek-v4-flash-2xh200nvl-tp2-eager-v0.23.0-mml4096",
           V4_FLASH_NVL | {"max-model-len": 4096}, 32.08, 90_841, fitted="V4_FLASH_CHECKPOINT (weights)"),
    Record("V4-Flash 2xRTX PRO 6000 TP2, vLLM 0.25.0, L=1M, MTP", "deepseek-v4-flash-2xrtxpro6000-tp2-stock-v0.25.0",
           V4_FLASH_RTX, 10.29, 1_993_100),
    Record("V4-Flash 2xH20 TP2, vLLM 0.26.0, L=912,128, MTP (in flight 8192)",
           "vllm-project/vllm#51041 (table of the issue body; in-flight tokens not stated: 4096 x 2 batches fits)",
           dict(model="deepseek-ai/DeepSeek-V4-Flash", gpu="NVIDIA H20", **H20_MTP,
                **{"max-model-len": 912128, "max-num-batched-tokens": 4096}), 7.01, 1_009_661),
    Record("V4-Flash-0731 2xH20 TP2, vLLM 0.26.0, L=121,344, MTP",
           "vllm-project/vllm#51041 (table of the issue body; max-num-seqs 32 and 8192 tokens from the thread)",
           dict(model="deepseek-ai/DeepSeek-V4-Flash-0731", gpu="NVIDIA H20", **H20_MTP,
                **{"max-model-len": 121344, "max-num-seqs": 32}), 7.71, 150_992),
    Record("V4-Flash-0731 1xB300, vLLM 0.26.0, L=65,536, DSpark k=7", "deepseek-v4-flash-0731-1xb300-tp1-dspark7-v0.26.0",
           dict(model="deepseek-ai/DeepSeek-V4-Flash-0731", gpu="NVIDIA B300 SXM6 AC", **{
               "kv-cache-dtype": "fp8", "max-model-len": 65536, "enable-expert-parallel": True,
               "vllm-version": "0.26.0", "speculative-config": {"method": "dspark", "num_speculative_tokens": 7}}),
           86.74, 913_657),
    Record("GLM-5.1-FP8 8xH200 TP8 bf16 KV, vLLM 0.19.1rc1", "glm-5.1-fp8-8xh200-tp8-v0.19.1rc1",
           GLM51_H200 | {"vllm-version": "0.19.1rc1"}, 32.06, 343_744),
    Record("GLM-5.1-FP8 8xH200 TP8 bf16 KV, vLLM 0.19.1rc1 (wk upcast reverted)",
           "glm-5.1-fp8-8xh200-tp8-v0.19.1rc1-revert-wk-upcast", GLM51_H200 | {"vllm-version": "0.19.1rc1"}, 32.11,
           344_192),
    Record("GLM-5.1-FP8 8xH200 TP8 bf16 KV, vLLM 0.20.0", "glm-5.1-fp8-8xh200-tp8-v0.20.0",
           GLM51_H200 | {"vllm-version": "0.20.0"}, 34.86, 373_696, fitted="ACTIVATION_HIDDEN_COPIES (peak activation)"),
    Record("GLM-5.1-FP8 8xH200 TP8 bf16 KV, vLLM 0.20.1.dev1", "glm-5.1-fp8-8xh200-tp8-v0.20.1.dev1",
           GLM51_H200 | {"vllm-version": "0.20.1.dev1"}, 34.86, 373_696,
           fitted="ACTIVATION_HIDDEN_COPIES (the 0.20.0 log's figures)"),
    Record("GLM-5.1-FP8 8xH200 TP8 fp8 KV, vLLM 0.22.1rc1",
           "vllm-project/vllm#44545, cjackal 2026-06-04 (prose quoting the startup log: '434,048 tokens(24.85 GiB)')",
           dict(model="zai-org/GLM-5.1-FP8", gpu="NVIDIA H200", **{"tensor-parallel-size": 8,
                                                                    "kv-cache-dtype": "fp8",
                                                                    "vllm-version": "0.22.1rc1"}), 24.85, 434_048),
    Record("GLM-5.1-NVFP4-MTP 8xRTX PRO 6000 TP8 DCP4, fork of 2026-05-26 (about vLLM 0.22), MTP k=3",
           "shared/data/dsa-startup-records.json (voipmonitor GLM-5.1 notes, failing DCP4 run)",
           dict(model="lukealonso/GLM-5.1-NVFP4-MTP", gpu="RTX PRO 6000", **{
               "tensor-parallel-size": 8, "decode-context-parallel-size": 4, "kv-cache-dtype": "fp8",
               # The fork (about 0.22) ran its own B12X_MLA_SPARSE kernels on 656 B fp8_ds_mla pages; vLLM 0.22.0 as
               # released has no sparse MLA for SM12x (FLASHMLA_SPARSE is major 9/10 only). 0.24.0 is the first
               # release whose SM12x backend stores the same pages; its tokens sit within the log's rounding.
               "max-model-len": 202752, "max-num-seqs": 64, "gpu-memory-utilization": 0.845, "vllm-version": "0.24.0",
               "speculative-config": {"method": "mtp", "num_speculative_tokens": 3}}), 7.58, 523_008),
    Record("GLM-5.2-NVFP4 4xGB200 TP4 EP, vLLM 0.26.0, standard fp8 on FlashInfer sparse MLA",
           "glm-5.2-nvfp4-4xgb200-tp4-ep-v0.26.0",
           dict(model="nvidia/GLM-5.2-NVFP4", gpu="NVIDIA GB200", **{
               "tensor-parallel-size": 4, "enable-expert-parallel": True, "kv-cache-dtype": "fp8_e4m3",
               "max-model-len": 819200, "vllm-version": "0.26.0"}), 50.62, 1_139_456),
    # A dev build, 0.1.dev20051+g487ecf187 (PR #53906's image), whose commit is no release's: its GLM-5.3-Flash rules
    # are 0.30.0's and 0.31.0's for this case (prefix caching on, vLLM's default); 0.32.0's would log 433,621.
    Record("GLM-5.3-Flash 4xH200 TP4 bf16 KV, dev build (0.30.0/0.31.0 rules), L=131,072, MTP k=3",
           "shared/data/dsa-startup-records.json (GitHub note 'pending-release - 2026-09-01 GLM-5.3-Flash TP4 on "
           "4xH200 (off-gate)', arm D: kv-cache-memory-bytes 6 GiB)",
           dict(model="zai-org/GLM-5.3-Flash", gpu="NVIDIA H200 SXM (143,771 MiB), NVLink mesh", **{
               "tensor-parallel-size": 4, "max-model-len": 131072, "max-num-seqs": 3, "vllm-version": "0.30.0",
               "kv-cache-memory-bytes": 6 * GIB, "speculative-config": {"method": "mtp", "num_speculative_tokens": 3}}),
           6.0, 443_628),
]
V4_TOLERANCE = 0.01  # the bound for the DeepSeek-V4 family
MLA_TOLERANCE = 0.001  # V3.2 and GLM-5.x


def plan_of(record: Record) -> capacity.Plan:
    return capacity.plan(load(record.recipe))


def tokens_at(plan: capacity.Plan, gib: float) -> int:
    return plan.memory.kv.tokens(round(gib * GIB))


def tolerance(record: Record) -> float:
    return V4_TOLERANCE if "V4" in record.name else MLA_TOLERANCE


def tokens_from_logged_memory(record: Record) -> tuple[int, int, int]:
    plan = plan_of(record)
    return (tokens_at(plan, record.available_gib), tokens_at(plan, record.available_gib - 0.005),
            tokens_at(plan, record.available_gib + 0.005))


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.name)
def test_logged_kv_memory_gives_the_logged_tokens(record):
    tokens, low, high = tokens_from_logged_memory(record)
    assert low <= record.tokens <= high or abs(tokens / record.tokens - 1) <= tolerance(record), (tokens, low, high)


def serving_prediction(record: Record) -> tuple[int, int]:
    """KV bytes and tokens from the serving arguments alone, as this vLLM version logs them."""
    plan = plan_of(record)
    selected = plan.backend(plan.recipe.topk_backend)
    return selected.kv_cache_bytes, selected.kv_cache_tokens


@pytest.mark.parametrize("name, bound", [
    ("GLM-5.1-FP8 8xH200 TP8 bf16 KV, vLLM 0.19.1rc1", 0.03),
    # V4-Flash's checkpoint is fitted to a 0.23.0 H200 NVL log (74.08 GiB a rank); this RTX log loads 75.64 GiB
    ("V4-Flash 2xRTX PRO 6000 TP2, vLLM 0.25.0, L=1M, MTP", 0.07),
    ("GLM-5.2-NVFP4 4xGB200 TP4 EP, vLLM 0.26.0, standard fp8 on FlashInfer sparse MLA", 0.03),
])
def test_serving_arguments_alone_predict_kv_memory_and_tokens(name, bound):
    # 3 % for GLM-5.x, 7 % for the V4 family, on records no constant was fitted to.
    record = next(r for r in RECORDS if r.name == name)
    assert not record.fitted
    kv_bytes, tokens = serving_prediction(record)
    assert abs(kv_bytes / (record.available_gib * GIB) - 1) <= bound
    assert abs(tokens / record.tokens - 1) <= bound


@pytest.mark.parametrize("version, tokens", [("0.30.0", 443_628), ("0.31.0", 443_628), ("0.32.0", 433_621),
                                             ("0.33.0", 433_621)])
def test_glm53_flash_record_exactly_under_030_and_031_rules_only(version, tokens):
    # 6 GiB // 14,611,968 B = 440 blocks over 114 + 1 + 3 x (2 + 3) = 130 pages: int(440 / 130 x 131,072) = 443,628,
    # the record's "GPU KV cache size" to the token; 0.32.0's rules (14,631,936 B, 133 pages) would not give it
    record = next(r for r in RECORDS if r.name.startswith("GLM-5.3-Flash"))
    plan = capacity.plan(load(record.recipe | {"vllm-version": version}))
    assert tokens_at(plan, record.available_gib) == tokens
    assert plan.backend(plan.recipe.topk_backend).kv_cache_tokens == tokens  # kv-cache-memory-bytes pins the 6 GiB


def test_glm51_moves_by_the_default_utilisation_between_019_and_020():
    # Same weights, KV memory 32.06 -> 34.86 GiB: 0.02 x 139.80 GiB = 2.80 GiB (vLLM PR #38284, 0.90 -> 0.92).
    old, new = (next(r for r in RECORDS if r.name.endswith(version)) for version in ("0.19.1rc1", "0.20.0"))
    moved = serving_prediction(new)[0] - serving_prediction(old)[0]
    assert abs(moved / GIB - (34.86 - 32.06)) <= 0.01


@pytest.mark.parametrize("name, logged_gib", [
    # "Model loading took ... GiB" on rank 0 of each log; V4_FLASH_CHECKPOINT was fitted to the H200 NVL records'
    # 74.08 GiB, which loads no MTP layer: this RTX run loads its MTP layer too (1.56 GiB more a rank)
    ("V4-Flash 2xRTX PRO 6000 TP2, vLLM 0.25.0, L=1M, MTP", 75.64),
    ("GLM-5.1-FP8 8xH200 TP8 bf16 KV, vLLM 0.19.1rc1", 89.39),
    ("GLM-5.2-NVFP4 4xGB200 TP4 EP, vLLM 0.26.0, standard fp8 on FlashInfer sparse MLA", 106.69),
])
def test_weights_within_3_percent_of_the_logged_loading_on_records_no_checkpoint_was_fitted_to(name, logged_gib):
    record = next(r for r in RECORDS if r.name == name)
    assert not record.fitted
    assert abs(plan_of(record).memory.weights.bytes / (logged_gib * GIB) - 1) <= 0.03


def test_gh200_refusal_needs_the_logged_bytes_per_request():
    # vllm-project/vllm#44376 (shared/data): "To serve at least one request with the model's max seq len (30000),
    # (6.66 GiB KV cache is needed ...". LLM() defaults to 16384 batched tokens on a >= 70 GiB GPU (vLLM 0.22).
    plan = capacity.plan(load(dict(model="deepseek-ai/DeepSeek-V4-Flash", gpu="GH200", **{
        "tensor-parallel-size": 2, "enable-expert-parallel": True, "kv-cache-dtype": "fp8", "max-model-len": 30000,
        "max-num-batched-tokens": 16384, "vllm-version": "0.22.0"})))
    assert round(plan.memory.kv.request_bytes / GIB, 2) == 6.66


def error_table() -> list[str]:
    rows = ["| record | logged (GiB -> tokens) | plan from logged GiB | error | plan from serving args (GiB, tokens) "
            "| error | fitted to it |", "|---|---|---|---|---|---|---|"]
    for r in RECORDS:
        tokens, _, _ = tokens_from_logged_memory(r)
        kv_bytes, served = serving_prediction(r)
        rows.append(f"| {r.name} | {r.available_gib} -> {r.tokens:,} | {tokens:,} | {tokens / r.tokens - 1:+.2%} | "
                    f"{kv_bytes / GIB:.2f}, {served:,} | {kv_bytes / (r.available_gib * GIB) - 1:+.1%}, "
                    f"{served / r.tokens - 1:+.1%} | {r.fitted or 'no'} |")
    return rows


if __name__ == "__main__":
    print("\n".join(error_table()))
