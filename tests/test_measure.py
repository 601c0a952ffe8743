"""measure.py: peak FLOP/s by a GPU's name, the speed and MFU of the steps between logs, rotation
angles, the memory estimate."""
import dataclasses
import json
import math
import sys
import types

import pytest
import torch

import logbook
import measure
import train
from conftest import mentions


@pytest.mark.parametrize("gpu, peak", [  # names as torch.cuda.get_device_name gives them
    ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H100 NVL", 835e12),
    ("NVIDIA H200", 989e12), ("NVIDIA H200 NVL", 835e12), ("NVIDIA GH200 480GB", 989e12),
    ("NVIDIA H20", 148e12),
    ("NVIDIA B200", 2250e12), ("NVIDIA A100-SXM4-80GB", 312e12), ("NVIDIA A100-PCIE-40GB", 312e12),
    ("NVIDIA A10", 125e12), ("NVIDIA L4", 121e12), ("NVIDIA L40", 181e12), ("NVIDIA L40S", 362e12),
    ("NVIDIA GeForce RTX 4090", 165e12), ("NVIDIA GeForce RTX 3090", 71e12),
    ("NVIDIA RTX 6000 Ada Generation", 364e12),
    # not in the table: no MFU rather than a wrong one
    ("NVIDIA A10G", None), ("Tesla V100-SXM2-16GB", None)])
def test_the_peak_flops_of_a_gpu_are_its_longest_matching_names(gpu, peak):
    assert measure.peak_flops_of(gpu) == peak


def test_throughput_leaves_the_first_step_out_and_each_window_holds_its_own_steps():
    model = types.SimpleNamespace(estimate_mfu=lambda fwdbwd, dt, peak: fwdbwd * 1e12 / dt / peak)
    cfg = types.SimpleNamespace(batch_size=4, block_size=8, log_interval=2, peak_flops=2e12,
                                compile=None)
    # resumed at step 10
    speed = train.Throughput(model, cfg, world=2, accum=3, device="cpu", first_step=10)
    speed.add(11, 5.0)  # the first step compiles: not timed
    first = speed.window()
    assert first == dict(ms_per_iter=None, tokens_per_s=None, mfu=None, timed_steps=0)
    assert speed.describe(first, 11) == " (step 11 untimed: warming up)"  # no compiling on a CPU
    speed.add(12, 0.1)
    speed.add(13, 0.3)
    window = speed.window()
    assert window == pytest.approx(dict(ms_per_iter=200.0, tokens_per_s=4 * 8 * 3 * 2 / 0.2,
                                        mfu=12 / 0.2 / 2, timed_steps=2))
    assert speed.describe(window, 13) == ", 200.0 ms/iter, 960 tokens/s, mfu 3000.0%"
    # the first log_interval's log
    assert speed.describe(window, 12).endswith(" (step 11 untimed: warming up)")
    assert speed.overall(13) == pytest.approx(2 * 192 / 0.4)
    cfg.compile = True
    fresh = train.Throughput(model, cfg, world=1, accum=1, device="cpu", first_step=0)
    assert fresh.overall(1) is None  # nothing timed yet
    assert fresh.describe(fresh.window(), 1) == " (step 1 untimed: compiling, warming up)"


def test_rotation_angle_is_exact_for_small_and_large_angles_and_the_mean_over_tokens():
    theta = torch.tensor([1e-4, 0.5, 3.0, math.pi - 1e-3])
    # (4, 3)
    x = torch.stack([torch.ones_like(theta), torch.zeros_like(theta), torch.zeros_like(theta)], -1)
    y = torch.stack([torch.cos(theta), torch.sin(theta), torch.zeros_like(theta)], -1) * 7.0
    for t, xi, yi in zip(theta, x, y):
        assert measure.rotation_angle(xi.view(1, 1, 3), yi.view(1, 1, 3)) == \
            pytest.approx(t.item(), rel=1e-3)
    # tokens of other lengths: each its own angle
    lengths = torch.tensor([1.0, 2.0, 3.0, 4.0]).view(2, 2, 1)
    assert measure.rotation_angle(x.view(2, 2, 3) * lengths, y.view(2, 2, 3) * lengths.flip(0)) == \
        pytest.approx(theta.mean().item(), rel=1e-4)


