"""
Speed and memory of every norm mode and preset (peri, dyt), measured in one process and reported as
ratios to `pre`.

    python bench.py                                    # 6 layers, 384 wide, block 256, batch 8
    python bench.py configs/geonorm_125m.py --device=cuda --compile=on   # GPT-2 small, vocab 50304
    python bench.py --modes=pre,geonorm,peri --steps=20 --json
    python bench.py --arch=llama --compile=on         # the llama block: ratios to llama's pre

A training step is forward, backward, clipping, the AdamW update and ngpt's projection of its
weights (GPT.normalize_weights, as train.py runs it after each step; nothing in the other modes), on
random tokens. Subnormal floats are flushed to zero while it measures: a CPU computes them in
microcode, a GPU at full speed, and reorder's gradients underflow (docs/results.md). --threads=1
gives the steadiest ratios on a shared CPU. A preset is measured as the mode and switches it names
(configurator.PRESETS). The modes take turns step by step, in an order that rotates every round, so
drift on a shared machine hits all of them alike; each figure is a median. Peak memory is measured
with one mode's model alive at a time: CUDA's max allocated during a step (weights, gradients, AdamW
state and activations), or on CPU the growth of the process's peak RSS during one step; each
entry's first (compiling) step and peak are printed on stderr as they are measured. Also
measured: sampling tokens/s with and without the KV cache, and the data loader's batches/s. The
train.py settings that shape these (the model's, the batch, AdamW's, seed, device, dtype; --help
lists them) are set as --key=value too; a train.py setting that does not shape them is an error, and
one from a config file is left out with a note.
The vocabulary is the one train.py builds for the dataset, read from data_dir/dataset/meta.json
whatever the dataset's name: GPT-2's 50257 tokens padded to 50304 for a BPE dataset, a character
table as it is (pystdlib's: this Python's characters, about 200). --vocab_size sets it instead and
needs no prepared dataset, the tokens being random; without it, pystdlib is made when missing (as
train.py makes it), and another dataset not prepared is a one-line error naming how to prepare it.
"""
import signal

# a Ctrl-C while torch loads ends the script without a traceback; data.run_cli reports later ones
if __name__ == "__main__" and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.SIG_DFL)

import contextlib
import ctypes
import dataclasses
import gc
import json
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np
import torch

import configurator
from data import (GPT2_META, check_out_dir, dataset_folder, get_batch, load_meta, padded_vocab,
                  print_help, run_cli, write_shard)
import devices
import measure
from model import GPT, GPTConfig
import prepare_data

TRAIN = Path(__file__).with_name("train.py")  # whose settings bench.py takes

# settings: the assignments between the two rulers, read by configurator.py (python bench.py
# --help); the command line sets bench_<name> as --<name>=...
# --------------------------------------------------------------------------------------------------
# the norm modes and presets, by commas (pre,geonorm,peri), or all; pre, the baseline, always
bench_modes: str | list = "all"
bench_compile = "both"  # torch.compile the model: on, off, or both (a row each)
bench_steps = 10  # timed steps per mode
bench_vocab_size: int | None = None  # random tokens' vocabulary; None: the dataset's (meta.json)
bench_sample_tokens = 240  # new tokens per sampling measurement
bench_json = False  # print the results as one JSON object
# torch's CPU threads, at most one a core; None: its default, a thread per core (1: steadier ratios)
bench_threads: int | None = None
# train.py's settings, with the defaults bench.py measures
device = "cpu"  # cpu or cuda
n_layer = 6
n_head = 6
n_embd = 384
block_size = 256
batch_size = 8
# --------------------------------------------------------------------------------------------------
PROMPT = 8  # tokens of the sampling prompt: block_size must leave room after it
# train.py's settings that shape what bench.py measures; none of the others do
# (out_dir, parallel, ...)
MEASURED = ({f.name for f in dataclasses.fields(GPTConfig)} - {"vocab_size", "norm_mode"}
            | {"seed", "data_dir", "dataset", "batch_size", "learning_rate", "weight_decay",
               "beta1", "beta2", "device", "dtype", "peak_flops"})
# checked by configurator; the model's settings by GPTConfig
RANGES = dict(bench_steps=1, bench_sample_tokens=1, bench_threads=f"[1, {os.cpu_count()}]",
              batch_size=1, learning_rate=configurator.LEARNING_RATES, weight_decay=0,
              beta1="[0, 1)", beta2="[0, 1)", seed="[0, 1e19)", peak_flops=0, dtype=devices.DTYPES)


