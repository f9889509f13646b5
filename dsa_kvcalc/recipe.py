"""The recipe: a `vllm serve --config` YAML plus dsa-kvcalc's own keys, validated here and only here.

Each key is declared once, as a field of Recipe with its type, default, bounds, source and help (the way vLLM
declares CacheConfig). The loader, the defaults, `--set`, sweep's `--vary` and `dsa-kvcalc schema` all read that one
declaration. Every problem is a RecipeError naming the key as the user wrote it; everything past load() trusts the
Recipe it gets.
"""

import difflib
import functools
import json
import math
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import yaml

from dsa_kvcalc import engine as engines
from dsa_kvcalc import hf_config, inputs
from dsa_kvcalc.catalog import BACKENDS, DEEPGEMM_RELEASES, GPUS, MODELS, NOPE_SPARSE_MLA_BACKENDS, UNSUPPORTED_GPUS, \
    Gpu, Layout, Model, layout_for
from dsa_kvcalc.engine import Engine
from dsa_kvcalc.units import GIB, MIB

RECIPE_MAX_BYTES = 1 << 20  # a recipe is a few hundred bytes; anything this large is not one
# A vLLM release as written (0.34.0, v0.20.1.dev1+g1234): numbers of at most 6 digits and a tag of at most 64
# characters, so that no part is too long to convert (Python reads no int of over 4,300 digits)
VERSION = r"v?\d{1,6}\.\d{1,6}(\.\d{1,6})?([.+\-]?\w[\w.+\-]{0,63})?"


class RecipeError(Exception):
    def __init__(self, key: str, problem: str):
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


@dataclass(frozen=True)
class Key:
    name: str  # as vLLM spells it; nested keys dotted: speculative-config.num_speculative_tokens
    kind: str  # model, gpu, int, size, fraction, bool, choice, version, sizes, memory
    default: object  # None: derived (the help says how)
    help: str
    source: str = ""
    minimum: float = 0
    maximum: float = math.inf
    choices: tuple[str, ...] = ()


def key(name: str, kind: str, default=None, help: str = "", source: str = "", minimum: float = 0,
        maximum: float = math.inf, choices: tuple[str, ...] = ()):
    return field(metadata={"key": Key(name, kind, default, help, source, minimum, maximum, choices)})


ARG_UTILS = "vllm/engine/arg_utils.py"
MAX_PARALLEL = 1024
MAX_TOKENS = 1 << 31  # int32 token counts in vLLM's scheduler
RELEASE_PATTERN = r"v?(\d+\.\d+)(?:\.[0-9A-Za-z.+-]*)?"  # a DeepGEMM release: 2.8, 2.8.2, v2.6.1, 2.8.x
MEMORY_TERMS = ("weights", "peak_activation", "non_torch", "cudagraph", "indexer_headroom")
PER_BACKEND_TERMS = ("cudagraph", "indexer_headroom")
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
# vllm==0.33.0 vllm/config/cache.py:44-66 (CacheDType); the sparse-MLA backends take auto, bfloat16, float16 and the
# fp8 and DS-MLA ones (vllm/v1/attention/backends/mla/*sparse*.py supported_kv_cache_dtypes); the rest is refused
# there, and so by plan, with the reason.
KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla",
                   "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "octave_k3v4",
                   "octave_k3v3", "octave_k3v3_compact", "ultraquant_4bit", "int4_per_token_head",
                   "int8_per_token_head", "fp8_per_token_head", "nvfp4", "nvfp4_4over6")
SPARSE_MLA_KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_ds_mla", "nvfp4_ds_mla")
SPECULATIVE_METHODS = tuple(sorted(engines.VLLM_RULES["speculative_methods"].initial
                                   | {m for change in engines.VLLM_RULES["speculative_methods"].changes
                                      for m in change.value}))
PERFORMANCE_MODES = ("balanced", "interactivity", "throughput")  # vllm==0.33.0 vllm/config/vllm.py:147
ALL2ALL_BACKENDS = ("naive", "pplx", "deepep_high_throughput", "deepep_low_latency", "deepep_v2", "mori_high_throughput",
                    "mori_low_latency", "moonep", "nixl_ep", "allgather_reducescatter", "flashinfer_all2allv",
                    "flashinfer_nvlink_two_sided", "flashinfer_nvlink_one_sided", "passthrough")
BATCHED_DP_ALL2ALL = ("deepep_low_latency", "nixl_ep")  # vllm==0.33.0 vllm/config/parallel.py:796-805
SPARSE_MLA_BACKENDS = ("FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE", "FLASH_ATTN_MLA_SPARSE", "FLASH_ATTN_MLA_SPARSE_FA4",
                       "FLASHINFER_MLA_SPARSE_SM120", "FLASHINFER_MLA_SPARSE_SM90", "ROCM_AITER_MLA_SPARSE",
                       # DeepSeek-V4 and V4.1's own (vllm==0.33.0 vllm/models/deepseek_v41/nvidia/model.py:201-258)
                       "FLASHMLA_SPARSE_DSV4", "FLASHINFER_MLA_SPARSE_DSV4", "FLASHMLA_SPARSE_DSV41",
                       "FLASHMLA_MEGA_ATTN_DSV41", "FLASHINFER_MLA_SPARSE_DSV41")


