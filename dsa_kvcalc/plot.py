"""sweep --plot: KV tokens per rank against the first varied key, one colour per backend, one panel per value of the
second varied key (small multiples stay readable at 10,000 points), one line style per combination of the others.
The OOM bound is marked where it lies on the axis (a vertical line at the decodes that fit, where the first key is
max-num-seqs), else each point at risk is marked; the decode-logits reservation gets panels of its own only where
it moves. One legend, in the lines' colours. matplotlib is an optional extra (dsa-kvcalc[plot]), imported only
here."""

import io
import math
from numbers import Real

from dsa_kvcalc.units import GIB

STYLES = ["-", "--", ":", "-."]  # one per combination of the third and later varied keys
MARKERS_BELOW = 40  # points on a line up to which each is marked
MOST_PANELS = 16  # a second key with more values than this is drawn as line styles instead
BOUND_KEY = "max-num-seqs"  # the key whose axis the OOM bound (decodes) lies on
RISK = {"linestyle": "none", "marker": "o", "markersize": 9, "fillstyle": "none", "color": "black"}  # a ring


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
        # (backend, other varied values) -> [(x, tokens, reserved, at risk, decodes safe there)]
        self.lines: dict[tuple, list[tuple]] = {}

    def tap(self, rows):
        x_key, *other_keys = self.keys
        for row in rows:
            if row.get("available"):
                line = (row["backend"], *(row[key] for key in other_keys))
                self.lines.setdefault(line, []).append((row[x_key], row["kv_cache_tokens"], row["reserved_bytes"],
                                                        row["oom.at_risk"], row["oom.safe_decodes"]))
            yield row


def panels_of(series: Series) -> tuple[list, bool]:
    """The values of the second varied key, one panel each (or one panel, when there is no second key or it has
    more than MOST_PANELS values), and whether the second key is faceted."""
    values = list(dict.fromkeys(other[0] for _, *other in series.lines)) if len(series.keys) > 1 else [None]
    return (values, True) if 1 < len(values) <= MOST_PANELS else ([None], False)


