"""The engine a recipe runs on, as data: vLLM at a release (or unreleased main), or DeepInfer. The model's steps
consult its profile; nothing else compares engine names or versions.

vLLM's rules move between releases. Each rule is a field of Engine, declared once with rule(): its value in the
oldest release modelled and every later change: the first release with the new value, and the source, read in the
released wheels (cited as `vllm==X.Y.Z path:line`, the release before the change and the first after it); VLLM_RULES
collects them. An Engine is the value of every rule at one version. A rule that also depends on the model is a value
per architecture (the model's `architecture`). Versions are ordered as PEP 440 orders them (packaging.version), here
and nowhere else.
"""

import functools
import re
from dataclasses import Field, dataclass, field, fields

from packaging.version import Version

# Every vLLM release on the package index from the first with DeepSeek-V3.2 and GLM-5, each with the commit its wheel
# was built from (vllm/_version.py __commit_id__): a dev build that prints one of these is that release.
RELEASE_COMMITS = {
    "0.19.0": "2a69949bd", "0.19.1": "b1388b1fb", "0.20.0": "b8160878f", "0.20.1": "132765e35",
    "0.20.2": "bc150f502", "0.21.0": "ad7125a43", "0.22.0": "0b3ba88f1", "0.22.1": "0decac0d9",
    "0.23.0": "0fc695fc6", "0.24.0": "ee0da84ab", "0.25.0": "dd10e03f9", "0.25.1": "752a3a504",
    "0.26.0": "ffd46bfab", "0.27.0": "4bdc8a788", "0.27.1": "6e448d0ea", "0.28.0": "2cf0a6915",
    "0.29.0": "98dff2a81", "0.30.0": "ced6857af", "0.31.0": "db9527a46", "0.32.0": "5df63a720",
    "0.33.0": "4ba787ec9",
}
RELEASES = tuple(RELEASE_COMMITS)
OLDEST_VLLM = RELEASES[0]
NEWEST_VLLM = RELEASES[-1]  # uploaded 2026-11-02
# Unreleased main after vLLM PR #62860 (merged 2026-10-28 as 317081f): the newest release's rules and main's since.
MAIN = "main"
MAIN_COMMIT = "317081f"


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

    def at(self, version: Version) -> tuple[object, str]:
        value, source = self.initial, self.source
        for change in self.changes:
            if version >= parsed(change.release):
                value, source = change.value, change.source
        return value, source

    def between(self, versions: set[str]) -> tuple[object, tuple[Change, ...]]:
        """The value at the oldest of the versions, and the changes up to the newest."""
        oldest = min(parsed(version) for version in versions)
        newest = max(parsed(version) for version in versions)
        return self.at(oldest)[0], tuple(c for c in self.changes if oldest < parsed(c.release) <= newest)

    def adding(self, member: str) -> Change | None:
        """The change whose value first holds member (a rule whose value is a set that grows), or None when the
        oldest release has it already or no release does."""
        return None if member in self.initial else next((c for c in self.changes if member in c.value), None)


@functools.cache
def parsed(version: str) -> Version:
    """A version as PEP 440 orders it (0.31.1.dev2 < 0.31.1rc1 < 0.31.1 < 0.31.1.post1), its local label (+gHASH, which
    build_of reads) left out; main just after the newest release, as a local label sorts after its release. A text
    that is no PEP 440 version: InvalidVersion, a ValueError."""
    return Version(f"{NEWEST_VLLM}+{MAIN}") if version == MAIN else Version(Version(version).public)


def plain(value: object) -> object:
    """A rule's value as the output shows it: a set of names as a sorted list (a set's own order changes with the
    hash seed)."""
    return sorted(value) if isinstance(value, frozenset) else value


def rule(initial: object, source: str, changes: tuple[Change, ...] = ()) -> Field:
    """An Engine field that is one of vLLM's rules: its value in OLDEST_VLLM, the source, and each change (VLLM_RULES
    collects them). A dict value is left out of the hash, so that a sweep can key KV-cache specs by the engine."""
    return field(metadata={"rule": Rule(initial, source, changes)}, hash=not isinstance(initial, dict))


def within(release: str, first: str, last: str) -> bool:
    return parsed(first) <= parsed(release) <= parsed(last)


@functools.cache
def release_of(version: str) -> str:
    """The release whose rules and arguments a version has: itself when a release, the newest for main and newer
    releases, else the last release before it in PEP 440's order (0.20.1.post1 -> 0.20.1; 0.20.1.dev3 and 0.20.1rc1,
    which come before 0.20.1 -> 0.20.0)."""
    version = NEWEST_VLLM if version == MAIN else version
    return max((r for r in RELEASES if parsed(r) <= parsed(version)), key=parsed, default=RELEASES[0])


def build_of(version: str) -> str:
    """The version whose rules a build takes: the release or main whose commit it names (+gHASH), else its number
    (whose rules are the last release's at or before it in PEP 440's order). A release before OLDEST_VLLM, or a
    source build numbered 0.1.devN, which names none: ValueError, with what to name instead."""
    commit = re.search(r"\+g([0-9a-f]{7,40})", version)
    if commit:
        if MAIN_COMMIT.startswith(commit[1][:7]):
            return MAIN
        known = next((release for release, c in RELEASE_COMMITS.items() if c[:7] == commit[1][:7]), None)
        if known:
            return known
    if version == MAIN or parsed(version) >= parsed(OLDEST_VLLM):
        return version
    if parsed(version).release > (0, 1):  # 0.1.0-0.1.7 are releases; a source build numbers itself 0.1.devN
        raise ValueError(f"{version} is older than {OLDEST_VLLM}, the oldest release modelled")
    raise ValueError(f"{version} is a source build{f' of commit {commit[1]}' if commit else ''}, not a release: name "
                     f"the release it was built on (vllm-version: {NEWEST_VLLM}, or main for vLLM main after #62860)")


ALL = "*"  # every architecture
SEED = "the seed (vLLM PR #62860, merged 2026-10-28 as 317081f)"
V4 = "DeepseekV4ForCausalLM"
V32 = "DeepseekV32ForCausalLM"
V41 = "DeepseekV41ForCausalLM"
GLM5 = "GlmMoeDsaForCausalLM"
GLM5NEXT = "Glm5NextForConditionalGeneration"
MIB = 1 << 20

# MTP names vLLM rewrites to mtp (vllm==0.26.0 vllm/config/speculative.py:686-690) for the DSA models' drafters
MTP_METHODS = frozenset({"mtp", "deepseek_mtp", "glm4_moe_mtp", "glm5_next_mtp"})
SPECULATIVE_METHODS_019 = frozenset({"ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "eagle", "eagle3",
                                     "extract_hidden_states", "ngram_gpu"}) | MTP_METHODS
# The sparse-MLA backends of vLLM's attention-backend registry (sparse_mla_backends): 0.19.0's, DeepSeek-V4's (0.23.0),
# and all of 0.25.0 and 0.30.0
SPARSE_MLA_019 = frozenset({"FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE", "ROCM_AITER_MLA_SPARSE"})
SPARSE_MLA_V4 = frozenset({"FLASHMLA_SPARSE_DSV4", "FLASHINFER_MLA_SPARSE_DSV4"})
SPARSE_MLA_025 = SPARSE_MLA_019 | SPARSE_MLA_V4 | {"FLASHINFER_MLA_SPARSE_SM120", "FLASH_ATTN_MLA_SPARSE"}
SPARSE_MLA_030 = SPARSE_MLA_025 | {"FLASHINFER_MLA_SPARSE_SM90", "FLASHMLA_SPARSE_DSV41", "FLASHINFER_MLA_SPARSE_DSV41"}


