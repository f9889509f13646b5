"""The recipe: a `vllm serve --config` YAML plus dsa-kvcalc's own keys, validated at this boundary and only here.

load() takes a raw recipe (inputs.py reads it, overrides.py applies --set), checks each value against its key
(values.py), gives every key the recipe does not give its declared default (keys.py), and checks the keys against each
other. Every problem is a RecipeError naming the key as the user wrote it; everything past load() trusts the Recipe it
gets.
"""

import re
from dataclasses import dataclass, replace
from pathlib import Path

from dsa_kvcalc import engine as engines
from dsa_kvcalc import launch_script, vllm_args, vllm_cli
from dsa_kvcalc.catalog import DRAFTER_NEEDS
from dsa_kvcalc.inputs import read_text, yaml_mapping
from dsa_kvcalc.keys import DERIVED, KEYS, Recipe, RecipeError, canonical
from dsa_kvcalc.names import MODEL_NAMES, find_gpu, find_model
from dsa_kvcalc.overrides import set_override
from dsa_kvcalc.values import read_values
from dsa_kvcalc.vllm_config import SPARSE_MLA_BACKENDS


class WithDefaults(dict):
    """The values a recipe gives, and every other field's declared default, worked out when first read: a value, or a
    function of the others (max-num-seqs reads max-num-batched-tokens, which reads max-model-len). reads: for each
    field worked out, the names its function read, and those that theirs read."""

    def __init__(self, values: dict, reads: dict):
        super().__init__(values)
        self.reads = reads

    def __missing__(self, name: str):
        read = self.reads[name] = set()
        reading = Reading(self, read)
        k = KEYS.get(name)
        if k is None:
            value = DERIVED[name](reading)
        else:
            value = k.default_from(reading) if k.default_from else k.default
        self[name] = value
        return value


class Reading:
    """The values as one default's function reads them: each name it reads is noted, with the names that name's own
    default read."""

    def __init__(self, values: WithDefaults, read: set):
        self.values = values
        self.read = read

    def __getitem__(self, name: str):
        value = self.values[name]
        self.read.add(name)
        self.read |= self.values.reads.get(name, set())
        return value


@dataclass(frozen=True)
class Resolved:
    """A recipe's values with every default worked out, before the overrides: what the recipe gives (field -> value,
    as read), every field's value (with the catalog's Gpu and Model, the Engine, and `given`, the fields it gives),
    and for each field worked out the names its function read, directly or through another default. A sweep resolves
    its base once: at a point, resolved_at works out again only the fields that read a value the point sets."""
    given: dict
    values: dict
    reads: dict
    recipe_dir: Path
    model_note: str | None  # a model name planned as another checkpoint (find_model)


FIELDS = [*KEYS, *DERIVED, "given"]
OVERRIDES = {name: k.override for name, k in KEYS.items() if k.override}  # applied last: resolve


def resolved_values(given: dict, recipe_dir: Path) -> Resolved:
    """Each key the recipe does not give at its declared default (which may depend on the GPU, the model, the vLLM
    version)."""
    for required in ("model", "gpu"):
        if required not in given:
            raise RecipeError(required, "missing (every recipe names a model and a GPU)")
    gpu = find_gpu(given["gpu"])
    model, model_note = find_model(given["model"], recipe_dir)
    check_prefix_caching(given)
    present = {name: value for name, value in given.items() if value is not None}  # max-model-len auto: the default
    values = WithDefaults(present | {"gpu": gpu, "model": model, "given": frozenset(given)}, {})
    return Resolved(given, {name: values[name] for name in FIELDS}, values.reads, recipe_dir, model_note)


