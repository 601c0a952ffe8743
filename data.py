"""The data every script reads: token shards, meta.json, tokenizers, batches, how a file is written,
and how a script ends (Ctrl-C, --help into a closed pipe).

A shard is llm.c / modded-nanogpt's format: a 256 x int32 header (magic 20240520, version 1,
token count), then the tokens as uint16. meta.json, written last by prepare_data.py, marks a folder
as complete. get_batch draws train.py's batches from the shards. No torch at import: prepare_data.py
runs with numpy alone.
"""
import contextlib
import fcntl
import hashlib
import json
import math
import os
import pathlib
import signal
import sys
import tempfile

import numpy as np

MAGIC, VERSION, HEADER_BYTES = 20240520, 1, 1024
DATASETS = {  # name: (default tokenizer, one line for prepare_data.py --help)
    "shakespeare_char": ("char", "tiny Shakespeare by characters (nanoGPT's classic): --input FILE "
                                 "or downloaded"),
    "shakespeare": ("gpt2", "tiny Shakespeare, GPT-2 BPE: --input FILE or downloaded"),
    "pystdlib": ("char", "this Python's standard library sources, tests left out: offline, "
                         "the default corpus"),
    "fineweb_edu": ("gpt2", "HuggingFaceFW/fineweb-edu sample-10BT streamed from the hub; "
                            "cap it with --num_tokens"),
    "openwebtext": ("gpt2", "Skylion007/openwebtext (nanoGPT's) streamed from the hub"),
    "text": ("gpt2", "local --input files or globs: .txt (a document per file), .jsonl, .json, "
                     ".parquet"),
    "shards": ("gpt2", "existing GPT-2 shards, e.g. modded-nanogpt's FineWeb "
                       "(--input 'dir/*.bin'): indexed in place"),
}
# OpenAI's GPT-2's tokens
GPT2_META = dict(tokenizer="gpt2", vocab_size=50257, eot_token=50256, chars=None)


def first_line(e):
    """An exception as one line: its type and the first line of its message, and the line after it
    where the first ends in a colon (torch's load_state_dict: "Error(s) in loading state_dict for
    GPT:", then the keys)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()] or ["-"]
    return f"{type(e).__name__}: {' '.join(lines[:2] if lines[0].endswith(':') else lines[:1])}"


def counted(n, noun):
    """'1 byte', '2 bytes': n and its noun, plural unless n is 1."""
    return f"{n:,} {noun}{'s' * (n != 1)}"


def print_help(text):
    """Print text and exit 0, quietly when a reader such as `| head` closed the pipe early."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        stdout_to_devnull()
    sys.exit(0)


