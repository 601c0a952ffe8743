"""
Sample from a model trained by train.py, with a KV cache.

    python sample.py --out_dir=out --start="ROMEO:" --num_samples=3 --max_new_tokens=300
    python sample.py --out_dir=out --start=FILE:prompt.txt --temperature=0 --stream

The tokenizer is the one the checkpoint was trained with (its dataset's character table or GPT-2
BPE). An empty --start begins at GPT-2's <|endoftext|>; a character vocabulary has no such token, so
there it begins at a newline, and is an error if '\\n' is not in the vocabulary.

Past block_size, use_cache=True prefills a full cache again with its newest (block_size+1)//2 tokens
and goes on from there; use_cache=False recomputes the last block_size tokens for every new token
(nanoGPT's exact cropping), many times slower. GPT.generate's docstring in model.py says why and how
much context each sees.

Within block_size both compute the same logits, in a different order, so they agree up to rounding:
in float32 to 1e-6..1e-4 of the logits' scale, the same tokens unless two candidates tie that
closely; under bf16 autocast (dtype auto on CUDA) by bf16's rounding, about 1% of that scale, enough
for greedy or seeded samples to take different paths where two tokens are close. --dtype=float32
when they must agree.
"""
import os
import signal

# a Ctrl-C while torch loads ends the script without a traceback; data.run_cli reports later ones
if __name__ == "__main__" and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.SIG_DFL)

import torch

import checkpoint
import configurator
import devices
from data import first_line, get_tokenizer, run_cli, start_token

# settings: the assignments between the two rulers, read by configurator.py
# (python sample.py --help)
# --------------------------------------------------------------------------------------------------
out_dir = "out"  # the folder train.py wrote its checkpoint to (ckpt.pt, or sharded ckpt/)
start = ""  # the prompt, or FILE:path to read it from a file; "": the start token (see above)
num_samples = 3  # samples to draw, one after another
max_new_tokens = 500  # tokens generated per sample
# divides the logits: 1.0 samples the model's distribution, lower is safer, 0 is greedy
temperature = 0.8
# sample among the k most likely tokens only; 0, or any k >= the vocabulary, keeps them all
top_k = 200
# nucleus: the fewest most likely tokens whose probability reaches top_p, in (0, 1]; 1.0: all
top_p = 1.0
# seeds the sampling; within block_size and in float32 the cache does not change the samples
seed = 1337
device = "auto"  # 'cpu', 'cuda', 'cuda:1', 'mps'; auto: cuda when available
dtype = "auto"  # 'float32', or 'bfloat16' autocast; auto: bfloat16 on CUDA, float32 elsewhere
compile = False  # torch.compile the model: worth it for long samples on a GPU
stream = False  # print each token as it is generated
# keep keys and values (see "Past block_size" above); False: recompute them every token
use_cache = True
# --------------------------------------------------------------------------------------------------
RANGES = dict(num_samples=1, max_new_tokens=0, temperature=0, top_k=0, top_p="(0, 1]",
              seed="[0, 1e19)", dtype=devices.DTYPES)  # checked by configurator


def read_prompt(start):
    """--start's text: FILE:path reads the file."""
    if not start.startswith("FILE:"):
        return start
    try:
        with open(start[5:], encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise SystemExit(f"error: cannot read the prompt file --start={start} ({first_line(e)})")


def prompt_ids(text, encode, meta):
    """The prompt as token ids; an empty prompt is the start token: GPT-2's <|endoftext|>, else a
    newline."""
    if text:
        try:
            return encode(text)
        except SystemExit as e:  # a character-level encode names the characters it does not know
            raise SystemExit(f"{e.code}: give --start in the characters the model was trained "
                             "on") from None
    if (token := start_token(meta)) is not None:
        return [token]
    raise SystemExit(
        "error: an empty --start needs a start token, and this character vocabulary has neither "
        "<|endoftext|> nor a newline; give a prompt: --start=TEXT")


def check_memory(max_new_tokens):
    """One line unless a sample's token ids (8 bytes each, as generate's int64 tensor holds them)
    fit in this machine's memory: a sample larger runs for hours and then fails for memory."""
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if (needed := 8 * max_new_tokens) > memory:
        raise SystemExit(
            f"error: max_new_tokens={max_new_tokens} needs at least {needed:,} bytes for a "
            f"sample's token ids alone, more than this machine's {memory:,} bytes of memory: ask "
            f"for at most {memory // 8:,} tokens")


class StreamPrinter:
    """generate's on_token for --stream: prints the text each new token adds. It decodes the whole
    sequence every time and holds back a trailing U+FFFD, so a character split across BPE tokens is
    printed once complete, never as broken halves."""

    def __init__(self, decode, ids):
        self.decode, self.ids, self.printed = decode, list(ids), 0
        self.show(decode(self.ids).rstrip("\ufffd"))

    def __call__(self, idx_next):
        self.ids.append(idx_next.item())
        self.show(self.decode(self.ids).rstrip("\ufffd"))

    def show(self, text):
        print(text[self.printed:], end="", flush=True)
        self.printed = len(text)


def main(argv):
    """Print num_samples samples (and return them) for the settings in argv, as on the command
    line."""
    s, _ = configurator.parse_settings(argv, __file__, RANGES)
    check_memory(s["max_new_tokens"])
    device = devices.pick_device(s["device"])
    dtype = devices.pick_dtype(s["dtype"], device)
    model, meta = checkpoint.load_model(s["out_dir"], device)
    if s["compile"]:
        model.compile()  # in place: generate's self(...) calls go through the compiled forward
    encode, decode = get_tokenizer(meta)
    ids = prompt_ids(read_prompt(s["start"]), encode, meta)
    x = torch.tensor([ids], dtype=torch.long, device=device)
    generator = torch.Generator(device).manual_seed(s["seed"])
    ctx = devices.autocast(device, dtype)
    samples = []
    for _ in range(s["num_samples"]):
        printer = StreamPrinter(decode, ids) if s["stream"] else None
        with ctx:
            y = model.generate(x, s["max_new_tokens"], s["temperature"], top_k=s["top_k"] or None,
                               top_p=s["top_p"] if s["top_p"] < 1 else None, generator=generator,
                               use_cache=s["use_cache"], on_token=printer)
        samples.append(decode(y[0].tolist()))
        if printer:
            printer.show(samples[-1])  # the rest, held-back characters included
            print()
        else:
            print(samples[-1])
        print("---------------")
    return samples


if __name__ == "__main__":
    run_cli(main)
