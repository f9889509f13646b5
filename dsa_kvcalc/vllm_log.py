"""A vLLM startup log, read into plain data: per rank, the memory terms vLLM printed while sizing the KV cache.

Pure: takes the log's text, returns a LogReading. Every spelling since the v1 engine (and the V0 memory-profiling
line), several ranks interleaved, ANSI colour codes, process prefixes such as "(Worker_TP0 pid=514)". Values stay in
the units the log prints (GiB with two decimals, tokens); turning them into bytes is the caller's business.
Spellings from vLLM's vllm/v1/worker/gpu_worker.py and vllm/v1/core/kv_cache_utils.py across versions, checked
against the real logs in tests/fixtures/vllm_logs.
"""

import ast
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from dsa_kvcalc import inputs
from dsa_kvcalc.keys import KEYS, RecipeError

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# "(Worker_TP0 pid=514) ", "(EngineCore_DP0 pid=749) (RayWorkerWrapper pid=347, ip=172.16.17.12) ": the last names the rank.
PREFIX = re.compile(r"\(([A-Za-z][\w.-]* pid=\d+[^()]*)\)\s*")
# Bounded: a figure (or a version) of more digits than any log prints is none (and a 5000-digit one would not
# convert).
NUMBER = r"(\d{1,15}(?:\.\d{1,12})?)"
COUNT = r"(\d{1,3}(?:,?\d{3}){0,6})"

# (fields, pattern): each pattern's groups fill the fields in order.
LINES = [
    (("weights_gib",), rf"Model loading took {NUMBER} Gi?B"),
    (("weights_gib", "peak_activation_gib", "non_torch_gib", "cudagraph_actual_gib"),
     rf"Actual usage is {NUMBER} GiB for weight, {NUMBER} GiB for peak activation, {NUMBER} GiB for non-torch "
     rf"memory, and {NUMBER} GiB for CUDAGraph memory"),
    (("consumed_gib", "peak_activation_gib", "cudagraph_actual_gib"),
     rf"Actual usage is {NUMBER} GiB for consumed memory \(weights \+ non-torch\), {NUMBER} GiB for peak activation, "
     rf"and {NUMBER} GiB for CUDAGraph memory"),
    (("total_memory_gib", "gpu_memory_utilization"),
     rf"Free memory on device (?:\S+ )?\([\d.]+/{NUMBER} GiB\) on startup\. Desired GPU memory utilization is "
     rf"\({NUMBER},"),
    (("total_memory_gib", "gpu_memory_utilization"),
     rf"total_gpu_memory \({NUMBER} ?GiB\) x gpu_memory_utilization \({NUMBER}\)"),
    (("weights_gib", "non_torch_gib", "peak_activation_gib", "available_kv_gib"),
     rf"model weights take {NUMBER} ?GiB; non_torch_memory takes {NUMBER} ?GiB; PyTorch activation peak memory "
     rf"takes {NUMBER} ?GiB; the rest of the memory reserved for KV Cache is {NUMBER} ?GiB"),
    (("available_kv_gib",), rf"Available KV cache memory: {NUMBER} GiB"),
    (("kv_tokens",), rf"GPU KV cache size: {COUNT} tokens"),
    (("max_model_len", "max_concurrency"), rf"Maximum concurrency for {COUNT} tokens per request: {NUMBER}x"),
    (("cudagraph_pool_gib", "cudagraph_estimated_gib"),
     rf"CUDA graph pool memory: {NUMBER} GiB \(actual\), {NUMBER} GiB \(estimated\)"),
    (("cudagraph_estimated_gib",), rf"Estimated CUDA graph memory: {NUMBER} GiB total"),
    (("graph_capture_gib",), rf"Graph capturing finished in [\d.]+ secs?, took {NUMBER} GiB"),
    (("gpu_memory_utilization", "utilization_without_graphs"),
     rf"The current --gpu-memory-utilization={NUMBER} is equivalent to --gpu-memory-utilization={NUMBER} without "
     rf"CUDA graph memory profiling"),
    (("version",), r"\bversion (\d{1,6}\.\d{1,6}\.\d{1,6}\S{0,64})\s*$"),
    (("version",), r"Initializing a V1 LLM engine \(v(\d{1,6}\.\d{1,6}\.\d{1,6}[^)\s]{0,64})\)"),
]
PATTERNS = [(fields, re.compile(pattern)) for fields, pattern in LINES]
ARGS = re.compile(r"non-default args: (\{.*)$")
# Every vLLM log line carries its caller's [file.py:LINE] (vllm/logger.py:22-24); for the lines read here, the stamp of
# each release (log_stamps.json) names the releases a log can come from.
STAMP = re.compile(r"\[(\w+\.py:\d+)\]")
STAMPS = json.loads((Path(__file__).parent / "log_stamps.json").read_text())["releases"]
# "Initializing a V1 LLM engine (v0.26.0) with config: model='...', max_seq_len=819200, tensor_parallel_size=4, ...":
# the engine arguments that size memory, as the config prints them (vllm/v1/engine/core.py).
CONFIG = re.compile(r"Initializing a V1 LLM engine \(v[^)]{1,64}\) with config: (.*)$")
# The printed name -> the argument's (the keys declared with a config_field).
CONFIG_FIELDS = {k.config_field: k.name.replace("-", "_") for k in KEYS.values() if k.config_field}


