"""What ablate.py decides without training a model: its settings and their errors, the runs it
plans, their time, and --figures drawn from runs' logs (fake ones here). Fast: the file that
mutation testing runs against ablate.py (docs/development.md); tests/test_ablate.py trains."""
import contextlib
import io
import itertools
import json
import math
import os
import re
import signal
import sys
import threading
import types
from pathlib import Path

import matplotlib.colors
import pytest

import ablate
import configurator
import plots
import results
import train
from conftest import (ABLATE_TINY, PLOTS, ROOT, ablate_main, error_of, held, holds, mentions,
                      table_rows, tripwire, write_run)
from model import NORM_MODES


def test_an_ablation_where_another_runs_is_one_line_and_an_ablation_holds_its_folder(
        tmp_path, monkeypatch):
    """A second ablate.py where one still runs would start the same runs twice and write one
    results.md twice: it, and its dry run, are one line, with nothing written. An ablation holds
    its folder (a new one from its making) while it trains, and lets it go at its end."""
    monkeypatch.setattr(ablate, "check_before_training", lambda *args: None)
    monkeypatch.setattr(ablate, "train_all", tripwire)
    root = tmp_path / "ablate"
    root.mkdir()
    args = [f"--out_dir={tmp_path}", "--modes=pre", "--lrs=1e-3"]
    with held(root):
        for more in ([], ["--dry_run=True"]):
            message = error_of(ablate.main, [*args, *more])
            mentions(message, str(root), "still running", "wait for it to end", "another out_dir")
    assert list(root.iterdir()) == []
    seen = []
    for root in (root, tmp_path / "new" / "ablate"):
        monkeypatch.setattr(ablate, "train_all",
                            lambda *_, root=root: seen.append(holds(root)))
        # its one run never ran: an error exit
        error_of(ablate.main, [f"--out_dir={root.parent}", "--modes=pre", "--lrs=1e-3"])
        assert not holds(root)
    assert seen == [True, True]


def test_no_run_that_finished_is_an_error_exit_with_no_empty_figures_and_a_true_header(
        tmp_path, monkeypatch, capsys, recwarn):
    """Every run failed (here: nothing ran): results.md says so, no figure is drawn (matplotlib's
    "No artists" warnings and empty PNGs were), the exit is an error naming the runs; the header
    gives the threads the runs get (OMP_NUM_THREADS when it is set)."""
    monkeypatch.setattr(ablate, "check_before_training", lambda *args: None)
    # a run that fails at once leaves its folder
    monkeypatch.setattr(ablate, "execute", lambda run, nproc, env, _: run["dir"].mkdir(parents=True)
                        or (f"ran with {env['OMP_NUM_THREADS']}", 0))
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    message = error_of(ablate.main, [f"--out_dir={tmp_path}", "--modes=pre,geonorm", "--lrs=1e-3"])
    mentions(message, "2 runs", "did not finish", "pre_lr0.001_s1337", "geonorm_lr0.001_s1337",
             "train.log")
    printed = capsys.readouterr().out
    assert "2 runs in" in printed and "3 threads per process (OMP_NUM_THREADS)" in printed
    assert "ran with 3" in printed
    assert not list((tmp_path / "ablate").glob("*.png")) and "none finished" in printed
    assert not [str(w.message) for w in recwarn]


