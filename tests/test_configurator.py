"""configurator.py: a settings block read from the file is what Python runs, and only train.py
imports train.py."""
import ast
import inspect
import json
import os
import runpy
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest

import configurator
import sample
import train
from conftest import ROOT, error_of, mentions


@pytest.mark.parametrize("script", [train, sample])
def test_the_settings_read_from_the_file_are_those_python_runs(script):
    settings, hints = configurator.read_settings(script.__file__), inspect.get_annotations(script)
    assert len(settings) > 10
    for name, (default, kinds) in settings.items():
        assert getattr(script, name) == default \
            and type(getattr(script, name)) is type(default), name
        assert kinds == (typing.get_args(hints[name]) if name in hints else (type(default),)), name


@pytest.fixture(scope="module")
def fresh_imports():
    """The modules a fresh Python has loaded after importing the scripts that do not train
    (ablate.py, bench.py, sample.py), then after importing all of them: one process, whose start
    costs seconds, for the two tests below."""
    check = ("import json, sys; import ablate, bench, sample; first = sorted(sys.modules); "
             "import eval, prepare_data, train; print(json.dumps([first, sorted(sys.modules)]))")
    result = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return [set(modules) for modules in json.loads(result.stdout)]


def test_no_script_but_train_imports_train(fresh_imports):
    """What the scripts share lives in the modules, not in train.py. ablate.py alone calls
    train.main, as train.py's own check of each planned run (its --dry_run), when it checks them."""
    for path in Path(ROOT).glob("*.py"):
        tree = ast.parse(path.read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert ("train" in imported) == (path.name == "ablate.py"), path.name
    tree = ast.parse((ROOT / "ablate.py").read_text())
    uses = {ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name) and n.value.id == "train"}
    assert uses == {"train.main"}
    scripts_that_do_not_train, _ = fresh_imports
    assert "train" not in scripts_that_do_not_train, "imported through another module"


def test_no_script_imports_dtensor_or_dynamo_until_it_needs_them(fresh_imports):
    """DTensor's machinery (behind FSDP and DCP) and dynamo cost a second or two to import: a
    mistake's one line, --help, a dry run, sampling or scoring a whole checkpoint need neither."""
    _, every_script = fresh_imports
    assert "train" in every_script  # taken after every script was imported
    assert every_script.isdisjoint({"torch.distributed.tensor", "torch._dynamo"})


