"""
Train a GPT with any of model.py's norm modes, on one device (CPU included) or many through
torchrun.

    # a small char-level model on pystdlib, CPU, minutes
    python train.py
    python train.py configs/shakespeare_char.py --norm_mode=geonorm
    torchrun --standalone --nproc_per_node=8 train.py configs/geonorm_125m.py
    torchrun --nnodes=2 --node_rank=0 --master_addr=10.0.0.1 --master_port=29500 \\
        --nproc_per_node=8 train.py configs/geonorm_125m.py  # and --node_rank=1 on the second node
    python train.py --out_dir=out --init_from=resume  # go on exactly where out/ckpt.pt stopped
    # fine-tune OpenAI's GPT-2
    python train.py --init_from=gpt2 --dataset=my_bpe_text --learning_rate=3e-5
    # fsdp: sharded over 8 GPUs
    torchrun --standalone --nproc_per_node=8 train.py configs/llama_simplenorm_7b.py

Settings: the defaults below, then (resuming) the checkpoint's, then config files (Python
assignments) and --key=value arguments in the order given. Every random draw of a step, data and
dropout alike, is a function of (seed, step, micro-batch), so a resumed run repeats an
uninterrupted one bit for bit.

SIGTERM and SIGINT, however many arrive (torchrun forwards each one it gets, so a worker often gets
two), stop the run after the step in flight: no evaluation, a checkpoint at once, exit 0. The third
SIGINT (Ctrl-C three times) stops at once, without a checkpoint.
"""
import signal

# a Ctrl-C while torch loads ends the script without a traceback; data.run_cli reports later ones
if __name__ == "__main__" and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.SIG_DFL)

import contextlib
import dataclasses
import math
import os
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.parallel import DistributedDataParallel as DDP

import checkpoint
import configurator
import devices
import logbook
import measure
import prepare_data
from data import (GPT2_META, check_out_dir, dataset_folder, first_line, get_batch, load_meta,
                  nearest_entry, prepare_command, read_shard, run_cli)
from model import GPT, GPT2_NAMES, from_gpt2

