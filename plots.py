"""An ablation's results (ablate.py): its runs summed up over seeds, results.md's text and tables, and the
figures: validation loss, final loss against learning rate, per-block statistics, and in a sweep of a size
final loss against it. Which entries a sweep key varies (a mode's own prefix) is decided here too."""
import io
import json
import math
import statistics
import types
from pathlib import Path

import matplotlib
import numpy as np
matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
import PIL.Image
import torch

import configurator
from configurator import PRESETS
from model import GPT, NORM_MODES
from checkpoint import evaluated, read_log
from data import atomic_write, read_shard

WIDE, TALL = 6.4, 3.6  # inches, before the legend: at 100 dpi about 800 × 400 pixels and 20 KB, for the README
HOUSE_STYLE = {"savefig.dpi": 100, "figure.constrained_layout.use": True, "axes.grid": True,
               "axes.grid.which": "both", "grid.alpha": 0.3, "axes.titlesize": "medium",
               "figure.titlesize": "medium", "legend.fontsize": "small", "legend.frameon": False}
LINESTYLES = ("-", "--", "-.", ":")
SHADES = (0.0, 0.45, -0.4, 0.7, -0.65)  # toward white (+) or black (−), for a mode's 5th, 9th, ... variant
# A colour per mode, by its place in NORM_MODES, the same in every figure: tab10's ten (the first six
# modes' colours since the first figures), then tab20b's darkest, told apart from the shades of the first
# ten, then tab20b's second and third rows and tab20c's darkest. The presets take the last ones, in
# PRESETS' order (peri dark purple, dyt dark olive: the two of tab20b's darkest furthest from the modes'
# colours, in CIELAB), so that a mode added later takes a free one and moves none.
MODE_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
               "#bcbd22", "#17becf", "#393b79", "#8c6d31", "#843c39",
               "#5254a3", "#8ca252", "#bd9e39", "#ad494a", "#a55194",
               "#6b6ecf", "#b5cf6b", "#e7ba52", "#d6616b", "#ce6dbd",
               "#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363", "#7b4173", "#637939")
# The settings of a switch, by their prefix, and the setting and value that turn it on: sweeping one varies
# the entries the switch is on in; its preset bears the value's name (dyt, derf, layerscale)
SWITCH_OF_PREFIX = {"dyt_": ("norm_type", "dyt"), "derf_": ("norm_type", "derf"),
                    "layerscale_": ("res_scale", "layerscale")}
# The settings that belong to one mode or switch, by their prefix: sweeping one varies only that mode
# (ablate.py), and a legend names it without the prefix (geonorm alpha=3.0)
MODE_OF_PREFIX = {"geo_": "geonorm", "sandwich_": "sandwich", "simplenorm_": "simplenorm", "lns_": "lns",
                  "mixln_": "mixln", "hybrid_": "hybrid", "normformer_": "normformer", "subln_": "subln",
                  **{prefix: value for prefix, (_, value) in SWITCH_OF_PREFIX.items()}}
SIZES = ("n_layer", "n_embd")  # the settings a size sweep varies: its figures plot final loss against them
PREFIX_OF_MODE = {mode: prefix for prefix, mode in MODE_OF_PREFIX.items()}


def entry_of(mode, given, entry):
    """An entry's own train.py settings over the config's: its preset's or norm_mode, then entry_settings."""
    return given | configurator.entry_settings(mode) | entry.get(mode, {})


def varies(key, settings):
    """Whether sweeping key varies the entry whose settings are settings (entry_of): dyt_* keys an entry under
    norm_type='dyt' (SWITCH_OF_PREFIX); geo_* keys geonorm only, sandwich_* sandwich and peri, and so on;
    other keys every entry."""
    for prefix, (name, value) in SWITCH_OF_PREFIX.items():
        if key.startswith(prefix):
            return settings.get(name) == value
    mode = settings["norm_mode"]
    return next((m for prefix, m in MODE_OF_PREFIX.items() if key.startswith(prefix)), mode) == mode


def mean_std(values):
    """The mean and standard deviation over seeds; 0 for one seed."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def mode_color(mode):
    """A mode's or preset's colour in every figure of every ablation: MODE_COLORS at the mode's place in
    NORM_MODES, or a preset's place from the end."""
    return MODE_COLORS[list(PRESETS).index(mode) - len(PRESETS) if mode in PRESETS else NORM_MODES.index(mode)]


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