def tiny_gpt(n_layer=2, n_embd=32):
    """A tiny gpt2 pre-norm model without biases on a 64-token vocabulary, block_size 16, 2
    heads."""
    from model import GPT, GPTConfig
    torch.manual_seed(0)
    return GPT(GPTConfig(n_layer=n_layer, n_head=2, n_embd=n_embd, block_size=16, vocab_size=64,
                         bias=False))


def estimate(model, dtype, batch_size=4, parallel="ddp", world=1, checkpointing=False):
    cfg = types.SimpleNamespace(parallel=parallel, batch_size=batch_size,
                                activation_checkpointing=checkpointing)
    return measure.memory_estimate(model, cfg, world, dtype)


@pytest.mark.parametrize("parallel, world", [("ddp", 1), ("ddp", 3), ("fsdp", 2)])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_the_memory_estimate_of_a_tiny_model_is_its_hand_count_under_each_precision(parallel, world,
                                                                                    checkpointing):
    """memory_estimate against a hand count for one tiny config: V·C + T·C + L·(12C² + 2C) + C
    parameters; AdamW's fp32 weights, gradients and two moments (4 + 4 + 8 bytes each) in fp32 and
    under bf16 autocast alike, over the processes only under fsdp (plus two blocks' gathered weights
    in the run's dtype); activations B·T·((L+1)·block + 4V + 8C), with checkpointing B·T·(L·4C
    + 2·block + 4V + 8C), plus ddp's bf16 copy of the weights (2 bytes each; with checkpointing
    those outside the blocks). bf16 keeps fewer activation bytes per block than fp32."""
    model, (V, T, C, L, B) = tiny_gpt(), (64, 16, 32, 2, 4)
    n, per_block = V * C + T * C + L * (12 * C * C + 2 * C) + C, 12 * C * C + 2 * C
    assert sum(p.numel() for p in model.parameters()) == n == 27_296
    shards = world if parallel == "fsdp" else 1
    blocks = {dtype: measure.block_activation_bytes(model.config, dtype)
              for dtype in ("float32", "bfloat16")}
    assert 0 < blocks["bfloat16"] < blocks["float32"]
    for dtype, size in (("float32", 4), ("bfloat16", 2)):
        m = estimate(model, dtype, B, parallel, world, checkpointing)
        gathered = 2 * per_block * size if parallel == "fsdp" else 0
        assert (m["parameters"], m["gradients"], m["optimizer"]) == pytest.approx(
            (4 * n / shards + gathered, 4 * n / shards, 8 * n / shards))
        bf16_ddp = dtype == "bfloat16" and parallel == "ddp"
        whole = B * T * ((L + 1) * blocks[dtype] + 4 * V + 8 * C) + (2 * n if bf16_ddp else 0)
        kept = B * T * (L * 4 * C + 2 * blocks[dtype] + 4 * V + 8 * C) + \
            (2 * (n - L * per_block) if bf16_ddp else 0)
        assert (m["activations"], m["switched"]) == \
            pytest.approx((kept, whole) if checkpointing else (whole, kept))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_memory_estimate_is_linear_in_n_layer_and_batch_size_and_a_blocks_share_in_width(dtype):
    """Each block adds the same parameters, gradients, optimizer state and activations; activations
    (less ddp's bf16 weight copy) are proportional to batch_size and the rest does not depend on it;
    a block's activation bytes per token do not depend on n_layer and grow by the same amount for
    each step in n_embd (a norm's statistics per token do not grow with it), at most in
    proportion."""
    models = [tiny_gpt(n_layer) for n_layer in (1, 2, 3)]
    copies = [2 * sum(p.numel() for p in m.parameters()) if dtype == "bfloat16" else 0
              for m in models]
    for key in ("parameters", "gradients", "optimizer", "activations", "switched"):
        a, b, c = (estimate(m, dtype)[key] for m in models)
        assert b - a == pytest.approx(c - b), key
    for model, copy in zip(models, copies):
        one, three = estimate(model, dtype, batch_size=1), estimate(model, dtype, batch_size=3)
        assert three["activations"] - copy == pytest.approx(3 * (one["activations"] - copy))
        for key in ("parameters", "gradients", "optimizer"):
            assert three[key] == one[key]
    per_block = [measure.block_activation_bytes(m.config, dtype) for m in models]
    assert per_block == pytest.approx([per_block[0]] * 3)
    wider = [measure.block_activation_bytes(tiny_gpt(2, n_embd=C).config, dtype) for C in (64, 96)]
    assert wider[1] - wider[0] == pytest.approx(wider[0] - per_block[0])
    assert per_block[0] < wider[0] <= 2 * per_block[0]


