"""sample.py and GPT.generate: the KV cache gives the no-cache tokens, the window slides past
block_size as generate's docstring promises, top-k/top-p keep what they should, and every bad input
is one line. Also the promises every tool (sample, eval, bench, ablate) keeps alike: a value out of
its range, and Ctrl-C, end in one line, with every file as it was."""
import contextlib
import os
import runpy
import subprocess
import sys

import pytest
import torch

import ablate
import bench
import checkpoint
import configurator
import eval as evaluation
import model as model_module
import sample
import train
from conftest import ROOT, error_of, file_hashes, mentions, needs_gpt2, tripwire
from data import get_tokenizer, load_meta, write_json
from model import ARCHS, GPT, GPTConfig, NORM_MODES, sample_next

V, BLOCK = 37, 16
CHARS = "\n !',.:;?abcdefghijklmnopqrstuvwxyz"  # a character vocabulary with a newline


def random_model(mode, dtype=torch.float64, **overrides):
    """A small random model in eval mode whose greedy tokens depend on the context. At GPT-2's init
    one token wins everywhere, which would hide a broken cache: so larger weights, and embedding
    rows (the tied head) of equal norm. float64 keeps near-ties from flipping an argmax between
    paths."""
    torch.manual_seed(0)
    kw = dict(norm_mode=mode, n_layer=2, n_head=4, n_embd=32, block_size=BLOCK,
              vocab_size=V) | overrides
    model = GPT(GPTConfig(**kw)).to(dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.5)
            # gains and scales off their init: ngpt's α of 0.05, ReZero's of 0, would hide the
            # blocks
            else:
                p.uniform_(0.5, 1.5)
        wte = model.transformer.wte.weight
        wte.div_(wte.norm(dim=1, keepdim=True))
    return model


def prompt(B=3, T=5):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(1))


def generate(model, idx, n, use_cache, seed=0, **kw):
    return model.generate(idx, n, generator=torch.Generator().manual_seed(seed),
                          use_cache=use_cache, **kw)


# -------------------------------------------------------------- the cache gives the no-cache tokens

@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("mode", NORM_MODES)
def test_cache_equals_no_cache_greedy_within_block_size(mode, dropout, arch):
    """Every context up to a full window: prompt 5, then tokens until the last one sees block_size
    tokens. On llama the cache keeps rotated keys."""
    model, idx = random_model(mode, dropout=dropout, arch=arch), prompt()
    cached = generate(model, idx, BLOCK + 1 - idx.size(1), use_cache=True, temperature=0)
    assert torch.equal(cached, generate(model, idx, BLOCK + 1 - idx.size(1), use_cache=False,
                                        temperature=0))
    # not one repeated token: the test can see a cache bug
    assert len(cached[:, idx.size(1):].unique()) > 3


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("mode", NORM_MODES)
def test_cache_equals_no_cache_seeded_within_block_size(mode, dropout, arch):
    model, idx = random_model(mode, dropout=dropout, arch=arch), prompt()
    kw = dict(temperature=1.3, top_k=20, top_p=0.95, seed=7)
    cached = generate(model, idx, BLOCK + 1 - idx.size(1), use_cache=True, **kw)
    assert torch.equal(cached, generate(model, idx, BLOCK + 1 - idx.size(1), use_cache=False, **kw))


@pytest.mark.parametrize("T", [1, BLOCK])
def test_cache_equals_no_cache_for_one_token_and_full_window_prompts(T):
    model, idx = random_model("geonorm"), prompt(T=T)
    n = max(1, BLOCK + 1 - T)
    assert torch.equal(generate(model, idx, n, True, temperature=0),
                       generate(model, idx, n, False, temperature=0))


