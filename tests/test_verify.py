"""verify --gpu: the comparison and its rendering on CPU against what a real H200 measured (tests/fixtures/verify,
verify's own JSON from DeepGEMM 2.8.2), the exit-3 paths, and (marked gpu) the live pass itself."""

import copy
import dataclasses
import importlib.util
import io
import json
import re
import sys
import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console
from typer.testing import CliRunner

from conftest import cli, one_line
from dsa_kvcalc import capacity, estimates, planning, verify
from dsa_kvcalc.render import verify as verify_render
from dsa_kvcalc.cli import app
from dsa_kvcalc.recipe import load

FIXTURES = Path(__file__).parent / "fixtures" / "verify"
SEED_RECIPE = verify.RECIPES_DIR / "deepseek-v4.1-flash-4xb200-dep4.yaml"
runner = CliRunner()
H200_ENV = verify.LocalGpu(gpu_name="NVIDIA H200", compute_capability=(9, 0), total_memory_bytes=150_109_880_320,
                           free_at_start_bytes=149_557_477_376, cuda_context_bytes=552_402_944,
                           torch_version="2.11.0+cu130", deepgemm_version="2.8.2",
                           entry_points=("fp8_fp4_paged_mqa_logits",))


def builtin() -> dict:
    """verify --gpu --format json on the H200 (no recipe: the built-in shapes)."""
    return json.loads((FIXTURES / "h200-builtin.json").read_text())


def seed_oom() -> dict:
    """verify SEED_RECIPE --gpu --as-local --profile --reproduce-oom --backend auto --format json on the H200."""
    return json.loads((FIXTURES / "h200-v41-as-local-oom.json").read_text())


def gpu_ready() -> bool:
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("deep_gemm") is None:
        return False
    import torch

    return torch.cuda.is_available()


def shape(report: dict, name: str) -> dict:
    return next(s for s in report["shapes"] if s["name"] == name)


def recorded_recipe(entry: dict):
    """The recorded recipe as verify re-planned it for the H200 (verify.runnable_here)."""
    return load(verify.runnable_here(entry["recipe"], load(entry["recipe"])))


def replay(entry: dict) -> list[verify.BackendVerdict]:
    """Today's plan for the recorded recipe against the recorded measurements."""
    recipe = recorded_recipe(entry)
    plan = planning.plan(recipe)
    measured = verify.PassMeasurement.from_json(entry["measured"][0])
    return [verify.backend_result(verify.Shape(entry["name"], recipe, recipe, ()), plan, plan, b["backend"],
                                  measured if b["agree"] is not None else None, "2.8.2")
            for b in entry["backends"]]


# The recorded H200 run ---------------------------------------------------------------------------------------------

def test_plan_predicts_every_recorded_h200_shape_byte_for_byte():
    names = []
    for entry in builtin()["shapes"]:
        for result in replay(entry):
            if result.available:
                assert result.agree is True, (entry["name"], result.checks)
                names.append(entry["name"])
    assert len(set(names)) == len(builtin()["shapes"])


def test_recorded_widths_that_are_not_multiples_of_256():
    # Hand-derived: 256 rows x align(4097, 256) = 4352 FP32 columns; 64 sequences x next_n 2 at align(5000, 256) =
    # 5120; 128 x 4 rows at align(400004 // 4, 256) = 100096 (DeepSeek-V4's indexer scores max_model_len // 4). Peaks as the allocator charges them: 512 x 100,096 x 4 B =
    # 204,996,608 B = 97.75 x 2 MiB takes the whole 98th granule (0.25 is below its 1 MiB split threshold);
    # 4,456,448 B (4.25 MiB, under 10 MiB) is split off a larger segment. The H200 measured the same.
    for name, rows, stride, peak in (("DeepSeek-V3.2, max-model-len 4097", 256, 4352, 4_456_448),
                                     ("GLM-5, max-model-len 5000, 1 MTP token", 128, 5120, 128 * 5120 * 4),
                                     ("DeepSeek-V4-Flash, max-model-len 400004 (indexer width 100001), 3 MTP tokens", 512, 100096,
                                      98 * 2 * 2**20)):
        entry = shape(builtin(), name)
        logits = planning.plan(recorded_recipe(entry)).backend("auto").decode_logits
        predicted = verify.predicted_pass(logits, rows)
        assert (predicted["row_stride"], predicted["storage_bytes"], predicted["peak_bytes"]) == (
            stride, rows * stride * 4, peak)
        measured = entry["measured"][0]
        assert (measured["row_stride"], measured["storage_bytes"], measured["peak_bytes"]) == (
            stride, rows * stride * 4, peak)