# settings: the assignments between the two rulers, read by configurator.py (python train.py --help)
# --------------------------------------------------------------------------------------------------
# I/O
out_dir = "out"  # the checkpoint (ckpt.pt, or ckpt/ sharded), log.jsonl and config.json go here
init_from = "scratch"  # scratch, resume (out_dir's checkpoint), gpt2[-medium|-large|-xl], a folder
eval_interval = 250  # evaluate every this many steps, and at the end
eval_iters = 20  # batches per split in an evaluation: the same batches every time
log_interval = 10  # print and log the training loss every this many steps
always_save_checkpoint = True  # at every evaluation; False: when val loss improves, and at the end
log_layer_stats = False  # at evaluations also log each block's grad norm, RMS, rotation angle
wandb_log = False  # also log to Weights & Biases, if it is installed
wandb_project = "normgpt"  # wandb project name
wandb_run_name = "run"  # wandb run name
# data
data_dir = "data"  # the folder holding prepared datasets
dataset = "pystdlib"  # a folder in data_dir by prepare_data.py (pystdlib is made when missing)
batch_size = 12  # sequences per micro-batch, per process
block_size = 64
gradient_accumulation_steps: int | None = None  # micro-batches a step, all processes; None: 1 each
total_batch_size = 0  # tokens per optimizer step; when > 0 it sets gradient_accumulation_steps
seed = 1337  # seeds the initialization, every batch and every dropout mask
# model: GPTConfig's fields, each described beside it in model.py (and by python train.py
# --help); vocab_size comes from the dataset's meta.json
n_layer = 4
n_head = 4
n_embd = 128
dropout = 0.0
bias = False
arch = "gpt2"
tie_embeddings: bool | None = None
n_kv_head: int | None = None
rope_theta = 10000.0
multiple_of = 256
ffn_dim_multiplier: float | None = None
norm_mode = "pre"
norm_eps: float | None = None
qk_norm: bool | str = False
geo_alpha = 1.0
geo_decay = "harmonic"
geo_input_norm = True
geo_radius = "sqrt_d"
geo_max_angle: float | None = None
sandwich_depth_scaled = False
gelu_tanh = False
lns_scaled_init = False
mixln_alpha = 0.25
hybrid_star = False
embed_norm = False
norm_type = "norm"
dyt_alpha_attn = 0.8
dyt_alpha_ffn = 0.2
dyt_alpha_final = 0.2
derf_alpha_attn = 1.0
derf_alpha_ffn = 1.0
derf_alpha_final = 1.0
derf_shift_init = 0.0
pointwise_bias: bool | None = None
res_scale = "none"
layerscale_init = 1e-4
x0_mix = False
normformer_scale_resids = False
subln_init_gain = True
gpas = False
# optimizer: AdamW
learning_rate = 1e-3  # peak learning rate
max_iters = 2000  # optimizer steps in all
weight_decay = 0.1  # on matrices and embeddings, not on biases and norm gains
beta1 = 0.9  # AdamW beta1
beta2 = 0.99  # AdamW beta2
grad_clip = 1.0  # clip the gradient norm at this value; 0: no clipping
gpas_gate_clip = 0.0  # gpas: then clip the gates' gradient norm alone at this value; 0: no clipping
# learning-rate schedule
lr_schedule = "cosine"  # 'cosine', or 'wsd': warmup, stable, then a linear decay
warmup_iters = 100  # linear warmup steps
lr_decay_iters: int | None = None  # the decay reaches min_lr at this step; None: max_iters
min_lr = 1e-4  # the final learning rate, at most learning_rate
wsd_decay_frac = 0.2  # wsd: the last fraction of lr_decay_iters decays linearly
# processes and memory: torchrun's RANK, LOCAL_RANK and WORLD_SIZE start several
parallel = "ddp"  # ddp: each process holds the whole model; fsdp: weights, grads, AdamW sharded
activation_checkpointing = False  # keep each block's input only; recompute the rest when backward
backend = "auto"  # 'nccl' or 'gloo'; auto: nccl on CUDA, gloo on CPU
# system
device = "auto"  # 'cpu', 'cuda', 'cuda:1', 'mps'; auto: cuda when available
dtype = "auto"  # 'float32', or 'bfloat16' autocast; auto: bfloat16 on CUDA, float32 elsewhere
compile: bool | None = None  # torch.compile the model; None: on CUDA only
peak_flops = 0.0  # one device's dense bf16 FLOP/s, for MFU; 0: looked up from the GPU's name
dry_run = False  # check the settings, data and checkpoint, print the plan and exit, writing nothing
# --------------------------------------------------------------------------------------------------
# the ranges of train.py's own settings, the least value or an interval (GPTConfig.validate
# checks the model's); a seed is at most 2**64 - 1
RANGES = dict(batch_size=1, gradient_accumulation_steps=1, eval_interval=1, eval_iters=1,
              log_interval=1, max_iters=0, warmup_iters=0, lr_decay_iters=0, total_batch_size=0,
              learning_rate=configurator.LEARNING_RATES, min_lr=configurator.LEARNING_RATES,
              weight_decay=0, grad_clip=0,
              gpas_gate_clip=0, peak_flops=0,
              seed="[0, 1e19)", beta1="[0, 1)", beta2="[0, 1)", wsd_decay_frac="[0, 1]",
              init_from=("scratch", "resume", *GPT2_NAMES), lr_schedule=("cosine", "wsd"),
              backend=("auto", "nccl", "gloo"), dtype=devices.DTYPES, parallel=("ddp", "fsdp"))


# ------------------------------------------------------------------------------ settings and checks

