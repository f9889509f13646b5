"""How vLLM versions are named and ordered (engine.py): releases, pre-releases, main's builds and DeepInfer, each
against the seed or a vLLM release."""

import pytest

from dsa_kvcalc import engine, planning
from dsa_kvcalc.recipe import load_recipe

from conftest import SEED


def test_deepinfer_and_vllm_main_are_named_as_the_seed_names_them():
    # the seed: DeepInfer@774ce24; vLLM main after PR #62860, merged 2026-10-28 as 317081f
    assert engine.DEEPINFER.label == "DeepInfer 774ce24"
    assert engine.vllm("main").label == "vLLM main (unreleased, 317081f and later)"
    assert engine.vllm("0.33.0").label == "vLLM 0.33.0"


def test_only_a_release_after_033_is_newer_than_modelled():
    # v0.33.0 is the newest tag of the releases read (vllm-releases: v0.19.0 .. v0.33.0)
    assert not engine.vllm("0.33.0").newer_than_modelled
    assert engine.vllm("0.33.1").newer_than_modelled


def test_deepinfer_holds_max_num_seqs_rows_whatever_the_batched_tokens():
    # the seed: DeepInfer's profile_run runs max_num_seqs sequences of 1 + nextn tokens (model_runner.py#L444-L511),
    # its logits BF16 over 1M // 4 = 262,144 keys, padded to 171 x 1536 = 262,656 columns on SM100. At 512 sequences
    # and 256 batched tokens that is 512 x 6 = 3072 rows (vLLM would cap them at 256 x 6 = 1536), and the profile
    # holds them: 3072 x 262,656 x 2 B = 1,613,758,464 B reserved, on either side of #62860.
    plan = planning.plan(load_recipe(SEED, ["engine=deepinfer", "memory={}", "max-num-seqs=512",
                                            "max-num-batched-tokens=256"]))
    (deepinfer,) = plan.backends
    assert deepinfer.decode_logits.rows == 3072
    assert deepinfer.release.reserved_bytes == deepinfer.other.reserved_bytes == 1_613_758_464
    assert not deepinfer.oom.at_risk


def test_a_pre_release_of_the_newest_is_not_newer_than_it():
    # 0.33.0rc1 and 0.33.0.dev4 are builds towards v0.33.0 (the newest tag): its rules, no "newer" warning
    assert not engine.vllm("0.33.0rc1").newer_than_modelled
    assert not engine.vllm("0.33.0.dev4").newer_than_modelled


def test_only_main_s_own_commit_names_main():
    # main after #62860 is 317081f; a build of 3170810 (the same first six hex digits) is another commit
    assert engine.build_of("0.34.0.dev3+g317081f") == "main"
    assert engine.build_of("0.34.0.dev3+g3170810") == "0.34.0.dev3+g3170810"


def test_an_old_release_numbered_0_2_is_a_release_not_a_source_build():
    # vLLM 0.2.0 (September 2023) is a release on the package index, older than 0.19.0: it is told to be too old,
    # not taken for a source build (which numbers itself 0.1.devN)
    with pytest.raises(ValueError, match="0.2.0 is older than 0.19.0"):
        engine.build_of("0.2.0")
    with pytest.raises(ValueError, match="is a source build"):
        engine.build_of("0.1.dev1")
