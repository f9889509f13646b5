"""Every figure that is estimated or fitted rather than derived, in one place, each with what it rests on.

Derived figures (from a model's config and a rule cited to vLLM's source) live in kv_cache.py and capacity.py.
Measured figures come from the user's recipe (its memory block) or a vLLM log (calibrate). What is here stands in
where neither gives a measurement; plan marks each such term "estimated" or "fitted" in its output. A fitted figure
names the records it was fitted to: those records are no check of it (tests/test_records.py keeps them apart).
"""

from dataclasses import dataclass

from dsa_kvcalc.units import GIB, bytes_of_gib


@dataclass(frozen=True)
class Figure:
    value: int
    provenance: str  # estimated or fitted
    basis: str  # the data points of a fit, or what an estimate rests on
    uncertainty: int = 0  # how far off it may be, either way, where that is stated


# The profile run's peak, per rank --------------------------------------------------------------------------------

# BF16 hidden-sized temporaries live at the dummy run's peak, per batched token, on top of the prefill logits budget.
ACTIVATION_HIDDEN_COPIES = Figure(
    18, "fitted",
    "18 hidden-sized BF16 temporaries per batched token for the MoE dispatch, attention and MLP of one "
    "max-num-batched-tokens step, fitted to one log beside the derived prefill workspace and plan's non-torch "
    "estimate: GLM-5.1-FP8 on 8 x H200, vLLM 0.20.0 (tests/fixtures/vllm_logs/glm-5.1-fp8-8xh200-tp8-v0.20.0.log: "
    "34.86 GiB of KV at 373,696 tokens; 18 gives +0.2 %)")
NON_TORCH_SINGLE = Figure(
    1 * GIB, "estimated", "CUDA context, cuBLAS and DeepGEMM workspaces of one process, an allowance (verify "
                          "--profile measured 0.67 GiB on the H200, without NCCL; a vLLM 0.26.0 V4-Flash-0731 TP1 B300 "
                          "log prints 0.23 GiB)")
NON_TORCH_COLLECTIVES = Figure(
    GIB + GIB // 2, "estimated", "an allowance for NCCL and custom all-reduce buffers when TP x DP > 1, not fitted: "
                                 "logs print non-torch memory only in all, and the one multi-GPU DSA log that does "
                                 "(vLLM 0.26.0, GLM-5.2-NVFP4 TP4 on GB200) prints 0.95 GiB, below the 2.5 GiB this and "
                                 "the single process's allowance give together")
CUDAGRAPH_BESIDES_LOGITS = Figure(
    GIB + GIB // 2, "estimated", "CUDA-graph pool memory besides the indexer logits; a vLLM 0.25.0 V4-Flash log "
                                 "estimated 1.58 GiB in all (RTX PRO 6000 TP2), a vLLM 0.26.0 GLM-5.2 log 4.99 GiB "
                                 "(GB200 TP4)")

# Checkpoints (all weights as stored) ----------------------------------------------------------------------------

V32_CHECKPOINT = Figure(689 * 10**9, "estimated", "about 689 GB: DeepSeek-V3's FP8 checkpoint (671.9B parameters "
                                                  "+ the 11.6B MTP layer)")
GLM5_FP8_CHECKPOINT = Figure(756 * 10**9, "estimated", "about 756 GB: 753.9B parameters (MTP layer included) at "
                                                       "about 1 B each in FP8, plus BF16 embeddings")
GLM5_NVFP4_CHECKPOINT = Figure(
    724_775_731_200 * 9 // 16 + 29_100_000_000 * 2, "estimated",
    "the GLM-5 shape with NVFP4 routed experts (724.8B weights at 0.5 B + a 1 B scale per 16) and the other 29.1B "
    "weights in BF16: 466 GB (a GLM-5.2-NVFP4 startup log prints 'Checkpoint size: 432.90 GiB')")
GLM5_MXFP4_CHECKPOINT = Figure(
    724_775_731_200 * 17 // 32 + 29_100_000_000 * 2, "estimated",
    "the GLM-5 shape with MXFP4 routed experts (724.8B weights at 0.5 B + a 1 B scale per 32) and the other 29.1B "
    "weights in BF16: 443 GB (vllm-project/recipes models/zai-org/GLM-5.2.yaml gives amd/GLM-5.2-MXFP4 a "
    "vram_minimum_gb of 446)")
GLM53_CHECKPOINT = Figure(
    756 * 10**9, "estimated",
    "about 756 GB, GLM-5's: vllm-project/recipes models/zai-org/GLM-5.3.yaml gives 743B parameters in a native FP8 "
    "checkpoint whose architecture is 'identical to GLM-5.2' (the MTP layer makes GLM-5's 753.9B), at about 1 B a "
    "parameter plus BF16 embeddings")
GLM53_FLASH_CHECKPOINT = Figure(
    bytes_of_gib(306), "estimated",
    "306 GiB: 'about 306 GiB for the default native FP8 checkpoint' (vllm-project/recipes "
    "models/zai-org/GLM-5.3-Flash.yaml, stored commit 0400c4ef; 321B parameters), not a summed safetensors index")
V4_FLASH_CHECKPOINT = Figure(
    bytes_of_gib(2 * 74.08), "fitted",
    "2 x 74.08 GiB: 'Model loading took 74.08 GiB' on each rank of a TP2 vLLM 0.23.0 start without MTP "
    "(shared/data/dsa-startup-records.json, DeepSeek-V4-Flash on 2 x H200 NVL)")
V4_PRO_CHECKPOINT = Figure(865 * 10**9, "estimated", "about 865 GB: 1.6T parameters with MXFP4 routed experts")
V41_FLASH_CHECKPOINT = Figure(
    bytes_of_gib(476), "estimated",
    "476 GiB as the vllm-project/recipes DeepSeek-V4.1-Flash guide tabulates it from the safetensors dtypes: experts "
    "259.5 GiB (MXFP4), Engram tables 183.1 GiB, attention, dense and routers 6.9 GiB, embeddings and LM head 3.9 GiB, "
    "scales 21.9 GiB (of which about 16.2 GiB the experts' and 5.7 GiB the Engram tables', one byte per 32 weights); "
    "an 8 x B300 DP8 log's 'Model loading took 45.11 GiB' is its replicated 10.8 GiB + experts / 8")

# The run time: what a step finds taken besides the terms plan derives ----------------------------------------------

# The unprofiled term of capacity.oom's room: memory used before vLLM's start snapshot (CUDA context, NCCL groups and
# cuBLAS handles: vllm==0.33.0 vllm/v1/worker/gpu_worker.py:504-541), the graph pool beyond what was subtracted for it,
# growth after profiling and fragmentation, net of the profile's peak that a step does not use (a credit). One data
# point fixes only their sum; where it is carried to another deployment it may be off by as much as itself.
UNPROFILED = Figure(
    -515_435_401, "fitted",
    "fitted to the seed's death (vLLM PR #62860: DeepSeek-V4.1-Flash on 4 x B200 DEP4, vLLM 0.33.0's code, rank 0 "
    "out of memory at 131 decodes allocating the FP32 logits copy with 3.04 GiB free and 1.54 GiB of BF16 logits "
    "live): total - held - KV-init buffers - (free - its rounding + live) = -0.48 GiB; "
    "`dsa-kvcalc calibrate LOG --recipe R` measures it on your deployment",
    515_435_401)
