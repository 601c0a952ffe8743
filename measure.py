"""What a run measures besides its loss: peak FLOP/s and MFU, the memory estimate, per-block
statistics, and the lines train.py prints before it trains (banner, and plan for a dry run)."""
import dataclasses

import torch
import torch.nn.functional as F

from devices import autocast, pick_dtype
from model import GPT

# Dense bf16 tensor-core FLOP/s (no sparsity) from the vendors' datasheets, by the words of a GPU's
# name as torch.cuda.get_device_name gives it; the longest name that matches wins ("H100 NVL" before
# "H100").
PEAK_FLOPS = {"B200": 2250e12, "B100": 1750e12, "H200": 989e12, "H200 NVL": 835e12, "GH200": 989e12,
              "H100": 989e12, "H100 PCIe": 756e12, "H100 NVL": 835e12, "H800": 989e12,
              "H20": 148e12, "A100": 312e12, "A800": 312e12, "A10": 125e12,
              "L40S": 362e12, "L40": 181e12, "L4": 121e12,
              "RTX 6000 Ada": 364e12, "RTX 4090": 165e12, "RTX 3090": 71e12}


# -------------------------------------------------------------------------------------------- speed

def peak_flops_of(gpu):
    """PEAK_FLOPS of the longest table name found in the GPU's name as whole words; None if none
    is."""
    # "NVIDIA A100-SXM4-80GB": the word A100, so A10 does not match it
    words = f" {gpu.replace('-', ' ')} "
    names = [name for name in PEAK_FLOPS if f" {name} " in words]
    return PEAK_FLOPS[max(names, key=len)] if names else None


def device_peak_flops(cfg, device):
    """(GPU name or "", its dense bf16 FLOP/s for MFU): the peak_flops setting, else looked up by
    name."""
    gpu = torch.cuda.get_device_name(device) if device.startswith("cuda") else ""
    return gpu, cfg.peak_flops or peak_flops_of(gpu)


def banner(model, cfg, world, accum, dtype, device):
    """The lines train.py prints before the first step: the model and its device, the tokens per
    step, and the memory estimate."""
    gpu, peak = device_peak_flops(cfg, device)
    return (f"{model.get_num_params() / 1e6:.2f}M parameters on {gpu or device} in {dtype}, "
            f"{cfg.batch_size * cfg.block_size * accum * world:,} tokens per step = {world} process"
            f"{'es' * (world > 1)} x {accum} micro-batch{'es' * (accum > 1)} x {cfg.batch_size} x "
            f"{cfg.block_size}"
            + (f"; set peak_flops for MFU on a {gpu}" if gpu and not peak else "")
            + "\n" + memory_report(model, cfg, world, dtype, device))


def plan(cfg, config, world, accum, device):
    """train.py's dry run: the banner of the run planned, its model (config) built on the meta
    device, where nothing is allocated. config None: no model before the run loads OpenAI's GPT-2 or
    makes its dataset."""
    if config is None:
        then = (f"loads OpenAI's {cfg.init_from}" if cfg.init_from not in ("scratch", "resume")
                else f"makes {cfg.dataset}")
        return ("dry run: every check passed, nothing written; "
                f"the model is counted once the run {then}")
    with torch.device("meta"):
        model = GPT(config)
    return "dry run: every check passed, nothing written. The run:\n" + banner(
        model, cfg, world, accum, pick_dtype(cfg.dtype, device), device)


# ---------------------------------------------------------------------------------- memory estimate

