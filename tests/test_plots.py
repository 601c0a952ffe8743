"""results.py's and plots.py's promises, without training: results.md's numbers recomputed by hand
from the runs' logs, its tables cell by cell, and each figure's lines, bands, bars and axes from the
numbers it plots. Fast: the file that mutation testing runs against results.py and plots.py
(docs/development.md)."""
import colorsys
import io
import json
import math
import re
import shutil
import statistics
import types

import matplotlib.collections
import matplotlib.colors
import numpy as np
import PIL.Image
import pytest

import ablate
import configurator
import plots
import results
from configurator import ENTRIES
from conftest import ROOT, SHARED, mentions, write_run
from model import GPT, NORM_MODES

BASE = ["--dataset=tiny", "--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=32",
        "--learning_rate=1e-3", "--min_lr=1e-4", "--max_iters=10"]


def plan_of(tmp_path, *args, meta=dict(tokenizer="char", vocab_size=65)):
    """ablate.py's plan for args over BASE, its data_dir holding meta.json (none if meta is None);
    and its runs."""
    if meta is not None:
        (tmp_path / "data" / "tiny").mkdir(parents=True, exist_ok=True)
        (tmp_path / "data" / "tiny" / "meta.json").write_text(json.dumps(meta))
    plan = ablate.configure([f"--out_dir={tmp_path / 'out'}", f"--data_dir={tmp_path / 'data'}",
                             *BASE, *args])
    return plan, ablate.plan_runs(plan, tmp_path / "out" / "ablate")


def by_name(runs):
    return {r["name"]: r for r in runs}


# -------------------------------------------------------------------------------------- the summary

FINAL = {  # (mode, seed): the last evaluation's val loss; every run evaluates at 0, 5 and 10
    ("pre", 1): 1.50, ("pre", 2): 1.60, ("pre", 3): 1.85,
    # diverged at its last evaluation
    ("geonorm", 1): 1.40, ("geonorm", 2): 1.75, ("geonorm", 3): math.inf,
    # seed 2 crashed (no end line); seed 3 never ran
    ("simplenorm", 1): 1.30, ("simplenorm", 2): 1.20,
}
LOWEST = {("pre", 2): 1.55, ("geonorm", 1): 1.38}  # a run whose middle evaluation is its best


@pytest.fixture
def lab(tmp_path):
    """pre, geonorm and simplenorm (at 3x), seeds 1-3, eval tasks hellaswag and piqa: the plan, the
    runs, and what each run's files hold."""
    tasks = "hellaswag,piqa"
    plan, runs = plan_of(tmp_path, "--modes=pre,geonorm,simplenorm", "--seeds=1,2,3",
                         f"--eval_tasks={tasks}")
    written = {}
    for run in runs:
        key = run["mode"], run["seed"]
        if key == ("simplenorm", 3):
            continue  # not run
        last = FINAL[key]
        evals = [(0, 4.17), (5, LOWEST.get(key, last + 0.25)), (10, last)]
        status = "failed" if key == ("simplenorm", 2) else "finished"
        speeds = {("pre", 1): (900.0, 1100.0), ("pre", 2): (None,),
                  ("pre", 3): (2000.0, None)}.get(key, (1500.0,))
        seconds = None if key == ("pre", 3) else 60.0 * run["seed"] + len(run["mode"])
        scores = {("pre", 1): dict(hellaswag=dict(value=0.30, metric="acc_norm"),
                                   piqa=dict(value=0.60, metric="acc")),
                  ("pre", 2): dict(hellaswag=dict(value=0.34, metric="acc_norm"),
                                   piqa=dict(value=None, metric="acc")),
                  ("pre", 3): dict(hellaswag=dict(value=0.35, metric="acc_norm")),
                  ("simplenorm", 2): dict(hellaswag=dict(value=0.99, metric="acc_norm"))}.get(key)
        limit = 5 if key == ("geonorm", 1) else None  # scored with another limit: not counted
        write_run(run["dir"], evals, status, speeds, seconds,
                  scores=scores or dict(hellaswag=dict(value=0.25, metric="acc_norm")), tasks=tasks,
                  limit=limit)
        written[run["name"]] = dict(evals=evals, status=status, speeds=speeds, seconds=seconds,
                                    scores=scores)
    return plan, runs, written


def test_a_groups_summary_is_its_finished_seeds_folded_as_computed_by_hand_from_their_logs(lab):
    plan, runs, written = lab
    groups = results.summarize(runs, plan)
    # as planned
    assert [g["group"] for g in groups] == ["pre_lr0.001", "geonorm_lr0.001", "simplenorm_lr0.003"]
    for g in groups:
        mine = [r for r in runs if r["group"] == g["group"]]
        assert [r["name"] for r in g["runs"]] == [r["name"] for r in mine]
        assert [r["seed"] for r in g["runs"]] == [1, 2, 3]
        assert ({k: g[k] for k in ("mode", "lr", "tripled", "sweep", "own")}
                == {k: mine[0][k] for k in ("mode", "lr", "tripled", "sweep", "own")})
        assert g["params"] is None  # not a size sweep
        done = [written[r["name"]] for r in mine if r["name"] in written
                and written[r["name"]]["status"] == "finished"
                and math.isfinite(written[r["name"]]["evals"][-1][1])]
        last = [w["evals"][-1][1] for w in done]
        assert g["finished"] == len(done)
        spread = statistics.stdev(last) if len(last) > 1 else 0.0
        assert g["final_val_loss"] == pytest.approx((statistics.mean(last), spread), abs=1e-12)
        assert g["best_val_loss"] == pytest.approx(statistics.mean(min(l for _, l in w["evals"])
                                                                   for w in done))
        speeds = [statistics.mean(s for s in w["speeds"] if s) for w in done if any(w["speeds"])]
        assert g["tokens_per_s"] == pytest.approx(statistics.mean(speeds))
        times = [w["seconds"] for w in done if w["seconds"]]
        assert g["seconds"] == pytest.approx(statistics.mean(times))
    pre, geo, simple = groups
    assert ([r["status"] for r in geo["runs"]] == ["finished", "finished", "diverged"]
            and geo["diverged"] == 1)
    assert ([r["status"] for r in simple["runs"]] == ["finished", "failed", "not run"]
            and simple["diverged"] == 0)
    assert pre["finished"] == 3 and pre["tokens_per_s"] == pytest.approx((1000 + 2000) / 2)
    assert pre["seconds"] == pytest.approx((63 + 123) / 2)  # seed 3 untimed
    # the eval tasks: over the finished seeds scored with this limit, the metric the first of them
    # names
    hellaswag = [0.30, 0.34, 0.35]
    assert pre["tasks"] == dict(
        hellaswag=dict(metric="acc_norm", mean=pytest.approx(statistics.mean(hellaswag)),
                       std=pytest.approx(statistics.stdev(hellaswag)), runs=3),
        # seed 2's piqa has no value, seed 3 has none
        piqa=dict(metric="acc", mean=0.60, std=0.0, runs=1))
    # seed 1: limit 5
    assert geo["tasks"] == dict(hellaswag=dict(metric="acc_norm", mean=0.25, std=0.0, runs=1))
    # not the crash's
    assert simple["tasks"] == dict(hellaswag=dict(metric="acc_norm", mean=0.25, std=0.0, runs=1))
    assert by_name(geo["runs"])["geonorm_lr0.001_s1"]["scores"] == {}
    assert by_name(pre["runs"])["pre_lr0.001_s1"]["scores"] == written["pre_lr0.001_s1"]["scores"]


def test_the_gap_to_pre_is_each_seeds_loss_less_pres_same_seed_from_the_logs(lab):
    plan, runs, _ = lab
    pre, geo, simple = results.summarize(runs, plan)
    assert pre["gap"] is None
    gaps = [FINAL["geonorm", s] - FINAL["pre", s] for s in (1, 2)]  # seed 3 diverged
    assert geo["gap"] == dict(mean=pytest.approx(statistics.mean(gaps)),
                              std=pytest.approx(statistics.stdev(gaps)), seeds=2)
    # at 3x, against pre at 1x
    assert simple["gap"] == dict(mean=pytest.approx(1.30 - 1.50), std=0.0, seeds=1)


def test_no_eval_tasks_score_nothing_though_a_run_has_eval_json(tmp_path):
    plan, runs = plan_of(tmp_path, "--modes=pre")
    write_run(runs[0]["dir"], [(0, 4.0), (10, 2.0)],
              scores=dict(piqa=dict(value=0.5, metric="acc")), tasks="")
    [g] = results.summarize(runs, plan)
    assert g["tasks"] == {} and g["runs"][0]["scores"] == dict(piqa=dict(value=0.5, metric="acc"))


def test_a_size_sweep_counts_each_groups_non_embedding_parameters_as_the_model_does(tmp_path):
    plan, runs = plan_of(tmp_path, "--modes=pre,peri", "--sweep=n_layer=1,3", "--seeds=1,2")
    for run in runs:
        write_run(run["dir"], [(0, 4.0), (10, 2.0 + run["seed"] / 10)])
    groups = results.summarize(runs, plan)
    assert [g["group"] for g in groups] == ["pre_lr0.001_n_layer1", "pre_lr0.001_n_layer3",
                                            "peri_lr0.001_n_layer1", "peri_lr0.001_n_layer3"]
    for g in groups:
        settings = next(r["settings"] for r in runs if r["group"] == g["group"])
        config = configurator.model_config(types.SimpleNamespace(**plan["base"] | settings),
                                           dict(tokenizer="char", vocab_size=65))
        model = GPT(config)
        embedding = sum(p.numel() for n, p in model.named_parameters() if n.endswith("wte.weight"))
        assert (g["params"] == model.get_num_params()
                and g["params"] < sum(p.numel() for p in model.parameters()))
        assert embedding == 65 * 32
    params = {g["group"]: g["params"] for g in groups}
    block = params["pre_lr0.001_n_layer3"] - params["pre_lr0.001_n_layer1"]
    # two more blocks: 12 d² weights and 2 LayerNorms each
    assert block == 2 * (12 * 32 ** 2 + 2 * 32)


