"""bench.py: its JSON report for the modes asked for, compiled and eager steps that train alike,
memory per mode; the train.py settings it and ablate.py pass on, listed by --help and checked."""
import gc
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import ablate
import bench
import configurator
import devices
from configurator import ENTRIES, PRESETS
from conftest import COMPILED_STEPS, ROOT, error_of, mentions
from data import load_meta, write_json
from model import ARCHS, GPT

SHAPE = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=32", "--batch_size=2",
         "--sample_tokens=8"]
# random tokens need no prepared dataset (pystdlib, the default, is not in a fresh checkout)
TINY = [*SHAPE, "--vocab_size=65"]
TRAINING = {"mode", "compile", "step_ms", "ratio_to_pre", "tokens_per_s", "first_step_s", "mfu",
            "peak_mem_mb"}
SAMPLING = {"mode", "tokens_per_s_cache", "tokens_per_s_no_cache", "cache_speedup"}


def bench_report(capsys, *args):
    """bench.py --json on TINY, run in this process: its report. (A process of its own spends
    seconds importing torch; the script as a process, its exit and stderr:
    test_a_dataset_not_prepared_is_one_line_naming_it_and_the_fix_and_pystdlib_is_made.)"""
    bench.main([*TINY, *args, "--json"])
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("arch", ARCHS)
def test_bench_reports_the_modes_asked_for_after_pre_the_baseline(arch, capsys):
    report = bench_report(capsys, "--modes=geonorm,simplenorm", "--steps=2", "--compile=off",
                          f"--arch={arch}")
    # train.py's settings
    assert report["shape"] == f"{arch}: 1 layers, 2 heads, 32 wide, block 32, batch 2, vocab 65"
    assert [r["mode"] for r in report["training"]] == ["pre", "geonorm", "simplenorm"]
    assert [r["mode"] for r in report["sampling"]] == ["pre", "geonorm", "simplenorm"]
    assert (all(set(r) == TRAINING for r in report["training"])
            and all(set(r) == SAMPLING for r in report["sampling"]))
    # --compile=off: eager rows only
    assert [r["compile"] for r in report["training"]] == [False] * 3
    assert report["training"][0]["ratio_to_pre"] == 1.0
    # no peak FLOP/s on a CPU: no made-up MFU
    assert all(r["mfu"] is None for r in report["training"])


def test_every_derived_figure_is_its_raw_figures_divided_in_the_json_and_the_table(capsys):
    """What the report derives, recomputed from the raw figures it prints: ratio_to_pre = step_ms /
    pre's step_ms (pre's exactly 1), tokens_per_s = batch_size * block_size tokens per step /
    seconds per step, the cache speedup = tokens/s with the cache / without, the loader's tokens/s =
    batches/s * tokens per batch; and the table prints those same figures."""
    bench.main([*TINY, "--modes=geonorm,simplenorm", "--steps=2", "--compile=off", "--json"])
    report, tokens = json.loads(capsys.readouterr().out), 2 * 32  # --batch_size=2, --block_size=32
    pre = report["training"][0]
    assert pre["mode"] == "pre" and pre["ratio_to_pre"] == 1.0
    for r in report["training"]:
        assert r["ratio_to_pre"] == pytest.approx(r["step_ms"] / pre["step_ms"],
                                                  rel=1e-12), r["mode"]
        assert r["tokens_per_s"] == pytest.approx(tokens / (r["step_ms"] / 1000),
                                                  rel=1e-12), r["mode"]
    # distinct times: a wrong base would show
    assert len({r["step_ms"] for r in report["training"]}) == 3
    for r in report["sampling"]:
        assert r["cache_speedup"] == pytest.approx(
            r["tokens_per_s_cache"] / r["tokens_per_s_no_cache"], rel=1e-12)
    loader = report["data_loader"]
    assert loader["tokens_per_s"] == pytest.approx(loader["batches_per_s"] * tokens, rel=1e-12)
    bench.print_table(report)
    table = [line.split() for line in capsys.readouterr().out.splitlines()]
    for r in report["training"]:  # mode, compile, ms/step, x pre, tokens/s, ...
        [row] = [cells for cells in table if cells[:2] == [r["mode"], "off"]]
        assert row[2:5] == [f"{r['step_ms']:.1f}", f"{r['step_ms'] / pre['step_ms']:.3f}",
                            f"{tokens / (r['step_ms'] / 1000):,.0f}"], r["mode"]