def label(g, plan, with_lr=True, without=()):
    """A legend entry: the mode or preset, its sweep point (geonorm alpha=3.0, not geo_alpha) but the keys
    without, and its learning rate unless it is the title's."""
    other_lr = with_lr and g["lr"] != plan["base"]["learning_rate"]
    lr = [f"lr {g['lr']:g}" + (" (3×)" if g["tripled"] else "")] if other_lr else []
    sweep = [f"{k.removeprefix(PREFIX_OF_MODE.get(g['mode'], ''))}={v}" for k, v in g["sweep"].items()
             if k not in without]
    return " ".join([g["mode"], *sweep, *lr])


def setting(groups, plan, with_lr=True):
    """What was trained, for titles: 'shakespeare_char, gpt2 blocks 4 × 128, lr 0.002, 2,000 steps, 3 seeds';
    a swept size as its range (blocks 2–16 × 128)."""
    sizes = {k: sorted({g["sweep"][k] for g in groups if k in g["sweep"]}) for k in SIZES}
    b = plan["base"] | {k: f"{vs[0]}–{vs[-1]}" if len(vs) > 1 else vs[0] for k, vs in sizes.items() if vs}
    counts = {g["finished"] + g["diverged"] for g in groups} - {0}  # seeds per group: 1–3 where they differ
    seeds = f"{min(counts)}–{max(counts)}" if len(counts) > 1 else str(max(counts, default=0))
    lr = f"lr {b['learning_rate']:g}, " * with_lr
    return (f"{b['dataset']}, {b.get('arch', 'gpt2')} blocks {b['n_layer']} × {b['n_embd']}, {lr}"
            f"{b['max_iters']:,} steps, {seeds} seed{'s' * (seeds != '1')}")


def read_meta(plan):
    """The dataset's meta.json, or None where it is not."""
    try:
        return json.loads((Path(plan["base"]["data_dir"]) / plan["base"]["dataset"] / "meta.json").read_text())
    except (OSError, ValueError):
        return None


def loss_unit(plan):
    """Cross-entropy in nats per character or per token, by the dataset's tokenizer when its meta.json is here."""
    return "nats per character" if (read_meta(plan) or {}).get("tokenizer") == "char" else "nats per token"


def non_embedding_params(settings, plan):
    """The parameters but the lookups (GPT.get_num_params) of a run's model, built on the meta device; None
    without the dataset's meta.json."""
    if not (meta := read_meta(plan)) or "vocab_size" not in meta:
        return None
    with torch.device("meta"):  # shapes only: no memory, no init's arithmetic
        return GPT(configurator.model_config(types.SimpleNamespace(**plan["base"] | settings), meta)).get_num_params()


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
    """Final val loss against learning rate, the papers' lr-sensitivity figure: a line per mode and sweep
    point through the means, each seed a point and error bars of ±1 sample std, each family a little apart
    sideways; an x at the top where a seed diverged."""
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
            seeds = [(g["lr"] * dodge, loss) for g in ok for loss in finished_seeds(g).values()]
            ax.scatter(*zip(*seeds), s=10, color=color, alpha=0.6, zorder=3)
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


def minutes(seconds):
    """A wall time for a table: 45 s, 12.5 min, or — when none was timed."""
    return "—" if seconds is None else f"{seconds:.0f} s" if seconds < 100 else f"{seconds / 60:.1f} min"


def gap_cell(gap, seeds):
    """A same-seed gap to pre for a table: +0.0123 ± 0.0040 (3), the number of seeds where it is not one or not
    the row's; or — (pre, or no pre to compare with)."""
    if gap is None:
        return "—"
    spread = f" ± {gap['std']:.4f}" if gap["seeds"] > 1 else ""
    return f"{gap['mean']:+.4f}{spread}" + (f" ({gap['seeds']})" if gap["seeds"] > 1 or gap["seeds"] != seeds else "")


def no_result(g):
    """What a group with no finished run shows in a table: the gravest of its runs' statuses."""
    statuses = {r["status"] for r in g["runs"]}
    return "diverged" if g["diverged"] else next((s for s in ("failed", "interrupted") if s in statuses), "not run")


