"""Every file under configs/ is settings a script accepts and a model GPTConfig validates, read as
train.py (or ablate.py) reads them, without building a model; the lab's configs set what their
docstrings promise."""
import ast
import types
from pathlib import Path

import pytest

import ablate
import configurator
from configurator import ENTRIES
from conftest import ROOT, ablate_commands
from model import NORM_MODES, GPTConfig

CONFIGS = sorted((ROOT / "configs").glob("*.py"))
TRAIN, ABLATE = str(ROOT / "train.py"), str(ROOT / "ablate.py")
TRAIN_SETTINGS = configurator.read_settings(TRAIN)
# GPT-2's BPE: every config's model is valid at its vocabulary
META = {"tokenizer": "gpt2", "vocab_size": 50257}


def settings(path):
    """The settings a run of the config at path gets: train.py's, or for an ablation ablate.py's and
    train.py's."""
    if path.name.startswith("ablate_"):
        return configurator.parse_settings([str(path)], ABLATE, passes_on=TRAIN,
                                           prefix="ablate_")[0]
    return configurator.parse_settings([str(path)], TRAIN)[0]


def model(cfg, **change):
    return configurator.model_config(types.SimpleNamespace(**(cfg | change)), META)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_config_is_train_settings_and_a_valid_gptconfig(path):
    cfg = settings(path)
    assert isinstance(model(cfg), GPTConfig)
    # each run it plans is valid: its entry's and sweep point's settings
    if path.name.startswith("ablate_"):
        for run in ablate.plan_runs(ablate.configure([str(path)]), ROOT / "out"):
            assert model(cfg, **run["settings"]).norm_mode == run["settings"]["norm_mode"], \
                run["name"]
    # a run's config says how to launch it and where it writes
    elif not path.name.startswith("base_"):
        assert f"configs/{path.name}" in Path(path).read_text().split('"""')[1], \
            "the docstring's command"
        assert cfg["out_dir"] != "out", "an out_dir of its own"


@pytest.mark.parametrize("path", [p for p in CONFIGS if p.name.startswith("ablate_")],
                         ids=lambda p: p.name)
def test_every_command_an_ablation_configs_docstring_gives_plans_its_runs(path, monkeypatch):
    """The race's 4-block command (--sweep=n_layer=4 over the config's own n_layer sweep) was
    refused as a key swept twice: a documented command must plan."""
    monkeypatch.chdir(ROOT)  # the commands' paths are the repository's
    commands = ablate_commands(ast.get_docstring(ast.parse(path.read_text())).splitlines())
    assert commands, "its docstring gives no ablate.py command"
    for args in commands:
        plan = ablate.configure(args)
        assert ablate.plan_runs(plan, ROOT / "out"), args
        # each --sweep key's values are the command's, over the config's own
        for arg in (a.removeprefix("--sweep=") for a in args if a.startswith("--sweep=")):
            key, _, values = arg.partition("=")
            assert plan["sweep"][key] == [
                configurator.parse_arg(f"--{key}={v}", TRAIN_SETTINGS)[key]
                for v in values.split(",")], args


# what each of the lab's configs promises over its base's pre config: {setting: value}, then
# GPTConfig's view
LAB = {
    "lns_125m": ({"norm_mode": "lns", "lns_scaled_init": False}, {}),
    "mixln_125m": ({"norm_mode": "mixln", "mixln_alpha": 0.25, "tie_embeddings": False},
                   {"tied": False}),
    "reorder_125m": ({"norm_mode": "reorder", "qk_norm": True}, {}),
    "peri_125m": ({"norm_mode": "sandwich", "embed_norm": True}, {}),
    "hybrid_125m": ({"norm_mode": "hybrid", "hybrid_star": False}, {}),
    "dyt_125m": ({"norm_mode": "pre", "norm_type": "dyt", "dyt_alpha_attn": 0.8,
                  "dyt_alpha_ffn": 0.2, "dyt_alpha_final": 0.2}, {}),
    "ngpt_125m": ({"norm_mode": "ngpt", "learning_rate": 1.5e-3, "min_lr": 0.0, "warmup_iters": 0,
                   "weight_decay": 0.0}, {"tied": False}),
    "normformer_125m": ({"norm_mode": "normformer", "normformer_scale_resids": False}, {}),
    "subln_125m": ({"norm_mode": "subln", "subln_init_gain": True}, {}),
    "rezero_125m": ({"norm_mode": "rezero"}, {}),
    "derf_125m": ({"norm_mode": "pre", "norm_type": "derf", "derf_alpha_attn": 1.0,
                   "derf_alpha_ffn": 1.0, "derf_alpha_final": 1.0}, {}),
    "layerscale_125m": ({"norm_mode": "pre", "res_scale": "layerscale", "layerscale_init": 1e-4,
                         "tie_embeddings": False}, {"tied": False}),
    "lambdas_125m": ({"norm_mode": "pre", "res_scale": "lambda"}, {}),
    "x0mix_125m": ({"norm_mode": "pre", "x0_mix": True, "embed_norm": True}, {}),
    "gpas_125m": ({"norm_mode": "pre", "gpas": True}, {}),
    "qkhead_125m": ({"norm_mode": "pre", "qk_norm": "per_head"}, {"qk_axis": "per_head"}),
    "llama_reorder_1b": ({"norm_mode": "reorder", "qk_norm": True}, {"arch": "llama"}),
    "llama_ngpt_1b": ({"norm_mode": "ngpt", "learning_rate": 1.5e-3, "min_lr": 0.0,
                       "warmup_iters": 0, "weight_decay": 0.0}, {"arch": "llama", "tied": False}),
}


