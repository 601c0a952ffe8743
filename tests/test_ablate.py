"""ablate.py's promises: a tiny ablation of every mode and preset end to end, skip and resume, divergence as a
result, a size sweep's tables and figures."""
import colorsys
import contextlib
import io
import json
import math
import os
import shutil
import statistics
import time

import matplotlib.colors
import matplotlib.image
import pytest

import ablate
import configurator
import plots
from configurator import ENTRIES, PRESETS
from conftest import ROOT, error_of
from model import NORM_MODES

TINY = ["--dataset=tiny", "--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=32", "--batch_size=4",
        "--eval_iters=2", "--eval_interval=5", "--log_interval=5", "--warmup_iters=2", "--max_iters=10",
        "--learning_rate=3e-3", "--seeds=1"]
COLUMNS = ["mode", "settings", "lr", "seeds", "final val loss", "− pre, same seed", "best val loss", "diverged",
           "tokens/s", "time/run"]
PLOTS = ["val_loss.png", "lr.png", "grad_norm.png", "resid_rms.png", "angle.png"]


def ablate_main(*args):
    """ablate.main in this process (its runs are processes of their own); returns what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ablate.main(list(args))
    return out.getvalue()


def table_rows(results_md):
    """results.md's table as a list of {column: cell}, checking the header."""
    lines = [line for line in results_md.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    assert cells[0] == COLUMNS and set("".join(cells[1])) <= set("-|")
    return [dict(zip(COLUMNS, row)) for row in cells[2:]]


def log_events(folder):
    return [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]


def mtimes(root):
    return {p: p.stat().st_mtime_ns for p in root.glob("*/*") if p.name in ("log.jsonl", "ckpt.pt")}


@pytest.fixture(scope="module")
def ablation(data_dir, tmp_path_factory):
    """Every mode and preset at lr 3e-3, one seed, ten steps: (the arguments, out_dir/ablate, what ablate.py
    printed)."""
    out = tmp_path_factory.mktemp("out")
    args = [f"--data_dir={data_dir}", f"--out_dir={out}", *TINY, "--modes=all", "--lrs=3e-3", "--jobs=2"]
    return args, out / "ablate", ablate_main(*args)


def test_an_ablation_of_every_mode_trains_each_run_and_tables_its_final_val_loss(ablation):
    _, root, printed = ablation
    assert sorted(line.split(":")[0].split("] ")[1] for line in printed.splitlines() if line.startswith("[")) \
        == sorted(f"{mode}_lr0.003_s1" for mode in ENTRIES)
    rows = table_rows((root / "results.md").read_text())
    assert [row["mode"] for row in rows] == list(ENTRIES) == [*NORM_MODES, "peri", "dyt"]
    for row in rows:
        end = log_events(root / f"{row['mode']}_lr0.003_s1")[-1]
        assert end["event"] == "end" and end["status"] == "finished" and end["iter"] == 10
        assert row["final val loss"] == f"{end['final_val_loss']:.4f}"  # one seed: no ± std
        assert (row["lr"], row["seeds"], row["diverged"]) == ("0.003", "1", "no")
        assert row["time/run"].endswith(" s")  # a few seconds each
    groups = json.loads((root / "results.json").read_text())["groups"]
    assert [(g["mode"], g["finished"], g["diverged"]) for g in groups] == [(mode, 1, 0) for mode in ENTRIES]
    assert groups[0]["final_val_loss"][0] == pytest.approx(float(rows[0]["final val loss"].split()[0]), abs=1e-4)


def test_the_gap_to_pre_is_each_runs_final_loss_less_pres_from_the_logs(ablation):
    _, root, _ = ablation
    final = {row["mode"]: log_events(root / f"{row['mode']}_lr0.003_s1")[-1]["final_val_loss"]
             for row in table_rows((root / "results.md").read_text())}
    for row in table_rows((root / "results.md").read_text()):
        gap = "—" if row["mode"] == "pre" else f"{final[row['mode']] - final['pre']:+.4f}"
        assert row["− pre, same seed"] == gap, row["mode"]


def test_the_gap_to_pre_pairs_seeds_and_takes_pre_at_the_base_lr_for_a_tripled_simplenorm():
    """Seeds pair by number (a seed pre lacks is left out); simplenorm at 3x compares with pre at the base rate,
    a run at another rate of an lr sweep with pre at that rate; a sweep key of another mode is not pre's point."""
    plan = dict(base=dict(learning_rate=1e-3), given={}, entry={})
    run = lambda seed, loss, status="finished": dict(seed=seed, final_val_loss=loss, status=status)
    group = lambda mode, lr, runs, tripled=False, sweep={}: dict(mode=mode, lr=lr, runs=runs, tripled=tripled,
                                                                sweep=sweep)
    pre = [group("pre", 1e-3, [run(1, 2.0), run(2, 3.0), run(3, 9.0, "failed")]),
           group("pre", 3e-3, [run(1, 5.0), run(2, 5.0)])]
    simple = group("simplenorm", 3e-3, [run(1, 2.5), run(2, 3.1), run(3, 1.0), run(4, 1.0)], tripled=True)
    mean, std = plots.mean_std([2.5 - 2.0, 3.1 - 3.0])
    assert plots.gap_to_pre(simple, pre + [simple], plan) == dict(mean=mean, std=std, seeds=2)
    geo = group("geonorm", 3e-3, [run(1, 4.0)], sweep={"geo_alpha": 3.0})
    assert plots.gap_to_pre(geo, pre + [geo], plan) == dict(mean=-1.0, std=0.0, seeds=1)
    wide = group("geonorm", 1e-3, [run(1, 4.0)], sweep={"n_embd": 64})  # pre has no n_embd 64 here
    assert plots.gap_to_pre(wide, pre + [wide], plan) is None and plots.gap_to_pre(pre[0], pre, plan) is None


def test_a_group_with_no_finished_run_shows_its_gravest_status():
    """A sweep drawn half-way (--figures) tables the runs it has not reached as "not run", not as failures."""
    group = lambda *statuses: dict(runs=[dict(status=s) for s in statuses], diverged=statuses.count("diverged"))
    shown = [plots.no_result(group(*s)) for s in [("not run", "not run"), ("failed", "interrupted"),
                                                   ("not run", "interrupted"), ("failed", "diverged")]]
    assert shown == ["not run", "failed", "interrupted", "diverged"]


def test_a_preset_runs_as_the_settings_it_names(ablation):
    """peri is sandwich with embed_norm, dyt pre with norm_type='dyt': each run gets its preset's settings and
    the others keep train.py's defaults."""
    _, root, _ = ablation
    config = {entry: json.loads((root / f"{entry}_lr0.003_s1" / "config.json").read_text())["config"]
              for entry in ("peri", "dyt", "sandwich", "pre")}
    for entry, settings in PRESETS.items():
        assert {k: config[entry][k] for k in settings} == settings
    assert (config["sandwich"]["embed_norm"], config["pre"]["norm_type"]) == (False, "norm")


def test_every_plot_is_a_valid_png(ablation):
    _, root, _ = ablation
    for name in PLOTS:
        assert (root / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        height, width, _ = matplotlib.image.imread(root / name).shape
        assert height > 100 and width > 100, name


def test_the_layer_stats_behind_the_per_layer_plots_are_logged(ablation):
    _, root, _ = ablation
    for mode in ENTRIES:
        stats = [e for e in log_events(root / f"{mode}_lr0.003_s1") if e["event"] == "layer_stats"]
        assert [s["iter"] for s in stats] == [0, 5, 10] and all(len(s["angle"]) == 2 for s in stats), mode


def test_a_rerun_skips_finished_runs_without_touching_them(ablation):
    args, root, _ = ablation
    before = mtimes(root)
    printed = ablate_main(*args)
    assert mtimes(root) == before and len(before) == 2 * len(ENTRIES)
    assert sum(": skipped, val loss" in line for line in printed.splitlines()) == len(ENTRIES)


def test_a_run_with_a_checkpoint_but_no_end_resumes_from_it(ablation, tmp_path):
    args, root, _ = ablation
    shutil.copytree(root, tmp_path / "ablate")  # a stopped ablation: pre's log lost its end line
    log = tmp_path / "ablate" / "pre_lr0.003_s1" / "log.jsonl"
    log.write_text("".join(line + "\n" for line in log.read_text().splitlines()[:-1]))
    printed = ablate_main(*args, f"--out_dir={tmp_path}")
    assert "pre_lr0.003_s1: resumed" in printed and "geonorm_lr0.003_s1: skipped" in printed
    events = log_events(log.parent)
    assert [e["event"] for e in events].count("end") == 1 and events[-1]["status"] == "finished"
    evals = [e["iter"] for e in events if e["event"] == "eval"]
    assert evals == sorted(set(evals))  # no step logged twice


def test_changed_settings_stop_before_reusing_a_finished_run(ablation):
    args, root, _ = ablation
    before = mtimes(root)
    with pytest.raises(SystemExit, match=r"_lr0.003_s1 was trained with max_iters=10, not 20: delete it"):
        ablate_main(*args, "--max_iters=20")
    assert mtimes(root) == before


def test_no_run_that_finished_is_an_error_exit_with_no_empty_figures_and_a_true_header(tmp_path, monkeypatch,
                                                                                      capsys, recwarn):
    """Every run failed (here: nothing ran): results.md says so, no figure is drawn (matplotlib's "No artists"
    warnings and empty PNGs were), the exit is an error naming the runs; the header gives the threads the
    runs get (OMP_NUM_THREADS when it is set)."""
    monkeypatch.setattr(ablate, "check_before_training", lambda *args: None)
    monkeypatch.setattr(ablate, "execute", lambda run, nproc, env, _: (f"ran with {env['OMP_NUM_THREADS']}", 0))
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    with pytest.raises(SystemExit) as e:
        ablate.main([f"--out_dir={tmp_path}", "--modes=pre,geonorm", "--lrs=1e-3"])
    assert str(e.value.code) == ("error: of 2 runs, 2 did not finish (pre_lr0.001_s1337, geonorm_lr0.001_s1337:"
                                 " see their train.log)")
    printed = capsys.readouterr().out
    assert "2 runs in" in printed and "3 threads per process (OMP_NUM_THREADS)" in printed
    assert "ran with 3" in printed
    assert not list((tmp_path / "ablate").glob("*.png")) and "none finished" in printed
    assert not [str(w.message) for w in recwarn]


@pytest.mark.parametrize("args, message", [
    (["--seeds=1,-1"], "pre_lr0.003_s-1: seed must be in [0, "),  # the second run's
    (["--n_head=3"], "pre_lr0.003_s1: n_embd=32 is not divisible by n_head=3"),
    (["--nproc=2", "--gradient_accumulation_steps=3"], "pre_lr0.003_s1: gradient_accumulation_steps=3 does not split over 2 processes"),
])
def test_every_planned_run_is_checked_before_any_starts(args, message, data_dir, tmp_path, monkeypatch):
    """train.py --dry_run checks each run's settings as one of its nproc processes: a mistake in any planned
    run is one line before any run starts, and out_dir is as it was."""
    (tmp_path / "notes.txt").write_text("the user's own")
    monkeypatch.setattr(ablate, "execute", lambda *args: pytest.fail("a run started"))
    args = [f"--data_dir={data_dir}", f"--out_dir={tmp_path}", *TINY, "--modes=pre", *args]
    assert message in error_of(ablate_main, *args)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_a_diverged_run_is_a_result_not_a_crash(data_dir, tmp_path):
    ablate_main(f"--data_dir={data_dir}", f"--out_dir={tmp_path}", *TINY, "--modes=pre", "--lrs=1e6")
    end = log_events(tmp_path / "ablate" / "pre_lr1e+06_s1")[-1]
    assert end["status"] == "diverged" and end["iter"] < 10  # lr 1e6 really blows up the weights
    [row] = table_rows((tmp_path / "ablate" / "results.md").read_text())
    assert (row["final val loss"], row["diverged"]) == ("diverged", "1/1")
    [group] = json.loads((tmp_path / "ablate" / "results.json").read_text())["groups"]
    assert group["diverged"] == 1 and group["runs"][0]["status"] == "diverged"
    for name in ("val_loss.png", "lr.png"):
        assert (tmp_path / "ablate" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_whose_last_evaluation_is_not_finite_is_tabled_as_diverged(data_dir, tmp_path):
    """Finite training losses to the end, but a NaN val loss at the last evaluation: diverged, not a loss of nan."""
    run = tmp_path / "ablate" / "pre_lr0.003_s1"
    run.mkdir(parents=True)
    log = [dict(event="eval", iter=0, train_loss=4.1, val_loss=4.1),
           dict(event="eval", iter=10, train_loss=math.nan, val_loss=math.nan),
           dict(event="end", status="finished", iter=10, best_val_loss=4.1, final_val_loss=math.nan, tokens_per_s=1e3)]
    (run / "log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in log))
    printed = ablate_main(f"--data_dir={data_dir}", f"--out_dir={tmp_path}", *TINY, "--modes=pre")
    assert "pre_lr0.003_s1: skipped, DIVERGED at step 10" in printed
    [row] = table_rows((tmp_path / "ablate" / "results.md").read_text())
    assert (row["final val loss"], row["diverged"]) == ("diverged", "1/1")


def test_sweep_keys_vary_only_their_mode_and_simplenorm_defaults_to_3x_lr(tmp_path):
    plan = ablate.configure(["--modes=pre,geonorm,simplenorm", "--seeds=1,2", "--learning_rate=1e-3", "--min_lr=0",
                             "--sweep=geo_alpha=1,3", "--sweep=weight_decay=0.0,0.1"])
    runs = ablate.plan_runs(plan, tmp_path)
    names = {r["name"] for r in runs if r["seed"] == 1}
    assert names == {"pre_lr0.001_s1_weight_decay0.0", "pre_lr0.001_s1_weight_decay0.1",
                     "simplenorm_lr0.003_s1_weight_decay0.0", "simplenorm_lr0.003_s1_weight_decay0.1",
                     *(f"geonorm_lr0.001_s1_geo_alpha{a}_weight_decay{w}" for a in (1.0, 3.0) for w in (0.0, 0.1))}
    assert len(runs) == 2 * len(names)
    simple = next(r for r in runs if r["mode"] == "simplenorm")
    assert simple["settings"]["learning_rate"] == 3e-3 and simple["tripled"] and "geo_alpha" not in simple["settings"]


def test_entry_settings_are_an_entrys_own_over_the_configs_but_not_the_sweeps(tmp_path):
    """ablate_entry_settings: untied heads for some entries, ngpt's own schedule (min_lr too, which ablate.py
    otherwise sets at the config's ratio); a sweep point still wins; a preset gets its settings and its name."""
    config = tmp_path / "config.py"
    config.write_text("tie_embeddings = True\nablate_modes = ['pre', 'post', 'ngpt', 'peri']\n"
                      "ablate_entry_settings = {'post': {'tie_embeddings': False}, 'ngpt': {'warmup_iters': 0, "
                      "'weight_decay': 0.0, 'min_lr': 0.0}}\n")
    runs = {r["name"]: r for r in ablate.plan_runs(ablate.configure([str(config), "--learning_rate=2e-3",
                                                                     "--min_lr=2e-4"]), tmp_path)}
    assert list(runs) == ["pre_lr0.002_s1337", "post_lr0.002_s1337", "ngpt_lr0.002_s1337", "peri_lr0.002_s1337"]
    settings = {name.split("_")[0]: r["settings"] for name, r in runs.items()}
    assert [settings[m]["tie_embeddings"] for m in ("pre", "post", "ngpt", "peri")] == [True, False, True, True]
    assert {k: settings["ngpt"][k] for k in ("warmup_iters", "weight_decay", "min_lr", "learning_rate")} == dict(
        warmup_iters=0, weight_decay=0.0, min_lr=0.0, learning_rate=2e-3)
    assert settings["pre"]["min_lr"] == 2e-4 and "weight_decay" not in settings["pre"]  # train.py's default
    assert {k: settings["peri"][k] for k in ("norm_mode", "embed_norm")} == dict(norm_mode="sandwich", embed_norm=True)
    assert runs["post_lr0.002_s1337"]["own"] == {"tie_embeddings": False}
    swept = ablate.plan_runs(ablate.configure([str(config), "--sweep=tie_embeddings=True"]), tmp_path)
    assert all(r["settings"]["tie_embeddings"] for r in swept)
    for text, message in (("{'rezero': {'dropout': 0.1}}", "unknown mode(s) rezero"),
                          ("{'pre': {'learning_rate': 1e-3, 'seed': 2}}",
                           "entry_settings of pre sets learning_rate, seed, which ablate.py sets per run: use --modes"),
                          ("{'post': 1}", "entry_settings of post must be a dict of train.py settings, got 1"),
                          ("{'pre': {'dropuot': 0.1}}", "did you mean 'dropout'"),
                          ("{'pre': {'dropout': 'x'}}", "dropout must be float")):
        config.write_text(f"ablate_entry_settings = {text}\n")
        assert message in error_of(ablate.configure, [str(config)]), text


def test_sweep_keys_of_a_presets_mode_vary_the_preset_and_seeds_at_keeps_seeds_to_its_points(tmp_path):
    """sandwich_* keys vary sandwich and peri (sandwich with embed_norm), dyt_* keys dyt only; a size varies
    every entry. seeds_at: the seeds after the first only where n_layer is 4."""
    plan = ablate.configure(["--modes=pre,sandwich,peri,dyt", "--seeds=1,2,3", "--learning_rate=1e-3",
                             "--sweep=sandwich_depth_scaled=False,True", "--sweep=dyt_alpha_attn=0.5,1.0",
                             "--sweep=n_layer=2,4", "--seeds_at={'n_layer': 4}"])
    runs = ablate.plan_runs(plan, tmp_path)
    per_entry = {e: sorted({r["name"].partition("_s")[2].partition("_")[2] for r in runs if r["mode"] == e})
                 for e in ("pre", "sandwich", "peri", "dyt")}
    assert per_entry["pre"] == ["n_layer2", "n_layer4"]
    assert per_entry["peri"] == per_entry["sandwich"] == [f"sandwich_depth_scaled{b}_n_layer{n}"
                                                          for b in (False, True) for n in (2, 4)]
    assert per_entry["dyt"] == [f"dyt_alpha_attn{a}_n_layer{n}" for a in (0.5, 1.0) for n in (2, 4)]
    assert {r["seed"] for r in runs if r["sweep"]["n_layer"] == 4} == {1, 2, 3}
    assert {r["seed"] for r in runs if r["sweep"]["n_layer"] == 2} == {1}
    assert len(runs) == (2 + 4 + 4 + 4) + 2 * (1 + 2 + 2 + 2)  # seeds 2 and 3 at n_layer 4 only


def test_dry_run_checks_every_run_and_trains_none(data_dir, tmp_path, capsys):
    """--dry_run is ablate.py's own (not passed on to the runs, which would then never finish): train.py checks
    each run, and nothing is written."""
    args = [f"--data_dir={data_dir}", f"--out_dir={tmp_path}", *TINY, "--modes=pre,dyt", "--dry_run"]
    assert ablate_main(*args).strip() == (f"dry run: every check passed; 2 of 2 runs would train in "
                                          f"{tmp_path / 'ablate'}, nothing written")
    assert error_of(ablate.main, [*args, "--n_head=3"]) == ("error: pre_lr0.003_s1: n_embd=32 is not divisible by "
                                                            "n_head=3: choose n_head among the divisors of n_embd "
                                                            "(nothing has run)")
    assert not any(tmp_path.iterdir())


def test_a_sweep_that_varies_no_entry_or_undoes_a_preset_and_a_seeds_at_off_the_sweep_are_one_line_errors():
    """A typo must not triple a ladder's compute or drop its seeds silently: seeds_at names swept points only."""
    for args, message in (
            (["--modes=pre,deep", "--sweep=geo_alpha=1,3"], "--sweep=geo_alpha=... varies none of the modes pre, deep"),
            (["--modes=pre,dyt", "--sweep=norm_type=norm,dyt"], "would undo the preset dyt, which sets norm_type"),
            (["--modes=pre", "--sweep=n_layer=2,4", "--seeds_at={'n_layers': [4]}"],
             "unknown setting 'n_layers' in seeds_at: did you mean 'n_layer'?"),
            (["--modes=pre", "--sweep=n_layer=2,4", "--seeds_at={'n_embd': [64]}"],
             "seeds_at names n_embd, which is not swept: add --sweep=n_embd=... or drop it"),
            (["--modes=pre", "--sweep=n_layer=2,4", "--seeds_at={'n_layer': [16]}"],
             "seeds_at gives n_layer [16]: choose among its sweep's values 2, 4"),
            (["--modes=pre", "--sweep=n_layer=2,4", "--seeds_at={'n_layer': []}"], "seeds_at gives n_layer []")):
        assert message in error_of(ablate.configure, args), args


def test_dyt_keys_vary_every_entry_under_norm_type_dyt_and_only_those():
    plan = ablate.configure(["--modes=pre,sandwich,post", "--norm_type=dyt", "--sweep=dyt_alpha_attn=0.5,0.8"])
    assert [r["name"] for r in ablate.plan_runs(plan, ROOT)] == [
        f"{m}_lr0.001_s1337_dyt_alpha_attn{a}" for m in ("pre", "sandwich", "post") for a in (0.5, 0.8)]
    plan = ablate.configure(["--modes=pre,dyt", "--sweep=dyt_alpha_attn=0.5,0.8"])
    assert [r["name"] for r in ablate.plan_runs(plan, ROOT)] == [
        "pre_lr0.001_s1337", "dyt_lr0.001_s1337_dyt_alpha_attn0.5", "dyt_lr0.001_s1337_dyt_alpha_attn0.8"]


def test_a_runs_time_adds_its_sittings_when_it_resumes_and_starts_anew_when_it_starts_again(tmp_path, monkeypatch):
    """seconds.json: a resumed run's sittings add up; a run that starts from scratch (no checkpoint: it crashed
    before saving one) drops the time of the attempt that left nothing."""
    monkeypatch.setattr(ablate, "run_logged", lambda *args: time.sleep(0.2) or 0)
    run = dict(dir=tmp_path / "pre_lr0.001_s1", settings=dict(seed=1))
    run["dir"].mkdir()
    (run["dir"] / "seconds.json").write_text('{"seconds": 100.0}')
    ablate.execute(run, 1, {}, dict(tasks=""))
    assert 0.2 <= json.loads((run["dir"] / "seconds.json").read_text())["seconds"] < 1  # anew
    monkeypatch.setattr(ablate, "train_args", lambda run: ["--init_from=resume"])  # as with a checkpoint
    ablate.execute(run, 1, {}, dict(tasks=""))
    assert 0.4 <= json.loads((run["dir"] / "seconds.json").read_text())["seconds"] < 2  # the two sittings


def test_a_title_counts_the_seeds_of_its_groups_as_a_range_where_they_differ():
    plan = dict(base=dict(dataset="tiny", n_layer=4, n_embd=32, learning_rate=1e-3, max_iters=10), sweep={})
    groups = [dict(sweep={}, finished=1, diverged=0), dict(sweep={}, finished=2, diverged=1)]
    assert plots.setting(groups, plan).endswith("10 steps, 1–3 seeds")
    assert plots.setting(groups[:1], plan).endswith("10 steps, 1 seed")


def test_a_size_tables_cell_says_how_many_seeds_finished_and_diverged():
    plan = dict(base=dict(n_layer=4, learning_rate=1e-3), sweep={"n_layer": [2, 4]}, lrs=None)
    group = lambda n, finished, diverged, loss: dict(mode="pre", lr=1e-3, tripled=False, sweep={"n_layer": n},
                                                     finished=finished, diverged=diverged, final_val_loss=loss,
                                                     runs=[])
    groups = [group(2, 1, 2, (1.4, 0.0)), group(4, 3, 0, (1.3, 0.01))]
    rows = plots.size_table(groups, plan, "n_layer").splitlines()
    assert rows[2] == "| pre | 1.4000 (1, 2 diverged) | 1.3000 ± 0.0100 (3) |"
    groups = [group(2, 0, 3, None), group(4, 1, 0, (1.3, 0.0))]
    assert plots.size_table(groups, plan, "n_layer").splitlines()[2] == "| pre | diverged | 1.3000 |"


def test_ablate_settings_in_a_config_file_are_not_passed_to_train(tmp_path):
    config = tmp_path / "config.py"
    config.write_text("n_layer = 2\nlearning_rate = 2e-3\nmin_lr = 2e-4\nablate_modes = ['deep', 'geonorm']\n"
                      "ablate_lrs = [1e-3]\nablate_sweep = {'geo_decay': ['none', 'sqrt']}\n")
    plan = ablate.configure([str(config), "--sweep=geo_max_angle=None,0.5"])
    assert plan["modes"] == ["deep", "geonorm"] and plan["lrs"] == [1e-3]
    assert plan["sweep"] == {"geo_decay": ["none", "sqrt"], "geo_max_angle": [None, 0.5]}
    run, *geonorm = ablate.plan_runs(plan, tmp_path)  # geo_* keys do not vary deep
    assert run["mode"] == "deep" and len(geonorm) == 4
    assert not any(k.startswith("ablate_") for k in run["settings"])
    assert run["settings"]["min_lr"] == pytest.approx(1e-4)  # the config's lr/10 ratio, at the run's lr
    config.write_text("ablate_seed = [1, 2]\n")
    with pytest.raises(SystemExit, match="unknown setting 'ablate_seed'.*did you mean 'ablate_seeds'"):
        ablate.configure([str(config)])


def test_ablate_settings_are_checked_and_modes_parsed_as_bench_parses_them(capsys):
    assert ablate.configure(["--modes=geonorm,pre,geonorm"])["modes"] == ["geonorm", "pre"]  # each once
    assert configurator.parse_modes("all", NORM_MODES) == list(NORM_MODES)
    with pytest.raises(SystemExit, match=r"unknown mode\(s\) rmsnorm: choose from post, pre"):
        ablate.configure(["--modes=pre,rmsnorm"])
    with pytest.raises(SystemExit, match="ablate_jobs must be at least 1, got 0"):
        ablate.configure(["--jobs=0"])
    with pytest.raises(SystemExit, match="ablate.py sets seed per run"):
        ablate.configure(["--sweep=seed=1,2"])
    plan = ablate.configure(["--seeds=3", "--lrs=1", "--ablate_jobs=2", "--eval_tasks=piqa,hellaswag"])
    assert (plan["seeds"], plan["lrs"], plan["jobs"], plan["eval"]["tasks"]) == ([3], [1.0], 2, "piqa,hellaswag")
    with pytest.raises(SystemExit) as exit:
        ablate.configure(["--help"])
    assert exit.value.code == 0
    printed = capsys.readouterr().out
    assert printed.startswith("Ablate the norm modes") and "\nablate_sweep = {}\n" in printed


def test_the_llama_char_ablation_is_the_gpt2_one_on_the_llama_block():
    gpt2, llama = (ablate.configure([os.path.join(ROOT, "configs", name)])
                   for name in ("ablate_shakespeare_char.py", "ablate_llama_char.py"))
    assert {k for k in llama["base"] if llama["base"][k] != gpt2["base"][k]} == {"arch", "multiple_of", "out_dir"}
    assert [llama[k] for k in ("modes", "seeds", "lrs", "jobs")] == [gpt2[k] for k in ("modes", "seeds", "lrs", "jobs")]


def fake_run(folder, seed, status="finished", n_layer=2):
    """A run's log.jsonl as train.py writes it, without training: evaluations at 0, 5 and 10 (a diverged run
    stops after 5) with layer stats, a train line and the end line."""
    folder.mkdir(parents=True)
    steps = [0, 5] if status == "diverged" else [0, 5, 10]
    events = []
    for step in steps:
        loss = 4.2 - 0.1 * step - 0.01 * seed
        events += [dict(event="eval", iter=step, train_loss=loss, val_loss=loss, lr=1e-3),
                   dict(event="layer_stats", iter=step, grad_norm=[0.01 * seed] * n_layer, resid_rms=[1.0] * n_layer,
                        angle=[0.5] * n_layer)]
    events.append(dict(event="train", iter=5, train_loss=3.7, tokens_per_s=1000.0))
    if status != "interrupted":
        events.append(dict(event="end", status=status, iter=steps[-1]))
    (folder / "log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


@pytest.fixture
def drawn(tmp_path, monkeypatch):
    """ablate.py --figures on fake finished ablations: draw(modes, runs) returns what it printed and the
    figures' titles, y labels and line colours by legend label."""
    figures = {}

    def record(fig, ax, title, path):
        lines = [line for a in fig.axes for line in a.get_lines() if not line.get_label().startswith("_")]
        figures[(title.split("\n")[0], path.parent.parent.name)] = dict(  # (title, the ablation)
            ylabel=fig.axes[0].get_ylabel(), colors={line.get_label(): line.get_color() for line in lines})
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
        printed = ablate_main(f"--out_dir={out}", f"--data_dir={tmp_path / 'data'}", "--dataset=tiny",
                              "--learning_rate=1e-3", "--n_layer=2", "--max_iters=10", f"--modes={modes}",
                              "--lrs=1e-3", "--seeds=1,2", f"--figures={tmp_path / name / 'figures'}")
        return out, printed
    return draw, figures


def test_figures_are_drawn_from_a_finished_ablation_without_training(drawn, capsys):
    draw, figures = drawn
    out, printed = draw("a", "pre,geonorm", {("pre", 1): "finished", ("pre", 2): "finished",
                                             ("geonorm", 1): "finished", ("geonorm", 2): "diverged"})
    for name in PLOTS:
        assert (out / "figures" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    assert not list(out.glob("ablate/*/train.log")) and not (out / "ablate" / "results.md").exists()  # nothing ran
    assert "wrote val_loss.png, lr.png, grad_norm.png, resid_rms.png, angle.png" in printed
    [val_loss] = [f for (title, _), f in figures.items() if title.startswith("Validation loss")]
    assert val_loss["ylabel"] == "validation loss (nats per character)"
    assert set(val_loss["colors"]) == {"pre", "geonorm"}  # geonorm's finished seed; its diverged one unlabelled
    assert "not finished" not in capsys.readouterr().err


def test_a_mode_has_one_colour_in_every_figure_and_every_ablation(drawn):
    draw, figures = drawn
    draw("a", "pre,geonorm", {(m, s): "finished" for m in ("pre", "geonorm") for s in (1, 2)})
    draw("b", "geonorm,simplenorm,deep", {(m, s): "finished" for m in ("geonorm", "simplenorm", "deep")
                                          for s in (1, 2)})
    seen = {}
    for (title, ablation), figure in figures.items():
        for mode, color in figure["colors"].items():
            assert matplotlib.colors.to_hex(color) == matplotlib.colors.to_hex(plots.mode_color(mode)), (title, mode)
            seen.setdefault(mode, set()).add(ablation)
    assert seen == {"pre": {"a"}, "geonorm": {"a", "b"}, "simplenorm": {"b"}, "deep": {"b"}}
    assert len(figures) == 10  # five figures in each of the two ablations


def test_the_thirteen_entries_have_colours_of_their_own_and_the_first_six_keep_tab10s(monkeypatch):
    """Each mode and preset in a colour of its own; the six modes' colours are tab10's, as in the figures drawn
    before, so those figures stay the same; the presets take the last colours, so that a mode added later
    takes a free one and moves no entry's."""
    assert len(ENTRIES) == 13 and len({plots.mode_color(e) for e in ENTRIES}) == 13
    assert len(set(plots.MODE_COLORS)) == len(plots.MODE_COLORS) > len(ENTRIES)
    tab10 = matplotlib.colormaps["tab10"].colors
    assert [matplotlib.colors.to_rgb(c) for c in plots.MODE_COLORS[:10]] == list(tab10)
    before = {e: plots.mode_color(e) for e in ENTRIES}
    monkeypatch.setattr(plots, "NORM_MODES", (*NORM_MODES, "rezero"))
    assert {e: plots.mode_color(e) for e in ENTRIES} == before and plots.mode_color("rezero") not in before.values()


def test_the_variants_of_a_mode_are_shades_and_line_styles_of_its_colour():
    modes = {f"geonorm{i}": "geonorm" for i in range(12)} | {"pre": "pre"}
    styles = plots.styles(modes)
    assert styles["geonorm0"][0] == matplotlib.colors.to_rgb(plots.mode_color("geonorm"))
    assert styles["pre"][0] == matplotlib.colors.to_rgb(plots.mode_color("pre"))  # its first variant: the mode's own
    assert len(set(styles.values())) == len(styles)  # every variant told apart
    hue = colorsys.rgb_to_hls(*matplotlib.colors.to_rgb(plots.mode_color("geonorm")))[0]
    for key in modes:
        if key != "pre":
            assert colorsys.rgb_to_hls(*styles[key][0])[0] == pytest.approx(hue, abs=1e-6), key


def test_figures_of_an_ablation_that_never_ran_are_an_error(drawn):
    draw, _ = drawn
    with pytest.raises(SystemExit, match="no run of this ablation has finished in .*: give the config, settings"):
        draw("empty", "pre", {})


def test_figures_of_an_unfinished_ablation_name_the_runs_they_leave_out(drawn, capsys):
    draw, _ = drawn
    draw("half", "pre", {("pre", 1): "finished", ("pre", 2): "interrupted"})
    err = capsys.readouterr().err
    assert "note: 1 of 2 runs have not finished, and the figures leave them out: pre_lr0.001_s2" in err


# ------------------------------------------------------------------------------------------ a size sweep

@pytest.fixture(scope="module")
def ladder(data_dir, tmp_path_factory):
    """A depth ladder in small: pre and peri at 1 and 2 blocks, seeds 1 and 2 at 2 blocks only, a few steps:
    (the arguments, out_dir/ablate, what ablate.py printed)."""
    out = tmp_path_factory.mktemp("ladder")
    args = [f"--data_dir={data_dir}", f"--out_dir={out}", *TINY[:-1], "--max_iters=4", "--eval_interval=2",
            "--modes=pre,peri", "--seeds=1,2", "--sweep=n_layer=1,2", "--seeds_at={'n_layer': 2}", "--jobs=2"]
    return args, out / "ablate", ablate_main(*args)


SIZE_PLOTS = ["size.png", "params.png"] + [f"{name}_n_layer{n}.png" for n in (1, 2)
                                           for name in ("val_loss", "grad_norm", "angle")]


def test_a_size_sweep_tables_loss_and_time_per_size_and_draws_loss_against_size_and_parameters(ladder):
    _, root, printed = ladder
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == [
        "peri_lr0.003_s1_n_layer1", "peri_lr0.003_s1_n_layer2", "peri_lr0.003_s2_n_layer2",
        "pre_lr0.003_s1_n_layer1", "pre_lr0.003_s1_n_layer2", "pre_lr0.003_s2_n_layer2"]
    results = (root / "results.md").read_text()
    lines = results.splitlines()
    header, _, pre, peri, per_run, total = lines[lines.index("| mode | n_layer 1 | n_layer 2 |"):][:6]
    groups = json.loads((root / "results.json").read_text())["groups"]
    loss = {(g["mode"], g["sweep"]["n_layer"]): g["final_val_loss"] for g in groups}
    assert pre == f"| pre | {loss['pre', 1][0]:.4f} | {loss['pre', 2][0]:.4f} ± {loss['pre', 2][1]:.4f} (2) |"
    assert peri.startswith("| peri | ") and per_run.startswith("| time per run | ") and total.count(" s |") == 2
    final = {(r["name"]): log_events(root / r["name"])[-1]["final_val_loss"] for g in groups for r in g["runs"]}
    gaps = [final[f"peri_lr0.003_s{s}_n_layer2"] - final[f"pre_lr0.003_s{s}_n_layer2"] for s in (1, 2)]
    [peri2] = [g for g in groups if g["mode"] == "peri" and g["sweep"]["n_layer"] == 2]
    assert peri2["gap"] == dict(zip(("mean", "std"), plots.mean_std(gaps)), seeds=2)
    params = {(g["mode"], g["sweep"]["n_layer"]): g["params"] for g in groups}
    assert params["pre", 2] - params["pre", 1] == 12 * 32 ** 2 + 2 * 32  # a block: 12d² weights, 2 LayerNorms
    assert params["peri", 1] - params["pre", 1] == 2 * 32 + 32  # sandwich's 2 output norms, ln_emb
    for name in SIZE_PLOTS:
        assert f"![{name}]({name})" in results and (root / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    assert not (root / "val_loss.png").exists() and not (root / "lr.png").exists()  # one lr: no lr figure


def test_a_final_val_loss_over_two_seeds_is_the_mean_and_sample_stdev_of_each_runs_last_evaluation(ladder):
    """results.md's "final val loss" of a group with seeds 1 and 2, in its table and in the size table's cell,
    is statistics.mean ± statistics.stdev (n - 1) of the two runs' last eval val_loss in their log.jsonl."""
    _, root, _ = ladder
    results = (root / "results.md").read_text()
    table, sized = results.split("\nFinal val loss by n_layer")
    rows = [row for row in table_rows(table) if row["seeds"] == "2"]
    assert sorted((row["mode"], row["settings"].split()[-1]) for row in rows) == [("peri", "n_layer=2"),
                                                                                    ("pre", "n_layer=2")]
    for row in rows:
        last = [[e for e in log_events(root / f"{row['mode']}_lr0.003_s{seed}_n_layer2") if e["event"] == "eval"]
                [-1]["val_loss"] for seed in (1, 2)]
        mean, std = statistics.mean(last), statistics.stdev(last)
        assert std > 0 and row["final val loss"] == f"{mean:.4f} ± {std:.4f}", row["mode"]
        [cell] = [line for line in sized.splitlines() if line.startswith(f"| {row['mode']} | ")]
        assert cell.endswith(f" | {mean:.4f} ± {std:.4f} (2) |"), cell


def test_a_size_sweeps_figures_are_redrawn_from_its_finished_runs(ladder, tmp_path, monkeypatch):
    """--figures=DIR draws every figure again, without training; each figure's lines in their entries' colours,
    the figures at one size titled with it."""
    args, root, _ = ladder
    drawn, real_finish = {}, plots.finish
    def record(fig, ax, title, path):
        lines = [line for a in fig.axes for line in a.get_lines() if not line.get_label().startswith("_")]
        drawn[path.name] = title, {line.get_label(): line.get_color() for line in lines}
        real_finish(fig, ax, title, path)
    monkeypatch.setattr(plots, "finish", record)
    before = mtimes(root)
    printed = ablate_main(*args, f"--figures={tmp_path}")
    assert mtimes(root) == before and "wrote size.png, params.png, val_loss_n_layer1.png" in printed
    sized = "| mode | n_layer 1 |" + (root / "results.md").read_text().split("| mode | n_layer 1 |")[1].split("\n\n")[0]
    assert "\n" + sized + "\n\nwrote" in printed  # results.md's loss per mode and depth, printed too
    assert sorted(drawn) == sorted(SIZE_PLOTS) == sorted(p.name for p in tmp_path.iterdir())
    title, colors = drawn["size.png"]
    assert title.startswith("Final validation loss against depth") and "blocks 1–2 × 32" in title
    assert {k: matplotlib.colors.to_hex(c) for k, c in colors.items()} == {
        e: matplotlib.colors.to_hex(plots.mode_color(e)) for e in ("pre", "peri")}
    assert "blocks 2 × 32" in drawn["grad_norm_n_layer2.png"][0]
    assert set(drawn["angle_n_layer1.png"][1]) == {"pre", "peri"}