@dataclass(frozen=True)
class RankReading:
    """What one process printed (GiB as printed; None where it printed nothing)."""

    rank: str  # its prefix, e.g. "Worker_TP0 pid=514"; "" for lines without one
    weights_gib: float | None = None
    peak_activation_gib: float | None = None
    non_torch_gib: float | None = None
    consumed_gib: float | None = None  # weights + non-torch, in the newest "Actual usage" spelling
    cudagraph_actual_gib: float | None = None  # "Actual usage ... for CUDAGraph memory"
    cudagraph_estimated_gib: float | None = None  # the estimate the KV sizing subtracted
    cudagraph_pool_gib: float | None = None  # "CUDA graph pool memory: X GiB (actual)"
    graph_capture_gib: float | None = None
    available_kv_gib: float | None = None
    total_memory_gib: float | None = None
    gpu_memory_utilization: float | None = None
    utilization_without_graphs: float | None = None  # the utilisation that leaves the same KV with graphs unprofiled
    kv_tokens: int | None = None
    max_model_len: int | None = None
    max_concurrency: float | None = None
    version: str | None = None
    lines: dict = field(default_factory=dict)  # field -> the number of the log's line it was read from (from 1)


@dataclass(frozen=True)
class EngineArgs:
    """The "non-default args: {...}" line (or the engine's config line), as far as it could be read."""

    values: dict
    unreadable: tuple[str, ...]  # keys whose values are not Python literals (e.g. AttentionConfig(...))
    truncated: bool  # the dict was cut off: its last entry is lost
    line: int = 0  # the number of the log's line it was read from
    kind: str = "non-default args"  # or "engine config"


# PyTorch's out-of-memory message (c10/cuda/CUDACachingAllocator.cpp, format_size: "N bytes", else two decimals of
# KiB, MiB or GiB), e.g. the seed's "Tried to allocate 3.07 GiB. GPU 0 has a total capacity of 178.35 GiB of which
# 3.04 GiB is free." Older torch spells "capacty".
SIZE = r"(\d{1,15}(?:\.\d{1,2})?) (bytes|KiB|MiB|GiB)"
UNIT_BYTES = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
OOM = re.compile(rf"Tried to allocate {SIZE}\. GPU (\d+) has a total capac(?:i)?ty of {SIZE} of which {SIZE} is free\.")


@dataclass(frozen=True)
class Size:
    """A size as PyTorch printed it: bytes, and half its last printed digit (the rounding either way)."""
    bytes: int
    rounding_bytes: int


