"""How runs stop and go on: signals, kill -9 and resume, resumed hyperparameters, timing, bad
values."""
import contextlib
import errno
import hashlib
import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import time

from pathlib import Path

import numpy as np
import pytest
import torch
# (AdamW imports it at first use, seconds: once here, not in every forked child)
import torch._dynamo  # noqa: F401

import ablate
import checkpoint
import data as data_mod
import devices
import logbook
import prepare_data
import train
from conftest import (ROOT, TRAIN_TINY, command, error_of, events, held, holds, losses, mentions,
                      run, torchrun)


def start(data_dir, out_dir, *args):
    """train.main in a forked child process: torch is imported already, so it starts at once, and
    kill -9 or a signal hits a real process. Its output goes to out_dir.parent / "output"."""
    def child():
        output = open(out_dir.parent / "output", "a", buffering=1)
        os.dup2(output.fileno(), 1)  # the signal handler writes to the file descriptor itself
        os.dup2(output.fileno(), 2)
        sys.stdout = sys.stderr = output
        train.main([f"--data_dir={data_dir}", f"--out_dir={out_dir}", *TRAIN_TINY, *args])

    proc = multiprocessing.get_context("fork").Process(target=child)
    proc.start()
    return proc


def wait_for(condition, proc, timeout=120):
    deadline = time.time() + timeout
    while not condition():
        assert proc.is_alive() and time.time() < deadline, f"exit code {proc.exitcode}"
        time.sleep(0.05)


def logged(out_dir, kind):
    """The events of kind, read while the run may be writing (a line cut short is skipped)."""
    return [e for e in logbook.read_events(out_dir / "log.jsonl") if e["event"] == kind]


def slow_save(monkeypatch, tmp_path, seconds):
    """Make saving a checkpoint touch tmp_path/saving, then take seconds: signals sent then land
    mid-save."""
    save = checkpoint.save_checkpoint

    def slow(*args):
        (tmp_path / "saving").touch()
        time.sleep(seconds)
        save(*args)

    monkeypatch.setattr(checkpoint, "save_checkpoint", slow)


# ------------------------------------------------------------------------------------ signals

def test_any_number_of_sigterms_finish_the_step_save_and_exit_0(data_dir, tmp_path, monkeypatch):
    """Under torchrun a worker gets each signal twice (forwarded, and the scheduler's own): the
    second and third must not kill the save."""
    slow_save(monkeypatch, tmp_path, 1.0)
    out = tmp_path / "run"
    proc = start(data_dir, out, "--max_iters=100000", "--eval_interval=100000")
    wait_for(lambda: logged(out, "train"), proc)
    os.kill(proc.pid, signal.SIGTERM)
    wait_for(lambda: (tmp_path / "saving").exists(), proc)
    os.kill(proc.pid, signal.SIGTERM)
    os.kill(proc.pid, signal.SIGTERM)
    proc.join(120)
    output = (tmp_path / "output").read_text()
    assert proc.exitcode == 0, output
    end = events(out)[-1]
    assert end["event"] == "end" and end["status"] == "interrupted"
    assert torch.load(out / "ckpt.pt", weights_only=True)["iter_num"] == end["iter"]
    assert f"checkpoint of step {end['iter']} saved in" in output
    assert output.splitlines()[-1] == (f"interrupted at step {end['iter']}, checkpoint in {out}; "
                                       f"sample from it: python sample.py --out_dir={out} "
                                       "(or go on: --init_from=resume)")


def test_the_third_sigint_stops_at_once_without_a_checkpoint(data_dir, tmp_path, monkeypatch):
    slow_save(monkeypatch, tmp_path, 5.0)
    out = tmp_path / "run"
    proc = start(data_dir, out, "--max_iters=100000", "--eval_interval=100000")
    wait_for(lambda: logged(out, "train"), proc)
    os.kill(proc.pid, signal.SIGINT)
    wait_for(lambda: (tmp_path / "saving").exists(), proc)
    os.kill(proc.pid, signal.SIGINT)
    proc.join(0.5)
    assert proc.is_alive()  # two SIGINTs: still saving
    os.kill(proc.pid, signal.SIGINT)
    proc.join(60)
    # killed by SIGINT's default action, before the save's 5 s were up
    assert proc.exitcode == -signal.SIGINT
    assert not (out / "ckpt.pt").exists() and events(out)[-1]["event"] != "end"
    assert ("SIGINT three times: stopping now, without a checkpoint"
            in (tmp_path / "output").read_text())


# torchrun's workers run train.main: the first run with a SIGTERM to worker 1 alone (as a scheduler
# may send it) during the step that reaches step 3, then the others unsignalled
ONE_WORKER_SIGNALLED = f"""
import json, os, signal, sys
sys.path.insert(0, {str(ROOT)!r})
import torch.distributed as dist
import train
dist.init_process_group("gloo")
dist.init_process_group = dist.destroy_process_group = lambda *args, **kwargs: None
step, argvs = train.train_step, json.loads(sys.argv[1])
def signalled(*args):
    if args[4] == 2 and dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGTERM)
    return step(*args)
train.train_step = signalled
train.main(argvs[0])
train.train_step = step
for argv in argvs[1:]:
    train.main(argv)
"""


