"""measure.py: peak FLOP/s by a GPU's name, the speed and MFU of the steps between logs, rotation angles."""
import math
import types

import pytest
import torch

import measure


@pytest.mark.parametrize("gpu, peak", [  # names as torch.cuda.get_device_name gives them
    ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H100 NVL", 835e12),
    ("NVIDIA H200", 989e12), ("NVIDIA H200 NVL", 835e12), ("NVIDIA GH200 480GB", 989e12), ("NVIDIA H20", 148e12),
    ("NVIDIA B200", 2250e12), ("NVIDIA A100-SXM4-80GB", 312e12), ("NVIDIA A100-PCIE-40GB", 312e12),
    ("NVIDIA A10", 125e12), ("NVIDIA L4", 121e12), ("NVIDIA L40", 181e12), ("NVIDIA L40S", 362e12),
    ("NVIDIA GeForce RTX 4090", 165e12), ("NVIDIA GeForce RTX 3090", 71e12), ("NVIDIA RTX 6000 Ada Generation", 364e12),
    ("NVIDIA A10G", None), ("Tesla V100-SXM2-16GB", None)])  # not in the table: no MFU rather than a wrong one
def test_the_peak_flops_of_a_gpu_are_its_longest_matching_names(gpu, peak):
    assert measure.peak_flops_of(gpu) == peak


def test_throughput_leaves_the_first_step_out_and_each_window_holds_its_own_steps():
    model = types.SimpleNamespace(estimate_mfu=lambda fwdbwd, dt, peak: fwdbwd * 1e12 / dt / peak)
    cfg = types.SimpleNamespace(batch_size=4, block_size=8, log_interval=2, peak_flops=2e12, compile=None)
    speed = measure.Throughput(model, cfg, world=2, accum=3, device="cpu", first_step=10)  # resumed at step 10
    speed.add(11, 5.0)  # the first step compiles: not timed
    first = speed.window()
    assert first == dict(ms_per_iter=None, tokens_per_s=None, mfu=None, timed_steps=0)
    assert speed.describe(first, 11) == " (step 11 untimed: warming up)"  # no compiling on a CPU
    speed.add(12, 0.1)
    speed.add(13, 0.3)
    window = speed.window()
    assert window == pytest.approx(dict(ms_per_iter=200.0, tokens_per_s=4 * 8 * 3 * 2 / 0.2, mfu=12 / 0.2 / 2,
                                        timed_steps=2))
    assert speed.describe(window, 13) == ", 200.0 ms/iter, 960 tokens/s, mfu 3000.0%"
    assert speed.overall(13) == pytest.approx(2 * 192 / 0.4)


def test_rotation_angle_is_exact_for_small_and_large_angles():
    theta = torch.tensor([1e-4, 0.5, 3.0, math.pi - 1e-3])
    x = torch.stack([torch.ones_like(theta), torch.zeros_like(theta), torch.zeros_like(theta)], -1)  # (4, 3)
    y = torch.stack([torch.cos(theta), torch.sin(theta), torch.zeros_like(theta)], -1) * 7.0
    for t, xi, yi in zip(theta, x, y):
        assert measure.rotation_angle(xi.view(1, 1, 3), yi.view(1, 1, 3)) == pytest.approx(t.item(), rel=1e-3)
