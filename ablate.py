"""
Ablate the norm modes: train.py once per (mode, learning rate, seed, sweep point), then tables and plots.

    python ablate.py configs/ablate_shakespeare_char.py                # six modes, one seed, ~12 min on 2 cores
    python ablate.py configs/ablate_shakespeare_char.py --seeds=1,2,3  # the same runs are skipped, two more seeds
    python ablate.py configs/ablate_geonorm.py                         # pre vs geonorm's step size, decay and clamp
    python ablate.py CONFIG.py --modes=pre,geonorm --lrs=1e-3,3e-3 --sweep=geo_alpha=1,3,10 --max_iters=500
    python ablate.py configs/ablate_shakespeare_char.py --seeds=1,2,3 --figures=docs/shakespeare_char  # no training

A config file is a train.py config plus optional `ablate_<name> = ...` lines for ablate.py's own settings,
which the command line sets as --<name>=...:

    modes  all | pre,geonorm,...   the norm modes (default all)
    seeds  1,2,3                   a run per seed, folded into mean ± std (default: the config's seed)
    lrs    3e-4,1e-3               a run per learning rate (default: learning_rate, and 3x it for simplenorm,
                                   whose paper trains at 3x the baseline's rate: NORM_MODES §7.2)
    sweep  key=v1,v2               a grid over train.py settings; each --sweep sets one key (config: a dict
                                   {key: [values]}). geo_*, sandwich_* and simplenorm_* keys vary only their
                                   own mode (pre runs once beside a geo_alpha sweep); other keys vary every mode
    nproc  N                       processes per run: N > 1 launches train.py through torchrun (default 1)
    jobs   J                       runs at once, the CPU's threads split among them (default 1)
    eval_tasks  hellaswag,piqa     after training, score each finished run with eval.py on these lm-eval
                                   tasks, tabled as mean ± std over seeds (default: none)
    eval_limit  N                  eval.py's --limit: only each task's first N examples (default: all)
    eval_include_path  DIR         eval.py's --include_path: task YAMLs of your own (default: none)
    figures DIR                    train nothing: draw the figures of the runs that finished into DIR
                                   (the same command and settings as the ablation, so it finds its runs)

A value repeated in modes, seeds, lrs or a sweep (--seeds=1,1, --lrs=1e-3,0.001) is run once.

Every other setting, from a config file or --key=value, is passed to each run of train.py as --key=value;
the ablate_* lines are not, so train.py still rejects unknown settings. Per run ablate.py sets norm_mode,
learning_rate, seed, out_dir, min_lr (at the config's ratio to learning_rate) and log_layer_stats=True
(unless told otherwise), and trains in out_dir/ablate/<mode>_lr<lr>_s<seed>[_<key><value>...]. A run whose
log.jsonl ends finished or diverged is skipped and one with a checkpoint resumes: run the same command again
to finish a stopped ablation; delete a run's folder to train it again. A run whose eval.json holds the same
eval_tasks and eval_limit is not evaluated again. A diverged run (non-finite loss) is a result, tabled and
plotted as diverged. out_dir/ablate gets results.md, results.json and the plots.
"""
import ast
import io
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import matplotlib
matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
import PIL.Image

import checkpoint
import configurator
from model import NORM_MODES

OWN = {"ablate_modes": ("all", (str, list)), "ablate_seeds": (None, (list, type(None))),
       "ablate_lrs": (None, (list, type(None))), "ablate_sweep": ({}, (dict,)), "ablate_nproc": (1, (int,)),
       "ablate_jobs": (1, (int,)), "ablate_eval_tasks": ("", (str,)), "ablate_eval_limit": (None, (int, type(None))),
       "ablate_eval_include_path": ("", (str,)), "ablate_figures": ("", (str,))}
LEAST = dict.fromkeys(("ablate_jobs", "ablate_nproc", "ablate_eval_limit"), 1)  # of ablate.py's own settings
PER_RUN = ("norm_mode", "learning_rate", "min_lr", "seed", "out_dir", "init_from")  # set by ablate.py, not swept
MODE_OF_PREFIX = {"geo_": "geonorm", "sandwich_": "sandwich", "simplenorm_": "simplenorm"}
PREFIX_OF_MODE = {mode: prefix for prefix, mode in MODE_OF_PREFIX.items()}
TRAIN, EVAL = str(Path(__file__).with_name("train.py")), str(Path(__file__).with_name("eval.py"))


# ------------------------------------------------------------------------------------ settings