def configure(argv):
    """The settings as a namespace, and the checkpoint to resume from (None from scratch),
    checked against each other. Under torchrun process 0 alone reads every byte of the
    checkpoint to check it."""
    cfg, given = configurator.parse_settings(argv, __file__, RANGES)
    check_out_dir(cfg["out_dir"], "out_dir")
    checkpoint.check_run_files(cfg["out_dir"])
    # a link loop, not a missing meta.json
    folder = dataset_folder(cfg["data_dir"], cfg["dataset"])
    nearest_entry(folder, "data_dir")
    if cfg["dataset"] == "pystdlib" and not (folder / "meta.json").exists():
        check_out_dir(folder, "data_dir")  # where it is made, once every check has passed
    ckpt = None
    if cfg["init_from"] == "resume":
        ckpt = checkpoint.load_checkpoint(cfg["out_dir"], check=os.environ.get("RANK", "0") == "0")
        # the given stay
        cfg |= {k: v for k, v in ckpt["config"].items() if k in cfg and k not in given}
        checkpoint.check_resume(ckpt, given, types.SimpleNamespace(**cfg))
    # a forgotten --init_from=resume would train a new run over the old one, which is then lost
    elif found := checkpoint.find_checkpoint(cfg["out_dir"]):
        sys.exit(f"error: {found} is a run's checkpoint, and init_from={cfg['init_from']!r} would "
                 "train a new run over it: set init_from='resume' to go on with it, or another "
                 f"out_dir; delete {found} to start over there")
    else:
        # a log.jsonl that is not a run's stops a new run now, before config.json is written beside
        # it (check_resume reads a resumed run's)
        logbook.read_events(Path(cfg["out_dir"]) / "log.jsonl")
    # total_batch_size sets the micro-batches itself: a count given beside it would be dropped
    if cfg["total_batch_size"] and given.get("gradient_accumulation_steps") is not None:
        sys.exit(f"error: gradient_accumulation_steps={cfg['gradient_accumulation_steps']!r} is "
                 f"given, but total_batch_size={cfg['total_batch_size']!r} sets it (the tokens "
                 "of a step over batch_size * block_size): give one of them, "
                 "total_batch_size=0 to set gradient_accumulation_steps")
    # a mode's or switch's own setting under another would be ignored, and the run be another one
    # (a checkpoint's own, from before this check, is its run's: only the given are checked)
    defaults = configurator.read_settings(__file__)
    if idle := [key for key in configurator.idle_settings(cfg, defaults) if key in given]:
        owner, _ = configurator.owner_of(idle[0])
        sys.exit(configurator.idle_line(idle[0], cfg[idle[0]], f"under {owner}={cfg[owner]!r}"))
    if cfg["gpas_gate_clip"] and not cfg["gpas"]:
        sys.exit(f"error: gpas_gate_clip={cfg['gpas_gate_clip']!r} clips GPAS's gates, but gpas is "
                 "off: set gpas=True, or gpas_gate_clip=0")
    # both schedules decay from learning_rate to min_lr: from below, the rate would climb instead
    if cfg["min_lr"] > cfg["learning_rate"]:
        sys.exit(f"error: min_lr={cfg['min_lr']!r} is above learning_rate="
                 f"{cfg['learning_rate']!r}, which the schedule decays to min_lr: set min_lr at "
                 "most learning_rate (a tenth of it is usual)")
    if cfg["parallel"] == "fsdp" and cfg["log_layer_stats"]:
        sys.exit("error: log_layer_stats needs the whole model in one process: "
                 "use parallel='ddp' for it")
    # W_o's, W₂'s columns span the shards
    if cfg["parallel"] == "fsdp" and cfg["norm_mode"] == "ngpt":
        sys.exit("error: ngpt with parallel='fsdp' is not supported yet: use parallel='ddp'")
    return types.SimpleNamespace(**cfg), ckpt


def accumulation_steps(cfg, world):
    """Micro-batches per process and step: the global count, total_batch_size's or
    gradient_accumulation_steps (None: one per process), split over the world processes. The count
    is written back to cfg, so that config.json and a resume on another number of processes keep the
    tokens per step."""
    steps, tokens = cfg.gradient_accumulation_steps or world, cfg.batch_size * cfg.block_size
    if cfg.total_batch_size:
        # tokens 0: block_size 0, which the model rejects
        steps = tokens and cfg.total_batch_size // tokens
        if steps * tokens != cfg.total_batch_size:
            sys.exit(f"error: total_batch_size={cfg.total_batch_size} is not a multiple of "
                     f"batch_size * block_size = {tokens}: change one of them")
        if steps % world:
            sys.exit(f"error: total_batch_size={cfg.total_batch_size} makes {steps} micro-batches "
                     f"of {tokens} tokens, which do not split over {world} processes: make it a "
                     f"multiple of {tokens * world}")
    elif steps % world:
        sys.exit(f"error: gradient_accumulation_steps={steps} does not split over {world} "
                 f"processes: make it a multiple of {world}, or None (one micro-batch per process)")
    cfg.gradient_accumulation_steps = steps
    return steps // world


