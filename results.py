"""An ablation's results (ablate.py): its runs summed up over seeds, a group per entry, learning
rate and sweep point, with the same-seed gap to pre; each entry at its own best learning rate (the
race); and results.md's text and tables. plots.py draws the figures of the same groups."""
import json
import math
import statistics
import types
from pathlib import Path

import numpy as np
import torch

import configurator
from configurator import PREFIX_OF_MODE, entry_of, varies
from model import GPT
from logbook import evaluated, read_log
from data import read_shard

# the settings a size sweep varies: its figures plot final loss against them
SIZES = ("n_layer", "n_embd")


def mean_std(values):
    """The mean and standard deviation over seeds; 0 for one seed."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def label(g, plan, with_lr=True, without=()):
    """A legend entry: the mode or preset, its sweep point (geonorm alpha=3.0, not geo_alpha) but
    the keys without, and its learning rate unless it is the title's."""
    other_lr = with_lr and g["lr"] != plan["base"]["learning_rate"]
    lr = [f"lr {g['lr']:g}" + (" (3×)" if g["tripled"] else "")] if other_lr else []
    sweep = [f"{k.removeprefix(PREFIX_OF_MODE.get(g['mode'], ''))}={v}"
             for k, v in g["sweep"].items() if k not in without]
    return " ".join([g["mode"], *sweep, *lr])


def read_meta(plan):
    """The dataset's meta.json, or None where it is not."""
    try:
        return json.loads((Path(plan["base"]["data_dir"]) / plan["base"]["dataset"]
                           / "meta.json").read_text())
    except (OSError, ValueError):
        return None


def non_embedding_params(settings, plan, counted):
    """The parameters but the lookups (GPT.get_num_params) of a run's model, built on the meta
    device once per model (counted: {model's config: count} so far; groups that differ only in
    their rate are one model); None without the dataset's meta.json."""
    if not (meta := read_meta(plan)) or "vocab_size" not in meta:
        return None
    config = configurator.model_config(types.SimpleNamespace(**plan["base"] | settings), meta)
    # a build on the meta device takes no memory but still runs init, op by op: ~0.3 s at 16 blocks
    if (key := repr(config)) not in counted:
        with torch.device("meta"):
            counted[key] = GPT(config).get_num_params()
    return counted[key]


# --------------------------------------------------------------------------------------- results.md

def score_cell(score):
    """An eval task's mean ± std over the seeds (the mean alone for one seed), or — when none was
    scored."""
    if score is None:
        return "—"
    return f"{score['mean']:.4f}" + (f" ± {score['std']:.4f}" if score["runs"] > 1 else "")


def minutes(seconds):
    """A wall time for a table: 45 s, 12.5 min, or — when none was timed."""
    return ("—" if seconds is None else f"{seconds:.0f} s" if seconds < 100
            else f"{seconds / 60:.1f} min")


def gap_cell(gap, seeds):
    """A same-seed gap to pre for a table: +0.0123 ± 0.0040 (3), the number of seeds where it is
    not one or not the row's; or — (pre, or no pre to compare with)."""
    if gap is None:
        return "—"
    spread = f" ± {gap['std']:.4f}" if gap["seeds"] > 1 else ""
    return f"{gap['mean']:+.4f}{spread}" + (
        f" ({gap['seeds']})" if gap["seeds"] > 1 or gap["seeds"] != seeds else "")


def no_result(g):
    """What a group with no finished run shows in a table: the gravest of its runs' statuses."""
    statuses = {r["status"] for r in g["runs"]}
    return ("diverged" if g["diverged"]
            else next((s for s in ("failed", "interrupted") if s in statuses), "not run"))


