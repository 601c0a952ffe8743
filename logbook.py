"""A run's record in out_dir, written and read back: config.json (the settings as run, and the
code's version) and log.jsonl (one event a line: train, eval, layer_stats, end). train.py writes
them through Log; checkpoint.py, ablate.py and results.py read them back (read_events, read_log).
While train.py or ablate.py writes in a folder, it holds the folder (claim): a second run there is
a one-line error, not two runs writing one log.
"""
import contextlib
import fcntl
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from data import atomic_write, first_line, write_json


# ---------------------------------------------------------------------------------- the writer

class Log:
    """The run's record in out_dir, config.json and log.jsonl (and wandb when asked for), kept by
    the master process (another process's Log records nothing).

    A new run opens it at once; a resume only when it has something new to keep, just before its
    first checkpoint, or at its end (open), holding its records until then: a resume that fails
    before leaves both files as they were (and one that dies in the save leaves a log ahead, which
    the next resume trims). Opening trims log.jsonl to the step resumed from (a new run's is
    emptied): no step is logged twice."""

    def __init__(self, cfg, resumed_at, master):
        self.cfg = cfg
        self.resumed_at = resumed_at
        self.master = master
        self.file = None
        self.wandb = None
        self.held = []  # a resume's records before it opens
        if master and resumed_at is None:
            self.open()

    def open(self):
        """Write config.json, trim log.jsonl and write the records held so far (once; later
        calls: nothing)."""
        if self.file or not self.master:
            return
        out_dir = Path(self.cfg.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        # a new folder is held from its making on (a run started beside this one finds it held)
        take(out_dir)
        write_json(out_dir / "config.json", dict(config=vars(self.cfg), **provenance()))
        trim_log(out_dir / "log.jsonl", -1 if self.resumed_at is None else self.resumed_at)
        if self.cfg.wandb_log:
            try:
                import wandb
                wandb.init(project=self.cfg.wandb_project, name=self.cfg.wandb_run_name,
                           config=vars(self.cfg))
                self.wandb = wandb
            except ImportError:
                print("wandb_log=True but wandb is not installed: logging to log.jsonl only")
        self.file = open(out_dir / "log.jsonl", "a")
        for event, fields in self.held:
            self.write(event, fields)
        self.held = []

    def record(self, event, **fields):
        """A line of log.jsonl (and of wandb's log); a resume's end opens the record, whatever it
        ends with."""
        if not self.master:
            return
        if event == "end":
            self.open()
        if self.file:
            self.write(event, fields)
        else:
            self.held.append((event, fields))

    def write(self, event, fields):
        self.file.write(json.dumps(dict(event=event, **fields)) + "\n")
        self.file.flush()
        if self.wandb:
            self.wandb.log(fields, step=fields["iter"])

    def close(self):
        if self.file:
            self.file.close()


def provenance():
    """The code's git revision and the library versions, for config.json."""
    try:
        git = subprocess.run(["git", "describe", "--always", "--dirty"],
                             cwd=Path(__file__).parent, capture_output=True, text=True)
        git = git.stdout.strip()
    except OSError:  # no git
        git = ""
    return dict(git=git or None, python=sys.version.split()[0], torch=torch.__version__,
                numpy=np.__version__, cuda=torch.version.cuda)


def trim_log(path, step):
    """Keep the events up to step, the checkpoint's (none from scratch), and no old 'end': no step
    twice. Rewritten atomically: a kill -9 midway leaves the old log whole."""
    keep = [e for e in read_events(path) if e["event"] != "end" and e["iter"] <= step]
    atomic_write(path, "".join(json.dumps(e) + "\n" for e in keep).encode())


# ---------------------------------------------------------------------------------- the claim

# each folder this process holds: its open descriptor, locked with flock. The kernel drops the lock
# when the descriptor closes or the process ends, kill -9 included: no stale lock to clear by hand.
HELD = {}


def take(folder):
    """Hold folder for this process (held already, or not made yet: nothing to do); another
    process holding it is a one-line error."""
    key = Path(folder).resolve()
    if key in HELD or not key.is_dir():
        return
    descriptor = os.open(key, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        sys.exit(f"error: {folder} is held by another train.py or ablate.py still running there: "
                 "wait for it to end, or choose another out_dir")
    except OSError:  # a file system without locks (some network mounts): the run goes on unheld
        os.close(descriptor)
        return
    HELD[key] = descriptor


@contextlib.contextmanager
def claim(folder, make=False):
    """Hold folder while the block runs: at once if it exists (make: made now), else from when
    Log makes it; let go at the end, however the block ends."""
    if make:
        Path(folder).mkdir(parents=True, exist_ok=True)
    take(folder)
    try:
        yield
    finally:
        descriptor = HELD.pop(Path(folder).resolve(), None)
        if descriptor is not None:
            os.close(descriptor)


# ---------------------------------------------------------------------------------- the readers

# how every line Log.write writes begins: json.dumps of a dict whose first key is "event"
RECORD_START = json.dumps({"event": ""})[:-2]


def read_events(path):
    """The events of a run's log.jsonl (none if it is missing), less its last line when a crash cut
    it short. A file that is not a run's log (a folder, a line that is not a record, text) is a
    one-line error."""
    try:
        lines = path.read_text().splitlines() if path.exists() else []
    except (OSError, UnicodeDecodeError) as e:
        sys.exit(f"error: cannot read {path} ({first_line(e)}): "
                 "move it away, or choose another out_dir")
    events = []
    for number, line in enumerate(lines, 1):
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        # the last line cut short by a crash as Log.write wrote it: the start of a record
        cut = (event is None and number == len(lines)
               and RECORD_START.startswith(line[:len(RECORD_START)]))
        if cut:
            continue
        is_record = (isinstance(event, dict) and isinstance(event.get("event"), str)
                     and "iter" in event)
        if not is_record:
            sys.exit(f"error: {path}, line {number}, is not a log record ({line[:40]!r}): "
                     "the file is not train.py's log; move it away, or choose another out_dir")
        events.append(event)
    return events


def read_log(folder):
    """A run's status, eval curve, layer stats and results, from its log.jsonl.

    Status: finished, diverged (a non-finite loss, in training or at the last evaluation),
    interrupted, failed (no end line: crashed), or not run (neither log.jsonl nor train.log: a run
    of a sweep not reached yet). Results come from the events, not the end line: after a resume
    that line covers only the resumed part."""
    events = read_events(folder / "log.jsonl")
    end = events[-1] if events and events[-1]["event"] == "end" else None
    evals = [(e["iter"], e["val_loss"]) for e in events if e["event"] == "eval"]
    # None: an untimed window
    speeds = [e["tokens_per_s"] for e in events if e["event"] == "train" and e["tokens_per_s"]]
    started = (folder / "log.jsonl").exists() or (folder / "train.log").exists()
    status = end["status"] if end else "failed" if started else "not run"
    if status == "finished" and not evals:  # a resume at the last step, of a run whose log was lost
        sys.exit(f"error: {folder / 'log.jsonl'} says the run finished but holds no evaluation (it "
                 f"was lost or cut before the run was resumed at its last step): move {folder} "
                 "away to train the run again")
    if status == "finished" and not math.isfinite(evals[-1][1]):
        status = "diverged"  # a finite training loss, but not the evaluation's
    timing = folder / "seconds.json"  # train.py's wall time in all sittings, kept by ablate.py
    try:
        seconds = json.loads(timing.read_text())["seconds"] if timing.exists() else None
    except (OSError, ValueError, KeyError, TypeError) as e:  # a folder, not JSON, not ablate.py's
        sys.exit(f"error: {timing} is not ablate.py's record of the run's seconds "
                 f"({first_line(e)}): move it away, and the run's time is left out")
    return dict(status=status, iter=end and end["iter"], evals=evals, seconds=seconds,
                stats=[e for e in events if e["event"] == "layer_stats"],
                final_val_loss=evals[-1][1] if evals else None,
                best_val_loss=min((loss for _, loss in evals), default=None),
                tokens_per_s=statistics.fmean(speeds) if speeds else None)


def evaluated(folder, evaluation):
    """Whether folder/eval.json scored the tasks with the limit asked for."""
    path = folder / "eval.json"
    try:
        done = json.loads(path.read_text())["settings"] if path.exists() else {}
    except (OSError, ValueError, KeyError, TypeError) as e:  # a folder, not JSON, not eval.py's
        sys.exit(f"error: {path} is not eval.py's report ({first_line(e)}): "
                 "move it away to score again")
    return all(done.get(k) == evaluation[k] for k in ("tasks", "limit"))