def load_dataset(cfg, master=None, ckpt=None):
    """The dataset's meta.json and each split's shards (paths, token counts) with its vocab_size,
    each shard's header and size checked, and the data against block_size and the checkpoint's
    (check_data). pystdlib, the default, is made when missing by the master (offline, seconds);
    master None, in the checks: not made, (None, None)."""
    folder = dataset_folder(cfg.data_dir, cfg.dataset)
    if cfg.dataset == "pystdlib" and master is not None:  # every process waits for the master
        if master and not (folder / "meta.json").exists():
            prepare_data.prepare("pystdlib", folder)
        if dist.is_initialized():
            dist.barrier()
    if cfg.dataset == "pystdlib" and not (folder / "meta.json").exists():
        # made after the checks, so a checkpoint can be checked against it only if it trained on it
        if ckpt and "meta" in ckpt and (old := ckpt["config"].get("dataset")) != "pystdlib":
            sys.exit(f"error: the checkpoint in {cfg.out_dir} was trained on {old}, and pystdlib "
                     "is not prepared, so its data cannot be checked against the checkpoint's: "
                     f"resume with --dataset={old}, or prepare it first: "
                     f"{prepare_command(folder)}")
        return None, None
    meta = load_meta(folder)
    data = dict(vocab_size=meta["vocab_size"])  # a token id past it is an error, in each batch read
    for split in ("train", "val"):
        shards = meta["shards"][split]
        data[split] = [folder / s["file"] for s in shards], np.array([s["tokens"] for s in shards])
        # each header and size now, not after training
        for path, shard in zip(data[split][0], shards):
            if (count := len(read_shard(path))) != shard["tokens"]:
                sys.exit(f"error: {path} holds {count:,} tokens, but {folder}/meta.json records "
                         f"{shard['tokens']:,}: prepare {cfg.dataset} again (with --force)")
        if data[split][1].max() <= cfg.block_size:
            sys.exit(f"error: the {split} shards of {folder} are shorter than "
                     f"block_size={cfg.block_size}: lower it")
    if ckpt:
        checkpoint.check_data(ckpt, cfg, meta)
    return meta, data


def model_config(cfg, meta, ckpt):
    """The GPTConfig to build, checked, on the checkpoint's vocabulary or else the dataset's
    (GPT-2's while pystdlib is to be made); None for OpenAI's GPT-2, whose weights bring their
    own (on GPT-2 BPE data)."""
    if cfg.init_from not in ("scratch", "resume"):
        # meta None: pystdlib, by char, to be made
        tokenizer = meta["tokenizer"] if meta else "char"
        if tokenizer != "gpt2":
            sys.exit(f"error: init_from={cfg.init_from} needs a dataset in GPT-2 BPE, "
                     f"and {cfg.dataset} is by {tokenizer}: "
                     "prepare one with prepare_data.py --tokenizer gpt2")
        return None
    config = configurator.model_config(cfg, meta or GPT2_META)
    if ckpt:
        config.vocab_size = ckpt["model_args"]["vocab_size"]
    return config


# ---------------------------------------------------------------------------------- setup and model

def build_model(cfg, config, ckpt, proc):
    """(raw_model, train_model, eval_model, optimizer): the model of config, fresh or from the
    checkpoint, or OpenAI's GPT-2 (config None), whose model settings then replace cfg's (for
    config.json and resuming); wrapped to train and to evaluate (parallelize); AdamW, its
    state restored when resuming."""
    torch.manual_seed(cfg.seed)
    # fsdp moves just this process's shard there
    home = "cpu" if cfg.parallel == "fsdp" else proc.device
    if config:
        raw_model = GPT(config).to(home)
    else:
        try:
            raw_model = from_gpt2(cfg.init_from, cfg.block_size, cfg.dropout).to(home)
        except ValueError as e:
            # model.py's one line: transformers missing, no such GPT-2, block_size too long
            sys.exit(f"error: {e}")
        vars(cfg).update({k: v for k, v in dataclasses.asdict(raw_model.config).items()
                          if k in vars(cfg)})
    train_model, eval_model = parallelize(raw_model, cfg, proc)
    optimizer = raw_model.configure_optimizers(cfg.weight_decay, cfg.learning_rate,
                                               (cfg.beta1, cfg.beta2),
                                               proc.device.split(":")[0])
    if ckpt:
        checkpoint.restore(raw_model, optimizer, ckpt, cfg.out_dir)
    return raw_model, train_model, eval_model, optimizer


def compiles(cfg, device):
    """Whether the compile setting torch.compiles the model on device: None compiles on CUDA
    only."""
    return device.startswith("cuda") if cfg.compile is None else cfg.compile


