"""The recipe's keys, each declared once: a field of Recipe with its type, default, bounds, source and help, the way
vLLM declares CacheConfig. A default that depends on the GPU, the model or the vLLM release is a declared function of
them (default_from; the longer ones in defaults.py), and so is each derived field (derive). Each memory term is a key
of kind memory, per backend or not; each engine argument a vLLM log gives is a key that says where (args_line,
config_field). The loader (values.py), the defaults (recipe.resolve), `--set` (overrides.py), sweep's `--vary`, the
schema (schema.py), the serve line (vllm_args.py), calibrate and the log reader read that one declaration.
"""

import difflib
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields

from dsa_kvcalc import defaults
from dsa_kvcalc import engine as engines
from dsa_kvcalc.catalog import BACKENDS, DEEPGEMM_RELEASES, Gpu, Layout, Model, layout_for
from dsa_kvcalc.engine import Engine
from dsa_kvcalc.units import GIB, MIB
from dsa_kvcalc.vllm_config import ALL2ALL_BACKENDS, CUDAGRAPH_MODES, KV_CACHE_DTYPES, PERFORMANCE_MODES, \
    SPARSE_MLA_BACKENDS, SPECULATIVE_METHODS


class RecipeError(Exception):
    def __init__(self, key: str, problem: str):
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


class Refusal(RecipeError):
    """A recipe vLLM would refuse to start (its own checks at start-up, found before planning): one line, as any
    RecipeError, and the exit code of every refusal (cli.REFUSED)."""


@dataclass(frozen=True)
class Key:
    name: str  # as vLLM spells it; nested keys dotted: speculative-config.num_speculative_tokens
    kind: str  # model, gpu, int, size, fraction, bool, choice, version, sizes, memory
    default: object = None  # None: derived by default_from, or none (the help says how)
    help: str = ""
    source: str = ""
    minimum: float = 0
    maximum: float = math.inf
    choices: tuple[str, ...] = ()
    # The default where the recipe gives none, from the values as they resolve (with the Gpu, the Model, the Engine)
    default_from: Callable | None = None
    # What vLLM runs in place of the value given or defaulted, where another key decides it; applied last
    override: Callable | None = None
    means_default: tuple = ()  # values that ask for the default, as vLLM spells them (max-model-len -1 or auto)
    per_backend: bool = False  # a memory term measured per top-k backend (a number, or one per backend)
    # A log's "non-default args" line gives it, under vLLM's argument name (the top-level key, underscored)
    args_line: bool = False
    config_field: str = ""  # its name in the engine config a vLLM log prints ("... with config: max_seq_len=...")


def key(*args, **kwargs):
    return field(metadata={"key": Key(*args, **kwargs)})


ARG_UTILS = "vllm/engine/arg_utils.py"
MAX_PARALLEL = 1024
MAX_TOKENS = 1 << 31  # int32 token counts in vLLM's scheduler