def run_cfg(**settings):
    """The settings banner, plan and memory_report read, as train.py's configure gives them."""
    return types.SimpleNamespace(**dict(batch_size=4, block_size=16, peak_flops=None,
                                        parallel="ddp", dtype="float32",
                                        activation_checkpointing=False, init_from="scratch",
                                        dataset="shakespeare_char", compile=False) | settings)


@pytest.mark.parametrize("world, accum, processes, micro", [
    (1, 1, "1 process", "1 micro-batch"), (2, 2, "2 processes", "2 micro-batches")])
def test_the_banner_counts_the_tokens_per_step_and_ends_in_the_memory_line(world, accum, processes,
                                                                           micro):
    model, cfg = tiny_gpt(), run_cfg(parallel="fsdp")
    # 1.125001M: 1.13M in millions, 1.12 in anything a little larger
    model.get_num_params = lambda: 1_125_001
    lines = measure.banner(model, cfg, world, accum, "bfloat16", "cpu").split("\n")
    assert lines == [f"1.13M parameters on cpu in bfloat16, {4 * 16 * world * accum:,} "
                     f"tokens per step = {processes} x {micro} x 4 x 16",
                     measure.memory_report(model, cfg, world, "bfloat16", "cpu")]


@pytest.fixture
def gpu_named(monkeypatch):
    """torch.cuda.get_device_name answering as a GPU of the name given would; the devices asked
    about."""
    asked = []

    def name(gpu):
        monkeypatch.setattr(torch.cuda, "get_device_name",
                            lambda device: asked.append(device) or gpu)
        return asked
    return name


def test_a_gpus_peak_is_looked_up_by_its_name_and_one_not_in_the_table_asks_for_peak_flops(
        gpu_named):
    asked = gpu_named("NVIDIA H100 PCIe")
    assert measure.device_peak_flops(run_cfg(), "cuda:1") == ("NVIDIA H100 PCIe", 756e12) \
        and asked == ["cuda:1"]
    model = tiny_gpt()
    assert measure.banner(model, run_cfg(), 1, 1, "bfloat16", "cuda:1").startswith(
        f"{model.get_num_params() / 1e6:.2f}M parameters on NVIDIA H100 PCIe in bfloat16, "
        "64 tokens per step")
    gpu_named("NVIDIA A10G")
    first = measure.banner(model, run_cfg(), 1, 1, "bfloat16", "cuda").split("\n")[0]
    assert first.endswith("x 4 x 16; set peak_flops for MFU on a NVIDIA A10G")
    assert "peak_flops" not in measure.banner(model, run_cfg(peak_flops=1e14), 1, 1, "bfloat16",
                                              "cuda")


@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("batch_size, device, where, unit", [(3, "cpu", "process", "MiB"),
                                                            (40_000, "cuda:0", "GPU", "GiB")])
