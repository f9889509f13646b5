"""The engine a recipe runs on, as data: vLLM at a version, or DeepInfer. The model's steps consult its profile;
nothing else compares engine names or versions.

vLLM's rules move between releases. VLLM_RULES gives each rule's value in the oldest release modelled and every later
change: the first release with the new value, and the source (file:line at a commit of vllm-project/vllm, read on
the mirror gau-nernst/vllm, and the PR). Where the release is inferred rather than read off release notes, the source
says so. An Engine is the value of every rule at one version.
"""

import functools
import re
from dataclasses import dataclass, field, fields

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

    def at(self, version: tuple[int, ...]) -> tuple[object, str]:
        value, source = self.initial, self.source
        for change in self.changes:
            if version >= release_tuple(change.release):
                value, source = change.value, change.source
        return value, source


@functools.cache
def release_tuple(version: str) -> tuple[int, ...]:
    """'0.20.1.dev1+g1234' -> (0, 20, 1); main -> just after the newest release."""
    if version == MAIN:
        return (*release_tuple(NEWEST_VLLM), 1)
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def build_of(version: str) -> str:
    """The version whose rules a build takes: the release or main whose commit it names (+gHASH), else the release
    its number names. A source build numbered 0.1.devN names none: ValueError, with how to name its base."""
    commit = re.search(r"\+g([0-9a-f]{7,40})", version)
    if commit:
        if MAIN_COMMIT.startswith(commit[1][:7]):
            return MAIN
        known = next((release for release, c in RELEASE_COMMITS.items() if c[:7] == commit[1][:7]), None)
        if known:
            return known
    if version == MAIN or release_tuple(version) >= release_tuple(OLDEST_VLLM):
        return version
    raise ValueError(f"{version} is a source build{f' of commit {commit[1]}' if commit else ''}, not a release: name "
                     f"the release it was built on (vllm-version: {NEWEST_VLLM}, or main for vLLM main after #62860)")


@dataclass(frozen=True)
class Engine:
    """What the capacity steps need to know about the engine. The fields after `sources` come from VLLM_RULES."""

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
    sources: dict = field(compare=False)  # rule -> where its value comes from
    reserves_decode_logits: bool  # vLLM PR #62860
    default_gpu_memory_utilization: float
    estimates_cudagraphs: bool  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS on by default (Model Runner V1)
    dsa_on_model_runner_v2: bool  # DSA models run on Model Runner V2 by default (CUDA)
    dspark_on_model_runner_v2: bool  # speculative method dspark forces Model Runner V2
    model_runner_v2_estimates_cudagraphs: bool
    rocm_estimates_cudagraphs: bool
    # (GPU memory from, in GiB; max_num_seqs; max_num_batched_tokens) for the OpenAI server, largest tier first
    batch_defaults: tuple[tuple[int, int, int], ...]
    capture_ceiling_sm100: int  # the default largest CUDA-graph capture size on SM10x (512 elsewhere)
    topk_backend_flag: bool  # --sparse-indexer-topk-backend exists (else the built-in auto chain only)
    cooperative_topk_max_rows: int
    in_flight_batches: int  # window caches hold max_concurrent_batches x max_num_batched_tokens new tokens
    retains_draft_tokens: bool  # window caches keep k - 1 more tokens for multi-layer MTP
    kv_block_rule: str  # DeepSeek-V4's packed layout: tuple, bucket or overlay (kv_cache.block_bytes)
    pad_window_pages: bool  # window pages padded up to the next full-attention page size
    concurrency_counts_pages: bool  # pages per request summed over groups (else a byte ratio)
    tokens_from_concurrency: bool  # "GPU KV cache size" = int(concurrency x max_model_len)
    shared_indexers_skip_cache: bool  # layers that skip the top-k (GLM-5.2) build no indexer, so no indexer cache
    rocm_locks_indexer_workspace: bool  # AITER's (max_num_batched_tokens, max_model_len) FP32 decode workspace
    logged_peak_includes_cudagraphs: bool  # "Actual usage ... peak activation" includes the graph estimate

    @property
    def label(self) -> str:
        if self.name == "deepinfer":
            return f"DeepInfer {self.version}"
        return f"vLLM main (unreleased, {MAIN_COMMIT} and later)" if self.version == MAIN else f"vLLM {self.version}"

    @property
    def newer_than_modelled(self) -> bool:
        """A vLLM after the newest release whose rules were read: it gets that release's rules."""
        return self.name == "vllm" and self.version != MAIN and release_tuple(self.version) > release_tuple(NEWEST_VLLM)