def test_the_table_shows_each_figure_of_the_report_under_its_heading(capsys):
    """The table a person reads: the setup line, a row per timed mode (compile on or off, MFU or '-'
    where there is no peak), a row per sampled mode, the loader's line; each figure the report's,
    rounded."""
    report = dict(shape="gpt2: 1 layers", device="cuda", steps=3, threads=2, torch="2.99",
                  training=[dict(mode="pre", compile=True, step_ms=12.345, ratio_to_pre=1.0,
                                 tokens_per_s=12345.6, mfu=0.4567, peak_mem_mb=1234.56,
                                 first_step_s=20.35),
                            dict(mode="geonorm", compile=False, step_ms=13.04, ratio_to_pre=1.05631,
                                 tokens_per_s=1000.4, mfu=None, peak_mem_mb=10.0,
                                 first_step_s=0.04)],
                  sampling=[dict(mode="pre", tokens_per_s_cache=500.25,
                                 tokens_per_s_no_cache=100.05, cache_speedup=5.0)],
                  data_loader=dict(batches_per_s=1234.5, tokens_per_s=1234567.8))
    bench.print_table(report)
    assert capsys.readouterr().out == (
        "gpt2: 1 layers on cuda, torch 2.99, 3 steps per mode, 2 CPU threads\n"
        "mode        compile   ms/step  x pre  tokens/s    MFU  peak MB 1st step s\n"
        "pre         on           12.3  1.000    12,346  45.7%   1234.6       20.4\n"
        "geonorm     off          13.0  1.056     1,000      -     10.0        0.0\n"
        "\n"
        "mode        sample tok/s, cache  no cache  speedup\n"
        "pre                       500.2     100.0     5.0x\n"
        "\n"
        "data loader: 1,234 batches/s (1,234,568 tokens/s)\n")


def test_sampling_times_greedy_generation_from_one_prompt_with_and_without_the_cache_best_of_two(
        monkeypatch):
    """Per mode, in eval mode: an 8-token prompt continued greedily (where the cache and the full
    recompute give the same tokens) by sample_tokens, at most to block_size, cache and no cache
    taking turns twice; tokens/s from each one's faster try."""
    generated = []

    def generate(self, idx, max_new_tokens, **kwargs):
        generated.append((self.config.norm_mode, self.training, tuple(idx.shape), idx.dtype,
                          max_new_tokens, kwargs))

    monkeypatch.setattr(GPT, "generate", generate)
    for sample_tokens, n_new in ((100, 24), (5, 5)):  # block_size 32: 24 tokens after the prompt
        generated.clear()
        # slower than a token a second
        times = iter([50.0, 200.0, 25.0, 400.0, 100.0, 300.0, 200.0, 150.0])
        monkeypatch.setattr(bench, "timed", lambda fn, device: fn() or next(times))
        args, modes, cfg = bench.parse([*TINY, "--modes=geonorm",
                                        f"--sample_tokens={sample_tokens}"])
        rows = bench.bench_sampling(modes, cfg, args)
        expected = [(m, False, (1, 8), torch.long, n_new) for m in modes for _ in "1234"]
        assert [call[:5] for call in generated] == expected
        assert [call[5] for call in generated] == [dict(temperature=0, use_cache=c)
                                                   for c in (True, False) * 4]
        assert rows == [dict(mode="pre", tokens_per_s_cache=n_new / 25,
                             tokens_per_s_no_cache=n_new / 200, cache_speedup=8.0),
                        dict(mode="geonorm", tokens_per_s_cache=n_new / 100,
                             tokens_per_s_no_cache=n_new / 150, cache_speedup=1.5)]