def test_a_sigterm_to_one_torchrun_worker_stops_both_after_its_step_and_the_resume_is_exact(
        data_dir, tmp_path):
    """Worker 1 alone is signalled: both workers stop after the same step (or worker 0 would wait
    forever in the next all-reduce), one checkpoint of that step, exit 0; resumed, the run logs what
    an uninterrupted one logs, the evaluation skipped at the stop made up."""
    args = [f"--data_dir={data_dir}", *TRAIN_TINY, "--max_iters=6", "--eval_interval=3",
            "--dropout=0.1"]
    parts, whole = tmp_path / "parts", tmp_path / "whole"
    (tmp_path / "driver.py").write_text(ONE_WORKER_SIGNALLED)
    argvs = [[*args, f"--out_dir={parts}"], [*args, f"--out_dir={parts}", "--init_from=resume"],
             [*args, f"--out_dir={whole}"]]
    result = torchrun([str(tmp_path / "driver.py"), json.dumps(argvs)], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert output.count("SIGTERM: saving a checkpoint after this step") == 1  # worker 1's, alone
    # worker 0 stopped at worker 1's step
    assert f"interrupted at step 3, checkpoint in {parts};" in output
    kinds = lambda out: [(e["event"], e["iter"], e.get("train_loss"), e.get("val_loss"))
                         for e in events(out)]
    assert kinds(parts) == kinds(whole) and events(parts)[-1]["status"] == "finished"
    assert [e["iter"] for e in events(parts) if e["event"] == "eval"] == [0, 3, 6]


def test_a_stop_skips_the_evaluation_due_saves_at_once_and_the_resume_makes_it_up(
        data_dir, tmp_path, monkeypatch, capsys):
    step = train.train_step

    # SIGTERM during the step that reaches step 3, where an evaluation falls due
    def signalled(*args):
        if args[4] == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return step(*args)

    monkeypatch.setattr(train, "train_step", signalled)
    args = ["--max_iters=6", "--eval_interval=3", "--dropout=0.1"]
    run(data_dir, tmp_path / "parts", *args)
    assert ([(e["event"], e["iter"]) for e in events(tmp_path / "parts")[-2:]]
            == [("train", 3), ("end", 3)])
    assert events(tmp_path / "parts")[-1]["status"] == "interrupted"
    assert "checkpoint of step 3 saved in" in capsys.readouterr().out
    monkeypatch.undo()

    run(data_dir, tmp_path / "parts", *args, "--init_from=resume")
    run(data_dir, tmp_path / "whole", *args)
    # less the end
    kinds = lambda out: [(e["event"], e["iter"], e.get("train_loss")) for e in events(out)[:-1]]
    # the eval at 3 too, each event once
    assert kinds(tmp_path / "parts") == kinds(tmp_path / "whole")


def test_five_kill_9s_each_resumed_give_the_log_and_losses_of_an_uninterrupted_run(
        data_dir, tmp_path):
    # a checkpoint every step; the schedule fixed by lr_decay_iters, so that max_iters only says
    # where to stop
    args = ["--eval_interval=1", "--eval_iters=1", "--dropout=0.1", "--lr_decay_iters=1000"]
    parts, delays, trained = tmp_path / "parts", random.Random(0), 0
    for kill in range(5):
        resume = ["--init_from=resume"] * (parts / "ckpt.pt").exists()
        proc = start(data_dir, parts, *args, "--max_iters=1000", *resume)
        # while it starts (config.json, trimming the log) or trains: mid-step,
        time.sleep(delays.uniform(0.1, 1.5))
        assert proc.is_alive()  # mid-evaluation, mid-save or mid-line in the log
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=60)
        trained += ((parts / "ckpt.pt").exists()
                    and torch.load(parts / "ckpt.pt", weights_only=True)["iter_num"] > 0)
    assert trained >= 3  # most kills found it training
    end = torch.load(parts / "ckpt.pt", weights_only=True)["iter_num"] + 3
    run(data_dir, parts, *args, f"--max_iters={end}", "--init_from=resume")
    run(data_dir, tmp_path / "whole", *args, f"--max_iters={end}")
    kinds = lambda out: [(e["event"], e["iter"], e.get("train_loss"), e.get("val_loss"))
                         for e in events(out)[:-1]]
    assert kinds(parts) == kinds(tmp_path / "whole")  # each step once, with the same losses
    assert [i for i, _ in losses(parts)] == list(range(1, end + 1))


# ------------------------------------------------------------------------------------- resume

def test_a_checkpoint_holding_a_setting_its_mode_never_read_still_resumes(data_dir, tmp_path):
    """A run saved before train.py refused a mode's own setting under another (pre given
    dyt_alpha_attn by an older ablate.py, which gave a setting to every entry) resumes: only the
    settings given are checked, not the checkpoint's."""
    run(data_dir, tmp_path, "--max_iters=2")
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    ckpt["config"]["dyt_alpha_attn"] = 0.5
    torch.save(ckpt, tmp_path / "ckpt.pt")
    (tmp_path / "ckpt.pt.crc32.json").unlink()  # as another script saves it: no checksums
    cfg, _ = train.configure([f"--out_dir={tmp_path}", "--init_from=resume", "--max_iters=3"])
    assert (cfg.dyt_alpha_attn, cfg.norm_type) == (0.5, "norm")


def test_resume_takes_weight_decay_betas_and_fused_from_the_settings(data_dir, tmp_path):
    run(data_dir, tmp_path, "--max_iters=2")
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    for group in ckpt["optimizer"]["param_groups"]:
        group["fused"] = True  # as if saved on a GPU
    torch.save(ckpt, tmp_path / "ckpt.pt")
    (tmp_path / "ckpt.pt.crc32.json").unlink()  # as another script saves it: no checksums

    settings = [f"--out_dir={tmp_path}", "--init_from=resume", "--weight_decay=0.05", "--beta2=0.5",
                "--max_iters=3"]
    cfg, ckpt = train.configure(settings)
    proc = devices.Process(rank=0, world=1, device="cpu", dtype="float32", ctx=None, accum=1)
    optimizer = train.build_model(cfg, train.model_config(cfg, ckpt["meta"], ckpt), ckpt, proc)[3]
    decayed, other = optimizer.param_groups  # matrices and embeddings; biases and gains
    assert (decayed["weight_decay"], other["weight_decay"]) == (0.05, 0.0)
    assert all(tuple(g["betas"]) == (0.9, 0.5) and not g["fused"] for g in optimizer.param_groups)
    # the moments are the checkpoint's
    assert all(state["step"] == 2 for state in optimizer.state.values())

    run(data_dir, tmp_path, *settings[1:])
    saved = json.loads((tmp_path / "config.json").read_text())["config"]
    assert (saved["weight_decay"], saved["beta2"]) == (0.05, 0.5)
    assert torch.load(tmp_path / "ckpt.pt",
                      weights_only=True)["optimizer"]["param_groups"][0]["betas"][1] == 0.5


def test_the_first_step_of_a_run_and_of_a_resume_is_left_out_of_the_timing(
        data_dir, tmp_path, monkeypatch):
    step = train.train_step

    def compiling(*args):  # the first step of each process is slow, as compiling makes it
        if args[4] in (0, 4):
            time.sleep(1.0)
        return step(*args)

    monkeypatch.setattr(train, "train_step", compiling)
    run(data_dir, tmp_path, "--max_iters=4", "--log_interval=2")
    run(data_dir, tmp_path, "--max_iters=8", "--log_interval=2", "--init_from=resume")
    windows = events(tmp_path, "train")
    assert [e["timed_steps"] for e in windows] == [1, 2, 1, 2]
    # the slow second is not in them
    assert windows[0]["ms_per_iter"] < 1000 and windows[2]["ms_per_iter"] < 1000
    # the resumed run's (the log is cut back to the checkpoint's step)
    [end] = events(tmp_path, "end")
    # its own timed steps only
    seconds = [w["timed_steps"] * w["ms_per_iter"] / 1000 for w in windows[2:]]
    tokens = [w["tokens_per_s"] * s for w, s in zip(windows[2:], seconds)]
    assert end["tokens_per_s"] == pytest.approx(sum(tokens) / sum(seconds), rel=1e-9)
    # log_interval=1: the first window holds step 1 alone
    run(data_dir, tmp_path / "each", "--max_iters=2")
    first, second = events(tmp_path / "each", "train")
    assert (first["timed_steps"], first["ms_per_iter"], first["tokens_per_s"]) == (0, None, None)
    assert second["timed_steps"] == 1 and second["ms_per_iter"] > 0
    assert (events(tmp_path / "each", "end")[0]["tokens_per_s"]
            == pytest.approx(second["tokens_per_s"], rel=1e-9))


