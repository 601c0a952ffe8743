"""The settings reader every script shares: a script's settings, their types, choices and ranges.

A script's settings are the assignments between its two RULER lines,
`name = default  # what it does`, read from its file as a syntax tree, never run: ablate.py and
bench.py read train.py's without importing the trainer. Defaults are literals; an annotation
(`float | None`) names the types a setting takes, else the default's type does. Config files (Python
assignments), then --key=value arguments, override the defaults in order; an unknown name, a wrong
type or a value outside the script's own range for it is a one-line error (with a did-you-mean);
--help prints the script's docstring and settings. GPTConfig.validate checks the model's.
The lab's presets, the entries beside the modes, are here too, and the rule ablate.py plans with:
which entries a sweep key varies (a mode's or a switch's own prefix).
"""
import ast
import builtins
import dataclasses
import difflib
import inspect
import math
import os
import sys
import types
from pathlib import Path

from data import padded_vocab, print_help
from model import NORM_MODES, GPTConfig

# a script's settings are the assignments between the two lines that equal RULER
RULER = "# " + "-" * 98
LOCAL_GPT2 = "a folder holding a transformers GPT-2 (save_pretrained)"  # init_from may also be one
# a learning rate's range (train.py's, bench.py's): AdamW's step, the rate / (1 - beta1), is then a
# float32 for every beta1 below 1
LEARNING_RATES = "[0, 1e20]"


# ----------------------------------------------------------------------------------------- settings

def settings_block(script):
    """The text between the two RULER lines of the script at path script: its settings."""
    return Path(script).read_text().split(RULER + "\n")[1]


def model_notes():
    """{field: description} of GPTConfig's fields, read from model.py, their one home: the comment
    lines just above a field, then the comment on its line."""
    notes = {}
    above = []
    for line in inspect.getsource(GPTConfig).splitlines():
        text = line.strip()
        if text.startswith("def "):  # the fields come first
            break
        name, colon, rest = text.partition(":")
        if text.startswith("#"):
            above.append(text.lstrip("# "))
        elif colon and name.isidentifier():
            notes[name] = " ".join([*above, rest.partition("  # ")[2]]).strip()
            above = []
        elif not text:  # a blank line: the comment above it is no field's
            above = []
    return notes


def settings_help(script, names=None):
    """The script's settings block as --help shows it, or its lines of the settings in names. A
    setting with no comment of its own that is a GPTConfig field (train.py's model settings) gets
    model.py's description."""
    notes = model_notes()
    lines = []
    for line in settings_block(script).split("\n"):
        name = line.split(" ")[0].rstrip(":")
        if name in notes and "#" not in line:
            line = f"{line}  # {notes[name]}"
        if names is None or name in names:
            lines.append(line)
    return "\n".join(lines)


def read_settings(script):
    """{name: (default, the types it accepts)} of a script's settings block, read as a syntax
    tree."""
    settings = {}
    for node in ast.parse(settings_block(script)).body:
        default = ast.literal_eval(node.value)
        if isinstance(node, ast.AnnAssign):  # name: float | None = default
            kinds = tuple(type(None) if isinstance(n, ast.Constant) else getattr(builtins, n.id)
                          for n in ast.walk(node.annotation)
                          if isinstance(n, (ast.Name, ast.Constant)))
            settings[node.target.id] = default, kinds
        else:  # name = default
            settings[node.targets[0].id] = default, (type(default),)
    return settings


def outside(value, bounds):
    """What value must be if it lies outside bounds, else None: bounds is the least value, an
    interval as text ("[0, 1)" holds 0, not 1), or a tuple of the choices. inf and nan lie outside
    every range."""
    if isinstance(bounds, tuple):
        return None if value in bounds else f"one of {', '.join(bounds)}"
    text = bounds if isinstance(bounds, str) else f"[{bounds}, inf)"
    low, high = map(float, text[1:-1].split(","))
    above = low <= value if text[0] == "[" else low < value
    below = value <= high if text[-1] == "]" else value < high
    return (None if above and below else f"in {text}" if isinstance(bounds, str)
            else f"at least {bounds}")


