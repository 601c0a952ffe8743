"""
Ablate the norm modes: train.py once per (mode, learning rate, seed, sweep point), then tables and
plots.

    # the six modes, one seed, ~12 min on 2 cores
    python ablate.py configs/ablate_shakespeare_char.py
    # every mode and preset at 2 to 16 blocks
    python ablate.py configs/ablate_depth_char.py
    # two more seeds: the runs already done are skipped
    python ablate.py configs/ablate_shakespeare_char.py --seeds=1,2,3
    python ablate.py CONFIG.py --modes=pre,geonorm --lrs=1e-3,3e-3 --sweep=geo_alpha=1,3,10
    # the tables and figures of finished runs, no training
    python ablate.py configs/ablate_shakespeare_char.py --seeds=1,2,3 --figures=DIR

A config file is a train.py config plus optional `ablate_<name> = ...` lines for ablate.py's own
settings, which the command line sets as --<name>=..., and --sweep=key=v1,v2 once per key (--help
lists both kinds). A value repeated in modes, seeds, lrs or a sweep (--seeds=1,1) is run once, and
so are rates alike to the 6 digits that name a run's folder.
configurator.PRESETS (derf, peri, ...) are entries beside the modes; modes=all runs every one. A
sweep of a size (n_layer, n_embd) gets its own figures.

Every other setting, from a config file or --key=value, is passed to each run of train.py as
--key=value; the ablate_* lines are not, so train.py still rejects unknown settings. Per run
ablate.py sets norm_mode, learning_rate, seed, out_dir, min_lr (at the config's ratio to
learning_rate), log_layer_stats=True (unless told otherwise) and the entry's own settings (its
preset's, then entry_settings), and trains in out_dir/
ablate/<mode>_lr<lr>_s<seed>[_<key><value>...]. A run whose log.jsonl ends finished or diverged is
skipped and one with a checkpoint resumes: run the same command again to finish a stopped ablation
(Ctrl-C, or kill -INT or -TERM of ablate.py's process, stops the runs in progress, each with a
checkpoint); delete a run's folder to train it again. A run whose eval.json holds the same
eval_tasks and eval_limit is not evaluated again. A diverged run (non-finite loss) is a result,
tabled and plotted as diverged. out_dir/ablate gets results.md, results.json and the plots.

Before any run starts, eval.py loads the eval tasks and train.py checks each run's settings (both
--dry_run; train.py's checks run in ablate.py's own process, a fraction of a second each): a mistake
is one line, with nothing trained; --dry_run stops there. A run that fails or is not evaluated makes
the exit status 1.
"""
import signal

# a Ctrl-C while torch loads ends the script without a traceback; data.run_cli reports later ones
if __name__ == "__main__" and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.SIG_DFL)

import contextlib
import io
import itertools
import json
import os
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import checkpoint
import configurator
from logbook import claim, evaluated, read_log
from configurator import entry_of, varies
from plots import plot_all
from results import (race, race_table, results_text, runs_table, size_key, size_table, summarize,
                     table)
from data import atomic_write, check_out_dir, first_line, print_help, run_cli