def resolved_at(base: Resolved, point: dict) -> Resolved:
    """The base with a point's values set (field -> value, as read): the fields whose default read a name the point
    sets are worked out again, and the rest kept as the base has them (a default is a function of the names it
    reads, so where none of them changes, neither does it)."""
    given = base.given | point
    changed = set(point) | ({"given"} if given.keys() != base.given.keys() else set())
    gpu = find_gpu(given["gpu"]) if "gpu" in point else base.values["gpu"]
    model, model_note = find_model(given["model"], base.recipe_dir) if "model" in point else \
        (base.values["model"], base.model_note)
    check_prefix_caching(given)
    stale = changed | {name for name, read in base.reads.items() if not read.isdisjoint(changed)}
    kept = {name: value for name, value in base.values.items() if name not in stale}
    present = {name: value for name, value in point.items() if value is not None}
    values = WithDefaults(kept | present | {"gpu": gpu, "model": model, "given": frozenset(given)},
                          {name: read for name, read in base.reads.items() if name not in stale})
    return Resolved(given, {name: values[name] for name in FIELDS}, values.reads, base.recipe_dir, model_note)


def resolve(resolved: Resolved, ignored: dict | None = None, notes: list[str] = (), spelled: tuple = ()) -> Recipe:
    """The recipe as vLLM runs it: its values resolved (resolved_values), then the declared overrides; then the
    checks across keys. notes: what reading it noted, to which a model name planned as another checkpoint adds its
    own."""
    values, given = resolved.values, resolved.given
    overridden = {name: override(values) for name, override in OVERRIDES.items()}
    ignored = ignored or {}
    model = values["model"]
    recipe = Recipe(**values | overridden, ignored_keys=tuple(ignored), passthrough=tuple(ignored.items()),
                    model_arg=model.name if given["model"].lower() in MODEL_NAMES else given["model"],
                    notes=(*([resolved.model_note] if resolved.model_note else []), *notes),
                    fit_max_model_len=fits_to_memory(given), spelled=spelled)
    check_across(recipe)
    if recipe.engine.name == "vllm":
        vllm_cli.check_release(ignored | given_arguments(recipe), recipe.engine)
    return recipe


def fits_to_memory(values: dict) -> bool:
    """max-model-len -1 or auto: vLLM fits it to the KV memory (given as such, where no value is the model's maximum
    without a fit)."""
    return "max_model_len" in values and values["max_model_len"] is None


def check_prefix_caching(values: dict) -> None:
    """no-enable-prefix-caching true turns prefix caching off; it may not contradict enable-prefix-caching true
    (vLLM would take the later flag)."""
    if values.get("no_enable_prefix_caching") and values.get("enable_prefix_caching"):
        raise RecipeError("no-enable-prefix-caching", "true contradicts enable-prefix-caching: true; give one of them")


def check_speculation(recipe: Recipe) -> None:
    """The method is one the release accepts; a drafter the model lacks with a draft model named is not modelled
    (the refusals of a drafter are deployment.check_drafter's)."""
    method = recipe.speculative_method
    if method is None or recipe.engine.name != "vllm":
        return
    if method not in recipe.engine.speculative_methods:
        raise RecipeError("speculative-config.method", f"{method} is not a method of {recipe.engine.label}; it takes "
                                                       f"{', '.join(sorted(recipe.engine.speculative_methods))}")
    drafter = "mtp" if method in engines.MTP_METHODS else method
    draft_model = dict(recipe.passthrough).get("speculative-config.model")
    if drafter in DRAFTER_NEEDS and drafter not in recipe.model.drafters and draft_model:
        raise RecipeError("speculative-config.method", f"{recipe.model.name} has no {drafter} drafter of its own in "
                                                       f"vLLM; its drafters: {', '.join(recipe.model.drafters)} (the "
                                                       f"draft model {draft_model}, whose KV cache this plan does not "
                                                       f"derive, is not modelled)")


# The fields that are vLLM arguments or config fields, as vLLM spells them
ARGUMENTS = {name: k.name for name, k in KEYS.items() if k.name.partition(".")[0] in vllm_cli.OPTIONS}