@dataclass(frozen=True)
class Recipe:
    """A serving recipe, every value resolved. Fields declared with key() are recipe keys; the rest are derived."""

    model: Model = key("model", "model", help="Catalog name (Hugging Face id or its last part), or a local "
                                               "config.json or model directory (required)")
    gpu: Gpu = key("gpu", "gpu", help="GPU, as the catalog or torch names it (B200, NVIDIA H200) (required)")
    engine_name: str = key("engine", "choice", "vllm", "vllm, or deepinfer (sizes the logits by its own rule)",
                           choices=("vllm", "deepinfer"))
    vllm_version: str = key("vllm-version", "version", engines.NEWEST_VLLM,
                            f"vLLM release whose rules apply: defaults, graph accounting, #62860 "
                            f"(modelled: every release from {engines.OLDEST_VLLM} to {engines.NEWEST_VLLM}, and main: "
                            f"unreleased main after #62860)")
    deepgemm: str = key("deepgemm", "release", None,
                        "DeepGEMM release whose logits layout applies (2.1 - 2.6, 2.8; 2.8.2 or 2.6.1 name theirs); "
                        "default: the one the vLLM release's wrapper documents (2.8 from 0.33.0: BF16 logits on SM100)",
                        choices=tuple(DEEPGEMM_RELEASES))
    max_num_seqs: int = key("max-num-seqs", "int", None, "Maximum sequences per step; default: vLLM's for the GPU's "
                            "memory and the vLLM version", ARG_UTILS, 1, 1 << 20)
    max_model_len: int = key("max-model-len", "size", None, "Context length (8192, 128k, 1M; -1 or auto: the "
                             "model's maximum, the default)", ARG_UTILS, 1, MAX_TOKENS)
    max_num_batched_tokens: int = key("max-num-batched-tokens", "size", None, "Tokens per step; default: vLLM's for "
                                      "the GPU's memory and the vLLM version", ARG_UTILS, 1, MAX_TOKENS)
    num_speculative_tokens: int = key("speculative-config.num_speculative_tokens", "int", 0,
                                      "Draft tokens per step: each decode has 1 + k rows", minimum=0, maximum=64)
    speculative_method: str | None = key("speculative-config.method", "choice", None,
                                         "mtp (or deepseek_mtp) adds the MTP layers' KV cache, dspark DeepSeek-V4's "
                                         "draft layers'; the methods the vLLM release accepts",
                                         "vllm/config/speculative.py", choices=SPECULATIVE_METHODS)
    tensor_parallel_size: int = key("tensor-parallel-size", "int", 1, "TP size", minimum=1, maximum=MAX_PARALLEL)
    data_parallel_size: int = key("data-parallel-size", "int", 1, "DP size", minimum=1, maximum=MAX_PARALLEL)
    pipeline_parallel_size: int = key("pipeline-parallel-size", "int", 1, "PP size: the layers split over stages "
                                      "as vLLM splits them (get_pp_indices), drafts on the last; the stage with the "
                                      "fewest blocks decides", "vllm/distributed/utils.py", minimum=1,
                                      maximum=MAX_PARALLEL)
    enable_expert_parallel: bool = key("enable-expert-parallel", "bool", False,
                                       "Split the routed experts over TP x DP ranks")
    all2all_backend: str = key("all2all-backend", "choice", "allgather_reducescatter",
                               "MoE all-to-all; deepep_low_latency or nixl_ep with DP > 1 and expert parallelism default "
                               "max-num-batched-tokens to 256", "vllm/config/parallel.py", choices=ALL2ALL_BACKENDS)
    performance_mode: str = key("performance-mode", "choice", "balanced",
                                "throughput doubles the default max-num-seqs and max-num-batched-tokens; interactivity "
                                "captures every batch size up to 32", ARG_UTILS, choices=PERFORMANCE_MODES)
    decode_context_parallel_size: int = key("decode-context-parallel-size", "int", 1,
                                            "DCP size: splits the KV cache; the top-k then reads FP32",
                                            minimum=1, maximum=MAX_PARALLEL)
    gpu_memory_utilization: float = key("gpu-memory-utilization", "fraction", None,
                                        "Share of total GPU memory vLLM may use; default: the vLLM version's")
    kv_cache_dtype: str = key("kv-cache-dtype", "choice", "auto",
                              "KV cache dtype; any fp8 becomes fp8_ds_mla on FlashMLA-sparse; auto is the model's "
                              "default (on SM10x: GLM-5.x fp8 from vLLM 0.32.0, GLM-5.3-Flash from 0.33.0)",
                              choices=KV_CACHE_DTYPES)
    kv_cache_memory_bytes: int | None = key("kv-cache-memory-bytes", "size", None,
                                            "Fixed KV cache size per rank; replaces the memory profile",
                                            ARG_UTILS, 1, 1 << 50)
    attention_backend: str | None = key("attention-backend", "str", None,
                                        "Sparse-MLA backend; default: vLLM's priority for the GPU and cache dtype "
                                        "(FlashInfer's keeps standard fp8 at 576 B, FlashMLA's fp8_ds_mla 656 B)",
                                        "vllm/platforms/cuda.py:94-143", choices=SPARSE_MLA_BACKENDS)
    attention_config_backend: str | None = key("attention-config.backend", "choice", None,
                                               "The attention backend, as --attention-config spells it (the same as "
                                               "attention-backend)", choices=SPARSE_MLA_BACKENDS)
    indexer_kv_dtype: str = key("attention-config.indexer_kv_dtype", "choice", "auto",
                                "The sparse indexer's cache: auto or fp8 (132 B an entry), mxfp4 (68 B; DeepSeek-V4 "
                                "from vLLM 0.27.0, V4.1)", "vllm/config/attention.py", choices=("auto", "fp8", "mxfp4"))
    use_fp4_indexer_cache: bool = key("attention-config.use_fp4_indexer_cache", "bool", False,
                                      "The older spelling of indexer_kv_dtype mxfp4 (DeepSeek-V4)")
    indexer_sparse_logits: bool = key("attention-config.indexer_sparse_logits", "bool", False,
                                      "DeepSeek-V4.1's candidate-block indexer logits (vLLM 0.31.0+): aligns the indexer "
                                      "pages", "vllm/config/attention.py")
    engram_cpu_offload: bool = key("engram-config.cpu_offload", "bool", True,
                                   "DeepSeek-V4.1's Engram tables in pinned host memory, vLLM's default; false puts them "
                                   "on the GPUs, split over the data-parallel ranks", "vllm/config/engram.py:37-38")
    async_scheduling: bool = key("async-scheduling", "bool", True, "Two batches in flight: sliding-window caches "
                                 "hold twice max-num-batched-tokens (vLLM 0.26+); on by default",
                                 "vllm/config/vllm.py:583-605")
    enable_prefix_caching: bool = key("enable-prefix-caching", "bool", True,
                                      "Prefix caching, vLLM's default: a hybrid model's KDA states then keep 2 + k "
                                      "blocks a request (mamba_cache_mode align; + 1 with FlashKDA from vLLM 0.32.0), "
                                      "1 + k without it (none)",
                                      "vllm==0.33.0 vllm/engine/arg_utils.py:3045, 3075-3076 (on where the model "
                                      "supports it); vllm/model_executor/models/config.py:763-784 (MambaModelConfig)")
    no_enable_prefix_caching: bool = key("no-enable-prefix-caching", "bool", False,
                                         "vLLM's spelling of enable-prefix-caching false: true turns prefix caching "
                                         "off",
                                         "vllm==0.33.0 vllm/utils/argparse_utils.py:653-657 (a YAML flag)")
    topk_backend: str = key("sparse-indexer-topk-backend", "choice", "auto",
                            "The indexer top-k backend vLLM is told to use", choices=tuple(b.name for b in BACKENDS))
    enforce_eager: bool = key("enforce-eager", "bool", False, "No CUDA graphs")
    cudagraph_mode: str = key("compilation-config.cudagraph_mode", "choice", "FULL_AND_PIECEWISE",
                              "Which steps run as CUDA graphs (NONE under enforce-eager)", choices=CUDAGRAPH_MODES)
    max_cudagraph_capture_size: int | None = key("compilation-config.max_cudagraph_capture_size", "int", None,
                                                 "Largest captured batch, in tokens; default: vLLM's rule",
                                                 minimum=0, maximum=MAX_TOKENS)
    cudagraph_capture_sizes: tuple[int, ...] = key("compilation-config.cudagraph_capture_sizes", "sizes", (),
                                                   "Captured batch sizes, in tokens; default: vLLM's grid",
                                                   minimum=1, maximum=MAX_TOKENS)
    prefill_budget_mb: int = key("env.VLLM_SPARSE_INDEXER_MAX_LOGITS_MB", "int", 512,
                                 "The indexer's prefill logits budget, MiB", "vllm/envs.py", 1, 1 << 20)
    weights_bytes: int | None = key("memory.weights", "memory", None, "Measured weights per rank")
    peak_activation_bytes: int | None = key("memory.peak_activation", "memory", None,
                                            "Measured peak activation of the profile run (before #62860)")
    non_torch_bytes: int | None = key("memory.non_torch", "memory", None, "Measured non-torch memory per rank")
    cudagraph_bytes: dict = key("memory.cudagraph", "memory", None, "Measured CUDA-graph memory (a number for the "
                                "recipe's backend, or one per backend)")
    indexer_headroom_bytes: dict = key("memory.indexer_headroom", "memory", None, "How far the profile run's peak "
                                       "sits above what is live inside the indexer: the #62860 reservation raises "
                                       "the peak only beyond it (a number for every backend, or one per backend)")
    memory_gpu: str | None = key("memory.gpu", "str", None, "The GPU the memory terms were measured on (default: "
                                 "the recipe file's gpu)")
    memory_rest: str | None = key("memory.rest", "choice", None, "The one term that is not measured itself but what a "
                                  "measured sum leaves after plan's estimates of the others (printed as estimated)",
                                  choices=("weights", "peak_activation", "non_torch"))
    # Derived
    cache_dtype: str = "auto"  # what vLLM runs for kv-cache-dtype: the model's default for auto
    engine: Engine = None
    layout: Layout = None
    ignored_keys: tuple[str, ...] = ()
    passthrough: tuple[tuple[str, object], ...] = ()  # the ignored keys (dotted when nested) with their values
    model_arg: str = ""  # the model as vLLM is given it: the catalog's Hugging Face id, or the path as written
    measured_on: "Recipe | None" = None  # the recipe the memory block was measured on, where this one differs
    given: frozenset = frozenset()  # the fields the recipe gives: the others took their defaults

    @property
    def measured(self) -> bool:
        """Does the memory block give any measured term?"""
        return any(getattr(self, f) for f, k in KEYS.items() if k.kind == "memory")

    @property
    def reserves_decode_logits(self) -> bool:
        """Does this release's profile run reserve the decode worst case: the DSA indexer's from vLLM #62860, the
        kpool indexer's (GLM-5.3-Flash) by its own profile branch?"""
        if self.model.kpool_indexer:
            return self.engine.kpool_indexer_reserves_decode_logits
        return self.engine.reserves_decode_logits

    @property
    def prefill_budget_bytes(self) -> int:
        return self.prefill_budget_mb * MIB

    @property
    def indexer_width_ratio(self) -> int:
        """The indexer scores max_model_len // this many keys: 4 for DeepSeek-V4 on vLLM (its compressed keys), 1 for
        the MLA models, the kpool indexer's pools from vLLM 0.31.0 (engine.py kpool_logits_over_pools); DeepInfer scores
        max_model_len // kv_compress_ratio."""
        if self.engine.logits_over_compressed_keys:
            return self.model.kv_compress_ratio
        if self.model.kpool_indexer and self.engine.kpool_logits_over_pools:
            return self.model.index_kpool
        return self.model.indexer_logits_ratio

    @property
    def quantized_cache(self) -> bool:
        return self.cache_dtype not in ("auto", "bfloat16", "float16")

    @functools.cached_property
    def shape(self) -> dict:
        """resolved(), flat (dotted keys), worked out once: a sweep compares every point with one measured recipe."""
        return flatten_keys(self.resolved())

    def shape_change(self, other: "Recipe") -> str:
        """What differs from this recipe in other, as keys with their two values."""
        mine, theirs = self.shape, other.shape
        return ", ".join(f"{key} {mine.get(key)} (here {theirs.get(key)})" for key in mine if mine[key] != theirs.get(key))

    def memory_block(self) -> dict:
        """The memory block as measured, in bytes and in a recipe's own keys (NAME_bytes), every term named: null
        where the recipe gives none. A per-backend term is a mapping, or one number as the recipe gave it."""
        block = {}
        for f, k in KEYS.items():
            if k.kind == "memory":
                value = getattr(self, f)
                if isinstance(value, dict):
                    value = value["*"] if list(value) == ["*"] else value or None
                block[f"{k.name.split('.', 1)[1]}_bytes"] = value
        return block | {"gpu": self.memory_gpu, "rest": self.memory_rest}

    def resolved(self) -> dict:
        """The recipe as vLLM would run it: every key resolved, in vLLM's spelling, nested as vLLM nests them."""
        out: dict = {}
        for field_name, parent, leaf, named in RESOLVED_PATHS:
            value = getattr(self, field_name)
            if named:
                value = value.name
            elif isinstance(value, tuple):
                value = list(value)
            (out.setdefault(parent, {}) if parent else out)[leaf] = value
        return out