@pytest.mark.parametrize("compiled", [False, True])
def test_each_entrys_first_step_and_peak_are_on_stderr_before_the_next_entry_starts(
        compiled, monkeypatch, capsys):
    """Compiling every entry takes minutes on a GPU, with the report printed only at the end: each
    row's first step and peak memory, and whether it compiled, are printed as soon as they are
    measured."""
    monkeypatch.setattr(torch, "compile", lambda model: model)  # compiled rows without compiling
    args, modes, cfg = bench.parse([*TINY, "--modes=geonorm", "--steps=1"])
    printed, step = {}, bench.Runner.step

    def step_noting_stderr(self):
        if self.cfg.norm_mode not in printed:  # its first step
            printed[self.cfg.norm_mode] = capsys.readouterr().err
        step(self)

    monkeypatch.setattr(bench.Runner, "step", step_noting_stderr)
    rows = bench.bench_training(modes, cfg, args, compiled)
    lines = [f"{r['mode']}{' compiled' if compiled else ''}: first step {r['first_step_s']:.1f} s, "
             f"peak {r['peak_mem_mb']:,.0f} MB" for r in rows]
    # geonorm's first step found pre's line printed, and nothing else
    assert printed == {"pre": "", "geonorm": lines[0] + "\n"}
    assert capsys.readouterr().err == lines[1] + "\n"

def test_threads_sets_torchs_cpu_threads_for_every_step_and_the_report_says_how_many(monkeypatch,
                                                                                     capsys):
    """--threads=N: every timed step runs on N threads, and the JSON and the table's first line say
    N; without it torch's count is left as it is; fewer than 1 is a one-line error."""
    seen, step, before = [], bench.Runner.step, torch.get_num_threads()
    monkeypatch.setattr(bench.Runner, "step",
                        lambda self: seen.append(torch.get_num_threads()) or step(self))
    try:
        bench.main([*TINY, "--modes=pre", "--steps=1", "--compile=off", "--json",
                    f"--threads={before + 1}"])
        assert (json.loads(capsys.readouterr().out)["threads"] == before + 1
                and set(seen) == {before + 1})
    finally:
        torch.set_num_threads(before)
    seen.clear()
    bench.main([*TINY, "--modes=pre", "--steps=1", "--compile=off"])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(f"1 steps per mode, {before} CPU threads") and set(seen) == {before}
    mentions(error_of(bench.parse, ["--threads=0"]), "threads", f"in [1, {os.cpu_count()}]",
             "--threads=0")


@pytest.mark.skipif(not torch.set_flush_denormal(False),
                    reason="this CPU cannot flush subnormal floats")
def test_subnormals_are_zero_in_every_timed_step_and_again_themselves_after_bench(monkeypatch):
    """A CPU's subnormal arithmetic (microcode, up to 100x) would time one mode's underflow, not its
    cost: bench flushes them to zero while it measures, and leaves its caller's arithmetic as
    torch's default has it."""
    flushed, step = [], bench.Runner.step
    monkeypatch.setattr(bench.Runner, "step",
                        lambda self: flushed.append(float(torch.tensor(1e-39) * 1) == 0)
                        or step(self))
    bench.main([*TINY, "--modes=pre", "--steps=2", "--compile=off", "--json"])
    # the memory pass: a first step, a warm-up, the measured one; a warm-up, 2 timed
    assert flushed == [True] * 6
    assert float(torch.tensor(1e-39) * 1) != 0


def flushes_subnormals():
    """Whether this thread's float arithmetic flushes subnormals to zero: 1e-39 * 1 in float32."""
    return float(torch.tensor(1e-39) * 1) == 0


@pytest.mark.skipif(not torch.set_flush_denormal(False), reason="this CPU cannot flush subnormals")
@pytest.mark.parametrize("stop", [KeyboardInterrupt, RuntimeError])
@pytest.mark.parametrize("callers", [False, True])
def test_a_bench_stopped_midway_leaves_the_callers_subnormals_as_they_were(monkeypatch, stop,
                                                                           callers):
    """Ctrl-C, or an error, in a timed step: bench.main raises it, and the caller's arithmetic
    flushes subnormals afterwards only if it did before."""
    steps, step = [], bench.Runner.step

    def step_then_stop(self):
        steps.append(flushes_subnormals())
        if len(steps) == 5:  # the first timed step: 3 in the memory pass, then a warm-up
            raise stop
        step(self)

    monkeypatch.setattr(bench.Runner, "step", step_then_stop)
    torch.set_flush_denormal(callers)
    try:
        with pytest.raises(stop):
            bench.main([*TINY, "--modes=pre", "--steps=2", "--compile=off", "--json"])
        assert steps == [True] * 5 and flushes_subnormals() == callers
    finally:
        torch.set_flush_denormal(False)