def test_a_size_sweep_builds_each_model_once_whatever_its_rates(tmp_path, monkeypatch):
    """Groups that differ only in their rate are one model: counted once, the same count."""
    plan, runs = plan_of(tmp_path, "--modes=pre,peri", "--sweep=n_layer=1,3", "--lrs=1e-3,2e-3")
    for run in runs:
        write_run(run["dir"], [(0, 4.0), (10, 2.0)])
    built = []
    monkeypatch.setattr(results, "GPT", lambda config: built.append(config) or GPT(config))
    groups = results.summarize(runs, plan)
    assert len(groups) == 8 and len(built) == 4  # 2 modes x 2 sizes, not x 2 rates
    counts = {(g["mode"], g["sweep"]["n_layer"], g["params"]) for g in groups}
    assert len(counts) == 4 and len({c[2] for c in counts}) == 4


@pytest.mark.parametrize("meta", [None, dict(tokenizer="char")],
                         ids=["no meta.json", "no vocab_size"])
def test_a_size_sweep_without_the_datasets_vocabulary_has_no_parameter_counts(tmp_path, meta):
    plan, runs = plan_of(tmp_path, "--modes=pre", "--sweep=n_layer=1,2", meta=meta)
    for run in runs:
        write_run(run["dir"], [(0, 4.0), (10, 2.0)])
    assert [g["params"] for g in results.summarize(runs, plan)] == [None, None]
    assert results.non_embedding_params({}, plan, {}) is None


def test_the_loss_unit_is_per_character_only_for_a_character_dataset(tmp_path):
    assert plots.loss_unit(plan_of(tmp_path / "a")[0]) == "nats per character"
    assert (plots.loss_unit(plan_of(tmp_path / "b", meta=dict(tokenizer="gpt2"))[0])
            == "nats per token")
    assert plots.loss_unit(plan_of(tmp_path / "c", meta=None)[0]) == "nats per token"
    plan = plan_of(tmp_path / "d")[0]
    # half-written: unread, not a crash
    (tmp_path / "d" / "data" / "tiny" / "meta.json").write_text("{not json")
    assert results.read_meta(plan) is None and plots.loss_unit(plan) == "nats per token"


# --------------------------------------------------------------------------------------- the tables

def rows_of(text):
    return [line for line in text.splitlines() if line.startswith("|")]


def test_each_table_row_is_its_groups_numbers_formatted(lab):
    plan, runs, _ = lab
    groups = results.summarize(runs, plan)
    header, rule, pre, geo, simple = rows_of(results.table(groups))
    assert header == ("| mode | settings | lr | seeds | final val loss | − pre, same seed "
                      "| best val loss | diverged |"
                      " tokens/s | time/run | hellaswag acc_norm | piqa acc |")
    assert rule == "|---|---|---|---|---|---|---|---|---|---|---|---|"
    p = [FINAL["pre", s] for s in (1, 2, 3)]
    g = [FINAL["geonorm", s] for s in (1, 2)]
    gaps = [FINAL["geonorm", s] - FINAL["pre", s] for s in (1, 2)]
    h = [0.30, 0.34, 0.35]
    assert pre == (f"| pre | — | 0.001 | 3 | {statistics.mean(p):.4f} ± "
                   f"{statistics.stdev(p):.4f} | — | "
                   f"{statistics.mean([1.50, 1.55, 1.85]):.4f} | no | 1,500 | 93 s | "
                   f"{statistics.mean(h):.4f} ± {statistics.stdev(h):.4f} | 0.6000 |")
    assert geo == (f"| geonorm | — | 0.001 | 3 | {statistics.mean(g):.4f} ± "
                   f"{statistics.stdev(g):.4f} | "
                   f"{statistics.mean(gaps):+.4f} ± {statistics.stdev(gaps):.4f} (2) | "
                   f"{statistics.mean([1.38, 1.75]):.4f} | 1/3 | 1,500 | 97 s | 0.2500 | — |")
    assert simple == ("| simplenorm | — | 0.003 (3×) | 1 | 1.3000 | -0.2000 | 1.3000 | no | "
                      "1,500 | 70 s | 0.2500 | — |")


def test_a_tables_cells_for_what_is_missing_and_for_settings_of_an_entry_and_a_sweep():
    group = dict(group="x", mode="geonorm", lr=3e-4, tripled=False, sweep={"geo_alpha": 3.0},
                 own={"tie_embeddings": False}, runs=[dict(status="interrupted")], finished=0,
                 diverged=0, final_val_loss=None, best_val_loss=None, tokens_per_s=None,
                 seconds=None, tasks={}, gap=None)
    assert rows_of(results.table([group]))[2] == (
        "| geonorm | tie_embeddings=False geo_alpha=3.0 | 0.0003 | 0 | "
        "interrupted | — | — | no | — | — |")
    assert (rows_of(results.table([group | dict(diverged=2, runs=[dict(status="diverged")] * 2)]))
            [2].split(" | ")[4] == "diverged")
    one = group | dict(finished=1, final_val_loss=(1.23456, 0.0), best_val_loss=1.2,
                       tokens_per_s=1234567.8, seconds=99.6,
                       gap=dict(mean=0.01234, std=0.0, seeds=1))
    assert rows_of(results.table([one]))[2].split(" | ")[3:] == ["1", "1.2346", "+0.0123", "1.2000",
                                                                 "no", "1,234,568", "100 s |"]


@pytest.mark.parametrize("gap, seeds, cell", [
    (None, 3, "—"),
    (dict(mean=-0.01, std=0.002, seeds=3), 3, "-0.0100 ± 0.0020 (3)"),  # several: counted
    (dict(mean=0.01, std=0.002, seeds=2), 3, "+0.0100 ± 0.0020 (2)"),  # fewer than the row's
    (dict(mean=0.01, std=0.002, seeds=2), 2, "+0.0100 ± 0.0020 (2)"),
    (dict(mean=0.01, std=0.0, seeds=1), 1, "+0.0100"),
    (dict(mean=0.01, std=0.0, seeds=1), 2, "+0.0100 (1)"),
])
def test_a_gap_cell_counts_its_seeds_where_they_are_not_the_rows(gap, seeds, cell):
    assert results.gap_cell(gap, seeds) == cell


@pytest.mark.parametrize("seconds, cell",
                         [(None, "—"), (0.4, "0 s"), (99.4, "99 s"), (99.5, "100 s"),
                          (100, "1.7 min"), (750, "12.5 min"), (7200, "120.0 min")])
def test_a_wall_time_is_seconds_below_a_hundred_then_minutes(seconds, cell):
    assert results.minutes(seconds) == cell


def test_a_score_cell_shows_the_spread_only_over_several_runs():
    assert results.score_cell(None) == "—"
    assert results.score_cell(dict(mean=0.123456, std=0.01, runs=1)) == "0.1235"
    assert results.score_cell(dict(mean=0.123456, std=0.01, runs=2)) == "0.1235 ± 0.0100"


def ladder_of(tmp_path):
    """pre and peri at 1, 2 and 4 blocks; seeds 1-3 at 4 only; peri's seed 3 diverged and its
    2-block run interrupted; each run's time its seed × its blocks minutes."""
    plan, runs = plan_of(tmp_path, "--modes=pre,peri", "--sweep=n_layer=1,2,4", "--seeds=1,2,3",
                         "--seeds_at={'n_layer': [4]}")
    for run in runs:
        n, seed = run["sweep"]["n_layer"], run["seed"]
        status = {("peri", 4, 3): "diverged",
                  ("peri", 2, 1): "interrupted"}.get((run["mode"], n, seed), "finished")
        last = (math.nan if status == "diverged"
                else 2.0 - 0.1 * n + 0.01 * seed + 0.05 * (run["mode"] == "peri"))
        write_run(run["dir"], [(0, 4.0), (5, 3.0), (10, last)], status, seconds=60.0 * seed * n,
                  stats={s: dict(grad_norm=[seed * (b + 1) * (1 + s) for b in range(n)],
                                 angle=[0.1 * (b + 1) for b in range(n)], resid_rms=[1.0] * n)
                         for s in (0, 5, 10)})
    return plan, runs, results.summarize(runs, plan)


def test_a_size_table_is_loss_per_mode_and_size_then_the_time_per_run_and_of_all_runs(tmp_path):
    plan, _, groups = ladder_of(tmp_path)
    rows = rows_of(results.size_table(groups, plan, "n_layer"))
    pre4 = [2.0 - 0.4 + 0.01 * s for s in (1, 2, 3)]
    peri4 = [2.0 - 0.4 + 0.01 * s + 0.05 for s in (1, 2)]
    assert rows[:4] == [
        "| mode | n_layer 1 | n_layer 2 | n_layer 4 |", "|---|---|---|---|",
        f"| pre | 1.9100 | 1.8100 | {statistics.mean(pre4):.4f} ± "
        f"{statistics.stdev(pre4):.4f} (3) |",
        f"| peri | 1.9600 | interrupted | {statistics.mean(peri4):.4f} ± "
        f"{statistics.stdev(peri4):.4f} (2, 1 diverged) |"]
    # time per run: the finished runs at that size; all runs: their sum (peri's diverged and
    # interrupted left out)
    at4 = [60.0 * s * 4 for s in (1, 2, 3)] + [60.0 * s * 4 for s in (1, 2)]
    assert rows[4] == f"| time per run | 60 s | 2.0 min | {statistics.mean(at4) / 60:.1f} min |"
    assert rows[5] == f"| time, all runs | 2.0 min | 2.0 min | {sum(at4) / 60:.1f} min |"
    partial = [g for g in groups if g["group"] != "peri_lr0.001_n_layer2"]
    assert rows_of(results.size_table(partial, plan, "n_layer"))[3].startswith(
        "| peri | 1.9600 | — | ")
    unrun = [g | dict(runs=[dict(r, status="not run", seconds=None) for r in g["runs"]], finished=0,
                      diverged=0, final_val_loss=None) for g in groups]
    assert (rows_of(results.size_table(unrun, plan, "n_layer"))[4:]
            == ["| time per run | — | — | — |", "| time, all runs | — | — | — |"])


