"""devices.py in this process: the device and dtype settings, the launch checks' one-line errors,
one voice under torchrun, a process group of one; and train.py's own use of them: micro-batches
per process, how a model is wrapped, and the signal counter. What needs several processes (DDP,
FSDP over 2, a signal to one of them) is tests/test_fsdp.py's and test_reliability.py's."""
import os
import signal
import threading
import time
import types
from contextlib import nullcontext

import pytest
import torch
import torch.distributed as dist

import devices
import train
from conftest import error_of, mentions
from model import GPT, GPTConfig


@pytest.fixture
def alone(monkeypatch):
    """No torchrun around: none of its variables set."""
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_auto_is_this_machines_device_and_one_that_is_not_here_is_one_line(alone):
    assert devices.pick_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert devices.pick_device("cpu") == "cpu"
    if not torch.cuda.is_available():
        message = error_of(devices.pick_device, "cuda")
        assert message.startswith("error: device 'cuda' is not usable here (")
        mentions(message, "choose device='cpu' or 'auto'")
        alone.setenv("LOCAL_RANK", "3")  # under torchrun a GPU is the process's own
        assert error_of(devices.pick_device, "cuda").startswith(
            "error: device 'cuda:3' is not usable here (")
    try:
        torch.empty(0, device="tpu")
    except RuntimeError as e:
        why = f"RuntimeError: {str(e).splitlines()[0]}"
    # torch's reason, cut at 120 characters
    mentions(error_of(devices.pick_device, "tpu"), "'tpu'", "not usable", f"({why[:120]}):",
             "choose device='cpu' or 'auto'")
    if not torch.backends.mps.is_available():  # torch's reason lists every backend it knows: cut
        message = error_of(devices.pick_device, "mps")
        assert len(message) < 300 and "choose device='cpu'" in message, message
    # torch makes tensors there, but of shapes alone: a run would fail at its first number
    mentions(error_of(devices.pick_device, "meta"), "device 'meta'", "no numbers",
             "choose device='cpu' or 'auto'")


def test_the_world_planned_is_torchruns_world_size_else_one(alone):
    assert devices.planned_world() == 1
    alone.setenv("WORLD_SIZE", "8")
    assert devices.planned_world() == 8
    for bad in ("abc", "0", "-2", "", "2.0"):
        alone.setenv("WORLD_SIZE", bad)
        mentions(error_of(devices.planned_world), f"WORLD_SIZE={bad!r}", "unset it", "torchrun")


def test_launches_that_cannot_run_are_one_line_before_any_process_group(alone):
    if torch.cuda.is_available():
        pytest.skip("checks a machine without CUDA")
    assert devices.check_launch("cpu", "gloo", "fsdp") == \
        devices.check_launch("auto", "auto", "ddp") == "cpu"
    # a CUDA build's torch: still not on a CPU
    alone.setattr(dist, "is_nccl_available", lambda: True)
    message = error_of(devices.check_launch, "cpu", "nccl", "ddp")
    mentions(message, "backend='nccl'", "CUDA", "'cpu'", "backend='gloo'", "'auto'")
    # a device no process group runs on (Apple's GPU), as if this machine had one
    alone.setattr(devices, "pick_device", lambda device: device)
    assert devices.check_launch("mps", "auto", "ddp") == "mps"  # one process: any device
    for parallel, world, cause in (("fsdp", "1", "parallel='fsdp'"),
                                   ("ddp", "2", "torchrun's processes")):
        alone.setenv("WORLD_SIZE", world)
        message = error_of(devices.check_launch, "mps", "auto", parallel)
        mentions(message, cause, "cuda or cpu", "'mps'")
    assert "fsdp" not in message  # ddp on two processes: the processes are the cause


def steps(world, batch_size=4, block_size=8, accum=None, total=0):
    cfg = types.SimpleNamespace(batch_size=batch_size, block_size=block_size,
                                gradient_accumulation_steps=accum, total_batch_size=total)
    return train.accumulation_steps(cfg, world), cfg.gradient_accumulation_steps


