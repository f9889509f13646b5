"""The engine a recipe runs on, as data: vLLM at a version, or DeepInfer. The model's steps consult its profile;
nothing else compares engine names.

vLLM's rules move between releases. Each rule below has its value in the oldest release modelled and every later
change, with the release that first shipped it and the source (file:line at a commit, PR). An Engine is the value of
every rule at one version.
"""

import re
from dataclasses import dataclass, fields

OLDEST_VLLM = "0.19.0"


@dataclass(frozen=True)
class Change:
    release: str  # the first vLLM release with this value
    value: object
    source: str


@dataclass(frozen=True)
class Rule:
    initial: object  # the value in OLDEST_VLLM
    source: str
    changes: tuple[Change, ...] = ()

    def at(self, version: tuple[int, ...]) -> tuple[object, str]:
        value, source = self.initial, self.source
        for change in self.changes:
            if version >= release_tuple(change.release):
                value, source = change.value, change.source
        return value, source


def release_tuple(version: str) -> tuple[int, ...]:
    """'0.20.1.dev1+g1234' -> (0, 20, 1): the release a build belongs to."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


@dataclass(frozen=True)
class Engine:
    """What the capacity steps need to know about the engine. Version-dependent fields come from VLLM_RULES."""

    name: str  # vllm or deepinfer
    version: str
    # The decode worst case: min(max_num_seqs, max_num_batched_tokens) x (1 + k) rows (vLLM), or max_num_seqs x
    # (1 + nextn) (DeepInfer's profile run).
    rows_capped_by_batched_tokens: bool
    # DeepInfer scores compressed keys only: max_model_len // kv_compress_ratio columns, in BF16 for its own top-k.
    logits_over_compressed_keys: bool
    topk_reads_bf16: bool
    topk_backend: str | None  # DeepInfer runs its own top-k; None: the recipe's sparse-indexer-topk-backend
    # DeepInfer's profile run holds the decode logits: its KV sizing misses nothing, before or after any fix.
    profile_holds_decode_logits: bool
    reserves_decode_logits: bool  # vLLM PR #62860
    default_gpu_memory_utilization: float
    subtracts_cudagraph_estimate: bool
    # (GPU memory from, in GiB; max_num_seqs; max_num_batched_tokens), largest tier first
    batch_defaults: tuple[tuple[int, int, int], ...]
    sources: dict  # field -> where its value comes from

    @property
    def label(self) -> str:
        return f"vLLM {self.version}" if self.name == "vllm" else f"DeepInfer {self.version}"


ARG_UTILS = "vllm-project/vllm vllm/engine/arg_utils.py"

VLLM_RULES = {
    "reserves_decode_logits": Rule(
        False, "before vLLM PR #62860 the profile run reserved only VLLM_SPARSE_INDEXER_MAX_LOGITS_MB",
        (Change("0.27.0", True, "vLLM PR #62860 (317081f, merged 2026-10-28): the profiling run reserves "
                                "max(prefill budget, decode worst case)"),)),
    "default_gpu_memory_utilization": Rule(
        0.90, f"{ARG_UTILS}: gpu_memory_utilization default 0.9",
        (Change("0.20.0", 0.92, "vLLM PR #38284: default gpu_memory_utilization 0.92"),)),
    "subtracts_cudagraph_estimate": Rule(
        False, "vllm/v1/worker/gpu_worker.py: CUDA graphs captured after the KV cache is sized, not subtracted",
        (Change("0.21.0", True, "vllm/v1/worker/gpu_worker.py: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 by "
                                "default since v0.21.0"),)),
    "batch_defaults": Rule(
        ((70, 1024, 8192), (0, 256, 2048)), f"{ARG_UTILS}: OpenAI server defaults by GPU memory"),
}

NEWEST_VLLM = "0.27.0"


def vllm(version: str) -> Engine:
    key = release_tuple(version)
    values, sources = {}, {}
    for name, rule in VLLM_RULES.items():
        values[name], sources[name] = rule.at(key)
    return Engine(name="vllm", version=version, rows_capped_by_batched_tokens=True, logits_over_compressed_keys=False,
                  topk_reads_bf16=False, topk_backend=None, profile_holds_decode_logits=False, sources=sources, **values)


DEEPINFER_SOURCE = "seed (vLLM PR #62860): DeepInfer@774ce24 index_attn.py#L87, #L95, #L434-L441; model_runner.py#L444-L511"
DEEPINFER = Engine(
    name="deepinfer", version="774ce24", rows_capped_by_batched_tokens=False, logits_over_compressed_keys=True,
    topk_reads_bf16=True, topk_backend="deepinfer", profile_holds_decode_logits=True, reserves_decode_logits=True,
    default_gpu_memory_utilization=0.92, subtracts_cudagraph_estimate=True,
    batch_defaults=((70, 1024, 8192), (0, 256, 2048)),
    sources={f.name: DEEPINFER_SOURCE for f in fields(Engine) if f.name not in ("name", "version", "sources")})
