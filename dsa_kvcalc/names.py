"""Names as people write them, to catalog entries: a GPU as torch, vLLM, nvidia-smi and people name it, a model by
its Hugging Face id, the last part of a checkpoint's path, or a local config.json."""

import difflib
import re
from pathlib import Path

from dsa_kvcalc import hf_config
from dsa_kvcalc.catalog import GPUS, MODELS, UNSUPPORTED_GPUS, Gpu, Model
from dsa_kvcalc.keys import RecipeError, shown


def gpu_key(name: str) -> str:
    """A GPU name as people, torch, vLLM and nvidia-smi write it, reduced to compare: case, separators, a vendor
    prefix and a note in brackets or after a comma ('NVIDIA H200 NVL (143,771 MiB)', 'AMD_Instinct_MI300X') aside."""
    text = re.sub(r"\(.*?\)", " ", name.lower()).split(",")[0]
    words = re.sub(r"[\s_-]+", " ", text).split()
    return " ".join(words[1:] if words[:1] in (["nvidia"], ["amd"]) else words)


GPU_NAMES = {gpu_key(n): gpu for gpu in GPUS for n in (gpu.name, *gpu.aliases)}
UNSUPPORTED_GPU_NAMES = {gpu_key(n): (name, arch) for name, (arch, spelled) in UNSUPPORTED_GPUS.items()
                         for n in (name, *spelled)}
MODEL_NAMES = {n.lower(): model for model in MODELS for n in (model.name, model.name.split("/")[-1], *model.aliases)}


def find_gpu(name: str, key: str = "gpu") -> Gpu:
    """A GPU by any of its names; '8x NVIDIA B200' and 'NVIDIA DGX Spark / GB10' as people list them too."""
    spelled = gpu_key(re.sub(r"^\s*\d{1,4}\s*x\s+", "", name))
    gpu = next((GPU_NAMES[part.strip()] for part in spelled.split(" / ") if part.strip() in GPU_NAMES), None)
    if gpu is not None:
        return gpu
    if spelled in UNSUPPORTED_GPU_NAMES:
        family, arch = UNSUPPORTED_GPU_NAMES[spelled]
        raise RecipeError(key, f"{name} ({family}, {arch}): vLLM runs DSA models only on SM90 and SM10x (SM12x from "
                               f"0.24.0): its sparse-MLA backends reject {arch}")
    close = difflib.get_close_matches(spelled, list(GPU_NAMES), n=3, cutoff=0.5)
    hint = f"; closest: {', '.join(dict.fromkeys(GPU_NAMES[c].name for c in close))}" if close else ""
    raise RecipeError(key, f"unknown GPU {shown(name)}{hint}; known: {', '.join(g.name for g in GPUS)}")


def model_config_path(name: str, recipe_dir: Path) -> Path | None:
    """The local config.json a model name points to (the file, or the folder that holds one), relative to the
    recipe's folder; None when there is none."""
    try:
        path = recipe_dir / Path(name).expanduser()
        if path.is_dir():
            path = path / "config.json"
        return path if path.is_file() else None
    except (OSError, RuntimeError) as error:  # a name too long for a path, ~nosuchuser, a folder we may not enter
        reason = error.strerror if isinstance(error, OSError) else str(error)
        raise RecipeError("model", f"not in the catalog, and not readable as a path to a config.json: {reason}") \
            from None


def find_model(name: str, recipe_dir: Path) -> Model:
    """A catalog name, the last part of a path to a checkpoint the catalog knows (/models/GLM-5.2-NVFP4), or a local
    config.json (or the folder that holds one)."""
    spelled = name.strip().lower()
    model = MODEL_NAMES.get(spelled) or MODEL_NAMES.get(spelled.rstrip("/").rsplit("/", 1)[-1])
    if model is not None:
        return model
    path = model_config_path(name, recipe_dir)
    if path is not None:
        try:
            return hf_config.read_model(path)
        except hf_config.ConfigError as error:
            raise RecipeError("model", str(error)) from None
    known = [m.name.split("/")[-1] for m in MODELS]
    close = difflib.get_close_matches(spelled.rsplit("/", 1)[-1], [k.lower() for k in known], n=1, cutoff=0.6)
    hint = f" (a variant of {next(k for k in known if k.lower() == close[0])}? its config.json decides)" if close else ""
    raise RecipeError("model", f"unknown model {shown(name)}{hint}: give model: path/to/its config.json (or the folder "
                               f"that holds it), from which plan derives the KV cache; catalog: {', '.join(known)}")