@pytest.mark.parametrize("world, accum, total, per_process, written", [
    (1, None, 0, 1, 1), (4, None, 0, 1, 4),  # None: one micro-batch per process
    (1, 6, 0, 6, 6), (3, 6, 0, 2, 6), (6, 6, 0, 1, 6),
    # total_batch_size wins over gradient_accumulation_steps
    (1, None, 32 * 6, 6, 6), (2, 4, 32 * 6, 3, 6),
    (3, None, 32 * 6, 2, 6),
])
def test_micro_batches_per_process_split_the_steps_global_count(
        world, accum, total, per_process, written):
    """32 tokens a micro-batch; the global count is written back (config.json, a resume on another
    world)."""
    counts = steps(world, accum=accum, total=total)
    # range() takes them
    assert counts == (per_process, written) and all(type(n) is int for n in counts)


def test_a_count_that_does_not_split_is_one_line_naming_the_multiple_to_use():
    mentions(error_of(steps, 4, accum=6), "gradient_accumulation_steps=6", "4 processes",
             "multiple of 4", "None")
    mentions(error_of(steps, 1, total=100), "total_batch_size=100", "batch_size * block_size = 32",
             "change one")
    mentions(error_of(steps, 4, total=32 * 6), "total_batch_size=192", "6 micro-batches",
             "32 tokens", "4 processes", "multiple of 128")
    # no crash (the model's check names block_size 0)
    message = error_of(steps, 1, block_size=0, total=64)
    mentions(message, "total_batch_size=64", "batch_size * block_size = 0", "change one")


@pytest.mark.parametrize("rank, code, waits", [("0", "error: x", []),
                                               ("1", "error: process 1: x", [10.0]),
                                               ("2", "error: process 2: x", [10.0]),
                                               (None, "error: x", [])])
def test_under_torchrun_the_others_wait_for_process_0_to_say_the_error_before_their_own(
        alone, rank, code, waits):
    """The others wait first: torchrun stops every process once one has exited, which would cut
    off process 0's line. One that is still running then failed where process 0 did not, and says
    so itself."""
    slept = []
    alone.setattr(devices.time, "sleep", slept.append)
    if rank is not None:
        alone.setenv("RANK", rank)
    with pytest.raises(SystemExit) as e, devices.one_voice():
        raise SystemExit("error: x")
    assert e.value.code == code and slept == waits
    with pytest.raises(SystemExit) as e, devices.one_voice():
        raise SystemExit(3)  # a status, not a message: every process's own, at once
    assert e.value.code == 3 and slept == waits
    with devices.one_voice():
        pass
    assert slept == waits


def test_without_torchrun_a_process_is_rank_0_of_1_and_fsdp_gets_a_group_of_one(alone):
    assert devices.setup_distributed("cpu") == (0, 1, "cpu")
    assert not dist.is_initialized()
    try:
        assert devices.setup_distributed("cpu", "auto", group=True) == (0, 1, "cpu")
        assert dist.get_backend() == "gloo"  # auto on a CPU
    finally:
        dist.destroy_process_group()


def test_under_torchrun_a_process_joins_the_group_its_variables_describe(alone):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name, value in dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                            MASTER_PORT=str(port)).items():
        alone.setenv(name, value)
    try:
        assert devices.setup_distributed("cpu") == (0, 1, "cpu") and dist.is_initialized()
    finally:
        dist.destroy_process_group()


def test_the_process_of_a_run_has_its_device_dtype_context_and_micro_batches(alone):
    proc = devices.start("cpu", "bfloat16", "gloo", "ddp", 3)
    assert (proc.rank, proc.world, proc.device, proc.dtype, proc.accum) == \
        (0, 1, "cpu", "bfloat16", 3)
    assert isinstance(proc.ctx, torch.autocast) and proc.ctx.fast_dtype == torch.bfloat16 \
        and proc.master
    assert not dist.is_initialized()  # ddp alone: no group
    assert isinstance(devices.start("cpu", "auto", "gloo", "ddp", 1).ctx, nullcontext)
    try:
        proc = devices.start("cpu", "bfloat16", "gloo", "fsdp", 1)
        # fsdp shards over a group, of one here
        assert dist.is_initialized() and dist.get_world_size() == 1
    finally:
        dist.destroy_process_group()