def test_the_presets_are_rows_of_their_own_measured_as_the_settings_they_name(capsys):
    report = bench_report(capsys, "--modes=dyt,peri", "--steps=1", "--compile=off")
    assert ([r["mode"] for r in report["training"]] == [r["mode"] for r in report["sampling"]]
            == ["pre", "dyt", "peri"])
    args, modes, cfg = bench.parse([*TINY, "--modes=all"])
    assert modes == list(ENTRIES)
    for preset, settings in PRESETS.items():
        config = bench.Runner(preset, cfg, args.vocab_size, False).model.config
        assert {k: getattr(config, k) for k in settings} == settings
    assert not bench.Runner("sandwich", cfg, args.vocab_size, False).model.config.embed_norm


def test_ngpts_step_includes_its_projection():
    """The timed step of ngpt ends with GPT.normalize_weights, as train.py's does."""
    args, _, cfg = bench.parse([*TINY, "--modes=ngpt"])
    runner = bench.Runner("ngpt", cfg, args.vocab_size, False)
    runner.step()
    head = runner.model.lm_head.weight
    torch.testing.assert_close(head.norm(dim=1), torch.ones(head.size(0)))


# every entry on one family, the families taking turns: the runner's two paths are the same code for
# every mode, and test_model.py compiles each mode's forward on the other family; a compiled step
# of each costs seconds
@pytest.mark.parametrize("mode, arch", COMPILED_STEPS)
def test_compiled_and_eager_runners_take_the_same_training_steps(mode, arch, monkeypatch):
    """bench.py times one step both ways: from the same weights and batch, two compiled steps
    (forward, backward and AdamW, in one graph: a graph break fails) leave the weights where two
    eager steps do (aot_eager, which needs no C++ toolchain), and every weight moved. dynamo may
    compile GPT.forward once per entry in each pass (its default, 8, would leave the rest eager)."""
    compile = torch.compile
    monkeypatch.setattr(torch, "compile",
                        lambda model: compile(model, backend="aot_eager", fullgraph=True))
    # dynamo's default: 8 compilations of GPT.forward, and the rest would run eager, silently (not
    # monkeypatch: its undo would put back 8 for the next compiled step in this process)
    torch._dynamo.config.recompile_limit = 8
    args, _, cfg = bench.parse([*TINY, f"--arch={arch}"])
    eager = bench.Runner(mode, cfg, args.vocab_size, False)
    compiled = bench.Runner(mode, cfg, args.vocab_size, True)
    # room for every entry compiled, in both passes (--compile=both)
    assert torch._dynamo.config.recompile_limit >= 2 * len(ENTRIES)
    init = {name: p.detach().clone() for name, p in eager.model.named_parameters()}
    for _ in range(2):
        eager.step()
        compiled.step()
    for name, p in eager.model.named_parameters():
        assert not torch.equal(p, init[name]), name
        torch.testing.assert_close(compiled.model.get_parameter(name), p, rtol=1e-4, atol=1e-6)


def test_bench_rejects_unknown_mode_and_setting():
    """In this process (the script's exit and stderr for such a line:
    test_a_dataset_not_prepared_is_one_line_naming_it_and_the_fix_and_pystdlib_is_made)."""
    mentions(error_of(bench.main, [*TINY, "--modes=pre,rmsnorm", "--steps=1", "--compile=off"]),
             "unknown mode(s) rmsnorm")
    mentions(error_of(bench.main, [*TINY, "--n_layers=2", "--steps=1", "--compile=off"]),
             "n_layers", "did you mean --n_layer?")
    # a setting no row reads: every row the same as without it
    mentions(error_of(bench.main, [*TINY, "--modes=post", "--geo_alpha=3.0", "--steps=1",
                                   "--compile=off"]),
             "geo_alpha=3.0 does nothing to any of the modes pre, post", "norm_mode='geonorm'")
    # the baseline pre given derf's norm_type is derf: its row and derf's, one model timed twice
    mentions(error_of(bench.main, [*TINY, "--modes=derf", "--norm_type=derf", "--steps=1",
                                   "--compile=off"]),
             "pre and derf would be the same model (both with norm_type='derf')")


