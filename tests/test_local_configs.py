"""Issue 16 at the config.json boundary. A local config of every architecture the catalog derives is derived; one that
contradicts itself is refused before anything is derived, in one line naming the key, exit 2, never a traceback; and
no consistent config gives a negative figure. Cases are generated; outcomes are checked by exit code, the one line
and the signs of the figures, never against the code's own numbers."""

import copy
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import runner
from dsa_kvcalc import planning, report
from dsa_kvcalc.cli import app
from dsa_kvcalc.recipe import load

FEW = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
SOME = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
COMMON = {"hidden_size": 4096, "index_n_heads": 32, "index_head_dim": 128, "index_topk": 2048,
          "max_position_embeddings": 131072, "n_routed_experts": 64, "moe_intermediate_size": 512,
          "first_k_dense_replace": 1, "vocab_size": 1000, "num_nextn_predict_layers": 1}
BASES = {
    "mla": COMMON | {"architectures": ["GlmMoeDsaForCausalLM"], "num_hidden_layers": 12},
    "v4": COMMON | {"architectures": ["DeepseekV4ForCausalLM"], "num_hidden_layers": 12, "sliding_window": 128,
                    "compress_ratios": [0, 0] + [4, 128] * 5 + [4]},
    "v41": COMMON | {"architectures": ["DeepseekV41ForCausalLM"], "num_hidden_layers": 12, "num_attention_heads": 64,
                     "o_groups": 8, "sliding_window": 128, "compress_ratios": [0, 0] + [2] * 5 + [1] * 5 + [0],
                     "kv_source_layer_ids": [2, 6], "index_source_layer_ids": [2, 6, 8, 10]},
    "glm5next": COMMON | {"architectures": ["Glm5NextForConditionalGeneration"], "num_hidden_layers": 12,
                          "num_attention_heads": 64, "index_kpool": 4, "kv_lora_rank": 512, "qk_rope_head_dim": 0,
                          "layer_types": ["linear_attention" if i % 4 != 3 else "deepseek_sparse_attention"
                                          for i in range(12)],
                          "linear_attn_config": {"num_heads": 64, "head_dim": 128, "short_conv_kernel_size": 4,
                                                 "kda_layers": [i for i in range(12) if i % 4 != 3]}},
}


def text_of(config: dict) -> dict:
    return config.get("text_config", config)


# Each breaks a consistent config of its family in one way, drawn, and returns the key the one line must name.
def dense_beyond(draw, config):
    text = text_of(config)
    text["first_k_dense_replace"] = text["num_hidden_layers"] + draw(st.integers(1, 50))
    return "first_k_dense_replace"


def layers_changed(draw, config):
    text = text_of(config)
    text["num_hidden_layers"] += draw(st.sampled_from([-3, -1, 2, 5]))
    return "layer_types" if "layer_types" in text else "compress_ratios"


def ratios_length(draw, config):
    text = text_of(config)
    layers, drafts = text["num_hidden_layers"], text["num_nextn_predict_layers"]
    size = draw(st.integers(0, 3 * layers).filter(lambda n: n not in (layers, layers + drafts)))
    text["compress_ratios"] = (text["compress_ratios"] * 4)[:size]
    return "compress_ratios"


def ratio_kind(draw, config):
    text = text_of(config)
    kinds = (0, 4, 128) if "kv_source_layer_ids" not in text else (0, 1, 2)
    layer = draw(st.integers(0, text["num_hidden_layers"] - 1))
    text["compress_ratios"][layer] = draw(st.one_of(st.integers(-5, 300).filter(lambda r: r not in kinds),
                                                    st.just(True), st.just("4")))
    return "compress_ratios"


def no_indexer_layer(draw, config):
    text = text_of(config)
    text["compress_ratios"] = [draw(st.sampled_from([0, 128])) if r == 4 else r for r in text["compress_ratios"]]
    return "compress_ratios"