def given_arguments(recipe: Recipe) -> dict:
    """The vLLM arguments and config fields among the keys dsa-kvcalc reads that the recipe gives (at a value other
    than the default: plan's JSON writes every key back at its default), as vLLM spells them."""
    return {ARGUMENTS[name]: getattr(recipe, name) for name in recipe.given
            if name in ARGUMENTS and getattr(recipe, name) != KEYS[name].default}


def check_linear_attention(recipe: Recipe) -> None:
    """A hybrid model's caches (GLM-5.3-Flash) are derived as far as they were read in vLLM and checked against its
    planner: vLLM on SM90 and SM10x with FlashInfer's sparse MLA, one pipeline stage (vLLM balances the KDA groups
    over stages, _pp_balanced_mamba_group_count), no decode context parallelism, vLLM's block size (block-size enters
    the attention block: vllm==0.30.0 vllm/platforms/interface.py:895-901). That TP splits the KDA heads is
    deployment.check_attention_heads'."""
    model, gpu = recipe.model, recipe.gpu
    if not model.linear_layers:
        return
    if recipe.engine.name != "vllm":
        raise RecipeError("engine", f"{model.name}'s KV cache is derived for vLLM only")
    if gpu.family not in ("sm90", "sm100"):
        raise RecipeError("gpu", f"{model.name}'s KV cache is derived for SM90 and SM10x; on {gpu.name} ({gpu.arch}) "
                                 f"it is not determined (SM12x's fp8_ds_mla pages are not what its block alignment "
                                 f"sizes; ROCm builds its own indexer and ring caches)")
    if recipe.pipeline_parallel_size > 1:
        raise RecipeError("pipeline-parallel-size", f"{model.name} is derived for one stage: vLLM balances its KDA "
                                                    f"groups over the stages, which is not modelled")
    if recipe.decode_context_parallel_size > 1:
        raise RecipeError("decode-context-parallel-size", f"{model.name} is derived without decode context "
                                                          f"parallelism")
    if "block-size" in recipe.ignored_keys:
        raise RecipeError("block-size", f"sizes {model.name}'s attention block (128 or block-size, the larger, times "
                                        f"what a KDA state needs), which is derived for vLLM's default only: drop it")


def check_across(recipe: Recipe) -> None:
    model, gpu = recipe.model, recipe.gpu
    if recipe.max_model_len > model.max_position_embeddings:
        raise RecipeError("max-model-len", f"{recipe.max_model_len:,} exceeds {model.name}'s maximum of "
                                           f"{model.max_position_embeddings:,}")
    ratio = recipe.indexer_width_ratio
    if recipe.max_model_len < ratio:
        raise RecipeError("max-model-len", f"{recipe.max_model_len} leaves the indexer no compressed key to score "
                                           f"(it scores max-model-len // {ratio})")
    if recipe.attention_backend is not None and recipe.attention_backend not in SPARSE_MLA_BACKENDS:
        raise RecipeError("attention-backend", f"{recipe.attention_backend} is no sparse-MLA backend; DSA models run "
                                               f"on {', '.join(SPARSE_MLA_BACKENDS)}")
    if recipe.attention_backend is not None and recipe.attention_backend not in recipe.engine.sparse_mla_backends:
        first = engines.VLLM_RULES["sparse_mla_backends"].adding(recipe.attention_backend)
        raise RecipeError("attention-backend", f"{recipe.attention_backend} is not a backend of {recipe.engine.label}: "
                                               f"vLLM {first.release} adds it ({first.source})")
    first = engines.VLLM_RULES["model_architectures"].adding(model.architecture)
    if first and model.architecture not in recipe.engine.model_architectures:
        raise RecipeError("vllm-version", f"{recipe.engine.label} predates {model.name}'s model code (vLLM "
                                          f"{first.release}+)")
    check_speculation(recipe)
    check_linear_attention(recipe)
    if recipe.kv_cache_memory_bytes is not None and recipe.kv_cache_memory_bytes > gpu.total_memory_bytes:
        raise RecipeError("kv-cache-memory-bytes", f"{recipe.kv_cache_memory_bytes:,} B is more than {gpu.name}'s "
                                                   f"{gpu.total_memory_bytes:,} B")
    if recipe.memory_rest is not None and getattr(recipe, f"{recipe.memory_rest}_bytes") is None:
        raise RecipeError("memory.rest", f"names {recipe.memory_rest}, which the memory block does not give")
    if recipe.measured and recipe.memory_gpu is not None and find_gpu(recipe.memory_gpu, "memory.gpu") != gpu:
        raise RecipeError("memory", f"measured on {recipe.memory_gpu}, but the recipe runs on {gpu.name}: drop the "
                                    f"memory block (or measure on {gpu.name})")