def own_arg(name, text, settings):
    """--modes=pre,geonorm and friends as ablate.py's value: lists, a {key: values} sweep, an int or the text."""
    if OWN[name][1] == (str,):
        return text
    if name == "ablate_sweep":
        key, _, values = text.partition("=")
        return {key: [configurator.parse_arg(f"--{key}={v}", settings)[key] for v in values.split(",")]}
    if name == "ablate_modes":
        return text if text == "all" else text.split(",")
    try:
        values = [ast.literal_eval(v) for v in text.split(",")]
    except (ValueError, SyntaxError):
        sys.exit(f"error: --{name[7:]}={text}: give numbers, separated by commas")
    return values if name in ("ablate_seeds", "ablate_lrs") else values[0]


def configure(argv):
    """ablate.py's settings, and the train.py settings given by config files and --key=value."""
    if "--help" in argv or "-h" in argv:
        configurator.print_help(__doc__.strip())
    settings, own, given = configurator.read_settings(TRAIN), {k: default for k, (default, _) in OWN.items()}, {}
    for arg in argv:
        name, _, text = arg[2:].partition("=")
        if arg.startswith("--") and "ablate_" + name in OWN:
            pairs = {"ablate_" + name: own_arg("ablate_" + name, text, settings)}
        else:
            pairs = configurator.parse_arg(arg, settings) if arg.startswith("--") else configurator.read_config_file(arg)
        for key, value in pairs.items():
            if key.startswith("ablate_"):
                value = configurator.checked(key, value, OWN, arg, LEAST)
                own[key] = own["ablate_sweep"] | value if key == "ablate_sweep" else value
            else:
                given[key] = configurator.checked(key, value, settings, arg)
    if swept := set(own["ablate_sweep"]) & set(PER_RUN):
        sys.exit(f"error: ablate.py sets {', '.join(swept)} per run: use --modes, --lrs or --seeds, not --sweep")
    unique = lambda values: list(dict.fromkeys(values))  # in order, each once: a repeated value would run twice
    sweep = {k: unique(configurator.checked(k, v, settings, "the sweep") for v in vs)
             for k, vs in own["ablate_sweep"].items()}
    modes = unique(NORM_MODES if own["ablate_modes"] == "all" else own["ablate_modes"])
    if bad := [m for m in modes if m not in NORM_MODES]:
        sys.exit(f"error: unknown mode {bad[0]!r} in modes: choose from all, {', '.join(NORM_MODES)}")
    base = {name: default for name, (default, _) in settings.items()} | given
    seeds = unique(configurator.checked("seed", s, settings, "seeds") for s in own["ablate_seeds"] or [base["seed"]])
    lrs = own["ablate_lrs"] and unique(configurator.checked("learning_rate", lr, settings, "lrs")
                                       for lr in own["ablate_lrs"])
    evaluation = {k[12:]: own[k] for k in ("ablate_eval_tasks", "ablate_eval_limit", "ablate_eval_include_path")}
    return dict(modes=modes, seeds=seeds, lrs=lrs, eval=evaluation, figures=own["ablate_figures"],
                sweep=sweep, nproc=own["ablate_nproc"], jobs=own["ablate_jobs"],
                given={"log_layer_stats": True} | given, base=base)


def varies(key, mode):
    """Whether sweeping key varies mode: geo_* keys only vary geonorm, and so on; other keys vary every mode."""
    return next((m for prefix, m in MODE_OF_PREFIX.items() if key.startswith(prefix)), mode) == mode


def plan_runs(plan, root):
    """One run per seed, mode, learning rate and point of the mode's sweep grid, seed outermost (so the
    first seed's table fills first); a run is its name, its group (the name less the seed) and settings."""
    ratio = plan["base"]["min_lr"] / plan["base"]["learning_rate"]
    runs = []
    for seed, mode in itertools.product(plan["seeds"], plan["modes"]):
        keys = [k for k in plan["sweep"] if varies(k, mode)]
        tripled = plan["lrs"] is None and mode == "simplenorm"  # SimpleGPT trains at 3x the baseline's lr
        for lr in plan["lrs"] or [plan["base"]["learning_rate"] * (3 if tripled else 1)]:
            lr = float(f"{lr:.6g}")  # 3 * 6e-4 is 0.0018, not 0.0018000000000000002
            for point in itertools.product(*(plan["sweep"][k] for k in keys)):
                sweep, suffix = dict(zip(keys, point)), "".join(f"_{k}{v}" for k, v in zip(keys, point))
                name = f"{mode}_lr{lr:g}_s{seed}{suffix}"
                runs.append(dict(name=name, group=f"{mode}_lr{lr:g}{suffix}", mode=mode, lr=lr, tripled=tripled,
                                 seed=seed, sweep=sweep, dir=root / name, settings=plan["given"] | sweep | dict(
                                     norm_mode=mode, learning_rate=lr, min_lr=float(f"{lr * ratio:.6g}"),
                                     seed=seed, out_dir=str(root / name))))
    return runs


