"""bench.py end to end: two modes, two steps, its JSON report."""
import gc
import json
import os
import subprocess
import sys

import pytest

import bench
from conftest import ROOT
from model import GPT

TINY = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=32", "--batch_size=2", "--sample_tokens=8"]


def run_bench(*args):
    return subprocess.run([sys.executable, "bench.py", *TINY, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_bench_json_report_for_two_modes(arch):
    result = run_bench("--modes=geonorm,simplenorm", "--steps=2", "--compile=off", "--json", f"--arch={arch}")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["shape"].startswith(f"{arch}: 1 layers")  # a train.py setting passed through
    rows = {r["mode"]: r for r in report["training"]}
    assert set(rows) == {"pre", "geonorm", "simplenorm"}  # pre joins as the baseline
    assert rows["pre"]["ratio_to_pre"] == 1.0
    for r in rows.values():
        assert r["compile"] is False and r["step_ms"] > 0 and r["peak_mem_mb"] >= 0 and r["first_step_s"] > 0
        assert r["mfu"] is None  # no peak FLOP/s on a CPU: no made-up MFU
        assert abs(r["tokens_per_s"] * r["step_ms"] / 1000 - 2 * 32) < 1e-6  # batch 2 x block 32 per step
        assert abs(r["ratio_to_pre"] - r["step_ms"] / rows["pre"]["step_ms"]) < 1e-9
    sampling = {r["mode"]: r for r in report["sampling"]}
    assert set(sampling) == set(rows)
    for r in sampling.values():
        assert abs(r["cache_speedup"] - r["tokens_per_s_cache"] / r["tokens_per_s_no_cache"]) < 1e-9
    loader = report["data_loader"]
    assert abs(loader["tokens_per_s"] / (loader["batches_per_s"] * 2 * 32) - 1) < 1e-9


def test_bench_rejects_unknown_mode_and_setting():
    result = run_bench("--modes=pre,rmsnorm", "--steps=1", "--compile=off")
    assert result.returncode != 0 and "error: unknown mode(s) rmsnorm" in result.stderr
    result = run_bench("--n_layers=2", "--steps=1", "--compile=off")
    assert result.returncode != 0 and "did you mean 'n_layer'?" in result.stderr


def test_the_vocabulary_is_the_datasets_unless_given():
    assert bench.parse([])[0].vocab_size == 65  # pystdlib: characters
    assert bench.parse([os.path.join(ROOT, "configs", "geonorm_125m.py")])[0].vocab_size == 50304  # GPT-2, padded
    assert bench.parse(["--dataset=fineweb_edu", "--vocab_size=1000"])[0].vocab_size == 1000


def test_each_modes_peak_memory_is_measured_with_only_its_own_model_alive(monkeypatch):
    args, modes, cfg = bench.parse([*TINY, "--modes=geonorm,simplenorm", "--steps=1"])
    def models():  # GPT instances alive in this process
        gc.collect()
        return sum(type(o) is GPT for o in gc.get_objects())

    before, alive, measure = models(), [], bench.Runner.peak_memory_mb
    monkeypatch.setattr(bench.Runner, "peak_memory_mb", lambda self: alive.append(models() - before) or measure(self))
    rows = bench.bench_training(modes, cfg, args, compiled=False)
    assert alive == [1, 1, 1] and [r["mode"] for r in rows] == ["pre", "geonorm", "simplenorm"]