@pytest.mark.parametrize("name", LAB)
def test_the_lab_configs_set_what_they_promise_and_nothing_else(name):
    promised, model_view = LAB[name]
    cfg, pre = settings(ROOT / "configs" / f"{name}.py"), settings(ROOT / "configs" / (
        "llama_pre_1b.py" if name.startswith("llama_") else "pre_125m.py"))
    assert {k: cfg[k] for k in promised} == promised
    assert {k for k in cfg if cfg[k] != pre[k]} <= set(promised) | {"out_dir"}
    config = model(cfg)
    assert {k: getattr(config, k) for k in model_view} == model_view


def test_the_lab_configs_cover_every_new_mode_and_switch():
    modes = {settings(ROOT / "configs" / f"{name}.py")["norm_mode"] for name in LAB}
    assert set(NORM_MODES[6:]) <= modes
    assert settings(ROOT / "configs" / "peri_125m.py")["embed_norm"]
    assert settings(ROOT / "configs" / "dyt_125m.py")["norm_type"] == "dyt"
    presets = {name: settings(ROOT / "configs" / f"{name}_125m.py") for name in NEXT_PRESETS}
    assert all(cfg | configurator.PRESETS[name] == cfg for name, cfg in presets.items())


# the lab's entries whose tied head has a copy bias at init at the ablations' width
# (tests/test_llama.py, docs/modes.md)
UNTIED = ("post", "deep", "geonorm", "mixln")
# §14's rows that are presets
NEXT_PRESETS = ("derf", "layerscale", "lambdas", "x0mix", "gpas", "qkhead")
# untied in the lab, as the race runs every entry
NEXT_ROWS = ("normformer", "subln", "rezero", *NEXT_PRESETS)
LADDER = ["post", "pre", "deep", "sandwich", "geonorm", "simplenorm", "lns", "mixln", "reorder",
          "hybrid", "ngpt", "peri", "dyt"]  # the entries the depth ladder ran, before §14's rows
# its authors' schedule (docs/spec.md §13.6)
NGPT = {"warmup_iters": 0, "weight_decay": 0.0, "min_lr": 0.0}


def test_the_lab_ablation_is_every_entry_over_three_seeds_at_the_cpu_setting():
    lab, six = (ablate.configure([str(ROOT / "configs" / name)])
                for name in ("ablate_lab_char.py", "ablate_shakespeare_char.py"))
    assert lab["modes"] == list(ENTRIES) and lab["seeds"] == [1, 2, 3] and lab["lrs"] is None \
        and lab["jobs"] == 2
    assert {k for k in lab["base"] if lab["base"][k] != six["base"][k]} == {"out_dir"}
    untied = UNTIED + NEXT_ROWS
    assert lab["entry"] == {**{mode: {"tie_embeddings": False} for mode in untied}, "ngpt": NGPT}
    runs = ablate.plan_runs(lab, ROOT / "out")
    assert len(runs) == 3 * len(ENTRIES) \
        and {r["lr"] for r in runs if r["mode"] != "simplenorm"} == {2e-3}