@dataclass(frozen=True)
class Recipe:
    """A serving recipe, every value resolved. Fields declared with key() are recipe keys; the rest are derived: by
    their declared function (derive), or by resolve()."""

    model: Model = key("model", "model", help="Catalog name (Hugging Face id or its last part), or a local "
                                               "config.json or model directory (required)", args_line=True,
                       config_field="model")
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
                        choices=tuple(DEEPGEMM_RELEASES), default_from=lambda v: v["engine"].default_deepgemm)
    max_num_seqs: int = key("max-num-seqs", "int", None, "Maximum sequences per step; default: vLLM's for the GPU's "
                            "memory and the vLLM version", ARG_UTILS, 1, 1 << 20,
                            default_from=defaults.max_num_seqs, args_line=True)
    max_model_len: int = key("max-model-len", "size", None, "Context length (8192, 128k, 1M; -1 or auto: the "
                             "model's maximum, the default)", ARG_UTILS, 1, MAX_TOKENS,
                             default_from=lambda v: v["model"].max_position_embeddings,
                             means_default=(-1, "-1", "auto"), args_line=True, config_field="max_seq_len")
    max_num_batched_tokens: int = key("max-num-batched-tokens", "size", None, "Tokens per step; default: vLLM's for "
                                      "the GPU's memory and the vLLM version", ARG_UTILS, 1, MAX_TOKENS,
                                      default_from=defaults.max_num_batched_tokens, args_line=True)
    num_speculative_tokens: int = key("speculative-config.num_speculative_tokens", "int", 0,
                                      "Draft tokens per step: each decode has 1 + k rows", minimum=0, maximum=64,
                                      args_line=True)
    speculative_method: str | None = key("speculative-config.method", "choice", None,
                                         "mtp (or deepseek_mtp) adds the MTP layers' KV cache, dspark DeepSeek-V4's "
                                         "draft layers'; the methods the vLLM release accepts",
                                         "vllm/config/speculative.py", choices=SPECULATIVE_METHODS, args_line=True)
    tensor_parallel_size: int = key("tensor-parallel-size", "int", 1, "TP size", minimum=1, maximum=MAX_PARALLEL,
                                    args_line=True, config_field="tensor_parallel_size")
    data_parallel_size: int = key("data-parallel-size", "int", 1, "DP size", minimum=1, maximum=MAX_PARALLEL,
                                  args_line=True, config_field="data_parallel_size")
    pipeline_parallel_size: int = key("pipeline-parallel-size", "int", 1, "PP size: the layers split over stages "
                                      "as vLLM splits them (get_pp_indices), drafts on the last; the stage with the "
                                      "fewest blocks decides", "vllm/distributed/utils.py", minimum=1,
                                      maximum=MAX_PARALLEL, args_line=True)
    enable_expert_parallel: bool = key("enable-expert-parallel", "bool", False,
                                       "Split the routed experts over TP x DP ranks", args_line=True)
    all2all_backend: str = key("all2all-backend", "choice", "allgather_reducescatter",
                               "MoE all-to-all; deepep_low_latency or nixl_ep with DP > 1 and expert parallelism default "
                               "max-num-batched-tokens to 256", "vllm/config/parallel.py", choices=ALL2ALL_BACKENDS)
    performance_mode: str = key("performance-mode", "choice", "balanced",
                                "throughput doubles the default max-num-seqs and max-num-batched-tokens; interactivity "
                                "captures every batch size up to 32", ARG_UTILS, choices=PERFORMANCE_MODES)
    decode_context_parallel_size: int = key("decode-context-parallel-size", "int", 1,
                                            "DCP size: splits the KV cache; the top-k then reads FP32",
                                            minimum=1, maximum=MAX_PARALLEL, args_line=True,
                                            config_field="decode_context_parallel_size")
    gpu_memory_utilization: float = key("gpu-memory-utilization", "fraction", None,
                                        "Share of total GPU memory vLLM may use; default: the vLLM version's",
                                        default_from=lambda v: v["engine"].default_gpu_memory_utilization,
                                        args_line=True)
    kv_cache_dtype: str = key("kv-cache-dtype", "choice", "auto",
                              "KV cache dtype; any fp8 becomes fp8_ds_mla on FlashMLA-sparse; auto is the model's "
                              "default (on SM10x: GLM-5.x fp8 from vLLM 0.32.0, GLM-5.3-Flash from 0.33.0)",
                              choices=KV_CACHE_DTYPES, args_line=True, config_field="kv_cache_dtype")
    kv_cache_memory_bytes: int | None = key("kv-cache-memory-bytes", "size", None,
                                            "Fixed KV cache size per rank; replaces the memory profile",
                                            ARG_UTILS, 1, 1 << 50, args_line=True)
    num_gpu_blocks_override: int | None = key("num-gpu-blocks-override", "int", None,
                                              "KV-cache blocks per rank, whatever memory is left (replaces the memory "
                                              "profile's, as kv-cache-memory-bytes does)",
                                              "vllm==0.33.0 vllm/v1/core/kv_cache_planning.py:243-247, 1510-1530 "
                                              "(vllm==0.19.0 vllm/v1/core/kv_cache_utils.py:825-833)", 1, MAX_TOKENS,
                                              args_line=True)
    attention_backend: str | None = key("attention-backend", "str", None,
                                        "Sparse-MLA backend; default: vLLM's priority for the GPU and cache dtype "
                                        "(FlashInfer's keeps standard fp8 at 576 B, FlashMLA's fp8_ds_mla 656 B)",
                                        "vllm/platforms/cuda.py:94-143", choices=SPARSE_MLA_BACKENDS,
                                        default_from=lambda v: v["attention_config_backend"], args_line=True)
    attention_config_backend: str | None = key("attention-config.backend", "choice", None,
                                               "The attention backend, as --attention-config spells it (the same as "
                                               "attention-backend)", choices=SPARSE_MLA_BACKENDS)
    indexer_kv_dtype: str = key("attention-config.indexer_kv_dtype", "choice", "auto",
                                "The sparse indexer's cache: auto or fp8 (132 B an entry), mxfp4 (68 B; DeepSeek-V4 "
                                "from vLLM 0.27.0, V4.1)", "vllm/config/attention.py", choices=("auto", "fp8", "mxfp4"),
                                override=lambda v: "mxfp4" if v["use_fp4_indexer_cache"] else v["indexer_kv_dtype"])
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
                                 "vllm/config/vllm.py:583-605", args_line=True)
    enable_prefix_caching: bool = key("enable-prefix-caching", "bool", True,
                                      "Prefix caching, vLLM's default: a hybrid model's KDA states then keep 2 + k "
                                      "blocks a request (mamba_cache_mode align; + 1 with FlashKDA from vLLM 0.32.0), "
                                      "1 + k without it (none)",
                                      "vllm==0.33.0 vllm/engine/arg_utils.py:3045, 3075-3076 (on where the model "
                                      "supports it); vllm/model_executor/models/config.py:763-784 (MambaModelConfig)",
                                      override=lambda v: v["enable_prefix_caching"]
                                      and not v["no_enable_prefix_caching"], args_line=True)
    no_enable_prefix_caching: bool = key("no-enable-prefix-caching", "bool", False,
                                         "vLLM's spelling of enable-prefix-caching false: true turns prefix caching "
                                         "off",
                                         "vllm==0.33.0 vllm/utils/argparse_utils.py:653-657 (a YAML flag)")
    topk_backend: str = key("sparse-indexer-topk-backend", "choice", "auto",
                            "The indexer top-k backend vLLM is told to use", choices=tuple(b.name for b in BACKENDS),
                            override=lambda v: v["engine"].topk_backend or (
                                v["kernel_config_topk_backend"] if v["topk_backend"] == "auto" else None)
                            or v["topk_backend"])
    kernel_config_topk_backend: str | None = key(
        "kernel-config.sparse_indexer_topk_backend", "choice", None,
        "The top-k backend as --kernel-config spells it; sparse-indexer-topk-backend other than auto wins",
        "vllm==0.33.0 vllm/engine/arg_utils.py:2804-2805", choices=tuple(b.name for b in BACKENDS))
    enforce_eager: bool = key("enforce-eager", "bool", False, "No CUDA graphs", args_line=True,
                              config_field="enforce_eager")
    cudagraph_mode: str = key("compilation-config.cudagraph_mode", "choice", "FULL_AND_PIECEWISE",
                              "Which steps run as CUDA graphs (NONE under enforce-eager)", choices=CUDAGRAPH_MODES,
                              override=lambda v: "NONE" if v["enforce_eager"] else v["cudagraph_mode"], args_line=True)
    max_cudagraph_capture_size: int | None = key("compilation-config.max_cudagraph_capture_size", "int", None,
                                                 "Largest captured batch, in tokens; default: vLLM's rule",
                                                 minimum=0, maximum=MAX_TOKENS, args_line=True)
    cudagraph_capture_sizes: tuple[int, ...] = key("compilation-config.cudagraph_capture_sizes", "sizes", (),
                                                   "Captured batch sizes, in tokens; default: vLLM's grid",
                                                   minimum=1, maximum=MAX_TOKENS, args_line=True)
    prefill_budget_mb: int = key("env.VLLM_SPARSE_INDEXER_MAX_LOGITS_MB", "int", 512,
                                 "The indexer's prefill logits budget, MiB", "vllm/envs.py", 1, 1 << 20)
    weights_bytes: int | None = key("memory.weights", "memory", None, "Measured weights per rank")
    peak_activation_bytes: int | None = key("memory.peak_activation", "memory", None,
                                            "Measured peak activation of the profile run (before #62860)")
    non_torch_bytes: int | None = key("memory.non_torch", "memory", None, "Measured non-torch memory per rank")
    cudagraph_bytes: dict = key("memory.cudagraph", "memory", {}, "Measured CUDA-graph memory (a number for the "
                                "recipe's backend, or one per backend)", per_backend=True)
    indexer_headroom_bytes: dict = key("memory.indexer_headroom", "memory", {}, "How far the profile run's peak "
                                       "sits above what is live inside the indexer: the #62860 reservation raises "
                                       "the peak only beyond it (a number for every backend, or one per backend)",
                                       per_backend=True)
    unprofiled_bytes: int | None = key("memory.unprofiled", "memory", None,
                                       "What a step finds taken at run time besides the terms plan derives, net of "
                                       "the profile's unused peak (negative: a credit); calibrate measures it from a "
                                       "CUDA out-of-memory message", minimum=-(1 << 50))
    memory_gpu: str | None = key("memory.gpu", "str", None, "The GPU the memory terms were measured on (default: "
                                 "the recipe file's gpu)")
    memory_rest: str | None = key("memory.rest", "choice", None, "The one term that is not measured itself but what a "
                                  "measured sum leaves after plan's estimates of the others (printed as estimated)",
                                  choices=("weights", "peak_activation", "non_torch"))

    # Derived
    # what vLLM runs for kv-cache-dtype: the model's default for auto
    cache_dtype: str = field(metadata={"derive": defaults.cache_dtype})
    engine: Engine = field(metadata={"derive": defaults.engine})
    layout: Layout = field(metadata={"derive": lambda v: layout_for(v["deepgemm"], v["gpu"])})
    ignored_keys: tuple[str, ...] = ()
    passthrough: tuple[tuple[str, object], ...] = ()  # the ignored keys (dotted when nested) with their values
    model_arg: str = ""  # the model as vLLM is given it: the catalog's Hugging Face id, or the path as written
    measured_on: "Recipe | None" = None  # the recipe the memory block was measured on, where this one differs
    given: frozenset = frozenset()  # the fields the recipe gives: the others took their defaults
    notes: tuple[str, ...] = ()  # what reading it noted: a name planned as another checkpoint, an image's tag
    fit_max_model_len: bool = False  # max-model-len -1 or auto: vLLM fits it to the KV memory (planning.fitted)
    spelled: tuple[tuple[str, str], ...] = ()  # (key, as the recipe spells it) where they differ: a refusal names it so

    @property
    def measured(self) -> bool:
        """Does the memory block give any measured term?"""
        return any(getattr(self, f) for f in MEMORY_FIELDS)

    @property
    def reserves_decode_logits(self) -> bool:
        """Does this release's profile run reserve the decode worst case: the DSA indexer's from vLLM #62860, the
        kpool indexer's (GLM-5.3-Flash) by its own profile branch: the engine rule its indexer names?"""
        return getattr(self.engine, self.model.indexer.reservation_rule)

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
    def kept_capture_sizes(self) -> list[int]:
        """The given cudagraph_capture_sizes vLLM keeps: those up to max_num_batched_tokens (vllm==0.33.0
        vllm/config/vllm.py:2565-2571, the same since vllm==0.19.0)."""
        return [size for size in self.cudagraph_capture_sizes if size <= self.max_num_batched_tokens]

    @property
    def quantized_cache(self) -> bool:
        return self.cache_dtype not in ("auto", "bfloat16", "float16")

    @functools.cached_property
    def shape(self) -> dict:
        """resolved(), flat (dotted keys), worked out once: a sweep compares every point with one measured recipe."""
        return {key: shown_value(getattr(self, field_name), named)
                for key, (field_name, named) in SHAPE_FIELDS.items()}

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
        return nested((parent, leaf, shown_value(getattr(self, field_name), named))
                      for field_name, parent, leaf, named in RESOLVED_PATHS)


