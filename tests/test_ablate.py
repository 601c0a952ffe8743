"""ablate.py's promises: a tiny ablation of four modes and presets end to end, skip and resume,
divergence as a result, a size sweep's tables and figures."""
import json
import os
import re
import shutil
import statistics
import sys

import matplotlib.colors
import matplotlib.image
import pytest

import ablate
import plots
import results
from configurator import PRESETS
from conftest import (ABLATE_TINY, PLOTS, ablate_main, error_of, forked_runs, log_events, mentions,
                      table_rows)



def mtimes(root):
    return {p: p.stat().st_mtime_ns for p in root.glob("*/*") if p.name in ("log.jsonl", "ckpt.pt")}


# two modes and the two presets made of them (each mode trains in test_train.py and test_lab.py;
# what ablate.py plans for every one is tests/test_ablate_plan.py's): 4 runs, not all 13, to keep
# the suite within its time
MODES = ("pre", "sandwich", "peri", "dyt")


@pytest.fixture(scope="module", autouse=True)
def runs_forked():
    """Every run this file trains is forked from conftest's server: these tests read what runs
    leave; test_reliability.py stops real processes. Returns ablate's own run_logged."""
    with forked_runs() as real:
        yield real


def test_a_forked_run_is_to_ablate_what_a_new_python_is(runs_forked, tmp_path, monkeypatch):
    """The same exit status, and the same lines appended to the run's log, from a script that
    reads its arguments, working directory and environment, prints, and exits with a message."""
    script = tmp_path / "script.py"
    script.write_text("import os, sys\n"
                      "print(sys.argv[1:], os.getcwd(), os.environ['SEEN'])\n"
                      "sys.exit(f'error: {os.environ[\"OMP_NUM_THREADS\"]} threads')\n")
    monkeypatch.chdir(tmp_path)
    env = os.environ | {"SEEN": "yes", "OMP_NUM_THREADS": "3"}
    logs = {}
    for name, run_logged in ("new", runs_forked), ("forked", ablate.run_logged):
        logs[name] = tmp_path / f"{name}.log"
        logs[name].write_text("kept\n")
        assert run_logged([sys.executable, str(script), "--a=1"], logs[name], env) == 1
    assert logs["forked"].read_text() == logs["new"].read_text() == \
        f"kept\n['--a=1'] {tmp_path} yes\nerror: 3 threads\n"


def unchecked_ablation(*args):
    """ablate_main(*args) without the checks before training, a train.py --dry_run for each run, as
    long as the run itself: the fixtures' runs are valid ones, and the checks are the subject of
    test_every_planned_run_is_checked_before_any_starts and
    test_dry_run_checks_every_run_and_trains_none."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ablate, "check_before_training", lambda *_: None)
        return ablate_main(*args)


@pytest.fixture(scope="module")
def ablation(data_dir, tmp_path_factory):
    """MODES at lr 3e-3, one seed, ten steps: (the arguments, out_dir/ablate, what ablate.py
    printed)."""
    out = tmp_path_factory.mktemp("out")
    args = [f"--data_dir={data_dir}", f"--out_dir={out}", *ABLATE_TINY,
            f"--modes={','.join(MODES)}", "--lrs=3e-3", "--jobs=2"]
    return args, out / "ablate", unchecked_ablation(*args)


def test_an_ablation_trains_each_run_and_tables_its_final_val_loss(ablation):
    _, root, printed = ablation
    assert sorted(line.split(":")[0].split("] ")[1] for line in printed.splitlines()
                  if line.startswith("[")) \
        == sorted(f"{mode}_lr0.003_s1" for mode in MODES)
    rows = table_rows((root / "results.md").read_text())
    assert [row["mode"] for row in rows] == list(MODES)  # in the order given
    for row in rows:
        end = log_events(root / f"{row['mode']}_lr0.003_s1")[-1]
        assert end["event"] == "end" and end["status"] == "finished" and end["iter"] == 10
        assert row["final val loss"] == f"{end['final_val_loss']:.4f}"  # one seed: no ± std
        assert (row["lr"], row["seeds"], row["diverged"]) == ("0.003", "1", "no")
        assert row["time/run"].endswith(" s")  # a few seconds each
    recorded = json.loads((root / "results.json").read_text())
    groups = recorded["groups"]
    assert [(g["mode"], g["finished"], g["diverged"]) for g in groups] == \
        [(mode, 1, 0) for mode in MODES]
    assert recorded["race"] == []  # one rate: no entry has a best of its own
    assert groups[0]["final_val_loss"][0] == \
        pytest.approx(float(rows[0]["final val loss"].split()[0]), abs=1e-4)


def test_the_gap_to_pre_is_each_runs_final_loss_less_pres_from_the_logs(ablation):
    _, root, _ = ablation
    final = {row["mode"]: log_events(root / f"{row['mode']}_lr0.003_s1")[-1]["final_val_loss"]
             for row in table_rows((root / "results.md").read_text())}
    for row in table_rows((root / "results.md").read_text()):
        gap = "—" if row["mode"] == "pre" else f"{final[row['mode']] - final['pre']:+.4f}"
        assert row["− pre, same seed"] == gap, row["mode"]


def test_a_preset_runs_as_the_settings_it_names(ablation):
    """peri is sandwich with embed_norm, dyt pre with norm_type='dyt': each run gets its preset's
    settings and the others keep train.py's defaults."""
    _, root, _ = ablation
    config = {entry: json.loads((root / f"{entry}_lr0.003_s1" / "config.json")
                                .read_text())["config"]
              for entry in ("peri", "dyt", "sandwich", "pre")}
    for entry in ("peri", "dyt"):  # the presets this ablation trains
        settings = PRESETS[entry]
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
    for mode in MODES:
        stats = [e for e in log_events(root / f"{mode}_lr0.003_s1") if e["event"] == "layer_stats"]
        assert [s["iter"] for s in stats] == [0, 5, 10] \
            and all(len(s["angle"]) == 2 for s in stats), mode


