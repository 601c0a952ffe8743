"""data.py: the shard format, meta.json, tokenizers, the vocabulary padding, and no torch at import."""
import ast
import subprocess
import sys
import types

import numpy as np
import pytest
import torch

from conftest import ROOT, error_of
from data import (GPT2_META, char_table, check_out_dir, first_line, get_batch, get_tokenizer, load_meta,
                  locked_folder, padded_vocab, read_shard, write_shard)


# ----------------------------------------------------------------------------- shard format

def test_write_shard_writes_the_modded_nanogpt_layout_and_read_shard_reads_it_back(tmp_path):
    tokens = np.array([0, 1, 50256, 65535, 7], dtype=np.int64)
    write_shard(tmp_path / "s.bin", tokens)
    header = np.zeros(256, np.int32)  # built by hand as modded-nanogpt's fineweb.py does
    header[:3] = 20240520, 1, len(tokens)
    assert (tmp_path / "s.bin").read_bytes() == header.tobytes() + tokens.astype(np.uint16).tobytes()
    shard = read_shard(tmp_path / "s.bin")
    assert shard.dtype == np.uint16 and shard.tolist() == tokens.tolist() and not shard.flags.writeable
    assert list(tmp_path.iterdir()) == [tmp_path / "s.bin"]  # the temporary file was renamed away


@pytest.mark.parametrize("damage, why", [(lambda b: b[:1000], "header"), (lambda b: b[:-2], "promises"),
                                         (lambda b: b"\0\0\0\0" + b[4:], "magic")])
def test_read_shard_rejects_a_damaged_file_naming_the_fix(tmp_path, damage, why):
    path = tmp_path / "shakespeare" / "train_000000.bin"
    path.parent.mkdir()
    write_shard(path, np.arange(100))
    path.write_bytes(damage(path.read_bytes()))
    message = error_of(read_shard, path)
    assert "not a valid token shard" in message and why in message and "--force" in message


def test_write_shard_refuses_ids_beyond_uint16(tmp_path):
    assert "65535" in error_of(write_shard, tmp_path / "s.bin", [1, 65536])
    assert not any(tmp_path.iterdir())


def test_get_batch_draws_every_window_of_every_shard_equally_often_and_no_other(tmp_path):
    """A window is block_size + 1 tokens in one shard (x, and y one token on); a shard of block_size tokens
    or fewer has none. Each token is its shard's number times 100 plus its position, so a row tells where it
    was drawn."""
    counts = [6, 3, 9]  # block_size 3: windows at 0..2 of the first shard, none in the second, 0..5 in the third
    paths = [tmp_path / f"train_{i:06d}.bin" for i in range(len(counts))]
    for i, (path, n) in enumerate(zip(paths, counts)):
        write_shard(path, 100 * i + np.arange(n))
    cfg, rng, drawn = types.SimpleNamespace(block_size=3, batch_size=50), np.random.default_rng(0), []
    for _ in range(90):
        x, y = get_batch((paths, np.array(counts)), rng, cfg, "cpu")
        assert x.shape == y.shape == (50, 3) and x.dtype == y.dtype == torch.long
        assert (y[:, :-1] == x[:, 1:]).all() and (y[:, -1] == x[:, -1] + 1).all()
        assert (x[:, 1:] == x[:, :-1] + 1).all()  # consecutive positions of one shard
        drawn += x[:, 0].tolist()
    windows = {100 * i + start for i, n in enumerate(counts) for start in range(n - cfg.block_size)}
    seen = {start: drawn.count(start) for start in set(drawn)}
    assert seen.keys() == windows
    assert max(seen.values()) < 1.25 * min(seen.values())  # 500 each, give or take sqrt(500)


# ----------------------------------------------------------------------------- meta.json and tokenizers

@pytest.mark.parametrize("folder, command", [
    ("data/shakespeare_char", "python prepare_data.py shakespeare_char"),  # a dataset where it is built by default
    ("elsewhere/shakespeare_char", "python prepare_data.py shakespeare_char --out elsewhere/shakespeare_char"),
    ("data/mine", "python prepare_data.py DATASET --out data/mine"),  # no dataset by that name: the user's to say
])
def test_load_meta_of_an_unprepared_or_corrupt_folder_gives_the_command_that_builds_it(tmp_path, monkeypatch,
                                                                                      folder, command):
    monkeypatch.chdir(tmp_path)
    assert error_of(load_meta, folder) == f"error: {folder} is not prepared (no meta.json): run  {command}"
    (tmp_path / folder).mkdir(parents=True)
    (tmp_path / folder / "meta.json").write_text('{"vocab_size": ')  # a build cut short while writing it
    assert error_of(load_meta, folder) == f"error: {folder}/meta.json is corrupt: run  {command} --force"