def test_a_run_whose_last_evaluation_is_not_finite_is_tabled_as_diverged(data_dir, tmp_path):
    """Finite training losses to the end, but a NaN val loss at the last evaluation: diverged, not a
    loss of nan."""
    run = tmp_path / "ablate" / "pre_lr0.003_s1"
    run.mkdir(parents=True)
    log = [dict(event="eval", iter=0, train_loss=4.1, val_loss=4.1),
           dict(event="eval", iter=10, train_loss=math.nan, val_loss=math.nan),
           dict(event="end", status="finished", iter=10, best_val_loss=4.1, final_val_loss=math.nan,
                tokens_per_s=1e3)]
    (run / "log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in log))
    printed = ablate_main(f"--data_dir={data_dir}", f"--out_dir={tmp_path}", *ABLATE_TINY,
                          "--modes=pre")
    assert "pre_lr0.003_s1: skipped, DIVERGED at step 10" in printed
    [row] = table_rows((tmp_path / "ablate" / "results.md").read_text())
    assert (row["final val loss"], row["diverged"]) == ("diverged", "1/1")


def test_sweep_keys_vary_only_their_mode_and_simplenorm_defaults_to_3x_lr(tmp_path):
    plan = ablate.configure(["--modes=pre,geonorm,simplenorm", "--seeds=1,2",
                             "--learning_rate=1e-3", "--min_lr=0", "--sweep=geo_alpha=1,3",
                             "--sweep=weight_decay=0.0,0.1"])
    runs = ablate.plan_runs(plan, tmp_path)
    names = {r["name"] for r in runs if r["seed"] == 1}
    assert names == {"pre_lr0.001_s1_weight_decay0.0", "pre_lr0.001_s1_weight_decay0.1",
                     "simplenorm_lr0.003_s1_weight_decay0.0",
                     "simplenorm_lr0.003_s1_weight_decay0.1",
                     *(f"geonorm_lr0.001_s1_geo_alpha{a}_weight_decay{w}"
                       for a in (1.0, 3.0) for w in (0.0, 0.1))}
    assert len(runs) == 2 * len(names)
    simple = next(r for r in runs if r["mode"] == "simplenorm")
    assert (simple["settings"]["learning_rate"] == 3e-3 and simple["tripled"]
            and "geo_alpha" not in simple["settings"])


def test_entry_settings_are_an_entrys_own_over_the_configs_but_not_the_sweeps(tmp_path):
    """ablate_entry_settings: untied heads for some entries, ngpt's own schedule (min_lr too, which
    ablate.py otherwise sets at the config's ratio); a sweep point still wins; a preset gets its
    settings and its name."""
    config = tmp_path / "config.py"
    config.write_text("tie_embeddings = True\nablate_modes = ['pre', 'post', 'ngpt', 'peri']\n"
                      "ablate_entry_settings = {'post': {'tie_embeddings': False}, "
                      "'ngpt': {'warmup_iters': 0, 'weight_decay': 0.0, 'min_lr': 0.0}}\n")
    runs = {r["name"]: r for r in ablate.plan_runs(ablate.configure([str(config),
                                                                      "--learning_rate=2e-3",
                                                                      "--min_lr=2e-4"]), tmp_path)}
    assert list(runs) == ["pre_lr0.002_s1337", "post_lr0.002_s1337", "ngpt_lr0.002_s1337",
                          "peri_lr0.002_s1337"]
    settings = {name.split("_")[0]: r["settings"] for name, r in runs.items()}
    assert ([settings[m]["tie_embeddings"] for m in ("pre", "post", "ngpt", "peri")]
            == [True, False, True, True])
    assert {k: settings["ngpt"][k]
            for k in ("warmup_iters", "weight_decay", "min_lr", "learning_rate")} == dict(
        warmup_iters=0, weight_decay=0.0, min_lr=0.0, learning_rate=2e-3)
    # train.py's default
    assert settings["pre"]["min_lr"] == 2e-4 and "weight_decay" not in settings["pre"]
    assert ({k: settings["peri"][k] for k in ("norm_mode", "embed_norm")}
            == dict(norm_mode="sandwich", embed_norm=True))
    assert runs["post_lr0.002_s1337"]["own"] == {"tie_embeddings": False}
    swept = ablate.plan_runs(ablate.configure([str(config), "--sweep=tie_embeddings=True"]),
                             tmp_path)
    assert all(r["settings"]["tie_embeddings"] for r in swept)
    for text, message in (("{'skipinit': {'dropout': 0.1}}", "unknown mode(s) skipinit"),
                          ("{'pre': {'learning_rate': 1e-3, 'seed': 2}}",
                           "entry_settings of pre sets learning_rate, seed, which ablate.py sets "
                           "per run (learning_rate: --lrs; seed: --seeds)"),
                          ("{'post': 1}",
                           "entry_settings of post must be a dict of train.py settings, got 1"),
                          ("{'pre': {'dropuot': 0.1}}", "did you mean 'dropout'"),
                          ("{'pre': {'dropout': 'x'}}", "dropout must be float"),
                          # the run named derf would train pre
                          ("{'derf': {'norm_type': 'norm'}}",
                           "entry_settings of derf sets norm_type='norm', which would undo the "
                           "preset derf (norm_type='derf'): leave it out, or give it to the mode "
                           "pre instead"),
                          ("{'layerscale': {'dropout': 0.1, 'res_scale': 'none'}}",
                           "sets res_scale='none', which would undo the preset layerscale")):
        config.write_text(f"ablate_entry_settings = {text}\n")
        assert message in error_of(ablate.configure, [str(config)]), text


def test_sweep_keys_of_a_presets_mode_vary_the_preset_and_seeds_at_keeps_seeds_to_its_points(
        tmp_path):
    """sandwich_* keys vary sandwich and peri (sandwich with embed_norm), dyt_* keys dyt only; a
    size varies every entry. seeds_at: the seeds after the first only where n_layer is 4."""
    plan = ablate.configure(["--modes=pre,sandwich,peri,dyt", "--seeds=1,2,3",
                             "--learning_rate=1e-3", "--sweep=sandwich_depth_scaled=False,True",
                             "--sweep=dyt_alpha_attn=0.5,1.0", "--sweep=n_layer=2,4",
                             "--seeds_at={'n_layer': 4}"])
    runs = ablate.plan_runs(plan, tmp_path)
    per_entry = {e: sorted({r["name"].partition("_s")[2].partition("_")[2]
                            for r in runs if r["mode"] == e})
                 for e in ("pre", "sandwich", "peri", "dyt")}
    assert per_entry["pre"] == ["n_layer2", "n_layer4"]
    assert per_entry["peri"] == per_entry["sandwich"] == [f"sandwich_depth_scaled{b}_n_layer{n}"
                                                          for b in (False, True) for n in (2, 4)]
    assert per_entry["dyt"] == [f"dyt_alpha_attn{a}_n_layer{n}" for a in (0.5, 1.0) for n in (2, 4)]
    assert {r["seed"] for r in runs if r["sweep"]["n_layer"] == 4} == {1, 2, 3}
    assert {r["seed"] for r in runs if r["sweep"]["n_layer"] == 2} == {1}
    assert len(runs) == (2 + 4 + 4 + 4) + 2 * (1 + 2 + 2 + 2)  # seeds 2 and 3 at n_layer 4 only
    plan = ablate.configure(["--modes=pre", "--seeds=1,2", "--sweep=n_layer=2,4",
                             "--seeds_at={'n_layer': [4, 2]}"])
    assert len(ablate.plan_runs(plan, tmp_path)) == 4  # seeds_at may hold every point of its sweep


def test_a_sweep_varying_no_entry_or_undoing_a_preset_and_a_seeds_at_off_the_sweep_are_errors():
    """A typo must not triple a ladder's compute or drop its seeds silently: seeds_at names swept
    points only."""
    for args, message in (
            (["--modes=pre,deep", "--sweep=geo_alpha=1,3"],
             "--sweep=geo_alpha=... varies none of the modes pre, deep"),
            (["--modes=pre,dyt", "--sweep=norm_type=norm,dyt"],
             "would undo the preset dyt, which sets norm_type"),
            (["--modes=pre", "--sweep=n_layer=2,4", "--seeds_at={'n_layers': [4]}"],
             "unknown setting 'n_layers' in seeds_at: did you mean 'n_layer'?"),
            (["--modes=pre", "--sweep=n_layer=2,4", "--seeds_at={'n_embd': [64]}"],
             "seeds_at names n_embd, which is not swept: add --sweep=n_embd=... or drop it"),
            (["--modes=pre", "--sweep=n_layer=2,4", "--seeds_at={'n_layer': [16]}"],
             "seeds_at gives n_layer [16]: choose among its sweep's values 2, 4"),
            (["--modes=pre", "--sweep=n_layer=2,4", "--seeds_at={'n_layer': []}"],
             "seeds_at gives n_layer []"),
            (["--entry_settings={'geonorm': {'geo_alpha': 'x'}}"],
             "error: geo_alpha must be float, got 'x' in entry_settings of geonorm")):
        assert message in error_of(ablate.configure, args), args


@pytest.mark.parametrize("args, alike", [
    (["--modes=pre,dyt", "--norm_type=dyt"], "pre and dyt would be the same model (both with "
                                               "norm_type='dyt')"),
    (["--modes=peri,sandwich", "--embed_norm=True"], "peri and sandwich would be the same model "
                                                      "(both with embed_norm=True)"),
    (["--modes=pre,layerscale", "--entry_settings={'pre': {'res_scale': 'layerscale'}}"],
     "pre and layerscale would be the same model (both with res_scale='layerscale')"),
    # a preset of two settings names both, in a list that reads
    (["--modes=pre,x0mix", "--x0_mix=True", "--embed_norm=True"],
     "pre and x0mix would be the same model (both with embed_norm=True, x0_mix=True)")])
def test_two_entries_that_would_train_one_model_are_an_error(args, alike):
    """A setting given to every entry (or to one) can make a mode its preset: the table would
    compare one model with itself under two names. The settings that differ in the rest keep
    them apart: a preset with a sweep of its own, DyT on every mode but pre's."""
    mentions(error_of(ablate.configure, args), alike, "drop one from --modes",
             "the setting that makes them alike")
    plan = ablate.configure(["--modes=pre,dyt,post", "--sweep=dyt_alpha_attn=0.5,0.8"])
    assert plan["modes"] == ["pre", "dyt", "post"]
    plan = ablate.configure(["--modes=sandwich,geonorm", "--norm_type=dyt"])
    assert plan["modes"] == ["sandwich", "geonorm"]


def test_a_setting_of_one_mode_goes_to_the_entries_it_acts_on_and_must_act_on_one(tmp_path):
    """geo_alpha given to all goes to geonorm's runs alone (pre's would fail train.py's check, and
    its config.json would name a setting it never read); given where no entry reads it, or to one
    entry in entry_settings that does not read it, it is one line."""
    plan = ablate.configure(["--modes=pre,geonorm", "--geo_alpha=3.0", "--seeds=1"])
    settings = {r["mode"]: r["settings"] for r in ablate.plan_runs(plan, tmp_path)}
    assert "geo_alpha" not in settings["pre"] and settings["geonorm"]["geo_alpha"] == 3.0
    mentions(error_of(ablate.configure, ["--modes=pre,post", "--geo_alpha=3.0"]),
             "geo_alpha=3.0 does nothing to any of the modes pre, post",
             "norm_mode='geonorm'", "add an entry under it to --modes", "leave geo_alpha out")
    mentions(error_of(ablate.configure, ["--modes=pre,dyt",
                                         "--entry_settings={'pre': {'dyt_alpha_ffn': 0.5}}"]),
             "dyt_alpha_ffn=0.5 does nothing in entry_settings of pre, under norm_type='norm'",
             "norm_type='dyt'")
    # under the switch as the settings given to all set it, not its default
    mentions(error_of(ablate.configure, ["--modes=sandwich,geonorm", "--norm_type=derf",
                                         "--entry_settings={'sandwich': {'dyt_alpha_ffn': 0.5}}"]),
             "in entry_settings of sandwich, under norm_type='derf'")
    # under the setting given to all, the entry reads it
    plan = ablate.configure(["--modes=sandwich,geonorm", "--norm_type=dyt",
                             "--entry_settings={'sandwich': {'dyt_alpha_ffn': 0.5}}"])
    assert plan["entry"] == {"sandwich": {"dyt_alpha_ffn": 0.5}}


def test_dyt_keys_vary_every_entry_under_norm_type_dyt_and_only_those():
    plan = ablate.configure(["--modes=pre,sandwich,post", "--norm_type=dyt",
                             "--sweep=dyt_alpha_attn=0.5,0.8"])
    assert [r["name"] for r in ablate.plan_runs(plan, ROOT)] == [
        f"{m}_lr0.001_s1337_dyt_alpha_attn{a}"
        for m in ("pre", "sandwich", "post") for a in (0.5, 0.8)]
    plan = ablate.configure(["--modes=pre,dyt", "--sweep=dyt_alpha_attn=0.5,0.8"])
    assert [r["name"] for r in ablate.plan_runs(plan, ROOT)] == [
        "pre_lr0.001_s1337", "dyt_lr0.001_s1337_dyt_alpha_attn0.5",
        "dyt_lr0.001_s1337_dyt_alpha_attn0.8"]


def test_a_runs_time_adds_its_sittings_when_it_resumes_and_starts_anew_when_it_starts_again(
        tmp_path, monkeypatch):
    """seconds.json: a resumed run's sittings add up (a checkpoint without one counts from nothing);
    a run that starts from scratch (no checkpoint: it crashed before saving one) drops the time of
    the attempt that left nothing. execute returns what it did and its seconds, here on a clock that
    ticks 10 s a reading."""
    ticks = itertools.count(1000, 10)
    monkeypatch.setattr(ablate, "time", types.SimpleNamespace(time=lambda: next(ticks)))
    monkeypatch.setattr(ablate, "run_logged", lambda *args: 0)
    run = dict(dir=tmp_path / "pre_lr0.001_s1", settings=dict(seed=1))
    run["dir"].mkdir()
    (run["dir"] / "seconds.json").write_text('{"seconds": 100.0}')

    def execute():
        what_and_time = ablate.execute(run, 1, {}, dict(tasks=""))
        return what_and_time, json.loads((run["dir"] / "seconds.json").read_text())["seconds"]
    # started at 1000, saved its time at 1010, returned at 1020
    assert execute() == (("ran", 20), 10)
    # as with a checkpoint
    monkeypatch.setattr(ablate, "train_args", lambda run: ["--init_from=resume"])
    assert execute() == (("resumed", 20), 20)
    (run["dir"] / "seconds.json").unlink()
    assert execute() == (("resumed", 20), 10)


def test_a_runs_evaluation_is_logged_in_its_eval_log_and_a_failed_one_named_in_its_progress(
        tmp_path, monkeypatch):
    logs = []
    # eval.py fails
    monkeypatch.setattr(ablate, "run_logged", lambda command, log, env: logs.append(log) or 1)
    run = dict(dir=tmp_path / "pre_lr0.001_s1", settings=dict(seed=1))
    write_run(run["dir"], [(10, 2.0)])
    what, _ = ablate.execute(run, 1, {}, dict(tasks="piqa", limit=3))
    assert (logs == [run["dir"] / "eval.log"]
            and what == f"skipped, EVALUATION FAILED (see {run['dir']}/eval.log)")


def test_ablate_settings_in_a_config_file_are_not_passed_to_train(tmp_path):
    config = tmp_path / "config.py"
    config.write_text("n_layer = 2\nlearning_rate = 2e-3\nmin_lr = 2e-4\n"
                      "ablate_modes = ['deep', 'geonorm']\nablate_lrs = [1e-3]\n"
                      "ablate_sweep = {'geo_decay': ['none', 'sqrt']}\n")
    plan = ablate.configure([str(config), "--sweep=geo_max_angle=None,0.5"])
    assert plan["modes"] == ["deep", "geonorm"] and plan["lrs"] == [1e-3]
    assert plan["sweep"] == {"geo_decay": ["none", "sqrt"], "geo_max_angle": [None, 0.5]}
    run, *geonorm = ablate.plan_runs(plan, tmp_path)  # geo_* keys do not vary deep
    assert run["mode"] == "deep" and len(geonorm) == 4
    assert not any(k.startswith("ablate_") for k in run["settings"])
    # the config's lr/10 ratio, at the run's lr
    assert run["settings"]["min_lr"] == pytest.approx(1e-4)
    config.write_text("ablate_seed = [1, 2]\n")
    with pytest.raises(SystemExit,
                       match="unknown setting 'ablate_seed'.*did you mean 'ablate_seeds'"):
        ablate.configure([str(config)])


def test_ablate_settings_are_checked_and_modes_parsed_as_bench_parses_them():
    # each once
    assert ablate.configure(["--modes=geonorm,pre,geonorm"])["modes"] == ["geonorm", "pre"]
    assert configurator.parse_modes("all", NORM_MODES) == list(NORM_MODES)
    with pytest.raises(SystemExit, match=r"unknown mode\(s\) rmsnorm: choose from post, pre"):
        ablate.configure(["--modes=pre,rmsnorm"])
    with pytest.raises(SystemExit, match="ablate_jobs must be at least 1, got 0"):
        ablate.configure(["--jobs=0"])
    with pytest.raises(SystemExit, match="ablate.py sets seed per run"):
        ablate.configure(["--sweep=seed=1,2"])
    plan = ablate.configure(["--seeds=3", "--lrs=1", "--ablate_jobs=2",
                             "--eval_tasks=piqa,hellaswag"])
    assert ((plan["seeds"], plan["lrs"], plan["jobs"], plan["eval"]["tasks"])
            == ([3], [1.0], 2, "piqa,hellaswag"))


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_lists_ablates_settings_then_trains_saying_which_are_set_per_run(capsys, flag):
    with pytest.raises(SystemExit) as exit:
        ablate.configure(["--seeds=1", flag])
    printed = capsys.readouterr().out
    assert (exit.value.code == 0
            and printed.startswith(ablate.__doc__.strip() + "\n\nablate.py's settings:\n"))
    ours, _, trains = printed.partition("\ntrain.py's, passed on to every run (but norm_mode, "
                                        "learning_rate, min_lr, seed, out_dir, init_from, "
                                        "dry_run, set per run):\n")
    assert ("\nablate_sweep = {}" in ours and trains.startswith("# I/O\n")
            and "\nn_layer = " in trains)


@pytest.mark.parametrize("args, words", [
    (["--sweep=seed=1,2", "--sweep=norm_mode=pre"],
     ("norm_mode, seed", "per run", "norm_mode: --modes", "seed: --seeds")),
    # each names its own way: out_dir's is no --lrs
    (["--sweep=out_dir=a,b", "--sweep=learning_rate=1,2"],
     ("learning_rate, out_dir", "per run", "learning_rate: --lrs", "out_dir: --out_dir")),
    (["--sweep=n_layer=2,x"], ("n_layer", "int", "'x' in the sweep")),
    # the key ends at the first =
    (["--sweep=n_layer=2=3"], ("n_layer", "int", "'2=3' in the sweep")),
    (["--seeds=1,2.5"], ("seed", "int", "2.5 in seeds")),
    (["--lrs=1e-3,True"], ("learning_rate", "float", "True in lrs")),
    # every run a dry run: none would finish
    (["--sweep=dry_run=True"], ("dry_run", "per run", "dry_run: --dry_run checks every run")),
    # a folder's name: a path would put runs outside out_dir
    (["--sweep=wandb_run_name=a,b/../../x"],
     ("--sweep=wandb_run_name=b/../../x", "names a folder", "without '/'")),
    # the config's one, silently, before
    (["--lrs=[]"], ("lrs is an empty list", "give one or more", "leave it out")),
    # a run at 0 trains nothing, one below climbs the loss: as the base learning_rate's check
    (["--lrs=1e-3,0"], ("lrs gives 0", "not above 0", "rates above 0")),
    (["--lrs=-2e-3"], ("lrs gives -0.002", "rates above 0")),
    # the last one given won, the first dropped silently
    (["--sweep=n_layer=1", "--sweep=n_layer=2"],
     ("--sweep=n_layer=2 sweeps n_layer again", "once", "--sweep=n_layer=A,B")),
    (["--seeds=()"], ("seeds is an empty list", "give one or more", "leave it out")),
])
def test_a_bad_value_in_the_sweep_seeds_or_lrs_is_one_line_that_says_where(args, words):
    mentions(error_of(ablate.configure, args), *words)


def test_a_sweep_key_on_the_command_line_replaces_the_configs_values_for_it_alone(tmp_path):
    """The race's 4-block command gives --sweep=n_layer=4 over its config's n_layer sweep: the
    command's values replace the config's for that key, and the config's other keys stay."""
    config = tmp_path / "ablate_sweeps.py"
    config.write_text('ablate_sweep = {"n_layer": [16], "geo_alpha": [1.0, 3.0]}\n')
    plan = ablate.configure([str(config), "--modes=geonorm", "--sweep=n_layer=4,8"])
    assert plan["sweep"] == {"n_layer": [4, 8], "geo_alpha": [1.0, 3.0]}
    twice = [str(config), "--sweep=n_layer=4", "--sweep=n_layer=8"]
    mentions(error_of(ablate.configure, twice), "--sweep=n_layer=8", "again", "once")


def test_rates_that_round_alike_in_a_runs_name_are_one_run(tmp_path):
    """A run's folder gives its rate to 6 digits: 0.0010000001 is 0.001's run, not a second seed of
    it in the table."""
    plan = ablate.configure(["--modes=pre", "--lrs=0.001,0.0010000001,2e-3", "--seeds=1"])
    assert plan["lrs"] == [0.001, 0.002]
    runs = ablate.plan_runs(plan, tmp_path)
    assert [(run["name"], run["settings"]["learning_rate"]) for run in runs] == [
        ("pre_lr0.001_s1", 0.001), ("pre_lr0.002_s1", 0.002)]


@pytest.mark.parametrize("rate", ["0", "-0.002"])
def test_a_base_learning_rate_not_above_0_is_one_line_as_each_runs_min_lr_follows_it(rate):
    """Each run's min_lr is its rate times min_lr / learning_rate. At 0 that ratio was a division by
    zero's traceback; below 0, a negative min_lr blamed on a setting nobody gave."""
    got = error_of(ablate.configure, [f"--learning_rate={rate}", "--lrs=1e-3,2e-3"])
    mentions(got, f"learning_rate={rate}", "min_lr", "above 0", "--lrs")


def test_the_llama_char_ablation_is_the_gpt2_one_on_the_llama_block():
    gpt2, llama = (ablate.configure([os.path.join(ROOT, "configs", name)])
                   for name in ("ablate_shakespeare_char.py", "ablate_llama_char.py"))
    assert ({k for k in llama["base"] if llama["base"][k] != gpt2["base"][k]}
            == {"arch", "multiple_of", "out_dir"})
    assert ([llama[k] for k in ("modes", "seeds", "lrs", "jobs")]
            == [gpt2[k] for k in ("modes", "seeds", "lrs", "jobs")])


def fake_run(folder, seed, status="finished", n_layer=2):
    """A run's log.jsonl as train.py writes it, without training: evaluations at 0, 5 and 10 (a
    diverged run stops after 5) with layer stats."""
    steps = [0, 5] if status == "diverged" else [0, 5, 10]
    write_run(folder, [(step, 4.2 - 0.1 * step - 0.01 * seed) for step in steps], status,
              stats={step: dict(grad_norm=[0.01 * seed] * n_layer, resid_rms=[1.0] * n_layer,
                                angle=[0.5] * n_layer)
                     for step in steps})


@pytest.fixture
def drawn(tmp_path, monkeypatch):
    """ablate.py --figures on fake finished ablations: draw(modes, runs) returns what it printed and
    the figures' titles, y labels and line colours by legend label."""
    figures = {}

    def record(fig, ax, title, path):
        lines = [line for a in fig.axes for line in a.get_lines()
                 if not line.get_label().startswith("_")]
        figures[(title.split("\n")[0], path.parent.parent.name)] = dict(  # (title, the ablation)
            ylabel=fig.axes[0].get_ylabel(),
            colors={line.get_label(): line.get_color() for line in lines})
        real_finish(fig, ax, title, path)

    real_finish = plots.finish
    monkeypatch.setattr(plots, "finish", record)
    meta = tmp_path / "data" / "tiny" / "meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps(dict(tokenizer="char")))

    def draw(name, modes, statuses):
        out = tmp_path / name
        for (mode, seed), status in statuses.items():
            fake_run(out / "ablate" / f"{mode}_lr0.001_s{seed}", seed, status)
        printed = ablate_main(f"--out_dir={out}", f"--data_dir={tmp_path / 'data'}",
                              "--dataset=tiny", "--learning_rate=1e-3", "--n_layer=2",
                              "--max_iters=10", f"--modes={modes}", "--lrs=1e-3", "--seeds=1,2",
                              f"--figures={tmp_path / name / 'figures'}")
        return out, printed
    return draw, figures


def test_figures_are_drawn_from_a_finished_ablation_without_training(drawn, capsys):
    draw, figures = drawn
    out, printed = draw("a", "pre,geonorm", {("pre", 1): "finished", ("pre", 2): "finished",
                                             ("geonorm", 1): "finished",
                                             ("geonorm", 2): "diverged"})
    for name in PLOTS:
        assert (out / "figures" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    # nothing ran
    assert not list(out.glob("ablate/*/train.log")) and not (out / "ablate" / "results.md").exists()
    assert "wrote val_loss.png, grad_norm.png, resid_rms.png, angle.png in" in printed
    # no size table
    assert "| mode | n_layer" not in printed and "|\n\nwrote val_loss.png" in printed
    [val_loss] = [f for (title, _), f in figures.items() if title.startswith("Validation loss")]
    assert val_loss["ylabel"] == "validation loss (nats per character)"
    # geonorm's finished seed; its diverged one unlabelled
    assert set(val_loss["colors"]) == {"pre", "geonorm"}
    assert "not finished" not in capsys.readouterr().err


def test_a_mode_has_one_colour_in_every_figure_and_every_ablation(drawn):
    draw, figures = drawn
    draw("a", "pre,geonorm", {(m, s): "finished" for m in ("pre", "geonorm") for s in (1, 2)})
    draw("b", "geonorm,simplenorm,deep", {(m, s): "finished"
                                          for m in ("geonorm", "simplenorm", "deep")
                                          for s in (1, 2)})
    seen = {}
    for (title, ablation), figure in figures.items():
        for mode, color in figure["colors"].items():
            assert (matplotlib.colors.to_hex(color)
                    == matplotlib.colors.to_hex(plots.mode_color(mode))), (title, mode)
            seen.setdefault(mode, set()).add(ablation)
    assert seen == {"pre": {"a"}, "geonorm": {"a", "b"}, "simplenorm": {"b"}, "deep": {"b"}}
    assert len(figures) == 8  # four figures in each of the two ablations (one rate: no lr.png)


def test_figures_of_an_ablation_that_never_ran_are_an_error(drawn, tmp_path):
    draw, _ = drawn
    mentions(error_of(draw, "empty", "pre", {}), "no run", "finished",
             str(tmp_path / "empty" / "ablate"), "config", "--out_dir")


def test_figures_of_an_unfinished_ablation_name_the_runs_they_leave_out(drawn, capsys):
    draw, _ = drawn
    draw("half", "pre,geonorm", {("pre", 1): "finished", ("pre", 2): "interrupted",
                                 ("geonorm", 1): "finished"})
    err = capsys.readouterr().err
    assert ("note: 2 of 4 runs have not finished, and the figures leave them out: pre_lr0.001_s2, "
            "geonorm_lr0.001_s2\n") in err


def test_figures_of_a_size_sweep_print_its_size_table_into_a_folder_made_with_its_parents(
        tmp_path, capsys):
    for n in (1, 2):
        fake_run(tmp_path / "out" / "ablate" / f"pre_lr0.001_s1_n_layer{n}", 1, n_layer=n)
    folder = tmp_path / "a" / "b" / "figures"
    # no dataset: no parameter counts, whatever the working directory's data/ holds
    args = [f"--out_dir={tmp_path / 'out'}", f"--data_dir={tmp_path / 'data'}", "--modes=pre",
            "--learning_rate=1e-3", "--seeds=1", "--sweep=n_layer=1,2", f"--figures={folder}"]
    printed = ablate_main(*args)
    plan = ablate.configure(args)
    groups = results.summarize(ablate.plan_runs(plan, tmp_path / "out" / "ablate"), plan)
    assert printed == (f"{results.table(groups)}\n\n"
                       f"{results.size_table(groups, plan, 'n_layer')}\n\nwrote size.png, "
                       f"val_loss_n_layer1.png, grad_norm_n_layer1.png, angle_n_layer1.png, "
                       f"val_loss_n_layer2.png, grad_norm_n_layer2.png, angle_n_layer2.png "
                       f"in {folder}\n")
    assert (sorted(p.name for p in folder.iterdir())
            == sorted(printed.split("wrote ")[1].split(" in ")[0].split(", ")))
    assert ablate_main(*args) == printed  # drawn again into the folder it made


def test_figures_of_a_race_print_its_two_tables_after_the_runs_table(tmp_path):
    """A sweep of rates: results.md's table, then the race's (each entry at its best rate) and the
    table of every run, as results.py draws them, then the figures written."""
    for mode in ("pre", "post"):
        for lr in ("0.001", "0.002"):
            fake_run(tmp_path / "out" / "ablate" / f"{mode}_lr{lr}_s1", 1)
    folder = tmp_path / "figures"
    args = [f"--out_dir={tmp_path / 'out'}", f"--data_dir={tmp_path / 'data'}", "--modes=pre,post",
            "--lrs=1e-3,2e-3", "--seeds=1", f"--figures={folder}"]
    printed = ablate_main(*args)
    plan = ablate.configure(args)
    groups = results.summarize(ablate.plan_runs(plan, tmp_path / "out" / "ablate"), plan)
    rows = results.race(groups, plan)
    assert [row["mode"] for row in rows] == ["pre", "post"]
    assert printed == (f"{results.table(groups)}\n\n{results.race_table(rows)}\n\n"
                       f"{results.runs_table(groups, rows)}\n\nwrote val_loss.png, lr.png, "
                       f"grad_norm.png, resid_rms.png, angle.png in {folder}\n")


# ---------------------------------------------------------------- main, with stand-ins for the runs

FAKE_PYTHON = '''#!{python}
"""Stands in for python running train.py or eval.py (under torchrun or not): records the call in
$FAKE_CALLS and does what the script would, in a moment. A run of seed 13 crashes; eval.py's check
of task nope fails, its scoring at limit 13; a run of seed 99 lasts until a SIGTERM."""
import json, os, sys
from pathlib import Path
argv = sys.argv[1:]
launcher = argv[:4] if argv[:2] == ["-m", "torch.distributed.run"] else []
script = Path(argv[len(launcher)]).name
args = dict(a[2:].split("=", 1) for a in argv[len(launcher) + 1:])
with open(os.environ["FAKE_CALLS"], "a") as f:
    call = dict(script=script, launcher=launcher, args=args,
                threads=os.environ["OMP_NUM_THREADS"], world=os.environ.get("WORLD_SIZE"))
    f.write(json.dumps(call) + "\\n")
if args.get("dry_run") == "True":
    sys.exit("error: lm-eval has no task 'nope'" if args.get("tasks") == "nope" else 0)
print("a line of output", flush=True)
print("a warning", file=sys.stderr, flush=True)
out = Path(args["out_dir"])
if script == "eval.py":
    if args.get("limit") == "13":
        sys.exit(1)
    limit = int(args["limit"]) if "limit" in args else None
    scores = {{t: dict(value=0.5, metric="acc") for t in args["tasks"].split(",")}}
    settings = dict(tasks=args["tasks"], limit=limit)
    (out / "eval.json").write_text(json.dumps(dict(settings=settings, scores=scores)))
    sys.exit(0)
if args["seed"] == "99":  # a long run: a SIGTERM stops it, as train.py's checkpoint-and-exit does
    import signal, time
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(f"stopped {{args['norm_mode']}}"))
    time.sleep(10)
loss = 2.0 + int(args["seed"]) % 100 / 100 + len(args["norm_mode"]) / 1000
events = [dict(event="eval", iter=0, val_loss=4.0, train_loss=4.0)]
events.append(dict(event="eval", iter=10, val_loss=loss, train_loss=loss))
events.append(dict(event="end", status="finished", iter=10))
events = events[:1] if args["seed"] == "13" else events
with open(out / "log.jsonl", "a") as f:
    f.write("".join(json.dumps(e) + "\\n" for e in events))
sys.exit(1 if args["seed"] == "13" else 0)
'''


def trained(command, log, env):
    """ablate.run_logged's stand-in: a run of command that finishes at once."""
    write_run(Path(next(a for a in command if a.startswith("--out_dir="))[len("--out_dir="):]),
              [(10, 2.0)])
    return 0


def record_check(argv):
    """train.main's stand-in for ablate.py's checks, which run it in ablate.py's process: the call
    recorded as FAKE_PYTHON records one. n_head=3 fails with a line, n_head=5 with none, n_head=6
    with lines on stderr."""
    args = dict(a[2:].split("=", 1) for a in argv)
    call = dict(script="train.py", launcher=[], args=args,
                threads=os.environ.get("OMP_NUM_THREADS"), world=os.environ.get("WORLD_SIZE"))
    with open(os.environ["FAKE_CALLS"], "a") as f:
        f.write(json.dumps(call) + "\n")
    print("the plan", flush=True)  # train.py --dry_run's, on stdout
    if args.get("n_head") == "6":
        print("a warning\nits last line", file=sys.stderr)
    if args.get("n_head") in ("3", "5", "6"):
        sys.exit("error: n_embd=32 is not divisible by n_head=3" if args["n_head"] == "3" else 1)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """ablate.main with python standing in for train.py and eval.py (FAKE_PYTHON), train.main for
    the runs' checks (record_check), and 8 CPUs: main(*args) returns (what it printed, its plan's
    runs); calls() the calls made since the last, each {script, launcher, args, threads, world}."""
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON.format(python=sys.executable))
    python.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(python))
    monkeypatch.setattr(train, "main", record_check)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("FAKE_CALLS", str(tmp_path / "calls.jsonl"))
    seen = []

    def main(*args):
        argv = [f"--out_dir={tmp_path / 'out'}", f"--data_dir={tmp_path / 'data'}",
                "--dataset=tiny", "--n_layer=2", "--n_head=2", "--n_embd=32",
                "--learning_rate=1e-3", "--min_lr=1e-4", *args]
        plan = ablate.configure(argv)
        return ablate_main(*argv), ablate.plan_runs(plan, tmp_path / "out" / "ablate")

    def calls():
        path = tmp_path / "calls.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        new = [json.loads(line) for line in lines[len(seen):]]
        seen.extend(new)
        return new
    return main, calls