def test_the_memory_line_sums_the_estimate_in_one_unit_and_names_the_other_setting(
        checkpointing, batch_size, device, where, unit):
    """In GiB once the total passes one (40,000 sequences of this model's in bf16: over 1.8 GiB of
    activations)."""
    model = tiny_gpt()
    cfg = run_cfg(activation_checkpointing=checkpointing, batch_size=batch_size, parallel="fsdp")
    # the processes, dtype: as given
    m = estimate(model, "bfloat16", batch_size, "fsdp", 2, checkpointing)
    size = 2**20 if unit == "MiB" else 2**30
    parts = [m[k] / size for k in ("parameters", "gradients", "optimizer", "activations")]
    assert measure.memory_report(model, cfg, 2, "bfloat16", device) == (
        f"memory per {where}, estimated: {parts[0]:.2f} parameters + {parts[1]:.2f} gradients + "
        f"{parts[2]:.2f} optimizer + {parts[3]:.2f} activations = {sum(parts):.2f} {unit}; "
        f"activations {m['switched'] / size:.2f} {unit} with "
        f"activation_checkpointing={not checkpointing}")


def test_the_peak_flops_setting_wins_and_a_cpu_has_none():
    assert measure.device_peak_flops(run_cfg(), "cpu") == ("", None)
    assert measure.device_peak_flops(run_cfg(peak_flops=3e14), "cpu") == ("", 3e14)


@pytest.mark.parametrize("init_from, then", [("scratch", "makes shakespeare_char"),
                                             ("resume", "makes shakespeare_char"),
                                             ("gpt2-medium", "loads OpenAI's gpt2-medium")])
def test_a_dry_run_says_when_the_model_is_counted_without_a_config(init_from, then):
    assert measure.plan(run_cfg(init_from=init_from), None, 1, 1, "cpu") == \
        f"dry run: every check passed, nothing written; the model is counted once the run {then}"


@pytest.mark.parametrize("dtype, runs_in", [("bfloat16", "bfloat16"), ("auto", "float32")])
def test_a_dry_run_prints_the_banner_of_the_planned_model_built_on_the_meta_device(dtype, runs_in):
    model, cfg = tiny_gpt(), run_cfg(dtype=dtype)
    state = torch.random.get_rng_state()
    out = measure.plan(cfg, model.config, 2, 3, "cpu")
    # nothing initialised: the meta device draws nothing
    assert torch.equal(torch.random.get_rng_state(), state)
    assert out == "dry run: every check passed, nothing written. The run:\n" + measure.banner(
        model, cfg, 2, 3, runs_in, "cpu")


def test_layer_stats_are_each_blocks_gradient_norm_output_rms_and_rotation_and_leave_grad_alone():
    model = tiny_gpt(n_layer=3)
    x = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    y = torch.roll(x, -1, 1)
    stats = measure.layer_stats(model, x, y, torch.autocast("cpu", enabled=False))
    # the run's accumulated gradients are not touched
    assert all(p.grad is None for p in model.parameters())
    outputs = []
    hooks = [b.register_forward_hook(lambda m, args, out: outputs.append((args[0], out)))
             for b in model.transformer.h]
    model(x, y)[1].backward()
    for h in hooks:
        h.remove()
    grad_norm = [torch.cat([p.grad.flatten() for p in b.parameters()]).norm().item()
                 for b in model.transformer.h]
    assert stats["grad_norm"] == pytest.approx(grad_norm, rel=1e-5)
    assert stats["resid_rms"] == pytest.approx([out.pow(2).mean().sqrt().item()
                                                for _, out in outputs], rel=1e-6)
    assert stats["angle"] == pytest.approx([measure.rotation_angle(i, o) for i, o in outputs],
                                           rel=1e-6)
    # one per block, in order
    assert len(set(stats["grad_norm"])) == 3 and len(set(stats["angle"])) == 3


def log_cfg(out_dir, wandb_log=False):
    return types.SimpleNamespace(out_dir=str(out_dir), wandb_log=wandb_log, wandb_project="p",
                                 wandb_run_name="r")


