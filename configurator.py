"""
The settings every script shares, and what they select about the system.

A script's settings are the assignments between its two RULER lines, `name = default  # what it does`.
They are read from the script's file as a syntax tree, never run, so ablate.py and bench.py read
train.py's settings without importing the trainer: defaults are literals, and an annotation
(`float | None`) names the types a setting takes, else its default's type does. Config files (Python
assignments) and --key=value arguments override the defaults in the order given; an unknown name or a
wrong type is a one-line error with a did-you-mean; --help prints the script's docstring and settings.
"""
import ast
import builtins
import dataclasses
import difflib
import os
import sys
import types
from contextlib import nullcontext
from pathlib import Path

import torch

from data import first_line, padded_vocab
from model import GPT, GPTConfig

RULER = "# " + "-" * 98  # a script's settings are the assignments between the two lines that equal RULER
GPT2_NAMES = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")  # OpenAI's GPT-2 sizes (model.from_gpt2)
CHOICES = dict(init_from=("scratch", "resume", *GPT2_NAMES), lr_schedule=("cosine", "wsd"),
               backend=("auto", "nccl", "gloo"), dtype=("auto", "float32", "bfloat16"),
               parallel=("ddp", "fsdp"))  # in any script
LOCAL_GPT2 = "a folder holding a transformers GPT-2 (save_pretrained)"  # init_from may also be one
AT_LEAST = (dict.fromkeys(("batch_size", "block_size", "eval_interval", "eval_iters", "log_interval", "n_layer",
                           "n_head", "n_embd", "gradient_accumulation_steps", "ablate_jobs", "ablate_nproc",
                           "limit", "ablate_eval_limit"), 1)
            | dict.fromkeys(("max_iters", "warmup_iters", "lr_decay_iters", "total_batch_size", "learning_rate",
                             "min_lr", "weight_decay", "grad_clip", "dropout", "peak_flops", "num_fewshot"),
                            0))  # the least value
# Dense bf16 tensor-core FLOP/s (no sparsity) from the vendors' datasheets, by the words of a GPU's name as
# torch.cuda.get_device_name gives it; the longest name that matches wins ("H100 NVL" before "H100").
PEAK_FLOPS = {"B200": 2250e12, "B100": 1750e12, "H200": 989e12, "H200 NVL": 835e12, "GH200": 989e12,
              "H100": 989e12, "H100 PCIe": 756e12, "H100 NVL": 835e12, "H800": 989e12, "H20": 148e12,
              "A100": 312e12, "A800": 312e12, "A10": 125e12, "L40S": 362e12, "L40": 181e12, "L4": 121e12,
              "RTX 6000 Ada": 364e12, "RTX 4090": 165e12, "RTX 3090": 71e12}


# ---------------------------------------------------------------------------------------- settings

def settings_block(script):
    """The text between the two RULER lines of the script at path script: its settings."""
    return Path(script).read_text().split(RULER + "\n")[1]


def read_settings(script):
    """{name: (default, the types it accepts)} of a script's settings block, read as a syntax tree."""
    settings = {}
    for node in ast.parse(settings_block(script)).body:
        default = ast.literal_eval(node.value)
        if isinstance(node, ast.AnnAssign):  # name: float | None = default
            kinds = tuple(type(None) if isinstance(n, ast.Constant) else getattr(builtins, n.id)
                          for n in ast.walk(node.annotation) if isinstance(n, (ast.Name, ast.Constant)))
            settings[node.target.id] = default, kinds
        else:  # name = default
            settings[node.targets[0].id] = default, (type(default),)
    return settings


def checked(name, value, settings, where):
    """value as setting name's type (an int where a float goes is fine), else a one-line error."""
    if name not in settings:
        guess = difflib.get_close_matches(name, settings, n=1)
        hint = f"did you mean {guess[0]!r}?" if guess else f"python {Path(sys.argv[0]).name} --help lists them all"
        sys.exit(f"error: unknown setting {name!r} in {where}: {hint}")
    accepts = settings[name][1]
    if type(value) is int and float in accepts:
        return float(value)
    if type(value) not in accepts:  # exactly: True is no int here, nor 1 a bool
        kinds = " or ".join("None" if t is type(None) else t.__name__ for t in accepts)
        sys.exit(f"error: {name} must be {kinds}, got {value!r} in {where}")
    if value not in CHOICES.get(name, (value,)) and not (name == "init_from" and os.path.isdir(value)):
        local = f" or {LOCAL_GPT2}" if name == "init_from" else ""
        sys.exit(f"error: {name} must be one of {', '.join(CHOICES[name])}{local}, got {value!r} in {where}")
    if name in AT_LEAST and value is not None and value < AT_LEAST[name]:
        sys.exit(f"error: {name} must be at least {AT_LEAST[name]}, got {value!r} in {where}")
    return value


