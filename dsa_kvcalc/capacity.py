"""The capacity model of shared/design/capacity-model.md, as pure arithmetic over a validated Recipe.

Reads top to bottom like the design doc: (1) the indexer's decode logits, (2) which top-k backends run,
(3) how vLLM sizes the KV cache, before and after vLLM PR #62860. Bytes and tokens are integers.
"""

import math
from dataclasses import dataclass

from dsa_kvcalc.catalog import BACKENDS, GIB, STRIDE_ALIGNMENT_BYTES, Backend, Layout
from dsa_kvcalc.recipe import Recipe, RecipeError

DTYPE_BYTES = {"bf16": 2, "fp32": 4}
FP32_BYTES = 4


def align(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


# 1. Decode logits of the DSA indexer -------------------------------------------------------------------------

def padded_columns(columns: int, layout: Layout) -> int:
    """DeepGEMM allocates [rows, padded] and returns a view of width `columns`: the row stride is `padded`."""
    stride_columns = STRIDE_ALIGNMENT_BYTES // DTYPE_BYTES[layout.logits_dtype]
    if layout.stride_rule == "lcm":
        return align(columns, math.lcm(layout.split_columns, stride_columns))
    return align(align(columns, layout.split_columns), stride_columns)


@dataclass(frozen=True)
class DecodeLogits:
    rows: int
    columns: int  # the view's width: max_model_len (vLLM) or max_model_len // kv_compress_ratio (DeepInfer)
    padded_columns: int  # the row stride
    logits_dtype: str
    logits_bytes_per_element: int  # DeepGEMM's output
    copy_bytes_per_element: int  # the FP32 copy the top-k reads (as_fp32_logits); 0 when it reads the output

    @property
    def bytes_per_element(self) -> int:
        return self.logits_bytes_per_element + self.copy_bytes_per_element

    @property
    def bytes(self) -> int:
        return self.rows * self.padded_columns * self.bytes_per_element

    @property
    def copy_bytes(self) -> int:
        return self.rows * self.padded_columns * self.copy_bytes_per_element

    @property
    def alignment_bytes(self) -> int:
        """What padding the width to whole splits and 1024-byte strides adds over [rows, columns]."""
        return self.rows * (self.padded_columns - self.columns) * self.bytes_per_element


def decode_rows(recipe: Recipe) -> int:
    """Worst-case decode rows. vLLM (#62860): min(max_num_seqs, max_num_batched_tokens) x (1 + k).
    DeepInfer's profile run: max_num_seqs x (1 + nextn)."""
    rows_per_seq = 1 + recipe.num_speculative_tokens
    if recipe.engine == "deepinfer":
        return recipe.max_num_seqs * rows_per_seq
    return min(recipe.max_num_seqs, recipe.max_num_batched_tokens) * rows_per_seq


def reads_bf16(recipe: Recipe, backend: Backend) -> bool:
    """The one predicate shared by the runtime upcast and the reservation: does the top-k read BF16 directly?
    DeepSelect does, except under decode context parallelism (DCP merges need FP32). DeepInfer keeps BF16."""
    if recipe.engine == "deepinfer":
        return True
    return backend.reads_bf16 and recipe.decode_context_parallel_size == 1


def decode_logits(recipe: Recipe, backend: Backend, rows: int) -> DecodeLogits:
    layout = recipe.layout
    columns = recipe.max_model_len
    if recipe.engine == "deepinfer":
        columns //= recipe.model.kv_compress_ratio
    logits_bytes = DTYPE_BYTES[layout.logits_dtype]
    needs_copy = layout.logits_dtype != "fp32" and not reads_bf16(recipe, backend)
    return DecodeLogits(rows, columns, padded_columns(columns, layout), layout.logits_dtype,
                        logits_bytes, FP32_BYTES if needs_copy else 0)


# 2. Top-k backends ---------------------------------------------------------------------------------------------

DEEPINFER = Backend("deepinfer", ("sm90", "sm100", "sm103"), None, True, "DeepInfer's own top-k over BF16 logits",
                    "seed: DeepInfer@774ce24 index_attn.py")


def availability(recipe: Recipe, backend: Backend) -> str | None:
    """None when the backend runs on this recipe's GPU and model, else why not."""
    if recipe.gpu.arch not in backend.archs:
        return f"needs {'/'.join(backend.archs)}; {recipe.gpu.name} is {recipe.gpu.arch}"
    if backend.topk is not None and recipe.model.index_topk not in backend.topk:
        supported = f"<= {backend.topk[-1]}" if len(backend.topk) > 8 else "/".join(map(str, backend.topk))
        return f"index_topk {recipe.model.index_topk} not supported ({supported})"
    return None


def backends_for(recipe: Recipe) -> list[Backend]:
    return [DEEPINFER] if recipe.engine == "deepinfer" else BACKENDS


# 3. KV-cache sizing (vllm/v1/worker/gpu_worker.py) ------------------------------------------------------------

# Estimates stand in where the recipe's `memory` block gives no measurement (README: "Estimates").
ACTIVATION_HIDDEN_COPIES = 24  # BF16 hidden-sized temporaries live at the dummy run's peak, per batched token
NON_TORCH_SINGLE_BYTES = 1 * GIB  # CUDA context, cuBLAS/DeepGEMM workspaces
NON_TORCH_COLLECTIVES_BYTES = GIB + GIB // 2  # NCCL and custom all-reduce buffers with TP/DP/EP
CUDAGRAPH_OTHER_BYTES = GIB + GIB // 2  # graph-pool memory besides the indexer logits (1.58 GiB in a V4-Flash log)


def capture_sizes(recipe: Recipe) -> list[int]:
    """vLLM's CUDA-graph capture sizes (vllm/config/vllm.py _set_cudagraph_sizes); empty under NONE."""
    if recipe.cudagraph_mode == "NONE":
        return []
    decode_query_len = 1 + recipe.num_speculative_tokens
    limit = recipe.max_cudagraph_capture_size
    if recipe.cudagraph_capture_sizes:
        sizes = [s for s in recipe.cudagraph_capture_sizes if s <= recipe.max_num_batched_tokens]
        return sorted(s for s in sizes if limit is None or s <= limit)
    extra = []
    if limit is None:
        ceiling = 1024 if recipe.gpu.arch in ("sm100", "sm103") else 512
        limit = min(recipe.max_num_seqs * decode_query_len * 2, ceiling)
        if decode_query_len > 1:  # request counts n x (1 + k), n on the same grid
            requests = min(recipe.max_num_seqs, ceiling)
            counts = grid(requests) + [requests]
            extra = [n * decode_query_len for n in counts if n * decode_query_len <= limit]
    limit = min(limit, recipe.max_num_batched_tokens)
    sizes = grid(limit)
    if recipe.max_num_batched_tokens <= limit:
        sizes.append(recipe.max_num_batched_tokens)
    return sorted({s for s in sizes + extra if s <= recipe.max_num_batched_tokens})


def grid(limit: int) -> list[int]:
    return [n for n in (1, 2, 4) if n <= limit] + list(range(8, min(limit + 1, 256), 8)) + list(range(256, limit + 1, 16))


def cudagraph_logits_rows(recipe: Recipe) -> int:
    """Decode rows whose logits the graph pool holds: the largest FULL graph of a uniform decode batch
    (a multiple of 1 + k tokens), at most the decode worst case."""
    if recipe.cudagraph_mode not in ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"):
        return 0
    worst = decode_rows(recipe)
    per_seq = 1 + recipe.num_speculative_tokens
    return next((s for s in reversed(capture_sizes(recipe)) if s <= worst and s % per_seq == 0), 0)


@dataclass(frozen=True)
class Term:
    bytes: int
    measured: bool  # from the recipe's memory block (a vLLM log), else estimated


@dataclass(frozen=True)
class RankMemory:
    requested_bytes: int  # total x gpu-memory-utilization
    weights: Term
    peak_activation: Term  # the dummy run's torch peak with only the prefill logits budget reserved
    non_torch: Term
    kv_bytes_per_token: int
    kv_bytes_per_request: int  # fixed state per request (DeepSeek V4's windows and compressor states), else 0


@dataclass(frozen=True)
class OomRisk:
    """An unfixed vLLM's eager, piecewise or mixed steps allocate the decode logits from what the KV cache left."""
    free_bytes: int  # assumed: total x (1 - gpu-memory-utilization)
    bytes_per_decode: int  # one sequence's (1 + k) rows at the padded width, FP32 copy included
    max_decodes: int
    at_risk: bool  # fewer than max-num-seqs concurrent decodes fit


@dataclass(frozen=True)
class BackendPlan:
    backend: str
    available: bool
    reason: str  # why not available, or a note
    selected: bool  # the recipe's sparse-indexer-topk-backend
    decode_logits: DecodeLogits
    prefill_budget_bytes: int
    reserved_bytes: int  # the profile run's reservation after #62860
    reserved_bytes_before_fix: int
    cudagraph_logits_rows: int
    cudagraph_logits_bytes: int
    cudagraph: Term
    indexer_headroom_bytes: int
    peak_activation_bytes: int  # after #62860: the base peak raised by what the reservation adds
    kv_cache_bytes: int
    kv_cache_tokens: int
    max_concurrency: float
    kv_cache_bytes_before_fix: int
    kv_cache_tokens_before_fix: int
    oom_before_fix: OomRisk


@dataclass(frozen=True)
class Plan:
    recipe: Recipe
    memory: RankMemory
    backends: list[BackendPlan]

    def backend(self, name: str) -> BackendPlan:
        return next(b for b in self.backends if b.backend == name)


def rank_memory(recipe: Recipe) -> RankMemory:
    model, measured = recipe.model, recipe.memory
    expert_ranks = recipe.tensor_parallel_size * (recipe.data_parallel_size if recipe.enable_expert_parallel else 1)
    weights = ((model.checkpoint_bytes - model.routed_expert_bytes) // recipe.tensor_parallel_size
               + model.routed_expert_bytes // expert_ranks)
    activation = (recipe.prefill_budget_bytes
                  + recipe.max_num_batched_tokens * model.hidden_size * 2 * ACTIVATION_HIDDEN_COPIES)
    parallel = recipe.tensor_parallel_size * recipe.data_parallel_size > 1
    non_torch = NON_TORCH_SINGLE_BYTES + (NON_TORCH_COLLECTIVES_BYTES if parallel else 0)
    kv_per_token = model.kv_bytes_per_token[recipe.kv_cache_format]
    if recipe.num_speculative_tokens and recipe.speculative_method in (None, "mtp", "deepseek_mtp"):
        kv_per_token += model.mtp_layers * model.mtp_kv_bytes_per_token[recipe.kv_cache_format]
    return RankMemory(
        requested_bytes=math.ceil(recipe.gpu.total_memory_bytes * recipe.gpu_memory_utilization),
        weights=term(measured.weights_bytes, weights),
        peak_activation=term(measured.peak_activation_bytes, activation),
        non_torch=term(measured.non_torch_bytes, non_torch),
        kv_bytes_per_token=kv_per_token, kv_bytes_per_request=model.kv_bytes_per_request)


def term(measured: int | None, estimate: int) -> Term:
    return Term(estimate, False) if measured is None else Term(measured, True)


def kv_tokens(recipe: Recipe, memory: RankMemory, kv_bytes: int) -> int:
    """vLLM's "GPU KV cache size". One uniform group (MLA models): whole blocks. Several groups (DeepSeek V4): max
    concurrency x max_model_len, a request holding max_model_len tokens plus its fixed state. DCP spreads each
    sequence over its ranks."""
    kv_bytes = max(kv_bytes, 0) * recipe.decode_context_parallel_size
    if memory.kv_bytes_per_request:
        request_bytes = memory.kv_bytes_per_token * recipe.max_model_len + memory.kv_bytes_per_request
        return kv_bytes * recipe.max_model_len // request_bytes
    block_bytes = recipe.model.kv_block_size * memory.kv_bytes_per_token
    return kv_bytes // block_bytes * recipe.model.kv_block_size


def kv_bytes_for(recipe: Recipe, memory: RankMemory, tokens: int) -> int:
    """The KV-cache bytes per rank behind a logged "GPU KV cache size" (kv_tokens backwards, to the byte)."""
    request_bytes = memory.kv_bytes_per_token * recipe.max_model_len + memory.kv_bytes_per_request
    return tokens * request_bytes // (recipe.max_model_len * recipe.decode_context_parallel_size)


def plan(recipe: Recipe, only: set[str] | None = None) -> Plan:
    """Every backend, or those named in `only` (a sweep computes only the backends it shows)."""
    memory = rank_memory(recipe)
    if memory.weights.bytes + memory.non_torch.bytes >= memory.requested_bytes:
        key = "memory.weights_gib" if memory.weights.measured else "model"
        raise RecipeError(key, f"{recipe.model.name} needs {memory.weights.bytes / GIB:.1f} GiB of weights per rank; "
                               f"{recipe.gpu.name} at gpu-memory-utilization {recipe.gpu_memory_utilization} allows "
                               f"{memory.requested_bytes / GIB:.1f} GiB (shard it: tensor-parallel-size, "
                               f"enable-expert-parallel)")
    rows = decode_rows(recipe)
    graph_rows = cudagraph_logits_rows(recipe)
    backends = backends_for(recipe)
    logits = {b.name: decode_logits(recipe, b, rows) for b in backends}
    graph_logits = {name: graph_rows * dl.padded_columns * dl.bytes_per_element for name, dl in logits.items()}

    # A measured graph pool carries over to other backends: what is not indexer logits stays the same.
    measured_graphs = {recipe.topk_backend if b == "*" else b: v for b, v in recipe.memory.cudagraph_bytes.items()}
    measured_on = next(iter(measured_graphs), None)
    if recipe.cudagraph_mode == "NONE":
        graphs_other = 0
    elif measured_on in graph_logits:
        graphs_other = max(measured_graphs[measured_on] - graph_logits[measured_on], 0)
    else:
        graphs_other = CUDAGRAPH_OTHER_BYTES
    headrooms = recipe.memory.indexer_headroom_bytes
    free_at_runtime = recipe.gpu.total_memory_bytes - memory.requested_bytes
    fixed = memory.weights.bytes + memory.non_torch.bytes

    plans = []
    for backend in (b for b in backends if only is None or b.name in only):
        dl = logits[backend.name]
        reserved = max(recipe.prefill_budget_bytes, dl.bytes)
        reserved_before = recipe.prefill_budget_bytes
        if recipe.engine == "deepinfer":  # its profile run measures the decode logits: nothing is missed
            reserved = reserved_before = dl.bytes
        # A headroom measured on one backend holds for those with the same working set (the same bytes per element).
        alike = [h for b, h in headrooms.items() if b in logits and logits[b].bytes_per_element == dl.bytes_per_element]
        headroom = headrooms.get(backend.name, alike[0] if alike else headrooms.get("*", recipe.prefill_budget_bytes))
        headroom = max(headroom, recipe.prefill_budget_bytes)  # the base peak already holds the prefill budget
        peak = memory.peak_activation.bytes + max(0, reserved - headroom)
        graphs = Term(measured_graphs[backend.name], True) if backend.name in measured_graphs else Term(
            graphs_other + graph_logits[backend.name], measured_on is not None)
        if recipe.kv_cache_memory_bytes is not None:
            kv_bytes = kv_bytes_before = recipe.kv_cache_memory_bytes
        else:
            kv_bytes = memory.requested_bytes - fixed - peak - graphs.bytes
            kv_bytes_before = memory.requested_bytes - fixed - memory.peak_activation.bytes - graphs.bytes
        if recipe.engine == "deepinfer":
            kv_bytes_before = kv_bytes
        tokens = kv_tokens(recipe, memory, kv_bytes)
        per_decode = (1 + recipe.num_speculative_tokens) * dl.padded_columns * dl.bytes_per_element
        max_decodes = free_at_runtime // per_decode
        reason = availability(recipe, backend)
        plans.append(BackendPlan(
            backend=backend.name, available=reason is None, reason=reason or backend.note,
            selected=backend.name == recipe.topk_backend or recipe.engine == "deepinfer",
            decode_logits=dl, prefill_budget_bytes=recipe.prefill_budget_bytes,
            reserved_bytes=reserved, reserved_bytes_before_fix=reserved_before,
            cudagraph_logits_rows=graph_rows, cudagraph_logits_bytes=graph_logits[backend.name], cudagraph=graphs,
            indexer_headroom_bytes=headroom, peak_activation_bytes=peak,
            kv_cache_bytes=max(kv_bytes, 0), kv_cache_tokens=tokens,
            max_concurrency=round(tokens / recipe.max_model_len, 2),
            kv_cache_bytes_before_fix=max(kv_bytes_before, 0),
            kv_cache_tokens_before_fix=kv_tokens(recipe, memory, kv_bytes_before),
            oom_before_fix=OomRisk(free_at_runtime, per_decode, max_decodes,
                                   recipe.engine == "vllm" and max_decodes < recipe.max_num_seqs)))
    return Plan(recipe, memory, plans)
