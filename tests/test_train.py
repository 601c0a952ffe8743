"""train.py's promises, one test each: tiny models on a tiny character corpus, CPU, offline."""
import ast
import contextlib
import dataclasses
import json
import math
import os
import re
import shutil
import signal
import subprocess
import time
import types

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim.optimizer import register_optimizer_step_pre_hook

import checkpoint
import configurator
import devices
import measure
import train
from conftest import (TRAIN_TINY, assert_same_records, command, error_of, events, logged_numbers,
                      losses, mentions, run, torchrun_mains)
from data import get_batch, load_meta
from model import ARCHS, GPT, GPTConfig, NORM_MODES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def eval_losses(out_dir):
    return [loss for e in events(out_dir, "eval") for loss in (e["train_loss"], e["val_loss"])]


def test_a_tiny_run_learns_and_writes_a_valid_log_and_checkpoint(data_dir, tmp_path, capsys):
    log = run(data_dir, tmp_path, "--max_iters=30", "--learning_rate=1e-2")
    out = capsys.readouterr().out  # one process, one micro-batch, no compiling on a CPU
    assert "128 tokens per step = 1 process x 1 micro-batch x 4 x 32" in out
    assert "(step 1 untimed: warming up)" in out
    evals = [e for e in log if e["event"] == "eval"]
    assert [e["iter"] for e in evals] == [0, 5, 10, 15, 20, 25, 30]
    assert evals[-1]["val_loss"] < evals[0]["val_loss"] - 0.5  # from ~ln(62) = 4.1 to well below
    for e in events(tmp_path, "train"):
        assert set(e) >= {"iter", "train_loss", "lr", "grad_norm", "ms_per_iter", "tokens_per_s",
                          "mfu"}
        assert e["mfu"] is None  # no made-up peak on CPU
    assert log[-1] == dict(log[-1], event="end", status="finished", iter=30,
                           final_val_loss=evals[-1]["val_loss"])

    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    assert {"model", "optimizer", "model_args", "iter_num", "best_val_loss", "config",
            "meta"} <= set(ckpt)
    assert ckpt["iter_num"] == 30 and ckpt["meta"] == load_meta(data_dir / "tiny")
    assert ckpt["best_val_loss"] == min(e["val_loss"] for e in evals) == log[-1]["best_val_loss"]
    model = GPT(GPTConfig(**ckpt["model_args"]))
    model.load_state_dict(ckpt["model"])  # strict: no prefixes, nothing missing
    assert ckpt["model_args"]["vocab_size"] == ckpt["meta"]["vocab_size"]  # characters: no padding

    saved = json.loads((tmp_path / "config.json").read_text())
    assert (saved["config"]["max_iters"] == 30 and saved["torch"] == torch.__version__
            and "git" in saved)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("mode", NORM_MODES)
def test_resume_repeats_an_uninterrupted_run_bit_for_bit(data_dir, tmp_path, mode, arch):
    # dropout: its masks too
    args = [f"--norm_mode={mode}", f"--arch={arch}", "--dropout=0.1", "--lr_decay_iters=8"]
    run(data_dir, tmp_path / "whole", "--max_iters=8", *args)
    # stopped after the warmup, between two evaluations
    run(data_dir, tmp_path / "parts", "--max_iters=3", *args)
    # the rest from the checkpoint, past the evaluation at 5 and down the cosine
    run(data_dir, tmp_path / "parts", "--max_iters=8", "--init_from=resume")

    assert losses(tmp_path / "parts") == losses(tmp_path / "whole")  # exact floats, each step once
    kinds = lambda log: [(e["event"], e["iter"]) for e in log]
    stop_eval = ("eval", 3)  # the first part evaluated where it stopped, at its max_iters
    assert [k for k in kinds(events(tmp_path / "parts"))
            if k != stop_eval] == kinds(events(tmp_path / "whole"))
    whole, parts = (torch.load(tmp_path / d / "ckpt.pt", weights_only=True)
                    for d in ("whole", "parts"))
    for name, tensor in whole["model"].items():
        assert torch.equal(tensor, parts["model"][name]), name
    # ngpt: each step ends on the unit sphere
    model = checkpoint.load_model(str(tmp_path / "whole"), "cpu")[0]
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    model.normalize_weights()  # the other modes: nothing to do
    assert all(torch.allclose(before[name], tensor, atol=1e-6)
               for name, tensor in model.state_dict().items())


def test_evaluations_use_the_same_batches_every_time_across_runs_and_resumes(data_dir, tmp_path,
                                                                             monkeypatch):
    """At learning rate 0 the weights never change: every evaluation, before and after a resume, is
    equal; and no training step draws one of the evaluations' batches."""
    # each batch's tokens, by what drew it
    drawn, evaluating = {"train": set(), "evaluate": set()}, []
    eval_batch = train.eval_batch

    def eval_batch_flagged(*args):
        evaluating.append(True)
        try:
            return eval_batch(*args)
        finally:
            evaluating.pop()

    def get_batch_recorded(shards, rng, batch_size, block_size, device, vocab_size):
        x, y = get_batch(shards, rng, batch_size, block_size, device, vocab_size)
        drawn["evaluate" if evaluating else "train"].add(x.numpy().tobytes())
        return x, y
    monkeypatch.setattr(train, "eval_batch", eval_batch_flagged)
    monkeypatch.setattr(train, "get_batch", get_batch_recorded)
    frozen = ["--eval_interval=4", "--learning_rate=0", "--min_lr=0"]
    run(data_dir, tmp_path, "--max_iters=8", *frozen)
    run(data_dir, tmp_path, "--max_iters=12", "--init_from=resume", *frozen)
    evals = events(tmp_path, "eval")
    assert [e["iter"] for e in evals] == [0, 4, 8, 12]
    assert len({(e["train_loss"], e["val_loss"]) for e in evals}) == 1
    # while every training step draws its own batches
    assert len({loss for _, loss in losses(tmp_path)}) > 1
    # and the first after the last
    assert len(drawn["evaluate"]) == 2 * 2 and len(drawn["train"]) == 12 + 1
    assert not drawn["train"] & drawn["evaluate"]

    # an evaluation is of the model without dropout: the checkpoint's, evaluated
    dropped = tmp_path / "dropout"
    run(data_dir, dropped, "--max_iters=4", "--eval_interval=4", "--dropout=0.5")
    cfg, _ = train.configure([f"--data_dir={data_dir}", *TRAIN_TINY, "--dropout=0.5"])
    proc = types.SimpleNamespace(device="cpu", rank=0, world=1, ctx=contextlib.nullcontext())
    model = checkpoint.load_model(str(dropped), "cpu")[0]  # in eval mode
    last = events(dropped, "eval")[-1]
    assert train.evaluate(model, train.load_dataset(cfg)[1], cfg, proc) == pytest.approx(
        [last["train_loss"], last["val_loss"]], rel=1e-6)


