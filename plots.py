"""An ablation's figures (ablate.py): validation loss, final loss against learning rate, per-block
statistics, and in a sweep of a size final loss against it, of the groups that results.py sums
up."""
import io
import math
import statistics

import matplotlib
matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
import PIL.Image

from configurator import PRESETS
from model import NORM_MODES
from data import atomic_write
from results import SIZES, by_size, finished_seeds, label, mean_std, read_meta, size_key

# inches, before the legend: at 100 dpi about 800 × 400 pixels and 20 KB, for the README
WIDE, TALL = 6.4, 3.6
# lr.png: panels a row, inches a panel, and the nats above the lowest loss its axes show
LR_COLUMNS = 4
LR_PANEL = 2.2, 1.8
LR_SPAN = 1.0
HOUSE_STYLE = {"savefig.dpi": 100, "figure.constrained_layout.use": True, "axes.grid": True,
               "axes.grid.which": "both", "grid.alpha": 0.3, "axes.titlesize": "medium",
               "figure.titlesize": "medium", "legend.fontsize": "small", "legend.frameon": False}
LINESTYLES = ("-", "--", "-.", ":")
# toward white (+) or black (−), for a mode's 5th, 9th, ... variant
SHADES = (0.0, 0.45, -0.4, 0.7, -0.65)
# A colour per mode, by its place in NORM_MODES, the same in every figure: tab10's ten (the first
# six modes' colours since the first figures), then tab20b's darkest, told apart from the shades of
# the first ten, then tab20b's second and third rows and tab20c's darkest. The presets take the last
# ones, in PRESETS' order (peri dark purple, dyt dark olive: the two of tab20b's darkest furthest
# from the modes' colours, in CIELAB), so that a mode added later takes a free one and moves none.
MODE_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
               "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
               "#393b79", "#8c6d31", "#843c39",
               "#5254a3", "#8ca252", "#bd9e39", "#ad494a", "#a55194",
               "#6b6ecf", "#b5cf6b", "#e7ba52", "#d6616b", "#ce6dbd",
               "#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363", "#7b4173", "#637939")


def mode_color(mode):
    """A mode's or preset's colour in every figure of every ablation: MODE_COLORS at the mode's
    place in NORM_MODES, or a preset's place from the end."""
    return MODE_COLORS[list(PRESETS).index(mode) - len(PRESETS) if mode in PRESETS
                       else NORM_MODES.index(mode)]


def styles(modes):
    """{key: (colour, line style)} for modes, a {key: mode}: each mode in its own colour, its
    further variants (other learning rates or sweep points) in other line styles, then shades, of
    that colour."""
    count, result = {}, {}
    for key, mode in modes.items():
        i = count[mode] = count.get(mode, -1) + 1
        shade = SHADES[i // len(LINESTYLES) % len(SHADES)]
        toward = 1.0 if shade > 0 else 0.0
        color = tuple(c + abs(shade) * (toward - c)
                      for c in matplotlib.colors.to_rgb(mode_color(mode)))
        result[key] = color, LINESTYLES[i % len(LINESTYLES)]
    return result


def setting(groups, plan, with_lr=True):
    """What was trained, for titles: 'shakespeare_char, gpt2 blocks 4 × 128, lr 0.002, 2,000 steps,
    3 seeds'; a swept size as its range (blocks 2–16 × 128)."""
    sizes = {k: sorted({g["sweep"][k] for g in groups if k in g["sweep"]}) for k in SIZES}
    b = plan["base"] | {k: f"{vs[0]}–{vs[-1]}" if len(vs) > 1 else vs[0]
                        for k, vs in sizes.items() if vs}
    # seeds per group: 1–3 where they differ
    counts = {g["finished"] + g["diverged"] for g in groups} - {0}
    seeds = f"{min(counts)}–{max(counts)}" if len(counts) > 1 else str(max(counts, default=0))
    lr = f"lr {b['learning_rate']:g}, " * with_lr
    return (f"{b['dataset']}, {b.get('arch', 'gpt2')} blocks {b['n_layer']} × {b['n_embd']}, {lr}"
            f"{b['max_iters']:,} steps, {seeds} seed{'s' * (seeds != '1')}")


def loss_unit(plan):
    """Cross-entropy in nats per character or per token, by the dataset's tokenizer when its
    meta.json is here."""
    return ("nats per character" if (read_meta(plan) or {}).get("tokenizer") == "char"
            else "nats per token")


def log_if_wide(ax, values):
    """A log y axis when the values span more than 20×: the small ones would otherwise sit on the
    floor."""
    values = [v for v in values if v > 0 and math.isfinite(v)]
    if values and max(values) > 20 * min(values):
        ax.set_yscale("log")


def finish(fig, ax, title, path):
    """Title above, the legend right of ax (never over a line; none for ax None), and the PNG. The
    legend is left out of the layout and the image grows to hold it: every plot keeps its size
    however long its legend."""
    fig.suptitle(title)
    extra = fig.get_default_bbox_extra_artists()
    if ax is not None:
        legend = ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1))
        legend.set_in_layout(False)
        extra.append(legend)
    drawn, small = io.BytesIO(), io.BytesIO()
    fig.savefig(drawn, format="png", bbox_inches="tight", bbox_extra_artists=extra)
    plt.close(fig)
    # 256 colours draw lines on white as well as millions do, in a third of the bytes (Pillow:
    # matplotlib's own)
    PIL.Image.open(drawn).convert("RGB").quantize(256).save(small, format="png", optimize=True)
    atomic_write(path, small.getvalue())


