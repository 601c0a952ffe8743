"""
Train a GPT with any of model.py's norm modes, on one device (CPU included) or many through torchrun.

    python train.py                                   # a small char-level model on pystdlib, CPU, minutes
    python train.py configs/shakespeare_char.py --norm_mode=geonorm
    torchrun --standalone --nproc_per_node=8 train.py configs/geonorm_125m.py
    torchrun --nnodes=2 --node_rank=0 --master_addr=10.0.0.1 --master_port=29500 --nproc_per_node=8 \\
        train.py configs/geonorm_125m.py              # and --node_rank=1 on the second node
    python train.py --out_dir=out --init_from=resume  # go on exactly where out/ckpt.pt stopped
    python train.py --init_from=gpt2 --dataset=my_bpe_text --learning_rate=3e-5  # fine-tune OpenAI's GPT-2
    torchrun --standalone --nproc_per_node=8 train.py configs/llama_simplenorm_7b.py   # fsdp: sharded over 8 GPUs

Settings: the defaults below, then (resuming) the checkpoint's, then config files (Python assignments)
and --key=value arguments in the order given. Every random draw of a step, data and dropout alike, is
a function of (seed, step, micro-batch), so a resumed run repeats an uninterrupted one bit for bit.

SIGTERM and SIGINT, however many arrive (torchrun forwards each one it gets, so a worker often gets
two), stop the run after the step in flight: no evaluation, a checkpoint at once, exit 0. The third
SIGINT (Ctrl-C three times) stops at once, without a checkpoint.
"""
import dataclasses
import json
import math
import os
import signal
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP

import checkpoint
import configurator
import prepare_data
from model import GPT, from_gpt2
from prepare_data import get_batch

