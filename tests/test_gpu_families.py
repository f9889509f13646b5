"""The GPU families vLLM's capability checks name, kept in one place (catalog.FAMILIES, Gpu.family)."""

from dsa_kvcalc import weights
from dsa_kvcalc.catalog import GPUS, LAYOUTS, family_archs, layout_for
from dsa_kvcalc.names import find_gpu
from dsa_kvcalc.recipe import load


def test_each_gpu_is_in_the_family_of_its_compute_capability_major():
    # vllm==0.33.0 vllm/platforms/interface.py:577-588: is_device_capability_family(c) holds for any capability whose
    # to_int() // 10 is c // 10 (SM100 and SM103 are 10.x); ROCm's GPUs are gfx archs, checked by is_rocm()
    for gpu in GPUS:
        if gpu.arch.startswith("sm"):
            assert gpu.family == f"sm{int(gpu.arch[2:]) // 10 * 10}", gpu.name
        else:
            assert gpu.arch.startswith("gfx") and gpu.family == "rocm", gpu.name
    assert family_archs(("sm100",)) == ("sm100", "sm103") and family_archs(("sm120",)) == ("sm120", "sm121")


def test_b300_is_sm103_and_runs_sm100s_logits_layout():
    # DeepGEMM 2.8 csrc/apis/attention.hpp: out_dtype = arch_major == 10 ? kBFloat16 : kFloat32, split 384 on SM100
    b300 = find_gpu("B300")
    assert (b300.arch, b300.family) == ("sm103", "sm100")
    assert layout_for("2.8", b300) is LAYOUTS[("2.8", "sm100")] and layout_for("2.8", b300).logits_dtype == "bf16"
    # a recipe on a B300 resolves the same layout
    recipe = load({"model": "GLM-5", "gpu": "B300", "kv-cache-dtype": "fp8"})
    assert recipe.gpu.family == "sm100" and recipe.layout.logits_dtype == "bf16"


def test_flashmla_sparse_pads_bf16_prefill_queries_by_family():
    # vllm==0.29.0 vllm/v1/attention/backends/mla/flashmla_sparse.py:583-597: a BF16 cache's concatenated prefill
    # queries, max_num_batched_tokens x heads x 576 BF16, with the heads rounded up to 128 on SM10x (B300, sm103,
    # included) and to 64 elsewhere; GLM-5 at TP8 has 64 / 8 = 8 heads a rank
    for gpu, padded_heads in (("B300", 128), ("B200", 128), ("H200", 64)):
        recipe = load({"model": "GLM-5", "gpu": gpu, "tensor-parallel-size": 8, "kv-cache-dtype": "bfloat16",
                       "attention-backend": "FLASHMLA_SPARSE", "vllm-version": "0.29.0"})
        assert weights.mla_workspace_bytes(recipe, 8) == recipe.max_num_batched_tokens * padded_heads * 576 * 2, gpu