def test_a_checkpoint_is_saved_at_every_evaluation_or_at_each_that_improves(data_dir, tmp_path,
                                                                            monkeypatch):
    """always_save_checkpoint: at every evaluation but step 0's. False: where val loss fell below
    the best so far (an equal loss is no gain: at lr 0, none), and at the end."""
    saved, save_run = [], checkpoint.save_run
    monkeypatch.setattr(checkpoint, "save_run",
                        lambda *args: saved.append(args[-1].step) or save_run(*args))
    run(data_dir, tmp_path / "always", "--max_iters=3", "--eval_interval=1")
    assert saved == [1, 2, 3]
    saved.clear()
    run(data_dir, tmp_path / "frozen", "--max_iters=3", "--eval_interval=1",
        "--always_save_checkpoint=False", "--learning_rate=0", "--min_lr=0")
    assert saved == [3]
    saved.clear()
    learning = run(data_dir, tmp_path / "learning", "--max_iters=4", "--eval_interval=1",
                   "--always_save_checkpoint=False")
    val = [e["val_loss"] for e in learning if e["event"] == "eval"]
    improved = [step for step in range(1, 5) if val[step] < min(val[:step])]
    assert improved and saved == improved + [4] * (4 not in improved)


def test_a_run_whose_evaluations_are_all_nan_has_no_best_val_loss(data_dir, tmp_path, monkeypatch):
    """No val loss was ever below infinity: the end line's best_val_loss is None, not infinity."""
    monkeypatch.setattr(train, "evaluate", lambda *args: (math.nan, math.nan))
    end = run(data_dir, tmp_path, "--max_iters=2")[-1]
    assert (end["event"] == "end" and end["best_val_loss"] is None
            and math.isnan(end["final_val_loss"]))


def test_max_iters_runs_exactly_that_many_optimizer_steps(data_dir, tmp_path):
    stepped_at = []  # the learning rates of each optimizer step's parameter groups
    handle = register_optimizer_step_pre_hook(lambda optimizer, args, kwargs: stepped_at.append(
        {group["lr"] for group in optimizer.param_groups}))
    try:
        run(data_dir, tmp_path, "--max_iters=7")
    finally:
        handle.remove()
    assert [i for i, _ in losses(tmp_path)] == list(range(1, 8))
    # step s runs at get_lr(s): warmup_iters=2 gives lr/3, 2·lr/3, then lr at step 2
    assert [e["lr"] for e in events(tmp_path, "train")][:3] == pytest.approx([1e-3, 2e-3, 3e-3])
    assert stepped_at == [{e["lr"]} for e in events(tmp_path, "train")]
    lr_at = {e["iter"] - 1: e["lr"] for e in events(tmp_path, "train")}  # the lr each step ran at
    # the next
    assert [(e["iter"], e["lr"]) for e in events(tmp_path, "eval")][:2] == [(0, lr_at[0]),
                                                                            (5, lr_at[5])]
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    assert ckpt["iter_num"] == 7
    assert all(state["step"] == 7 for state in ckpt["optimizer"]["state"].values())


TWO_PROCESS_RUNS = [(mode, "gpt2") for mode in NORM_MODES] + [("pre", "llama")]
TWO_PROCESS_ARGS = ["--max_iters=4", "--eval_interval=2", "--eval_iters=3",
                    "--gradient_accumulation_steps=4", "--dropout=0.1", "--log_interval=1",
                    "--log_layer_stats=True"]
TOKENS_PER_STEP = 4 * 4 * 32  # 4 micro-batches (2 processes x 2, or 1 x 4) of TRAIN_TINY's 4 x 32


@pytest.fixture(scope="module")
def two_processes(data_dir, tmp_path_factory, request):
    """Every mode on gpt2, and llama's pre, trained by 2 processes x 2 micro-batches in one torchrun
    launch (the other pairs run in the one-process DDP test below): the cases selected, all but
    where -k narrows them (as tests/test_add_a_mode.py does to one mode)."""
    root = tmp_path_factory.mktemp("two")
    cases = [tuple(item.callspec.params[k] for k in ("mode", "arch"))
             for item in request.session.items if item.originalname
             == "test_two_torchrun_processes_match_one_process_with_accumulation"]
    runs = [[f"--data_dir={data_dir}", *TRAIN_TINY, *TWO_PROCESS_ARGS, f"--norm_mode={mode}",
             f"--arch={arch}", f"--out_dir={root / f'{mode}-{arch}'}"] for mode, arch in cases]
    result = torchrun_mains(runs, root, timeout=600)
    assert result.stdout.count("= 2 processes x 2 micro-batches x 4 x 32") == len(runs)
    return root


@pytest.mark.parametrize("mode, arch", TWO_PROCESS_RUNS)
def test_two_torchrun_processes_match_one_process_with_accumulation(two_processes, data_dir,
                                                                    tmp_path, mode, arch):
    """2 processes x 2 micro-batches train as 1 process x 4, and evaluate alike: 3 batches split 2 +
    1."""
    train.main([f"--data_dir={data_dir}", *TRAIN_TINY, *TWO_PROCESS_ARGS, f"--norm_mode={mode}",
                f"--arch={arch}", f"--out_dir={tmp_path}"])
    one, two = tmp_path, two_processes / f"{mode}-{arch}"
    assert [i for i, _ in losses(two)] == [i for i, _ in losses(one)] == list(range(1, 5))
    assert ([e["iter"] for e in events(two, "eval")] == [e["iter"] for e in events(one, "eval")]
            == [0, 2, 4])
    # every logged number: losses, lr, gradient norms, each block's statistics, tokens a step, the
    # end line
    assert_same_records(logged_numbers(two), logged_numbers(one), rel=1e-5, abs=1e-5)
    trained = [e["tokens_per_step"] for e in logged_numbers(one) if e["event"] == "train"]
    # step 1 is untimed
    assert trained[0] is None and trained[1:] == pytest.approx([TOKENS_PER_STEP] * 3)