# settings: the assignments between the two rulers, read by configurator.py (python ablate.py
# --help); the command line sets ablate_<name> as --<name>=...
# --------------------------------------------------------------------------------------------------
# the norm modes and presets: all, or some by commas (pre,geonorm,peri)
ablate_modes: str | list = "all"
# a run per seed (1,2,3), tabled as mean ± std; None: seed
ablate_seeds: list | tuple | int | None = None
# {sweep key: values}: the seeds after the first only at those points ({"n_layer": 16})
ablate_seeds_at = {}
# a run per learning rate (3e-4,1e-3); None: learning_rate, and 3x it for simplenorm, whose paper
# trains at 3x the baseline's rate (docs/spec.md §7.2)
ablate_lrs: list | tuple | float | None = None
# a grid over train.py settings, {key: [values]}; each --sweep=key=v1,v2 sets one key. A mode's own
# keys (configurator.MODE_OF_PREFIX: geo_*, sandwich_*, lns_*, ...) vary only it and its presets
# (pre runs once beside a geo_alpha sweep); a switch's (dyt_*, derf_*, layerscale_*) the entries it
# is on in; others every entry
ablate_sweep = {}
# {mode or preset: {train.py setting: value}}, an entry's own, over the config's (not the sweep's)
ablate_entry_settings = {}  # {"post": {"tie_embeddings": False}}
ablate_nproc = 1  # processes per run: more than 1 launches train.py through torchrun
ablate_jobs = 1  # runs at once, the CPU's threads split among them
# after training, score each finished run with eval.py on these lm-eval tasks (hellaswag,piqa),
# tabled as mean ± std over seeds; "": none
ablate_eval_tasks = ""
# eval.py's --limit: only each task's first N examples; None: all
ablate_eval_limit: int | None = None
# eval.py's --include_path: a folder of task YAMLs of your own; "": none
ablate_eval_include_path = ""
# train nothing: draw the figures of the runs that finished into this folder (given the same command
# and settings as the ablation, so that it finds its runs)
ablate_figures = ""
# --------------------------------------------------------------------------------------------------

# of ablate.py's own settings
LEAST = dict.fromkeys(("ablate_jobs", "ablate_nproc", "ablate_eval_limit"), 1)
# set by ablate.py, not swept: each with the way to set it
PER_RUN = dict(norm_mode="--modes", learning_rate="--lrs",
               min_lr="follows learning_rate at the config's ratio", seed="--seeds",
               out_dir="--out_dir, each run a folder in out_dir/ablate",
               init_from="a run with a checkpoint is resumed",
               dry_run=("--dry_run checks every run and trains none, as ablate.py checks each "
                        "before it trains"))
TRAIN, EVAL = str(Path(__file__).with_name("train.py")), str(Path(__file__).with_name("eval.py"))


# ------------------------------------------------------------------------------------ settings

def listed(value):
    """A list of seeds or learning rates as given: 1,2 (a tuple), [1, 2], a single 1, or None
    (none)."""
    return [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]


def check_names(argv):
    """--help, and a --name=value that is no setting as one line whose did-you-mean looks at
    ablate.py's own settings first (--mode: --modes, not norm_mode)."""
    if "--help" in argv or "-h" in argv:
        per_run = f"train.py's, passed on to every run (but {', '.join(PER_RUN)}, set per run)"
        print_help(f"{__doc__.strip()}\n\nablate.py's settings:\n"
                   f"{configurator.settings_block(__file__)}\n{per_run}:\n"
                   + configurator.settings_help(TRAIN))
    own, train = configurator.read_settings(__file__), configurator.read_settings(TRAIN)
    for arg in (arg for arg in argv if arg.startswith("--")):
        name = arg[2:].partition("=")[0]
        if name not in own and name not in train and "ablate_" + name not in own:
            short = {s: f"--{s}" for s in (n.removeprefix("ablate_") for n in own)}
            hint = configurator.did_you_mean(name, short, {n: repr(n) for n in train},
                                             otherwise="python ablate.py --help lists them all")
            sys.exit(f"error: unknown setting {name!r} in {arg}: {hint}")