def table(groups):
    """results.md's table: a row per group, its settings the entry's own and its sweep point, its time the wall
    time of one run (mean over seeds); a column per eval task, headed by the metric that sums it up."""
    metrics = {t: s["metric"] for g in groups for t, s in g["tasks"].items()}  # task -> metric, first seen first
    rows = ["| mode | settings | lr | seeds | final val loss | − pre, same seed | best val loss | diverged |"
            " tokens/s | time/run |" + "".join(f" {task} {metric} |" for task, metric in metrics.items()),
            "|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(metrics)]
    for g in groups:
        seeds, (mean, std) = g["finished"] + g["diverged"], g["final_val_loss"] or (None, None)
        final = (no_result(g) if mean is None
                 else f"{mean:.4f}" + (f" ± {std:.4f}" if g["finished"] > 1 else ""))
        best = "—" if g["best_val_loss"] is None else f"{g['best_val_loss']:.4f}"
        diverged = f"{g['diverged']}/{seeds}" if g["diverged"] else "no"
        speed = "—" if g["tokens_per_s"] is None else f"{g['tokens_per_s']:,.0f}"
        settings = " ".join(f"{k}={v}" for k, v in (g["own"] | g["sweep"]).items()) or "—"
        lr = f"{g['lr']:g}" + (" (3×)" if g["tripled"] else "")
        scores = "".join(f" {score_cell(g['tasks'].get(task))} |" for task in metrics)
        rows.append(f"| {g['mode']} | {settings} | {lr} | {seeds} | {final} | {gap_cell(g['gap'], seeds)} | {best} | "
                    f"{diverged} | {speed} | "
                    f"{minutes(g['seconds'])} |{scores}")
    return "\n".join(rows)


def size_key(plan):
    """The size a sweep varies (n_layer, n_embd), or None."""
    return next((k for k in plan["sweep"] if k in SIZES), None)


def by_size(groups, plan, key):
    """{family (a legend label without the size): {size: group}}, in the order planned."""
    families = {}
    for g in groups:
        families.setdefault(label(g, plan, without=(key,)), {})[g["sweep"].get(key, plan["base"][key])] = g
    return families


def size_table(groups, plan, key):
    """results.md's table of a size sweep: final val loss (mean ± std over seeds, their number) per mode and
    size, then the wall time per run and of all runs at each size."""
    sizes = sorted({g["sweep"][key] for g in groups if key in g["sweep"]})
    rows = ["| mode | " + " | ".join(f"{key} {v}" for v in sizes) + " |", "|---|" + "---|" * len(sizes)]
    for family, at in by_size(groups, plan, key).items():
        cells = []
        for v in sizes:
            if (g := at.get(v)) is None or g["final_val_loss"] is None:  # a size this family lacks, or no result
                cells.append("—" if g is None else no_result(g))
                continue
            mean, std = g["final_val_loss"]
            diverged = f"{g['diverged']} diverged" if g["diverged"] else ""
            count = ", ".join(filter(None, [f"{g['finished']}" * (g["finished"] > 1 or bool(diverged)), diverged]))
            cells.append(f"{mean:.4f}" + f" ± {std:.4f}" * (g["finished"] > 1) + f" ({count})" * bool(count))
        rows.append(f"| {family} | " + " | ".join(cells) + " |")
    runs = {v: [r for g in groups if g["sweep"].get(key) == v for r in g["runs"]
                if r["seconds"] and r["status"] == "finished"] for v in sizes}
    per_run = [minutes(statistics.fmean(r["seconds"] for r in runs[v]) if runs[v] else None) for v in sizes]
    total = [minutes(sum(r["seconds"] for r in runs[v]) if runs[v] else None) for v in sizes]
    rows += ["| time per run | " + " | ".join(per_run) + " |", "| time, all runs | " + " | ".join(total) + " |"]
    return "\n".join(rows)


def results_text(groups, plan, argv, pngs):
    """results.md: the command, the table (and a size sweep's), the ranking and the figures."""
    ranked = sorted((g for g in groups if g["final_val_loss"]), key=lambda g: g["final_val_loss"][0])
    order = " < ".join(f"{g['group']} {g['final_val_loss'][0]:.4f}" for g in ranked)
    tasks = (" Eval tasks (eval.py, lm-eval): acc_norm where the task has it, else acc, mean ± std over the"
             " seeds that finished." if plan["eval"]["tasks"] else "")
    key = size_key(plan)
    sized = (f"Final val loss by {key} (± std and the number of seeds where there are several), and the wall "
             f"time of a run and of all runs at each {key} (runs side by side share the machine):\n\n"
             f"{size_table(groups, plan, key)}\n\n") if key else ""
    raced = race(groups, plan)
    sized += (f"Each entry at its own best learning rate: the rate with the lowest mean final val loss over "
              f"the seeds every rate that trains has (trains: a seed finished, none diverged, and the mean "
              f"is 5% or more below {baseline_text(raced)}); the loss "
              f"there, mean ± sample std; the gap to pre at pre's best rate, paired by seed, mean with its "
              f"95% interval (Student's t) and the number of seeds:\n\n{race_table(raced)}\n\n") if raced else ""
    return (f"# Ablation\n\n`python ablate.py {' '.join(argv)}`\n\nFinal val loss: at the last step, mean ± sample "
            f"std over the seeds that finished; best: the lowest evaluation, mean over them; time/run: a run's wall "
            f"time, mean over them.{tasks}\n\n{table(groups)}\n\n{sized}Lowest final val loss first: "
            f"{order or 'none finished'}\n\n" + "".join(f"![{p}]({p})\n" for p in pngs))


def plot_size(groups, plan, key, params, path):
    """Final val loss against a swept size (params: against the non-embedding parameters instead), both axes'
    sizes on a log scale: a line per mode (and other sweep point), error bars ±1 std where there are seeds; an
    x at the top where a seed diverged."""
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
        for i, (v, g) in enumerate((v, g) for v, g in at.items() if g["diverged"] and (g["params"] or not params)):
            ax.plot(g["params"] if params else v, 0.97, "x", color=color, markersize=9, mew=2,
                    transform=ax.get_xaxis_transform(), label=None if ok or i else f"{family} (diverged)")
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
    """Every figure the runs allow, into folder; returns their file names: none when no run finished or
    diverged (an empty figure would only say so). A size sweep gets final loss against the size and the
    parameters, and at each size the validation loss, gradient norm and rotation angle per block."""
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
            for v in sorted({g["sweep"][key] for g in groups if key in g["sweep"]}):  # drawn as at one size
                at = [g | dict(sweep={k: x for k, x in g["sweep"].items() if k != key})
                      for g in groups if g["sweep"].get(key) == v]
                pngs += plot_one(at, plan | dict(base=plan["base"] | {key: v}), folder, f"_{key}{v}",
                                 ("val_loss", "grad_norm", "angle"))  # the papers' argument: per block, per depth
        every = ("val_loss", *(name for name, _, _ in LAYER_FIGURES))
        pngs += plot_one(groups, plan, folder, "", () if key else every,
                         lr=not key or len(plan["lrs"] or []) > 1)  # not simplenorm's 3x alone
    return pngs


def plot_one(groups, plan, folder, suffix, figures, lr=False):
    """The figures named (val_loss and LAYER_FIGURES' keys) of groups, and lr.png if lr, as name + suffix.png;
    returns the file names drawn (no per-block figure where no run logged layer stats)."""
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


# ------------------------------------------------------------------------------- the runs, summed up

def summarize(runs, plan):
    """The runs' logs and eval tasks' scores folded over seeds: one dict per group, in the order the groups
    were planned; in a size sweep with each group's non-embedding parameters."""
    groups, evaluation, sized = {}, plan["eval"], any(k in SIZES for k in plan["sweep"])
    for run in runs:
        params = non_embedding_params(run["settings"], plan) if sized and run["group"] not in groups else None
        g = groups.setdefault(run["group"], {k: run[k] for k in ("group", "mode", "lr", "tripled", "sweep", "own")}
                              | dict(runs=[], params=params))
        path = run["dir"] / "eval.json"
        scores = json.loads(path.read_text())["scores"] if evaluated(run["dir"], evaluation) else {}
        g["runs"].append(dict(name=run["name"], seed=run["seed"], scores=scores, **read_log(run["dir"])))
    for g in groups.values():
        done = [r for r in g["runs"] if r["status"] == "finished"]
        g["finished"] = len(done)
        g["diverged"] = sum(r["status"] == "diverged" for r in g["runs"])
        g["final_val_loss"] = mean_std([r["final_val_loss"] for r in done]) if done else None
        g["best_val_loss"] = statistics.fmean(r["best_val_loss"] for r in done) if done else None
        speeds, times = ([r[k] for r in done if r[k]] for k in ("tokens_per_s", "seconds"))
        g["tokens_per_s"] = statistics.fmean(speeds) if speeds else None
        g["seconds"] = statistics.fmean(times) if times else None  # a run's wall time, mean over seeds
        g["tasks"] = {}
        for task in filter(None, evaluation["tasks"].split(",")):
            scored = [r["scores"][task] for r in done if r["scores"].get(task, {}).get("value") is not None]
            if scored:
                mean, std = mean_std([s["value"] for s in scored])
                g["tasks"][task] = dict(metric=scored[0]["metric"], mean=mean, std=std, runs=len(scored))
    for g in groups.values():
        g["gap"] = gap_to_pre(g, groups.values(), plan)
    return list(groups.values())


# Student's t at 95%, two-sided, by degrees of freedom (the seeds less one); past 30, the normal's 1.96
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
       2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
       2.045, 2.042)


