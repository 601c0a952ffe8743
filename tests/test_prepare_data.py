"""prepare_data.py: round trips, splits, atomic and idempotent builds, offline errors."""
import contextlib
import hashlib
import io
import itertools
import json
import math
import multiprocessing
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time
import types
import urllib.error

import numpy as np
import pytest

import data
import prepare_data
from conftest import ROOT, SHARED, error_of, gpt2_available, mentions, needs_gpt2
from data import get_batch, get_tokenizer, load_meta, read_shard
from prepare_data import prepare

TINY_SHAKESPEARE = SHARED / "data" / "tinyshakespeare.txt"


def split_tokens(out, split):
    """The tokens of one split of a prepared folder, shards in order."""
    return [t for s in load_meta(out)["shards"][split]
            for t in read_shard(out / s["file"]).tolist()]


def hub_documents(monkeypatch, docs):
    """The hub datasets (fineweb_edu) read docs(), (split, text, first) triples, in place of the
    hub."""
    monkeypatch.setattr(prepare_data, "_hub", lambda dataset: (docs, "documents of a test", None))


def split_text(out, split):
    """The decoded text of one split of a prepared folder, shards in order."""
    return get_tokenizer(load_meta(out))[1](split_tokens(out, split))


@pytest.fixture
def shakespeare_file(tmp_path, shakespeare_text):
    path = tmp_path / "input.txt"
    path.write_text(shakespeare_text, encoding="utf-8")
    return path


@pytest.fixture
def docs_jsonl(tmp_path):
    """Documents of varied length and script, one with the end-of-text marker as plain text."""
    docs = [f"Document {i}: " + "naïve café, 東京 and ünïcödé. " * (i % 7 + 1)
            for i in range(40)]
    docs[3] = "a document that quotes <|endoftext|> as text"
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    return path, docs


# ----------------------------------------------------------------------- tokenizers and round trips

def test_char_round_trip_and_nanogpt_split(tmp_path, shakespeare_file, shakespeare_text):
    out = prepare("shakespeare_char", tmp_path / "out", inputs=[str(shakespeare_file)], workers=1)
    meta, n = load_meta(out), int(len(shakespeare_text) * 0.9)
    assert (meta["chars"] == "".join(sorted(set(shakespeare_text)))
            and meta["vocab_size"] == len(meta["chars"]))
    assert meta["tokenizer"] == "char" and meta["eot_token"] is None
    assert (split_text(out, "train") == shakespeare_text[:n]
            and split_text(out, "val") == shakespeare_text[n:])
    assert meta["tokens"] == {"train": n, "val": len(shakespeare_text) - n}


@needs_gpt2
def test_gpt2_round_trip_with_documents_separated_by_eot(tmp_path, docs_jsonl):
    path, docs = docs_jsonl
    out = prepare("text", tmp_path / "out", inputs=[str(path)], val_tokens=50, workers=1)
    meta = load_meta(out)
    assert (meta["tokenizer"], meta["vocab_size"], meta["eot_token"]) == ("gpt2", 50257, 50256)
    assert meta["tokens"]["val"] == 50
    assert split_text(out, "val") + split_text(out, "train") == "<|endoftext|>".join(docs)
    tokens = np.concatenate([read_shard(out / s["file"])
                             for split in ("val", "train") for s in meta["shards"][split]])
    # between documents only; the quoted one stays text
    assert (tokens == 50256).sum() == len(docs) - 1


@needs_gpt2
@pytest.mark.skipif(not TINY_SHAKESPEARE.is_file(),
                    reason="../shared/data/tinyshakespeare.txt is absent")
def test_tinyshakespeare_gives_nanogpts_gpt2_token_counts(tmp_path):
    out = prepare("shakespeare", tmp_path / "out", inputs=[str(TINY_SHAKESPEARE)])
    meta = load_meta(out)
    assert meta["tokens"] == {"train": 301_966, "val": 36_059}
    assert len(get_tokenizer(meta)[0](TINY_SHAKESPEARE.read_text())) == 338_025
    assert split_text(out, "train") + split_text(out, "val") == TINY_SHAKESPEARE.read_text()


# ----------------------------------------------------------------------------- splits, shards, caps

def test_split_sizes_and_shard_sizes(tmp_path, docs_jsonl):
    path, docs = docs_jsonl
    out = prepare("text", tmp_path / "out", inputs=[str(path)], tokenizer="char", val_tokens=300,
                  shard_tokens=1000, workers=1)
    meta = load_meta(out)
    assert meta["tokens"] == {"val": 300, "train": sum(map(len, docs)) - 300}
    assert split_text(out, "val") + split_text(out, "train") == "".join(docs)
    for split in ("val", "train"):
        shards = meta["shards"][split]
        assert [s["file"] for s in shards] == [f"{split}_{i:06d}.bin" for i in range(len(shards))]
        assert all(s["tokens"] == 1000 for s in shards[:-1]) and 0 < shards[-1]["tokens"] <= 1000
        assert sum(s["tokens"] for s in shards) == meta["tokens"][split]
        assert all(len(read_shard(out / s["file"])) == s["tokens"] for s in shards)


@needs_gpt2
def test_num_tokens_caps_the_output_exactly(tmp_path, docs_jsonl):
    out = prepare("text", tmp_path / "out", inputs=[str(docs_jsonl[0])], num_tokens=333,
                  val_tokens=100, workers=1)
    assert sum(load_meta(out)["tokens"].values()) == 333


def test_shakespeare_under_num_tokens_keeps_nanogpts_90_10_split(tmp_path, shakespeare_file,
                                                                 shakespeare_text):
    out = prepare("shakespeare_char", tmp_path / "out", inputs=[str(shakespeare_file)],
                  num_tokens=30_000, workers=1)
    n = int(len(shakespeare_text) * 0.9)
    assert load_meta(out)["tokens"] == {"train": 27_000, "val": 3_000}
    assert split_text(out, "train") == shakespeare_text[:27_000]
    assert split_text(out, "val") == shakespeare_text[n:n + 3000]
    tiny = prepare("shakespeare_char", tmp_path / "tiny", inputs=[str(shakespeare_file)],
                   num_tokens=15, workers=1)
    assert load_meta(tiny)["tokens"] == {"train": 14, "val": 1}  # a tenth, and at least 1
    message = error_of(prepare, "shakespeare_char", tmp_path / "val",
                       inputs=[str(shakespeare_file)], val_tokens=100)
    assert "--val_tokens" in message and "drop it" in message and not (tmp_path / "val").exists()
    # too short to give a training split, whatever --val_tokens says: before anything is written
    (tmp_path / "x.txt").write_text("x")
    assert error_of(prepare, "shakespeare_char", tmp_path / "x",
                    inputs=[str(tmp_path / "x.txt")]).endswith("90/10 split to leave train a "
                                                               "character; use more text")
    assert not (tmp_path / "x").exists()


def test_pystdlib_builds_offline_from_the_first_sorted_files_outside_tests_and_site_packages(
        tmp_path, monkeypatch):
    stdlib = tmp_path / "lib"
    for name, text in {"a.py": b"alpha = 1\n", "a.txt": b"not python\n", "c.py": b"caf\xe9 = 2\n",
                       "b/z.py": b"zed = 3\n", "b/tests/t.py": b"T\n", "test/t.py": b"T\n",
                       "idle_test/t.py": b"T\n", "site-packages/x.py": b"X\n"}.items():
        (stdlib / name).parent.mkdir(parents=True, exist_ok=True)
        (stdlib / name).write_bytes(text)
    monkeypatch.setattr(prepare_data.sysconfig, "get_paths", lambda: {"stdlib": str(stdlib)})
    docs, source, size = prepare_data._pystdlib()
    # sorted by path: b/z.py before c.py, which os.walk lists first
    assert list(docs()) == [(None, "alpha = 1\n", True), (None, "zed = 3\n", True),
                            (None, "caf\ufffd = 2\n", True)]
    version = sys.version.split()[0]
    assert (source, size) == (f"3 .py files of the Python {version} standard library in {stdlib}",
                              10 + 8 + 9)
    # characters, cut at 20
    out = prepare("pystdlib", tmp_path / "out", num_tokens=20, val_tokens=3, workers=1)
    assert (split_text(out, "val"), split_text(out, "train")) == ("alp", "ha = 1\nzed = 3\nca")
    # no "f" of caf
    assert load_meta(out)["chars"] == "".join(sorted(set("alpha = 1\nzed = 3\nca")))


def test_a_character_cap_cuts_the_document_it_falls_in_and_stops():
    docs = lambda: iter([("val", "hello", True), (None, "world", False), (None, "!", True)])
    # no empty document after it
    assert list(prepare_data._first_chars(docs, 5)()) == [("val", "hello", True)]
    assert list(prepare_data._first_chars(docs, 7)()) == [("val", "hello", True),
                                                          (None, "wo", False)]
    assert list(prepare_data._first_chars(docs, 11)()) == list(docs())


