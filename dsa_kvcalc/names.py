"""Names as people write them, to catalog entries: a GPU as torch, vLLM, nvidia-smi and people name it, a model by
its Hugging Face id, the last part of a checkpoint's path, or a local config.json."""

import difflib
import functools
import re
from pathlib import Path

from dsa_kvcalc import hf_config
from dsa_kvcalc.catalog import GPUS, MODELS, UNSUPPORTED_GPUS, Gpu, Model
from dsa_kvcalc.keys import RecipeError, shown


# Words a GPU's marketing name carries beside its model: its memory and memory type, the SXM form factor, "Instinct",
# "Tensor Core GPU" ('NVIDIA H200 SXM5 141GB HBM3e', 'AMD Instinct MI300X 192GB'); the memory is checked apart.
MARKETING = re.compile(r"\b(?:\d+(?:\.\d+)?\s*(?:gb|gib|g)|hbm\d*e?|sxm\d*|instinct|tensor|core|gpu|accelerator)\b")
MEMORY = re.compile(r"(\d+(?:\.\d+)?)\s*(?:gb|gib|g)\b", re.I)


def gpu_key(name: str) -> str:
    """A GPU name as people, torch, vLLM, nvidia-smi and vendors write it, reduced to compare: case, separators, a
    vendor prefix, marketing words and a note in brackets or after a comma ('NVIDIA H200 NVL (143,771 MiB)',
    'AMD_Instinct_MI300X', 'NVIDIA H200 141GB HBM3e') aside."""
    text = re.sub(r"\(.*?\)", " ", name.lower()).split(",")[0]
    words = MARKETING.sub(" ", re.sub(r"[\s_-]+", " ", text)).split()
    return " ".join(words[1:] if words[:1] in (["nvidia"], ["amd"]) else words)


GPU_NAMES: dict[str, list[Gpu]] = {}  # a name -> the GPUs it names, the first the one without a memory given
for gpu in GPUS:
    for spelling in dict.fromkeys(gpu_key(n) for n in (gpu.name, *gpu.aliases)):
        GPU_NAMES.setdefault(spelling, []).append(gpu)
UNSUPPORTED_GPU_NAMES = {gpu_key(n): (name, arch) for name, (arch, spelled) in UNSUPPORTED_GPUS.items()
                         for n in (name, *spelled)}
MODEL_NAMES = {n.lower(): model for model in MODELS for n in (model.name, model.name.split("/")[-1], *model.aliases)}
STAND_INS = {n.lower(): (model, why) for model in MODELS for n, why in model.stand_ins}
# A stand-in by the last part of its name (a path to its checkpoint), where no catalog name has that last part
STAND_IN_PATHS = {n.rsplit("/", 1)[-1]: entry for n, entry in STAND_INS.items()
                  if n.rsplit("/", 1)[-1] not in MODEL_NAMES}


@functools.cache  # a lookup in the catalog: a sweep's every point names the GPU its memory block was measured on
def find_gpu(name: str, key: str = "gpu") -> Gpu:
    """A GPU by any of its names; '8x NVIDIA B200', 'NVIDIA DGX Spark / GB10' and marketing names with their memory
    ('NVIDIA H200 141GB HBM3e') as people list them too. A memory the GPU is not sold with is an error."""
    spelled = gpu_key(re.sub(r"^\s*\d{1,4}\s*x\s+", "", name))
    named = next((GPU_NAMES[part.strip()] for part in spelled.split(" / ") if part.strip() in GPU_NAMES), None)
    if named is not None:
        memory = MEMORY.search(re.sub(r"\(.*?\)", " ", name).split(",")[0])  # a note aside, as in gpu_key
        if memory is None:
            return named[0]
        gb = float(memory.group(1))
        sold = next((gpu for gpu in named if gb in gpu.marketed_gb), None)
        if sold is None:
            editions = " or ".join(f"{gpu.name} ({', '.join(map(str, gpu.marketed_gb))} GB)" for gpu in named)
            others = [gpu.name for gpu in GPUS if gb in gpu.marketed_gb and gpu.arch == named[0].arch]
            raise RecipeError(key, f"{name}: no {memory.group(1)} GB edition in the catalog; it has the {editions}"
                                   + (f"; {memory.group(1)} GB: {', '.join(others)}" if others else ""))
        return sold
    if spelled in UNSUPPORTED_GPU_NAMES:
        family, arch = UNSUPPORTED_GPU_NAMES[spelled]
        raise RecipeError(key, f"{name} ({family}, {arch}): vLLM runs DSA models only on SM90 and SM10x (SM12x from "
                               f"0.24.0): its sparse-MLA backends reject {arch}")
    close = difflib.get_close_matches(spelled, list(GPU_NAMES), n=3, cutoff=0.5)
    hint = f"; closest: {', '.join(dict.fromkeys(GPU_NAMES[c][0].name for c in close))}" if close else ""
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


def catalog_model(spelled: str) -> Model | None:
    """A catalog name, or the last part of a path to a checkpoint the catalog knows (/models/GLM-5.2-NVFP4)."""
    return MODEL_NAMES.get(spelled) or MODEL_NAMES.get(spelled.rstrip("/").rsplit("/", 1)[-1])


def find_model(name: str, recipe_dir: Path) -> tuple[Model, str | None]:
    """A model and, where the name is another checkpoint planned as it, what differs. A catalog name, the last part
    of a path to a checkpoint the catalog knows, another checkpoint a catalog entry plans (a BF16 checkpoint, a
    re-quantization), a name with -FP8 for a checkpoint stored in FP8 (DeepSeek-V3.2-FP8), or a local config.json
    (or the folder that holds one)."""
    spelled = name.strip().lower().rstrip("/")
    stand_in = STAND_INS.get(spelled)
    model = None if stand_in else catalog_model(spelled)
    if model is not None:
        return model, None
    stand_in = stand_in or STAND_IN_PATHS.get(spelled.rsplit("/", 1)[-1])
    if stand_in is not None:
        return stand_in[0], f"{name} is planned as {stand_in[0].name}: {stand_in[1]}"
    stored = catalog_model(spelled.removesuffix("-fp8")) if spelled.endswith("-fp8") else None
    if stored is not None and stored.checkpoint_format == "fp8":
        return stored, f"{name} is planned as {stored.name}, whose checkpoint is FP8"
    path = model_config_path(name, recipe_dir)
    if path is not None:
        try:
            return hf_config.read_model(path), None
        except hf_config.ConfigError as error:
            raise RecipeError("model", str(error)) from None
    known = [m.name.split("/")[-1] for m in MODELS]
    close = difflib.get_close_matches(spelled.rsplit("/", 1)[-1], [k.lower() for k in known], n=1, cutoff=0.6)
    hint = f" (a variant of {next(k for k in known if k.lower() == close[0])}? its config.json decides)" if close else ""
    raise RecipeError("model", f"unknown model {shown(name)}{hint}: give model: path/to/its config.json (or the folder "
                               f"that holds it), from which plan derives the KV cache; catalog: {', '.join(known)}")