def test_each_micro_batch_has_its_own_dropout_seed(data_dir):
    """micro_batch(step, g) is a function of (seed, step, g), and its dropout seed is drawn from all
    of [0, 2^63): no two of 400 micro-batches share their masks, and the same call draws the same
    batch and seed again."""
    cfg, _ = train.configure([f"--data_dir={data_dir}", *TRAIN_TINY])
    _, data = train.load_dataset(cfg)
    seeds = [train.micro_batch(data, cfg, "cpu", step, g)[2] for step in range(200)
             for g in range(2)]
    assert len(set(seeds)) == 400 and 0 <= min(seeds) and max(seeds) < 2**63 and max(seeds) > 2**60
    x, y, seed = train.micro_batch(data, cfg, "cpu", 7, 1)
    again = train.micro_batch(data, cfg, "cpu", 7, 1)
    assert torch.equal(x, again[0]) and torch.equal(y, again[1]) and seed == again[2] == seeds[15]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("mode", NORM_MODES)
def test_ddp_syncs_the_gradients_once_after_the_last_micro_batch(data_dir, tmp_path, mode, arch):
    """A DDP comm hook, counting the forwards before each all-reduce: two steps of 3 micro-batches
    (one process, gloo) all-reduce only after the third backward pass of each; the second step's
    forward would stop on a parameter left out of the loss, as under torchrun. With one process the
    mean is the bucket itself: the hook returns it as is (a gloo future with a Python callback can
    deadlock with the process group's teardown)."""
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0,
                            world_size=1)
    try:
        cfg, _ = train.configure([f"--data_dir={data_dir}", *TRAIN_TINY, f"--norm_mode={mode}",
                                  f"--arch={arch}"])
        meta, data = train.load_dataset(cfg, master=True)
        model = GPT(configurator.model_config(cfg, meta))
        forwards, synced = [], []
        model.register_forward_pre_hook(lambda module, args: forwards.append(1))

        def counting_allreduce(state, bucket):
            synced.append(len(forwards))
            mean = torch.futures.Future()
            mean.set_result(bucket.buffer())
            return mean

        ddp = DDP(model)
        ddp.register_comm_hook(None, counting_allreduce)
        batch = train.micro_batch(data, cfg, "cpu", step=0, g=0)
        proc = devices.Process(rank=0, world=1, device="cpu", dtype="float32",
                               ctx=contextlib.nullcontext(), accum=3)
        for step in range(2):
            _, batch = train.train_step(ddp, data, cfg, proc, step, batch)
        assert len(forwards) == 6 and synced and set(synced) == {3, 6}
    finally:
        dist.destroy_process_group()