def plot_val_loss(groups, plan, path):
    """Val loss against step: the mean of the seeds that finished, a band of ±1 std; a diverged
    seed in a thin line ending in an x. The axes start at the second evaluation of three or more:
    the first is ln(vocab) for every mode, and would squash the rest."""
    fig, ax = plt.subplots(figsize=(WIDE, TALL))
    style, tops, bottoms, starts = styles({g["group"]: g["mode"] for g in groups}), [], [], []
    for g in groups:
        color, ls = style[g["group"]]
        done = [r for r in g["runs"] if r["status"] == "finished"]
        if done:
            steps = [s for s, _ in done[0]["evals"]]
            mean, std = zip(*(mean_std(v)
                              for v in zip(*[[l for _, l in r["evals"]] for r in done])))
            ax.plot(steps, mean, ls, color=color, label=label(g, plan), marker=".")
            ax.fill_between(steps, [m - s for m, s in zip(mean, std)],
                            [m + s for m, s in zip(mean, std)],
                            color=color, alpha=0.2, linewidth=0)
            # the curve from the second of three or more evaluations
            first = 1 if len(steps) > 2 else 0
            tops.append(mean[first])
            bottoms.append(min(m - s for m, s in zip(mean, std)))
            starts.append(steps[first])
        for i, r in enumerate(r for r in g["runs"] if r["status"] == "diverged" and r["evals"]):
            steps, losses = zip(*r["evals"])
            diverged = None if done or i else label(g, plan) + " (diverged)"
            ax.plot(steps, losses, ls, color=color, linewidth=0.8, label=diverged)
            ax.plot(r["iter"], losses[-1], "x", color=color, markersize=9, mew=2)
            tops.append(losses[-1])
    ax.set(xlabel="step", ylabel=f"validation loss ({loss_unit(plan)})")
    top, bottom = max((t for t in tops if math.isfinite(t)), default=1.0), min(bottoms, default=0.0)
    if top > bottom:
        ax.set_ylim(bottom - 0.03 * (top - bottom), top)
    ax.set_xlim(left=min(starts, default=None))
    diverged = "; x: diverged" * any(g["diverged"] for g in groups)
    title = f"Validation loss during training (mean ± std over seeds{diverged})"
    finish(fig, ax, f"{title}\n{setting(groups, plan)}", path)


def lr_families(groups, plan):
    """{legend label without the rate: its groups}: the groups that differ only in their rate."""
    families = {}
    for g in groups:
        families.setdefault(label(g, plan, with_lr=False), []).append(g)
    return families


def pre_line(families, members):
    """The groups of pre at members' sweep point that finished: the grey line of members' panel
    (none on pre's own)."""
    pre = next((m for m in families.values() if m[0]["mode"] == "pre"
                and m[0]["sweep"] == members[0]["sweep"] and m is not members), [])
    return [g for g in pre if g["final_val_loss"]]


def lr_panel(ax, members, color, top, reference):
    """One entry's final val loss against the rate: a line through the means, ±1 sample std bars,
    each seed a point, the reference's means in grey dashes; at the top of the axes an x where a
    seed diverged, a ^ where the mean lies above top."""
    if reference:
        ax.plot([g["lr"] for g in reference], [g["final_val_loss"][0] for g in reference], "--",
                color="0.6", linewidth=1)
    ok = [g for g in members if g["final_val_loss"]]
    if ok:
        mean, std = zip(*(g["final_val_loss"] for g in ok))
        ax.plot([g["lr"] for g in ok], mean, "-", marker="o", color=color)
        ax.errorbar([g["lr"] for g in ok], mean, std, fmt="none", color=color, capsize=3)
        seeds = [(g["lr"], loss) for g in ok for loss in finished_seeds(g).values()]
        ax.scatter(*zip(*seeds), s=10, color=color, alpha=0.6, zorder=3)
    marks = [(g["lr"], "x") for g in members if g["diverged"]]
    marks += [(g["lr"], "^") for g in ok if top is not None and g["final_val_loss"][0] > top]
    for lr, marker in marks:
        ax.plot(lr, 0.97, marker, color=color, markersize=9 if marker == "x" else 6, mew=2,
                transform=ax.get_xaxis_transform())


