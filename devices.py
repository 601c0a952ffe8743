"""The process a script runs in: its device and dtype, its place among torchrun's processes, and
torch.compile's cache mended after a stop. (How train.py spreads its model over the processes, DDP
or FSDP2, is its parallelize.)"""
import dataclasses
import os
import sys
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch

from data import first_line

# the dtype setting's choices; auto: bfloat16 on CUDA, else float32
DTYPES = ("auto", "float32", "bfloat16")


def pick_device(device):
    """The device setting ('auto': cuda when available), checked to be usable here. Under torchrun a
    GPU is this process's own, cuda:LOCAL_RANK."""
    device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    if device.startswith("cuda") and "LOCAL_RANK" in os.environ:
        device = f"cuda:{os.environ['LOCAL_RANK']}"
    try:
        torch.empty(0, device=device)
    except Exception as e:
        # torch's reason, cut: an unknown device's lists every backend torch knows
        reason = first_line(e)[:120]
        sys.exit(f"error: device {device!r} is not usable here ({reason}): choose device='cpu' "
                 "or 'auto'")
    if torch.device(device).type == "meta":  # shapes without numbers: nothing to train or time
        sys.exit("error: device 'meta' holds shapes and no numbers, so nothing runs on it: "
                 "choose device='cpu' or 'auto'")
    return device


def planned_world():
    """How many processes run: torchrun's WORLD_SIZE (ablate.py sets it for train.py's dry run too),
    else 1."""
    world = os.environ.get("WORLD_SIZE", "1")
    if not world.isdigit() or int(world) < 1:
        sys.exit(f"error: WORLD_SIZE={world!r} in the environment is no count of processes: "
                 "unset it, or launch with torchrun, which sets it")
    return int(world)


def check_launch(device, backend, parallel):
    """The device setting made usable (pick_device), checked with the backend and parallel settings
    before any process group is made: a combination that cannot run is a one-line error."""
    device = pick_device(device)
    kind = torch.device(device).type
    if backend == "nccl" and not (kind == "cuda" and torch.distributed.is_nccl_available()):
        sys.exit(f"error: backend='nccl' runs on CUDA GPUs only, and device is {device!r}: "
                 "use backend='gloo', or 'auto' (nccl on CUDA, gloo on CPU)")
    if (parallel == "fsdp" or planned_world() > 1) and kind not in ("cuda", "cpu"):
        what = "parallel='fsdp'" if parallel == "fsdp" else "torchrun's processes"
        sys.exit(f"error: {what} needs device cuda or cpu, not {device!r}: choose one of those")
    return device


@contextmanager
def one_voice(grace_s=10.0):
    """Under torchrun every process makes the same checks and fails alike: process 0 alone prints
    the one-line error, and every process exits with status 1. The others first wait grace_s
    seconds: torchrun stops every process once one has exited, and one that exits before process 0
    has printed would cut the line off (on a loaded machine process 0 can be seconds behind). One
    still running after the wait failed where process 0 did not (a file missing on its node only):
    it says its own line, naming itself."""
    try:
        yield
    except SystemExit as e:
        rank = os.environ.get("RANK", "0")
        if isinstance(e.code, str) and rank != "0":
            time.sleep(grace_s)
            raise SystemExit(f"error: process {rank}: {e.code.removeprefix('error: ')}") from None
        raise


def setup_distributed(device, backend="auto", group=False):
    """(rank, world size, device) from torchrun's environment when it is set, else (0, 1, device):
    the device setting made usable, a GPU being this process's own; backend 'auto' is nccl on CUDA,
    gloo on CPU. group: a process group even without torchrun, of this one process (FSDP shards over
    a group)."""
    device = pick_device(device)
    if "RANK" not in os.environ and not group:
        return 0, 1, device
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    auto = "nccl" if device.startswith("cuda") else "gloo"
    alone = ({} if "RANK" in os.environ
             else dict(store=torch.distributed.HashStore(), rank=0, world_size=1))
    torch.distributed.init_process_group(auto if backend == "auto" else backend, **alone)
    return torch.distributed.get_rank(), torch.distributed.get_world_size(), device


FINAL_BARRIER = []  # the work of leave_together's barrier, referenced until the process exits


def leave_together():
    """Wait for every process (one gone while the master still writes can abort the others). The
    barrier's work stays referenced to the end: were gloo's thread to drop it last, freeing it (and
    the collectives it waited for) would take the GIL, which the process group's destructor holds
    while it joins that thread, when DDP is freed at main's return: a hang at exit, once in about 20
    runs."""
    FINAL_BARRIER.append(torch.distributed.barrier(async_op=True))
    FINAL_BARRIER[-1].wait()


def start(device, dtype, backend, parallel, accum):
    """This process, from train.py's checked device, dtype, backend, parallel and micro-batches per
    step: its rank among torchrun's (a process group of its own for fsdp), device, dtype, autocast
    context."""
    rank, world, device = setup_distributed(device, backend, group=parallel == "fsdp")
    if device.startswith("cuda"):
        torch.set_float32_matmul_precision("high")  # TF32 matmuls
    dtype = pick_dtype(dtype, device)
    return Process(rank, world, device, dtype, autocast(device, dtype), accum)


def pick_dtype(dtype, device):
    """The dtype setting: 'auto' is bfloat16 on CUDA, float32 elsewhere."""
    return ("bfloat16" if device.startswith("cuda") else "float32") if dtype == "auto" else dtype


def autocast(device, dtype):
    """The context a forward pass runs in: bf16 autocast, or nothing for float32."""
    return (torch.autocast(torch.device(device).type, torch.bfloat16) if dtype == "bfloat16"
            else nullcontext())


@dataclasses.dataclass(frozen=True)
class Process:
    """This process's facts: its rank among world processes, its device and dtype, the context its
    forward passes run in (autocast) and its micro-batches per step."""
    rank: int
    world: int
    device: str
    dtype: str
    ctx: object
    accum: int

    @property
    def master(self):  # the process that prints, logs and writes what only one process writes
        return self.rank == 0

    def say(self, *args, **kwargs):
        """print, in the master process only."""
        if self.master:
            print(*args, **kwargs)


def repair_compile_cache():
    """Delete the compiled kernels in torch's inductor cache that a compiler stopped mid-write left
    cut short: a Ctrl-C or a scheduler's SIGTERM reaches the whole process group, g++ too, and torch
    would load such a file, and fail, in every later run that compiles the same graph. Returns their
    paths."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    removed = []
    for path in Path(cache_dir()).rglob("*.so"):
        if not whole_elf(path):
            path.unlink(missing_ok=True)  # another process of the launch may have removed it first
            removed.append(path)
            print(f"notice: removed {path} from torch's compile cache: cut short (a compiler "
                  "stopped while writing it); it is compiled again", file=sys.stderr)
    return removed


def whole_elf(path):
    """Whether path holds a whole ELF file: its header, and its section headers (written last) in
    it."""
    try:
        with open(path, "rb") as f:
            header = f.read(64)
        size = os.path.getsize(path)
    except OSError:  # gone meanwhile
        return True
    if len(header) < 64 or header[:4] != b"\x7fELF":
        return False
    endian = "little" if header[5] == 1 else "big"
    wide = header[4] == 2  # ELF64; else ELF32, whose fields sit elsewhere
    at = (0x28, 8, 0x3A, 0x3C) if wide else (0x20, 4, 0x2E, 0x30)
    section_headers = int.from_bytes(header[at[0]:at[0] + at[1]], endian)
    entry, count = (int.from_bytes(header[i:i + 2], endian) for i in at[2:])
    return size >= section_headers + entry * count