def help_text():
    """--help: the docstring, bench.py's settings, and those of train.py that it measures, as in
    train.py."""
    own = configurator.read_settings(__file__)
    measured = configurator.settings_help(TRAIN, MEASURED - set(own))
    return (f"{__doc__.strip()}\n\nsettings, their defaults and what they do:\n"
            f"{configurator.settings_block(__file__)}\n"
            "train.py's settings that bench.py measures, with train.py's defaults:\n"
            + measured)


def check_names(argv):
    """Each --name=value a setting bench.py uses, else one line: a did-you-mean among those, or, for
    a train.py setting, what bench.py measures."""
    own = [name.removeprefix("bench_") for name in configurator.read_settings(__file__)]
    for arg in (arg for arg in argv if arg.startswith("--")):
        name = arg[2:].partition("=")[0]
        if name in own or name in MEASURED:
            continue
        if name in configurator.read_settings(TRAIN):
            sys.exit(f"error: bench.py does not use {name} ({arg}): "
                     "it measures one process's training step, sampling and data loading; "
                     "python bench.py --help lists the settings that shape them")
        hint = configurator.did_you_mean(name, {n: f"--{n}" for n in own},
                                         {n: repr(n) for n in sorted(MEASURED)},
                                         otherwise="python bench.py --help lists them all")
        sys.exit(f"error: unknown setting {name!r} in {arg}: {hint}")


def parse(argv):
    """(bench.py's own settings, the modes, train.py's settings): a namespace each, less the bench_
    prefix; every value checked before anything is measured."""
    if "--help" in argv or "-h" in argv:
        print_help(help_text())
    check_names(argv)
    cfg, given = configurator.parse_settings(argv, __file__, RANGES, TRAIN, "bench_")
    # from a config
    if left_out := sorted(set(given) - MEASURED - set(configurator.read_settings(__file__))):
        print(f"note: bench.py leaves out {', '.join(left_out)}: "
              "settings of a training run, not of what it measures", file=sys.stderr)
    if cfg["block_size"] <= PROMPT:
        sys.exit(f"error: block_size={cfg['block_size']} leaves no room to sample "
                 f"after the {PROMPT}-token prompt: give at least {PROMPT + 1}")
    own = [name for name in cfg if name.startswith("bench_")]
    args = types.SimpleNamespace(**{name.removeprefix("bench_"): cfg.pop(name) for name in own})
    modes = configurator.parse_modes(args.modes)
    if "pre" not in modes:
        modes.insert(0, "pre")  # the baseline every ratio is taken against
    if args.compile not in ("both", "on", "off"):
        sys.exit(f"error: compile must be one of both, on, off, got {args.compile!r}")
    cfg["device"] = devices.pick_device(cfg["device"])
    cfg = types.SimpleNamespace(**cfg)
    # every entry's model settings, checked by GPTConfig.validate before any is built, and before
    # the dataset is read or pystdlib made: on GPT-2's vocabulary, as train.py checks a dataset
    # not yet made (no check depends on the vocabulary's size)
    settings_of = lambda mode: vars(cfg) | configurator.entry_settings(mode)  # a row's settings
    for mode in modes:
        configurator.model_config(types.SimpleNamespace(**settings_of(mode)), GPT2_META)
    # the baseline pre among them: a setting given to all can make it another row's model
    configurator.check_alike(modes, settings_of)
    defaults = configurator.read_settings(TRAIN)
    configurator.check_acts({k: v for k, v in given.items() if k in defaults}, defaults, modes,
                            settings_of)
    # the head of a 50,257-token BPE vocabulary dominates a 125M model's memory
    if args.vocab_size is None:
        args.vocab_size = dataset_vocab(cfg.data_dir, cfg.dataset)
    return args, modes, cfg


def dataset_vocab(data_dir, dataset):
    """The vocabulary train.py builds for a prepared dataset, from its meta.json: the tokenizer it
    was prepared with decides, not the dataset's name. pystdlib, the default, is made when missing,
    as train.py makes it (offline, seconds)."""
    folder = dataset_folder(data_dir, dataset)
    if dataset == "pystdlib" and not (folder / "meta.json").exists():
        check_out_dir(folder, "data_dir")
        prepare_data.prepare("pystdlib", folder)
    try:
        return padded_vocab(load_meta(folder))
    except SystemExit as e:  # load_meta's one line names the command that prepares it
        sys.exit(f"{e.code}; or give bench.py --vocab_size=N")


