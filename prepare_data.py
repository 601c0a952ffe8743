"""Turn text into the token shards train.py reads: toy, local and web-scale corpora, offline-first.

A shard is llm.c / modded-nanogpt's format: a 256 x int32 header (magic 20240520, version 1,
token count), then the tokens as uint16. meta.json, written last, marks a folder as complete.
get_batch draws train.py's batches from them.

    python prepare_data.py pystdlib                          # the offline default, character-level
    python prepare_data.py shakespeare --input input.txt     # GPT-2 BPE
    python prepare_data.py fineweb_edu --num_tokens 1000000000
"""
import argparse
import codecs
import collections
import contextlib
import glob
import hashlib
import json
import multiprocessing
import multiprocessing.pool
import os
import pathlib
import socket
import sys
import sysconfig
import time
import urllib.request

import numpy as np
import torch
from tqdm import tqdm

MAGIC, VERSION, HEADER_BYTES = 20240520, 1, 1024
SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
BATCH_CHARS = 1 << 20  # text per worker task: big enough that pickling costs little next to tokenizing
DATASETS = {  # name: (default tokenizer, one line for --help)
    "shakespeare_char": ("char", "tiny Shakespeare by characters (nanoGPT's classic): --input FILE or downloaded"),
    "shakespeare": ("gpt2", "tiny Shakespeare, GPT-2 BPE: --input FILE or downloaded"),
    "pystdlib": ("char", "this Python's standard library sources, tests left out: offline, the default corpus"),
    "fineweb_edu": ("gpt2", "HuggingFaceFW/fineweb-edu sample-10BT streamed from the hub; cap it with --num_tokens"),
    "openwebtext": ("gpt2", "Skylion007/openwebtext (nanoGPT's) streamed from the hub"),
    "text": ("gpt2", "local --input files or globs: .txt (a document per file), .jsonl, .json, .parquet"),
    "shards": ("gpt2", "existing GPT-2 shards, e.g. modded-nanogpt's FineWeb (--input 'dir/*.bin'): indexed in place"),
}
HUB = {"fineweb_edu": ("HuggingFaceFW/fineweb-edu", "sample-10BT"), "openwebtext": ("Skylion007/openwebtext", None)}
BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}  # datasets' builders

_replaced = collections.Counter()  # invalid UTF-8 bytes turned into U+FFFD: reported, not fatal


def _count_and_replace(err):
    _replaced["bytes"] += err.end - err.start
    return "\ufffd", err.end


codecs.register_error("normgpt_replace", _count_and_replace)


# ----------------------------------------------------------------------------- shards and meta.json