def test_unknown_settings_and_wrong_types_fail_with_their_messages(data_dir, tmp_path):
    typo = tmp_path / "typo.py"
    typo.write_text("learning_rat = 1e-3\n")
    # the words each message must hold: the setting, the value, the fix or what it must be
    cases = {
        str(typo): ("'learning_rat'", str(typo), "'learning_rate'"),
        "--n_layr=2": ("--n_layr=2", "'n_layer'"),
        "--batch_size=1.5": ("batch_size", "int", "1.5"),
        "--always_save_checkpoint=1": ("always_save_checkpoint", "bool", "1"),
        "--compile=maybe": ("compile", "bool or None", "'maybe'"),
        "--lr_schedule=linear": ("lr_schedule", "cosine, wsd", "'linear'"),
        "--max_iters": ("--max_iters", "needs a value"),
    }
    for arg, words in cases.items():
        mentions(error_of(train.configure, [arg]), *words)
    cfg, _ = train.configure(["--learning_rate=1", "--norm_eps=1e-6", "--geo_max_angle=None"])
    assert type(cfg.learning_rate) is float and cfg.norm_eps == 1e-6 and cfg.geo_max_angle is None

    with pytest.raises(SystemExit) as error:  # the model's own check, as a user error too
        run(data_dir, tmp_path, "--n_head=3")
    assert str(error.value.code).startswith("error: n_embd=32 is not divisible by n_head=3")
    (tmp_path / "ckpt.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(SystemExit) as error:
        train.configure([f"--out_dir={tmp_path}", "--init_from=resume"])
    assert str(error.value.code).startswith(f"error: cannot read {tmp_path}/ckpt.pt")
    # as a process: test_reliability.py's test_a_mistake_is_one_line_on_stderr_and_exit_1


def test_a_missing_dataset_names_the_command_that_prepares_it_and_pystdlib_is_made(
        data_dir, tmp_path, monkeypatch):
    """Another dataset is the user's to prepare; pystdlib, the default, is made by the run, once,
    after every check has passed, and the model takes its vocabulary (here a stand-in build: tiny's
    folder)."""
    with pytest.raises(SystemExit) as error:
        train.main([f"--data_dir={tmp_path}", "--dataset=shakespeare_char"])
    assert (f"python prepare_data.py shakespeare_char --out {tmp_path / 'shakespeare_char'}"
            in str(error.value.code))
    made = []
    def prepare(name, folder):
        made.append((name, folder))
        shutil.copytree(data_dir / "tiny", folder)
    monkeypatch.setattr(train.prepare_data, "prepare", prepare)
    argv = [f"--data_dir={tmp_path / 'data'}",
            *[a for a in TRAIN_TINY if not a.startswith("--dataset")], "--max_iters=1"]
    assert "error: beta1" in error_of(train.main,
                                      [*argv, f"--out_dir={tmp_path / 'no'}", "--beta1=1"])
    for out in ("a", "b"):
        train.main([*argv, f"--out_dir={tmp_path / out}"])
    assert made == [("pystdlib", tmp_path / "data" / "pystdlib")]
    assert (checkpoint.load_model(str(tmp_path / "a"), "cpu")[0].config.vocab_size
            == load_meta(data_dir / "tiny")["vocab_size"])


def test_a_resume_that_remakes_pystdlib_checks_it_against_the_checkpoint(data_dir, tmp_path,
                                                                         monkeypatch):
    """pystdlib deleted after a run is made again by its resume, after the checks, and then checked
    as any dataset is: another vocabulary (here a stand-in build of eight letters) is one line."""
    letters = tmp_path / "letters.txt"
    letters.write_text("abcdefgh" * 2000)
    train.prepare_data.prepare("shakespeare_char", tmp_path / "letters", inputs=[str(letters)],
                               workers=1)
    builds = iter([data_dir / "tiny", tmp_path / "letters"])
    monkeypatch.setattr(train.prepare_data, "prepare",
                        lambda name, folder: shutil.copytree(next(builds), folder))
    out, data = tmp_path / "out", tmp_path / "data"
    argv = [f"--data_dir={data}", f"--out_dir={out}",
            *[a for a in TRAIN_TINY if not a.startswith("--dataset")]]
    train.main([*argv, "--max_iters=2"])
    shutil.rmtree(data / "pystdlib")
    mentions(error_of(train.main, [*argv, "--max_iters=4", "--init_from=resume"]), str(out),
             "pystdlib", "char, 62 tokens", "char, 8 tokens", "restore the pystdlib",
             "another out_dir")


def test_only_process_0_makes_pystdlib_and_the_run_makes_no_other_dataset(data_dir, tmp_path,
                                                                          monkeypatch):
    """load_dataset after the checks, pystdlib missing: process 0 makes it; another process never
    does (it waits at the barrier; here, without torchrun, it finds none); made meanwhile (by
    another run), it is not made again; and no process makes another dataset."""
    made = []
    monkeypatch.setattr(train.prepare_data, "prepare",
                        lambda name, folder: made.append((name, folder)))
    cfg = types.SimpleNamespace(data_dir=str(tmp_path), dataset="pystdlib", block_size=32)
    assert train.load_dataset(cfg, False) == (None, None) and made == []
    assert train.load_dataset(cfg, True) == (None, None)  # the stand-in made nothing to load
    assert made == [("pystdlib", tmp_path / "pystdlib")]
    shutil.copytree(data_dir / "tiny", tmp_path / "pystdlib")  # a stand-in build by another run
    assert train.load_dataset(cfg, True)[0] == load_meta(data_dir / "tiny") and len(made) == 1
    cfg.dataset = "tiny"
    assert error_of(train.load_dataset, cfg, True).startswith(
        f"error: {tmp_path / 'tiny'} is not prepared")
    assert made == [("pystdlib", tmp_path / "pystdlib")]


@pytest.mark.parametrize("poison, first", [("loss", 8), ("gradient", 8), ("loss", 3),
                                           ("gradient", 1)])
def test_a_nonfinite_loss_or_gradient_stops_the_run_and_keeps_the_last_good_checkpoint(
        data_dir, tmp_path, poison, first, monkeypatch, capsys):
    """Exit 3 and one line: the step, and the fix: resume from the last good checkpoint (at step 5)
    with a lower learning_rate, or train again with one where none was saved; at the first step,
    before any update, no learning rate is to blame and the line says so."""
    forward, calls = GPT.forward, []

    # from training step `first`: a NaN loss, or NaN gradients
    def poisoned(self, idx, targets=None, pos=0):
        logits, loss = forward(self, idx, targets, pos)  # under a finite loss
        calls.extend([1] if self.training else [])
        if len(calls) >= first and self.training:
            if poison == "loss":
                loss = loss * math.nan
            else:
                logits.register_hook(lambda grad: grad * math.nan)
        return logits, loss

    monkeypatch.setattr(GPT, "forward", poisoned)
    with pytest.raises(SystemExit) as error:
        run(data_dir, tmp_path, "--max_iters=20")
    assert error.value.code == 3
    # the loss itself is finite when the gradients are not
    loss = "nan" if poison == "loss" else r"\d+\.\d+"
    fix = ((f"{tmp_path}/ckpt.pt (step 5)", "resume from it", "lower learning_rate") if first > 5
           else ("no checkpoint was saved", "train again", "lower learning_rate") if first > 1
           else ("before any update", "no lower learning_rate", "initialization"))
    line = capsys.readouterr().err.splitlines()[-1]
    assert line.startswith("error: ") and re.search(rf"\bloss {loss}\b", line), line
    mentions(line, "gradient norm nan", f"step {first}", *fix)
    assert ("resume" in line) == (first > 5)
    if first > 5:
        ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=True)
        assert ckpt["iter_num"] == 5 and all(t.isfinite().all() for t in ckpt["model"].values())
    else:
        assert not (tmp_path / "ckpt.pt").exists()
    assert events(tmp_path)[-1] == dict(events(tmp_path)[-1], event="end", status="diverged",
                                        iter=first - 1)