def shown_value(value, named: bool):
    """A resolved key's value as resolved() shows it: a catalog entry by its name, a tuple as a list."""
    if named:
        return value.name
    return list(value) if isinstance(value, tuple) else value


def nested(items) -> dict:
    """(parent, leaf, value) as a mapping, each value under its parent's mapping (at the top where parent is "")."""
    out: dict = {}
    for parent, leaf, value in items:
        (out.setdefault(parent, {}) if parent else out)[leaf] = value
    return out


def flatten_keys(values: dict) -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}: the one flatten (Recipe.flat, sweep rows, plan's CSV, compare's columns)."""
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict):
            for inner, leaf in flatten_keys(value).items():
                flat[f"{key}.{inner}"] = leaf
        else:
            flat[f"{key}"] = value
    return flat


KEYS = {f.name: f.metadata["key"] for f in fields(Recipe) if "key" in f.metadata}
DERIVED = {f.name: f.metadata["derive"] for f in fields(Recipe) if "derive" in f.metadata}
BY_NAME = {k.name: name for name, k in KEYS.items()}
# Recipe.resolved's keys, split once: (field, parent, leaf, a catalog entry shown by its name); a sweep resolves
# every point.
RESOLVED_PATHS = tuple((name, *k.name.rpartition(".")[::2], k.kind in ("model", "gpu"))
                       for name, k in KEYS.items() if k.kind != "memory")
# Recipe.shape's dotted keys in the order flatten_keys(resolved()) gives them, each with its field and whether it
# shows a catalog entry by name: resolved()'s nesting of those, flattened once
SHAPE_FIELDS = flatten_keys(nested((parent, leaf, (name, named)) for name, parent, leaf, named in RESOLVED_PATHS))
# Versions are read as the text written: YAML would read vllm-version 0.30 as the number 0.3, deepgemm 2.10 as 2.1.
TEXT_KEYS = {k.name for k in KEYS.values() if k.kind in ("version", "release")}
NESTED = ("speculative-config", "compilation-config", "attention-config", "engram-config", "kernel-config", "env",
          "memory")
MEMORY_TERMS = {k.name.removeprefix("memory."): k for k in KEYS.values() if k.kind == "memory"}  # weights -> its Key
MEMORY_FIELDS = [name for name, k in KEYS.items() if k.kind == "memory"]  # weights_bytes, ...
MEMORY_UNITS = {"gib": GIB, "bytes": 1}  # a memory block gives each term as NAME_gib or NAME_bytes


def memory_unit(name: str) -> tuple[str, str | None]:
    """A memory block's key as its term and unit (weights_gib: weights, gib); a name without a unit as it is."""
    term, underscore, unit = name.rpartition("_")
    return (term, unit) if underscore and unit in MEMORY_UNITS else (name, None)


def canonical(name: str) -> str:
    """A top-level key as vLLM's CLI spells it: dashes (YAML configs may use underscores)."""
    return name.replace("_", "-")


def suggestion(name: str, known, prefix: str = "") -> str:
    """' (did you mean X?)' for the known name closest to a typo, else nothing: one hint, the same on every path
    (a recipe file, --set, --command, sweep's --vary); prefix: how the names are written (-- on a command line)."""
    close = difflib.get_close_matches(name.removeprefix(prefix), [k.removeprefix(prefix) for k in known], n=1)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def shown(name) -> str:
    return name if isinstance(name, str) and name.isprintable() else repr(name)
