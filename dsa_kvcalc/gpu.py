"""The live pass of verify --gpu: DeepGEMM's paged MQA logits on the local GPU, measured with torch's allocator
statistics. The only module that imports torch and deep_gemm, and only inside its functions."""

import contextlib
import datetime
import io
import os
import sys
import time
import warnings
from dataclasses import asdict, replace

from dsa_kvcalc import planning, streams, verify
from dsa_kvcalc.catalog import layout_for
from dsa_kvcalc.kv_cache import round_up
from dsa_kvcalc.verify import (INSTALL, LiveMemory, LocalGpu, OomRequest, OomRun, PassMeasurement, PassRequest,
                               ReferenceCheck, Shape, Target, TopkRun, Unavailable)

BLOCK_KV = 64  # tokens per KV-cache block: the only size DeepGEMM's SM90 kernel takes
CONTEXT_CAP = 2048  # real context lengths stay short: the allocation depends on max_context_len only
REFERENCE_ROWS = 4
UE8M0_ONE = 127  # a UE8M0 scale byte of 2^0
TOPK_KERNEL = "torch.topk (reference: vLLM's indexer top-k kernels are not installed here)"


def probe() -> LocalGpu:
    """The local GPU, torch and DeepGEMM, or Unavailable with one line that names the cause: torch or DeepGEMM that
    does not import (not installed, or a build that does not load), no CUDA GPU, or one that cannot be reached (busy,
    in exclusive-process mode, a driver that does not answer). What they print and warn while loading is dropped:
    stdout carries the report, and stderr that one line."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        return loaded(warned)


def loaded(warned: list) -> LocalGpu:
    """probe()'s work; warned: the warnings so far (the last of torch's "CUDA initialization: ..." says why it sees no
    GPU)."""
    try:
        import torch
    except Exception as error:
        missing = isinstance(error, ModuleNotFoundError) and error.name == "torch"
        problem = "is not installed" if missing else f"does not import ({cause(error)})"
        raise Unavailable(f"verify --gpu needs torch and DeepGEMM; torch {problem}: {INSTALL}") from None
    try:
        seen = len(warned)
        available = torch.cuda.is_available()
        if available:
            free_bytes, total_bytes = torch.cuda.mem_get_info()
            props = torch.cuda.get_device_properties(0)
        version = str(torch.__version__)
    except Exception as error:
        raise Unavailable(f"verify --gpu cannot reach the GPU ({cause(error)}): is it busy, or in exclusive-process "
                          f"mode?") from None
    if not available:
        said = f" ({cause(warned[-1].message)})" if len(warned) > seen else ""
        raise Unavailable(f"verify --gpu needs a CUDA GPU; torch {version} sees none{said}")
    try:
        import deep_gemm
    except Exception as error:  # a missing package or a build that does not load: both mean reinstall
        raise Unavailable(f"DeepGEMM does not import ({cause(error)}): {INSTALL}") from None
    return LocalGpu(gpu_name=str(props.name), compute_capability=(props.major, props.minor),
                    total_memory_bytes=total_bytes, free_at_start_bytes=free_bytes,
                    cuda_context_bytes=total_bytes - free_bytes, torch_version=version,
                    deepgemm_version=str(getattr(deep_gemm, "__version__", "unknown")),
                    entry_points=tuple(name for name in (verify.ENTRY_POINTS["2.8"], verify.LEGACY_ENTRY_POINT)
                                       if hasattr(deep_gemm, name)))


def cause(error) -> str:
    """An exception's (or a warning's) first line; its type's name when it says nothing."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def make_inputs(request: PassRequest) -> dict:
    """Synthetic FP8 queries, weights and a small paged FP8 KV cache (values, then one scale per token, per block)
    for request.batch sequences of next_n rows each, with real contexts of at most CONTEXT_CAP tokens: the
    kernel's arguments by name."""
    import torch

    batch, next_n, heads, dim = request.batch, request.next_n, request.heads, request.head_dim
    mx = request.mx_inputs
    generator = torch.Generator(device="cuda").manual_seed(0)
    cap = min(request.max_context_len, CONTEXT_CAP)
    sequence = torch.arange(batch, device="cuda")
    longest = next_n + sequence * 7919 % max(cap - next_n + 1, 1)
    longest[-1] = cap
    contexts = (longest[:, None] - torch.arange(next_n - 1, -1, -1, device="cuda")[None, :]).int().contiguous()
    blocks = round_up(cap, 256) // BLOCK_KV  # the kernel reads block ids up to the context rounded up to 256
    kv = torch.empty(blocks, BLOCK_KV, 1, dim + 4, dtype=torch.uint8, device="cuda")
    flat = kv.view(blocks, -1)
    flat[:, :BLOCK_KV * dim] = torch.randn(blocks, BLOCK_KV * dim, device="cuda", generator=generator).to(
        torch.float8_e4m3fn).view(torch.uint8)
    if mx:
        flat[:, BLOCK_KV * dim:] = UE8M0_ONE
    else:
        scales = torch.rand(blocks, BLOCK_KV, device="cuda", generator=generator) * 0.01 + 0.001
        flat[:, BLOCK_KV * dim:] = scales.view(torch.uint8)
    q = torch.randn(batch, next_n, heads, dim, device="cuda", generator=generator).to(torch.float8_e4m3fn)
    return {
        "q": q,
        "q_sf": torch.full((batch, next_n, heads), UE8M0_ONE * 0x01010101, dtype=torch.int32, device="cuda")
        if mx else None,
        "kv": kv,
        "weights": torch.randn(batch * next_n, heads, device="cuda", generator=generator).to(
            torch.bfloat16 if mx else torch.float32),
        "contexts": contexts,
        "block_table": ((sequence[:, None] + torch.arange(blocks, device="cuda")[None, :]) % blocks).int(),
        "indices": sequence.int() if mx else None,
    }


