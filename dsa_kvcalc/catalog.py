"""Catalog data: GPUs, models, DeepGEMM logits layouts and indexer top-k backends.

Data only, each entry with its source. The arithmetic that uses it is in capacity.py.
"""

from dataclasses import dataclass

GIB = 1 << 30
MIB = 1 << 20


@dataclass(frozen=True)
class Gpu:
    name: str
    arch: str  # sm90, sm100, sm103 (CUDA compute capability), gfx942, gfx950 (ROCm)
    total_memory_bytes: int  # torch.cuda.get_device_properties(0).total_memory
    aliases: tuple[str, ...]
    source: str


def bytes_of_gib(value: float) -> int:
    return round(value * GIB)


GPUS = [
    Gpu("H100", "sm90", 81089 * MIB, ("H100-80GB", "H100-SXM", "NVIDIA H100 80GB HBM3"),
        "81,089 MiB (79.19 GiB) in torch device-property printouts quoted in vllm-project/vllm issues"),
    Gpu("H200", "sm90", 150_109_880_320, ("H200-141GB", "NVIDIA H200"),
        "measured on the lent H200 (shared/design/capacity-model.md; 143,156 MiB in vLLM issue logs)"),
    Gpu("B200", "sm100", 182631 * MIB, ("NVIDIA B200",),
        "178.35 GiB in the seed's OOM message (vLLM PR #62860); 182,631 MiB in vLLM issue logs"),
    Gpu("GB200", "sm100", bytes_of_gib(184.31), ("NVIDIA GB200",),
        "184.31 GiB total capacity in vLLM OOM messages (capacity-model.md §3)"),
    Gpu("B300", "sm103", bytes_of_gib(267.69), ("NVIDIA B300", "B300-SXM6"),
        "267.69 GiB total capacity in vLLM startup logs and OOM messages; compute capability 10.3"),
    Gpu("MI300X", "gfx942", 196592 * MIB, ("AMD Instinct MI300X",),
        "196,592 MiB (191.98 GiB) in ROCm torch device-property printouts"),
    Gpu("MI355X", "gfx950", bytes_of_gib(287.98), ("AMD Instinct MI355X",),
        "287.98 GiB in ROCm vLLM logs (capacity-model.md §3)"),
]


@dataclass(frozen=True)
class Layout:
    """How DeepGEMM's paged MQA logits are laid out: [rows, padded width], row stride = padded width."""

    versions: str  # the DeepGEMM releases it covers
    archs: tuple[str, ...]
    logits_dtype: str  # bf16 or fp32
    split_columns: int  # KV split: a row holds whole splits
    stride_rule: str  # "lcm": align(L, lcm(split, 1024 B / elem)); "nested": align(align(L, split), 1024 B / elem)
    source: str


STRIDE_ALIGNMENT_BYTES = 1024  # "Logits row stride must be 1024-byte aligned" (DeepGEMM csrc/apis/attention.hpp)

LAYOUTS = {
    ("2.8", "sm100"): Layout(
        "2.8.x", ("sm100", "sm103"), "bf16", 384, "lcm",
        "deepinfer-gemm==2.8.2 sdist (upstream DeepGEMM 2.8.2): csrc/apis/attention.hpp fp8_fp4_paged_mqa_logits, "
        "out_dtype = arch_major == 10 ? kBFloat16 : kFloat32; split_kv = kMQALogitsSplitKV = 384 "
        "(csrc/jit_kernels/impls/sm100_mqa_logits.hpp); aligned_max_context_len = align(L, split / gcd(split, 512) * 512)"),
    ("2.8", "sm90"): Layout(
        "2.8.x", ("sm90",), "fp32", 256, "lcm",
        "deepinfer-gemm==2.8.2 sdist: csrc/apis/attention.hpp, split_kv = 256 off SM100, FP32 output; "
        "measured on an H200 (shared/design/deepgemm-on-h200.md: L=4097 -> stride 4352)"),
    ("2.6", "sm100"): Layout(
        "2.3 - 2.6.1", ("sm100", "sm103"), "fp32", 256, "nested",
        "deepseek-ai/DeepGEMM csrc/apis/attention.hpp (v2.6.1, 54e2261): FP32 logits by default "
        "(BF16 optional from 2.4.2, not requested by vLLM), align(align(L, 256), 1024 B / elem)"),
    ("2.6", "sm90"): Layout(
        "2.3 - 2.6.1", ("sm90",), "fp32", 256, "nested",
        "deepseek-ai/DeepGEMM csrc/apis/attention.hpp (v2.6.1, 54e2261)"),
    ("2.2", "sm100"): Layout(
        "2.1 - 2.2", ("sm100", "sm103"), "fp32", 256, "nested",
        "deepseek-ai/DeepGEMM csrc/apis/attention.hpp (1c9fa43): FP32 logits, width aligned to 256 (2 x 128 splits)"),
    ("2.2", "sm90"): Layout(
        "2.1 - 2.2", ("sm90",), "fp32", 256, "nested",
        "deepseek-ai/DeepGEMM csrc/apis/attention.hpp (1c9fa43): FP32 logits, width aligned to 256 (4 x 64 splits)"),
    ("rocm", "rocm"): Layout(
        "ROCm (no DeepGEMM)", ("gfx942", "gfx950"), "fp32", 256, "lcm",
        "seed (vLLM PR #62860): FP32 logits and 256-column padding on every platform but SM100 "
        "(vllm rocm_fp8_paged_mqa_logits)"),
}