@contextlib.contextmanager
def subnormals_flushed():
    """Subnormal floats flushed to zero inside; after, however it ends, the caller's as it was."""
    was_flushed = float(torch.tensor(1e-39) * 1) == 0  # torch sets the flag but has no getter
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(was_flushed)


def peak_rss_reset():
    """Return freed heap to the OS, then reset the kernel's peak-RSS mark to the current RSS
    (Linux)."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")


def rss_kib(field):
    return next(int(line.split()[1]) for line in open("/proc/self/status")
                if line.startswith(field))


class Runner:
    """One mode's or preset's model, optimizer and a fixed random batch; step() is one training
    step."""

    def __init__(self, mode, cfg, vocab_size, compiled):
        cfg = types.SimpleNamespace(**vars(cfg) | configurator.entry_settings(mode))
        torch.manual_seed(cfg.seed)
        # no padding
        config = configurator.model_config(cfg, dict(vocab_size=vocab_size, tokenizer="char"))
        self.model = GPT(config).to(cfg.device)
        self.optimizer = self.model.configure_optimizers(cfg.weight_decay, cfg.learning_rate,
                                                         (cfg.beta1, cfg.beta2),
                                                         cfg.device.split(":")[0])
        if compiled:
            # Each entry compiles GPT.forward anew (dynamo's guards see its mode and switches); past
            # dynamo's default of 8 compilations per function the rest would run eager, silently:
            # room for every entry, in both passes. Set here, not at the top: importing dynamo
            # costs every start of bench.py a second or two.
            # the name torch 2.4 knows; recompile_limit since 2.7, an alias
            torch._dynamo.config.cache_size_limit = 64
        self.fn = torch.compile(self.model) if compiled else self.model
        g = torch.Generator().manual_seed(0)
        data = torch.randint(0, vocab_size, (cfg.batch_size, cfg.block_size + 1),
                             generator=g).to(cfg.device)
        self.x, self.y, self.cfg = data[:, :-1], data[:, 1:], cfg
        self.ctx = devices.autocast(cfg.device, devices.pick_dtype(cfg.dtype, cfg.device))

    def step(self):
        with self.ctx:
            _, loss = self.fn(self.x, self.y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        # ngpt's projection, as train.py runs it; other modes: nothing
        self.model.normalize_weights()
        self.optimizer.zero_grad(set_to_none=True)
        sync(self.cfg.device)

    def peak_memory_mb(self):
        if self.cfg.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
            self.step()
            return torch.cuda.max_memory_allocated() / 2**20
        peak_rss_reset()
        before = rss_kib("VmRSS")
        self.step()
        return (rss_kib("VmHWM") - before) / 1024


def free(device):
    """Return a deleted mode's memory, so that the next mode's peak is its own."""
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device):
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def bench_training(modes, cfg, args, compiled):
    """Per mode: median step time, tokens/s, MFU, peak memory and the first (compiling) step's time.
    Memory first, one mode alive at a time; then the timing, with every mode alive to take turns."""
    first, memory = {}, {}
    for mode in modes:
        runner = Runner(mode, cfg, args.vocab_size, compiled)
        first[mode] = timed(runner.step, cfg.device)  # includes the compilation
        runner.step()  # a second warm-up: the optimizer state exists from here on
        memory[mode] = runner.peak_memory_mb()
        # compiling an entry takes up to half a minute on a GPU: how far the run has come (stderr
        # is line-buffered: each line shows at once)
        print(f"{mode}{' compiled' if compiled else ''}: first step {first[mode]:.1f} s, "
              f"peak {memory[mode]:,.0f} MB", file=sys.stderr)
        del runner
        free(cfg.device)
    runners = {mode: Runner(mode, cfg, args.vocab_size, compiled) for mode in modes}
    for runner in runners.values():
        runner.step()  # the optimizer state; a compiled model reuses the code compiled above
    times = {mode: [] for mode in modes}
    for r in range(args.steps):
        for mode in modes[r % len(modes):] + modes[:r % len(modes)]:  # rotate who goes first
            times[mode].append(timed(runners[mode].step, cfg.device))
    _, peak = measure.device_peak_flops(cfg, cfg.device)
    base, results = statistics.median(times["pre"]), []
    for mode, runner in runners.items():
        dt = statistics.median(times[mode])
        results.append(dict(
            mode=mode, compile=compiled, step_ms=1000 * dt, ratio_to_pre=dt / base,
            tokens_per_s=cfg.batch_size * cfg.block_size / dt, first_step_s=first[mode],
            mfu=runner.model.estimate_mfu(cfg.batch_size, dt, peak) if peak else None,
            peak_mem_mb=memory[mode]))
    return results


def bench_sampling(modes, cfg, args):
    """Per mode: tokens/s generating from an 8-token prompt, with and without the KV cache
    (eager)."""
    results = []
    # inside the window, where both paths agree
    n_new = min(args.sample_tokens, cfg.block_size - PROMPT)
    for mode in modes:
        model = Runner(mode, cfg, args.vocab_size, compiled=False).model.eval()
        prompt = torch.zeros(1, PROMPT, dtype=torch.long, device=cfg.device)
        speed = {}
        for use_cache in (True, False, True, False):  # interleaved; the best of two each
            dt = timed(lambda: model.generate(prompt, n_new, temperature=0, use_cache=use_cache),
                       cfg.device)
            speed[use_cache] = max(speed.get(use_cache, 0.0), n_new / dt)
        results.append(dict(mode=mode, tokens_per_s_cache=speed[True],
                            tokens_per_s_no_cache=speed[False],
                            cache_speedup=speed[True] / speed[False]))
    return results


def bench_data_loader(cfg, n_batches=200):
    """Batches/s of data.get_batch over a memory-mapped shard of 10M random tokens."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "train_000000.bin"
        write_shard(path, np.random.default_rng(0).integers(0, 65, 10_000_000, dtype=np.uint16))
        shards = [path], np.array([10_000_000])
        t0 = time.perf_counter()
        for i in range(n_batches):
            get_batch(shards, np.random.default_rng((cfg.seed, i)), cfg.batch_size,
                      cfg.block_size, cfg.device)
        dt = time.perf_counter() - t0
    return dict(batches_per_s=n_batches / dt,
                tokens_per_s=n_batches * cfg.batch_size * cfg.block_size / dt)


