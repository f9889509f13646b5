"""The comparison side: the cases the oracle is asked, and plan's answers to the same questions. Runs with the
project's Python (dsa_kvcalc importable); the oracle (harness.py, emulation.py) imports nothing of dsa_kvcalc.

A case gives the oracle only what a user gives `vllm serve`, as the recipe writes it: the model (its Hugging Face
id, whose config.json the oracle keeps), the GPU (by name), the recipe's vLLM arguments and environment, and one
figure of plan's, the KV memory each worker is to split (a record's logged "Available KV cache memory" where there is
one). A case plan refuses is given none: the oracle then splits all the memory vLLM requests, so that whatever vLLM
refuses, it refuses whatever the weights take.

The cases: today's (every bundled recipe, every development record, the catalog probes) on every modelled release
that has the model, and a seeded draw (`generated`) across every family, release 0.30.0-0.33.0, GPU family, TP,
DP/EP, PP, DCP, draft tokens, cache dtype, indexer dtype, max-num-seqs and odd max-model-len.
"""

import random
import sys
from dataclasses import dataclass
from pathlib import Path

from dsa_kvcalc import planning
from dsa_kvcalc import engine as engines
from dsa_kvcalc.catalog import MODELS
from dsa_kvcalc.deployment import on_model_runner_v2
from dsa_kvcalc.engine import RELEASES
from dsa_kvcalc.keys import RecipeError, Refusal, canonical
from dsa_kvcalc.names import find_gpu, find_model
from dsa_kvcalc.recipe import load, read_recipe
from dsa_kvcalc.units import GIB

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"
CONFIGS = Path(__file__).resolve().parent / "configs"
# A recipe's keys that are dsa-kvcalc's own, not arguments of `vllm serve` (env is the process's environment)
PLAN_KEYS = {"model", "gpu", "engine", "vllm-version", "deepgemm", "memory", "env"}
GENERATED_RELEASES = ("0.30.0", "0.31.0", "0.32.0", "0.33.0")
GENERATED_SEED = 25
GENERATED_COUNT = 240


@dataclass(frozen=True)
class Point:
    """One case on one release: the oracle's input and plan's answer, or why there is no case."""
    release: str
    name: str
    case: dict | None
    plan: dict | None
    skip: str = ""


# Today's cases ----------------------------------------------------------------------------------------------------

def bundled() -> list[tuple[str, dict, None]]:
    return [(path.stem, read_recipe(path), None) for path in sorted(RECIPES.glob("*.yaml"))]


def records() -> list[tuple[str, dict, float]]:
    sys.path.insert(0, str(ROOT / "tests"))
    from test_records import RECORDS

    return [(record.name, record.recipe, record.available_gib) for record in RECORDS]


def probes() -> list[tuple[str, dict, None]]:
    """Every catalog model on H200 and B200 at TP8 (with expert parallelism for V4 and V4.1, and fp8 for V4), without
    speculation and with each drafter it runs (MTP k=3, DSpark k=5); GLM-5.3-Flash also without prefix caching, and the
    1M-token GLM-5.2 and GLM-5.3 also at 131,072 tokens."""
    cases = []
    for model in MODELS:
        for gpu in ("H200", "B200"):
            raw = {"model": model.name, "gpu": gpu, "tensor-parallel-size": 8}
            if model.family in ("deepseek_v4", "deepseek_v41"):
                raw["enable-expert-parallel"] = True
            if model.family == "deepseek_v4":
                raw["kv-cache-dtype"] = "fp8"
            variants = {"": {}} | {f" {drafter} k={k}": {"speculative-config": {"method": drafter,
                                                                              "num_speculative_tokens": k}}
                                   for drafter, k in (("mtp", 3), ("dspark", 5)) if drafter in model.drafters}
            if model.family == "glm5next":
                variants[" no prefix caching"] = {"enable-prefix-caching": False}
            if model.family == "mla" and model.max_position_embeddings > 1 << 18:
                variants[" L=131072"] = {"max-model-len": 131072}
            cases += [(f"probe {model.name} {gpu}{label}", raw | extra, None) for label, extra in variants.items()]
    return cases