# settings: the assignments between the two rulers, read by configurator.py (python train.py --help)
# --------------------------------------------------------------------------------------------------
# I/O
out_dir = "out"  # the checkpoint (ckpt.pt, or sharded ckpt/), log.jsonl and config.json are written here
init_from = "scratch"  # 'scratch', 'resume' (out_dir's checkpoint), or OpenAI's gpt2[-medium|-large|-xl] (or a folder)
eval_interval = 250  # evaluate every this many steps, and at the end
eval_iters = 20  # batches per split in an evaluation: the same batches every time
log_interval = 10  # print and log the training loss every this many steps
always_save_checkpoint = True  # checkpoint at every evaluation; False: when val loss improves (and at the end)
log_layer_stats = False  # at evaluations also log each block's grad norm, residual RMS, rotation angle
wandb_log = False  # also log to Weights & Biases, if it is installed
wandb_project = "normgpt"  # wandb project name
wandb_run_name = "run"  # wandb run name
# data
data_dir = "data"  # the folder holding prepared datasets
dataset = "pystdlib"  # a folder in data_dir written by prepare_data.py (pystdlib is made when missing)
batch_size = 12  # sequences per micro-batch, per process
block_size = 64  # tokens per sequence: the model's context length
gradient_accumulation_steps = 1  # micro-batches per optimizer step, summed over all processes
total_batch_size = 0  # tokens per optimizer step; when > 0 it sets gradient_accumulation_steps
seed = 1337  # seeds the initialization, every batch and every dropout mask
# model: GPTConfig's fields (model.py); vocab_size comes from the dataset's meta.json
n_layer = 4  # blocks
n_head = 4  # attention heads per block
n_embd = 128  # width of the residual stream
dropout = 0.0  # dropout probability; 0 for pretraining
bias = False  # biases in Linear and LayerNorm layers (gpt2 only)
arch = "gpt2"  # block family: gpt2 (learned positions, GELU, LayerNorm) or llama (rotary, SwiGLU, RMSNorm)
tie_embeddings: bool | None = None  # the head is the token embedding; None: the family's choice (gpt2 yes, llama no)
n_kv_head: int | None = None  # key/value heads, fewer for grouped-query attention; None: n_head
rope_theta = 10000.0  # llama: the rotary base
multiple_of = 256  # llama: the SwiGLU width is rounded up to a multiple of this
ffn_dim_multiplier: float | None = None  # llama: scales the SwiGLU width before rounding; None: 1
norm_mode = "pre"  # post, pre, deep, sandwich, geonorm, simplenorm, lns, mixln, reorder, hybrid or ngpt
norm_eps: float | None = None  # epsilon of the norms; None: the mode's default
qk_norm = False  # RMSNorm on queries and keys
geo_alpha = 1.0  # geonorm: base step size a
geo_decay = "harmonic"  # geonorm: step size over depth: harmonic, sqrt, linear or none
geo_input_norm = True  # geonorm: LayerNorm before each sub-layer
geo_radius = "sqrt_d"  # geonorm: the sphere's radius: sqrt_d, or embed (the embedding's own norm)
geo_max_angle: float | None = None  # geonorm: smooth clamp of the rotation angle (radians); None: off
sandwich_depth_scaled = False  # sandwich: output-norm gains scaled by 1/sqrt(n_layer)
gelu_tanh = False  # gpt2: GELU's tanh approximation, as OpenAI's GPT-2 has it (init_from=gpt2 sets it)
lns_scaled_init = False  # lns: keep the family's depth-scaled init of the output projections (off: 0.02)
mixln_alpha = 0.25  # mixln: blocks 1..floor(mixln_alpha * n_layer) post-norm, the rest pre-norm
hybrid_star = False  # hybrid: block 1 a pre-norm block with its QKV-norm (HybridNorm*)
embed_norm = False  # the family's norm on the embedding (Peri-LN = sandwich + embed_norm)
norm_type = "norm"  # norm (the family's LayerNorm or RMSNorm) or dyt (Dynamic Tanh in their place)
dyt_alpha_attn = 0.8  # dyt: initial alpha of the norm before attention
dyt_alpha_ffn = 0.2  # dyt: initial alpha of the norm before the MLP, the output norms and embed_norm's
dyt_alpha_final = 0.2  # dyt: initial alpha of the final norm
# optimizer: AdamW
learning_rate = 1e-3  # peak learning rate
max_iters = 2000  # optimizer steps in all
weight_decay = 0.1  # on matrices and embeddings, not on biases and norm gains
beta1 = 0.9  # AdamW beta1
beta2 = 0.99  # AdamW beta2
grad_clip = 1.0  # clip the gradient norm at this value; 0: no clipping
# learning-rate schedule
lr_schedule = "cosine"  # 'cosine', or 'wsd': warmup, stable, then a linear decay
warmup_iters = 100  # linear warmup steps
lr_decay_iters: int | None = None  # the decay reaches min_lr at this step; None: max_iters
min_lr = 1e-4  # the final learning rate
wsd_decay_frac = 0.2  # wsd: the last fraction of lr_decay_iters decays linearly
# processes and memory: torchrun's RANK, LOCAL_RANK and WORLD_SIZE start several
parallel = "ddp"  # 'ddp': each process holds the whole model; 'fsdp': weights, gradients, AdamW state sharded (FSDP2)
activation_checkpointing = False  # keep only each block's input; recompute the rest in the backward pass
backend = "auto"  # 'nccl' or 'gloo'; auto: nccl on CUDA, gloo on CPU
# system
device = "auto"  # 'cpu', 'cuda', 'cuda:1', 'mps'; auto: cuda when available
dtype = "auto"  # 'float32', or 'bfloat16' autocast; auto: bfloat16 on CUDA, float32 elsewhere
compile: bool | None = None  # torch.compile the model; None: on CUDA only
peak_flops = 0.0  # one device's dense bf16 FLOP/s, for MFU; 0: looked up from the GPU's name
# --------------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------- settings

def configure(argv):
    """The settings as a namespace, and the checkpoint to resume from (None from scratch)."""
    cfg, given = configurator.parse_settings(argv, __file__)
    ckpt = checkpoint.load_checkpoint(cfg["out_dir"]) if cfg["init_from"] == "resume" else None
    if ckpt:  # the checkpoint's settings, except those given now
        cfg |= {k: v for k, v in ckpt["config"].items() if k in cfg and k not in given}
    if cfg["parallel"] == "fsdp" and cfg["log_layer_stats"]:
        sys.exit("error: log_layer_stats needs the whole model in one process: use parallel='ddp' for it")
    if cfg["parallel"] == "fsdp" and cfg["norm_mode"] == "ngpt":  # W_o's, W₂'s columns span the shards
        sys.exit("error: ngpt with parallel='fsdp' is not supported yet: use parallel='ddp'")
    return types.SimpleNamespace(**cfg), ckpt