def print_table(report):
    print(f"{report['shape']} on {report['device']}, torch {report['torch']}, "
          f"{report['steps']} steps per mode, {report['threads']} CPU threads")
    print(f"{'mode':<11} {'compile':<8} {'ms/step':>8} {'x pre':>6} {'tokens/s':>9} {'MFU':>6} "
          f"{'peak MB':>8} {'1st step s':>10}")
    for r in report["training"]:
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] else "-"
        print(f"{r['mode']:<11} {'on' if r['compile'] else 'off':<8} {r['step_ms']:>8.1f} "
              f"{r['ratio_to_pre']:>6.3f} {r['tokens_per_s']:>9,.0f} {mfu:>6} "
              f"{r['peak_mem_mb']:>8.1f} {r['first_step_s']:>10.1f}")
    print(f"\n{'mode':<11} {'sample tok/s, cache':>19} {'no cache':>9} {'speedup':>8}")
    for r in report["sampling"]:
        print(f"{r['mode']:<11} {r['tokens_per_s_cache']:>19.1f} "
              f"{r['tokens_per_s_no_cache']:>9.1f} {r['cache_speedup']:>7.1f}x")
    d = report["data_loader"]
    print(f"\ndata loader: {d['batches_per_s']:,.0f} batches/s ({d['tokens_per_s']:,.0f} tokens/s)")


def main(argv):
    args, modes, cfg = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    # Subnormal floats (below 1.2e-38) cost an x86 CPU a microcode assist each; a GPU runs them at
    # full speed. reorder's attention, fed the unnormalized stream, saturates and sends 10^5 of them
    # a step into k and v's gradients: its step grew 1.0 -> 1.7x pre's over 40 steps here. Flushed
    # to zero, ratios time the arithmetic.
    with subnormals_flushed():
        torch.manual_seed(cfg.seed)
        compiles = {"both": (False, True), "on": (True,), "off": (False,)}[args.compile]
        report = dict(shape=f"{cfg.arch}: {cfg.n_layer} layers, {cfg.n_head} heads, "
                            f"{cfg.n_embd} wide, block {cfg.block_size}, batch {cfg.batch_size}, "
                            f"vocab {args.vocab_size}",
                      device=cfg.device, steps=args.steps, threads=torch.get_num_threads(),
                      torch=torch.__version__,
                      training=[r for c in compiles for r in bench_training(modes, cfg, args, c)],
                      sampling=bench_sampling(modes, cfg, args), data_loader=bench_data_loader(cfg))
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print_table(report)

if __name__ == "__main__":
    run_cli(main)
