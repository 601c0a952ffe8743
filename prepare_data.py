"""Turn text into the token shards train.py reads: toy, local and web-scale corpora, offline-first.

The shards are in data.py's format (its docstring says it; write_shard writes one), and
meta.json, written last, marks a folder as complete. Processes building one folder take turns (a
lock), and a build that fails or is killed keeps its finished shards: run again with the same
arguments, it resumes after the last of them.

    python prepare_data.py pystdlib                          # the offline default, character-level
    python prepare_data.py shakespeare --input input.txt     # GPT-2 BPE
    python prepare_data.py fineweb_edu --num_tokens 1000000000
"""
import signal

# a Ctrl-C while torch loads ends the script without a traceback; data.run_cli reports later ones
if __name__ == "__main__" and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.SIG_DFL)

import argparse
import codecs
import collections
import contextlib
import glob
import hashlib
import itertools
import json
import multiprocessing
import multiprocessing.pool
import os
import pathlib
import re
import socket
import sys
import sysconfig
import time
import urllib.parse
import urllib.request

import numpy as np
from tqdm import tqdm

from data import (DATASETS, GPT2_META, HEADER_BYTES, _gpt2, char_table, check_out_dir, counted,
                  first_line, get_tokenizer, locked_folder, read_shard, run_cli, write_json,
                  write_shard)

SHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt")
# text per worker task, and per piece of a .txt file: pickling costs little next to it
BATCH_CHARS = 1 << 20
SAFE_CUT = re.compile(r"(?<=\S\n)(?=\S)")  # after a newline between non-spaces: see _txt_pieces
# an unfinished build's shards so far and where its text stands: what a rerun resumes
PROGRESS = "progress.json"
SHARD_NAME = re.compile(r"(val|train)_\d{6}\.bin")  # the shards a build writes (_ShardWriter.flush)
# name: (repository, configuration)
HUB = {"fineweb_edu": ("HuggingFaceFW/fineweb-edu", "sample-10BT"),
       "openwebtext": ("Skylion007/openwebtext", None)}
# datasets' builders
BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}

_replaced = collections.Counter()  # invalid UTF-8 bytes turned into U+FFFD: reported, not fatal


def _count_and_replace(err):
    _replaced["bytes"] += err.end - err.start
    return "\ufffd", err.end


codecs.register_error("normgpt_replace", _count_and_replace)


# ----------------------------------------------------------------------------- tokenizers

def _first_chars(docs, cap):
    """docs cut after cap characters: at character level a token cap is a character cap, and the
    character table must not see text that will not be written."""
    def capped():
        n = 0
        for split, text, first in docs():
            if n >= cap:
                return
            yield split, text[:cap - n], first
            n += min(len(text), cap - n)
    return capped


# ----------------------------------------------------------------------------- sources
# A source returns (docs, description, size in bytes or None); docs() yields (split, text, first)
# afresh on each call, decoding lazily: split None where --val_tokens decides, and first False for
# the later pieces of a document cut for memory (no end-of-text token goes before them).

def _local_files(patterns):
    """Files named or matched by globs, each existing and non-empty, in sorted order per pattern."""
    files = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern, recursive=True))
        if not matches:
            raise SystemExit(f"error: --input {pattern}: no such file")
        for path in map(pathlib.Path, matches):
            if not path.is_file():
                raise SystemExit(f"error: --input {path} is not a file; "
                                 f"pass files or a glob like 'dir/*.jsonl'")
            if not os.access(path, os.R_OK):
                raise SystemExit(f"error: --input {path}: no permission to read it")
            if path.stat().st_size == 0:
                raise SystemExit(f"error: --input {path} is empty")
            files.append(path)
    return files


