"""How runs stop and go on: signals, kill -9 and resume, resumed hyperparameters, timing, bad values."""
import json
import multiprocessing
import os
import random
import signal
import sys
import time

import pytest
import torch
import torch._dynamo  # noqa: F401 (AdamW imports it at first use, seconds: once here, not in every forked child)

import ablate
import checkpoint
import devices
import train
from test_train import TINY, events, losses, run


def start(data_dir, out_dir, *args):
    """train.main in a forked child process: torch is imported already, so it starts at once, and kill -9
    or a signal hits a real process. Its output goes to out_dir.parent / "output"."""
    def child():
        output = open(out_dir.parent / "output", "a", buffering=1)
        os.dup2(output.fileno(), 1)  # the signal handler writes to the file descriptor itself
        os.dup2(output.fileno(), 2)
        sys.stdout = sys.stderr = output
        train.main([f"--data_dir={data_dir}", f"--out_dir={out_dir}", *TINY, *args])

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
    return [e for e in checkpoint.read_events(out_dir / "log.jsonl") if e["event"] == kind]


def slow_save(monkeypatch, tmp_path, seconds):
    """Make saving a checkpoint touch tmp_path/saving, then take seconds: signals sent then land mid-save."""
    save = checkpoint.save_checkpoint

    def slow(*args):
        (tmp_path / "saving").touch()
        time.sleep(seconds)
        save(*args)

    monkeypatch.setattr(checkpoint, "save_checkpoint", slow)


# ------------------------------------------------------------------------------------ signals

def test_any_number_of_sigterms_finish_the_step_save_and_exit_0(data_dir, tmp_path, monkeypatch):
    """Under torchrun a worker gets each signal twice (forwarded, and the scheduler's own): the second
    and third must not kill the save."""
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
    assert proc.exitcode == -signal.SIGINT  # killed by SIGINT's default action, before the save's 5 s were up
    assert not (out / "ckpt.pt").exists() and events(out)[-1]["event"] != "end"
    assert "SIGINT three times: stopping now, without a checkpoint" in (tmp_path / "output").read_text()


def test_a_stop_skips_the_evaluation_due_saves_at_once_and_the_resume_makes_it_up(data_dir, tmp_path, monkeypatch,
                                                                                  capsys):
    step = train.train_step

    def signalled(*args):  # SIGTERM during the step that reaches step 3, where an evaluation falls due
        if args[4] == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return step(*args)

    monkeypatch.setattr(train, "train_step", signalled)
    args = ["--max_iters=6", "--eval_interval=3", "--dropout=0.1"]
    run(data_dir, tmp_path / "parts", *args)
    assert [(e["event"], e["iter"]) for e in events(tmp_path / "parts")[-2:]] == [("train", 3), ("end", 3)]
    assert events(tmp_path / "parts")[-1]["status"] == "interrupted"
    assert "checkpoint of step 3 saved in" in capsys.readouterr().out
    monkeypatch.undo()

    run(data_dir, tmp_path / "parts", *args, "--init_from=resume")
    run(data_dir, tmp_path / "whole", *args)
    kinds = lambda out: [(e["event"], e["iter"], e.get("train_loss")) for e in events(out)[:-1]]  # less the end
    assert kinds(tmp_path / "parts") == kinds(tmp_path / "whole")  # the eval at 3 too, each event once


def test_five_kill_9s_each_resumed_give_the_log_and_losses_of_an_uninterrupted_run(data_dir, tmp_path):
    # a checkpoint every step; the schedule fixed by lr_decay_iters, so that max_iters only says where to stop
    args = ["--eval_interval=1", "--eval_iters=1", "--dropout=0.1", "--lr_decay_iters=1000"]
    parts, delays, trained = tmp_path / "parts", random.Random(0), 0
    for kill in range(5):
        resume = ["--init_from=resume"] * (parts / "ckpt.pt").exists()
        proc = start(data_dir, parts, *args, "--max_iters=1000", *resume)
        time.sleep(delays.uniform(0.1, 1.5))  # while it starts (config.json, trimming the log) or trains: mid-step,
        assert proc.is_alive()  # mid-evaluation, mid-save or mid-line in the log
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        trained += (parts / "ckpt.pt").exists() and torch.load(parts / "ckpt.pt", weights_only=True)["iter_num"] > 0
    assert trained >= 3  # most kills found it training
    end = torch.load(parts / "ckpt.pt", weights_only=True)["iter_num"] + 3
    run(data_dir, parts, *args, f"--max_iters={end}", "--init_from=resume")
    run(data_dir, tmp_path / "whole", *args, f"--max_iters={end}")
    kinds = lambda out: [(e["event"], e["iter"], e.get("train_loss"), e.get("val_loss")) for e in events(out)[:-1]]
    assert kinds(parts) == kinds(tmp_path / "whole")  # each step once, with the same losses
    assert [i for i, _ in losses(parts)] == list(range(1, end + 1))


# ------------------------------------------------------------------------------------- resume