def _atomic_write(path, *chunks):
    """Write to a temporary name in the same folder, fsync, then rename: no reader sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_shard(path, tokens):
    """Write tokens as one shard, atomically; returns the file's sha256 for meta.json."""
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() >= 2**16):
        raise SystemExit(f"error: token ids {tokens.min()}..{tokens.max()} do not fit a uint16 shard (0..65535); "
                         "use a tokenizer with a smaller vocabulary")
    tokens = np.ascontiguousarray(tokens, dtype=np.uint16)
    header = np.zeros(HEADER_BYTES // 4, np.int32)
    header[:3] = MAGIC, VERSION, len(tokens)
    _atomic_write(pathlib.Path(path), header.tobytes(), tokens)
    sha = hashlib.sha256(header.tobytes())
    sha.update(tokens)
    return sha.hexdigest()


def read_shard(path):
    """The tokens of a shard as a read-only uint16 memmap, after checking its header and size."""
    path = pathlib.Path(path)

    def invalid(why):
        return SystemExit(f"error: {path} is not a valid token shard ({why}); "
                          f"rebuild it with: {_prepare_command(path.parent)} --force")

    try:
        header = np.fromfile(path, dtype=np.int32, count=HEADER_BYTES // 4)
    except OSError as e:
        raise invalid(e.strerror)
    if len(header) < HEADER_BYTES // 4:
        raise invalid("shorter than its 1024-byte header")
    if header[0] != MAGIC or header[1] != VERSION:
        raise invalid(f"magic {header[0]} version {header[1]}, expected {MAGIC} version {VERSION}")
    count, size = int(header[2]), path.stat().st_size
    if count <= 0 or size != HEADER_BYTES + 2 * count:
        raise invalid(f"{size} bytes, but the header promises {count} tokens")
    return np.memmap(path, dtype=np.uint16, mode="r", offset=HEADER_BYTES, shape=(count,))


def get_batch(shards, rng, cfg, device):
    """batch_size windows of a split's shards (paths, token counts) at positions drawn by rng: inputs x
    and their next tokens y, both (B, T), on device."""
    paths, counts = shards
    room = np.maximum(counts - cfg.block_size, 0)  # window starts in each shard
    ends = np.cumsum(room)
    pos = rng.integers(ends[-1], size=cfg.batch_size)  # uniform over every window of every shard
    shard = np.searchsorted(ends, pos, side="right")
    offset = pos - (ends[shard] - room[shard])
    # memmaps live for one batch: one kept open would keep every page it ever read in the RSS
    maps = {s: read_shard(paths[s]) for s in set(shard.tolist())}
    rows = [maps[s][o:o + cfg.block_size + 1] for s, o in zip(shard, offset)]
    batch = torch.from_numpy(np.stack(rows).astype(np.int64))  # (B, T + 1)
    if device.startswith("cuda"):  # pinned, so the copy overlaps the GPU's work
        batch = batch.pin_memory()
    batch = batch.to(device, non_blocking=True)
    return batch[:, :-1].contiguous(), batch[:, 1:].contiguous()


def _prepare_command(folder):
    """The command that builds folder, for error messages; the dataset is the folder's name."""
    folder = pathlib.Path(folder)
    if folder.name in DATASETS and folder == pathlib.Path("data", folder.name):
        return f"python prepare_data.py {folder.name}"
    return f"python prepare_data.py {folder.name if folder.name in DATASETS else 'DATASET'} --out {folder}"


def load_meta(data_dir):
    """meta.json of a prepared folder; without it the folder is missing or its build was interrupted."""
    try:
        return json.loads((pathlib.Path(data_dir) / "meta.json").read_text())
    except FileNotFoundError:
        raise SystemExit(f"error: {data_dir} is not prepared (no meta.json): run  {_prepare_command(data_dir)}")
    except ValueError:
        raise SystemExit(f"error: {data_dir}/meta.json is corrupt: run  {_prepare_command(data_dir)} --force")


# ----------------------------------------------------------------------------- tokenizers

def _gpt2():
    import tiktoken
    try:
        return tiktoken.get_encoding("gpt2")
    except Exception as e:  # tiktoken downloads its BPE files on first use
        raise SystemExit(f"error: cannot load the GPT-2 BPE files ({type(e).__name__}); offline, point "
                         "TIKTOKEN_CACHE_DIR at a copy of tiktoken's cache, or use --tokenizer char")


def get_tokenizer(meta):
    """(encode, decode) for a prepared folder: encode(str) -> list[int], decode(list[int]) -> str."""
    if meta["tokenizer"] == "gpt2":
        enc = _gpt2()
        return (lambda text: enc.encode(text, allowed_special={"<|endoftext|>"})), enc.decode
    chars = meta["chars"]
    stoi = {c: i for i, c in enumerate(chars)}

    def encode(text):
        unknown = sorted(set(text) - stoi.keys())
        if unknown:
            raise SystemExit(f"error: characters not in this model's vocabulary: {', '.join(map(repr, unknown))}")
        return [stoi[c] for c in text]

    return encode, lambda ids: "".join(chars[i] for i in ids)


def _char_table(docs):
    """The sorted characters of the whole text, val and train."""
    chars = set()
    for _, text in docs():
        chars.update(text)
    if len(chars) > 2**16:
        raise SystemExit(f"error: the text has {len(chars):,} distinct characters, more than a uint16 shard holds; "
                         "use --tokenizer gpt2")
    return "".join(sorted(chars))


def _first_chars(docs, cap):
    """docs cut after cap characters: at character level a token cap is a character cap, and the
    character table must not see text that will not be written."""
    def capped():
        n = 0
        for split, text in docs():
            if n >= cap:
                return
            yield split, text[:cap - n]
            n += min(len(text), cap - n)
    return capped


# ----------------------------------------------------------------------------- sources
# A source returns (docs, description, size in bytes or None); docs() yields (split, text) pairs afresh
# on each call, decoding lazily, with split None where --val_tokens decides.

def _local_files(patterns):
    """Files named or matched by globs, each existing and non-empty, in sorted order per pattern."""
    files = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern, recursive=True))
        if not matches:
            raise SystemExit(f"error: --input {pattern}: no such file")
        for path in map(pathlib.Path, matches):
            if not path.is_file():
                raise SystemExit(f"error: --input {path} is not a file; pass files or a glob like 'dir/*.jsonl'")
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
            raise SystemExit(f"error: cannot download tiny Shakespeare ({e}); pass a local copy with "
                             "--input path/to/input.txt")

    def docs():
        text = raw.decode("utf-8", "normgpt_replace")
        n = int(len(text) * 0.9)  # nanoGPT's split: the first 90% of the characters train, the rest val
        return iter([("val", text[n:]), ("train", text[:n])])

    return docs, source, len(raw)


