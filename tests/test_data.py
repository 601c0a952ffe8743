"""data.py: the shard format, meta.json, tokenizers, the vocabulary padding, and no torch at
import."""
import ast
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT, error_of, mentions, needs_gpt2
from data import (GPT2_META, char_table, check_out_dir, first_line, get_batch, get_tokenizer,
                  load_meta, locked_folder, padded_vocab, read_shard, run_cli, start_token,
                  write_json, write_shard)


# ----------------------------------------------------------------------------- shard format

def test_write_shard_writes_the_modded_nanogpt_layout_and_read_shard_reads_it_back(tmp_path):
    tokens = np.array([0, 1, 50256, 65535, 7], dtype=np.int64)
    write_shard(tmp_path / "s.bin", tokens)
    header = np.zeros(256, np.int32)  # built by hand as modded-nanogpt's fineweb.py does
    header[:3] = 20240520, 1, len(tokens)
    assert (tmp_path / "s.bin").read_bytes() == \
        header.tobytes() + tokens.astype(np.uint16).tobytes()
    shard = read_shard(tmp_path / "s.bin")
    assert shard.dtype == np.uint16 and shard.tolist() == tokens.tolist() \
        and not shard.flags.writeable
    assert list(tmp_path.iterdir()) == [tmp_path / "s.bin"]  # the temporary file was renamed away


def check_shard_error(message, path, *why):
    """message names the shard, what is wrong with it (the words why), and the command that rebuilds
    it."""
    mentions(message, str(path), *why,
             f"python prepare_data.py shakespeare --out {path.parent} --force")


@pytest.mark.parametrize("damage, why", [
    (lambda b: b[:1000], ("shorter", "1024-byte header")),
    (lambda b: b[:1020], ("shorter", "1024-byte header")),
    (lambda b: b[:-2], ("1222 bytes", "100 tokens")),
    (lambda b: b + b"\0\0", ("1226 bytes", "100 tokens")),
    (lambda b: b[:1024], ("1024 bytes", "100 tokens")),
    (lambda b: b[:8] + np.int32(0).tobytes() + b[12:1024], ("1024 bytes", " 0 tokens")),  # not 100
    (lambda b: b[:8] + np.int32(-1).tobytes() + b[12:], ("1224 bytes", "-1 tokens")),
    (lambda b: b"\0\0\0\0" + b[4:], ("magic 0 version 1", "20240520 version 1")),
    (lambda b: b[:4] + np.int32(2).tobytes() + b[8:],
     ("magic 20240520 version 2", "20240520 version 1"))])
def test_read_shard_rejects_a_damaged_file_naming_the_fix(tmp_path, damage, why):
    """Each damage in one line: what is wrong with the file, and the command that rebuilds it."""
    path = tmp_path / "shakespeare" / "train_000000.bin"
    path.parent.mkdir()
    write_shard(path, np.arange(100))
    path.write_bytes(damage(path.read_bytes()))
    check_shard_error(error_of(read_shard, path), path, *why)


def test_read_shard_of_an_unreadable_path_says_why(tmp_path):
    folder = tmp_path / "shakespeare"
    (folder / "sub").mkdir(parents=True)
    gone = folder / "gone.bin"
    check_shard_error(error_of(read_shard, gone), gone, "No such file or directory")
    check_shard_error(error_of(read_shard, folder / "sub"), folder / "sub", "Is a directory")