def table(groups):
    """results.md's table: a row per group, its settings the entry's own and its sweep point, its
    time the wall time of one run (mean over seeds); a column per eval task, headed by the metric
    that sums it up."""
    # task -> metric, first seen first
    metrics = {t: s["metric"] for g in groups for t, s in g["tasks"].items()}
    rows = ["| mode | settings | lr | seeds | final val loss | − pre, same seed | best val loss |"
            " diverged | tokens/s | time/run |"
            + "".join(f" {task} {metric} |" for task, metric in metrics.items()),
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
        rows.append(f"| {g['mode']} | {settings} | {lr} | {seeds} | {final} | "
                    f"{gap_cell(g['gap'], seeds)} | {best} | "
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
        families.setdefault(label(g, plan, without=(key,)), {})[
            g["sweep"].get(key, plan["base"][key])] = g
    return families


def size_table(groups, plan, key):
    """results.md's table of a size sweep: final val loss (mean ± std over seeds, their number) per
    mode and size, then the wall time per run and of all runs at each size."""
    sizes = sorted({g["sweep"][key] for g in groups if key in g["sweep"]})
    rows = ["| mode | " + " | ".join(f"{key} {v}" for v in sizes) + " |",
            "|---|" + "---|" * len(sizes)]
    for family, at in by_size(groups, plan, key).items():
        cells = []
        for v in sizes:
            # a size this family lacks, or no result
            if (g := at.get(v)) is None or g["final_val_loss"] is None:
                cells.append("—" if g is None else no_result(g))
                continue
            mean, std = g["final_val_loss"]
            diverged = f"{g['diverged']} diverged" if g["diverged"] else ""
            count = ", ".join(filter(None, [
                f"{g['finished']}" * (g["finished"] > 1 or bool(diverged)), diverged]))
            cells.append(f"{mean:.4f}" + f" ± {std:.4f}" * (g["finished"] > 1)
                         + f" ({count})" * bool(count))
        rows.append(f"| {family} | " + " | ".join(cells) + " |")
    runs = {v: [r for g in groups if g["sweep"].get(key) == v for r in g["runs"]
                if r["seconds"] and r["status"] == "finished"] for v in sizes}
    per_run = [minutes(statistics.fmean(r["seconds"] for r in runs[v]) if runs[v] else None)
               for v in sizes]
    total = [minutes(sum(r["seconds"] for r in runs[v]) if runs[v] else None) for v in sizes]
    rows += ["| time per run | " + " | ".join(per_run) + " |",
             "| time, all runs | " + " | ".join(total) + " |"]
    return "\n".join(rows)


def results_text(groups, plan, argv, pngs):
    """results.md: the command, the table (and a size sweep's), the ranking and the figures."""
    ranked = sorted((g for g in groups if g["final_val_loss"]),
                    key=lambda g: g["final_val_loss"][0])
    order = " < ".join(f"{g['group']} {g['final_val_loss'][0]:.4f}" for g in ranked)
    tasks = (" Eval tasks (eval.py, lm-eval): acc_norm where the task has it, else acc, mean ± std"
             " over the seeds that finished." if plan["eval"]["tasks"] else "")
    key = size_key(plan)
    sized = (f"Final val loss by {key} (± std and the number of seeds where there are several), "
             f"and the wall time of a run and of all runs at each {key} (runs side by side share "
             f"the machine):\n\n{size_table(groups, plan, key)}\n\n") if key else ""
    raced = race(groups, plan)
    sized += (f"Each entry at its own best learning rate: the rate with the lowest mean final val "
              f"loss over the seeds every rate that trains has (trains: a seed finished, none "
              f"diverged, and the mean is 5% or more below {baseline_text(raced)}); the loss "
              f"there, mean ± sample std; the gap to pre at pre's best rate, paired by seed, mean "
              f"with its 95% interval (Student's t) and the number of seeds:\n\n"
              f"{race_table(raced)}\n\nEvery run's final val loss, by learning rate and seed "
              f"(s1: seed 1; in bold, the entry's best rate):\n\n"
              f"{runs_table(groups, raced)}\n\n") if raced else ""
    return (f"# Ablation\n\n`python ablate.py {' '.join(argv)}`\n\nFinal val loss: at the last "
            f"step, mean ± sample std over the seeds that finished; best: the lowest evaluation, "
            f"mean over them; time/run: a run's wall time, mean over them.{tasks}\n\n"
            f"{table(groups)}\n\n{sized}Lowest final val loss first: "
            f"{order or 'none finished'}\n\n" + "".join(f"![{p}]({p})\n" for p in pngs))


# ------------------------------------------------------------------------------ the runs, summed up

def summarize(runs, plan):
    """The runs' logs and eval tasks' scores folded over seeds: one dict per group, in the order the
    groups were planned; in a size sweep with each group's non-embedding parameters."""
    groups, evaluation, sized = {}, plan["eval"], any(k in SIZES for k in plan["sweep"])
    counted = {}
    for run in runs:
        params = (non_embedding_params(run["settings"], plan, counted)
                  if sized and run["group"] not in groups else None)
        g = groups.setdefault(
            run["group"], {k: run[k] for k in ("group", "mode", "lr", "tripled", "sweep", "own")}
            | dict(runs=[], params=params))
        path = run["dir"] / "eval.json"
        scores = (json.loads(path.read_text())["scores"] if evaluated(run["dir"], evaluation)
                  else {})
        g["runs"].append(dict(name=run["name"], seed=run["seed"], scores=scores,
                              **read_log(run["dir"])))
    for g in groups.values():
        done = [r for r in g["runs"] if r["status"] == "finished"]
        g["finished"] = len(done)
        g["diverged"] = sum(r["status"] == "diverged" for r in g["runs"])
        g["final_val_loss"] = mean_std([r["final_val_loss"] for r in done]) if done else None
        g["best_val_loss"] = statistics.fmean(r["best_val_loss"] for r in done) if done else None
        speeds, times = ([r[k] for r in done if r[k]] for k in ("tokens_per_s", "seconds"))
        g["tokens_per_s"] = statistics.fmean(speeds) if speeds else None
        # a run's wall time, mean over seeds
        g["seconds"] = statistics.fmean(times) if times else None
        g["tasks"] = {}
        for task in filter(None, evaluation["tasks"].split(",")):
            scored = [r["scores"][task] for r in done
                      if r["scores"].get(task, {}).get("value") is not None]
            if scored:
                mean, std = mean_std([s["value"] for s in scored])
                g["tasks"][task] = dict(metric=scored[0]["metric"], mean=mean, std=std,
                                        runs=len(scored))
    for g in groups.values():
        g["gap"] = gap_to_pre(g, groups.values(), plan)
    return list(groups.values())


# Student's t at 95%, two-sided, by degrees of freedom (the seeds less one); past 30, the
# normal's 1.96
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
       2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
       2.052, 2.048, 2.045, 2.042)


def interval95(values):
    """(mean, half-width of the 95% interval: Student's t over the values, their sample std); None
    for one."""
    mean, std = mean_std(values)
    n = len(values)
    return mean, (T95[n - 2] if n - 1 <= len(T95) else 1.96) * std / math.sqrt(n) if n > 1 else None


FREQUENCY_TOKENS = 10_000_000  # of each split, for the frequency baseline: its first shards


def frequency_loss(plan):
    """The val loss of predicting each token by its frequency in the training text, with no context:
    what a run that learned nothing else ends at (3.35 nats for tiny Shakespeare by characters).
    None without the dataset's shards."""
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
    baseline) its mean final val loss is at least 5% below it: a run on that plateau learned no
    context."""
    if not g["finished"] or g["diverged"]:
        return False
    return baseline is None or g["final_val_loss"][0] < 0.95 * baseline


def finished_seeds(g):
    return {r["seed"]: r["final_val_loss"] for r in g["runs"] if r["status"] == "finished"}


def rate_families(groups):
    """{(mode, sweep point as sorted pairs): its groups}: the groups that differ only in their
    learning rate, in the order planned."""
    families = {}
    for g in groups:
        families.setdefault((g["mode"], tuple(sorted(g["sweep"].items()))), []).append(g)
    return families


def entry_name(mode, sweep):
    """A race table's entry: the mode and its sweep point, as in 'post n_layer=16'."""
    return mode + "".join(f" {k}={v}" for k, v in sweep.items())