def test_the_vocabulary_is_the_one_the_datasets_meta_json_gives_whatever_its_name(tmp_path):
    """The tokenizer a folder was prepared with decides, as in train.py: GPT-2 BPE under a name of
    one's own is GPT-2's vocabulary padded to 50304, a character table its own size (pystdlib's too,
    when prepared); --vocab_size wins over meta.json."""
    chars = "\n !abcdefghijklmnopqrstuvwxyz{}"
    shards = {split: [dict(file=f"{split}_000000.bin", tokens=1000)] for split in ("train", "val")}
    bpe = dict(tokenizer="gpt2", vocab_size=50257, eot_token=50256, chars=None)
    char = dict(tokenizer="char", vocab_size=len(chars), eot_token=None, chars=chars)
    for dataset, meta in (("my_webtext", bpe), ("pystdlib", char)):
        (tmp_path / dataset).mkdir()
        write_json(tmp_path / dataset / "meta.json", meta | dict(shards=shards))  # no shard is read
    given = f"--data_dir={tmp_path}"
    assert bench.parse([given, "--dataset=my_webtext"])[0].vocab_size == 50304
    assert bench.parse([given])[0].vocab_size == len(chars)
    assert bench.parse([given, "--dataset=my_webtext", "--vocab_size=1000"])[0].vocab_size == 1000


def test_a_dataset_not_prepared_is_one_line_naming_it_and_the_fix_and_pystdlib_is_made(tmp_path):
    """A name prepared nowhere: one line with the meta.json looked for, the command that prepares it
    and the way round it, --vocab_size. pystdlib, the default, is made when missing, as train.py
    makes it."""
    given = [f"--data_dir={tmp_path}", "--dataset=nonexistent"]
    command = [sys.executable, "bench.py", *SHAPE, "--modes=pre", "--steps=1", "--compile=off",
               *given]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    [line] = result.stderr.splitlines()
    for words in (f"{tmp_path / 'nonexistent'}", "python prepare_data.py DATASET --out",
                  "--vocab_size"):
        assert words in line, words
    assert list(tmp_path.iterdir()) == []
    # no name: not data_dir itself as the dataset's folder
    mentions(error_of(bench.parse, [f"--data_dir={tmp_path}", "--dataset="]), "dataset is empty",
             "prepare_data.py")
    assert list(tmp_path.iterdir()) == []
    assert bench.parse([*given, "--vocab_size=7"])[0].vocab_size == 7
    # a model setting that fails: before pystdlib is made (on GPT-2's vocabulary, as train.py)
    mentions(error_of(bench.parse, [f"--data_dir={tmp_path}", "--n_embd=32", "--n_head=3"]),
             "n_embd=32", "n_head=3")
    assert list(tmp_path.iterdir()) == []
    # a file where data_dir is: its own line, not a meta.json to prepare again, nor a --out
    (tmp_path / "file").touch()
    for dataset in ("shakespeare_char", "pystdlib"):
        mentions(error_of(bench.parse, [f"--data_dir={tmp_path / 'file'}", f"--dataset={dataset}"]),
                 f"{tmp_path / 'file' / dataset}", "under", "a file, not a folder", "data_dir")
    (tmp_path / "file").unlink()
    vocab = bench.parse([f"--data_dir={tmp_path}"])[0].vocab_size
    assert vocab == load_meta(tmp_path / "pystdlib")["vocab_size"] > 65


def test_the_device_is_resolved_and_the_window_must_leave_room_after_the_prompt():
    """device=auto is resolved to the machine's (the CPU here) before anything is built; sampling's
    8-token prompt needs a block_size of at least 9."""
    device = bench.parse(["--device=auto", "--vocab_size=65"])[2].device
    assert device == devices.pick_device("auto") != "auto"
    assert bench.parse(["--block_size=9", "--vocab_size=65"])[2].block_size == 9
    mentions(error_of(bench.parse, ["--block_size=8"]), "block_size=8", "prompt", "at least 9")