def interval95(values):
    """(mean, half-width of the 95% interval: Student's t over the values, their sample std); None for one."""
    mean, std = mean_std(values)
    n = len(values)
    return mean, (T95[n - 2] if n - 1 <= len(T95) else 1.96) * std / math.sqrt(n) if n > 1 else None


FREQUENCY_TOKENS = 10_000_000  # of each split, for the frequency baseline: its first shards


def frequency_loss(plan):
    """The val loss of predicting each token by its frequency in the training text, with no context: what a
    run that learned nothing else ends at (3.35 nats for tiny Shakespeare by characters). None without the
    dataset's shards."""
    meta = read_meta(plan)
    if meta is None or "shards" not in meta:
        return None
    folder = Path(plan["base"]["data_dir"]) / plan["base"]["dataset"]
    counts = {}
    for split in ("train", "val"):
        tokens = [read_shard(folder / s["file"]) for s in meta["shards"][split]]
        first = np.concatenate(tokens)[:FREQUENCY_TOKENS]
        counts[split] = np.bincount(first, minlength=meta["vocab_size"])
    seen = counts["train"] > 0  # a token never in training: the baseline would give it no mass
    train = counts["train"][seen] / counts["train"].sum()
    val = counts["val"][seen] / counts["val"][seen].sum()
    return float(-(val * np.log(train)).sum())