def test_the_checks_only_train_py_makes_are_whole_lines(data_dir, tmp_path, monkeypatch):
    """One line each, with the words that matter: what fsdp cannot serve, GPT-2 weights on another
    tokenizer, a split shorter than a sequence, GPT-2 weights that do not load, and running out of
    memory, naming its levers."""
    argv = [f"--data_dir={data_dir}", f"--out_dir={tmp_path}", *TRAIN_TINY]
    message = error_of(train.configure, [*argv, "--parallel=fsdp", "--log_layer_stats=True"])
    mentions(message, "log_layer_stats", "whole model", "parallel='ddp'")
    # devices' check, on a device no process group runs on (Apple's GPU), as if this machine had one
    with monkeypatch.context() as here:
        here.setattr(devices, "pick_device", lambda device: device)
        message = error_of(train.main, [*argv, "--parallel=fsdp", "--device=mps"])
    mentions(message, "parallel='fsdp'", "cuda or cpu", "'mps'")
    message = error_of(train.configure, [*argv, "--parallel=fsdp", "--norm_mode=ngpt"])
    mentions(message, "ngpt", "parallel='fsdp'", "not supported", "parallel='ddp'")
    mentions(error_of(train.main, [*argv, "--init_from=gpt2"]), "init_from=gpt2", "GPT-2 BPE",
             "tiny", "char", "prepare_data.py --tokenizer gpt2")
    tokens = load_meta(data_dir / "tiny")["tokens"]  # a split needs block_size + 1 tokens: x and y
    for split in ("val", "train"):
        cfg = types.SimpleNamespace(data_dir=str(data_dir), dataset="tiny",
                                    block_size=tokens[split])
        mentions(error_of(train.load_dataset, cfg), f"{split} shards", str(data_dir / "tiny"),
                 f"block_size={tokens[split]}", "lower it")
    cfg.block_size = tokens["val"] - 1
    data = train.load_dataset(cfg)[1]
    assert [data[split][1].tolist() for split in ("train", "val")] == [[tokens["train"]],
                                                                       [tokens["val"]]]
    assert data["vocab_size"] == load_meta(data_dir / "tiny")["vocab_size"]

    asked = []
    def from_gpt2(*args):
        asked.append(args)
        raise ValueError("transformers is not installed: pip install transformers")
    monkeypatch.setattr(train, "from_gpt2", from_gpt2)
    cfg = types.SimpleNamespace(seed=1, parallel="ddp", init_from="gpt2-medium", block_size=32,
                                dropout=0.1)
    mentions(error_of(train.build_model, cfg, None, None, types.SimpleNamespace(device="cpu")),
             # from_gpt2's reason, passed on
             "transformers is not installed", "pip install transformers")
    assert asked == [("gpt2-medium", 32, 0.1)]

    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB\n"
                                     "see the docs")
    monkeypatch.setattr(train, "train_step", oom)
    mentions(error_of(train.main, [*argv, "--max_iters=2"]), "out of memory on cpu",
             "OutOfMemoryError", "Tried to allocate 20.00 GiB", "lower batch_size",
             "gradient_accumulation_steps", "activation_checkpointing=True", "parallel='fsdp'")