def plot_lr(groups, plan, path):
    """Final val loss against learning rate, the papers' lr-sensitivity figure: a panel per entry
    that ran (its groups that differ only in their rate), the panels sharing their axes, each with
    pre's line in grey to read it against. The axes reach LR_SPAN above the lowest mean: a rate
    whose runs learned nothing (3.35 nats on tiny Shakespeare) would flatten every other curve."""
    # an entry with no run ended (a race half-way) has nothing to draw
    families = {family: members for family, members in lr_families(groups, plan).items()
                if any(g["finished"] or g["diverged"] for g in members)}
    cols = min(len(families), LR_COLUMNS)
    rows = math.ceil(len(families) / cols)
    fig, axes = plt.subplots(rows, cols, sharex=True, sharey=True, squeeze=False,
                             figsize=(LR_PANEL[0] * cols, LR_PANEL[1] * rows))
    style = styles({family: members[0]["mode"] for family, members in families.items()})
    means = [g["final_val_loss"][0] for g in groups if g["final_val_loss"]]
    top = min(means) + LR_SPAN if means and max(means) > min(means) + LR_SPAN else None
    references = {family: pre_line(families, members) for family, members in families.items()}
    for ax, (family, members) in zip(axes.flat, families.items()):
        lr_panel(ax, members, style[family][0], top, references[family])
        ax.set_title(family)
    # the empty places of the last row: gone, and the panels above them show their rates
    for k, ax in enumerate(axes.flat[len(families):], start=len(families)):
        ax.remove()
        axes.flat[k - cols].xaxis.set_tick_params(labelbottom=True)
    lrs = [g["lr"] for g in groups]
    axes[0, 0].set(xscale="log", xlim=(min(lrs) / 1.5, max(lrs) * 1.5))
    if top is not None:
        axes[0, 0].set_ylim(top=top)
    fig.supxlabel("peak learning rate (log scale)", fontsize="small")
    fig.supylabel(f"final validation loss ({loss_unit(plan)})", fontsize="small")
    marks = ["grey dashes: pre"] * any(references.values())
    marks += ["x: diverged"] * any(g["diverged"] for g in groups)
    marks += [f"^: above {top:.2f}"] if top is not None else []
    title = "Final validation loss against learning rate" + f" ({'; '.join(marks)})" * bool(marks)
    finish(fig, None, f"{title}\n{setting(groups, plan, with_lr=False)}", path)


def plot_layers(groups, plan, key, ylabel, what, path):
    """A per-block statistic at the first evaluation (step 0: the initialization) and at the last,
    mean over the seeds that finished."""
    fig, axes = plt.subplots(1, 2, figsize=(WIDE * 1.4, TALL), sharey=True)
    style, values, steps = styles({g["group"]: g["mode"] for g in groups}), [], [0, 0]
    for g in groups:
        color, ls = style[g["group"]]
        stats = [r["stats"] for r in g["runs"] if r["stats"] and r["status"] == "finished"]
        for i, ax in enumerate(axes) if stats else ():
            which = (0, -1)[i]
            mean = [statistics.fmean(v) for v in zip(*[s[which][key] for s in stats])]
            ax.plot(range(1, len(mean) + 1), mean, ls, marker="o", markersize=4, color=color,
                    label=label(g, plan) if i else None)
            values += mean
            steps[i] = stats[0][which]["iter"]
    for ax, title in zip(axes, (f"step {steps[0]:,} (initialization)",
                                f"step {steps[1]:,} (end of training)")):
        ax.set(xlabel="block (1 = next to the embedding)", title=title)
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[0].set_ylabel(ylabel)
    log_if_wide(axes[0], values)
    finish(fig, axes[-1], f"{what}\n{setting(groups, plan)}", path)


LAYER_FIGURES = (  # the key in log.jsonl's layer_stats, the y label, the title
    ("grad_norm", "‖∂loss/∂θ‖, L2 over the block",
     "Gradient norm of each block's parameters, on one validation batch"),
    ("resid_rms", "RMS of the residual stream", "Size of the residual stream after each block"),
    ("angle", "angle (radians)", "Angle by which each block turns a token's vector"),
)


