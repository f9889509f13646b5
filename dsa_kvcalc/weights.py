"""The weights term of one rank: what GPUModelRunner.load_model leaves allocated, which vLLM logs as "Model loading
took" (the allocator's growth across the load, vllm==0.33.0 vllm/v1/worker/gpu_model_runner.py:4989-5092).

Two parts. The parameters and buffers of the model's modules come from weights.json: vLLM's own model classes built on
the meta device at each tensor-parallel size (tools/derive_weights.py, oracle/weights.py), per decoder layer, so that
they shard here as vLLM shards them:
- the routed experts over TP x DP ranks, by expert with expert parallelism, each expert's matrices without
  (vllm==0.33.0 vllm/model_executor/layers/fused_moe/config.py:1106-1114 flatten_tp_across_dp_and_pcp, 1117-1230
  FusedMoEParallelConfig.make); rank 0 takes the remainder's extra expert (expert_map_manager.py:67-69);
- the rest over TP, replicated over DP;
- the decoder layers over pipeline stages as get_pp_indices splits them (vllm/distributed/utils.py:198-241), the
  embedding on the first stage, the final norm, the LM head and the drafter on the last;
- the drafter's layers where the speculative method loads them, less the embedding and LM head the proposer shares
  with the target (vllm/v1/spec_decode/llm_base_proposer.py:1418-1585);
- DeepSeek-V4.1's Engram tables in host memory unless engram-config.cpu_offload is false, then over TP x DP.
The buffers the model's construction and its weight post-processing allocate at the serving shape follow, derived from
vLLM's code (construction_bytes). A model the build did not cover (a local config.json) falls back to its config's
shapes (hf_config.py), and so does a tensor-parallel size the build did not cover, and says so.
"""

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from dsa_kvcalc import kv_cache
from dsa_kvcalc.deployment import sparse_mla_backend
from dsa_kvcalc.engine import MTP_METHODS
from dsa_kvcalc.keys import Recipe, RecipeError
from dsa_kvcalc.kv_cache import round_up

DATA_PATH = Path(__file__).with_name("weights.json")
INT32_BYTES = 4
BF16_BYTES = 2
MLA_Q_HEAD = 576  # kv_lora_rank 512 + RoPE 64: the width FlashMLA-sparse's workspaces hold a head at
MLA_LATENT = 512


@cache
def data() -> dict:
    return json.loads(DATA_PATH.read_text())


@dataclass(frozen=True)
class RankWeights:
    parameters_bytes: int  # the modules' parameters and buffers on this rank
    construction_bytes: int  # what building and post-processing the model allocate besides
    host_bytes: int  # kept in host memory instead (V4.1's offloaded Engram tables)
    provenance: str  # derived
    source: str

    @property
    def bytes(self) -> int:
        return self.parameters_bytes + self.construction_bytes