def configure(argv):
    """The plan: ablate.py's settings, and the train.py settings given by config files and
    --key=value."""
    sweeps = [arg for arg in argv if arg.startswith("--sweep=")]  # each sets one key of the sweep
    argv = [arg for arg in argv if arg not in sweeps]
    check_names(argv)
    own, given = configurator.parse_settings(argv, __file__, LEAST, TRAIN, "ablate_")
    settings = configurator.read_settings(TRAIN)
    # a key --sweep gives replaces the config's values for it; given twice, it is a slip
    sweep_keys = set()
    for arg in sweeps:
        key, _, values = arg.removeprefix("--sweep=").partition("=")
        if key in sweep_keys:
            sys.exit(f"error: {arg} sweeps {key} again: give its values once, by commas "
                     f"(--sweep={key}=A,B)")
        sweep_keys.add(key)
        own["ablate_sweep"] = own["ablate_sweep"] | {
            key: [configurator.parse_arg(f"--{key}={v}", settings)[key] for v in values.split(",")]}
    if swept := sorted(set(own["ablate_sweep"]) & set(PER_RUN)):
        sys.exit(f"error: ablate.py sets {', '.join(swept)} per run, not --sweep "
                 f"({ways_per_run(swept)})")
    # in order, each once: a repeated value would run twice
    unique = lambda values: list(dict.fromkeys(values))
    sweep = {k: unique(configurator.checked(k, v, settings, "the sweep") for v in vs)
             for k, vs in own["ablate_sweep"].items()}
    for key, values in sweep.items():
        # a run's folder is named by its sweep point: a / would put it elsewhere
        if slashed := [v for v in values if "/" in str(v)]:
            sys.exit(f"error: --sweep={key}={slashed[0]}: each value names a folder of its runs, "
                     "and '/' would make it a path: choose values without '/'")
    base = {k: v for k, v in own.items() if not k.startswith("ablate_")}
    # each run's min_lr is its rate times min_lr / learning_rate: a ratio only above 0
    if (rate := base["learning_rate"]) <= 0:
        sys.exit(f"error: learning_rate={rate:g} leaves each run's min_lr no ratio to follow "
                 f"(min_lr / learning_rate): set it above 0; --lrs sets the runs' rates")
    for name in ("seeds", "lrs"):
        if own[f"ablate_{name}"] is not None and not listed(own[f"ablate_{name}"]):
            sys.exit(f"error: {name} is an empty list: give one or more, or leave it out "
                     "(the config's one)")
    seeds = unique(configurator.checked("seed", s, settings, "seeds")
                   for s in listed(own["ablate_seeds"]) or [base["seed"]])
    # as the runs' folders name them (6 digits): rates that round alike are one run
    lrs = None if own["ablate_lrs"] is None else unique(
        rounded(configurator.checked("learning_rate", lr, settings, "lrs"))
        for lr in listed(own["ablate_lrs"]))
    if still := [lr for lr in lrs or [] if lr <= 0]:
        sys.exit(f"error: lrs gives {still[0]:g}: a run at a rate not above 0 does not train "
                 f"(or climbs the loss): give rates above 0")
    evaluation = {k.removeprefix("ablate_eval_"): own[k]
                  for k in ("ablate_eval_tasks", "ablate_eval_limit", "ablate_eval_include_path")}
    given = {"log_layer_stats": True} | {k: v for k, v in given.items()
                                         if not k.startswith("ablate_")}
    dry_run = given.pop("dry_run", False)  # ablate.py's own: check every run, train none
    modes = configurator.parse_modes(own["ablate_modes"])
    entry = check_entries(own["ablate_entry_settings"], settings)
    check_idle(modes, given, entry, settings)
    configurator.check_alike(modes, lambda mode: entry_of(mode, given, entry))
    check_sweep(sweep, modes, given, entry)
    return dict(dry_run=dry_run, modes=modes, seeds=seeds, lrs=lrs, entry=entry, eval=evaluation,
                figures=own["ablate_figures"],
                seeds_at=check_seeds_at(own["ablate_seeds_at"], sweep, settings),
                sweep=sweep, nproc=own["ablate_nproc"], jobs=own["ablate_jobs"], given=given,
                base=base)


def rounded(lr):
    """A learning rate to 6 digits, as a run's name gives it: 3 * 6e-4 is 0.0018, not
    0.0018000000000000002."""
    return float(f"{lr:.6g}")


def ways_per_run(names):
    """How each of these settings that ablate.py sets per run is set, for an error line."""
    return "; ".join(f"{name}: {PER_RUN[name]}" for name in names)