@pytest.mark.parametrize("cap, size, tokenizer, val_tokens", [
    # a stream of unknown length: one shard of modded-nanogpt's size
    (None, None, "gpt2", 100_000_000),
    (None, 4 * 10**10, "gpt2", 100_000_000),  # 5% of 10^10 tokens, capped at one shard
    (None, 2 * 10**9, "char", 100_000_000),  # 5% of 2 * 10^9 characters: exactly one shard
    (None, 4_000, "gpt2", 50),  # a GPT-2 token from 4 bytes, estimated: 1,000 tokens
    (None, 1_000, "char", 50),  # a character a token
    (100, 4_000, "gpt2", 5),  # --num_tokens below the estimate: 5% of it
    (10, None, "char", 1),  # at least one token
])
def test_the_default_val_split_is_five_percent_of_the_text_in_one_shard_at_most(
        cap, size, tokenizer, val_tokens):
    assert prepare_data._default_val_tokens(cap, size, tokenizer) == val_tokens


def test_a_build_holds_one_shard_in_memory_at_two_bytes_a_token(tmp_path):
    writer = prepare_data._ShardWriter(tmp_path, {"eot_token": None}, shard_tokens=1000,
                                       val_tokens=10, cap=None, clear=None)
    assert writer.buffer.nbytes == 2 * 1000  # a 100M-token shard is 200 MB, not float64's 800


def test_parallel_workers_write_the_same_shards_as_one(tmp_path, monkeypatch):
    """--workers N starts N processes, forked from a server of one thread (not from this process,
    whose threads may hold locks); one worker is a thread of this process (nothing to fork or
    pickle)."""
    monkeypatch.setattr(prepare_data, "BATCH_CHARS", 5_000)  # many batches in flight
    options = dict(num_tokens=200_000, shard_tokens=30_000)
    get_context = multiprocessing.get_context
    pools = []

    def recorded(method):
        context = get_context(method)
        pool = context.Pool
        monkeypatch.setattr(context, "Pool",
                            lambda n, *args: pools.append((method, n)) or pool(n, *args))
        return context

    monkeypatch.setattr(prepare_data.multiprocessing, "get_context", recorded)
    one = load_meta(prepare("pystdlib", tmp_path / "one", workers=1, **options))
    assert not pools
    # more than CI's cores
    three = load_meta(prepare("pystdlib", tmp_path / "three", workers=3, **options))
    assert (pools == [("forkserver", 3)] and one["shards"] == three["shards"]
            and len(one["shards"]["train"]) > 1)


@pytest.mark.parametrize("workers", [1, 2])
def test_tokenizing_reads_two_batches_a_worker_ahead_at_two_bytes_a_token(monkeypatch, workers):
    """Not the whole stream; and what a worker sends back is uint16, not numpy's int64 (4x the
    bytes to pickle and hold for every batch in flight)."""
    pulled = []

    def batches(docs):
        for i in range(20):
            pulled.append(i)
            yield [(None, f"document {i}", True)]

    monkeypatch.setattr(prepare_data, "_batches", batches)
    tokenized = prepare_data._tokenized(iter(()),
                                        {"tokenizer": "char", "chars": "document 0123456789"},
                                        workers)
    labels, arrays = next(tokenized)
    assert (len(pulled) == 2 * workers and labels == [(None, True)]
            and len(arrays[0]) == len("document 0") and arrays[0].dtype == np.uint16)
    assert sum(1 for _ in tokenized) == 19 and len(pulled) == 20


