"""Model Runner V2's CUDA-graph estimate as each release computes it, run on a CPU: one release per process, inside the
oracle's venv, for releases from 0.29.0 (before, V2's profile_cudagraph_memory returns 0).

    VENV/bin/python oracle/cudagraph_estimate.py RELEASE_DIR < cases.json > results.json

vllm/v1/worker/gpu/cudagraph_utils.py imports the GPU runtime at its top, so its pieces that decide the estimate's
arithmetic are taken from the release's own file by name and run as they are written: BatchExecutionDescriptor,
CudaGraphManager._init_candidates (the graphs V2 captures, per mode, largest first), _FULL_GRAPH_PROFILING_SAMPLES,
_MIN_PER_GRAPH_BYTES and _extrapolate_full_graph_memory. A case is the inputs of VllmConfig._set_cudagraph_sizes (as
oracle/capture_sizes.py takes them), a cudagraph_mode, and two sample sizes in bytes; it returns the FULL and
PIECEWISE graphs' token counts, the sampled FULL graphs, and the release's extrapolation of the two samples over the
FULL graphs.
"""

import ast
import collections
import dataclasses
import itertools
import json
import sys
import types
from pathlib import Path

from capture_sizes import stand_in_config
from harness import activate

PIECES = ("BatchExecutionDescriptor", "_FULL_GRAPH_PROFILING_SAMPLES", "_MIN_PER_GRAPH_BYTES",
          "_extrapolate_full_graph_memory")


def release_pieces(release_dir: Path) -> dict:
    """The release's own definitions, compiled from its cudagraph_utils.py with only what they name."""
    from vllm.config.compilation import CUDAGraphMode
    from vllm.utils.math_utils import round_up

    source = (release_dir / "vllm" / "v1" / "worker" / "gpu" / "cudagraph_utils.py").read_text()
    tree = ast.parse(source)
    wanted = []
    for node in tree.body:
        names = {getattr(node, "name", None)} | {t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)}
        if names & set(PIECES):
            wanted.append(node)
        if getattr(node, "name", None) == "CudaGraphManager":
            wanted += [f for f in node.body if getattr(f, "name", None) == "_init_candidates"]
    namespace = {"dataclass": dataclasses.dataclass, "replace": dataclasses.replace,
                 "defaultdict": collections.defaultdict, "groupby": itertools.groupby, "product": itertools.product, "itertools": itertools,
                 "round_up": round_up, "CUDAGraphMode": CUDAGraphMode}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), str(release_dir), "exec"), namespace)
    return namespace


def graphs(pieces: dict, case: dict) -> dict:
    from vllm.config.compilation import CUDAGraphMode
    from vllm.config.vllm import VllmConfig

    import platform_cuda

    config = stand_in_config(case)
    with platform_cuda.emulate(case["arch"]):
        VllmConfig._set_cudagraph_sizes(config)  # Model Runner V2 does not round them (compilation.py, MRV2 note)
    manager = types.SimpleNamespace(
        compilation_config=config.compilation_config, cudagraph_mode=CUDAGraphMode[case["cudagraph_mode"]],
        max_num_reqs=case["max_num_seqs"], decode_query_len=1 + config.num_speculative_tokens, vllm_config=config,
        varlen_decode=False, lora_capture_cases=[0], _maybe_ubatch_twin=lambda desc: None, _capture_descs={},
        _candidates={})
    pieces["_init_candidates"](manager)
    descs = {mode.name: [d.num_tokens for d in found] for mode, found in manager._capture_descs.items()}
    full = descs.get("FULL", [])
    samples = full[:pieces["_FULL_GRAPH_PROFILING_SAMPLES"]]
    sample_bytes = case["sample_bytes"][:len(samples)]
    return {"full": full, "piecewise": descs.get("PIECEWISE", []), "sampled": samples,
            "extrapolated": pieces["_extrapolate_full_graph_memory"](sample_bytes, len(full)),
            "min_per_graph_bytes": pieces["_MIN_PER_GRAPH_BYTES"]}


def main() -> int:
    real_stdout, sys.stdout = sys.stdout, sys.stderr  # vLLM's log handler of old releases writes to stdout
    release_dir = Path(sys.argv[1])
    release = activate(release_dir)
    pieces = release_pieces(release_dir)
    json.dump({"release": release, "results": [graphs(pieces, case) for case in json.load(sys.stdin)]}, real_stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
