"""
A run's files in out_dir: its checkpoint, whole (ckpt.pt) or sharded (the link ckpt -> the folder ckpt-STEP/),
log.jsonl and config.json's provenance. train.py writes them; sample.py and eval.py take the trained model
from load_model, ablate.py reads the rest, none of them importing the trainer. This is the one place that
knows the two checkpoint formats.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_optimizer_state_dict,
                                                     get_state_dict, set_state_dict)

from data import atomic_write, first_line
from model import GPT, GPTConfig

warnings.filterwarnings("ignore", "torch.distributed is disabled")  # DCP read by one process: meant


def find_checkpoint(out_dir):
    """The checkpoint train.py left in out_dir, None if none: ckpt.pt (whole), or ckpt, a link to the folder
    ckpt-STEP of a sharded one. Both are there only after a crash while one replaced the other: the newer."""
    found = [p for p in (Path(out_dir) / "ckpt.pt", Path(out_dir) / "ckpt") if p.exists()]
    return max(found, key=lambda p: p.stat().st_mtime, default=None)


def read_checkpoint(path):
    """find_checkpoint's path as a dict: ckpt.pt's, its tensors mapped, not read (the processes of a node
    share one copy in the page cache), or a sharded checkpoint's run.json with its folder under 'sharded'."""
    if path.is_dir():
        return json.loads((path / "run.json").read_text()) | {"sharded": str(path.resolve())}
    return torch.load(path, map_location="cpu", mmap=True, weights_only=True)


def load_checkpoint(out_dir):
    """out_dir's checkpoint (read_checkpoint's dict) for init_from='resume', else a one-line error."""
    path = find_checkpoint(out_dir)
    if path is None:
        sys.exit(f"error: init_from='resume' but {out_dir} holds no checkpoint (ckpt.pt or ckpt/): "
                 "set out_dir, or train from scratch first")
    try:
        return read_checkpoint(path)
    except Exception as e:
        sys.exit(f"error: cannot load {path} ({type(e).__name__}): "
                 "delete it and train with init_from='scratch'")


def unprefixed(weights):
    """A whole checkpoint's model weights less torch.compile's and DDP's key prefixes (nanoGPT's have them)."""
    return {re.sub(r"^(_orig_mod\.|module\.)+", "", k): v for k, v in weights.items()}


def load_weights(model, ckpt):
    """Fill model's own tensors from ckpt (read_checkpoint's), strictly: every key must be there. Of a sharded
    checkpoint DCP reads, in this process, only the model's tensors: the optimizer state stays on disk."""
    if "sharded" in ckpt:
        dcp.load({"model": model.state_dict()}, checkpoint_id=ckpt["sharded"], no_dist=True)
    else:
        model.load_state_dict(unprefixed(ckpt["model"]))


def load_model(out_dir, device):
    """(model, meta): the model of out_dir's checkpoint, whole or sharded (saved by any number of processes),
    on device and in eval mode, less any vocabulary padding, and its dataset's metadata. For every reader of
    a trained run; a folder or checkpoint missing, unreadable or not fitting model.py is a one-line error."""
    if not os.path.isdir(out_dir):
        raise SystemExit(f"error: no folder {out_dir}; train a model into it first: "
                         f"python train.py --out_dir={out_dir}")
    path = find_checkpoint(out_dir)
    if path is None:
        raise SystemExit(f"error: no checkpoint in {out_dir} (ckpt.pt or ckpt/); "
                         "train.py writes one when it evaluates")
    try:
        ckpt = read_checkpoint(path)
    except Exception as e:
        raise SystemExit(f"error: {path} is not a readable checkpoint ({first_line(e)}); "
                         f"it may be truncated or from elsewhere: train again or copy it again")
    try:
        model = GPT(GPTConfig(**ckpt["model_args"])).to(device)
        load_weights(model, ckpt)
        meta = ckpt["meta"]
        vocab_size = meta["vocab_size"]
    except (Exception, dcp.CheckpointException) as e:  # DCP's exception is a BaseException
        raise SystemExit(f"error: {path} does not fit this model.py ({first_line(e)}); train it again")
    if vocab_size < model.config.vocab_size:  # e.g. GPT-2's 50257 padded to 50304: the padding ids have no
        model.lm_head.weight = nn.Parameter(model.lm_head.weight[:vocab_size])  # text, never sample them
    return model.eval(), meta


def start_token(meta):
    """The token a text without a prompt starts after: GPT-2's <|endoftext|>, else a character vocabulary's
    newline (its index in the sorted table); None when the vocabulary has neither."""
    if meta["eot_token"] is not None:
        return meta["eot_token"]
    return meta["chars"].index("\n") if "\n" in meta["chars"] else None


