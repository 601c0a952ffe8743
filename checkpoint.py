"""
A run's checkpoint in out_dir, whole (ckpt.pt) or sharded (the link ckpt -> the folder ckpt-STEP/):
saving it, checking it, restoring a run from it, and the checks a resume makes against it. train.py
writes it; sample.py and eval.py take the trained model from load_model, none of them importing the
trainer. This is the one place that knows the two checkpoint formats (logbook.py holds the run's
config.json and log.jsonl).

Every save records the crc32 of each file of the checkpoint (ckpt.pt.crc32.json beside ckpt.pt,
checksums.json in a sharded folder) and every read checks them first: a file missing, cut short or
with one byte flipped is a one-line error naming it, never a model that trains or samples on
garbage.
"""
import dataclasses
import json
import os
import pickle
import re
import shutil
import sys
import time
import warnings
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn

from data import first_line, tokenizer_error, write_json
from logbook import read_events
from model import GPT, GPTConfig

warnings.filterwarnings("ignore", "torch.distributed is disabled")  # DCP read by one process: meant
# bytes per crc32: a pool of threads sums a file's chunks at once (zlib frees the GIL)
CHUNK = 64 * 2**20
SHARDED_SUMS = "checksums.json"  # a sharded checkpoint's checksums, in its folder
# the model settings a resume may set anew: they change the training, not the model
MAY_CHANGE = ("dropout",)


# each written whole, through NAME.tmp
RUN_FILES = ("config.json", "log.jsonl", "ckpt.pt", "ckpt.pt.crc32.json")


def check_run_files(out_dir, names=RUN_FILES):
    """Each of the files a run writes in out_dir (names), and NAME.tmp it is written through, is a
    file or absent: a folder by such a name would stop the run at its first write, after it trained.
    One line, before anything is written."""
    for name in names:
        for path in (Path(out_dir) / name, Path(out_dir) / f"{name}.tmp"):
            if (path.exists() or path.is_symlink()) and not path.is_file():
                sys.exit(f"error: {path} is not a file, and the run writes a file there: move it "
                         f"out of {out_dir}, or choose another out_dir")


def find_checkpoint(out_dir):
    """The checkpoint train.py left in out_dir, None if none: ckpt.pt (whole), or ckpt, a link to
    the folder ckpt-STEP of a sharded one. Both are there only after a crash while one replaced the
    other: the newer. A link whose folder is gone is a one-line error (train.py deletes a link
    before its folder)."""
    link = Path(out_dir) / "ckpt"
    if link.is_symlink() and not link.exists():
        sys.exit(f"error: {link} is a dangling link: the folder it points at, {os.readlink(link)}, "
                 "is gone; put the folder back, or delete the link")
    found = [p for p in (Path(out_dir) / "ckpt.pt", link) if p.exists()]
    return max(found, key=lambda p: p.stat().st_mtime, default=None)


def sums_path(path):
    """Where the checksums of checkpoint path (ckpt.pt, or a sharded folder) are recorded."""
    return path / SHARDED_SUMS if path.is_dir() else path.with_name(path.name + ".crc32.json")


def checksums(paths):
    """{path's name: {bytes, crc32: a crc32 per CHUNK}} of each file in paths, summed by a pool of
    threads."""
    def crc(job):
        with open(job[0], "rb") as f:
            f.seek(job[1])
            return zlib.crc32(f.read(CHUNK))

    sizes = {path: path.stat().st_size for path in paths}
    jobs = [(path, at) for path, size in sizes.items() for at in range(0, max(size, 1), CHUNK)]
    with ThreadPoolExecutor(min(32, os.cpu_count() or 1)) as pool:
        sums = list(pool.map(crc, jobs))
    return {path.name: dict(bytes=size, crc32=[s for (p, _), s in zip(jobs, sums) if p == path])
            for path, size in sizes.items()}