def parallelize(model, cfg, proc):
    """Activation checkpointing per block, torch.compile, then DDP or FSDP2 (fully_shard each Block,
    then the root), as the settings cfg and the process proc say. Returns (train_model, eval_model):
    DDP's wrapper and the model inside, or the sharded model for both."""
    compiled = compiles(cfg, proc.device)
    if compiled:
        devices.repair_compile_cache()
    blocks, fsdp = model.transformer.h, cfg.parallel == "fsdp"
    for i in range(len(blocks)):
        # non-reentrant: the same gradients; the RNG replayed for dropout
        if cfg.activation_checkpointing:
            blocks[i] = checkpoint_wrapper(blocks[i])
        # per block, as torchtitan: the sharding's collectives run between the graphs
        if compiled and fsdp:
            blocks[i].compile()
    if not fsdp:
        model = torch.compile(model) if compiled else model
        ids = [proc.device] if proc.device.startswith("cuda") else None
        return (DDP(model, device_ids=ids, gradient_as_bucket_view=True) if proc.world > 1
                else model), model
    # here, not at the top: FSDP's DTensor machinery costs every start of train.py a second
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    mesh = init_device_mesh(proc.device.split(":")[0], (proc.world,))
    # bf16 on CUDA: blocks gather bf16 weights and reduce fp32 gradients; their fp32 inputs, the
    # fp32 root and autocast keep ddp's numbers but for bf16 norm gains. (CPU autocast runs
    # layer_norm in the weights' dtype: fp32 there.)
    bf16 = proc.dtype == "bfloat16" and proc.device.startswith("cuda")
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32,
                              cast_forward_inputs=False)
    for block in blocks:
        fully_shard(block, mesh=mesh, mp_policy=mp if bf16 else MixedPrecisionPolicy())
    fully_shard(model, mesh=mesh)
    return model, model


# ----------------------------------------------------------------------------------------- training

def get_lr(step, cfg):
    """Linear warmup, then cosine (or wsd: constant, then linear) decay
    to min_lr at lr_decay_iters."""
    end = cfg.max_iters if cfg.lr_decay_iters is None else cfg.lr_decay_iters
    if step < cfg.warmup_iters:
        return cfg.learning_rate * (step + 1) / (cfg.warmup_iters + 1)
    if step >= end:
        return cfg.min_lr
    if cfg.lr_schedule == "wsd":  # the decay takes the last wsd_decay_frac of the steps
        start = max(cfg.warmup_iters, end * (1 - cfg.wsd_decay_frac))
        done = 0.0 if step < start else (step - start) / (end - start)
        return cfg.learning_rate + done * (cfg.min_lr - cfg.learning_rate)
    # coeff: 1 -> 0
    coeff = 0.5 * (1.0 + math.cos(math.pi * (step - cfg.warmup_iters) / (end - cfg.warmup_iters)))
    return cfg.min_lr + coeff * (cfg.learning_rate - cfg.min_lr)


def micro_batch(data, cfg, device, step, g):
    """Global micro-batch g of step and its dropout masks' seed, (x, y, seed): a function of
    (seed, step, g)."""
    rng = np.random.default_rng((cfg.seed, 0, step, g))
    x, y = get_batch(data["train"], rng, cfg.batch_size, cfg.block_size, device,
                     data["vocab_size"])
    return x, y, int(rng.integers(2**63))


def train_step(model, data, cfg, proc, step, batch):
    """Forward and backward over this process's micro-batches, the first given as batch; returns
    their mean loss (a tensor) and the next step's first micro-batch. Processes x accum split
    the same batches alike."""
    total = torch.zeros((), device=proc.device)
    first = proc.rank * proc.accum  # global index of its first
    # fsdp reduce-scatters every micro-batch's gradients: only shards are kept
    for micro in range(proc.accum):
        x, y, dropout_seed = batch
        # the dropout masks, torch's only random draws: a function of (seed, step, g) too
        if cfg.dropout:
            torch.manual_seed(dropout_seed)
        if isinstance(model, DDP):  # all-reduce the gradients after the last micro-batch only
            model.require_backward_grad_sync = micro == proc.accum - 1
        with proc.ctx:
            _, loss = model(x, y)
        # read the next micro-batch (this step's, or the next step's first)
        # while the device computes this one
        following = (step + 1, first) if micro + 1 == proc.accum else (step, first + micro + 1)
        batch = micro_batch(data, cfg, proc.device, *following)
        (loss / proc.accum).backward()
        total += loss.detach()
    return total / proc.accum, batch


def eval_batch(data, cfg, split, k, device):
    """Batch k of split ('train' or 'val') of every evaluation: its own generator, so that every
    evaluation of the run reads the same batches."""
    rng = np.random.default_rng((cfg.seed, 1, ("train", "val").index(split), k))
    return get_batch(data[split], rng, cfg.batch_size, cfg.block_size, device, data["vocab_size"])


