"""vLLM's own CUDA-graph capture sizes, run on a CPU: one release per process, inside the oracle's venv.

    VENV/bin/python oracle/capture_sizes.py RELEASE_DIR < cases.json > results.json

A case is a GPU (a name in gpus.json) and the inputs of VllmConfig._set_cudagraph_sizes: max_num_seqs, max_num_batched_tokens, the
speculative token count, the performance mode, and a max_cudagraph_capture_size and cudagraph_capture_sizes where
given. The release's own method runs on a stand-in VllmConfig holding the release's own CompilationConfig, with the
GPU emulated (emulation.py) (the SM10x ceiling of 1024). With draft tokens, the sizes are then
rounded up to whole decode batches by the release's own CompilationConfig.adjust_cudagraph_sizes_for_spec_decode, as
Model Runner V1 does before it captures (Model Runner V2 rounds its decode graphs the same way,
vllm==0.33.0 vllm/v1/worker/gpu/cudagraph_utils.py:318-336). It returns the sizes vLLM captures and the FULL
decode graphs among them (the dispatcher's: q <= size <= q x max_num_seqs, vllm/v1/cudagraph_dispatcher.py), or
the error with which vLLM refuses to start.
"""

import inspect
import json
import sys
import types
from pathlib import Path

from harness import activate


def stand_in_config(case: dict) -> types.SimpleNamespace:
    """A VllmConfig as far as the capture sizes and the graphs read it, holding the release's own CompilationConfig
    (cudagraph_mode FULL_AND_PIECEWISE unless the case names one)."""
    from vllm.config.compilation import CompilationConfig

    given = {key: case[key] for key in ("max_cudagraph_capture_size", "cudagraph_capture_sizes") if
             case.get(key) is not None}
    compilation = CompilationConfig(cudagraph_mode=case.get("cudagraph_mode", "FULL_AND_PIECEWISE"), **given)
    k = case["num_speculative_tokens"]
    speculative = types.SimpleNamespace(num_speculative_tokens=k, uses_dynamic_speculative_decoding=lambda: False)
    return types.SimpleNamespace(
        model_config=types.SimpleNamespace(enforce_eager=False), compilation_config=compilation,
        scheduler_config=types.SimpleNamespace(max_num_seqs=case["max_num_seqs"],
                                               max_num_batched_tokens=case["max_num_batched_tokens"]),
        parallel_config=types.SimpleNamespace(tensor_parallel_size=1), speculative_config=speculative if k else None,
        cache_config=types.SimpleNamespace(use_kda_recoverssm=False),
        performance_mode=case["performance_mode"], uniform_decode_query_len=1 + k, num_speculative_tokens=k)


def capture_sizes(case: dict):
    from vllm.config.vllm import VllmConfig

    import emulation

    config = stand_in_config(case)
    compilation, k = config.compilation_config, config.num_speculative_tokens
    with emulation.emulate(emulation.GPUS[case["gpu"]]):
        try:
            VllmConfig._set_cudagraph_sizes(config)
            adjust = compilation.adjust_cudagraph_sizes_for_spec_decode
            if k:
                adjust(*(1 + k, 1)[:len(inspect.signature(adjust).parameters)])  # (q) or (q, tensor_parallel_size)
        except (ValueError, AssertionError) as error:
            return {"refused": str(error)}
    sizes = list(compilation.cudagraph_capture_sizes)
    decode = [size for size in sizes if 1 + k <= size <= (1 + k) * case["max_num_seqs"]]
    return {"sizes": sizes, "full_decode": decode}


def main() -> int:
    real_stdout, sys.stdout = sys.stdout, sys.stderr  # vLLM's log handler of old releases writes to stdout
    release = activate(Path(sys.argv[1]))
    results = [capture_sizes(case) for case in json.load(sys.stdin)]
    json.dump({"release": release, "results": results}, real_stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
