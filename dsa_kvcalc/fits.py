"""The activation peak and non-torch memory, fitted in the open to real startup records (records.py).

What vLLM subtracts before it sizes the KV cache (vllm/v1/worker/gpu_worker.py determine_available_memory):

    KV = total x gpu-memory-utilization - weights - peak activation - non-torch - CUDA-graph estimate

Weights are derived (weights.py), the graph estimate is capacity's; a log that prints "Available KV cache memory"
therefore gives the rest, peak + non-torch, and one that prints "Actual usage is ..." gives each. Each is fitted as a
function of what vLLM's code says it depends on:

    peak      = prefill logits budget + workspace growth (both derived) + hidden_copies x max_num_batched_tokens x
                hidden_size x 2 B   (the profile run's dummy batch of max_num_batched_tokens BF16 activations)
    non-torch = single + collectives x [TP x DP > 1]   (CUDA context and library workspaces of one process; NCCL and
                custom all-reduce buffers once ranks talk)

The three coefficients are least squares over every record's equations (its rest; its peak and non-torch where the
log prints them), none negative. A fit names its points and residuals. tools/fit_terms.py writes the fit of every record
to fits.json, which plan reads (estimates.py); benchmarks/leave_one_out.py refits without each deployment in turn.
"""

import itertools
import json
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

from dsa_kvcalc.records import Record
from dsa_kvcalc.units import GIB

DATA_PATH = Path(__file__).with_name("fits.json")
COEFFICIENTS = ("hidden_copies", "non_torch_single_bytes", "non_torch_collectives_bytes")


@dataclass(frozen=True)
class Point:
    """One record's figures: what the fit explains and what it is explained by."""
    record: str
    deployment: str
    gpu: str
    hidden_bytes: int  # max_num_batched_tokens x hidden_size x 2: the activation feature
    collectives: int  # 1 when TP x DP > 1
    derived_peak_bytes: int  # prefill logits budget + workspace growth
    rest_bytes: int  # requested - available KV - weights - graph estimate: peak + non-torch as logged
    peak_bytes: int | None  # logged peak activation
    non_torch_bytes: int | None  # logged non-torch memory

    def equations(self) -> list[tuple[tuple[float, float, float], float]]:
        """(coefficients' factors, observed) rows: rest, and peak and non-torch where logged."""
        rows = [((self.hidden_bytes, 1, self.collectives), self.rest_bytes - self.derived_peak_bytes)]
        if self.peak_bytes is not None:
            rows.append(((self.hidden_bytes, 0, 0), self.peak_bytes - self.derived_peak_bytes))
        if self.non_torch_bytes is not None:
            rows.append(((0, 1, self.collectives), self.non_torch_bytes))
        return rows


@dataclass(frozen=True)
class Fit:
    hidden_copies: float
    non_torch_single_bytes: int
    non_torch_collectives_bytes: int
    points: tuple[str, ...]  # the records fitted to
    residuals: dict  # record -> rest residual, bytes (observed - fitted)

    def peak_bytes(self, hidden_bytes: int) -> int:
        return round(self.hidden_copies * hidden_bytes)

    def non_torch_bytes(self, collectives: int) -> int:
        return self.non_torch_single_bytes + self.non_torch_collectives_bytes * collectives

    def rest_bytes(self, point: Point) -> int:
        return point.derived_peak_bytes + self.peak_bytes(point.hidden_bytes) + self.non_torch_bytes(point.collectives)

    @property
    def spread_bytes(self) -> int:
        """The largest residual: what the error bar of a planned KV cache carries for these terms."""
        return max((abs(r) for r in self.residuals.values()), default=0)

    @property
    def basis(self) -> str:
        residuals = ", ".join(f"{name} {r / GIB:+.2f} GiB" for name, r in self.residuals.items())
        return f"fitted on {len(self.points)} logs (residuals of peak + non-torch: {residuals})"