def schedule(request: PassRequest, inputs: dict, batch: int):
    """DeepGEMM's schedule metadata for the first `batch` sequences (computed once per step, outside the logits)."""
    import deep_gemm

    indices = (inputs["indices"][:batch],) if request.mx_inputs else ()
    return deep_gemm.get_paged_mqa_logits_metadata(inputs["contexts"][:batch], BLOCK_KV, deep_gemm.get_num_sms(),
                                                   *indices)


def indexer_logits(request: PassRequest, inputs: dict, batch: int, meta):
    """DeepGEMM's paged MQA logits for the first `batch` sequences, then the FP32 upcast where the backend reads
    FP32 (as vLLM's as_fp32_logits: same shape and strides)."""
    import deep_gemm
    import torch

    rows = batch * request.next_n
    contexts, block_table = inputs["contexts"][:batch], inputs["block_table"][:batch]
    q, weights, width = inputs["q"][:batch], inputs["weights"][:rows], request.max_context_len
    if request.mx_inputs:
        logits = deep_gemm.fp8_fp4_paged_mqa_logits((q, inputs["q_sf"][:batch]), inputs["kv"], weights, contexts,
                                                    block_table, meta, width, inputs["indices"][:batch])
    elif request.entry_point == verify.ENTRY_POINTS["2.8"]:
        logits = deep_gemm.fp8_fp4_paged_mqa_logits((q, None), inputs["kv"], weights, contexts, block_table, meta,
                                                    width)
    else:
        logits = deep_gemm.fp8_paged_mqa_logits(q, inputs["kv"], weights, contexts, block_table, meta, width, False)
    copy = None
    if request.fp32_copy:
        copy = torch.empty_strided(logits.shape, logits.stride(), dtype=torch.float32, device=logits.device)
        copy.copy_(logits)
    return logits, copy