def resolve_as_written(raw: dict, values: dict, recipe_dir: Path, ignored: dict, notes: list[str] = (),
                       base: Resolved | None = None) -> Recipe:
    """resolve(), with a check across keys naming the key as the raw recipe spells it (max_model_len). base: a
    sweep's base, resolved once, on which `values` are a point's."""
    spelled = tuple((canonical(k), k) for k in raw if isinstance(k, str) and canonical(k) != k)
    try:
        resolved = resolved_values(values, recipe_dir) if base is None else resolved_at(base, values)
        return resolve(resolved, ignored, notes, spelled)
    except RecipeError as error:
        written = dict(spelled).get(error.key)
        if written is None:
            raise
        raise RecipeError(written, error.problem) from None


def load(raw: dict, recipe_dir: Path = Path("."), notes: list[str] = ()) -> Recipe:
    values, ignored = read_values(raw)
    return resolve_as_written(raw, values, recipe_dir, ignored, notes)


# Files and commands -----------------------------------------------------------------------------------------------

@dataclass
class Source:
    """One recipe of a file or a command, with the --set overrides: its raw recipe, what to call it beside the
    others of a script that starts several servers, and what reading it noted (an image tag that names no release)."""
    label: str | None
    raw: dict
    notes: list[str]


def override_version(overrides: list[str]) -> str | None:
    """The vllm-version --set gives: the release whose arguments a serve line is read with."""
    probe: dict = {}
    for assignment in overrides:
        if canonical(assignment.partition("=")[0].strip()) == "vllm-version":
            set_override(probe, assignment)
    return next((str(value) for value in probe.values()), None)


def server_sources(text: str, overrides: list[str]) -> list[Source]:
    """Each server a launch script or a pasted command starts, with the --set overrides."""
    found = vllm_args.servers(text, override_version(overrides))
    for server in found:
        for assignment in overrides:
            set_override(server.raw, assignment)
        check_given(server)
    return [Source(server.label if len(found) > 1 else None, server.raw, server.notes) for server in found]


def check_given(server: vllm_args.Server) -> None:
    """What a serve line cannot give comes from --set: its GPU, and each value a shell variable holds. All that is
    missing is said at once."""
    given = {canonical(key) for key in server.raw}
    flat = {f"{canonical(top)}.{inner}" for top, value in server.raw.items() if isinstance(value, dict)
            for inner in value}
    missing = [(written, f"shell variables are not expanded: give {variable}'s value with --set {key}=VALUE")
               for key, (written, variable) in server.unexpanded.items() if key not in given | flat]
    if "gpu" not in given:
        missing.append(("gpu", "missing: a vllm serve line does not name its GPU; add --set gpu=NAME (B200, "
                               "NVIDIA H200, ...)"))
    if missing:
        (key, problem), *others = missing
        raise RecipeError(key, problem + "".join(f"; also {k}: {p}" for k, p in others))


