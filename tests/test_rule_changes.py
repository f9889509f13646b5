"""Each release rule changes where vLLM's own source changes. For every change of every rule in engine.VLLM_RULES, a
witness: a line (or lines) of the release's source, read in the release and copied here, in the file the rule cites.
The test finds, in the releases' sources (~/.cache/vllm-releases, a git repository with one tag a release), the release
where the witness first appears (or, for a rule whose change is a removal, the release after it was last there), and
checks that the rule's value changes exactly there and nowhere else: the releases are vLLM's, never this code's.

The values themselves are pinned by the behaviour they drive (test_release_rules.py, test_kv_cache.py, ...); the
change to main's rules (reserves_decode_logits, vLLM PR #62860, no release yet) by test_seed.py."""

import os
import subprocess
from pathlib import Path

import pytest

from dsa_kvcalc import engine

RELEASES_REPO = Path(os.environ.get("VLLM_RELEASES_REPO", Path.home() / ".cache" / "vllm-releases"))

# (rule, file, the witness's lines, stripped and joined by newlines): the first release that has the witness
APPEARS = [
    ("default_gpu_memory_utilization", "vllm/config/cache.py",
     "gpu_memory_utilization: float = Field(default=0.92, gt=0, le=1)"),
    ("estimates_cudagraphs", "vllm/envs.py", "int(os.getenv(\"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS\", \"1\"))"),
    ("model_runner_v2_architectures", "vllm/config/vllm.py",
     "if model_config is not None and current_platform.is_rocm():"),
    ("rocm_model_runner_v1_architectures", "vllm/config/vllm.py", "ROCM_DEFAULT_MRV1_ARCHITECTURES = frozenset("),
    ("rocm_model_runner_v1_architectures", "vllm/config/vllm.py",
     "{\"DeepseekV32ForCausalLM\", \"DeepseekV4ForCausalLM\", \"GlmMoeDsaForCausalLM\"}"),
    ("dspark_on_model_runner_v2", "vllm/config/vllm.py", "and self.speculative_config.method == \"dspark\""),
    ("v41_dspark_tokens_in_blocks", "vllm/config/speculative.py", "draft_hf_config.n_predict = getattr("),
    ("v41_dspark_tokens_in_blocks", "vllm/config/speculative.py", "if self.use_dspark():"),
    ("drafts_take_target_stages", "vllm/config/speculative.py", "pipeline_parallel_size=1,"),
    ("model_runner_v2_estimates_cudagraphs", "vllm/v1/worker/gpu/model_runner.py",
     "return _profile_cudagraph_memory(self)"),
    ("batch_defaults", "vllm/engine/arg_utils.py", "if device_memory >= 160 * GiB_bytes:"),
    ("batch_defaults", "vllm/engine/arg_utils.py", "is_gb10 = current_platform.is_device_capability((12, 1))"),
    ("batched_dp_moe_max_num_batched_tokens", "vllm/engine/arg_utils.py", "if parallel_config.use_batched_dp_moe:"),
    ("capture_ceiling_sm10x", "vllm/config/vllm.py", "default_max_graph_size = ("),
    ("captures_max_num_batched_tokens", "vllm/config/vllm.py", "max_num_tokens <= max_cudagraph_capture_size"),
    ("captures_whole_requests", "vllm/config/vllm.py", "def request_counts(max_reqs: int) -> list[int]:"),
    ("captures_max_num_seqs", "vllm/config/vllm.py", "elif max_num_seqs <= max_cudagraph_capture_size:"),
    ("topk_backend_flag", "vllm/engine/arg_utils.py",
     "\"--sparse-indexer-topk-backend\", **sparse_indexer_topk_kwargs"),
    ("cooperative_topk_max_rows", "vllm/model_executor/layers/sparse_attn_indexer.py", "use_cooperative_topk = ("),
    ("cooperative_topk_max_rows", "vllm/model_executor/layers/sparse_attn_indexer.py", "and num_rows <= 64"),
    ("windows_count_concurrent_batches", "vllm/v1/kv_cache_interface.py",
     "num_tokens = min(self.sliding_window - 1 + max_in_flight_tokens, max_model_len)"),
    ("retains_draft_tokens", "vllm/v1/core/kv_cache_utils.py", "extra_retained_tokens = ("),
    ("kv_block_rule", "vllm/v1/core/kv_cache_utils.py", "buckets = _bucket_layers_by_page_size(kv_cache_groups)"),
    ("kv_block_rule", "vllm/v1/core/kv_cache_utils.py", "page_size = spec.kv_cache_specs[layer_name].page_size_bytes"),
    ("kv_grouping", "vllm/v1/core/kv_cache_utils.py", "def _get_packed_kv_cache_groups("),
    ("v41_mega_attention", "vllm/models/deepseek_v41/nvidia/model.py",
     "if DeepseekV4MegaAttnAttention.is_available_for(vllm_config):"),
    ("v41_window_stride_alignment", "vllm/models/deepseek_v41/attention.py", "packed_block_stride_alignment=("),
    ("v41_indexer_sparse_logits_alignment", "vllm/models/deepseek_v41/attention.py", "block_stride_alignment=("),
    ("v41_indexer_sparse_logits_alignment", "vllm/models/deepseek_v41/attention.py",
     "if uses_fp8_ds_mla_layout and _use_v41_mxfp8_kv_record()"),
    ("aligns_block_stride", "vllm/v1/core/kv_cache_utils.py", "alignments = ["),
    ("pads_layer_pages", "vllm/v1/core/kv_cache_utils.py", "def _get_layer_block_stride(spec: KVCacheSpec) -> int:"),
    ("pad_window_pages", "vllm/v1/core/kv_cache_utils.py",
     "layers_per_size[layer_spec.page_size_bytes].append(layer_name)"),
    ("concurrency_counts_pages", "vllm/v1/core/kv_cache_utils.py", "num_blocks_per_request = sum("),
    ("tokens_from_concurrency", "vllm/v1/core/kv_cache_utils.py",
     "max_model_len = vllm_config.model_config.max_model_len"),
    ("shared_indexers_skip_cache", "vllm/model_executor/models/deepseek_v2.py",
     "_num_hidden_layers = getattr(config, \"num_hidden_layers\", None)"),
    ("rocm_indexer_workspace", "vllm/v1/attention/ops/rocm_aiter_mla_sparse.py", "workspace_manager.get_simultaneous("),
    ("rocm_indexer_workspace", "vllm/v1/attention/ops/rocm_aiter_mla_sparse.py",
     "def _max_decode_logits_rows(num_batched_tokens: int) -> int:"),
    ("logged_peak_includes_cudagraphs", "vllm/v1/worker/gpu_worker.py",
     "self.total_consumed = profile_result.total_consumed"),
    ("default_deepgemm", "vllm/model_executor/layers/sparse_attn_indexer.py", "decode_weights,"),
    ("sm12x_sparse_mla_backend", "vllm/platforms/cuda.py", "elif device_capability.major == 12:"),
    ("sm90_unquantized_sparse_mla_backend", "vllm/platforms/cuda.py", "AttentionBackendEnum.FLASH_ATTN_MLA_SPARSE,"),
    ("sm90_flashinfer_sparse_mla", "vllm/platforms/cuda.py", "sparse_tail = ["),
    ("sparse_mla_dcp_backends", "vllm/v1/attention/backend.py", "if use_dcp and not cls.supports_dcp():"),
    ("flashmla_sparse_nope_cache_dtypes", "vllm/v1/attention/backends/mla/flashmla_sparse.py", "if head_size == 512:"),
    ("flashmla_sparse_nope_cache_dtypes", "vllm/v1/attention/backends/mla/flashmla_sparse.py",
     "kv_cache_dtype in (None, \"auto\", \"bfloat16\", \"float16\", \"fp8_ds_mla\")"),
    ("flashmla_sparse_dcp_needs_quantized", "vllm/v1/attention/backends/mla/flashmla_sparse.py",
     "if self.need_to_return_lse_for_decode and not is_quantized_kv_cache("),
    ("flashmla_sparse_quantized_kernel_block", "vllm/v1/attention/backends/mla/flashmla_sparse.py",
     "def customize_spec(cls, spec: AttentionSpec) -> AttentionSpec:"),
    ("nvfp4_ds_mla", "vllm/config/cache.py", "\"nvfp4_ds_mla\","),
    ("sm10x_few_heads_unquantized_sparse_mla_backend", "vllm/platforms/cuda.py",
     "AttentionBackendEnum.FLASH_ATTN_MLA_SPARSE_FA4,"),
    ("mla_block_stride_rows", "vllm/model_executor/layers/attention/mla_attention.py",
     "def _uses_flat_kv_cache(self) -> bool:"),
    ("mla_block_stride_rows", "vllm/v1/worker/utils.py", "def customize_attention_spec("),
    ("sparse_mla_prefill_workspace_factor", "vllm/config/vllm.py",
     "self.attention_config.sparse_mla_prefill_workspace_factor is None"),
    ("speculative_methods", "vllm/config/speculative.py", "DFlashModelTypes = Literal[\"dflash\"]"),
    ("speculative_methods", "vllm/config/speculative.py", "\"custom_class\","),
    ("speculative_methods", "vllm/config/speculative.py", "DSparkModelTypes = Literal[\"dspark\"]"),
    ("kpool_indexer_reserves_decode_logits", "vllm/model_executor/layers/sparse_attn_indexer_kpool.py",
     "if not isinstance(attn_metadata, dict):"),
    ("kpool_logits_over_pools", "vllm/models/glm5next/common/attention.py",
     "self.max_pool_len = vllm_config.model_config.max_model_len // self.index_kpool"),
    ("kpool_gather_over_pools", "vllm/models/glm5next/common/attention.py", "self.max_total_seq_len = ("),
    ("kpool_tail_holds_drafts", "vllm/models/glm5next/common/attention.py",
     "def get_kv_cache_spec(self, vllm_config: VllmConfig):"),
    ("linear_states_share_attention_blocks", "vllm/v1/core/kv_cache_utils.py", "def _get_kv_cache_groups_glm5_next("),
    ("linear_states_share_attention_blocks", "vllm/models/glm5next/common/attention.py", "return CircularBufferSpec("),
    ("kda_prefill_checkpoint_archs", "vllm/models/glm5next/common/kda.py",
     "def get_kv_cache_spec(self, vllm_config: VllmConfig) -> MambaSpec:"),
    ("backend_block_stride_alignment", "vllm/v1/worker/utils.py", "def customize_attention_spec("),
    ("v41_packed_cache_dtypes", "vllm/models/deepseek_v41/attention.py", "kv_cache_dtype: CacheDType,"),
    ("v41_plain_rows_refuse_packed", "vllm/models/deepseek_v41/attention.py",
     "if kv_cache_dtype.endswith(\"_ds_mla\"):"),
    ("v41_nvfp4_needs_sm10x", "vllm/models/deepseek_v41/attention.py",
     "if self.kv_cache_dtype == \"nvfp4_ds_mla\" and not self.kv_mxfp8:"),
    ("mxfp4_indexer_needs_sm10x", "vllm/v1/attention/backends/mla/indexer.py",
     "def dsa_indexer_uses_fp4(vllm_config: VllmConfig) -> bool:"),
    ("v4_auto_cache_dtype_fp8", "vllm/models/deepseek_v4/attention.py", "if kv_cache_dtype == \"auto\":"),
    ("flashmla_prefill_head_padding", "vllm/v1/attention/backends/mla/flashmla_sparse.py",
     "q_concat_heads = num_heads"),
    ("flashmla_prefill_head_padding", "vllm/v1/attention/backends/mla/flashmla_sparse.py", "self.prefill_padding = 64"),
    ("flashmla_prefill_query_workspace", "vllm/v1/attention/backends/mla/flashmla_sparse.py",
     "padded_prefill_query_heads = round_up("),
    ("index_group_buffers", "vllm/v1/attention/backends/mla/index_group.py",
     "if is_index_producing_layer or self.current_group is None:"),
    ("v1_block_table_alignment", "vllm/v1/worker/block_table.py",
     "cdiv(n, 128 // bs) * (128 // bs) if bs <= 128 else n"),
    ("indexer_table_alignment", "vllm/v1/worker/utils.py", "builder_cls = self.backend.get_builder_cls()"),
    ("swa_prefill_indices", "vllm/v1/attention/backends/mla/sparse_swa.py", "self.prefill_swa_indices = torch.zeros("),
    ("sparse_mla_prefill_workspace", "vllm/model_executor/layers/attention/sparse_mla_attention.py",
     "self.chunked_prefill_workspace_size = ("),
    ("sparse_mla_prefill_workspace", "vllm/model_executor/layers/attention/sparse_mla_attention.py",
     "workspace_size = max(workspace_size, cache_config.block_size)"),
    ("masked_mha_mask_bytes", "vllm/model_executor/layers/attention/sparse_mla_attention.py",
     "GLOBAL_TOPK_MASK_MAX_BYTES = 64 * 1024 * 1024  # 64 MiB"),
    ("masked_mha_mask_bytes", "vllm/model_executor/layers/attention/sparse_mla_attention.py",
     "GLOBAL_TOPK_MASK_MAX_BYTES = 128 * 1024 * 1024  # 128 MiB"),
    ("masked_mha_architectures", "vllm/model_executor/layers/attention/sparse_mla_attention.py",
     "def _is_masked_mha_available("),
    ("masked_mha_architectures", "vllm/model_executor/layers/attention/sparse_mla_attention.py", "model_dims = ("),
    ("masked_mha_architectures", "vllm/model_executor/layers/attention/sparse_mla_attention.py",
     "(64, 512, 256, 0, 256),"),
    ("mla_groups_split_by_index_leader", "vllm/model_executor/layers/attention/mla_attention.py",
     "is_index_group_leader=self.indexer is not None,"),
    ("kernel_block_tables_per_attention_group", "vllm/v1/worker/utils.py", "if self.kernel_block_size is not None:"),
    ("kpool_indexer_pooled_kernel_blocks", "vllm/v1/attention/backends/mla/indexer.py",
     "class Glm5NextIndexerBackend(DeepseekV32IndexerBackend):"),
    ("kpool_tail_row_aligned", "vllm/models/glm5next/common/attention.py", "return CircularBufferSpec("),
    ("rocm_sparse_mla_common_builder", "vllm/v1/attention/backends/mla/rocm_aiter_mla_sparse.py",
     "SparseMLACommonMetadataBuilder[ROCMAiterMLASparseMetadata]"),
    ("model_architectures", "vllm/model_executor/models/registry.py",
     "\"DeepseekV4ForCausalLM\": (\"deepseek_v4\", \"DeepseekV4ForCausalLM\"),"),
    ("model_architectures", "vllm/model_executor/models/registry.py", "\"DeepseekV41ForCausalLM\": ("),
    ("sparse_mla_backends", "vllm/v1/attention/backends/registry.py", "FLASHMLA_SPARSE_DSV4 = ("),
    ("sparse_mla_backends", "vllm/v1/attention/backends/registry.py", "FLASHINFER_MLA_SPARSE_SM120 = ("),
    ("sparse_mla_backends", "vllm/v1/attention/backends/registry.py", "FLASH_ATTN_MLA_SPARSE = ("),
    ("sparse_mla_backends", "vllm/v1/attention/backends/registry.py", "FLASHINFER_MLA_SPARSE_SM90 = ("),
    ("sparse_mla_backends", "vllm/v1/attention/backends/registry.py", "FLASHMLA_MEGA_ATTN_DSV41 = ("),
    ("sparse_mla_backends", "vllm/v1/attention/backends/registry.py", "FLASH_ATTN_MLA_SPARSE_FA4 = ("),
    ("indexer_kv_dtype_auto", "vllm/config/attention.py",
     "IndexerKVDType = Literal[\"auto\", \"bf16\", \"fp8\", \"mxfp4\", \"nvfp4\"]"),
    ("v4_mxfp4_indexer_entries", "vllm/models/deepseek_v4/attention.py", "if self.use_fp4_kv:"),
    ("sm10x_auto_kv_cache_dtypes", "vllm/model_executor/models/config.py", "cache_config.cache_dtype == \"auto\""),
    ("sm10x_auto_kv_cache_dtypes", "vllm/model_executor/models/config.py",
     "class Glm5NextModelConfig(VerifyAndUpdateConfig):"),
    # manual: the cited lines also appear elsewhere in the file before the change
    ("rocm_estimates_cudagraphs", "vllm/v1/worker/gpu_worker.py",
     "# XPU stays excluded (see #39977).\ncudagraph_memory_estimate = 0\nif (\ncurrent_platform.is_cuda_alike()"),
    ("model_runner_v2_architectures", "vllm/config/vllm.py", '"DeepseekV2ForCausalLM",\n"DeepseekV4ForCausalLM",'),
    ("sparse_mla_dcp_backends", "vllm/v1/attention/backends/mla/flashattn_mla_sparse.py",
     "class FlashAttnMLASparseFA4Impl(FlashInferMLASparseImpl):"),
    ("mxfp4_indexer_needs_sm10x", "vllm/v1/attention/backends/mla/indexer.py",
     '"use_fp4_indexer_cache requires Blackwell datacenter GPUs "'),
    ("rocm_accepts_fp8", "vllm/v1/attention/backends/mla/rocm_aiter_mla_sparse.py",
     '"auto",\n"float16",\n"bfloat16",\n"fp8",\n"fp8_e4m3",'),
]
# (rule, file, witness): the release after the last one that has the witness
GOES = [
    ("rocm_model_runner_v1_architectures", "vllm/config/vllm.py", "ROCM_DEFAULT_MRV1_ARCHITECTURES = frozenset("),
    ("speculative_methods", "vllm/config/speculative.py", '"medusa",\n"mlp_speculator",'),
]