def test_a_rerun_skips_finished_runs_without_touching_them(ablation):
    args, root, _ = ablation
    before = mtimes(root)
    printed = ablate_main(*args)
    assert mtimes(root) == before and len(before) == 2 * len(MODES)
    assert sum(": skipped, val loss" in line for line in printed.splitlines()) == len(MODES)


def test_a_run_with_a_checkpoint_but_no_end_resumes_from_it(ablation, tmp_path):
    args, root, _ = ablation
    shutil.copytree(root, tmp_path / "ablate")  # a stopped ablation: pre's log lost its end line
    log = tmp_path / "ablate" / "pre_lr0.003_s1" / "log.jsonl"
    log.write_text("".join(line + "\n" for line in log.read_text().splitlines()[:-1]))
    printed = ablate_main(*args, f"--out_dir={tmp_path}")
    assert "pre_lr0.003_s1: resumed" in printed and "sandwich_lr0.003_s1: skipped" in printed
    events = log_events(log.parent)
    assert [e["event"] for e in events].count("end") == 1 and events[-1]["status"] == "finished"
    evals = [e["iter"] for e in events if e["event"] == "eval"]
    assert evals == sorted(set(evals))  # no step logged twice


def test_changed_settings_stop_before_reusing_a_finished_run(ablation):
    args, root, _ = ablation
    before = mtimes(root)
    with pytest.raises(SystemExit,
                       match=r"_lr0.003_s1 was trained with max_iters=10, not 20: delete it"):
        ablate_main(*args, "--max_iters=20")
    assert mtimes(root) == before