def _pystdlib():
    root, files = pathlib.Path(sysconfig.get_paths()["stdlib"]), []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [d for d in subfolders if d not in ("test", "tests", "idle_test", "site-packages")]
        files += [pathlib.Path(folder, name) for name in names if name.endswith(".py")]
    files.sort()
    docs = lambda: ((None, p.read_bytes().decode("utf-8", "normgpt_replace")) for p in files)
    source = f"{len(files)} .py files of the Python {sys.version.split()[0]} standard library in {root}"
    return docs, source, sum(p.stat().st_size for p in files)


def _stream(what, fix, *args, **kwargs):
    """Rows of datasets.load_dataset(*args) streamed; its errors become one line that names the fix."""
    from datasets import load_dataset
    try:
        yield from load_dataset(*args, split="train", streaming=True, **kwargs)
    except Exception as e:
        raise SystemExit(f"error: cannot read {what}: {(str(e).strip() or type(e).__name__).splitlines()[0]}; {fix}")


def _text_files(inputs, column):
    if not inputs:
        raise SystemExit("error: the text dataset needs --input FILE|GLOB ... (.txt, .jsonl, .json, .parquet)")
    groups = collections.defaultdict(list)  # builder: files, since one load_dataset call takes one format
    for path in _local_files(inputs):
        if path.suffix.lower() not in BUILDERS:
            raise SystemExit(f"error: --input {path}: unsupported file type; use {', '.join(BUILDERS)}")
        groups[BUILDERS[path.suffix.lower()]].append(str(path))

    def docs():
        for builder, files in groups.items():
            options = {"sample_by": "document", "encoding_errors": "normgpt_replace"} if builder == "text" else {}
            what = f"{files[0]} ({len(files)} {builder} files)"
            for row in _stream(what, "check them", builder, data_files=files, **options):
                if column not in row:
                    raise SystemExit(f"error: {files[0]} has no column {column!r} (it has {', '.join(row)}); "
                                     "pass --text_column NAME")
                yield None, row[column] or ""

    files = [f for group in groups.values() for f in group]
    return docs, f"{len(files)} local files: {', '.join(files)}", sum(os.path.getsize(f) for f in files)


