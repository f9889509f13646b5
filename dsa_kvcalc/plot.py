"""sweep --plot: KV tokens per rank and the decode-logits reservation against the first varied key, one colour per
backend. matplotlib is an optional extra (dsa-kvcalc[plot]), imported only here."""

import io
import math
from numbers import Real

from dsa_kvcalc.units import GIB

STYLES = ["-", "--", ":", "-."]  # one per combination of the other varied keys
MARKERS_BELOW = 40  # points on a line up to which each is marked


def load_pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


class Series:
    """What the plot needs from the rows, collected as they stream past on their way to the output."""

    def __init__(self, keys: list[str], title: str):
        self.keys = keys
        self.title = title  # the model, the GPU and the vLLM release
        self.lines: dict[tuple, list[tuple]] = {}  # (backend, other varied values) -> [(x, tokens, reserved, at risk)]

    def tap(self, rows):
        x_key, *other_keys = self.keys
        for row in rows:
            if row.get("available"):
                line = (row["backend"], *(row[key] for key in other_keys))
                self.lines.setdefault(line, []).append(
                    (row[x_key], row["kv_cache_tokens"], row["reserved_bytes"], row["oom.at_risk"]))
            yield row


def figure(series: Series):
    """Numbers on the x axis are drawn as lines; categories (a kv-cache dtype, a backend name) as points at their
    places. A line of few points marks each, so that a one-point sweep shows its point."""
    pyplot = load_pyplot()
    x_key, *other_keys = series.keys
    xs = list(dict.fromkeys(x for points in series.lines.values() for x, *_ in points))
    numeric = all(isinstance(x, Real) and not isinstance(x, bool) for x in xs)
    position = {x: x if numeric else i for i, x in enumerate(xs)}

    drawn, (kv_axes, reserved_axes) = pyplot.subplots(2, 1, sharex=True, figsize=(11, 8),
                                                      gridspec_kw={"height_ratios": [2, 1]})
    backends = list(dict.fromkeys(backend for backend, *_ in series.lines))
    others = list(dict.fromkeys(tuple(other) for _, *other in series.lines))
    colors = pyplot.get_cmap("tab10" if len(backends) <= 10 else "tab20")
    alike: dict[tuple, list[str]] = {}  # backends whose points are the same share one line, in the first's colour
    for (backend, *other), points in series.lines.items():
        alike.setdefault((tuple(other), tuple(sorted(points, key=lambda p: position[p[0]]))), []).append(backend)
    for (other, points), names in alike.items():
        backend = names[0]
        at = [position[x] for x, *_ in points]
        tokens = [t / 1e6 for _, t, _, _ in points]
        look = {"color": colors(backends.index(backend) % colors.N),
                "linestyle": STYLES[others.index(other) % len(STYLES)] if numeric else "none",
                "marker": "o" if len(points) < MARKERS_BELOW or not numeric else None}
        label = ", ".join([*names, *(f"{key.split('.')[-1]}={value}" for key, value in zip(other_keys, other))])
        kv_axes.plot(at, tokens, label=label, **look)
        risky = [t if r else math.nan for (*_, r), t in zip(points, tokens)]
        kv_axes.plot(at, risky, color=look["color"], linewidth=10, alpha=0.2, solid_capstyle="butt",
                     linestyle="-" if numeric else "none", marker="s" if not numeric else None, markersize=14)
        reserved_axes.plot(at, [r / GIB for _, _, r, _ in points], **look)
    kv_axes.plot([], [], color="grey", linewidth=10, alpha=0.2, label="OOM risk on this release (oom.at_risk)")
    drawn.suptitle(f"{series.title}\nKV cache per rank and the decode-logits reservation; wide band: this release "
                   f"can run out of memory outside CUDA graphs", fontsize=11)
    kv_axes.set_ylabel("KV tokens per rank (millions)")
    kv_axes.set_ylim(bottom=0)
    reserved_axes.set_ylabel("decode-logits reservation (GiB)")
    reserved_axes.set_ylim(bottom=0)
    reserved_axes.set_xlabel(x_key)
    if not numeric:
        reserved_axes.set_xticks(range(len(xs)), [str(x) for x in xs])
        reserved_axes.set_xlim(-0.5, len(xs) - 0.5)
    elif len(xs) == 1:
        reserved_axes.set_xticks(xs)
    for axes in (kv_axes, reserved_axes):
        axes.grid(alpha=0.3)
    kv_axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    drawn.tight_layout()
    return drawn


def png_bytes(series: Series) -> bytes:
    drawn = figure(series)
    out = io.BytesIO()
    drawn.savefig(out, format="png", dpi=110)
    load_pyplot().close(drawn)
    return out.getvalue()