@pytest.mark.parametrize("mode", NORM_MODES)
def test_cache_and_no_cache_logits_agree_to_float32_rounding_and_to_bf16_rounding_under_bf16(mode):
    """README's claim, measured: in float32 the two paths agree to float32 rounding (1e-6..1e-4 of
    the logits' scale here); under bf16 autocast they differ by bf16's rounding, orders of magnitude
    more, or not at all (ngpt, whose fp32 stream and norms round both paths alike)."""
    model, idx = random_model(mode, dtype=torch.float32), prompt(T=BLOCK)

    # (B, T, V) both ways: a forward over each prefix, and the cache fed a token at a time
    def logits(ctx):
        with torch.no_grad(), ctx:
            full = torch.cat([model(idx[:, :t])[0] for t in range(1, BLOCK + 1)], dim=1)
            model.enable_kv_cache(True)
            cached = torch.cat([model(idx[:, t:t + 1], pos=t)[0] for t in range(BLOCK)], dim=1)
            model.enable_kv_cache(False)
        return full.float(), cached.float()

    full, cached = logits(contextlib.nullcontext())
    fp32_gap = (full - cached).abs().max()
    assert fp32_gap < 1e-3 * full.abs().max()
    full, cached = logits(torch.autocast("cpu", torch.bfloat16))
    bf16_gap = (full - cached).abs().max()
    # ngpt's paths round alike: its stream stays fp32
    assert bf16_gap == 0 or bf16_gap > 30 * fp32_gap


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("mode", NORM_MODES)
def test_chunked_prefill_equals_a_full_forward(mode, arch):
    """Filling the cache in chunks of 5, 2, 1 and 8 tokens gives every position the logits of one
    forward over all 16: a chunk after cached keys sees all of them and itself causally, whatever
    its length (one token needs no mask, two or more the causal one shifted right)."""
    model, idx = random_model(mode, arch=arch), prompt(T=BLOCK)
    targets = torch.zeros_like(idx)  # targets make the forward return every position's logits
    full, _ = model(idx, targets)
    model.enable_kv_cache(True)
    chunks = [model(idx[:, a:b], targets[:, a:b], pos=a)[0]
              for a, b in ((0, 5), (5, 7), (7, 8), (8, BLOCK))]
    model.enable_kv_cache(False)
    assert torch.allclose(torch.cat(chunks, dim=1), full, atol=1e-10)


def test_grouped_query_attention_caches_only_its_kv_heads_and_equals_no_cache():
    model, idx = random_model("simplenorm", arch="llama", n_kv_head=2), prompt()
    n = BLOCK + 1 - idx.size(1)
    assert torch.equal(generate(model, idx, n, True, temperature=0),
                       generate(model, idx, n, False, temperature=0))
    model.enable_kv_cache(True)
    model(idx)
    # (B, n_kv_head, block_size, hs)
    assert model.transformer.h[0].attn.kv_cache[0].shape == (3, 2, BLOCK, 8)
    model.enable_kv_cache(False)


def test_generate_switches_the_cache_off_when_it_ends_or_fails():
    """After generate, returned or raised from inside (on_token here), no attention holds a cache:
    its buffers are freed and the next forward, a training step's, runs without one."""
    model, idx = random_model("pre"), prompt()

    def stop(token):
        raise KeyboardInterrupt

    generate(model, idx, 2, True)
    with pytest.raises(KeyboardInterrupt):
        generate(model, idx, 2, True, on_token=stop)
    assert all(block.attn.kv_cache is None for block in model.transformer.h)


def test_batch_rows_are_generated_independently():
    model, idx = random_model("simplenorm"), prompt(B=3)
    batched = generate(model, idx, 3 * BLOCK, use_cache=True, temperature=0)
    for row in range(3):
        assert torch.equal(batched[row:row + 1],
                           generate(model, idx[row:row + 1], 3 * BLOCK, True, temperature=0))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("mode", NORM_MODES)
def test_the_cache_runs_one_position_per_new_token(mode, arch):
    """Positions through each block per forward, counted by a hook: the 5-token prompt once, then 1
    per new token; when the window is full, a refill of the newest (BLOCK + 1) // 2 tokens, then 1s
    again."""
    model, half = random_model(mode, arch=arch), (BLOCK + 1) // 2
    positions = []
    for block in model.transformer.h:
        block.register_forward_pre_hook(lambda module, args: positions.append(args[0].size(1)))
    generate(model, prompt(T=5), (BLOCK - 4) + 4 * (BLOCK - half + 1), use_cache=True,
             temperature=0)
    per_forward = positions[::model.config.n_layer]
    assert positions == [n for n in per_forward for _ in model.transformer.h]
    assert per_forward == [5] + [1] * (BLOCK - 5) + ([half] + [1] * (BLOCK - half)) * 4


# ---------------------------------------------------------------- past block_size

@pytest.mark.parametrize("mode, T, block_size", [(m, 5, BLOCK) for m in NORM_MODES]
                         + [("pre", 2 * BLOCK + 3, BLOCK), ("geonorm", 3, 7)])
def test_cache_past_block_size_reprefills_the_newest_half_window(mode, T, block_size):
    """Each cached token is the argmax of a full forward over the docstring's window: the prompt's
    last block_size tokens, and whenever a token would not fit, the newest (block_size + 1) // 2
    tokens."""
    model, idx = random_model(mode, block_size=block_size), prompt(T=T)
    out = generate(model, idx, 4 * block_size, use_cache=True, temperature=0)
    start, refills = max(0, T - block_size), 0  # start: index in out of the token at position 0
    for n in range(T, out.size(1)):  # out[:, n] was predicted from out[:, start:n]
        if n - start > block_size:
            start, refills = n - (block_size + 1) // 2, refills + 1
        assert (block_size + 1) // 2 <= n - start <= block_size or refills == 0
        logits, _ = model(out[:, start:n])
        assert torch.equal(out[:, n], logits[:, -1].argmax(dim=-1)), (
            f"token {n}, window {start}..{n - 1}")
    assert refills >= 5