def test_recorded_kernel_output_passes_the_reference_tolerance():
    for entry in builtin()["shapes"]:
        measured = verify.PassMeasurement.from_json(entry["measured"][0])
        assert verify.reference_ok(measured.reference, measured.logits_dtype)


def test_exit_code_of_the_recorded_run_is_recomputed_as_zero():
    assert verify.exit_code(builtin()) == 0 and verify.exit_code(seed_oom()) == 0


# Differences and their likely reason -------------------------------------------------------------------------------

def differing(change: dict) -> verify.BackendVerdict:
    entry = copy.deepcopy(shape(builtin(), "DeepSeek-V3.2, max-model-len 4097"))
    entry["measured"][0] |= change
    return replay(entry)[0]


def test_sm100_layout_measured_on_a_sm90_prediction_names_the_arch():
    # DeepGEMM 2.8 on SM100: BF16 rows padded to lcm(384, 512) = 1536 columns: 4097 -> 4608.
    result = differing({"logits_dtype": "bf16", "row_stride": 4608, "storage_bytes": 256 * 4608 * 2,
                        "peak_bytes": 256 * 4608 * 2})
    assert result.agree is False
    assert "2.8.x on sm100/sm103" in result.verdict and "another arch" in result.verdict


def test_unknown_layout_says_so():
    result = differing({"row_stride": 4400, "storage_bytes": 256 * 4400 * 4, "peak_bytes": 256 * 4400 * 4})
    assert "no catalog layout gives fp32 logits with row stride 4,400 for width 4,097" in result.verdict


def test_extra_allocation_is_reported_in_bytes():
    result = differing({"peak_bytes": 4_456_448 + 1024})
    assert result.agree is False and "peak is 1,024 B above the logits" in result.verdict


def test_kernel_off_the_reference_fails():
    result = differing({"reference": {"rows": [0], "diff": 0.3, "max_abs_error": 9.0, "max_abs_reference": 10.0}})
    assert result.agree is False and "torch reference" in result.verdict


def test_a_difference_gives_exit_1():
    report = copy.deepcopy(builtin())
    report["shapes"][0]["backends"][0]["agree"] = False
    assert verify.exit_code(report) == 1


def test_scaled_down_rows_compare_bytes_per_row():
    entry = copy.deepcopy(shape(builtin(), "DeepSeek-V4-Flash, max-model-len 400004 (indexer width 100001), 3 MTP tokens"))
    measured = entry["measured"][0]
    measured |= {"rows": 100, "storage_bytes": 100 * 100096 * 4, "peak_bytes": 100 * 100096 * 4}
    result = replay(entry)[0]
    assert result.agree is True and "scaled down from 512 to 100 rows" in result.verdict


# Another GPU than the recipe's ---------------------------------------------------------------------------------------

def test_b200_recipe_on_h200_says_what_it_cannot_show():
    target = verify.local_target(H200_ENV)
    [seed] = verify.recipe_shapes(SEED_RECIPE, target, as_local=False)
    assert seed.planned.gpu.name == "H200" and seed.named.gpu.name == "B200"
    lines = verify.cannot_show(planning.plan(seed.named).backend("auto").decode_logits,
                               planning.plan(seed.planned).backend("auto").decode_logits, seed.named, seed.planned)
    # The seed: 1536 rows x 1,049,088 BF16 columns x (2 + 4) B = 9,668,395,008 B.
    assert len(lines) == 1 and "bf16 logits" in lines[0] and "1,049,088" in lines[0] and "9,668,395,008" in lines[0]
    [local] = verify.recipe_shapes(SEED_RECIPE, target, as_local=True)
    assert local.named == local.planned and any("re-planned for H200" in n for n in local.notes)