def _shakespeare(inputs):
    files = _local_files(inputs)
    if len(files) > 1:
        raise SystemExit("error: shakespeare takes a single --input file")
    if files:
        path = files[0]
        raw, source = path.read_bytes(), str(path.resolve())
    else:
        try:
            with urllib.request.urlopen(SHAKESPEARE_URL, timeout=10) as response:
                raw, source = response.read(), SHAKESPEARE_URL
        except OSError as e:
            raise SystemExit(
                f"error: cannot download tiny Shakespeare ({e}); pass a local copy with "
                "--input path/to/input.txt")

    def docs():
        text = raw.decode("utf-8", "normgpt_replace")
        # nanoGPT's split: the first 90% of the characters train, the rest val
        n = int(len(text) * 0.9)
        return iter([("val", text[n:], True), ("train", text[:n], True)])

    return docs, source, len(raw)


def _pystdlib():
    root, files = pathlib.Path(sysconfig.get_paths()["stdlib"]), []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [d for d in subfolders
                         if d not in ("test", "tests", "idle_test", "site-packages")]
        files += [pathlib.Path(folder, name) for name in names if name.endswith(".py")]
    files.sort()
    docs = lambda: ((None, p.read_bytes().decode("utf-8", "normgpt_replace"), True) for p in files)
    source = (f"{len(files)} .py files of the Python {sys.version.split()[0]} standard library "
              f"in {root}")
    return docs, source, sum(p.stat().st_size for p in files)


def _stream(what, fix, *args, **kwargs):
    """Rows of datasets.load_dataset(*args) streamed; its errors become one line that names the
    fix."""
    from datasets import load_dataset, logging
    # its logged error (a broken .jsonl's) would be a line before ours
    logging.set_verbosity(logging.CRITICAL)
    try:
        yield from load_dataset(*args, split="train", streaming=True, **kwargs)
    except Exception as e:
        raise SystemExit(f"error: cannot read {what}: {first_line(e)}; {fix}")


def _txt_pieces(path):
    """A .txt file as one document, in pieces of about BATCH_CHARS characters: no file is ever held
    whole. A piece ends at a newline between two non-space characters, where GPT-2's pre-tokenizer
    splits anyway, so the pieces' tokens are the whole text's. Not at any newline: '\\n  x'
    pre-tokenizes as '\\n ', ' x', but cut after the newline as '\\n', ' ', ' x'. A stretch without
    such a newline stays in one piece."""
    # universal newlines, as datasets reads
    with open(path, encoding="utf-8", errors="normgpt_replace") as f:
        text, first = "", True
        while block := f.read(BATCH_CHARS):
            text += block
            cut = max((m.start() for m in SAFE_CUT.finditer(text, len(text) - len(block))),
                      default=0)
            if cut:
                yield None, text[:cut], first
                text, first = text[cut:], False
        if text:
            yield None, text, first


def _text_files(inputs, column):
    if not inputs:
        raise SystemExit(
            "error: the text dataset needs --input FILE|GLOB ... (.txt, .jsonl, .json, .parquet)")
    # builder: files, since one load_dataset call takes one format
    groups = collections.defaultdict(list)
    for path in _local_files(inputs):
        if path.suffix.lower() not in BUILDERS:
            raise SystemExit(f"error: --input {path}: unsupported file type; "
                             f"use {', '.join(BUILDERS)}")
        groups[BUILDERS[path.suffix.lower()]].append(str(path))

    def rows(builder, files):
        for row in _stream(f"{files[0]} ({counted(len(files), builder + ' file')})", "check them",
                           builder, data_files=files):
            if column not in row:
                raise SystemExit(
                    f"error: {files[0]} has no column {column!r} (it has {', '.join(row)}); "
                    "pass --text_column NAME")
            yield None, row[column] or "", True

    def docs():
        for builder, files in groups.items():
            yield from ((p for path in files for p in _txt_pieces(path)) if builder == "text"
                        else rows(builder, files))

    # a wrong --text_column is an argument error: found before any output
    for builder in groups.keys() - {"text"}:
        next(rows(builder, groups[builder]), None)
    files = [f for group in groups.values() for f in group]
    return (docs, f"{counted(len(files), 'local file')}: {', '.join(files)}",
            sum(map(os.path.getsize, files)))