def test_resume_takes_weight_decay_betas_and_fused_from_the_settings(data_dir, tmp_path):
    run(data_dir, tmp_path, "--max_iters=2")
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    for group in ckpt["optimizer"]["param_groups"]:
        group["fused"] = True  # as if saved on a GPU
    torch.save(ckpt, tmp_path / "ckpt.pt")

    settings = [f"--out_dir={tmp_path}", "--init_from=resume", "--weight_decay=0.05", "--beta2=0.5"]
    cfg, ckpt = train.configure(settings)
    proc = devices.Process(rank=0, world=1, device="cpu", dtype="float32", ctx=None, accum=1)
    optimizer = train.build_model(cfg, ckpt["meta"], ckpt, proc)[3]
    decayed, other = optimizer.param_groups  # matrices and embeddings; biases and gains
    assert (decayed["weight_decay"], other["weight_decay"]) == (0.05, 0.0)
    assert all(tuple(g["betas"]) == (0.9, 0.5) and not g["fused"] for g in optimizer.param_groups)
    assert all(state["step"] == 2 for state in optimizer.state.values())  # the moments are the checkpoint's

    run(data_dir, tmp_path, "--max_iters=3", *settings[1:])
    saved = json.loads((tmp_path / "config.json").read_text())["config"]
    assert (saved["weight_decay"], saved["beta2"]) == (0.05, 0.5)
    assert torch.load(tmp_path / "ckpt.pt", weights_only=True)["optimizer"]["param_groups"][0]["betas"][1] == 0.5


def test_the_first_step_of_a_run_and_of_a_resume_is_left_out_of_the_timing(data_dir, tmp_path, monkeypatch):
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
    assert windows[0]["ms_per_iter"] < 1000 and windows[2]["ms_per_iter"] < 1000  # the slow second is not in them
    run(data_dir, tmp_path / "each", "--max_iters=2")  # log_interval=1: the first window holds step 1 alone
    first, second = events(tmp_path / "each", "train")
    assert (first["timed_steps"], first["ms_per_iter"], first["tokens_per_s"]) == (0, None, None)
    assert second["timed_steps"] == 1 and second["ms_per_iter"] > 0


def test_a_step_waits_for_the_device_once_and_reads_each_batch_before_the_backward_before_it(data_dir, tmp_path,
                                                                                             monkeypatch):
    """On a GPU, reading a tensor's value in train.py (.item(), .tolist()) waits for the device: once a
    step. And each micro-batch is read ahead, while the device computes the one before it."""
    reads, order = [], []
    for name in ("item", "tolist"):
        def counted(self, read=getattr(torch.Tensor, name)):
            reads.extend([1] if sys._getframe(1).f_code.co_filename == train.__file__ else [])
            return read(self)
        monkeypatch.setattr(torch.Tensor, name, counted)
    micro_batch, backward = train.micro_batch, torch.Tensor.backward
    monkeypatch.setattr(train, "micro_batch", lambda *args: order.append("batch") or micro_batch(*args))
    monkeypatch.setattr(torch.Tensor, "backward", lambda self, *a, **k: order.append("backward") or backward(self, *a, **k))

    counts = {}
    for steps in (4, 10):
        reads.clear(), order.clear()
        run(data_dir, tmp_path / str(steps), f"--max_iters={steps}", "--eval_interval=1000", "--log_interval=1000",
            "--gradient_accumulation_steps=2")
        counts[steps] = len(reads)
    assert counts[10] - counts[4] == 10 - 4  # the same evaluations: the difference is one read per step
    assert order == ["batch"] + ["batch", "backward"] * 10 * 2  # the first, then each next before a backward


# ----------------------------------------------------------------------------------- bad values

@pytest.mark.parametrize("arg, least", [("--eval_interval=0", 1), ("--log_interval=0", 1), ("--eval_iters=0", 1),
                                        ("--batch_size=0", 1), ("--max_iters=-1", 0), ("--warmup_iters=-5", 0),
                                        ("--gradient_accumulation_steps=0", 1)])
def test_values_below_a_settings_least_are_one_line_errors(arg, least):
    with pytest.raises(SystemExit) as error:
        train.configure([arg])
    name, value = arg[2:].split("=")
    assert str(error.value.code) == f"error: {name} must be at least {least}, got {value} in {arg}"


def test_a_model_setting_is_checked_by_the_model_alone(data_dir, tmp_path):
    """block_size=0 passes the settings reader and stops at GPTConfig.validate, in one line."""
    with pytest.raises(SystemExit) as error:
        run(data_dir, tmp_path, "--block_size=0", "--total_batch_size=128")
    assert str(error.value.code).startswith("error: total_batch_size=128 is not a multiple of batch_size * block_size")
    with pytest.raises(SystemExit) as error:
        run(data_dir, tmp_path, "--block_size=0")
    assert str(error.value.code) == "error: block_size must be a positive int, got 0"


@pytest.mark.parametrize("arg", ["--jobs=0", "--nproc=0"])
def test_ablate_jobs_and_nproc_below_1_are_one_line_errors(arg):
    with pytest.raises(SystemExit) as error:
        ablate.configure([arg])
    assert str(error.value.code) == f"error: ablate_{arg[2:-2]} must be at least 1, got 0 in {arg}"


def test_repeated_sweep_values_make_one_run_each(tmp_path):
    plan = ablate.configure(["--modes=pre,geonorm,pre", "--seeds=1,2,1", "--lrs=1e-3,0.001", f"--out_dir={tmp_path}",
                             "--sweep=geo_alpha=1,1.0,3"])
    assert (plan["modes"], plan["seeds"], plan["lrs"]) == (["pre", "geonorm"], [1, 2], [1e-3])
    assert plan["sweep"] == {"geo_alpha": [1.0, 3.0]}
    names = [r["name"] for r in ablate.plan_runs(plan, tmp_path)]
    assert len(names) == len(set(names)) == 2 * (1 + 2)  # seeds x (pre, geonorm x 2 step sizes)