def verify(path):
    """Check checkpoint path (ckpt.pt, or a sharded folder) against the checksums its save recorded:
    each file there, as long as it was, and the same bytes; else a one-line error naming the file.
    ckpt.pt may still be the file its save replaced (a kill between the record and the rename),
    recorded as 'previous'. Returns False for a checkpoint with no record (an older normgpt's), True
    when checked."""
    record_path, fix = sums_path(path), "copy it again, or delete the checkpoint and train again"
    if not record_path.exists():
        return False
    try:
        record = json.loads(record_path.read_text())
        saved = {name: [entry, record.get("previous", {}).get(name)]
                 for name, entry in record["files"].items()}
        sizes = {name: [entry["bytes"] for entry in entries if entry is not None]
                 for name, entries in saved.items()}
    except (ValueError, KeyError, AttributeError, TypeError) as e:  # not JSON, or not its shape
        sys.exit(f"error: {record_path} is not a checksum record ({first_line(e)}): {fix}")
    files = {name: (path if name == path.name else path / name) for name in saved}
    # sizes first: a missing or cut file is named before anything is read
    for name, file in files.items():
        if not file.exists():
            sys.exit(f"error: {file} is missing from the checkpoint ({record_path.name} lists it): "
                     f"{fix}")
        if file.stat().st_size not in sizes[name]:
            sys.exit(f"error: {file} has {file.stat().st_size} bytes, {sizes[name][0]} when saved: "
                     f"it is cut short or damaged; {fix}")
    for name, now in checksums(list(files.values())).items():
        if now not in saved[name]:
            sys.exit(f"error: {files[name]} is damaged: its checksum differs from the one recorded "
                     f"at its save ({record_path.name}); {fix}")
    return True


def read_checkpoint(path, check=True, notices=None):
    """find_checkpoint's path as a dict, after verify (check=False: another process checks it):
    ckpt.pt's, its tensors mapped, not read (the processes of a node share one copy in the page
    cache), or a sharded checkpoint's run.json with its folder under 'sharded'. One without
    checksums (an older normgpt's) loads with a one-line notice, once it has loaded (or into the
    list notices, for a caller that checks more first): one that does not, or that is not
    train.py's (no model_args), is its caller's one line, its error."""
    unchecked = check and not verify(path)
    if path.is_dir():
        ckpt = json.loads((path / "run.json").read_text()) | {"sharded": str(path.resolve())}
    else:
        ckpt = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    # a file that is not train.py's gets its caller's one line alone
    if unchecked and isinstance(ckpt, dict) and "model_args" in ckpt:
        notice = (f"notice: {path} has no checksums ({sums_path(path).name}): saved by an older "
                  "normgpt, so loaded unchecked")
        if notices is None:
            print(notice, file=sys.stderr)
        else:
            notices.append(notice)
    return ckpt


def load_checkpoint(out_dir, check=True):
    """out_dir's checkpoint (read_checkpoint's dict) for init_from='resume', else a one-line
    error."""
    path = find_checkpoint(out_dir)
    if path is None:
        sys.exit(f"error: init_from='resume' but {out_dir} holds no checkpoint (ckpt.pt or ckpt/): "
                 "set out_dir, or train from scratch first")
    try:
        ckpt = read_checkpoint(path, check)
    except Exception as e:
        sys.exit(f"error: cannot read {path} ({first_line(e)}): it is damaged, or not train.py's; "
                 "copy it again, or delete it and train with init_from='scratch'")
    if missing := [k for k in ("config", "model_args", "iter_num", "best_val_loss")
                   if k not in ckpt]:
        sys.exit(f"error: {path} is not train.py's checkpoint (no {', '.join(missing)}): to "
                 "fine-tune other weights, load them in your own script; or delete it and train "
                 "with init_from='scratch'")
    return ckpt