def test_processes_leave_together_and_the_barrier_stays_referenced(alone):
    devices.setup_distributed("cpu", group=True)
    try:
        before = len(devices.FINAL_BARRIER)
        devices.leave_together()
        assert len(devices.FINAL_BARRIER) == before + 1 and devices.FINAL_BARRIER[-1].is_completed()
    finally:
        dist.destroy_process_group()
        devices.FINAL_BARRIER.clear()


def test_dtype_auto_is_bfloat16_on_cuda_only_and_float32_runs_without_autocast():
    assert [devices.pick_dtype("auto", d) for d in ("cuda", "cuda:1", "cpu", "mps")] == \
        ["bfloat16", "bfloat16", "float32", "float32"]
    assert devices.pick_dtype("float32", "cuda") == "float32" \
        and devices.pick_dtype("bfloat16", "cpu") == "bfloat16"
    assert isinstance(devices.autocast("cpu", "float32"), nullcontext)
    ctx = devices.autocast("cpu", "bfloat16")
    with ctx:
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16


def test_only_the_master_speaks(capsys):
    for rank in (0, 1):
        proc = devices.Process(rank, 2, "cpu", "float32", nullcontext(), 1)
        assert proc.master == (rank == 0)
        proc.say("hello", 2, sep="-", end="!\n")
    assert capsys.readouterr().out == "hello-2!\n"


def test_compile_none_compiles_on_cuda_only():
    for setting, device, compiled in ((None, "cuda:0", True), (None, "cpu", False),
                                      (True, "cpu", True), (False, "cuda", False)):
        assert train.compiles(types.SimpleNamespace(compile=setting), device) is compiled


def tiny():
    torch.manual_seed(0)
    return GPT(GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=32))


@pytest.mark.parametrize("checkpointing", [False, True])
def test_one_ddp_process_trains_the_model_itself_each_block_checkpointed_when_asked(checkpointing):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper
    model, x = tiny(), torch.arange(16).view(2, 8)
    loss = model(x, x)[1]
    cfg = types.SimpleNamespace(compile=None, parallel="ddp",
                                activation_checkpointing=checkpointing)
    train_model, eval_model = train.parallelize(model, cfg,
                                                devices.Process(0, 1, "cpu", "float32", None, 1))
    # no wrapper for one process, no compiling on a CPU by default
    assert train_model is eval_model is model
    assert [isinstance(b, CheckpointWrapper) for b in model.transformer.h] == [checkpointing] * 2
    assert torch.equal(train_model(x, x)[1], loss)  # each wrapper holds its block


def test_ddp_wraps_the_model_of_several_processes_and_evaluates_the_model_inside(alone):
    from torch.nn.parallel import DistributedDataParallel as DDP
    devices.setup_distributed("cpu", group=True)  # DDP needs a group; proc says 2 processes
    try:
        model = tiny()
        cfg = types.SimpleNamespace(compile=False, parallel="ddp", activation_checkpointing=False)
        train_model, eval_model = train.parallelize(
            model, cfg, devices.Process(0, 2, "cpu", "float32", None, 1))
        assert isinstance(train_model, DDP) and train_model.module is model and eval_model is model
        # CPU: no device ids
        assert train_model.device_ids is None and train_model.gradient_as_bucket_view
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fsdp_on_a_cpu_keeps_fp32_weights_whatever_the_dtype(alone, dtype):
    """bf16 weights gathered for the blocks are CUDA's only: CPU autocast computes in the weights'
    dtype."""
    devices.setup_distributed("cpu", group=True)
    try:
        model = tiny()
        cfg = types.SimpleNamespace(compile=False, parallel="fsdp", activation_checkpointing=False)
        train.parallelize(model, cfg, devices.Process(0, 1, "cpu", dtype, None, 1))
        assert [b._get_fsdp_state()._mp_policy.param_dtype for b in model.transformer.h] == \
            [None, None]
    finally:
        dist.destroy_process_group()