def test_pass_requests_follow_each_arch_s_kernel_interface():
    # The seed: 256 sequences x (1 + 5 MTP tokens) = 1536 rows at width 1,048,576; V4.1-Flash's config has
    # index_topk 512 and 32 indexer heads of 128. SM90's kernel takes next_n 1 or 2, so 6 tokens a sequence go in as 1536 sequences of next_n 1; its logits
    # are FP32 (no copy). SM100 under DeepGEMM 2.8 takes the fp8_fp4 path with UE8M0 scales; auto reads an FP32 copy
    # of the BF16 logits, deep_select reads them directly.
    target = verify.local_target(H200_ENV)
    [seed] = verify.recipe_shapes(SEED_RECIPE, target, as_local=False)
    for recipe, backend, expected in (
            (seed.planned, "auto", dict(rows=1536, batch=1536, next_n=1, fp32_copy=False, mx_inputs=False)),
            (seed.named, "auto", dict(rows=1536, batch=1536, next_n=1, fp32_copy=True, mx_inputs=True)),
            (seed.named, "deep_select", dict(rows=1536, batch=1536, next_n=1, fp32_copy=False, mx_inputs=True))):
        dl = planning.plan(recipe).backend(backend).decode_logits
        request = verify.pass_request(recipe, dl, dl.rows, "fp8_fp4_paged_mqa_logits")
        assert request == verify.PassRequest(heads=32, head_dim=128, max_context_len=1_048_576, topk=512,
                                             entry_point="fp8_fp4_paged_mqa_logits", **expected)
    # GLM-5 with 1 MTP token on SM90: 2 tokens a sequence fit next_n 2 natively.
    [glm] = [s for s in verify.builtin_shapes(target) if s.name.startswith("GLM-5, max-model-len 5000")]
    dl = planning.plan(glm.planned).backend("auto").decode_logits
    request = verify.pass_request(glm.planned, dl, dl.rows, "fp8_fp4_paged_mqa_logits")
    assert (request.rows, request.batch, request.next_n, request.max_context_len) == (128, 64, 2, 5000)


OOM_RUNS = sorted((FIXTURES / "oom").glob("h200-*.json"))


@pytest.mark.parametrize("path", OOM_RUNS, ids=lambda path: path.stem)
def test_the_step_fails_on_the_h200_within_plans_margin_of_its_edge(path):
    """verify --gpu SHAPE --as-local --reproduce-oom on the H200 (tests/fixtures/verify/oom; two shapes, GLM-5.1 at
    2,048 sequences and V4-Flash at 1,024, no other test uses): the ballast leaves plan's room beside a prefill chunk,
    DeepGEMM allocates the decode logits, the count grows until an allocation fails. In the room each run left, the
    step fits up to plan's safe count, and fails no later than one past plan's edge plus the margin. Three of the four
    failed at the edge itself, not one past it: the 2 MiB segments of the ballast and the logits took what the edge
    left (4 MiB at most: ALLOCATOR_ROUNDING_BYTES, the margin's fixed part)."""
    [entry] = json.loads(path.read_text())["shapes"]
    recorded = entry["reproduce_oom"]
    run = verify.OomRun.from_json(recorded["run"])
    plan = planning.plan(recorded_recipe(entry))
    verdict = verify.oom_verdict(plan, recorded["backend"], run)
    assert verdict.agree, verdict.verdict
    assert verdict.predicted_safe_decodes < run.first_failing_decodes <= verdict.predicted_max_decodes + 1
    assert run.room_target_bytes - run.room_left_bytes <= capacity.ALLOCATOR_ROUNDING_BYTES  # the ballast's rounding
    late = dataclasses.replace(run, first_failing_decodes=verdict.predicted_max_decodes + 2 + verdict.margin_decodes)
    early = dataclasses.replace(run, first_failing_decodes=verdict.predicted_safe_decodes)
    assert not verify.oom_verdict(plan, recorded["backend"], late).agree
    assert not verify.oom_verdict(plan, recorded["backend"], early).agree


def test_four_oom_runs_two_of_shapes_no_other_test_uses():
    assert [path.stem for path in OOM_RUNS] == ["h200-glm51-tp8-2048-k3", "h200-seed-v41-dep4", "h200-v32-tp8-1024-k5",
                                                 "h200-v4flash-tp4-1024-k3"]