def solve(rows: list[tuple[tuple[float, ...], float]], free: tuple[int, ...]) -> list[float]:
    """Least squares over the coefficients in `free` (the others 0): the normal equations, by Gaussian elimination."""
    n = len(free)
    a = [[sum(r[0][free[i]] * r[0][free[j]] for r in rows) for j in range(n)] for i in range(n)]
    b = [sum(r[0][free[i]] * r[1] for r in rows) for i in range(n)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot], b[col], b[pivot] = a[pivot], a[col], b[pivot], b[col]
        if a[col][col] == 0:
            return [0.0] * n
        for r in range(n):
            if r != col:
                factor = a[r][col] / a[col][col]
                a[r] = [x - factor * y for x, y in zip(a[r], a[col])]
                b[r] -= factor * b[col]
    return [b[i] / a[i][i] for i in range(n)]


def least_squares(rows: list[tuple[tuple[float, ...], float]]) -> list[float]:
    """The non-negative least-squares coefficients: the best of the fits over each set of free coefficients whose
    solution is non-negative (three coefficients: eight sets)."""
    best, best_error = [0.0, 0.0, 0.0], float("inf")
    for size in range(1, 4):
        for free in itertools.combinations(range(3), size):
            values = solve(rows, free)
            if min(values) < 0:
                continue
            coefficients = [0.0, 0.0, 0.0]
            for index, value in zip(free, values):
                coefficients[index] = value
            error = sum((sum(c * x for c, x in zip(coefficients, row)) - y) ** 2 for row, y in rows)
            if error < best_error:
                best, best_error = coefficients, error
    return best


def fit(points: list[Point]) -> Fit:
    rows = [row for point in points for row in point.equations()]
    copies, single, collectives = least_squares(rows)
    result = Fit(copies, round(single), round(collectives), tuple(p.record for p in points), {})
    return Fit(copies, round(single), round(collectives), tuple(p.record for p in points),
               {p.record: p.rest_bytes - result.rest_bytes(p) for p in points})


def leave_out(points: list[Point], deployment: str) -> Fit:
    """The fit made without every record of one deployment."""
    return fit([p for p in points if p.deployment != deployment])


@dataclass(frozen=True)
class Spread:
    """How far a derived or estimated term was from the logs that print it: the largest residual, and each."""
    spread: float  # bytes, or a share of the term
    residuals: dict  # record -> residual

    @property
    def basis(self) -> str:
        return f"{len(self.residuals)} logs"


@dataclass(frozen=True)
class Stored:
    activation: Fit  # peak + non-torch
    weights: Spread  # derived weights against "Model loading took", a share of the weights
    graphs: Spread  # capacity's graph estimate against "Estimated CUDA graph memory", bytes


@cache
def stored() -> Stored:
    """What tools/fit_terms.py wrote."""
    values = json.loads(DATA_PATH.read_text())
    activation = values["activation"]
    return Stored(Fit(activation["hidden_copies"], activation["non_torch_single_bytes"],
                      activation["non_torch_collectives_bytes"], tuple(activation["points"]), activation["residuals"]),
                  Spread(**values["weights"]), Spread(**values["graphs"]))


def spread(residuals: dict) -> Spread:
    return Spread(max((abs(r) for r in residuals.values()), default=0), residuals)


def as_json(fitted: Fit, points: list[Point], weights: Spread, graphs: Spread) -> str:
    return json.dumps({"activation": asdict(fitted) | {"data": [asdict(p) for p in points]},
                       "weights": asdict(weights), "graphs": asdict(graphs)}, indent=1) + "\n"


def fitted_records(records: list[Record]) -> list[Record]:
    """The records a fit can use: a vLLM release's start (not a fork's) whose source states its arguments and whose
    log gives the KV memory it sized from the utilisation (not pinned by kv-cache-memory-bytes)."""
    return [r for r in records if r.available_gib is not None and "kv-cache-memory-bytes" not in r.recipe
            and not r.fork and r.stated]