# DeepGEMM release (major.minor) -> layout family in LAYOUTS.
DEEPGEMM_RELEASES = {"2.1": "2.2", "2.2": "2.2", "2.3": "2.6", "2.4": "2.6", "2.5": "2.6", "2.6": "2.6", "2.8": "2.8"}
DEFAULT_DEEPGEMM = "2.8"


def layout_for(release: str, gpu: "Gpu") -> Layout:
    """The logits layout a GPU gets from a DeepGEMM release (ROCm has no DeepGEMM)."""
    if gpu.arch.startswith("gfx"):
        return LAYOUTS[("rocm", "rocm")]
    return LAYOUTS[(DEEPGEMM_RELEASES[release], "sm100" if gpu.arch in ("sm100", "sm103") else "sm90")]


@dataclass(frozen=True)
class Backend:
    name: str
    archs: tuple[str, ...]  # where it runs
    topk: tuple[int, ...] | None  # index_topk values it supports (None: any)
    reads_bf16: bool  # reads DeepGEMM's BF16 logits directly (no FP32 copy); only without DCP
    note: str
    source: str
    engines: tuple[str, ...] = ("vllm",)


CUDA = ("sm90", "sm100", "sm103")
ROCM = ("gfx942", "gfx950")
INDEXER_TOPK = "vllm-project/vllm vllm/model_executor/layers/indexer_topk.py (0fd8f213)"

BACKENDS = [
    Backend("auto", CUDA + ROCM, None, False,
            "cooperative for batches of <= 64 rows, then persistent, then a per-row kernel; aiter on ROCm",
            INDEXER_TOPK),
    Backend("persistent", CUDA, (512, 1024, 2048), False, "1 MiB workspace", INDEXER_TOPK),
    Backend("cooperative", CUDA, (512, 1024, 2048), False,
            "batches of <= 64 rows (32 in older vLLM); 1 MiB workspace", INDEXER_TOPK),
    Backend("deep_select", ("sm100", "sm103"), tuple(range(1, 4097)), True,
            "DeepSelect: FP32 or BF16 input, row stride a multiple of 1024 B, topk <= 4096",
            INDEXER_TOPK + "; BF16 ranking: vLLM PR #62240"),
    Backend("flashinfer", CUDA, None, False, "FP32 input only", INDEXER_TOPK),
    Backend("torch", CUDA + ROCM, None, False, "reference implementation", INDEXER_TOPK),
    Backend("aiter", ROCM, None, False, "ROCm only", INDEXER_TOPK),
    Backend("deepinfer", CUDA, None, True, "DeepInfer's own top-k over BF16 logits",
            "seed: DeepInfer@774ce24 index_attn.py", ("deepinfer",)),
]


@dataclass(frozen=True)
class Model:
    name: str  # Hugging Face id
    num_layers: int
    hidden_size: int
    index_n_heads: int
    index_head_dim: int
    index_topk: int
    kv_compress_ratio: int  # compression of the indexer's keys (V4: 4); DeepInfer's logits width divides by it
    mtp_layers: int
    max_position_embeddings: int
    # KV-cache bytes per token on one rank, by cache format ("fp8": fp8_ds_mla, "bf16"), main model.
    kv_bytes_per_token: dict[str, int]
    # Added per MTP draft layer when MTP speculation is on.
    mtp_kv_bytes_per_token: dict[str, int]
    kv_block_size: int
    checkpoint_bytes: int  # all weights as stored
    routed_expert_bytes: int  # the part that expert parallelism splits
    kv_note: str
    source: str
    aliases: tuple[str, ...] = ()
    kv_bytes_per_request: int = 0  # state a request holds whatever its length (V4's windows and compressor states)