def check_resume(ckpt, given, cfg):
    """A resume goes on with the checkpoint's model and has work left: a model setting given other
    than the checkpoint's (but those in MAY_CHANGE), or no step to train nor evaluation or end to
    record, is a one-line error."""
    where, model_args = f"the checkpoint in {cfg.out_dir}", ckpt["model_args"]
    for name, value in given.items():
        if name in model_args and name not in MAY_CHANGE and value != model_args[name]:
            if name == "tie_embeddings" and value == GPTConfig(**model_args).tied:
                continue  # None meant the family's choice: the same head
            sys.exit(f"error: {name}={value!r}, but {where} has {name}={model_args[name]!r}: a "
                     f"resume goes on with the checkpoint's model; drop --{name}, or train a new "
                     "one in another out_dir")
    step, events = ckpt["iter_num"], read_events(Path(cfg.out_dir) / "log.jsonl")[-1:]
    # else the resume ends it
    ended = ckpt.get("evaluated", True) and [e["event"] for e in events] == ["end"]
    if cfg.max_iters < step or (cfg.max_iters == step and ended):
        sys.exit(f"error: nothing to train: {where} is at step {step} already, and "
                 f"max_iters={cfg.max_iters}: give a max_iters above {step} to go on")


def check_data(ckpt, cfg, meta):
    """A resume reads the data the checkpoint's model trained on, as it learned its tokens: a
    dataset with another vocabulary, or other shards (their sha256 in meta.json: the same name
    prepared again from other text), is a one-line error naming both datasets."""
    if "meta" not in ckpt:  # an older normgpt's checkpoint: nothing to compare
        return
    old, was = ckpt["config"].get("dataset"), ckpt["meta"]
    fix = (f"resume with --dataset={old}" if old != cfg.dataset else
           # the same name, prepared again since
           f"restore the {old} it trained on, or train anew in another out_dir")
    vocabulary = lambda m: {k: m.get(k) for k in ("tokenizer", "vocab_size", "eot_token", "chars")}
    if vocabulary(was) != vocabulary(meta):
        sys.exit(f"error: the checkpoint in {cfg.out_dir} was trained on {old} "
                 f"({was['tokenizer']}, {was['vocab_size']} tokens), but {cfg.dataset} has another "
                 f"vocabulary ({meta['tokenizer']}, {meta['vocab_size']} tokens): its token ids "
                 f"would mean other text; {fix}")
    if "shards" in was and shard_digests(was) != shard_digests(meta):
        sys.exit(f"error: the checkpoint in {cfg.out_dir} was trained on other data than "
                 f"{cfg.dataset} holds now (its shards' sha256 in meta.json differ from those "
                 f"{old} had): the run would go on on other text; {fix}")


def shard_digests(meta):
    """Each shard of meta.json as (file, sha256), train then val: the data a run reads, named by
    content."""
    return [(s.get("file"), s.get("sha256"))
            for split in ("train", "val") for s in meta["shards"][split]]


def dcp():
    """torch.distributed.checkpoint, imported where it is used: DTensor's machinery behind it costs
    a second, at every start of every script if imported at the top, and most starts never touch a
    sharded checkpoint. (An `except` names its exception only when one is raised.)"""
    import torch.distributed.checkpoint
    return torch.distributed.checkpoint


def unprefixed(weights):
    """A whole checkpoint's model weights less torch.compile's and DDP's key prefixes (nanoGPT's
    have them)."""
    return {re.sub(r"^(_orig_mod\.|module\.)+", "", k): v for k, v in weights.items()}


def load_weights(model, ckpt):
    """Fill model's own tensors from ckpt (read_checkpoint's), strictly: every key must be there. Of
    a sharded checkpoint DCP reads, in this process, only the model's tensors: the optimizer state
    stays on disk."""
    if "sharded" in ckpt:
        dcp().load({"model": model.state_dict()}, checkpoint_id=ckpt["sharded"], no_dist=True)
    else:
        model.load_state_dict(unprefixed(ckpt["model"]))