def test_read_shard_maps_the_tokens_rather_than_reading_them(tmp_path):
    """get_batch opens a shard for every batch: checking one reads its header, not its 64 MB of
    tokens."""
    import tracemalloc
    count, path = 2**25, tmp_path / "big.bin"
    header = np.zeros(256, np.int32)
    header[:3] = 20240520, 1, count
    with open(path, "wb") as f:  # a sparse file: no 64 MB written
        f.write(header.tobytes())
        f.truncate(1024 + 2 * count)
    tracemalloc.start()
    try:
        shard = read_shard(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert shard.shape == (count,) and shard[-1] == 0 and peak < 2**20


def test_write_shard_refuses_ids_beyond_uint16(tmp_path):
    for ids, shown in (([1, 65536], "1..65536"), ([-1, 7], "-1..7")):
        mentions(error_of(write_shard, tmp_path / "s.bin", ids), f"token ids {shown}", "uint16",
                 "0..65535", "smaller vocabulary")
    assert not any(tmp_path.iterdir())


def test_json_files_are_utf8_with_one_value_a_line(tmp_path):
    """meta.json, config.json, eval.json: read by people and diffed between runs, so each value has
    its own line and a character table shows its characters, not \\u escapes."""
    obj = {"chars": "\n aé€", "shards": [1, 2], "nested": {"x": None}}
    write_json(tmp_path / "m.json", obj)
    text = (tmp_path / "m.json").read_text(encoding="utf-8")
    assert json.loads(text) == obj and "aé€" in text
    lines = text.splitlines()
    assert [line.strip() for line in lines[1:3]] == ['"chars": "\\n aé€",', '"shards": [']
    assert len(lines) == 10 and list(tmp_path.iterdir()) == [tmp_path / "m.json"]


def test_get_batch_draws_every_window_of_every_shard_equally_often_and_no_other(tmp_path):
    """A window is block_size + 1 tokens in one shard (x, and y one token on); a shard of block_size
    tokens or fewer has none. Each token is its shard's number times 100 plus its position, so a row
    tells where it was drawn."""
    # block_size 3: windows at 0..2 of the first shard, none in the second, 0..5 in the third
    counts = [6, 3, 9]
    paths = [tmp_path / f"train_{i:06d}.bin" for i in range(len(counts))]
    for i, (path, n) in enumerate(zip(paths, counts)):
        write_shard(path, 100 * i + np.arange(n))
    block_size = 3
    rng = np.random.default_rng(0)
    drawn = []
    for _ in range(90):
        x, y = get_batch((paths, np.array(counts)), rng, 50, block_size, "cpu")
        assert x.shape == y.shape == (50, 3) and x.dtype == y.dtype == torch.long
        assert (y[:, :-1] == x[:, 1:]).all() and (y[:, -1] == x[:, -1] + 1).all()
        assert (x[:, 1:] == x[:, :-1] + 1).all()  # consecutive positions of one shard
        drawn += x[:, 0].tolist()
    windows = {100 * i + start for i, n in enumerate(counts) for start in range(n - block_size)}
    seen = {start: drawn.count(start) for start in set(drawn)}
    assert seen.keys() == windows
    assert max(seen.values()) < 1.25 * min(seen.values())  # 500 each, give or take sqrt(500)


# ------------------------------------------------------------------------- meta.json and tokenizers

@pytest.mark.parametrize("folder, command", [
    # a dataset where it is built by default
    ("data/shakespeare_char", "python prepare_data.py shakespeare_char"),
    ("elsewhere/shakespeare_char",
     "python prepare_data.py shakespeare_char --out elsewhere/shakespeare_char"),
    # no dataset by that name: the user's to say
    ("data/mine", "python prepare_data.py DATASET --out data/mine"),
])
def test_load_meta_of_an_unprepared_or_corrupt_folder_gives_the_command_that_builds_it(
        tmp_path, monkeypatch, folder, command):
    monkeypatch.chdir(tmp_path)
    mentions(error_of(load_meta, folder), folder, "not prepared", "meta.json", command)
    (tmp_path / folder).mkdir(parents=True)
    good = dict(tokenizer="char", vocab_size=3, chars="abc",
                shards=dict(train=[dict(file="t.bin", tokens=9)],
                            val=[dict(file="v.bin", tokens=9)]))
    wrong_shapes = ['{"vocab_size": ',  # a build cut short while writing it
                    "[]", json.dumps({k: v for k, v in good.items() if k != "shards"}),
                    json.dumps(good | dict(tokenizer="gpt2")),  # edited over character shards
                    json.dumps(good | dict(chars="ab")), json.dumps(good | dict(tokenizer="bpe")),
                    json.dumps(good | dict(shards=[])),
                    json.dumps(good | dict(shards=dict(train=[], val=[]))),
                    json.dumps(good | dict(shards=dict(train=["t.bin"], val=[])))]
    for text in wrong_shapes:
        (tmp_path / folder / "meta.json").write_text(text)
        message = error_of(load_meta, folder)
        assert f"{folder}/meta.json is corrupt" in message \
            and message.endswith(f"run  {command} --force")
    (tmp_path / folder / "meta.json").unlink()
    (tmp_path / folder / "meta.json").mkdir()
    assert f"{folder}/meta.json is corrupt" in error_of(load_meta, folder)
    (tmp_path / folder / "meta.json").rmdir()
    # a file where the folder is, or one above it: not a corrupt meta.json to prepare again
    (tmp_path / "file").touch()
    mentions(error_of(load_meta, "file/data/x"), "file/data/x is under file, which is a file",
             "not a folder", "check data_dir and dataset")
    mentions(error_of(load_meta, "file"), "file is a file", "check data_dir and dataset")
    (tmp_path / folder / "meta.json").write_text(json.dumps(good))
    assert load_meta(folder) == good


def test_without_gpt2s_bpe_files_the_error_says_how_to_work_offline(monkeypatch):
    tiktoken = pytest.importorskip("tiktoken")
    monkeypatch.setattr(tiktoken, "get_encoding",
                        lambda name: (_ for _ in ()).throw(ConnectionError(name)))
    mentions(error_of(get_tokenizer, GPT2_META), "GPT-2 BPE", "ConnectionError", "offline",
             "TIKTOKEN_CACHE_DIR", "--tokenizer char")


def test_char_tokenizer_names_the_characters_it_does_not_know():
    encode, decode = get_tokenizer({"tokenizer": "char", "chars": "abc"})
    assert decode(encode("cab")) == "cab"
    mentions(error_of(encode, "a€bé"), "vocabulary", "'é', '€'")


@needs_gpt2
def test_gpt2_encodes_the_end_of_text_marker_as_its_token():
    """A prompt (sample.py) or a text may hold <|endoftext|>: it is GPT-2's document separator,
    token 50256."""
    encode, decode = get_tokenizer(GPT2_META)
    ids = encode("a<|endoftext|>b")
    assert ids.count(50256) == 1 and decode(ids) == "a<|endoftext|>b"


def test_char_table_is_the_sorted_characters_and_their_count():
    assert char_table(["bca", "", "ab"]) == ("abc", 5)
    # a uint16 shard holds ids 0..65535: exactly 2**16 characters fit
    every = "".join(map(chr, range(2**16)))
    assert char_table([every[::-1]]) == (every, 2**16)
    mentions(error_of(char_table, [every, "\U00010000"]), "65,537 distinct characters", "uint16",
             "--tokenizer gpt2")


def test_gpt2_is_padded_to_a_multiple_of_64_and_a_character_table_is_not():
    assert padded_vocab(GPT2_META) == 50304
    assert padded_vocab(dict(tokenizer="char", vocab_size=65)) == 65


# ----------------------------------------------------------------------------- for every script

def test_first_line_is_the_type_and_the_first_line_of_the_message_and_what_its_colon_introduces():
    assert first_line(OSError("\n  no such file\nmore")) == "OSError: no such file"
    assert first_line(ValueError()) == "ValueError: -"
    assert first_line(RuntimeError(
        "Error(s) in loading state_dict for GPT:\n\n\tMissing key(s): 'gate'.\n\tmore")) == (
        # what the colon introduces
        "RuntimeError: Error(s) in loading state_dict for GPT: Missing key(s): 'gate'.")
    assert first_line(RuntimeError("nothing after:")) == "RuntimeError: nothing after:"


def test_data_imports_without_torch():
    """prepare_data.py runs where only numpy and tqdm are installed (CI checks it under Python
    3.10)."""
    check = "import sys, data; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", check], cwd=ROOT, timeout=120).returncode == 0