@pytest.mark.parametrize("script", ["sample.py", "bench.py", "ablate.py"])
def test_help_prints_the_scripts_docstring_and_exits_0(script, monkeypatch, capsys):
    """`python script --help`, run as __main__ in this process: a process of its own would spend
    seconds importing torch."""
    doc = ast.get_docstring(ast.parse((Path(ROOT) / script).read_text()))
    monkeypatch.setattr(sys, "argv", [script, "--help"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_path(str(Path(ROOT) / script), run_name="__main__")
    out, err = capsys.readouterr()
    assert stop.value.code in (0, None) and err == ""
    assert doc.splitlines()[0] in out


def test_help_into_a_pipe_closed_early_exits_0_without_a_traceback():
    """As `python sample.py --help | head -1` does when head has read its line: the pipe is closed
    here before the text is written, so that the first write fails."""
    read, write = os.pipe()
    os.close(read)
    # as Python's default
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    result = subprocess.run([sys.executable, "sample.py", "--help"], cwd=ROOT, stdout=write,
                            stderr=subprocess.PIPE, text=True, timeout=120, env=buffered)
    os.close(write)
    assert (result.returncode, result.stderr) == (0, "")


def test_a_config_file_that_fails_to_run_is_one_line_naming_the_file_and_the_error(tmp_path):
    config = tmp_path / "small.py"
    config.write_text("n_layer = 2\nn_head = n_heads\n")
    message = error_of(configurator.read_config_file, config)
    assert str(config) in message and "NameError" in message and "n_heads" in message
    for ending in ("import sys\nsys.exit(0)\n", "raise SystemExit\n", "exit('done')\n"):
        # it would end the script as a success, having done nothing
        config.write_text("n_layer = 2\n" + ending)
        message = error_of(configurator.read_config_file, config)
        assert str(config) in message and "exits" in message and "assigns settings only" in message


# ---------------------------------------------------------------- the reader on a script of its own

def script(folder, name, settings, usage=""):
    """A script at folder/name whose settings block is settings, its docstring a line and usage."""
    path = folder / name
    path.write_text(f'"""{name}: a test script.\n{usage}"""\n{configurator.RULER}\n'
                    f'{settings}{configurator.RULER}\n')
    return path


@pytest.fixture
def scripts(tmp_path):
    """tool.py, with settings of every kind, which passes its own settings and base.py's on."""
    base = script(tmp_path, "base.py",
                  'lr = 0.1  # a float\nsteps = 10  # an int\nname = "base"  # shared\n')
    tool = script(tmp_path, "tool.py",
                  'name = "tool"  # shared: its own wins\ntool_jobs = 1  # prefixed\n'
                  'flag = False  # a bool\nscale: float | None = None  # a float or None\n'
                  'word = "a"  # a str\ntool_label = "x"  # prefixed, a str\n')
    return tool, base


def test_defaults_then_config_files_then_arguments_in_order_each_checked(scripts, tmp_path):
    tool, base = scripts
    (tmp_path / "c.py").write_text("import math\nsteps = 20\nlr = 1\n_private = 3\n")
    everything, given = configurator.parse_settings(
        [str(tmp_path / "c.py"), "--steps=30", "--jobs=4", "--flag", "--word=1e3", "--scale=2",
         "--label=k=v"], tool, passes_on=base, prefix="tool_")
    # no math
    assert given == dict(steps=30, lr=1.0, tool_jobs=4, flag=True, word="1e3", scale=2.0,
                         tool_label="k=v")
    assert everything == given | dict(name="tool")
    assert [type(given[k]) for k in ("lr", "scale", "word", "flag")] == [float, float, str, bool]
    assert configurator.parse_settings(["--steps=3", str(tmp_path / "c.py")], tool,
                                       passes_on=base)[1]["steps"] == 20
    # alone: its own
    assert configurator.parse_settings([], base)[0] == dict(lr=0.1, steps=10, name="base")


# each message names the argument, and says what is wrong or the fix
@pytest.mark.parametrize("arg, words", [
    ("--stesp=3", ("'stesp'", "'steps'")),
    ("--zzzzzz=3", ("'zzzzzz'", "python pytest --help")),
    ("--steps=1.5", ("steps", "int", "1.5")),
    ("--steps=True", ("steps", "int", "True")),  # a bool is no int here
    ("--flag=1", ("flag", "bool", "1")),  # nor an int a bool
    ("--scale=big", ("scale", "float or None", "'big'")),
    ("--steps", ("needs a value", "--steps=VALUE")),  # only a bool may go bare
    ("--steps=0", ("steps", "at least 1", "0")),
    ("--lr=1", ("lr", "[0, 1)", "1.0")),
    ("--word=c", ("word", "a, b", "'c'")),
])
def test_each_mistake_is_one_line_naming_the_setting_and_the_fix(scripts, arg, words, monkeypatch):
    tool, base = scripts
    monkeypatch.setattr(sys, "argv", ["pytest"])
    ranges = dict(steps=1, lr="[0, 1)", word=("a", "b"), scale=0)
    mentions(error_of(configurator.parse_settings, [arg], tool, ranges, base, "tool_"), arg, *words)


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_is_the_docstring_as_written_then_the_settings_block(tmp_path, capsys, flag):
    tool = script(tmp_path, "tool.py", "steps = 10  # an int\n",
                  usage="    python tool.py --steps=3\n")
    with pytest.raises(SystemExit) as e:
        configurator.parse_settings(["--steps=2", flag], tool)
    assert e.value.code in (0, None) and capsys.readouterr().out == (
        "tool.py: a test script.\n    python tool.py --steps=3\n\n"
        "settings, their defaults and what they do:\n"
        "steps = 10  # an int\n\n")  # the usage line keeps its indentation


@pytest.mark.parametrize("value, bounds, fails", [
    (0, 0, None), (-1, 0, "at least 0"), (float("inf"), 0, "at least 0"),
    (float("nan"), 0, "at least 0"),
    (0, "[0, 1)", None), (0.999, "[0, 1)", None), (1, "[0, 1)", "in [0, 1)"),
    (-0.001, "[0, 1)", "in [0, 1)"),
    (0, "(0, 1]", "in (0, 1]"), (1, "(0, 1]", None), (1e-9, "(0, 1]", None),
    (1.5, "(0, 1]", "in (0, 1]"),
    (5, "[0, 5]", None), (5, "(0, 5)", "in (0, 5)"), (float("nan"), "[0, 1)", "in [0, 1)"),
    ("b", ("a", "b"), None), ("c", ("a", "b"), "one of a, b"),
])
def test_a_range_holds_its_ends_as_its_brackets_say_and_no_inf_or_nan(value, bounds, fails):
    assert configurator.outside(value, bounds) == fails


def test_none_is_never_out_of_range_and_a_local_gpt2_folder_is_an_init_from(scripts, tmp_path):
    tool, _ = scripts
    settings = configurator.read_settings(tool) | {"init_from": ("scratch", (str,))}
    assert configurator.checked("scale", None, settings, "x", dict(scale=0)) is None
    folder = str(tmp_path)
    assert configurator.checked("init_from", folder, settings, "x",
                                dict(init_from=("scratch",))) == folder
    assert "or a folder holding a transformers GPT-2" in error_of(
        configurator.checked, "init_from", "nope", settings, "x", dict(init_from=("scratch",)))


def test_a_modes_or_switchs_own_setting_acts_under_it_alone_and_elsewhere_is_idle():
    """owner_of by prefix, the switches' before the modes' (dyt_ is norm_type's, not a mode's);
    varies and idle_settings from it: a setting away from its default, under another mode or
    switch, is idle; at its default, or of every mode, never."""
    assert configurator.owner_of("geo_alpha") == ("norm_mode", "geonorm")
    assert configurator.owner_of("sandwich_depth_scaled") == ("norm_mode", "sandwich")
    assert configurator.owner_of("dyt_alpha_ffn") == ("norm_type", "dyt")
    assert configurator.owner_of("layerscale_init") == ("res_scale", "layerscale")
    assert configurator.owner_of("n_layer") is None and configurator.owner_of("geo") is None
    defaults = configurator.read_settings(train.__file__)
    pre = {k: v for k, (v, _) in defaults.items()}
    assert configurator.idle_settings(pre, defaults) == []
    given = pre | dict(geo_alpha=7.0, dyt_alpha_attn=5.0, layerscale_init=0.5, n_layer=9,
                       mixln_alpha=defaults["mixln_alpha"][0])
    assert configurator.idle_settings(given, defaults) == ["geo_alpha", "dyt_alpha_attn",
                                                            "layerscale_init"]
    on = given | dict(norm_mode="geonorm", norm_type="dyt", res_scale="layerscale")
    assert configurator.idle_settings(on, defaults) == []
    assert [configurator.varies(k, on) for k in ("geo_alpha", "mixln_alpha", "n_layer")] == [
        True, False, True]
    # peri is sandwich: sandwich's settings act on it
    assert configurator.varies("sandwich_depth_scaled", configurator.entry_of("peri", {}, {}))
    line = configurator.idle_line("geo_alpha", 7.0, "here", "fix it")
    assert line == ("error: geo_alpha=7.0 does nothing here: it acts under "
                    "norm_mode='geonorm'; fix it, or leave geo_alpha out")
    assert configurator.idle_line("dyt_alpha_ffn", 0.5, "here").endswith(
        "it acts under norm_type='dyt'; set that, or leave dyt_alpha_ffn out")


def test_modes_are_all_or_known_names_in_order_each_once():
    assert configurator.parse_modes("all") == list(configurator.ENTRIES)
    assert configurator.parse_modes("peri,pre,peri,geonorm") == ["peri", "pre", "geonorm"]
    assert configurator.parse_modes(["dyt", "post"]) == ["dyt", "post"]
    message = error_of(configurator.parse_modes, "pre,rms,layer")
    mentions(message, "rms, layer", ", ".join(configurator.ENTRIES), "all")
    for empty in ("", []):  # --modes= on the command line, modes = [] in a config file
        mentions(error_of(configurator.parse_modes, empty), "no modes given",
                 ", ".join(configurator.ENTRIES))
    # all among names: it was "unknown mode(s) all: choose from ... or all"
    for mixed in ("all,pre", ["pre", "all"]):
        mentions(error_of(configurator.parse_modes, mixed), repr(mixed), "all is every entry",
                 "alone", "name the entries")
    # a comma too many: it was "unknown mode(s) : ...", the empty name unseen
    for comma in ("pre,", "pre,,geonorm", ",pre"):
        mentions(error_of(configurator.parse_modes, comma), repr(comma), "an empty name",
                 "a comma too many")
    assert configurator.entry_settings("peri") == dict(norm_mode="sandwich", embed_norm=True)
    assert configurator.entry_settings("lns") == dict(norm_mode="lns")


def test_the_model_config_takes_every_model_setting_and_pads_gpt2s_vocabulary():
    settings = configurator.parse_settings(
        ["--n_layer=3", "--norm_mode=hybrid", "--rope_theta=500.0"], train.__file__)[0]
    config = configurator.model_config(types.SimpleNamespace(**settings),
                                       dict(tokenizer="gpt2", vocab_size=50257))
    assert (config.n_layer, config.norm_mode, config.rope_theta, config.vocab_size) == \
        (3, "hybrid", 500.0, 50304)
    # a character table as it is
    assert configurator.model_config(types.SimpleNamespace(**settings),
                                     dict(tokenizer="char", vocab_size=65)).vocab_size == 65
    bad = types.SimpleNamespace(**settings | dict(n_head=5))
    assert error_of(configurator.model_config, bad,
                    dict(tokenizer="char", vocab_size=65)).startswith(
        f"error: n_embd={settings['n_embd']} is not divisible by n_head=5")


def test_help_gives_a_model_setting_model_py_s_words_only_where_it_has_none_of_its_own(tmp_path):
    """A script's own comment on a model setting is what --help shows (a fork may describe it
    otherwise); one without gets model.py's, annotated or not; a setting that is not a model
    field gets nothing."""
    script = tmp_path / "script.py"
    script.write_text("\n".join([
        configurator.RULER,
        "n_layer = 2  # this script's own words",
        "n_head: int = 2",
        "steps = 10",
        configurator.RULER, ""]))
    notes = configurator.model_notes()
    assert configurator.settings_help(script).splitlines() == [
        "n_layer = 2  # this script's own words",
        f"n_head: int = 2  # {notes['n_head']}",
        "steps = 10"]
