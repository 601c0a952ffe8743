"""Test setup: offline, importable from the repository root, small and deterministic."""
import contextlib
import json
import os
import pathlib
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

# test_reliability.py forks train.main into child processes, and libgomp is not fork-safe: once this
# process has run an OpenMP region on several threads, a child's first one waits forever for threads
# that were not forked. So the test process computes on one thread (its subprocesses choose their own).
torch.set_num_threads(1)

# A shell's background job (`cmd &`) starts with Ctrl-C ignored, and a process started from it inherits that:
# Python then installs no KeyboardInterrupt handler, and the tests that stop a script with SIGINT fail. With a
# handler here, the scripts the tests start get the default disposition back at exec, as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def gpt2_available():
    """True when tiktoken's GPT-2 files are in the offline cache (tests needing BPE skip otherwise)."""
    try:
        import tiktoken
        tiktoken.get_encoding("gpt2")
        return True
    except Exception:
        return False


needs_gpt2 = pytest.mark.skipif(not gpt2_available(), reason="GPT-2 BPE files are not in the offline cache: "
                                "put tiktoken's cache in ../shared/tiktoken_cache or set TIKTOKEN_CACHE_DIR")


def error_of(call, *args, **kwargs):
    """The message of the SystemExit that call raises, checked to be one line starting 'error: '."""
    with pytest.raises(SystemExit) as e:
        call(*args, **kwargs)
    message = str(e.value.code)
    assert message.startswith("error: ") and "\n" not in message
    return message


@pytest.fixture(scope="session")
def shakespeare_text():
    """tiny Shakespeare when ../shared has it, else a generated text with a similar alphabet."""
    path = SHARED / "data" / "tinyshakespeare.txt"
    if path.is_file():
        return path.read_text(encoding="utf-8")
    import random
    rng = random.Random(0)
    words = ["thou", "art", "the", "king", "of", "Rome", "and", "I", "shall", "speak", "no", "more"]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 9))).capitalize() + rng.choice(".,;!?")
             for _ in range(20000)]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory, shakespeare_text):
    """A data_dir holding 'tiny': 200k characters of Shakespeare, prepared character-level."""
    import prepare_data
    root = tmp_path_factory.mktemp("data")
    (root / "input.txt").write_text(shakespeare_text[:200_000])
    prepare_data.prepare("shakespeare_char", root / "tiny", inputs=[str(root / "input.txt")], workers=1)
    return root


def torchrun(args, timeout, **kwargs):
    """`python -m torch.distributed.run --standalone --nproc_per_node=2 *args` as subprocess.run(capture_output=True,
    text=True) would run it, in a session of its own, so that a failure or a timeout ends its workers too: killing
    torchrun alone would leave a worker waiting forever for its peer (and holding the test run's CPU)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *args]
    env = kwargs.pop("env", os.environ) | {"OMP_NUM_THREADS": "1"}
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                          start_new_session=True, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        finally:
            if process.poll() is None or process.returncode != 0:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


# train.main for each argument list, in both processes of one torchrun launch, sharing one process group (a
# group cannot be made again under torchrun once destroyed): one launch's start-up for many runs. The first run
# makes the group from torchrun's environment, as `torchrun train.py` does; the others find it made.
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
    """train.main(argv) for each of argvs in two processes of one torchrun launch; the launch must succeed."""
    (folder / "driver.py").write_text(DRIVER)
    result = torchrun([str(folder / "driver.py"), json.dumps(argvs)], timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def events(out_dir, kind=None):
    """The records of out_dir/log.jsonl, or only those whose event is kind."""
    lines = (out_dir / "log.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if kind in (None, e["event"])]


def logged_numbers(out_dir):
    """Every line of log.jsonl, its timing fields (which differ run to run) as what they must agree on: the
    tokens a step trained (tokens/s x s/step) and the steps timed; MFU is None on CPU."""
    lines = []
    for e in events(out_dir):
        timing = {k: e.pop(k) for k in ("ms_per_iter", "tokens_per_s", "mfu") if k in e}
        if e["event"] == "train":
            tokens_per_s = timing["tokens_per_s"]
            e["tokens_per_step"] = tokens_per_s and tokens_per_s * timing["ms_per_iter"] / 1000
        assert timing.get("mfu") is None
        flat = {f"{k}[{i}]": v for k, vs in e.items() if isinstance(vs, list) for i, v in enumerate(vs)}
        lines.append(flat | {k: v for k, v in e.items() if not isinstance(v, list)})  # layer_stats flattened
    return lines


def assert_same_records(got, want, rel, abs):
    """Two lists of log records agree field by field: the same records and keys, numbers within rel or abs
    of each other, everything else (event names, statuses, None) equal. pytest.approx compares numbers
    only: pytest 9.2 refuses a record that holds a string."""
    assert len(got) == len(want), (len(got), len(want))
    for a, b in zip(got, want):
        assert a.keys() == b.keys(), (a, b)
        for key, value in b.items():
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if number and a[key] is not None:
                assert a[key] == pytest.approx(value, rel=rel, abs=abs), (key, a, b)
            else:
                assert a[key] == value, (key, a, b)