def test_each_run_is_checked_then_trained_once_with_its_settings_and_the_results_written(
        fake, tmp_path):
    main, calls = fake
    printed, runs = main("--modes=pre,geonorm", "--seeds=1,2", "--jobs=2")
    made = calls()
    settings = {r["name"]: {k: str(v) for k, v in r["settings"].items()} for r in runs}
    checks, ran = made[:4], made[4:]
    assert (sorted(c["args"]["seed"] + c["args"]["norm_mode"] for c in checks)
            == ["1geonorm", "1pre", "2geonorm", "2pre"])
    for call in checks:  # train.py --dry_run, as one of 1 process
        name = Path(call["args"]["out_dir"]).name
        assert call["args"] == settings[name] | {"dry_run": "True"} and call["world"] == "1", name
    assert sorted(Path(c["args"]["out_dir"]).name for c in ran) == sorted(settings)
    for call in ran:
        assert (call["args"] == settings[Path(call["args"]["out_dir"]).name]
                and call["script"] == "train.py")
        # 8 CPUs, 2 jobs
        assert call["launcher"] == [] and call["threads"] == "4" and call["world"] is None
    root = tmp_path / "out" / "ablate"
    lines = printed.splitlines()
    assert lines[0] == f"4 runs in {root}, 2 at a time, 4 threads per process"
    progress = sorted(lines[1:5], key=lambda line: line.split("] ")[1])
    assert [line.split("] ")[0] for line in lines[1:5]] == ["[1/4", "[2/4", "[3/4", "[4/4"]
    for line, (name, expected) in zip(progress, sorted(settings.items())):
        # as the stand-in's
        loss = 2.0 + int(expected["seed"]) / 100 + len(expected["norm_mode"]) / 1000
        assert re.fullmatch(rf"\[\d/4\] {name}: ran, \d+ s, val loss {loss:.4f}", line), line
    plan = ablate.configure(["--modes=pre,geonorm", "--seeds=1,2", "--jobs=2",
                             f"--out_dir={tmp_path / 'out'}"])
    text = (root / "results.md").read_text()
    assert printed.endswith(text + "\n") and "Lowest final val loss first: pre_lr0.001 " in text
    saved = json.loads((root / "results.json").read_text())
    assert (set(saved["plan"]) == set(plan) - {"base"}
            and saved["plan"]["modes"] == ["pre", "geonorm"])
    assert saved["plan"]["dry_run"] is False and saved["plan"]["seeds"] == [1, 2]
    assert [g["group"] for g in saved["groups"]] == ["pre_lr0.001", "geonorm_lr0.001"]
    assert [g["finished"] for g in saved["groups"]] == [2, 2]
    # no layer stats from the stand-in
    assert sorted(p.name for p in root.glob("*.png")) == PLOTS[:1]