@needs_gpt2
def test_a_txt_file_is_tokenized_in_pieces_with_the_whole_files_tokens(tmp_path, monkeypatch):
    """With 1-character reads, every newline that may end a piece does: the tokens stay the whole
    text's around indents, trailing spaces, runs of newlines and a no-break space (GPT-2 has a
    '\\n\\xa0' token), and no EOT goes between pieces."""
    lines = ["def f(x):", "    return x  ", "", "", "\xa0no-break", "", "plain",
             "x = 1  # trailing", "", "\tend"]
    text = "\n".join(lines[i % len(lines)] + " " * (i % 4 // 3) for i in range(300))
    (tmp_path / "big.txt").write_text(text, encoding="utf-8")
    monkeypatch.setattr(prepare_data, "BATCH_CHARS", 1)
    pieces = list(prepare_data._txt_pieces(tmp_path / "big.txt"))
    assert len(pieces) > 30 and "".join(piece for _, piece, _ in pieces) == text
    assert [first for _, _, first in pieces] == [True] + [False] * (len(pieces) - 1)
    out = prepare("text", tmp_path / "out", inputs=[str(tmp_path / "big.txt")], val_tokens=10,
                  workers=1)
    assert (split_tokens(out, "val") + split_tokens(out, "train")
            == prepare_data._gpt2().encode_ordinary(text))


def test_text_dataset_reads_txt_jsonl_and_parquet(tmp_path):
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("a whole file\nis one document\n")
    (tmp_path / "in" / "b.jsonl").write_text(json.dumps({"text": "jsonl row"}) + "\n")
    pq.write_table(pa.table({"text": ["parquet row"]}), tmp_path / "in" / "c.parquet")
    out = prepare("text", tmp_path / "out", inputs=[str(tmp_path / "in" / "*")], tokenizer="char",
                  val_tokens=1)
    assert (split_text(out, "val") + split_text(out, "train")
            == "a whole file\nis one document\njsonl rowparquet row")


# ------------------------------------------------------------------------ atomic, idempotent builds

def test_rerun_does_nothing_and_force_rebuilds(tmp_path, shakespeare_file, capsys, monkeypatch):
    """A rebuild removes meta.json before any shard (renamed progress.json, which lists them):
    killed at any moment, the folder is never complete while its shards go."""
    # about 11 shards
    options = dict(inputs=[str(shakespeare_file)], workers=1, shard_tokens=100_000)
    out = prepare("shakespeare_char", tmp_path / "out", **options)
    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    prepare("shakespeare_char", out, **options)
    assert "nothing to do" in capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == stamps
    shards, unlink, removed = load_meta(out)["shards"], pathlib.Path.unlink, []
    def unlink_recorded(path, missing_ok=False):
        removed.append((path.name, (out / "meta.json").exists()))
        return unlink(path, missing_ok)
    monkeypatch.setattr(pathlib.Path, "unlink", unlink_recorded)
    prepare("shakespeare_char", out, **options, force=True)
    assert (load_meta(out)["shards"] == shards
            and (out / "meta.json").stat().st_mtime_ns != stamps["meta.json"])
    gone = [(name, complete) for name, complete in removed
            if prepare_data.SHARD_NAME.fullmatch(name)]
    assert {name for name, _ in gone} >= {s["file"] for s in shards["train"] + shards["val"]}
    assert not any(complete for _, complete in gone)
    assert "--force" in error_of(prepare, "shakespeare_char", out, **options, num_tokens=5)


def test_a_rebuild_killed_at_any_file_it_clears_is_resumed_by_the_same_command(tmp_path,
                                                                               monkeypatch):
    """Whichever file a rebuild is removing when it dies, the files left stay listed (meta.json
    renamed progress.json, removed last), and the same command rebuilds what an uninterrupted build
    writes. A build killed before its first record leaves only its lock and first shards: the same
    command takes them too."""
    (tmp_path / "in.txt").write_text("".join(f"line {i}\n" for i in range(40)))
    args = dict(inputs=[str(tmp_path / "in.txt")], tokenizer="char", val_tokens=50, shard_tokens=60,
                workers=1)
    reference = prepare("text", tmp_path / "reference", **args)
    files = lambda out: {p.name: p.read_bytes() for p in out.iterdir()}
    out, unlink = prepare("text", tmp_path / "out", **args), pathlib.Path.unlink

    # a rebuild killed at its call number `call` of Path.unlink; returns the calls
    def rebuild_dying_at(call):
        calls = []
        def unlink_counted(path, missing_ok=False):
            if len(calls) == call:
                raise OSError("killed")
            calls.append(path.name)
            return unlink(path, missing_ok)
        with monkeypatch.context() as patched:
            patched.setattr(pathlib.Path, "unlink", unlink_counted)
            prepare("text", out, **args, force=True)
        return len(calls)

    calls = rebuild_dying_at(math.inf)  # an uninterrupted rebuild's, its clearing's first
    assert calls > len(files(out))
    for call in range(calls):
        # while the build runs, the error's one line (SystemExit); after it, the error itself
        with pytest.raises((OSError, SystemExit), match="killed"):
            rebuild_dying_at(call)
        rebuilt = files(prepare("text", out, **args))
        # between meta.json and removing progress.json: complete, the record left over
        if call == calls - 1:
            del rebuilt["progress.json"]
        assert rebuilt == files(reference), call

    # a shard cut short (a copy that stopped): not complete
    with open(out / "train_000001.bin", "r+b") as f:
        f.truncate(100)
    assert files(prepare("text", out, **args)) == files(reference)

    # the first train shard written and its val shard begun, no record yet
    first = tmp_path / "first"
    first.mkdir()
    (first / ".lock").touch()
    (first / "train_000000.bin").write_bytes((reference / "train_000000.bin").read_bytes())
    (first / "val_000000.bin.tmp").write_bytes(b"cut short")
    assert files(prepare("text", first, **args)) == files(reference)


def test_shards_named_like_a_builds_stay_the_users(tmp_path):
    """The shards dataset indexes the user's files in place, even named as a build's own: rebuilt
    with --force they stay as they are, and no other build in that folder counts them as its own to
    remove."""
    folder, tokens = tmp_path / "mine", dict(train=np.arange(3000), val=np.arange(600))
    folder.mkdir()
    for split in tokens:
        data.write_shard(folder / f"{split}_000000.bin", tokens[split])
    before = tree(folder)
    for force in (False, True):
        prepare("shards", folder, inputs=[str(folder / "*.bin")], force=force)
        assert {p.name for p in folder.iterdir()} == {".lock", "meta.json", "train_000000.bin",
                                                      "val_000000.bin"}
        assert {name: tree(folder)[name] for name in before} == before
    (tmp_path / "a.txt").write_text("some text\n" * 10)
    inputs = [str(tmp_path / "a.txt")]
    message = error_of(prepare, "text", folder, inputs=inputs, tokenizer="char", force=True)
    mentions(message, f"--out {folder}", "no build wrote", "train_000000.bin, val_000000.bin",
             "new or empty folder", "move them")
    assert {name: tree(folder)[name] for name in before} == before


def test_a_crash_mid_write_leaves_no_meta_json_and_the_rerun_completes(tmp_path, shakespeare_file):
    out = tmp_path / "out"
    options = dict(inputs=[str(shakespeare_file)], shard_tokens=200_000, workers=1)
    # the process dies for good while writing its second file
    crash = ("import os, sys, prepare_data\n"
             "replace, calls = os.replace, []\n"
             "os.replace = lambda a, b: os._exit(3) if calls.append(a) or len(calls) == 2 "
             "else replace(a, b)\n"
             f"prepare_data.prepare('shakespeare_char', {str(out)!r}, **{options!r})\n")
    assert subprocess.run([sys.executable, "-c", crash], cwd=ROOT).returncode == 3
    assert not (out / "meta.json").exists() and list(out.glob("*.tmp"))
    for shard in out.glob("*.bin"):  # what has a final name is whole
        read_shard(shard)
    assert "not prepared (no meta.json)" in error_of(load_meta, out)
    prepare("shakespeare_char", out, **options)
    clean = prepare("shakespeare_char", tmp_path / "clean", **options)
    assert load_meta(out) == load_meta(clean) and not list(out.glob("*.tmp"))


@needs_gpt2
@pytest.mark.parametrize("error, why", [
    (SystemExit("error: cannot read HuggingFaceFW/fineweb-edu: connection reset by peer"),
     # the hub's own one line
     ("cannot read HuggingFaceFW/fineweb-edu: connection reset by peer",)),
    (OSError("[Errno 28] No space left on device\nwhile writing"),
     ("OSError", "No space left on device"))])
def test_a_stream_error_keeps_the_finished_shards_and_the_rerun_resumes_byte_for_byte(
        tmp_path, monkeypatch, capsys, error, why):
    """The error in one line, then what was kept; the rerun says how many shards it resumes after,
    and its speed counts only the tokens it wrote (a clock that reads 100, then 104: 4 seconds)."""
    texts = [f"Document {i}. " + "Some words of text, " * (i % 11 + 1) for i in range(300)]
    breaks_at = [200]

    def docs():  # its stream breaks after breaks_at[0] documents
        for i, text in enumerate(texts):
            if i == breaks_at[0]:
                raise error
            yield None, text, True

    hub_documents(monkeypatch, docs)
    monkeypatch.setattr(prepare_data, "BATCH_CHARS", 500)  # batches tokenized before the break
    out, options = tmp_path / "out", dict(val_tokens=700, shard_tokens=1000, workers=1)
    message = error_of(prepare, "fineweb_edu", out, **options)
    mentions(message, *why, "finished shards", str(out), "same command resumes")
    kept = {p.name: p.stat().st_mtime_ns for p in out.glob("*.bin")}
    assert len(kept) > 2 and not (out / "meta.json").exists()
    # where it goes on
    resumed = sum(json.loads((out / "progress.json").read_text())["mark"]["tokens"].values())
    breaks_at[0] = None
    capsys.readouterr()
    clock = iter([100.0, 104.0])
    monkeypatch.setattr(prepare_data, "time", types.SimpleNamespace(time=lambda: next(clock)))
    prepare("fineweb_edu", out, **options)
    meta, said = load_meta(out), capsys.readouterr()
    n = meta["tokens"]
    assert said.err.startswith(f"resuming the build of {out} after its {len(kept)} "
                               "finished shards\n")
    assert said.out == (f"wrote {n['train']:,} train + {n['val']:,} val tokens "
                        f"({meta['tokenizer']}, vocab {meta['vocab_size']:,}) to {out} in 4.0s, "
                        f"{(n['train'] + n['val'] - resumed) / 4:,.0f} tokens/s\n")
    monkeypatch.setattr(prepare_data, "time", time)
    clean = prepare("fineweb_edu", tmp_path / "clean", **options)
    assert load_meta(out) == load_meta(clean)  # the tokens counted, the shards, the arguments
    assert {p.name: p.read_bytes() for p in out.glob("*.bin")} == {
        p.name: p.read_bytes() for p in clean.glob("*.bin")}
    # resumed, not rewritten
    assert {name: (out / name).stat().st_mtime_ns for name in kept} == kept
    assert not (out / "progress.json").exists()


@needs_gpt2
def test_a_capped_build_stops_reading_its_stream_at_the_cap(tmp_path, monkeypatch):
    read = []

    def docs():  # 10,000 documents of about 20 tokens
        for i in range(10_000):
            read.append(i)
            yield None, f"Document {i}. " + "Some words of text, " * 3, True

    hub_documents(monkeypatch, docs)
    monkeypatch.setattr(prepare_data, "BATCH_CHARS", 500)
    out = prepare("fineweb_edu", tmp_path / "out", num_tokens=1000, val_tokens=100, workers=1)
    assert load_meta(out)["tokens"] == {"val": 100, "train": 900}
    # the ~50 documents the cap takes and two batches in flight, not the whole stream
    assert len(read) < 100


@needs_gpt2
def test_an_empty_document_adds_no_separator(tmp_path, monkeypatch):
    hub_documents(monkeypatch,
                  lambda: iter([(None, "One.", True), (None, "", True), (None, "Two.", True)]))
    out = prepare("fineweb_edu", tmp_path / "out", val_tokens=1, workers=1)
    assert split_text(out, "val") + split_text(out, "train") == "One.<|endoftext|>Two."


@needs_gpt2
def test_the_progress_bar_counts_documents_and_tokens_on_stderr_where_it_is_a_terminal(
        tmp_path, monkeypatch):
    bars = []

    class Bar:  # tqdm's part that a build uses
        def __init__(self, **options):
            self.options, self.n, self.postfix = options, options["initial"], None
            bars.append(self)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def update(self, n):
            self.n += n

        def set_postfix_str(self, text, refresh):
            self.postfix = text

    monkeypatch.setattr(prepare_data, "tqdm", Bar)
    hub_documents(monkeypatch, lambda: ((None, f"Document {i}.", True) for i in range(7)))
    out = prepare("fineweb_edu", tmp_path / "out", val_tokens=2, workers=1)
    options = dict(unit="doc", disable=None, file=sys.stderr, desc="tokenizing fineweb_edu",
                   initial=0)
    tokens = sum(load_meta(out)["tokens"].values())  # 3 a document, and 6 EOTs
    assert ([(bar.options, bar.n, bar.postfix) for bar in bars]
            == [(options, 7, f"{tokens:,} tokens")] and tokens == 27)


SLOW_BUILD = """import sys, prepare_data
write, written = prepare_data.write_shard, []
def write_and_say(path, tokens):
    if len(written) == int(sys.argv[2]):
        sys.stdin.readline()  # holds here, part-way, until the test closes stdin (or kills it)
    written.append(write(path, tokens))
    print(path.name, flush=True)
    return written[-1]
prepare_data.write_shard = write_and_say
prepare_data.prepare("pystdlib", sys.argv[1], num_tokens=200_000, shard_tokens=20_000, workers=1)
"""


def test_builds_of_one_folder_take_turns_and_resume_a_killed_one(tmp_path):
    """first is killed -9 part-way while second waits; second resumes from first's shards and holds
    part-way while third waits; third then finds the folder built and leaves it alone."""
    out = tmp_path / "pystdlib"

    def build(hold_after):
        return subprocess.Popen([sys.executable, "-c", SLOW_BUILD, str(out), str(hold_after)],
                                cwd=ROOT, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)

    def wait_for_turn(build):  # its first line on stderr says it waits for the lock
        return build.stderr.readline().startswith("waiting for another process building")

    first = build(hold_after=3)
    by_first = [first.stdout.readline().strip() for _ in range(3)]
    second = build(hold_after=2)
    assert wait_for_turn(second)
    first.kill()
    first.wait(timeout=60)
    by_second = [second.stdout.readline().strip() for _ in range(2)]
    third = build(hold_after=-1)
    assert wait_for_turn(third)
    # closes its stdin: it goes on
    by_second += re.findall(r"\S+\.bin", second.communicate(timeout=60)[0])
    by_third = third.communicate(timeout=60)[0]
    assert second.returncode == third.returncode == 0
    assert "nothing to do" in by_third and ".bin" not in by_third
    meta = load_meta(out)
    reference = prepare("pystdlib", tmp_path / "reference", num_tokens=200_000, shard_tokens=20_000,
                        workers=1)
    assert meta["shards"] == load_meta(reference)["shards"]
    shards = [s["file"] for s in itertools.chain(*meta["shards"].values())]
    assert shards == by_first + by_second  # second went on after first's shards
    assert all(hashlib.sha256((out / s["file"]).read_bytes()).hexdigest() == s["sha256"]
               for s in itertools.chain(*meta["shards"].values()))
    assert sorted(p.name for p in out.iterdir()) == sorted([".lock", "meta.json", *shards])


# ----------------------------------------------------------------------------- errors for the user

def test_bad_input_gets_a_one_line_error_and_no_output(tmp_path, monkeypatch, capsys):
    """Each mistake's line and its words that matter, before anything is written; the checks in
    order."""
    (tmp_path / "empty.txt").touch()
    (tmp_path / "folder").mkdir()
    out = tmp_path / "out"
    mistakes = [
        (["nope"], {}, ("'nope'", ", ".join(prepare_data.DATASETS))),
        (["pystdlib"], dict(num_tokens=0), ("--num_tokens", "positive integer", "0")),
        (["pystdlib"], dict(val_tokens=-1), ("--val_tokens", "positive integer", "-1")),
        (["pystdlib"], dict(shard_tokens=1.5), ("--shard_tokens", "positive integer", "1.5")),
        (["pystdlib"], dict(workers="2"), ("--workers", "positive integer", "'2'")),
        (["pystdlib"], dict(shard_tokens=2**31), ("--shard_tokens", "below 2**31", "int32")),
        (["shakespeare"], dict(val_tokens=5),
         ("shakespeare", "last 10%", "--val_tokens", "drop it")),
        (["pystdlib"], dict(num_tokens=1000, val_tokens=1000),
         ("no training tokens", "--val_tokens 1,000", "--num_tokens 1,000", "lower --val_tokens")),
        (["pystdlib"], dict(shard_tokens=2**31 - 1, num_tokens=1000, val_tokens=999,
                            tokenizer="bpe"),
         ("tokenizer 'bpe'", "gpt2", "char")),  # each bound passed, to the next check
        (["text"], dict(inputs=[str(tmp_path / "missing*.txt")]),
         (f"--input {tmp_path}/missing*.txt", "no such file")),
        (["text"], dict(inputs=[str(tmp_path / "folder")]),
         (f"--input {tmp_path}/folder", "not a file", "'dir/*.jsonl'")),
        (["shakespeare"], dict(inputs=[str(tmp_path / "empty.txt")]),
         (f"--input {tmp_path}/empty.txt", "is empty")),
        (["pystdlib"], dict(inputs=[str(tmp_path / "empty.txt")]),
         ("pystdlib", "no --input", HUB_FIX)),
        (["openwebtext"], dict(inputs=["x"]), ("openwebtext", "no --input", HUB_FIX)),
    ]
    for args, kwargs, words in mistakes:
        mentions(error_of(prepare, *args, out, **kwargs), *words)
    assert not out.exists()
    monkeypatch.chdir(tmp_path)  # where the default, data/pystdlib, would be made
    mentions(error_of(prepare, "pystdlib", ""), "--out is empty", "data/pystdlib")
    assert not (tmp_path / "data").exists()
    monkeypatch.setattr(os, "access", lambda path, mode: mode != os.R_OK)  # root reads every file
    (tmp_path / "a.txt").write_text("abc")
    mentions(error_of(prepare, "text", out, inputs=[str(tmp_path / "a.txt")]),
             f"--input {tmp_path}/a.txt", "no permission")
    monkeypatch.undo()
    # 12 characters, 12 bytes: at most 4 x 12 GPT-2 tokens
    (tmp_path / "small.txt").write_text("hello world\n")
    for tokenizer, most in (("char", 12), ("gpt2", 48))[:1 + gpt2_available()]:
        message = error_of(prepare, "text", out, inputs=[str(tmp_path / "small.txt")],
                           tokenizer=tokenizer, val_tokens=most)
        mentions(message, "no training tokens", f"--val_tokens {most}", f"at most {most} tokens",
                 "lower --val_tokens")
    assert not out.exists()
    prepare("text", tmp_path / "one", inputs=[str(tmp_path / "small.txt")], tokenizer="char",
            val_tokens=11)

    built = prepare("text", tmp_path / "built", inputs=[str(tmp_path / "a.txt")], tokenizer="char",
                    val_tokens=1)
    (tmp_path / "a.txt").write_text("abcd")  # the inputs' paths are the arguments, not their text
    prepare("text", built, inputs=[str(tmp_path / "a.txt")], tokenizer="char", val_tokens=1)
    mentions(capsys.readouterr().out.splitlines()[-1], str(built), "already prepared",
             "nothing to do", "--force")
    if gpt2_available():  # GPT-2's meta.json records the arguments too
        prepare("text", tmp_path / "bpe", inputs=[str(tmp_path / "a.txt")], val_tokens=1)
        prepare("text", tmp_path / "bpe", inputs=[str(tmp_path / "a.txt")], val_tokens=1)
        assert ("is already prepared with these arguments"
                in capsys.readouterr().out.splitlines()[-1])
    mentions(error_of(prepare, "text", built, inputs=[str(tmp_path / "a.txt")], val_tokens=2),
             str(built), "other arguments", "tokenizer 'char' -> 'gpt2'", "val_tokens 1 -> 2",
             "--force")
    # 1, 3, 4 of them
    for names, listed in ((["x"], "x"), (["y", "z"], "x, y, z"), (["w"], "w, x, y, ...")):
        for name in names:
            (tmp_path / "mine" / name).parent.mkdir(exist_ok=True)
            (tmp_path / "mine" / name).touch()
        mentions(error_of(prepare, "pystdlib", tmp_path / "mine"), f"--out {tmp_path / 'mine'}",
                 "no build wrote", f"({listed})", "new or empty folder", "move them")
    # the splits of a text of one character, or of one token under --num_tokens: no --val_tokens
    # to lower (shakespeare*'s is nanoGPT's 90/10, the others' 5% but at least 1 token); found
    # before the build, for GPT-2 tokens too
    (tmp_path / "a.txt").write_text("a")
    a = [str(tmp_path / "a.txt")]
    for tokenizer in ("char", "gpt2")[:1 + gpt2_available()]:
        mentions(error_of(prepare, "shakespeare_char", out, inputs=a, tokenizer=tokenizer),
                 "no training tokens", str(tmp_path / "a.txt"), "90/10", "use more text")
    mentions(error_of(prepare, "text", out, inputs=a, tokenizer="char"),
             "no training tokens", "holds out 1 of the text's 1 tokens", "use more text")
    for dataset in ("shakespeare_char", "text"):
        mentions(error_of(prepare, dataset, out, inputs=[str(tmp_path / "small.txt")],
                          num_tokens=1),
                 "no training tokens", "holds out 1 of --num_tokens 1", "raise --num_tokens")
    prepare("shakespeare_char", tmp_path / "two", inputs=[str(tmp_path / "small.txt")],
            num_tokens=2)
    assert load_meta(tmp_path / "two")["tokens"] == {"val": 1, "train": 1}
    assert not out.exists()


@needs_gpt2
def test_a_text_wholly_held_out_once_tokenized_is_one_line_and_leaves_nothing(tmp_path):
    """A GPT-2 token is a byte or more, so --val_tokens below 4x the bytes passes the first check;
    the build then finds every token held out."""
    # 51 bytes, 11 tokens
    (tmp_path / "a.txt").write_text("one two three four five six seven eight nine ten\n")
    out = tmp_path / "out"
    message = error_of(prepare, "text", out, inputs=[str(tmp_path / "a.txt")], tokenizer="gpt2",
                       val_tokens=100)
    mentions(message, "no training tokens", "all 11 tokens", "held out", "lower --val_tokens",
             "more text")
    assert [p.name for p in out.iterdir()] == [".lock"]


@needs_gpt2
def test_a_rebuild_whose_arguments_are_found_wrong_while_tokenizing_leaves_the_build_as_it_was(
        tmp_path):
    """--force over a complete build: the old build goes only when the first new shard is written,
    so an argument found wrong before that changes nothing in the folder. With the held-out tokens
    spread over shards, the build writes before it can know: then the folder is left with none."""
    (tmp_path / "a.txt").write_text("one two three four five six seven eight nine ten\n")
    out = prepare("text", tmp_path / "out", inputs=[str(tmp_path / "a.txt")], val_tokens=5)
    before = tree(out)
    for _ in range(2):  # and the same again
        message = error_of(prepare, "text", out, inputs=[str(tmp_path / "a.txt")], val_tokens=100,
                           force=True)
        mentions(message, "no training tokens", "all 11 tokens", "lower --val_tokens")
        assert tree(out) == before
    assert load_meta(out)["args"]["val_tokens"] == 5
    error_of(prepare, "text", out, inputs=[str(tmp_path / "a.txt")], val_tokens=100,
             shard_tokens=2, force=True)
    assert [p.name for p in out.iterdir()] == [".lock"]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_workers_failing_tokenizer_ends_the_build_with_its_error_not_a_hang(tmp_path,
                                                                            monkeypatch, workers):
    """A worker whose tokenizer fails: its one-line error (a character its table lacks) is the
    build's, any other error is raised as it is, and no meta.json marks the folder as built.
    Pool starts a worker whose initializer failed again, forever, and loses the batch of a worker
    that exits: the build would wait for it forever. One worker is a thread, two are processes
    forked from a server, which read the table from the parent."""
    (tmp_path / "a.txt").write_text("to be or not to be\n" * 50)
    made = prepare_data._tokenizer_meta
    table = {}
    monkeypatch.setattr(prepare_data, "_tokenizer_meta", lambda *args: {**made(*args), **table})

    def hung(*_):
        raise TimeoutError("the build still waits for its workers after 60 s")

    waiting = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        table["chars"] = sorted(set("to be or not\n") - {"b"})
        message = error_of(prepare, "shakespeare_char", tmp_path / "lacks_b",
                           inputs=[str(tmp_path / "a.txt")], workers=workers)
        mentions(message, "characters not in", "'b'")
        table["chars"] = None
        with pytest.raises(TypeError):
            prepare("shakespeare_char", tmp_path / "none", inputs=[str(tmp_path / "a.txt")],
                    workers=workers)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, waiting)
    assert not any((tmp_path / name / "meta.json").exists() for name in ("lacks_b", "none"))


def test_non_utf8_bytes_are_replaced_and_counted(tmp_path, capsys):
    # a lone byte is one U+FFFD, and so is a cut sequence (\xe2\x82, 2 bytes of a 3-byte character)
    (tmp_path / "in.txt").write_bytes(b"caf\xe9 au lait\n" * 10 + b"\xff\xe2\x82 end\n")
    out = prepare("shakespeare_char", tmp_path / "out", inputs=[str(tmp_path / "in.txt")],
                  workers=1)
    assert (split_text(out, "train") + split_text(out, "val")
            == "caf\ufffd au lait\n" * 10 + "\ufffd\ufffd end\n")
    # 10 + 1 + 2
    mentions(capsys.readouterr().err, "replaced 13 bytes", "invalid UTF-8", "U+FFFD")


def test_the_text_datasets_mistakes_are_whole_lines_and_its_txt_files_replace_invalid_utf8(
        tmp_path, capsys):
    """No --input, a file type it cannot read, a missing column, a .jsonl that does not parse: each
    one line, whole, naming the file and the fix. A .txt with invalid UTF-8 builds: each bad run one
    U+FFFD, counted."""
    def write(name, content):
        (tmp_path / name).write_bytes(content)
        return str(tmp_path / name)
    csv = write("a.csv", b"a,b\n")
    columns = write("columns.jsonl", b'{"body": "x", "title": "y"}\n')
    broken = write("broken.jsonl", b'{"text": "ok"}\n{broken\n')
    fail = lambda *inputs: error_of(prepare, "text", tmp_path / "out", inputs=list(inputs),
                                    tokenizer="char")
    mentions(fail(), "text dataset", "--input FILE|GLOB", ".txt, .jsonl, .json, .parquet")
    mentions(fail(csv), f"--input {csv}", "unsupported file type", ".txt, .jsonl, .json, .parquet")
    mentions(fail(columns), columns, "no column 'text'", "body, title", "--text_column NAME")
    # its default
    assert cli("text", "--input", columns, "--out", tmp_path / "out").stderr == fail(columns) + "\n"
    for files, described in (([broken], "1 json file"), ([broken, broken], "2 json files")):
        line = fail(*files)
        assert (line.startswith(f"error: cannot read {broken} ({described}): ArrowInvalid: ")
                and line.endswith(" in row 1; check them")), line
    assert not (tmp_path / "out").exists()

    invalid = {"6 bytes": b"caf\xe9\n" * 3 + b"x\xff\xe2\x82 y\n", "1 byte": b"x\xff\n",
               "2 bytes": b"\xfe\xff\n"}
    for replaced, bad in invalid.items():
        out = prepare("text", tmp_path / replaced, inputs=[write("bad.txt", bad)], tokenizer="char",
                      val_tokens=1)
        assert split_text(out, "val") + split_text(out, "train") == bad.decode("utf-8", "replace")
        assert (f"warning: replaced {replaced} of invalid UTF-8 with U+FFFD\n"
                in capsys.readouterr().err)


def test_hub_dataset_offline_fails_fast_naming_local_files(tmp_path):
    start = time.time()
    message = error_of(prepare, "fineweb_edu", tmp_path / "out")
    assert time.time() - start < 5 and "--input" in message and "text" in message


# the hub datasets' errors' fix for local files
HUB_FIX = "python prepare_data.py text --input FILES"


@pytest.fixture
def hub_env(monkeypatch):
    """_hub's inputs, set by each test: no offline variable, no endpoint, no proxy; each dial
    recorded."""
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(prepare_data.urllib.request, "getproxies", dict)
    dialed = []

    class Connection:
        def close(self):
            dialed.append("closed")

    def connect(address, timeout):
        dialed.append((address, timeout))
        if address[0] == "refused.internal":
            raise ConnectionRefusedError("connection refused")
        return Connection()

    monkeypatch.setattr(prepare_data.socket, "create_connection", connect)
    return dialed


@pytest.mark.parametrize("env, reason", [
    ({"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE is set"),
    ({"HF_DATASETS_OFFLINE": "TRUE"}, "HF_DATASETS_OFFLINE is set"),
    ({"HF_HUB_OFFLINE": "true", "HF_DATASETS_OFFLINE": "1"}, "HF_HUB_OFFLINE is set"),
    ({"HF_ENDPOINT": "hf-mirror.internal"}, "HF_ENDPOINT is not a URL like https://host"),
    ({"HF_ENDPOINT": "http://refused.internal:8080"}, "connection refused"),
    ({"HF_ENDPOINT": "http://hf-mirror.internal:port"},
     "Port could not be cast to integer value as 'port'"),
])
def test_hub_out_of_reach_is_one_line_naming_the_endpoint_and_local_files(hub_env, monkeypatch,
                                                                           env, reason):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    message = error_of(prepare_data._hub, "openwebtext")
    endpoint = env.get("HF_ENDPOINT", "https://huggingface.co")
    mentions(message, "cannot reach", f"hub at {endpoint}", "Skylion007/openwebtext", reason,
             HUB_FIX)
    # offline: no dial
    assert hub_env == ([(("refused.internal", 8080), 3)] if "refused" in endpoint else [])


@pytest.mark.parametrize("env, proxies, dialed", [
    ({}, {}, [(("huggingface.co", 443), 3), "closed"]),
    ({"HF_HUB_OFFLINE": "0", "HF_DATASETS_OFFLINE": "false",
      "HF_ENDPOINT": "http://hf-mirror.internal"},
     {"https": "http://proxy.internal:3128"}, [(("hf-mirror.internal", 80), 3), "closed"]),
    ({"HF_ENDPOINT": "https://hf-mirror.internal:8443/"}, {},
     [(("hf-mirror.internal", 8443), 3), "closed"]),
    # behind a proxy for its scheme: datasets finds the way
    ({}, {"https": "http://proxy.internal:3128"}, []),
])
def test_hub_in_reach_dials_once_and_streams_the_train_split_lazily(hub_env, monkeypatch, env,
                                                                    proxies, dialed):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(prepare_data.urllib.request, "getproxies", lambda: proxies)
    streamed = []

    def stream(*args):
        streamed.append(args)
        yield from ({"text": "one", "id": 1}, {"text": "two", "id": 2})

    monkeypatch.setattr(prepare_data, "_stream", stream)
    docs, description, third = prepare_data._hub("fineweb_edu")
    assert hub_env == dialed and streamed == []  # nothing read before the build asks
    assert (description, third) == (
        "HuggingFaceFW/fineweb-edu (sample-10BT) from the Hugging Face hub", None)
    assert list(docs()) == [(None, "one", True), (None, "two", True)]  # each row a whole document
    # what is read, the fix its errors name, load_dataset's arguments
    [(what, fix, *args)] = streamed
    assert (what, *args) == ("HuggingFaceFW/fineweb-edu", "HuggingFaceFW/fineweb-edu",
                             "sample-10BT")
    assert HUB_FIX in fix
    assert (prepare_data._hub("openwebtext")[1]
            == "Skylion007/openwebtext (default) from the Hugging Face hub")


def test_shakespeare_reads_one_local_file_or_downloads_within_10_s_and_records_where_from(
        tmp_path, monkeypatch):
    """A local copy is recorded by its real path; without one the text is downloaded (a stand-in
    urlopen here), giving up after 10 s in one line that names --input."""
    (tmp_path / "input.txt").write_text(
        "First Citizen:\nBefore we proceed any further, hear me speak.\n")
    local = tmp_path / "link.txt"
    local.symlink_to(tmp_path / "input.txt")
    monkeypatch.chdir(tmp_path)
    meta = load_meta(prepare("shakespeare_char", tmp_path / "local", inputs=["link.txt"]))
    # the file itself, wherever the build ran from
    assert meta["source"] == str(tmp_path / "input.txt")
    message = error_of(prepare, "shakespeare_char", tmp_path / "two",
                       inputs=["input.txt", "link.txt"])
    mentions(message, "shakespeare", "single --input file")

    asked = []
    class Response(io.BytesIO):
        def __enter__(self):
            return self
    def urlopen(url, timeout):
        asked.append((url, timeout))
        if len(asked) > 1:
            raise urllib.error.URLError("no network")
        return Response((tmp_path / "input.txt").read_bytes())
    monkeypatch.setattr(prepare_data.urllib.request, "urlopen", urlopen)
    downloaded = load_meta(prepare("shakespeare_char", tmp_path / "downloaded"))
    assert downloaded == dict(meta, source=prepare_data.SHAKESPEARE_URL,
                              args=dict(meta["args"], inputs=[]))
    mentions(error_of(prepare, "shakespeare_char", tmp_path / "offline"),
             "cannot download tiny Shakespeare", "no network", "local copy",
             "--input path/to/input.txt")
    assert asked == [(prepare_data.SHAKESPEARE_URL, 10)] * 2


def test_text_files_of_several_kinds_with_a_text_column_of_their_own(tmp_path, monkeypatch):
    """A .txt is its own text whatever --text_column names (the column is the rows' only); a row
    whose text is null or empty adds nothing; the arguments are recorded whole; --input twice is
    --input A B; no --out is data/text; ** matches any depth; a .jsonl without rows is 'no text',
    one line, not a traceback."""
    (tmp_path / "a.txt").write_text("plain text\n")
    (tmp_path / "b.jsonl").write_text('{"body": "row one"}\n{"body": null}\n{"body": ""}\n'
                                      '{"body": "two"}\n')
    (tmp_path / "blank.jsonl").write_text("\n\n")
    files = [str(tmp_path / name) for name in ("a.txt", "b.jsonl")]
    out = prepare("text", tmp_path / "out", inputs=files, text_column="body", tokenizer="char",
                  val_tokens=1)
    assert split_text(out, "val") + split_text(out, "train") == "plain text\nrow onetwo"
    assert load_meta(out)["source"] == f"2 local files: {files[0]}, {files[1]}"
    assert load_meta(out)["args"] == dict(dataset="text", inputs=files, tokenizer="char",
                                          num_tokens=None, val_tokens=1, shard_tokens=100_000_000,
                                          text_column="body")
    assert {k: load_meta(out)[k] for k in ("dataset", "tokenizer", "vocab_size", "eot_token")} == (
        dict(dataset="text", tokenizer="char", vocab_size=len(set("plain text\nrow onetwo")),
             eot_token=None))
    again = tmp_path / "again"  # --input given twice adds up, as --input A B
    assert cli("text", "--input", files[0], "--input", files[1], "--text_column", "body",
               "--tokenizer", "char", "--val_tokens", 1, "--out", again).returncode == 0
    assert load_meta(again) == load_meta(out)
    monkeypatch.chdir(tmp_path)  # no --out: data/DATASET, beside the command
    assert (prepare("text", inputs=files, text_column="body", tokenizer="char", val_tokens=1)
            == pathlib.Path("data", "text")
            and load_meta(tmp_path / "data" / "text")["tokens"] == load_meta(out)["tokens"])
    (tmp_path / "deep" / "er").mkdir(parents=True)  # ** matches folders at any depth, none included
    for i, folder in enumerate(["deep", "deep/er"]):
        (tmp_path / folder / f"{i}.txt").write_text(f"text {i}\n")
    globbed = prepare("text", tmp_path / "globbed", inputs=[str(tmp_path / "**" / "*.txt")],
                      tokenizer="char", val_tokens=1)
    assert load_meta(globbed)["source"] == "3 local files: " + ", ".join(
        str(tmp_path / name) for name in ("a.txt", "deep/0.txt", "deep/er/1.txt"))
    for tokenizer in ("char", "gpt2")[:1 + gpt2_available()]:
        mentions(error_of(prepare, "text", tmp_path / tokenizer,
                          inputs=[str(tmp_path / "blank.jsonl")], tokenizer=tokenizer),
                 "no text", "1 local file", str(tmp_path / "blank.jsonl"))


HELP_OPTIONS = """
options:
  -h, --help            show this help message and exit
  --input PATH [PATH ...]
                        local text instead of a download (shakespeare*), or the files and globs of
                        `text`
  --tokenizer gpt2|char
                        GPT-2 BPE or the text's own characters (default: per dataset)
  --out DIR             output folder (default: data/DATASET)
  --num_tokens N        stop after this many tokens, val and train together
  --val_tokens N        held out: the first N tokens of the stream; default 5% of the corpus, at
                        most 100M (shakespeare*: nanoGPT's last 10% of the text, its first N/10
                        tokens under --num_tokens N)
  --shard_tokens N      tokens per shard file (default 1e8)
  --workers N           tokenizer processes (default: all cores)
  --text_column NAME    the column of .jsonl/.json/.parquet rows (text)
  --force               rebuild even if the folder is complete
"""


def test_token_counts_are_read_whole_or_as_help_writes_them(monkeypatch, capsys):
    """--help gives --shard_tokens' default as 1e8: 1e8 is read as 100,000,000, and each count is
    an int; a count that is not whole is argparse's one line, naming the option."""
    asked = {}
    monkeypatch.setattr(prepare_data, "prepare", lambda **kwargs: asked.update(kwargs))
    prepare_data.main(["pystdlib", "--shard_tokens", "1e8", "--num_tokens", "2.5e6",
                       "--val_tokens", "1000"])
    counts = [asked[k] for k in ("shard_tokens", "num_tokens", "val_tokens")]
    assert counts == [100_000_000, 2_500_000, 1000] and {type(c) for c in counts} == {int}
    for bad in ("1.5", "1e-3", "inf", "nan", "many"):
        with pytest.raises(SystemExit) as stop:
            prepare_data.main(["pystdlib", "--shard_tokens", bad])
        err = capsys.readouterr().err
        assert stop.value.code == 2 and err.count("\n") == 1, err
        mentions(err, "--shard_tokens", repr(bad))

def test_command_line_help_and_errors(tmp_path):
    """The real command line (the other tests run main in this process): its help, word for word,
    and one line for a mistake in the arguments and for one in the files, where the datasets library
    would log its own."""
    run = lambda *args: subprocess.run([sys.executable, "prepare_data.py", *args], cwd=ROOT,
                                       capture_output=True, text=True,
                                       env={**os.environ, "PYTHONPATH": "", "COLUMNS": "100"})
    help_text = run("--help").stdout
    usage = help_text.split("\n\n")[0]
    assert usage.split() == ("usage: prepare_data.py [-h] [--input PATH [PATH ...]] "
                             "[--tokenizer gpt2|char] [--out DIR] [--num_tokens N] "
                             "[--val_tokens N] [--shard_tokens N] [--workers N] "
                             "[--text_column NAME] [--force] dataset").split()
    # the docstring as written
    assert help_text.startswith(f"{usage}\n\n{prepare_data.__doc__.strip()}\n\n"
                                "positional arguments:\n  dataset               "
                                "one of the datasets below\n" + HELP_OPTIONS)
    assert help_text.endswith(HELP_OPTIONS + "\ndatasets:\n" + "".join(
        f"  {name:<17} {line}\n" for name, (_, line) in prepare_data.DATASETS.items()))
    assert one_line_error(run("nope")).startswith("error: unknown dataset")
    (tmp_path / "broken.jsonl").write_text('{"text": "ok"}\n{broken\n')
    line = one_line_error(run("text", "--input", str(tmp_path / "broken.jsonl"), "--out",
                              str(tmp_path / "out")))
    assert line.startswith("error: cannot read ") and line.endswith("; check them\n")


def test_downloaded_modded_nanogpt_shards_load_unchanged_in_train(tmp_path, monkeypatch, capsys):
    """Shards written byte for byte as modded-nanogpt's cached FineWeb are indexed in place, then
    read by train.py's loader exactly as written."""
    import types
    import train
    rng, folder, written = np.random.default_rng(0), tmp_path / "fineweb10B", {}
    folder.mkdir()
    for name, n in (("fineweb_val_000000.bin", 3000), ("fineweb_train_000001.bin", 5000),
                    ("fineweb_train_000002.bin", 4000)):
        header = np.zeros(256, np.int32)
        header[:3] = 20240520, 1, n
        written[name] = rng.integers(0, 50257, n).astype(np.uint16)
        (folder / name).write_bytes(header.tobytes() + written[name].tobytes())
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    monkeypatch.delattr(hashlib, "file_digest", raising=False)  # as on Python 3.10
    out = tmp_path / "data" / "fineweb"
    prepare("shards", out, inputs=[str(folder / "*.bin")])
    assert {p.name: p.read_bytes() for p in folder.glob("*.bin")} == before  # unchanged, not copied
    assert (f"indexing 9,000 train + 3,000 val tokens of 3 shards in {out}/meta.json"
            in capsys.readouterr().out)
    meta = load_meta(out)
    assert meta["tokenizer"] == "gpt2" and meta["tokens"] == {"train": 9000, "val": 3000}
    # sorted
    names = ("fineweb_train_000001.bin", "fineweb_train_000002.bin", "fineweb_val_000000.bin")
    source = f"3 existing shards: {', '.join(str(folder / name) for name in names)}"
    assert (meta["dataset"], meta["source"]) == ("shards", source)
    # its arguments recorded: the same command does nothing
    prepare("shards", out, inputs=[str(folder / "*.bin")])
    mentions(capsys.readouterr().out, "already prepared", "nothing to do")
    val_sha = hashlib.sha256(before["fineweb_val_000000.bin"]).hexdigest()
    assert [s["sha256"] for s in meta["shards"]["val"]] == [val_sha]
    cfg = types.SimpleNamespace(data_dir=str(tmp_path / "data"), dataset="fineweb", block_size=16,
                                batch_size=8)
    _, data = train.load_dataset(cfg, master=True)
    x, y = get_batch(data["train"], np.random.default_rng(1), cfg.batch_size, cfg.block_size,
                     "cpu")
    stream = np.concatenate([written["fineweb_train_000001.bin"],
                             written["fineweb_train_000002.bin"]])
    for row_x, row_y in zip(x.numpy(), y.numpy()):
        starts = [i for i in range(len(stream) - 16) if (stream[i:i + 16] == row_x).all()]
        assert starts and (stream[starts[0] + 1:starts[0] + 17] == row_y).all()
    for only in ("train", "val"):  # one split alone is not a dataset; nothing is written
        message = error_of(prepare, "shards", tmp_path / only,
                           inputs=[str(folder / f"*{only}*.bin")])
        mentions(message, "--input", "train and val shards", "'val' in the val files' names")
        assert not (tmp_path / only).exists()


# --------------------------------------------------------------------- nothing lost, nothing silent
# Each test plants one class of mistake on several datasets, settings or paths, through the command
# line: one line on stderr and no traceback, the exit status, and every file byte-identical to
# before.

def cli(*args):
    """`python prepare_data.py ARGS` run in this process (its start-up is most of a second, the test
    of the real command line is test_command_line_help_and_errors): the exit status and stderr, as
    the shell would have them."""
    stderr, status = io.StringIO(), 0
    with contextlib.redirect_stderr(stderr):
        try:
            prepare_data.main([str(arg) for arg in args])
        except SystemExit as e:  # a message exits 1 after printing it, as the interpreter does
            status = (e.code if isinstance(e.code, int) or e.code is None
                      else print(e.code, file=sys.stderr) or 1)
    return subprocess.CompletedProcess(args, status or 0, "", stderr.getvalue())


def one_line_error(result):
    """The one line a failed command wrote, checked to be all of stderr, an error and no
    traceback."""
    assert (result.returncode != 0 and result.stderr.startswith("error: ")
            and result.stderr.count("\n") == 1), (result.returncode, result.stderr)
    return result.stderr


def tree(root):
    """Every folder and file under root with its sha256: a folder's state, to compare before and
    after."""
    return {str(p.relative_to(root)): p.is_file() and hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))}