@torch.no_grad()
def evaluate(model, data, cfg, proc):
    """Mean (train, val) loss over eval_iters fixed batches per split, shared out among the
    processes, each running as many forward passes (an fsdp forward is a collective): those
    past eval_iters are not counted."""
    losses = torch.zeros(2, device=proc.device)
    rank = proc.rank
    world = proc.world
    for i, split in enumerate(("train", "val")):
        for k in range(rank, world * math.ceil(cfg.eval_iters / world), world):
            x, y = eval_batch(data, cfg, split, k % cfg.eval_iters, proc.device)
            with proc.ctx:
                losses[i] += model(x, y)[1].float() * (k < cfg.eval_iters)
    if world > 1:
        dist.all_reduce(losses)
    return (losses / cfg.eval_iters).tolist()


# -------------------------------------------------------------------------- the loop's bookkeeping

@dataclasses.dataclass
class Progress:
    """Where the run stands: its step, best val loss, the last step whose evaluation is in the
    log, and the step of its last checkpoint (None: none yet)."""
    step: int = 0
    best_val: float = math.inf
    evaluated: int | None = None
    saved: int | None = None

    @classmethod
    def of(cls, ckpt):
        """A new run's, or the checkpoint's (a stop saves before the evaluation due at its
        step)."""
        if not ckpt:
            return cls()
        step = ckpt["iter_num"]
        evaluated = step if ckpt.get("evaluated", True) else None
        return cls(step, ckpt["best_val_loss"], evaluated, step)


class Throughput:
    """The training speed of the steps between two logs, and MFU when the device's peak FLOP/s
    is known. A process's first step (it warms up, and compiles when compiling) is left out of
    the timing."""

    def __init__(self, model, cfg, world, accum, device, first_step):
        self.model = model
        self.first_step = first_step
        self.log_interval = cfg.log_interval
        compiling = compiles(cfg, device)
        self.warmup = "compiling, warming up" if compiling else "warming up"
        self.micro_batches = cfg.batch_size * accum
        self.tokens_per_step = cfg.batch_size * cfg.block_size * accum * world
        self.peak = measure.device_peak_flops(cfg, device)[1]
        self.times = []  # the window's step times
        self.total = 0.0  # all timed steps' time

    def add(self, step, seconds):
        """The time of the step that reached step."""
        if step > self.first_step + 1:
            self.times.append(seconds)
            self.total += seconds

    def window(self):
        """The train event's timing fields for the steps since the last call; None where none was
        timed."""
        # None: the first step alone
        dt = sum(self.times) / len(self.times) if self.times else None
        mfu = None
        if self.peak and dt:
            mfu = self.model.estimate_mfu(self.micro_batches, dt, self.peak)
        fields = dict(ms_per_iter=dt and 1000 * dt, tokens_per_s=dt and self.tokens_per_step / dt,
                      mfu=mfu, timed_steps=len(self.times))
        self.times = []
        return fields

    def describe(self, timing, step):
        """timing (from window) as the end of the progress line at step."""
        ms = timing["ms_per_iter"]
        mfu = timing["mfu"]
        first = step - self.first_step <= self.log_interval
        speed = f", {ms:.1f} ms/iter, {timing['tokens_per_s']:,.0f} tokens/s" if ms else ""
        utilization = f", mfu {100 * mfu:.1f}%" if mfu else ""
        untimed = f" (step {self.first_step + 1} untimed: {self.warmup})" if first else ""
        return speed + utilization + untimed

    def overall(self, step):
        """Tokens/s over all the timed steps up to step, None if none was timed."""
        if not self.total:
            return None
        return (step - self.first_step - 1) * self.tokens_per_step / self.total


class Signals:
    """SIGINT and SIGTERM, however many, counted in received while installed: the loop stops after
    the step in flight, skips evaluation and saves at once. The third SIGINT stops at once, without
    a checkpoint. Python runs a handler once for signals that land together (three Ctrl-C within a
    step): each delivery is counted from the bytes the interpreter writes to its wakeup pipe, one a
    signal."""

    def __init__(self):
        self.received = []
        self.pipe = os.pipe()
        for end in self.pipe:
            os.set_blocking(end, False)
        self.wakeup = signal.set_wakeup_fd(self.pipe[1], warn_on_full_buffer=False)
        stops = (signal.SIGINT, signal.SIGTERM)
        self.handlers = {s: signal.signal(s, self.on_signal) for s in stops}

    # os.write, not print: a signal can land inside a print (not reentrant)
    def on_signal(self, signum, frame):
        try:
            # every signal since the last call, this one too
            delivered = list(os.read(self.pipe[0], 1024))
        except BlockingIOError:  # counted already, by the call before this one
            return
        self.received += delivered
        # the deliberate way out: SIGINT's default action, no save
        if self.received.count(signal.SIGINT) >= 3:
            os.write(2, b"SIGINT three times: stopping now, without a checkpoint\n")
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        name = signal.Signals(signum).name
        notice = f"{name}: saving a checkpoint after this step (the third SIGINT stops at once)\n"
        os.write(2, notice.encode())

    def restore(self):
        """The handlers and the wakeup fd from before."""
        for s, handler in self.handlers.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(self.wakeup)
        for end in self.pipe:
            os.close(end)