def test_a_rerun_trains_and_checks_only_what_is_not_done_and_resumes_from_a_checkpoint(
        fake, tmp_path):
    main, calls = fake
    main("--modes=pre,geonorm")
    calls()
    # stopped before it ended...
    (tmp_path / "out" / "ablate" / "geonorm_lr0.001_s1337" / "log.jsonl").unlink()
    # ...with a checkpoint
    (tmp_path / "out" / "ablate" / "geonorm_lr0.001_s1337" / "ckpt.pt").write_bytes(b"")
    printed, _ = main("--modes=pre,geonorm")
    made = calls()
    assert [(c["args"]["norm_mode"], c["args"].get("dry_run"), c["args"].get("init_from"))
            for c in made] == [("geonorm", "True", "resume"), ("geonorm", None, "resume")]
    assert re.search(r"\] pre_lr0.001_s1337: skipped, val loss 2.3730\n", printed)
    assert re.search(r"\] geonorm_lr0.001_s1337: resumed, \d+ s, val loss 2\.3770\n", printed)
    assert main("--modes=pre,geonorm", "--dry_run")[0].strip() == (
        f"dry run: every check passed; 0 of 2 runs would train in {tmp_path / 'out' / 'ablate'}, "
        "nothing written")
    assert calls() == []


def test_runs_of_several_processes_launch_through_torchrun_with_the_threads_split_among_them(
        fake, monkeypatch):
    main, calls = fake
    launched = []
    monkeypatch.setattr(ablate, "run_logged",
                        lambda command, log, env: launched.append((command, env)) or
                        trained(command, log, env))
    printed, runs = main("--modes=pre", "--nproc=2")
    [check] = calls()
    # checked as one of 2
    assert check["world"] == "2" and check["launcher"] == []
    [(command, env)] = launched
    assert command[:5] == [sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node=2"]
    assert command[5:] == [ablate.TRAIN, *(f"--{k}={v}" for k, v in runs[0]["settings"].items())]
    assert env["OMP_NUM_THREADS"] == "4" and "WORLD_SIZE" not in env
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    # another out_dir's worth of runs
    printed, _ = main("--modes=pre", "--nproc=2", "--jobs=2", "--max_iters=5")
    assert "3 threads per process (OMP_NUM_THREADS)" in printed


@pytest.mark.parametrize("cpus, jobs, nproc, threads", [(8, 2, 2, "2"), (8, 3, 1, "2"),
                                                         (2, 4, 1, "1"), (None, 1, 1, "1")])
def test_each_process_gets_the_cpus_threads_divided_among_the_jobs_processes(
        fake, monkeypatch, cpus, jobs, nproc, threads):
    main, calls = fake
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    given = []
    monkeypatch.setattr(ablate, "run_logged",
                        lambda command, log, env: given.append(env["OMP_NUM_THREADS"]) or
                        trained(command, log, env))
    printed, _ = main("--modes=pre", f"--jobs={jobs}", f"--nproc={nproc}")
    assert given == [threads]
    assert f", {jobs} at a time, {threads} threads per process\n" in printed


def test_eval_tasks_are_checked_first_and_scored_after_each_run_unless_scored_already(
        fake, tmp_path):
    main, calls = fake
    printed, runs = main("--modes=pre", "--seeds=1,2", "--eval_tasks=piqa,arc_easy",
                         "--eval_limit=3")
    made = calls()
    [check] = [c for c in made if c["script"] == "eval.py" and "dry_run" in c["args"]]
    assert check == dict(script="eval.py", launcher=[],
                         args=dict(dry_run="True", tasks="piqa,arc_easy", limit="3"),
                         threads="8", world="1")
    # before any run
    assert made.index(check) < min(made.index(c) for c in made if "dry_run" not in c["args"])
    evals = [c for c in made if c["script"] == "eval.py" and c is not check]
    assert sorted(c["args"]["out_dir"] for c in evals) == sorted(str(r["dir"]) for r in runs)
    assert all(c["args"] == dict(out_dir=c["args"]["out_dir"], tasks="piqa,arc_easy", limit="3")
               for c in evals)
    assert len(re.findall(r": ran, evaluated, \d+ s, val loss", printed)) == 2
    assert "| piqa acc | arc_easy acc |" in (tmp_path / "out" / "ablate" / "results.md").read_text()
    main("--modes=pre", "--seeds=1,2", "--eval_tasks=piqa,arc_easy", "--eval_limit=3")
    assert calls() == []  # both scored: nothing runs, not even the tasks' check
    # all examples: score again
    printed, _ = main("--modes=pre", "--seeds=1,2", "--eval_tasks=piqa,arc_easy")
    assert [c["args"].get("limit") for c in calls()] == [None, None, None]
    assert len(re.findall(r": skipped, evaluated, \d+ s, val loss", printed)) == 2


def test_a_run_that_fails_or_is_not_evaluated_is_named_in_a_one_line_error_exit(fake, tmp_path):
    main, calls = fake
    root = tmp_path / "out" / "ablate"
    message = error_of(main, "--modes=pre", "--seeds=1,13", "--eval_tasks=piqa", "--eval_limit=13")
    mentions(message, "2 runs", "did not finish", "train.log", "not evaluated", "eval.log")
    names = re.findall(r"pre_lr0\.001_s\d+", message)
    # the unfinished, then the unscored
    assert names == ["pre_lr0.001_s13", "pre_lr0.001_s1"], message
    # both streams
    assert (root / "pre_lr0.001_s13" / "train.log").read_text() == "a line of output\na warning\n"
    assert (root / "results.md").exists()
    mentions(error_of(main, "--modes=pre", "--seeds=13"), "did not finish", "pre_lr0.001_s13",
             "train.log")
    # appended
    assert ((root / "pre_lr0.001_s13" / "train.log").read_text()
            == "a line of output\na warning\n" * 2)


def test_a_progress_line_says_what_happened_to_the_run_and_its_result(tmp_path):
    run = dict(name="pre_lr0.001_s1", dir=tmp_path)
    write = lambda *events: (tmp_path / "log.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in events))
    write(dict(event="eval", iter=0, val_loss=4.0), dict(event="eval", iter=10, val_loss=2.34567),
          dict(event="end", status="finished", iter=10))
    assert (ablate.progress_line(3, 7, run, "ran", 12.6)
            == "[3/7] pre_lr0.001_s1: ran, 13 s, val loss 2.3457")
    assert (ablate.progress_line(3, 7, run, "skipped", 12.6)
            == "[3/7] pre_lr0.001_s1: skipped, val loss 2.3457")
    write(dict(event="eval", iter=0, val_loss=4.0), dict(event="end", status="diverged", iter=4))
    assert (ablate.progress_line(1, 1, run, "ran", 1)
            == "[1/1] pre_lr0.001_s1: ran, 1 s, DIVERGED at step 4")
    write(dict(event="eval", iter=0, val_loss=4.0), dict(event="end", status="interrupted", iter=5))
    assert (ablate.progress_line(1, 1, run, "resumed", 1)
            == f"[1/1] pre_lr0.001_s1: resumed, 1 s, INTERRUPTED: see {tmp_path}/train.log")


@pytest.mark.parametrize("args, what, line", [
    (["--n_head=3"], "pre_lr0.001_s1337", "n_embd=32 is not divisible by n_head=3"),
    (["--n_head=5"], "pre_lr0.001_s1337", "no output"),  # its plan on stdout is not a line of it
    (["--n_head=6"], "pre_lr0.001_s1337", "its last line"),
    (["--eval_tasks=nope"], "the eval tasks", "lm-eval has no task 'nope'"),
    (["--eval_tasks=nope", "--n_head=3"], "the eval tasks", "lm-eval has no task 'nope'"),
])
def test_a_failed_check_is_its_last_line_of_stderr_and_nothing_runs(
        fake, tmp_path, capsys, args, what, line):
    main, calls = fake
    # the check's line as it is
    assert error_of(main, "--modes=pre,post", *args) == f"error: {what}: {line} (nothing has run)"
    made = calls()
    checks = [c["args"].get("dry_run") for c in made]
    assert checks == ["True"] * len(checks) and checks and not (tmp_path / "out").exists()
    # the runs' checks stop at the first mistake (pre's), or check every run
    assert ("post" in [c["args"].get("norm_mode") for c in made]) == (args == ["--eval_tasks=nope"])
    assert "the plan" not in capsys.readouterr().out


def test_a_run_checked_in_ablates_process_sees_its_world_and_it_is_put_back(fake, monkeypatch):
    """The runs' checks run train.main here, each as one of its nproc processes (WORLD_SIZE) would;
    after them, passed or failed, os.environ is as it was."""
    main, calls = fake
    for before in (None, "7"):
        if before:
            monkeypatch.setenv("WORLD_SIZE", before)
        error_of(main, "--modes=pre", "--nproc=3", "--n_head=5")
        printed, _ = main("--modes=pre", "--nproc=3", "--dry_run")
        assert printed.startswith("dry run: every check passed") and "the plan" not in printed
        assert [c["world"] for c in calls()] == ["3", "3"]
        assert os.environ.get("WORLD_SIZE") == before


def test_a_check_that_raises_is_the_last_line_python_would_print_and_nothing_runs(
        fake, tmp_path, monkeypatch):
    main, _ = fake

    def raises(argv):
        raise ValueError("a bug in train.py\nits last line")
    monkeypatch.setattr(train, "main", raises)
    mentions(error_of(main, "--modes=pre"), "pre_lr0.001_s1337: its last line (nothing has run)")
    monkeypatch.setattr(train, "main", lambda argv: 1 / 0)
    mentions(error_of(main, "--modes=pre"), "ZeroDivisionError: division by zero")

    def syntax_error(argv):  # python prints the file's line and a caret first
        raise SyntaxError("invalid syntax", ("train.py", 3, 5, "x = = 1\n"))
    monkeypatch.setattr(train, "main", syntax_error)
    assert error_of(main, "--modes=pre").endswith(
        ": SyntaxError: invalid syntax (nothing has run)")
    assert not (tmp_path / "out").exists() and "WORLD_SIZE" not in os.environ


def test_a_run_folder_of_other_settings_stops_all_but_a_moved_folder_or_a_new_setting_does_not(
        tmp_path):
    run = dict(dir=tmp_path / "run",
               settings=dict(out_dir="here", data_dir="mine", n_layer=4, dropout=0.1))
    run["dir"].mkdir()
    (run["dir"] / "config.json").write_text(
        json.dumps(dict(config=dict(out_dir="elsewhere", data_dir="data", n_layer=4))))
    # out_dir moved, the data prepared elsewhere, dropout newer than the run: the same run
    ablate.check_not_stale([run])
    (run["dir"] / "config.json").write_text(
        json.dumps(dict(config=dict(out_dir="here", data_dir="data", n_layer=2))))
    message = error_of(ablate.check_not_stale, [dict(run, dir=tmp_path / "none"), run])
    mentions(message, str(run["dir"]), "n_layer=2", "not 4", "delete it", "another out_dir")


@pytest.mark.parametrize("arg, hint", [
    ("--mode=pre", "--modes"),  # ablate.py's own first, not norm_mode
    ("--seed_list=1", "--seeds"),
    ("--dropuot=0.1", "'dropout'"),
    ("--zzzzzz=1", "python ablate.py --help"),
])
def test_an_unknown_setting_is_one_line_with_a_did_you_mean_from_ablates_settings_first(arg, hint):
    mentions(error_of(ablate.configure, [arg]), arg, hint)
    # its own, with or without ablate_
    ablate.configure(["--ablate_modes=pre", "--norm_mode=post", "--seeds=1"])


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_of_ablate_stops_the_runs_in_progress_starts_no_other_and_puts_its_handlers_back(
        fake, tmp_path, stop):
    """Ctrl-C, or SIGTERM to ablate.py alone (a scheduler's): each running train.py gets SIGTERM (it
    saves a checkpoint and exits), the runs not started never start, and the stop ends ablate.py
    saying how to go on."""
    main, calls = fake
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    timer = threading.Timer(3.0, os.kill, (os.getpid(), stop))
    timer.start()
    with pytest.raises(KeyboardInterrupt) as e:
        main("--modes=pre,post,deep", "--seeds=99", "--jobs=2")
    timer.cancel()
    # what run_cli prints after 'interrupted: '
    assert e.value.args == ("run the same command again to go on",)
    trained = [c["args"]["norm_mode"] for c in calls() if "dry_run" not in c["args"]]
    assert sorted(trained) == ["post", "pre"]  # two at a time: deep never started
    logs = {m: (tmp_path / "out" / "ablate" / f"{m}_lr0.001_s99" / "train.log") for m in trained}
    assert all(f"stopped {m}" in log.read_text() for m, log in logs.items())  # each got its SIGTERM
    assert {s: signal.getsignal(s) for s in before} == before and not ablate.RUNNING


def test_each_progress_line_is_flushed_as_its_run_ends(fake, tmp_path):
    """Through a pipe (nohup, tee, a scheduler's log) each line shows when its run ends, not when
    all have."""
    class Stream(io.StringIO):
        def flush(self):
            flushed.append(self.getvalue())
    flushed, out = [], Stream()
    with contextlib.redirect_stdout(out):
        ablate.main([f"--out_dir={tmp_path / 'out'}", "--modes=pre,post", "--n_layer=2",
                     "--n_head=2", "--n_embd=32"])
    lines = [line for line in out.getvalue().splitlines() if line.startswith("[")]
    assert len(lines) == 2 and all(any(f.endswith(line + "\n") for f in flushed) for line in lines)


def test_each_run_logs_layer_stats_unless_told_not_to_and_a_tripled_rate_is_the_rounded_product(
        tmp_path):
    [pre, simple] = ablate.plan_runs(ablate.configure(["--modes=pre,simplenorm",
                                                        "--learning_rate=6e-4", "--min_lr=6e-5"]),
                                     tmp_path)
    assert pre["settings"]["log_layer_stats"] is True  # the per-block figures need them
    assert simple["lr"] == simple["settings"]["learning_rate"] == 0.0018
    assert simple["name"] == "simplenorm_lr0.0018_s1337"
    # the same ratio
    assert simple["settings"]["min_lr"] == 0.00018 and simple["group"] == "simplenorm_lr0.0018"
    [pre] = ablate.plan_runs(ablate.configure(["--modes=pre", "--log_layer_stats=False"]), tmp_path)
    assert pre["settings"]["log_layer_stats"] is False


def test_an_out_dir_or_figures_folder_that_cannot_be_written_is_one_line_before_any_run(tmp_path):
    """Empty, a file, a symlink loop, /proc: one line naming the setting, nothing made or
    started."""
    (tmp_path / "file").write_text("mine")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for setting, path, says in (("out_dir", "", "out_dir is empty"),
                                ("out_dir", tmp_path / "file", "a file"),
                                ("out_dir", tmp_path / "loop", "leads nowhere"),
                                ("figures", "/proc/nope", "cannot write in /proc")):
        got = error_of(ablate_main, f"--{setting}={path}", "--modes=pre", "--max_iters=1")
        assert says in got and setting in got, got
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "loop"]


def test_a_runs_config_json_of_the_wrong_shape_is_one_line(tmp_path):
    """ablate.py reads each run's config.json to find a stale run: a folder, not JSON, or not
    train.py's."""
    args = [f"--out_dir={tmp_path}", "--modes=pre", "--seeds=1", "--max_iters=1", "--dry_run=True"]
    path = tmp_path / "ablate" / "pre_lr0.001_s1" / "config.json"
    # each with what reading it raised
    for make, why in ((lambda: path.mkdir(parents=True), "IsADirectoryError"),
                      (lambda: path.write_text("{"), "JSONDecodeError"),
                      (lambda: path.write_text("[1]"), "TypeError"),
                      (lambda: path.write_text('{"config": 3}'), "AttributeError")):
        if path.is_dir():
            path.rmdir()
        make()
        got = error_of(ablate_main, *args)
        mentions(got, f"{path} is not train.py's config.json", why, "move it away")
