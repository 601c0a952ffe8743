"""An ablation's figures (ablate.py): validation loss, final loss against learning rate, per-block statistics;
and results.md's table."""
import io
import json
import math
import statistics
from pathlib import Path

import matplotlib
matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
import PIL.Image

from model import NORM_MODES
from data import atomic_write

WIDE, TALL = 6.4, 3.6  # inches, before the legend: at 100 dpi about 800 × 400 pixels and 20 KB, for the README
HOUSE_STYLE = {"savefig.dpi": 100, "figure.constrained_layout.use": True, "axes.grid": True,
               "axes.grid.which": "both", "grid.alpha": 0.3, "axes.titlesize": "medium",
               "figure.titlesize": "medium", "legend.fontsize": "small", "legend.frameon": False}
LINESTYLES = ("-", "--", "-.", ":")
SHADES = (0.0, 0.45, -0.4, 0.7, -0.65)  # toward white (+) or black (−), for a mode's 5th, 9th, ... variant
# A colour per mode, by its place in NORM_MODES, the same in every figure: tab10's ten (the first six modes'
# colours since the first figures), then five of tab20b's darkest, told apart from the shades of the first ten
MODE_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
               "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173")
# The settings that belong to one mode, by their prefix: sweeping one varies only that mode (ablate.py), and
# a legend names it without the prefix (geonorm alpha=3.0)
MODE_OF_PREFIX = {"geo_": "geonorm", "sandwich_": "sandwich", "simplenorm_": "simplenorm", "lns_": "lns",
                  "mixln_": "mixln", "hybrid_": "hybrid"}
PREFIX_OF_MODE = {mode: prefix for prefix, mode in MODE_OF_PREFIX.items()}


def mean_std(values):
    """The mean and standard deviation over seeds; 0 for one seed."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def mode_color(mode):
    """A mode's colour in every figure of every ablation: MODE_COLORS at the mode's place in NORM_MODES."""
    return MODE_COLORS[NORM_MODES.index(mode)]


def styles(modes):
    """{key: (colour, line style)} for modes, a {key: mode}: each mode in its own colour, its further variants
    (other learning rates or sweep points) in other line styles, then shades, of that colour."""
    count, result = {}, {}
    for key, mode in modes.items():
        i = count[mode] = count.get(mode, -1) + 1
        shade = SHADES[i // len(LINESTYLES) % len(SHADES)]
        toward = 1.0 if shade > 0 else 0.0
        color = tuple(c + abs(shade) * (toward - c) for c in matplotlib.colors.to_rgb(mode_color(mode)))
        result[key] = color, LINESTYLES[i % len(LINESTYLES)]
    return result


def label(g, plan, with_lr=True):
    """A legend entry: the mode, its sweep point (geonorm alpha=3.0, not geo_alpha) and its learning rate
    unless it is the title's."""
    other_lr = with_lr and g["lr"] != plan["base"]["learning_rate"]
    lr = [f"lr {g['lr']:g}" + (" (3×)" if g["tripled"] else "")] if other_lr else []
    sweep = [f"{k.removeprefix(PREFIX_OF_MODE.get(g['mode'], ''))}={v}" for k, v in g["sweep"].items()]
    return " ".join([g["mode"], *sweep, *lr])


def setting(groups, plan, with_lr=True):
    """What was trained, for titles: 'shakespeare_char, gpt2 blocks 4 × 128, lr 0.002, 2,000 steps, 3 seeds'."""
    b = plan["base"]
    seeds = len({r["seed"] for g in groups for r in g["runs"] if r["status"] in ("finished", "diverged")})
    lr = f"lr {b['learning_rate']:g}, " * with_lr
    return (f"{b['dataset']}, {b.get('arch', 'gpt2')} blocks {b['n_layer']} × {b['n_embd']}, {lr}"
            f"{b['max_iters']:,} steps, {seeds} seed{'s' * (seeds != 1)}")


def loss_unit(plan):
    """Cross-entropy in nats per character or per token, by the dataset's tokenizer when its meta.json is here."""
    try:
        meta = json.loads((Path(plan["base"]["data_dir"]) / plan["base"]["dataset"] / "meta.json").read_text())
    except (OSError, ValueError):
        return "nats per token"
    return "nats per character" if meta.get("tokenizer") == "char" else "nats per token"


def log_if_wide(ax, values):
    """A log y axis when the values span more than 20×: the small ones would otherwise sit on the floor."""
    values = [v for v in values if v > 0 and math.isfinite(v)]
    if values and max(values) > 20 * min(values):
        ax.set_yscale("log")


def finish(fig, ax, title, path):
    """Title above, the legend right of ax (never over a line), and the PNG. The legend is left out of the
    layout and the image grows to hold it: every plot keeps its size however long its legend."""
    fig.suptitle(title)
    legend = ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1))
    legend.set_in_layout(False)
    drawn, small, extra = io.BytesIO(), io.BytesIO(), fig.get_default_bbox_extra_artists() + [legend]
    fig.savefig(drawn, format="png", bbox_inches="tight", bbox_extra_artists=extra)
    plt.close(fig)
    # 256 colours draw lines on white as well as millions do, in a third of the bytes (Pillow: matplotlib's own)
    PIL.Image.open(drawn).convert("RGB").quantize(256).save(small, format="png", optimize=True)
    atomic_write(path, small.getvalue())