def _hub(dataset):
    repo, config = HUB[dataset]
    fix = "for local files use:  python prepare_data.py text --input FILES"
    # a mirror, if the user set one
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    offline = [v for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
               if os.environ.get(v, "").lower() in ("1", "true")]
    try:  # fail in seconds, not after datasets' retries
        url = urllib.parse.urlsplit(endpoint)
        if offline or not url.hostname:
            raise OSError(f"{offline[0]} is set" if offline
                          else "HF_ENDPOINT is not a URL like https://host")
        # behind a proxy, only datasets itself can tell
        if not urllib.request.getproxies().get(url.scheme):
            port = url.port or (443 if url.scheme == "https" else 80)
            socket.create_connection((url.hostname, port), timeout=3).close()
    except (OSError, ValueError) as e:  # ValueError: a port that is not a number
        raise SystemExit(f"error: cannot reach the Hugging Face hub at {endpoint} for {repo} "
                         f"({e}); {fix}")
    docs = lambda: ((None, row["text"], True) for row in _stream(repo, fix, repo, config))
    return docs, f"{repo} ({config or 'default'}) from the Hugging Face hub", None


def _source(dataset, inputs, text_column):
    if dataset == "text":
        return _text_files(inputs, text_column)
    if inputs and dataset in ("pystdlib", *HUB):
        raise SystemExit(f"error: {dataset} takes no --input; for local files use:  "
                         "python prepare_data.py text --input FILES")
    if dataset in HUB:
        return _hub(dataset)
    return _shakespeare(inputs) if dataset.startswith("shakespeare") else _pystdlib()


# ---------------------------------------------------------------------------- parallel tokenization

_meta = None  # this worker's tokenizer, as meta.json describes it
_encode = None  # its encoder, made on the worker's first batch


def _init_worker(meta, forked):
    """Nothing here may fail: Pool starts a worker whose initializer raised again, and again,
    forever."""
    global _meta, _encode
    # Ctrl-C reaches the whole process group: the parent alone stops the build, in one line
    if forked:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    _meta, _encode = meta, None


def _encode_texts(texts):
    """The texts' token arrays; or the SystemExit (a one-line error) that making the encoder or
    encoding raised, returned for the parent to raise: a worker that exits loses its batch, and
    the parent would wait for it forever. Any other error reaches the parent as it is."""
    global _encode
    try:
        if _encode is None:
            # ordinary encoding: an "<|endoftext|>" inside a document is text, only separators
            # are EOT
            gpt2 = _meta["tokenizer"] == "gpt2"
            _encode = _gpt2().encode_ordinary if gpt2 else get_tokenizer(_meta)[0]
        return [np.array(_encode(text), dtype=np.uint16) for text in texts]
    except SystemExit as stop:
        return stop


def _batches(docs):
    """Group (split, text, first) triples into lists of about BATCH_CHARS characters."""
    batch, size = [], 0
    for doc in docs:
        batch.append(doc)
        size += len(doc[1])
        if size >= BATCH_CHARS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _tokenized(docs, meta, workers):
    """Yield ([(split, first)], token arrays) batch by batch, in order. At most two batches per
    worker are in flight: Pool.imap would read ahead through the whole stream and hold it in
    memory."""
    if workers == 1:  # a thread: no fork, no pickling
        pool = multiprocessing.pool.ThreadPool(1, _init_worker, (meta, False))
    else:
        # forked from a server of one thread: a fork of this process, whose libraries (torch when
        # train.py makes pystdlib, a test runner) run threads that may hold a lock, can start a
        # worker that never runs. The server and its workers start with Ctrl-C ignored (a
        # disposition exec keeps): one landing while a worker imports would print a stray traceback;
        # the parent alone stops the build
        ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            pool = multiprocessing.get_context("forkserver").Pool(workers, _init_worker,
                                                                  (meta, True))
        finally:
            signal.signal(signal.SIGINT, ignored)
    with pool:
        pending = collections.deque()
        for batch in _batches(docs):
            labels = [(split, first) for split, _, first in batch]
            pending.append((labels, pool.apply_async(_encode_texts,
                                                     ([text for _, text, _ in batch],))))
            if len(pending) >= 2 * workers:
                labels, result = pending.popleft()
                yield labels, _arrays(result)
        for labels, result in pending:
            yield labels, _arrays(result)