def test_threads_and_the_learning_rate_are_bounded_where_torch_would_crash():
    """More threads than cores is refused (100,000 was a segmentation fault); a learning rate past
    1e20 (train.py's bound: AdamW's step overflows a float32) too."""
    cores = os.cpu_count()
    assert bench.parse(["--vocab_size=65", f"--threads={cores}"])[0].threads == cores
    mentions(error_of(bench.parse, ["--vocab_size=65", f"--threads={cores + 1}"]), "threads",
             f"in [1, {cores}]", f"{cores + 1}")
    mentions(error_of(bench.parse, ["--vocab_size=65", "--learning_rate=1e300"]), "learning_rate",
             "in [0, 1e20]", "1e+300")


def test_each_modes_peak_memory_is_measured_with_only_its_own_model_alive(monkeypatch):
    args, modes, cfg = bench.parse([*TINY, "--modes=geonorm,simplenorm", "--steps=1"])
    def models():  # GPT instances alive in this process
        gc.collect()
        return sum(type(o) is GPT for o in gc.get_objects())

    before, alive, measure = models(), [], bench.Runner.peak_memory_mb
    monkeypatch.setattr(bench.Runner, "peak_memory_mb",
                        lambda self: alive.append(models() - before) or measure(self))
    rows = bench.bench_training(modes, cfg, args, compiled=False)
    assert alive == [1, 1, 1] and [r["mode"] for r in rows] == ["pre", "geonorm", "simplenorm"]


def test_every_mode_steps_on_the_same_batch_of_the_configured_shape_in_the_configured_precision():
    """A fair comparison: one fixed batch (inputs and their next tokens, batch_size x block_size)
    for every mode, whatever its init drew; under dtype=bfloat16 each step's forward pass runs in
    bf16 autocast."""
    args, modes, cfg = bench.parse([*TINY, "--dtype=bfloat16"])
    runners = [bench.Runner(mode, cfg, 65, compiled=False) for mode in ("pre", "geonorm", "ngpt")]
    for runner in runners:
        assert runner.x.shape == runner.y.shape == (2, 32)
        assert torch.equal(runner.x, runners[0].x) and torch.equal(runner.y, runners[0].y)
        assert torch.equal(runner.x[:, 1:], runner.y[:, :-1]) and runner.x.max() < 65
        with runner.ctx:
            assert (torch.is_autocast_enabled("cpu")
                    and torch.get_autocast_dtype("cpu") == torch.bfloat16)


def test_timed_is_the_clock_from_before_the_call_to_after_it(monkeypatch):
    clock, calls = iter([100.0, 100.25]), []
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(clock))
    assert bench.timed(lambda: calls.append("ran"), "cpu") == 0.25 and calls == ["ran"]


@pytest.mark.parametrize("compiled", [False, True])
def test_a_training_row_is_the_median_of_its_modes_timed_steps_with_peak_memory_and_mfu(monkeypatch,
                                                                                        compiled):
    """Each mode: its first (compiling) step's time, then the median of its timed steps, modes
    taking turns; ratio to pre's median, tokens/s, MFU at the given peak FLOP/s, peak memory = the
    high-water mark after a step less the resident memory before it, in MiB; every model compiled
    when compiling, none otherwise."""
    # first, then 3 steps
    times = {"pre": iter([9.0, 0.3, 0.1, 0.2]), "geonorm": iter([7.0, 0.6, 0.4, 0.8])}
    steps, compiles = [], []
    monkeypatch.setattr(bench, "timed",
                        lambda fn, device: fn() or next(times[fn.__self__.model.config.norm_mode]))
    monkeypatch.setattr(bench.Runner, "step",
                        lambda self: steps.append(self.model.config.norm_mode))
    monkeypatch.setattr(bench.torch, "compile", lambda model: compiles.append(model) or model)
    monkeypatch.setattr(bench, "peak_rss_reset", lambda: None)
    monkeypatch.setattr(bench, "rss_kib",
                        lambda field: {"VmRSS": 2048, "VmHWM": 2048 + 1536}[field])
    args, modes, cfg = bench.parse([*TINY, "--modes=geonorm", "--steps=3", "--peak_flops=1e9"])
    rows = bench.bench_training(modes, cfg, args, compiled)
    # the memory pass's model and the timed one, each mode
    assert len(compiles) == (4 if compiled else 0)
    # who goes first rotates
    assert steps[-6:] == ["pre", "geonorm", "geonorm", "pre", "pre", "geonorm"]
    for row, (mode, first, median) in zip(rows, [("pre", 9.0, 0.2), ("geonorm", 7.0, 0.6)]):
        model = bench.Runner(mode, cfg, 65, compiled=False).model
        assert row == dict(mode=mode, compile=compiled, step_ms=pytest.approx(1000 * median),
                           ratio_to_pre=pytest.approx(median / 0.2),
                           tokens_per_s=pytest.approx(2 * 32 / median), first_step_s=first,
                           mfu=pytest.approx(model.estimate_mfu(2, median, 1e9)), peak_mem_mb=1.5)