def load_model(out_dir, device):
    """(model, meta): the model of out_dir's checkpoint, whole or sharded (saved by any number of
    processes), on device and in eval mode, less any vocabulary padding, and its dataset's metadata.
    For every reader of a trained run; a folder or checkpoint missing, unreadable or not fitting
    model.py is a one-line error."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise SystemExit(f"error: {out_dir} is a file, not a run's folder: give the out_dir "
                         "train.py wrote")
    if not os.path.isdir(out_dir):
        raise SystemExit(f"error: no folder {out_dir}; train a model into it first: "
                         f"python train.py --out_dir={out_dir}")
    path = find_checkpoint(out_dir)
    if path is None:
        raise SystemExit(f"error: no checkpoint in {out_dir} (ckpt.pt or ckpt/); "
                         "train.py writes one when it evaluates")
    notices = []
    try:
        # verified first: a file missing or damaged is named
        ckpt = read_checkpoint(path, notices=notices)
    except Exception as e:
        raise SystemExit(f"error: {path} is not a readable checkpoint ({first_line(e)}); "
                         f"it may be truncated or from elsewhere: train again or copy it again")
    try:
        model = GPT(GPTConfig(**ckpt["model_args"])).to(device)
        load_weights(model, ckpt)
        meta = ckpt["meta"]
        vocab_size = meta["vocab_size"]
        # what a reader would otherwise score or sample silently, with the checks below: an edited
        # file (one with checksums fails their check first), never what train.py saves
        why = tokenizer_error(meta)
    except (Exception, dcp().CheckpointException) as e:  # DCP's exception is a BaseException
        raise SystemExit(why_not(e, path, "train it again"))
    if not why and vocab_size > model.config.vocab_size:
        why = f"a vocabulary of {vocab_size} for a model of {model.config.vocab_size} tokens"
    # train.py keeps no diverged state
    if not why and (bad := next((name for name, t in model.state_dict().items()
                                 if t.is_floating_point() and not t.isfinite().all()), None)):
        why = f"{bad} holds NaN or inf"
    if why:
        raise SystemExit(f"error: {path} is not a checkpoint train.py saved ({why}): train it "
                         "again, or copy it again")
    # e.g. GPT-2's 50257 padded to 50304: the padding ids have no text, never sample them
    if vocab_size < model.config.vocab_size:
        model.lm_head.weight = nn.Parameter(model.lm_head.weight[:vocab_size])
    for notice in notices:  # after every check: a failed one is its one line alone
        print(notice, file=sys.stderr)
    return model.eval(), meta


def cause(e):
    """A failed load's error; DCP's, its first failing rank's (its own names only the ranks)."""
    return next(iter(e.failures.values()))[0] if isinstance(e, dcp().CheckpointException) else e


def why_not(e, path, fix):
    """A failed load of the checkpoint at path as one line, with its fix: a file that cannot be read
    to its end is damaged (copy it again); anything else is a model that the checkpoint does not fit
    (fix)."""
    e = cause(e)
    unreadable = isinstance(e, (EOFError, OSError, pickle.UnpicklingError, zipfile.BadZipFile))
    # torch's zip reader: a file cut short or damaged
    if unreadable or "PytorchStreamReader" in str(e):
        return (f"error: {path} is damaged ({first_line(e)}): copy it again, or delete it and "
                "train anew")
    return f"error: {path} does not fit this model.py ({first_line(e)}): {fix}"


def restore(model, optimizer, ckpt, out_dir):
    """Load a checkpoint, whole or sharded, into the model and AdamW, whole or sharded: each process
    takes its own part of ckpt.pt's tensors, or DCP reads the parts it needs of a sharded one, saved
    by any number of processes. The moments of then, the hyperparameters of now (not the saved
    weight decay, betas, fused flag)."""
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_state_dict,
                                                         set_state_dict)
    now = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    state = ckpt
    try:
        if "sharded" in ckpt:  # this layout's state dicts, filled in place
            state = dict(zip(("model", "optimizer"), get_state_dict(model, optimizer)))
            dcp().load(state, checkpoint_id=ckpt["sharded"], no_dist=not dist.is_initialized())
        set_state_dict(model, optimizer, model_state_dict=unprefixed(state["model"]),
                       optim_state_dict=state["optimizer"],
                       options=StateDictOptions(full_state_dict="sharded" not in ckpt))
    # a RuntimeError, KeyError, DCP's BaseException, ...
    except (Exception, dcp().CheckpointException) as e:
        # train.py has checked the model settings: what is left is damage, or a model.py
        # edited since
        fix = "resume with the model.py and model settings it was trained with"
        sys.exit(why_not(e, f"the checkpoint in {out_dir}", fix))
    for group, hyperparameters in zip(optimizer.param_groups, now):
        group.update(hyperparameters)