def everything() -> list[tuple[str, dict, float | None]]:
    """(name, raw recipe, logged available KV GiB or None): every bundled recipe, development record and probe."""
    return bundled() + records() + probes()


# Generated cases --------------------------------------------------------------------------------------------------

GENERATED_GPUS = ("H100", "H200", "H20", "GH200", "B200", "GB200", "B300", "GB300", "RTX PRO 6000", "GB10")
CACHE_DTYPES = ("auto", "auto", "fp8", "fp8_e4m3", "bfloat16", "fp8_ds_mla", "nvfp4_ds_mla")


def draw(rng: random.Random) -> dict:
    """One raw recipe from the space: a catalog model whose config.json the oracle keeps, on a CUDA GPU, its parallel sizes, speculation, dtypes and
    batch limits, each drawn (odd lengths included)."""
    model = rng.choice([m for m in MODELS if (CONFIGS / f"{m.name.replace('/', '--')}.json").exists()])
    raw = {"model": model.name, "gpu": rng.choice(GENERATED_GPUS), "vllm-version": rng.choice(GENERATED_RELEASES),
           "tensor-parallel-size": rng.choice((1, 2, 4, 4, 8, 8, 8, 16))}
    if rng.random() < 0.3:
        raw["data-parallel-size"] = rng.choice((2, 4, 8))
    if rng.random() < 0.5:
        raw["enable-expert-parallel"] = True
    if rng.random() < 0.2:
        raw["pipeline-parallel-size"] = rng.choice((2, 3))
    if rng.random() < 0.2:
        raw["decode-context-parallel-size"] = rng.choice((2, 4, 8))
    if rng.random() < 0.4:
        drafter = rng.choice(model.drafters)
        raw["speculative-config"] = {"method": drafter, "num_speculative_tokens": rng.randint(1, 7)}
    dtype = rng.choice(CACHE_DTYPES)
    if dtype != "auto":
        raw["kv-cache-dtype"] = dtype
    if rng.random() < 0.25:
        raw["attention-config"] = {"indexer_kv_dtype": rng.choice(("fp8", "mxfp4"))}
    if rng.random() < 0.4:
        raw["max-num-seqs"] = rng.choice((1, 3, 17, 64, 100, 256, 511))
    if rng.random() < 0.7:
        raw["max-model-len"] = rng.randrange(1001, min(model.max_position_embeddings, 1 << 19), 2)
    return raw


def generated(count: int = GENERATED_COUNT, seed: int = GENERATED_SEED) -> list[tuple[str, str, dict]]:
    """(release, name, raw recipe) for `count` draws of a seeded generator: the same cases every run, each case drawn
    from a stream of its own (seed and index), so that a change of plan moves no other case. A draw plan refuses for
    its weights alone is drawn again from that stream (no weights are loaded on the CPU: that check is not
    comparable)."""
    cases = []
    for index in range(count):
        rng = random.Random(f"{seed}-{index}")
        raw = draw(rng)
        while weights_refusal(plan_refusal(raw)):
            raw = draw(rng)
        cases.append((raw["vllm-version"], f"generated {index:03d}", raw))
    return cases


def plan_refusal(raw: dict) -> RecipeError | None:
    try:
        planning.plan(load(raw))
    except RecipeError as error:
        return error
    return None


# plan's answer ----------------------------------------------------------------------------------------------------

def weights_refusal(error: RecipeError | None) -> bool:
    """planning.check_weights_fit's refusal: the weights leave no room (not a check vLLM's code runs on a CPU)."""
    return error is not None and "GiB of weights per rank" in error.problem


