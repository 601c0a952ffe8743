"""bench.py: its JSON report for the modes asked for, compiled and eager steps that train alike, memory per
mode; the train.py settings it and ablate.py pass on, listed by --help and checked."""
import gc
import json
import os
import subprocess
import sys

import pytest
import torch

import ablate
import bench
import configurator
from configurator import ENTRIES, PRESETS
from conftest import ROOT, error_of
from model import ARCHS, GPT

TINY = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=32", "--batch_size=2", "--sample_tokens=8"]
TRAINING = {"mode", "compile", "step_ms", "ratio_to_pre", "tokens_per_s", "first_step_s", "mfu", "peak_mem_mb"}
SAMPLING = {"mode", "tokens_per_s_cache", "tokens_per_s_no_cache", "cache_speedup"}


def run_bench(*args):
    return subprocess.run([sys.executable, "bench.py", *TINY, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("arch", ARCHS)
def test_bench_reports_the_modes_asked_for_after_pre_the_baseline(arch):
    result = run_bench("--modes=geonorm,simplenorm", "--steps=2", "--compile=off", "--json", f"--arch={arch}")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["shape"] == f"{arch}: 1 layers, 2 heads, 32 wide, block 32, batch 2, vocab 65"  # train.py's settings
    assert [r["mode"] for r in report["training"]] == ["pre", "geonorm", "simplenorm"]
    assert [r["mode"] for r in report["sampling"]] == ["pre", "geonorm", "simplenorm"]
    assert all(set(r) == TRAINING for r in report["training"]) and all(set(r) == SAMPLING for r in report["sampling"])
    assert [r["compile"] for r in report["training"]] == [False] * 3  # --compile=off: eager rows only
    assert report["training"][0]["ratio_to_pre"] == 1.0
    assert all(r["mfu"] is None for r in report["training"])  # no peak FLOP/s on a CPU: no made-up MFU


def test_every_derived_figure_is_its_raw_figures_divided_in_the_json_and_the_table(capsys):
    """What the report derives, recomputed from the raw figures it prints: ratio_to_pre = step_ms / pre's
    step_ms (pre's exactly 1), tokens_per_s = batch_size * block_size tokens per step / seconds per step, the
    cache speedup = tokens/s with the cache / without, the loader's tokens/s = batches/s * tokens per batch;
    and the table prints those same figures."""
    bench.main([*TINY, "--modes=geonorm,simplenorm", "--steps=2", "--compile=off", "--json"])
    report, tokens = json.loads(capsys.readouterr().out), 2 * 32  # --batch_size=2, --block_size=32
    pre = report["training"][0]
    assert pre["mode"] == "pre" and pre["ratio_to_pre"] == 1.0
    for r in report["training"]:
        assert r["ratio_to_pre"] == pytest.approx(r["step_ms"] / pre["step_ms"], rel=1e-12), r["mode"]
        assert r["tokens_per_s"] == pytest.approx(tokens / (r["step_ms"] / 1000), rel=1e-12), r["mode"]
    assert len({r["step_ms"] for r in report["training"]}) == 3  # distinct times: a wrong base would show
    for r in report["sampling"]:
        assert r["cache_speedup"] == pytest.approx(r["tokens_per_s_cache"] / r["tokens_per_s_no_cache"], rel=1e-12)
    loader = report["data_loader"]
    assert loader["tokens_per_s"] == pytest.approx(loader["batches_per_s"] * tokens, rel=1e-12)
    bench.print_table(report)
    table = [line.split() for line in capsys.readouterr().out.splitlines()]
    for r in report["training"]:  # mode, compile, ms/step, x pre, tokens/s, ...
        [row] = [cells for cells in table if cells[:2] == [r["mode"], "off"]]
        assert row[2:5] == [f"{r['step_ms']:.1f}", f"{r['step_ms'] / pre['step_ms']:.3f}",
                            f"{tokens / (r['step_ms'] / 1000):,.0f}"], r["mode"]


def test_threads_sets_torchs_cpu_threads_for_every_step_and_the_report_says_how_many(monkeypatch, capsys):
    """--threads=N: every timed step runs on N threads, and the JSON and the table's first line say N; without
    it torch's count is left as it is; fewer than 1 is a one-line error."""
    seen, step, before = [], bench.Runner.step, torch.get_num_threads()
    monkeypatch.setattr(bench.Runner, "step", lambda self: seen.append(torch.get_num_threads()) or step(self))
    try:
        bench.main([*TINY, "--modes=pre", "--steps=1", "--compile=off", "--json", f"--threads={before + 1}"])
        assert json.loads(capsys.readouterr().out)["threads"] == before + 1 and set(seen) == {before + 1}
    finally:
        torch.set_num_threads(before)
    seen.clear()
    bench.main([*TINY, "--modes=pre", "--steps=1", "--compile=off"])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(f"1 steps per mode, {before} CPU threads") and set(seen) == {before}
    assert error_of(bench.parse, ["--threads=0"]) == "error: bench_threads must be at least 1, got 0 in --threads=0"


@pytest.mark.skipif(not torch.set_flush_denormal(False), reason="this CPU cannot flush subnormal floats")
def test_subnormals_are_zero_in_every_timed_step_and_again_themselves_after_bench(monkeypatch):
    """A CPU's subnormal arithmetic (microcode, up to 100x) would time one mode's underflow, not its cost: bench
    flushes them to zero while it measures, and leaves its caller's arithmetic as torch's default has it."""
    flushed, step = [], bench.Runner.step
    monkeypatch.setattr(bench.Runner, "step", lambda self: flushed.append(float(torch.tensor(1e-39) * 1) == 0)
                        or step(self))
    bench.main([*TINY, "--modes=pre", "--steps=2", "--compile=off", "--json"])
    assert flushed == [True] * 6  # the memory pass: a first step, a warm-up, the measured one; a warm-up, 2 timed
    assert float(torch.tensor(1e-39) * 1) != 0


def test_the_presets_are_rows_of_their_own_measured_as_the_settings_they_name():
    result = run_bench("--modes=dyt,peri", "--steps=1", "--compile=off", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [r["mode"] for r in report["training"]] == [r["mode"] for r in report["sampling"]] == ["pre", "dyt", "peri"]
    args, modes, cfg = bench.parse([*TINY, "--modes=all"])
    assert modes == list(ENTRIES)
    for preset, settings in PRESETS.items():
        config = bench.Runner(preset, cfg, args.vocab_size, False).model.config
        assert {k: getattr(config, k) for k in settings} == settings
    assert not bench.Runner("sandwich", cfg, args.vocab_size, False).model.config.embed_norm


def test_ngpts_step_includes_its_projection_and_every_entry_compiles_without_falling_back_to_eager():
    """The timed step of ngpt ends with GPT.normalize_weights, as train.py's does; dynamo may compile
    GPT.forward once per entry in each pass (its default, 8, would leave the rest eager)."""
    args, _, cfg = bench.parse([*TINY, "--modes=ngpt"])
    runner = bench.Runner("ngpt", cfg, args.vocab_size, False)
    runner.step()
    head = runner.model.lm_head.weight
    torch.testing.assert_close(head.norm(dim=1), torch.ones(head.size(0)))
    assert torch._dynamo.config.recompile_limit >= 2 * len(ENTRIES)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("mode", ENTRIES)
def test_compiled_and_eager_runners_take_the_same_training_steps(mode, arch, monkeypatch):
    """bench.py times one step both ways: from the same weights and batch, two compiled steps leave the
    weights where two eager steps do (aot_eager, which needs no C++ toolchain), and every weight moved."""
    compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model: compile(model, backend="aot_eager"))
    args, _, cfg = bench.parse([*TINY, f"--arch={arch}"])
    eager, compiled = bench.Runner(mode, cfg, args.vocab_size, False), bench.Runner(mode, cfg, args.vocab_size, True)
    init = {name: p.detach().clone() for name, p in eager.model.named_parameters()}
    for _ in range(2):
        eager.step()
        compiled.step()
    for name, p in eager.model.named_parameters():
        assert not torch.equal(p, init[name]), name
        torch.testing.assert_close(compiled.model.get_parameter(name), p, rtol=1e-4, atol=1e-6)


def test_bench_rejects_unknown_mode_and_setting():
    result = run_bench("--modes=pre,rmsnorm", "--steps=1", "--compile=off")
    assert result.returncode != 0 and "error: unknown mode(s) rmsnorm" in result.stderr
    result = run_bench("--n_layers=2", "--steps=1", "--compile=off")
    assert result.returncode != 0 and "did you mean --n_layer?" in result.stderr


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


def test_bench_reads_its_own_settings_beside_train_pys(capsys):
    args, modes, cfg = bench.parse(["--modes=simplenorm,simplenorm", "--compile=on", "--json", "--n_layer=2"])
    assert (modes, args.compile, args.json, cfg.n_layer, cfg.n_embd) == (["pre", "simplenorm"], "on", True, 2, 384)
    assert not any(name.startswith("bench_") for name in vars(cfg))  # train.py's settings only
    with pytest.raises(SystemExit, match="compile must be one of both, on, off, got 'sometimes'"):
        bench.parse(["--compile=sometimes"])
    with pytest.raises(SystemExit) as exit:
        bench.parse(["--help"])
    assert exit.value.code == 0 and "\nbench_steps = 10  # timed steps per mode\n" in capsys.readouterr().out


@pytest.mark.parametrize("parse", [ablate.configure, bench.parse])
def test_the_train_settings_passed_on_are_listed_guessed_and_the_rest_refused(parse, tmp_path, capsys):
    """ablate.py passes every train.py setting on to its runs, bench.py those that shape what it measures:
    --help lists them as train.py has them; a mistyped name is guessed among the script's own first (--mode:
    --modes, not norm_mode); bench.py refuses, in one line, a train.py setting it would ignore
    (--parallel=fsdp), and leaves a config file's out with a note."""
    script = "ablate.py" if parse is ablate.configure else "bench.py"
    with pytest.raises(SystemExit) as e:
        parse(["--help"])
    listed = capsys.readouterr().out
    passed = configurator.read_settings(bench.TRAIN)
    passed = passed if script == "ablate.py" else {k: v for k, v in passed.items() if k in bench.MEASURED}
    assert e.value.code == 0 and len(passed) > 30
    assert all(f"\n{name} = " in listed or f"\n{name}: " in listed for name in passed)
    if script == "bench.py":
        assert "\nparallel = " not in listed and "\nout_dir = " not in listed
    refused = {"--mode=pre": "unknown setting 'mode' in --mode=pre: did you mean --modes?",
               "--seed_list=1": "unknown setting 'seed_list' in --seed_list=1: did you mean --seeds?"
                                if script == "ablate.py" else "did you mean 'seed'?",
               "--n_layers=2": "unknown setting 'n_layers' in --n_layers=2: did you mean"}
    if script == "bench.py":
        refused |= {f"--{name}={value}": f"bench.py does not use {name} (--{name}={value}): it measures"
                    for name, value in (("parallel", "fsdp"), ("max_iters", 5), ("out_dir", "x"),
                                        ("norm_mode", "pre"))}
    for arg, message in refused.items():
        assert message in error_of(parse, [arg]), arg
    if script == "bench.py":
        (tmp_path / "config.py").write_text("parallel = 'fsdp'\nmax_iters = 5\nn_layer = 2\n")
        assert parse([str(tmp_path / "config.py")])[2].n_layer == 2
        assert capsys.readouterr().err == ("note: bench.py leaves out max_iters, parallel: settings of a "
                                           "training run, not of what it measures\n")