def flatten_keys(values: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat |= flatten_keys(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


KEYS = {f.name: f.metadata["key"] for f in fields(Recipe) if "key" in f.metadata}
BY_NAME = {k.name: name for name, k in KEYS.items()}
DEFAULTS = {name: k.default for name, k in KEYS.items()}
# Recipe.resolved's keys, split once: (field, parent, leaf, a catalog entry shown by its name); a sweep resolves
# every point.
RESOLVED_PATHS = tuple((name, *k.name.rpartition(".")[::2], k.kind in ("model", "gpu"))
                       for name, k in KEYS.items() if k.kind != "memory")
# Versions are read as the text written: YAML would read vllm-version 0.30 as the number 0.3, deepgemm 2.10 as 2.1.
TEXT_KEYS = {k.name for k in KEYS.values() if k.kind in ("version", "release")}
NESTED = {"speculative-config", "compilation-config", "attention-config", "engram-config", "env", "memory"}
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


def canonical(name: str) -> str:
    """A top-level key as vLLM's CLI spells it: dashes (YAML configs may use underscores)."""
    return name.replace("_", "-")


def shown(name) -> str:
    return name if isinstance(name, str) and name.isprintable() else repr(name)


# Values ------------------------------------------------------------------------------------------------------------

def parse_size(key: str, value) -> int:
    """vLLM's human_readable_int: 1k = 1000, 1K = 1024 (lower case decimal, upper case binary)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip()
        match = re.fullmatch(r"(\d{1,12}(?:\.\d{1,12})?)([kmgtKMGT])", text)
        if match:
            number, suffix = match.groups()
            if suffix.islower():
                return int(float(number) * 1000 ** ("kmgt".index(suffix) + 1))
            if "." in number:
                raise RecipeError(key, f"binary suffixes take whole numbers, got {value!r}")
            return int(number) * 1024 ** ("KMGT".index(suffix) + 1)
        if re.fullmatch(r"-?\d{1,20}", text):
            return int(text)
    raise RecipeError(key, f"expected a whole number such as 8192, 128k or 1M, got {value!r}")


def check_bounds(name: str, number, k: Key):
    if not k.minimum <= number <= k.maximum:
        top = "" if k.maximum == math.inf else f" and at most {k.maximum:,}"
        raise RecipeError(name, f"must be at least {k.minimum:,}{top}, got {number:,}")
    return number


def check_value(name: str, k: Key, value):
    """One key's value, as the user wrote `name`; raises RecipeError."""
    if k.kind in ("int", "size"):
        if k.name == "max-model-len" and value in ("auto", "-1", -1):
            return None  # as in vLLM: the model's maximum, the default
        if k.kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
            raise RecipeError(name, f"expected a whole number, got {value!r}")
        return check_bounds(name, parse_size(name, value), k)
    if k.kind == "fraction":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise RecipeError(name, f"must be a number in (0, 1], got {value!r}")
        return float(value)
    if k.kind == "bool":
        if not isinstance(value, bool):
            raise RecipeError(name, f"expected true or false, got {value!r}")
        return value
    if k.kind == "choice":
        if value not in k.choices:  # as written: the schema's enum, one spelling per value
            raise RecipeError(name, f"unknown value {value!r}; expected one of: {', '.join(k.choices)}")
        return value
    if k.kind == "release":
        text = str(value).strip() if isinstance(value, (str, int, float)) and not isinstance(value, bool) else ""
        match = re.fullmatch(RELEASE_PATTERN, text)
        release = match.group(1) if match else None
        if release not in k.choices:
            families: dict[str, list[str]] = {}
            for known, family in DEEPGEMM_RELEASES.items():
                families.setdefault(family, []).append(known)
            layouts = ", ".join(f"{r[0]} - {r[-1]}" if len(r) > 1 else r[0] for r in reversed(families.values()))
            written = text if re.fullmatch(r"[\w.+-]+", text) else repr(value)
            raise RecipeError(name, f"no known logits layout for DeepGEMM {written}; known layouts: {layouts}")
        return release
    if k.kind == "sizes":
        if not isinstance(value, list) or any(isinstance(s, bool) or not isinstance(s, int) for s in value):
            raise RecipeError(name, f"expected a list of whole numbers, got {value!r}")
        return tuple(sorted({check_bounds(name, s, k) for s in value}))
    if k.kind == "version":
        text = str(value).strip() if isinstance(value, (str, float)) else ""
        if text.lower() == engines.MAIN:
            return engines.MAIN
        if not re.fullmatch(VERSION, text):
            raise RecipeError(name, f"expected a vLLM release such as {engines.NEWEST_VLLM}, or main, got {value!r}")
        try:
            version = engines.build_of(text.lstrip("v"))
        except ValueError as error:
            raise RecipeError(name, str(error)) from None
        if engines.release_tuple(version) < engines.release_tuple(engines.OLDEST_VLLM):
            raise RecipeError(name, f"{version} is older than the oldest modelled release, {engines.OLDEST_VLLM}")
        return version
    if not isinstance(value, str) or not value.strip():  # model, gpu, str
        raise RecipeError(name, f"expected a name, got {value!r}")
    return value.strip()


def memory_bytes(name: str, value, unit: str) -> int:
    whole = isinstance(value, int) and not isinstance(value, bool)
    if not whole and not (isinstance(value, float) and math.isfinite(value)):
        raise RecipeError(name, f"expected a number of {'GiB' if unit == 'gib' else 'bytes'}, got {value!r}")
    if unit == "bytes" and not whole:
        raise RecipeError(name, f"bytes must be a whole number, got {value!r}")
    if not 0 <= value <= (1 << 50 if unit == "bytes" else 1 << 20):
        raise RecipeError(name, f"must be between 0 and {'2^50 bytes' if unit == 'bytes' else '2^20 GiB'}, "
                                f"got {value}")
    return round(value * GIB) if unit == "gib" else value


def memory_term(name: str, value, term: str, unit: str):
    if isinstance(value, dict) and term in PER_BACKEND_TERMS:
        backends = {b.name for b in BACKENDS}
        for backend in value:
            if backend not in backends:
                raise RecipeError(f"{name}.{shown(backend)}", f"unknown backend; expected one of "
                                                              f"{', '.join(sorted(backends))}")
        return {b: memory_bytes(f"{name}.{b}", v, unit) for b, v in value.items() if v is not None}  # null: estimate
    number = memory_bytes(name, value, unit)
    return {"*": number} if term in PER_BACKEND_TERMS else number


def nested_mapping(name: str, value) -> dict:
    if isinstance(value, str):  # vLLM's CLI takes these as JSON strings
        try:
            value = json.loads(value, object_pairs_hook=hf_config.unique_keys)
        except hf_config.DuplicateKey as error:
            raise RecipeError(f"{name}.{error}", "given twice in the JSON (it would keep the last)") from None
        except json.JSONDecodeError as error:
            raise RecipeError(name, f"not valid JSON: {error.msg}") from None
        except ValueError:  # Python reads no number of over 4,300 digits
            raise RecipeError(name, "a number too long to read") from None
        except RecursionError:
            raise RecipeError(name, "nests too deeply") from None
    if not isinstance(value, dict):
        raise RecipeError(name, f"expected a mapping, got {value!r}")
    return value


# Names -> catalog entries ------------------------------------------------------------------------------------------

def gpu_key(name: str) -> str:
    """A GPU name as people, torch, vLLM and nvidia-smi write it, reduced to compare: case, separators, a vendor
    prefix and a note in brackets or after a comma ('NVIDIA H200 NVL (143,771 MiB)', 'AMD_Instinct_MI300X') aside."""
    text = re.sub(r"\(.*?\)", " ", name.lower()).split(",")[0]
    words = re.sub(r"[\s_-]+", " ", text).split()
    return " ".join(words[1:] if words[:1] in (["nvidia"], ["amd"]) else words)


GPU_NAMES = {gpu_key(n): gpu for gpu in GPUS for n in (gpu.name, *gpu.aliases)}
UNSUPPORTED_GPU_NAMES = {gpu_key(n): (name, arch) for name, (arch, spelled) in UNSUPPORTED_GPUS.items()
                         for n in (name, *spelled)}
MODEL_NAMES = {n.lower(): model for model in MODELS for n in (model.name, model.name.split("/")[-1], *model.aliases)}


def find_gpu(name: str, key: str = "gpu") -> Gpu:
    """A GPU by any of its names; '8x NVIDIA B200' and 'NVIDIA DGX Spark / GB10' as people list them too."""
    spelled = gpu_key(re.sub(r"^\s*\d{1,4}\s*x\s+", "", name))
    gpu = next((GPU_NAMES[part.strip()] for part in spelled.split(" / ") if part.strip() in GPU_NAMES), None)
    if gpu is not None:
        return gpu
    if spelled in UNSUPPORTED_GPU_NAMES:
        family, arch = UNSUPPORTED_GPU_NAMES[spelled]
        raise RecipeError(key, f"{name} ({family}, {arch}): vLLM runs DSA models only on SM90 and SM10x (SM12x from "
                               f"0.24.0): its sparse-MLA backends reject {arch}")
    close = difflib.get_close_matches(spelled, list(GPU_NAMES), n=3, cutoff=0.5)
    hint = f"; closest: {', '.join(dict.fromkeys(GPU_NAMES[c].name for c in close))}" if close else ""
    raise RecipeError(key, f"unknown GPU {shown(name)}{hint}; known: {', '.join(g.name for g in GPUS)}")


def model_config_path(name: str, recipe_dir: Path) -> Path | None:
    """The local config.json a model name points to (the file, or the folder that holds one), relative to the
    recipe's folder; None when there is none."""
    try:
        path = recipe_dir / Path(name).expanduser()
        if path.is_dir():
            path = path / "config.json"
        return path if path.is_file() else None
    except (OSError, RuntimeError) as error:  # a name too long for a path, ~nosuchuser, a folder we may not enter
        reason = error.strerror if isinstance(error, OSError) else str(error)
        raise RecipeError("model", f"not in the catalog, and not readable as a path to a config.json: {reason}") \
            from None


def find_model(name: str, recipe_dir: Path) -> Model:
    """A catalog name, the last part of a path to a checkpoint the catalog knows (/models/GLM-5.2-NVFP4), or a local
    config.json (or the folder that holds one)."""
    spelled = name.strip().lower()
    model = MODEL_NAMES.get(spelled) or MODEL_NAMES.get(spelled.rstrip("/").rsplit("/", 1)[-1])
    if model is not None:
        return model
    path = model_config_path(name, recipe_dir)
    if path is not None:
        try:
            return hf_config.read_model(path)
        except hf_config.ConfigError as error:
            raise RecipeError("model", str(error)) from None
    known = [m.name.split("/")[-1] for m in MODELS]
    close = difflib.get_close_matches(spelled.rsplit("/", 1)[-1], [k.lower() for k in known], n=1, cutoff=0.6)
    hint = f" (a variant of {next(k for k in known if k.lower() == close[0])}? its config.json decides)" if close else ""
    raise RecipeError("model", f"unknown model {shown(name)}{hint}: give model: path/to/its config.json (or the folder "
                               f"that holds it), from which plan derives the KV cache; catalog: {', '.join(known)}")


# Raw recipe -> values ------------------------------------------------------------------------------------------

def read_values(raw: dict) -> tuple[dict, dict]:
    """Every key of a raw recipe checked on its own: field name -> value, and the ignored keys (dotted when nested)
    with their values as written."""
    values: dict = {}
    seen: dict[str, str] = {}
    ignored: dict = {}
    for name, value in raw.items():
        if not isinstance(name, str):
            raise RecipeError(shown(name), "a key must be a name, not a number or a list")
        top = canonical(name)
        if top in seen:
            raise RecipeError(shown(name), f"given twice (as {seen[top]} and {name})")
        seen[top] = name
        if top in IGNORED_KEYS:
            ignored[top] = value
        elif top in NESTED:
            if value is not None:
                values |= read_nested(shown(name), top, nested_mapping(shown(name), value), ignored)
        elif top not in BY_NAME:
            hint = difflib.get_close_matches(top, [*BY_NAME, *NESTED, *IGNORED_KEYS], n=1)
            raise RecipeError(shown(name), "unknown key" + (f" (did you mean {hint[0]}?)" if hint else ""))
        elif value is not None:
            values[BY_NAME[top]] = check_value(shown(name), KEYS[BY_NAME[top]], value)
    return values, ignored


def read_nested(name: str, top: str, mapping: dict, ignored: dict) -> dict:
    values = {}
    for inner, value in mapping.items():
        path = f"{name}.{shown(inner)}"
        if not isinstance(inner, str):
            raise RecipeError(path, "a key must be a name")
        if top == "memory" and inner not in ("gpu", "rest"):
            term, unit = re.fullmatch(r"(.*?)(?:_(gib|bytes))?", inner).groups()
            if term not in MEMORY_TERMS or unit is None:
                raise RecipeError(path, f"unknown memory term; expected one of "
                                        f"{', '.join(t + '_gib' for t in MEMORY_TERMS)} (or _bytes)")
            field_name = BY_NAME[f"memory.{term}"]
            if value is None:  # null: the estimate
                continue
            if field_name in values:
                raise RecipeError(path, f"{term} is given twice, in GiB and in bytes")
            values[field_name] = memory_term(path, value, term, unit)
        elif f"{top}.{inner}" in BY_NAME:
            if value is not None:
                field_name = BY_NAME[f"{top}.{inner}"]
                values[field_name] = check_value(path, KEYS[field_name], value)
        elif inner in IGNORED_NESTED[top] or (top == "env" and not misspelt_env(inner)):
            ignored[f"{top}.{inner}"] = value
        else:
            known = sorted(k.name.split(".", 1)[1] for k in KEYS.values() if k.name.startswith(top + "."))
            raise RecipeError(path, f"unknown key; {top} takes {', '.join(known)}"
                                    + (" (each as NAME_gib or NAME_bytes)" if top == "memory" else ""))
    return values


def misspelt_env(name: str) -> bool:
    """An environment variable plan does not model is ignored, unless it is not one at all or looks like a typo of
    one it does (VLLM_SPARSE_INDEXER_MAX_LOGIT_MB)."""
    modelled = [k.name.split(".", 1)[1] for k in KEYS.values() if k.name.startswith("env.")]
    return not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or bool(difflib.get_close_matches(name, modelled, cutoff=0.8))


# Values -> Recipe ---------------------------------------------------------------------------------------------------

def resolve(values: dict, recipe_dir: Path = Path("."), ignored: dict | None = None) -> Recipe:
    """Defaults that depend on other keys (the GPU, the model, the vLLM version), then the checks across keys."""
    for required in ("model", "gpu"):
        if required not in values:
            raise RecipeError(required, "missing (every recipe names a model and a GPU)")
    gpu = find_gpu(values["gpu"])
    model = find_model(values["model"], recipe_dir)
    model_arg = model.name if values["model"].lower() in MODEL_NAMES else values["model"]
    given = frozenset(values)
    values = DEFAULTS | values | {"gpu": gpu, "model": model, "given": given}
    engine = engines.DEEPINFER if values["engine_name"] == "deepinfer" else engines.vllm(values["vllm_version"])
    if values["max_model_len"] in (None, -1):
        values["max_model_len"] = model.max_position_embeddings
    values |= batch_defaults(values, engine, gpu)
    values |= {
        "deepgemm": values["deepgemm"] or engine.default_deepgemm,
        "gpu_memory_utilization": values["gpu_memory_utilization"] or engine.default_gpu_memory_utilization,
        "cudagraph_mode": "NONE" if values["enforce_eager"] else values["cudagraph_mode"],
        "topk_backend": engine.topk_backend or values["topk_backend"],
        "cudagraph_bytes": values["cudagraph_bytes"] or {},
        "indexer_headroom_bytes": values["indexer_headroom_bytes"] or {},
        "cache_dtype": cache_dtype(values["kv_cache_dtype"], model, engine, gpu),
        "attention_backend": values["attention_backend"] or values["attention_config_backend"],
        "indexer_kv_dtype": "mxfp4" if values["use_fp4_indexer_cache"] else values["indexer_kv_dtype"],
        "enable_prefix_caching": prefix_caching(values),
    }
    ignored = ignored or {}
    recipe = Recipe(**values, engine=engine, layout=layout_for(values["deepgemm"], gpu), ignored_keys=tuple(ignored),
                    passthrough=tuple(ignored.items()), model_arg=model_arg)
    check_across(recipe)
    return recipe


def batch_defaults(values: dict, engine: Engine, gpu: Gpu) -> dict:
    """max-num-seqs and max-num-batched-tokens as vLLM defaults them (vllm==0.33.0 vllm/engine/arg_utils.py:3151-3240,
    the same steps since 0.19.0): the GPU's tier, 256 tokens for batched DP MoE, doubled by performance-mode
    throughput, then tokens <= seqs x max-model-len and seqs <= tokens."""
    seqs, tokens = values["max_num_seqs"], values["max_num_batched_tokens"]
    tier_seqs, tier_tokens = next((s, t) for floor, s, t, left_out in engine.batch_defaults
                                  if gpu.total_memory_bytes >= floor * GIB and gpu.arch not in left_out)
    batched_dp = (engine.batched_dp_moe_max_num_batched_tokens and values["enable_expert_parallel"]
                  and values["data_parallel_size"] > 1 and values["all2all_backend"] in BATCHED_DP_ALL2ALL)
    scale = 2 if values["performance_mode"] == "throughput" else 1
    if tokens is None:
        tokens = (engine.batched_dp_moe_max_num_batched_tokens if batched_dp else tier_tokens) * scale
        tokens = min((seqs or tier_seqs * scale) * values["max_model_len"], tokens)
    if seqs is None:
        seqs = min(tier_seqs * scale, tokens)
    return {"max_num_seqs": seqs, "max_num_batched_tokens": tokens}


def prefix_caching(values: dict) -> bool:
    """enable-prefix-caching, which no-enable-prefix-caching true turns off; the two may not say opposite things (vLLM
    would take the later flag)."""
    given = values["given"]
    if values["no_enable_prefix_caching"] and values["enable_prefix_caching"] and "enable_prefix_caching" in given:
        raise RecipeError("no-enable-prefix-caching", "true contradicts enable-prefix-caching: true; give one of them")
    return values["enable_prefix_caching"] and not values["no_enable_prefix_caching"]


def cache_dtype(written: str, model: Model, engine: Engine, gpu: Gpu) -> str:
    """The KV-cache dtype vLLM runs: the one written, or for auto the model's own default where its rule holds."""
    if written != "auto":
        return written
    return next((dtype for release, archs, dtype, _ in model.auto_kv_cache_dtype
                 if gpu.arch in archs and engines.release_tuple(engine.version) >= engines.release_tuple(release)),
                "auto")


def check_speculation(recipe: Recipe) -> None:
    """The method is one the release accepts, and a drafter the model has (V4.1 has no MTP layers: vllm==0.33.0
    vllm/config/speculative.py:1474-1486; DSpark drafts DeepSeek-V4 and V4.1)."""
    method = recipe.speculative_method
    if method is None or recipe.engine.name != "vllm":
        return
    if method not in recipe.engine.speculative_methods:
        raise RecipeError("speculative-config.method", f"{method} is not a method of {recipe.engine.label}; it takes "
                                                       f"{', '.join(sorted(recipe.engine.speculative_methods))}")
    drafter = "mtp" if method in engines.MTP_METHODS else method
    if drafter in ("mtp", "dspark") and drafter not in recipe.model.drafters:
        raise RecipeError("speculative-config.method", f"{recipe.model.name} has no {drafter} drafter in vLLM; its "
                                                       f"drafters: {', '.join(recipe.model.drafters)}")


def check_linear_attention(recipe: Recipe) -> None:
    """A hybrid model's caches (GLM-5.3-Flash) are derived as far as they were read in vLLM and checked against its
    planner: vLLM on SM90 and SM10x with FlashInfer's sparse MLA, one pipeline stage (vLLM balances the KDA groups
    over stages, _pp_balanced_mamba_group_count), no decode context parallelism, vLLM's block size (block-size enters
    the attention block: vllm==0.30.0 vllm/platforms/interface.py:895-901); tensor parallelism must split the KDA heads
    (vllm==0.30.0 vllm/model_executor/layers/mamba/mamba_utils.py:317-320, divide())."""
    model, gpu = recipe.model, recipe.gpu
    if not model.linear_layers:
        return
    if recipe.engine.name != "vllm":
        raise RecipeError("engine", f"{model.name}'s KV cache is derived for vLLM only")
    backend = NOPE_SPARSE_MLA_BACKENDS.get(gpu.arch)
    if backend is None:
        raise RecipeError("gpu", f"{model.name}'s KV cache is derived for SM90 and SM10x; on {gpu.name} ({gpu.arch}) "
                                 f"it is not determined (SM12x's fp8_ds_mla pages are not what its block alignment "
                                 f"sizes; ROCm builds its own indexer and ring caches)")
    if recipe.attention_backend not in (None, backend):
        raise RecipeError("attention-backend", f"{model.name} on {gpu.arch} runs {backend}; its pages under "
                                               f"{recipe.attention_backend} are not determined")
    if recipe.pipeline_parallel_size > 1:
        raise RecipeError("pipeline-parallel-size", f"{model.name} is derived for one stage: vLLM balances its KDA "
                                                    f"groups over the stages, which is not modelled")
    if recipe.decode_context_parallel_size > 1:
        raise RecipeError("decode-context-parallel-size", f"{model.name} is derived without decode context "
                                                          f"parallelism")
    if "block-size" in recipe.ignored_keys:
        raise RecipeError("block-size", f"sizes {model.name}'s attention block (128 or block-size, the larger, times "
                                        f"what a KDA state needs), which is derived for vLLM's default only: drop it")
    if model.linear_heads % recipe.tensor_parallel_size:
        raise RecipeError("tensor-parallel-size", f"{recipe.tensor_parallel_size} does not divide {model.name}'s "
                                                  f"{model.linear_heads} KDA heads (vLLM would refuse to start)")


def check_across(recipe: Recipe) -> None:
    model, gpu = recipe.model, recipe.gpu
    if recipe.max_model_len > model.max_position_embeddings:
        raise RecipeError("max-model-len", f"{recipe.max_model_len:,} exceeds {model.name}'s maximum of "
                                           f"{model.max_position_embeddings:,}")
    ratio = recipe.indexer_width_ratio
    if recipe.max_model_len < ratio:
        raise RecipeError("max-model-len", f"{recipe.max_model_len} leaves the indexer no compressed key to score "
                                           f"(it scores max-model-len // {ratio})")
    if recipe.attention_backend is not None and recipe.attention_backend not in SPARSE_MLA_BACKENDS:
        raise RecipeError("attention-backend", f"{recipe.attention_backend} is no sparse-MLA backend; DSA models run "
                                               f"on {', '.join(SPARSE_MLA_BACKENDS)}")
    if recipe.engine.name == "vllm" and engines.release_tuple(recipe.engine.version) < engines.release_tuple(
            model.first_release):
        raise RecipeError("vllm-version", f"{recipe.engine.label} predates {model.name}'s model code (vLLM "
                                          f"{model.first_release}+)")
    check_speculation(recipe)
    check_linear_attention(recipe)
    if recipe.kv_cache_memory_bytes is not None and recipe.kv_cache_memory_bytes > gpu.total_memory_bytes:
        raise RecipeError("kv-cache-memory-bytes", f"{recipe.kv_cache_memory_bytes:,} B is more than {gpu.name}'s "
                                                   f"{gpu.total_memory_bytes:,} B")
    if recipe.memory_rest is not None and getattr(recipe, f"{recipe.memory_rest}_bytes") is None:
        raise RecipeError("memory.rest", f"names {recipe.memory_rest}, which the memory block does not give")
    if recipe.measured and recipe.memory_gpu is not None and find_gpu(recipe.memory_gpu, "memory.gpu") != gpu:
        raise RecipeError("memory", f"measured on {recipe.memory_gpu}, but the recipe runs on {gpu.name}: drop the "
                                    f"memory block (or measure on {gpu.name})")


def resolve_as_written(raw: dict, values: dict, recipe_dir: Path, ignored: dict) -> Recipe:
    """resolve(), with a check across keys naming the key as the raw recipe spells it (max_model_len)."""
    try:
        return resolve(values, recipe_dir, ignored)
    except RecipeError as error:
        written = next((k for k in raw if isinstance(k, str) and canonical(k) == error.key != k), None)
        if written is None:
            raise
        raise RecipeError(written, error.problem) from None


def load(raw: dict, recipe_dir: Path = Path(".")) -> Recipe:
    values, ignored = read_values(raw)
    return resolve_as_written(raw, values, recipe_dir, ignored)


# --set and files --------------------------------------------------------------------------------------------------

def set_override(raw: dict, assignment: str) -> None:
    """--set key=value: the value as YAML reads it; dotted keys reach into the nested mappings. null restores the
    default."""
    path, equals, text = assignment.partition("=")
    if not equals:
        raise RecipeError("--set", f"expected key=value, got {assignment!r}")
    name = f"--set {path.strip()}"
    if not text.strip():
        raise RecipeError(name, "no value (null restores the default)")
    try:
        text.encode()
        value = yaml.load(text, Loader=yaml_loader())
    except UnicodeEncodeError:  # bytes that are not UTF-8 on the command line
        raise RecipeError(name, "the value is not UTF-8 text") from None
    except RecipeError as error:  # a mapping with a key given twice
        raise RecipeError(name, str(error)) from None
    except (yaml.YAMLError, RecursionError):
        value = text  # not YAML: the text itself, which the key's check then judges
    set_value(raw, path, as_written(path, text, value))


def as_written(key: str, text: str, value):
    """A version key keeps the text written where YAML reads a number: vllm-version=0.30 is not 0.3."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return text.strip() if number and canonical(key.strip()) in TEXT_KEYS else value


def set_value(raw: dict, path: str, value) -> None:
    """Put a value at a dotted key. The mappings on the way are copied: a shallow copy of raw is enough to leave
    the original untouched (sweep applies each point this way)."""
    top, *inner = [part.strip() for part in path.strip().split(".")]
    if not top or not all(inner):
        raise RecipeError("--set", f"no key name in {path.strip()!r}")
    written = next((k for k in raw if isinstance(k, str) and canonical(k) == canonical(top)), top)
    if not inner:
        raw[written] = value
        return
    if canonical(top) in BY_NAME:  # an unknown key is reported, with a suggestion, when the recipe is read
        raise RecipeError(path, f"{top} has no nested keys")
    node = raw[written] = dict(nested_mapping(top, raw.get(written) or {}))
    if top == "memory":  # one unit per term: weights_gib replaces weights_bytes; a backend's figure takes the term's
        term = re.sub(r"_(gib|bytes)$", "", inner[0])
        for other in [k for k in node if k != inner[0] and re.sub(r"_(gib|bytes)$", "", str(k)) == term]:
            if len(inner) > 1:
                raise RecipeError(path, f"the recipe gives {term} as {other}: set {'.'.join([top, other, *inner[1:]])}")
            del node[other]
    *parents, last = inner
    for part in parents:
        child = node.get(part)
        if child is not None and not isinstance(child, dict):
            raise RecipeError(path, f"{top}.{part} is {child!r}, not a mapping: set {top}.{part} instead")
        node[part] = node = dict(child or {})
    node[last] = value


def expanded_size(node, sizes: dict) -> int:
    """What a YAML node holds with its aliases expanded: nodes plus scalar characters."""
    if id(node) not in sizes:
        sizes[id(node)] = 0  # a node that holds itself counts once
        children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else \
            node.value if isinstance(node, yaml.SequenceNode) else []
        sizes[id(node)] = 1 + (len(node.value) if isinstance(node, yaml.ScalarNode) else 0) + sum(
            expanded_size(child, sizes) for child in children)
    return sizes[id(node)]


def as_text(node: yaml.ScalarNode) -> yaml.ScalarNode:
    """A copy of a scalar read as the text written (a copy: an anchored node is shared with its aliases)."""
    return yaml.ScalarNode("tag:yaml.org,2002:str", node.value, node.start_mark, node.end_mark, node.style)


def yaml_loader():
    """PyYAML's safe loader, stricter where a recipe needs it: a key given twice is an error (YAML would keep the
    last), a number has at most 100 digits, and aliases may not expand a document beyond what a recipe file holds
    (a "billion laughs" file would otherwise take all memory as soon as a value is printed)."""
    from yaml.constructor import ConstructorError

    class Loader(yaml.SafeLoader):
        def __init__(self, stream):
            super().__init__(stream)
            self.paths = {}  # id(a mapping node) -> its dotted key, to name a key given twice inside it

        def construct_document(self, node):
            if expanded_size(node, {}) > RECIPE_MAX_BYTES:
                raise ConstructorError(None, None, "its aliases expand to more than a recipe holds", node.start_mark)
            return super().construct_document(node)

        def construct_object(self, node, deep=False):
            if node.tag == "tag:yaml.org,2002:int" and len(node.value) > 100:
                raise ConstructorError(None, None, f"a number of {len(node.value)} digits", node.start_mark)
            try:
                value = super().construct_object(node, deep)
                if isinstance(value, str):
                    value.encode()
                return value
            except UnicodeEncodeError:  # "\ud800": half a UTF-16 pair, which no output can print
                raise ConstructorError(None, None, "an escape such as \\ud800 that is half a character",
                                       node.start_mark) from None
            except ValueError as error:  # a date such as 2001-13-45
                raise ConstructorError(None, None, str(error), node.start_mark) from None

        def construct_mapping(self, node, deep=False):
            self.flatten_mapping(node)  # <<: merges first, so that merged keys are checked too
            parent, names, pairs = self.paths.get(id(node)), set(), []
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode):  # a key is a name as written: `yes:` is "yes", not True
                    key_node = as_text(key_node)
                name = self.construct_object(key_node, deep=True)
                path = f"{parent}.{shown(name)}" if parent else shown(name)
                if isinstance(name, str) and name in names:
                    mark = key_node.start_mark
                    raise RecipeError(path, f"given twice (line {mark.line + 1}): YAML would keep the last")
                names.add(name if isinstance(name, str) else None)
                if isinstance(value_node, yaml.MappingNode):
                    self.paths[id(value_node)] = path
                if (isinstance(name, str) and canonical(name) in TEXT_KEYS and isinstance(value_node, yaml.ScalarNode)
                        and value_node.tag.endswith((":float", ":int"))):
                    value_node = as_text(value_node)
                pairs.append((key_node, value_node))
            node.value = pairs
            return super().construct_mapping(node, deep)
    return Loader


def read_text(path: Path) -> str:
    try:
        data = inputs.read_bytes(path, RECIPE_MAX_BYTES, "recipe")
    except inputs.Unreadable as error:
        raise RecipeError("recipe", str(error)) from None
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise RecipeError("recipe", f"{path} is not UTF-8 text") from None


def read_yaml(path: Path) -> dict:
    return yaml_mapping(read_text(path), path)


def yaml_mapping(text: str, path: Path) -> dict:
    try:
        raw = yaml.load(text, Loader=yaml_loader())
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or getattr(error, "reason", None) or "invalid YAML"
        raise RecipeError("recipe", f"YAML error in {path}{where}: {problem}") from None
    except RecursionError:
        raise RecipeError("recipe", f"{path} nests too deeply") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RecipeError("recipe", f"{path} must hold a mapping of keys to values")
    return raw


def read_recipe(path: Path, overrides: list[str] = ()) -> dict:
    """The raw recipe of a file with --set overrides: its YAML, or a launch script's `vllm serve` line. Its memory
    block was measured on the GPU the file names, whatever --set says: that is recorded as memory.gpu."""
    from dsa_kvcalc import vllm_args  # which reads the recipe's keys from this module

    text = read_text(path)
    launch_script = vllm_args.is_launch_script(text)
    raw = vllm_args.recipe_from_command(text) if launch_script else yaml_mapping(text, path)
    file_gpu = raw.get("gpu")
    for assignment in overrides:
        set_override(raw, assignment)
    if launch_script:
        check_gpu_given(raw)
    return with_memory_gpu(raw, file_gpu)


def with_memory_gpu(raw: dict, file_gpu) -> dict:
    """raw whose memory block, if it has one, names the GPU it was measured on: its own memory.gpu, else the recipe
    file's gpu (file_gpu: whatever the file gives; --set and --vary do not change it)."""
    memory = raw.get("memory")
    if isinstance(memory, dict) and memory and "gpu" not in memory and isinstance(file_gpu, str):
        return {**raw, "memory": {**memory, "gpu": file_gpu}}
    return raw


def check_gpu_given(raw: dict) -> None:
    if "gpu" not in raw:
        raise RecipeError("gpu", "missing: a vllm serve line does not name its GPU; add --set gpu=NAME (B200, "
                                 "NVIDIA H200, ...)")


def read_command(text: str, overrides: list[str] = ()) -> dict:
    """The raw recipe of a pasted `vllm serve ...` command (--command) with --set overrides."""
    from dsa_kvcalc import vllm_args  # which reads the recipe's keys from this module

    raw = vllm_args.recipe_from_command(text)
    for assignment in overrides:
        set_override(raw, assignment)
    check_gpu_given(raw)
    return raw


def load_recipe(path: Path | None, overrides: list[str] = (), command: str | None = None) -> Recipe:
    """The recipe of a file (or of a pasted command) with --set overrides. Its memory block was measured on the
    file's own recipe (with any memory.* overrides): where the other overrides change it, that is kept as
    measured_on."""
    def read(sets):
        return read_command(command, sets) if path is None else read_recipe(path, sets)

    folder = Path(".") if path is None else path.parent
    recipe = load(read(overrides), folder)
    # A memory block is measured on one GPU (memory.gpu, checked apart), and a serve line names none.
    shape_overrides = [o for o in overrides if not o.strip().startswith(("memory.", "gpu="))]
    if not recipe.measured or not shape_overrides:
        return recipe
    measured_on = load(read([o for o in overrides if o not in shape_overrides]), folder)
    return recipe if measured_on.resolved() == recipe.resolved() else replace(recipe, measured_on=measured_on)


def json_schema() -> dict:
    """The recipe's JSON Schema (draft 2020-12), for editors. Names take dashes or underscores at the top level.
    Every closed set is an enum of exactly what the loader takes. GPU names are not one: find_gpu takes them as
    torch, nvidia-smi and people write them (counts, notes in brackets), so the schema gives examples."""
    gpu_names = {"type": "string", "examples": [g.name for g in GPUS]}
    releases = sorted(DEEPGEMM_RELEASES, key=lambda r: tuple(map(int, r.split("."))))
    release_text = RELEASE_PATTERN.replace(r"(\d+\.\d+)", "(?:" + "|".join(re.escape(r) for r in releases) + ")")

    def schema(k: Key) -> dict:
        bounds = {"minimum": k.minimum} | ({} if k.maximum == math.inf else {"maximum": k.maximum})
        auto = [{"enum": [-1, "-1", "auto"]}] if k.name == "max-model-len" else []
        return {
            "int": {"type": "integer"} | bounds,
            "size": {"anyOf": [{"type": "integer"} | bounds,
                               {"type": "string", "pattern": r"^\s*(\d+(\.\d+)?[kmgt]|\d+[KMGT]|\d+)\s*$"}, *auto]},
            "fraction": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "bool": {"type": "boolean"},
            "choice": {"enum": list(k.choices)},
            "release": {"anyOf": [{"type": "string", "pattern": rf"^\s*{release_text}\s*$"},
                                  {"enum": [float(r) for r in releases]}]},
            "gpu": gpu_names,
            "sizes": {"type": "array", "items": {"type": "integer"} | bounds},
            "version": {"type": ["string", "number"]},
        }.get(k.kind, {"enum": list(k.choices)} if k.choices else gpu_names if k.name == "memory.gpu"
               else {"type": "string"})

    def described(k: Key) -> dict:
        entry = schema(k) | {"description": k.help + (f" ({', '.join(k.choices)})" if k.kind == "choice" else "")}
        return entry | ({"default": list(k.default) if isinstance(k.default, tuple) else k.default}
                        if k.default not in (None, ()) else {})

    number = {"type": "number", "minimum": 0}
    per_backend = {"anyOf": [number, {"type": "object", "propertyNames": {"enum": [b.name for b in BACKENDS]},
                                      "additionalProperties": number}]}
    nested = {top: {} for top in NESTED}
    for k in KEYS.values():
        top, _, inner = k.name.partition(".")
        if k.kind == "memory":
            for unit in ("gib", "bytes"):
                nested[top][f"{inner}_{unit}"] = per_backend if inner in PER_BACKEND_TERMS else number
        elif inner:
            nested[top][inner] = described(k)
    properties = {}
    for k in KEYS.values():
        if "." not in k.name:
            properties[k.name] = described(k)
    exclusive = {"memory": {"allOf": [{"not": {"required": [f"{term}_gib", f"{term}_bytes"]}} for term in MEMORY_TERMS],
                            "description": "Each term once: NAME_gib or NAME_bytes, never both"},
                 "env": {"propertyNames": {"pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"}}}
    for top, inner in nested.items():
        open_ = bool(IGNORED_NESTED[top]) or top == "env"
        mapping = {"type": "object", "properties": inner, "additionalProperties": open_} | exclusive.get(top, {})
        properties[top] = {"anyOf": [mapping, {"type": "string", "description": "the same mapping as JSON"}]}
    for name in IGNORED_KEYS:
        properties[name] = {"description": "vLLM argument; accepted and ignored (does not change memory)"}
    underscored = {name.replace("-", "_"): entry for name, entry in properties.items() if "-" in name}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "dsa-kvcalc recipe",
            "type": "object", "required": ["model", "gpu"], "properties": properties | underscored,
            "additionalProperties": False}