def did_you_mean(name, *spellings, otherwise):
    """The hint for an unknown name: 'did you mean X?' for the nearest candidate, looked for in each
    of spellings ({candidate: how the hint writes it}) in turn, else otherwise (where the names are
    listed)."""
    for spelling in spellings:
        if guess := difflib.get_close_matches(name, list(spelling), n=1):
            return f"did you mean {spelling[guess[0]]}?"
    return otherwise


def checked(name, value, settings, where, ranges=None):
    """value as setting name's type (an int where a float goes is fine) and within ranges[name] (the
    script's own table of ranges and choices, where it has one), else a one-line error."""
    if name not in settings:
        hint = did_you_mean(name, {s: repr(s) for s in settings},
                            otherwise=f"python {Path(sys.argv[0]).name} --help lists them all")
        sys.exit(f"error: unknown setting {name!r} in {where}: {hint}")
    accepts = settings[name][1]
    if type(value) is int and float in accepts:
        value = float(value)
    if type(value) not in accepts:  # exactly: True is no int here, nor 1 a bool
        kinds = " or ".join("None" if t is type(None) else t.__name__ for t in accepts)
        sys.exit(f"error: {name} must be {kinds}, got {value!r} in {where}")
    # 1e999 reads as inf; nan from a config file
    if type(value) is float and not math.isfinite(value):
        sys.exit(f"error: {name} must be a finite number, got {value!r} in {where}")
    if name == "init_from" and os.path.isdir(value):  # a local GPT-2 beside the named choices
        return value
    if value is not None and name in (ranges or {}) and (bounds := outside(value, ranges[name])):
        local = f" or {LOCAL_GPT2}" if name == "init_from" else ""
        sys.exit(f"error: {name} must be {bounds}{local}, got {value!r} in {where}")
    return value


def parse_arg(arg, settings):
    """--key=value as {key: value}: the text for a str setting, else a Python literal (or the text).
    A bare --flag sets a bool setting to True."""
    name, has_value, text = arg[2:].partition("=")
    kinds = settings.get(name, (None, ()))[1]
    if not has_value and kinds != (bool,):
        sys.exit(f"error: {arg} needs a value: --{name}=VALUE")
    try:
        return {name: True if not has_value else text if kinds == (str,)
                else ast.literal_eval(text)}
    except (ValueError, SyntaxError):
        return {name: text}


def read_config_file(path):
    """The settings a config file assigns (it is Python: it may import a shared base)."""
    if not Path(path).is_file():
        sys.exit(f"error: no config file {path}; settings are given as --key=value")
    try:
        exec(Path(path).read_text(), namespace := {})
    except Exception as e:  # a missing file, a syntax error, ...
        sys.exit(f"error: config file {path}: {type(e).__name__}: {e}")
    # sys.exit(0) in a config would end the script as a success, having done nothing
    except SystemExit as e:
        sys.exit(f"error: config file {path} exits (SystemExit: {e.code}): "
                 "a config file assigns settings only")
    return {k: v for k, v in namespace.items()
            if not k.startswith("_") and not isinstance(v, types.ModuleType)}


def parse_settings(argv, script, ranges=None, passes_on=None, prefix=""):
    """(all settings, those given): the script's defaults, then config files and --key=value in
    order, each checked (ranges: {name: bounds for outside} of its own settings); --help prints its
    docstring and settings. passes_on: a script whose settings this one takes too (ablate.py passes
    train.py's on to each run), its own winning a shared name; its own may be named prefix + name
    (ablate_modes) and set as --name."""
    if "--help" in argv or "-h" in argv:
        doc = ast.get_docstring(ast.parse(Path(script).read_text()), clean=False).strip()
        print_help(doc + "\n\nsettings, their defaults and what they do:\n"
                   + settings_help(script))
    own = read_settings(script)
    settings, given = (read_settings(passes_on) if passes_on else {}) | own, {}
    for arg in argv:
        long = ("--" + prefix + arg[2:] if prefix and prefix + arg[2:].partition("=")[0] in own
                else arg)
        pairs = parse_arg(long, settings) if arg.startswith("--") else read_config_file(arg)
        given.update({name: checked(name, value, settings, arg, ranges)
                      for name, value in pairs.items()})
    return {name: default for name, (default, _) in settings.items()} | given, given