def test_a_runs_lines_are_its_log_word_for_word(data_dir, tmp_path, capsys):
    """The first line, the model and its run; each evaluation's line and each logged step's, from
    the numbers logged; and the last line naming what comes next; out_dir's folders are made."""
    out = tmp_path / "runs" / "six"
    run(data_dir, out, "--max_iters=6", "--log_interval=2")
    lines = capsys.readouterr().out.splitlines()
    params = checkpoint.load_model(str(out), "cpu")[0].get_num_params()
    assert (lines[0] == f"{params / 1e6:.2f}M parameters on cpu in float32, 128 tokens per step = "
                        "1 process x 1 micro-batch x 4 x 32"
            and lines[1].startswith("memory per process, estimated: "))
    said = [line for line in lines if line.startswith(("step ", "iter "))]
    # 0, 2, 4, 5, 6 and 6 again
    logged = [e for e in events(out) if e["event"] in ("eval", "train")]
    assert [e["iter"] for e in logged] == [0, 2, 4, 5, 6, 6] and len(said) == len(logged)
    # a training step's line goes on with its speed (measure.py's)
    for line, e in zip(said, logged):
        assert (line == f"step {e['iter']}: train loss {e['train_loss']:.4f}, "
                        f"val loss {e['val_loss']:.4f}" if e["event"] == "eval"
                else line.startswith(f"iter {e['iter']}: loss {e['train_loss']:.4f}, ")), line
    assert lines[-1] == (f"finished at step 6, checkpoint in {out}; sample from it: "
                         f"python sample.py --out_dir={out}")


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_sigterm_and_sigint_save_a_checkpoint_and_exit_cleanly(data_dir, tmp_path, name):
    with open(tmp_path / "stdout", "w") as stdout:  # a file: a full pipe would block the run
        proc = subprocess.Popen(command(f"--data_dir={data_dir}", f"--out_dir={tmp_path}",
                                        *TRAIN_TINY, "--max_iters=100000"), stdout=stdout,
                                stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        # training has begun
        while not ((tmp_path / "log.jsonl").exists() and events(tmp_path, "train")):
            assert proc.poll() is None and time.time() < deadline, (tmp_path / "stdout").read_text()
            time.sleep(0.2)
        proc.send_signal(getattr(signal, name))
        proc.wait(timeout=60)
    out = (tmp_path / "stdout").read_text()
    assert proc.returncode == 0, out
    end = events(tmp_path)[-1]
    assert end["event"] == "end" and end["status"] == "interrupted" and end["iter"] >= 1
    assert torch.load(tmp_path / "ckpt.pt", weights_only=True)["iter_num"] == end["iter"]
    assert "--init_from=resume" in out


@pytest.mark.parametrize("apart", [0.05, 0.4])
def test_three_sigints_stop_at_once_however_close_together(data_dir, tmp_path, apart):
    """Ctrl-C three times, 50 ms or 0.4 s apart: stopped at once, or the first one's save done and
    the run ended (Python shutting down when the others land); never a traceback or an 'Exception
    ignored', the last checkpoint whole. (That three landing in one step count three:
    tests/test_devices.py.)"""
    with open(tmp_path / "stdout", "w") as stdout:
        proc = subprocess.Popen(command(f"--data_dir={data_dir}", f"--out_dir={tmp_path}",
                                        *TRAIN_TINY, "--max_iters=100000", "--n_layer=6"),
                                stdout=stdout, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while not ((tmp_path / "log.jsonl").exists() and events(tmp_path, "train")):
            assert proc.poll() is None and time.time() < deadline, (tmp_path / "stdout").read_text()
            time.sleep(0.2)
        for _ in range(3):
            proc.send_signal(signal.SIGINT)
            time.sleep(apart)
        proc.wait(timeout=60)
    out = (tmp_path / "stdout").read_text()
    assert "Traceback" not in out and "Exception ignored" not in out, out
    # 0: the first SIGINT's save and exit came first
    assert proc.returncode in (-signal.SIGINT, 0), out
    stopped_at_once = "SIGINT three times: stopping now, without a checkpoint" in out
    # else saved, then ended
    assert stopped_at_once or events(tmp_path)[-1]["status"] == "interrupted", out
    if (tmp_path / "ckpt.pt").exists():
        checkpoint.load_checkpoint(str(tmp_path))  # verified whole


@pytest.mark.parametrize("always, saved_at", [(True, [5, 10, 15, 20]), (False, [5, 15, 20])])
def test_without_always_save_checkpoint_only_a_better_val_loss_is_saved(data_dir, tmp_path,
                                                                        monkeypatch, always,
                                                                        saved_at):
    """Val losses 4, 3, 3.5, 2.5, 2.8 at steps 0, 5, .., 20: improved at 5 and 15; the end (20) is
    saved anyway."""
    val_losses, save, saved = iter([4.0, 3.0, 3.5, 2.5, 2.8]), torch.save, []
    monkeypatch.setattr(train, "evaluate", lambda *args, **kwargs: [5.0, next(val_losses)])
    monkeypatch.setattr(torch, "save",
                        lambda obj, f, **kw: saved.append(obj["iter_num"]) or save(obj, f, **kw))
    run(data_dir, tmp_path, "--max_iters=20", f"--always_save_checkpoint={always}")
    assert saved == saved_at
    assert torch.load(tmp_path / "ckpt.pt", weights_only=True)["best_val_loss"] == 2.5


@contextlib.contextmanager
def optimizer_gradients():
    """Yields a list that gets, at every optimizer step, a copy of the gradients it steps with."""
    steps = []
    handle = register_optimizer_step_pre_hook(lambda optimizer, args, kwargs: steps.append(
        [p.grad.clone() for group in optimizer.param_groups for p in group["params"]]))
    try:
        yield steps
    finally:
        handle.remove()


def global_norm(grads):
    return torch.stack([g.norm() for g in grads]).norm().item()


def test_gradient_clipping_scales_the_gradient_the_optimizer_steps_with(data_dir, tmp_path):
    """grad_clip=0 steps with the raw gradient, whose norm is logged; grad_clip=c with the raw
    gradient scaled to norm c whenever its norm exceeds c (the same first step: same weights, same
    batch)."""
    with optimizer_gradients() as raw:
        run(data_dir, tmp_path / "raw", "--max_iters=3", "--grad_clip=0")
    with optimizer_gradients() as clipped:
        run(data_dir, tmp_path / "clipped", "--max_iters=3", "--grad_clip=0.05")
    norms, clipped_norms = ([e["grad_norm"] for e in events(tmp_path / d, "train")]
                            for d in ("raw", "clipped"))
    assert [global_norm(g) for g in raw] == pytest.approx(norms, rel=1e-5)
    assert [global_norm(g) for g in clipped] == pytest.approx([min(n, 0.05) for n in clipped_norms],
                                                              rel=1e-5)
    assert norms[0] == clipped_norms[0] > 0.05
    for raw_grad, clipped_grad in zip(raw[0], clipped[0]):
        torch.testing.assert_close(clipped_grad, raw_grad * 0.05 / norms[0])


def test_gpas_gate_clip_scales_the_gates_gradient_alone_after_the_global_clip(data_dir, tmp_path):
    """GPAS's authors' --clip_gate_grad: the optimizer steps with what grad_clip leaves, but the
    gates' part scaled to norm c where it exceeds c, every other gradient as it was (the same first
    step: same weights, same batch). A c above every norm steps exactly as none."""
    args = ("--max_iters=3", "--gpas=True", "--grad_clip=0.05")
    grads = {}
    for name, clip in (("none", "0"), ("tight", "1e-7"), ("loose", "1e9")):
        with optimizer_gradients() as grads[name]:
            run(data_dir, tmp_path / name, *args, f"--gpas_gate_clip={clip}")
    gates = lambda step: [g for g in step if g.numel() == 1]  # the only (1,) parameters here
    others = lambda step: [g for g in step if g.numel() > 1]
    first, tight = grads["none"][0], grads["tight"][0]
    assert len(gates(first)) == 2 and global_norm(gates(first)) > 1e-7
    for plain, clipped in zip(gates(first), gates(tight)):
        torch.testing.assert_close(clipped, plain * 1e-7 / global_norm(gates(first)))
    assert all(torch.equal(a, b) for a, b in zip(others(first), others(tight)))
    # at every step; a little under c, as clip_grad_norm_ divides by the norm + 1e-6
    assert all(0.95e-7 < global_norm(gates(step)) <= 1e-7 for step in grads["tight"])
    for step, loose in zip(grads["none"], grads["loose"], strict=True):
        assert all(torch.equal(a, b) for a, b in zip(step, loose, strict=True))
    assert losses(tmp_path / "loose") == losses(tmp_path / "none") != losses(tmp_path / "tight")


def test_a_crash_while_writing_a_checkpoint_leaves_the_previous_one_loadable(data_dir, tmp_path,
                                                                             monkeypatch):
    run(data_dir, tmp_path, "--max_iters=5")

    def crash(obj, f, *args, **kwargs):  # half a file, then the disk is full
        f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError):
        run(data_dir, tmp_path, "--max_iters=10", "--init_from=resume")
    monkeypatch.undo()
    assert torch.load(tmp_path / "ckpt.pt", weights_only=True)["iter_num"] == 5
    run(data_dir, tmp_path, "--max_iters=10", "--init_from=resume")
    assert [i for i, _ in losses(tmp_path)] == list(range(1, 11))


def test_a_checkpoint_from_a_compiled_model_loads(data_dir, tmp_path, monkeypatch):
    compile = torch.compile
    # no C++ toolchain
    monkeypatch.setattr(torch, "compile", lambda model: compile(model, backend="eager"))
    run(data_dir, tmp_path, "--max_iters=3", "--compile=True")
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    assert not [k for k in ckpt["model"] if "_orig_mod" in k or k.startswith("module.")]
    # a checkpoint whose keys carry the wrappers' prefixes, as other scripts write them, resumes too
    ckpt["model"] = {f"module._orig_mod.{k}": v for k, v in ckpt["model"].items()}
    torch.save(ckpt, tmp_path / "ckpt.pt")
    (tmp_path / "ckpt.pt.crc32.json").unlink()  # as another script saves it: no checksums
    run(data_dir, tmp_path, "--max_iters=5", "--init_from=resume")
    assert [i for i, _ in losses(tmp_path)] == list(range(1, 6))


def test_layer_stats_measure_each_block(data_dir, tmp_path):
    """At each evaluation, on its first val batch, of the model as evaluated (the checkpoint saved
    then)."""
    run(data_dir, tmp_path, "--max_iters=5", "--norm_mode=geonorm", "--log_layer_stats=True")
    stats = events(tmp_path, "layer_stats")
    assert [s["iter"] for s in stats] == [0, 5]
    for s in stats:
        assert len(s["grad_norm"]) == len(s["resid_rms"]) == len(s["angle"]) == 2
        assert s["resid_rms"] == pytest.approx([1.0, 1.0], abs=1e-4)  # geonorm keeps |x| = sqrt(d)
        assert all(0 < a < math.pi for a in s["angle"]) and all(g > 0 for g in s["grad_norm"])
    cfg, _ = train.configure([f"--data_dir={data_dir}", *TRAIN_TINY])
    x, y = get_batch(train.load_dataset(cfg)[1]["val"], np.random.default_rng((cfg.seed, 1, 1, 0)),
                     cfg.batch_size, cfg.block_size, "cpu")
    again = measure.layer_stats(checkpoint.load_model(str(tmp_path), "cpu")[0], x, y,
                                contextlib.nullcontext())
    assert ({k: pytest.approx(v, rel=1e-5) for k, v in again.items()}
            == {k: stats[1][k] for k in again})


@pytest.mark.parametrize("schedule", ["cosine", "wsd"])
def test_warmup_runs_step_s_at_lr_times_s_plus_1_over_warmup_plus_1(schedule):
    """nanoGPT's warmup: step 0 at lr/(W+1), not 0 (a wasted step), the last warmup step at
    lr·W/(W+1), step W at lr."""
    cfg = types.SimpleNamespace(learning_rate=1.0, min_lr=0.1, warmup_iters=4, max_iters=100,
                                lr_decay_iters=None, lr_schedule=schedule, wsd_decay_frac=0.2)
    assert ([train.get_lr(step, cfg) for step in range(5)]
            == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0]))


