"""kv_init_buffers.py against vLLM's own code: oracle/kv_init_buffers.py runs a release's model runner on the CPU (its
initialize_kv_cache up to the KV tensors, its draft speculator's or proposer's own attention groups) with the GPU as the
"meta" device, where a tensor has a shape and no storage. The module's figure must equal the bytes of the buffers it
models, by the attribute vLLM keeps each in; the builders' small vectors it leaves out must stay below 4 MiB. Marked
vllm_oracle: skipped where oracle/setup.sh has not set the release up.

    .venv/bin/python -m pytest -q -m vllm_oracle tests/test_vllm_kv_init_buffers.py     # about 2 minutes
"""

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT
from dsa_kvcalc.deployment import on_model_runner_v2
from dsa_kvcalc.recipe import load
from test_kv_init_buffers import MIB, figure

sys.path.insert(0, str(ROOT / "oracle"))

import cases  # noqa: E402
import kv_init_cases  # noqa: E402
import table  # noqa: E402

pytestmark = pytest.mark.vllm_oracle
SET_UP = table.available_releases()
# (release, oracle case name): each family on each runner it runs (V4.1 at 0.30.0 as the probe: the seed's
# indexer_sparse_logits is no field of 0.30.0); the masked-MHA mask (V3.2 B200 BF16 at 0.28.0,
# GLM-5 B200 BF16 at 0.29.0);
# GLM-5.3-Flash's kernel block tables (0.32.0) and its 0.30.0 layout
ORACLE_POINTS = [
    ("0.33.0", "deepseek-v4.1-flash-4xb200-dep4"), ("0.33.0", "deepseek-v4-flash-4xh200-dep4"),
    ("0.33.0", "deepseek-v3.2-8xb200-tp8"), ("0.30.0", "probe deepseek-ai/DeepSeek-V4.1-Flash B200"),
    ("0.30.0", "probe zai-org/GLM-5.3-Flash B200 mtp k=3"), ("0.32.0", "probe zai-org/GLM-5.3-Flash B200"),
    ("0.32.0", "probe zai-org/GLM-5.2-FP8 H200 L=131072"), ("0.29.0", "probe zai-org/GLM-5-FP8 B200"),
    ("0.28.0", "glm-5-8xb200-tp8"), ("0.28.0", "probe deepseek-ai/DeepSeek-V3.2 B200"),
    ("0.24.0", "deepseek-v4-flash-4xh200-dep4"), ("0.24.0", "deepseek-v3.2-8xh200-tp8"),
]
# The buffers the module models, by the attribute vLLM keeps them in (the rest: builders' small vectors)
MODELLED = re.compile(r"(\.block_tables\[\d+\]\.gpu|\.block_table\.gpu|\.input_block_tables\[\d+\]|\.slot_mappings|"
                      r"\.slot_mapping\.gpu|\.expanded_block_table_buffer|\.kernel_block_table|\.sparse_indices_buffer|"
                      r"\.col_indices_buffer|\.decode_swa_indices|\.prefill_swa_indices|\.c128a_global_decode_buffer|"
                      r"\.c128a_prefill_buffer|\.chunked_prefill_workspace|\.topk_mask_workspace)$")
SMALL_BYTES = 4 * MIB


@pytest.fixture(scope="module")
def vllm_buffers() -> dict:
    """{(release, name): (the oracle's result, the raw recipe)} for ORACLE_POINTS, one process a release."""
    entries = {entry[0]: entry for entry in cases.everything()}
    by_release: dict[str, list] = {}
    raws = {}
    for release, name in ORACLE_POINTS:
        if release not in SET_UP:
            continue
        point = kv_init_cases.point(release, *entries[name])
        recipe = load({**entries[name][1], "vllm-version": release})
        by_release.setdefault(release, []).append(dict(point.case, runner="v2" if on_model_runner_v2(recipe) else "v1"))
        raws[(release, name)] = entries[name][1]
    answers = {}
    for release, oracle_cases in by_release.items():
        done = subprocess.run([str(table.PYTHON), str(ROOT / "oracle" / "kv_init_buffers.py"),
                               str(table.RELEASES_DIR / release)], input=json.dumps(oracle_cases), capture_output=True,
                              text=True, timeout=900, env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"})
        assert done.returncode == 0, done.stderr[-2000:]
        for result in json.loads(done.stdout)["results"]:
            answers[(release, result["name"])] = (result, raws[(release, result["name"])])
    return answers


@pytest.mark.parametrize("release,name", ORACLE_POINTS)
def test_vllm_builds_what_the_module_counts(vllm_buffers, release, name):
    if release not in SET_UP:
        pytest.skip(f"vLLM {release} is not set up: bash oracle/setup.sh {release}")
    result, raw = vllm_buffers[(release, name)]
    assert "rows" in result, result.get("error", result)
    modelled = sum(row["bytes"] for row in result["rows"] if MODELLED.search(row["path"]))
    small = sum(row["bytes"] for row in result["rows"] if not MODELLED.search(row["path"]))
    assert figure({**raw, "vllm-version": release}) == modelled, [
        (row["path"], row["shape"], row["bytes"]) for row in result["rows"] if MODELLED.search(row["path"])]
    assert 0 <= small < SMALL_BYTES