def source_outside(draw, config):
    text = text_of(config)
    name = draw(st.sampled_from(["kv_source_layer_ids", "index_source_layer_ids"]))
    layers = text["num_hidden_layers"]
    text[name] = text[name] + [draw(st.one_of(st.integers(layers, 4 * layers), st.integers(-20, -1),
                                              st.sampled_from(text[name]), st.just("2"), st.just(None)))]
    return name


def flat_kv_source(draw, config):
    text = text_of(config)
    uncompressed = [layer for layer, r in enumerate(text["compress_ratios"][:text["num_hidden_layers"]]) if not r]
    text["kv_source_layer_ids"] = draw(st.lists(st.sampled_from(uncompressed), min_size=0, max_size=2, unique=True))
    return "kv_source_layer_ids"


def index_without_cache(draw, config):
    text = text_of(config)
    others = [layer for layer in range(text["num_hidden_layers"]) if layer not in text["kv_source_layer_ids"]]
    text["index_source_layer_ids"] = draw(st.lists(st.sampled_from(others), max_size=4, unique=True))
    return "index_source_layer_ids"


def no_groups(draw, config):
    text = text_of(config)
    name = draw(st.sampled_from(["o_groups", "num_attention_heads"]))
    text[name] = draw(st.sampled_from([0, None, -1]))
    if text[name] is None:
        del text[name]
    return name


def layer_types_length(draw, config):
    text = text_of(config)
    size = draw(st.integers(0, 40).filter(lambda n: n != text["num_hidden_layers"]))
    text["layer_types"] = (text["layer_types"] * 4)[:size]
    return "layer_types"


def one_kind_only(draw, config):
    text = text_of(config)
    kind = draw(st.sampled_from(["linear_attention", "deepseek_sparse_attention"]))
    text["layer_types"] = [kind] * text["num_hidden_layers"]
    text["linear_attn_config"].pop("kda_layers")
    return "layer_types"


def kda_layers_disagree(draw, config):
    text = text_of(config)
    listed = text["linear_attn_config"]["kda_layers"]
    text["linear_attn_config"]["kda_layers"] = draw(st.sampled_from([listed[:-1], listed + [3], listed[1:] + [7]]))
    return "kda_layers"


def kpool(draw, config):
    text = text_of(config)
    value = draw(st.sampled_from([None, 0, 1, 3, 6, 2048, "4", 4.0]))
    if value is None:
        del text["index_kpool"]
    else:
        text["index_kpool"] = value
    return "index_kpool"


def latent_width(draw, config):
    text = text_of(config)
    name = draw(st.sampled_from(["kv_lora_rank", "qk_rope_head_dim"]))
    text[name] += draw(st.integers(1, 512))
    return name


def kda_shape(draw, config):
    text = text_of(config)
    name = draw(st.sampled_from(["num_heads", "head_dim", "short_conv_kernel_size"]))
    text["linear_attn_config"][name] = draw(st.sampled_from([0, -4, 10 ** 6, "64", None]))
    return name


def text_clash(draw, config):
    text = dict(config)
    config.clear()
    config.update(architectures=text["architectures"], text_config=text,
                  num_hidden_layers=text["num_hidden_layers"] + draw(st.integers(1, 9)))
    return "num_hidden_layers"