@pytest.fixture
def small(tmp_path):
    """A small text in its own folder."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "small.txt").write_text("hello world\nthis is small\n")
    return tmp_path / "in" / "small.txt"


def test_a_build_removes_and_replaces_only_files_builds_wrote(tmp_path, small):
    """A folder holding a file no build wrote is an error, whatever the dataset, the arguments or
    --force, and nothing in it changes: the user's meta.json, notes.tmp, a file named like a shard,
    a note beside a complete build or beside a build in progress. A build's own folder, even holding
    its input, builds and rebuilds."""
    user, named_like_a_shard, beside_built, beside_progress = (tmp_path / name
                                                               for name in ("a", "b", "c", "d"))
    user.mkdir()
    (user / "meta.json").write_text('{"mine": true}')
    (user / "notes.tmp").write_text("my notes")
    named_like_a_shard.mkdir()
    (named_like_a_shard / "train_000000.bin").write_text("mine")
    build = ["text", "--input", small, "--tokenizer", "char", "--val_tokens", 5,
             "--shard_tokens", 10]
    for folder in (beside_built, beside_progress):
        assert cli(*build, "--out", folder).returncode == 0
        (folder / "notes.tmp").write_text("mine")
    # as a build that is clearing it
    (beside_progress / "meta.json").rename(beside_progress / "progress.json")
    before = tree(tmp_path)
    for args in (["text", "--input", small, "--out", user],
                 ["text", "--input", small, "--out", user, "--force"],
                 ["pystdlib", "--num_tokens", 1000, "--out", user],
                 ["shakespeare_char", "--input", small, "--out", named_like_a_shard],
                 [*build, "--out", beside_built, "--force"], [*build, "--out", beside_progress],
                 [*build, "--val_tokens", 6, "--out", beside_progress]):
        assert "holds files no build wrote" in one_line_error(cli(*args)), args
    # complete with these arguments: nothing to do
    assert cli(*build, "--out", beside_built).returncode == 0
    assert tree(tmp_path) == before

    # nanoGPT's layout: the input in the dataset's folder
    nanogpt = tmp_path / "data" / "shakespeare_char"
    nanogpt.mkdir(parents=True)
    shutil.copy(small, nanogpt / "input.txt")
    for force in ((), ("--force",)):
        assert cli("shakespeare_char", "--input", nanogpt / "input.txt", "--out", nanogpt,
                   *force).returncode == 0
    assert cli("shakespeare_char", "--input", nanogpt / "**" / "*.txt", "--out", nanogpt,
               "--force").returncode == 0
    assert ((nanogpt / "input.txt").read_bytes() == small.read_bytes()
            and load_meta(nanogpt)["tokens"]["train"])


def test_an_unusable_out_path_is_one_line_before_anything_is_written(tmp_path, small):
    """A file, a path under a file, a parent that cannot be made, a folder that cannot be written:
    one line naming --out and the path, for every dataset, and nothing written anywhere."""
    (tmp_path / "FILE").write_text("mine")
    before = tree(tmp_path)
    datasets = (["text", "--input", small], ["shakespeare_char", "--input", small],
                ["pystdlib", "--num_tokens", 1000])
    for out, why in ((tmp_path / "FILE", "is a file"), (tmp_path / "FILE" / "x", "is under"),
                     ("/proc/nope/x", "cannot write in /proc"),
                     ("/proc/self", "cannot write in /proc/self")):
        for dataset in datasets:
            line = one_line_error(cli(*dataset, "--tokenizer", "char", "--out", out))
            assert f"--out {out}" in line and why in line and "choose a folder" in line, line
    assert tree(tmp_path) == before


HOLD_AND_CTRL_C = """import runpy, sys, data
hold, write, written = int(sys.argv[1]), data.write_shard, []
# prepare_data.py, run as itself, holds before its shard number `hold`
def write_and_hold(path, tokens):
    if len(written) == hold:
        print("holding", flush=True)
        sys.stdin.readline()
    written.append(write(path, tokens))
    return written[-1]