def test_without_gpt2s_bpe_files_the_error_says_how_to_work_offline(monkeypatch):
    tiktoken = pytest.importorskip("tiktoken")
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: (_ for _ in ()).throw(ConnectionError(name)))
    assert error_of(get_tokenizer, GPT2_META) == (
        "error: cannot load the GPT-2 BPE files (ConnectionError); offline, point TIKTOKEN_CACHE_DIR at a copy of "
        "tiktoken's cache, or use --tokenizer char")


def test_char_tokenizer_names_the_characters_it_does_not_know():
    encode, decode = get_tokenizer({"tokenizer": "char", "chars": "abc"})
    assert decode(encode("cab")) == "cab"
    assert error_of(encode, "a€bé") == "error: characters not in this model's vocabulary: 'é', '€'"


def test_char_table_is_the_sorted_characters_and_their_count():
    assert char_table(["bca", "", "ab"]) == ("abc", 5)
    assert "--tokenizer gpt2" in error_of(char_table, [chr(i) for i in range(2**16 + 1)])


def test_gpt2_is_padded_to_a_multiple_of_64_and_a_character_table_is_not():
    assert padded_vocab(GPT2_META) == 50304
    assert padded_vocab(dict(tokenizer="char", vocab_size=65)) == 65


# ----------------------------------------------------------------------------- for every script

def test_first_line_is_the_type_and_the_first_line_of_the_message():
    assert first_line(OSError("\n  no such file\nmore")) == "OSError: no such file"
    assert first_line(ValueError()) == "ValueError: -"


def test_data_imports_without_torch():
    """prepare_data.py runs where only numpy and tqdm are installed (CI checks it under Python 3.10)."""
    check = "import sys, data; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", check], cwd=ROOT).returncode == 0


TOOLS = ("prepare_data", "train", "sample", "eval", "ablate", "bench")  # the command-line scripts


def imports_of(path):
    """The repository's own modules that the file at path imports."""
    tree = ast.parse(path.read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    return {name for name in names if (ROOT / f"{name}.py").is_file()}


def test_no_module_imports_a_command_line_tool_and_the_imports_have_no_cycle():
    """The rooms are libraries the tools import, never the other way round (train.py builds its default
    dataset with prepare_data.py: the one exception); following imports never comes back to a file."""
    graph = {path.stem: imports_of(path) for path in ROOT.glob("*.py")}
    for module, imported in graph.items():
        allowed = {"prepare_data"} if module == "train" else set()
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
    if argv[0] == "stop":
        raise KeyboardInterrupt(*argv[1:])
data.run_cli(main)
"""


def test_run_cli_passes_argv_and_turns_ctrl_c_into_one_line_and_status_130():
    run = lambda *args: subprocess.run([sys.executable, "-c", RUN_CLI, *args], cwd=ROOT, capture_output=True, text=True)
    done, said, plain = run("go", "--x=1"), run("stop", "kept 3 shards: the same command resumes"), run("stop")
    assert (done.returncode, done.stdout, done.stderr) == (0, "['go', '--x=1']\n", "")
    assert (said.returncode, said.stderr) == (130, "interrupted: kept 3 shards: the same command resumes\n")
    assert plain.returncode == 130 and plain.stderr.startswith("interrupted: ") and plain.stderr.count("\n") == 1


def test_an_unusable_out_dir_is_one_line_naming_the_setting_and_the_path(tmp_path, monkeypatch):
    (tmp_path / "f").write_text("mine")
    check_out_dir(tmp_path / "new" / "deeper", "--out")  # made when missing
    assert error_of(check_out_dir, tmp_path / "f", "--out") == (
        f"error: --out {tmp_path / 'f'} is a file, not a folder; choose a folder (made if missing)")
    assert f"is under {tmp_path / 'f'}, which is a file" in error_of(check_out_dir, tmp_path / "f" / "x", "--out_dir")

    def lock(folder):
        with locked_folder(folder, "--out"):
            pass

    assert "cannot write there (No such file or directory)" in error_of(lock, "/proc/nope/x")  # root passes the check
    monkeypatch.setattr("os.access", lambda path, mode: False)  # as a user, not root, in a folder of root's
    assert f"--out_dir {tmp_path}/x: no permission to write in {tmp_path}" in error_of(check_out_dir, tmp_path / "x",
                                                                                       "--out_dir")
    assert [p.name for p in tmp_path.iterdir()] == ["f"]