TOOLS = ("prepare_data", "train", "sample", "eval", "ablate", "bench")  # the command-line scripts


def imports_of(path):
    """The repository's own modules that the file at path imports."""
    tree = ast.parse(path.read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    return {name for name in names if (ROOT / f"{name}.py").is_file()}


def test_no_module_imports_a_command_line_tool_and_the_imports_have_no_cycle():
    """The rooms are libraries the tools import, never the other way round (the exceptions: train.py
    and bench.py build the default dataset with prepare_data.py, and ablate.py checks each planned
    run with train.py's main); following imports never comes back to a file."""
    graph = {path.stem: imports_of(path) for path in ROOT.glob("*.py")}
    exceptions = {"train": {"prepare_data"}, "bench": {"prepare_data"}, "ablate": {"train"}}
    for module, imported in graph.items():
        allowed = exceptions.get(module, set())
        assert not (imported & set(TOOLS)) - allowed, (module, imported & set(TOOLS))

    def visit(module, path):
        assert module not in path, " -> ".join(path + (module,))
        for other in graph[module]:
            visit(other, path + (module,))
    for module in graph:
        visit(module, ())


RUN_CLI = """import sys, data
def main(argv):
    print(argv, flush=True)
    if argv[0] == "more":
        for line in range(100_000):
            print(line)
    if argv[0] == "stop":
        raise KeyboardInterrupt(*argv[1:])
data.run_cli(main)
"""


def test_run_cli_passes_argv_and_turns_ctrl_c_and_a_closed_pipe_into_one_line_and_their_status():
    run = lambda *args: subprocess.run([sys.executable, "-c", RUN_CLI, *args], cwd=ROOT,
                                       capture_output=True, text=True, timeout=120)
    done = run("go", "--x=1")
    said = run("stop", "kept 3 shards: the same command resumes")
    plain = run("stop")
    assert (done.returncode, done.stdout, done.stderr) == (0, "['go', '--x=1']\n", "")
    assert (said.returncode, said.stderr) == (
        130, "interrupted: kept 3 shards: the same command resumes\n")
    assert (plain.returncode, plain.stderr) == (
        130, "interrupted: stopped before the end; files are written whole or not at all\n")
    # `| head -1`: the reader reads the first line and closes the pipe, and the lines after it have
    # nowhere to go
    piped = subprocess.Popen([sys.executable, "-c", RUN_CLI, "more"], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert piped.stdout.readline() == "['more']\n"
    piped.stdout.close()
    assert (piped.wait(timeout=60), piped.stderr.read()) == (
        141, "stopped: the reader of its output closed it; files are written whole or not at all\n")


class OutOfMemoryError(RuntimeError):
    """torch.OutOfMemoryError's name, without torch: run_cli knows it by name."""


@pytest.mark.parametrize("error", [
    MemoryError("Unable to allocate 745. GiB for an array with shape (100000000000,)"),  # numpy
    RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't "
                 "allocate memory: you tried to allocate 520000000000 bytes."),  # torch on a CPU
    OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB"),
    # torch, for a llama MLP 8.5e16 wide (ffn_dim_multiplier=1e15)
    RuntimeError("Storage size calculation overflowed with sizes=[85000000000000000, 32]")])
def test_run_cli_makes_memory_that_cannot_be_had_one_line_and_lets_other_errors_through(
        monkeypatch, error):
    """Sizes past the machine's (a batch of 1e11, a width of 2e9) fail where memory is allocated:
    one line with the allocator's words and the settings to lower, exit 1. Any other RuntimeError
    is a bug, and keeps its traceback."""
    def fail(argv):
        raise error
    monkeypatch.setattr(sys, "argv", ["script.py"])
    handler = signal.getsignal(signal.SIGINT)  # pytest's, which run_cli leaves as SIGINT's own
    try:
        message = error_of(run_cli, fail)
    finally:
        signal.signal(signal.SIGINT, handler)
    mentions(message, "error: out of memory", str(error).split(".")[0], "lower", "batch_size",
             "n_embd", "ffn_dim_multiplier")
    assert "\n" not in message
    def bug(argv):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        run_cli(bug)


# numpy's place on the path: says that the imports reached it, then waits there
SLOW_NUMPY = "import sys, time\nprint('importing', file=sys.stderr, flush=True)\ntime.sleep(60)\n"


@pytest.mark.parametrize("parent", ["default", "ignores SIGINT"])
def test_a_ctrl_c_while_a_script_imports_ends_it_without_a_traceback(tmp_path, parent):
    """A Ctrl-C in the seconds before run_cli (torch loading) ends the script by SIGINT's own
    action, with nothing on stderr, as it ends any program. A SIGINT that the parent ignores (a
    job started with & by a shell script) stays ignored."""
    (tmp_path / "numpy.py").write_text(SLOW_NUMPY)
    ignore = lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)
    for script in TOOLS if parent == "default" else ["train"]:
        proc = subprocess.Popen([sys.executable, f"{script}.py"], cwd=ROOT,
                                env=os.environ | {"PYTHONPATH": str(tmp_path)},
                                stderr=subprocess.PIPE, text=True,
                                preexec_fn=ignore if parent != "default" else None)
        assert proc.stderr.readline() == "importing\n"
        proc.send_signal(signal.SIGINT)
        if parent != "default":
            with pytest.raises(subprocess.TimeoutExpired):
                proc.wait(timeout=0.5)
            proc.kill()
        stopped_by = -signal.SIGINT if parent == "default" else -signal.SIGKILL
        assert (proc.wait(timeout=60), proc.stderr.read()) == (stopped_by, ""), script


