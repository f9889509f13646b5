"""Real vLLM startup records of the DSA models: the serving arguments, and what the log printed, each with its source.

The logs are in tests/fixtures/vllm_logs (SOURCES.md); a record without a log there names the public page it quotes. The
figures here are copied from them. The fitted terms (fits.py) are fitted to these records; a record checks a fit only when that fit was
made without it (fits.leave_out, benchmarks/leave_one_out.py). Records of one deployment (the same start read at
several max-model-len, or two builds of one release) share a `deployment`: leaving one out leaves them all out.
"""

from dataclasses import dataclass

from dsa_kvcalc.units import GIB


@dataclass(frozen=True)
class Record:
    name: str
    source: str
    deployment: str
    recipe: dict
    available_gib: float | None  # "Available KV cache memory"
    tokens: int | None  # "GPU KV cache size" (None: the start failed before it)
    weights_gib: float | None = None  # "Model loading took" (rank 0)
    peak_activation_gib: float | None = None  # "Actual usage is ... for peak activation"
    non_torch_gib: float | None = None  # "... for non-torch memory"
    cudagraph_estimate_gib: float | None = None  # "Estimated CUDA graph memory", where KV sizing subtracted it
    fork: bool = False  # an out-of-tree build, not a vLLM release: checked, never fitted to
    stated: bool = True  # the source states every argument that moves the memory (else some are inferred: not fitted)

    @property
    def available_bytes(self) -> int | None:
        return None if self.available_gib is None else round(self.available_gib * GIB)


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
RECORDS = [
    Record("V4-Flash 2xH200 NVL TP2, vLLM 0.23.0, L=131,072",
           "a GitHub note, 'vLLM Remote H200 128K Context Health Probe'", "v4-flash-h200nvl-0.23",
           V4_FLASH_NVL | {"max-model-len": 131072}, 32.08, 1_247_687, weights_gib=74.08),
    Record("V4-Flash 2xH200 NVL TP2, vLLM 0.23.0, L=262,144", "deepseek-v4-flash-2xh200nvl-tp2-eager-v0.23.0-mml262144",
           "v4-flash-h200nvl-0.23", V4_FLASH_NVL | {"max-model-len": 262144}, 32.08, 2_175_276),
    Record("V4-Flash 2xH200 NVL TP2, vLLM 0.23.0, L=4,096", "deepseek-v4-flash-2xh200nvl-tp2-eager-v0.23.0-mml4096",
           "v4-flash-h200nvl-0.23", V4_FLASH_NVL | {"max-model-len": 4096}, 32.08, 90_841, weights_gib=74.08),
    Record("V4-Flash 2xRTX PRO 6000 TP2, vLLM 0.25.0, L=1M, MTP", "deepseek-v4-flash-2xrtxpro6000-tp2-stock-v0.25.0",
           "v4-flash-rtx-0.25", V4_FLASH_RTX, 10.29, 1_993_100, weights_gib=75.64, cudagraph_estimate_gib=1.58),
    Record("V4-Flash 2xH20 TP2, vLLM 0.26.0, L=912,128, MTP (in flight 8192)",
           "vllm-project/vllm#51041 (table of the issue body; in-flight tokens not stated: 4096 x 2 batches fits)",
           "v4-flash-h20-0.26", dict(model="deepseek-ai/DeepSeek-V4-Flash", gpu="NVIDIA H20", **H20_MTP,
                                     **{"max-model-len": 912128, "max-num-batched-tokens": 4096}), 7.01, 1_009_661,
           stated=False),
    Record("V4-Flash-0731 2xH20 TP2, vLLM 0.26.0, L=121,344, MTP",
           "vllm-project/vllm#51041 (table of the issue body; max-num-seqs 32 and 8192 tokens from the thread)",
           "v4-flash-0731-h20-0.26", dict(model="deepseek-ai/DeepSeek-V4-Flash-0731", gpu="NVIDIA H20", **H20_MTP,
                                          **{"max-model-len": 121344, "max-num-seqs": 32}), 7.71, 150_992,
           stated=False),
    Record("V4-Flash-0731 1xB300, vLLM 0.26.0, L=65,536, DSpark k=7",
           "deepseek-v4-flash-0731-1xb300-tp1-dspark7-v0.26.0", "v4-flash-0731-b300-0.26",
           dict(model="deepseek-ai/DeepSeek-V4-Flash-0731", gpu="NVIDIA B300 SXM6 AC", **{
               "kv-cache-dtype": "fp8", "max-model-len": 65536, "enable-expert-parallel": True,
               "vllm-version": "0.26.0", "speculative-config": {"method": "dspark", "num_speculative_tokens": 7}}),
           86.74, 913_657, weights_gib=156.32, peak_activation_gib=2.99, non_torch_gib=0.23),
    Record("GLM-5.1-FP8 8xH200 TP8 bf16 KV, vLLM 0.19.1rc1", "glm-5.1-fp8-8xh200-tp8-v0.19.1rc1", "glm51-h200-0.19",
           GLM51_H200 | {"vllm-version": "0.19.1rc1"}, 32.06, 343_744, weights_gib=89.39),
    Record("GLM-5.1-FP8 8xH200 TP8 bf16 KV, vLLM 0.19.1rc1 (wk upcast reverted)",
           "glm-5.1-fp8-8xh200-tp8-v0.19.1rc1-revert-wk-upcast", "glm51-h200-0.19",
           GLM51_H200 | {"vllm-version": "0.19.1rc1"}, 32.11, 344_192, weights_gib=89.34),
    Record("GLM-5.1-FP8 8xH200 TP8 bf16 KV, vLLM 0.20.0", "glm-5.1-fp8-8xh200-tp8-v0.20.0", "glm51-h200-0.20",
           GLM51_H200 | {"vllm-version": "0.20.0"}, 34.86, 373_696, weights_gib=89.39),
    Record("GLM-5.1-FP8 8xH200 TP8 bf16 KV, vLLM 0.20.1.dev1", "glm-5.1-fp8-8xh200-tp8-v0.20.1.dev1", "glm51-h200-0.20",
           GLM51_H200 | {"vllm-version": "0.20.1.dev1"}, 34.86, 373_696, weights_gib=89.39),
    Record("GLM-5.1-FP8 8xH200 TP8 fp8 KV, vLLM 0.22.1rc1",
           "vllm-project/vllm#44545, cjackal 2026-06-04 (prose quoting the startup log: '434,048 tokens(24.85 GiB)')",
           "glm51-h200-fp8-0.22", dict(model="zai-org/GLM-5.1-FP8", gpu="NVIDIA H200", **{
               "tensor-parallel-size": 8, "kv-cache-dtype": "fp8", "vllm-version": "0.22.1rc1"}), 24.85, 434_048,
           stated=False),
    Record("GLM-5.1-FP8 2x8xH100 Mega TP8 PP2, vLLM 0.19.0",
           "a GitHub README, 'GPUDirect-TCPXO Benchmarks on GKE A3 Mega (H100)'; gpu-memory-utilization not stated: "
           "vLLM's default taken, 0.95 would give the logged tokens within 1 %", "glm51-h100-pp2-0.19",
           dict(model="zai-org/GLM-5.1-FP8", gpu="H100 Mega 80GB", **{
               "tensor-parallel-size": 8, "pipeline-parallel-size": 2, "kv-cache-dtype": "fp8",
               "max-model-len": 202752, "vllm-version": "0.19.0"}), None, 858_048, stated=False),
    Record("GLM-5.1-NVFP4-MTP 8xRTX PRO 6000 TP8 DCP4, fork of 2026-05-26 (about vLLM 0.22), MTP k=3",
           "voipmonitor's GLM-5.1 notes on GitHub, the failing DCP4 run", "glm51-nvfp4-rtx-fork",
           dict(model="lukealonso/GLM-5.1-NVFP4-MTP", gpu="RTX PRO 6000", **{
               "tensor-parallel-size": 8, "decode-context-parallel-size": 4, "kv-cache-dtype": "fp8",
               # The fork (about 0.22) ran its own B12X_MLA_SPARSE kernels on 656 B fp8_ds_mla pages; vLLM 0.22.0 as
               # released has no sparse MLA for SM12x (FLASHMLA_SPARSE is major 9/10 only). 0.24.0 is the first
               # release whose SM12x backend stores the same pages; its tokens sit within the log's rounding.
               "max-model-len": 202752, "max-num-seqs": 64, "gpu-memory-utilization": 0.845, "vllm-version": "0.24.0",
               "speculative-config": {"method": "mtp", "num_speculative_tokens": 3}}), 7.58, 523_008,
           weights_gib=70.14, fork=True),
    Record("GLM-5.2-NVFP4 4xGB200 TP4 EP, vLLM 0.26.0, standard fp8 on FlashInfer sparse MLA",
           "glm-5.2-nvfp4-4xgb200-tp4-ep-v0.26.0", "glm52-nvfp4-gb200-0.26",
           dict(model="nvidia/GLM-5.2-NVFP4", gpu="NVIDIA GB200", **{
               "tensor-parallel-size": 4, "enable-expert-parallel": True, "kv-cache-dtype": "fp8_e4m3",
               "max-model-len": 819200, "vllm-version": "0.26.0"}), 50.62, 1_139_456,
           weights_gib=106.69, peak_activation_gib=6.31, non_torch_gib=0.95, cudagraph_estimate_gib=4.99),
    Record("V4-Flash 2xGH200 TP2 EP, vLLM 0.22 (refused: 6.66 GiB a request, 5.44 available), L=30,000",
           "vllm-project/vllm#44376, simonwalo 2026-06-03: the error message; LLM()'s 16,384 batched "
           "tokens on a >= 70 GiB GPU assumed", "v4-flash-gh200-0.22",
           dict(model="deepseek-ai/DeepSeek-V4-Flash", gpu="GH200", **{
               "tensor-parallel-size": 2, "enable-expert-parallel": True, "kv-cache-dtype": "fp8",
               "max-model-len": 30000, "max-num-batched-tokens": 16384, "gpu-memory-utilization": 0.95,
               "vllm-version": "0.22.0"}), 5.44, None, stated=False),
    # A dev build, 0.1.dev20051+g487ecf187 (PR #53906's image), whose commit is no release's: its GLM-5.3-Flash rules
    # are 0.30.0's and 0.31.0's for this case (prefix caching on, vLLM's default); 0.32.0's would log 433,621.
    Record("GLM-5.3-Flash 4xH200 TP4 bf16 KV, dev build (0.30.0/0.31.0 rules), L=131,072, MTP k=3",
           "a GitHub note, 'pending-release - 2026-09-01 GLM-5.3-Flash TP4 on 4xH200 (off-gate)', arm D: "
           "kv-cache-memory-bytes 6 GiB", "glm53-flash-h200-dev",
           dict(model="zai-org/GLM-5.3-Flash", gpu="NVIDIA H200 SXM (143,771 MiB), NVLink mesh", **{
               "tensor-parallel-size": 4, "max-model-len": 131072, "max-num-seqs": 3, "vllm-version": "0.30.0",
               "kv-cache-memory-bytes": 6 * GIB, "speculative-config": {"method": "mtp", "num_speculative_tokens": 3}}),
           6.0, 443_628),
]


def record(name: str) -> Record:
    return next(r for r in RECORDS if r.name == name)