def accumulation_steps(cfg, world):
    """Micro-batches per process and step: the global count (or total_batch_size) split over the processes."""
    steps, tokens = cfg.gradient_accumulation_steps, cfg.batch_size * cfg.block_size
    if cfg.total_batch_size:
        steps = cfg.total_batch_size // tokens
        if steps * tokens != cfg.total_batch_size:
            sys.exit(f"error: total_batch_size={cfg.total_batch_size} is not a multiple of batch_size * block_size"
                     f" = {tokens}: change one of them")
    if steps < 1 or steps % world:
        sys.exit(f"error: {steps} micro-batches per step do not split over {world} processes: make "
                 f"gradient_accumulation_steps (or total_batch_size) a multiple of {world}")
    return steps // world


# -------------------------------------------------------------------------------------------- data

def load_dataset(cfg, master):
    """The dataset's meta.json, and for each split its shards' (paths, token counts)."""
    folder = Path(cfg.data_dir) / cfg.dataset
    if cfg.dataset == "pystdlib" and master and not (folder / "meta.json").exists():
        prepare_data.prepare("pystdlib", folder)  # offline and takes seconds: made rather than asked for
    if dist.is_initialized():
        dist.barrier()
    meta, data = prepare_data.load_meta(folder), {}
    for split in ("train", "val"):
        shards = meta["shards"][split]
        data[split] = [folder / s["file"] for s in shards], np.array([s["tokens"] for s in shards])
        if data[split][1].max() <= cfg.block_size:
            sys.exit(f"error: the {split} shards of {folder} are shorter than block_size={cfg.block_size}: lower it")
    return meta, data


# ---------------------------------------------------------------------------------------- training

def get_lr(step, cfg):
    """Linear warmup, then cosine (or wsd: constant, then linear) decay to min_lr at lr_decay_iters."""
    end = cfg.max_iters if cfg.lr_decay_iters is None else cfg.lr_decay_iters
    if step < cfg.warmup_iters:
        return cfg.learning_rate * (step + 1) / (cfg.warmup_iters + 1)
    if step >= end:
        return cfg.min_lr
    if cfg.lr_schedule == "wsd":  # the decay takes the last wsd_decay_frac of the steps
        start = max(cfg.warmup_iters, end * (1 - cfg.wsd_decay_frac))
        done = 0.0 if step < start else (step - start) / (end - start)
        return cfg.learning_rate + done * (cfg.min_lr - cfg.learning_rate)
    coeff = 0.5 * (1.0 + math.cos(math.pi * (step - cfg.warmup_iters) / (end - cfg.warmup_iters)))  # 1 -> 0
    return cfg.min_lr + coeff * (cfg.learning_rate - cfg.min_lr)


def micro_batch(data, cfg, device, step, g):
    """Global micro-batch g of step and the seed of its dropout masks, (x, y, seed): a function of (seed, step, g)."""
    rng = np.random.default_rng((cfg.seed, 0, step, g))
    return *get_batch(data["train"], rng, cfg, device), int(rng.integers(2**63))


def train_step(model, data, cfg, ctx, device, step, rank, accum, batch):
    """Forward and backward over this process's micro-batches, the first given as batch; returns their mean
    loss (a tensor) and the next step's first micro-batch. Processes x accum split the same batches alike."""
    total = torch.zeros((), device=device)
    for micro in range(accum):  # fsdp reduce-scatters every micro-batch's gradients: only the shards are kept
        x, y, dropout_seed = batch
        if cfg.dropout:  # the dropout masks, torch's only random draws: a function of (seed, step, g) too
            torch.manual_seed(dropout_seed)
        if isinstance(model, DDP):  # all-reduce the gradients after the last micro-batch only
            model.require_backward_grad_sync = micro == accum - 1
        with ctx:
            _, loss = model(x, y)
        # read the next micro-batch (this step's, or the next step's first) while the device computes this one
        g = rank * accum + micro
        batch = micro_batch(data, cfg, device, *((step, g + 1) if micro + 1 < accum else (step + 1, rank * accum)))
        (loss / accum).backward()
        total += loss.detach()
    return total / accum, batch


@torch.no_grad()
def evaluate(model, data, cfg, ctx, device, rank, world):
    """Mean (train, val) loss over eval_iters fixed batches per split, shared out among the processes, each
    running as many forward passes (an fsdp forward is a collective): the few past eval_iters are not counted."""
    losses = torch.zeros(2, device=device)
    for i, split in enumerate(("train", "val")):
        for k in range(rank, world * math.ceil(cfg.eval_iters / world), world):
            x, y = get_batch(data[split], np.random.default_rng((cfg.seed, 1, i, k % cfg.eval_iters)), cfg, device)
            with ctx:
                losses[i] += model(x, y)[1].float() * (k < cfg.eval_iters)
    if world > 1:
        dist.all_reduce(losses)
    return (losses / cfg.eval_iters).tolist()