def test_pres_ratio_to_itself_is_exactly_1_however_its_steps_vary(monkeypatch):
    """Every ratio is a median step time over pre's: pre's own is 1.0, not a figure near it, even
    when its steps spread and their count is even (the median then the mean of the middle two)."""
    times = {"pre": iter([5.0, 0.3, 0.1, 0.7, 0.2]), "geonorm": iter([5.0, 0.9, 0.1, 0.3, 0.6])}
    monkeypatch.setattr(bench.Runner, "step", lambda self: None)
    monkeypatch.setattr(bench.Runner, "peak_memory_mb", lambda self: 1.0)
    monkeypatch.setattr(bench, "timed", lambda fn, device: next(times[fn.__self__.cfg.norm_mode]))
    args, modes, cfg = bench.parse([*TINY, "--modes=geonorm", "--steps=4"])
    pre, geonorm = bench.bench_training(modes, cfg, args, compiled=False)
    assert pre["ratio_to_pre"] == 1.0 and pre["step_ms"] == pytest.approx(250.0)
    assert geonorm["ratio_to_pre"] == pytest.approx(0.45 / 0.25)


def test_the_loader_row_times_200_seeded_batches_from_a_10m_token_shard(monkeypatch):
    """Batches as train.py draws them (get_batch, rng seeded by (seed, batch)) from one shard whose
    counted tokens are the file's; batches/s and tokens/s from the clock around the 200 of them."""
    import data
    seen, clock = [], iter([50.0, 52.0])
    real_get_batch, real_clock = data.get_batch, bench.time.perf_counter

    def get_batch(shards, rng, batch_size, block_size, device):
        seen.append((data.read_shard(shards[0][0]).size, list(shards[1]), rng.bit_generator.state,
                     device))
        return real_get_batch(shards, rng, batch_size, block_size, device)

    monkeypatch.setattr(bench, "get_batch", get_batch)
    args, modes, cfg = bench.parse([*TINY, "--seed=7"])
    monkeypatch.setattr(bench.time, "perf_counter",
                        lambda: next(clock) if len(seen) in (0, 200) else real_clock())
    row = bench.bench_data_loader(cfg)
    assert len(seen) == 200 and all(s[:2] == (10_000_000, [10_000_000]) and s[3] == "cpu"
                                    for s in seen)
    assert [s[2] for s in seen] == [np.random.default_rng((7, i)).bit_generator.state
                                    for i in range(200)]
    assert row == dict(batches_per_s=100.0, tokens_per_s=100.0 * 2 * 32)


