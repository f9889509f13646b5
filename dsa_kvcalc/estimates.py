"""Every figure that is estimated or fitted rather than derived, in one place, each with what it rests on.

Derived figures (from a model's config and a rule cited to vLLM's source) live in kv_cache.py and capacity.py.
Measured figures come from the user's recipe (its memory block) or a vLLM log (calibrate). What is here stands in
where neither gives a measurement; plan marks each such term "estimated" or "fitted" in its output.
"""

from dataclasses import dataclass

from dsa_kvcalc.catalog import GIB


@dataclass(frozen=True)
class Figure:
    value: float
    provenance: str  # estimated or fitted
    basis: str  # what it rests on: the data points for a fit, the reasoning for an estimate


# BF16 hidden-sized temporaries live at the dummy run's peak, per batched token, on top of the prefill logits budget.
ACTIVATION_HIDDEN_COPIES = Figure(
    24, "estimated",
    "an order-of-magnitude allowance for the MoE dispatch, attention and MLP temporaries of one "
    "max-num-batched-tokens step; not fitted to any log. Measure it (calibrate) for a real figure")
NON_TORCH_SINGLE = Figure(
    1 * GIB, "estimated", "CUDA context, cuBLAS and DeepGEMM workspaces of one process (0.67 GiB measured by "
                          "verify --profile on the H200, without NCCL)")
NON_TORCH_COLLECTIVES = Figure(
    GIB + GIB // 2, "estimated", "NCCL and custom all-reduce buffers added when TP x DP > 1 (no log prints them "
                                 "apart from the other non-torch memory)")
CUDAGRAPH_BESIDES_LOGITS = Figure(
    GIB + GIB // 2, "estimated", "CUDA-graph pool memory besides the indexer logits; a vLLM 0.25.0 V4-Flash log "
                                 "estimated 1.58 GiB in all (tests/fixtures/vllm_logs, RTX PRO 6000 TP2)")