def rotation_angle(x, y):
    """Mean angle between x and y (B, T, C) over tokens: atan2(|ŷ - (x̂·ŷ)x̂|, x̂·ŷ), exact near 0 and π."""
    x, y = torch.nn.functional.normalize(x, dim=-1), torch.nn.functional.normalize(y, dim=-1)
    cos = (x * y).sum(-1, keepdim=True)
    return torch.atan2((y - cos * x).norm(dim=-1), cos.squeeze(-1)).mean().item()


def layer_stats(raw_model, x, y, ctx):
    """Per block on one batch: its parameters' gradient norm, the RMS of the residual stream it outputs,
    and the mean angle by which it rotates a token's vector. Forward hooks on the eager model."""
    blocks, io = list(raw_model.transformer.h), []
    hooks = [b.register_forward_hook(lambda m, args, out: io.append((args[0].float(), out.float()))) for b in blocks]
    with ctx:
        _, loss = raw_model(x, y)
    for hook in hooks:
        hook.remove()
    params = [list(b.parameters()) for b in blocks]
    grads = iter(torch.autograd.grad(loss, [p for ps in params for p in ps]))  # leaves .grad alone
    return dict(grad_norm=[torch.stack([next(grads).float().norm() for _ in ps]).norm().item() for ps in params],
                resid_rms=[out.pow(2).mean().sqrt().item() for _, out in io],
                angle=[rotation_angle(inp, out) for inp, out in io])


# -------------------------------------------------------------------------------------------- main

def build_model(cfg, meta, ckpt, device, dtype, world):
    """The model (wrapped for training) and its AdamW: fresh, from the checkpoint, or OpenAI's GPT-2, whose
    model settings then replace cfg's (for config.json and resuming); and the model's GPTConfig arguments."""
    torch.manual_seed(cfg.seed)
    home = "cpu" if cfg.parallel == "fsdp" else device  # fsdp moves only each process's shard to the device
    if cfg.init_from in ("scratch", "resume"):
        config = configurator.model_config(cfg, meta)
        if ckpt:  # its vocabulary: padded, or GPT-2's own 50257 when fine-tuned from OpenAI's weights
            config.vocab_size = ckpt["model_args"]["vocab_size"]
        model = GPT(config).to(home)
    elif meta["tokenizer"] != "gpt2":
        sys.exit(f"error: init_from={cfg.init_from} needs a dataset in GPT-2 BPE, and {cfg.dataset} is by "
                 f"{meta['tokenizer']}: prepare one with prepare_data.py --tokenizer gpt2")
    else:
        try:
            model = from_gpt2(cfg.init_from, cfg.block_size, cfg.dropout).to(home)
        except ValueError as e:
            sys.exit(f"error: {e}")
        config = model.config
        vars(cfg).update({k: v for k, v in dataclasses.asdict(config).items() if k in vars(cfg)})
    train_model, eval_model = parallelize(model, cfg, device, dtype, world)
    optimizer = model.configure_optimizers(cfg.weight_decay, cfg.learning_rate, (cfg.beta1, cfg.beta2),
                                           device.split(":")[0])
    if ckpt:
        checkpoint.restore(model, optimizer, ckpt, cfg.out_dir)
    return model, train_model, eval_model, optimizer, dataclasses.asdict(config)


def parallelize(model, cfg, device, dtype, world):
    """Activation checkpointing per block, torch.compile, then DDP or FSDP2 (fully_shard each Block, then the
    root). Returns (the model to train, the model to evaluate): DDP's wrapper, or the sharded model for both."""
    compiled = device.startswith("cuda") if cfg.compile is None else cfg.compile
    blocks, fsdp = model.transformer.h, cfg.parallel == "fsdp"
    for i in range(len(blocks)):
        if cfg.activation_checkpointing:  # non-reentrant: the same gradients, the RNG state replayed for dropout
            blocks[i] = checkpoint_wrapper(blocks[i])
        if compiled and fsdp:  # per block, as torchtitan: the sharding's collectives run between the graphs
            blocks[i].compile()
    if not fsdp:
        model = torch.compile(model) if compiled else model
        ids = [device] if device.startswith("cuda") else None
        return (DDP(model, device_ids=ids, gradient_as_bucket_view=True) if world > 1 else model), model
    mesh = init_device_mesh(device.split(":")[0], (world,))
    # bf16 on CUDA: blocks gather bf16 weights and reduce fp32 gradients; their fp32 inputs, the fp32 root and autocast
    # keep ddp's numbers but for bf16 norm gains. (CPU autocast runs layer_norm in the weights' dtype: fp32 there.)
    bf16 = dtype == "bfloat16" and device.startswith("cuda")
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=False)
    for block in blocks:
        fully_shard(block, mesh=mesh, mp_policy=mp if bf16 else MixedPrecisionPolicy())
    fully_shard(model, mesh=mesh)
    return model, model