def test_results_md_has_the_command_the_tables_the_ranking_and_the_figures(tmp_path, lab):
    plan, runs, _ = lab
    groups = results.summarize(runs, plan)
    text = results.results_text(groups, plan, ["configs/x.py", "--seeds=1,2,3"], ["a.png", "b.png"])
    assert text.startswith("# Ablation\n\n`python ablate.py configs/x.py --seeds=1,2,3`\n\n")
    assert ("time/run: a run's wall time, mean over them. Eval tasks (eval.py, lm-eval): acc_norm "
            "where the task has it, else acc, mean ± std over the seeds that finished.\n\n"
            "| mode |") in text
    assert "\n\n" + results.table(groups) + "\n\nLowest final val loss first: " in text
    simple, geo, pre = (statistics.mean(v) for v in ([1.30], [1.40, 1.75], [1.50, 1.60, 1.85]))
    assert (f"Lowest final val loss first: simplenorm_lr0.003 {simple:.4f} < "
            f"geonorm_lr0.001 {geo:.4f} < "
            f"pre_lr0.001 {pre:.4f}\n\n![a.png](a.png)\n![b.png](b.png)\n") in text
    plan, _, groups = ladder_of(tmp_path / "ladder")
    text = results.results_text(groups, plan, [], [])
    assert ("Eval tasks" not in text
            and "time/run: a run's wall time, mean over them.\n\n| mode |" in text)
    table = results.size_table(groups, plan, "n_layer")
    assert f"\n\n{table}\n\nLowest final val loss first: pre_lr0.001_n_layer4 " in text
    none = [g | dict(final_val_loss=None) for g in groups]
    assert results.results_text(none, plan, [], []).endswith(
        "Lowest final val loss first: none finished\n\n")


def test_the_gap_to_pre_pairs_seeds_and_takes_pre_at_the_base_lr_for_a_tripled_simplenorm():
    """Seeds pair by number (a seed pre lacks is left out); simplenorm at 3x compares with pre at
    the base rate, a run at another rate of an lr sweep with pre at that rate; a sweep key of
    another mode is not pre's point."""
    plan = dict(base=dict(learning_rate=1e-3), given={}, entry={})
    run = lambda seed, loss, status="finished": dict(seed=seed, final_val_loss=loss, status=status)
    group = lambda mode, lr, runs, tripled=False, sweep={}: dict(mode=mode, lr=lr, runs=runs,
                                                                 tripled=tripled, sweep=sweep)
    pre = [group("pre", 1e-3, [run(1, 2.0), run(2, 3.0), run(3, 9.0, "failed")]),
           group("pre", 3e-3, [run(1, 5.0), run(2, 5.0)])]
    simple = group("simplenorm", 3e-3, [run(1, 2.5), run(2, 3.1), run(3, 1.0), run(4, 1.0)],
                   tripled=True)
    mean, std = results.mean_std([2.5 - 2.0, 3.1 - 3.0])
    assert results.gap_to_pre(simple, pre + [simple], plan) == dict(mean=mean, std=std, seeds=2)
    geo = group("geonorm", 3e-3, [run(1, 4.0)], sweep={"geo_alpha": 3.0})
    assert results.gap_to_pre(geo, pre + [geo], plan) == dict(mean=-1.0, std=0.0, seeds=1)
    wide = group("geonorm", 1e-3, [run(1, 4.0)], sweep={"n_embd": 64})  # pre has no n_embd 64 here
    assert (results.gap_to_pre(wide, pre + [wide], plan) is None
            and results.gap_to_pre(pre[0], pre, plan) is None)


def test_a_group_with_no_finished_run_shows_its_gravest_status():
    """A sweep drawn half-way (--figures) tables the runs it has not reached as "not run", not as
    failures."""
    group = lambda *statuses: dict(runs=[dict(status=s) for s in statuses],
                                   diverged=statuses.count("diverged"))
    shown = [results.no_result(group(*s))
             for s in [("not run", "not run"), ("failed", "interrupted"),
                       ("not run", "interrupted"), ("failed", "diverged")]]
    assert shown == ["not run", "failed", "interrupted", "diverged"]


def test_a_size_tables_cell_says_how_many_seeds_finished_and_diverged():
    plan = dict(base=dict(n_layer=4, learning_rate=1e-3), sweep={"n_layer": [2, 4]}, lrs=None)
    group = lambda n, finished, diverged, loss: dict(mode="pre", lr=1e-3, tripled=False,
                                                     sweep={"n_layer": n}, finished=finished,
                                                     diverged=diverged, final_val_loss=loss,
                                                     runs=[])
    groups = [group(2, 1, 2, (1.4, 0.0)), group(4, 3, 0, (1.3, 0.01))]
    rows = results.size_table(groups, plan, "n_layer").splitlines()
    assert rows[2] == "| pre | 1.4000 (1, 2 diverged) | 1.3000 ± 0.0100 (3) |"
    assert results.size_table([group(4, 2, 0, (1.3, 0.01))], plan, "n_layer").splitlines()[2] == \
        "| pre | 1.3000 ± 0.0100 (2) |"
    groups = [group(2, 0, 3, None), group(4, 1, 0, (1.3, 0.0))]
    assert (results.size_table(groups, plan, "n_layer").splitlines()[2]
            == "| pre | diverged | 1.3000 |")



# -------------------------------------------------------------------------------------- the figures

@pytest.fixture
def drawn(monkeypatch):
    """{file name: (figure, its axes, title)} of each figure drawn, none saved."""
    figures = {}
    monkeypatch.setattr(plots, "finish",
                        lambda fig, ax, title, path: figures.setdefault(path.name,
                                                                        (fig, ax, title)))
    yield figures
    matplotlib.pyplot.close("all")


def lines_of(ax):
    """{legend label or the line's index: (x, y, its style)} of ax's lines."""
    return {(line.get_label() if not line.get_label().startswith("_") else i):
            (list(line.get_xdata()), list(line.get_ydata()), line.get_linestyle(),
             line.get_marker(), matplotlib.colors.to_hex(line.get_color()))
            for i, line in enumerate(ax.get_lines())}


def test_the_validation_loss_figure_is_each_groups_mean_curve_in_a_band_of_one_std(tmp_path, drawn):
    plan, _, groups = ladder_of(tmp_path)
    at4 = [g | dict(sweep={}) for g in groups if g["sweep"]["n_layer"] == 4]
    plots.plot_val_loss(at4, plan | dict(base=plan["base"] | dict(n_layer=4)), tmp_path / "v.png")
    fig, ax, title = drawn["v.png"]
    pre = [[4.0] * 3, [3.0] * 3, [2.0 - 0.4 + 0.01 * s for s in (1, 2, 3)]]
    peri = [[4.0] * 2, [3.0] * 2, [2.0 - 0.4 + 0.01 * s + 0.05 for s in (1, 2)]]
    lines = lines_of(ax)
    pre_color, peri_color = (matplotlib.colors.to_hex(plots.mode_color(m)) for m in ("pre", "peri"))
    assert lines["pre"][:2] == ([0, 5, 10], pytest.approx([statistics.mean(v) for v in pre]))
    assert lines["pre"][2:] == ("-", ".", pre_color)
    assert lines["peri"][:2] == ([0, 5, 10], pytest.approx([statistics.mean(v) for v in peri]))
    # the diverged seed: its curve in a thin line, an x at its last step
    [curve] = [v for k, v in lines.items() if k not in ("pre", "peri") and v[3] in ("None", "")]
    [cross] = [v for v in lines.values() if v[3] == "x"]
    assert (curve[:2] == ([0, 5, 10], [4.0, 3.0, pytest.approx(math.nan, nan_ok=True)])
            and curve[4] == peri_color)
    assert cross[0] == [10] and math.isnan(cross[1][0]) and cross[4] == peri_color
    bands = [c for c in ax.collections]
    assert len(bands) == 2
    for band, values in zip(bands, (pre, peri)):
        ys = band.get_paths()[0].vertices[:, 1]
        for v in values:
            m, s = statistics.mean(v), statistics.stdev(v)
            assert np.isclose(ys, m - s).any() and np.isclose(ys, m + s).any()
    # the axes start at the second evaluation and fit the lowest band's edge
    bottom = min(statistics.mean(v) - statistics.stdev(v) for v in (pre[2], peri[2]))
    assert ax.get_xlim()[0] == 5
    assert ax.get_ylim() == pytest.approx((bottom - 0.03 * (3.0 - bottom), 3.0))
    assert ax.get_ylabel() == "validation loss (nats per character)"
    assert title.startswith("Validation loss during training (mean ± std over seeds; "
                            "x: diverged)\n")
    assert title.endswith("blocks 4 × 32, lr 0.001, 10 steps, 3 seeds")