@pytest.fixture(scope="module")
def sources():
    """(release, path) -> the file's lines, stripped and joined by newlines, with a newline at each end ("" where the
    release has no such file); every release's tag must be in the repository."""
    tags = [f"v{release}" for release in engine.RELEASES]
    listed = subprocess.run(["git", "-C", str(RELEASES_REPO), "tag"], capture_output=True, text=True)
    if listed.returncode or not set(tags) <= set(listed.stdout.split()):
        pytest.skip(f"no sources of every vLLM release at {RELEASES_REPO}")
    wanted = [(release, path) for release in engine.RELEASES for path in sorted({w[1] for w in APPEARS + GOES})]
    batch = subprocess.run(["git", "-C", str(RELEASES_REPO), "cat-file", "--batch"], capture_output=True, check=True,
                           input="".join(f"v{release}:{path}\n" for release, path in wanted).encode())
    found, output = {}, batch.stdout
    for key in wanted:
        header, _, output = output.partition(b"\n")
        if header.endswith(b" missing"):
            found[key] = ""
            continue
        size = int(header.split()[2])
        text, output = output[:size].decode(), output[size + 1:]
        found[key] = "\n" + "\n".join(line.strip() for line in text.splitlines()) + "\n"
    return found


def shown_at(sources: dict, path: str, witness: str, goes: bool) -> str:
    """The release the witness shows: where it first appears, or (goes) the one after the last that has it."""
    has = [f"\n{witness}\n" in sources[release, path] for release in engine.RELEASES]
    if goes:
        last = max(i for i, there in enumerate(has) if there)
        return engine.RELEASES[last + 1]
    return engine.RELEASES[has.index(True)]


