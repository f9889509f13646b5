"""The recipe: a `vllm serve --config` YAML plus dsa-kvcalc's own keys, validated here and only here.

Every problem is a RecipeError naming the key; everything past load_recipe() trusts the Recipe it gets.
"""

import difflib
import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from dsa_kvcalc.catalog import (
    BACKENDS, DEEPGEMM_RELEASES, DEFAULT_DEEPGEMM, GIB, GPUS, INDEXER_FP8_BYTES, LAYOUTS, MIB, MLA_BF16_BYTES,
    MLA_FP8_BYTES, MODELS, V4_BLOCK_TOKENS, V4_FLASH_REQUEST_BYTES, V4_FLASH_STATE_LAYERS, V4_RATIO4_BLOCK_BYTES,
    V4_RATIO128_BLOCK_BYTES, Gpu, Layout, Model)


class RecipeError(Exception):
    def __init__(self, key: str, problem: str):
        super().__init__(f"{key}: {problem}")
        self.key = key


@dataclass(frozen=True)
class Key:
    name: str
    kind: str  # int, size, fraction, bool, choice, str, dict
    default: object
    help: str
    minimum: int = 1
    choices: tuple[str, ...] = ()


CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla")
ENGINES = ("vllm", "deepinfer")

# vLLM engine arguments that change the answer, with vLLM's defaults (vllm/engine/arg_utils.py, vllm/config/*.py).
VLLM_KEYS = [
    Key("max-num-seqs", "int", None, "Maximum sequences per step; vLLM's default: 1024 on GPUs with >= 70 GiB, else 256"),
    Key("max-model-len", "size", None, "Context length (accepts 128k, 1M, auto); default: the model's maximum"),
    Key("max-num-batched-tokens", "size", None, "Tokens per step; vLLM's default: 8192 on GPUs with >= 70 GiB, else 2048"),
    Key("speculative-config", "dict", None, "{num_speculative_tokens, method}: MTP speculation adds decode rows"),
    Key("tensor-parallel-size", "int", 1, "TP size"),
    Key("data-parallel-size", "int", 1, "DP size"),
    Key("pipeline-parallel-size", "int", 1, "PP size (only 1 is modelled)"),
    Key("enable-expert-parallel", "bool", False, "Split the routed experts over TP x DP ranks"),
    Key("decode-context-parallel-size", "int", 1, "DCP size: splits the KV cache; the top-k then reads FP32"),
    Key("gpu-memory-utilization", "fraction", 0.92, "Share of total GPU memory vLLM may use"),
    Key("kv-cache-dtype", "choice", "auto", "KV cache dtype; any fp8 becomes fp8_ds_mla on FlashMLA-sparse",
        choices=KV_CACHE_DTYPES),
    Key("kv-cache-memory-bytes", "size", None, "Fixed KV cache size per rank; replaces the memory profile"),
    Key("sparse-indexer-topk-backend", "choice", "auto", "The indexer top-k backend vLLM is told to use",
        choices=tuple(b.name for b in BACKENDS)),
    Key("enforce-eager", "bool", False, "No CUDA graphs"),
    Key("compilation-config", "dict", None,
        "{cudagraph_mode, max_cudagraph_capture_size, cudagraph_capture_sizes}: how many decode rows' logits the "
        "CUDA-graph pool holds"),
]

OWN_KEYS = [
    Key("model", "str", None, "Catalog name (Hugging Face id or its last part), or a local config.json or model directory"),
    Key("gpu", "choice", None, "GPU name", choices=tuple(g.name for g in GPUS)),
    Key("deepgemm", "str", DEFAULT_DEEPGEMM, "DeepGEMM release whose logits layout applies (2.1 - 2.6, 2.8)"),
    Key("engine", "choice", "vllm", "vllm, or deepinfer (sizes the logits by its own rule)", choices=ENGINES),
    Key("env", "dict", None, "{VLLM_SPARSE_INDEXER_MAX_LOGITS_MB: prefill logits budget, default 512}"),
    Key("memory", "dict", None,
        "Measured per-rank terms that replace the estimates: weights, peak_activation, non_torch, cudagraph "
        "(a number, or one per backend), indexer_headroom (number or per backend); each as NAME_gib or NAME_bytes"),
]