def pp_partitions(num_layers: int, stages: int) -> list[int]:
    """Layers a stage: even, the remainder one each to the stages before the last (get_pp_indices,
    vllm==0.33.0 vllm/distributed/utils.py:225-230)."""
    partitions = [num_layers // stages] * stages
    for i in range(2, num_layers % stages + 2):
        partitions[-i] += 1
    return partitions


def local_experts(experts: int, ranks: int) -> int:
    """Rank 0's routed experts: the base share and one of the remainder (expert_map_manager.py:67-69)."""
    return experts // ranks + (1 if experts % ranks else 0)


def expert_share(total_bytes: int, entry: dict, ranks: int) -> int:
    experts = entry["shape"]["n_routed_experts"]
    return total_bytes * local_experts(experts, ranks) // experts


def stage_bytes(recipe: Recipe, entry: dict) -> list[tuple[int, int]]:
    """(parameters on the GPU, in host memory) of every pipeline stage on rank 0 of its TP x DP group."""
    tp, dp, pp = recipe.tensor_parallel_size, recipe.data_parallel_size, recipe.pipeline_parallel_size
    expert_ranks = tp * dp
    dense = entry["dense_layer_bytes"][str(tp)]
    experts = entry["expert_layer_bytes"]
    engram = entry.get("engram_layer_bytes", [0] * len(dense))
    draft = drafter(recipe, entry)
    stages, start = [], 0
    for stage, layers in enumerate(pp_partitions(len(dense), pp)):
        end = start + layers
        gpu = sum(dense[start:end]) + expert_share(sum(experts[start:end]), entry, expert_ranks)
        engram_bytes = sum(engram[start:end]) // expert_ranks
        start = end
        host = engram_bytes if recipe.engram_cpu_offload else 0
        gpu += engram_bytes - host
        if stage == 0:
            gpu += entry["embedding_bytes"][str(tp)]
        if stage == pp - 1:
            gpu += entry["head_bytes"][str(tp)]
            if draft:
                gpu += draft["dense_bytes"][str(tp)] + expert_share(draft["expert_bytes"], entry,
                                                                                    expert_ranks)
        stages.append((gpu, host))
    return stages


def drafter(recipe: Recipe, entry: dict) -> dict | None:
    """The drafter's bytes where the speculative method loads one, MTP's or DSpark's; none where vLLM builds no such
    drafter for this checkpoint (weights.json records the release's own refusal; recipe.check_speculation refuses the
    method on vLLM, another engine's profile is its own)."""
    method = "mtp" if recipe.speculative_method in MTP_METHODS else recipe.speculative_method
    found = entry["drafts"].get(method, {}) if recipe.num_speculative_tokens else {}
    return found if "dense_bytes" in found else None


def derived_weights(recipe: Recipe) -> RankWeights | None:
    """The weights of the rank that holds the most (the stage with the fewest KV blocks decides), or None for a model or
    tensor-parallel size the build did not cover (its config's shapes then stand in: memory_terms.weights_estimate)."""
    entry = data()["models"].get(recipe.model.name)
    tp = str(recipe.tensor_parallel_size)
    if entry is None or tp not in entry["dense_layer_bytes"] and tp not in entry.get("refused", {}):
        return None
    if tp in entry.get("refused", {}):
        raise RecipeError("tensor-parallel-size", f"{tp}: vLLM's model code for {recipe.model.name} refuses it "
                                                  f"({entry['refused'][tp]})")
    gpu, host = max(stage_bytes(recipe, entry))
    config = entry["config"] + (f" ({entry['config_note']})" if entry["config_note"] else "")
    source = (f"vLLM {data()['release']}'s model classes built on the meta device from {config}, sharded as vLLM "
              f"shards them (routed experts over TP x DP = {recipe.tensor_parallel_size * recipe.data_parallel_size} "
              f"ranks); construction buffers at this shape derived from vLLM's code")
    return RankWeights(gpu, construction_bytes(recipe, entry), host, "derived", source)


# What building the model allocates besides its parameters, at the serving shape ---------------------------------

def construction_bytes(recipe: Recipe, entry: dict) -> int:
    """The buffers the model allocates when built and when its weights are post-processed, on the last stage (which
    holds the drafter):
    - the shared top-k index buffer, max_num_batched_tokens x index_topk int32 (vllm==0.33.0
      vllm/models/deepseek_v32/nvidia/model.py:192-196; deepseek_v4/nvidia/model.py:848-852);
    - DeepSeek-V4 with a drafter: the MTP hidden-state buffer, max_num_batched_tokens x hc_mult x hidden BF16
      (deepseek_v4/nvidia/model.py:903-912, from 0.23.0);
    - V3.2 and GLM-5.x: every MLA layer's absorbed up-projections W_UK_T and W_UV, heads / TP x kv_lora_rank x
      (qk_nope_head_dim + v_head_dim) BF16 (model_executor/layers/attention/mla_attention.py:1242-1280);
      FlashMLA-sparse's workspace (mla_workspace_bytes); the index groups' physical top-k buffers from 0.30.0
      (index_group_bytes)."""
    shape = entry["shape"]
    tokens = recipe.max_num_batched_tokens
    found = tokens * shape["index_topk"] * INT32_BYTES
    drafts = drafter(recipe, entry) is not None
    if recipe.model.family in ("deepseek_v4", "deepseek_v41") and drafts and "hc_mult" in shape:
        found += tokens * shape["hc_mult"] * shape["hidden_size"] * BF16_BYTES
    if recipe.model.family != "mla":
        return found
    draft_layers = recipe.model.mtp_layers if drafts else 0
    heads = shape["num_attention_heads"] // recipe.tensor_parallel_size
    absorbed = heads * shape["kv_lora_rank"] * (shape["qk_nope_head_dim"] + shape["v_head_dim"]) * BF16_BYTES
    stage_layers = pp_partitions(recipe.model.num_layers, recipe.pipeline_parallel_size)[-1]
    return (found + (stage_layers + draft_layers) * absorbed + mla_workspace_bytes(recipe, heads)
            + index_group_bytes(recipe, entry, draft_layers))


def mla_workspace_bytes(recipe: Recipe, heads: int) -> int:
    """FlashMLA-sparse reserves its workspace when built (vllm==0.19.0 to 0.33.0 flashmla_sparse.py, "Reserve
    workspace during initialization"; vllm==0.33.0 vllm/v1/attention/backends/mla/flashmla_sparse.py:754-832): the
    concatenated queries, max_num_batched_tokens x heads x 576 BF16, the heads rounded up to the prefill padding for a
    BF16 cache from 0.29.0 (engine.py flashmla_prefill_head_padding); with an fp8_ds_mla cache also the BF16 prefill
    gather, factor x max_model_len rows of 576 (get_prefill_workspace_size), and from 0.31.0 the padded prefill
    queries and their latents (engine.py flashmla_prefill_query_workspace)."""
    if sparse_mla_backend(recipe) != "FLASHMLA_SPARSE":
        return 0
    tokens = recipe.max_num_batched_tokens
    ds_mla = kv_cache.mla_token_bytes(recipe.cache_dtype, "FLASHMLA_SPARSE") == kv_cache.MLA_FP8_DS_BYTES
    padding = recipe.engine.flashmla_prefill_head_padding[recipe.gpu.family == "sm100"]
    query_heads = heads if ds_mla else round_up(heads, padding)
    found = tokens * query_heads * MLA_Q_HEAD * BF16_BYTES
    if not ds_mla:
        return found
    found += prefill_gather_rows(recipe) * MLA_Q_HEAD * BF16_BYTES
    if recipe.engine.flashmla_prefill_query_workspace:
        padded = round_up(heads, padding)
        found += tokens * (padded * MLA_Q_HEAD + padded * MLA_LATENT + heads * MLA_LATENT) * BF16_BYTES
    return found


def prefill_gather_rows(recipe: Recipe) -> int:
    """factor x max_model_len (vllm/v1/attention/backends/mla/flashmla_sparse.py get_prefill_workspace_size; the factor
    by release, engine.py sparse_mla_prefill_workspace_factor)."""
    short, long = recipe.engine.sparse_mla_prefill_workspace_factor
    return (short if recipe.max_model_len <= 262_144 else long) * recipe.max_model_len


def index_group_bytes(recipe: Recipe, entry: dict, draft_layers: int) -> int:
    """From 0.30.0 every layer that produces top-k indices starts an index group with its physical top-k buffer and
    valid counts, (min(max_num_batched_tokens, max_num_seqs x (1 + k)) + 1) rows of index_topk + 1 int32
    (vllm==0.33.0 vllm/v1/attention/backends/mla/index_group.py:364-395, 406-411)."""
    if not recipe.engine.index_group_buffers:
        return 0
    rows = min(recipe.max_num_batched_tokens, recipe.max_num_seqs * (1 + recipe.num_speculative_tokens)) + 1
    stage_layers = pp_partitions(recipe.model.num_layers, recipe.pipeline_parallel_size)[-1]
    first = recipe.model.num_layers - stage_layers
    config = kv_cache.CacheConfig.of(recipe)
    groups = sum(kv_cache.owns_indexer(config, layer) for layer in range(first, recipe.model.num_layers + draft_layers))
    return groups * rows * (entry["shape"]["index_topk"] + 1) * INT32_BYTES