def plot_val_loss(groups, plan, path):
    """Val loss against step: the mean of the seeds that finished, a band of ±1 std; a diverged seed in a
    thin line ending in an x. The axes start at the second evaluation of three or more: the first is
    ln(vocab) for every mode, and would squash the rest."""
    fig, ax = plt.subplots(figsize=(WIDE, TALL))
    style, tops, bottoms, starts = styles({g["group"]: g["mode"] for g in groups}), [], [], []
    for g in groups:
        color, ls = style[g["group"]]
        done = [r for r in g["runs"] if r["status"] == "finished"]
        if done:
            steps = [s for s, _ in done[0]["evals"]]
            mean, std = zip(*(mean_std(v) for v in zip(*[[l for _, l in r["evals"]] for r in done])))
            ax.plot(steps, mean, ls, color=color, label=label(g, plan), marker=".")
            ax.fill_between(steps, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                            color=color, alpha=0.2, linewidth=0)
            first = 1 if len(steps) > 2 else 0  # the curve from the second of three or more evaluations
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


def plot_lr(groups, plan, path):
    """Final val loss against learning rate, a line per mode and sweep point (error bars: ±1 std over seeds),
    each a little apart sideways; an x at the top where a seed diverged."""
    fig, ax = plt.subplots(figsize=(WIDE, TALL))
    families = {}  # the groups that differ only in learning rate
    for g in groups:
        families.setdefault(label(g, plan, with_lr=False), []).append(g)
    style = styles({family: members[0]["mode"] for family, members in families.items()})
    for k, (family, members) in enumerate(families.items()):
        color, ls = style[family]
        dodge = 10 ** (0.005 * (k - (len(families) - 1) / 2))  # side by side, not one error bar over another
        ok = [g for g in members if g["final_val_loss"]]
        if ok:
            mean, std = zip(*(g["final_val_loss"] for g in ok))
            lrs = [g["lr"] * dodge for g in ok]
            ax.plot(lrs, mean, ls, marker="o", color=color, label=family)  # a line, so the legend keeps this order
            ax.errorbar(lrs, mean, std, fmt="none", color=color, capsize=3)
        for i, g in enumerate(g for g in members if g["diverged"]):
            ax.plot(g["lr"] * dodge, 0.97, "x", color=color, markersize=9, mew=2,
                    transform=ax.get_xaxis_transform(),
                    label=None if ok or i else f"{family} (diverged)")
    lrs = [g["lr"] for g in groups]
    ax.set(xscale="log", xlim=(min(lrs) / 2, max(lrs) * 2), xlabel="peak learning rate (log scale)",
           ylabel=f"final validation loss ({loss_unit(plan)})")
    title = "Final validation loss against learning rate" + " (x: diverged)" * any(g["diverged"] for g in groups)
    finish(fig, ax, f"{title}\n{setting(groups, plan, with_lr=False)}", path)


def plot_layers(groups, plan, key, ylabel, what, path):
    """A per-block statistic at the first evaluation (step 0: the initialization) and at the last, mean over
    the seeds that finished."""
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
    for ax, title in zip(axes, (f"step {steps[0]:,} (initialization)", f"step {steps[1]:,} (end of training)")):
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


def score_cell(score):
    """An eval task's mean ± std over the seeds (the mean alone for one seed), or — when none was scored."""
    if score is None:
        return "—"
    return f"{score['mean']:.4f}" + (f" ± {score['std']:.4f}" if score["runs"] > 1 else "")


def table(groups):
    """results.md's table: a row per group; a column per eval task, headed by the metric that sums it up."""
    metrics = {t: s["metric"] for g in groups for t, s in g["tasks"].items()}  # task -> metric, first seen first
    rows = ["| mode | settings | lr | seeds | final val loss | best val loss | diverged | tokens/s |"
            + "".join(f" {task} {metric} |" for task, metric in metrics.items()),
            "|---|---|---|---|---|---|---|---|" + "---|" * len(metrics)]
    for g in groups:
        seeds, (mean, std) = g["finished"] + g["diverged"], g["final_val_loss"] or (None, None)
        final = (("diverged" if g["diverged"] else "failed") if mean is None
                 else f"{mean:.4f}" + (f" ± {std:.4f}" if g["finished"] > 1 else ""))
        best = "—" if g["best_val_loss"] is None else f"{g['best_val_loss']:.4f}"
        diverged = f"{g['diverged']}/{seeds}" if g["diverged"] else "no"
        speed = "—" if g["tokens_per_s"] is None else f"{g['tokens_per_s']:,.0f}"
        settings = " ".join(f"{k}={v}" for k, v in g["sweep"].items()) or "—"
        lr = f"{g['lr']:g}" + (" (3×)" if g["tripled"] else "")
        scores = "".join(f" {score_cell(g['tasks'].get(task))} |" for task in metrics)
        rows.append(f"| {g['mode']} | {settings} | {lr} | {seeds} | {final} | {best} | {diverged} | {speed} |"
                    f"{scores}")
    return "\n".join(rows)


def plot_all(groups, plan, folder):
    """Every figure the runs allow, into folder; returns their file names: none when no run finished or
    diverged (an empty figure would only say so)."""
    if not any(g["finished"] or g["diverged"] for g in groups):
        return []
    pngs = ["val_loss.png", "lr.png"]
    with plt.rc_context(HOUSE_STYLE):
        plot_val_loss(groups, plan, folder / "val_loss.png")
        plot_lr(groups, plan, folder / "lr.png")
        if any(r["stats"] and r["status"] == "finished" for g in groups for r in g["runs"]):
            for key, ylabel, what in LAYER_FIGURES:
                plot_layers(groups, plan, key, ylabel, what, folder / f"{key}.png")
                pngs.append(f"{key}.png")
    return pngs