def check_entries(entries, settings):
    """ablate_entry_settings, each entry known and its settings train.py's, typed; else one line
    naming the fix."""
    checked = {}
    for name, values in entries.items():
        configurator.parse_modes([name])  # an unknown mode or preset is a one-line error
        if not isinstance(values, dict):
            sys.exit(f"error: entry_settings of {name} must be a dict of train.py settings, "
                     f"got {values!r}")
        if per_run := sorted(set(values) & set(PER_RUN) - {"min_lr"}):
            sys.exit(f"error: entry_settings of {name} sets {', '.join(per_run)}, "
                     f"which ablate.py sets per run ({ways_per_run(per_run)})")
        checked[name] = {k: configurator.checked(k, v, settings, f"entry_settings of {name}")
                         for k, v in values.items()}
        preset = configurator.PRESETS.get(name, {})
        if undone := [k for k, v in checked[name].items() if k in preset and v != preset[k]]:
            key = undone[0]
            sys.exit(f"error: entry_settings of {name} sets {key}={checked[name][key]!r}, which "
                     f"would undo the preset {name} ({key}={preset[key]!r}): leave it out, or "
                     f"give it to the mode {preset['norm_mode']} instead")
    return checked


def check_idle(modes, given, entry, defaults):
    """A setting of one mode or switch (geo_alpha, dyt_*) acts on some entry: given to all, it goes
    to the entries it acts on (plan_runs); given to one in entry_settings, that entry. Else one
    line: the runs would be other runs than the config says."""
    for name, values in entry.items():
        settings = entry_of(name, given, entry)
        if idle := [key for key in configurator.idle_settings(settings, defaults) if key in values]:
            owner, _ = configurator.owner_of(idle[0])
            now = settings.get(owner, defaults[owner][0])
            where = f"in entry_settings of {name}, under {owner}={now!r}"
            sys.exit(configurator.idle_line(idle[0], values[idle[0]], where))
    configurator.check_acts(given, defaults, modes, lambda mode: entry_of(mode, given, entry))


def check_sweep(sweep, modes, given, entry):
    """Each sweep key varies some entry, and none overrides what makes a preset (norm_type under
    dyt)."""
    for key in sweep:
        if not any(varies(key, entry_of(mode, given, entry)) for mode in modes):
            sys.exit(f"error: --sweep={key}=... varies none of the modes {', '.join(modes)}: "
                     f"add the mode it belongs to (--modes)")
        if presets := [m for m in modes if key in configurator.PRESETS.get(m, {})]:
            sys.exit(f"error: --sweep={key}=... would undo the preset {', '.join(presets)}, "
                     f"which sets {key}: leave it out of --modes, or sweep its mode")


def check_seeds_at(seeds_at, sweep, settings):
    """ablate_seeds_at as {key: [values]}, each key swept and each value one of its sweep's."""
    checked = {key: [configurator.checked(key, v, settings, "seeds_at") for v in listed(values)]
               for key, values in seeds_at.items()}
    for key, values in checked.items():
        if key not in sweep:
            sys.exit(f"error: seeds_at names {key}, which is not swept: "
                     f"add --sweep={key}=... or drop it")
        if not values or not set(values) <= set(sweep[key]):
            sys.exit(f"error: seeds_at gives {key} {values}: choose among its sweep's values "
                     f"{', '.join(map(str, sweep[key]))}")
    return checked


def plan_runs(plan, root):
    """One run per seed, entry, learning rate and point of its sweep grid (the seeds after the first
    only at the points of seeds_at), seed outermost (so the first seed's table fills first); a run
    is its name, its group (the name less the seed) and settings: the config's, ablate.py's per run,
    the entry's, the sweep point's."""
    ratio = plan["base"]["min_lr"] / plan["base"]["learning_rate"]
    seeds_at = plan["seeds_at"].items()
    runs = []
    for seed, mode in itertools.product(plan["seeds"], plan["modes"]):
        own = plan["entry"].get(mode, {})
        keys = [k for k in plan["sweep"] if varies(k, entry_of(mode, plan["given"], plan["entry"]))]
        # SimpleGPT trains at 3x the baseline's lr
        tripled = plan["lrs"] is None and mode == "simplenorm"
        for lr in plan["lrs"] or [plan["base"]["learning_rate"] * (3 if tripled else 1)]:
            lr = rounded(lr)
            for point in itertools.product(*(plan["sweep"][k] for k in keys)):
                sweep = dict(zip(keys, point))
                suffix = "".join(f"_{k}{v}" for k, v in zip(keys, point))
                if seed != plan["seeds"][0] and any(sweep[k] not in v
                                                    for k, v in seeds_at if k in sweep):
                    continue  # seeds_at: the first seed only, here
                name = f"{mode}_lr{lr:g}_s{seed}{suffix}"
                per_run = dict(learning_rate=lr, min_lr=rounded(lr * ratio), seed=seed,
                               out_dir=str(root / name))
                settings = entry_of(mode, plan["given"] | per_run, plan["entry"]) | sweep
                # a mode's or switch's own setting, given to all, only where it acts
                settings = {k: v for k, v in settings.items() if varies(k, settings)}
                runs.append(dict(name=name, group=f"{mode}_lr{lr:g}{suffix}", mode=mode, lr=lr,
                                 tripled=tripled, seed=seed, sweep=sweep, own=own, dir=root / name,
                                 settings=settings))
    return runs


