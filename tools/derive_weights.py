"""Regenerates dsa_kvcalc/weights.json: the bytes of parameters and buffers each catalog model puts on a rank, counted
by building vLLM's own model classes on the meta device (oracle/weights.py) from the model's config.json
(oracle/configs).

    python tools/derive_weights.py [--release 0.33.0] [--only MODEL ...]

Needs the oracle's venv and the release (bash oracle/setup.sh 0.33.0); about half a minute a build on two cores.

Each model is built at every tensor-parallel size in TENSOR_PARALLEL_SIZES with expert parallelism on, once per drafter
it runs (with that drafter) or once (without). From the builds the file keeps, per model:
- dense_layer_bytes[tp]: rank 0's bytes of each decoder layer other than its routed experts and Engram tables;
- embedding_bytes[tp], head_bytes[tp]: the embedding (the first pipeline stage's), the final norm and LM head (the
  last stage's);
- expert_layer_bytes: each decoder layer's routed experts as one expert rank holds them all (the TP=1 build): vLLM
  splits them over TP x DP ranks, by expert with expert parallelism, each expert's matrices without
  (FusedMoEParallelConfig.make);
- engram_layer_bytes: DeepSeek-V4.1's Engram tables at TP=1;
- drafts[method]: the drafter's bytes besides what it shares with the target, dense_bytes[tp] and expert_bytes (TP=1);
- refused[tp] (and drafts[method].refused[tp]): why the release's model code would not build it: the model at that
  size, or the drafter for this checkpoint (DeepSeek-V4's DSpark drafter reads the config's dspark_* fields).
The parameters of a model are the same whatever the GPU (checked on sm90, sm100 and sm120: the GPU changes only the
workspaces kernels allocate, which are not kept here), so the builds emulate an H200 (sm90).
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dsa_kvcalc.catalog import MODELS  # noqa: E402

CONFIGS = ROOT / "oracle" / "configs"
OUT = ROOT / "dsa_kvcalc" / "weights.json"
ORACLE_HOME = Path.home() / ".cache" / "dsa-kvcalc-oracle"
TENSOR_PARALLEL_SIZES = (1, 2, 4, 8, 16)
H200_BYTES = 150_109_880_320

# The config.json copy each catalog model is built from (oracle/configs/SOURCES.md names where each was read), and
# what stands in where no copy of the model's own was found.
CONFIG_FILES = {
    "deepseek-ai/DeepSeek-V3.2": ("deepseek-ai--DeepSeek-V3.2.json", ""),
    "deepseek-ai/DeepSeek-V3.2-Exp": ("deepseek-ai--DeepSeek-V3.2.json",
                                      "DeepSeek-V3.2's config: the V3.2-Exp reference config (awesome-mini-project/"
                                      "DeepSeek-V3.2-Exp inference/config_671B_v3.2.json) gives every shape the same"),
    "zai-org/GLM-5-FP8": ("zai-org--GLM-5-FP8.json", ""),
    "zai-org/GLM-5.1-FP8": ("zai-org--GLM-5.1-FP8.json", ""),
    "nvidia/GLM-5.1-NVFP4": ("nvidia--GLM-5.1-NVFP4.json", ""),
    "zai-org/GLM-5.2-FP8": ("zai-org--GLM-5.2-FP8.json", ""),
    "nvidia/GLM-5.2-NVFP4": ("nvidia--GLM-5.2-NVFP4.json", ""),
    "zai-org/GLM-5.3": ("zai-org--GLM-5.2-FP8.json",
                        "GLM-5.2-FP8's config: GLM-5.3 is a native FP8 checkpoint whose architecture is 'identical to "
                        "GLM-5.2' (vllm-project/recipes models/zai-org/GLM-5.3.yaml)"),
    "deepseek-ai/DeepSeek-V4-Flash": ("deepseek-ai--DeepSeek-V4-Flash.json", ""),
    "deepseek-ai/DeepSeek-V4-Flash-0731": ("deepseek-ai--DeepSeek-V4-Flash-0731.json", ""),
    "deepseek-ai/DeepSeek-V4-Pro": ("deepseek-ai--DeepSeek-V4-Pro.json", ""),
    "deepseek-ai/DeepSeek-V4.1-Flash": ("deepseek-ai--DeepSeek-V4.1-Flash.json",
                                        "the flattened text config, nested under text_config as the checkpoint's "
                                        "config.json nests it (vllm/transformers_utils/configs/deepseek_v41.py)"),
}


# The drafters each family's vLLM code has (the build says whether a checkpoint can run one): MTP for V3.2, GLM-5.x and
# V4, DSpark for V4 and V4.1 (vllm==0.33.0 vllm/model_executor/models/registry.py:676-732)
DRAFTERS = {"mla": ("mtp",), "deepseek_v4": ("mtp", "dspark"), "deepseek_v41": ("dspark",), "glm5next": ("mtp",)}


def hf_config(model_name: str) -> dict:
    """The config.json a release reads for the model."""
    config = json.loads((CONFIGS / CONFIG_FILES[model_name][0]).read_text())
    if config.get("model_type") == "deepseek_v41_text":
        top = ("architectures", "quantization_config", "torch_dtype")
        text = {k: v for k, v in config.items() if k not in top}
        config = {k: config[k] for k in top} | {"model_type": "deepseek_v41", "text_config": text}
    return config


# The config fields weights.py reads beside the build's bytes (the buffers construction allocates, the expert split)
SHAPE_FIELDS = ("n_routed_experts", "index_topk", "hidden_size", "hc_mult", "num_attention_heads", "kv_lora_rank",
                "qk_nope_head_dim", "v_head_dim")


def shape_of(model_name: str) -> dict:
    config = hf_config(model_name)
    fields = config.get("text_config", config)
    return {name: fields[name] for name in SHAPE_FIELDS if name in fields}


def cases(model) -> list[dict]:
    config = hf_config(model.name)
    drafters = DRAFTERS[model.family]
    found = []
    for tp in TENSOR_PARALLEL_SIZES:
        for drafter in drafters:
            speculative = {"method": drafter, "num_speculative_tokens": 3} if drafter else None
            serving = {"arch": "sm90", "gpu_memory_bytes": H200_BYTES, "tensor_parallel_size": tp,
                       "data_parallel_size": 1, "pipeline_parallel_size": 1, "enable_expert_parallel": True,
                       "max_model_len": min(131072, model.max_position_embeddings), "max_num_batched_tokens": 8192,
                       "max_num_seqs": 256, "kv_cache_dtype": "fp8" if model.family == "deepseek_v4" else "auto",
                       "speculative": speculative}
            found.append({"name": f"{model.name} tp{tp} {drafter}", "model": model.name, "tp": tp, "drafter": drafter,
                          "config": config, "serving": serving})
    return found


def build(release: str, batch: list[dict]) -> list[dict]:
    python = ORACLE_HOME / "venv" / "bin" / "python"
    answer = subprocess.run([str(python), str(ROOT / "oracle" / "weights.py"), str(ORACLE_HOME / "releases" / release)],
                            input=json.dumps(batch), capture_output=True, text=True, check=True,
                            env={"VLLM_TARGET_DEVICE": "cpu", "PATH": "/usr/bin:/bin", "HOME": str(Path.home())})
    return json.loads(answer.stdout)["results"]


def layers(target: dict, kind: str) -> list[int]:
    indices = sorted(int(place) for place in target if place.isdigit())
    return [target[str(i)].get(kind, 0) for i in range(indices[-1] + 1)] if indices else []


def entry(model, results: list[dict]) -> dict:
    file, note = CONFIG_FILES[model.name]
    out = {"config": f"oracle/configs/{file}", "config_note": note, "dense_layer_bytes": {}, "embedding_bytes": {},
           "head_bytes": {}, "drafts": {}}
    for case, result in results:
        tp = str(case["tp"])
        if "error" in result:
            refused = out["drafts"].setdefault(case["drafter"], {}) if case["drafter"] else out
            refused.setdefault("refused", {})[tp] = result["error"].splitlines()[0][:300]
            continue
        target = result["target"]
        out["dense_layer_bytes"][tp] = layers(target, "dense")
        out["embedding_bytes"][tp] = target.get("embedding", {}).get("dense", 0)
        out["head_bytes"][tp] = target.get("head", {}).get("dense", 0)
        if case["tp"] == 1:
            out["expert_layer_bytes"] = layers(target, "experts")
            if any(layers(target, "engram")):
                out["engram_layer_bytes"] = layers(target, "engram")
        if case["drafter"]:
            draft = out["drafts"].setdefault(case["drafter"], {})
            draft.setdefault("dense_bytes", {})[tp] = result["draft"].get("dense", 0)
            if case["tp"] == 1:
                draft["expert_bytes"] = result["draft"].get("experts", 0)
    for case, result in results:  # no build of the target at a size: the release refuses the size itself
        tp = str(case["tp"])
        if tp not in out["dense_layer_bytes"]:
            out.setdefault("refused", {}).setdefault(tp, result["error"].splitlines()[0][:300])
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--release", default="0.33.0")
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--shapes-only", action="store_true", help="refresh the config fields, build nothing")
    args = parser.parse_args()
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    data.update(release=args.release, method=(
        "oracle/weights.py: vLLM's model classes of this release built on the meta device with rank 0's TP/EP groups, "
        "every storage alive after the target and the drafter are built counted once (tools/derive_weights.py)"))
    models = data.setdefault("models", {})
    for model in MODELS:
        if model.name not in CONFIG_FILES or (args.only and model.name not in args.only):
            continue
        if not args.shapes_only:
            batch = cases(model)
            models[model.name] = entry(model, list(zip(batch, build(args.release, batch))))
        if model.name in models:
            models[model.name]["shape"] = shape_of(model.name)
        OUT.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