@pytest.mark.parametrize("mode", ["pre", "geonorm"])
def test_no_cache_past_block_size_crops_to_the_last_block_size_tokens(mode):
    """nanoGPT's semantics: every token sees exactly the block_size tokens before it."""
    model, idx = random_model(mode), prompt()
    out = generate(model, idx, 2 * BLOCK, use_cache=False, temperature=0)
    for n in range(idx.size(1), out.size(1)):
        logits, _ = model(out[:, max(0, n - BLOCK):n])
        assert torch.equal(out[:, n], logits[:, -1].argmax(dim=-1))


# ---------------------------------------------------------------- sample_next

PROBS = torch.tensor([[0.5, 0.3, 0.15, 0.05]])


def draws(logits, n=4000, **kw):
    """n samples from sample_next for one row of logits, as a tensor of token ids."""
    g = torch.Generator().manual_seed(0)
    return sample_next(logits.expand(n, -1), generator=g, **kw).squeeze(1)


def test_temperature_zero_is_argmax():
    logits = torch.randn(8, V)
    assert torch.equal(sample_next(logits, temperature=0).squeeze(1), logits.argmax(dim=-1))


def test_top_k_samples_exactly_the_k_most_likely_tokens():
    logits = torch.randn(1, V, generator=torch.Generator().manual_seed(3))
    for k in (1, 5):
        assert set(draws(logits, top_k=k).tolist()) == set(logits[0].topk(k).indices.tolist())


def test_top_k_at_least_the_vocabulary_keeps_every_token():
    logits = torch.randn(1, V)
    assert torch.equal(draws(logits, top_k=V), draws(logits))
    assert torch.equal(draws(logits, top_k=10 * V), draws(logits))


@pytest.mark.parametrize("top_p, nucleus",
                         [(0.1, {0}), (0.75, {0, 1}), (0.85, {0, 1, 2}), (1.0, {0, 1, 2, 3})])
def test_top_p_samples_the_fewest_tokens_whose_mass_reaches_p(top_p, nucleus):
    assert set(draws(PROBS.log(), top_p=top_p).tolist()) == nucleus


def test_a_nucleus_whose_mass_reaches_p_exactly_stops_there():
    """Four equal tokens, 0.25 each (exact in float32): the mass before the third is 0.5 exactly, so
    top_p 0.5 keeps two of them, not three."""
    for top_p, n in ((0.25, 1), (0.5, 2), (0.75, 3), (0.76, 4)):
        assert len(set(draws(torch.zeros(1, 4), top_p=top_p).tolist())) == n, top_p


@pytest.mark.parametrize("temperature, top_p, nucleus", [(0.5, 0.6, {0}), (2.0, 0.7, {0, 1, 2})])
def test_top_p_takes_the_nucleus_of_the_tempered_distribution(temperature, top_p, nucleus):
    """PROBS's own nucleus is {0, 1} at 0.6 and at 0.7. Tempered, it is the fewest tokens whose
    tempered mass reaches top_p: at 0.5 (p² normalized: 0.685, 0.247, 0.062, 0.007) the first
    alone, at 2 (√p normalized: 0.379, 0.294, 0.208, 0.120) three, drawn as their tempered
    probabilities renormalized (0.379 / 0.880 for the first)."""
    tokens = draws(PROBS.log(), n=20000, temperature=temperature, top_p=top_p)
    assert set(tokens.tolist()) == nucleus
    kept = PROBS[0, :len(nucleus)] ** (1 / temperature)
    assert abs((tokens == 0).float().mean().item() - (kept[0] / kept.sum()).item()) < 0.015


def test_a_temperature_so_small_that_the_logits_overflow_is_greedy_token_for_token(tmp_path):
    """In float32, logits / 1e-300 are ±inf and nan (1e-300 rounds to 0), and logits of a few
    hundred over 1e-37 pass float32's 3.4e38: the limit of a vanishing temperature is the argmax,
    whatever top_k and top_p keep (a row that does not overflow at 1e-37 is as greedy). sample.py
    then prints what --temperature=0 does."""
    model, idx = random_model("pre", dtype=torch.float32), prompt()
    n = BLOCK + 1 - idx.size(1)
    greedy = generate(model, idx, n, use_cache=True, temperature=0)
    assert len(greedy[:, idx.size(1):].unique()) > 3  # varied: a wrong token would show
    assert torch.equal(generate(model, idx, n, use_cache=True, temperature=1e-300), greedy)
    scales = torch.tensor([[1.0], [1e2], [1e3], [3.0]])  # at 1e-37: two rows overflow, two not
    logits = torch.randn(4, V, generator=torch.Generator().manual_seed(2)) * scales
    for temperature in (1e-300, 1e-37):
        for kw in (dict(), dict(top_k=5, top_p=0.9)):
            g = torch.Generator().manual_seed(0)
            tokens = sample_next(logits, temperature, generator=g, **kw)
            assert torch.equal(tokens, logits.argmax(dim=-1, keepdim=True)), (temperature, kw)
    folder = write_checkpoint(tmp_path)
    greedy = run(folder, "--temperature=0", "--num_samples=2")
    assert run(folder, "--temperature=1e-300", "--num_samples=2") == greedy