# ----------------------------------------------------------------------------------- the runs

def read_log(folder):
    """A run's status, eval curve, layer stats and results, from its log.jsonl. Status: finished, diverged
    (a non-finite loss, in training or at the last evaluation), interrupted, or failed (no end line: crashed).
    Results come from the events, not the end line: after a resume that line covers only the resumed part."""
    events = checkpoint.read_events(folder / "log.jsonl")
    end = events[-1] if events and events[-1]["event"] == "end" else None
    evals = [(e["iter"], e["val_loss"]) for e in events if e["event"] == "eval"]
    speeds = [e["tokens_per_s"] for e in events if e["event"] == "train" and e["tokens_per_s"]]  # None: untimed
    status = end["status"] if end else "failed"
    if status == "finished" and evals and not math.isfinite(evals[-1][1]):
        status = "diverged"  # a finite training loss, but not the evaluation's
    return dict(status=status, iter=end and end["iter"], evals=evals,
                stats=[e for e in events if e["event"] == "layer_stats"],
                final_val_loss=evals[-1][1] if evals else None, best_val_loss=min((l for _, l in evals), default=None),
                tokens_per_s=statistics.fmean(speeds) if speeds else None)


def check_not_stale(runs):
    """Stop before training if a run folder was made with other settings: its results would mislead.
    out_dir may differ: an ablation folder moved elsewhere holds the same runs."""
    for run in runs:
        path = run["dir"] / "config.json"
        if path.exists():
            old = json.loads(path.read_text())["config"]
            for key, value in run["settings"].items():
                if key != "out_dir" and key in old and old[key] != value:
                    sys.exit(f"error: {run['dir']} was trained with {key}={old[key]!r}, not {value!r}: "
                             f"delete it, or pick another out_dir")


def evaluated(folder, evaluation):
    """Whether folder/eval.json scored the tasks with the limit asked for."""
    path = folder / "eval.json"
    done = json.loads(path.read_text())["settings"] if path.exists() else {}
    return all(done.get(k) == evaluation[k] for k in ("tasks", "limit"))


def execute(run, nproc, threads, evaluation):
    """Train one run unless it is done: fresh, or resumed from its checkpoint; then, when eval tasks are
    asked for, score it with eval.py unless that is done too. Returns (what, seconds)."""
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"] if nproc > 1 else []
    env = os.environ | {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(threads))}
    what, t0 = "skipped", time.time()
    if read_log(run["dir"])["status"] not in ("finished", "diverged"):
        resume = checkpoint.find_checkpoint(run["dir"]) is not None  # ckpt.pt, or a sharded ckpt/
        args = [f"--{k}={v}" for k, v in run["settings"].items()] + ["--init_from=resume"] * resume
        run["dir"].mkdir(parents=True, exist_ok=True)
        with open(run["dir"] / "train.log", "a") as out:  # train.py's own output, kept out of the progress lines
            subprocess.run([sys.executable, *launcher, TRAIN, *args], stdout=out, stderr=subprocess.STDOUT, env=env)
        what = "resumed" if resume else "ran"
    if evaluation["tasks"] and read_log(run["dir"])["status"] == "finished" and not evaluated(run["dir"], evaluation):
        args = [f"--out_dir={run['dir']}"] + [f"--{k}={v}" for k, v in evaluation.items() if v]
        with open(run["dir"] / "eval.log", "a") as out:
            subprocess.run([sys.executable, *launcher, EVAL, *args], stdout=out, stderr=subprocess.STDOUT, env=env)
        what += ", evaluated"
    return what, time.time() - t0


def progress_line(i, n, run, what, seconds):
    log = read_log(run["dir"])
    result = (f"val loss {log['final_val_loss']:.4f}" if log["status"] == "finished"
              else f"DIVERGED at step {log['iter']}" if log["status"] == "diverged"
              else f"{log['status'].upper()}: see {run['dir']}/train.log")
    timing = f", {seconds:.0f} s" if what != "skipped" else ""
    return f"[{i}/{n}] {run['name']}: {what}{timing}, {result}"