# ----------------------------------------------------------------------------------- the runs

def check_not_stale(runs):
    """Stop before training if a run folder was made with other settings: its results would mislead.
    out_dir and data_dir may differ: they are places, not settings. An ablation folder moved
    elsewhere, or its dataset prepared elsewhere, holds the same runs (a resume checks that its data
    is the data it trained on)."""
    for run in runs:
        path = run["dir"] / "config.json"
        if path.exists():
            try:
                old = json.loads(path.read_text())["config"]
                old.items()
            # a folder, not train.py's
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                sys.exit(f"error: {path} is not train.py's config.json ({first_line(e)}): "
                         f"move it away, or delete {run['dir']} to train that run again")
            for key, value in run["settings"].items():
                if key not in ("out_dir", "data_dir") and key in old and old[key] != value:
                    sys.exit(f"error: {run['dir']} was trained with {key}={old[key]!r}, "
                             f"not {value!r}: delete it, or pick another out_dir")


def done(run):
    """Whether a run has its result: finished, or diverged."""
    return read_log(run["dir"])["status"] in ("finished", "diverged")


def train_args(run):
    """train.py's arguments for a run, resumed from its checkpoint (ckpt.pt, sharded ckpt/) if it
    has one."""
    resume = checkpoint.find_checkpoint(run["dir"]) is not None
    return [f"--{k}={v}" for k, v in run["settings"].items()] + ["--init_from=resume"] * resume


def check_before_training(runs, plan, env):
    """Find every mistake before any run starts: eval.py loads the eval tasks unless every run is
    scored, and train.py checks the settings, data and checkpoint of each run not done yet, as one
    of nproc processes (both --dry_run, writing nothing). The first failure is one line, the
    tasks' before the runs'."""
    eval_args = [f"--{k}={v}" for k, v in plan["eval"].items() if v]
    to_score = plan["eval"]["tasks"] and not all(evaluated(r["dir"], plan["eval"]) for r in runs)
    command = [sys.executable, EVAL, "--dry_run=True", *eval_args]
    # as one of the run's processes
    env = env | {"WORLD_SIZE": str(plan["nproc"])}
    with ThreadPoolExecutor(1) as pool:
        # lm-eval's import and task index take seconds: in a process of their own, meanwhile
        scoring = (pool.submit(subprocess.run, command, capture_output=True, text=True, env=env)
                   if to_score else None)
        found = first_mistake(runs, plan["nproc"])
        if scoring and scoring.result().returncode:
            found = ("the eval tasks", last_line(scoring.result().stderr))
    if found:
        what, line = found
        sys.exit(f"error: {what}: {line.removeprefix('error: ')} (nothing has run)")


def first_mistake(runs, nproc):
    """The first run not done that train.py's check finds a mistake in, and its line; or None.
    The checks run here: a process each cost seconds of imports (the race's 176 runs: minutes)."""
    with planned_world(nproc):
        for run in runs:
            line = None if done(run) else mistake_of(run)
            if line:
                return run["name"], line
    return None


@contextlib.contextmanager
def planned_world(nproc):
    """os.environ as each of a torchrun launch's nproc processes sees it before it starts
    (WORLD_SIZE), for the block."""
    before = os.environ.get("WORLD_SIZE")
    os.environ["WORLD_SIZE"] = str(nproc)
    try:
        yield
    finally:
        if before is None:
            del os.environ["WORLD_SIZE"]
        else:
            os.environ["WORLD_SIZE"] = before