def open_log(cfg, resumed_at):
    """Write config.json, trim log.jsonl to the checkpoint's step, and open it; and wandb when asked for."""
    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    prepare_data.write_json(out_dir / "config.json", dict(config=vars(cfg), **checkpoint.provenance()))  # atomically
    checkpoint.trim_log(out_dir / "log.jsonl", -1 if resumed_at is None else resumed_at)
    wandb = None
    if cfg.wandb_log:
        try:
            import wandb
            wandb.init(project=cfg.wandb_project, name=cfg.wandb_run_name, config=vars(cfg))
        except ImportError:
            print("wandb_log=True but wandb is not installed: logging to log.jsonl only")
    return open(out_dir / "log.jsonl", "a"), wandb


def main(argv):
    cfg, ckpt = configure(argv)
    rank, world, device = configurator.setup_distributed(cfg.device, cfg.backend, group=cfg.parallel == "fsdp")
    master, accum, dtype = rank == 0, accumulation_steps(cfg, world), configurator.pick_dtype(cfg.dtype, device)
    ctx = configurator.autocast(device, dtype)
    if device.startswith("cuda"):
        torch.set_float32_matmul_precision("high")  # TF32 matmuls
    meta, data = load_dataset(cfg, master)
    raw_model, train_model, model, optimizer, model_args = build_model(cfg, meta, ckpt, device, dtype, world)
    step, best_val = (ckpt["iter_num"], ckpt["best_val_loss"]) if ckpt else (0, math.inf)
    last_saved = step if ckpt else None
    evaluated = step if ckpt and ckpt.get("evaluated", True) else None  # the last step whose eval is in the log
    ckpt = None  # the model and optimizer hold what they need from it
    tokens_per_step = cfg.batch_size * cfg.block_size * accum * world
    gpu, peak = configurator.device_peak_flops(cfg, device)
    say = print if master else lambda *args, **kwargs: None
    log, wandb = open_log(cfg, last_saved) if master else (None, None)
    say(f"{raw_model.get_num_params() / 1e6:.2f}M parameters on {gpu or device} in {dtype}, {tokens_per_step:,} tokens "
        f"per step = {world} processes x {accum} micro-batches x {cfg.batch_size} x {cfg.block_size}"
        + (f"; set peak_flops for MFU on a {gpu}" if gpu and not peak else ""))
    say(configurator.memory_report(raw_model, cfg, world, dtype, device))

    def record(event, **fields):  # a line of log.jsonl (and wandb), from the master process
        if master:
            log.write(json.dumps(dict(event=event, **fields)) + "\n")
            log.flush()
            if wandb:
                wandb.log(fields, step=fields["iter"])

    def save():
        t0, fields = time.time(), dict(model_args=model_args, iter_num=step, evaluated=evaluated == step,
                                       best_val_loss=best_val, config=vars(cfg), meta=meta)
        checkpoint.save_checkpoint(Path(cfg.out_dir), raw_model, optimizer, fields, cfg.parallel == "fsdp", master)
        say(f"checkpoint of step {step} saved in {time.time() - t0:.1f} s", flush=True)
        return step

    signals = []  # received: the loop stops after the step in flight, skips evaluation and saves at once
    def on_signal(signum, frame):  # os.write, not print: a signal can land inside a print, which is not reentrant
        signals.append(signum)
        if signals.count(signal.SIGINT) == 3:  # the deliberate way out: SIGINT's default action, no checkpoint
            os.write(2, b"SIGINT three times: stopping now, without a checkpoint\n")
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os.write(2, f"{signal.Signals(signum).name}: saving a checkpoint after this step (the third SIGINT "
                    "stops at once)\n".encode())
    handlers = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}

    status, val_loss, step_times, train_time, first_step = None, None, [], 0.0, step
    batch = micro_batch(data, cfg, device, step, rank * accum)  # from here on each step reads the next one's
    try:
        while True:
            if (step % cfg.eval_interval == 0 or step == cfg.max_iters) and step != evaluated and not status:
                model.eval()
                train_loss, val_loss = evaluate(model, data, cfg, ctx, device, rank, world)
                evaluated = step
                record("eval", iter=step, train_loss=train_loss, val_loss=val_loss, lr=get_lr(step, cfg))
                if cfg.log_layer_stats and master:
                    x, y = get_batch(data["val"], np.random.default_rng((cfg.seed, 1, 1, 0)), cfg, device)
                    record("layer_stats", iter=step, **layer_stats(raw_model, x, y, ctx))
                model.train()
                say(f"step {step}: train loss {train_loss:.4f}, val loss {val_loss:.4f}")
                improved, best_val = val_loss < best_val, min(best_val, val_loss)
                # last_saved == step: resumed from a stop's checkpoint, saved before its evaluation; record it now
                if step > 0 and (improved or cfg.always_save_checkpoint or last_saved == step):
                    last_saved = save()
            if status or step >= cfg.max_iters:
                break

            t0, lr = time.time(), get_lr(step, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss, batch = train_step(train_model, data, cfg, ctx, device, step, rank, accum, batch)
            grad_norm = torch.nn.utils.clip_grad_norm_(raw_model.parameters(), cfg.grad_clip or math.inf)
            grad_norm = grad_norm.full_tensor() if isinstance(grad_norm, DTensor) else grad_norm  # fsdp: all shards'
            shared = torch.stack([loss, torch.full((), float(len(signals)), device=device)])  # full: no copy to wait on
            if world > 1:  # all processes agree on the loss, and on whether to stop
                dist.all_reduce(shared)
            loss, stop, grad_norm = torch.cat([shared, grad_norm.view(1)]).tolist()  # the step's one wait on the GPU
            loss, status = loss / world, "interrupted" if stop else None
            if not (math.isfinite(loss) and math.isfinite(grad_norm)):  # stop before the update spoils the weights
                status = "diverged"
                break
            optimizer.step()
            if cfg.norm_mode == "ngpt":  # nGPT: every matrix back onto unit vectors, outside the compiled graph
                raw_model.normalize_weights()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if step > first_step + 1:  # this process's first step compiles and warms up: left out of the timing
                step_times.append(time.time() - t0)
                train_time += step_times[-1]
            if step % cfg.log_interval == 0:
                dt = sum(step_times) / len(step_times) if step_times else None  # None: the first step alone
                mfu = raw_model.estimate_mfu(cfg.batch_size * accum, dt, peak) if peak and dt else None
                record("train", iter=step, train_loss=loss, lr=lr, grad_norm=grad_norm, ms_per_iter=dt and 1000 * dt,
                       tokens_per_s=dt and tokens_per_step / dt, mfu=mfu, timed_steps=len(step_times))
                speed = f", {1000 * dt:.1f} ms/iter, {tokens_per_step / dt:,.0f} tokens/s" if dt else ""
                untimed = f" (step {first_step + 1} untimed: compiling)" if step - first_step <= cfg.log_interval else ""
                say(f"iter {step}: loss {loss:.4f}{speed}" + (f", mfu {100 * mfu:.1f}%" if mfu else "") + untimed)
                step_times = []

        if status != "diverged" and last_saved != step:  # a diverged state is never saved
            last_saved = save()
        status = status or "finished"
        speed = (step - first_step - 1) * tokens_per_step / train_time if train_time else None  # the timed steps'
        record("end", status=status, iter=step, best_val_loss=best_val if best_val < math.inf else None,
               final_val_loss=val_loss, tokens_per_s=speed)
        if world > 1:  # leave together: a process gone while the master still writes can abort the others
            dist.barrier()
        if status == "diverged":
            good = checkpoint.find_checkpoint(cfg.out_dir)
            good = "none was saved" if last_saved is None else f"{good} (step {last_saved})"
            say(f"error: loss {loss}, gradient norm {grad_norm} at step {step + 1}; the last good checkpoint: {good};"
                " resume from it with a lower learning_rate", file=sys.stderr)
            sys.exit(3)
        say(f"{status} at step {step}, checkpoint in {cfg.out_dir}; sample from it: python sample.py "
            f"--out_dir={cfg.out_dir}" + (" (or go on: --init_from=resume)" if status == "interrupted" else ""))
    except torch.OutOfMemoryError as e:  # one line that names the levers
        sys.exit(f"error: out of memory on {device} ({configurator.first_line(e)}): lower batch_size (more gradient_"
                 "accumulation_steps keep the tokens per step), activation_checkpointing=True, parallel='fsdp'")
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
        if log:
            log.close()
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