# vLLM arguments accepted and ignored: they do not change memory per rank.
IGNORED_VLLM_KEYS = {
    "host", "port", "api-key", "served-model-name", "trust-remote-code", "tokenizer", "tokenizer-mode", "revision",
    "tool-call-parser", "reasoning-parser", "enable-auto-tool-choice", "chat-template", "disable-log-requests",
    "disable-log-stats", "enable-log-requests", "uvicorn-log-level", "max-log-len", "seed", "dtype", "quantization",
    "load-format", "download-dir", "block-size", "enable-prefix-caching", "no-enable-prefix-caching",
    "enable-chunked-prefill", "async-scheduling", "attention-backend", "all2all-backend", "data-parallel-rpc-port",
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
    "enable-prompt-tokens-details", "calculate-kv-scales", "performance-mode", "optimization-level",
}

SPECULATIVE_KEYS = {"num_speculative_tokens", "method", "model", "draft_tensor_parallel_size",
                    "disable_padded_drafter_batch", "quantization", "rejection_sample_method"}
COMPILATION_KEYS = {"cudagraph_mode", "max_cudagraph_capture_size", "cudagraph_capture_sizes", "level", "mode",
                    "pass_config", "custom_ops", "compile_sizes", "use_inductor", "splitting_ops"}
ENV_KEYS = {"VLLM_SPARSE_INDEXER_MAX_LOGITS_MB"}
MEMORY_TERMS = ("weights", "peak_activation", "non_torch", "cudagraph", "indexer_headroom")
PER_BACKEND_TERMS = ("cudagraph", "indexer_headroom")
DEFAULT_PREFILL_BUDGET_MB = 512  # VLLM_SPARSE_INDEXER_MAX_LOGITS_MB, vllm/envs.py