def test_a_diverged_group_without_a_finished_seed_is_labelled_once_and_the_title_says_x(
        tmp_path, drawn):
    """The axes reach up to a diverged run's last finite evaluation; a run that diverged before its
    first gives the axes nothing to fit."""
    plan, runs = plan_of(tmp_path, "--modes=pre,post,deep", "--seeds=1,2")
    for run in runs:
        evals = {"pre": [(0, 4.0), (5, 3.0), (10, 2.0 + run["seed"] / 10)],
                 "post": [(0, 4.0), (5, 3.0), (8, 3.5)],
                 "deep": [(0, 4.0), (5, 3.0), (8, math.nan)]}[run["mode"]]
        write_run(run["dir"], evals, "finished" if run["mode"] == "pre" else "diverged")
    groups = results.summarize(runs, plan)
    plots.plot_val_loss(groups, plan, tmp_path / "v.png")
    fig, ax, title = drawn["v.png"]
    labels = [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert labels == ["pre", "post (diverged)", "deep (diverged)"]
    assert "; x: diverged" in title and ax.get_xlabel() == "step"
    # post's last: above pre's curve
    assert ax.get_xlim()[0] == 5 and ax.get_ylim()[1] == pytest.approx(3.5)
    crosses = [(list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()
               if line.get_marker() == "x"]
    assert crosses[:2] == [([8], [3.5]), ([8], [3.5])]  # at each seed's last evaluation
    never = [g | dict(runs=[r | dict(evals=[]) for r in g["runs"]]) for g in groups
             if g["mode"] == "post"]
    plots.plot_val_loss(never, plan, tmp_path / "never.png")
    # matplotlib's own 0 to 1, nearly
    assert drawn["never.png"][1].get_ylim() == pytest.approx((-0.03, 1.0))


def test_two_evaluations_start_the_axes_at_the_first(tmp_path, drawn):
    plan, runs = plan_of(tmp_path, "--modes=pre")
    write_run(runs[0]["dir"], [(0, 4.0), (10, 2.0)])
    plots.plot_val_loss(results.summarize(runs, plan), plan, tmp_path / "v.png")
    fig, ax, title = drawn["v.png"]
    assert ax.get_xlim()[0] == 0 and ax.get_ylim() == pytest.approx((2.0 - 0.03 * 2.0, 4.0))
    assert "diverged" not in title and title.endswith("1 seed")


def test_a_flat_curve_leaves_the_axes_to_matplotlib(tmp_path, drawn, recwarn):
    plan, runs = plan_of(tmp_path, "--modes=pre")
    write_run(runs[0]["dir"], [(0, 2.0), (5, 2.0), (10, 2.0)])
    plots.plot_val_loss(results.summarize(runs, plan), plan, tmp_path / "v.png")
    low, high = drawn["v.png"][1].get_ylim()
    # no "identical low and high ylims"
    assert low < 2.0 < high and not [str(w.message) for w in recwarn]


def marks_at_the_top(ax, marker):
    """The rates of ax's marks of this kind, each checked to sit at 0.97 of the axes' height."""
    box, rates = ax.get_window_extent(), []
    for line in (line for line in ax.get_lines() if line.get_marker() == marker):
        x, y = line.get_xdata()[0], line.get_ydata()[0]
        assert line.get_transform().transform((x, y))[1] == pytest.approx(
            box.y0 + 0.97 * box.height)
        rates.append(x)
    return rates


def test_the_learning_rate_figure_is_a_panel_per_entry_with_pres_line_in_grey(tmp_path, drawn):
    """A panel per entry that ran, in the order planned, four to a row on shared axes: its line
    through the means at its rates in its colour, ±1 sample std bars, each finished seed a point;
    pre's means in grey dashes on every other panel; at the top an x for a diverged rate and a ^
    for a mean above the axes, which reach 1 nat over the lowest mean."""
    plan, runs = plan_of(tmp_path, "--modes=pre,geonorm,post,deep,lns,sandwich",
                         "--lrs=1e-3,1e-2", "--seeds=1,2")
    for run in runs:
        if run["mode"] == "sandwich":
            continue  # not run: no panel
        diverged = run["mode"] == "post" or run["mode"] == "geonorm" and run["lr"] == 1e-2
        high = run["mode"] == "deep" and run["lr"] == 1e-2
        last = math.inf if diverged else 2.0 + run["lr"] * 10 + run["seed"] / 10 + 1.5 * high
        write_run(run["dir"], [(0, 4.0), (10, last)], "diverged" if diverged else "finished")
    groups = results.summarize(runs, plan)
    plots.plot_lr(groups, plan, tmp_path / "lr.png")
    fig, _, title = drawn["lr.png"]
    panels = {ax.get_title(): ax for ax in fig.axes}
    assert list(panels) == ["pre", "geonorm", "post", "deep", "lns"]
    assert tuple(fig.get_size_inches()) == pytest.approx((4 * 2.2, 2 * 1.8))
    means = {(g["mode"], g["lr"]): g["final_val_loss"][0] for g in groups if g["finished"]}
    top = min(means.values()) + 1.0
    for mode, ax in panels.items():
        assert ax.get_ylim()[1] == pytest.approx(top)
        assert ax.get_xscale() == "log"
        assert ax.get_xlim() == pytest.approx((1e-3 / 1.5, 1e-2 * 1.5))
        own = [(list(line.get_xdata()), list(line.get_ydata()), line.get_linestyle(),
                matplotlib.colors.to_hex(line.get_color()))
               for line in ax.get_lines() if line.get_marker() == "o"]
        rates = [lr for lr in (1e-3, 1e-2) if (mode, lr) in means]
        assert own == ([(rates, [pytest.approx(means[mode, lr]) for lr in rates], "-",
                         matplotlib.colors.to_hex(plots.mode_color(mode)))] if rates else [])
        grey = [(list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()
                if line.get_linestyle() == "--"]
        pre = ([1e-3, 1e-2], [pytest.approx(means["pre", lr]) for lr in (1e-3, 1e-2)])
        assert grey == ([] if mode == "pre" else [pre])
        points = sorted(tuple(xy) for c in ax.collections
                        if isinstance(c, matplotlib.collections.PathCollection)
                        for xy in c.get_offsets())
        want = sorted((g["lr"], r["final_val_loss"]) for g in groups if g["mode"] == mode
                      for r in g["runs"] if r["status"] == "finished")
        assert [p for xy in points for p in xy] == pytest.approx([p for xy in want for p in xy])
        bars = [c for c in ax.collections if isinstance(c, matplotlib.collections.LineCollection)]
        for segment in (s for c in bars for s in c.get_segments()):
            std = statistics.stdev([0.1, 0.2])  # seeds 1 and 2
            assert sorted(segment[:, 1]) == pytest.approx(
                [means[mode, segment[0, 0]] - std, means[mode, segment[0, 0]] + std])
        assert len(bars) == bool(rates)
    assert marks_at_the_top(panels["geonorm"], "x") == [1e-2]
    assert marks_at_the_top(panels["post"], "x") == [1e-3, 1e-2]
    assert marks_at_the_top(panels["deep"], "^") == [1e-2]  # 3.65, over 2.16 + 1
    assert sum(len(marks_at_the_top(ax, "^")) for ax in fig.axes) == 1
    # the panels above the last row's empty places show their rates
    assert [ax.xaxis.get_tick_params()["labelbottom"] for ax in fig.axes[1:4]] == [True] * 3
    assert title.startswith("Final validation loss against learning rate (grey dashes: pre; x: "
                            f"diverged; ^: above {top:.2f})\n")
    assert "lr " not in title.split("\n")[1]
    labels = {text.get_text() for text in fig.texts}  # the figure's own: its axes' labels
    assert "peak learning rate (log scale)" in labels
    assert "final validation loss (nats per character)" in labels
    # nothing above 1 nat over the lowest: the axes are matplotlib's, and the title says no ^
    drawn.clear()
    plots.plot_lr([g for g in groups if g["mode"] != "deep"], plan, tmp_path / "lr.png")
    fig, _, title = drawn["lr.png"]
    assert "^" not in title and fig.axes[0].get_ylim()[1] < min(means.values()) + 0.5
    # no pre: no grey line, and the title names none
    drawn.clear()
    plots.plot_lr([g for g in groups if g["mode"] in ("geonorm", "lns")], plan, tmp_path / "l.png")
    fig, _, title = drawn["l.png"]
    assert not [line for ax in fig.axes for line in ax.get_lines()
                if line.get_linestyle() == "--"]
    assert title.startswith("Final validation loss against learning rate (x: diverged)\n")
    assert tuple(fig.get_size_inches()) == pytest.approx((2 * 2.2, 1.8))  # one row of two


def test_the_learning_rate_figures_marks_and_its_edges(tmp_path, drawn):
    """Its marks: pre's line in grey (0.6) dashes a point wide; each seed a point of 10 in its
    entry's colour at alpha 0.6, over the lines; the bars in its colour; a ^ of 6 points; the axes'
    labels small. Its edges: a mean exactly 1 nat over the lowest is inside the axes (no ^, and
    no cut); an entry at one rate beside one at two (another corpus's best) has its panel; one
    entry alone is one panel, cut at 1 nat too."""
    plan, runs = plan_of(tmp_path, "--modes=pre,deep", "--lrs=1e-3,1e-2", "--seeds=1,2")
    finals = {("pre", 1e-3): 2.0, ("pre", 1e-2): 3.5, ("deep", 1e-3): 2.0, ("deep", 1e-2): 3.0}
    for run in runs:
        write_run(run["dir"], [(0, 4.0), (10, finals[run["mode"], run["lr"]])])
    groups = results.summarize(runs, plan)
    plots.plot_lr(groups, plan, tmp_path / "lr.png")
    fig, _, _ = drawn["lr.png"]
    pre, deep = fig.axes
    assert marks_at_the_top(pre, "^") == [1e-2] and marks_at_the_top(deep, "^") == []  # 3.0 is in
    [caret] = [line for line in pre.get_lines() if line.get_marker() == "^"]
    assert (caret.get_markersize(), caret.get_markeredgewidth()) == (6, 2)
    [grey] = [line for line in deep.get_lines() if line.get_linestyle() == "--"]
    assert (matplotlib.colors.to_hex(grey.get_color()), grey.get_linewidth()) == ("#999999", 1)
    colour = matplotlib.colors.to_rgb(plots.mode_color("deep"))
    [points] = [c for c in deep.collections
                if isinstance(c, matplotlib.collections.PathCollection)]
    assert list(points.get_sizes()) == [10] and points.get_zorder() == 3
    assert [tuple(c) for c in points.get_facecolor()] == [pytest.approx((*colour, 0.6))]
    [bars] = [c for c in deep.collections if isinstance(c, matplotlib.collections.LineCollection)]
    assert [tuple(c) for c in bars.get_color()] == [pytest.approx((*colour, 1.0))]
    small = matplotlib.font_manager.FontProperties(size="small").get_size_in_points()
    assert [text.get_fontsize() for text in fig.texts[:2]] == [small, small]
    # the lowest 2.0, the highest 3.0: all inside, no cut
    drawn.clear()
    one_rate = [g for g in groups if (g["mode"], g["lr"]) != ("pre", 1e-2)]
    plots.plot_lr(one_rate, plan, tmp_path / "lr.png")
    fig, _, title = drawn["lr.png"]
    assert [ax.get_title() for ax in fig.axes] == ["pre", "deep"] and "^" not in title
    assert fig.axes[0].get_ylim()[1] > 3.0
    drawn.clear()
    plots.plot_lr([g for g in groups if g["mode"] == "pre"], plan, tmp_path / "lr.png")
    [alone] = drawn["lr.png"][0].axes
    assert alone.get_ylim()[1] == pytest.approx(3.0) and alone.get_xscale() == "log"


def test_every_figure_marks_alike_a_diverged_seed_an_error_bar_and_a_curve(tmp_path, drawn):
    """The house's marks, the same in every figure, so that one legend of habits reads them all: an
    x of 9 points with 2-point strokes for a diverged seed, error bars (no line of their own) with
    3-point caps, a mode's first variant as a solid line; figures 6.4 × 3.6 inches (the per-block
    pair 1.4 times as wide; lr.png's panels their own size)."""
    plan, runs = plan_of(tmp_path, "--modes=pre,post", "--lrs=1e-3,1e-2", "--seeds=1,2",
                         "--sweep=n_layer=1,2")
    for run in runs:
        diverged = run["mode"] == "post" and run["seed"] == 2
        write_run(run["dir"],
                  [(0, 4.0), (5, 3.0), (10, math.inf if diverged else 2.0 + run["seed"] / 10)],
                  "diverged" if diverged else "finished",
                  stats={s: dict(grad_norm=[1.0] * 2, angle=[0.5] * 2, resid_rms=[1.0] * 2)
                         for s in (0, 10)})
    groups = results.summarize(runs, plan)
    names = plots.plot_all(groups, plan, tmp_path)
    assert "lr.png" in names and "size.png" in names and "angle_n_layer2.png" in names
    for name, (fig, ax, _) in drawn.items():
        wide = plots.WIDE * (1.4 if name.startswith(("grad_norm", "angle")) else 1)
        assert name == "lr.png" or tuple(fig.get_size_inches()) == pytest.approx(
            (wide, plots.TALL)), name
        for line in (line for a in fig.axes for line in a.get_lines()):
            if line.get_marker() == "x":
                assert (line.get_markersize(), line.get_markeredgewidth()) == (9, 2), name
            elif line.get_marker() in ("o", "."):
                # the first and second variants of a mode
                assert line.get_linestyle() in ("-", "--"), name
    # size.png's axes, and each of lr.png's panels
    for name, ax in [("size.png", drawn["size.png"][1]),
                     *(("lr.png", panel) for panel in drawn["lr.png"][0].axes)]:
        box = ax.get_window_extent()
        # at the top, in its colour, in no legend
        crosses = [line for line in ax.get_lines() if line.get_marker() == "x"]
        for cross in crosses:
            y = cross.get_transform().transform((cross.get_xdata()[0], cross.get_ydata()[0]))[1]
            assert y == pytest.approx(box.y0 + 0.97 * box.height), name
            assert (matplotlib.colors.to_hex(cross.get_color())
                    == matplotlib.colors.to_hex(plots.mode_color("post")))
        assert bool(crosses) == (name == "size.png" or ax.get_title().startswith("post")), name
        caps = [c for container in ax.containers for c in container.lines[1]]
        # capsize 3: caps 6 points wide
        assert caps and all(c.get_markersize() == 2 * 3 for c in caps), name
        # fmt="none": no line
        assert all(container.lines[0] is None for container in ax.containers), name
        assert crosses[:1] == [c for c in crosses[:1] if c.get_label().startswith("_")], name
    # each size a family of its own: a panel each, a line each
    panels = drawn["lr.png"][0].axes
    assert [ax.get_title() for ax in panels] == ["pre n_layer=1", "pre n_layer=2",
                                                 "post n_layer=1", "post n_layer=2"]
    assert [line.get_linestyle() for ax in panels for line in ax.get_lines()
            if line.get_marker() == "o"] == ["-"] * 4
    per_block = drawn["grad_norm_n_layer2.png"][1]
    assert [line.get_linestyle() for line in per_block.get_lines()] == ["-", "--", "-", "--"]
    families = [(line.get_label(), line.get_linestyle())
                for line in drawn["size.png"][1].get_lines()
                if line.get_marker() == "o"]  # and each learning rate in the size figure
    assert families == [("pre", "-"), ("pre lr 0.01", "--"), ("post", "-"), ("post lr 0.01", "--")]
    val_loss = drawn["val_loss_n_layer2.png"][1]
    assert [(line.get_label(), line.get_linestyle()) for line in val_loss.get_lines()
            if line.get_marker() == "."] == [
        ("pre", "-"), ("pre lr 0.01", "--"), ("post", "-"), ("post lr 0.01", "--")]
    # a pale band, no edge
    for band, mode in zip(val_loss.collections, ("pre", "pre", "post", "post")):
        assert (matplotlib.colors.to_hex(band.get_facecolor()[0], keep_alpha=False)
                == matplotlib.colors.to_hex(plots.mode_color(mode))
                and band.get_alpha() == 0.2 and list(band.get_linewidth()) == [0])
    thin = [line for line in val_loss.get_lines() if line.get_marker() in ("None", "")
            and len(line.get_xdata()) == 3]
    assert thin and all(line.get_linewidth() == 0.8 for line in thin)  # a diverged seed's curve
    assert [line.get_linestyle() for line in thin] == ["-", "--"]  # in its group's style
    assert drawn["grad_norm_n_layer1.png"][0].axes[0].get_ylabel() == plots.LAYER_FIGURES[0][1]
    assert drawn["angle_n_layer1.png"][2].startswith(plots.LAYER_FIGURES[2][2] + "\n")


def test_the_per_block_figures_are_the_mean_over_finished_seeds_at_the_first_and_last_evaluation(
        tmp_path, drawn):
    plan, _, groups = ladder_of(tmp_path)
    at4 = [g | dict(sweep={}) for g in groups if g["sweep"]["n_layer"] == 4]
    plots.plot_layers(at4, plan, "grad_norm", "‖g‖", "Gradient norm", tmp_path / "g.png")
    fig, ax, title = drawn["g.png"]
    first, last = fig.axes
    assert ax is last and title.startswith("Gradient norm\n")
    for panel, step in ((first, 0), (last, 10)):
        seeds = {"pre": (1, 2, 3), "peri": (1, 2)}  # peri's diverged seed 3 left out
        ys = [list(line.get_ydata()) for line in panel.get_lines()]
        assert ys == [pytest.approx([statistics.mean(s * (b + 1) * (1 + step) for s in seeds[m])
                                     for b in range(4)])
                      for m in ("pre", "peri")]
        assert [list(line.get_xdata()) for line in panel.get_lines()] == [[1, 2, 3, 4]] * 2
    assert (first.get_title() == "step 0 (initialization)"
            and last.get_title() == "step 10 (end of training)")
    assert [line.get_label() for line in last.get_lines()] == ["pre", "peri"]
    # one legend
    assert not [line for line in first.get_lines() if not line.get_label().startswith("_")]
    assert first.get_yscale() == "log"  # 1 to 44: more than 20x
    assert (first.get_shared_y_axes().joined(first, last)
            and last.get_position().x0 > first.get_position().x1)
    assert (first.get_ylabel(), last.get_ylabel()) == ("‖g‖", "")
    for panel in (first, last):  # blocks are counted: whole numbers on the x axis
        assert panel.get_xlabel() == "block (1 = next to the embedding)"
        assert all(float(t).is_integer() for t in panel.get_xticks())
        styled = [(matplotlib.colors.to_hex(l.get_color()), l.get_linestyle(), l.get_marker(),
                   l.get_markersize())
                  for l in panel.get_lines()]
        assert styled == [(matplotlib.colors.to_hex(plots.mode_color(m)), "-", "o", 4)
                          for m in ("pre", "peri")]
    plots.plot_layers(at4, plan, "angle", "angle", "Angle", tmp_path / "a.png")
    assert drawn["a.png"][0].axes[0].get_yscale() == "linear"  # 0.1 to 0.4


@pytest.mark.parametrize("values, scale",
                         [([1, 20], "linear"), ([1, 20.01], "log"), ([2, 39], "linear"),
                          ([2, 40.1], "log"), ([0.0, 1, 2, math.inf, 100], "log"),
                          ([0.0, 1, 2], "linear"), ([-5, 1, 2], "linear"), ([], "linear"),
                          ([0.0], "linear")])
def test_a_per_block_axis_is_logarithmic_when_its_positive_values_span_more_than_20x(values, scale):
    fig, ax = matplotlib.pyplot.subplots()
    plots.log_if_wide(ax, values)
    assert ax.get_yscale() == scale
    matplotlib.pyplot.close(fig)


def test_the_size_figures_are_final_loss_against_the_size_and_the_parameters(tmp_path, drawn):
    plan, _, groups = ladder_of(tmp_path)
    plots.plot_size(groups, plan, "n_layer", False, tmp_path / "size.png")
    plots.plot_size(groups, plan, "n_layer", True, tmp_path / "params.png")
    for name, params in (("size.png", False), ("params.png", True)):
        fig, ax, title = drawn[name]
        lines = lines_of(ax)
        for mode in ("pre", "peri"):
            mine = [g for g in groups if g["mode"] == mode and g["final_val_loss"]]
            x, y, ls, marker, color = lines[mode]
            assert x == [g["params"] if params else g["sweep"]["n_layer"] for g in mine]
            assert y == [g["final_val_loss"][0] for g in mine] and marker == "o"
            assert color == matplotlib.colors.to_hex(plots.mode_color(mode))
        assert [g["sweep"]["n_layer"] for g in groups if g["mode"] == "peri"
                and g["final_val_loss"]] == [1, 4]
        bars = [c for c in ax.collections
                if matplotlib.colors.to_hex(c.get_color()[0]) == lines["pre"][4]]
        [pre4] = [g for g in groups if g["group"] == "pre_lr0.001_n_layer4"]
        mean, std = pre4["final_val_loss"]
        segments = [seg for b in bars for seg in b.get_segments()]
        assert any(sorted(seg[:, 1]) == pytest.approx([mean - std, mean + std]) for seg in segments)
        assert (ax.get_xscale() == "log"
                and ax.get_ylabel() == "final validation loss (nats per character)")
        assert "; x: diverged)" in title.split("\n")[0] and "blocks 1–4 × 32" in title
    fig, ax, title = drawn["size.png"]
    assert (list(ax.get_xticks()) == [1, 2, 4]
            and [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4"])
    assert (ax.xaxis.get_transform().base == 2
            and title.startswith("Final validation loss against depth (±1 std"))
    assert drawn["params.png"][2].startswith("Final validation loss against non-embedding "
                                             "parameters (")
    assert drawn["params.png"][1].get_xlabel() == "non-embedding parameters (log scale)"


def test_a_size_figures_diverged_point_is_an_x_at_the_top_labelled_when_its_family_has_no_line(
        tmp_path, drawn):
    plan, runs = plan_of(tmp_path, "--modes=pre,post", "--sweep=n_embd=16,32")
    for run in runs:
        post = run["mode"] == "post"
        write_run(run["dir"], [(0, 4.0), (10, math.inf if post else 2.0)],
                  "diverged" if post else "finished")
    groups = results.summarize(runs, plan)
    plots.plot_size(groups, plan, "n_embd", False, tmp_path / "size.png")
    fig, ax, title = drawn["size.png"]
    crosses = [(list(line.get_xdata()), list(line.get_ydata()), line.get_label())
               for line in ax.get_lines() if line.get_marker() == "x"]
    assert [c[:2] for c in crosses] == [([16], [0.97]), ([32], [0.97])]
    assert crosses[0][2] == "post (diverged)" and crosses[1][2].startswith("_")  # one legend entry
    assert title.startswith("Final validation loss against width (±1 std over seeds; x: diverged)")


def test_every_figure_an_ablation_allows_and_only_those(tmp_path, drawn):
    plan, _, groups = ladder_of(tmp_path)
    names = plots.plot_all(groups, plan, tmp_path)
    per_size = [f"{f}_n_layer{n}.png" for n in (1, 2, 4)
                for f in ("val_loss", "grad_norm", "angle")]
    assert names == ["size.png", "params.png", *per_size] and sorted(drawn) == sorted(names)
    assert drawn["size.png"][2].startswith("Final validation loss against depth")
    assert drawn["params.png"][2].startswith("Final validation loss against non-embedding "
                                             "parameters")
    for fig, ax, _ in drawn.values():  # in the house style
        assert fig.get_size_inches()[0] in (plots.WIDE, plots.WIDE * 1.4) and fig.dpi == 100
        assert fig.get_layout_engine() is not None and ax.xaxis.get_gridlines()[0].get_visible()
    fig, ax, title = drawn["grad_norm_n_layer4.png"]
    # no n_layer=
    assert ("blocks 4 × 32" in title
            and [line.get_label() for line in ax.get_lines()] == ["pre", "peri"])
    assert [len(line.get_ydata()) for line in ax.get_lines()] == [4, 4]
    assert [line.get_label() for line in drawn["val_loss_n_layer2.png"][1].get_lines()][0] == "pre"
    drawn.clear()
    matplotlib.pyplot.close("all")
    # a group without a parameter count: no params.png
    assert plots.plot_all([g | dict(params=None) if g["mode"] == "peri" else g for g in groups],
                          plan, tmp_path) == ["size.png", *per_size]
    # not a size sweep: the four figures, and the learning rate's where an entry ran two rates
    # (simplenorm's 3× alone is one); no layer stats: no per-block figures
    one_rate = ["val_loss.png", "grad_norm.png", "resid_rms.png", "angle.png"]
    two_rates = ["val_loss.png", "lr.png", "grad_norm.png", "resid_rms.png", "angle.png"]
    for lrs, figures in (((), one_rate), (("--lrs=1e-3,2e-3",), two_rates)):
        plan, runs = plan_of(tmp_path / f"lab{len(lrs)}", "--modes=pre,simplenorm", *lrs)
        for run in runs:
            write_run(run["dir"], [(0, 4.0), (10, 2.0)],
                      stats={0: dict(grad_norm=[1, 1], resid_rms=[1, 1], angle=[1, 1]),
                             10: dict(grad_norm=[1, 1], resid_rms=[1, 1], angle=[1, 1])})
        groups = results.summarize(runs, plan)
        assert plots.plot_all(groups, plan, tmp_path) == figures
        matplotlib.pyplot.close("all")  # finish, which closes them, is the fixture's
    one, one_runs = plan_of(tmp_path / "lab0", "--modes=pre,simplenorm")
    assert {g["lr"] for g in results.summarize(one_runs, one)} == {1e-3, 3e-3}
    without = [g | dict(runs=[r | dict(stats=[]) for r in g["runs"]]) for g in groups]
    assert plots.plot_all(without, plan, tmp_path) == ["val_loss.png", "lr.png"]
    failed = [g | dict(finished=0, diverged=0) for g in groups]
    assert plots.plot_all(failed, plan, tmp_path) == []


def test_a_size_sweep_at_several_learning_rates_draws_the_learning_rate_figure_too(tmp_path, drawn):
    plan, runs = plan_of(tmp_path, "--modes=pre", "--sweep=n_layer=1,2", "--lrs=1e-3,2e-3")
    for run in runs:
        write_run(run["dir"], [(0, 4.0), (10, 2.0)])
    names = plots.plot_all(results.summarize(runs, plan), plan, tmp_path)
    assert names[-1] == "lr.png" and "val_loss.png" not in names
    # one given: no
    plan, runs = plan_of(tmp_path / "one", "--modes=pre", "--sweep=n_layer=1,2", "--lrs=1e-3")
    for run in runs:
        write_run(run["dir"], [(0, 4.0), (10, 2.0)])
    assert "lr.png" not in plots.plot_all(results.summarize(runs, plan), plan, tmp_path)


def test_a_figure_is_a_small_png_with_its_title_and_the_legend_outside_the_axes(tmp_path):
    fig, ax = matplotlib.pyplot.subplots(figsize=(plots.WIDE, plots.TALL))
    # low in the axes: the top is free, where a legend left to find its place would go
    for i in range(3):
        ax.plot([0, 1], [0, i / 100], color=matplotlib.cm.hsv(i / 3),
                label=f"a long legend entry number {i}")
    ax.set_ylim(0, 1)
    other = matplotlib.pyplot.figure()  # the current figure now: finish closes its own
    path = tmp_path / "deep" / "f.png"
    path.parent.mkdir()
    # a user's matplotlibrc: still a PNG
    with matplotlib.pyplot.rc_context({"savefig.format": "svg"}):
        plots.finish(fig, ax, "the title\nthe setting", path)
    assert (not matplotlib.pyplot.fignum_exists(fig.number)
            and matplotlib.pyplot.fignum_exists(other.number))
    matplotlib.pyplot.close(other)
    written = path.read_bytes()
    image = PIL.Image.open(path)
    # a palette of 256
    assert image.format == "PNG" and image.mode == "P" and len(image.getcolors(256)) <= 256
    assert "transparency" not in image.info  # opaque, as the figure is
    unoptimized = io.BytesIO()
    image.save(unoptimized, format="png")
    assert len(written) < len(unoptimized.getvalue())  # compressed as tightly as PNG goes
    assert fig._suptitle.get_text() == "the title\nthe setting"
    # the legend's top-left corner just right of the axes' top-right: beside the lines, never over
    # them
    legend, box = ax.get_legend(), ax.get_window_extent()
    where = legend.get_window_extent()
    # pads
    assert (box.x1 < where.x0 < box.x1 + 0.05 * box.width
            and box.y1 - 0.05 * box.height < where.y1 <= box.y1)
    assert not legend.get_in_layout()
    width, height = image.size
    assert width > plots.WIDE * 100  # grown to hold the legend, not squeezed into the figure
    assert list(tmp_path.glob("deep/*")) == [path]  # no temporary file left


def test_every_entry_has_a_colour_of_its_own_and_the_first_six_keep_tab10s(monkeypatch):
    """Each mode and preset in a colour of its own; the six modes' colours are tab10's, as in the
    figures drawn before, so those figures stay the same; the presets take the last colours, so that
    a mode added later takes a free one and moves no entry's."""
    assert len({plots.mode_color(e) for e in ENTRIES}) == len(ENTRIES)
    assert len(set(plots.MODE_COLORS)) == len(plots.MODE_COLORS) > len(ENTRIES)
    drawn = {"ngpt": "#393b79", "peri": "#7b4173", "dyt": "#637939"}  # in the committed figures
    assert {e: plots.mode_color(e) for e in drawn} == drawn
    tab10 = matplotlib.colormaps["tab10"].colors
    assert [matplotlib.colors.to_rgb(c) for c in plots.MODE_COLORS[:10]] == list(tab10)
    before = {e: plots.mode_color(e) for e in ENTRIES}
    monkeypatch.setattr(plots, "NORM_MODES", (*NORM_MODES, "skipinit"))
    assert ({e: plots.mode_color(e) for e in ENTRIES} == before
            and plots.mode_color("skipinit") not in before.values())


def test_the_variants_of_a_mode_are_shades_and_line_styles_of_its_colour():
    modes = {f"geonorm{i}": "geonorm" for i in range(12)} | {"pre": "pre"}
    styles = plots.styles(modes)
    assert styles["geonorm0"][0] == matplotlib.colors.to_rgb(plots.mode_color("geonorm"))
    # its first variant: the mode's own
    assert styles["pre"][0] == matplotlib.colors.to_rgb(plots.mode_color("pre"))
    assert len(set(styles.values())) == len(styles)  # every variant told apart
    hue = colorsys.rgb_to_hls(*matplotlib.colors.to_rgb(plots.mode_color("geonorm")))[0]
    for key in modes:
        if key != "pre":
            assert colorsys.rgb_to_hls(*styles[key][0])[0] == pytest.approx(hue, abs=1e-6), key
    # the 5th variant 45% of the way to white, the 9th 40% to black: the mode's colour, lighter or
    # darker
    base = matplotlib.colors.to_rgb(plots.mode_color("geonorm"))
    assert styles["geonorm4"] == (pytest.approx(tuple(c + 0.45 * (1 - c) for c in base)), "-")
    assert styles["geonorm8"] == (pytest.approx(tuple(c * 0.6 for c in base)), "-")
    assert [styles[f"geonorm{i}"][1] for i in range(5)] == ["-", "--", "-.", ":", "-"]



# ----------------------------------------------------------------------------------- labels, titles

def test_a_legend_label_names_the_mode_its_sweep_point_without_the_modes_prefix_and_another_lr():
    plan = dict(base=dict(learning_rate=1e-3))
    group = lambda mode, lr=1e-3, tripled=False, sweep={}: dict(mode=mode, lr=lr, tripled=tripled,
                                                                sweep=sweep)
    assert (results.label(group("geonorm", sweep={"geo_alpha": 3.0, "n_layer": 4}), plan)
            == "geonorm alpha=3.0 n_layer=4")
    assert results.label(group("geonorm", sweep={"geo_alpha": 3.0, "n_layer": 4}), plan,
                         without=("n_layer",)) == "geonorm alpha=3.0"
    # not pre's prefix
    assert results.label(group("pre", sweep={"geo_alpha": 3.0}), plan) == "pre geo_alpha=3.0"
    assert results.label(group("simplenorm", 3e-3, True), plan) == "simplenorm lr 0.003 (3×)"
    assert results.label(group("simplenorm", 3e-3, True), plan, with_lr=False) == "simplenorm"
    assert results.label(group("pre", 2e-3), plan) == "pre lr 0.002"
    assert (results.label(group("peri", 1e-3, sweep={"sandwich_eps": 1e-6}), plan)
            == "peri sandwich_eps=1e-06")


def test_a_title_names_the_dataset_the_block_the_size_range_the_rate_the_steps_and_the_seeds(
        tmp_path):
    plan, _, groups = ladder_of(tmp_path)
    assert (plots.setting(groups, plan)
            == "tiny, gpt2 blocks 1–4 × 32, lr 0.001, 10 steps, 1–3 seeds")
    assert (plots.setting(groups, plan, with_lr=False)
            == "tiny, gpt2 blocks 1–4 × 32, 10 steps, 1–3 seeds")
    at1 = [g for g in groups if g["sweep"]["n_layer"] == 1]
    assert plots.setting(at1, plan) == "tiny, gpt2 blocks 1 × 32, lr 0.001, 10 steps, 1 seed"
    two_sizes = [g for g in groups if g["sweep"]["n_layer"] in (1, 2)]
    assert (plots.setting(two_sizes, plan)
            == "tiny, gpt2 blocks 1–2 × 32, lr 0.001, 10 steps, 1 seed")
    plan = dict(base=dict(dataset="d", n_layer=6, n_embd=64, learning_rate=3e-4, max_iters=12345))
    # a plan without arch: GPT-2's block
    assert plots.setting([], plan).startswith("d, gpt2 blocks 6 × 64")
    plan = dict(base=dict(dataset="d", arch="llama", n_layer=6, n_embd=64, learning_rate=3e-4,
                          max_iters=12345))
    # one not run yet
    two = [dict(sweep={}, finished=2, diverged=0), dict(sweep={}, finished=0, diverged=0)]
    assert plots.setting(two, plan) == "d, llama blocks 6 × 64, lr 0.0003, 12,345 steps, 2 seeds"
    assert plots.setting([], plan).endswith(", 0 seeds")


def test_a_size_figure_draws_every_point_and_the_parameter_figure_only_those_counted(
        tmp_path, drawn):
    plan, _, groups = ladder_of(tmp_path)
    uncounted = [g | dict(params=None) for g in groups]
    plots.plot_size(uncounted, plan, "n_layer", False, tmp_path / "size.png")
    lines = lines_of(drawn["size.png"][1])
    assert lines["pre"][0] == [1, 2, 4] and lines["peri"][0] == [1, 4]
    # peri's diverged seed at 4 blocks
    assert len([line for line in lines.values() if line[3] == "x"]) == 1
    assert drawn["size.png"][1].get_xlabel() == "n_layer (log scale)"
    counted = [g | dict(params=None) if g["sweep"]["n_layer"] == 2 else g for g in groups]
    plots.plot_size(counted, plan, "n_layer", True, tmp_path / "params.png")
    lines = lines_of(drawn["params.png"][1])
    assert lines["pre"][0] == [g["params"] for g in groups if g["mode"] == "pre"
                               and g["sweep"]["n_layer"] != 2]
    [peri4] = [g["params"] for g in groups if g["group"] == "peri_lr0.001_n_layer4"]
    # its diverged seed, at its parameters
    assert [v[0] for v in lines.values() if v[3] == "x"] == [[peri4]]
    plots.plot_size([g | dict(params=None) if g["mode"] == "peri" else g for g in groups], plan,
                    "n_layer", True, tmp_path / "p.png")
    # peri: uncounted
    assert not [line for line in drawn["p.png"][1].get_lines() if line.get_marker() == "x"]


def test_the_gap_to_pre_is_at_the_same_point_of_a_sweep_that_varies_pre_through_its_entry_settings(
        tmp_path):
    """dyt_* keys vary the entries under norm_type='dyt': given to pre and sandwich as their own
    settings, each sandwich point is compared with pre at that point."""
    plan, runs = plan_of(tmp_path, "--modes=pre,sandwich", "--sweep=dyt_alpha_attn=0.5,1.0",
                         "--entry_settings={'pre': {'norm_type': 'dyt'}, "
                         "'sandwich': {'norm_type': 'dyt'}}")
    for run in runs:
        write_run(run["dir"], [(0, 4.0), (10, 2.0 + run["sweep"]["dyt_alpha_attn"]
                                          + (run["mode"] == "sandwich"))])
    gaps = {g["group"]: g["gap"] for g in results.summarize(runs, plan)}
    assert (gaps["sandwich_lr0.001_dyt_alpha_attn0.5"] == gaps["sandwich_lr0.001_dyt_alpha_attn1.0"]
            == dict(mean=1.0, std=0.0, seeds=1))


# ----------------------------------------------------------------------------------------- the race

# (mode, lr): final val loss of seeds 1 and 2 (inf: diverged); pre has a seed 3 at 4e-3 only
RACE = {
    ("pre", 1e-3): (1.80, 1.82), ("pre", 2e-3): (1.70, 1.74), ("pre", 4e-3): (1.71, 1.75),
    ("post", 1e-3): (1.90, 1.91), ("post", 2e-3): (1.75, 1.80), ("post", 4e-3): (1.66, 1.69),
    ("geonorm", 1e-3): (1.72, 1.73), ("geonorm", 2e-3): (1.78, 1.74),
    ("geonorm", 4e-3): (1.60, math.inf),
}


def test_the_race_takes_each_entry_at_its_own_best_rate_and_pairs_its_seeds_with_pres_at_pres(
        tmp_path):
    """The best rate on the seeds every training rate has (pre's seed 3 at 4e-3, however low, does
    not choose it), a rate with a diverged seed does not train, the edge is said, and the gap to pre
    is paired by seed at each one's best rate with Student's 95% interval; all as results.md and
    results.json say."""
    plan, runs = plan_of(tmp_path, "--modes=pre,post,geonorm", "--lrs=1e-3,2e-3,4e-3",
                         "--seeds=1,2,3")
    for run in runs:
        if run["seed"] == 3:
            if (run["mode"], run["lr"]) == ("pre", 4e-3):
                write_run(run["dir"], [(0, 4.0), (10, 1.0)])
            continue  # not run
        last = RACE[run["mode"], run["lr"]][run["seed"] - 1]
        write_run(run["dir"], [(0, 4.0), (10, last)],
                  "finished" if math.isfinite(last) else "diverged")
    groups = results.summarize(runs, plan)
    rows = {row["mode"]: row for row in results.race(groups, plan)}
    assert {m: (r["best_lr"], r["largest_training"], r["inside"]) for m, r in rows.items()} == {
        "pre": (2e-3, 4e-3, True), "post": (4e-3, 4e-3, False), "geonorm": (1e-3, 2e-3, False)}
    assert rows["pre"]["per_seed"] == {1: 1.70, 2: 1.74} and rows["pre"]["gap"] is None
    assert rows["post"]["final_val_loss"] == pytest.approx((1.675, statistics.stdev([1.66, 1.69])))
    gaps = [1.66 - 1.70, 1.69 - 1.74]
    half = 12.706 * statistics.stdev(gaps) / math.sqrt(2)  # t at 95% with 1 degree of freedom
    assert rows["post"]["gap"] == dict(mean=pytest.approx(statistics.mean(gaps)),
                                       ci95=pytest.approx(half), seeds=2, pre_lr=2e-3)
    text = results.results_text(groups, plan, ["CONFIG"], [])
    row = next(line for line in text.splitlines() if line.startswith("| post | 0.004 |"))
    mean = statistics.mean(gaps)
    assert f"{mean:+.4f} [{mean - half:+.4f}, {mean + half:+.4f}] (2), pre at 0.002" in row
    assert "1.6750 ± 0.0212 (sample std, 2 seeds) | 1.6600, 1.6900 |" in row
    assert "no: at the edge" in row
    assert "| geonorm | 0.001 |" in text and "| 0.002 | no: at the edge |" in text
    # no dataset here: "trains" could not be checked against the frequency baseline, and says so
    note = text.split("| geonorm | 0.001 |")[1].split("\n\n")[1]
    mentions(note, "lr that trains", "baseline is not computed", "prepare the dataset")
    for run in runs:  # geonorm diverged at every rate; post has not run yet
        if run["mode"] != "pre" and run["seed"] == 1:
            write_run(run["dir"], [(0, 4.0), (10, math.inf)], "diverged")
        elif run["mode"] != "pre":
            for name in ("log.jsonl", "seconds.json"):
                (run["dir"] / name).unlink(missing_ok=True)
    rows = results.race_table(results.race(results.summarize(runs, plan), plan)).splitlines()
    assert rows[3] == "| post | — | no rate trains | — | — | — | — |"
    shutil.rmtree(tmp_path / "out" / "ablate")
    rows = results.race_table(results.race(results.summarize(runs, plan), plan)).splitlines()
    assert rows[3] == "| post | — | none finished | — | — | — | — |"
    one_rate, one_runs = plan_of(tmp_path / "one", "--modes=pre,post", "--seeds=1")
    # no rates swept: no race
    assert results.race(results.summarize(one_runs, one_rate), one_rate) == []


def test_an_entrys_grid_is_the_rates_it_ran_not_every_rate_the_plan_names(tmp_path):
    """A race drawn with every entry's rates planned for all (--lrs=5e-4,...,8e-3): post ran the
    next point past its edge (8e-3) and its best is inside; geonorm's best is at its lowest rate
    run, not inside, though 5e-4 is planned and a run of it started and failed; pre ran neither."""
    plan, runs = plan_of(tmp_path, "--modes=pre,post,geonorm", "--lrs=5e-4,1e-3,2e-3,4e-3,8e-3",
                         "--seeds=1,2")
    added = {("post", 8e-3): (1.68, 1.70)}
    for run in runs:
        losses = RACE.get((run["mode"], run["lr"])) or added.get((run["mode"], run["lr"]))
        if losses is not None:
            last = losses[run["seed"] - 1]
            write_run(run["dir"], [(0, 4.0), (10, last)],
                      "finished" if math.isfinite(last) else "diverged")
        elif (run["mode"], run["lr"], run["seed"]) == ("geonorm", 5e-4, 1):
            write_run(run["dir"], [(0, 4.0)], "failed")
    rows = {row["mode"]: row for row in results.race(results.summarize(runs, plan), plan)}
    assert {m: (r["rates"], r["best_lr"], r["inside"]) for m, r in rows.items()} == {
        "pre": ([1e-3, 2e-3, 4e-3], 2e-3, True),
        "post": ([1e-3, 2e-3, 4e-3, 8e-3], 4e-3, True),
        "geonorm": ([1e-3, 2e-3, 4e-3], 1e-3, False)}
    table = results.race_table(list(rows.values()))
    assert "| geonorm | 0.001 |" in table and "| 0.002 | no: at the edge |" in table


def test_the_table_of_every_run_gives_each_seeds_loss_at_each_rate_with_the_best_in_bold(
        tmp_path):
    """A row per entry and sweep point, a column per rate; in each cell the seeds that ended, in
    seed order whatever order the runs come in, a diverged one said; a failed or unstarted seed
    left out, a rate with none ended —; only each entry's own best rate, at its own sweep point,
    in bold; the entries in the runs' order; and results.md carries the table under the race's."""
    plan, runs = plan_of(tmp_path, "--modes=pre,post,geonorm", "--lrs=1e-3,2e-3,4e-3",
                         "--seeds=1,2", "--sweep=n_layer=2,4")
    for run in runs:
        key, seed = (run["mode"], run["lr"]), run["seed"]
        if run["settings"]["n_layer"] == 2:
            if (key, seed) == (("post", 2e-3), 1):
                write_run(run["dir"], [(0, 4.0), (10, 1.9)])
        elif (key, seed) == (("post", 1e-3), 1):
            write_run(run["dir"], [(0, 4.0)], "failed")
        elif key != ("post", 1e-3) and (key, seed) != (("pre", 2e-3), 2):
            last = RACE[key][seed - 1]
            write_run(run["dir"], [(0, 4.0), (10, last)],
                      "finished" if math.isfinite(last) else "diverged")
    groups = results.summarize(runs[::-1], plan)
    rows = results.race(groups, plan)
    assert results.runs_table(groups, rows).splitlines() == [
        "| entry | lr 0.001 | lr 0.002 | lr 0.004 |",
        "|---|---|---|---|",
        "| geonorm n_layer=4 | **s1 1.7200, s2 1.7300** | s1 1.7800, s2 1.7400 "
        "| s1 1.6000, s2 diverged |",
        "| geonorm n_layer=2 | — | — | — |",
        "| post n_layer=4 | — | s1 1.7500, s2 1.8000 | **s1 1.6600, s2 1.6900** |",
        "| post n_layer=2 | — | **s1 1.9000** | — |",
        "| pre n_layer=4 | s1 1.8000, s2 1.8200 | **s1 1.7000** | s1 1.7100, s2 1.7500 |",
        "| pre n_layer=2 | — | — | — |"]
    # a family without a rate (an entry that ran one rate, on another corpus): — there
    fewer = [g for g in groups if (g["mode"], g["lr"], g["sweep"]) != ("pre", 4e-3, {"n_layer": 4})]
    assert "| pre n_layer=4 | s1 1.8000, s2 1.8200 | **s1 1.7000** | — |" in (
        results.runs_table(fewer, rows).splitlines())
    text = results.results_text(groups, plan, ["CONFIG"], [])
    assert f"{results.race_table(rows)}\n\nEvery run's" in text
    assert f"\n\n{results.runs_table(groups, rows)}\n\n" in text


def test_a_race_tables_rows_say_what_their_records_hold():
    """An entry's name carries its sweep point; one seed has no spread; the best inside the grid
    says yes, one rate run says it has no grid; and a race of one entry without the dataset still
    says that 'trains' went unchecked."""
    finished = dict(mode="post", sweep={"n_layer": 4, "n_embd": 64}, best_lr=2e-3, ended=True,
                    rates=[1e-3, 2e-3, 4e-3], final_val_loss=(1.5, 0.0), per_seed={1: 1.5},
                    largest_training=4e-3, inside=True, gap=None, frequency_loss=None)
    unfinished = dict(mode="pre", sweep={"n_layer": 4, "n_embd": 64}, best_lr=None, ended=False,
                      frequency_loss=None)
    lines = results.race_table([finished, unfinished]).splitlines()
    # a markdown table of 7 columns
    assert all(line.startswith("|") and line.endswith("|") and line.count("|") == 8
               for line in lines[:4]) and lines[1] == "|---" * 7 + "|"
    assert lines[2] == ("| post n_layer=4 n_embd=64 | 0.002 | 1.5000 (1 seed) | 1.5000 | 0.004 "
                        "| yes | — |")
    assert lines[3] == "| pre n_layer=4 n_embd=64 | — | none finished | — | — | — | — |"
    one_seed_gap = dict(mean=0.01, ci95=None, seeds=1, pre_lr=4e-3)
    assert results.race_table([finished | dict(gap=one_seed_gap)]).splitlines()[2].endswith(
        "| yes | +0.0100 (1), pre at 0.004 |")  # one pair: no interval
    one_rate = finished | dict(rates=[2e-3], largest_training=2e-3, inside=False)
    assert results.race_table([one_rate]).splitlines()[2].endswith(
        "| 0.002 | no grid: one rate ran | — |")
    mentions(results.race_table([finished]), "lr that trains", "not computed")
    assert "not computed" not in results.race_table([finished | dict(frequency_loss=3.3)])


def test_the_race_table_on_its_page_is_the_one_its_committed_runs_give(tmp_path, monkeypatch):
    """docs/race.md's table, drawn again from docs/race_char/runs by the page's own command: a run
    committed without the table drawn again, or a number edited by hand, fails. The frequency
    baseline from tiny Shakespeare where ../shared has it (checked against the page's), else the
    page's."""
    section = (ROOT / "docs" / "race.md").read_text().split("\n## The table so far\n")[1]
    section = section.split("\n## ")[0]
    command = section.replace("\\\n", " ")  # a command continued over lines is one
    [args] = re.findall(r"^python ablate\.py (.*) --figures=DIR$", command, re.M)
    [baseline] = re.findall(r"frequency baseline, (\d\.\d{4}) nats here", section)
    text = SHARED / "data" / "tinyshakespeare.txt"
    if text.is_file():
        import prepare_data
        prepare_data.prepare("shakespeare_char", tmp_path / "shakespeare_char",
                             inputs=[str(text)], workers=1)
    else:
        monkeypatch.setattr(results, "frequency_loss", lambda plan: float(baseline))
    # the sizes' parameter counts: not in the race table
    monkeypatch.setattr(results, "non_embedding_params", lambda *args: None)
    monkeypatch.chdir(ROOT)  # the command's paths are the repository's
    plan = ablate.configure([*args.split(), f"--data_dir={tmp_path}"])
    runs = ablate.plan_runs(plan, ROOT / plan["base"]["out_dir"] / "ablate")
    ablate.check_not_stale(runs)  # the runs are the config's
    rows = results.race(results.summarize(runs, plan), plan)
    assert f"{rows[0]['frequency_loss']:.4f}" == baseline
    assert f"\n{results.race_table(rows)}\n" in section
    assert f"\n{results.runs_table(results.summarize(runs, plan), rows)}\n" in section


@pytest.mark.parametrize("n, t", [(2, 12.706), (3, 4.303), (5, 2.776), (31, 2.042), (40, 1.96)])
def test_the_95_interval_is_students_t_over_the_seeds(n, t):
    values = [float(i % 3) for i in range(n)]
    mean, half = results.interval95(values)
    assert mean == pytest.approx(statistics.mean(values))
    assert half == pytest.approx(t * statistics.stdev(values) / math.sqrt(n))
    assert results.interval95([1.0]) == (1.0, None)


@pytest.mark.parametrize("lrs", ["1e-3,2e-3,4e-3", "2e-3,4e-3"])  # two rates are a race too
def test_a_rate_whose_runs_end_on_the_frequency_plateau_does_not_train(tmp_path, lrs):
    """The baseline is the val loss of predicting each token by its training frequency, computed
    from the shards; a rate whose mean final loss is not 5% below it learned no context: it neither
    trains nor wins."""
    from data import write_shard
    folder = tmp_path / "data" / "tiny"
    folder.mkdir(parents=True)
    write_shard(folder / "train.bin", [0, 0, 0, 1] * 50)  # frequencies 3/4 and 1/4
    write_shard(folder / "val.bin", [0, 1] * 20)  # half and half
    shards = dict(train=[dict(file="train.bin", tokens=200)], val=[dict(file="val.bin", tokens=40)])
    plan, runs = plan_of(tmp_path, "--modes=pre,post", f"--lrs={lrs}", "--seeds=1",
                         meta=dict(tokenizer="char", vocab_size=2, shards=shards))
    baseline = -(0.5 * math.log(0.75) + 0.5 * math.log(0.25))
    assert results.frequency_loss(plan) == pytest.approx(baseline)
    # 4e-3: on the plateau, and lowest for post
    finals = {1e-3: 0.60, 2e-3: 0.55, 4e-3: 0.96 * baseline}
    finals_post = {1e-3: 0.60, 2e-3: 0.70, 4e-3: 0.30 * baseline}
    for run in runs:
        last = (finals if run["mode"] == "pre" else finals_post)[run["lr"]]
        write_run(run["dir"], [(0, 1.0), (10, last)])
    rows = {row["mode"]: row for row in results.race(results.summarize(runs, plan), plan)}
    assert (rows["pre"]["best_lr"], rows["pre"]["largest_training"]) == (2e-3, 2e-3)
    assert (rows["post"]["best_lr"], rows["post"]["largest_training"]) == (4e-3, 4e-3)
    assert rows["pre"]["frequency_loss"] == pytest.approx(baseline)
    text = results.results_text(results.summarize(runs, plan), plan, ["CONFIG"], [])
    assert f"by its training frequency, {baseline:.4f} here" in text
    assert "not computed" not in text