def race(groups, plan):
    """Each entry at its own best learning rate, where the ablation swept rates: per family of
    groups that differ only in their rate, the best (lowest mean final val loss among the rates that
    train), its runs, the largest rate that trains (trains), whether the best is inside the grid
    (not at its edge), the gap to pre at pre's own best rate, paired by seed (95% interval over the
    seeds both have). [] for one rate."""
    families = rate_families(groups)
    baseline = frequency_loss(plan) if any(len(f) > 1 for f in families.values()) else None
    rows = {}
    for (mode, point), members in families.items():
        if len(members) < 2:
            continue
        # the grid is the rates that ran: a rate planned for every entry but added for one (the
        # next point past an edge) must not put the others' best inside it
        rates = sorted(g["lr"] for g in members if g["finished"] or g["diverged"])
        training = [g for g in members if trains(g, baseline)]
        # chosen on the seeds every training rate has: seed 3 at the best rate alone must not move
        # the choice
        common = (set.intersection(*(set(finished_seeds(g)) for g in training)) if training
                  else set())
        chosen_on = lambda g: statistics.fmean(v for k, v in finished_seeds(g).items()
                                               if k in common or not common)
        best = min(training, key=chosen_on, default=None)
        rows[mode, point] = dict(
            mode=mode, sweep=dict(point), rates=rates, best=best, ended=bool(rates),
            frequency_loss=baseline,
            largest_training=max((g["lr"] for g in training), default=None),
            inside=best is not None and rates[0] < best["lr"] < rates[-1])
    for (mode, point), row in rows.items():
        pre = rows.get(("pre", point))
        row["gap"] = paired_gap(row["best"], pre and pre["best"]) if mode != "pre" else None
    return [race_record(row) for row in rows.values()]


def paired_gap(best, pre_best):
    """best's final val loss less pre_best's, seed by seed: mean, 95% half-width and the seeds
    (None: none)."""
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
    where = (f", {loss:.4f} here" if loss is not None
             else ", not computed: the dataset is not in data_dir")
    return f"the val loss of predicting each token by its training frequency{where}"