def test_an_unusable_out_dir_is_one_line_naming_the_setting_and_the_path(tmp_path, monkeypatch):
    """Empty, a file or under one, a symlink loop, a link to nothing, a pseudo-filesystem, no
    permission: one line naming the setting and the path, and nothing made or left behind."""
    (tmp_path / "f").write_text("mine")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    # made when missing, by the caller: not by the check
    check_out_dir(tmp_path / "new" / "deeper", "--out")
    bad = {"": "is empty", tmp_path / "f": "is a file",
           tmp_path / "f" / "x": f"is under {tmp_path / 'f'}",
           tmp_path / "loop": "leads nowhere", tmp_path / "loop" / "x": "leads nowhere",
           tmp_path / "dangling" / "x": "leads nowhere", "/proc/nope/x": "cannot write in /proc",
           "/sys/kernel/nope": "cannot write in /sys/kernel"}
    for path, why in bad.items():
        message = error_of(check_out_dir, path, "--out_dir")
        assert message.startswith(f"error: --out_dir {path}".rstrip()) and why in message, message

    def lock(folder):
        with locked_folder(folder, "--out"):
            pass

    assert "cannot write there (No such file or directory)" in error_of(lock, "/proc/nope/x")

    def refused(**kwargs):  # as a user, not root, in a folder of root's
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("tempfile.TemporaryDirectory", refused)
    message = error_of(check_out_dir, tmp_path / "x", "--out_dir")
    mentions(message, f"--out_dir {tmp_path}/x: cannot write in {tmp_path} (Permission denied)",
             "choose a folder you can write in")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "f", "loop"]