# The lab's presets, which ablate.py and bench.py run as entries beside the modes under their own
# names: a placement and the switches that make the scheme (§13.3, §13.5, §14). ENTRIES: the
# modes, then the presets.
# peri and dyt stay last: a preset's plot colour counts from the end (plots.mode_color).
PRESETS = {
    # Dynamic erf for every norm, as its GPT-2 patch
    "derf": dict(norm_mode="pre", norm_type="derf"),
    # CaiT's x + λ⊙f(N(x)), λ from 1e-4
    "layerscale": dict(norm_mode="pre", res_scale="layerscale"),
    # modded-nanogpt's λ_res·x + λ_post·f(N(x))
    "lambdas": dict(norm_mode="pre", res_scale="lambda"),
    # nanochat's x ← λ·x + μ·x_0 before each block, of a normalized x_0 as both speedruns
    # mix in
    "x0mix": dict(norm_mode="pre", x0_mix=True, embed_norm=True),
    "gpas": dict(norm_mode="pre", gpas=True),  # GPAS after each add of pre, its authors' Pre+GPAS
    "qkhead": dict(norm_mode="pre", qk_norm="per_head"),  # QK-norm on each head (Qwen3)
    "peri": dict(norm_mode="sandwich", embed_norm=True),  # Peri-LN: sandwich + a norm on x_0
    "dyt": dict(norm_mode="pre", norm_type="dyt"),  # DyT: pre with Dynamic Tanh for every norm
}
ENTRIES = (*NORM_MODES, *PRESETS)


def entry_settings(entry):
    """The train.py settings that make an entry: a mode's norm_mode, or a preset's settings."""
    return PRESETS.get(entry, dict(norm_mode=entry))


def parse_modes(value, known=ENTRIES):
    """A modes setting, all or names by commas (pre,geonorm,peri; a list in a config file), as a
    list of known modes or presets in order, each once; an unknown one is a one-line error."""
    if not value:  # --modes= : "" split is [""], an unknown mode with no name
        sys.exit(f"error: no modes given: choose from {', '.join(known)} or all")
    if value == "all":
        return list(known)
    modes = value.split(",") if isinstance(value, str) else value
    if "all" in modes:
        sys.exit(f"error: modes {value!r} names all beside other entries: all is every entry, "
                 f"given alone (all), or name the entries (pre,geonorm)")
    if "" in modes:
        sys.exit(f"error: modes {value!r} has an empty name (a comma too many): name each entry, "
                 f"by commas (pre,geonorm)")
    if unknown := [mode for mode in modes if mode not in known]:
        sys.exit(f"error: unknown mode(s) {', '.join(unknown)}: "
                 f"choose from {', '.join(known)} or all")
    return list(dict.fromkeys(modes))


# The settings of a switch, by their prefix, and the setting and value that turn it on: sweeping one
# varies the entries the switch is on in; its preset bears the value's name (dyt, derf, layerscale)
SWITCH_OF_PREFIX = {"dyt_": ("norm_type", "dyt"), "derf_": ("norm_type", "derf"),
                    "layerscale_": ("res_scale", "layerscale")}