def reference_check(request: PassRequest, inputs: dict, logits) -> ReferenceCheck:
    """A few rows against plain torch from the same FP8 inputs, inside each row's context only."""
    import torch

    dim, next_n = request.head_dim, request.next_n
    flat = inputs["kv"].view(inputs["kv"].size(0), -1)
    values = flat[:, :BLOCK_KV * dim].view(torch.float8_e4m3fn).float().view(-1, BLOCK_KV, dim)
    scales = (torch.ones(values.shape[:2], device="cuda") if request.mx_inputs
              else flat[:, BLOCK_KV * dim:].contiguous().view(torch.float32))
    rows = sorted({0, 1 % request.rows, request.rows // 2, request.rows - 1})[:REFERENCE_ROWS]
    got, want = [], []
    for row in rows:
        sequence, token = divmod(row, next_n)
        context = int(inputs["contexts"][sequence, token])
        ids = inputs["block_table"][sequence, :-(-context // BLOCK_KV)].long()
        keys = (values[ids] * scales[ids][..., None]).view(-1, dim)[:context]
        scores = inputs["q"][sequence, token].float() @ keys.T  # [heads, context]
        want.append((scores.relu() * inputs["weights"][row].float()[:, None]).sum(0))
        got.append(logits[row, :context].float())
    x, y = torch.cat(got).double(), torch.cat(want).double()
    diff = float(1 - 2 * (x * y).sum() / (x * x + y * y).sum())
    return ReferenceCheck(rows=rows, diff=diff, max_abs_error=float((x - y).abs().max()),
                          max_abs_reference=float(y.abs().max()))


def measure_pass(request: PassRequest) -> PassMeasurement:
    """The indexer's decode working set at request.rows rows: logits, FP32 copy, top-k; allocator statistics."""
    import torch

    inputs = make_inputs(request)
    meta = schedule(request, inputs, request.batch)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # the logits get a fresh segment, as allocator_bytes assumes
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    logits, copy = indexer_logits(request, inputs, request.batch, meta)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    window = min(request.max_context_len, round_up(int(inputs["contexts"].max()), 256))
    scores = (logits if copy is None else copy)[:, :window].float()
    outside = torch.arange(window, device="cuda")[None, :] >= inputs["contexts"].view(-1, 1)
    k = min(request.topk, window)
    torch.topk(scores.masked_fill(outside, float("-inf")), k, dim=-1)
    torch.cuda.synchronize()
    return PassMeasurement(
        rows=logits.size(0), batch=request.batch, next_n=request.next_n, heads=request.heads,
        logits_dtype={torch.float32: "fp32", torch.bfloat16: "bf16"}.get(logits.dtype, str(logits.dtype)),
        columns=logits.size(1), row_stride=logits.stride(0),
        storage_bytes=logits.untyped_storage().nbytes(),
        fp32_copy=copy is not None,
        copy_storage_bytes=0 if copy is None else copy.untyped_storage().nbytes(),
        peak_bytes=peak,
        topk=TopkRun(kernel=TOPK_KERNEL, k=k, window_columns=window,
                     extra_peak_bytes=torch.cuda.max_memory_allocated() - base - peak),
        reference=reference_check(request, inputs, logits),
    )


def out_of_memory(error: Exception) -> bool:
    import torch

    return isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error)


def reproduce_oom(request: PassRequest, oom: OomRequest, per_decode: int) -> OomRun:
    """The indexer's step as vLLM 0.33.0 runs a mixed batch: the last prefill chunk's FP32 logits held, the decode
    logits allocated beside them (DeepGEMM), the chunk released, then the FP32 copy where the top-k reads FP32
    (sparse_attn_indexer.py:880-893). The top-k writes into persistent buffers (indexer_topk.py:315-346): nothing of
    it is allocated here. The ballast leaves plan's room free beside the chunk; the decode count grows (doubling,
    then bisection) until an allocation fails."""
    import torch

    search_rows = oom.max_search_decodes * per_decode
    search = replace(request, rows=search_rows, batch=search_rows // request.next_n)
    inputs = make_inputs(search)

    def fits(decodes: int) -> tuple[bool, int]:
        torch.cuda.empty_cache()
        ballast_bytes = round_up(max(torch.cuda.mem_get_info()[0] - oom.room_bytes - oom.chunk_bytes, 0),
                                 verify.GRANULE_BYTES)
        ballast = torch.empty(ballast_bytes, dtype=torch.uint8, device="cuda")
        chunk = torch.empty(oom.chunk_bytes // 4, dtype=torch.float32, device="cuda")
        left = torch.cuda.mem_get_info()[0]
        batch = decodes * per_decode // request.next_n
        try:
            meta = schedule(search, inputs, batch)
            logits, copy = indexer_logits(replace(search, fp32_copy=False), inputs, batch, meta)
            del chunk  # rebound: the chunk's logits go before the copy is made
            if request.fp32_copy:
                copy = torch.empty_strided(logits.shape, logits.stride(), dtype=torch.float32, device=logits.device)
                copy.copy_(logits)
            torch.cuda.synchronize()
            del logits, copy, meta
            return True, left
        except (torch.cuda.OutOfMemoryError, RuntimeError) as error:
            if not out_of_memory(error):
                raise
            return False, left
        finally:
            del ballast
            torch.cuda.empty_cache()

    attempts, fit, failed, left = [], 0, None, 0
    decodes = 1
    while decodes <= oom.max_search_decodes and failed is None:
        ok, left = fits(decodes)
        attempts.append((decodes, ok))
        fit, failed = (decodes, None) if ok else (fit, decodes)
        decodes *= 2
    while failed is not None and failed - fit > 1:
        middle = (fit + failed) // 2
        ok, left = fits(middle)
        attempts.append((middle, ok))
        fit, failed = (middle, failed) if ok else (fit, middle)
    return OomRun(room_target_bytes=oom.room_bytes, room_left_bytes=left, chunk_bytes=oom.chunk_bytes,
                  attempts=attempts, first_failing_decodes=failed)


def live_memory(env: LocalGpu) -> LiveMemory:
    """vLLM's non-torch memory: what the process holds on the GPU beyond torch's reserved pool (CUDA context,
    DeepGEMM's JIT modules and workspaces)."""
    import torch

    free_bytes, total_bytes = torch.cuda.mem_get_info()
    return LiveMemory(total_memory_bytes=total_bytes, free_at_start_bytes=env.free_at_start_bytes,
                      cuda_context_bytes=env.cuda_context_bytes,
                      non_torch_bytes=total_bytes - free_bytes - torch.cuda.memory_reserved())


@contextlib.contextmanager
def stdout_to_stderr():
    """While kernels compile, anything written to file descriptor 1 (by C++ too) goes to stderr: stdout carries the
    report."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
    except OSError:  # stderr is closed: what the kernels print goes nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def run_verify(shapes: list[Shape], backends: list[str], env: LocalGpu, target: Target, profile: bool,
               reproduce: bool) -> dict:
    """Every shape through the live pass, compared with plan: the report verify prints (JSON-shaped)."""
    console = streams.console(stderr=True)
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": {"name": env.gpu_name, "compute_capability": ".".join(map(str, env.compute_capability)),
                "total_memory_bytes": env.total_memory_bytes, "catalog_gpu": target.gpu.name,
                "arch": target.gpu.arch},
        "torch_version": env.torch_version,
        "deepgemm": {"version": env.deepgemm_version, "entry_points": list(env.entry_points),
                     "layout": verify.layout_name(layout_for(target.release, target.gpu))},
        "top_k_kernel": TOPK_KERNEL,
        "notes": list(target.notes),
        "shapes": [],
    }
    try:
        with stdout_to_stderr(), console.status("DeepGEMM: starting", spinner="dots") as status:
            for shape in shapes:
                report["shapes"].append(verify_shape(shape, backends, env, profile, reproduce, status, console))
    except RuntimeError as error:  # torch's CUDA errors: a GPU that went busy or away, a kernel that failed
        raise Unavailable(f"the GPU failed during the pass ({cause(error)})") from None
    report["exit_code"] = verify.exit_code(report)
    return report


def verify_shape(shape: Shape, backends: list[str], env: LocalGpu, profile: bool, reproduce: bool, status,
                 console) -> dict:
    """One shape: a live pass per distinct working set (with or without the FP32 copy), each backend's verdict, and
    the --profile and --reproduce-oom runs of the recipe's backend."""
    plan, named_plan = planning.plan(shape.planned), planning.plan(shape.named)
    passes, results = live_passes(shape, plan, named_plan, backends, env, status, console)
    entry = {"name": shape.name, "recipe": shape.planned.resolved(), "recipe_gpu": shape.named.gpu.name,
             "notes": list(shape.notes), "measured": [asdict(m) for m in passes.values()],
             "backends": [asdict(r) for r in results]}
    ran = [r.backend for r in results if r.agree is not None]
    main = next((name for name in ran if plan.backend(name).selected), ran[0] if ran else None)
    if profile and main:
        measured = passes[plan.backend(main).decode_logits.copy_bytes_per_element]
        entry["profile"] = asdict(verify.profile_replay(plan, main, measured, live_memory(env)))
    if reproduce and main:
        entry |= oom_replay(shape, plan, main, env.entry_points[0], status, console)
    return entry


def live_passes(shape: Shape, plan, named_plan, backends: list[str], env: LocalGpu, status,
                console) -> tuple[dict, list]:
    """The live passes (one per distinct working set: with or without the FP32 copy) and each backend's verdict."""
    import torch

    entry_point = env.entry_points[0]
    passes, results = {}, []
    for name in backends or [b.backend for b in named_plan.backends if b.available]:
        b = plan.backend(name)
        if not b.available:
            results.append(verify.backend_result(shape, plan, named_plan, name, None, env.deepgemm_version))
            continue
        dl = b.decode_logits
        if dl.copy_bytes_per_element not in passes:
            request = verify.pass_request(shape.planned, dl, dl.rows, entry_point)
            rows = verify.rows_that_fit(dl, torch.cuda.mem_get_info()[0], request.next_n)
            request = verify.pass_request(shape.planned, dl, rows, entry_point)
            status.update(f"{shape.name}: paged MQA logits, {rows:,} rows x {dl.columns:,} columns "
                          f"(DeepGEMM compiles its kernels on first use: seconds)")
            started = time.monotonic()
            passes[dl.copy_bytes_per_element] = measure_pass(request)
            torch.cuda.empty_cache()
            console.log(f"{shape.name}: {rows:,} x {dl.columns:,} {dl.logits_dtype} in "
                        f"{time.monotonic() - started:.1f} s")
        results.append(verify.backend_result(shape, plan, named_plan, name, passes[dl.copy_bytes_per_element],
                                             env.deepgemm_version))
    return passes, results


def oom_replay(shape: Shape, plan, main: str, entry_point: str, status, console) -> dict:
    """--reproduce-oom for the recipe's backend: where the step fails against plan's edge, at risk or not (the edge
    may lie above max-num-seqs)."""
    b = plan.backend(main)
    oom = verify.oom_request(plan, main)
    per_decode = 1 + shape.planned.num_speculative_tokens
    request = verify.pass_request(shape.planned, b.decode_logits, per_decode, entry_point)
    status.update(f"{shape.name}: reproducing the out-of-memory error (ballast leaves {oom.room_bytes:,} B free "
                  f"beside a {oom.chunk_bytes:,} B prefill chunk)")
    verdict = verify.oom_verdict(plan, main, reproduce_oom(request, oom, per_decode))
    console.log(f"{shape.name}: {verdict.verdict}")
    return {"reproduce_oom": asdict(verdict)}