def test_a_step_waits_for_the_device_once_and_reads_each_batch_before_the_backward_before_it(
        data_dir, tmp_path, monkeypatch):
    """On a GPU, reading a tensor's value in train.py (.item(), .tolist()) waits for the device:
    once a step. And each micro-batch is read ahead, while the device computes the one before it."""
    reads, order = [], []
    for name in ("item", "tolist"):
        def counted(self, read=getattr(torch.Tensor, name)):
            reads.extend([1] if sys._getframe(1).f_code.co_filename == train.__file__ else [])
            return read(self)
        monkeypatch.setattr(torch.Tensor, name, counted)
    micro_batch, backward = train.micro_batch, torch.Tensor.backward
    monkeypatch.setattr(train, "micro_batch",
                        lambda *args: order.append("batch") or micro_batch(*args))
    monkeypatch.setattr(torch.Tensor, "backward",
                        lambda self, *a, **k: order.append("backward") or backward(self, *a, **k))

    counts = {}
    for steps in (4, 10):
        reads.clear(), order.clear()
        run(data_dir, tmp_path / str(steps), f"--max_iters={steps}", "--eval_interval=1000",
            "--log_interval=1000", "--gradient_accumulation_steps=2")
        counts[steps] = len(reads)
    # the same evaluations: the difference is one read per step
    assert counts[10] - counts[4] == 10 - 4
    # the first, then each next before a backward
    assert order == ["batch"] + ["batch", "backward"] * 10 * 2


# ----------------------------------------------------------------------------------- bad values

@pytest.mark.parametrize("arg, bounds, got", [
    ("--eval_interval=0", "at least 1", "0"), ("--log_interval=0", "at least 1", "0"),
    ("--eval_iters=0", "at least 1", "0"), ("--batch_size=0", "at least 1", "0"),
    ("--max_iters=-1", "at least 0", "-1"), ("--warmup_iters=-5", "at least 0", "-5"),
    ("--gradient_accumulation_steps=0", "at least 1", "0"),
    ("--learning_rate=-1", "in [0, 1e20]", "-1.0"),
    # beyond it AdamW's step, the rate / (1 - beta1), overflows a float32: a traceback
    ("--learning_rate=1e300", "in [0, 1e20]", "1e+300"), ("--min_lr=1e21", "in [0, 1e20]", "1e+21"),
    ("--min_lr=1e999", "a finite number", "inf"), ("--grad_clip=-0.5", "at least 0", "-0.5"),
    ("--seed=-1", "in [0, 1e19)", "-1"),
    ("--seed=18446744073709551616", "in [0, 1e19)", "18446744073709551616"),
    ("--beta1=1.5", "in [0, 1)", "1.5"), ("--beta2=1", "in [0, 1)", "1.0"),
    ("--wsd_decay_frac=-1", "in [0, 1]", "-1.0"), ("--wsd_decay_frac=1.5", "in [0, 1]", "1.5")])
def test_values_outside_a_settings_range_are_one_line_errors(arg, bounds, got):
    """Each setting with a natural range: counts at least 1, fractions in [0, 1], betas in [0, 1),
    seeds what numpy and torch take; an int where a float goes is checked as well, and inf or nan is
    never in range."""
    name = arg[2:].split("=")[0]
    mentions(error_of(train.configure, [arg]), name, bounds, got, arg)