def test_the_depth_ladder_is_the_lab_at_four_depths_one_budget_and_three_seeds_at_the_deepest():
    ladder, lab = (ablate.configure([str(ROOT / "configs" / name)])
                   for name in ("ablate_depth_char.py", "ablate_lab_char.py"))
    assert ladder["sweep"] == {"n_layer": [2, 4, 8, 16]} and ladder["seeds_at"] == {"n_layer": [16]}
    assert (ladder["modes"], ladder["entry"], ladder["seeds"]) == (LADDER, lab["entry"], [1, 2, 3])
    b = ladder["base"]
    assert (b["dataset"], b["n_embd"], b["block_size"], b["arch"]) == \
        ("shakespeare_char", 128, 64, "gpt2")
    runs = ablate.plan_runs(ladder, ROOT / "out")
    assert len(runs) == 13 * 4 + 13 * 2  # one seed at each depth, two more at 16
    assert {r["seed"] for r in runs if r["sweep"]["n_layer"] == 16} == {1, 2, 3}
    assert {r["seed"] for r in runs if r["sweep"]["n_layer"] < 16} == {1}
    budget = {tuple(r["settings"].get(k, b[k]) for k in ("max_iters", "batch_size", "block_size"))
              for r in runs}
    assert budget == {(2000, 16, 64)}  # one token budget at every depth: the lab's


def test_the_llama_depth_ladder_is_the_gpt2_ladder_on_llama_for_the_modes_that_lead_and_trail():
    llama, gpt2 = (ablate.configure([str(ROOT / "configs" / name)])
                   for name in ("ablate_depth_llama_char.py", "ablate_depth_char.py"))
    assert {k for k in llama["base"] if llama["base"][k] != gpt2["base"][k]} == \
        {"arch", "multiple_of", "out_dir"}
    assert llama["base"]["arch"] == "llama" \
        and (llama["sweep"], llama["entry"]) == (gpt2["sweep"], gpt2["entry"])
    assert llama["modes"] == ["pre", "post", "hybrid", "reorder", "dyt", "simplenorm"] \
        and llama["seeds"] == [1]
    assert len(ablate.plan_runs(llama, ROOT / "out")) == 6 * 4


def test_the_race_is_the_ladders_setting_with_one_head_and_one_grid_for_every_entry():
    """Every lab entry untied, at 1e-3 to 8e-3 by doubling, seeds 1 and 2, at 16 blocks; reorder
    with its QK-norm; otherwise the ladder's setting, so that the ladder's runs with the race's
    settings are reused."""
    race, ladder = (ablate.configure([str(ROOT / "configs" / name)])
                    for name in ("ablate_race_char.py", "ablate_depth_char.py"))
    assert race["modes"] == list(ENTRIES) and race["seeds"] == [1, 2] \
        and race["sweep"] == {"n_layer": [16]}
    assert race["lrs"] == [1e-3, 2e-3, 4e-3, 8e-3]
    assert {k for k in race["base"] if race["base"][k] != ladder["base"][k]} == \
        {"out_dir", "tie_embeddings"}
    runs = ablate.plan_runs(race, ROOT / "out")
    assert len(runs) == len(ENTRIES) * 4 * 2
    assert not any(model(race["base"] | r["settings"]).tied for r in runs)
    qk = {r["mode"]: r["settings"]["qk_norm"] for r in runs if r["settings"].get("qk_norm")}
    assert qk == {"reorder": True, "qkhead": "per_head"}  # OLMo 2's with reorder; the preset's own
    assert {r["settings"]["min_lr"] for r in runs if r["mode"] == "ngpt"} == {0.0}
    assert {r["mode"] for r in runs if (race["base"] | r["settings"])["warmup_iters"] == 0} == \
        {"ngpt"}


def test_the_second_corpus_is_the_races_setting_on_pystdlib():
    """Only the text and the folder differ from the race: a gap there is the corpus's, not a
    setting's."""
    second, race = (ablate.configure([str(ROOT / "configs" / name)])
                    for name in ("ablate_race_pystdlib.py", "ablate_race_char.py"))
    assert {k for k in race["base"] if second["base"][k] != race["base"][k]} == \
        {"dataset", "out_dir"}
    assert second["base"]["dataset"] == "pystdlib"
    assert {k: second[k] for k in ("modes", "seeds", "lrs", "sweep", "entry")} == \
        {k: race[k] for k in ("modes", "seeds", "lrs", "sweep", "entry")}


def test_the_six_mode_ablation_is_the_six_first_modes_its_readme_command_promises():
    six = ablate.configure([str(ROOT / "configs" / "ablate_shakespeare_char.py")])
    assert six["modes"] == list(NORM_MODES[:6]) == ["post", "pre", "deep", "sandwich", "geonorm",
                                                    "simplenorm"]