def test_profile_replays_the_recorded_measurements():
    # The H200's measured total and non-torch memory in place of plan's: requested = ceil(150,109,880,320 x 0.97) =
    # 145,606,583,911 B; the reservation is 1536 rows x 1,048,576 x 4 B = 6,442,450,944 B (FP32, no copy on SM90).
    [entry] = seed_oom()["shapes"]
    recorded = entry["profile"]
    live = verify.LiveMemory(total_memory_bytes=150_109_880_320, free_at_start_bytes=recorded["free_at_start_bytes"],
                             cuda_context_bytes=recorded["cuda_context_bytes"],
                             non_torch_bytes=recorded["non_torch_bytes"])
    plan = planning.plan(recorded_recipe(entry))
    replayed = verify.profile_replay(plan, "auto", verify.PassMeasurement.from_json(entry["measured"][0]), live)
    assert replayed.requested_bytes == 145_606_583_911
    assert replayed.indexer_reservation_bytes == 6_442_450_944
    # By hand, per DP rank. Weights: plan's, derived from vLLM's model classes (weights.json), replayed as they are.
    # Peak: the 512 MiB prefill budget + the K gather of 8 x 2 (above 262,144 tokens) x 1,048,576 entries of 132 B
    # (2,214,592,512) + the fitted copies x 8192 tokens x 5120 x 2 B, raised by the reservation above a headroom of the
    # prefill budget: + 6,442,450,944 - 536,870,912. Non-torch: the H200's measured 720,175,104 B. Graphs: the 6 GiB of
    # logits at 1536 rows + 1.5 GiB besides = 8,053,063,680 B. KV: requested less all four.
    weights = plan.memory.weights.bytes
    peak = 536_870_912 + 2_214_592_512 + round(estimates.ACTIVATION_HIDDEN_COPIES.value * 8192 * 5120 * 2) \
        + 6_442_450_944 - 536_870_912
    assert (replayed.weights_bytes, replayed.peak_activation_bytes, replayed.cudagraph_bytes) == (
        weights, peak, 8_053_063_680)
    assert replayed.kv_cache_bytes == 145_606_583_911 - weights - peak - 720_175_104 - 8_053_063_680


# The local GPU and DeepGEMM: exit 3 --------------------------------------------------------------------------------

@pytest.mark.parametrize("change, words", [
    ({"compute_capability": (8, 0), "gpu_name": "NVIDIA A100-SXM4-80GB"}, "is sm80"),
    ({"deepgemm_version": "3.0.0"}, "no known logits layout"),
    ({"entry_points": ("fp8_paged_mqa_logits",)}, "lacks fp8_fp4_paged_mqa_logits"),
    ({"deepgemm_version": "2.6.1", "entry_points": ("fp8_fp4_paged_mqa_logits",)}, "lacks fp8_paged_mqa_logits"),
])
def test_incompatible_gpu_or_deepgemm_is_unavailable(change, words):
    with pytest.raises(verify.Unavailable, match=words):
        verify.local_target(dataclasses.replace(H200_ENV, **change))


def test_gpu_outside_the_catalog_is_planned_as_the_nearest_of_its_arch():
    target = verify.local_target(dataclasses.replace(H200_ENV, gpu_name="NVIDIA H800 PCIe",
                                                     total_memory_bytes=85_520_809_984))
    assert target.gpu.name == "H100" and "not in the GPU catalog" in target.notes[-1]


def test_legacy_deepgemm_picks_the_2_6_layout():
    target = verify.local_target(dataclasses.replace(H200_ENV, deepgemm_version="2.6.1",
                                                     entry_points=("fp8_paged_mqa_logits",)))
    assert target.release == "2.6" and "DeepGEMM 2.3 - 2.6.1 on sm90" in target.notes[0]


@pytest.mark.skipif(gpu_ready(), reason="torch, a GPU and DeepGEMM are here")
def test_verify_gpu_without_torch_or_gpu_exits_3_with_one_line():
    result = runner.invoke(app, ["verify", "--gpu"])
    assert result.exit_code == 3
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: verify --gpu needs")
    assert verify.INSTALL in line or "sees none" in line
    assert "Traceback" not in result.output


def test_verify_needs_gpu_flag_and_known_backends():
    assert runner.invoke(app, ["verify"]).exit_code == 2
    result = runner.invoke(app, ["verify", str(SEED_RECIPE), "--gpu", "--backend", "fastest"])
    assert result.exit_code == 2 and result.stderr.startswith("error: --backend: unknown backend 'fastest'")


# Rendering -----------------------------------------------------------------------------------------------------------

def test_table_renders_the_recorded_run():
    console = Console(file=io.StringIO(), width=200)
    verify_render.render_table(builtin(), console)
    text = console.file.getvalue()
    assert "NVIDIA H200 (SM 9.0, 139.80 GiB, planned as H200)" in text and "DeepGEMM 2.8.2" in text
    assert "4,352" in text and "agrees byte for byte" in text and "verify: all agree (exit 0)" in text


def test_the_table_renders_the_recorded_oom_run():
    console = Console(file=io.StringIO(), width=300)
    verify_render.render_table(json.loads((FIXTURES / "oom" / "h200-seed-v41-dep4.json").read_text()), console)
    text = console.file.getvalue()
    assert "reproduce-oom (auto): failed at 143 decodes; plan: OOM above 142, safe up to 121 (margin 21)" in text


# The live pass (an H200 or another DeepGEMM GPU) -------------------------------------------------------------------