def block_activation_bytes(config, dtype, width=None):
    """Bytes per token that one block keeps for its backward pass, counted rather than modeled: a
    narrow copy of the model (eval mode: no dropout) runs forward on the CPU, 1 and 2 blocks deep at
    2 sequence lengths, and autograd's saved-tensor hooks sum the storages the graph keeps, each
    once. The differences leave out the weights and all outside the blocks. Counted at width if
    given, else at 8 and 16 features per head and extrapolated on the line through the two: some of
    what a block keeps per token does not grow with the width (a norm's statistics, geonorm's dot
    products) and the rest grows in proportion to it."""
    if width is None:
        narrow, wider = (block_activation_bytes(config, dtype, k * config.n_head) for k in (8, 16))
        return narrow + (wider - narrow) * (config.n_embd - 8 * config.n_head) / (8 * config.n_head)

    def saved(model, T):
        storages, idx = {}, torch.zeros(1, T, dtype=torch.long)

        def pack(t):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast("cpu", dtype):
            # kept alive to the end: no storage is freed and reused while counting
            loss = model(idx, idx)[1]
        return sum(storages.values())

    def narrow(n_layer):
        # multiple_of 1: llama's MLP keeps its width's ratio to n_embd
        copy = dataclasses.replace(config, n_layer=n_layer, n_embd=width, block_size=64,
                                   vocab_size=64, multiple_of=1)
        return GPT(copy).eval()

    # the narrow models' init leaves the run's random draws alone
    with torch.random.fork_rng(devices=[]):
        one, two = narrow(1), narrow(2)
        return (saved(two, 64) - saved(one, 64) - saved(two, 32) + saved(one, 32)) / 32


def memory_estimate(model, cfg, world, dtype):
    """Estimated bytes per GPU (or CPU process) to train model: {parameters, gradients, optimizer,
    activations, switched: the activations with activation_checkpointing the other way}. AdamW keeps
    fp32 weights, gradients and two moments, 4 + 4 + 8 bytes per parameter, divided over the
    processes under fsdp, which also gathers two blocks' weights at a time (one computing, one
    prefetched). ddp's bf16 autocast keeps a bf16 copy of each weight for the backward pass.
    Activations of a micro-batch: each block's (block_activation_bytes), the head's input and fp32
    log-probabilities, and as much again as one block's for the gradients the backward pass makes on
    its way; with activation checkpointing a block keeps only its fp32 input, and one block at a
    time recomputes the rest."""
    c, fsdp, bf16 = model.config, cfg.parallel == "fsdp", dtype == "bfloat16"
    n = sum(p.numel() for p in model.parameters())
    per_block = sum(p.numel() for p in model.transformer.h[0].parameters())
    shards, tokens = world if fsdp else 1, cfg.batch_size * c.block_size
    block, head = block_activation_bytes(c, dtype), 4 * c.vocab_size + 8 * c.n_embd  # per token
    copies = 2 * n if bf16 and not fsdp else 0  # ddp's autocast: a bf16 copy of every weight
    # with checkpointing the blocks recompute theirs
    outside = copies and 2 * (n - c.n_layer * per_block)
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
    parts = " + ".join(f"{m[k] / size:.2f} {k}"
                       for k in ("parameters", "gradients", "optimizer", "activations"))
    where = "GPU" if device.startswith("cuda") else "process"
    return (f"memory per {where}, estimated: {parts} = {total / size:.2f} {unit}; activations "
            f"{m['switched'] / size:.2f} {unit} with "
            f"activation_checkpointing={not cfg.activation_checkpointing}")


# --------------------------------------------------------------------------------- layer statistics

def rotation_angle(x, y):
    """Mean angle between x and y (B, T, C) over tokens: atan2(|ŷ - (x̂·ŷ)x̂|, x̂·ŷ), exact
    near 0 and π."""
    x, y = F.normalize(x, dim=-1), F.normalize(y, dim=-1)
    cos = (x * y).sum(-1, keepdim=True)
    return torch.atan2((y - cos * x).norm(dim=-1), cos.squeeze(-1)).mean().item()


def layer_stats(raw_model, x, y, ctx):
    """Per block on one batch: its parameters' gradient norm, the RMS of the residual stream it
    outputs, and the mean angle by which it rotates a token's vector. Forward hooks on the eager
    model."""
    blocks, io = list(raw_model.transformer.h), []
    # a block's input and output
    keep = lambda module, args, out: io.append((args[0].float(), out.float()))
    hooks = [b.register_forward_hook(keep) for b in blocks]
    with ctx:
        _, loss = raw_model(x, y)
    for hook in hooks:
        hook.remove()
    params = [list(b.parameters()) for b in blocks]
    grads = iter(torch.autograd.grad(loss, [p for ps in params for p in ps]))  # leaves .grad alone
    return dict(grad_norm=[torch.stack([next(grads).float().norm() for _ in ps]).norm().item()
                           for ps in params],
                resid_rms=[out.pow(2).mean().sqrt().item() for _, out in io],
                angle=[rotation_angle(inp, out) for inp, out in io])