# MLA models (V3.2, GLM-5) on FlashMLA-sparse: per layer 656 B/token with any fp8 cache (fp8_ds_mla: 512 FP8 NoPE
# + 16 B scales + 128 B BF16 RoPE), 1152 B with bf16 (576 x 2), plus the indexer's 132 B (128 FP8 + 4 B scale) on
# every layer with an indexer. One latent KV head: replicated on every TP rank.
# Source: vllm-project/vllm vllm/v1/kv_cache_interface.py (MLAAttentionSpec), sparse_attn_indexer.py
# (k_cache_head_dim = head_dim + head_dim // 128 * 4).
MLA_FP8_BYTES = 656
MLA_BF16_BYTES = 1152
INDEXER_FP8_BYTES = 132

V32_SOURCE = ("deepseek-ai/DeepSeek-V3.2-Exp inference/config_671B_v3.2.json: 61 layers (3 dense), hidden 7168, "
              "index_n_heads 64, index_head_dim 128, index_topk 2048, 256 experts top-8, moe_intermediate 2048, "
              "num_nextn_predict_layers 1, max_position_embeddings 163840, FP8 weights")
# Routed experts: 58 MoE layers x 256 x 3 x 7168 x 2048 FP8 bytes (+ 1/4096 for the 128x128 block scales).
V32_EXPERT_BYTES = 58 * 256 * 3 * 7168 * 2048 * 4097 // 4096

# DeepSeek V4 caches compressed KV (584 B per entry: 448 NoPE + 128 RoPE + 8 scale) every 4 or 128 tokens and an
# indexer cache (132 B per entry) on ratio-4 layers, in 256-token blocks, pages padded to 576 B: per 256 tokens a
# ratio-4 layer holds 37,440 + 8,640 B and a ratio-128 layer 1,728 B. Every layer (the MTP layer too) also keeps a
# 128-token sliding window and FP32 compressor states: a fixed footprint per request, whatever its length
# (vllm-project/vllm vllm/models/deepseek_v4/attention.py, compressor.py, vllm/v1/attention/backends/mla/sparse_swa.py).
# vLLM reports "GPU KV cache size" as max concurrency x max_model_len, a request costing
#     kv_bytes_per_token x max_model_len + kv_bytes_per_request
# (vllm/v1/core/kv_cache_utils.py get_max_concurrency_for_kv_cache_config; vllm-project/vllm issue #51041 on why
# Available KV / reported tokens is no per-token cost).
# V4-Flash: 21 x (37,440 + 8,640) / 256 + 20 x 1,728 / 256 = 3,915 B per token. The per-request state comes from a
# real startup log (vLLM 0.25.0, fp8, TP2, max-model-len 1,048,576, max-num-batched-tokens 4096,
# tests/fixtures/vllm_logs/deepseek-v4-flash-2xrtxpro6000-tp2-stock-v0.25.0.log): 10.29 GiB for 1,993,100 tokens,
# i.e. 1.90077 requests of 1,048,576 tokens: 10.29 GiB / 1.90077 - 3,915 x 1,048,576 = 1,707,634,172 B per request.
# The window and compressor pages a request needs grow with max-num-batched-tokens: this is the figure at 4096.
V4_BLOCK_TOKENS = 256
V4_RATIO4_BLOCK_BYTES = 37440 + 8640  # compressed KV + indexer pages of a ratio-4 layer, per 256 tokens
V4_RATIO128_BLOCK_BYTES = 1728
V4_FLASH_KV_BYTES = (21 * V4_RATIO4_BLOCK_BYTES + 20 * V4_RATIO128_BLOCK_BYTES) // V4_BLOCK_TOKENS
V4_FLASH_REQUEST_BYTES = 1_707_634_172
V4_FLASH_STATE_LAYERS = 44  # layers with a window and compressor state: 43 + the MTP layer
# V4-Pro: 30 ratio-4 and 31 ratio-128 layers; per-request state scaled by the layer count (62 against 44).
V4_PRO_KV_BYTES = (30 * V4_RATIO4_BLOCK_BYTES + 31 * V4_RATIO128_BLOCK_BYTES) // V4_BLOCK_TOKENS
V4_PRO_REQUEST_BYTES = V4_FLASH_REQUEST_BYTES * 62 // V4_FLASH_STATE_LAYERS
# V4.1-Flash has no public config (vLLM's deepseek_v41 package shares KV across layers: kv_source_layers).
# Assumption: bytes per token from the seed (vLLM PR #62860): on main, deep_select's CUDA graphs are 6.01 GiB
# smaller than auto's (18.40 - 12.39) and its KV cache holds 48,253,887 - 41,050,274 = 7,203,613 more tokens:
# 6.01 GiB / 7,203,613 = 896 B per reported token at max-model-len 1,048,576, per-request state included.
V41_FLASH_KV_BYTES = 896
V4_FLASH_SOURCE = ("deepseek-ai/DeepSeek-V4-Flash config.json: 43 layers, hidden 4096, compress_ratios "
                   "[0, 0, then 4 and 128 alternating, 0 for MTP], sliding_window 128, index_topk 512, 256 experts "
                   "top-6 (FP4), 284B total / 13B active; checkpoint 148.66 GiB (vLLM 0.25.0 startup log)")
