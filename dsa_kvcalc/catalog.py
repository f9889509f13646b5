"""Catalog data: GPUs, models, DeepGEMM logits layouts and indexer top-k backends.

Data only, each entry with its source. The arithmetic that uses it is in capacity.py.
"""

from enum import Enum
from dataclasses import dataclass, replace
from pathlib import Path

from dsa_kvcalc import estimates
from dsa_kvcalc.estimates import Figure
from dsa_kvcalc.units import MIB, bytes_of_gib


# The families vLLM's capability checks name, by arch: SM100 and SM103 are one (is_device_capability_family(100) is any
# 10.x: B300 runs SM100's kernels and DeepGEMM's SM100 logits layout), SM120 and SM121 another (12.x), SM90 is checked
# alone (is_device_capability(90)) (vllm==0.33.0 vllm/platforms/interface.py:554-588); gfx942 and gfx950 are ROCm,
# checked as the platform (current_platform.is_rocm()). In the order messages name archs.
FAMILIES = {"sm90": "sm90", "sm100": "sm100", "sm103": "sm100", "sm120": "sm120", "sm121": "sm120", "gfx942": "rocm",
            "gfx950": "rocm"}
CUDA = ("sm90", "sm100", "sm120")
ROCM = ("rocm",)


def family_archs(families: tuple[str, ...]) -> tuple[str, ...]:
    """The archs of these families, as messages name them."""
    return tuple(arch for arch, family in FAMILIES.items() if family in families)


@dataclass(frozen=True)
class Gpu:
    name: str
    arch: str  # sm90, sm100, sm103, sm120, sm121 (CUDA compute capability), gfx942, gfx950 (ROCm)
    total_memory_bytes: int  # torch.cuda.get_device_properties(0).total_memory
    aliases: tuple[str, ...]
    source: str
    # The memory its marketing names carry, in GB (vendors' datasheets; clouds list them so): "NVIDIA H200 141GB HBM3e"
    marketed_gb: tuple[int, ...] = ()
    # Memory the CPU shares: DGX Spark's GB10 is an integrated GPU, whose free memory vLLM takes from psutil, so that
    # host memory the process gains during start-up counts as non-torch (vllm==0.33.0 vllm/utils/mem_utils.py:138-150,
    # platforms/cuda.py:700-701); GH200's Hopper shares its address space with Grace. Both leave more non-KV memory
    # than the discrete parts (estimates.UNIFIED_NON_TORCH_SPREAD)
    unified_memory: bool = False

    @property
    def family(self) -> str:
        return FAMILIES[self.arch]


