"""Test setup: offline, importable from the repository root, small and deterministic."""
import contextlib
import fcntl
import hashlib
import io
import json
import multiprocessing
import os
import pathlib
import re
import runpy
import signal
import subprocess
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"  # read-only data beside the checkout; absent on some machines

# Tests never touch the network.
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"
if (SHARED / "tiktoken_cache").is_dir():
    os.environ["TIKTOKEN_CACHE_DIR"] = str(SHARED / "tiktoken_cache")
sys.path.insert(0, str(ROOT))

from configurator import ENTRIES  # noqa: E402 (found on the path just set)
from model import ARCHS, GPT, NORM_MODES, GPTConfig  # noqa: E402

# test_reliability.py forks train.main into child processes, and libgomp is not fork-safe: once this
# process has run an OpenMP region on several threads, a child's first one waits forever for threads
# that were not forked. So the test process computes on one thread (its subprocesses choose their
# own).
torch.set_num_threads(1)

# A shell's background job (`cmd &`) starts with Ctrl-C ignored, and a process started from it
# inherits that: Python then installs no KeyboardInterrupt handler, and the tests that stop a script
# with SIGINT fail. With a handler here, the scripts the tests start get the default disposition
# back at exec, as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# The test files that take longest (--durations=0), longest first. README's command hands out whole
# files in collection order (--no-loadscope-reorder), the next to the worker nearly done: longest
# first, the two workers end together. xdist's own order, by number of tests, ended them about 20 s
# apart. The files not named take seconds each and come after, in pytest's order.
LONGEST_FIRST = ("test_bench.py", "test_reliability.py", "test_ablate.py", "test_eval.py",
                 "test_model.py", "test_train.py", "test_fsdp.py", "test_add_a_mode.py",
                 "test_llama.py", "test_ablate_plan.py", "test_prepare_data.py", "test_sample.py",
                 "test_next_rows.py")