def test_filtered_probabilities_are_renormalized():
    tokens = draws(PROBS.log(), n=20000, top_p=0.75)  # {0, 1}: 0.5 / 0.8 and 0.3 / 0.8
    assert abs((tokens == 0).float().mean().item() - 0.625) < 0.015
    # top_k first: 0.55, 0.33, 0.17 of which 0.9 takes all
    tokens = draws(PROBS.log(), n=20000, top_k=3, top_p=0.9)
    assert set(tokens.tolist()) == {0, 1, 2}


# ---------------------------------------------------------------- sample.py

def write_checkpoint(folder, mode="pre", meta=None, prefix="", **overrides):
    """ckpt.pt with the keys train.py writes, for a random model and a character vocabulary by
    default."""
    meta = meta or dict(dataset="toy", tokenizer="char", vocab_size=len(CHARS), eot_token=None,
                        chars=CHARS)
    args = dict(norm_mode=mode, n_layer=2, n_head=4, n_embd=32, block_size=BLOCK,
                vocab_size=meta["vocab_size"]) | overrides
    torch.manual_seed(0)
    state = {prefix + k: v for k, v in GPT(GPTConfig(**args)).state_dict().items()}
    folder.mkdir(parents=True, exist_ok=True)
    save(dict(model=state, model_args=args, iter_num=0, best_val_loss=9.9, config={}, meta=meta),
         folder)
    return folder


def save(ckpt, folder):
    """folder/ckpt.pt, with the checksums train.py records beside it."""
    torch.save(ckpt, folder / "ckpt.pt")
    write_json(checkpoint.sums_path(folder / "ckpt.pt"),
               dict(files=checkpoint.checksums([folder / "ckpt.pt"])))


def run(folder, *argv):
    """sample.main in-process, cpu, one short sample by default."""
    return sample.main([f"--out_dir={folder}", "--device=cpu", "--num_samples=1",
                        "--max_new_tokens=20", *argv])