def test_lr_schedules_warm_up_then_decay_to_min_lr():
    cfg = types.SimpleNamespace(learning_rate=1.0, min_lr=0.1, warmup_iters=10, max_iters=110,
                                lr_decay_iters=None, lr_schedule="cosine", wsd_decay_frac=0.2)
    lrs = [train.get_lr(step, cfg) for step in range(120)]
    assert lrs[0] < lrs[5] < lrs[9] < 1.0 and lrs[10] == 1.0 and lrs[60] == pytest.approx(0.55)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:])) and lrs[110:] == [0.1] * 10
    cfg.lr_schedule = "wsd"  # stable until 80% of 110 steps, then linear
    lrs = [train.get_lr(step, cfg) for step in range(120)]
    assert lrs[10:89] == [1.0] * 79 and lrs[99] == pytest.approx(0.55) and lrs[110] == 0.1


def test_a_min_lr_above_the_learning_rate_is_one_line_and_one_equal_to_it_a_constant_rate(
        data_dir):
    """min_lr at learning_rate is allowed (no decay); above it, one line naming both and the fix
    (test_reliability.py: before anything is written)."""
    above = error_of(train.configure, [f"--data_dir={data_dir}", *TRAIN_TINY, "--min_lr=4e-3"])
    mentions(above, "min_lr=0.004", "learning_rate=0.003", "set min_lr at most learning_rate")
    cfg, _ = train.configure([f"--data_dir={data_dir}", *TRAIN_TINY, "--min_lr=3e-3"])
    after_warmup = range(cfg.warmup_iters, cfg.max_iters + 1)
    assert {train.get_lr(step, cfg) for step in after_warmup} == {3e-3}

def test_every_model_knob_is_a_setting_and_help_lists_them_all(capsys):
    settings = configurator.read_settings(train.__file__)
    assert {f.name for f in dataclasses.fields(GPTConfig)} - set(settings) == {"vocab_size"}
    with pytest.raises(SystemExit) as done:
        train.configure(["--help"])
    assert done.value.code == 0
    # name = default  # what it does
    listed = dict((name, (value, comment)) for name, value, comment in
                  re.findall(r"^(\w+)\b.*? = (.*?)  # (.+)$", capsys.readouterr().out, re.M))
    assert listed.keys() == settings.keys()
    for name, (default, _) in settings.items():
        assert ast.literal_eval(listed[name][0]) == default, name


def test_a_model_setting_is_described_once_in_model_py_and_help_shows_that():
    """One home for a model setting's description: its GPTConfig field's comment (the lines just
    above the field, then the one on its line); train.py's line for it has none of its own, and
    --help (train.py's, ablate.py's, bench.py's) shows model.py's."""
    notes = configurator.model_notes()
    fields = [f.name for f in dataclasses.fields(GPTConfig)]
    assert list(notes) == fields and all(notes.values())
    assert notes["n_layer"] == "blocks"  # on its line
    # not the class's header comment
    assert notes["block_size"] == "tokens per sequence: the model's context length"
    # above it
    assert notes["tie_embeddings"].startswith("the head is the token embedding E; None:")
    assert notes["arch"].startswith("the block family (§11):")  # two lines above it, joined
    assert notes["arch"].endswith("or llama (rotary, SwiGLU, RMSNorm)")
    block = configurator.settings_block(train.__file__).splitlines()
    shown = configurator.settings_help(train.__file__).splitlines()
    for field in (f for f in fields if f != "vocab_size"):  # vocab_size: the dataset's
        at = next(i for i, line in enumerate(block) if line.split(" ")[0].rstrip(":") == field)
        assert "#" not in block[at], f"{field}: its description lives in model.py"
        assert shown[at] == f"{block[at]}  # {notes[field]}"
    assert [line for line in shown if line.startswith("learning_rate")] == [
        "learning_rate = 1e-3  # peak learning rate"]  # train.py's own, as written
    only = configurator.settings_help(train.__file__, {"n_layer", "learning_rate"}).splitlines()
    assert only == ["n_layer = 4  # blocks", "learning_rate = 1e-3  # peak learning rate"]


