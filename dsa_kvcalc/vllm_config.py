"""What vLLM's config takes that the recipe accepts without modelling it: the closed sets of values its keys take, as
vLLM declares them, and the arguments and nested keys that do not change memory per rank (accepted and ignored)."""

from dsa_kvcalc import engine as engines

CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
# vllm==0.33.0 vllm/config/cache.py:44-66 (CacheDType); the sparse-MLA backends take auto, bfloat16, float16 and the
# fp8 and DS-MLA ones (vllm/v1/attention/backends/mla/*sparse*.py supported_kv_cache_dtypes); the rest is refused
# there, and so by plan, with the reason.
KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla",
                   "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "octave_k3v4",
                   "octave_k3v3", "octave_k3v3_compact", "ultraquant_4bit", "int4_per_token_head",
                   "int8_per_token_head", "fp8_per_token_head", "nvfp4", "nvfp4_4over6")
SPECULATIVE_METHODS = tuple(sorted(engines.VLLM_RULES["speculative_methods"].initial
                                   | {m for change in engines.VLLM_RULES["speculative_methods"].changes
                                      for m in change.value}))
PERFORMANCE_MODES = ("balanced", "interactivity", "throughput")  # vllm==0.33.0 vllm/config/vllm.py:147
ALL2ALL_BACKENDS = ("naive", "pplx", "deepep_high_throughput", "deepep_low_latency", "deepep_v2", "mori_high_throughput",
                    "mori_low_latency", "moonep", "nixl_ep", "allgather_reducescatter", "flashinfer_all2allv",
                    "flashinfer_nvlink_two_sided", "flashinfer_nvlink_one_sided", "passthrough")
# The sparse-MLA backends (vLLM's AttentionBackendEnum) and the release that first has each (line of
# vllm/v1/attention/backends/registry.py there); none is removed up to 0.33.0. DeepSeek-V4's and V4.1's own are
# picked by their model code (vllm==0.33.0 vllm/models/deepseek_v41/nvidia/model.py:201-258).
SPARSE_MLA_BACKEND_FIRST = {
    "FLASHMLA_SPARSE": ("0.19.0", 73), "FLASHINFER_MLA_SPARSE": ("0.19.0", 66), "ROCM_AITER_MLA_SPARSE": ("0.19.0", 57),
    "FLASH_ATTN_MLA_SPARSE": ("0.25.0", 98), "FLASH_ATTN_MLA_SPARSE_FA4": ("0.33.0", 131),
    "FLASHINFER_MLA_SPARSE_SM120": ("0.24.0", 76), "FLASHINFER_MLA_SPARSE_SM90": ("0.30.0", 86),
    "FLASHMLA_SPARSE_DSV4": ("0.23.0", 80), "FLASHINFER_MLA_SPARSE_DSV4": ("0.23.0", 83),
    "FLASHMLA_SPARSE_DSV41": ("0.30.0", 110), "FLASHMLA_MEGA_ATTN_DSV41": ("0.31.0", 117),
    "FLASHINFER_MLA_SPARSE_DSV41": ("0.30.0", 113),
}
SPARSE_MLA_BACKENDS = tuple(SPARSE_MLA_BACKEND_FIRST)
# vLLM arguments and nested config fields that come and go: (first release, last release or None, source). A recipe
# that gives one outside its releases is one vLLM's parser refuses (an unrecognized argument; pydantic's unexpected
# keyword argument for a config class's field).
RELEASE_KEYS = {
    "sparse-indexer-topk-backend": ("0.30.0", None, "vllm==0.30.0 vllm/engine/arg_utils.py:513-515, 1681 (KernelConfig; "
                                                    "vllm==0.29.0 has no such argument)"),
    "attention-config.use_fp4_indexer_cache": ("0.22.0", "0.29.0", "vllm==0.22.0 vllm/config/attention.py:50 to "
                                                                   "vllm==0.29.0 :67-123 (deprecated there); no field "
                                                                   "in vllm==0.30.0"),
    "attention-config.indexer_kv_dtype": ("0.24.0", None, "vllm==0.24.0 vllm/config/attention.py:55 (vllm==0.33.0 :93)"),
    "attention-config.indexer_sparse_logits": ("0.31.0", None, "vllm==0.31.0 vllm/config/attention.py:89 "
                                                               "(vllm==0.33.0 :100)"),
}
# Values of those that come later than their key: key -> {value: (first release, source)}
RELEASE_VALUES = {
    "attention-config.indexer_kv_dtype": {"auto": ("0.28.0", "vllm==0.28.0 vllm/config/attention.py:16 IndexerKVDType "
                                                             "(bf16, fp8, mxfp4, nvfp4 before: vllm==0.27.0 :13)")},
}
# Nested keys vLLM takes that do not change memory per rank: accepted and ignored.
IGNORED_NESTED = {
    "speculative-config": {"model", "draft_tensor_parallel_size", "disable_padded_drafter_batch", "quantization",
                           "rejection_sample_method", "draft_sample_method"},
    "compilation-config": {"level", "mode", "pass_config", "custom_ops", "compile_sizes", "use_inductor",
                           "splitting_ops", "backend"},
    "attention-config": {"use_prefill_decode_attention", "flash_attn_version", "use_cudnn_prefill",
                         "use_trtllm_ragged_deepseek_prefill", "use_trtllm_attention", "disable_flashinfer_prefill",
                         "disable_flashinfer_q_quantization", "flash_attn_max_num_splits_for_cuda_graph"},
    "engram-config": {"dp_shared_memory"},
    "env": set(),
    "memory": set(),
}
# vLLM arguments accepted and ignored: they do not change memory per rank.
IGNORED_KEYS = {
    "host", "port", "api-key", "served-model-name", "trust-remote-code", "tokenizer", "tokenizer-mode", "revision",
    "tool-call-parser", "reasoning-parser", "enable-auto-tool-choice", "chat-template", "disable-log-requests",
    "disable-log-stats", "enable-log-requests", "uvicorn-log-level", "max-log-len", "seed", "dtype", "quantization",
    "load-format", "download-dir", "block-size", "enable-chunked-prefill", "data-parallel-rpc-port",
    "data-parallel-size-local", "data-parallel-address", "data-parallel-start-rank", "data-parallel-hybrid-lb",
    "data-parallel-external-lb", "api-server-count", "distributed-executor-backend", "enable-eplb", "eplb-config",
    "model-impl", "disable-custom-all-reduce", "stream-interval", "swap-space", "hf-overrides", "model-tag",
    "generation-config", "override-generation-config", "enable-dbo", "kv-transfer-config", "kv-events-config",
    "enable-sleep-mode", "max-seq-len-to-capture", "scheduling-policy", "long-prefill-token-threshold",
    "max-num-partial-prefills", "tokenizer-pool-size", "limit-mm-per-prompt", "mm-processor-cache-gb", "task",
    "runner", "convert", "ssl-keyfile", "ssl-certfile", "root-path", "middleware", "allowed-origins",
    "response-role", "return-tokens-as-token-ids", "enable-server-load-tracking", "otlp-traces-endpoint",
    "collect-detailed-traces", "structured-outputs-config", "guided-decoding-backend", "logprobs-mode",
    "max-logprobs", "disable-cascade-attn", "safetensors-load-strategy", "enable-force-include-usage",
    "enable-prompt-tokens-details", "calculate-kv-scales", "optimization-level", "moe-backend",
}