# --------------------------------------------------------------------------------------------- main

def diverged_line(cfg, run, loss, grad_norm):
    """A diverged run's one line: the step, and what to do. At the first step of a new run no
    update has been made, so no learning_rate is to blame: the initialization is."""
    where = f"error: loss {loss}, gradient norm {grad_norm} at step {run.step + 1}"
    if run.step == 0:
        return (f"{where}, before any update: the model's initial weights give non-finite values, "
                f"which no lower learning_rate changes: check the settings of its initialization "
                f"(its inits and scales)")
    if run.saved is None:
        return f"{where}; no checkpoint was saved: train again with a lower learning_rate"
    return (f"{where}; the last good checkpoint: {checkpoint.find_checkpoint(cfg.out_dir)} "
            f"(step {run.saved}): resume from it with a lower learning_rate")


def main(argv):
    # every check before anything is written (under torchrun process 0 tells)
    with devices.one_voice():
        cfg, ckpt = configure(argv)
        device = devices.check_launch(cfg.device, cfg.backend, cfg.parallel)
        accum = accumulation_steps(cfg, devices.planned_world())
        meta, data = load_dataset(cfg, ckpt=ckpt)
        config = model_config(cfg, meta, ckpt)
    # out_dir is this run's until it ends: a run started there meanwhile, even a dry run, is an
    # error (process 0 holds it: the others write there for the same run)
    master = os.environ.get("RANK", "0") == "0"
    with logbook.claim(cfg.out_dir) if master else contextlib.nullcontext():
        if cfg.dry_run:  # its model on the meta device: nothing allocated
            return print(measure.plan(cfg, config if meta else None, devices.planned_world(),
                                      accum, device))
        proc = devices.start(device, cfg.dtype, cfg.backend, cfg.parallel, accum)
        try:
            if meta is None:  # pystdlib, made now that every check has passed
                meta, data = load_dataset(cfg, proc.master, ckpt)
                config = model_config(cfg, meta, ckpt)
            run_training(cfg, proc, ckpt, meta, data, config)
        finally:  # after a run, or an error on the way: the process group goes too
            if dist.is_initialized():
                dist.destroy_process_group()