def stdout_to_devnull():
    """stdout, whose reader closed it, made /dev/null: what is left to print, and the exit's flush,
    fail no more."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def run_cli(main):
    """A script's entry point: main(sys.argv[1:]). A Ctrl-C ends it in one line on stderr and exit
    status 130 (128 + SIGINT, as a shell reports it): 'interrupted: ' and what the KeyboardInterrupt
    says, so a script that knows what it kept raises KeyboardInterrupt("kept ...: the same command
    resumes"). A reader of its output that stops reading (`python sample.py | head`) ends it too:
    one line, exit status 141 (128 + SIGPIPE, as a shell reports a tool that the closed pipe
    ended). Memory that cannot be had (sizes past the machine's) is one line and exit status 1."""
    # the script's top made Ctrl-C SIGINT's own action while its imports loaded: a KeyboardInterrupt
    # from here on (an ignored SIGINT stays ignored)
    if signal.getsignal(signal.SIGINT) is signal.SIG_DFL:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt as e:
        print(f"interrupted: "
              f"{str(e) or 'stopped before the end; files are written whole or not at all'}",
              file=sys.stderr, flush=True)
        sys.exit(130)
    except BrokenPipeError:
        stdout_to_devnull()
        print("stopped: the reader of its output closed it; files are written whole or not at all",
              file=sys.stderr)
        sys.exit(141)
    # numpy's MemoryError, the RuntimeError of torch's CPU allocator, a GPU's OutOfMemoryError, and
    # torch's for a tensor of more bytes than an address holds
    except (MemoryError, RuntimeError) as e:
        too_big = ("can't allocate memory", "Storage size calculation overflowed")
        if not (isinstance(e, MemoryError) or any(words in str(e) for words in too_big)
                or type(e).__name__ == "OutOfMemoryError"):
            raise
        sys.exit(f"error: out of memory ({first_line(e)}): lower the sizes that set it "
                 "(batch_size, block_size, n_layer, n_embd, ffn_dim_multiplier, vocab_size)")
    # done: a Ctrl-C while Python shuts down ends it by SIGINT's own action, not a traceback
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL)


# ----------------------------------------------------------------------------- writing files

def check_out_dir(path, setting):
    """Exit in one line naming setting (e.g. --out) unless path is a folder, or can be made as one,
    in a folder this process may write in: checked before anything is written. Refused: empty, a
    file or under one, a symlink loop or a link to nothing, no permission, a pseudo-filesystem
    (/proc, /sys)."""
    existing = nearest_entry(path, setting)
    path = pathlib.Path(path)
    if not existing.is_dir():
        raise SystemExit(f"error: {setting} {a_file_not_a_folder(path, existing)}; choose a folder "
                         f"(made if missing)")
    times = existing.stat()
    try:  # os.access says yes to root anywhere, and /proc takes no new folder: try one
        tempfile.TemporaryDirectory(dir=existing, prefix=".normgpt-check-").cleanup()
    except OSError as e:
        raise SystemExit(
            f"error: {setting} {path}: cannot write in {existing} ({e.strerror}); choose a "
            "folder you can write in")
    # the try made and removed a folder in it: a check that fails later leaves its times as found
    with contextlib.suppress(OSError):  # not our folder (/tmp): its owner alone sets its times
        os.utime(existing, ns=(times.st_atime_ns, times.st_mtime_ns))


def a_file_not_a_folder(path, file):
    """'PATH is a file, not a folder', or where file is one of its parents 'PATH is under FILE,
    which is a file, not a folder'."""
    where = "is" if file == path else f"is under {file}, which is"
    return f"{path} {where} a file, not a folder"


def nearest_entry(path, setting):
    """path, or the nearest of its parents that exists; an empty path, a symlink loop or a link to
    nothing on the way is a one-line error naming setting."""
    if not str(path).strip():
        raise SystemExit(f"error: {setting} is empty: name a folder")
    path = pathlib.Path(path)
    for entry in (path, *path.absolute().parents):
        try:
            os.lstat(entry)
        except OSError:  # not there (or under a link that is not there): look higher up
            continue
        try:
            os.stat(entry)  # follows every link on the way
        except OSError as e:
            raise SystemExit(f"error: {setting} {path}: {entry} is a link that leads nowhere "
                             f"({e.strerror}); fix the link or choose another folder")
        return entry
    return pathlib.Path("/")


def atomic_write(path, *chunks):
    """Write to a temporary name in the same folder, fsync, then rename: no reader sees half a
    file."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json(path, obj):
    atomic_write(path, json.dumps(obj, indent=1, ensure_ascii=False).encode())


@contextlib.contextmanager
def locked_folder(folder, setting):
    """Make folder and hold its lock: another process writing it waits its turn. A POSIX lock
    (lockf) is released when its process dies, even by kill -9, is not inherited by forked workers,
    and holds over NFS. The lock file stays: a process waiting on a removed one would hold it alone.
    setting (e.g. --out) chose folder."""
    folder = pathlib.Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = open(folder / ".lock", "a")
    except OSError as e:  # e.g. under /proc, which check_out_dir cannot tell
        raise SystemExit(f"error: {setting} {folder}: cannot write there ({e.strerror}); "
                         "choose a folder you can write in")
    with lock:
        try:
            fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            print(f"waiting for another process building {folder}", file=sys.stderr)
            fcntl.lockf(lock, fcntl.LOCK_EX)
        yield


# ----------------------------------------------------------------------------- shards and meta.json

def write_shard(path, tokens):
    """Write tokens as one shard, atomically; returns the file's sha256 for meta.json."""
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() >= 2**16):
        raise SystemExit(f"error: token ids {tokens.min()}..{tokens.max()} do not fit a uint16 "
                         f"shard (0..65535); "
                         "use a tokenizer with a smaller vocabulary")
    tokens = np.ascontiguousarray(tokens, dtype=np.uint16)
    header = np.zeros(HEADER_BYTES // 4, np.int32)
    header[:3] = MAGIC, VERSION, len(tokens)
    atomic_write(pathlib.Path(path), header.tobytes(), tokens)
    sha = hashlib.sha256(header.tobytes())
    sha.update(tokens)
    return sha.hexdigest()


def read_shard(path):
    """The tokens of a shard as a read-only uint16 memmap, after checking its header and size."""
    path = pathlib.Path(path)

    def invalid(why):
        return SystemExit(f"error: {path} is not a valid token shard ({why}); "
                          f"rebuild it with: {prepare_command(path.parent)} --force")

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


def get_batch(shards, rng, batch_size, block_size, device, vocab_size=None):
    """batch_size windows of block_size + 1 tokens from a split's shards (paths, token counts), at
    positions drawn by rng: inputs x and their next tokens y, both (B, T), on device. Given
    vocab_size, a token id outside it is a one-line error naming its shard (checked per batch: a
    shard's tokens are never all read at once)."""
    import torch  # here, not on top: preparing data needs no torch
    paths, counts = shards
    room = np.maximum(counts - block_size, 0)  # window starts in each shard
    ends = np.cumsum(room)
    pos = rng.integers(ends[-1], size=batch_size)  # uniform over every window of every shard
    shard = np.searchsorted(ends, pos, side="right")
    offset = pos - (ends[shard] - room[shard])
    # memmaps live for one batch: one kept open would keep every page it ever read in the RSS
    maps = {s: read_shard(paths[s]) for s in set(shard.tolist())}
    rows = [maps[s][o:o + block_size + 1] for s, o in zip(shard, offset)]
    if vocab_size is not None:
        check_token_ids(rows, [paths[s] for s in shard], vocab_size)
    batch = torch.from_numpy(np.stack(rows).astype(np.int64))  # (B, T + 1)
    if device.startswith("cuda"):  # pinned, so the copy overlaps the GPU's work
        batch = batch.pin_memory()
    batch = batch.to(device, non_blocking=True)
    return batch[:, :-1].contiguous(), batch[:, 1:].contiguous()


def check_token_ids(rows, paths, vocab_size):
    """Exit in one line if a row of tokens, read from the shard at the same place in paths, holds an
    id that the model's vocabulary has no row for (an embedding lookup would fail in 39 lines)."""
    for row, path in zip(rows, paths):
        if row.max() >= vocab_size:
            raise SystemExit(f"error: {path} holds token id {row.max()}, outside the vocabulary of "
                             f"{vocab_size} tokens in its meta.json: rebuild it with: "
                             f"{prepare_command(pathlib.Path(path).parent)} --force")


def prepare_command(folder):
    """The command that builds folder, for error messages; the dataset is the folder's name."""
    folder = pathlib.Path(folder)
    if folder.name in DATASETS and folder == pathlib.Path("data", folder.name):
        return f"python prepare_data.py {folder.name}"
    return (f"python prepare_data.py {folder.name if folder.name in DATASETS else 'DATASET'} "
            f"--out {folder}")


def dataset_folder(data_dir, dataset):
    """data_dir/dataset, the folder prepare_data.py made; an empty name is a one-line error, as
    data_dir itself would be read as the dataset's folder."""
    if not dataset:
        sys.exit("error: dataset is empty: name a folder of data_dir that prepare_data.py made "
                 "(pystdlib, the default, is made when missing)")
    return pathlib.Path(data_dir) / dataset


def load_meta(data_dir):
    """meta.json of a prepared folder; without it the folder is missing or its build was
    interrupted. One not of prepare_data.py's shape (a tokenizer, a vocabulary, shards per split) is
    a one-line error."""
    path = pathlib.Path(data_dir) / "meta.json"
    corrupt = f"error: {path} is corrupt ({{}}): run  {prepare_command(data_dir)} --force"
    try:
        meta = json.loads(path.read_text())
    except FileNotFoundError:
        raise SystemExit(f"error: {data_dir} is not prepared (no meta.json): run  "
                         f"{prepare_command(data_dir)}")
    except NotADirectoryError:  # a file on the way, not a folder holding a corrupt meta.json
        folder = pathlib.Path(data_dir)
        file = next(p for p in (folder, *folder.parents) if p.exists())
        raise SystemExit(f"error: {a_file_not_a_folder(folder, file)}: check data_dir and dataset")
    except (ValueError, OSError) as e:  # not JSON, a folder, unreadable
        raise SystemExit(corrupt.format(first_line(e)))
    if why := meta_shape_error(meta):
        raise SystemExit(corrupt.format(why))
    return meta


def meta_shape_error(meta):
    """What makes meta not a prepared folder's meta.json, or None."""
    if not isinstance(meta, dict):
        return f"a {type(meta).__name__}, not an object"
    if missing := [k for k in ("tokenizer", "vocab_size", "shards") if k not in meta]:
        return f"no {', '.join(missing)}"
    if why := tokenizer_error(meta):
        return why
    shards = meta["shards"]
    if not isinstance(shards, dict) or any(not isinstance(shards.get(s), list)
                                           for s in ("train", "val")):
        return "its shards are not a list per split, train and val"
    if not shards["train"] or not shards["val"]:
        return "a split without shards"
    for shard in shards["train"] + shards["val"]:
        named = isinstance(shard, dict) and isinstance(shard.get("file"), str)
        if not named or type(shard.get("tokens")) is not int:
            return f"a shard {shard!r} without its file and token count"
    return None


def tokenizer_error(meta):
    """What makes meta's tokenizer not the one its shards were written with, or None: GPT-2's has
    its 50,257 tokens, a character table as many characters as vocab_size (an edited meta.json would
    train and sample on another reading of the same ids)."""
    tokenizer, vocab = meta["tokenizer"], meta["vocab_size"]
    if tokenizer == "gpt2" and vocab != GPT2_META["vocab_size"]:
        return f"tokenizer gpt2 with vocab_size {vocab!r}, not GPT-2's {GPT2_META['vocab_size']}"
    chars = meta.get("chars")
    if tokenizer == "char" and (not isinstance(chars, (str, list)) or len(chars) != vocab):
        return (f"tokenizer char with vocab_size {vocab!r} and {len(chars or '')} characters "
                f"in its table")
    if tokenizer not in ("gpt2", "char"):
        return f"tokenizer {tokenizer!r}, neither gpt2 nor char"
    return None


def padded_vocab(meta):
    """The model's vocabulary for a tokenizer: GPT-2's 50257 tokens padded to 50304, since matmuls
    run faster on multiples of 64; a character table as it is."""
    vocab = meta["vocab_size"]
    return 64 * math.ceil(vocab / 64) if meta["tokenizer"] == "gpt2" else vocab


# ----------------------------------------------------------------------------- tokenizers

def _gpt2():
    import tiktoken
    try:
        return tiktoken.get_encoding("gpt2")
    except Exception as e:  # tiktoken downloads its BPE files on first use
        raise SystemExit(
            f"error: cannot load the GPT-2 BPE files ({type(e).__name__}); offline, point "
            "TIKTOKEN_CACHE_DIR at a copy of tiktoken's cache, or use --tokenizer char")


def char_table(texts):
    """The sorted characters of texts, a character-level tokenizer's vocabulary, and how many there
    are."""
    chars, n = set(), 0
    for text in texts:
        chars.update(text)
        n += len(text)
    if len(chars) > 2**16:
        raise SystemExit(f"error: the text has {len(chars):,} distinct characters, more than a "
                         f"uint16 shard holds; "
                         "use --tokenizer gpt2")
    return "".join(sorted(chars)), n


def get_tokenizer(meta):
    """(encode, decode) for a prepared folder: encode(str) -> list[int],
    decode(list[int]) -> str."""
    if meta["tokenizer"] == "gpt2":
        enc = _gpt2()
        return (lambda text: enc.encode(text, allowed_special={"<|endoftext|>"})), enc.decode
    chars = meta["chars"]
    stoi = {c: i for i, c in enumerate(chars)}

    def encode(text):
        unknown = sorted(set(text) - stoi.keys())
        if unknown:
            raise SystemExit(f"error: characters not in this model's vocabulary: "
                             f"{', '.join(map(repr, unknown))}")
        return [stoi[c] for c in text]

    return encode, lambda ids: "".join(chars[i] for i in ids)


def start_token(meta):
    """The token a text without a prompt starts after: GPT-2's <|endoftext|>, else a character
    vocabulary's newline (its index in the sorted table); None when the vocabulary has neither."""
    if meta["eot_token"] is not None:
        return meta["eot_token"]
    return meta["chars"].index("\n") if "\n" in meta["chars"] else None