def test_the_log_records_json_lines_from_the_master_only_and_trims_to_the_step_resumed_from(
        tmp_path, capsys):
    path = tmp_path / "log.jsonl"
    logbook.Log(log_cfg(tmp_path), None, master=False).record("train", iter=1)
    assert not path.exists()  # another process's Log writes nothing
    log = logbook.Log(log_cfg(tmp_path), None, master=True)
    log.record("eval", iter=0, val_loss=4.0)  # a run's first event: the evaluation before step 1
    for step in (1, 2, 3):
        log.record("train", iter=step, train_loss=1.0 / step)
        assert json.loads(path.read_text().splitlines()[-1]) == \
            dict(event="train", iter=step, train_loss=1.0 / step)
    log.record("end", iter=3)
    log.close()
    kept = path.read_text()
    # resumed at step 2: nothing written yet
    resumed = logbook.Log(log_cfg(tmp_path), 2, master=True)
    resumed.record("train", iter=3, train_loss=0.5)
    resumed.close()  # a resume that failed before its first checkpoint: the log as it was
    assert path.read_text() == kept
    resumed = logbook.Log(log_cfg(tmp_path), 2, master=True)
    resumed.record("train", iter=3, train_loss=0.25)
    resumed.open()  # its first checkpoint: steps 0 to 2 kept, no old end, then what it held
    resumed.record("end", iter=3)
    resumed.close()
    assert [json.loads(line)["event"] for line in path.read_text().splitlines()][-2:] == \
        ["train", "end"]
    assert [json.loads(line)["iter"] for line in path.read_text().splitlines()] == [0, 1, 2, 3, 3]
    assert json.loads(path.read_text().splitlines()[3])["train_loss"] == 0.25
    logbook.Log(log_cfg(tmp_path), None, master=True).close()  # a new run's log starts empty
    assert path.read_text() == ""
    log = logbook.Log(log_cfg(tmp_path, wandb_log=True), None, master=True)
    log.record("train", iter=1)
    log.close()
    notice = capsys.readouterr().out
    assert notice.count("\n") == 1
    mentions(notice, "wandb_log=True", "not installed", "log.jsonl")
    assert json.loads(path.read_text()) == dict(event="train", iter=1)


def test_wandb_gets_the_run_settings_and_each_events_fields_at_its_step(tmp_path, monkeypatch):
    calls = []
    wandb = types.ModuleType("wandb")
    wandb.init = lambda **kwargs: calls.append(("init", kwargs))
    wandb.log = lambda fields, **kwargs: calls.append(("log", fields, kwargs))
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    cfg = log_cfg(tmp_path, wandb_log=True)
    log = logbook.Log(cfg, None, master=True)
    log.record("train", iter=5, train_loss=2.0)
    log.close()
    assert calls == [("init", dict(project="p", name="r", config=vars(cfg))),
                     ("log", dict(iter=5, train_loss=2.0), dict(step=5))]
    assert json.loads((tmp_path / "log.jsonl").read_text()) == \
        dict(event="train", iter=5, train_loss=2.0)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_a_blocks_bytes_are_what_autograd_keeps_per_token_for_one_block_counted_at_full_width(arch):
    """An independent count: the whole model (48 wide, 2 heads: not the 8 and 16 per head the
    estimate counts at) on 3 sequences, 1 and 2 blocks deep at 32 and 64 tokens; the difference per
    token is one block's. The llama MLP's 128 is a multiple of 64 as it is of 1, which the narrow
    copies keep (at 64 they would not)."""
    from model import GPT, GPTConfig
    config = GPTConfig(n_layer=1, n_head=2, n_embd=48, block_size=64, vocab_size=64, bias=False,
                       arch=arch, multiple_of=64)

    def kept(n_layer, T):
        torch.manual_seed(0)
        model, storages = GPT(dataclasses.replace(config, n_layer=n_layer)).eval(), {}
        x = torch.zeros(3, T, dtype=torch.long)

        def pack(t):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = model(x, x)[1]  # kept alive to the end, as measure.py keeps it
        return sum(storages.values())
    counted = (kept(2, 64) - kept(1, 64) - kept(2, 32) + kept(1, 32)) / (3 * 32)
    assert measure.block_activation_bytes(config, "float32") == pytest.approx(counted, rel=0.01)
    narrow = [measure.block_activation_bytes(config, "float32", width) for width in (16, 32)]
    assert narrow[0] < narrow[1] < counted  # each counted at its own width