@dataclass(frozen=True)
class Memory:
    """Measured per-rank terms (bytes); None where the estimate stands. Per-backend terms map backend -> bytes."""

    weights_bytes: int | None = None
    peak_activation_bytes: int | None = None
    non_torch_bytes: int | None = None
    cudagraph_bytes: dict[str, int] = field(default_factory=dict)
    indexer_headroom_bytes: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Recipe:
    model: Model
    gpu: Gpu
    layout: Layout
    deepgemm: str
    engine: str
    max_num_seqs: int
    max_model_len: int
    max_num_batched_tokens: int
    num_speculative_tokens: int
    speculative_method: str | None
    tensor_parallel_size: int
    data_parallel_size: int
    enable_expert_parallel: bool
    decode_context_parallel_size: int
    gpu_memory_utilization: float
    kv_cache_dtype: str
    kv_cache_memory_bytes: int | None
    topk_backend: str
    cudagraph_mode: str  # NONE under enforce-eager
    max_cudagraph_capture_size: int | None  # None: vLLM's default
    cudagraph_capture_sizes: tuple[int, ...]  # empty: vLLM's default grid
    prefill_budget_bytes: int
    memory: Memory
    ignored_keys: tuple[str, ...]

    @property
    def kv_cache_format(self) -> str:
        return "bf16" if self.kv_cache_dtype in ("auto", "bfloat16") else "fp8"

    def resolved(self) -> dict:
        """The recipe as vLLM would run it: every value resolved, in vLLM's key spelling."""
        return {
            "model": self.model.name,
            "gpu": self.gpu.name,
            "deepgemm": self.deepgemm,
            "engine": self.engine,
            "max-num-seqs": self.max_num_seqs,
            "max-model-len": self.max_model_len,
            "max-num-batched-tokens": self.max_num_batched_tokens,
            "speculative-config": {"num_speculative_tokens": self.num_speculative_tokens,
                                   "method": self.speculative_method},
            "tensor-parallel-size": self.tensor_parallel_size,
            "data-parallel-size": self.data_parallel_size,
            "enable-expert-parallel": self.enable_expert_parallel,
            "decode-context-parallel-size": self.decode_context_parallel_size,
            "gpu-memory-utilization": self.gpu_memory_utilization,
            "kv-cache-dtype": self.kv_cache_dtype,
            "kv-cache-memory-bytes": self.kv_cache_memory_bytes,
            "sparse-indexer-topk-backend": self.topk_backend,
            "compilation-config": {"cudagraph_mode": self.cudagraph_mode,
                                   "max_cudagraph_capture_size": self.max_cudagraph_capture_size,
                                   "cudagraph_capture_sizes": list(self.cudagraph_capture_sizes) or None},
            "env": {"VLLM_SPARSE_INDEXER_MAX_LOGITS_MB": self.prefill_budget_bytes // MIB},
        }


ALL_KEYS = {k.name: k for k in VLLM_KEYS + OWN_KEYS}


def canonical(name: str) -> str:
    return name.replace("_", "-") if isinstance(name, str) else name


def parse_size(key: str, value) -> int:
    """vLLM's human_readable_int: 1k = 1000, 1K = 1024 (lower case decimal, upper case binary)."""
    if isinstance(value, bool):
        raise RecipeError(key, f"expected a whole number, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        match = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgtKMGT])", text)
        if match:
            number, suffix = match.groups()
            if suffix.islower():
                return int(float(number) * 1000 ** "kmgt".index(suffix) * 1000)
            if "." in number:
                raise RecipeError(key, f"binary suffixes take whole numbers, got {value!r}")
            return int(number) * 1024 ** ("KMGT".index(suffix) + 1)
        if re.fullmatch(r"-?\d+", text):
            return int(text)
    raise RecipeError(key, f"expected a whole number such as 8192, 128k or 1M, got {value!r}")


def check_value(key: Key, value):
    name = key.name
    if key.kind in ("int", "size"):
        number = parse_size(name, value) if key.kind == "size" else value
        if key.kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
            raise RecipeError(name, f"expected a whole number, got {value!r}")
        if number < key.minimum:
            raise RecipeError(name, f"must be at least {key.minimum}, got {number}")
        return number
    if key.kind == "fraction":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise RecipeError(name, f"must be a number in (0, 1], got {value!r}")
        return float(value)
    if key.kind == "bool":
        if not isinstance(value, bool):
            raise RecipeError(name, f"expected true or false, got {value!r}")
        return value
    if key.kind == "choice":
        match = {c.lower(): c for c in key.choices}.get(str(value).lower()) if isinstance(value, str) else None
        if match is None:
            raise RecipeError(name, f"unknown value {value!r}; expected one of: {', '.join(key.choices)}")
        return match
    if key.kind == "str":
        if not isinstance(value, str) or not value.strip():
            raise RecipeError(name, f"expected a name, got {value!r}")
        return value.strip()
    if isinstance(value, str):  # vLLM's CLI takes these as JSON strings
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise RecipeError(name, f"not valid JSON: {error.msg}") from None
    if not isinstance(value, dict):
        raise RecipeError(name, f"expected a mapping, got {value!r}")
    return value


def check_backends(names: list[str], known: tuple[str, ...] = tuple(b.name for b in BACKENDS)) -> list[str]:
    """--backend values: each one a known top-k backend."""
    for name in names:
        if name not in known:
            raise RecipeError("--backend", f"unknown backend {name!r}; known: {', '.join(known)}")
    return names


GPU_NAMES = {n.lower(): gpu for gpu in GPUS for n in (gpu.name, *gpu.aliases)}
MODEL_NAMES = {n.lower(): model for model in MODELS for n in (model.name, model.name.split("/")[-1], *model.aliases)}


def find_gpu(name: str) -> Gpu:
    gpu = GPU_NAMES.get(name.strip().lower())
    if gpu is None:
        raise RecipeError("gpu", f"unknown GPU {name!r}; known: {', '.join(g.name for g in GPUS)}")
    return gpu


def find_model(name: str, recipe_dir: Path) -> Model:
    model = MODEL_NAMES.get(name.strip().lower())
    if model is not None:
        return model
    path = (recipe_dir / name).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        return model_from_hf_config(path)
    known = ", ".join(m.name.split("/")[-1] for m in MODELS)
    raise RecipeError("model", f"unknown model {name!r} (not in the catalog, not a config.json); known: {known}")


@functools.cache  # a sweep builds the recipe once per point: read the file once
def model_from_hf_config(path: Path) -> Model:
    """A Hugging Face config.json of a DSA model, turned into a catalog entry (weights estimated from its shape)."""
    try:
        config = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RecipeError("model", f"cannot read {path}: {error}") from None
    if not isinstance(config, dict):
        raise RecipeError("model", f"{path} is not a config.json object")
    needed = ("num_hidden_layers", "hidden_size", "index_n_heads", "index_head_dim", "index_topk")
    missing = [k for k in needed if not isinstance(config.get(k), int) or config[k] <= 0]
    if missing:
        raise RecipeError("model", f"{path} is not a DSA model config: no positive {', '.join(missing)}")
    layers = config["num_hidden_layers"]
    hidden = config["hidden_size"]
    ratios = config.get("compress_ratios")
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
    experts = config.get("n_routed_experts") or 0
    moe_layers = layers - (config.get("first_k_dense_replace") or 0)
    expert_bytes = moe_layers * experts * 3 * hidden * (config.get("moe_intermediate_size") or 0)
    vocab = config.get("vocab_size") or 0
    dense_bytes = layers * 40 * hidden * hidden // 16 + 2 * vocab * hidden * 2  # attention + shared, FP8; BF16 embeddings
    return Model(
        name=config.get("_name_or_path") or str(path), num_layers=layers, hidden_size=hidden,
        index_n_heads=config["index_n_heads"], index_head_dim=config["index_head_dim"],
        index_topk=config["index_topk"], kv_compress_ratio=compress,
        mtp_layers=config.get("num_nextn_predict_layers") or 0,
        max_position_embeddings=config.get("max_position_embeddings") or 163840,
        kv_bytes_per_token=kv, mtp_kv_bytes_per_token=mtp_kv, kv_block_size=block,
        checkpoint_bytes=expert_bytes + dense_bytes, routed_expert_bytes=expert_bytes,
        kv_note="derived from config.json", source=str(path), kv_bytes_per_request=request_bytes)


def read_memory(raw: dict) -> Memory:
    values: dict[str, object] = {}
    for name, value in raw.items():
        term, unit = re.fullmatch(r"(.*?)(?:_(gib|bytes))?", str(name)).groups()
        key = f"memory.{name}"
        if term not in MEMORY_TERMS or unit is None:
            raise RecipeError(key, f"unknown memory term; expected one of "
                                   f"{', '.join(t + '_gib' for t in MEMORY_TERMS)} (or _bytes)")
        if term in values:
            raise RecipeError(key, f"{term} is given twice")
        if isinstance(value, dict) and term in PER_BACKEND_TERMS:
            backends = {b.name for b in BACKENDS}
            for backend in value:
                if backend not in backends:
                    raise RecipeError(f"{key}.{backend}", f"unknown backend; expected one of {', '.join(sorted(backends))}")
            values[term] = {b: memory_bytes(f"{key}.{b}", v, unit) for b, v in value.items()}
        else:
            values[term] = memory_bytes(key, value, unit)
    per_backend = {t: values.pop(t) for t in PER_BACKEND_TERMS if t in values}
    for term, value in per_backend.items():
        values[term] = value if isinstance(value, dict) else {"*": value}
    return Memory(**{f"{t}_bytes": v for t, v in values.items()})


def memory_bytes(key: str, value, unit: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RecipeError(key, f"expected a number of {'GiB' if unit == 'gib' else 'bytes'}, got {value!r}")
    if unit == "bytes" and not isinstance(value, int):
        raise RecipeError(key, f"bytes must be a whole number, got {value!r}")
    if value < 0:
        raise RecipeError(key, f"must not be negative, got {value}")
    return round(value * GIB) if unit == "gib" else value


def set_override(raw: dict, assignment: str) -> None:
    """--set key=value (dotted keys reach into speculative-config, compilation-config, env, memory)."""
    if "=" not in assignment:
        raise RecipeError("--set", f"expected key=value, got {assignment!r}")
    path, text = assignment.split("=", 1)
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        value = text
    set_value(raw, path, value)


def set_value(raw: dict, path: str, value) -> None:
    """Put a parsed value at a dotted key. The mappings on the way are copied: a shallow copy of raw is enough
    to leave the original untouched (sweep applies each point this way)."""
    *parents, last = [part.strip() for part in path.strip().split(".")]
    if not last:
        raise RecipeError("--set", f"no key name in {path.strip()!r}")
    node = raw
    for part in parents:
        part_key = next((k for k in node if canonical(k) == canonical(part)), canonical(part))
        child = node.get(part_key)
        if isinstance(child, str):
            child = check_value(ALL_KEYS.get(canonical(part), Key(part, "dict", None, "")), child)
        node[part_key] = child = dict(child) if isinstance(child, dict) else {}
        node = child
    for existing in [k for k in node if canonical(k) == canonical(last)]:
        del node[existing]
    node[last if parents else canonical(last)] = value


def read_yaml(path: Path) -> dict:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise RecipeError("recipe", f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise RecipeError("recipe", f"cannot read {path}: {error}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or "invalid YAML"
        raise RecipeError("recipe", f"YAML error in {path}{where}: {problem}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RecipeError("recipe", f"{path} must hold a mapping of keys to values")
    return raw


def load_recipe(path: Path, overrides: list[str] = ()) -> Recipe:
    raw = read_yaml(path)
    for assignment in overrides:
        set_override(raw, assignment)
    return build_recipe(raw, path.parent)


def build_recipe(raw: dict, recipe_dir: Path = Path(".")) -> Recipe:
    values: dict[str, object] = {}
    ignored = []
    for name, value in raw.items():
        key = canonical(name)
        shown = str(name) if str(name).isprintable() else repr(name)
        if key in values:
            raise RecipeError(shown, "given twice (as dashes and underscores)")
        if key in IGNORED_VLLM_KEYS:
            ignored.append(key)
        elif key not in ALL_KEYS:
            hint = difflib.get_close_matches(key, list(ALL_KEYS) + sorted(IGNORED_VLLM_KEYS), n=1)
            suggestion = f" (did you mean {hint[0]}?)" if hint else ""
            raise RecipeError(shown, f"unknown key{suggestion}")
        elif value is not None:
            values[key] = check_value(ALL_KEYS[key], value)
    for required in ("model", "gpu"):
        if required not in values:
            raise RecipeError(required, "missing (every recipe names a model and a GPU)")
    gpu = find_gpu(values["gpu"])
    model = find_model(values["model"], recipe_dir)
    big_gpu = gpu.total_memory_bytes >= 70 * GIB

    deepgemm = values.get("deepgemm", DEFAULT_DEEPGEMM)
    release = ".".join(str(deepgemm).split(".")[:2])
    if release not in DEEPGEMM_RELEASES:
        raise RecipeError("deepgemm", f"no known logits layout for DeepGEMM {deepgemm!r}; known: 2.1 - 2.6, 2.8")
    family = "rocm" if gpu.arch.startswith("gfx") else "sm100" if gpu.arch in ("sm100", "sm103") else "sm90"
    layout = LAYOUTS[("rocm", "rocm")] if family == "rocm" else LAYOUTS[(DEEPGEMM_RELEASES[release], family)]

    max_model_len = values.get("max-model-len", model.max_position_embeddings)
    if max_model_len == -1:
        max_model_len = model.max_position_embeddings
    if max_model_len < 1:
        raise RecipeError("max-model-len", f"must be at least 1 (or -1 / auto), got {max_model_len}")
    if max_model_len > model.max_position_embeddings:
        raise RecipeError("max-model-len", f"{max_model_len} exceeds {model.name}'s maximum of "
                                           f"{model.max_position_embeddings}")

    if values.get("engine") == "deepinfer" and max_model_len < model.kv_compress_ratio:
        raise RecipeError("max-model-len", f"{max_model_len} leaves DeepInfer no compressed key to score "
                                           f"(kv_compress_ratio {model.kv_compress_ratio})")

    spec = values.get("speculative-config", {})
    unknown = sorted(set(spec) - SPECULATIVE_KEYS)
    if unknown:
        raise RecipeError(f"speculative-config.{unknown[0]}", "unknown key")
    num_spec = spec.get("num_speculative_tokens", 0)
    if isinstance(num_spec, bool) or not isinstance(num_spec, int) or num_spec < 0:
        raise RecipeError("speculative-config.num_speculative_tokens", f"expected a whole number >= 0, got {num_spec!r}")
    method = spec.get("method")
    if method is not None and not isinstance(method, str):
        raise RecipeError("speculative-config.method", f"expected a name, got {method!r}")

    compilation = values.get("compilation-config", {})
    unknown = sorted(set(compilation) - COMPILATION_KEYS)
    if unknown:
        raise RecipeError(f"compilation-config.{unknown[0]}", "unknown key")
    mode = check_value(Key("compilation-config.cudagraph_mode", "choice", None, "", choices=CUDAGRAPH_MODES),
                       compilation.get("cudagraph_mode", "FULL_AND_PIECEWISE"))
    max_capture = compilation.get("max_cudagraph_capture_size")
    if max_capture is not None:
        max_capture = check_value(Key("compilation-config.max_cudagraph_capture_size", "int", None, "", minimum=0),
                                  max_capture)
    sizes = compilation.get("cudagraph_capture_sizes") or []
    if not isinstance(sizes, list) or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes):
        raise RecipeError("compilation-config.cudagraph_capture_sizes", f"expected a list of whole numbers >= 1, got {sizes!r}")
    if values.get("enforce-eager", False):
        mode = "NONE"

    env = values.get("env", {})
    unknown = sorted(set(env) - ENV_KEYS)
    if unknown:
        raise RecipeError(f"env.{unknown[0]}", f"unknown variable; known: {', '.join(sorted(ENV_KEYS))}")
    budget_mb = check_value(Key("env.VLLM_SPARSE_INDEXER_MAX_LOGITS_MB", "size", None, ""),
                            env.get("VLLM_SPARSE_INDEXER_MAX_LOGITS_MB", DEFAULT_PREFILL_BUDGET_MB))

    if values.get("pipeline-parallel-size", 1) != 1:
        raise RecipeError("pipeline-parallel-size", "only 1 is modelled (the KV layers per rank would change)")

    return Recipe(
        model=model, gpu=gpu, layout=layout, deepgemm=release, engine=values.get("engine", "vllm"),
        max_num_seqs=values.get("max-num-seqs", 1024 if big_gpu else 256),
        max_model_len=max_model_len,
        max_num_batched_tokens=values.get("max-num-batched-tokens", 8192 if big_gpu else 2048),
        num_speculative_tokens=num_spec, speculative_method=method,
        tensor_parallel_size=values.get("tensor-parallel-size", 1),
        data_parallel_size=values.get("data-parallel-size", 1),
        enable_expert_parallel=values.get("enable-expert-parallel", False),
        decode_context_parallel_size=values.get("decode-context-parallel-size", 1),
        gpu_memory_utilization=values.get("gpu-memory-utilization", 0.92),
        kv_cache_dtype=values.get("kv-cache-dtype", "auto"),
        kv_cache_memory_bytes=values.get("kv-cache-memory-bytes"),
        topk_backend=values.get("sparse-indexer-topk-backend", "auto"),
        cudagraph_mode=mode, max_cudagraph_capture_size=max_capture, cudagraph_capture_sizes=tuple(sorted(set(sizes))),
        prefill_budget_bytes=budget_mb * MIB,
        memory=read_memory(values.get("memory", {})),
        ignored_keys=tuple(ignored),
    )


def json_schema() -> dict:
    """The recipe's JSON Schema (draft 2020-12), for editors."""
    def schema(key: Key) -> dict:
        if key.kind == "int":
            return {"type": "integer", "minimum": key.minimum}
        if key.kind == "size":
            return {"anyOf": [{"type": "integer", "minimum": key.minimum},
                              {"type": "string", "pattern": r"^(\d+(\.\d+)?[kmgt]|\d+[KMGT]|auto|-?\d+)$"}]}
        if key.kind == "fraction":
            return {"type": "number", "exclusiveMinimum": 0, "maximum": 1}
        if key.kind == "bool":
            return {"type": "boolean"}
        if key.kind == "choice":
            return {"enum": list(key.choices)}
        if key.kind == "str":
            return {"type": "string"}
        return {"anyOf": [{"type": "object"}, {"type": "string"}]}

    properties = {}
    for key in VLLM_KEYS + OWN_KEYS:
        entry = schema(key) | {"description": key.help}
        if key.default is not None:
            entry["default"] = key.default
        properties[key.name] = entry
        properties[key.name.replace("-", "_")] = {"$ref": f"#/properties/{key.name}"}
    properties["speculative-config"] |= {"anyOf": [{"type": "object", "properties": {
        "num_speculative_tokens": {"type": "integer", "minimum": 0}, "method": {"type": "string"}}}, {"type": "string"}]}
    properties["compilation-config"] |= {"anyOf": [{"type": "object", "properties": {
        "cudagraph_mode": {"enum": list(CUDAGRAPH_MODES)},
        "max_cudagraph_capture_size": {"type": "integer", "minimum": 0},
        "cudagraph_capture_sizes": {"type": "array", "items": {"type": "integer", "minimum": 1}}}}, {"type": "string"}]}
    properties["env"] |= {"anyOf": [{"type": "object", "additionalProperties": False, "properties": {
        "VLLM_SPARSE_INDEXER_MAX_LOGITS_MB": {"type": "integer", "minimum": 1, "default": DEFAULT_PREFILL_BUDGET_MB}}}]}
    number = {"type": "number", "minimum": 0}
    per_backend = {"anyOf": [number, {"type": "object", "additionalProperties": number}]}
    properties["memory"] |= {"anyOf": [{"type": "object", "additionalProperties": False, "properties": {
        f"{term}_{unit}": per_backend if term in PER_BACKEND_TERMS else number
        for term in MEMORY_TERMS for unit in ("gib", "bytes")}}]}
    for name in sorted(IGNORED_VLLM_KEYS):
        properties[name] = {"description": "vLLM argument; accepted and ignored (does not change memory)"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "dsa-kvcalc recipe",
        "type": "object",
        "required": ["model", "gpu"],
        "properties": properties,
        "additionalProperties": False,
    }