# -------------------------------------------------------------------------------------- results

def mean_std(values):
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarize(runs, evaluation):
    """The runs' logs and eval tasks' scores folded over seeds: one dict per group, in the order the groups
    were planned."""
    groups = {}
    for run in runs:
        g = groups.setdefault(run["group"], dict(group=run["group"], mode=run["mode"], lr=run["lr"], runs=[],
                                                 tripled=run["tripled"], sweep=run["sweep"]))
        path = run["dir"] / "eval.json"
        scores = json.loads(path.read_text())["scores"] if evaluated(run["dir"], evaluation) else {}
        g["runs"].append(dict(name=run["name"], seed=run["seed"], scores=scores, **read_log(run["dir"])))
    for g in groups.values():
        done = [r for r in g["runs"] if r["status"] == "finished"]
        g["finished"] = len(done)
        g["diverged"] = sum(r["status"] == "diverged" for r in g["runs"])
        g["final_val_loss"] = mean_std([r["final_val_loss"] for r in done]) if done else None
        g["best_val_loss"] = statistics.fmean(r["best_val_loss"] for r in done) if done else None
        speeds = [r["tokens_per_s"] for r in done if r["tokens_per_s"]]
        g["tokens_per_s"] = statistics.fmean(speeds) if speeds else None
        g["tasks"] = {}
        for task in filter(None, evaluation["tasks"].split(",")):
            scored = [r["scores"][task] for r in done if r["scores"].get(task, {}).get("value") is not None]
            if scored:
                mean, std = mean_std([s["value"] for s in scored])
                g["tasks"][task] = dict(metric=scored[0]["metric"], mean=mean, std=std, runs=len(scored))
    return list(groups.values())


def score_cell(score):
    """An eval task's mean ± std over the seeds (the mean alone for one seed), or — when none was scored."""
    return "—" if score is None else f"{score['mean']:.4f}" + (f" ± {score['std']:.4f}" if score["runs"] > 1 else "")


def table(groups):
    """results.md's table: a row per group; a column per eval task, headed by the metric that sums it up."""
    metrics = {t: s["metric"] for g in groups for t, s in g["tasks"].items()}  # task -> metric, first seen first
    rows = ["| mode | settings | lr | seeds | final val loss | best val loss | diverged | tokens/s |"
            + "".join(f" {task} {metric} |" for task, metric in metrics.items()),
            "|---|---|---|---|---|---|---|---|" + "---|" * len(metrics)]
    for g in groups:
        seeds, (mean, std) = g["finished"] + g["diverged"], g["final_val_loss"] or (None, None)
        final = ("diverged" if g["diverged"] else "failed") if mean is None else f"{mean:.4f}" + (f" ± {std:.4f}" if g["finished"] > 1 else "")
        best = "—" if g["best_val_loss"] is None else f"{g['best_val_loss']:.4f}"
        diverged = f"{g['diverged']}/{seeds}" if g["diverged"] else "no"
        speed = "—" if g["tokens_per_s"] is None else f"{g['tokens_per_s']:,.0f}"
        settings = " ".join(f"{k}={v}" for k, v in g["sweep"].items()) or "—"
        lr = f"{g['lr']:g}" + (" (3×)" if g["tripled"] else "")
        scores = "".join(f" {score_cell(g['tasks'].get(task))} |" for task in metrics)
        rows.append(f"| {g['mode']} | {settings} | {lr} | {seeds} | {final} | {best} | {diverged} | {speed} |{scores}")
    return "\n".join(rows)


def write_results(groups, plan, root, argv, pngs):
    ranked = sorted((g for g in groups if g["final_val_loss"]), key=lambda g: g["final_val_loss"][0])
    order = " < ".join(f"{g['group']} {g['final_val_loss'][0]:.4f}" for g in ranked)
    text = (f"# Ablation\n\n`python ablate.py {' '.join(argv)}`\n\nFinal val loss: at the last step, mean ± std "
            f"over the seeds that finished; best: the lowest evaluation, mean over them."
            + (" Eval tasks (eval.py, lm-eval): acc_norm where the task has it, else acc, mean ± std over the seeds"
               " that finished." if plan["eval"]["tasks"] else "") + f"\n\n{table(groups)}\n\n"
            f"Lowest final val loss first: {order or 'none finished'}\n\n" + "".join(f"![{p}]({p})\n" for p in pngs))
    write_atomic(root / "results.md", text.encode())
    plan = {k: v for k, v in plan.items() if k != "base"}
    write_atomic(root / "results.json", json.dumps(dict(plan=plan, groups=groups), indent=1, default=str).encode())
    return text