# Routed experts: 43 layers x 256 x 3 x 4096 x 2048 MXFP4 values at 0.5 B + 1 B scale per 32.
V4_FLASH_EXPERT_BYTES = 43 * 256 * 3 * 4096 * 2048 * 17 // 32

MODELS = [
    Model("deepseek-ai/DeepSeek-V3.2-Exp", 61, 7168, 64, 128, 2048, 1, 1, 163840,
          {"fp8": 61 * (MLA_FP8_BYTES + INDEXER_FP8_BYTES), "bf16": 61 * (MLA_BF16_BYTES + INDEXER_FP8_BYTES)},
          {"fp8": MLA_FP8_BYTES + INDEXER_FP8_BYTES, "bf16": MLA_BF16_BYTES + INDEXER_FP8_BYTES}, 64,
          689 * 10**9, V32_EXPERT_BYTES,
          "61 layers x (MLA + indexer K)", V32_SOURCE + "; checkpoint about 689 GB (DeepSeek-V3 FP8 size)"),
    Model("deepseek-ai/DeepSeek-V3.2", 61, 7168, 64, 128, 2048, 1, 1, 163840,
          {"fp8": 61 * (MLA_FP8_BYTES + INDEXER_FP8_BYTES), "bf16": 61 * (MLA_BF16_BYTES + INDEXER_FP8_BYTES)},
          {"fp8": MLA_FP8_BYTES + INDEXER_FP8_BYTES, "bf16": MLA_BF16_BYTES + INDEXER_FP8_BYTES}, 64,
          689 * 10**9, V32_EXPERT_BYTES,
          "61 layers x (MLA + indexer K)", V32_SOURCE + " (same architecture as V3.2-Exp)"),
    Model("zai-org/GLM-5", 78, 6144, 32, 128, 2048, 1, 1, 202752,
          {"fp8": 78 * (MLA_FP8_BYTES + INDEXER_FP8_BYTES), "bf16": 78 * (MLA_BF16_BYTES + INDEXER_FP8_BYTES)},
          {"fp8": MLA_FP8_BYTES + INDEXER_FP8_BYTES, "bf16": MLA_BF16_BYTES + INDEXER_FP8_BYTES}, 64,
          756 * 10**9, 75 * 256 * 3 * 6144 * 2048 * 4097 // 4096,
          "78 layers x (MLA + indexer K)",
          "zai-org/GLM-5-FP8 config.json (as quoted in vLLM/SGLang tests): 78 layers (3 dense), hidden 6144, "
          "kv_lora 512, rope 64, index_n_heads 32, index_head_dim 128, index_topk 2048, 256 experts top-8, "
          "1 MTP layer; 744B parameters, FP8 checkpoint about 756 GB",
          ("GLM-5-FP8", "zai-org/GLM-5-FP8")),
    Model("deepseek-ai/DeepSeek-V4-Flash", 43, 4096, 64, 128, 512, 4, 1, 1048576,
          {"fp8": V4_FLASH_KV_BYTES, "bf16": V4_FLASH_KV_BYTES}, {"fp8": 0, "bf16": 0}, 256,
          round(148.66 * GIB), V4_FLASH_EXPERT_BYTES,
          "3,915 B per token from the page layout + 1.59 GiB per request, fitted to a vLLM 0.25.0 log",
          V4_FLASH_SOURCE, kv_bytes_per_request=V4_FLASH_REQUEST_BYTES),
    Model("deepseek-ai/DeepSeek-V4-Pro", 61, 7168, 64, 128, 1024, 4, 1, 1048576,
          {"fp8": V4_PRO_KV_BYTES, "bf16": V4_PRO_KV_BYTES}, {"fp8": 0, "bf16": 0}, 256,
          865 * 10**9, 61 * 384 * 3 * 7168 * 3072 * 17 // 32,
          "5,609 B per token from the page layout + V4-Flash's per-request state x 62/44 layers (estimate)",
          "deepseek-ai/DeepSeek-V4-Pro config.json: 61 layers, hidden 7168, index_topk 1024, 384 experts top-6 "
          "(FP4), moe_intermediate 3072, 1 MTP layer, 1.6T / 49B parameters; checkpoint about 865 GB",
          kv_bytes_per_request=V4_PRO_REQUEST_BYTES),
    Model("deepseek-ai/DeepSeek-V4.1-Flash", 43, 4096, 64, 128, 512, 4, 1, 1048576,
          {"fp8": V41_FLASH_KV_BYTES, "bf16": V41_FLASH_KV_BYTES}, {"fp8": 0, "bf16": 0}, 256,
          round(148.66 * GIB), V4_FLASH_EXPERT_BYTES,
          "assumed: 896 B/token derived from the seed's KV tables (no public config)",
          "no public config: V4-Flash's shape is assumed (vLLM PR #62860 runs it at max-model-len 1048576); "
          "KV bytes per token derived from the seed's measured KV cache per rank"),
]