def linear_elsewhere(draw, config):
    text = text_of(config)
    text["layer_types"] = ["linear_attention", "full_attention"] * (text["num_hidden_layers"] // 2)
    return "layer_types"


BREAKS = [(dense_beyond, None), (layers_changed, ("v4", "v41", "glm5next")), (ratios_length, ("v4", "v41")),
          (ratio_kind, ("v4", "v41")), (no_indexer_layer, ("v4",)), (source_outside, ("v41",)),
          (flat_kv_source, ("v41",)), (index_without_cache, ("v41",)), (no_groups, ("v41",)),
          (layer_types_length, ("glm5next",)), (one_kind_only, ("glm5next",)), (kda_layers_disagree, ("glm5next",)),
          (kpool, ("glm5next",)), (latent_width, ("glm5next",)), (kda_shape, ("glm5next",)),
          (text_clash, ("v41", "glm5next")), (linear_elsewhere, ("mla", "v4"))]


@st.composite
def broken_configs(draw):
    breaker, families = draw(st.sampled_from(BREAKS))
    family = draw(st.sampled_from(sorted(families or BASES)))
    config = copy.deepcopy(BASES[family])
    if breaker is not text_clash and draw(st.booleans()):  # vLLM reads a multimodal text_config as the top level
        config = {"architectures": config["architectures"], "text_config": config}
    return family, config, breaker(draw, config)


def checkpoint(config: dict, place: Path) -> Path:
    """A folder of its own holding the config (hypothesis reuses a test's tmp_path for every example)."""
    folder = Path(tempfile.mkdtemp(dir=place))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@FEW
@given(broken_configs())
def test_an_inconsistent_config_is_one_line_naming_its_key(tmp_path, case):
    family, config, key = case
    folder = checkpoint(config, tmp_path)
    (folder / "recipe.yaml").write_text(f"model: {folder}\ngpu: H200\ntensor-parallel-size: 4\n")
    result = runner.invoke(app, ["plan", str(folder / "recipe.yaml")])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, (family, result.output)
    assert lines[0].startswith("error: model: ") and key in lines[0], (family, lines[0])


@st.composite
def hybrid_configs(draw):
    """Consistent GLM-5.3-Flash-like configs: any layer pattern with KDA and DSA layers, any KDA shape and kpool."""
    layers = draw(st.integers(2, 48))
    kinds = draw(st.lists(st.booleans(), min_size=layers, max_size=layers).filter(lambda k: 0 < sum(k) < layers))
    heads = draw(st.sampled_from([8, 16, 32, 64, 128]))
    return COMMON | {"architectures": ["Glm5NextForCausalLM"], "num_hidden_layers": layers,
                     "first_k_dense_replace": draw(st.integers(0, layers)),
                     "num_nextn_predict_layers": draw(st.integers(0, 2)),
                     "max_position_embeddings": draw(st.sampled_from([4096, 131072, 1 << 20])),
                     "index_kpool": draw(st.sampled_from([2, 4, 8, 16])),
                     "layer_types": ["linear_attention" if k else "deepseek_sparse_attention" for k in kinds],
                     "linear_num_heads": heads, "linear_head_dim": draw(st.sampled_from([64, 128, 256])),
                     "linear_conv_kernel_dim": draw(st.integers(1, 8))}


SIGNED = {"unprofiled_bytes", "room_bytes"}  # a credit; the room a GPU too small for the step lacks


def integers(value) -> list[int]:
    if isinstance(value, dict):
        return [n for key, inner in value.items() if key not in SIGNED for n in integers(inner)]
    if isinstance(value, list):
        return [n for inner in value for n in integers(inner)]
    return [value] if isinstance(value, int) and not isinstance(value, bool) else []


@SOME
@given(hybrid_configs(), st.sampled_from(["H200", "B200"]), st.sampled_from(["0.30.0", "0.31.0", "0.32.0", "0.33.0",
                                                                             "main"]),
       st.integers(0, 8), st.sampled_from([1, 2, 4, 8]), st.booleans(), st.sampled_from(["auto", "fp8"]))
def test_no_consistent_hybrid_config_gives_a_negative_figure(tmp_path, config, gpu, version, k, tp, prefix_caching,
                                                             dtype):
    raw = {"model": str(checkpoint(config, tmp_path)), "gpu": gpu, "vllm-version": version, "tensor-parallel-size": tp,
           "enable-prefix-caching": prefix_caching, "kv-cache-dtype": dtype,
           "speculative-config": {"method": "mtp", "num_speculative_tokens": k}}
    plan = planning.plan(load(raw))
    data = report.plan_json(plan)
    assert all(n >= 0 for n in integers(data)), data
    kv = plan.memory.kv
    assert kv.block_bytes > 0 and kv.pages_per_request > 0 and len(kv.groups) >= 3