def plan_answer(raw: dict, release: str, available_gib: float | None) -> dict:
    """plan's answer for the recipe on the release: its refusal, or the KV memory, the KV cache it plans and the
    defaults it resolves."""
    try:
        recipe = load({**raw, "vllm-version": release})
        planned = planning.plan(recipe, {recipe.topk_backend})
    except RecipeError as error:  # a Refusal says vLLM would refuse; any other, that plan does not derive it
        return {"refusal": str(error), "weights": weights_refusal(error), "vllm_refuses": isinstance(error, Refusal)}
    kv = planned.memory.kv
    kv_bytes = planned.backend(recipe.topk_backend).kv_cache_bytes if available_gib is None else round(
        available_gib * GIB)
    answer = {"kv_bytes": kv_bytes, "tokens": kv.tokens(kv_bytes), "block_bytes": kv.block_bytes,
              "blocks_per_request": kv.pages_per_request, "groups": len(kv.groups),
              "defaults": {"max_num_seqs": recipe.max_num_seqs, "max_num_batched_tokens": recipe.max_num_batched_tokens,
                           "max_model_len": recipe.max_model_len, "async_scheduling": recipe.async_scheduling,
                           "enable_prefix_caching": recipe.enable_prefix_caching, "cache_dtype": recipe.cache_dtype,
                           "gpu_memory_utilization": recipe.gpu_memory_utilization,
                           "model_runner_v2": on_model_runner_v2(recipe)},
              "requested_bytes": planned.memory.requested_bytes,
              "subtracts_graph_estimate": planned.cudagraph_estimate.subtracted}
    if kv_bytes < kv.request_bytes:
        answer |= {"refusal": f"one request of max-model-len needs {kv.request_bytes:,} B of KV cache, "
                              f"{kv_bytes:,} B are available", "vllm_refuses": True}
    return answer


# The oracle's case ------------------------------------------------------------------------------------------------

def oracle_case(name: str, raw: dict, release: str, kv_bytes: int | None) -> dict | str:
    """The oracle's input: the model and GPU by name, the recipe's vLLM arguments and environment as written, and
    the KV memory; or why the oracle cannot be asked."""
    model, _ = find_model(raw["model"], ROOT)
    gpu = find_gpu(raw["gpu"])
    if not (CONFIGS / f"{model.name.replace('/', '--')}.json").exists():
        return f"no config.json of {model.name} kept for the oracle"
    if gpu.arch.startswith("gfx"):
        return f"{gpu.name} is a ROCm GPU: the oracle emulates CUDA GPUs only"
    if raw.get("engine", "vllm") != "vllm":
        return "not vLLM"
    args = {key: value for key, value in raw.items() if canonical(key) not in PLAN_KEYS}
    return {"name": name, "model": model.name, "gpu": gpu.name, "args": args, "env": dict(raw.get("env") or {}),
            "kv_cache_bytes": kv_bytes}


def point(release: str, name: str, raw: dict, available_gib: float | None) -> Point:
    if find_model(raw["model"], ROOT)[0].architecture not in engines.vllm(release).model_architectures:
        return Point(release, name, None, None, "no model code in this release")
    answer = plan_answer(raw, release, available_gib)
    kv_bytes = answer.get("kv_bytes") if available_gib is None else round(available_gib * GIB)
    case = oracle_case(name, raw, release, kv_bytes)
    if isinstance(case, str):
        return Point(release, name, None, answer, case)
    return Point(release, name, case, answer)


def points(releases: list[str] | None = None, names: list[str] | None = None) -> list[Point]:
    """Today's cases on the releases (every modelled one by default)."""
    chosen = [entry for entry in everything() if names is None or entry[0] in names]
    return [point(release, *entry) for release in (releases or list(RELEASES)) for entry in chosen]


def generated_points(count: int = GENERATED_COUNT) -> list[Point]:
    return [point(release, name, raw, None) for release, name, raw in generated(count)]