def test_the_125m_configs_differ_only_in_norm_mode_and_simplenorm_lr():
    modes = ["post", "pre", "deep", "sandwich", "geonorm", "simplenorm"]
    cfgs = {m: vars(train.configure([os.path.join(ROOT, "configs", f"{m}_125m.py")])[0])
            for m in modes}
    assert {m: c["norm_mode"] for m, c in cfgs.items()} == {m: m for m in modes}
    for m, c in cfgs.items():
        differ = {k for k in c if c[k] != cfgs["pre"][k]}
        assert differ <= {"norm_mode", "out_dir"} | ({"learning_rate", "min_lr"}
                                                     if m == "simplenorm" else set()), m
    pre = types.SimpleNamespace(**cfgs["pre"])
    assert ((pre.n_layer, pre.n_head, pre.n_embd, pre.block_size, pre.max_iters)
            == (12, 12, 768, 512, 50_000))
    # 131,072 tokens
    assert [train.accumulation_steps(pre, world) for world in (8, 4, 1)] == [1, 2, 8]
    assert (cfgs["simplenorm"]["learning_rate"], cfgs["simplenorm"]["min_lr"]) == (1.8e-3, 1.8e-4)


def test_the_llama_1b_configs_are_simplegpts_settings_and_differ_only_in_norm_mode():
    names = {"pre_qknorm": ("pre", True), "pre": ("pre", False),
             "simplenorm": ("simplenorm", False), "geonorm": ("geonorm", False)}
    cfgs = {n: vars(train.configure([os.path.join(ROOT, "configs", f"llama_{n}_1b.py")])[0])
            for n in names}
    for n, c in cfgs.items():
        assert (c["norm_mode"], c["qk_norm"]) == names[n]
        assert {k for k in c if c[k] != cfgs["pre"][k]} <= {"norm_mode", "qk_norm", "out_dir"}, n
    c = types.SimpleNamespace(**cfgs["pre"])
    assert (c.arch, c.n_embd, c.n_layer, c.n_head, c.block_size) == ("llama", 2048, 18, 16, 512)
    assert (c.learning_rate, c.weight_decay, c.beta2, c.grad_clip) == (2e-3, 0.1, 0.95, 1.0)
    # warmup, then linear to 0
    lrs = [train.get_lr(step, c) for step in (0, 1999, 2000, 101_000, 200_000)]
    assert lrs == pytest.approx([2e-3 / 2001, 2e-3 * 2000 / 2001, 2e-3, 1e-3, 0.0])
    # 16 sequences of 512 per GPU, 2 micro-batches, 8 GPUs
    assert train.accumulation_steps(c, 8) == 2


def closed_form_lr(step, lr, min_lr, warmup, end, schedule, frac):
    """The schedule as the settings' comments describe it, in exact arithmetic: warmup step s at
    lr·(s+1)/(W+1); then cosine from lr at step W to min_lr at step end, or wsd: lr until the last
    frac of end, then a straight line to min_lr at end; min_lr from end on."""
    from fractions import Fraction
    if step < warmup:
        return lr * (step + 1) / (warmup + 1)
    if step >= end:
        return min_lr
    if schedule == "cosine":
        return min_lr + (lr - min_lr) * (
            1 + math.cos(math.pi * (step - warmup) / (end - warmup))) / 2
    start = max(Fraction(warmup), end * (1 - Fraction(frac)))
    return lr if step <= start else float(lr - (lr - min_lr) * (step - start) / (end - start))


# (schedule, warmup_iters, max_iters, lr_decay_iters, min_lr, wsd_decay_frac): none the defaults
LR_CASES = [
    (schedule, *case) for schedule in ("cosine", "wsd") for case in [
        (7, 90, None, 0.05, 0.25), (0, 64, None, 0.0, 0.5), (3, 200, 120, 0.3, 0.125),
        (5, 80, 150, 0.02, 0.25), (0, 50, 30, 0.1, 1.0), (10, 40, 40, 0.2, 0.0),
        (1, 33, None, 0.4, 0.75),
        (6, 20, 6, 0.1, 0.5)]]  # the decay ends as warmup does: min_lr at once


@pytest.mark.parametrize("schedule, warmup, max_iters, decay_iters, min_lr, frac", LR_CASES)
def test_the_lr_of_every_step_is_the_schedules_closed_form(schedule, warmup, max_iters, decay_iters,
                                                           min_lr, frac):
    """get_lr for both schedules under non-default settings, step by step: step 0 at lr/(W+1) (lr
    itself without warmup), step W at lr, non-increasing after warmup, exactly min_lr at
    lr_decay_iters (max_iters when None, which then plays no part) and after it; wsd's plateau ends
    at the last wsd_decay_frac of lr_decay_iters."""
    lr, end = 2.5, max_iters if decay_iters is None else decay_iters
    cfg = types.SimpleNamespace(learning_rate=lr, min_lr=min_lr, warmup_iters=warmup,
                                max_iters=max_iters, lr_decay_iters=decay_iters,
                                lr_schedule=schedule, wsd_decay_frac=frac)
    steps = range(max(max_iters, end) + 20)
    lrs = [train.get_lr(step, cfg) for step in steps]
    assert lrs == pytest.approx([closed_form_lr(s, lr, min_lr, warmup, end, schedule, frac)
                                 for s in steps],
                                rel=1e-12, abs=1e-15)
    assert lrs[0] == pytest.approx(lr / (warmup + 1), rel=1e-12)
    assert lrs[warmup] == (lr if warmup < end else min_lr)  # warmup's end reaches the peak exactly
    if warmup:
        assert lrs[warmup - 1] == pytest.approx(lr * warmup / (warmup + 1), rel=1e-12)
    assert all(a >= b for a, b in zip(lrs[warmup:], lrs[warmup + 1:]))
    assert lrs[end:] == [min_lr] * (len(lrs) - end)  # exactly, not nearly
    if end - 1 > warmup and frac > 0:  # the step before the end is on its way down, not there yet
        assert min_lr < lrs[end - 1] < lr
    if decay_iters is not None:  # max_iters is only the run's length then
        cfg.max_iters = 3 * max_iters + 11
        assert [train.get_lr(step, cfg) for step in steps] == lrs
    if schedule == "wsd":  # the plateau: steps W..start at lr exactly, the decay starts right after
        start = max(warmup, end * (1 - frac))
        plateau = [s for s in range(warmup, end) if lrs[s] == lr]
        assert plateau == list(range(warmup, math.floor(start) + 1))[:end - warmup]
    else:  # halfway through the decay, the mean of lr and min_lr
        if end > warmup and (end - warmup) % 2 == 0:
            assert lrs[warmup + (end - warmup) // 2] == pytest.approx((lr + min_lr) / 2, rel=1e-12)