def test_compile_chooses_the_training_rows_and_the_report_names_its_device_and_torch(monkeypatch,
                                                                                     capsys):
    """--compile=off: eager rows; on: compiled rows; both: the eager rows, then the compiled ones;
    --json prints the report one value a line."""
    monkeypatch.setattr(bench, "bench_training", lambda modes, cfg, args, compiled: [
        dict(mode=m, compile=compiled) for m in modes])
    monkeypatch.setattr(bench, "bench_sampling", lambda modes, cfg, args: [])
    monkeypatch.setattr(bench, "bench_data_loader", lambda cfg: {})
    for compile, flags in (("off", [False] * 2), ("on", [True] * 2),
                           ("both", [False] * 2 + [True] * 2)):
        bench.main([*TINY, "--modes=geonorm", f"--compile={compile}", "--json"])
        out = capsys.readouterr().out
        report = json.loads(out)
        # one value a line: a report diffs as a person reads it
        assert '\n "device": "cpu",\n' in out
        assert [r["compile"] for r in report["training"]] == flags
        assert [r["mode"] for r in report["training"]] == ["pre", "geonorm"] * (len(flags) // 2)
        assert ((report["device"], report["torch"], report["steps"])
                == ("cpu", torch.__version__, 10))


def test_bench_reads_its_own_settings_beside_train_pys(capsys):
    args, modes, cfg = bench.parse(["--modes=simplenorm,simplenorm", "--compile=on", "--json",
                                    "--n_layer=2", "--vocab_size=65"])
    assert ((modes, args.compile, args.json, cfg.n_layer, cfg.n_embd)
            == (["pre", "simplenorm"], "on", True, 2, 384))
    assert not any(name.startswith("bench_") for name in vars(cfg))  # train.py's settings only
    with pytest.raises(SystemExit, match="compile must be one of both, on, off, got 'sometimes'"):
        bench.parse(["--compile=sometimes"])
    for flag in ("--help", "-h"):
        with pytest.raises(SystemExit) as exit:
            bench.parse([flag])
        out = capsys.readouterr().out
        assert exit.value.code == 0 and "\nbench_steps = 10  # timed steps per mode\n" in out
        assert "\ntrain.py's settings that bench.py measures, with train.py's defaults:\n" in out


@pytest.mark.parametrize("parse", [ablate.configure, bench.parse])
def test_the_train_settings_passed_on_are_listed_guessed_and_the_rest_refused(parse, tmp_path,
                                                                              capsys):
    """ablate.py passes every train.py setting on to its runs, bench.py those that shape what it
    measures: --help lists them as train.py has them; a mistyped name is guessed among the script's
    own first (--mode: --modes, not norm_mode); bench.py refuses, in one line, a train.py setting it
    would ignore (--parallel=fsdp), and leaves a config file's out with a note."""
    script = "ablate.py" if parse is ablate.configure else "bench.py"
    with pytest.raises(SystemExit) as e:
        parse(["--help"])
    listed = capsys.readouterr().out
    passed = configurator.read_settings(bench.TRAIN)
    passed = passed if script == "ablate.py" else {k: v for k, v in passed.items()
                                                   if k in bench.MEASURED}
    assert e.value.code == 0 and len(passed) > 30
    if script == "bench.py":
        assert "\ntrain.py's settings that bench.py measures, with train.py's defaults:\n" in listed
    assert all(f"\n{name} = " in listed or f"\n{name}: " in listed for name in passed)
    if script == "bench.py":
        assert "\nparallel = " not in listed and "\nout_dir = " not in listed
    refused = {"--mode=pre": "unknown setting 'mode' in --mode=pre: did you mean --modes?",
               "--seed_list=1": "unknown setting 'seed_list' in --seed_list=1: "
                                "did you mean --seeds?"
                                if script == "ablate.py" else "did you mean 'seed'?",
               "--n_layers=2": "unknown setting 'n_layers' in --n_layers=2: did you mean"}
    if script == "bench.py":
        refused |= {f"--{name}={value}": f"bench.py does not use {name} (--{name}={value}): "
                                         "it measures"
                    for name, value in (("parallel", "fsdp"), ("max_iters", 5), ("out_dir", "x"),
                                        ("norm_mode", "pre"))}
    for arg, message in refused.items():
        assert message in error_of(parse, [arg]), arg
    if script == "bench.py":
        message = error_of(parse, ["--parallel=fsdp"])
        mentions(message, "--parallel=fsdp", "training step", "python bench.py --help")
        mentions(error_of(parse, ["--zzz=1"]), "--zzz=1", "python bench.py --help")
    if script == "bench.py":
        (tmp_path / "config.py").write_text("parallel = 'fsdp'\nmax_iters = 5\nn_layer = 2\n")
        assert parse([str(tmp_path / "config.py"), "--vocab_size=65"])[2].n_layer == 2
        note = capsys.readouterr().err
        assert note.count("\n") == 1 and note.startswith("note: ")
        mentions(note, "leaves out max_iters, parallel")  # the names, in the config's order