def _arrays(result):
    """A batch's token arrays from its worker, whose one-line error is raised here."""
    arrays = result.get()
    if isinstance(arrays, SystemExit):
        raise arrays
    return arrays


class _ShardWriter:
    """Routes documents to val and train and writes each shard as it fills: memory is one shard at
    most. After each shard, progress.json records the shards so far and the state at the start of
    the document in progress (its mark); a build resumed from it re-reads that document and drops
    what is written. clear() empties out of what other builds left, once, before the first file
    this one writes: until then a complete build in out stays whole."""

    def __init__(self, out, meta, shard_tokens, val_tokens, cap, clear, progress=None):
        self.out, self.meta, self.val_tokens, self.cap, self.eot = (
            out, meta, val_tokens, cap, meta["eot_token"])
        # what was in out goes just before the first file this build writes
        self.clear = clear
        self.buffer, self.n, self.split = np.empty(shard_tokens, np.uint16), 0, "val"
        progress = progress or dict(shards={"val": [], "train": []},
                                    mark=dict(doc=0, tokens={"val": 0, "train": 0}, streams=[]))
        self.shards, self.mark = progress["shards"], progress["mark"]
        self.docs, self.tokens = self.mark["doc"], dict(self.mark["tokens"])
        self.streams = set(self.mark["streams"])
        # tokens of the document in progress that are already in the shards
        self.skip = (sum(s["tokens"] for split in self.shards.values() for s in split)
                     - sum(self.tokens.values()))

    def full(self):
        return bool(self.cap) and self.tokens["val"] + self.tokens["train"] >= self.cap

    def add(self, split, tokens, first):
        """Append a document (or, first False, a later piece of one) to its split's stream, or with
        split None to the one stream whose first val_tokens tokens are held out. GPT-2 documents are
        separated by EOT. A val document holds at most val_tokens too: shakespeare* under
        --num_tokens."""
        self.mark = dict(doc=self.docs, tokens=dict(self.tokens), streams=list(self.streams))
        self.docs += 1
        if not len(tokens) or self.full():
            return
        if first and self.eot is not None and split in self.streams:
            tokens = np.concatenate(([self.eot], tokens)).astype(np.uint16)
        self.streams.add(split)
        if self.cap:
            tokens = tokens[:self.cap - self.tokens["val"] - self.tokens["train"]]
        cut = 0 if split == "train" else max(0, self.val_tokens - self.tokens["val"])
        self._append("val", tokens[:cut])
        if split != "val":
            self._append("train", tokens[cut:])

    def _append(self, split, tokens):
        if self.skip:  # resumed: these tokens are in a shard already
            take = min(self.skip, len(tokens))
            self.skip, self.tokens[split], tokens = (self.skip - take, self.tokens[split] + take,
                                                     tokens[take:])
        # val comes first; its last shard ends where train begins
        if len(tokens) and split != self.split:
            self.flush()
            self.split = split
        while len(tokens):
            take = min(len(tokens), len(self.buffer) - self.n)
            self.buffer[self.n:self.n + take] = tokens[:take]
            self.n, self.tokens[split], tokens = (self.n + take, self.tokens[split] + take,
                                                  tokens[take:])
            if self.n == len(self.buffer):
                self.flush()

    def flush(self):
        if self.n:
            if self.clear:  # this build's first file
                self.clear()
                self.clear = None
            name = f"{self.split}_{len(self.shards[self.split]):06d}.bin"
            sha = write_shard(self.out / name, self.buffer[:self.n])
            self.shards[self.split].append({"file": name, "tokens": self.n, "sha256": sha})
            self.n = 0
            write_json(self.out / PROGRESS, dict(meta=self.meta, val_tokens=self.val_tokens,
                                                  shards=self.shards, mark=self.mark))