def read_sources(path: Path | None, overrides: list[str] = (), command: str | None = None) -> list[Source]:
    """The recipes of a file (its YAML, or each server its launch script starts) or of a pasted command, with the
    --set overrides. A YAML file's memory block was measured on the GPU the file names, whatever --set says: that is
    recorded as memory.gpu."""
    if path is None:
        return server_sources(command, overrides)
    text = read_text(path)
    try:
        scripted, problem = bool(launch_script.servers(text)), None
    except RecipeError as error:
        scripted, problem = False, error
    if scripted:
        return server_sources(text, overrides)
    try:
        raw = yaml_mapping(text, path)
    except RecipeError:
        if problem is not None:
            raise problem from None
        if re.match(r"(?:\s*#.*\n|\s*\n)*\s*[\w.\"'-]+\s*:", text):  # it reads as YAML keys: the YAML's own error
            raise
        raise RecipeError("recipe", f"{path} starts no vLLM server ({vllm_args.ENTRY_POINTS}) and is no recipe "
                                    f"(a YAML mapping of keys to values)") from None
    file_gpu = raw.get("gpu")
    for assignment in overrides:
        set_override(raw, assignment)
    return [Source(None, with_memory_gpu(raw, file_gpu), [])]


def with_memory_gpu(raw: dict, file_gpu) -> dict:
    """raw whose memory block, if it has one, names the GPU it was measured on: its own memory.gpu, else the recipe
    file's gpu (file_gpu: whatever the file gives; --set and --vary do not change it)."""
    memory = raw.get("memory")
    if isinstance(memory, dict) and memory and "gpu" not in memory and isinstance(file_gpu, str):
        return {**raw, "memory": {**memory, "gpu": file_gpu}}
    return raw


def several(labels: list[str]) -> RecipeError:
    return RecipeError("command", f"{len(labels)} vLLM servers ({', '.join(labels)}): plan plans each, side by side; "
                                  f"this command takes one (put its line in a file of its own)")


def one(sources: list[Source]) -> Source:
    if len(sources) > 1:
        raise several([source.label for source in sources])
    return sources[0]


def read_recipe(path: Path, overrides: list[str] = ()) -> dict:
    """The raw recipe of a file with --set overrides: its YAML, or its launch script's one server."""
    return one(read_sources(path, overrides)).raw


def read_command(text: str, overrides: list[str] = ()) -> dict:
    """The raw recipe of a pasted `vllm serve ...` command (--command) with --set overrides."""
    return one(server_sources(text, overrides)).raw


def load_recipes(path: Path | None, overrides: list[str] = (), command: str | None = None) -> list[tuple[str | None,
                                                                                                          Recipe]]:
    """The recipes of a file (or of a pasted command) with --set overrides, each with its label. A memory block was
    measured on the file's own recipe (with any memory.* overrides): where the other overrides change it, that is
    kept as measured_on."""
    folder = Path(".") if path is None else path.parent
    sources = read_sources(path, overrides, command)
    recipes = [(source.label, load(source.raw, folder, source.notes)) for source in sources]
    # A memory block is measured on one GPU (memory.gpu, checked apart), and a serve line names none.
    shape_overrides = [o for o in overrides if not o.strip().startswith(("memory.", "gpu="))]
    if not shape_overrides or not any(recipe.measured for _, recipe in recipes):
        return recipes
    bases = read_sources(path, [o for o in overrides if o not in shape_overrides], command)
    measured = [(label, recipe, load(base.raw, folder)) for (label, recipe), base in zip(recipes, bases)]
    return [(label, recipe if not recipe.measured or base.resolved() == recipe.resolved()
             else replace(recipe, measured_on=base)) for label, recipe, base in measured]


def load_recipe(path: Path | None, overrides: list[str] = (), command: str | None = None) -> Recipe:
    """The one recipe of a file (or of a pasted command) with --set overrides."""
    recipes = load_recipes(path, overrides, command)
    if len(recipes) > 1:
        raise several([label for label, _ in recipes])
    return recipes[0][1]
