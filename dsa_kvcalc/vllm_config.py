"""The closed sets of values the recipe's keys take, as vLLM declares them. The vLLM arguments the recipe accepts
without modelling them (they do not change memory per rank) are every release's own: vllm_cli.py."""

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
# The sparse-MLA backends (vLLM's AttentionBackendEnum) of the newest release (engine.py sparse_mla_backends: when
# each came); none is removed up to 0.33.0. DeepSeek-V4's and V4.1's own are picked by their model code
# (vllm==0.33.0 vllm/models/deepseek_v41/nvidia/model.py:201-258).
SPARSE_MLA_BACKENDS = tuple(sorted(engines.NEWEST.sparse_mla_backends))
# Values of vLLM config fields that come later than the field (vllm_cli.py has the arguments and fields of each
# release): key -> {value: the engine rule that says whether the release takes it}
RELEASE_VALUES = {"attention-config.indexer_kv_dtype": {"auto": "indexer_kv_dtype_auto"}}