def restore(model, optimizer, ckpt, out_dir):
    """Load a checkpoint, whole or sharded, into the model and AdamW, whole or sharded: each process
    takes its own part of ckpt.pt's tensors, or DCP reads the parts it needs of a sharded one, saved by
    any number of processes. The moments of then, the hyperparameters of now (not the saved weight
    decay, betas, fused flag)."""
    now = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    state = ckpt
    try:
        if "sharded" in ckpt:  # this layout's state dicts, filled in place
            state = dict(zip(("model", "optimizer"), get_state_dict(model, optimizer)))
            dcp.load(state, checkpoint_id=ckpt["sharded"], no_dist=not dist.is_initialized())
        set_state_dict(model, optimizer, model_state_dict=unprefixed(state["model"]),
                       optim_state_dict=state["optimizer"],
                       options=StateDictOptions(full_state_dict="sharded" not in ckpt))
    except (Exception, dcp.CheckpointException) as e:  # a RuntimeError, KeyError, DCP's BaseException, ...
        sys.exit(f"error: the checkpoint in {out_dir} does not fit these settings ({first_line(e)}):"
                 " resume with the model settings it was trained with")
    for group, hyperparameters in zip(optimizer.param_groups, now):
        group.update(hyperparameters)


def save_checkpoint(out_dir, model, optimizer, fields, sharded, master):
    """Whole (ddp): the master torch.saves ckpt.pt to a temporary file, fsyncs and renames it; the optimizer
    state is keyed by parameter name, as fsdp's, so either kind resumes under the other. Sharded (fsdp):
    with torch.distributed.checkpoint every process writes its own shards into out_dir/ckpt-STEP/ (none
    gathers the whole state), the master adds run.json (fields) and points the link out_dir/ckpt at the
    folder by one atomic rename. A kill at any moment leaves a whole checkpoint, the old or the new; then
    the rest go."""
    if sharded:
        folder = out_dir / f"ckpt-{fields['iter_num']}"  # left by a save cut short? DCP overwrites it
        dcp.save(dict(zip(("model", "optimizer"), get_state_dict(model, optimizer))), checkpoint_id=folder)
        if master:  # every process's shards and DCP's .metadata, written last, are in the folder
            (folder / "run.json").write_text(json.dumps(fields))
            (out_dir / "ckpt.tmp").unlink(missing_ok=True)
            (out_dir / "ckpt.tmp").symlink_to(folder.name)  # relative: out_dir can move
            os.replace(out_dir / "ckpt.tmp", out_dir / "ckpt")
            remove_checkpoints(out_dir, keep={"ckpt", folder.name})
    elif master:
        tmp, optimizer_state = out_dir / "ckpt.pt.tmp", get_optimizer_state_dict(model, optimizer)
        with open(tmp, "wb") as f:
            torch.save(dict(model=model.state_dict(), optimizer=optimizer_state, **fields), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out_dir / "ckpt.pt")
        remove_checkpoints(out_dir, keep={"ckpt.pt"})


def remove_checkpoints(out_dir, keep):
    """Delete out_dir's checkpoints not named in keep: ckpt.pt, the link ckpt, then the folders ckpt-STEP (a
    link never points at a half-deleted folder). Until then a reader takes the newer (find_checkpoint)."""
    for path in [out_dir / "ckpt.pt", out_dir / "ckpt", *sorted(out_dir.glob("ckpt-*"))]:
        if path.name not in keep and (path.is_symlink() or path.exists()):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def read_events(path):
    """The events of a run's log.jsonl (none if it is missing), less a line cut short by a crash."""
    events = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            events.append(json.loads(line))
        except ValueError:
            pass
    return events


def trim_log(path, step):
    """Keep the events up to step, the checkpoint's (none from scratch), and no old 'end': no step twice.
    Rewritten atomically: a kill -9 midway leaves the old log whole."""
    keep = [e for e in read_events(path) if e["event"] != "end" and e["iter"] <= step]
    atomic_write(path, "".join(json.dumps(e) + "\n" for e in keep).encode())


def provenance():
    """The code's git revision and the library versions, for config.json."""
    try:
        git = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=Path(__file__).parent,
                             capture_output=True, text=True).stdout.strip()
    except OSError:  # no git
        git = ""
    return dict(git=git or None, python=sys.version.split()[0], torch=torch.__version__, numpy=np.__version__,
                cuda=torch.version.cuda)