def run_script(*argv):
    return subprocess.run([sys.executable, "sample.py", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def assert_one_line_error(result, *phrases):
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert all(p in result.stderr for p in phrases), result.stderr


def test_sample_continues_the_prompt_from_the_vocabulary(tmp_path):
    (text,) = run(write_checkpoint(tmp_path, "sandwich"), "--start=to be")
    assert text.startswith("to be") and len(text) == 5 + 20 and set(text) <= set(CHARS)


def test_same_seed_same_samples_with_and_without_cache(tmp_path):
    # a compiled model's names load too
    folder = write_checkpoint(tmp_path, "geonorm", prefix="_orig_mod.")
    args = ("--start=the king", "--num_samples=2", "--max_new_tokens=8", "--temperature=1.0")
    assert run(folder, *args) == run(folder, *args, "--use_cache=False") == run(folder, *args)
    assert run(folder, *args) != run(folder, *args, "--seed=2")


# sample.py's defaults
@pytest.mark.parametrize("sampling", [dict(temperature=0.8, top_k=200, top_p=1.0),
                                      dict(temperature=1.0, top_k=0, top_p=1.0),
                                      dict(temperature=1.3, top_k=5, top_p=1.0),
                                      dict(temperature=0.7, top_k=0, top_p=0.9),
                                      dict(temperature=1.5, top_k=8, top_p=0.8)])
def test_sample_i_is_the_same_in_every_run_with_the_seed_whatever_num_samples(tmp_path, capsys,
                                                                              sampling):
    """The seeding contract, under each sampling setting: --seed seeds one generator once, and the
    samples are GPT.generate's drawn from it in turn. So sample i of any run with the seed is sample
    i of every other, --num_samples=n gives the first n of --num_samples=3 (sample 1 is a lone
    run's), and the samples differ (2 and 3 are no lone run's of any seed: reproduce them with
    --num_samples=3). Each is printed, then a rule."""
    folder = write_checkpoint(tmp_path, "geonorm")
    ckpt = torch.load(folder / "ckpt.pt")
    # tied to wte: logits that temperature, top-k and top-p change
    ckpt["model"]["lm_head.weight"].mul_(5)
    save(ckpt, folder)
    args = ("--start=the king", "--max_new_tokens=20", "--seed=5",
            *(f"--{k}={v}" for k, v in sampling.items()))
    three = run(folder, *args, "--num_samples=3")
    assert capsys.readouterr().out == "".join(f"{text}\n---------------\n" for text in three)
    assert len(set(three)) == 3 and all(text.startswith("the king") and len(text) == 8 + 20
                                        for text in three)
    assert run(folder, *args, "--num_samples=3") == three
    for n in (1, 2):
        assert run(folder, *args, f"--num_samples={n}") == three[:n]
    model, meta = checkpoint.load_model(folder, "cpu")
    encode, decode = get_tokenizer(meta)
    top_k, top_p = sampling["top_k"] or None, sampling["top_p"] if sampling["top_p"] < 1 else None
    # 28 characters, past block_size 16: the two differ there (GPT.generate)
    for use_cache in (True, False):
        x, generator = torch.tensor([encode("the king")]), torch.Generator().manual_seed(5)
        expected = [decode(model.generate(x, 20, sampling["temperature"], top_k=top_k, top_p=top_p,
                                          generator=generator, use_cache=use_cache)[0].tolist())
                    for _ in range(3)]
        assert run(folder, *args, "--num_samples=3", f"--use_cache={use_cache}") == expected
        # the default is the cache, and the test can tell them apart
        assert (expected == three) == use_cache


def test_start_from_a_file_read_as_utf8_whatever_the_locale(tmp_path, monkeypatch):
    """A prompt file is UTF-8, also where the locale's encoding is another (here latin-1, as open()
    would take it by default)."""
    (tmp_path / "prompt.txt").write_text("o, romeo é\n", encoding="utf-8")
    meta = dict(dataset="toy", tokenizer="char", vocab_size=len(CHARS) + 1, eot_token=None,
                chars=CHARS + "é")
    monkeypatch.setattr(sample, "open", lambda *a, encoding=None, **kw: open(
        *a, encoding=encoding or "latin-1", **kw), raising=False)
    (text,) = run(write_checkpoint(tmp_path, meta=meta), f"--start=FILE:{tmp_path / 'prompt.txt'}")
    assert text.startswith("o, romeo é\n")


def test_empty_prompt_starts_from_a_newline_in_a_char_vocabulary(tmp_path):
    (text,) = run(write_checkpoint(tmp_path), "--start=")
    assert text.startswith("\n") and len(text) == 21


@needs_gpt2
def test_empty_prompt_starts_from_endoftext_and_padding_ids_are_never_sampled(tmp_path):
    meta = dict(dataset="toy", tokenizer="gpt2", vocab_size=50257, eot_token=50256, chars=None)
    folder = write_checkpoint(tmp_path, meta=meta, vocab_size=50304, n_embd=16, n_head=2)
    ckpt = torch.load(folder / "ckpt.pt")
    # padding rows that win every argmax
    ckpt["model"]["lm_head.weight"][50257:] = 100 * torch.randn(47, 16)
    save(ckpt, folder)
    (text,) = run(folder, "--temperature=0")
    assert text.startswith("<|endoftext|>")


@pytest.mark.parametrize("dtype, autocast",
                         [("float32", None), ("auto", None), ("bfloat16", torch.bfloat16)])
def test_samples_are_generated_under_the_dtypes_autocast(tmp_path, monkeypatch, dtype, autocast):
    """--dtype=bfloat16 generates under bf16 autocast; float32 (auto on a CPU) under none."""
    generate, seen = GPT.generate, []
    monkeypatch.setattr(GPT, "generate", lambda *a, **kw: seen.append(
        torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
        or generate(*a, **kw))
    run(write_checkpoint(tmp_path), f"--dtype={dtype}", "--num_samples=2")
    assert seen == [autocast] * 2


def test_top_k_larger_than_the_vocabulary_keeps_every_token(tmp_path):
    folder = write_checkpoint(tmp_path)
    assert run(folder, "--top_k=1000", "--start=a") == run(folder, "--top_k=0", "--start=a")


@needs_gpt2
def test_stream_shows_all_but_a_character_still_incomplete_after_every_token(capsys):
    """From any prompt, after each token the screen holds the text so far, less a character whose
    bytes are not all there yet (U+FFFD): never half a character, never a whole one held back (an X,
    a space)."""
    encode, decode = get_tokenizer(dict(tokenizer="gpt2"))
    ids = encode("X naïve\n café X:  日本語 €5 🙂 X!")
    assert any("\ufffd" in decode([i]) for i in ids)  # some characters span several tokens
    for start in range(1, len(ids)):
        printer, screen = sample.StreamPrinter(decode, ids[:start]), capsys.readouterr().out
        assert screen == decode(ids[:start]).rstrip("\ufffd")
        for end in range(start + 1, len(ids) + 1):
            printer(torch.tensor([[ids[end - 1]]]))
            screen += capsys.readouterr().out
            assert screen == decode(ids[:end]).rstrip("\ufffd"), (start, end)
    assert "\ufffd" not in screen and screen == decode(ids)


class Terminal:
    """sys.stdout as a terminal shows it: what was written, and what of it a flush has shown."""

    def __init__(self):
        self.written, self.shown = "", ""

    def write(self, text):
        self.written += text
        return len(text)

    def flush(self):
        self.shown = self.written


@pytest.mark.parametrize("stream", [True, False])
def test_stream_shows_each_token_before_the_next_is_sampled_and_without_it_each_sample_at_its_end(
        tmp_path, monkeypatch, stream):
    """With --stream the prompt and every token are on the screen (flushed) when the next token is
    sampled, a trailing space too; without it nothing of a sample is written before the sample is
    done. Either way the output is each sample, then a rule."""
    folder, terminal, screens = write_checkpoint(tmp_path, "simplenorm"), Terminal(), []
    sample_next = model_module.sample_next
    monkeypatch.setattr(model_module, "sample_next", lambda *a, **kw: screens.append(
        (terminal.written, terminal.shown)) or sample_next(*a, **kw))
    monkeypatch.setattr(sys, "stdout", terminal)
    texts = run(folder, "--start=to be ", "--num_samples=2", "--max_new_tokens=6",
                *["--stream"] * stream)
    outputs = [f"{text}\n---------------\n" for text in texts]
    assert terminal.written == "".join(outputs) and len(screens) == 2 * 6
    for i, (written, shown) in enumerate(screens):  # before token k of sample j
        j, k = divmod(i, 6)
        before = "".join(outputs[:j]) + (texts[j][:len("to be ") + k] if stream else "")
        assert written == before and (shown == before or not stream), (j, k)


# ---------------------------------------------------------------- bad input: one line, no traceback

def test_help_lists_every_setting_and_the_past_block_size_choice(monkeypatch, capsys):
    """`python sample.py --help`, run as __main__ in this process (a process of its own spends
    seconds importing torch)."""
    monkeypatch.setattr(sys, "argv", ["sample.py", "--help"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_path(str(ROOT / "sample.py"), run_name="__main__")
    assert stop.value.code in (0, None)
    help_text = capsys.readouterr().out
    settings = configurator.read_settings(sample.__file__)
    assert all(f"\n{key} = " in help_text for key in settings) and len(settings) == 13
    assert "(block_size+1)//2" in help_text and "newline" in help_text
    # the one place that explains the cache's policy
    assert "GPT.generate's docstring" in help_text


def test_missing_folder_is_a_one_line_error(tmp_path):
    assert_one_line_error(run_script(f"--out_dir={tmp_path / 'nope'}"), "no folder", "train.py")


def test_corrupt_checkpoint_is_a_one_line_error(tmp_path):
    """Bytes that are no checkpoint at all (the script's exit and stderr for such a line:
    test_missing_folder_is_a_one_line_error)."""
    (tmp_path / "ckpt.pt").write_bytes(b"\x80\x02not a checkpoint" * 10)
    mentions(error_of(run, tmp_path), "ckpt.pt", "is not a readable checkpoint")


@pytest.mark.parametrize("argv, message", [
    (["--tmperature=1"],
     "unknown setting 'tmperature' in --tmperature=1: did you mean 'temperature'?"),
    # a bare argument is a config file
    (["out"], "no config file out; settings are given as --key=value"),
    (["--num_samples=two"], "num_samples must be int, got 'two' in --num_samples=two"),
    (["--top_p"], "--top_p needs a value"),
    (["--dtype=fp8"], "dtype must be one of auto, float32, bfloat16"),
    (["--device=nonsense"], "device 'nonsense' is not usable here"),
    (["--start=FILE:/no/such/file"],
     "cannot read the prompt file --start=FILE:/no/such/file (FileNotFoundError: "),
    (["--start=Hello ROMEO"],
     "characters not in this model's vocabulary: 'E', 'H', 'M', 'O', 'R': give --start in"),
])
def test_bad_settings_are_one_line_errors(tmp_path, argv, message):
    with pytest.raises(SystemExit) as e:
        run(write_checkpoint(tmp_path), *argv)
    assert (str(e.value).startswith("error: ") and message in str(e.value)
            and "\n" not in str(e.value))


def test_a_sample_whose_token_ids_cannot_fit_in_memory_is_refused_before_it_starts(
        tmp_path, monkeypatch):
    """--max_new_tokens=10**12 generated for hours and then failed for memory: 8 bytes a token id
    (generate's int64 tensor) is a floor, so a sample past memory / 8 tokens cannot finish."""
    folder = write_checkpoint(tmp_path)
    before = file_hashes(folder)
    result = run_script(f"--out_dir={folder}", "--device=cpu", "--max_new_tokens=1000000000000")
    assert_one_line_error(result, "max_new_tokens=1000000000000", "8,000,000,000,000 bytes",
                          "at most")
    assert file_hashes(folder) == before
    pages = {"SC_PHYS_PAGES": 1000, "SC_PAGE_SIZE": 4096}  # a machine of 4,096,000 bytes
    monkeypatch.setattr(os, "sysconf", pages.get)
    sample.check_memory(512_000)  # 8 bytes each: exactly its memory
    mentions(error_of(sample.check_memory, 512_001), "max_new_tokens=512001",
             "at least 4,096,008 bytes", "this machine's 4,096,000 bytes", "at most 512,000 tokens")


def test_missing_checkpoint_truncated_checkpoint_and_wrong_model_are_one_line_errors(tmp_path):
    with pytest.raises(SystemExit, match=r"^error: no checkpoint in .* \(ckpt.pt or ckpt/\)"):
        run(tmp_path)
    data = (write_checkpoint(tmp_path) / "ckpt.pt").read_bytes()
    (tmp_path / "ckpt.pt").write_bytes(data[:len(data) // 2])
    damaged = r"^error: .*ckpt.pt has \d+ bytes, \d+ when saved: it is cut short or damaged"
    with pytest.raises(SystemExit, match=damaged):
        run(tmp_path)
    # saved by an older normgpt: torch.load finds it out
    checkpoint.sums_path(tmp_path / "ckpt.pt").unlink()
    with pytest.raises(SystemExit,
                       match=r"^error: .*ckpt.pt is not a readable checkpoint \(.+\); [^\n]*$"):
        run(tmp_path)
    ckpt = torch.load(write_checkpoint(tmp_path) / "ckpt.pt")
    ckpt["model_args"]["n_layer"] = 3
    save(ckpt, tmp_path)
    with pytest.raises(SystemExit, match=r"^error: .*ckpt.pt does not fit this model.py "
                                         r"\(RuntimeError: [^\n]*$"):
        run(tmp_path)


def test_empty_prompt_without_a_start_token_or_newline_is_an_error(tmp_path):
    chars = "abc"
    folder = write_checkpoint(tmp_path, meta=dict(dataset="toy", tokenizer="char", vocab_size=3,
                                                  eot_token=None, chars=chars))
    mentions(error_of(run, folder), "empty --start", "start token", "<|endoftext|>", "newline",
             "--start=TEXT")


# ---------------------------------------------------------------- end to end

def test_sample_from_a_checkpoint_written_by_train(tmp_path, data_dir, shakespeare_text):
    train.main([f"--data_dir={data_dir}", "--dataset=tiny", f"--out_dir={tmp_path / 'out'}",
                "--device=cpu", "--norm_mode=geonorm", "--n_layer=2", "--n_head=4", "--n_embd=32",
                "--block_size=16", "--batch_size=4", "--max_iters=4", "--eval_interval=2",
                "--eval_iters=1", "--compile=False"])
    chars, start = set(load_meta(data_dir / "tiny")["chars"]), shakespeare_text[:8]
    folder, greedy = tmp_path / "out", (f"--start={start}", "--temperature=0", "--max_new_tokens=9")
    # past block_size
    (text,) = run(folder, f"--start={start}", "--max_new_tokens=50", "--top_k=5", "--top_p=0.9")
    assert text.startswith(start) and len(text) == 8 + 50 and set(text) <= chars
    assert run(folder, *greedy) == run(folder, *greedy, "--use_cache=False")


# ---------------------------------------------------------------- every tool: out of range, Ctrl-C

def a_run(folder):
    """out_dir of a trained run, as far as a tool reading it can tell, and a file of the user's
    beside it."""
    write_checkpoint(folder)
    (folder / "notes.txt").write_text("the user's own")
    return folder


TOOLS = dict(sample=sample.main, eval=evaluation.main, bench=bench.main, ablate=ablate.main)
BENCH_TINY = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=32", "--batch_size=2",
              "--steps=1", "--compile=off", "--modes=pre",
              "--vocab_size=65"]  # bench's tokens are random: no dataset to prepare


@pytest.mark.parametrize("tool, arg, message", [
    ("sample", "--num_samples=0", "num_samples must be at least 1, got 0"),
    ("sample", "--max_new_tokens=-1", "max_new_tokens must be at least 0, got -1"),
    ("sample", "--temperature=-0.5", "temperature must be at least 0, got -0.5"),
    ("sample", "--top_k=-1", "top_k must be at least 0, got -1"),
    ("sample", "--top_p=0", "top_p must be in (0, 1]"),
    ("sample", "--top_p=1.5", "top_p must be in (0, 1]"),
    ("sample", "--seed=-1", "seed must be in [0, 1e19), got -1"),
    ("eval", "--limit=0", "limit must be at least 1, got 0"),
    ("eval", "--num_fewshot=-1", "num_fewshot must be at least 0, got -1"),
    ("eval", "--batch_size=0", "batch_size must be at least 1, got 0"),
    ("eval", "--seed=-1", "seed must be in [0, 1e19), got -1"),
    ("bench", "--sample_tokens=0", "sample_tokens must be at least 1, got 0"),
    ("bench", "--sample_tokens=-5", "sample_tokens must be at least 1, got -5"),
    ("bench", "--block_size=8", "block_size=8 leaves no room to sample after the 8-token prompt"),
    ("bench", "--steps=0", "steps must be at least 1, got 0"),
    ("bench", "--seed=-1", "seed must be in [0, 1e19), got -1"),
    ("bench", "--beta2=1.0", "beta2 must be in [0, 1), got 1.0"),
    ("bench", "--n_head=3", "n_embd=32 is not divisible by n_head=3"),
    ("ablate", "--jobs=0", "ablate_jobs must be at least 1, got 0"),
    ("ablate", "--nproc=0", "ablate_nproc must be at least 1, got 0"),
    ("ablate", "--eval_limit=0", "ablate_eval_limit must be at least 1, got 0"),
])
def test_a_value_out_of_its_range_is_one_line_before_anything_is_read_or_written(
        tool, arg, message, tmp_path, monkeypatch):
    """Each tool checks every setting with a natural range before it loads, measures or trains
    anything."""
    out = a_run(tmp_path / "out")
    before = file_hashes(tmp_path)
    for work in (checkpoint, "load_model"), (bench, "bench_training"), (subprocess, "run"):
        monkeypatch.setattr(*work, tripwire)
    args = BENCH_TINY if tool == "bench" else [f"--out_dir={out}", "--device=cpu"]
    assert message in error_of(TOOLS[tool], [*args, arg])
    assert file_hashes(tmp_path) == before


def interrupt(*_, **__):
    raise KeyboardInterrupt


TASK_YAML = """task: t
dataset_path: json
dataset_kwargs: {{data_files: {{test: {data}}}, cache_dir: {cache}}}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{q}}}}"
doc_to_choice: "{{{{c}}}}"
doc_to_target: "{{{{a}}}}"
metric_list: [{{metric: acc, aggregation: mean, higher_is_better: true}}]
"""


@pytest.mark.parametrize("tool", TOOLS)
def test_ctrl_c_in_any_tool_is_one_line_and_exit_130_with_files_whole(tool, tmp_path, monkeypatch,
                                                                      capsys):
    """The script run as python TOOL.py, Ctrl-C landing in the middle of its work: sampling,
    scoring, a training step, a run of the ablation."""
    out = a_run(tmp_path / "out")
    args = {"sample": [f"--out_dir={out}", "--device=cpu"], "bench": BENCH_TINY,
            "ablate": [f"--out_dir={out}", "--modes=pre", "--device=cpu",
                       "--max_iters=1"]}.get(tool)
    work = {"sample": (GPT, "generate"), "bench": (torch.nn.utils, "clip_grad_norm_"),
            "ablate": (subprocess, "Popen")}.get(tool)
    if tool == "eval":
        lm_eval = pytest.importorskip("lm_eval")
        (tmp_path / "t.jsonl").write_text('{"q": "to be", "c": ["a", "b"], "a": 0}\n')
        (tmp_path / "tasks").mkdir()
        yaml = TASK_YAML.format(data=tmp_path / "t.jsonl", cache=tmp_path / "cache")
        (tmp_path / "tasks" / "t.yaml").write_text(yaml)
        args = [f"--out_dir={out}", "--device=cpu", "--tasks=t",
                f"--include_path={tmp_path / 'tasks'}"]
        # datasets caches the task's data: no progress bar below
        evaluation.main([*args, "--dry_run=True"])
        capsys.readouterr()
        work = lm_eval, "simple_evaluate"
    monkeypatch.setattr(*work, interrupt)
    before = file_hashes(out)
    monkeypatch.setattr(sys, "argv", [f"{tool}.py", *args])
    with pytest.raises(SystemExit) as e:
        try:
            runpy.run_path(str(ROOT / f"{tool}.py"), run_name="__main__")
        except KeyboardInterrupt:  # escaped: a traceback of the whole stack
            pytest.fail(f"{tool}.py let Ctrl-C escape as a traceback")
    err = capsys.readouterr().err
    assert e.value.code == 130 and "Traceback" not in err
    assert len(err.splitlines()) == 1 and err.startswith("interrupted"), err
    # and what a run had begun to write is its own (train.log)
    assert before.items() <= file_hashes(out).items()