@pytest.mark.parametrize("args, message", [
    (["--seeds=1,-1"], "pre_lr0.003_s-1: seed must be in [0, "),  # the second run's
    (["--nproc=2", "--gradient_accumulation_steps=3"],
     "pre_lr0.003_s1: gradient_accumulation_steps=3 does not split over 2 processes"),
])
def test_every_planned_run_is_checked_before_any_starts(args, message, data_dir, tmp_path,
                                                        monkeypatch):
    """train.py --dry_run checks each run's settings as one of its nproc processes: a mistake in any
    planned run is one line before any run starts, and out_dir is as it was. (A model setting's
    mistake, n_head=3: test_dry_run_checks_every_run_and_trains_none.)"""
    (tmp_path / "notes.txt").write_text("the user's own")
    monkeypatch.setattr(ablate, "execute", lambda *args: pytest.fail("a run started"))
    args = [f"--data_dir={data_dir}", f"--out_dir={tmp_path}", *ABLATE_TINY, "--modes=pre", *args]
    assert message in error_of(ablate_main, *args)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_a_diverged_run_is_a_result_not_a_crash(data_dir, tmp_path):
    ablate_main(f"--data_dir={data_dir}", f"--out_dir={tmp_path}", *ABLATE_TINY, "--modes=pre",
                "--lrs=1e6")
    end = log_events(tmp_path / "ablate" / "pre_lr1e+06_s1")[-1]
    assert end["status"] == "diverged" and end["iter"] < 10  # lr 1e6 really blows up the weights
    [row] = table_rows((tmp_path / "ablate" / "results.md").read_text())
    assert (row["final val loss"], row["diverged"]) == ("diverged", "1/1")
    [group] = json.loads((tmp_path / "ablate" / "results.json").read_text())["groups"]
    assert group["diverged"] == 1 and group["runs"][0]["status"] == "diverged"
    assert (tmp_path / "ablate" / "val_loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "ablate" / "lr.png").exists()  # one rate


def test_dry_run_checks_every_run_and_trains_none(data_dir, tmp_path, capsys):
    """--dry_run is ablate.py's own (not passed on to the runs, which would then never finish):
    train.py checks each run, and nothing is written."""
    args = [f"--data_dir={data_dir}", f"--out_dir={tmp_path}", *ABLATE_TINY, "--modes=pre,dyt",
            "--dry_run"]
    assert ablate_main(*args).strip() == (
        f"dry run: every check passed; 2 of 2 runs would train in "
        f"{tmp_path / 'ablate'}, nothing written")
    mentions(error_of(ablate.main, [*args, "--n_head=3"]), "pre_lr0.003_s1", "n_embd=32",
             "n_head=3", "divisors of n_embd", "nothing has run")
    assert not any(tmp_path.iterdir())


@pytest.fixture(scope="module")
def ladder(data_dir, tmp_path_factory):
    """A depth ladder in small: pre and peri at 1 and 2 blocks, seeds 1 and 2 at 2 blocks only, a
    few steps: (the arguments, out_dir/ablate, what ablate.py printed)."""
    out = tmp_path_factory.mktemp("ladder")
    args = [f"--data_dir={data_dir}", f"--out_dir={out}", *ABLATE_TINY[:-1], "--max_iters=4",
            "--eval_interval=2", "--modes=pre,peri", "--seeds=1,2", "--sweep=n_layer=1,2",
            "--seeds_at={'n_layer': 2}", "--jobs=2"]
    return args, out / "ablate", unchecked_ablation(*args)


SIZE_PLOTS = ["size.png", "params.png"] + [f"{name}_n_layer{n}.png" for n in (1, 2)
                                           for name in ("val_loss", "grad_norm", "angle")]


def test_a_size_sweep_tables_loss_and_time_per_size_and_draws_loss_against_size_and_parameters(
        ladder):
    _, root, printed = ladder
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == [
        "peri_lr0.003_s1_n_layer1", "peri_lr0.003_s1_n_layer2", "peri_lr0.003_s2_n_layer2",
        "pre_lr0.003_s1_n_layer1", "pre_lr0.003_s1_n_layer2", "pre_lr0.003_s2_n_layer2"]
    text = (root / "results.md").read_text()
    lines = text.splitlines()
    header, _, pre, peri, per_run, total = \
        lines[lines.index("| mode | n_layer 1 | n_layer 2 |"):][:6]
    groups = json.loads((root / "results.json").read_text())["groups"]
    loss = {(g["mode"], g["sweep"]["n_layer"]): g["final_val_loss"] for g in groups}
    assert pre == (f"| pre | {loss['pre', 1][0]:.4f} | {loss['pre', 2][0]:.4f} ± "
                   f"{loss['pre', 2][1]:.4f} (2) |")
    assert peri.startswith("| peri | ") and per_run.startswith("| time per run | ")
    # results.minutes: seconds below 100, then minutes (a loaded machine)
    wall = r" (\d+ s|\d+\.\d min) \|"
    assert len(re.findall(wall, per_run)) == len(re.findall(wall, total)) == 2, (per_run, total)
    final = {(r["name"]): log_events(root / r["name"])[-1]["final_val_loss"]
             for g in groups for r in g["runs"]}
    gaps = [final[f"peri_lr0.003_s{s}_n_layer2"] - final[f"pre_lr0.003_s{s}_n_layer2"]
            for s in (1, 2)]
    [peri2] = [g for g in groups if g["mode"] == "peri" and g["sweep"]["n_layer"] == 2]
    assert peri2["gap"] == dict(zip(("mean", "std"), results.mean_std(gaps)), seeds=2)
    params = {(g["mode"], g["sweep"]["n_layer"]): g["params"] for g in groups}
    # a block: 12d² weights, 2 LayerNorms
    assert params["pre", 2] - params["pre", 1] == 12 * 32 ** 2 + 2 * 32
    assert params["peri", 1] - params["pre", 1] == 2 * 32 + 32  # sandwich's 2 output norms, ln_emb
    for name in SIZE_PLOTS:
        assert f"![{name}]({name})" in text \
            and (root / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    # one lr: no lr figure
    assert not (root / "val_loss.png").exists() and not (root / "lr.png").exists()


def test_a_final_val_loss_over_two_seeds_is_the_mean_and_sample_stdev_of_each_runs_last_evaluation(
        ladder):
    """results.md's "final val loss" of a group with seeds 1 and 2, in its table and in the size
    table's cell, is statistics.mean ± statistics.stdev (n - 1) of the two runs' last eval val_loss
    in their log.jsonl."""
    _, root, _ = ladder
    text = (root / "results.md").read_text()
    table, sized = text.split("\nFinal val loss by n_layer")
    rows = [row for row in table_rows(table) if row["seeds"] == "2"]
    assert sorted((row["mode"], row["settings"].split()[-1]) for row in rows) == \
        [("peri", "n_layer=2"), ("pre", "n_layer=2")]
    for row in rows:
        last = [[e for e in log_events(root / f"{row['mode']}_lr0.003_s{seed}_n_layer2")
                 if e["event"] == "eval"]
                [-1]["val_loss"] for seed in (1, 2)]
        mean, std = statistics.mean(last), statistics.stdev(last)
        assert std > 0 and row["final val loss"] == f"{mean:.4f} ± {std:.4f}", row["mode"]
        [cell] = [line for line in sized.splitlines() if line.startswith(f"| {row['mode']} | ")]
        assert cell.endswith(f" | {mean:.4f} ± {std:.4f} (2) |"), cell


def test_a_size_sweeps_figures_are_redrawn_from_its_finished_runs(ladder, tmp_path, monkeypatch):
    """--figures=DIR draws every figure again, without training; each figure's lines in their
    entries' colours, the figures at one size titled with it."""
    args, root, _ = ladder
    drawn, real_finish = {}, plots.finish
    def record(fig, ax, title, path):
        lines = [line for a in fig.axes for line in a.get_lines()
                 if not line.get_label().startswith("_")]
        drawn[path.name] = title, {line.get_label(): line.get_color() for line in lines}
        real_finish(fig, ax, title, path)
    monkeypatch.setattr(plots, "finish", record)
    before = mtimes(root)
    printed = ablate_main(*args, f"--figures={tmp_path}")
    assert mtimes(root) == before and "wrote size.png, params.png, val_loss_n_layer1.png" in printed
    sized = "| mode | n_layer 1 |" + (root / "results.md").read_text().split(
        "| mode | n_layer 1 |")[1].split("\n\n")[0]
    # results.md's loss per mode and depth, printed too
    assert "\n" + sized + "\n\nwrote" in printed
    assert sorted(drawn) == sorted(SIZE_PLOTS) == sorted(p.name for p in tmp_path.iterdir())
    title, colors = drawn["size.png"]
    assert title.startswith("Final validation loss against depth") and "blocks 1–2 × 32" in title
    assert {k: matplotlib.colors.to_hex(c) for k, c in colors.items()} == {
        e: matplotlib.colors.to_hex(plots.mode_color(e)) for e in ("pre", "peri")}
    assert "blocks 2 × 32" in drawn["grad_norm_n_layer2.png"][0]
    assert set(drawn["angle_n_layer1.png"][1]) == {"pre", "peri"}