MIRROR = "vllm-project/vllm (read at d29f7f5 on the mirror gau-nernst/vllm)"
WORKER = f"{MIRROR} vllm/v1/worker/gpu_worker.py:527-563"
ARG_UTILS = f"{MIRROR} vllm/engine/arg_utils.py:2603-2632"
SEED = "the seed (vLLM PR #62860, merged 2026-10-28 as 317081f)"
AFTER_SEED = ("inferred: v0.32.0 (out by 2026-10-20) predates the merge and v0.33.0 (out by 2026-11-05) is the "
              "first release after it; no v0.33.0 release notes were found")

VLLM_RULES = {
    "reserves_decode_logits": Rule(
        False, "vllm==0.33.0 vllm/model_executor/layers/sparse_attn_indexer.py:501-506: the profiling branch reserves "
               "VLLM_SPARSE_INDEXER_MAX_LOGITS_MB of logits, no decode term (so in every release from 0.19.0); "
               "V4.1's vllm/model_executor/layers/sparse_mqa_indexer.py:124 likewise",
        (Change(MAIN, True, f"{SEED}: the profiling branch reserves max(prefill budget, decode worst case); in no "
                            f"release up to {NEWEST_VLLM}"),)),
    "default_gpu_memory_utilization": Rule(
        0.90, f"{MIRROR} vllm/config/cache.py: gpu_memory_utilization default 0.9",
        (Change("0.20.0", 0.92, "vLLM PR #38284 (96a85c575, 2026-04-21): default 0.92 (vllm/config/cache.py:80); "
                                "a v0.20.0 startup log shows it"),)),
    "estimates_cudagraphs": Rule(
        False, f"{WORKER}: graph memory measured but not subtracted (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0); "
               f"graphs are captured after the KV cache, out of the (1 - utilisation) margin",
        (Change("0.20.0", True, f"vLLM PR #38284 (96a85c575): VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 by default "
                                f"({WORKER}; vllm/envs.py:2092-2097). The log line says 'default since v0.21.0'; "
                                f"v0.20.0 already has it"),)),
    "dsa_on_model_runner_v2": Rule(
        False, f"{MIRROR} vllm/config/vllm.py:69-82: MoE models ran on Model Runner V1",
        (Change("0.28.0", True, "vLLM PR #51768 (87668ab69, 2026-08-11: DeepseekV4ForCausalLM) and #52861 "
                                "(b09bd69b5, 2026-08-19: DeepseekV32ForCausalLM, GlmMoeDsaForCausalLM) make Model "
                                "Runner V2 the default (vllm/config/vllm.py:69-82); #52861 in v0.28.0 is probable"),)),
    "dspark_on_model_runner_v2": Rule(
        False, "before vLLM PR #46995 DSpark drafts ran on the configured runner",
        (Change("0.25.0", True, f"vLLM PR #46995 (f5a8d7337, 2026-07-01): method dspark forces Model Runner V2 "
                                f"({MIRROR} vllm/config/vllm.py:658-666)"),)),
    "model_runner_v2_estimates_cudagraphs": Rule(
        False, f"vLLM PR #36520 (6e956d9ec, 2026-03-09): Model Runner V2's profile_cudagraph_memory() returns 0 "
               f"({MIRROR} vllm/v1/worker/gpu/model_runner.py:851-853), so no graph memory is subtracted",
        (Change("0.33.0", True, f"inferred from {SEED}: its KV cache per rank moved with the CUDA-graph pool "
                                f"(18.40 vs 12.39 GiB: 41,050,274 vs 48,253,887 tokens), so that build subtracted "
                                f"graphs for DeepSeek-V4.1; the change itself was not found in vLLM's source"),)),
    "rocm_estimates_cudagraphs": Rule(
        False, f"vLLM PR #36720 (2026-03-17): the graph estimate is skipped on ROCm ({WORKER})",
        (Change("0.26.0", True, "vLLM PR #48526 (05eed72ae, 2026-07-15): the estimate runs on ROCm too"),)),
    "batch_defaults": Rule(
        ((70, 1024, 8192), (0, 256, 2048)), f"{ARG_UTILS}: OpenAI-server defaults by GPU memory (A100 excluded)",
        (Change("0.28.0", ((160, 1024, 16384), (70, 1024, 8192), (0, 256, 2048)),
                f"vLLM PR #51726 (4988df2eb, 2026-08-11): GPUs of 160 GiB and more default to 16384 tokens "
                f"({ARG_UTILS})"),)),
    "capture_ceiling_sm100": Rule(
        512, f"{MIRROR} vllm/config/vllm.py:1984-1993: min(max_num_seqs x (1 + k) x 2, 512)",
        (Change("0.28.0", 1024, "vLLM PR #49390 (021b7d985, 2026-08-07): 1024 on the SM10x family "
                                "(vllm/config/vllm.py:1985); a v0.26.0 GB200 log prints largest=512"),)),
    "topk_backend_flag": Rule(
        False, f"{MIRROR} vllm/model_executor/layers/sparse_attn_indexer.py:617-666: cooperative, persistent or "
               f"per-row top-k, chosen inside the op; no flag",
        (Change("0.30.0", True, "vLLM PR #56464 (opened 2026-09-11): --sparse-indexer-topk-backend and "
                                "vllm/model_executor/layers/indexer_topk.py; the release is a third-party tool's "
                                "label ('vLLM 0.30.0+'), unverified"),)),
    "cooperative_topk_max_rows": Rule(
        32, f"{MIRROR} vllm/model_executor/layers/sparse_attn_indexer.py:620: num_rows <= 32",
        (Change("0.30.0", 64, "vllm/model_executor/layers/indexer_topk.py:20 (stored copy 0fd8f21): "
                              "AUTO_COOPERATIVE_MAX_ROWS = 64; the PR that raised it is unverified"),)),
    "in_flight_batches": Rule(
        1, "vllm/v1/kv_cache_interface.py:546-577 at 65dcde169 (v0.25.0): a window holds window - 1 + "
           "max_num_batched_tokens new tokens",
        (Change("0.26.0", 2, "vLLM PR #47728 (cd0de48d0, 2026-07-08): window - 1 + max_concurrent_batches x "
                             "max_num_batched_tokens, 2 batches with async scheduling (vllm/config/vllm.py:583-605); "
                             "v0.25.0 is main of 2026-07-07 by its log's line numbers"),)),
    "retains_draft_tokens": Rule(
        False, "before vLLM PR #50062 windows kept no draft tokens",
        (Change("0.28.0", True, "vLLM PR #50062 (f80b66f54, 2026-08-13): extra_retained_tokens = k - 1 when "
                                "min(num_nextn_predict_layers, k) > 1 (vllm/v1/core/kv_cache_utils.py:2191-2203)"),)),
    "kv_block_rule": Rule(
        "tuple", "vllm/v1/core/kv_cache_utils.py:1179-1218 at 6aabe221a: DeepSeek-V4 blocks = available // (distinct "
                 "page sizes x layer tuples)",
        (Change("0.23.0", "bucket", "vLLM PR #44454 (4dcd10eb0, 2026-06-07): layers bucketed by page size "
                                    "(kv_cache_utils.py:1230-1293 at 65dcde169); a v0.23.0 H200 NVL log fits only this"),
         Change("0.27.0", "overlay", "vLLM PR #48993 (f3a920a07, 2026-07-22): groups overlay one slab, a block costs "
                                     "the largest group's pages (kv_cache_utils.py:1299-1358)"))),
    "pad_window_pages": Rule(
        True, "vllm/v1/core/kv_cache_utils.py:1626-1640 at 65dcde169: window pages padded to full-group page sizes",
        (Change("0.27.0", False, "vLLM PR #48993 (f3a920a07, 2026-07-22): no padding"),)),
    "concurrency_counts_pages": Rule(
        False, "vllm/v1/core/kv_cache_utils.py:919-937 at 65dcde169: pages per request as a byte ratio",
        (Change("0.27.0", True, "vLLM PR #48317 (2e2e626b4, 2026-07-21): pages per request summed over groups "
                                "(kv_cache_utils.py:967-989); v0.26.0 is main of 2026-07-17..20 by its log's line "
                                "numbers"),)),
    "tokens_from_concurrency": Rule(
        False, "before vLLM e68fa1b90: GPU KV cache size = blocks // groups x the smallest block",
        (Change("0.21.0", True, "vLLM #41069 (e68fa1b90, 2026-04-28, after the v0.20.0 branch point): "
                                "int(concurrency x max_model_len) (kv_cache_utils.py:1904-1914)"),)),
    "shared_indexers_skip_cache": Rule(
        False, "vLLM PR #44420 (32f34d393, 2026-06-07): layers that skip the top-k still build their indexer",
        (Change("0.24.0", True, f"vLLM PR #45895 (ab6660699, 2026-06-19): skipped layers build no indexer, MTP "
                                f"layers always do ({MIRROR} vllm/models/deepseek_v32/attention.py:164-197)"),)),
    "rocm_locks_indexer_workspace": Rule(
        False, "before vLLM PR #41002 the AITER indexer allocated its decode logits per call",
        (Change("0.23.0", True, f"vLLM PR #41002 (b4a6f26c9, 2026-06-05): {MIRROR} "
                                f"vllm/v1/attention/ops/rocm_aiter_mla_sparse.py:738-750 locks a (max_num_batched_tokens, "
                                f"max_model_len) FP32 workspace during profiling (vLLM issue #55132, open)"),)),
    "logged_peak_includes_cudagraphs": Rule(
        False, f"{WORKER}: 'Actual usage ... W GiB for weight, P GiB for peak activation' (torch peak only)",
        (Change("0.27.0", True, "vLLM PR #49208 (58b2012aa, 2026-07-20): peak activation = transient peak + the "
                                "applied graph estimate; 'consumed memory (weights + non-torch)'"),)),
}