def parse_arg(arg, settings):
    """--key=value as {key: value}: the text for a str setting, else a Python literal (or the text).
    A bare --flag sets a bool setting to True."""
    name, has_value, text = arg[2:].partition("=")
    if not has_value:
        if settings.get(name, (None, ()))[1] == (bool,):
            return {name: True}
        sys.exit(f"error: {arg} needs a value: --{name}=VALUE")
    try:
        return {name: text if settings.get(name, (None, ()))[1] == (str,) else ast.literal_eval(text)}
    except (ValueError, SyntaxError):
        return {name: text}


def read_config_file(path):
    """The settings a config file assigns (it is Python: it may import a shared base)."""
    if not Path(path).is_file():
        sys.exit(f"error: no config file {path}; settings are given as --key=value")
    namespace = {}
    try:
        exec(Path(path).read_text(), namespace)
    except Exception as e:  # a missing file, a syntax error, ...
        sys.exit(f"error: config file {path}: {type(e).__name__}: {e}")
    return {k: v for k, v in namespace.items() if not k.startswith("_") and not isinstance(v, types.ModuleType)}


def print_help(text):
    """Print text and exit 0, quietly when a reader such as `| head` closed the pipe early."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush fails no more
    sys.exit(0)


def parse_settings(argv, script):
    """(all settings, those given): the defaults of the script at path script, then config files and
    --key=value in the order given. --help prints the script's docstring and its settings."""
    if "--help" in argv or "-h" in argv:
        doc = ast.get_docstring(ast.parse(Path(script).read_text()), clean=False).strip()
        print_help(doc + "\n\nsettings, their defaults and what they do:\n" + settings_block(script))
    settings, given = read_settings(script), {}
    for arg in argv:
        pairs = parse_arg(arg, settings) if arg.startswith("--") else read_config_file(arg)
        given.update({name: checked(name, value, settings, arg) for name, value in pairs.items()})
    return {name: default for name, (default, _) in settings.items()} | given, given


def parse_settings_with(argv, script, other, prefix=""):
    """parse_settings for a script that passes another's settings on (ablate.py: train.py's, to each run; bench.py:
    train.py's, for its models): (all settings, those given) of both, the script's own winning a shared name.
    Its own may be named prefix + name (ablate_modes), set as --name=... too. --help shows its own."""
    if "--help" in argv or "-h" in argv:
        parse_settings(argv, script)
    own = read_settings(script)
    settings, given = read_settings(other) | own, {}
    for arg in argv:
        long = "--" + prefix + arg[2:] if prefix + arg[2:].partition("=")[0] in own else arg
        pairs = parse_arg(long, settings) if arg.startswith("--") else read_config_file(arg)
        given.update({name: checked(name, value, settings, arg) for name, value in pairs.items()})
    return {name: default for name, (default, _) in settings.items()} | given, given


def parse_modes(value, known):
    """A modes setting, all or names by commas (pre,geonorm; a list in a config file), as a list of known modes
    in order, each once; an unknown one is a one-line error."""
    modes = list(known) if value == "all" else value.split(",") if isinstance(value, str) else value
    if unknown := [mode for mode in modes if mode not in known]:
        sys.exit(f"error: unknown mode(s) {', '.join(unknown)}: choose from {', '.join(known)} or all")
    return list(dict.fromkeys(modes))

# ------------------------------------------------------------------------ what the settings select

def pick_device(device):
    """The device setting ('auto': cuda when available), checked to be usable here. Under torchrun a GPU
    is this process's own, cuda:LOCAL_RANK."""
    device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    if device.startswith("cuda") and "LOCAL_RANK" in os.environ:
        device = f"cuda:{os.environ['LOCAL_RANK']}"
    try:
        torch.empty(0, device=device)
    except Exception as e:
        sys.exit(f"error: device {device!r} is not usable here ({first_line(e)})")
    return device


def setup_distributed(device, backend="auto", group=False):
    """(rank, world size, device) from torchrun's environment when it is set, else (0, 1, device): the
    device setting made usable, a GPU being this process's own; backend 'auto' is nccl on CUDA, gloo on CPU.
    group: a process group even without torchrun, of this one process (FSDP shards over a group)."""
    device = pick_device(device)
    if "RANK" not in os.environ and not group:
        return 0, 1, device
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    auto = "nccl" if device.startswith("cuda") else "gloo"
    alone = {} if "RANK" in os.environ else dict(store=torch.distributed.HashStore(), rank=0, world_size=1)
    torch.distributed.init_process_group(auto if backend == "auto" else backend, **alone)
    return torch.distributed.get_rank(), torch.distributed.get_world_size(), device


def pick_dtype(dtype, device):
    """The dtype setting: 'auto' is bfloat16 on CUDA, float32 elsewhere."""
    return ("bfloat16" if device.startswith("cuda") else "float32") if dtype == "auto" else dtype


def autocast(device, dtype):
    """The context a forward pass runs in: bf16 autocast, or nothing for float32."""
    return torch.autocast(torch.device(device).type, torch.bfloat16) if dtype == "bfloat16" else nullcontext()