def printed_size(number: str, unit: str) -> Size:
    scale = UNIT_BYTES[unit]
    return Size(round(float(number) * scale), 0 if unit == "bytes" else scale // 200)


@dataclass(frozen=True)
class OomReading:
    """The first CUDA out-of-memory message of a log: what the allocator tried to allocate and what was free."""
    rank: str
    gpu: int
    tried: Size
    total: Size
    free: Size


def read_oom(line: str, rank: str) -> OomReading | None:
    match = OOM.search(line)
    if match is None:
        return None
    g = match.groups()
    return OomReading(rank, int(g[2]), printed_size(g[0], g[1]), printed_size(g[3], g[4]), printed_size(g[5], g[6]))


@dataclass(frozen=True)
class LogReading:
    ranks: list[RankReading]  # in order of first appearance; only ranks that printed something
    engine_args: EngineArgs | None
    # "Enforce eager set, disabling torch.compile and CUDAGraphs" (vllm/config/vllm.py:892 in 0.19.1rc1, :896 in
    # 0.20.0, as the bundled GLM-5.1 logs print it): no CUDA graphs, whatever the args line says
    eager: bool = False
    stamps: dict = field(default_factory=dict)  # [file.py:LINE] -> the message of the known line it stamps
    oom: OomReading | None = None  # the first CUDA out-of-memory message

    @property
    def releases(self) -> list[str]:
        """The releases whose logger stamps every known line of the log as it is stamped (none when the log has no
        known stamp, or its stamps match no release: a fork, a dev build)."""
        if not self.stamps:
            return []
        return [release for release, table in STAMPS.items()
                if all(table.get(stamp) == message for stamp, message in self.stamps.items())]


LOG_MAX_BYTES = 64 << 20  # a startup log is kilobytes; reading this much takes seconds already


def read_log_file(path: Path, key: str) -> LogReading:
    """A log file, read whole (bytes that are not UTF-8 replaced)."""
    try:
        return read_log(inputs.read_bytes(path, LOG_MAX_BYTES, "vLLM startup log").decode(errors="replace"))
    except inputs.Unreadable as error:
        raise RecipeError(key, str(error)) from None


def read_log(lines) -> LogReading:
    """A log's text, or its lines."""
    found: dict[str, dict] = {}
    found_lines: dict[str, dict] = {}
    engine_args, eager, stamps, oom = None, False, {}, None
    for number, raw_line in enumerate(lines.splitlines() if isinstance(lines, str) else lines, 1):
        raw_line = raw_line.rstrip("\n")
        line = ANSI.sub("", raw_line)
        rank = ""
        while match := PREFIX.match(line):
            rank, line = match.group(1).strip(), line[match.end():]
        args = ARGS.search(line)
        if args and engine_args is None:
            engine_args = replace(read_engine_args(args.group(1)), line=number)
        eager = eager or "Enforce eager set, disabling torch.compile and CUDAGraphs" in line
        for stamp in STAMP.findall(line[:200]):
            message = stamped_message(stamp, line)
            if message:
                stamps[stamp] = message
        oom = oom or read_oom(line, rank)
        config = CONFIG.search(line)
        if config and engine_args is None:
            engine_args = replace(read_engine_config(config.group(1)), line=number, kind="engine config")
        for fields, pattern in PATTERNS:
            match = pattern.search(line)
            if not match:
                continue
            values, numbers = found.setdefault(rank, {}), found_lines.setdefault(rank, {})
            for name, text_value in zip(fields, match.groups()):
                values.setdefault(name, convert(name, text_value))
                numbers.setdefault(name, number)
    ranks = [RankReading(rank, lines=found_lines[rank], **values) for rank, values in found.items()]
    return LogReading(ranks, engine_args, eager, stamps, oom)


def stamped_message(stamp: str, line: str) -> str | None:
    """The known message a stamp marks on this line, in any release's table."""
    for table in STAMPS.values():
        message = table.get(stamp)
        if message and any(part in line for part in message.split(" + ")):
            return message
    return None


def convert(field: str, text: str):
    if field in ("kv_tokens", "max_model_len"):
        return int(text.replace(",", ""))
    if field == "version":
        return text
    return float(text)


def read_engine_args(text: str) -> EngineArgs:
    """A dict repr, possibly cut short: each top-level entry is read on its own with ast.literal_eval."""
    entries, closed = split_entries(text[1:])
    if not closed:
        entries = entries[:-1]  # the cut entry could look whole ('max_num_seqs': 25 from 256): drop it
    values, unreadable = {}, []
    for entry in entries:
        match = re.fullmatch(r"\s*'([^']+)'\s*:\s*(.*?)\s*", entry, re.DOTALL)
        if not match:
            continue
        key, value = match.groups()
        try:
            values[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):  # not a literal, or one nested too deep
            unreadable.append(key)
    return EngineArgs(values, tuple(unreadable), not closed)


def read_engine_config(text: str) -> EngineArgs:
    """The memory-relevant fields of the engine's config line, as non-default args would give them."""
    values = {}
    for name, key in CONFIG_FIELDS.items():
        match = re.search(rf"(?:^|, ){name}=('[^']*'|[^,]*)", text)
        if match:
            try:
                values[key] = ast.literal_eval(match.group(1))
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                values[key] = match.group(1)
    return EngineArgs(values, (), False)


def split_entries(body: str) -> tuple[list[str], bool]:
    """The top-level comma-separated entries of a dict repr's body, and whether its closing brace came."""
    entries, start, depth, quote = [], 0, 0, None
    escaped = False
    for i, char in enumerate(body):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                entries.append(body[start:i])
                return [e for e in entries if e.strip()], True
            depth -= 1
        elif char == "," and depth == 0:
            entries.append(body[start:i])
            start = i + 1
    entries.append(body[start:])
    return entries, False
