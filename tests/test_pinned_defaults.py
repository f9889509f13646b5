"""defaults.py's rules that no other test pins (found by tools/mutate.py), each against a vLLM release."""

from dsa_kvcalc.recipe import load

V32_H200 = {"model": "DeepSeek-V3.2", "gpu": "H200", "tensor-parallel-size": 8}


def test_the_default_batched_tokens_are_capped_by_the_given_max_num_seqs():
    # vllm==0.33.0 vllm/engine/arg_utils.py:3219-3224: the default max_num_batched_tokens is at most max_num_seqs x
    # max_model_len, with max_num_seqs as given: the H200's tier (>= 70 GiB: 8192 tokens, vllm/engine/arg_utils.py
    # get_batch_defaults) capped at 4 x 1024 = 4096 (the tier's own 1024 sequences would leave 8192)
    recipe = load(V32_H200 | {"max-model-len": 1024, "max-num-seqs": 4})
    assert (recipe.max_num_batched_tokens, recipe.max_num_seqs) == (4096, 4)


def test_batched_dp_moe_needs_more_than_one_data_parallel_rank():
    # vllm==0.33.0 vllm/config/parallel.py:796-805: use_batched_dp_moe needs deepep_low_latency or nixl_ep, expert
    # parallelism and data_parallel_size > 1; at DP 1 the H200's tier stays, 8192 tokens (not 256)
    recipe = load(V32_H200 | {"enable-expert-parallel": True, "all2all-backend": "deepep_low_latency"})
    assert recipe.max_num_batched_tokens == 8192
    dp2 = load(V32_H200 | {"tensor-parallel-size": 4, "data-parallel-size": 2, "enable-expert-parallel": True,
                           "all2all-backend": "deepep_low_latency"})
    assert dp2.max_num_batched_tokens == 256