def save_run(cfg, proc, raw_model, optimizer, meta, run):
    """train.py's checkpoint of run's step, from every process (fsdp's save is a collective)."""
    t0 = time.time()
    fields = dict(model_args=dataclasses.asdict(raw_model.config), iter_num=run.step,
                  evaluated=run.evaluated == run.step, best_val_loss=run.best_val,
                  config=vars(cfg), meta=meta)
    save_checkpoint(Path(cfg.out_dir), raw_model, optimizer, fields, cfg.parallel == "fsdp",
                    proc.master)
    run.saved = run.step
    proc.say(f"checkpoint of step {run.step} saved in {time.time() - t0:.1f} s", flush=True)


def save_checkpoint(out_dir, model, optimizer, fields, sharded, master):
    """Whole (ddp): the master torch.saves ckpt.pt to a temporary file, fsyncs it, records its
    checksums, then renames it; the optimizer state is keyed by parameter name, as fsdp's, so either
    kind resumes under the other. Sharded (fsdp): with torch.distributed.checkpoint every process
    writes its own shards into out_dir/ckpt-STEP/ (none gathers the whole state), the master adds
    run.json and the checksums of every file and points the link out_dir/ckpt at the folder by one
    atomic rename. A kill at any moment leaves a whole checkpoint, the old or the new, with its
    checksums; then the rest go."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, get_state_dict
    if sharded:
        # left by a save cut short? DCP overwrites it
        folder = out_dir / f"ckpt-{fields['iter_num']}"
        dcp().save(dict(zip(("model", "optimizer"), get_state_dict(model, optimizer))),
                   checkpoint_id=folder)
        if master:  # every process's shards and DCP's .metadata, written last, are in the folder
            (folder / "run.json").write_text(json.dumps(fields))
            files = sorted(p for p in folder.iterdir() if p.name != SHARDED_SUMS)
            write_json(folder / SHARDED_SUMS, dict(files=checksums(files)))
            (out_dir / "ckpt.tmp").unlink(missing_ok=True)
            (out_dir / "ckpt.tmp").symlink_to(folder.name)  # relative: out_dir can move
            os.replace(out_dir / "ckpt.tmp", out_dir / "ckpt")
            remove_checkpoints(out_dir, keep={"ckpt", folder.name})
    elif master:
        path, optimizer_state = out_dir / "ckpt.pt", get_optimizer_state_dict(model, optimizer)
        tmp = out_dir / "ckpt.pt.tmp"
        with open(tmp, "wb") as f:
            torch.save(dict(model=model.state_dict(), optimizer=optimizer_state, **fields), f)
            f.flush()
            os.fsync(f.fileno())
        record = dict(files={path.name: checksums([tmp])[tmp.name]})
        # until the rename, ckpt.pt is still the old file
        if path.exists() and sums_path(path).exists():
            record["previous"] = json.loads(sums_path(path).read_text())["files"]
        write_json(sums_path(path), record)
        os.replace(tmp, path)
        remove_checkpoints(out_dir, keep={path.name, sums_path(path).name})


def remove_checkpoints(out_dir, keep):
    """Delete out_dir's checkpoints not named in keep: ckpt.pt and its checksums, the link ckpt,
    then the folders ckpt-STEP (a link never points at a half-deleted folder). Until then a reader
    takes the newer (find_checkpoint)."""
    whole = out_dir / "ckpt.pt"
    folders = sorted(p for p in out_dir.glob("ckpt-*")
                     if re.fullmatch(r"ckpt-\d+", p.name) and p.is_dir()
                     and not p.is_symlink())  # ckpt-notes.txt, a link: the user's, not a save's
    for path in [whole, sums_path(whole), out_dir / "ckpt", *folders]:
        if path.name not in keep and (path.is_symlink() or path.exists()):
            shutil.rmtree(path) if path in folders else path.unlink()