def test_checking_an_out_dir_leaves_it_as_found_its_times_included(tmp_path, monkeypatch):
    """The check makes and removes a folder in out_dir (or in its nearest parent that exists): a
    command that fails a later check must leave no trace there, not even a new modification time."""
    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / "kept").write_text("mine")
    os.utime(folder, ns=(1_000_000_000_123, 2_000_000_000_456))
    for path in (folder, folder / "new" / "deeper"):
        check_out_dir(path, "--out_dir")
        # its access time aside: any reading of the folder, this test's too, may move that
        assert folder.stat().st_mtime_ns == 2_000_000_000_456
        assert sorted(p.name for p in folder.iterdir()) == ["kept"]

    def not_owner(*args, **kwargs):  # a folder this user may write in but not own: /tmp
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "utime", not_owner)
    check_out_dir(folder, "--out_dir")  # still a folder it can write in


@pytest.mark.parametrize("meta, token", [
    (dict(eot_token=50256, chars=None), 50256),
    (dict(eot_token=0, chars=["a", "\n"]), 0),  # a token id of 0 is a token
    (dict(eot_token=None, chars=[" ", "\n", "a"]), 1),
    (dict(eot_token=None, chars=[" ", "a"]), None),
])
def test_a_text_starts_after_endoftext_else_the_newline(meta, token):
    assert start_token(meta) == token