@dataclass(frozen=True)
class Engine:
    """What the capacity steps need to know about the engine. The fields after `sources` are vLLM's rules, each
    declared once with its history (rule()): an Engine is the value of every rule at one version."""

    name: str  # vllm or deepinfer
    version: str
    # The decode worst case: min(max_num_seqs, max_num_batched_tokens) x (1 + k) rows (vLLM), or max_num_seqs x
    # (1 + nextn) (DeepInfer's profile run).
    rows_capped_by_batched_tokens: bool
    # DeepInfer scores compressed keys only: max_model_len // kv_compress_ratio columns.
    logits_over_compressed_keys: bool
    topk_backend: str | None  # DeepInfer runs its own top-k; None: the recipe's sparse-indexer-topk-backend
    # DeepInfer's profile run holds the decode logits: its KV sizing misses nothing, before or after any fix.
    profile_holds_decode_logits: bool
    sources: dict = field(compare=False)  # rule -> where its value comes from
    reserves_decode_logits: bool = rule(  # vLLM PR #62860
        False, "vllm==0.19.0 vllm/model_executor/layers/sparse_attn_indexer.py:49-61 to vllm==0.33.0 "
               "vllm/model_executor/layers/sparse_attn_indexer.py:483-512: the profiling branch reserves the K-gather "
               "workspace and VLLM_SPARSE_INDEXER_MAX_LOGITS_MB, no decode term; V4.1's "
               "vllm/model_executor/layers/sparse_mqa_indexer.py:120-125 (0.31.0-0.33.0) likewise",
        (Change(MAIN, True, f"{SEED}: the profiling branch reserves max(prefill budget, decode worst case); in no "
                            f"release up to {NEWEST_VLLM}"),))
    default_gpu_memory_utilization: float = rule(
        0.90, "vllm==0.19.1 vllm/config/cache.py:41: gpu_memory_utilization Field(default=0.9)",
        (Change("0.20.0", 0.92, "vllm==0.20.0 vllm/config/cache.py:66: Field(default=0.92)"),))
    estimates_cudagraphs: bool = rule(  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS on by default
        False, "vllm==0.19.1 vllm/envs.py:1654-1655: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 0, so "
               "vllm/v1/worker/gpu_worker.py:395-399 subtracts no graph estimate",
        (Change("0.20.0", True, "vllm==0.20.0 vllm/envs.py:1724-1725: the default is 1 (gpu_worker.py subtracts the "
                                "estimate before sizing the KV cache)"),))
    rocm_estimates_cudagraphs: bool = rule(  # the estimate runs on ROCm
        False, "vllm==0.25.1 vllm/v1/worker/gpu_worker.py:477-483: the estimate runs only if current_platform.is_cuda()",
        (Change("0.26.0", True, "vllm==0.26.0 vllm/v1/worker/gpu_worker.py:500-506: is_cuda_alike(), ROCm included"),))
    model_runner_v2_architectures: frozenset = rule(  # on Model Runner V2 by default on CUDA (ALL: every one)
        frozenset(), "vllm==0.27.1 vllm/config/vllm.py:69-79, 637-658: Model Runner V2 for the listed architectures "
                     "(no DSA model) or non-MoE models: every DSA model runs on V1",
        (Change("0.28.0", frozenset({V4}), "vllm==0.28.0 vllm/config/vllm.py:69-80: DeepseekV4ForCausalLM joins "
                                          "DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES; V3.2 and GLM-5 (MoE) stay on V1"),
         Change("0.29.0", frozenset({ALL}), "vllm==0.29.0 vllm/config/vllm.py:645-677: no list, Model Runner V2 for "
                                           "every architecture")))
    rocm_model_runner_v1_architectures: frozenset = rule(  # kept on Model Runner V1 on ROCm (ALL: every one)
        frozenset({ALL}), "vllm==0.28.0 vllm/config/vllm.py:84-93: on ROCm the V2 list loses DeepseekV4ForCausalLM; "
                          "the other DSA models are MoE: all on V1",
        (Change("0.29.0", frozenset({V32, V4}), "vllm==0.29.0 vllm/config/vllm.py:71-73: "
                                                "ROCM_DEFAULT_MRV1_ARCHITECTURES (GLM-5 not in it: V2)"),
         Change("0.30.0", frozenset({V32, V4, GLM5}), "vllm==0.30.0 vllm/config/vllm.py:73-75: GlmMoeDsaForCausalLM "
                                                      "added"),
         Change("0.32.0", frozenset(), "vllm==0.32.0 vllm/config/vllm.py:703-739: no ROCm list, V2 as on CUDA")))
    dspark_on_model_runner_v2: bool = rule(  # speculative method dspark forces Model Runner V2
        False, "vllm==0.24.0 vllm/config/speculative.py: no dspark method",
        (Change("0.25.0", True, "vllm==0.25.0 vllm/config/vllm.py:524-532: method dspark forces Model Runner V2 (from "
                                "vllm==0.29.0 vllm/config/vllm.py:2621-2624 V1 lists it as unsupported)"),))
    # supports pipeline parallelism)
    # V4.1's DSpark takes num_speculative_tokens in whole drafting blocks (catalog.V41_DSPARK_BLOCK_TOKENS) above one
    v41_dspark_tokens_in_blocks: bool = rule(
        False, "vllm==0.29.0: no DeepSeek-V4.1",
        (Change("0.30.0", True, "vllm==0.30.0 vllm/config/speculative.py:1431-1486: V4.1's DSpark draft config takes "
                                "n_predict from dspark_block_size, and 'num_speculative_tokens:k must be divisible by "
                                "n_predict' where k > n_predict"),
         Change("0.31.0", False, "vllm==0.31.0 vllm/config/speculative.py:1475-1482 (vllm==0.33.0 :1592-1599): DSpark "
                                 "skips the divisibility check")))
    # the draft model runs on the target's pipeline stages (none of the DSA drafters
    drafts_take_target_stages: bool = rule(
        True, "vllm==0.29.0 vllm/config/speculative.py:1684-1690 create_draft_parallel_config (the target's "
              "pipeline_parallel_size) and vllm/config/model.py:1424-1430 verify_with_parallel_config, 'Pipeline "
              "parallelism is not supported for this model. Supported models implement the `SupportsPP` interface.': "
              "no DSA drafter implements SupportsPP (DeepSeekMTP from vllm==0.30.0 "
              "vllm/model_executor/models/deepseek_mtp.py:235; DeepSeekV4MTP and DSpark never); the same since "
              "vllm==0.19.0 vllm/config/speculative.py:758, vllm/config/model.py:1121-1128",
        (Change("0.30.0", False, "vllm==0.30.0 vllm/config/speculative.py:1755: the draft model runs on one pipeline "
                                 "stage"),))
    model_runner_v2_estimates_cudagraphs: bool = rule(
        False, "vllm==0.28.0 vllm/v1/worker/gpu/model_runner.py:843-845: profile_cudagraph_memory() returns 0",
        (Change("0.29.0", True, "vllm==0.29.0 vllm/v1/worker/gpu/model_runner.py:896-898 and "
                                "vllm/v1/worker/gpu/cudagraph_utils.py:718-831: the whole capture measured with only "
                                "the largest FULL graphs, those swapped for first + (FULL graphs - 1) x second "
                                "(the same to vllm==0.33.0 :922-1039)"),))
    cudagraph_estimate_samples: int = rule(  # the largest graphs of a mode whose capture the estimate measures
        2, "vllm==0.19.0 vllm/v1/worker/gpu_model_runner.py:5900: Model Runner V1 captures descs[:2] of each mode "
           "(the same to vllm==0.33.0 :6330); Model Runner V2 from vllm==0.29.0 "
           "vllm/v1/worker/gpu/cudagraph_utils.py:712, 788 _FULL_GRAPH_PROFILING_SAMPLES = 2 of its FULL graphs "
           "(vllm==0.33.0 :916, 995)")
    cudagraph_per_graph_floor_bytes: int = rule(  # the least the estimate counts each graph after the first at
        1 << 20, "vllm==0.19.0 vllm/v1/worker/gpu_model_runner.py:5923: Model Runner V1's per-graph cost is "
                 "max(second sample, 1 << 20) (the same to vllm==0.33.0 :6353-6355); Model Runner V2 from vllm==0.29.0 "
                 "vllm/v1/worker/gpu/cudagraph_utils.py:714, 830 _MIN_PER_GRAPH_BYTES = 1 << 20 (vllm==0.33.0 :918, "
                 "1038)")
    # (GPU memory from, in GiB; max_num_seqs; max_num_batched_tokens; archs left out) for the OpenAI server
    batch_defaults: tuple[tuple[int, int, int, tuple[str, ...]], ...] = rule(
        ((70, 1024, 8192, ()), (0, 256, 2048, ())),
        "vllm==0.19.0 vllm/engine/arg_utils.py:2053-2072 (0.27.1 :2544): OpenAI server, >= 70 GiB and not A100: "
        "1024 sequences, 8192 tokens; else 256, 2048",
        (Change("0.28.0", ((160, 1024, 16384, ()), (70, 1024, 8192, ()), (0, 256, 2048, ())),
                "vllm==0.28.0 vllm/engine/arg_utils.py:2582-2601: >= 160 GiB: 16384 tokens"),
         Change("0.33.0", ((160, 1024, 16384, ()), (70, 1024, 8192, ("sm121",)), (0, 256, 2048, ())),
                "vllm==0.33.0 vllm/engine/arg_utils.py:2961-2963, 2983-2996: GB10 (cc 12.1) stays on the small "
                "tier")))
    batched_dp_moe_max_num_batched_tokens: int | None = rule(
        None, "vllm==0.19.1 vllm/engine/arg_utils.py:2194-2198: the tier's default only",
        (Change("0.20.0", 256, "vllm==0.20.0 vllm/engine/arg_utils.py:2354-2358, vllm/config/parallel.py:627-636: 256 "
                               "when data-parallel-size > 1 with expert parallelism and all2all-backend "
                               "deepep_low_latency or nixl_ep"),))
    capture_ceiling_sm10x: int = rule(  # the default largest CUDA-graph capture size on SM10x (512 elsewhere)
        512, "vllm==0.27.1 vllm/config/vllm.py:1828-1837: min(max_num_seqs x (1 + k) x 2, 512)",
        (Change("0.28.0", 1024, "vllm==0.28.0 vllm/config/vllm.py:1936-1943: 1024 on the SM10x family, 512 "
                                "elsewhere"),))
    captures_max_num_batched_tokens: bool = rule(
        False, "vllm==0.20.0 vllm/config/vllm.py:1521-1524: the grid only",
        (Change("0.20.1", True, "vllm==0.20.1 vllm/config/vllm.py:1527-1532: max_num_batched_tokens is captured if "
                                "within the largest capture size"),))
    captures_whole_requests: bool = rule(  # n x (1 + k) sizes beside the grid
        False, "vllm==0.28.0 vllm/config/vllm.py:1929-1945: the grid only",
        (Change("0.29.0", True, "vllm==0.29.0 vllm/config/vllm.py:2030-2037, 2084-2091, 2142-2144: n x (1 + k) for n "
                                "on the grid up to min(max_num_seqs, ceiling)"),))
    captures_max_num_seqs: bool = rule(  # max_num_seqs itself, without speculative tokens
        False, "vllm==0.30.0 vllm/config/vllm.py: no size for max_num_seqs without speculation",
        (Change("0.31.0", True, "vllm==0.31.0 vllm/config/vllm.py:2539-2540: max_num_seqs itself, without "
                                "speculative tokens, when within the largest capture size"),))
    topk_backend_flag: bool = rule(  # --sparse-indexer-topk-backend exists (else the built-in auto chain only)
        False, "vllm==0.29.0: no --sparse-indexer-topk-backend; the indexer picks its top-k inside the op",
        (Change("0.30.0", True, "vllm==0.30.0 vllm/engine/arg_utils.py:1683-1684 and vllm/config/kernel.py:166-174, "
                                "285: --sparse-indexer-topk-backend, default auto"),))
    cooperative_topk_max_rows: int = rule(  # 0: no cooperative top-k
        0, "vllm==0.23.0 vllm/model_executor/layers/sparse_attn_indexer.py:337-349: persistent or per-row top-k, no "
           "cooperative kernel",
        (Change("0.24.0", 32, "vllm==0.24.0 vllm/model_executor/layers/sparse_attn_indexer.py:337-343: num_rows <= 32"),
         Change("0.29.0", 64, "vllm==0.29.0 vllm/model_executor/layers/sparse_attn_indexer.py:617-624: num_rows <= 64 "
                              "(vllm==0.31.0 vllm/model_executor/layers/indexer_topk.py:21)")))
    # windows hold max_concurrent_batches x max_num_batched_tokens new tokens
    windows_count_concurrent_batches: bool = rule(
        False, "vllm==0.25.1 vllm/v1/kv_cache_interface.py:560-566: a window holds window - 1 + max_num_batched_tokens",
        (Change("0.26.0", True, "vllm==0.26.0 vllm/v1/kv_cache_interface.py:584-597 and vllm/config/vllm.py:512-533: "
                                "window - 1 + max_concurrent_batches x max_num_batched_tokens; with async scheduling "
                                "PP + 1 batches on Model Runner V2, 2 on V1 (PP 1), else PP"),))
    retains_draft_tokens: bool = rule(  # window caches keep k - 1 more tokens for multi-layer MTP
        False, "vllm==0.27.1: no extra_retained_tokens in vllm/v1",
        (Change("0.28.0", True, "vllm==0.28.0 vllm/v1/core/kv_cache_utils.py:2137-2147 and vllm/config/"
                                "speculative.py:1501-1507: k - 1 more tokens when min(MTP layers, k) > 1"),))
    kv_block_rule: str = rule(  # DeepSeek-V4's packed layout: tuple, bucket or overlay (kv_cache.block_bytes)
        "tuple", "vllm==0.22.1 vllm/v1/core/kv_cache_utils.py:1198-1218: blocks = available // (distinct page sizes x "
                 "layer tuples)",
        (Change("0.23.0", "bucket", "vllm==0.23.0 vllm/v1/core/kv_cache_utils.py:1233-1236: layers bucketed by page "
                                    "size"),
         Change("0.27.0", "overlay", "vllm==0.27.0 vllm/v1/core/kv_cache_utils.py:1293-1303, 1342: a block costs the "
                                     "largest group's pages")))
    kv_grouping: str = rule(  # uniform (windows by approximate gcd) or packed (buckets and anchors)
        "uniform", "vllm==0.28.0 vllm/v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_groups: full caches in "
                   "one group, windows cut by the approximate gcd of the layer counts",
        (Change("0.29.0", "packed", "vllm==0.29.0 vllm/v1/core/kv_cache_utils.py:1668-1796 "
                                    "_get_packed_kv_cache_groups: buckets, their repeats, and state buckets no wider "
                                    "than the widest group"),))
    v41_mega_attention: bool = rule(
        False, "vllm==0.30.0 vllm/models/deepseek_v41/nvidia/model.py: FlashMLA only (no flash_mla_mega_attn.py)",
        (Change("0.31.0", True, "vllm==0.31.0 vllm/models/deepseek_v41/nvidia/model.py:226-236: mega attention on "
                                "SM100 where available, whose cache is nvfp4_ds_mla for auto and fp8 "
                                "(flash_mla_mega_attn.py:194-197)"),))
    v41_window_stride_alignment: bool = rule(
        False, "vllm==0.32.0 vllm/models/deepseek_v41/attention.py:557-568: no window stride alignment",
        (Change("0.33.0", True, "vllm==0.33.0 vllm/models/deepseek_v41/attention.py:574-578 and "
                                "vllm/v1/attention/backends/mla/sparse_swa.py:142-144: lcm(window record, compressed "
                                "record) on SM100 packed layouts"),))
    v41_indexer_sparse_logits_alignment: int = rule(  # 0: no indexer_sparse_logits
        0, "vllm==0.30.0 vllm/config/attention.py: no indexer_sparse_logits",
        (Change("0.31.0", 512, "vllm==0.31.0 vllm/models/deepseek_v41/attention.py:1192-1194: lcm(512, page "
                               "alignment)"),
         Change("0.33.0", 256, "vllm==0.33.0 vllm/models/deepseek_v41/attention.py:1300-1309: lcm(256, 1 on SM100 "
                               "packed layouts, else the page alignment)")))
    aligns_block_stride: bool = rule(  # the block stride rounded up to the layers' alignment
        False, "vllm==0.30.0 vllm/v1/core/kv_cache_utils.py: the block stride is the largest group's bytes",
        (Change("0.31.0", True, "vllm==0.31.0 vllm/v1/core/kv_cache_utils.py:1622-1632: rounded up to the lcm of the "
                                "layers' block_stride_alignment (656 B for fp8_ds_mla on FlashMLA-sparse on SM10x, "
                                "vllm/model_executor/layers/attention/mla_attention.py:1375-1382)"),))
    # layer-outer layouts pad each layer's page to its alignment; block-outermost round the sum
    pads_layer_pages: bool = rule(
        False, "vllm==0.31.0 vllm/v1/core/kv_cache_utils.py:1606-1632: the sum of the pages rounded up, for every "
               "layout",
        (Change("0.32.0", True, "vllm==0.32.0 vllm/v1/core/kv_cache_utils.py:1515-1551 (0.33.0 "
                                "vllm/v1/core/kv_cache_planning.py:569-606) _get_kv_cache_bytes_per_block: a "
                                "layer-outer layout sums each layer's page padded to its own alignment; only a "
                                "block-outermost one rounds the sum (catalog.Model.block_outermost_layout)"),))
    pad_window_pages: bool = rule(  # window pages padded up to the next full-attention page size
        True, "vllm==0.26.0 vllm/v1/core/kv_cache_utils.py:1663-1672: window pages padded to the next full-attention "
              "page size",
        (Change("0.27.0", False, "vllm==0.27.0 vllm/v1/core/kv_cache_utils.py:1717-1725: no padding (groups "
                                 "overlay)"),))
    concurrency_counts_pages: bool = rule(  # pages per request summed over groups (else a byte ratio)
        False, "vllm==0.26.0 vllm/v1/core/kv_cache_utils.py:943-955: pages per request as a byte ratio",
        (Change("0.27.0", True, "vllm==0.27.0 vllm/v1/core/kv_cache_utils.py:951-958: pages per request summed over "
                                "groups"),))
    tokens_from_concurrency: bool = rule(  # "GPU KV cache size" = int(concurrency x max_model_len)
        False, "vllm==0.20.0 vllm/v1/core/kv_cache_utils.py:1694-1711: GPU KV cache size = blocks // groups x the "
               "smallest block, x PCP x DCP",
        (Change("0.20.1", True, "vllm==0.20.1 vllm/v1/core/kv_cache_utils.py:1694-1708: int(max concurrency x "
                                "max_model_len)"),))
    # layers that skip the top-k (GLM-5.2) build no indexer, so no indexer cache
    shared_indexers_skip_cache: bool = rule(
        False, "vllm==0.23.0 vllm/model_executor/models/deepseek_v2.py:1002-1034: every layer builds its indexer",
        (Change("0.24.0", True, "vllm==0.24.0 vllm/model_executor/models/deepseek_v2.py:1024-1049: a layer that skips "
                                "the top-k builds no indexer; MTP layers always do"),))
    rocm_indexer_workspace: str = rule(  # what AITER's profiling branch holds: none, batched tokens or decode rows
        "none", "vllm==0.22.1 vllm/v1/attention/ops/rocm_aiter_mla_sparse.py:647-648: the profiling branch returns at "
                "once, reserving nothing (not even the prefill budget)",
        (Change("0.23.0", "batched tokens", "vllm==0.23.0 vllm/v1/attention/ops/rocm_aiter_mla_sparse.py:662-683: a "
                                            "locked (max_num_batched_tokens, max_model_len) FP32 decode workspace, "
                                            "then the prefill budget"),
         Change("0.30.0", "decode rows", "vllm==0.30.0 vllm/v1/attention/ops/rocm_aiter_mla_sparse.py:949-972, "
                                         "1043-1046: its rows are min(max_num_batched_tokens, max_num_seqs x (1 + k))")))
    logged_peak_includes_cudagraphs: bool = rule(  # "Actual usage ... peak activation" includes the graph estimate
        False, "vllm==0.26.0 vllm/v1/worker/gpu_worker.py:508-509, 526: peak activation = the torch peak before the "
               "graph estimate",
        (Change("0.27.0", True, "vllm==0.27.0 vllm/v1/worker/gpu_worker.py:526-529: transient peak + the applied graph "
                                "estimate; 'consumed memory (weights + non-torch)'"),))
    default_deepgemm: str = rule(  # the DeepGEMM whose logits layout this release's wrapper documents
        "2.6", "vllm==0.32.0 vllm/utils/deep_gemm.py:730-732: fp8_fp4_paged_mqa_logits returns float32 logits on every "
               "arch (DeepGEMM before 2.8: 256-column splits)",
        (Change("0.33.0", "2.8", "vllm==0.33.0 vllm/utils/deep_gemm.py fp8_fp4_paged_mqa_logits: 'bf16 on SM100, fp32 "
                                 "elsewhere', and vllm/model_executor/layers/sparse_attn_indexer.py:880-893 "
                                 "as_fp32_logits copies them unless deep_select without DCP"),))
    sm12x_sparse_mla_backend: str = rule(
        "FLASHMLA_SPARSE", "vllm==0.23.0 vllm/platforms/cuda.py:123-130: no SM12x branch, FLASHMLA_SPARSE",
        (Change("0.24.0", "FLASHINFER_MLA_SPARSE_SM120", "vllm==0.24.0 vllm/platforms/cuda.py:130-134"),))
    sm90_unquantized_sparse_mla_backend: str = rule(
        "FLASHMLA_SPARSE", "vllm==0.24.0 vllm/platforms/cuda.py:135-142: the sparse tail is FLASHMLA_SPARSE",
        (Change("0.25.0", "FLASH_ATTN_MLA_SPARSE", "vllm==0.25.0 vllm/platforms/cuda.py:134-142 and "
                                                   "vllm/v1/attention/backends/mla/flashattn_mla_sparse.py:69-88: "
                                                   "FlashAttention's sparse MLA first, BF16 caches and no DCP only"),))
    sm90_flashinfer_sparse_mla: bool = rule(  # FlashInfer's SM90 sparse MLA among the SM90 candidates
        False, "vllm==0.29.0 vllm/platforms/cuda.py:135-143: the SM90 sparse tail is FlashAttention's, FlashMLA's",
        (Change("0.30.0", True, "vllm==0.30.0 vllm/platforms/cuda.py:138-153 (vllm==0.33.0 :140-155): "
                                "FLASHINFER_MLA_SPARSE_SM90 first for head size 512, last otherwise"),))
    # the sparse-MLA backends vLLM's selector keeps under decode context parallelism (None: it does not ask)
    sparse_mla_dcp_backends: frozenset | None = rule(
        None, "vllm==0.29.0 vllm/v1/attention/backend.py:263-330 validate_configuration: no DCP check",
        (Change("0.30.0", frozenset({"FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE"}),
                "vllm==0.30.0 vllm/v1/attention/backend.py:341-342 'DCP not supported' unless the impl's supports_dcp "
                "(False by default, :805): FlashMLA-sparse's (flashmla_sparse.py:650) and FlashInfer's "
                "(flashinfer_mla_sparse.py:419) set it; FlashInfer's SM90 and SM120 ones do not"),
         Change("0.33.0", frozenset({"FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE", "FLASH_ATTN_MLA_SPARSE_FA4"}),
                "vllm==0.33.0 vllm/v1/attention/backend.py:346-347; FA4's impl is FlashInfer's "
                "(flashattn_mla_sparse.py:364, flashinfer_mla_sparse.py:444)")))
    flashmla_sparse_nope_cache_dtypes: tuple = rule(  # the caches FlashMLA-sparse takes for a 512-wide latent (SM90)
        (), "vllm==0.30.0 vllm/v1/attention/backends/mla/flashmla_sparse.py:157-159: head size 576 only",
        (Change("0.31.0", ("auto", "bfloat16", "float16"),
                "vllm==0.31.0 vllm/v1/attention/backends/mla/flashmla_sparse.py:187-209: a rope-free 512-wide latent "
                "on SM90 with a BF16 cache"),
         Change("0.32.0", ("auto", "bfloat16", "float16", "fp8_ds_mla"),
                "vllm==0.32.0 vllm/v1/attention/backends/mla/flashmla_sparse.py:219-248 (vllm==0.33.0 the same): "
                "or the 576 fp8_ds_mla layout with a zero RoPE slot")))
    flashmla_sparse_dcp_needs_quantized: bool = rule(  # FlashMLA-sparse's BF16 path refuses decode context parallelism
        False, "vllm==0.28.0 vllm/v1/attention/backends/mla/flashmla_sparse.py: no such check",
        (Change("0.29.0", True, "vllm==0.29.0 vllm/v1/attention/backends/mla/flashmla_sparse.py:604-610 "
                                "(vllm==0.33.0 :784-790): 'DCP for FlashMLA sparse requires an fp8_ds_mla kv-cache; "
                                "the bf16 sparse path is not supported under DCP.'"),))
    # off SM10x a quantized FlashMLA-sparse block aligns to these pages
    flashmla_sparse_quantized_kernel_block: int = rule(
        0, "vllm==0.31.0 vllm/v1/attention/backends/mla/flashmla_sparse.py: no customize_spec",
        (Change("0.32.0", 64, "vllm==0.32.0 vllm/v1/attention/backends/mla/flashmla_sparse.py:168-175 (vllm==0.33.0 the "
                              "same): off SM100 a quantized cache's block_stride_alignment is MultipleOf(64), whole "
                              "64-token kernel pages where a block spans several (vllm/v1/kv_cache_interface.py:183-193)"),))
    nvfp4_ds_mla: bool = rule(  # the nvfp4_ds_mla cache dtype exists
        False, "vllm==0.29.0 vllm/config/cache.py: no nvfp4_ds_mla",
        (Change("0.30.0", True, "vllm==0.30.0 vllm/config/cache.py:48 (SM100 only: flashmla_sparse.py:186-190)"),))
    sm10x_few_heads_unquantized_sparse_mla_backend: str = rule(
        "FLASHINFER_MLA_SPARSE", "vllm==0.19.0 vllm/platforms/cuda.py:59-81: a BF16 cache with <= 16 heads a rank "
                                 "takes FlashInfer's sparse MLA",
        (Change("0.33.0", "FLASH_ATTN_MLA_SPARSE_FA4", "vllm==0.33.0 vllm/platforms/cuda.py:107-115: FA4's sparse "
                                                       "MLA first"),))
    # sparse-MLA backend -> rows of one token's record a block is a multiple of
    mla_block_stride_rows: dict = rule(
        {}, "vllm==0.30.0: no block_stride_alignment on MLA specs",
        (Change("0.31.0", {"FLASHINFER_MLA_SPARSE": 1, "FLASHMLA_SPARSE": 1, "FLASHMLA_SPARSE ds_mla on SM10x": 1},
                "vllm==0.31.0 vllm/model_executor/layers/attention/mla_attention.py:751-756, 1375-1382: flat caches "
                "(FlashInfer's, FlashMLA's unquantized) and FlashMLA's DS-MLA rows on SM10x align a block to one "
                "token's record"),
         Change("0.32.0", {"FLASHINFER_MLA_SPARSE": 32, "FLASH_ATTN_MLA_SPARSE_FA4": 32,
                           "FLASHINFER_MLA_SPARSE_SM120": 64, "FLASHMLA_SPARSE": 1, "FLASHMLA_SPARSE ds_mla on SM10x": 1,
                           "FLASH_ATTN_MLA_SPARSE": 1, "FLASHINFER_MLA_SPARSE_SM90": 1, "ROCM_AITER_MLA_SPARSE": 1},
                "vllm==0.32.0 vllm/v1/worker/utils.py:476-486 customize_attention_spec: each backend's customize_spec "
                "(vllm/v1/attention/backends/mla/sparse_utils.py:45-47 align_blocks_to_rows; flashinfer_mla_sparse.py:"
                "74-79, 95-96, 184-185: its kernel block of 32 or 64 rows; flashmla_sparse.py:167-175: one row, but "
                "64-token pages for a quantized cache off SM100, which a 64-token block already is)")))
    sparse_mla_prefill_workspace_factor: tuple[int, int] = rule(  # up to 262,144 tokens of max_model_len, and above
        (5, 5), "vllm==0.31.0 vllm/v1/attention/backends/mla/indexer.py:791-801 and flashmla_sparse.py:305-312: "
                "40 x max_model_len indexer keys and 5 x max_model_len BF16 rows",
        (Change("0.32.0", (5, 2), "vllm==0.32.0 vllm/config/vllm.py:1790-1798: factor 5 up to 262,144 tokens, else "
                                  "2 (8 x factor indexer keys)"),))
    speculative_methods: frozenset = rule(
        frozenset(SPECULATIVE_METHODS_019), "vllm==0.19.0 vllm/config/speculative.py:52: SpeculativeMethod",
        (Change("0.20.0", frozenset(SPECULATIVE_METHODS_019 | {"dflash"}), "vllm==0.20.0 vllm/config/speculative.py:53"),
         Change("0.22.0", frozenset(SPECULATIVE_METHODS_019 | {"dflash", "custom_class"}),
                "vllm==0.22.0 vllm/config/speculative.py:65"),
         Change("0.25.0", frozenset(SPECULATIVE_METHODS_019 | {"dflash", "custom_class", "dspark"}),
                "vllm==0.25.0 vllm/config/speculative.py:60-64"),
         Change("0.33.0", frozenset(SPECULATIVE_METHODS_019 - {"medusa", "mlp_speculator"}
                                    | {"dflash", "custom_class", "dspark"}),
                "vllm==0.33.0 vllm/config/speculative.py:74: medusa and mlp_speculator removed")))
    # GLM-5.3-Flash's kpool indexer and hybrid KDA/DSA cache layout
    kpool_indexer_reserves_decode_logits: bool = rule(  # its own profile branch, not #62860
        False, "vllm==0.29.0: no kpool indexer (vllm/models/glm5next and sparse_attn_indexer_kpool.py are new in "
               "0.30.0)",
        (Change("0.30.0", True, "vllm==0.30.0 vllm/model_executor/layers/sparse_attn_indexer_kpool.py:296-331 "
                                "(0.31.0 vllm/models/glm5next/nvidia/sparse_indexer.py:131-166, 0.33.0 :148-187): its "
                                "profiling branch allocates max(min(max_num_seqs x (1 + k), max_num_batched_tokens) "
                                "x width x 4, VLLM_SPARSE_INDEXER_MAX_LOGITS_MB MiB) bytes: FP32, no DeepGEMM "
                                "padding"),))
    # the decode logits score max_model_len // index_kpool pools (else every token)
    kpool_logits_over_pools: bool = rule(
        False, "vllm==0.30.0 vllm/models/glm5next/nvidia/attention.py:299, 310: the kpool indexer's width is "
               "max_model_len",
        (Change("0.31.0", True, "vllm==0.31.0 vllm/models/glm5next/common/attention.py:311: max_pool_len = "
                                "max_model_len // index_kpool"),))
    kpool_gather_over_pools: bool = rule(  # the prefill K-gather workspace holds pools (else tokens)
        False, "vllm==0.31.0 vllm/models/glm5next/common/attention.py:315: the K-gather workspace holds "
               "get_max_prefill_buffer_size entries",
        (Change("0.32.0", True, "vllm==0.32.0 vllm/models/glm5next/common/attention.py:282-284: "
                                "get_max_prefill_buffer_size // index_kpool"),))
    kpool_tail_holds_drafts: bool = rule(  # tail ring of kpool x next_pow2(cdiv(kpool + k, kpool)) slots (else kpool)
        False, "vllm==0.30.0 vllm/models/glm5next/nvidia/attention.py:193-200: KpoolTailSpec(block_size=index_kpool)",
        (Change("0.31.0", True, "vllm==0.31.0 vllm/models/glm5next/common/attention.py:191-212: a ring of "
                                "index_kpool x next_pow2(cdiv(index_kpool + k, index_kpool)) slots, so that drafts "
                                "keep the keys a rejected pool's redo reads"),))
    linear_states_share_attention_blocks: bool = rule(  # KDA states and tails alias the attention block's bytes
        False, "vllm==0.29.0 vllm/v1/core/kv_cache_utils.py: no _get_kv_cache_groups_glm5_next",
        (Change("0.30.0", True, "vllm==0.30.0 vllm/v1/core/kv_cache_utils.py:1195-1274, 1588-1594, 1682-1745: MLA "
                                "latents and indexers one group, tails one group padded to the indexer page, KDA "
                                "states cdiv(states, latents) groups padded to the latent page; a block costs the "
                                "latent and indexer pages, the states and tails alias them"),
         Change("0.32.0", False, "vllm==0.32.0 vllm/v1/core/kv_cache_utils.py:1860-1994: the GLM-5.3-Flash grouping is "
                                 "gone; the generic packing, with the tails a CircularBufferSpec of their own "
                                 "(vllm/models/glm5next/common/attention.py:156-179)")))
    kda_prefill_checkpoint_archs: frozenset = rule(  # FlashKDA keeps one more KDA state block in 'align' mode
        frozenset(), "vllm==0.31.0 vllm/models/glm5next/common/kda.py: no prefill checkpoint block",
        (Change("0.32.0", frozenset({"sm90", "sm100", "sm103", "sm120", "sm121"}),
                "vllm==0.32.0 vllm/models/glm5next/common/kda.py:137-176 and vllm/model_executor/layers/mamba/"
                "kda_checkpoint.py:16-17: FlashKDA (CUDA SM90, SM10x, SM12x; BF16, head_dim 128, a bounded gate) "
                "sets num_prefill_checkpoint_blocks = 1"),))
    # the attention backends align block strides (customize_attention_spec)
    backend_block_stride_alignment: bool = rule(
        False, "vllm==0.31.0 vllm/v1/attention/backends/mla/flashinfer_mla_sparse_sm90.py: no customize_spec",
        (Change("0.32.0", True, "vllm==0.32.0 vllm/v1/worker/utils.py:476-486 customize_attention_spec and "
                                "vllm/v1/kv_cache_interface.py:183-193: blocks a whole number of kernel rows apart "
                                "(FlashInfer's sparse MLA: 1 row on SM90, flashinfer_mla_sparse_sm90.py:159-161; 32 on "
                                "SM10x, flashinfer_mla_sparse.py:75-79), or of kernel blocks where every kernel block "
                                "size is fixed (the kpool indexer's [kpool x 32, kpool x 64], "
                                "vllm/v1/attention/backends/mla/indexer.py:296-306); applied to GLM-5.3-Flash's "
                                "caches"),))
    # DeepSeek-V4.1's cache dtypes by layout: (the dtypes its packed fp8_ds_mla records take, vLLM's refusal of
    # another), whether plain rows (FlashInfer's) refuse the packed names, whether nvfp4_ds_mla needs SM10x
    v41_packed_cache_dtypes: tuple = rule(
        (("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "fp8_per_token_head"),
         "DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache, got {dtype}"),
        "vllm==0.30.0 vllm/models/deepseek_v41/attention.py:123-152 (_resolve_dsv4_kv_cache_dtype: auto as fp8, every "
        "fp8 name as fp8_ds_mla, any other refused)",
        (Change("0.31.0", (("auto", "fp8", "fp8_ds_mla", "nvfp4_ds_mla"),
                           "DeepseekV4 packed KV layouts only support fp8 kv-cache, got {dtype}"),
                "vllm==0.31.0 vllm/models/deepseek_v41/attention.py:129-155 (vllm==0.33.0 :141-167): auto and fp8 as "
                "the layout's record, the two *_ds_mla records as named, any other refused"),))
    v41_plain_rows_refuse_packed: bool = rule(
        False, "vllm==0.30.0 vllm/models/deepseek_v41/attention.py:154-158: plain rows store any dtype",
        (Change("0.31.0", True, "vllm==0.31.0 vllm/models/deepseek_v41/attention.py:160-164 (vllm==0.33.0 :172-176): "
                                "'{dtype} is a packed FlashMLA DeepSeek V4.1 KV cache format; the selected backend "
                                "stores plain KV rows.'"),))
    v41_nvfp4_needs_sm10x: bool = rule(
        False, "vllm==0.30.0: nvfp4_ds_mla is none of the packed layout's dtypes (v41_packed_cache_dtypes)",
        (Change("0.31.0", True, "vllm==0.31.0 vllm/models/deepseek_v41/attention.py:513-517 (vllm==0.33.0 :532-536): "
                                "'nvfp4_ds_mla needs the V4.1 KV records, which FlashMLA decodes only on SM100.' (the "
                                "MXFP8 records of the SM10x family)"),))
    # the planner asserts that decode context parallelism has no sliding window
    sliding_window_refuses_dcp: bool = rule(
        True, "vllm==0.33.0 vllm/v1/kv_cache_interface.py:946-950, SlidingWindowSpec.max_memory_usage_bytes, which the "
              "planner asks of every window cache; the same assertion since vllm==0.19.0 "
              "vllm/v1/kv_cache_interface.py:251-254")
    # which key's MXFP4 indexer cache vLLM refuses off the SM10x family: None, the use_fp4_indexer_cache flag (an
    # assertion), or the indexer dtype however it is spelt
    mxfp4_indexer_needs_sm10x: str | None = rule(
        None, "vllm==0.19.1 vllm/config/attention.py: no FP4 indexer cache",
        (Change("0.20.0", "use_fp4_indexer_cache", "vllm==0.20.0 vllm/v1/attention/backends/mla/indexer.py:255-265 "
                                                   "(vllm==0.27.1 :494-504): 'use_fp4_indexer_cache requires Blackwell "
                                                   "datacenter GPUs', asserted where the flag is set"),
         Change("0.28.0", "indexer_kv_dtype", "vllm==0.28.0 vllm/v1/attention/backends/mla/indexer.py:48-62 "
                                              "(vllm==0.33.0 :60-99 dsa_indexer_uses_fp4): \"indexer_kv_dtype='mxfp4' "
                                              "requires Blackwell datacenter GPUs (sm_10x, e.g. B200/GB200); sm_120 "
                                              "(consumer Blackwell) and earlier architectures are not supported.\"")))
    # DeepSeek-V4's FlashMLA attention takes kv-cache-dtype auto as fp8 (else it stops)
    v4_auto_cache_dtype_fp8: bool = rule(
        False, "vllm==0.29.0 vllm/models/deepseek_v4/attention.py:102-108 (vllm==0.20.0 "
               "vllm/model_executor/layers/deepseek_v4_attention.py:594-599): DeepSeek-V4's FlashMLA layout asserts an "
               "fp8 cache dtype, so auto stops vLLM at model init",
        (Change("0.30.0", True, "vllm==0.30.0 vllm/models/deepseek_v4/attention.py:107-117: auto is taken as fp8; "
                                "any other non-fp8 dtype is refused"),))
    # What building the model allocates besides its parameters (weights.py construction_bytes)
    # FlashMLA-sparse's BF16-cache query heads rounded up to this many: off SM10x, on SM10x
    flashmla_prefill_head_padding: tuple[int, int] = rule(
        (1, 1), "vllm==0.28.0 vllm/v1/attention/backends/mla/flashmla_sparse.py:562: q_concat_shape = (max_tokens, "
                "num_heads, head_size), the heads unpadded",
        (Change("0.29.0", (64, 128), "vllm==0.29.0 vllm/v1/attention/backends/mla/flashmla_sparse.py:583-597: a BF16 "
                                     "cache's query heads rounded up to prefill_padding, 128 on SM10x, else 64"),
         Change("0.32.0", (64, 64), "vllm==0.32.0 vllm/v1/attention/backends/mla/flashmla_sparse.py:760-782: "
                                    "prefill_padding 64 on Hopper and Blackwell")))
    flashmla_prefill_query_workspace: bool = rule(  # fp8_ds_mla: the padded prefill queries and latents reserved too
        False, "vllm==0.30.0 vllm/v1/attention/backends/mla/flashmla_sparse.py:742-745: the queries and the BF16 "
               "prefill gather only",
        (Change("0.31.0", True, "vllm==0.31.0 vllm/v1/attention/backends/mla/flashmla_sparse.py:782-795: also "
                                "(max_tokens, padded heads, 576), (max_tokens, padded heads, 512) and (max_tokens, "
                                "heads, 512) BF16"),))
    index_group_buffers: bool = rule(  # each top-k producing MLA layer's index group holds physical top-k rows
        False, "vllm==0.29.0 has no vllm/v1/attention/backends/mla/index_group.py",
        (Change("0.30.0", True, "vllm==0.30.0 vllm/v1/attention/backends/mla/index_group.py:458-480, 498-512: "
                                "(min(max_num_batched_tokens, max_num_seqs x (1 + k)) + 1) rows of top-k indices and "
                                "a count per index group"),))
    rocm_accepts_fp8: bool = rule(
        False, "vllm==0.20.2 vllm/v1/attention/backends/mla/rocm_aiter_mla_sparse.py:85-89: auto, float16, bfloat16",
        (Change("0.21.0", True, "vllm==0.21.0 vllm/v1/attention/backends/mla/rocm_aiter_mla_sparse.py:266-272: fp8 and "
                                "fp8_e4m3 too, kept as standard fp8"),))
    # The buffers the model runner builds with the KV cache (kv_init_buffers.py)
    v1_block_table_alignment: bool = rule(  # V1's block tables rounded up to whole 128-token spans
        False, "vllm==0.20.2 vllm/v1/worker/block_table.py:249-251: MultiGroupBlockTable takes cdiv(max_model_len, "
               "block) columns",
        (Change("0.21.0", True, "vllm==0.21.0 vllm/v1/worker/block_table.py:260-264: rounded up to a multiple of "
                                "128 // block (vllm==0.33.0 :236-245 get_block_table_width)"),))
    indexer_table_alignment: bool = rule(  # the indexer's expanded block table as wide as the aligned block table
        False, "vllm==0.26.0 vllm/v1/attention/backends/mla/indexer.py:346-357: the indexer's expanded block table "
               "is cdiv(max_model_len, kernel block x DCP) wide",
        (Change("0.27.0", True, "vllm==0.27.0 vllm/v1/worker/utils.py:241-249 and "
                                "vllm/v1/attention/backends/mla/indexer.py:558-562: block_table_width = "
                                "get_block_table_width, aligned to 128 tokens"),))
    swa_prefill_indices: bool = rule(  # the sliding-window builder keeps prefill indices beside the decode indices
        False, "vllm==0.23.0 vllm/v1/attention/backends/mla/sparse_swa.py:243-256: decode indices only",
        (Change("0.24.0", True, "vllm==0.24.0 vllm/v1/attention/backends/mla/sparse_swa.py:339-360: prefill "
                                "indices of the same shape beside them"),))
    # none, "floor seqs x block" or "floor block": the chunked-prefill workspace
    sparse_mla_prefill_workspace: str = rule(
        "none", "vllm==0.25.1 vllm/model_executor/layers/attention/: no sparse_mla_attention.py, the sparse-MLA "
                "builders keep no workspace",
        (Change("0.26.0", "floor seqs x block", "vllm==0.26.0 vllm/model_executor/layers/attention/"
                                                "sparse_mla_attention.py:72-114: a BF16 chunked-prefill workspace, at "
                                                "least max_num_seqs x block rows"),
         Change("0.28.0", "floor block", "vllm==0.28.0 vllm/model_executor/layers/attention/sparse_mla_attention.py:"
                                         "199: at least one block of rows (vllm==0.33.0 :288)")))
    masked_mha_mask_bytes: int = rule(  # the masked-MHA top-k mask of a sparse-MLA builder
        0, "vllm==0.26.0 vllm/model_executor/layers/attention/sparse_mla_attention.py: no top-k mask",
        (Change("0.27.0", 64 * MIB, "vllm==0.27.0 vllm/model_executor/layers/attention/sparse_mla_attention.py:43, "
                                    "120-133: GLOBAL_TOPK_MASK_MAX_BYTES = 64 MiB"),
         Change("0.28.0", 128 * MIB, "vllm==0.28.0 vllm/model_executor/layers/attention/sparse_mla_attention.py:48: "
                                     "128 MiB (vllm==0.33.0 :67)")))
    masked_mha_architectures: frozenset = rule(  # the models whose dims the masked-MHA prefill takes
        frozenset(), "vllm==0.26.0: no masked-MHA prefill",
        (Change("0.27.0", frozenset({V32}), "vllm==0.27.0 vllm/model_executor/layers/attention/"
                                            "sparse_mla_attention.py:46-67: 128 heads, kv_lora_rank 512, nope 128, "
                                            "rope 64, v 128 (DeepSeek-V3.2), FA4, an unquantized cache, SM10x"),
         Change("0.29.0", frozenset({V32, GLM5}), "vllm==0.29.0 vllm/model_executor/layers/attention/"
                                                  "sparse_mla_attention.py:91-100: also GLM-5's (64, 512, 192, 64, "
                                                  "256)"),
         Change("0.30.0", frozenset({V32, GLM5, GLM5NEXT}),
                "vllm==0.30.0 vllm/model_executor/layers/attention/sparse_mla_attention.py:104-116: also "
                "GLM-5.3-Flash's (64, 512, 256, 0, 256)")))
    mla_groups_split_by_index_leader: bool = rule(  # MLA layers with and without an indexer get separate builders
        False, "vllm==0.29.0 vllm/model_executor/layers/attention/mla_attention.py: one MLA spec for every layer",
        (Change("0.30.0", True, "vllm==0.30.0 vllm/model_executor/layers/attention/mla_attention.py:1372: "
                                "is_index_group_leader in the MLA spec, so layers without an indexer form their own "
                                "attention group (vllm==0.33.0 vllm/v1/worker/gpu/attn_utils.py:252-265)"),))
    # a backend's smaller kernel blocks mapped per attention group
    kernel_block_tables_per_attention_group: bool = rule(
        False, "vllm==0.31.0 vllm/v1/worker/gpu/block_table.py:48-58: a group's block tables hold its common kernel "
               "blocks",
        (Change("0.32.0", True, "vllm==0.32.0 vllm/v1/worker/utils.py: AttentionGroup.kernel_block_table, int32 "
                                "[builders, max_num_seqs, width in kernel blocks], for a backend whose kernel block is "
                                "smaller (vllm==0.33.0 vllm/v1/worker/utils.py:317-324)"),))
    # the kpool indexer's kernel blocks: kpool x a paged-MQA page (else 64)
    kpool_indexer_pooled_kernel_blocks: bool = rule(
        False, "vllm==0.31.0 vllm/v1/attention/backends/mla/indexer.py: GLM-5.3-Flash's indexer takes the V3.2 "
            "indexer's 64-token kernel block (vllm==0.30.0 indexer.py:203-204)",
        (Change("0.32.0", True, "vllm==0.32.0 vllm/v1/attention/backends/mla/indexer.py:296-306 "
                                "Glm5NextIndexerBackend: index_kpool x each paged-MQA page size "
                                "(vllm/utils/deep_gemm.py:33-36)"),))
    # GLM-5.3-Flash's tail ring takes a block-table row of 128 tokens (else one block)
    kpool_tail_row_aligned: bool = rule(
        True, "vllm==0.30.0 vllm/v1/kv_cache_interface.py:971-980 (the first release with GLM-5.3-Flash): the tail "
              "ring is a KpoolTailSpec, a SlidingWindowSpec of one block whose row keeps the 128-token alignment "
              "(:201-202; vllm/v1/worker/gpu/model_runner.py:609-619)",
        (Change("0.32.0", False, "vllm==0.32.0 vllm/models/glm5next/common/attention.py:156-179: a CircularBufferSpec, "
                                 "whose row is one block, unaligned (vllm==0.33.0 vllm/v1/kv_cache_interface.py:"
                                 "979-989)"),))
    rocm_sparse_mla_common_builder: bool = rule(  # AITER's sparse-MLA builder is a SparseMLACommonMetadataBuilder
        False, "vllm==0.31.0 vllm/v1/attention/backends/mla/rocm_aiter_mla_sparse.py:370-372: AITER's builder is "
               "its own (no chunked-prefill workspace)",
        (Change("0.32.0", True, "vllm==0.32.0 vllm/v1/attention/backends/mla/rocm_aiter_mla_sparse.py:423-425: a "
                                "SparseMLACommonMetadataBuilder"),))
    # What a release has: the model architectures, the sparse-MLA backends, config values that came late
    model_architectures: frozenset = rule(  # in the model registry
        frozenset({V32, GLM5}), "vllm==0.19.0 vllm/model_executor/models/registry.py:98, 120",
        (Change("0.20.0", frozenset({V32, GLM5, V4}), "vllm==0.20.0 vllm/model_executor/models/registry.py:99"),
         Change("0.30.0", frozenset({V32, GLM5, V4, V41, GLM5NEXT}),
                "vllm==0.30.0 vllm/model_executor/models/registry.py:379-382, 429-432 (vllm==0.29.0 has neither)")))
    sparse_mla_backends: frozenset = rule(  # in the attention-backend registry
        SPARSE_MLA_019, "vllm==0.19.0 vllm/v1/attention/backends/registry.py:57, 66, 73",
        (Change("0.23.0", SPARSE_MLA_019 | SPARSE_MLA_V4, "vllm==0.23.0 vllm/v1/attention/backends/registry.py:80, 83"),
         Change("0.24.0", SPARSE_MLA_019 | SPARSE_MLA_V4 | {"FLASHINFER_MLA_SPARSE_SM120"},
                "vllm==0.24.0 vllm/v1/attention/backends/registry.py:76"),
         Change("0.25.0", SPARSE_MLA_025, "vllm==0.25.0 vllm/v1/attention/backends/registry.py:98"),
         Change("0.30.0", SPARSE_MLA_030, "vllm==0.30.0 vllm/v1/attention/backends/registry.py:86, 110, 113"),
         Change("0.31.0", SPARSE_MLA_030 | {"FLASHMLA_MEGA_ATTN_DSV41"},
                "vllm==0.31.0 vllm/v1/attention/backends/registry.py:117"),
         Change("0.33.0", SPARSE_MLA_030 | {"FLASHMLA_MEGA_ATTN_DSV41", "FLASH_ATTN_MLA_SPARSE_FA4"},
                "vllm==0.33.0 vllm/v1/attention/backends/registry.py:131")))
    indexer_kv_dtype_auto: bool = rule(  # attention-config.indexer_kv_dtype takes auto
        False, "vllm==0.27.0 vllm/config/attention.py:13 IndexerKVDType: bf16, fp8, mxfp4, nvfp4",
        (Change("0.28.0", True, "vllm==0.28.0 vllm/config/attention.py:16 IndexerKVDType: auto too"),))
    v4_mxfp4_indexer_entries: bool = rule(  # DeepSeek-V4's MXFP4 indexer stores 68 B entries (else the FP8 132 B)
        False, "vllm==0.26.0 vllm/models/deepseek_v4/attention.py:729-733: the indexer cache's entries are the FP8 "
               "layout's 132 B whatever its dtype",
        (Change("0.27.0", True, "vllm==0.27.0 vllm/models/deepseek_v4/attention.py:782-790: MXFP4 entries of "
                                "64 packed bytes + 4 UE8M0 scales = 68 B"),))
    # architecture -> the cache dtype vLLM runs for kv-cache-dtype auto on SM10x
    sm10x_auto_kv_cache_dtypes: dict = rule(
        {}, "vllm==0.31.0 vllm/model_executor/models/config.py:43-50: no rule of auto for the DSA models",
        (Change("0.32.0", {GLM5: "fp8_e4m3"}, "vllm==0.32.0 vllm/model_executor/models/config.py:49-55"),
         Change("0.33.0", {GLM5: "fp8_e4m3", GLM5NEXT: "fp8"},
                "vllm==0.33.0 vllm/model_executor/models/config.py:119-145, 1228-1229 (Glm5NextModelConfig; Hopper "
                "stays BF16: the recipe says FP8 KV does not work there for this model)")))


    @property
    def label(self) -> str:
        if self.name == "deepinfer":
            return f"DeepInfer {self.version}"
        return f"vLLM main (unreleased, {MAIN_COMMIT} and later)" if self.version == MAIN else f"vLLM {self.version}"

    @property
    def newer_than_modelled(self) -> bool:
        """A vLLM after the newest release whose rules were read: it gets that release's rules."""
        return self.name == "vllm" and self.version != MAIN and parsed(self.version) > parsed(NEWEST_VLLM)


VLLM_RULES = {f.name: f.metadata["rule"] for f in fields(Engine) if "rule" in f.metadata}


@functools.cache
def vllm(version: str) -> Engine:
    key = parsed(version)
    if version != MAIN:  # a release newer than the newest modelled takes the newest's rules
        key = min(key, parsed(NEWEST_VLLM))
    values, sources = {}, {}
    for name, history in VLLM_RULES.items():
        values[name], sources[name] = history.at(key)
    return Engine(name="vllm", version=version, rows_capped_by_batched_tokens=True, logits_over_compressed_keys=False,
                  topk_backend=None, profile_holds_decode_logits=False, sources=sources, **values)


DEEPINFER_SOURCE = "the seed: DeepInfer@774ce24 index_attn.py#L87, #L95, #L434-L441; model_runner.py#L444-L511"
DEEPINFER_DEFAULTS = "not documented for DeepInfer: vLLM's newest defaults stand in (estimated)"
NEWEST = vllm(NEWEST_VLLM)
DEEPINFER = Engine(
    name="deepinfer", version="774ce24", rows_capped_by_batched_tokens=False, logits_over_compressed_keys=True,
    topk_backend="deepinfer", profile_holds_decode_logits=True,
    sources={name: DEEPINFER_DEFAULTS for name in VLLM_RULES} | {"reserves_decode_logits": DEEPINFER_SOURCE},
    **{f.name: getattr(NEWEST, f.name) for f in fields(Engine) if f.name in VLLM_RULES})