def mistake_of(run):
    """The line train.py --dry_run would end with for run, train.main's own check run in this
    process; None if it passes."""
    import train  # torch and the model's code: not for --help or --figures
    said = io.StringIO()
    try:
        # its plan on stdout is not ablate.py's to print; its mistakes are on stderr
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(said):
            train.main([*train_args(run), "--dry_run=True"])
    except SystemExit as e:
        if not e.code:
            return None
        return e.code if isinstance(e.code, str) else last_line(said.getvalue())
    # what python would print last before dying of it
    except Exception as e:
        return last_line("".join(traceback.format_exception_only(e)))
    return None


def last_line(text):
    return (text.strip() or "no output").splitlines()[-1]


def execute(run, nproc, env, evaluation):
    """Train one run unless it is done: fresh, or resumed from its checkpoint; then, when eval tasks
    are asked for, score it with eval.py unless that is done too. Returns (what, seconds)."""
    launcher = (["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
                if nproc > 1 else [])
    what, t0 = "skipped", time.time()
    if not done(run):
        args = train_args(run)
        what = "resumed" if "--init_from=resume" in args else "ran"
        run["dir"].mkdir(parents=True, exist_ok=True)
        # a fresh start: anew
        before = (read_log(run["dir"])["seconds"] or 0.0) if what == "resumed" else 0.0
        try:
            run_logged([sys.executable, *launcher, TRAIN, *args], run["dir"] / "train.log", env)
        finally:  # a stopped sitting's time counts too (the steps after its last checkpoint twice)
            atomic_write(run["dir"] / "seconds.json",
                         json.dumps(dict(seconds=before + time.time() - t0)).encode())
    finished = read_log(run["dir"])["status"] == "finished"
    if evaluation["tasks"] and finished and not evaluated(run["dir"], evaluation):
        args = [f"--out_dir={run['dir']}"] + [f"--{k}={v}" for k, v in evaluation.items() if v]
        failed = run_logged([sys.executable, *launcher, EVAL, *args], run["dir"] / "eval.log", env)
        what += f", EVALUATION FAILED (see {run['dir']}/eval.log)" if failed else ", evaluated"
    return what, time.time() - t0


# the train.py and eval.py processes running now, which a stop of ablate.py stops too
RUNNING = set()


def run_logged(command, log, env):
    """Run command with its output appended to log (kept out of the progress lines); its exit
    status."""
    with open(log, "a") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        RUNNING.add(process)
        try:
            return process.wait()
        finally:
            RUNNING.discard(process)


def progress_line(i, n, run, what, seconds):
    log = read_log(run["dir"])
    result = (f"val loss {log['final_val_loss']:.4f}" if log["status"] == "finished"
              else f"DIVERGED at step {log['iter']}" if log["status"] == "diverged"
              else f"{log['status'].upper()}: see {run['dir']}/train.log")
    timing = f", {seconds:.0f} s" if what != "skipped" else ""
    return f"[{i}/{n}] {run['name']}: {what}{timing}, {result}"


# ----------------------------------------------------------------------------------------- main

def draw_figures(runs, plan, root):
    """--figures=DIR: the figures of the runs that have finished, drawn into DIR without
    training."""
    groups = summarize(runs, plan)
    if not any(g["finished"] or g["diverged"] for g in groups):
        sys.exit(f"error: no run of this ablation has finished in {root}: "
                 f"give the config, settings and --out_dir it ran with")
    folder = Path(plan["figures"])
    folder.mkdir(parents=True, exist_ok=True)
    pngs = plot_all(groups, plan, folder)
    # loss per mode and size
    sized = f"\n\n{size_table(groups, plan, key)}" if (key := size_key(plan)) else ""
    # each entry at its best lr, then every run by rate and seed
    rows = race(groups, plan)
    raced = f"\n\n{race_table(rows)}\n\n{runs_table(groups, rows)}" if rows else ""
    print(f"{table(groups)}{sized}{raced}\n\nwrote {', '.join(pngs)} in {folder}")
    if unfinished := [r["name"] for g in groups for r in g["runs"]
                      if r["status"] not in ("finished", "diverged")]:
        print(f"note: {len(unfinished)} of {len(runs)} runs have not finished, "
              f"and the figures leave them out: {', '.join(unfinished)}", file=sys.stderr)


def train_all(runs, plan, env):
    """Execute the runs, jobs at a time, a progress line as each ends. A stop (Ctrl-C, or SIGINT or
    SIGTERM to this process alone: kill, a scheduler, a job started with & that ignores SIGINT)
    stops the runs too."""
    stops = {s: signal.signal(s, signal.default_int_handler)
             for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with ThreadPoolExecutor(plan["jobs"]) as pool:
            futures = {pool.submit(execute, run, plan["nproc"], env, plan["eval"]): run
                       for run in runs}
            try:
                for i, future in enumerate(as_completed(futures), 1):
                    print(progress_line(i, len(runs), futures[future], *future.result()),
                          flush=True)
            # each run saves a checkpoint and stops (SIGTERM: save and exit, however many)
            except KeyboardInterrupt:
                for process in list(RUNNING):
                    process.send_signal(signal.SIGTERM)
                pool.shutdown(cancel_futures=True)
                raise KeyboardInterrupt("run the same command again to go on")
    finally:
        for s, handler in stops.items():
            signal.signal(s, handler)


def main(argv):
    plan = configure(argv)
    # results.md, results.json and the runs go there
    check_out_dir(plan["base"]["out_dir"], "out_dir")
    if plan["figures"]:
        check_out_dir(plan["figures"], "figures")
    root = Path(plan["base"]["out_dir"]) / "ablate"
    runs = plan_runs(plan, root)
    check_not_stale(runs)
    if plan["figures"]:
        return draw_figures(runs, plan, root)
    # the user's, else the CPU's threads split among the processes
    given = os.environ.get("OMP_NUM_THREADS")
    threads = given or str(max(1, (os.cpu_count() or 1) // (plan["jobs"] * plan["nproc"])))
    env = os.environ | {"OMP_NUM_THREADS": threads}
    check_before_training(runs, plan, env)
    # root is this ablation's while it runs: another ablate.py there, even a dry run, is an error
    with claim(root, make=not plan["dry_run"]):
        if plan["dry_run"]:
            todo = sum(not done(r) for r in runs)
            return print(f"dry run: every check passed; {todo} of {len(runs)} runs would train "
                         f"in {root}, nothing written")
        print(f"{len(runs)} runs in {root}, {plan['jobs']} at a time, {threads} threads per "
              "process" + " (OMP_NUM_THREADS)" * bool(given))
        train_all(runs, plan, env)
        finish(runs, plan, argv, root)


def finish(runs, plan, argv, root):
    """The tables and figures of the runs, results.md and results.json in root; a run that did not
    finish, or was not evaluated, makes the exit status 1."""
    groups = summarize(runs, plan)
    text = results_text(groups, plan, argv, plot_all(groups, plan, root))
    atomic_write(root / "results.md", text.encode())
    shown = {k: v for k, v in plan.items() if k != "base"}
    record = dict(plan=shown, groups=groups, race=race(groups, plan))
    atomic_write(root / "results.json", json.dumps(record, indent=1).encode())
    print(text)
    failed = [r["name"] for g in groups for r in g["runs"]
              if r["status"] not in ("finished", "diverged")]
    unscored = [r["name"] for g in groups for r in g["runs"]
                if plan["eval"]["tasks"] and r["status"] == "finished" and not r["scores"]]
    if failed or unscored:
        clauses = [f"{len(names)} {what} ({', '.join(names)}: see their {log})"
                   for names, what, log in ((failed, "did not finish", "train.log"),
                                            (unscored, "were not evaluated", "eval.log"))
                   if names]
        sys.exit(f"error: of {len(runs)} runs, {' and '.join(clauses)}")


if __name__ == "__main__":
    run_cli(main)