def _write_shards(docs, writer, workers):
    """Tokenize docs in parallel into val then train shards, after the documents the writer already
    holds; the last shard stays in the writer's buffer, for the caller to flush."""
    # read, not tokenized, up to where the shards end
    stream = itertools.islice(docs(), writer.docs, None)
    with (tqdm(unit="doc", disable=None, file=sys.stderr,
               desc=f"tokenizing {writer.meta['dataset']}", initial=writer.docs) as bar,
          contextlib.closing(_tokenized(stream, writer.meta, workers)) as batches):
        for labels, arrays in batches:  # closing: the workers stop on any exit
            for (split, first), tokens in zip(labels, arrays):
                writer.add(split, tokens, first)
            bar.update(len(arrays))
            bar.set_postfix_str(f"{sum(writer.tokens.values()):,} tokens", refresh=False)
            if writer.full():
                break


# ----------------------------------------------------------------------------- the build

def _default_val_tokens(cap, size, tokenizer):
    """5% of the corpus (sizes from bytes are estimates), at most one 100M-token shard like
    modded-nanogpt's."""
    estimates = [n for n in (cap, size and size // (1 if tokenizer == "char" else 4)) if n]
    return max(1, min(100_000_000, min(estimates) // 20)) if estimates else 100_000_000


def _record(out, name, whole=True):
    """out/name (meta.json or progress.json) if it is a build's list of shards, each whole (unless
    whole is False); else None."""
    try:
        record = json.loads((out / name).read_text())
        shards = [s for split in ("val", "train") for s in record["shards"][split]]
        if all((out / s["file"]).stat().st_size == HEADER_BYTES + 2 * s["tokens"] if whole else
               isinstance(s["file"], str) for s in shards):
            return record
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _written(out):
    """The names in out that builds wrote, as its records tell: them, their shards and the next of
    each split, the temporary file of each, and the lock: all that a build killed at any moment
    leaves. None when out holds no record and no lock: no build has been there."""
    records = {name: _record(out, name, whole=False) for name in ("meta.json", PROGRESS)}
    if not any(records.values()) and not (out / ".lock").exists():
        return set()
    names = {name for name, record in records.items() if record or not (out / name).exists()}
    for record in [r for r in records.values() if r] or [dict(shards={"val": [], "train": []})]:
        # the shards dataset lists the user's files
        if record.get("meta", record).get("dataset") != "shards":
            for split, shards in record["shards"].items():
                names.update(s["file"] for s in shards if SHARD_NAME.fullmatch(s["file"]))
                names.add(f"{split}_{len(shards):06d}.bin")
    return {".lock", *names, *(name + ".tmp" for name in names)}


def _check_folder(out, inputs):
    """out holds nothing but the inputs and what builds wrote: a build replaces or removes no other
    file."""
    # before the records, which grow while others build
    listed = list(out.iterdir()) if out.is_dir() else []
    ours, inputs = _written(out), {os.path.abspath(p) for pattern in inputs
                                   for p in glob.glob(pattern, recursive=True)}
    others = sorted(p.name for p in listed
                    if p.name not in ours and os.path.abspath(p) not in inputs)
    if others:
        raise SystemExit(f"error: --out {out} holds files no build wrote ({', '.join(others[:3])}"
                         f"{', ...' if len(others) > 3 else ''}); "
                         f"choose a new or empty folder, or move them")


def _clear(out, keep=()):
    """Remove what builds wrote in out but keep. meta.json first, so that out is never complete
    while it changes, renamed progress.json: its list of shards lasts while they go, as a later
    build's to remove."""
    written = _written(out)
    if "meta.json" in written and (out / "meta.json").exists():
        os.replace(out / "meta.json", out / PROGRESS) if not keep else (out / "meta.json").unlink()
    # progress.json last
    for name in sorted(written - {".lock", *keep}, key=lambda name: name == PROGRESS):
        (out / name).unlink(missing_ok=True)


def _prepared(out, args):
    """True when out holds a complete build made with args; an error when it holds one made with
    others."""
    previous = (_record(out, "meta.json") or {}).get("args")
    if previous is not None and previous != args:
        changed = ", ".join(f"{k} {previous.get(k)!r} -> {v!r}" for k, v in args.items()
                            if previous.get(k) != v)
        raise SystemExit(f"error: {out} was prepared with other arguments ({changed}); "
                         f"pass --force to rebuild it")
    if previous is not None:
        print(f"{out} is already prepared with these arguments: "
              f"nothing to do (--force rebuilds it)")
    return previous is not None


def _build(out, docs, meta, val_tokens, cap, shard_tokens, workers):
    """Write the shards, then meta.json. A build that fails or is killed keeps its finished shards
    and progress.json; run again with the same arguments, it resumes after the last of them. What
    other builds left in out goes just before the first shard is written: a rebuild (--force) whose
    arguments turn out wrong while it tokenizes leaves a complete build as it was, unless its
    held-out tokens filled a shard before the text ran out."""
    progress = _record(out, PROGRESS)
    if progress and (progress.get("meta"), progress.get("val_tokens")) != (meta, val_tokens):
        # another text or other arguments (or a meta.json being cleared): start afresh
        progress = None
    keep = ({PROGRESS, *(s["file"] for s in itertools.chain(*progress["shards"].values()))}
            if progress else set())
    if progress:
        print(f"resuming the build of {out} after its {len(keep) - 1} finished shards",
              file=sys.stderr)
    _replaced.clear()
    writer = _ShardWriter(out, meta, shard_tokens, val_tokens, cap, lambda: _clear(out, keep),
                          progress)
    t0, resumed = time.time(), sum(writer.tokens.values())
    try:
        _write_shards(docs, writer, workers)
        # the last shard, unless the arguments left no training tokens (below)
        if writer.tokens["train"]:
            writer.flush()
    # Ctrl-C, a stream that broke, a full disk: one line
    except (KeyboardInterrupt, SystemExit, OSError) as e:
        kept = f"kept the finished shards in {out}: the same command resumes after them"
        if isinstance(e, KeyboardInterrupt):
            raise KeyboardInterrupt(kept)  # data.run_cli prints it
        raise SystemExit(f"{e.code if isinstance(e, SystemExit) else 'error: ' + first_line(e)}; "
                         f"{kept}")
    # a mistake in the arguments, not a failure to resume from: nothing of this build is kept
    if not writer.tokens["train"]:
        if writer.clear is None:  # it wrote shards of val
            _clear(out)
        if not writer.tokens["val"]:  # GPT-2's empty text (char-level's is found before the build)
            raise SystemExit(f"error: no text in {meta['source']}")
        # GPT-2's tokens, bounded but not counted before the build; shakespeare*'s split and
        # character-level tokens are checked before it
        raise SystemExit(f"error: no training tokens: all {writer.tokens['val']:,} tokens of the "
                         f"text are held out; lower --val_tokens or use more text")
    write_json(out / "meta.json", {**meta, "tokens": writer.tokens, "shards": writer.shards})
    (out / PROGRESS).unlink(missing_ok=True)
    if bad := _replaced["bytes"]:
        print(f"warning: replaced {counted(bad, 'byte')} of invalid UTF-8 with U+FFFD",
              file=sys.stderr)
    n, seconds = writer.tokens, time.time() - t0
    print(f"wrote {n['train']:,} train + {n['val']:,} val tokens "
          f"({meta['tokenizer']}, vocab {meta['vocab_size']:,}) "
          f"to {out} in {seconds:.1f}s, "
          f"{(n['train'] + n['val'] - resumed) / seconds:,.0f} tokens/s")


def _shards_meta(out, inputs, args):
    """meta.json for GPT-2 shards that already exist (llm.c's and modded-nanogpt's FineWeb downloads
    use this format): they load unchanged from where they are; 'val' in a name means val."""
    files = _local_files(inputs)
    if not files or all("val" in f.name for f in files) or not any("val" in f.name for f in files):
        raise SystemExit(
            "error: shards needs --input with train and val shards ('val' in the val files' names)")
    shards = {"train": [], "val": []}
    for path in files:
        sha = hashlib.sha256()
        with open(path, "rb") as f:  # hashlib.file_digest would do this, from Python 3.11
            for block in iter(lambda: f.read(1 << 20), b""):
                sha.update(block)
        split = "val" if "val" in path.name else "train"
        shards[split].append({"file": os.path.relpath(path, out), "tokens": len(read_shard(path)),
                              "sha256": sha.hexdigest()})
    tokens = {split: sum(s["tokens"] for s in shards[split]) for split in shards}
    print(f"indexing {tokens['train']:,} train + {tokens['val']:,} val tokens of {len(files)} "
          f"shards in {out}/meta.json")
    return dict(dataset="shards", **GPT2_META,
                source=f"{len(files)} existing shards: {', '.join(map(str, files))}", args=args,
                tokens=tokens, shards=shards)


def _tokenizer_meta(dataset, docs, source, size, args, val_tokens):
    """meta.json's description of the tokenizer; char-level, a first pass over the text finds its
    characters. Then val_tokens (held out) that hold all the text are an argument error. A character
    is a token; a GPT-2 token holds a byte or more (an invalid one becomes U+FFFD's 3), so 4x the
    bytes bounds the tokens (with EOTs)."""
    if args["tokenizer"] == "gpt2":
        _gpt2()  # fails here, before any output, when it cannot load
        meta, most = dict(dataset=dataset, **GPT2_META, source=source, args=args), size and 4 * size
    else:
        chars, most = char_table(text for _, text, _ in docs())
        if not chars:
            raise SystemExit(f"error: no text in {source}")
        meta = dict(dataset=dataset, tokenizer="char", vocab_size=len(chars), eot_token=None,
                    chars=chars, source=source, args=args)
    if dataset.startswith("shakespeare"):
        # nanoGPT's split: train is the first 90% of the characters, none of a text of one
        if not any(text for split, text, _ in docs() if split == "train"):
            raise SystemExit(f"error: no training tokens: {source} is too short for nanoGPT's "
                             f"90/10 split to leave train a character; use more text")
    elif args["val_tokens"] and most and val_tokens >= most:
        raise SystemExit(f"error: no training tokens: --val_tokens {val_tokens:,} "
                         f"holds out all of the text (at most {most:,} tokens); lower --val_tokens")
    # the default, 5% but at least 1, of a text of one character (GPT-2's are not counted yet)
    elif args["tokenizer"] == "char" and val_tokens >= most:
        raise SystemExit(f"error: no training tokens: val holds out {val_tokens:,} of the "
                         f"text's {most:,} tokens; use more text")
    return meta


def prepare(dataset, out=None, *, inputs=(), tokenizer=None, num_tokens=None, val_tokens=None,
            shard_tokens=100_000_000, workers=None, force=False, text_column="text"):
    """Build out (default data/DATASET) from a dataset, unless it is already built with these
    arguments. Processes building the same folder take turns: a later one waits, then finds the
    folder built."""
    if dataset not in DATASETS:
        raise SystemExit(f"error: unknown dataset {dataset!r}; "
                         f"choose one of: {', '.join(DATASETS)}")
    counts = dict(num_tokens=num_tokens, val_tokens=val_tokens, shard_tokens=shard_tokens,
                  workers=workers)
    for name, value in counts.items():
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise SystemExit(f"error: --{name} must be a positive integer, got {value!r}")
    if shard_tokens >= 2**31:
        raise SystemExit(
            "error: --shard_tokens must be below 2**31, as the header counts tokens in an int32")
    if val_tokens and dataset.startswith("shakespeare"):
        raise SystemExit("error: shakespeare* holds out nanoGPT's last 10% of the text, "
                         "so --val_tokens does not apply: drop it "
                         "(under --num_tokens N, val keeps N/10 tokens and train the rest)")
    if val_tokens and num_tokens and val_tokens >= num_tokens:
        raise SystemExit(f"error: no training tokens: --val_tokens {val_tokens:,} holds out all "
                         f"of --num_tokens {num_tokens:,}; lower --val_tokens")
    # an empty --tokenizer= is an unknown one, not the default
    tokenizer = DATASETS[dataset][0] if tokenizer is None else tokenizer
    workers = workers or os.cpu_count()
    if tokenizer not in ("gpt2", "char"):
        raise SystemExit(f"error: unknown tokenizer {tokenizer!r}; choose gpt2 or char")
    if out == "":  # a shell variable left empty, not a choice of data/DATASET
        raise SystemExit("error: --out is empty: name a folder, or leave --out out for "
                         f"data/{dataset}")
    out = pathlib.Path(out or pathlib.Path("data", dataset))
    args = dict(dataset=dataset, inputs=[os.path.abspath(p) for p in inputs], tokenizer=tokenizer,
                num_tokens=num_tokens, val_tokens=val_tokens, shard_tokens=shard_tokens,
                text_column=text_column)
    if not force and _prepared(out, args):  # a complete folder may be read-only
        return out
    check_out_dir(out, "--out")
    _check_folder(out, inputs)

    # Everything that can fail on bad input happens before the folder is made.
    if dataset == "shards":
        meta = _shards_meta(out, inputs, args)
        # shards in out itself stay
        indexed = {s["file"] for split in meta["shards"].values() for s in split}
        build = lambda: (_clear(out, indexed), write_json(out / "meta.json", meta))
    else:
        # checks inputs and network first
        docs, source, size = _source(dataset, list(inputs), text_column)
        # the source splits 90/10; under a cap, val keeps a tenth of it
        if dataset.startswith("shakespeare"):
            val_tokens = max(1, num_tokens // 10) if num_tokens else sys.maxsize
        elif tokenizer == "char" and num_tokens:
            docs = _first_chars(docs, num_tokens)
        val_tokens = val_tokens or _default_val_tokens(num_tokens, size, tokenizer)
        if num_tokens and val_tokens >= num_tokens:  # a --val_tokens too large is found above
            raise SystemExit(f"error: no training tokens: val holds out {val_tokens:,} of "
                             f"--num_tokens {num_tokens:,}; raise --num_tokens")
        meta = _tokenizer_meta(dataset, docs, source, size, args, val_tokens)
        build = lambda: _build(out, docs, meta, val_tokens, num_tokens, shard_tokens, workers)
    with locked_folder(out, "--out"):  # processes building out take turns
        # another process may have built it while this one waited
        if force or not _prepared(out, args):
            _check_folder(out, inputs)
            build()
    return out


def count(text):
    """A number of tokens as an int, written whole (100000000) or as --help writes it (1e8)."""
    try:
        return int(text)
    except ValueError:
        value = float(text)  # not a number: argparse's error names the option and the text
    if not value.is_integer():  # 1.5, 1e-3, inf, nan: argparse's error quotes the text
        raise ValueError
    return int(value)


def main(argv):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # --num=5 is a mistake, not --num_tokens
        epilog="datasets:\n" + "\n".join(f"  {name:<17} {line}"
                                         for name, (_, line) in DATASETS.items()))
    add = parser.add_argument
    add("dataset", help="one of the datasets below")
    add("--input", dest="inputs", nargs="+", action="extend", default=[], metavar="PATH",
        help="local text instead of a download (shakespeare*), or the files and globs of `text`")
    add("--tokenizer", metavar="gpt2|char",
        help="GPT-2 BPE or the text's own characters (default: per dataset)")
    add("--out", metavar="DIR", help="output folder (default: data/DATASET)")
    add("--num_tokens", type=count, metavar="N",
        help="stop after this many tokens, val and train together")
    add("--val_tokens", type=count, metavar="N",
        help="held out: the first N tokens of the stream; default 5%% of the corpus, at most 100M "
             "(shakespeare*: nanoGPT's last 10%% of the text, its first N/10 tokens under "
             "--num_tokens N)")
    add("--shard_tokens", type=count, default=100_000_000, metavar="N",
        help="tokens per shard file (default 1e8)")
    add("--workers", type=int, metavar="N", help="tokenizer processes (default: all cores)")
    add("--text_column", default="text", metavar="NAME",
        help="the column of .jsonl/.json/.parquet rows (text)")
    add("--force", action="store_true", help="rebuild even if the folder is complete")
    # one line, not the usage
    parser.error = lambda message: parser.exit(2, f"error: {message} (see --help)\n")
    prepare(**vars(parser.parse_args(argv)))


if __name__ == "__main__":
    run_cli(main)