# The settings that belong to one mode or switch, by their prefix: sweeping one varies only that
# mode (ablate.py), and a legend names it without the prefix (geonorm alpha=3.0)
MODE_OF_PREFIX = {"geo_": "geonorm", "sandwich_": "sandwich", "simplenorm_": "simplenorm",
                  "lns_": "lns", "mixln_": "mixln", "hybrid_": "hybrid",
                  "normformer_": "normformer", "subln_": "subln",
                  **{prefix: value for prefix, (_, value) in SWITCH_OF_PREFIX.items()}}
PREFIX_OF_MODE = {mode: prefix for prefix, mode in MODE_OF_PREFIX.items()}


def check_alike(modes, settings_of):
    """No two entries are the same model (settings_of: an entry's settings): pre under a config's
    norm_type='dyt' is the preset dyt, and the two would be one model under two names in a table;
    else one line naming what made them alike."""
    seen = {}
    for mode in modes:
        settings = settings_of(mode)
        key = repr(sorted(settings.items()))
        if key in seen:
            # what makes the two entries what they are, which the settings given made alike
            names = (set(entry_settings(seen[key])) | set(entry_settings(mode))) - {"norm_mode"}
            both = ", ".join(f"{k}={settings[k]!r}" for k in sorted(names))
            sys.exit(f"error: the entries {seen[key]} and {mode} would be the same model (both "
                     f"with {both}): drop one from --modes, or leave out the setting that makes "
                     f"them alike")
        seen[key] = mode


def entry_of(mode, given, entry):
    """An entry's own train.py settings over the config's (given): its preset's or norm_mode, then
    the ablation's own for it (entry, ablate.py's ablate_entry_settings)."""
    return given | entry_settings(mode) | entry.get(mode, {})


def owner_of(key):
    """The setting and value under which a mode's or switch's own setting acts: geo_alpha's
    ('norm_mode', 'geonorm'), dyt_alpha_attn's ('norm_type', 'dyt'); None for a setting of every
    mode."""
    for prefix, switch in SWITCH_OF_PREFIX.items():
        if key.startswith(prefix):
            return switch
    return next((("norm_mode", mode) for prefix, mode in MODE_OF_PREFIX.items()
                 if key.startswith(prefix)), None)


def varies(key, settings):
    """Whether key acts on (and sweeping it varies) the entry whose settings are settings
    (entry_of): dyt_* keys an entry under norm_type='dyt' (SWITCH_OF_PREFIX); geo_* keys geonorm
    only, sandwich_* sandwich and peri, and so on; other keys every entry."""
    owner = owner_of(key)
    return owner is None or settings.get(owner[0]) == owner[1]


def idle_settings(settings, defaults):
    """The settings away from their defaults (read_settings') that the model never reads under
    settings' own mode and switches: geo_alpha under pre, dyt_* without DyT."""
    return [key for key, value in settings.items()
            if key in defaults and value != defaults[key][0] and not varies(key, settings)]


def check_acts(given, defaults, modes, settings_of):
    """Each setting given (away from its default) acts on one of the entries at least (settings_of:
    an entry's settings): geo_alpha with no geonorm among them would change no run; else one
    line."""
    for key in idle_settings(given, defaults):
        if not any(varies(key, settings_of(mode)) for mode in modes):
            sys.exit(idle_line(key, given[key], f"to any of the modes {', '.join(modes)}",
                               "add an entry under it to --modes"))


def idle_line(key, value, where, fix="set that"):
    """The one line of a setting that does nothing where it is given (where: "under
    norm_mode='pre'"), naming what it acts under."""
    name, on = owner_of(key)
    return (f"error: {key}={value!r} does nothing {where}: it acts under {name}={on!r}; {fix}, "
            f"or leave {key} out")


# -------------------------------------------------------------------------------------------- model

def model_config(cfg, meta):
    """The GPTConfig of settings cfg on a dataset with this meta.json; a bad setting is a one-line
    error."""
    args = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(GPTConfig)
            if f.name != "vocab_size"}
    try:
        return GPTConfig(**args, vocab_size=padded_vocab(meta))
    except ValueError as e:
        sys.exit(f"error: {e}")
