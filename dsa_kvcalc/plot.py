"""sweep --plot: KV tokens per rank and the decode-logits reservation against the first varied key.
matplotlib is an optional extra (dsa-kvcalc[plot]), imported only here."""

import io
from numbers import Real

from dsa_kvcalc.catalog import GIB


def load_pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


class Series:
    """What the plot needs from the rows, collected as they stream past on their way to the output."""

    def __init__(self, keys: list[str]):
        self.keys = keys
        self.lines: dict[tuple, list[tuple]] = {}  # (backend, other varied values) -> [(x, tokens, reserved, at risk)]

    def tap(self, rows):
        x_key, *other_keys = self.keys
        for row in rows:
            if row.get("available"):
                line = (row["backend"], *(row[key] for key in other_keys))
                self.lines.setdefault(line, []).append(
                    (row[x_key], row["kv_cache_tokens"], row["reserved_bytes"], row["oom_before_fix.at_risk"]))
            yield row


def png_bytes(series: Series) -> bytes:
    pyplot = load_pyplot()
    x_key, *other_keys = series.keys
    xs = list(dict.fromkeys(x for points in series.lines.values() for x, *_ in points))
    numeric = all(isinstance(x, Real) and not isinstance(x, bool) for x in xs)
    position = {x: x if numeric else i for i, x in enumerate(xs)}

    figure, (kv_axes, reserved_axes) = pyplot.subplots(2, 1, sharex=True, figsize=(11, 8),
                                                       gridspec_kw={"height_ratios": [2, 1]})
    colors = pyplot.get_cmap("tab10" if len(series.lines) <= 10 else "tab20")
    for i, ((backend, *others), points) in enumerate(series.lines.items()):
        points.sort(key=lambda p: position[p[0]])
        at = [position[x] for x, *_ in points]
        tokens = [t / 1e6 for _, t, _, _ in points]
        risk = [r for *_, r in points]
        color = colors(i % colors.N)
        label = ", ".join([backend, *(f"{key}={value}" for key, value in zip(other_keys, others))])
        kv_axes.plot(at, tokens, color=color, label=label, marker="." if len(points) < 40 else None)
        kv_axes.fill_between(at, 0, tokens, where=risk, color=color, alpha=0.12, linewidth=0)
        reserved_axes.plot(at, [r / GIB for _, _, r, _ in points], color=color)
    kv_axes.set_title("KV cache per rank with vLLM #62860; shaded: an unfixed vLLM can run out of memory "
                      "(oom_before_fix.at_risk)", fontsize=10)
    kv_axes.set_ylabel("KV tokens per rank (millions)")
    kv_axes.set_ylim(bottom=0)
    reserved_axes.set_ylabel("decode-logits reservation (GiB)")
    reserved_axes.set_ylim(bottom=0)
    reserved_axes.set_xlabel(x_key)
    if not numeric:
        reserved_axes.set_xticks(range(len(xs)), [str(x) for x in xs])
    for axes in (kv_axes, reserved_axes):
        axes.grid(alpha=0.3)
    kv_axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    figure.tight_layout()
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=110)
    pyplot.close(figure)
    return out.getvalue()