def value(release: str, rule: str):
    return getattr(engine.vllm(release), rule)


def rule_changes() -> set[tuple[str, str]]:
    """(rule, release) for each release whose value of the rule differs from the release before's."""
    releases = engine.RELEASES
    return {(rule, now) for rule in engine.VLLM_RULES for before, now in zip(releases, releases[1:])
            if value(before, rule) != value(now, rule)}


@pytest.mark.parametrize("rule, path, witness, goes", [(*w, False) for w in APPEARS] + [(*w, True) for w in GOES],
                         ids=[f"{w[0]}-{n}" for n, w in enumerate(APPEARS + GOES)])
def test_the_rule_changes_in_the_release_its_witness_shows(sources, rule, path, witness, goes):
    release = shown_at(sources, path, witness, goes)
    before = engine.RELEASES[engine.RELEASES.index(release) - 1]
    assert value(before, rule) != value(release, rule), (rule, before, release)


def test_every_change_of_every_rule_has_a_witness_in_vllms_source(sources):
    shown = {(rule, shown_at(sources, path, witness, goes))
             for witnesses, goes in ((APPEARS, False), (GOES, True)) for rule, path, witness in witnesses}
    assert rule_changes() == shown


def test_main_reserves_the_decode_logits_and_no_release_does():
    # vLLM PR #62860 (the seed), merged 2026-10-28 as 317081f: main reserves the indexer's decode logits in the
    # profile run; the seed's rank ran out of memory on vLLM 0.33.0's code, which does not (test_seed.py)
    assert value("main", "reserves_decode_logits")
    assert not any(value(release, "reserves_decode_logits") for release in engine.RELEASES)