def trains(g, baseline):
    """Whether a group trains at its rate: a seed finished, none diverged, and (given the frequency
    baseline) its mean final val loss is at least 5% below it: a run on that plateau learned no context."""
    if not g["finished"] or g["diverged"]:
        return False
    return baseline is None or g["final_val_loss"][0] < 0.95 * baseline


def finished_seeds(g):
    return {r["seed"]: r["final_val_loss"] for r in g["runs"] if r["status"] == "finished"}


def race(groups, plan):
    """Each entry at its own best learning rate, where the ablation swept rates: per family of groups that
    differ only in their rate, the best (lowest mean final val loss among the rates that train), its runs,
    the largest rate that trains (trains), whether the best is inside the grid (not at its edge), the gap to
    pre at pre's own best rate, paired by seed (95% interval over the seeds both have). [] for one rate."""
    families = {}
    for g in groups:
        families.setdefault((g["mode"], tuple(sorted(g["sweep"].items()))), []).append(g)
    baseline = frequency_loss(plan) if any(len(f) > 1 for f in families.values()) else None
    rows = {}
    for (mode, point), members in families.items():
        rates = sorted(g["lr"] for g in members)
        training = [g for g in members if trains(g, baseline)]
        if len(rates) < 2:
            continue
        # chosen on the seeds every training rate has: seed 3 at the best rate alone must not move the choice
        common = set.intersection(*(set(finished_seeds(g)) for g in training)) if training else set()
        chosen_on = lambda g: statistics.fmean(v for k, v in finished_seeds(g).items() if k in common or not common)
        best = min(training, key=chosen_on, default=None)
        ended = any(g["finished"] or g["diverged"] for g in members)
        rows[mode, point] = dict(
            mode=mode, sweep=dict(point), rates=rates, best=best, ended=ended, frequency_loss=baseline,
            largest_training=max((g["lr"] for g in training), default=None),
            inside=best is not None and rates[0] < best["lr"] < rates[-1])
    for (mode, point), row in rows.items():
        pre = rows.get(("pre", point))
        row["gap"] = paired_gap(row["best"], pre and pre["best"]) if mode != "pre" else None
    return [race_record(row) for row in rows.values()]