@functools.cache
def vllm(version: str) -> Engine:
    key = release_tuple(version)
    if version != MAIN:  # a release newer than the newest modelled takes the newest's rules
        key = min(key, release_tuple(NEWEST_VLLM))
    values, sources = {}, {}
    for name, rule in VLLM_RULES.items():
        values[name], sources[name] = rule.at(key)
    return Engine(name="vllm", version=version, rows_capped_by_batched_tokens=True, logits_over_compressed_keys=False,
                  topk_reads_bf16=False, topk_backend=None, profile_holds_decode_logits=False, sources=sources,
                  **values)


DEEPINFER_SOURCE = "the seed: DeepInfer@774ce24 index_attn.py#L87, #L95, #L434-L441; model_runner.py#L444-L511"
DEEPINFER_DEFAULTS = "not documented for DeepInfer: vLLM's newest defaults stand in (estimated)"
NEWEST = vllm(NEWEST_VLLM)
DEEPINFER = Engine(
    name="deepinfer", version="774ce24", rows_capped_by_batched_tokens=False, logits_over_compressed_keys=True,
    topk_reads_bf16=True, topk_backend="deepinfer", profile_holds_decode_logits=True,
    sources={name: DEEPINFER_DEFAULTS for name in VLLM_RULES} | {"reserves_decode_logits": DEEPINFER_SOURCE},
    **{f.name: getattr(NEWEST, f.name) for f in fields(Engine) if f.name in VLLM_RULES})