def pytest_collection_modifyitems(items):
    """The files in LONGEST_FIRST's order, each file's tests in their own."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))

def gpt2_available():
    """True when tiktoken's GPT-2 files are in the offline cache (tests needing BPE skip
    otherwise)."""
    try:
        import tiktoken
        tiktoken.get_encoding("gpt2")
        return True
    except Exception:
        return False


needs_gpt2 = pytest.mark.skipif(not gpt2_available(),
                                reason="GPT-2 BPE files are not in the offline cache: "
                                       "put tiktoken's cache in ../shared/tiktoken_cache or set "
                                       "TIKTOKEN_CACHE_DIR")


def error_of(call, *args, **kwargs):
    """The message of the SystemExit that call raises, checked to be one line starting 'error: '."""
    with pytest.raises(SystemExit) as e:
        call(*args, **kwargs)
    message = str(e.value.code)
    assert message.startswith("error: ") and "\n" not in message
    return message


def ablate_commands(lines):
    """The ablate.py commands among lines (a page's, a docstring's), as argument lists: comments
    dropped, placeholders given values (BEST: 2e-3, DIR: a folder); those of a config or mode the
    reader names (CONFIG.py, --modes=..., a mode to add) left out."""
    commands = []
    for line in lines:
        command = line.split("#")[0]
        if "python ablate.py configs/" in command and not re.search(r"\.\.\.|skipinit", command):
            args = command.split("python ablate.py ")[1].split()
            commands.append([re.sub(r"BEST\d?", "2e-3", arg).replace("DIR", "figures")
                             for arg in args])
    return commands


def mentions(message, *words):
    """The words that matter (the setting's name, the value, the fix) are all in message: its
    meaning, not its wording, is checked; a failure names the words missing."""
    missing = [w for w in words if w not in message]
    assert not missing, f"{missing} not in {message!r}"


@pytest.fixture(scope="session")
def shakespeare_text():
    """tiny Shakespeare when ../shared has it, else a generated text with a similar alphabet."""
    path = SHARED / "data" / "tinyshakespeare.txt"
    if path.is_file():
        return path.read_text(encoding="utf-8")
    import random
    rng = random.Random(0)
    words = ["thou", "art", "the", "king", "of", "Rome", "and", "I", "shall", "speak", "no", "more"]
    lines = [" ".join(rng.choice(words)
                      for _ in range(rng.randint(3, 9))).capitalize() + rng.choice(".,;!?")
             for _ in range(20000)]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory, shakespeare_text):
    """A data_dir holding 'tiny': 200k characters of Shakespeare, prepared character-level."""
    import prepare_data
    root = tmp_path_factory.mktemp("data")
    (root / "input.txt").write_text(shakespeare_text[:200_000])
    prepare_data.prepare("shakespeare_char", root / "tiny", inputs=[str(root / "input.txt")],
                         workers=1)
    return root


def torchrun(args, timeout, **kwargs):
    """`python -m torch.distributed.run --standalone --nproc_per_node=2 *args` as
    subprocess.run(capture_output=True, text=True) would run it, in a session of its own, so that a
    failure or a timeout ends its workers too: killing torchrun alone would leave a worker waiting
    forever for its peer (and holding the test run's CPU)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               *args]
    env = kwargs.pop("env", os.environ) | {"OMP_NUM_THREADS": "1"}
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env, start_new_session=True, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        finally:
            if process.poll() is None or process.returncode != 0:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


# train.main for each argument list, in both processes of one torchrun launch, sharing one process
# group (a group cannot be made again under torchrun once destroyed): one launch's start-up for many
# runs. The first run makes the group from torchrun's environment, as `torchrun train.py` does; the
# others find it made.
DRIVER = f"""
import json, sys
sys.path.insert(0, {str(ROOT)!r})
import torch.distributed as dist
import train
dist.destroy_process_group = lambda *args, **kwargs: None
for argv in json.loads(sys.argv[1]):
    train.main(argv)
    dist.init_process_group = lambda *args, **kwargs: None
"""


def torchrun_mains(argvs, folder, timeout):
    """train.main(argv) for each of argvs in two processes of one torchrun launch; the launch must
    succeed."""
    (folder / "driver.py").write_text(DRIVER)
    result = torchrun([str(folder / "driver.py"), json.dumps(argvs)], timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def events(out_dir, kind=None):
    """The records of out_dir/log.jsonl, or only those whose event is kind."""
    lines = (out_dir / "log.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if kind in (None, e["event"])]


def logged_numbers(out_dir):
    """Every line of log.jsonl, its timing fields (which differ run to run) as what they must agree
    on: the tokens a step trained (tokens/s x s/step) and the steps timed; MFU is None on CPU."""
    lines = []
    for e in events(out_dir):
        timing = {k: e.pop(k) for k in ("ms_per_iter", "tokens_per_s", "mfu") if k in e}
        if e["event"] == "train":
            tokens_per_s = timing["tokens_per_s"]
            e["tokens_per_step"] = tokens_per_s and tokens_per_s * timing["ms_per_iter"] / 1000
        assert timing.get("mfu") is None
        flat = {f"{k}[{i}]": v for k, vs in e.items() if isinstance(vs, list)
                for i, v in enumerate(vs)}
        # layer_stats flattened
        lines.append(flat | {k: v for k, v in e.items() if not isinstance(v, list)})
    return lines


def assert_same_records(got, want, rel, abs):
    """Two lists of log records agree field by field: the same records and keys, numbers within rel
    or abs of each other, everything else (event names, statuses, None) equal. pytest.approx
    compares numbers only: pytest 9.2 refuses a record that holds a string."""
    assert len(got) == len(want), (len(got), len(want))
    for a, b in zip(got, want):
        assert a.keys() == b.keys(), (a, b)
        for key, value in b.items():
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if number and a[key] is not None:
                assert a[key] == pytest.approx(value, rel=rel, abs=abs), (key, a, b)
            else:
                assert a[key] == value, (key, a, b)


# --------------------------------------------------------------------- helpers shared by test files
# Test files import nothing from one another: what more than one of them uses is here, once.

# Small models, built in this process (test_model.py, test_lab.py, test_llama.py)

GPT2_SMALL = dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50304)

# torch.compile of every (mode, family) without a graph break, paid for once: test_bench.py compiles
# a training step (forward, backward, AdamW) of every entry, presets included, on the families in
# turn; test_model.py compiles the forward of each mode on the other family.
COMPILED_STEPS = [(entry, ARCHS[i % len(ARCHS)]) for i, entry in enumerate(ENTRIES)]
COMPILED_FORWARDS = [(mode, arch) for mode in NORM_MODES for arch in ARCHS
                     if (mode, arch) not in COMPILED_STEPS]


def tiny(mode, **overrides):
    """A small model config: 3 blocks, 64 wide, 4 heads, block 32, 65 tokens."""
    kw = dict(norm_mode=mode, n_layer=3, n_head=4, n_embd=64, block_size=32, vocab_size=65)
    kw.update(overrides)
    return GPTConfig(**kw)


def build(mode, seed=0, **overrides):
    torch.manual_seed(seed)
    return GPT(tiny(mode, **overrides)).eval()


def batch(config, B=2, T=None, seed=1):
    g = torch.Generator().manual_seed(seed)
    T = T or config.block_size
    return (torch.randint(0, config.vocab_size, (B, T), generator=g),
            torch.randint(0, config.vocab_size, (B, T), generator=g))


def block_outputs(model, idx):
    """Each block's output x_k for k = 1..L, captured with forward hooks."""
    outs = []
    hooks = [b.register_forward_hook(lambda mod, inp, out: outs.append(out))
             for b in model.transformer.h]
    with torch.no_grad():
        model(idx)
    for h in hooks:
        h.remove()
    return outs


def count_params(mode, **overrides):
    """Parameter count of a GPT-2-small-shaped model, built on the meta device (no memory, no
    time)."""
    with torch.device("meta"):
        return GPT(GPTConfig(norm_mode=mode,
                             **{**GPT2_SMALL, **overrides})).get_num_params(non_embedding=False)


def per_token_std(t):
    return t.std(dim=-1, unbiased=False)


def spread(t, arch):
    """What the family's norm sets to γ per token: the std (LayerNorm, gpt2) or the RMS (RMSNorm,
    llama)."""
    return per_token_std(t) if arch == "gpt2" else t.pow(2).mean(-1).sqrt()


def biased(mode, arch):
    """Whether the mode and the family allow bias=True (GPTConfig.validate decides)."""
    try:
        return tiny(mode, arch=arch, bias=True).bias
    except ValueError:
        return False


def copy_probability(mode, tie, **settings):
    """Mean probability at init that the next token equals the current one, at GPT-2 width (d 768, V
    50304)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(norm_mode=mode, n_layer=2, n_head=12, n_embd=768, block_size=16,
                          tie_embeddings=tie, **settings))
    idx = torch.randint(0, 50304, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, _ = model.eval()(idx, idx)
    return logits.softmax(-1).gather(-1, idx[..., None]).mean().item()


def rope_rows(model, T, pos=0):
    """The rotary table's rows for positions pos..pos+T-1 (llama), or None (gpt2), for calling a
    block directly."""
    return None if model.rope is None else model.rope[pos:pos + T]


def randomize(model, seed=0):
    """Weights N(0, 0.3), gains U(0.5, 2) and biases N(0, 0.5): far from the init, where branches
    are near zero and gains one, so an equation that holds only at init (α on the branch instead of
    x, sandwich's inner and outer norms swapped) no longer holds."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
            elif name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            else:
                p.copy_(torch.rand(p.shape, generator=g) * 1.5 + 0.5)
    return model


# train.py on the tiny dataset (test_train.py, test_reliability.py)

TRAIN_TINY = ["--dataset=tiny", "--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=32",
              "--batch_size=4", "--eval_iters=2", "--eval_interval=5", "--log_interval=1",
              "--warmup_iters=2", "--learning_rate=3e-3"]


def run(data_dir, out_dir, *args):
    """train.py in this process, on the tiny settings; returns the events of out_dir/log.jsonl."""
    import train  # here, not above: the test files that train import it, the others need not
    train.main([f"--data_dir={data_dir}", f"--out_dir={out_dir}", *TRAIN_TINY, *args])
    return events(out_dir)


def losses(out_dir):
    return [(e["iter"], e["train_loss"]) for e in events(out_dir, "train")]


def command(*args):
    """train.py as its own process, for what only a process shows: exit codes, signals, torchrun."""
    return [sys.executable, os.path.join(ROOT, "train.py"), *args]


# Checks before any work (test_sample.py, test_eval.py)

def file_hashes(folder):
    """{path: sha256} of every file under folder: equal before and after, nothing was written or
    removed."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# A folder held by a run (logbook.claim), seen as another process sees it: flock on a descriptor of
# the test's own, which conflicts with the run's as another process's would. Shared, the weakest
# hold: a run's must still exclude it (test_reliability.py, test_ablate_plan.py)

def holds(folder):
    """Whether a run holds folder."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(descriptor)


@contextlib.contextmanager
def held(folder):
    """folder held as a run still going there holds it."""
    descriptor = os.open(folder, os.O_RDONLY)
    fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    try:
        yield
    finally:
        os.close(descriptor)


def tripwire(*_, **__):
    raise AssertionError("work began before every setting was checked")


# Ablations: runs' files and ablate.py's output (test_plots.py, test_ablate_plan.py, test_ablate.py)

ABLATE_TINY = ["--dataset=tiny", "--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=32",
               "--batch_size=4", "--eval_iters=2", "--eval_interval=5", "--log_interval=5",
               "--warmup_iters=2", "--max_iters=10", "--learning_rate=3e-3", "--seeds=1"]
COLUMNS = ["mode", "settings", "lr", "seeds", "final val loss", "− pre, same seed",
           "best val loss", "diverged", "tokens/s", "time/run"]
# the figures of an ablation at one rate (lr.png is drawn where an entry ran two or more)
PLOTS = ["val_loss.png", "grad_norm.png", "resid_rms.png", "angle.png"]


def write_run(folder, evals, status="finished", speeds=(1000.0,), seconds=None, stats=None,
              scores=None, tasks="", limit=None):
    """A run's files as train.py, ablate.py and eval.py write them: evals [(step, val loss)], a
    train line per speed (None: untimed), layer stats {step: {key: per block}}, an end line unless
    status is 'failed', seconds.json if seconds, eval.json of tasks and limit if scores."""
    folder.mkdir(parents=True, exist_ok=True)
    events = []
    for step, loss in evals:
        events.append(dict(event="eval", iter=step, train_loss=loss, val_loss=loss, lr=1e-3))
        if stats and step in stats:
            events.append(dict(event="layer_stats", iter=step, **stats[step]))
    events += [dict(event="train", iter=1, train_loss=3.0, tokens_per_s=s) for s in speeds]
    if status != "failed":
        events.append(dict(event="end", status=status, iter=evals[-1][0]))
    (folder / "log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    if seconds is not None:
        (folder / "seconds.json").write_text(json.dumps(dict(seconds=seconds)))
    if scores is not None:
        (folder / "eval.json").write_text(json.dumps(dict(settings=dict(tasks=tasks, limit=limit),
                                                          scores=scores)))


def ablate_main(*args):
    """ablate.main in this process (its runs are processes of their own); returns what it
    printed."""
    import ablate  # here, not above: it imports matplotlib, which most test files do without
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ablate.main(list(args))
    return out.getvalue()


# ablate.py starts each run as a new Python (`python train.py ...`, then eval.py's), which spends
# seconds importing torch before a test's few steps. The tests of what runs leave behind (tables,
# logs, resumes, scores) start them from a fork server that has imported train.py's modules once:
# each run is still a process of its own, with its own arguments, environment, working directory,
# output and exit status. The tests of how ablate.py stops its processes start real ones.
FORK_SERVER = multiprocessing.get_context("forkserver")
FORK_SERVER.set_forkserver_preload(["conftest", "train"])


def script_in_child(script, argv, env, cwd, log):
    """What `python script *argv` does, in a child of the fork server, its output appended to
    log."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    # what a new Python's torch reads from its environment at import
    torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    with open(log, "a") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    sys.argv = [script, *argv]
    runpy.run_path(script, run_name="__main__")


def forked_run_logged(command, log, env):
    """ablate.run_logged's contract for `python script *argv`: command's exit status, its output
    appended to log."""
    _python, script, *argv = command
    assert script != "-m", "torchrun's processes are not forked: a test with nproc > 1 starts them"
    child = FORK_SERVER.Process(target=script_in_child,
                                args=(script, argv, dict(env), os.getcwd(), str(log)))
    child.start()
    child.join()
    return child.exitcode


@contextlib.contextmanager
def forked_runs():
    """ablate.py's runs within the block: forked from the server (forked_run_logged). Yields the
    run_logged it replaces."""
    import ablate
    real = ablate.run_logged
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ablate, "run_logged", forked_run_logged)
        yield real


def table_rows(results_md):
    """results.md's table as a list of {column: cell}, checking the header."""
    lines = [line for line in results_md.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    assert cells[0] == COLUMNS and set("".join(cells[1])) <= set("-|")
    return [dict(zip(COLUMNS, row)) for row in cells[2:]]


def log_events(folder):
    return [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]