def plot_size(groups, plan, key, params, path):
    """Final val loss against a swept size (params: against the non-embedding parameters instead),
    both axes' sizes on a log scale: a line per mode (and other sweep point), error bars ±1 std
    where there are seeds; an x at the top where a seed diverged."""
    fig, ax = plt.subplots(figsize=(WIDE, TALL))
    families = by_size(groups, plan, key)
    style = styles({family: next(iter(at.values()))["mode"] for family, at in families.items()})
    for family, at in families.items():
        color, ls = style[family]
        ok = [(g["params"] if params else v, *g["final_val_loss"]) for v, g in at.items()
              if g["final_val_loss"] and (g["params"] or not params)]
        if ok:
            x, mean, std = zip(*ok)
            ax.plot(x, mean, ls, marker="o", color=color, label=family)
            ax.errorbar(x, mean, std, fmt="none", color=color, capsize=3)
        for i, (v, g) in enumerate((v, g) for v, g in at.items()
                                   if g["diverged"] and (g["params"] or not params)):
            ax.plot(g["params"] if params else v, 0.97, "x", color=color, markersize=9, mew=2,
                    transform=ax.get_xaxis_transform(),
                    label=None if ok or i else f"{family} (diverged)")
    sizes = sorted({g["sweep"][key] for g in groups if key in g["sweep"]})
    if params:
        ax.set(xscale="log", xlabel="non-embedding parameters (log scale)")
    else:
        ax.set_xscale("log", base=2)
        ax.set(xticks=sizes, xticklabels=[f"{v}" for v in sizes], xlabel=f"{key} (log scale)")
        ax.minorticks_off()
    ax.set_ylabel(f"final validation loss ({loss_unit(plan)})")
    against = "non-embedding parameters" if params else {"n_layer": "depth", "n_embd": "width"}[key]
    title = f"Final validation loss against {against} (±1 std over seeds" + "; x: diverged" * any(
        g["diverged"] for g in groups) + ")"
    finish(fig, ax, f"{title}\n{setting(groups, plan)}", path)


def plot_all(groups, plan, folder):
    """Every figure the runs allow, into folder; returns their file names: none when no run finished
    or diverged (an empty figure would only say so). A size sweep gets final loss against the size
    and the parameters, and at each size the validation loss, gradient norm and rotation angle per
    block; a sweep of rates, final loss against the rate."""
    if not any(g["finished"] or g["diverged"] for g in groups):
        return []
    key, pngs = size_key(plan), []
    with plt.rc_context(HOUSE_STYLE):
        if key:
            plot_size(groups, plan, key, False, folder / "size.png")
            pngs.append("size.png")
            if all(g["params"] for g in groups):
                plot_size(groups, plan, key, True, folder / "params.png")
                pngs.append("params.png")
            # drawn as at one size
            for v in sorted({g["sweep"][key] for g in groups if key in g["sweep"]}):
                at = [g | dict(sweep={k: x for k, x in g["sweep"].items() if k != key})
                      for g in groups if g["sweep"].get(key) == v]
                pngs += plot_one(at, plan | dict(base=plan["base"] | {key: v}), folder,
                                 # the papers' argument: per block, per depth
                                 f"_{key}{v}", ("val_loss", "grad_norm", "angle"))
        every = ("val_loss", *(name for name, _, _ in LAYER_FIGURES))
        # against the rate where an entry ran two or more (simplenorm's 3× alone is one)
        swept = any(len(members) > 1 for members in lr_families(groups, plan).values())
        pngs += plot_one(groups, plan, folder, "", () if key else every, lr=swept)
    return pngs


def plot_one(groups, plan, folder, suffix, figures, lr=False):
    """The figures named (val_loss and LAYER_FIGURES' keys) of groups, and lr.png if lr, as name +
    suffix.png; returns the file names drawn (no per-block figure where no run logged layer
    stats)."""
    pngs = []
    if "val_loss" in figures:
        plot_val_loss(groups, plan, folder / f"val_loss{suffix}.png")
        pngs.append(f"val_loss{suffix}.png")
    if lr:
        plot_lr(groups, plan, folder / f"lr{suffix}.png")
        pngs.append(f"lr{suffix}.png")
    if any(r["stats"] and r["status"] == "finished" for g in groups for r in g["runs"]):
        for name, ylabel, what in (f for f in LAYER_FIGURES if f[0] in figures):
            plot_layers(groups, plan, name, ylabel, what, folder / f"{name}{suffix}.png")
            pngs.append(f"{name}{suffix}.png")
    return pngs