def model_from_config(name: str, source: str, ratios: tuple[int, ...], num_hidden_layers: int, hidden_size: int,
                      index_n_heads: int, index_head_dim: int, index_topk: int, num_nextn_predict_layers: int,
                      n_routed_experts: int, moe_intermediate_size: int, first_k_dense_replace: int, vocab_size: int,
                      max_position_embeddings: int) -> Model:
    """A Model from a config.json's numbers (weights estimated from its shape)."""
    layers, hidden = num_hidden_layers, hidden_size
    request_bytes = 0
    if ratios:  # DeepSeek V4 layout: pages per ratio; per-request state scaled from V4-Flash by the layer count
        per_block = sum(V4_RATIO4_BLOCK_BYTES if r == 4 else V4_RATIO128_BLOCK_BYTES if r == 128 else 0
                        for r in ratios[:layers])
        kv = {"fp8": per_block // V4_BLOCK_TOKENS, "bf16": per_block // V4_BLOCK_TOKENS}
        request_bytes = V4_FLASH_REQUEST_BYTES * len(ratios) // V4_FLASH_STATE_LAYERS
        mtp_kv = {"fp8": 0, "bf16": 0}
        block, compress = V4_BLOCK_TOKENS, 4
    else:
        kv = {"fp8": layers * (MLA_FP8_BYTES + INDEXER_FP8_BYTES), "bf16": layers * (MLA_BF16_BYTES + INDEXER_FP8_BYTES)}
        mtp_kv = {"fp8": MLA_FP8_BYTES + INDEXER_FP8_BYTES, "bf16": MLA_BF16_BYTES + INDEXER_FP8_BYTES}
        block, compress = 64, 1
    expert_bytes = (layers - first_k_dense_replace) * n_routed_experts * 3 * hidden * moe_intermediate_size
    dense_bytes = layers * 40 * hidden * hidden // 16 + 2 * vocab_size * hidden * 2  # attention + shared FP8; BF16 embeddings
    return Model(
        name=name, num_layers=layers, hidden_size=hidden, index_n_heads=index_n_heads, index_head_dim=index_head_dim,
        index_topk=index_topk, kv_compress_ratio=compress, mtp_layers=num_nextn_predict_layers,
        max_position_embeddings=max_position_embeddings or 163840,
        kv_bytes_per_token=kv, mtp_kv_bytes_per_token=mtp_kv, kv_block_size=block,
        checkpoint_bytes=expert_bytes + dense_bytes, routed_expert_bytes=expert_bytes,
        kv_note="derived from config.json", source=source, kv_bytes_per_request=request_bytes)