def peak_flops_of(gpu):
    """PEAK_FLOPS of the longest table name found in the GPU's name as whole words; None if none is."""
    words = f" {gpu.replace('-', ' ')} "  # "NVIDIA A100-SXM4-80GB": the word A100, so A10 does not match it
    names = [name for name in PEAK_FLOPS if f" {name} " in words]
    return PEAK_FLOPS[max(names, key=len)] if names else None


def device_peak_flops(cfg, device):
    """(GPU name or "", its dense bf16 FLOP/s for MFU): the peak_flops setting, else looked up by name."""
    gpu = torch.cuda.get_device_name(device) if device.startswith("cuda") else ""
    return gpu, cfg.peak_flops or peak_flops_of(gpu)


def model_config(cfg, meta):
    """The GPTConfig of settings cfg on a dataset with this meta.json; a bad setting is a one-line error."""
    args = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(GPTConfig) if f.name != "vocab_size"}
    try:
        return GPTConfig(**args, vocab_size=padded_vocab(meta))
    except ValueError as e:
        sys.exit(f"error: {e}")


# ---------------------------------------------------------------------------------- memory estimate

def block_activation_bytes(config, dtype, width=None):
    """Bytes per token that one block keeps for its backward pass, counted rather than modeled: a narrow copy
    of the model (width: 8 features per head by default; eval mode: no dropout) runs forward on the CPU, 1
    and 2 blocks deep at 2 sequence lengths, and autograd's saved-tensor hooks sum the storages the graph
    keeps, each once. The differences leave out the weights and all outside the blocks; the count is scaled
    to the model's width."""
    width = width or 8 * config.n_head

    def saved(n_layer, T):
        narrow = dataclasses.replace(config, n_layer=n_layer, n_embd=width, block_size=T, vocab_size=64, multiple_of=1)
        model = GPT(narrow).eval()  # multiple_of 1: llama's MLP keeps its width's ratio to n_embd
        storages, idx = {}, torch.zeros(1, T, dtype=torch.long)

        def pack(t):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast("cpu", dtype):
            loss = model(idx, idx)[1]  # kept alive to the end: no storage is freed and reused while counting
        return sum(storages.values())

    with torch.random.fork_rng(devices=[]):  # the narrow models' init leaves the run's random draws alone
        per_token = (saved(2, 64) - saved(1, 64) - saved(2, 32) + saved(1, 32)) / 32
    return per_token * config.n_embd / width


def memory_estimate(model, cfg, world, dtype):
    """Estimated bytes per GPU (or CPU process) to train model: {parameters, gradients, optimizer,
    activations, switched: the activations with activation_checkpointing the other way}. AdamW keeps fp32
    weights, gradients and two moments, 4 + 4 + 8 bytes per parameter, divided over the processes under
    fsdp, which also gathers two blocks' weights at a time (one computing, one prefetched). ddp's bf16
    autocast keeps a bf16 copy of each weight for the backward pass. Activations of a micro-batch: each
    block's (block_activation_bytes), the head's input and fp32 log-probabilities, and as much again as one
    block's for the gradients the backward pass makes on its way; with activation checkpointing a block keeps
    only its fp32 input, and one block at a time recomputes the rest."""
    c, fsdp, bf16 = model.config, cfg.parallel == "fsdp", dtype == "bfloat16"
    n = sum(p.numel() for p in model.parameters())
    per_block = sum(p.numel() for p in model.transformer.h[0].parameters())
    shards, tokens = world if fsdp else 1, cfg.batch_size * c.block_size
    block, head = block_activation_bytes(c, dtype), 4 * c.vocab_size + 8 * c.n_embd  # per token
    copies = 2 * n if bf16 and not fsdp else 0  # ddp's autocast: a bf16 copy of every weight
    outside = copies and 2 * (n - c.n_layer * per_block)  # with checkpointing the blocks recompute theirs
    activations = (tokens * ((c.n_layer + 1) * block + head) + copies,
                   tokens * (c.n_layer * 4 * c.n_embd + 2 * block + head) + outside)
    return dict(parameters=4 * n / shards + (2 * per_block * (2 if bf16 else 4) if fsdp else 0),
                gradients=4 * n / shards, optimizer=8 * n / shards,
                activations=activations[cfg.activation_checkpointing],
                switched=activations[not cfg.activation_checkpointing])


def memory_report(model, cfg, world, dtype, device):
    """memory_estimate as the line train.py prints before the first step."""
    m = memory_estimate(model, cfg, world, dtype)
    total = m["parameters"] + m["gradients"] + m["optimizer"] + m["activations"]
    unit, size = ("GiB", 2**30) if total > 2**30 else ("MiB", 2**20)
    parts = " + ".join(f"{m[k] / size:.2f} {k}" for k in ("parameters", "gradients", "optimizer", "activations"))
    return (f"memory per {'GPU' if device.startswith('cuda') else 'process'}, estimated: {parts} = {total / size:.2f} "
            f"{unit}; activations {m['switched'] / size:.2f} {unit} with activation_checkpointing="
            f"{not cfg.activation_checkpointing}")