def write_atomic(path, data):
    """data (bytes) to a temporary name beside path, then renamed: a killed ablate.py leaves no half file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------- plots

WIDE, TALL = 6.4, 3.6  # inches, before the legend: at 100 dpi about 800 × 400 pixels and 20 KB, for the README
HOUSE_STYLE = {"savefig.dpi": 100, "figure.constrained_layout.use": True, "axes.grid": True, "axes.grid.which": "both",
               "grid.alpha": 0.3, "axes.titlesize": "medium", "figure.titlesize": "medium", "legend.fontsize": "small",
               "legend.frameon": False}
LINESTYLES = ("-", "--", "-.", ":")
SHADES = (0.0, 0.45, -0.4, 0.7, -0.65)  # toward white (+) or black (−), for a mode's 5th, 9th, ... variant


def mode_color(mode):
    """A mode's colour in every figure of every ablation: tab10's colour at the mode's place in NORM_MODES."""
    return matplotlib.colormaps["tab10"](NORM_MODES.index(mode) % 10)


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
    """What was trained, for the titles: 'shakespeare_char, gpt2 blocks 4 × 128, lr 0.002, 2,000 steps, 3 seeds'."""
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
    write_atomic(path, small.getvalue())


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
            ax.plot(g["lr"] * dodge, 0.97, "x", color=color, markersize=9, mew=2, transform=ax.get_xaxis_transform(),
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


def plot_all(groups, plan, folder):
    """Every figure the runs allow, into folder; returns their file names."""
    pngs = ["val_loss.png", "lr.png"]
    with plt.rc_context(HOUSE_STYLE):
        plot_val_loss(groups, plan, folder / "val_loss.png")
        plot_lr(groups, plan, folder / "lr.png")
        if any(r["stats"] and r["status"] == "finished" for g in groups for r in g["runs"]):
            for key, ylabel, what in LAYER_FIGURES:
                plot_layers(groups, plan, key, ylabel, what, folder / f"{key}.png")
                pngs.append(f"{key}.png")
    return pngs


# ----------------------------------------------------------------------------------------- main

def draw_figures(runs, plan, root):
    """--figures=DIR: the figures of the runs that have finished, drawn into DIR without training."""
    groups = summarize(runs, plan["eval"])
    if not any(g["finished"] or g["diverged"] for g in groups):
        sys.exit(f"error: no run of this ablation has finished in {root}: "
                 f"give the config, settings and --out_dir it ran with")
    folder = Path(plan["figures"])
    folder.mkdir(parents=True, exist_ok=True)
    pngs = plot_all(groups, plan, folder)
    print(f"{table(groups)}\n\nwrote {', '.join(pngs)} in {folder}")
    if unfinished := [r["name"] for g in groups for r in g["runs"] if r["status"] not in ("finished", "diverged")]:
        print(f"note: {len(unfinished)} of {len(runs)} runs have not finished, and the figures leave them out: "
              f"{', '.join(unfinished)}", file=sys.stderr)


def main(argv):
    plan = configure(argv)
    root = Path(plan["base"]["out_dir"]) / "ablate"
    runs = plan_runs(plan, root)
    check_not_stale(runs)
    if plan["figures"]:
        return draw_figures(runs, plan, root)
    threads = max(1, (os.cpu_count() or 1) // (plan["jobs"] * plan["nproc"]))
    print(f"{len(runs)} runs in {root}, {plan['jobs']} at a time, {threads} threads each")
    with ThreadPoolExecutor(plan["jobs"]) as pool:
        futures = {pool.submit(execute, run, plan["nproc"], threads, plan["eval"]): run for run in runs}
        try:
            for i, future in enumerate(as_completed(futures), 1):
                print(progress_line(i, len(runs), futures[future], *future.result()), flush=True)
        except KeyboardInterrupt:  # the runs got the signal too: they save a checkpoint and stop
            pool.shutdown(cancel_futures=True)
            sys.exit("interrupted: run the same command again to go on")
    groups = summarize(runs, plan["eval"])
    print(write_results(groups, plan, root, argv, plot_all(groups, plan, root)))
    if failed := [r["name"] for g in groups for r in g["runs"] if r["status"] not in ("finished", "diverged")]:
        sys.exit(f"error: {len(failed)} runs did not finish: {', '.join(failed)} (see their train.log)")


if __name__ == "__main__":
    main(sys.argv[1:])