def paired_gap(best, pre_best):
    """best's final val loss less pre_best's, seed by seed: mean, 95% half-width and the seeds (None: none)."""
    if best is None or pre_best is None:
        return None
    pre = finished_seeds(pre_best)
    gaps = [loss - pre[seed] for seed, loss in finished_seeds(best).items() if seed in pre]
    if not gaps:
        return None
    mean, half = interval95(gaps)
    return dict(mean=mean, ci95=half, seeds=len(gaps), pre_lr=pre_best["lr"])


def race_record(row):
    """A race row as results.json keeps it: numbers and the best rate's runs, no group object."""
    best = row.pop("best")
    row["best_lr"] = best and best["lr"]
    row["final_val_loss"] = best and best["final_val_loss"]  # mean and sample std over its seeds
    row["per_seed"] = best and finished_seeds(best)
    return row


def baseline_text(rows):
    """The frequency baseline as the race's caption names it."""
    loss = rows[0]["frequency_loss"]
    where = f", {loss:.4f} here" if loss is not None else ", not computed: the dataset is not in data_dir"
    return f"the val loss of predicting each token by its training frequency{where}"


def race_table(rows):
    """results.md's race table: a row per entry at its own best rate."""
    lines = ["| entry | best lr | final val loss there | per seed | largest lr that trains | best inside "
             "the grid | − pre at each one's best lr (95% interval, seeds) |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        name = row["mode"] + "".join(f" {k}={v}" for k, v in row["sweep"].items())
        if row["best_lr"] is None:
            lines.append(f"| {name} | — | {'no rate trains' if row['ended'] else 'none finished'} | — | — | — | — |")
            continue
        mean, std = row["final_val_loss"]
        seeds = len(row["per_seed"])
        final = f"{mean:.4f}" + (f" ± {std:.4f} (sample std, {seeds} seeds)" if seeds > 1 else " (1 seed)")
        per_seed = ", ".join(f"{loss:.4f}" for _, loss in sorted(row["per_seed"].items()))
        lines.append(f"| {name} | {row['best_lr']:g} | {final} | {per_seed} | {row['largest_training']:g} | "
                     f"{'yes' if row['inside'] else 'no: at the edge'} | {race_gap_cell(row['gap'])} |")
    return "\n".join(lines)


def race_gap_cell(gap):
    """+0.0123 [−0.0040, +0.0286] (3) at pre's lr 0.002; the interval only over several seeds; — for none."""
    if gap is None:
        return "—"
    interval = (f" [{gap['mean'] - gap['ci95']:+.4f}, {gap['mean'] + gap['ci95']:+.4f}]"
                if gap["ci95"] is not None else "")
    return f"{gap['mean']:+.4f}{interval} ({gap['seeds']}), pre at {gap['pre_lr']:g}"


def gap_to_pre(g, groups, plan):
    """g's final val loss less pre's of the same seed, at the same sweep point and learning rate (pre's own for
    a tripled simplenorm): mean and std over the seeds both finished, and their number; None for pre itself or
    where no such pre finished. Seeds move every mode alike, so the same-seed gap is the sharper comparison."""
    lr = plan["base"]["learning_rate"] if g["tripled"] else g["lr"]
    point = {k: v for k, v in g["sweep"].items() if varies(k, entry_of("pre", plan["given"], plan["entry"]))}
    ref = next((p for p in groups if p["mode"] == "pre" and p["sweep"] == point and f"{p['lr']:g}" == f"{lr:g}"),
               None)
    if g["mode"] == "pre" or ref is None:
        return None
    pre = {r["seed"]: r["final_val_loss"] for r in ref["runs"] if r["status"] == "finished"}
    gaps = [r["final_val_loss"] - pre[r["seed"]] for r in g["runs"] if r["status"] == "finished" and r["seed"] in pre]
    return dict(zip(("mean", "std"), mean_std(gaps)), seeds=len(gaps)) if gaps else None