def race_table(rows):
    """results.md's race table: a row per entry at its own best rate, and a note under it where
    the frequency baseline could not be computed."""
    lines = ["| entry | best lr | final val loss there | per seed | largest lr that trains | best "
             "inside the grid | − pre at each one's best lr (95% interval, seeds) |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        name = entry_name(row["mode"], row["sweep"])
        if row["best_lr"] is None:
            lines.append(f"| {name} | — | {'no rate trains' if row['ended'] else 'none finished'}"
                         " | — | — | — | — |")
            continue
        mean, std = row["final_val_loss"]
        seeds = len(row["per_seed"])
        final = f"{mean:.4f}" + (f" ± {std:.4f} (sample std, {seeds} seeds)" if seeds > 1
                                 else " (1 seed)")
        per_seed = ", ".join(f"{loss:.4f}" for _, loss in sorted(row["per_seed"].items()))
        # one rate ran: an entry trained at a rate chosen elsewhere (another corpus's best)
        inside = ("yes" if row["inside"] else "no grid: one rate ran" if len(row["rates"]) == 1
                  else "no: at the edge")
        lines.append(f"| {name} | {row['best_lr']:g} | {final} | {per_seed} | "
                     f"{row['largest_training']:g} | {inside} | {race_gap_cell(row['gap'])} |")
    if rows and rows[0]["frequency_loss"] is None:
        lines += ["", "Largest lr that trains: without the dataset in data_dir, the frequency "
                      "baseline is not computed and every rate where a seed finished and none "
                      "diverged counts, even one whose runs learned no context: prepare the "
                      "dataset (prepare_data.py) and draw the tables again."]
    return "\n".join(lines)


def seeds_cell(g):
    """A rate's runs for the table of every run: each seed that ended, in seed order, as 's1 1.6692'
    or 's2 diverged'; — where none did."""
    ended = sorted((r for r in g["runs"] if r["status"] in ("finished", "diverged")),
                   key=lambda r: r["seed"])
    cells = [f"s{r['seed']} " + (f"{r['final_val_loss']:.4f}" if r["status"] == "finished"
                                 else "diverged") for r in ended]
    return ", ".join(cells) or "—"


def runs_table(groups, rows):
    """results.md's table of every run of a race: a row per entry, a column per learning rate, each
    cell its seeds' final val losses; the entry's best rate (rows: race's) in bold."""
    rates = sorted({g["lr"] for g in groups})
    best = {(row["mode"], tuple(row["sweep"].items())): row["best_lr"] for row in rows}
    lines = ["| entry | " + " | ".join(f"lr {lr:g}" for lr in rates) + " |",
             "|---|" + "---|" * len(rates)]
    for (mode, point), members in rate_families(groups).items():
        at = {g["lr"]: g for g in members}
        cells = []
        for lr in rates:
            cell = seeds_cell(at[lr]) if lr in at else "—"
            cells.append(f"**{cell}**" if lr == best.get((mode, point)) else cell)
        lines.append(f"| {entry_name(mode, dict(point))} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def race_gap_cell(gap):
    """+0.0123 [−0.0040, +0.0286] (3) at pre's lr 0.002; the interval only over several seeds; —
    for none."""
    if gap is None:
        return "—"
    interval = (f" [{gap['mean'] - gap['ci95']:+.4f}, {gap['mean'] + gap['ci95']:+.4f}]"
                if gap["ci95"] is not None else "")
    return f"{gap['mean']:+.4f}{interval} ({gap['seeds']}), pre at {gap['pre_lr']:g}"


def gap_to_pre(g, groups, plan):
    """g's final val loss less pre's of the same seed, at the same sweep point and learning rate
    (pre's own for a tripled simplenorm): mean and std over the seeds both finished, and their
    number; None for pre itself or where no such pre finished. Seeds move every mode alike, so the
    same-seed gap is the sharper comparison."""
    lr = plan["base"]["learning_rate"] if g["tripled"] else g["lr"]
    point = {k: v for k, v in g["sweep"].items()
             if varies(k, entry_of("pre", plan["given"], plan["entry"]))}
    ref = next((p for p in groups
                if p["mode"] == "pre" and p["sweep"] == point and f"{p['lr']:g}" == f"{lr:g}"),
               None)
    if g["mode"] == "pre" or ref is None:
        return None
    pre = {r["seed"]: r["final_val_loss"] for r in ref["runs"] if r["status"] == "finished"}
    gaps = [r["final_val_loss"] - pre[r["seed"]] for r in g["runs"]
            if r["status"] == "finished" and r["seed"] in pre]
    return dict(zip(("mean", "std"), mean_std(gaps)), seeds=len(gaps)) if gaps else None