def run_training(cfg, proc, ckpt, meta, data, config):
    """Build the model (fresh, resumed or OpenAI's), then the training loop: evaluate, checkpoint,
    step, log, until max_iters, a stop signal or a non-finite loss; then the last checkpoint and
    the log's end."""
    raw_model, train_model, eval_model, optimizer = build_model(cfg, config, ckpt, proc)
    run = Progress.of(ckpt)
    # the model and optimizer hold what they need from the checkpoint
    ckpt = None
    # the first batch, then each step the next's: drawn before the log's files are written, as its
    # check of the token ids is the data's first
    batch = micro_batch(data, cfg, proc.device, run.step, proc.rank * proc.accum)
    # and every evaluation's batches, the same at every step: their ids checked before the files too
    for split in ("train", "val"):
        for k in range(cfg.eval_iters):
            eval_batch(data, cfg, split, k, "cpu")
    # config.json and log.jsonl: a resume's at its first save
    log = logbook.Log(cfg, run.saved, proc.master)
    proc.say(measure.banner(raw_model, cfg, proc.world, proc.accum, proc.dtype, proc.device))
    speed = Throughput(raw_model, cfg, proc.world, proc.accum, proc.device, first_step=run.step)
    signals, status, val_loss = Signals(), "finished", None
    # GPAS's g
    gates = [p for name, p in raw_model.named_parameters() if name.endswith("gpas_gate")]
    try:
        while True:
            if ((run.step % cfg.eval_interval == 0 or run.step == cfg.max_iters)
                    and run.step != run.evaluated):
                eval_model.eval()
                train_loss, val_loss = evaluate(eval_model, data, cfg, proc)
                run.evaluated = run.step
                log.record("eval", iter=run.step, train_loss=train_loss, val_loss=val_loss,
                           lr=get_lr(run.step, cfg))
                if cfg.log_layer_stats and proc.master:  # on the first val batch of the evaluation
                    x, y = eval_batch(data, cfg, "val", 0, proc.device)
                    log.record("layer_stats", iter=run.step,
                               **measure.layer_stats(raw_model, x, y, proc.ctx))
                eval_model.train()
                proc.say(f"step {run.step}: train loss {train_loss:.4f}, val loss {val_loss:.4f}")
                improved, run.best_val = val_loss < run.best_val, min(run.best_val, val_loss)
                # saved == step: resumed from a stop's checkpoint, saved before its
                # evaluation; record it now
                if run.step > 0 and (improved or cfg.always_save_checkpoint
                                     or run.saved == run.step):
                    # before the checkpoint it records: a resume trims a log that is ahead
                    log.open()
                    checkpoint.save_run(cfg, proc, raw_model, optimizer, meta, run)
            if run.step >= cfg.max_iters:
                break

            t0, lr = time.time(), get_lr(run.step, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss, batch = train_step(train_model, data, cfg, proc, run.step, batch)
            grad_norm = torch.nn.utils.clip_grad_norm_(raw_model.parameters(),
                                                       cfg.grad_clip or math.inf)
            if cfg.gpas_gate_clip:  # GPAS's authors: the gates' own norm, after the global clip
                torch.nn.utils.clip_grad_norm_(gates, cfg.gpas_gate_clip)
            if cfg.parallel == "fsdp":  # a DTensor: the norm over all shards
                grad_norm = grad_norm.full_tensor()
            # full: no copy to wait on
            stops = torch.full((), float(len(signals.received)), device=proc.device)
            shared = torch.stack([loss, stops])
            if proc.world > 1:  # all processes agree on the loss, and on whether to stop
                dist.all_reduce(shared)
            # one GPU wait a step
            loss, stop, grad_norm = torch.cat([shared, grad_norm.view(1)]).tolist()
            loss /= proc.world
            # stop before an update spoils weights
            if not (math.isfinite(loss) and math.isfinite(grad_norm)):
                status = "diverged"
                break
            optimizer.step()
            # ngpt: every matrix back onto unit vectors; other modes: nothing
            raw_model.normalize_weights()
            optimizer.zero_grad(set_to_none=True)
            run.step += 1
            speed.add(run.step, time.time() - t0)
            if run.step % cfg.log_interval == 0:
                timing = speed.window()
                log.record("train", iter=run.step, train_loss=loss, lr=lr, grad_norm=grad_norm,
                           **timing)
                proc.say(f"iter {run.step}: loss {loss:.4f}{speed.describe(timing, run.step)}")
            if stop:  # no evaluation: the checkpoint at once
                status = "interrupted"
                break

        if status != "diverged" and run.saved != run.step:  # a diverged state is never saved
            log.open()
            checkpoint.save_run(cfg, proc, raw_model, optimizer, meta, run)
        best = run.best_val if run.best_val < math.inf else None
        log.record("end", status=status, iter=run.step, best_val_loss=best, final_val_loss=val_loss,
                   tokens_per_s=speed.overall(run.step))
        if proc.world > 1:
            devices.leave_together()
        if status == "diverged":
            proc.say(diverged_line(cfg, run, loss, grad_norm), file=sys.stderr)
            sys.exit(3)
        go_on = " (or go on: --init_from=resume)" if status == "interrupted" else ""
        proc.say(f"{status} at step {run.step}, checkpoint in {cfg.out_dir}; "
                 f"sample from it: python sample.py --out_dir={cfg.out_dir}{go_on}")
    except torch.OutOfMemoryError as e:  # one line that names the levers
        sys.exit(f"error: out of memory on {proc.device} ({first_line(e)}): lower batch_size "
                 "(more gradient_accumulation_steps keep the tokens per step), "
                 "activation_checkpointing=True, parallel='fsdp'")
    except Exception as e:
        if not (signals.received and compiles(cfg, proc.device)):
            raise
        # a Ctrl-C or a scheduler's SIGTERM reaches the whole process group:
        # the compiler died of it too
        devices.repair_compile_cache()
        sys.exit(f"error: stopped while torch.compile was compiling ({first_line(e)}); "
                 "nothing was trained since the last checkpoint: "
                 f"run the same command again (--init_from=resume if {cfg.out_dir} holds one)")
    finally:
        signals.restore()
        log.close()


if __name__ == "__main__":
    run_cli(main)