GPUS = [
    Gpu(name="H100", arch="sm90", total_memory_bytes=81089 * MIB,
        aliases=("NVIDIA H100 80GB HBM3", "NVIDIA H100", "H100-80GB", "H100-SXM", "H100 SXM", "H100 Mega 80GB",
                 "NVIDIA H100 Mega 80GB"),
        source="81,089 MiB (79.19 GiB): torch device properties and 'Free memory on device (78.66/79.19 GiB)' in vLLM "
               "logs quoted in vllm-project/vllm issues; vLLM logs 'NVIDIA H100' on several machines, and GKE's A3 "
               "Mega ('H100 Mega 80GB') nodes carry the SXM part", marketed_gb=(80,)),
    Gpu(name="H800", arch="sm90", total_memory_bytes=81089 * MIB,
        aliases=("NVIDIA H800", "NVIDIA H800 80GB HBM3", "H800 SXM", "H800-SXM"),
        source="estimated as the H100 SXM's 81,089 MiB: the H800 is the H100's GH100 die and 80 GB of HBM3 with NVLink "
               "and FP64 cut for export (aiwiki.ai/wiki/nvidia_h800); Hopper, compute capability 9.0",
        marketed_gb=(80,)),
    Gpu(name="H100 PCIe", arch="sm90", total_memory_bytes=81008 * MIB, aliases=("NVIDIA H100 PCIe",),
        source="torch device properties: name 'NVIDIA H100 PCIe', 9.0, total_memory 81008MB, 114 SMs (a public issue's "
               "_CudaDeviceProperties print)", marketed_gb=(80,)),
    Gpu(name="H100 NVL", arch="sm90", total_memory_bytes=bytes_of_gib(93.00), aliases=("NVIDIA H100 NVL",),
        source="'GPU 0 has a total capacity of 93.00 GiB' in a torch OOM on H100 NVL (ali-vilab/VACE#56); nvidia-smi "
               "95,830 MiB (NVIDIA/gpu-admin-tools#4)", marketed_gb=(94,)),
    Gpu(name="H200", arch="sm90", total_memory_bytes=150_109_880_320,
        aliases=("NVIDIA H200", "H200-141GB", "H200-SXM", "H200 SXM", "NVIDIA H200 SXM", "NVIDIA H200 141GB",
                 "NVIDIA H200 SXM 141GB"),
        source="measured on an H200 (docs/validation.md, GPU runs); 143,156 MiB in torch device properties",
        marketed_gb=(141,)),
    Gpu(name="H200 NVL", arch="sm90", total_memory_bytes=150_109_880_320, aliases=("NVIDIA H200 NVL",),
        source="nvidia-smi prints 143,771 MiB for H200 NVL as for the SXM part (so the SXM part's measured bytes); "
               "139.80 GiB in user reports of vLLM on H200 NVL", marketed_gb=(141,)),
    Gpu(name="H20", arch="sm90", total_memory_bytes=97285 * MIB, aliases=("NVIDIA H20",),
        source="torch device properties: name 'NVIDIA H20', 9.0, total_memory 97285MB, 78 SMs (vllm-project/vllm "
               "issues)",
        marketed_gb=(96,)),
    Gpu(name="H20 141GB", arch="sm90", total_memory_bytes=150_109_880_320,
        aliases=("NVIDIA H20 141GB", "H20-141GB", "H20 HBM3e"),
        source="estimated as the H200's bytes: the H20's 141 GB HBM3e edition carries the H200's memory "
               "(vllm-project/recipes models/zai-org/GLM-5.2.yaml: '8xH200/H20 (141GB x 8)')", marketed_gb=(141,)),
    Gpu(name="GH200", arch="sm90", total_memory_bytes=bytes_of_gib(94.88),
        aliases=("NVIDIA GH200 480GB", "GH200 480GB", "NVIDIA GH200"),
        source="94.88 GiB total capacity in a torch OOM on GH200 480GB (Lightning-AI/litgpt#1892); the Grace memory "
               "mode can change what is visible", marketed_gb=(96, 480), unified_memory=True),
    Gpu(name="B200", arch="sm100", total_memory_bytes=182631 * MIB, aliases=("NVIDIA B200",),
        source="178.35 GiB in the seed's OOM message (vLLM PR #62860); 182,631 MiB in torch device properties",
        marketed_gb=(180, 192)),
    Gpu(name="GB200", arch="sm100", total_memory_bytes=bytes_of_gib(184.31), aliases=("NVIDIA GB200",),
        source="'Free memory on device (181.84/184.31 GiB)' in a vLLM 0.26.0 GB200 startup log",
        marketed_gb=(186, 192)),
    Gpu(name="B300", arch="sm103", total_memory_bytes=bytes_of_gib(267.69),
        aliases=("NVIDIA B300 SXM6 AC", "NVIDIA B300", "B300-SXM6"),
        source="'(267.08/267.69 GiB)' in a vLLM startup log and 267.69 GiB in OOM messages; compute capability 10.3",
        marketed_gb=(288,)),
    Gpu(name="GB300", arch="sm103", total_memory_bytes=bytes_of_gib(276.50), aliases=("NVIDIA GB300",),
        source="276.50 GiB total capacity in torch OOM messages on GB300 nodes; compute capability 10.3 (two "
               "workstation hosts show 256,703 MiB: the Grace memory mode moves what is visible)",
        marketed_gb=(279, 288)),
    Gpu(name="RTX PRO 6000", arch="sm120", total_memory_bytes=97250 * MIB,
        aliases=("NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
                 "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "NVIDIA RTX PRO 6000 Blackwell",
                 "RTX PRO 6000 Blackwell", "RTX-PRO-6000"),
        source="torch device properties: 12.0, total_memory 97250MB, 188 SMs; 'Free memory on device (94.41/94.97 "
               "GiB)' in vLLM logs (Server Edition; the Workstation editions show the same nvidia-smi total)",
        marketed_gb=(96,)),
    Gpu(name="RTX 5090", arch="sm120", total_memory_bytes=bytes_of_gib(31.37),
        aliases=("NVIDIA GeForce RTX 5090", "GeForce RTX 5090", "RTX5090"),
        source="'total capacity of 31.37 GiB' in torch OOM messages on RTX 5090 (Tencent-Hunyuan/HunyuanVideo#299); "
               "nvidia-smi 32,607 MiB, compute capability 12.0 (vllm-project/vllm#39594)", marketed_gb=(32,)),
    Gpu(name="GB10", arch="sm121", total_memory_bytes=bytes_of_gib(121.69),
        aliases=("NVIDIA GB10", "DGX Spark", "NVIDIA DGX Spark"),
        source="'Free memory on device cuda:0 (x/121.69 GiB)' in many DGX Spark vLLM logs; unified memory, so the "
               "figure moves with the OS carve-out", marketed_gb=(128,), unified_memory=True),
    Gpu(name="MI300X", arch="gfx942", total_memory_bytes=196592 * MIB,
        aliases=("AMD Instinct MI300X", "AMD_Instinct_MI300X"),
        source="196,592 MiB (191.98 GiB) in ROCm torch device properties (ROCm/ROCm#4203); vLLM names it "
               "AMD_Instinct_MI300X (vllm==0.33.0 vllm/platforms/rocm.py:77-93)", marketed_gb=(192,)),
    Gpu(name="MI325X", arch="gfx942", total_memory_bytes=bytes_of_gib(255.98),
        aliases=("AMD Instinct MI325X", "AMD_Instinct_MI325X"),
        source="255.98 GiB total capacity in HIP OOM messages (vllm-project/vllm#41962)", marketed_gb=(256,)),
    Gpu(name="MI355X", arch="gfx950", total_memory_bytes=bytes_of_gib(287.98),
        aliases=("AMD Instinct MI355X", "AMD_Instinct_MI355X"),
        source="287.98 GiB total capacity in HIP OOM messages on MI355X nodes", marketed_gb=(288,)),
    Gpu(name="MI350X", arch="gfx950", total_memory_bytes=bytes_of_gib(287.98),
        aliases=("AMD Instinct MI350X", "AMD_Instinct_MI350X"),
        source="estimated as the MI355X's 287.98 GiB: the MI350X is the same CDNA 4 package (gfx950) and 288 GB of "
               "HBM3E, air-cooled at 1,000 W instead of 1,400 W (AMD at Hot Chips 2025, as wccftech.com reported it)",
        marketed_gb=(288,)),
]
# GPUs vLLM cannot run the DSA models on: the sparse-MLA backends take SM90 and SM10x (SM12x from vLLM 0.24.0):
# FLASHMLA_SPARSE capability.major in [9, 10], FLASHINFER_MLA_SPARSE major 10, FLASH_ATTN_MLA_SPARSE major 9
# (vllm==0.30.0 vllm/v1/attention/backends/mla/flashmla_sparse.py:170-171 and beside it).
UNSUPPORTED_GPUS = {
    "A100": ("sm80", ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB")),
    "A10": ("sm86", ("NVIDIA A10", "NVIDIA A10G")),
    "L40S": ("sm89", ("NVIDIA L40S", "NVIDIA L40", "NVIDIA L4")),
    "RTX 4090": ("sm89", ("NVIDIA GeForce RTX 4090",)),
    "V100": ("sm70", ("Tesla V100-SXM2-32GB", "Tesla V100-SXM2-16GB", "NVIDIA V100")),
    "T4": ("sm75", ("Tesla T4",)),
}


@dataclass(frozen=True)
class Layout:
    """How DeepGEMM's paged MQA logits are laid out: [rows, padded width], row stride = padded width."""

    versions: str  # the DeepGEMM releases it covers
    family: str  # the GPU family it runs on (FAMILIES)
    logits_dtype: str  # bf16 or fp32
    split_columns: int  # KV split: a row holds whole splits
    stride_aligned: bool  # the row stride is also a multiple of 1024 B: padded = align(L, lcm(split, 1024 B / elem));
    # else padded = align(L, split). DeepGEMM 2.3-2.6.1 nest the two, align(align(L, 256), 1024 B / elem): the lcm,
    # as 256 columns divide 1024 B / elem for either dtype.
    source: str


STRIDE_ALIGNMENT_BYTES = 1024  # "Logits row stride must be 1024-byte aligned" (DeepGEMM csrc/apis/attention.hpp)

LAYOUTS = {
    ("2.8", "sm100"): Layout(
        versions="2.8.x", family="sm100", logits_dtype="bf16", split_columns=384, stride_aligned=True,
        source="deepinfer-gemm==2.8.2 sdist (upstream DeepGEMM 2.8.2): csrc/apis/attention.hpp "
               "fp8_fp4_paged_mqa_logits, out_dtype = arch_major == 10 ? kBFloat16 : kFloat32; split_kv = "
               "kMQALogitsSplitKV = 384 (csrc/jit_kernels/impls/sm100_mqa_logits.hpp); aligned_max_context_len = "
               "align(L, split / gcd(split, 512) * 512)"),
    ("2.8", "sm90"): Layout(
        versions="2.8.x", family="sm90", logits_dtype="fp32", split_columns=256, stride_aligned=True,
        source="deepinfer-gemm==2.8.2 sdist: csrc/apis/attention.hpp, split_kv = 256 off SM100, FP32 output; measured "
               "on an H200 (docs/validation.md, GPU runs: L=4097 -> stride 4352)"),
    ("2.6", "sm100"): Layout(
        versions="2.3 - 2.6.1", family="sm100", logits_dtype="fp32", split_columns=256, stride_aligned=True,
        source="deepseek-ai/DeepGEMM csrc/apis/attention.hpp (v2.6.1, 54e2261): FP32 logits by default (BF16 optional "
               "from 2.4.2, not requested by vLLM), align(align(L, 256), 1024 B / elem)"),
    ("2.6", "sm90"): Layout(
        versions="2.3 - 2.6.1", family="sm90", logits_dtype="fp32", split_columns=256, stride_aligned=True,
        source="deepseek-ai/DeepGEMM csrc/apis/attention.hpp (v2.6.1, 54e2261)"),
    ("2.2", "sm100"): Layout(
        versions="2.1 - 2.2", family="sm100", logits_dtype="fp32", split_columns=256, stride_aligned=False,
        source="deepseek-ai/DeepGEMM csrc/apis/attention.hpp (1c9fa43): FP32 logits, width aligned to 256 (2 x 128 "
               "splits)"),
    ("2.2", "sm90"): Layout(
        versions="2.1 - 2.2", family="sm90", logits_dtype="fp32", split_columns=256, stride_aligned=False,
        source="deepseek-ai/DeepGEMM csrc/apis/attention.hpp (1c9fa43): FP32 logits, width aligned to 256 (4 x 64 "
               "splits)"),
    ("nv_dev", "sm120"): Layout(
        versions="nv_dev (vLLM's pin)", family="sm120", logits_dtype="fp32", split_columns=128, stride_aligned=False,
        source="deepseek-ai/DeepGEMM nv_dev a6b593d2 csrc/apis/attention.hpp:410-414: split_kv = 128 on SM12x, "
               "aligned_max_context_len = align(L, 128), FP32 by default; vLLM builds it for SM12x since PR #43477 "
               "(2026-06-23) and pins nv_dev since #47304"),
    ("rocm", "rocm"): Layout(
        versions="ROCm (no DeepGEMM)", family="rocm", logits_dtype="fp32", split_columns=256, stride_aligned=True,
        source="seed (vLLM PR #62860): FP32 logits and 256-column padding on every platform but SM100 (vllm "
               "rocm_fp8_paged_mqa_logits)"),
}

# DeepGEMM release (major.minor) -> layout family in LAYOUTS (each family's source says which releases it read). The
# default is the vLLM release's (engine.py default_deepgemm): 2.8 from vLLM 0.33.0, the layout the seed's figures show.
DEEPGEMM_RELEASES = {"2.1": "2.2", "2.2": "2.2", "2.3": "2.6", "2.4": "2.6", "2.5": "2.6", "2.6": "2.6", "2.8": "2.8"}


def layout_for(release: str, gpu: "Gpu") -> Layout:
    """The logits layout a GPU gets from a DeepGEMM release (ROCm has no DeepGEMM; SM12x only DeepGEMM's nv_dev
    branch, whatever the release)."""
    if gpu.family == "rocm":
        return LAYOUTS[("rocm", "rocm")]
    if gpu.family == "sm120":
        return LAYOUTS[("nv_dev", "sm120")]
    return LAYOUTS[(DEEPGEMM_RELEASES[release], gpu.family)]


# The KV-cache dtypes each sparse-MLA backend takes (supported_kv_cache_dtypes): vLLM starts on no other.
SPARSE_MLA_CACHE_DTYPES = {
    "FLASHMLA_SPARSE": (("auto", "bfloat16", "fp8_ds_mla", "fp8", "nvfp4_ds_mla"),
                        "vllm==0.33.0 vllm/v1/attention/backends/mla/flashmla_sparse.py:149-155 (nvfp4_ds_mla from "
                        "0.30.0, SM100 only)"),
    "FLASHINFER_MLA_SPARSE": (("auto", "float16", "bfloat16", "fp8", "fp8_e4m3"),
                              "vllm==0.33.0 vllm/v1/attention/backends/mla/flashinfer_mla_sparse.py:84-90"),
    "FLASHINFER_MLA_SPARSE_SM120": (("auto", "fp8", "fp8_e4m3", "fp8_ds_mla"),
                                    "vllm==0.33.0 vllm/v1/attention/backends/mla/flashinfer_mla_sparse.py:168-173"),
    "FLASHINFER_MLA_SPARSE_SM90": (("auto", "bfloat16", "fp8", "fp8_e4m3"),
                                   "vllm==0.33.0 vllm/v1/attention/backends/mla/flashinfer_mla_sparse_sm90.py:148-153"),
    "FLASH_ATTN_MLA_SPARSE_FA4": (("auto", "float16", "bfloat16", "fp8", "fp8_e4m3"),
                                  "vllm==0.33.0 vllm/v1/attention/backends/mla/flashattn_mla_sparse.py:275 (FlashInfer's "
                                  "TRTLLM backend's dtypes)"),
    "FLASH_ATTN_MLA_SPARSE": (("auto", "float16", "bfloat16"),
                              "vllm==0.25.0 vllm/v1/attention/backends/mla/flashattn_mla_sparse.py:85-88"),
    "ROCM_AITER_MLA_SPARSE": (("auto", "float16", "bfloat16", "fp8", "fp8_e4m3"),
                              "vllm==0.21.0 vllm/v1/attention/backends/mla/rocm_aiter_mla_sparse.py:266-272 (fp8 from "
                              "0.21.0)"),
}


# The GPU families each sparse-MLA backend runs on (supports_compute_capability; the same from its first release to
# 0.33.0): vLLM refuses to start when the backend it picks, or the one named, does not run on the GPU.
SPARSE_MLA_FAMILIES = {
    "FLASHMLA_SPARSE": (("sm90", "sm100"), "vllm==0.19.0 vllm/v1/attention/backends/mla/flashmla_sparse.py:"
                                                     "118-119 (major 9 or 10; vllm==0.33.0 :203-204)"),
    "FLASHINFER_MLA_SPARSE": (("sm100",), "vllm==0.19.0 vllm/v1/attention/backends/mla/flashinfer_mla_sparse.py:"
                                                  "100-102 (major 10; vllm==0.33.0 :105-106)"),
    "FLASH_ATTN_MLA_SPARSE_FA4": (("sm100",), "vllm==0.33.0 vllm/v1/attention/backends/mla/"
                                                      "flashattn_mla_sparse.py:275 (FlashInfer's TRTLLM backend's, major "
                                                      "10)"),
    "FLASHINFER_MLA_SPARSE_SM120": (("sm120",), "vllm==0.24.0 vllm/v1/attention/backends/mla/"
                                                        "flashinfer_mla_sparse.py:170-171 (major 12)"),
    "FLASHINFER_MLA_SPARSE_SM90": (("sm90",), "vllm==0.33.0 vllm/v1/attention/backends/mla/flashinfer_mla_sparse_sm90.py:"
                                              "189-190 (major 9)"),
    "FLASH_ATTN_MLA_SPARSE": (("sm90",), "vllm==0.33.0 vllm/v1/attention/backends/mla/flashattn_mla_sparse.py:82-83 "
                                         "(major 9)"),
    "ROCM_AITER_MLA_SPARSE": (ROCM, "vllm==0.33.0 vllm/platforms/rocm.py:537-539 (ROCm's only sparse "
                                                    "MLA)"),
}


# Sparse-MLA backends that take DeepSeek's 576-wide latent (512 + 64 RoPE) only (get_supported_head_sizes)
SPARSE_MLA_WIDE_ONLY = {
    "FLASH_ATTN_MLA_SPARSE_FA4": "vllm==0.33.0 vllm/v1/attention/backends/mla/flashattn_mla_sparse.py:299-301",
}


# Where DeepSeek-V4 stores DeepSeek's fp8_ds_mla layout, which takes fp8 cache dtypes only (engine.py
# v4_auto_cache_dtype_fp8): SM90 and SM10x run its FlashMLA attention unless FLASHINFER_MLA_SPARSE_DSV4 is named
# (vllm==0.23.0 vllm/models/deepseek_v4/nvidia/model.py:716-727; 0.20.0-0.22.1 run FlashMLA only, vllm==0.22.1
# vllm/models/deepseek_v4/attention.py:671-676); SM12x runs FlashInfer's SM120 attention from 0.24.0, named or not,
# which stores the same layout (DeepseekV4FlashInferSM120Attention.use_fp8_ds_mla_layout: vllm==0.24.0
# vllm/models/deepseek_v4/nvidia/flashinfer_sparse.py:509-513, vllm==0.33.0 :619-624; the pick:
# vllm==0.31.0 vllm/models/deepseek_v4/nvidia/model.py:1146-1177)
V4_FLASHMLA_FAMILIES = ("sm90", "sm100")


# The sparse-MLA backend vLLM runs for a 512-wide latent (kv_lora_rank 512 without RoPE: GLM-5.3-Flash), by arch. On
# SM90 FlashInfer's SM90 kernel goes first for head size 512 (vllm==0.30.0 vllm/platforms/cuda.py:143, the same to
# 0.33.0); on SM10x FlashMLA-sparse and FA4 refuse head size 512 (vllm==0.30.0
# vllm/v1/attention/backends/mla/flashmla_sparse.py:157-159, vllm==0.33.0 flashmla_sparse.py:219-248 and
# flashattn_mla_sparse.py:299-301), FlashInfer's takes it (flashinfer_mla_sparse.py:57-61). Elsewhere: not determined.
# (deployment.sparse_mla_candidates orders them so)
NOPE_MLA_HEAD_SIZE = 512


@dataclass(frozen=True)
class Backend:
    name: str
    families: tuple[str, ...]  # where it runs (FAMILIES)
    topk: tuple[int, ...] | None  # index_topk values it supports (None: any)
    reads_bf16: bool  # reads DeepGEMM's BF16 logits directly (no FP32 copy); only without DCP
    note: str
    source: str
    engines: tuple[str, ...] = ("vllm",)


NOT_SM12X = ("sm90", "sm100")  # cooperative top-k is off on SM12x (vLLM PR #47164)
INDEXER_TOPK = "vllm-project/vllm vllm/model_executor/layers/indexer_topk.py (0fd8f213)"

BACKENDS = [
    Backend(name="auto", families=CUDA + ROCM, topk=None, reads_bf16=False,
            note="cooperative for batches of <= {cooperative_rows} rows, then persistent, then a per-row kernel; aiter "
                 "on ROCm",
            source=INDEXER_TOPK),
    Backend(name="persistent", families=CUDA, topk=(512, 1024, 2048), reads_bf16=False, note="1 MiB workspace",
            source=INDEXER_TOPK),
    Backend(name="cooperative", families=NOT_SM12X, topk=(512, 1024, 2048), reads_bf16=False,
            note="batches of <= {cooperative_rows} rows; 1 MiB workspace", source=INDEXER_TOPK),
    Backend(name="deep_select", families=("sm100",), topk=tuple(range(1, 4097)), reads_bf16=True,
            note="DeepSelect: FP32 or BF16 input, row stride a multiple of 1024 B, topk <= 4096",
            source=INDEXER_TOPK + "; BF16 ranking: vLLM PR #62240"),
    Backend(name="flashinfer", families=CUDA, topk=None, reads_bf16=False, note="FP32 input only", source=INDEXER_TOPK),
    Backend(name="torch", families=CUDA + ROCM, topk=None, reads_bf16=False, note="reference implementation",
            source=INDEXER_TOPK),
    Backend(name="aiter", families=ROCM, topk=None, reads_bf16=False, note="ROCm only", source=INDEXER_TOPK),
    Backend(name="deepinfer", families=NOT_SM12X, topk=None, reads_bf16=True,
            note="DeepInfer's own top-k over BF16 logits",
            source="seed: DeepInfer@774ce24 index_attn.py", engines=("deepinfer",)),
]




class Rows(Enum):
    """The decode worst case whose logits an indexer takes, over the recipe's keys."""
    SEQS_CAPPED = "min(max_num_seqs, max_num_batched_tokens) x (1 + num_speculative_tokens)"  # vLLM #62860 (the seed)
    TOKENS_CAPPED = "min(max_num_seqs x (1 + num_speculative_tokens), max_num_batched_tokens)"
    UNCAPPED = "max_num_seqs x (1 + nextn)"  # DeepInfer's profile run (the seed)


@dataclass(frozen=True)
class Indexer:
    """The decode-logits rules of a model's indexer: vLLM's DSA indexer, or GLM-5.3-Flash's kpool indexer, whose
    profile branch reserves by its own rule."""
    reserver: str  # what reserves the decode logits in the profile run
    reservation_rule: str  # the engine rule (engine.py) that says in which releases it does
    rows: Rows
    reserves_unpadded_fp32: bool  # reserves rows x width x 4 B, not the logits' padded bytes
    upcasts_always: bool  # the FP32 copy whatever top-k runs
    source: str


DSA_INDEXER = Indexer(
    "vLLM #62860", "reserves_decode_logits", Rows.SEQS_CAPPED, False, False,
    "vllm==0.33.0 vllm/model_executor/layers/sparse_attn_indexer.py; the seed: vLLM PR #62860")
KPOOL_INDEXER = Indexer(
    "the kpool indexer's own reservation", "kpool_indexer_reserves_decode_logits", Rows.TOKENS_CAPPED, True, True,
    "vllm==0.30.0 vllm/model_executor/layers/sparse_attn_indexer_kpool.py:296-331 (rows and reservation); "
    "vllm==0.33.0 vllm/models/glm5next/nvidia/sparse_indexer.py:148-187 and 617-629 (as_fp32_logits)")


@dataclass(frozen=True)
class Model:
    """A checkpoint, as its config.json describes what the KV cache and the indexer need. The KV-cache specs are
    derived from these fields in kv_cache/; nothing here is a per-token figure."""

    name: str  # Hugging Face id
    config_source: str  # where the config was read: a public copy (repository and path), or a local file
    architecture: str  # config.json's architectures[0]: vLLM's rules that differ by model key on it
    num_layers: int
    mtp_layers: int  # num_nextn_predict_layers: each adds a KV layer when MTP speculation is on
    hidden_size: int
    index_n_heads: int
    index_head_dim: int
    index_topk: int
    max_position_embeddings: int
    checkpoint: Figure  # bytes of all weights as stored
    routed_expert_bytes: int  # the part that expert parallelism splits
    aliases: tuple[str, ...] = ()  # other names of this checkpoint
    # Other checkpoints planned as this one, each with what differs: said in plan's output (a BF16 checkpoint's
    # weights are twice the FP8 one's)
    stand_ins: tuple[tuple[str, str], ...] = ()
    checkpoint_format: str = "fp8"  # how its weights are stored: fp8, nvfp4 or mxfp4 (the routed experts)
    # V3.2 and GLM-5.x: every layer is MLA (kv_lora_rank + rope) with an indexer K cache, or only those that compute
    # the top-k when indexers are shared (GLM-5.2: index_topk_freq 4, index_skip_topk_offset 3).
    index_topk_freq: int = 1
    index_skip_topk_offset: int = 2
    # DeepSeek-V4: compress_ratios per layer (0: sliding window only, 4: compressed with an indexer, 128: heavily
    # compressed), a sliding window on every layer. V4.1: codes 0/1/2 and caches owned by kv_source_layers only.
    compress_ratios: tuple[int, ...] = ()
    sliding_window: int = 0
    kv_source_layers: tuple[int, ...] = ()
    index_source_layers: tuple[int, ...] = ()
    # vLLM's indexer scores max_model_len // this many columns (V4: its ratio-4 layers)
    indexer_logits_ratio: int = 1
    # DeepInfer sizes its logits over max_model_len // kv_compress_ratio compressed keys (the seed)
    kv_compress_ratio: int = 1
    # DeepSeek-V4.1: its attention heads and wo_a groups pick the attention class (mega attention on SM100)
    num_attention_heads: int = 0
    o_groups: int = 0
    # GLM-5.3-Flash (Glm5Next): the layers whose layer_types entry is linear_attention are KDA layers, each with a
    # conv and a recurrent state (linear_attn_config: num_heads, head_dim, short_conv_kernel_size); the others and
    # the MTP layers are DSA layers whose MLA latent is kv_lora_rank + qk_rope_head_dim wide and whose indexer keeps
    # one entry per index_kpool tokens.
    linear_layers: tuple[int, ...] = ()
    linear_heads: int = 0
    linear_head_dim: int = 0
    linear_conv_kernel: int = 0
    index_kpool: int = 1
    mla_head_size: int = 576
    # The drafters vLLM runs for it: mtp (its MTP layers), dspark (dspark_layers window-only draft layers)
    drafters: tuple[str, ...] = ("mtp",)
    dspark_layers: int = 3  # n_mtp_layers or 3 (vllm==0.26.0 vllm/models/deepseek_v4/nvidia/dspark.py:69)
    # DeepSeek-V4.1's two-level indexer: the candidate blocks the consumer layers score (config.json
    # candidate_topk_blocks, candidate_block_size), which size the sparse-logits scratch (kv_init_buffers.py)
    candidate_topk_blocks: int = 0
    candidate_block_size: int = 0
    # Weights a deployment may keep in host memory instead (V4.1's Engram tables, offloaded by default)
    offloadable_bytes: int = 0
    # the checkpoint's own cache dtype for kv-cache-dtype auto: (GPU families, cache dtype, source); the
    # architecture's is a vLLM rule (engine.py sm10x_auto_kv_cache_dtypes)
    auto_kv_cache_dtype: tuple[tuple[tuple[str, ...], str, str], ...] = ()
    note: str = ""
    config_path: Path | None = None  # a local config.json (an input: never written over)

    @property
    def family(self) -> str:
        if self.kv_source_layers:
            return "deepseek_v41"
        if self.linear_layers:
            return "glm5next"
        return "deepseek_v4" if self.compress_ratios else "mla"

    @property
    def kpool_indexer(self) -> bool:
        """Its indexer keeps one entry per index_kpool tokens (vLLM's sparse_attn_indexer_kpool), with its own rules
        for the decode logits (engine.py kpool_*)."""
        return self.index_kpool > 1

    @property
    def block_outermost_layout(self) -> bool:
        """Its backends declare a block-outermost KV-cache layout, so vLLM 0.32.0+ resolves one: DeepSeek-V4's and
        V4.1's indexer (DEEPSEEK_V4_INDEXER: BLHNC, BLNHC) and GLM-5.3-Flash's kpool tail (KPOOL_TAIL: BLHNC),
        vllm==0.32.0 vllm/v1/attention/backends/mla/indexer.py:313-314, 348-351. V3.2's and GLM-5.x's backends
        declare none (LBNHC, layer-outer, first: vllm/v1/attention/backends/utils.py:195-202) or, ROCm's AITER sparse
        MLA, LBNHC first (rocm_aiter_mla_sparse.py:394-395); the same in vllm==0.33.0."""
        return self.family != "mla"

    @property
    def indexer(self) -> Indexer:
        return KPOOL_INDEXER if self.kpool_indexer else DSA_INDEXER


AIC = "ai-dynamo/aiconfigurator aic-core/src/aiconfigurator_core/model_configs"
AIC_FORK = "xiaowanCN/aiconfigurator@5f2e6bb aic-core/src/aiconfigurator_core/model_configs"
SYFI = "SyFI-ServingStudio/ServingStudioSim model/config"
# Routed experts from each config (the sources below): (num_hidden_layers - first_k_dense_replace) MoE layers x
# n_routed_experts x 3 matrices x hidden_size x moe_intermediate_size. FP8: 1 B per weight + a 4 B scale per
# 128 x 128 block.
V32_EXPERT_BYTES = 58 * 256 * 3 * 7168 * 2048 * 4097 // 4096
GLM_EXPERT_BYTES = 75 * 256 * 3 * 6144 * 2048 * 4097 // 4096
# MXFP4 routed experts: 0.5 B per weight + 1 B scale per 32 = 17/32 B. NVFP4 (GLM NVFP4 below, 9/16 of FP8's bytes):
# 0.5 B per weight + 1 B scale per 16 = 9/16 B (FP8's 4097/4096 block scales carried along: within 0.03 %).
V4_FLASH_EXPERT_BYTES = 43 * 256 * 3 * 4096 * 2048 * 17 // 32
V4_PRO_EXPERT_BYTES = 61 * 384 * 3 * 7168 * 3072 * 17 // 32
# DeepSeek-V4.1-Flash's checkpoint by part (vllm-project/recipes models/deepseek-ai/DeepSeek-V4.1-Flash.yaml, the
# guide's memory table): routed + DSpark experts (MXFP4) 259.5 GiB and their UE8M0 scales (one byte per 32 weights:
# 16.2 of the 21.9 GiB of scales), split by expert parallelism; Engram tables 183.1 GiB + their 5.7 GiB of scales,
# offloaded to host memory by default (vllm==0.33.0 vllm/config/engram.py:37-38 cpu_offload True).
V41_FLASH_EXPERT_BYTES = bytes_of_gib(259.5 + 16.22)
V41_FLASH_ENGRAM_BYTES = bytes_of_gib(183.1 + 5.72)
V4_FLASH_RATIOS = (0, 0) + (4, 128) * 20 + (4,)
# DeepSeek-V4: in vLLM from 0.20.0 (engine.py model_architectures), DSpark drafts from 0.25.0 for a checkpoint that
# has a DSpark block: its drafter reads the config's dspark_target_layer_ids (vllm==0.33.0
# vllm/models/deepseek_v4/nvidia/dspark.py:100), which V4-Flash-0731's config has and the preview V4-Flash's and
# V4-Pro's have not (oracle/configs; dsa_kvcalc/weights.json records vLLM's refusal)
V4_DRAFTERS = ("mtp", "dspark")
# DeepSeek-V4.1's DSpark drafts in blocks of 5 tokens (its config.json dspark_block_size: oracle/configs/
# deepseek-ai--DeepSeek-V4.1-Flash.json; engine.py v41_dspark_tokens_in_blocks)
V41_DSPARK_BLOCK_TOKENS = 5
# What a checkpoint needs for each drafter vLLM runs, for the refusal of one it lacks
DRAFTER_NEEDS = {
    "mtp": "MTP layers (num_nextn_predict_layers; vllm==0.33.0 vllm/config/speculative.py:1474-1486)",
    "dspark": "a parallel-drafting token in its config.json (dspark_noise_token_id): vLLM refuses DSpark without one, "
              "'Model config must specify `dflash_config.mask_token_id`, `mask_token_id`, `dspark_noise_token_id`, "
              "`pard_token`, or `ptd_token_id` for parallel drafting.' (vllm==0.33.0 "
              "vllm/v1/worker/gpu/spec_decode/utils.py:92-113, the same since vllm==0.25.0)",
}
V32_ARCH, GLM5_ARCH, V4_ARCH = "DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM", "DeepseekV4ForCausalLM"
# Architectures whose config hook takes kv-cache-dtype bfloat16 as auto, before any rule of auto (vLLM's
# verify_and_update_config), with the source
BF16_CACHE_AS_AUTO = {V32_ARCH: "vllm==0.33.0 vllm/model_executor/models/config.py:83-86 DeepseekV32ForCausalLM: "
                                "bfloat16 -> auto (the same since vllm==0.19.0 :40-43)"}
# A ModelOpt checkpoint whose quantization_config stores the KV cache in FP8 (kv_cache_scheme {num_bits 8, type
# float, dynamic false}) runs kv-cache-dtype auto as fp8_e4m3, on every GPU, before any model rule
# (EngineArgs.create_engine_config's resolve_kv_cache_dtype_string: vllm==0.19.0 vllm/utils/torch_utils.py:262-340,
# vllm==0.33.0 :443-516 and vllm/engine/arg_utils.py:2297)
CHECKPOINT_FP8_KV = ((CUDA + ROCM, "fp8_e4m3",
                      "the checkpoint's quantization_config.kv_cache_scheme (vllm==0.33.0 vllm/utils/torch_utils.py:"
                      "443-516 get_kv_cache_quant_algo_string, resolve_kv_cache_dtype_string; the same since "
                      "vllm==0.19.0 :262-340)"),)
# GLM-5.x's BF16 checkpoints, planned as the FP8 ones, whose KV cache they share (vllm-project/recipes
# models/zai-org/GLM-5.yaml, GLM-5.1.yaml, GLM-5.2.yaml, GLM-5.3.yaml: the bf16 variants)
GLM_BF16 = "the BF16 checkpoint: the same KV cache, about twice the weights (give memory.weights_gib)"
V4_PRO_RATIOS = (128, 128) + (4, 128) * 29 + (4,)
GLM5NEXT_ARCH = "Glm5NextForConditionalGeneration"
# GLM-5.3-Flash: 42 MoE layers (first_k_dense_replace 3 of 45) x 288 experts, FP8 with 128 x 128 block scales
GLM53_FLASH_EXPERT_BYTES = 42 * 288 * 3 * 4096 * 2048 * 4097 // 4096
GLM53_FLASH_LINEAR_LAYERS = tuple(layer for layer in range(45) if layer % 4 != 3)  # layer_types linear_attention

# DeepSeek-V3.2's and GLM-5.x's shapes: every GLM-5.x checkpoint is GLM-5's 78 layers, the later ones at GLM-5.2's
# 1M context with shared indexers; a re-quantization differs in its weights only
V32_MODEL = Model(
    name="deepseek-ai/DeepSeek-V3.2", config_source=f"{AIC}/deepseek-ai--DeepSeek-V3.2_config.json",
    architecture=V32_ARCH, num_layers=61, mtp_layers=1, hidden_size=7168, index_n_heads=64, index_head_dim=128,
    index_topk=2048, max_position_embeddings=163840, checkpoint=estimates.V32_CHECKPOINT,
    routed_expert_bytes=V32_EXPERT_BYTES, num_attention_heads=128)
GLM5_MODEL = Model(
    name="zai-org/GLM-5-FP8", config_source=f"{AIC}/zai-org--GLM-5-FP8_config.json", architecture=GLM5_ARCH,
    num_layers=78, mtp_layers=1, hidden_size=6144, index_n_heads=32, index_head_dim=128, index_topk=2048,
    max_position_embeddings=202752, checkpoint=estimates.GLM5_FP8_CHECKPOINT, routed_expert_bytes=GLM_EXPERT_BYTES,
    num_attention_heads=64, aliases=("GLM-5",), stand_ins=(("zai-org/GLM-5", GLM_BF16),))
GLM51_MODEL = replace(
    GLM5_MODEL, name="zai-org/GLM-5.1-FP8", config_source=f"{AIC}/zai-org--GLM-5.1-FP8_config.json",
    aliases=("GLM-5.1",), stand_ins=(("zai-org/GLM-5.1", GLM_BF16),))
GLM52_MODEL = replace(
    GLM51_MODEL, name="zai-org/GLM-5.2-FP8", config_source=f"{AIC}/zai-org--GLM-5.2-FP8_config.json",
    max_position_embeddings=1048576, aliases=("GLM-5.2",), stand_ins=(("zai-org/GLM-5.2", GLM_BF16),),
    index_topk_freq=4, index_skip_topk_offset=3,
    note="shared indexers: 21 of 78 layers (and the MTP layer) keep an indexer K cache")
# GLM-5.x's re-quantized weights: NVFP4 routed experts at 9/16, MXFP4 at 17/32 of the FP8 bytes
GLM_NVFP4_WEIGHTS = {"checkpoint": estimates.GLM5_NVFP4_CHECKPOINT, "routed_expert_bytes": GLM_EXPERT_BYTES * 9 // 16,
                     "checkpoint_format": "nvfp4"}
GLM_MXFP4_WEIGHTS = {"checkpoint": estimates.GLM5_MXFP4_CHECKPOINT, "routed_expert_bytes": GLM_EXPERT_BYTES * 17 // 32,
                     "checkpoint_format": "mxfp4"}
MLA_MODELS = [
    V32_MODEL,
    replace(V32_MODEL, name="deepseek-ai/DeepSeek-V3.2-Exp",
            config_source="awesome-mini-project/DeepSeek-V3.2-Exp inference/config_671B_v3.2.json (DeepSeek's "
                          "reference config)"),
    GLM5_MODEL,
    GLM51_MODEL,
    replace(GLM51_MODEL, **GLM_NVFP4_WEIGHTS, name="nvidia/GLM-5.1-NVFP4",
            config_source=f"{AIC}/nvidia--GLM-5.1-NVFP4_config.json",
            aliases=("GLM-5.1-NVFP4",),
            stand_ins=(("lukealonso/GLM-5.1-NVFP4-MTP", "a community NVFP4 re-quantization of GLM-5.1 with its MTP "
                                                       "layer: NVIDIA's layout and format"),
                       ("nvidia/GLM-5-NVFP4", "NVIDIA's NVFP4 checkpoint of GLM-5, GLM-5.1's shape "
                                              "(vllm-project/recipes models/zai-org/GLM-5.yaml, variant nvfp4)")),
            auto_kv_cache_dtype=CHECKPOINT_FP8_KV,
            note="NVFP4 routed experts, an FP8 KV cache by its quantization config; GLM-5.1's KV layout"),
    replace(GLM51_MODEL, **GLM_MXFP4_WEIGHTS, name="amd/GLM-5.1-MXFP4",
            config_source="vllm-project/recipes models/zai-org/GLM-5.1.yaml (MXFP4 on AMD MI355X): AMD Quark's MXFP4 "
                          "re-quantization of GLM-5.1's MoE weights, the architecture and so the KV-cache fields of "
                          f"{AIC}/zai-org--GLM-5.1-FP8_config.json",
            aliases=("GLM-5.1-MXFP4",), stand_ins=(), note="MXFP4 routed experts; GLM-5.1's KV layout"),
    GLM52_MODEL,
    replace(GLM52_MODEL, **GLM_NVFP4_WEIGHTS, name="nvidia/GLM-5.2-NVFP4",
            config_source=f"{AIC}/nvidia--GLM-5.2-NVFP4_config.json",
            aliases=("GLM-5.2-NVFP4",),
            stand_ins=(("RedHatAI/GLM-5.2-NVFP4-FP8", "RedHat AI's NVFP4 re-quantization: NVFP4 routed experts, FP8 "
                                                     "attention and embeddings (vllm-project/recipes "
                                                     "models/zai-org/GLM-5.2.yaml, variant redhat_nvfp4), NVIDIA's "
                                                     "sizes within its BF16 parts"),),
            auto_kv_cache_dtype=CHECKPOINT_FP8_KV,
            note="NVFP4 routed experts, an FP8 KV cache by its quantization config; shared indexers as GLM-5.2"),
    replace(GLM52_MODEL, **GLM_MXFP4_WEIGHTS, name="amd/GLM-5.2-MXFP4",
            config_source="vllm-project/recipes models/zai-org/GLM-5.2.yaml, variant mxfp4: AMD Quark's MXFP4 "
                          "re-quantization of GLM-5.2's MoE weights, the architecture and so the KV-cache fields of "
                          f"{AIC}/zai-org--GLM-5.2-FP8_config.json",
            aliases=("GLM-5.2-MXFP4",), stand_ins=(),
            note="MXFP4 routed experts (the recipe serves it on MI355X); shared indexers as GLM-5.2"),
    replace(GLM52_MODEL, name="zai-org/GLM-5.3",
            config_source=f"{SYFI}/glm53_nvfp4.json (commit bee7da91, the NVFP4 re-quantization of GLM-5.3: 78 "
                          "layers, kv_lora_rank 512 + rope 64, index_topk_freq 4, index_skip_topk_offset 3; "
                          "ROCm/ATOM#2291 states every KV field of GLM-5.3 equals GLM-5.2's)",
            checkpoint=estimates.GLM53_CHECKPOINT, aliases=(), stand_ins=(("zai-org/GLM-5.3-BF16", GLM_BF16),),
            note="GLM-5.2's shape: shared indexers on 21 of 78 layers (and the MTP layer)"),
    replace(GLM52_MODEL, **GLM_NVFP4_WEIGHTS, name="Inferact/GLM-5.3-NVFP4",
            config_source="vllm-project/recipes models/zai-org/GLM-5.3.yaml, variant nvfp4: Inferact's NVFP4 "
                          "re-quantization of GLM-5.3's MoE expert linears, the rest BF16, GLM-5.3's architecture (so "
                          "zai-org/GLM-5.3's KV-cache fields)",
            aliases=("GLM-5.3-NVFP4",), stand_ins=(),
            note="NVFP4 routed experts (the recipe: a ~465 GB checkpoint, Blackwell only); GLM-5.2's shape"),
]
V4_FLASH_MODEL = Model(
    name="deepseek-ai/DeepSeek-V4-Flash", config_source=f"{AIC_FORK}/deepseek-ai--DeepSeek-V4-Flash_config.json",
    architecture=V4_ARCH, num_layers=43, mtp_layers=1, hidden_size=4096, index_n_heads=64, index_head_dim=128,
    index_topk=512, max_position_embeddings=1048576, checkpoint=estimates.V4_FLASH_CHECKPOINT,
    routed_expert_bytes=V4_FLASH_EXPERT_BYTES, compress_ratios=V4_FLASH_RATIOS, sliding_window=128,
    indexer_logits_ratio=4, kv_compress_ratio=4, num_attention_heads=64)
V4_MODELS = [
    V4_FLASH_MODEL,
    replace(V4_FLASH_MODEL, name="deepseek-ai/DeepSeek-V4-Flash-0731",
            config_source=f"{SYFI}/deepseek_v4_flash_0731.json (vllm-project/vllm#51041: the same compress_ratios, "
                          "sliding_window and layers as the preview)", drafters=V4_DRAFTERS),
    replace(V4_FLASH_MODEL, name="deepseek-ai/DeepSeek-V4-Pro",
            config_source=f"{AIC_FORK}/deepseek-ai--DeepSeek-V4-Pro_config.json", num_layers=61, hidden_size=7168,
            index_topk=1024, checkpoint=estimates.V4_PRO_CHECKPOINT, routed_expert_bytes=V4_PRO_EXPERT_BYTES,
            compress_ratios=V4_PRO_RATIOS, num_attention_heads=128),
    Model(name="deepseek-ai/DeepSeek-V4.1-Flash",
          config_source=f"{SYFI}/deepseek_v41_flash.json and LivingAgile/mlx-lm tests/test_deepseek_v41.py "
                        "(third-party copies, byte for byte the same, of deepseek-ai/DeepSeek-V4.1-Flash@dba1be0a; "
                        "vllm==0.33.0 vllm/models/deepseek_v41/amd/mono/keylist.py:5 names the same index layers)",
          architecture="DeepseekV41ForCausalLM", num_layers=40, mtp_layers=3, hidden_size=5120, index_n_heads=32,
          index_head_dim=128, index_topk=512, max_position_embeddings=1048576,
          checkpoint=estimates.V41_FLASH_CHECKPOINT, routed_expert_bytes=V41_FLASH_EXPERT_BYTES,
          compress_ratios=(0, 0) + (2,) * 18 + (1,) * 20, sliding_window=128, kv_source_layers=(2, 8, 14, 20),
          index_source_layers=(2, 8, 14, 20, 24, 28, 32, 36), kv_compress_ratio=4, candidate_topk_blocks=2048,
          candidate_block_size=8, num_attention_heads=64, o_groups=8, drafters=("dspark",),
          offloadable_bytes=V41_FLASH_ENGRAM_BYTES,
          note="only the kv-source layers 2, 8, 14, 20 keep compressed caches and the index sources among them "
               "indexer caches; every layer a 32-token window; DSpark (its only drafter) adds 3 window-only layers"),
]
V4_MODELS = [replace(m, checkpoint_format="mxfp4") for m in V4_MODELS]  # MXFP4 routed experts (above)
GLM5NEXT_MODELS = [
    Model(name="zai-org/GLM-5.3-Flash",
          config_source=f"{SYFI}/glm53_flash.json (commit d8fc2f3a, the flattened text config of "
                        "zai-org/GLM-5.3-Flash, model_type glm5_next_text)",
          architecture=GLM5NEXT_ARCH, num_layers=45, mtp_layers=1, hidden_size=4096, index_n_heads=32,
          index_head_dim=128, index_topk=2048, max_position_embeddings=1048576,
          checkpoint=estimates.GLM53_FLASH_CHECKPOINT, routed_expert_bytes=GLM53_FLASH_EXPERT_BYTES,
          linear_layers=GLM53_FLASH_LINEAR_LAYERS, linear_heads=64, linear_head_dim=128, linear_conv_kernel=4,
          index_kpool=4, mla_head_size=512, num_attention_heads=64,
          note="hybrid: 34 KDA linear-attention layers keep a per-request state (conv + recurrent, per TP rank), 11 "
               "DSA layers and the MTP layer an MLA latent without RoPE, a kpool indexer and a tail ring; the "
               "attention block is sized to hold a KDA state (derived for SM90 and SM10x)"),
]
MODELS = MLA_MODELS + V4_MODELS + GLM5NEXT_MODELS