def figure(series: Series):
    """Numbers on the x axis are drawn as lines; categories (a kv-cache dtype, a backend name) as points at their
    places. A line of few points marks each, so that a one-point sweep shows its point."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    pyplot = load_pyplot()
    x_key, *other_keys = series.keys
    xs = list(dict.fromkeys(x for points in series.lines.values() for x, *_ in points))
    numeric = all(isinstance(x, Real) and not isinstance(x, bool) for x in xs)
    position = {x: x if numeric else i for i, x in enumerate(xs)}
    bound_on_axis = numeric and x_key.replace("_", "-") == BOUND_KEY
    reserved = {r for points in series.lines.values() for _, _, r, _, _ in points}
    reserved_moves = len(reserved) > 1  # else no panel: the title gives its one value
    panels, faceted = panels_of(series)
    styled_keys = other_keys[1:] if faceted else other_keys

    columns = min(len(panels), 4)
    rows = math.ceil(len(panels) / columns)
    heights = [2, 1] * rows if reserved_moves else [2] * rows
    drawn, grid = pyplot.subplots(len(heights), columns, sharex=True, sharey="row", squeeze=False,
                                  figsize=(max(3.6 * columns + 1.5, 9), 1.3 * sum(heights)),
                                  gridspec_kw={"height_ratios": heights})
    per_panel = 2 if reserved_moves else 1
    kv_axes = {panel: grid[i // columns * per_panel][i % columns] for i, panel in enumerate(panels)}
    reserved_axes = {panel: grid[i // columns * per_panel + 1][i % columns] for i, panel in enumerate(panels)
                     } if reserved_moves else {}
    for i in range(len(panels), rows * columns):  # the grid's empty cells; the panel above shows the x axis
        for r in range(per_panel):
            grid[i // columns * per_panel + r][i % columns].set_visible(False)
        above = grid[i // columns * per_panel - 1][i % columns]
        above.xaxis.set_tick_params(labelbottom=True)
        above.set_xlabel(x_key)

    backends = list(dict.fromkeys(backend for backend, *_ in series.lines))
    colors = pyplot.get_cmap("tab10" if len(backends) <= 10 else "tab20")
    styles = list(dict.fromkeys(tuple(other[1:] if faceted else other) for _, *other in series.lines))
    alike: dict[tuple, list[str]] = {}  # backends whose points are the same share one line, in the first's colour
    for (backend, *other), points in series.lines.items():
        alike.setdefault((tuple(other), tuple(sorted(points, key=lambda p: position[p[0]]))), []).append(backend)
    legend: dict[str, Line2D] = {}
    bounds: dict[tuple, set] = {}  # (panel, colour) -> the decodes that fit, where the OOM bound is on the axis
    for (other, points), names in alike.items():
        panel = other[0] if faceted else None
        style = other[1:] if faceted else other
        color = colors(backends.index(names[0]) % colors.N)
        look = {"color": color, "linestyle": STYLES[styles.index(style) % len(STYLES)] if numeric else "none",
                "marker": "o" if len(points) < MARKERS_BELOW or not numeric else None, "markersize": 4}
        at = [position[x] for x, *_ in points]
        tokens = [t / 1e6 for _, t, _, _, _ in points]
        kv_axes[panel].plot(at, tokens, **look)
        legend.setdefault(", ".join(names), Line2D([], [], color=color, marker=look["marker"],
                                                   linestyle="-" if numeric else "none"))
        if bound_on_axis and any(risk for *_, risk, _ in points):  # a release that reserves them has no such bound
            # the decodes safe at the first point at risk: the max-num-seqs below which the step keeps its margin
            # (the room moves a little with max-num-seqs: the block tables grow with it)
            first_risky = min((p for p in points if p[3]), key=lambda p: position[p[0]])
            bounds.setdefault((panel, color), set()).add(first_risky[4])
        else:
            risky = [(a, t) for a, t, (*_, risk, _) in zip(at, tokens, points) if risk]
            kv_axes[panel].plot([a for a, _ in risky], [t for _, t in risky], **RISK)
        if reserved_moves:
            reserved_axes[panel].plot(at, [r / GIB for _, _, r, _, _ in points], **look)
    for (panel, color), decodes in bounds.items():
        i = [c for p, c in bounds if p == panel].index(color)
        for bound in decodes:
            if min(xs) <= bound <= max(xs):  # its value on the axis, each colour a line higher than the last
                kv_axes[panel].axvline(bound, color=color, linestyle=(0, (2, 2)), linewidth=1.2)
                kv_axes[panel].annotate(f"{bound:,}", (bound, 0), xycoords=("data", "axes fraction"),
                                        xytext=(2, 3 + 10 * i), textcoords="offset points",
                                        color=color, fontsize=8)
    for style in styles if styled_keys and numeric else []:
        label = ", ".join(f"{key.split('.')[-1]}={value}" for key, value in zip(styled_keys, style))
        legend[label] = Line2D([], [], color="grey", linestyle=STYLES[styles.index(style) % len(STYLES)])
    if bound_on_axis:
        legend[f"OOM bound (oom.safe_decodes at the first point at risk): above this {BOUND_KEY} the release is at "
               f"risk outside CUDA graphs, in its backend's colour"] = Line2D([], [], color="grey", linestyle=(0, (2, 2)))
    else:
        legend["OOM risk on this release at this point (oom.at_risk)"] = Line2D([], [], **RISK)

    for panel, axes in kv_axes.items():
        if faceted:
            axes.set_title(f"{other_keys[0].split('.')[-1]}={panel}", fontsize=10)
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
    for row in grid[0::per_panel]:
        row[0].set_ylabel("KV tokens (M)")
    for axes in reserved_axes.values():
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
    if reserved_moves:
        for row in grid[1::2]:
            row[0].set_ylabel("reserved (GiB)")
    for axes in grid.flat:
        if numeric:
            axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}" if value == int(value)
                                                         else f"{value:,}"))
    for axes in grid[-1]:
        axes.set_xlabel(x_key)
        if not numeric:
            axes.set_xticks(range(len(xs)), [str(x) for x in xs])
            axes.set_xlim(-0.5, len(xs) - 0.5)
        elif len(xs) == 1:
            axes.set_xticks(xs)
    reservation = "" if len(reserved) != 1 else (
        f"; the decode-logits reservation is {reserved.pop() / GIB:.2f} GiB at every point")
    drawn.suptitle(f"{series.title}\nKV tokens per rank, millions (M){reservation}", fontsize=11)
    legend_columns = 1
    drawn.legend(list(legend.values()), list(legend), loc="lower center", ncol=legend_columns, fontsize=8,
                 frameon=False)
    legend_inches = 0.2 * math.ceil(len(legend) / legend_columns) + 0.15
    drawn.set_figheight(drawn.get_figheight() + 1.1 + legend_inches)  # the title above, the legend below
    drawn.tight_layout(rect=(0, legend_inches / drawn.get_figheight(), 1, 1))
    return drawn


def png_bytes(series: Series) -> bytes:
    drawn = figure(series)
    out = io.BytesIO()
    drawn.savefig(out, format="png", dpi=110)
    load_pyplot().close(drawn)
    return out.getvalue()