def test_compile_wraps_the_model_for_ddp_and_each_block_for_fsdp(alone):
    model = tiny()
    cfg = types.SimpleNamespace(compile=True, parallel="ddp", activation_checkpointing=False)
    train_model, eval_model = train.parallelize(model, cfg,
                                                devices.Process(0, 1, "cpu", "float32", None, 1))
    assert train_model is eval_model \
        and isinstance(train_model, torch._dynamo.eval_frame.OptimizedModule)
    assert train_model._orig_mod is model
    # one graph: the whole model's
    assert [b._compiled_call_impl for b in model.transformer.h] == [None, None]
    devices.setup_distributed("cpu", group=True)
    try:
        from torch.distributed.fsdp import FSDPModule
        for compiled in (True, False):
            model = tiny()
            cfg.parallel, cfg.compile = "fsdp", compiled
            train_model, eval_model = train.parallelize(
                model, cfg, devices.Process(0, 1, "cpu", "float32", None, 1))
            assert train_model is eval_model is model and isinstance(model, FSDPModule)
            assert [isinstance(b, FSDPModule) for b in model.transformer.h] == [True, True]
            assert [b._compiled_call_impl is not None for b in model.transformer.h] == \
                [compiled] * 2
    finally:
        dist.destroy_process_group()


def notices(err):
    """Signals' notices on stderr, a line each, as (the signal named, what it says happens):
    save (a checkpoint after this step) or stop (now, without a checkpoint)."""
    said = []
    for line in err.splitlines():
        assert "without a checkpoint" in line or "saving a checkpoint" in line, line
        said.append((line.split()[0].rstrip(":"), "stop" if "without" in line else "save"))
    return said


def test_signals_are_counted_and_the_handlers_from_before_come_back(capfd):
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    signals = train.Signals()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)  # two SIGINTs: still a stop after the step, not at once
        assert signals.received == [signal.SIGTERM, signal.SIGINT, signal.SIGINT]
    finally:
        signals.restore()
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    err = capfd.readouterr().err
    assert notices(err) == [("SIGTERM", "save"), ("SIGINT", "save"), ("SIGINT", "save")]
    # each tells what happens next, and the way out
    mentions(err.splitlines()[0], "saving a checkpoint after this step", "third SIGINT")


def test_the_third_sigint_stops_at_once_by_sigints_own_default(monkeypatch, capfd):
    """Called as the signals would call it: the third SIGINT (SIGTERMs between do not count) puts
    back SIGINT's default action and sends it again, which ends the process (here the kill is
    recorded instead)."""
    kills = []
    monkeypatch.setattr(os, "kill", lambda pid, signum: kills.append((pid, signum)))
    signals = train.Signals()

    def deliver(signum):  # as the interpreter does: a byte to the wakeup pipe, then the handler
        os.write(signals.pipe[1], bytes([signum]))
        signals.on_signal(signum, None)

    try:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGINT):
            deliver(signum)
        assert kills == [] and signal.getsignal(signal.SIGINT) == signals.on_signal
        deliver(signal.SIGINT)
        assert kills == [(os.getpid(), signal.SIGINT)] \
            and signal.getsignal(signal.SIGINT) == signal.SIG_DFL
    finally:
        signals.restore()
    assert notices(capfd.readouterr().err) == [
        ("SIGINT", "save"), ("SIGTERM", "save"), ("SIGINT", "save"), ("SIGINT", "stop"),
        ("SIGINT", "save")]


def test_three_sigints_that_land_within_one_step_are_three(monkeypatch, capfd):
    """Ctrl-C three times while a step computes: Python runs the handler once, after the step's C
    call, yet each SIGINT counts, and the third stops at once (here the kill is recorded
    instead)."""
    signals = train.Signals()
    kills = []
    monkeypatch.setattr(os, "kill", lambda pid, signum: kills.append(signum))
    main = threading.get_ident()

    def ctrl_c_three_times():
        for _ in range(3):
            signal.pthread_kill(main, signal.SIGINT)
            time.sleep(0.02)

    try:
        a = torch.randn(1200, 1200) / 40
        sender = threading.Thread(target=ctrl_c_three_times)
        sender.start()
        # one C call, the GIL released: the sender's signals land in it
        torch.linalg.matrix_power(a, 2**12)
        sender.join(timeout=60)
        torch.zeros(1).add_(1)  # back in Python: the handler runs
    finally:
        signals.restore()
    assert signals.received == [signal.SIGINT] * 3 and kills == [signal.SIGINT]
    assert capfd.readouterr().err.count("SIGINT three times: stopping now") == 1