def live(*args) -> tuple[int, dict]:
    result = runner.invoke(app, ["verify", *map(str, args), "--gpu", "--format", "json"])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, json.loads(result.stdout)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ready(), reason="needs torch, a CUDA GPU and DeepGEMM")
def test_live_builtin_shapes_agree_byte_for_byte():
    code, report = live()
    assert code == 0 and report["exit_code"] == 0
    widths = {s["recipe"]["max-model-len"] for s in report["shapes"]}
    assert any(width % 256 for width in widths)
    for entry in report["shapes"]:
        assert all(c["agree"] for b in entry["backends"] for c in b["checks"])


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ready(), reason="needs torch, a CUDA GPU and DeepGEMM")
def test_live_seed_recipe_as_local_reproduces_the_oom_and_the_fix():
    code, report = live(SEED_RECIPE, "--as-local", "--reproduce-oom", "--backend", "auto")
    [entry] = report["shapes"]
    assert code == 0 and entry["reproduce_oom"]["agree"]


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ready(), reason="needs torch, a CUDA GPU and DeepGEMM")
def test_live_seed_recipe_as_named_checks_what_this_arch_can_show():
    code, report = live(SEED_RECIPE)
    [entry] = report["shapes"]
    assert code == 0
    if report["gpu"]["arch"] != "sm100":
        assert any(b["cannot_show"] for b in entry["backends"])


# verify: a torch or DeepGEMM that does not import, a GPU that cannot be reached -----------------------------------

def noise() -> None:
    """What a torch or DeepGEMM build says while it loads: lines on stdout and stderr, a warning."""
    import warnings

    print("loading\nstill loading")
    print("a C++ banner", file=sys.stderr)
    warnings.warn("Failed to initialize NumPy: _ARRAY_API not found")


class Failing:
    """A finder whose import of one module fails with the given exception, as a broken build's would."""

    def __init__(self, name: str, error: Exception):
        self.name, self.error = name, error

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name:
            noise()
            raise self.error
        return None


def fake_torch(stage: str, error: Exception, warning: str):
    """A torch whose CUDA side fails at stage: an H200 otherwise, whose memory query fails from its second call
    when the stage is the pass itself."""
    calls = []

    def mem_get_info():
        calls.append(1)
        if stage == "mem_get_info" or (stage == "the pass" and len(calls) > 1):
            raise error
        return 149_557_477_376, 150_109_880_320

    def is_available():
        noise()
        if stage == "is_available raises":
            raise error
        if stage == "no GPU":
            import warnings
            warnings.warn(warning)
        return stage != "no GPU"

    def get_device_properties(index):
        if stage == "get_device_properties":
            raise error
        return types.SimpleNamespace(name="NVIDIA H200", major=9, minor=0)

    cuda = types.SimpleNamespace(is_available=is_available, mem_get_info=mem_get_info,
                                 get_device_properties=get_device_properties)
    return types.SimpleNamespace(__version__="2.11.0+cu130", cuda=cuda)


STAGES = ["import torch", "is_available raises", "no GPU", "mem_get_info", "get_device_properties",
          "import deep_gemm", "the pass"]
ERRORS = [OSError, ImportError, RuntimeError, AttributeError, ValueError, SyntaxError]


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(STAGES), st.sampled_from(ERRORS), st.text(max_size=40), st.text(max_size=30))
def test_verify_without_a_usable_torch_or_gpu_is_exit_3_with_one_line_naming_the_cause(stage, kind, message, said):
    # A torch that failed to load, or a GPU busy or in exclusive mode, ended in a traceback.
    if stage == "the pass":
        kind = RuntimeError  # what torch raises for a CUDA failure
    error = kind(message)
    with pytest.MonkeyPatch.context() as patch:
        for name in ("torch", "deep_gemm"):
            patch.delitem(sys.modules, name, raising=False)
        if stage in ("import torch", "import deep_gemm"):
            patch.setattr(sys, "meta_path", [Failing(stage.split()[1], error), *sys.meta_path])
        if stage != "import torch":
            patch.setitem(sys.modules, "torch", fake_torch(stage, error, said))
        if stage != "import deep_gemm":
            patch.setitem(sys.modules, "deep_gemm", types.SimpleNamespace(__version__="2.8.2",
                                                                          fp8_fp4_paged_mqa_logits=None))
        result = cli("verify", "--gpu")
    assert result.exit_code == 3, result.output
    line = one_line(result.stderr)
    first = (said if stage == "no GPU" else message).strip().splitlines()
    named = first[0] if first else ("UserWarning" if stage == "no GPU" else kind.__name__)
    assert all(part in line for part in re.split(r"[^ -~]+", named) if part), (named, line)