def _hub(dataset):
    repo, config = HUB[dataset]
    fix = "for local files use:  python prepare_data.py text --input FILES"
    offline = [v for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") if os.environ.get(v, "").lower() in ("1", "true")]
    try:  # fail in seconds, not after datasets' retries
        if offline:
            raise OSError(f"{offline[0]} is set")
        if not urllib.request.getproxies().get("https"):  # behind a proxy, only datasets itself can tell
            socket.create_connection(("huggingface.co", 443), timeout=3).close()
    except OSError as e:
        raise SystemExit(f"error: cannot reach the Hugging Face hub for {repo} ({e}); {fix}")
    docs = lambda: ((None, row["text"]) for row in _stream(repo, fix, repo, config))
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


# ----------------------------------------------------------------------------- parallel tokenization

_encode = None  # this worker's encoder, set once by _init_worker


def _init_worker(meta):
    global _encode
    # ordinary encoding: an "<|endoftext|>" inside a document is text, only separators are EOT
    _encode = _gpt2().encode_ordinary if meta["tokenizer"] == "gpt2" else get_tokenizer(meta)[0]


def _encode_texts(texts):
    return [np.array(_encode(text), dtype=np.uint16) for text in texts]


def _batches(docs):
    """Group (split, text) pairs into lists of about BATCH_CHARS characters."""
    batch, size = [], 0
    for split, text in docs:
        batch.append((split, text))
        size += len(text)
        if size >= BATCH_CHARS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _tokenized(docs, meta, workers):
    """Yield (splits, token arrays) batch by batch, in order. At most two batches per worker are in
    flight: Pool.imap would read ahead through the whole stream and hold it in memory."""
    if workers == 1:  # a thread: no fork, no pickling
        pool = multiprocessing.pool.ThreadPool(1, _init_worker, (meta,))
    else:  # fork, not spawn: spawn re-runs the __main__ script, e.g. train.py when it prepares pystdlib
        pool = multiprocessing.get_context("fork").Pool(workers, _init_worker, (meta,))
    with pool:
        pending = collections.deque()
        for batch in _batches(docs):
            pending.append(([s for s, _ in batch], pool.apply_async(_encode_texts, ([t for _, t in batch],))))
            if len(pending) >= 2 * workers:
                splits, result = pending.popleft()
                yield splits, result.get()
        for splits, result in pending:
            yield splits, result.get()


class _ShardWriter:
    """Routes documents to val and train and writes each shard as it fills: memory is one shard at most."""

    def __init__(self, out, shard_tokens, val_tokens, cap, eot):
        self.out, self.val_tokens, self.cap, self.eot = out, val_tokens, cap, eot
        self.buffer, self.n, self.split, self.streams = np.empty(shard_tokens, np.uint16), 0, "val", set()
        self.tokens, self.shards = {"val": 0, "train": 0}, {"val": [], "train": []}

    def full(self):
        return bool(self.cap) and self.tokens["val"] + self.tokens["train"] >= self.cap

    def add_document(self, split, tokens):
        """Append a document to its split's stream, or with split None to the one stream whose first
        val_tokens tokens are held out. GPT-2 documents in a stream are separated by EOT."""
        if not len(tokens) or self.full():
            return
        if self.eot is not None and split in self.streams:
            tokens = np.concatenate(([self.eot], tokens)).astype(np.uint16)
        self.streams.add(split)
        if self.cap:
            tokens = tokens[:self.cap - self.tokens["val"] - self.tokens["train"]]
        if split is None:
            cut = max(0, self.val_tokens - self.tokens["val"])
        else:
            cut = len(tokens) if split == "val" else 0
        self._append("val", tokens[:cut])
        self._append("train", tokens[cut:])

    def _append(self, split, tokens):
        if len(tokens) and split != self.split:  # val comes first; its last shard ends where train begins
            self.flush()
            self.split = split
        while len(tokens):
            take = min(len(tokens), len(self.buffer) - self.n)
            self.buffer[self.n:self.n + take] = tokens[:take]
            self.n, self.tokens[split], tokens = self.n + take, self.tokens[split] + take, tokens[take:]
            if self.n == len(self.buffer):
                self.flush()

    def flush(self):
        if self.n:
            name = f"{self.split}_{len(self.shards[self.split]):06d}.bin"
            sha = write_shard(self.out / name, self.buffer[:self.n])
            self.shards[self.split].append({"file": name, "tokens": self.n, "sha256": sha})
            self.n = 0


def _write_shards(docs, meta, out, val_tokens, cap, shard_tokens, workers):
    """Tokenize docs in parallel into val then train shards; returns the token counts and shards."""
    writer, t0 = _ShardWriter(out, shard_tokens, val_tokens, cap, meta["eot_token"]), time.time()
    bar = tqdm(unit="doc", disable=None, file=sys.stderr, desc=f"tokenizing {meta['dataset']}")
    with contextlib.closing(_tokenized(docs(), meta, workers)) as batches:  # stops the workers on any exit
        for splits, arrays in batches:
            for split, tokens in zip(splits, arrays):
                writer.add_document(split, tokens)
            bar.update(len(arrays))
            bar.set_postfix_str(f"{sum(writer.tokens.values()) / (time.time() - t0):,.0f} tokens/s", refresh=False)
            if writer.full():
                break
    bar.close()
    writer.flush()
    if not writer.tokens["train"]:
        raise SystemExit(f"error: no training tokens: all {writer.tokens['val']:,} tokens of the text are held out; "
                         "lower --val_tokens or use more text")
    return writer.tokens, writer.shards


# ----------------------------------------------------------------------------- the build

def _default_val_tokens(cap, size, tokenizer):
    """5% of the corpus (sizes from bytes are estimates), at most one 100M-token shard like modded-nanogpt's."""
    estimates = [n for n in (cap, size and size // (1 if tokenizer == "char" else 4)) if n]
    return max(1, min(100_000_000, min(estimates) // 20)) if estimates else 100_000_000


def _complete_args(out):
    """The args a complete build in out was made with, or None (no meta.json, or a shard gone or cut)."""
    try:
        meta = json.loads((out / "meta.json").read_text())
        shards = [s for split in meta["shards"].values() for s in split]
        intact = all((out / s["file"]).stat().st_size == HEADER_BYTES + 2 * s["tokens"] for s in shards)
        return meta["args"] if intact else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _clear(out):
    """Remove a previous build, meta.json first so the folder never looks complete while it changes."""
    for pattern in ("meta.json", "val_*.bin", "train_*.bin", "*.tmp"):
        for path in out.glob(pattern):
            path.unlink()


def _build(out, docs, meta, val_tokens, cap, shard_tokens, workers):
    """Write the shards, then meta.json; on any failure remove what was written (no partial output)."""
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    _clear(out)
    _replaced.clear()
    t0 = time.time()
    try:
        meta["tokens"], meta["shards"] = _write_shards(docs, meta, out, val_tokens, cap, shard_tokens, workers)
        _atomic_write(out / "meta.json", json.dumps(meta, indent=1, ensure_ascii=False).encode())
    except BaseException:
        _clear(out)
        if created and not any(out.iterdir()):
            out.rmdir()
        raise
    if _replaced["bytes"]:
        print(f"warning: {_replaced['bytes']:,} bytes of invalid UTF-8 were replaced with U+FFFD", file=sys.stderr)
    n, seconds = meta["tokens"], time.time() - t0
    print(f"wrote {n['train']:,} train + {n['val']:,} val tokens ({meta['tokenizer']}, vocab {meta['vocab_size']:,}) "
          f"to {out} in {seconds:.1f}s, {(n['train'] + n['val']) / seconds:,.0f} tokens/s")


def _index_shards(out, inputs, args):
    """Write only meta.json for GPT-2 shards that already exist (llm.c's and modded-nanogpt's FineWeb
    downloads use this format): they load unchanged from where they are; 'val' in a name means val."""
    files = _local_files(inputs)
    if not files or all("val" in f.name for f in files) or not any("val" in f.name for f in files):
        raise SystemExit("error: shards needs --input with train and val shards ('val' in the val files' names)")
    out.mkdir(parents=True, exist_ok=True)
    shards = {"train": [], "val": []}
    for path in files:
        with open(path, "rb") as f:
            sha = hashlib.file_digest(f, "sha256").hexdigest()
        split = "val" if "val" in path.name else "train"
        shards[split].append({"file": os.path.relpath(path, out), "tokens": len(read_shard(path)), "sha256": sha})
    tokens = {split: sum(s["tokens"] for s in shards[split]) for split in shards}
    meta = dict(dataset="shards", tokenizer="gpt2", vocab_size=50257, eot_token=50256, chars=None,
                source=f"{len(files)} existing shards: {', '.join(map(str, files))}", args=args,
                tokens=tokens, shards=shards)
    _atomic_write(out / "meta.json", json.dumps(meta, indent=1).encode())
    print(f"indexed {tokens['train']:,} train + {tokens['val']:,} val tokens of {len(files)} shards in {out}/meta.json")


def prepare(dataset, out=None, *, inputs=(), tokenizer=None, num_tokens=None, val_tokens=None,
            shard_tokens=100_000_000, workers=None, force=False, text_column="text"):
    """Build out (default data/DATASET) from a dataset, unless it is already built with these arguments."""
    if dataset not in DATASETS:
        raise SystemExit(f"error: unknown dataset {dataset!r}; choose one of: {', '.join(DATASETS)}")
    counts = dict(num_tokens=num_tokens, val_tokens=val_tokens, shard_tokens=shard_tokens, workers=workers)
    for name, value in counts.items():
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise SystemExit(f"error: --{name} must be a positive integer, got {value!r}")
    if shard_tokens >= 2**31:
        raise SystemExit("error: --shard_tokens must be below 2**31, as the header counts tokens in an int32")
    tokenizer, workers = tokenizer or DATASETS[dataset][0], workers or os.cpu_count()
    if tokenizer not in ("gpt2", "char"):
        raise SystemExit(f"error: unknown tokenizer {tokenizer!r}; choose gpt2 or char")
    out = pathlib.Path(out or pathlib.Path("data", dataset))
    args = dict(dataset=dataset, inputs=[os.path.abspath(p) for p in inputs], tokenizer=tokenizer,
                num_tokens=num_tokens, val_tokens=val_tokens, shard_tokens=shard_tokens, text_column=text_column)
    previous = _complete_args(out)
    if previous == args and not force:
        print(f"{out} is already prepared with these arguments: nothing to do (--force rebuilds it)")
        return out
    if previous is not None and not force:
        changed = ", ".join(f"{k} {previous.get(k)!r} -> {v!r}" for k, v in args.items() if previous.get(k) != v)
        raise SystemExit(f"error: {out} was prepared with other arguments ({changed}); pass --force to rebuild it")

    if dataset == "shards":
        _index_shards(out, inputs, args)
        return out
    docs, source, size = _source(dataset, list(inputs), text_column)  # checks inputs and network first
    if tokenizer == "char" and num_tokens:
        docs = _first_chars(docs, num_tokens)
    chars = _char_table(docs) if tokenizer == "char" else None
    if tokenizer == "char" and not chars:
        raise SystemExit(f"error: no text in {source}")
    enc = _gpt2() if tokenizer == "gpt2" else None  # fails here, before any output, when it cannot load
    meta = dict(dataset=dataset, tokenizer=tokenizer, vocab_size=enc.n_vocab if enc else len(chars),
                eot_token=enc.eot_token if enc else None, chars=chars, source=source, args=args)
    val_tokens = val_tokens or _default_val_tokens(num_tokens, size, tokenizer)
    _build(out, docs, meta, val_tokens, num_tokens, shard_tokens, workers)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="datasets:\n" + "\n".join(f"  {name:<17} {line}" for name, (_, line) in DATASETS.items()))
    add = parser.add_argument
    add("dataset", help="one of the datasets below")
    add("--input", dest="inputs", nargs="+", action="extend", default=[], metavar="PATH",
        help="local text instead of a download (shakespeare*), or the files and globs of `text`")
    add("--tokenizer", metavar="gpt2|char", help="GPT-2 BPE or the text's own characters (default: per dataset)")
    add("--out", metavar="DIR", help="output folder (default: data/DATASET)")
    add("--num_tokens", type=int, metavar="N", help="stop after this many tokens, val and train together")
    add("--val_tokens", type=int, metavar="N",
        help="held out: the first N tokens of the stream; default 5%% of the corpus, at most 100M "
             "(shakespeare*: always nanoGPT's last 10%% of the characters)")
    add("--shard_tokens", type=int, default=100_000_000, metavar="N", help="tokens per shard file (default 1e8)")
    add("--workers", type=int, default=os.cpu_count(), metavar="N", help="tokenizer processes (default: all cores)")
    add("--text_column", default="text", metavar="NAME", help="the column of .jsonl/.json/.parquet rows (text)")
    add("--force", action="store_true", help="rebuild even if the folder is complete")
    options = vars(parser.parse_args(argv))
    prepare(options.pop("dataset"), options.pop("out"), **options)


if __name__ == "__main__":
    main()