data.write_shard = write_and_hold
sys.argv = ["prepare_data.py", *sys.argv[2:]]
runpy.run_path("prepare_data.py", run_name="__main__")
"""


def test_ctrl_c_ends_in_one_line_with_status_130_and_the_same_command_resumes(tmp_path):
    """Ctrl-C before any shard is finished and after three, tokenizer processes and all: one line,
    exit 130, every shard whole, and the same command then writes the shards of an uninterrupted
    build, byte for byte."""
    args = ["pystdlib", "--num_tokens", 200_000, "--shard_tokens", 20_000, "--workers", 2]
    reference = prepare("pystdlib", tmp_path / "reference", num_tokens=200_000, shard_tokens=20_000,
                        workers=1)
    for hold in (0, 3):
        out = tmp_path / f"held{hold}"
        build = subprocess.Popen([sys.executable, "-c", HOLD_AND_CTRL_C, str(hold), *map(str, args),
                                  "--out", str(out)],
                                 cwd=ROOT, text=True, start_new_session=True, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert build.stdout.readline() == "holding\n"
        # as a terminal's Ctrl-C: to the process group, workers too
        os.killpg(build.pid, signal.SIGINT)
        stderr = build.communicate(timeout=60)[1]
        assert build.returncode == 130 and stderr.endswith("\n") and stderr.count("\n") == 1, stderr
        mentions(stderr, "interrupted", "finished shards", str(out), "same command resumes")
        # whole, or not there
        assert len([read_shard(shard) for shard in out.glob("*.bin")]) == hold
        again = cli(*args, "--out", out)
        assert again.returncode == 0 and ("resuming" in again.stderr) == (hold > 0), again.stderr
        assert load_meta(out)["shards"] == load_meta(reference)["shards"]
        assert {p.name: p.read_bytes() for p in out.glob("*.bin")} == {
            p.name: p.read_bytes() for p in reference.glob("*.bin")}


def test_a_mistake_in_the_arguments_is_one_line_and_writes_nothing(tmp_path, small, monkeypatch):
    """Every argument out of its range, and a --val_tokens beyond the text (row 15): one line, a
    non-zero exit, no folder, lock, progress.json or shard left, so that nothing invites a resume
    that cannot work."""
    (tmp_path / "in" / "empty.txt").touch()
    (tmp_path / "in" / "rows.jsonl").write_text(json.dumps({"body": "a row"}) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    mistakes = [["pystdlib", "--num_tokens", 0], ["pystdlib", "--num_tokens", -5],
                ["pystdlib", "--shard_tokens", 0], ["pystdlib", "--shard_tokens", 2**31],
                ["pystdlib", "--workers", 0], ["pystdlib", "--workers", -1],
                ["pystdlib", "--workers", "x"],
                ["pystdlib", "--num_tokens", 1000, "--val_tokens", 1000],
                ["pystdlib", "--num_tokens", 1000, "--val_tokens", 2000], ["nope"], [],
                ["pystdlib", "--tokenizer", "nope"], ["pystdlib", "--tokenizer", ""],
                ["pystdlib", "--num", 50], ["text"],
                ["text", "--input", tmp_path / "in" / "missing*.txt"],
                ["text", "--input", tmp_path / "in"],
                ["shakespeare", "--input", tmp_path / "in" / "empty.txt"],
                ["pystdlib", "--input", small],
                ["shakespeare_char", "--input", small, "--val_tokens", 5],
                ["text", "--input", small, "--tokenizer", "char", "--val_tokens", 100_000_000],
                # its 26 characters
                ["text", "--input", small, "--tokenizer", "char", "--val_tokens", 26],
                ["text", "--input", tmp_path / "in" / "rows.jsonl", "--tokenizer", "char"]]
    if gpt2_available():
        mistakes += [["text", "--input", small, "--val_tokens", 100_000_000],  # the row 15
                     ["text", "--input", tmp_path / "in" / "rows.jsonl"]]  # no column 'text'
    before = tree(tmp_path)
    for args in mistakes:
        result = cli(*args, "--out", out)
        # argparse's mistakes (no dataset, a value not an int) exit 2, as argparse's do
        one_line_error(result)
        argparses = ([], ["pystdlib", "--workers", "x"], ["pystdlib", "--num", 50])
        assert result.returncode == (2 if args in argparses else 1), args
    assert tree(tmp_path) == before
    monkeypatch.setattr(os, "access", lambda path, mode: mode != os.R_OK)  # root reads every file
    assert "no permission to read" in error_of(prepare, "text", out, inputs=[str(small)])


@needs_gpt2
def test_val_tokens_found_beyond_the_text_only_while_tokenizing_leave_only_the_lock(tmp_path,
                                                                                    small):
    """7 GPT-2 tokens in 26 bytes: --val_tokens 20 passes the bound of 4 tokens a byte and is found
    at the end: what the build wrote goes, and the message is the argument's, not a resume's (the
    rerun says it again)."""
    out = tmp_path / "out"
    for _ in range(2):
        line = one_line_error(cli("text", "--input", small, "--val_tokens", 20, "--shard_tokens", 2,
                                  "--out", out))
        assert "lower --val_tokens" in line and "resume" not in line
        assert [p.name for p in out.iterdir()] == [".lock"]


# ASCII, several lines, multi-byte characters, and one too short for 5% to be a token
SMALL_TEXTS = {
    "ascii": ("To be, or not to be, that is the question:\n"
              "Whether 'tis nobler in the mind to suffer\n") * 3,
    "unicode": "naïve café — 東京 and ünïcödé, façade.\n" * 7 + "the end\n",
    "lines": "".join(f"line {i}: {'x' * (i % 5)} y\n" for i in range(37)),
    "short": "a tiny text, 29 bytes long.\n",
}


@pytest.mark.parametrize("name", SMALL_TEXTS)
@pytest.mark.parametrize("tokenizer", ["char", pytest.param("gpt2", marks=needs_gpt2)])
def test_each_tokenizer_holds_out_its_documented_share_and_the_splits_partition_the_text(
        tmp_path, name, tokenizer):
    """The held-out split per tokenizer, on small texts: shakespeare* holds out the text's last 10%
    of characters (val decodes to text[int(0.9 n):], train to the rest); text holds out the first 5%
    of the stream's estimated tokens (the file's bytes for char, bytes/4 for GPT-2 BPE), at least 1.
    Val and train never share a token and together are the whole text."""
    text = SMALL_TEXTS[name]
    path = tmp_path / "input.txt"
    path.write_text(text, encoding="utf-8")
    size = path.stat().st_size

    # the folder's tokens of s: its own character table, or GPT-2's ordinary encoding
    def encode(out, s):
        return (get_tokenizer(load_meta(out))[0](s) if tokenizer == "char"
                else prepare_data._gpt2().encode_ordinary(s))

    out = prepare("shakespeare_char" if tokenizer == "char" else "shakespeare", tmp_path / "sh",
                  inputs=[str(path)], workers=1)
    n = int(len(text) * 0.9)
    assert split_text(out, "val") == text[n:] and split_text(out, "train") == text[:n]
    assert load_meta(out)["tokens"] == {"val": len(encode(out, text[n:])),
                                        "train": len(encode(out, text[:n]))}

    out = prepare("text", tmp_path / "text", inputs=[str(path)], tokenizer=tokenizer, workers=1)
    held_out = max(1, (size if tokenizer == "char" else size // 4) // 20)
    tokens, stream = load_meta(out)["tokens"], encode(out, text)
    assert tokens == {"val": held_out, "train": len(stream) - held_out}
    assert (split_tokens(out, "val") == stream[:held_out]
            and split_tokens(out, "train") == stream[held_out:])
    if tokenizer == "char":
        assert split_text(out, "val") + split_text(out, "train") == text