def test_a_model_setting_is_checked_by_the_model_alone(data_dir, tmp_path):
    """block_size=0 passes the settings reader and stops at GPTConfig.validate, in one line."""
    with pytest.raises(SystemExit) as error:
        run(data_dir, tmp_path, "--block_size=0", "--total_batch_size=128")
    assert str(error.value.code).startswith("error: total_batch_size=128 is not a multiple of "
                                            "batch_size * block_size")
    mentions(error_of(run, data_dir, tmp_path, "--block_size=0"), "block_size", "positive int", "0")


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_ablate_alone_stops_its_run_with_a_checkpoint_and_starts_no_other(
        data_dir, tmp_path, stop):
    """kill -INT or -TERM to ablate.py's own process, as a scheduler or a user sends it to a job
    started in the background (where SIGINT starts ignored, as here): the run in progress saves and
    stops, no other starts, and ablate.py exits 130 saying how to go on; no train.py is left
    running."""
    out = tmp_path / "out"
    command = [sys.executable, "ablate.py", f"--data_dir={data_dir}", f"--out_dir={out}",
               *TRAIN_TINY, "--max_iters=100000", "--modes=pre,geonorm", "--seeds=1", "--jobs=1"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=os.environ | {"OMP_NUM_THREADS": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    run = out / "ablate" / "pre_lr0.003_s1"
    try:
        deadline = time.time() + 120
        while not (run / "log.jsonl").exists() or not logged(run, "train"):
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()  # then its output, which a process still running would never close
                pytest.fail(f"no step logged in 120 s: {proc.communicate(timeout=60)}")
            time.sleep(0.1)
        proc.send_signal(stop)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert (proc.returncode == 130
            and err.strip().endswith("interrupted: run the same command again to go on"))
    [end] = logged(run, "end")
    assert end["status"] == "interrupted" and (run / "ckpt.pt").exists()
    assert not (out / "ablate" / "geonorm_lr0.003_s1").exists()
    left = [p for p in os.listdir("/proc") if p.isdigit() and str(out).encode() in read_cmdline(p)]
    assert not left, "a train.py outlived ablate.py"


def read_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:  # it ended meanwhile
        return b""


@pytest.mark.parametrize("arg", ["--jobs=0", "--nproc=0"])
def test_ablate_jobs_and_nproc_below_1_are_one_line_errors(arg):
    mentions(error_of(ablate.configure, [arg]), f"ablate_{arg[2:-2]}", "at least 1", arg)


def test_repeated_sweep_values_make_one_run_each(tmp_path):
    plan = ablate.configure(["--modes=pre,geonorm,pre", "--seeds=1,2,1", "--lrs=1e-3,0.001",
                             f"--out_dir={tmp_path}", "--sweep=geo_alpha=1,1.0,3"])
    assert (plan["modes"], plan["seeds"], plan["lrs"]) == (["pre", "geonorm"], [1, 2], [1e-3])
    assert plan["sweep"] == {"geo_alpha": [1.0, 3.0]}
    names = [r["name"] for r in ablate.plan_runs(plan, tmp_path)]
    assert len(names) == len(set(names)) == 2 * (1 + 2)  # seeds x (pre, geonorm x 2 step sizes)


# ---------------------------------------------------- nothing changes before every check has passed

def tree(folder):
    """Every file, link and folder under folder as {path: sha256 and mtime, a link's target, or
    'folder'}: equal only when nothing was written, deleted or touched. {} when folder does not
    exist."""
    found = {}
    for path in sorted(folder.rglob("*")) if folder.exists() else []:
        found[str(path.relative_to(folder))] = (
            f"-> {os.readlink(path)}" if path.is_symlink() else "folder" if path.is_dir() else
            (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns))
    return found


@pytest.fixture(scope="module")
def trained(data_dir, tmp_path_factory, shakespeare_text):
    """A finished run (4 steps, a checkpoint at 2 and 4) for mistakes to be planted on, and a
    data_dir holding 'tiny' and 'upper', a text of another vocabulary (upper case only)."""
    root = tmp_path_factory.mktemp("trained")
    prepare_data.prepare("shakespeare_char", root / "data" / "upper", workers=1,
                         inputs=[str(write(root / "upper.txt", shakespeare_text[:50_000].upper()))])
    shutil.copytree(data_dir / "tiny", root / "data" / "tiny")
    shutil.copy(data_dir / "input.txt", root / "tiny.txt")  # the text tiny was prepared from
    run(root / "data", root / "run", "--max_iters=4", "--eval_interval=2")
    return root


def write(path, text):
    path.write_text(text)
    return path


# what is planted: (arguments, what the one line says); with 'resume', resuming the trained run,
# else a new run into a new out_dir
MISTAKES = {
    "a seed below 0": (["--seed=-1"], "seed must be in [0, 1e19), got -1"),
    "beta1 of 1.5": (["--beta1=1.5"], "beta1 must be in [0, 1), got 1.5"),
    "a wsd decay fraction of -1": (["--lr_schedule=wsd", "--wsd_decay_frac=-1"],
                                   "wsd_decay_frac must be in [0, 1]"),
    "a negative learning rate": (["--learning_rate=-1"], "learning_rate must be in [0, 1e20]"),
    "a min_lr above the learning rate": (["--learning_rate=1e-3", "--min_lr=1"],
                                         "min_lr=1.0 is above learning_rate=0.001"),
    "resume: a min_lr above the checkpoint's rate": (["--min_lr=1", "resume"],
                                                     "min_lr=1.0 is above learning_rate=0.003"),
    "a typo": (["--n_layr=3"], "did you mean 'n_layer'?"),
    "a new run over the run": (["--out_dir=run"], "init_from='scratch' would train a new run over"),
    "GPT-2's weights over the run": (["--out_dir=run", "--init_from=gpt2"],
                                     "init_from='gpt2' would train a new run over"),
    "heads that do not divide the width": (["--n_head=3"],
                                           "n_embd=32 is not divisible by n_head=3"),
    "a block longer than the data": (["--block_size=30000"], "shorter than block_size=30000"),
    "GPT-2 on a character dataset": (["--init_from=gpt2"],
                                     "needs a dataset in GPT-2 BPE, and tiny is by"),
    "nccl on a CPU": (["--device=cpu", "--backend=nccl"], "backend='nccl' runs on CUDA"),
    "fsdp on nccl on a CPU": (["--device=cpu", "--parallel=fsdp", "--backend=nccl"],
                              "backend='nccl'"),
    "a GPU that is not there": (["--device=cuda:99"], "device 'cuda:99' is not usable here"),
    "layer stats under fsdp": (["--parallel=fsdp", "--log_layer_stats=True"],
                               "log_layer_stats needs"),
    "a gate clip without gates": (["--gpas_gate_clip=0.01"],
                                  "gpas_gate_clip=0.01 clips GPAS's gates, but"),
    "a negative gate clip": (["--gpas", "--gpas_gate_clip=-1"],
                             "gpas_gate_clip must be at least 0"),
    # a mode's or switch's own setting under another: the run would silently be another one
    "geonorm's alpha under pre": (["--geo_alpha=7.0"],
                                  "geo_alpha=7.0 does nothing under norm_mode='pre': it acts under "
                                  "norm_mode='geonorm'; set that, or leave geo_alpha out"),
    "DyT's alpha under Derf": (["--norm_type=derf", "--dyt_alpha_attn=5.0"],
                               "dyt_alpha_attn=5.0 does nothing under norm_type='derf': it acts "
                               "under norm_type='dyt'"),
    "accumulation that does not split": (["--gradient_accumulation_steps=3"],
                                         "gradient_accumulation_steps=3 does not split"),
    "resume: another vocabulary": (["--dataset=upper", "resume"],
                                   "but upper has another vocabulary"),
    "resume: another norm mode": (["--norm_mode=geonorm", "resume"],
                                  "norm_mode='geonorm', but the"),
    "resume: post for pre, the same shapes": (["--norm_mode=post", "resume"],
                                              "norm_mode='post', but"),
    "resume: another depth": (["--n_layer=3", "resume"], "n_layer=3, but the checkpoint in"),
    "resume: another block family": (["--arch=llama", "resume"],
                                     "arch='llama', but the checkpoint in"),
    "resume: an untied head for a tied one": (["--tie_embeddings=False", "resume"],
                                              "tie_embeddings=False, but"),
    "resume: max_iters before the step": (["--max_iters=2", "resume"],
                                          "nothing to train: the checkpoint in"),
    "resume: max_iters at the step": (["--max_iters=4", "resume"],
                                      "is at step 4 already, and max_iters=4"),
    "resume: a bad setting": (["--beta2=2", "resume"], "beta2 must be in [0, 1)"),
    "resume: the wrong out_dir": (["--out_dir=nowhere", "resume"], "holds no checkpoint"),
    "an out_dir that is a file": (["--out_dir=run/config.json/x"],
                                  "out_dir run/config.json/x is under "),
    "a data_dir that is a file": (["--data_dir=run/config.json"],
                                  "run/config.json/tiny is under run/config.json, which is a file"),
    "pystdlib to be made under a file": (["--data_dir=run/config.json", "--dataset=pystdlib"],
                                         "data_dir run/config.json/pystdlib is under "),
    "an infinite norm_eps": (["--norm_eps=1e999"], "norm_eps must be a finite number, got inf"),
    "an infinite rope_theta": (["--arch=llama", "--rope_theta=1e999"],
                               "rope_theta must be a finite number"),
    "an infinite geo_alpha": (["--norm_mode=geonorm", "--geo_alpha=1e999"],
                              "geo_alpha must be a finite"),
    "an infinite learning rate": (["--learning_rate=-1e999"],
                                  "learning_rate must be a finite number"),
    "a DyT alpha of 0": (["--norm_type=dyt", "--dyt_alpha_ffn=0"],
                         "dyt_alpha_ffn and dyt_alpha_final must"),
    "a bool for a float": (["--learning_rate=True"], "learning_rate must be float, got True"),
    "a float past float32's range": (["--res_scale=layerscale", "--layerscale_init=1e39"],
                                     "layerscale_init must lie within float32's range"),
    "a negative one past it": (["--norm_mode=geonorm", "--geo_alpha=-1e300"],
                               "geo_alpha must lie within float32's range"),
    "the meta device": (["--device=meta"], "device 'meta' holds shapes and no numbers"),
    "a micro-batch count beside total_batch_size": (
        ["--total_batch_size=512", "--gradient_accumulation_steps=2"],
        "gradient_accumulation_steps=2 is given, but total_batch_size=512 sets it"),
    # pystdlib is made only once every check has passed, and none needs it made
    "GPT-2 on pystdlib, not made yet": (["--init_from=gpt2", "--dataset=pystdlib"],
                                        "needs a dataset in GPT-2 BPE, and pystdlib is by char"),
    "resume: pystdlib, not made yet": (["--dataset=pystdlib", "resume"],
                                       "resume with --dataset=tiny, or prepare it first: "
                                       "python prepare_data.py pystdlib --out "),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_failed_check_is_one_line_and_leaves_out_dir_as_it_was(trained, mistake, monkeypatch):
    """Every check comes before anything is written: a mistake in the settings, their ranges, the
    launch, the accumulation, the data, a new run over a run, or a resume is one line; no new
    out_dir is made, and every file of the run's stays as it was: config.json, log.jsonl and its
    end, the checkpoint."""
    args, says = MISTAKES[mistake]
    # as one of 2 torchrun processes
    monkeypatch.setenv("WORLD_SIZE", "2" if "split" in mistake else "1")
    monkeypatch.chdir(trained)  # for out_dir=nowhere, out_dir=run
    before = tree(trained)
    out_dir = trained / ("run" if "resume" in args else "new")
    argv = [f"--data_dir={trained / 'data'}", f"--out_dir={out_dir}", *TRAIN_TINY,
            "--max_iters=8", *[a for a in args if a != "resume"],
            *["--init_from=resume"] * ("resume" in args)]
    assert says in error_of(train.main, argv)
    assert tree(trained) == before


def test_a_new_run_over_a_file_that_is_no_log_is_one_line_and_leaves_the_folder_as_it_was(
        trained, tmp_path):
    """A new run empties out_dir's log.jsonl; one that is not a run's log (notes of one's own) is
    one line before config.json beside it is written, and the dry run says so too."""
    out_dir = tmp_path / "notes"
    out_dir.mkdir()
    (out_dir / "log.jsonl").write_text("my notes\n")
    (out_dir / "config.json").write_text('{"mine": 1}\n')
    before = tree(tmp_path)
    for dry_run in (False, True):
        argv = [f"--data_dir={trained / 'data'}", f"--out_dir={out_dir}", *TRAIN_TINY,
                "--max_iters=2", f"--dry_run={dry_run}"]
        mentions(error_of(train.main, argv), "log.jsonl, line 1, is not a log record",
                 "'my notes'", "move it away")
        assert tree(tmp_path) == before


def truncate(path, by=1):
    """Cut the last bytes off a file, as a copy that stopped short."""
    os.truncate(path, path.stat().st_size - by)


def prepare_again(root):
    """tiny prepared again in place from other text of the same characters: its lines in reverse
    order."""
    text = (root / "data" / "tiny.txt").read_text()
    other = write(root / "other.txt", "".join(reversed(text.splitlines(keepends=True))))
    prepare_data.prepare("shakespeare_char", root / "data" / "tiny", inputs=[str(other)], workers=1,
                         force=True)


def edit_meta(root, **change):
    path = root / "data" / "tiny" / "meta.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | change))


def replace_by_folder(path):
    path.unlink()
    path.mkdir()


# planted in a copy of the trained run and its data: (plant, arguments, what the one line says)
PLANTED = {
    "ckpt.pt.tmp a folder": (lambda r: (r / "run" / "ckpt.pt.tmp").mkdir(), [],
                             "ckpt.pt.tmp is not a file"),
    "config.json a folder": (lambda r: replace_by_folder(r / "run" / "config.json"), [],
                             "config.json is not a"),
    "log.jsonl a folder": (lambda r: replace_by_folder(r / "run" / "log.jsonl"), [],
                           "log.jsonl is not a file"),
    "a log line that is no record": (lambda r: (r / "run" / "log.jsonl").write_text("[1, 2]\n"), [],
                                     "line 1, is not a log record"),
    "a val shard cut by a byte": (lambda r: truncate(r / "data" / "tiny" / "val_000000.bin"), [],
                                  "val_000000.bin is not a valid token shard"),
    "the data prepared again from other text": (prepare_again, [],
                                                "its shards' sha256 in meta.json differ"),
    "meta.json a list": (lambda r: (r / "data" / "tiny" / "meta.json").write_text("[]"), [],
                         "meta.json is corrupt (a list, not an object)"),
    "meta.json edited to gpt2 over character shards": (lambda r: edit_meta(r, tokenizer="gpt2"), [],
                                                       "meta.json is corrupt (tokenizer gpt2 "
                                                       "with vocab_size"),
    "a symlink loop as out_dir": (lambda r: (r / "loop").symlink_to(r / "loop"),
                                  ["--out_dir=loop/run"], "leads nowhere"),
    "a symlink loop as data_dir": (lambda r: (r / "loop").symlink_to(r / "loop"),
                                   ["--data_dir=loop"], "data_dir loop/tiny: "),
    "an empty out_dir": (lambda r: None, ["--out_dir="], "out_dir is empty"),
    "an empty dataset": (lambda r: None, ["--dataset="], "dataset is empty: name a folder"),
    "out_dir under /proc": (lambda r: None, ["--out_dir=/proc/nope/run"], "cannot write in /proc"),
}


@pytest.mark.parametrize("mistake", PLANTED)
def test_a_planted_file_or_path_is_one_line_before_anything_is_written(
        trained, tmp_path, monkeypatch, mistake):
    """What a resume of the trained run reads and writes (its out_dir's files, the shards,
    meta.json, the paths) is checked before the first write: one line, and the run and its data stay
    as they were."""
    plant, args, says = PLANTED[mistake]
    shutil.copytree(trained, tmp_path, symlinks=True, dirs_exist_ok=True)
    (tmp_path / "data" / "tiny.txt").write_text((trained / "tiny.txt").read_text())
    plant(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = tree(tmp_path)
    argv = ["--data_dir=data", "--out_dir=run", *TRAIN_TINY, "--max_iters=8", "--init_from=resume",
            *args]
    assert says in error_of(train.main, argv)
    assert tree(tmp_path) == before


def test_a_token_id_outside_the_vocabulary_is_one_line_naming_its_shard(data_dir, tmp_path):
    """A well-formed shard (header, size and meta.json's sha256 all agree) holding an id the
    vocabulary has no row for, in either split: one line naming the shard, not an IndexError from
    the embedding."""
    for split in ("train", "val"):
        data = tmp_path / split / "data"
        shutil.copytree(data_dir / "tiny", data / "tiny")
        shard = data / "tiny" / f"{split}_000000.bin"
        tokens = np.array(data_mod.read_shard(shard))
        tokens[::97] = 60000  # in every window a batch draws
        meta = json.loads((data / "tiny" / "meta.json").read_text())
        meta["shards"][split][0]["sha256"] = data_mod.write_shard(shard, tokens)
        (data / "tiny" / "meta.json").write_text(json.dumps(meta))
        message = error_of(run, data, tmp_path / split / "run", "--max_iters=2")
        assert f"{shard} holds token id 60000, outside the vocabulary of" in message
        assert "prepare_data.py" in message and "--force" in message
    # the first training batch and every evaluation's are drawn before the run's folder is made
    assert not (tmp_path / "train" / "run").exists() and not (tmp_path / "val" / "run").exists()


def test_a_resume_may_name_the_head_the_checkpoint_has(trained, tmp_path):
    """tie_embeddings=True resumes a gpt2 run trained with None (the family's choice: tied), as the
    same run."""
    shutil.copytree(trained / "run", tmp_path / "run")
    log = run(trained / "data", tmp_path / "run", "--max_iters=6", "--init_from=resume",
              "--tie_embeddings=True")
    assert log[-1]["status"] == "finished" and log[-1]["iter"] == 6


def test_a_resume_that_fails_after_it_started_leaves_the_run_as_it_was(
        trained, tmp_path, monkeypatch):
    """A resume that trains, then fails before its first checkpoint (here its first evaluation
    raises) changes no file of the run: log.jsonl keeps its 'finished' end, config.json its
    settings."""
    shutil.copytree(trained / "run", tmp_path / "run")
    before = tree(tmp_path)
    monkeypatch.setattr(train, "evaluate",
                        lambda *args: (_ for _ in ()).throw(OSError(5, "I/O error")))
    with pytest.raises(OSError):
        run(trained / "data", tmp_path / "run", "--max_iters=8", "--eval_interval=2",
            "--init_from=resume")
    assert tree(tmp_path) == before
    assert events(tmp_path / "run")[-1]["status"] == "finished"
    monkeypatch.undo()  # and the same resume, unbroken, records from its first checkpoint on
    log = run(trained / "data", tmp_path / "run", "--max_iters=8", "--eval_interval=2",
              "--init_from=resume")
    assert [e["iter"] for e in log if e["event"] == "eval"] == [0, 2, 4, 6, 8]
    assert [e["event"] for e in log].count("end") == 1 and log[-1]["status"] == "finished"
    assert json.loads((tmp_path / "run" / "config.json").read_text())["config"]["max_iters"] == 8


def test_a_run_in_a_folder_another_run_holds_is_one_line_and_changes_nothing(trained, tmp_path):
    """Two runs in one out_dir would write one log.jsonl and one checkpoint in turns: a resume, a
    new run or a dry run there while another run goes on is one line, before anything is written;
    once that run has ended, the resume goes on."""
    out, starting = tmp_path / "run", tmp_path / "starting"
    shutil.copytree(trained / "run", out)
    starting.mkdir()  # a new run's folder, before its first checkpoint
    before = tree(tmp_path)
    for folder, args in ((out, ["--init_from=resume"]), (starting, []),
                         (out, ["--init_from=resume", "--dry_run=True"])):
        with held(folder):
            message = error_of(run, trained / "data", folder, "--max_iters=6", *args)
        mentions(message, str(folder), "still running", "wait for it to end", "another out_dir")
    assert tree(tmp_path) == before
    log = run(trained / "data", out, "--max_iters=6", "--init_from=resume")
    assert log[-1]["status"] == "finished" and log[-1]["iter"] == 6


def test_a_new_run_over_a_checkpoint_is_refused_and_starts_over_once_it_is_deleted(trained,
                                                                                   tmp_path):
    """A forgotten --init_from=resume would train over the run, which is then lost: a new run into
    a folder that holds a checkpoint, whole or sharded (the link ckpt), is one line naming it and
    the fixes, with nothing changed; once the checkpoint is deleted, the new run starts over there,
    its log its own steps alone."""
    out, sharded = tmp_path / "run", tmp_path / "sharded"
    shutil.copytree(trained / "run", out)
    (sharded / "ckpt-4").mkdir(parents=True)
    (sharded / "ckpt").symlink_to("ckpt-4")
    before = tree(tmp_path)
    for found in (out / "ckpt.pt", sharded / "ckpt"):
        message = error_of(run, trained / "data", found.parent, "--max_iters=2")
        mentions(message, str(found), "init_from='scratch'", "init_from='resume'",
                 "another out_dir", f"delete {found}")
    assert tree(tmp_path) == before
    (out / "ckpt.pt").unlink()
    log = run(trained / "data", out, "--max_iters=2", "--eval_interval=2")
    assert [e["iter"] for e in log if e["event"] == "eval"] == [0, 2]
    assert log[-1]["status"] == "finished" and log[-1]["iter"] == 2


def test_a_run_holds_its_folder_from_its_checks_or_its_making_to_its_end_however_it_ends(
        data_dir, tmp_path, monkeypatch):
    """A new folder is held from when the run makes it, a resumed one from the end of the checks;
    either is let go when the run ends, by an error too (the next run here would be refused)."""
    out, seen, evaluate = tmp_path / "run", [], train.evaluate

    def looking(*args):
        seen.append(holds(out))
        return evaluate(*args)

    monkeypatch.setattr(train, "evaluate", looking)
    run(data_dir, out, "--max_iters=4", "--eval_interval=2")  # evaluations at 0, 2 and 4
    run(data_dir, out, "--max_iters=6", "--eval_interval=2", "--init_from=resume")  # at 6
    assert seen == [True] * 4 and not holds(out)
    monkeypatch.setattr(train, "evaluate",
                        lambda *args: (_ for _ in ()).throw(OSError(5, "I/O error")))
    with pytest.raises(OSError):
        run(data_dir, out, "--max_iters=8", "--eval_interval=2", "--init_from=resume")
    assert not holds(out)


def test_a_folder_on_a_file_system_without_locks_is_run_unheld(data_dir, tmp_path, monkeypatch):
    """Some network mounts refuse flock (ENOLCK): the run goes on, holding nothing, as every run
    did before runs held their folders."""
    def refused(descriptor, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(logbook.fcntl, "flock", refused)
    (tmp_path / "run").mkdir()  # held at the end of the checks, and again when Log opens
    log = run(data_dir, tmp_path / "run", "--max_iters=2")
    assert log[-1]["status"] == "finished" and logbook.HELD == {}


def test_a_number_that_is_not_one_from_a_config_file_is_one_line(data_dir, tmp_path):
    """NaN and infinity from a config file, for settings of the model, the optimizer and the
    schedule."""
    for name in ("geo_alpha", "geo_max_angle", "norm_eps", "rope_theta", "dyt_alpha_attn",
                 "ffn_dim_multiplier", "learning_rate", "min_lr", "grad_clip"):
        for value in ('float("nan")', "float('inf')"):
            config = write(tmp_path / "bad.py", f"{name} = {value}\n")
            argv = [str(config), f"--data_dir={data_dir}", f"--out_dir={tmp_path / 'run'}",
                    *TRAIN_TINY]
            assert f"{name} must be a finite number, got" in error_of(train.main, argv)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.py"]


def compilers(session):
    """The compiler processes (g++ and what it runs) of a process session."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        if int(stat[3]) == session and any(c in read_cmdline(pid)
                                           for c in (b"g++", b"cc1plus", b"collect2")):
            found.append(int(pid))
    return found


def test_a_signal_while_compiling_is_one_line_and_leaves_no_poisoned_cache(data_dir, tmp_path):
    """A scheduler's SIGTERM to a job's process group while torch.compile runs g++: a clean stop
    (torch 2.13 compiles again what it lost) or one line, never a traceback; and the next compiled
    run, on the same graph, runs, with no kernel cut short left in the cache. The graph as small as
    train.py makes one: one block, 8 wide, no training step, one batch an evaluation (the
    evaluation's 11 kernels, where a step would add 12 more). The stopped run compiles it whole."""
    env = os.environ | {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    args = command(f"--data_dir={data_dir}", f"--out_dir={tmp_path / 'run'}", *TRAIN_TINY,
                   "--n_layer=1", "--n_embd=8", "--eval_iters=1", "--max_iters=0", "--compile=True")
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        deadline = time.time() + 300
        while not compilers(proc.pid):
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                pytest.fail(f"no compiler seen: {proc.communicate(timeout=60)}")
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGTERM)  # every process of the job, g++ too
        _, err = proc.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert (proc.returncode == 0
            or last.startswith("error: stopped while torch.compile was compiling")), err
    # the same graph, into a new out_dir: the stop may have left a checkpoint in the first
    again = subprocess.run([*args, f"--out_dir={tmp_path / 'again'}"], capture_output=True,
                           text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "finished at step 0" in again.stdout
    assert all(devices.whole_elf(kernel) for kernel in (tmp_path / "cache").rglob("*.so"))


def test_a_compile_that_fails_after_a_stop_signal_is_one_line_and_repairs_the_cache(
        data_dir, tmp_path, monkeypatch):
    """The compiler killed by the signal that stops the run (torch raises from the step): one line
    that says so and how to go on, the cache repaired; the same failure without a signal is the
    error it is."""
    # compile=True, nothing compiled: fast
    monkeypatch.setattr(torch, "compile", lambda model: model)
    repaired = []
    monkeypatch.setattr(devices, "repair_compile_cache", lambda: repaired.append(True))

    def killed_compiler(*args):
        os.kill(os.getpid(), signal.SIGTERM)
        raise RuntimeError("InductorError: CalledProcessError: g++ died with <Signals.SIGTERM: 15>")

    monkeypatch.setattr(train, "train_step", killed_compiler)
    message = error_of(run, data_dir, tmp_path / "run", "--max_iters=4", "--compile=True")
    assert message.startswith("error: stopped while torch.compile was compiling "
                              "(RuntimeError: InductorError")
    # before compiling, and after
    assert "run the same command again" in message and len(repaired) == 2
    monkeypatch.setattr(train, "train_step",
                        lambda *args: (_ for _ in ()).throw(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):
        run(data_dir, tmp_path / "other", "--max_iters=4", "--compile=True")


def test_kernels_cut_short_in_the_compile_cache_are_removed_and_whole_ones_kept(
        tmp_path, monkeypatch, capfd):
    """A shared object without its ELF header (a compiler killed before it wrote a byte) or without
    its section headers (killed while writing): removed with a notice; a whole one stays."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    whole = next(p for p in Path(torch.__file__).parent.rglob("*.so")
                 if p.stat().st_size < 50_000_000)
    for name, size in (("whole", None), ("empty", 0), ("cut", whole.stat().st_size // 2),
                       ("head", 40)):
        (tmp_path / name[:2]).mkdir()
        shutil.copy(whole, tmp_path / name[:2] / f"{name}.so")
        if size is not None:
            os.truncate(tmp_path / name[:2] / f"{name}.so", size)
    removed = devices.repair_compile_cache()
    assert sorted(p.name for p in removed) == ["cut.so", "empty.so", "head.so"]
    assert [p.name for p in tmp_path.rglob("*.so")] == ["whole.so"]
    assert capfd.readouterr().err.count("notice: removed ") == 3


def test_a_mistake_is_one_line_on_stderr_and_exit_1(data_dir, tmp_path):
    """As a process: the line alone on stderr, ending in a newline, no traceback, exit status 1;
    for a mistake found as the settings are read and for one found as the devices are set up."""
    nccl_args, nccl_message = MISTAKES["fsdp on nccl on a CPU"]
    for args, words in ((["--lerning_rate=1e-3"], ["--lerning_rate=1e-3", "'learning_rate'"]),
                        (nccl_args, [nccl_message])):
        result = subprocess.run(command(f"--data_dir={data_dir}", f"--out_dir={tmp_path}",
                                        *TRAIN_TINY, *args),
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith("error: ") and result.stderr.endswith("\n")
        mentions(result.stderr, *words)
    assert list(tmp_path.iterdir()) == []


def test_a_dry_run_checks_everything_and_writes_nothing(trained, tmp_path, monkeypatch, capsys):
    """dry_run=True: every check of a run, then its plan, and nothing written: not out_dir, not the
    default dataset; as one of WORLD_SIZE processes (ablate.py sets it), whose default accumulation
    splits."""
    args = [f"--data_dir={trained / 'data'}", *TRAIN_TINY, "--dry_run=True"]
    train.main([*args, f"--out_dir={tmp_path / 'new'}", "--max_iters=10"])
    assert "= 1 process x 1 micro-batch x 4 x 32" in capsys.readouterr().out
    assert not (tmp_path / "new").exists()
    before = tree(trained)
    train.main([*args, f"--out_dir={trained / 'run'}", "--init_from=resume", "--max_iters=10"])
    assert capsys.readouterr().out.startswith("dry run: every check passed, nothing written. "
                                              "The run:\n")
    monkeypatch.setenv("WORLD_SIZE", "2")
    train.main([*args, f"--out_dir={trained / 'run'}", "--init_from=resume", "--max_iters=10",
                "--gradient_accumulation_steps=None"])
    assert "= 2 processes x 1 micro-batch x 4 x 32" in capsys.readouterr().out
    resume = [*args, f"--out_dir={trained / 'run'}", "--init_from=resume"]
    assert "nothing to train" in error_of(train.main, resume)
    assert tree(trained) == before
    train.main([f"--data_dir={tmp_path / 'data'}", f"--out_dir={tmp_path / 'new'}",
                "--dry_run=True"])
    mentions(capsys.readouterr().out, "counted once", "pystdlib")
    assert list(tmp_path.iterdir()) == []


def test_max_iters_at_the_checkpoint_of_a_run_that_never_logged_its_end_records_it(
        trained, tmp_path):
    """A kill between the last checkpoint and the log's end: the resume has nothing to train but the
    end to record (and ablate.py takes the run as finished then)."""
    shutil.copytree(trained / "run", tmp_path / "run", symlinks=True)
    log = tmp_path / "run" / "log.jsonl"
    log.write_text("".join(line + "\n" for line in log.read_text().splitlines()[:-1]))
    run(trained / "data", tmp_path / "run", "--max_iters=4", "--init_from=resume")
    assert ([(e["event"], e["iter"]) for e in events(tmp_path / "run")[-2:]]
            == [("eval", 4), ("end", 4)])


# ------------------------------------------------------------------------------ damaged checkpoints

def flip_a_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


# (the run: whole or sharded, what is done to it, the file the line names, what it says)
DAMAGES = {
    "ckpt.pt, a byte flipped": ("whole", lambda out: flip_a_byte(out / "ckpt.pt"), "ckpt.pt",
                                "is damaged"),
    "ckpt.pt, cut short": ("whole", lambda out: os.truncate(out / "ckpt.pt", 1000), "ckpt.pt",
                           "has 1000"),
    "its checksums, not JSON": ("whole", lambda out: write(out / "ckpt.pt.crc32.json", "{"),
                                "ckpt.pt.crc32.json", "is not a checksum record"),
    "a .distcp file, a byte flipped": ("sharded",
                                       lambda out: flip_a_byte(out / "ckpt" / "__0_0.distcp"),
                                       "ckpt/__0_0.distcp", "is damaged"),
    "a .distcp file, gone": ("sharded", lambda out: (out / "ckpt" / "__0_0.distcp").unlink(),
                             "ckpt/__0_0.distcp", "is missing"),
    ".metadata, emptied": ("sharded", lambda out: write(out / "ckpt" / ".metadata", ""),
                           "ckpt/.metadata", "has 0 bytes"),
    "run.json, a byte flipped": ("sharded", lambda out: flip_a_byte(out / "ckpt" / "run.json"),
                                 "ckpt/run.json", "is damaged"),
    "the ckpt link, its folder gone": ("sharded", lambda out: shutil.rmtree(out / "ckpt-4"), "ckpt",
                                       "is a dangling link"),
}


@pytest.fixture(scope="module")
def both_kinds(trained):
    """The trained run's whole checkpoint, and the same run trained sharded (fsdp, one process)."""
    run(trained / "data", trained / "sharded", "--max_iters=4", "--eval_interval=2",
        "--parallel=fsdp")
    return dict(whole=trained / "run", sharded=trained / "sharded")


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_checkpoint_is_one_line_naming_the_file_on_resume_and_on_load(
        both_kinds, damage, tmp_path):
    """Checksums recorded at every save are checked at every read, before any tensor is: a byte
    flipped, a file cut short, missing or emptied, or a dangling link is one line naming the file,
    for train.py's resume and for checkpoint.load_model (sample.py, eval.py), and the run's folder
    stays as it was."""
    kind, do, name, says = DAMAGES[damage]
    out = tmp_path / kind
    shutil.copytree(both_kinds[kind], out, symlinks=True)
    do(out)
    before = tree(out)
    resume = ["--max_iters=8", "--init_from=resume",
              f"--parallel={'fsdp' if kind == 'sharded' else 'ddp'}"]
    for error in (error_of(run, both_kinds["whole"].parent / "data", out, *resume),
                  error_of(checkpoint.load_model, str(out), "cpu")):
        assert error.startswith(f"error: {out / name} {says}")
    assert tree(out) == before


@pytest.mark.parametrize("kind", ["whole", "sharded"])
def test_a_checkpoint_that_model_py_no_longer_fits_is_one_line_naming_out_dir(
        both_kinds, kind, tmp_path, monkeypatch):
    """A fork that adds a parameter to the model, then resumes or samples an older run: one line
    naming the parameter, and the run's folder stays as it was."""
    class Edited(train.GPT):
        def __init__(self, config):
            super().__init__(config)
            # one more parameter than the checkpoint holds
            self.gate = torch.nn.Parameter(torch.ones(1))

    out = tmp_path / kind
    shutil.copytree(both_kinds[kind], out, symlinks=True)
    before = tree(out)
    monkeypatch.setattr(train, "GPT", Edited)
    error = error_of(run, both_kinds["whole"].parent / "data", out, "--max_iters=8",
                     "--init_from=resume", f"--parallel={'fsdp' if kind == 'sharded' else 'ddp'}")
    assert error.startswith(f"error: the checkpoint in {out} does not fit this model.py (")
    assert "gate" in error and error.endswith("): resume with the model.py and model settings it "
                                              "was trained with")
    monkeypatch.setattr(checkpoint, "GPT", Edited)  # sample.py and eval.py load it so
    error = error_of(checkpoint.load_model, str(out), "cpu")
    assert error.startswith(f"error: {checkpoint.find_checkpoint(out)} does not fit this "
                            "model.py (")
    assert "gate" in error and error.endswith("train it again")
    assert tree(out) == before


def test_an_ablation_resumes_a_stopped_run_from_its_checkpoint_whole_or_sharded(
        both_kinds, tmp_path):
    """A run ablate.py finds stopped with a checkpoint, ckpt.pt or a sharded fsdp one, resumes; one
    with none trains anew."""
    for kind, folder in both_kinds.items():
        stopped = tmp_path / kind
        shutil.copytree(folder, stopped, symlinks=True)
        log = stopped / "log.jsonl"
        log.write_text("".join(line for line in log.read_text().splitlines(True)
                               if '"end"' not in line))
        run = dict(dir=stopped, settings=dict(norm_mode="pre", max_iters=8))
        assert not ablate.done(run) and ablate.train_args(run)[-1] == "--init_from=resume", kind
    assert "--init_from=resume" not in ablate.train_args(dict(dir=tmp_path / "new", settings={}))


@pytest.mark.parametrize("kind", ["whole", "sharded"])
def test_a_damaged_checkpoint_without_checksums_says_damaged_not_unfit(both_kinds, kind, tmp_path):
    """Its checksums removed (an older normgpt's, or a copy without them) and a file cut short: the
    resume and the readers say it is damaged and to copy it again, not that it does not fit the
    model."""
    out = tmp_path / kind
    shutil.copytree(both_kinds[kind], out, symlinks=True)
    found = checkpoint.find_checkpoint(out)
    checkpoint.sums_path(found).unlink()
    files = [found] if found.is_file() else [p for p in found.resolve().iterdir()
                                             if p.suffix == ".distcp"]
    # the model's tensors too: a reader needs them
    os.truncate(files[0], files[0].stat().st_size // 8)
    before = tree(out)
    for error in (error_of(run, both_kinds["whole"].parent / "data", out, "--max_iters=8",
                           "--init_from=resume",
                           f"--parallel={'fsdp' if kind == 'sharded' else 'ddp'}"),
                  error_of(checkpoint.load_model, str(out), "cpu")):
        assert "damaged" in error or "not a readable checkpoint" in error, error
        assert "copy it again" in error and "does not fit" not in error, error
    assert tree(out) == before


def test_under_torchrun_process_0_alone_checks_the_checkpoint_it_resumes(
        both_kinds, tmp_path, monkeypatch, capsys):
    """Process 0 reads every byte of the checkpoint to check it (and says when it has no checksums);
    the others load it unchecked, as eight processes checking would read it eight times over."""
    out = tmp_path / "run"
    shutil.copytree(both_kinds["whole"], out, symlinks=True)
    checkpoint.sums_path(out / "ckpt.pt").unlink()  # so that a check shows: its notice
    # None: no torchrun
    for rank, checks in ((None, True), ("0", True), ("1", False), ("7", False)):
        (monkeypatch.delenv("RANK", raising=False) if rank is None
         else monkeypatch.setenv("RANK", rank))
        cfg, ckpt = train.configure([f"--out_dir={out}", "--init_from=resume", "--max_iters=8"])
        assert ckpt["iter_num"] == 4 and cfg.max_iters == 8
        assert ("has no checksums" in capsys.readouterr().err) == checks, rank


def test_a_checkpoint_without_checksums_loads_with_a_notice(both_kinds, tmp_path, capsys):
    """As an older normgpt saved it: it loads unchecked, saying so in one line; the next save
    records them."""
    for kind, name in (("whole", "ckpt.pt"), ("sharded", "ckpt")):
        out = tmp_path / kind
        shutil.copytree(both_kinds[kind], out, symlinks=True)
        checkpoint.sums_path(out / name).unlink()
        checkpoint.load_model(str(out), "cpu")
        notice = capsys.readouterr().err
        assert notice.count("\n") == 1 and notice.startswith("notice: ")
        mentions(notice, str(out / name), checkpoint.sums_path(out / name).name, "unchecked")
    run(both_kinds["whole"].parent / "data", tmp_path / "whole", "--max_iters=6",
        "--init_from=resume")
    capsys.readouterr()
    checkpoint.load_model(str(tmp_path / "whole"), "cpu")
    assert capsys.readouterr().err == ""
