"""eval.py's promises: lm-eval's three kinds of request answered exactly as model.py's own forward
pass scores the same tokens, end to end through the real harness on tasks written here, offline; and
OpenAI's GPT-2 converted into model.py (a tiny random one saved locally: no download)."""
import json
import math
import statistics
import shutil
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

import ablate
import checkpoint
import data
import eval as evaluation
import logbook
import prepare_data
import results
import train
from conftest import (ROOT, error_of, file_hashes, forked_runs, mentions, needs_gpt2, torchrun,
                      tripwire)
from model import ARCHS, GPT, NORM_MODES, GPTConfig, from_gpt2
from checkpoint import load_model

lm_eval = pytest.importorskip("lm_eval")
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

TINY = ["--dataset=tiny", "--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=32",
        "--batch_size=8", "--eval_iters=1", "--warmup_iters=0", "--learning_rate=1e-2",
        "--device=cpu", "--compile=False"]
QUESTIONS = ["ROMEO:\nWhat say", "JULIET:\nI shall", "KING:\nThou art the",
             "First Citizen:\nWe are", "MENENIUS:\nWhy, masters,", "CORIOLANUS:\nHe that gives"]
CHOICES = [" you?", " thee.", " king.", " lord!"]


@pytest.fixture(scope="module", autouse=True)
def own_tasks_asked():
    """Indexing lm-eval's own ~15,000 tasks takes 20 to 30 s on 2 cores, and no test here can use
    one of them (their data is on the hub): a TaskManager asked for them indexes the include_path's
    alone. The list it returns records each include_defaults eval.py passed, in order."""
    asked = []

    def task_manager(include_path=None, include_defaults=True):
        asked.append(include_defaults)
        return TaskManager(include_path=include_path, include_defaults=False)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(evaluation, "TaskManager", task_manager)
        yield asked


@pytest.fixture(scope="module")
def out_dir(data_dir, tmp_path_factory):
    """A tiny char-level model trained for 40 steps: it prefers some continuations, unlike a fresh
    one."""
    out = tmp_path_factory.mktemp("eval_run")
    train.main([f"--data_dir={data_dir}", f"--out_dir={out}", *TINY, "--max_iters=40",
                "--eval_interval=40", "--log_interval=40"])
    return out


@pytest.fixture(scope="module")
def model_meta(out_dir):
    return load_model(out_dir, "cpu")


def adapter(model_meta, batch_size=8):
    return evaluation.GPTAdapter(*model_meta, "cpu", "float32", batch_size)


def requests(kind, *arguments):
    return [Instance(request_type=kind, doc={}, arguments=args, idx=0) for args in arguments]


def own_loglikelihood(model, context_ids, continuation_ids):
    """-(summed cross-entropy) of the continuation from model.py's own forward with targets; and
    whether every continuation token is the argmax there."""
    ids = torch.tensor([context_ids + continuation_ids])
    x, y = ids[:, :-1], ids[:, 1:].clone()
    y[:, :len(context_ids) - 1] = -1  # only the continuation is scored
    logits, loss = model(x, y)
    n = len(continuation_ids)
    greedy = bool((logits[0, -n:].argmax(-1) == ids[0, -n:]).all())
    return -loss.item() * n, greedy


# ------------------------------------------------------------------ the adapter, request by request

def test_loglikelihood_is_minus_the_summed_cross_entropy_of_models_own_forward(model_meta):
    model, meta = model_meta
    lm, encode = adapter(model_meta), data.get_tokenizer(meta)[0]
    pairs = [(q, c) for q in QUESTIONS[:3] for c in CHOICES]
    for (context, continuation), (logp, greedy) in zip(
            pairs, lm.loglikelihood(requests("loglikelihood", *pairs))):
        want, want_greedy = own_loglikelihood(model, encode(context), encode(continuation))
        assert logp == pytest.approx(want, rel=1e-5, abs=1e-5) and greedy == want_greedy


def test_batch_of_one_equals_a_padded_batch_of_eight(model_meta):
    pairs = [(q, c) for q in QUESTIONS for c in CHOICES[:2]]  # 12 requests of 17 to 34 characters
    one = adapter(model_meta, batch_size=1).loglikelihood(requests("loglikelihood", *pairs))
    eight = adapter(model_meta, batch_size=8).loglikelihood(requests("loglikelihood", *pairs))
    assert [g for _, g in one] == [g for _, g in eight]
    assert [p for p, _ in one] == pytest.approx([p for p, _ in eight], abs=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("norm_mode", NORM_MODES)
def test_every_mode_and_block_family_scores_as_its_own_forward_pass(model_meta, arch, norm_mode):
    meta = model_meta[1]
    torch.manual_seed(0)
    model = GPT(GPTConfig(arch=arch, norm_mode=norm_mode, n_layer=2, n_head=2, n_embd=32,
                          block_size=32, vocab_size=len(meta["chars"]), multiple_of=16)).eval()
    encode = data.get_tokenizer(meta)[0]
    pairs = [(q, c) for q in QUESTIONS[:4] for c in CHOICES[:2]]
    one, eight = (adapter((model, meta), size).loglikelihood(requests("loglikelihood", *pairs))
                  for size in (1, 8))
    want = [own_loglikelihood(model, encode(context), encode(continuation))
            for context, continuation in pairs]
    assert [p for p, _ in eight] == pytest.approx([p for p, _ in want], rel=1e-5, abs=1e-5)
    assert [p for p, _ in one] == pytest.approx([p for p, _ in eight], abs=1e-5)
    assert [g for _, g in one] == [g for _, g in eight] == [g for _, g in want]


def test_is_greedy_holds_exactly_for_the_greedy_continuation(model_meta):
    model, meta = model_meta
    encode, decode = data.get_tokenizer(meta)
    context = QUESTIONS[2]
    greedy = decode(
        model.generate(torch.tensor([encode(context)]), 6, temperature=0)[0, -6:].tolist())
    other = next(c for c in meta["chars"] if c != greedy[-1])
    lm = adapter(model_meta)
    results = lm.loglikelihood(requests("loglikelihood", (context, greedy),
                                        (context, greedy[:-1] + other)))
    assert [g for _, g in results] == [True, False]


def test_a_context_beyond_block_size_is_cut_from_the_left(model_meta):
    model, meta = model_meta
    encode = data.get_tokenizer(meta)[0]
    context, continuation = "\n".join(QUESTIONS), " thee."  # 113 characters, the window 32
    (logp, greedy), = adapter(model_meta).loglikelihood(
        requests("loglikelihood", (context, continuation)))
    # the window's 32 inputs + the last target
    kept = encode(context)[-(32 + 1 - len(continuation)):]
    assert (logp, greedy) == pytest.approx(own_loglikelihood(model, kept, encode(continuation)),
                                           abs=1e-5)


def test_rolling_is_the_whole_text_loglikelihood_in_disjoint_windows(model_meta):
    model, meta = model_meta
    encode = data.get_tokenizer(meta)[0]
    start = encode("\n")  # a character table's start token
    # 15 and 71 characters: one window, and three
    short, long = QUESTIONS[0], "\n".join(QUESTIONS[:4])
    rolled = adapter(model_meta).loglikelihood_rolling(
        requests("loglikelihood_rolling", (short,), (long,)))
    assert rolled[0] == pytest.approx(own_loglikelihood(model, start, encode(short))[0], rel=1e-5)
    # 32 tokens predicted per window, given what fits before them in the window
    ids = start + encode(long)
    ends = [min(e, len(ids)) for e in range(33, len(ids) + 32, 32)]  # 33, 65, 72
    want = sum(own_loglikelihood(model, ids[max(0, e - 33):b], ids[b:e])[0]
               for b, e in zip([1] + ends, ends))
    assert rolled[1] == pytest.approx(want, rel=1e-5)


@pytest.fixture(scope="module")
def lively(model_meta):
    """A model whose greedy text changes with its context and from one token to the next (the
    trained one's is all spaces after 40 steps; a fresh one repeats a letter): a fresh GPT with its
    weights shaken."""
    meta = model_meta[1]
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=32,
                          vocab_size=len(meta["chars"]))).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return model, meta


def continuation(model, meta, ids, n, temperature=0.0):
    """model.py's own generate: the n characters after ids."""
    return data.get_tokenizer(meta)[1](
        model.generate(torch.tensor([ids]), n, temperature)[0, len(ids):].tolist())


def test_generate_until_is_generate_cut_before_the_first_stop_string_in_every_form(lively):
    model, meta = lively
    encode = data.get_tokenizer(meta)[0]
    context = QUESTIONS[1]  # 15 characters: with at most 17 new ones, the whole context is kept
    greedy = continuation(model, meta, encode(context), 16)
    first, later = greedy[6:8], greedy[12:14]
    assert first not in greedy[:7] and later not in greedy[:13] and len(set(greedy)) > 8
    asked = [{"until": [later, first], "max_gen_toks": 16},  # the earliest of several
             {"until": later, "max_gen_toks": 16},  # one string, not in a list
             {"until": [], "max_gen_toks": 9}, {"max_gen_toks": 9},
             {"until": None, "max_gen_toks": 9}]
    outs = adapter(lively).generate_until(requests("generate_until",
                                                   *[(context, o) for o in asked]))
    assert outs == [greedy[:6], greedy[:12], greedy[:9], greedy[:9], greedy[:9]]


def test_generate_stops_at_the_vocabularys_end_of_text_token(lively):
    model, meta = lively
    encode = data.get_tokenizer(meta)[0]
    greedy = continuation(model, meta, encode(QUESTIONS[0]), 16)
    eot = greedy[8]  # a character table has none: one is given here, as GPT-2's <|endoftext|> is
    with_eot = {**meta, "eot_token": encode(eot)[0]}
    out, = adapter((model, with_eot)).generate_until(
        requests("generate_until", (QUESTIONS[0], {"max_gen_toks": 16})))
    assert out == greedy[:greedy.index(eot)] and len(out) <= 8


@pytest.mark.parametrize("max_gen_toks, kept",
                         [(5, 27), (20, 12), (31, 1), (32, 1), (40, 1), (None, 1)])
def test_generate_keeps_the_contexts_end_that_fits_one_window_with_the_new_tokens(
        lively, max_gen_toks, kept):
    """block_size 32: the last 32 - max_gen_toks context tokens, at least one; max_gen_toks 256 by
    default."""
    model, meta = lively
    encode = data.get_tokenizer(meta)[0]
    context = "\n".join(QUESTIONS)  # 113 characters
    n = 256 if max_gen_toks is None else max_gen_toks
    options = {"until": []} | ({} if max_gen_toks is None else {"max_gen_toks": max_gen_toks})
    out, = adapter(lively).generate_until(requests("generate_until", (context, options)))
    assert out == continuation(model, meta, encode(context)[-kept:], n) and len(out) == n
    assert out != continuation(model, meta, encode(context)[-kept - 1:], n)  # the cut is seen


def test_generate_from_an_empty_context_starts_at_the_start_token(lively):
    model, meta = lively
    out, = adapter(lively).generate_until(requests("generate_until", ("", {"max_gen_toks": 12})))
    assert out == continuation(model, meta, data.get_tokenizer(meta)[0]("\n"), 12)


@pytest.mark.parametrize("options, temperature", [({"do_sample": True, "temperature": 0.5}, 0.5),
                                                  ({"do_sample": True}, 1.0),
                                                  ({"do_sample": False, "temperature": 0.5}, 0.0),
                                                  ({"temperature": 0.5}, 0.0)])
def test_generate_samples_at_the_tasks_temperature_only_when_it_asks_to_sample(lively, options,
                                                                               temperature):
    model, meta = lively
    ids = data.get_tokenizer(meta)[0](QUESTIONS[2])
    torch.manual_seed(7)
    out, = adapter(lively).generate_until(
        requests("generate_until", (QUESTIONS[2], {"max_gen_toks": 12, **options})))
    torch.manual_seed(7)
    # 19 + 12 characters fit the window
    assert out == continuation(model, meta, ids, 12, temperature)
    for other in {0.0, 0.5, 1.0} - {temperature}:  # each temperature draws a text of its own
        torch.manual_seed(7)
        assert out != continuation(model, meta, ids, 12, other)


def test_requests_are_scored_longest_first_in_batches_of_batch_size(model_meta, monkeypatch):
    """Longest first, so that a batch pads little; the answers still come back in the requests'
    order."""
    encode = data.get_tokenizer(model_meta[1])[0]
    # 12, the long continuations last
    pairs = [(q, c) for q in QUESTIONS for c in (" I", " thee, my lord")]
    lm, batches = adapter(model_meta, batch_size=5), []
    score = lm.score
    monkeypatch.setattr(lm, "score", lambda windows: batches.append(windows) or score(windows))
    got = lm.loglikelihood(requests("loglikelihood", *pairs))
    lengths = [len(tokens) for batch in batches for tokens, _ in batch]
    assert [len(batch) for batch in batches] == [5, 5, 2]
    # a window: 33
    assert lengths == sorted((min(len(encode(q + c)), 33) for q, c in pairs), reverse=True)
    alone = [adapter(model_meta).loglikelihood(requests("loglikelihood", pair))[0]
             for pair in pairs]
    assert [greedy for _, greedy in got] == [greedy for _, greedy in alone]
    # a batch's matmuls sum in another order than one request's (on some CPUs): float32's rounding
    assert [score for score, _ in got] == pytest.approx([score for score, _ in alone], rel=1e-6)


def test_progress_bars_show_on_the_first_process_only(model_meta, capsys):
    """A bar each for scoring (in batches) and generating, on rank 0 unless lm-eval turns it off."""
    pair, question = (QUESTIONS[0], CHOICES[0]), (QUESTIONS[0], {"max_gen_toks": 2})
    for rank, world, disable in [(0, 1, False), (0, 2, False), (1, 2, False), (2, 3, False),
                                 (0, 1, True)]:
        lm = evaluation.GPTAdapter(*model_meta, "cpu", "float32", 8, rank, world)
        off = {"disable_tqdm": True} if disable else {}  # lm-eval's default: shown
        lm.loglikelihood(requests("loglikelihood", pair, pair), **off)
        lm.loglikelihood_rolling(requests("loglikelihood_rolling", (QUESTIONS[1],)), **off)
        lm.generate_until(requests("generate_until", question, question), **off)
        err = capsys.readouterr().err
        shown = rank == 0 and not disable
        scoring = re.findall(r"scoring: 100%.* 1/1 \[.*(batch/s|s/batch)\]", err)
        assert len(scoring) == 2 * shown, (rank, world, disable, err)
        assert bool(re.search(r"generating: 100%.* 2/2 ", err)) == shown, (
            rank, world, disable, err)


def test_all_gather_stacks_numbers_and_joins_tensors_along_their_first_axis(model_meta, tmp_path):
    """lm-eval's collective (it gathers each process's count of requests): checked in a world of one
    process."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0,
                            world_size=1)
    try:
        lm = adapter(model_meta)
        assert torch.equal(lm.all_gather(torch.tensor(7)), torch.tensor([7]))
        assert torch.equal(lm.all_gather(torch.tensor([1, 2, 3])), torch.tensor([1, 2, 3]))
        assert torch.equal(lm.all_gather(torch.ones(2, 3)), torch.ones(2, 3))
        assert lm.gather_object({"a": 1}) == [{"a": 1}]
    finally:
        dist.destroy_process_group()


def test_a_character_outside_the_table_is_one_line_saying_bpe_is_needed(model_meta):
    lm = adapter(model_meta)
    message = error_of(lm.loglikelihood,
                       requests("loglikelihood", ("It costs 5 € @ ~", " €€ #1.")))
    # the first 5 of 6, sorted
    mentions(message, "'#', '1', '5', '@', '~'", "BPE model", "--tokenizer gpt2")


def test_a_character_table_without_a_newline_cannot_start_a_text(model_meta):
    model, meta = model_meta
    without = {**meta, "chars": [c for c in meta["chars"] if c != "\n"]}
    mentions(error_of(adapter, (model, without)), "<|endoftext|>", "newline", "BPE model",
             "--tokenizer gpt2")


def test_tokens_decode_to_the_text_they_encode(model_meta):
    lm = adapter(model_meta)
    assert (lm.tok_decode(lm.tok_encode(QUESTIONS[4])) == QUESTIONS[4]
            and len(lm.tok_encode(QUESTIONS[4])) == 23)


def test_one_process_is_rank_0_of_a_world_of_1(model_meta):
    lm = evaluation.GPTAdapter(*model_meta, "cpu", "float32", 8)
    assert (lm.rank, lm.world_size) == (0, 1)


def test_a_continuation_longer_than_block_size_is_one_line(model_meta):
    lm = adapter(model_meta)
    message = error_of(lm.loglikelihood, requests("loglikelihood", ("Thou", " " + "a" * 39)))
    mentions(message, "40 tokens", "block_size=32", "longer context")


# ------------------------------------------------------- end to end through lm_eval.simple_evaluate

def write_task(folder, name, docs, **config):
    """A task YAML reading docs from a local jsonl (HF_DATASETS_OFFLINE holds: nothing is
    downloaded)."""
    (folder / f"{name}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    config = dict(task=name, dataset_path="json", test_split="test", dataset_kwargs=dict(
        data_files=dict(test=str(folder / f"{name}.jsonl")), cache_dir=str(folder / "cache")),
        **config)
    (folder / f"{name}.yaml").write_text(json.dumps(config))  # JSON is YAML
    return docs


MC_DOCS = [dict(question=q, choices=[c.strip() for c in CHOICES], answer=i % 4)
           for i, q in enumerate(QUESTIONS)]
ROLL_DOCS = [dict(text=q.replace("\n", " ")) for q in QUESTIONS]


@pytest.fixture(scope="module")
def ll_docs(model_meta):
    """lambada's kind: a context and its last word; two of them are the model's greedy
    continuations."""
    model, meta = model_meta
    encode, decode = data.get_tokenizer(meta)
    greedy = [decode(model.generate(torch.tensor([encode(q)]), 3, temperature=0)[0, -3:].tolist())
              for q in QUESTIONS[:2]]
    return ([dict(context=q, word=g) for q, g in zip(QUESTIONS, greedy)]
            + [dict(context=q.rsplit(" ", 1)[0], word=" " + q.rsplit(" ", 1)[1])
               for q in QUESTIONS[2:]])


@pytest.fixture(scope="module")
def tasks_dir(tmp_path_factory, ll_docs):
    """tiny_mc (multiple choice), tiny_ll (perplexity and greedy accuracy of a last word), tiny_roll
    (wikitext's kind: whole texts), and tiny_hub, whose data only the hub has."""
    folder = tmp_path_factory.mktemp("tasks")
    write_task(folder, "tiny_mc", MC_DOCS, output_type="multiple_choice",
               doc_to_text="{{question}}", doc_to_choice="{{choices}}", doc_to_target="{{answer}}",
               metric_list=[dict(metric="acc"), dict(metric="acc_norm")])
    write_task(folder, "tiny_ll", ll_docs, output_type="loglikelihood", doc_to_text="{{context}}",
               doc_to_target="{{word}}",
               metric_list=[dict(metric="perplexity", aggregation="perplexity",
                                 higher_is_better=False), dict(metric="acc")])
    write_task(folder, "tiny_roll", ROLL_DOCS, output_type="loglikelihood_rolling", doc_to_text="",
               doc_to_target="{{text}}", metric_list=[dict(metric="bits_per_byte")])
    (folder / "tiny_hub.yaml").write_text(json.dumps(dict(
        task="tiny_hub", dataset_path="normgpt/no_such_dataset", test_split="test",
        output_type="multiple_choice", doc_to_text="{{q}}", doc_to_choice="{{c}}",
        doc_to_target="{{a}}", metric_list=[dict(metric="acc")])))
    return folder


def expected_scores(model, encode, ll_docs, n=len(QUESTIONS), start="\n"):
    """What the three tasks must score, computed with model.py's own forward on the first n docs."""
    mc_acc, mc_norm = [], []
    for doc in MC_DOCS[:n]:
        lls = [own_loglikelihood(model, encode(doc["question"]), encode(" " + c))[0]
               for c in doc["choices"]]
        mc_acc.append(max(range(4), key=lambda j: lls[j]) == doc["answer"])
        mc_norm.append(max(range(4), key=lambda j: lls[j] / len(doc["choices"][j]))
                       == doc["answer"])
    ll = [own_loglikelihood(model, encode(d["context"]), encode(d["word"])) for d in ll_docs[:n]]
    # one window each
    rolled = [own_loglikelihood(model, encode(start), encode(d["text"]))[0] for d in ROLL_DOCS[:n]]
    bits = -sum(rolled) / sum(len(d["text"].encode()) for d in ROLL_DOCS[:n]) / math.log(2)
    return {("tiny_mc", "acc"): sum(mc_acc) / n, ("tiny_mc", "acc_norm"): sum(mc_norm) / n,
            ("tiny_ll", "acc"): sum(g for _, g in ll) / n,
            ("tiny_ll", "perplexity"): math.exp(-sum(p for p, _ in ll) / n),
            ("tiny_roll", "bits_per_byte"): bits}


def metrics_of(report):
    """{(task, metric): value} of an eval.json's results."""
    return {(task, k.split(",")[0]): v
            for task, m in report["results"].items() for k, v in m.items()
            if isinstance(v, float) and "stderr" not in k}


@pytest.fixture(scope="module")
def evaluated(out_dir, tasks_dir):
    evaluation.main([f"--out_dir={out_dir}", "--tasks=tiny_mc,tiny_ll,tiny_roll",
                     f"--include_path={tasks_dir}", "--batch_size=5", "--device=cpu"])
    return json.loads((out_dir / "eval.json").read_text())


def test_end_to_end_scores_equal_those_of_models_own_forward(evaluated, model_meta, ll_docs):
    model, meta = model_meta
    want = expected_scores(model, data.get_tokenizer(meta)[0], ll_docs)
    assert want[("tiny_ll", "acc")] >= 2 / 6  # the greedy continuations are counted
    assert metrics_of(evaluated) == pytest.approx(want)


def test_eval_json_records_versions_shots_limit_and_settings(evaluated):
    assert evaluated["lm_eval_version"] == lm_eval.__version__
    assert (set(evaluated["versions"]) == set(evaluated["n_shot"])
            == {"tiny_mc", "tiny_ll", "tiny_roll"})
    assert evaluated["n_shot"]["tiny_mc"] == 0 and evaluated["settings"]["limit"] is None
    assert (evaluated["scores"]["tiny_mc"]["metric"] == "acc_norm"
            and evaluated["scores"]["tiny_ll"]["metric"] == "acc")
    assert (evaluated["scores"]["tiny_mc"]["value"]
            == evaluated["results"]["tiny_mc"]["acc_norm,none"])


@pytest.mark.parametrize("metrics, want", [
    ({"alias": "mc", "acc,none": 0.25, "acc_stderr,none": 0.1, "acc_norm,none": 0.5,
      "acc_norm_stderr,none": 0.2}, ("acc_norm", 0.5, 0.2)),
    ({"alias": "ll", "perplexity,none": 9.0, "perplexity_stderr,none": 1.5, "acc,none": 0.5,
      "acc_stderr,none": "N/A"}, ("acc", 0.5, None)),  # lm-eval writes N/A where it has no stderr
    ({"alias": "roll", "word_perplexity_stderr,none": "N/A", "bits_per_byte_stderr,none": 0.25,
      # a stderr is never the headline, first or not
      "bits_per_byte,none": 1.5}, ("bits_per_byte", 1.5, 0.25)),
    ({"alias": "empty", "acc_stderr,none": 0.5}, (None, None, None)),
])
def test_the_headline_is_acc_norm_else_acc_else_the_first_metric(metrics, want):
    assert evaluation.headline(metrics) == want


def test_limit_scores_only_the_first_examples(out_dir, tasks_dir, model_meta, ll_docs):
    report = evaluation.main([f"--out_dir={out_dir}", "--tasks=tiny_mc",
                              f"--include_path={tasks_dir}", "--limit=3", "--device=cpu"])
    model, meta = model_meta
    assert report["n_samples"]["tiny_mc"]["effective"] == 3
    want = expected_scores(model, data.get_tokenizer(meta)[0], ll_docs, n=3)
    assert metrics_of(report) == pytest.approx({k: v for k, v in want.items() if k[0] == "tiny_mc"})


def test_more_few_shot_examples_than_a_task_has_and_a_run_as_init_from_are_one_line(out_dir,
                                                                                    tasks_dir):
    """lm-eval draws the solved examples with random.sample, whose error was a traceback; a run's
    folder given as init_from was told to save a GPT-2 into it."""
    before = file_hashes(out_dir)
    mentions(error_of(evaluation.main, [f"--out_dir={out_dir}", "--tasks=tiny_mc",
                                        f"--include_path={tasks_dir}", "--num_fewshot=1000",
                                        "--device=cpu"]),
             "num_fewshot=1000", "more solved examples than a task has", "lower num_fewshot")
    assert file_hashes(out_dir) == before
    # a run's folder where a GPT-2's goes: not a GPT-2 to save_pretrained into it
    mentions(error_of(evaluation.main, [f"--init_from={out_dir}", "--tasks=tiny_mc"]),
             f"init_from={out_dir} is a run train.py wrote", f"--out_dir={out_dir}")


COUNTING_EVAL = """import os, sys
sys.path.insert(0, os.getcwd())
import data, eval as evaluation
score = evaluation.GPTAdapter._loglikelihood_tokens

# each process notes how many requests it scores
def counted(self, requests, disable_tqdm, **kwargs):
    with open(os.path.join(sys.argv[-1], "scored-" + os.environ["RANK"]), "a") as f:
        f.write(f"{len(requests)}\\n")
    return score(self, requests, disable_tqdm, **kwargs)

evaluation.GPTAdapter._loglikelihood_tokens = counted
data.run_cli(lambda argv: evaluation.main(argv[:-1]))
"""


def test_two_torchrun_processes_share_the_examples_and_score_the_same(evaluated, out_dir, tasks_dir,
                                                                      tmp_path):
    """lm-eval's rank/world_size protocol with gloo: each process scores half the requests (of 36:
    tiny_mc's 6 x 4 choices, tiny_ll's 6, tiny_roll's 6 texts of one window each), the first gathers
    the metrics."""
    shutil.copy(out_dir / "ckpt.pt", tmp_path / "ckpt.pt")
    (tmp_path / "counting_eval.py").write_text(COUNTING_EVAL)
    result = torchrun([str(tmp_path / "counting_eval.py"), f"--out_dir={tmp_path}",
                       "--tasks=tiny_mc,tiny_ll,tiny_roll", f"--include_path={tasks_dir}",
                       "--device=cpu", str(tmp_path)], timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "eval.json").read_text())
    assert report["processes"] == 2 and metrics_of(report) == pytest.approx(metrics_of(evaluated))
    scored = [sum(map(int, (tmp_path / f"scored-{rank}").read_text().split())) for rank in (0, 1)]
    assert scored == [18, 18]


def test_the_hub_out_of_reach_is_one_line_naming_include_path(out_dir, tasks_dir):
    message = error_of(evaluation.main, [f"--out_dir={out_dir}", "--tasks=tiny_hub",
                                         f"--include_path={tasks_dir}", "--device=cpu"])
    mentions(message, "'tiny_hub'", "no_such_dataset", "offline", "local copies",
             "--include_path=DIR", "README: Evaluation")


# ------------------------------------------------------------------ tasks that cannot load, Ctrl-C

MC = dict(output_type="multiple_choice", doc_to_text="{{question}}", doc_to_choice="{{choices}}",
          doc_to_target="{{answer}}",
          metric_list=[dict(metric="acc", aggregation="mean", higher_is_better=True)])


def a_mistake(folder, kind):
    """A folder of task YAMLs with one mistake of this kind, and the task to ask for."""
    folder.mkdir()
    write_task(folder, "tiny_mc", MC_DOCS, **MC)
    if kind == "missing data file":
        write_task(folder, "tiny_gone", MC_DOCS, **MC)
        (folder / "tiny_gone.jsonl").unlink()
        return "tiny_gone", "task 'tiny_gone' does not load: FileNotFoundError: Unable to find"
    if kind == "broken YAML":
        (folder / "tiny_broken.yaml").write_text("task: tiny_broken\n  dataset_path: [json\n")
        return "tiny_mc", (f"{folder / 'tiny_broken.yaml'} is not valid YAML "
                           "(mapping values are not allowed here, line 2)")
    assert kind == "missing include", kind
    (folder / "tiny_incl.yaml").write_text("include: tiny_base.yaml\ntask: tiny_incl\n")
    return "tiny_incl", (f"{folder / 'tiny_incl.yaml'} includes tiny_base.yaml, "
                         f"which is not in {folder}")


@pytest.mark.parametrize("kind, tools", [("missing data file", "eval ablate"),
                                         ("broken YAML", "eval"), ("missing include", "eval")])
def test_a_task_that_cannot_load_is_one_line_before_any_model_or_run(kind, tools, out_dir,
                                                                     tmp_path, monkeypatch):
    """eval.py (and its --dry_run, and ablate.py's --eval_tasks, checked by that dry run in a
    process of its own before any training) names the task or file and its mistake in one line,
    before it loads a model; nothing is written. (An unknown name:
    test_settings_no_evaluation_can_use_are_one_line_before_any_model, as each look indexes
    lm-eval's 15,000 tasks; ablate.py passes on eval.py's line as it does here.)"""
    name, message = a_mistake(tmp_path / "tasks", kind)
    before = file_hashes(out_dir)
    monkeypatch.setattr(checkpoint, "load_model", tripwire)
    for dry_run in (False, True) if "eval" in tools else ():
        assert error_of(evaluation.main, [f"--out_dir={out_dir}", f"--tasks={name}", "--device=cpu",
                                          f"--include_path={tmp_path / 'tasks'}",
                                          f"--dry_run={dry_run}"]
                        ).startswith(f"error: {message}")
    assert file_hashes(out_dir) == before
    if "ablate" in tools:
        monkeypatch.setattr(ablate, "execute", tripwire)
        with pytest.raises(SystemExit) as e:
            ablate.main([f"--out_dir={tmp_path / 'out'}", "--modes=pre",
                         f"--eval_tasks=tiny_mc,{name}",
                         f"--eval_include_path={tmp_path / 'tasks'}"])
        assert str(e.value.code).startswith(
            f"error: the eval tasks: {message.removeprefix('error: ')}")
        assert str(e.value.code).endswith("(nothing has run)") and not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, words", [
    (["--init_from=scratch"], ("trained model", "init_from=resume", "GPT-2")),
    (["--tasks=,"], ("no tasks", "--tasks=hellaswag,piqa")),
    (["--batch_size=0"], ("batch_size", "at least 1", "--batch_size=0")),  # eval.py's ranges
    (["--include_path={tmp}/none"], ("include_path={tmp}/none", "not a folder", "task YAMLs")),
])
def test_settings_no_evaluation_can_use_are_one_line_before_any_model(args, words, tasks_dir,
                                                                      tmp_path):
    fill = lambda text: text.format(tmp=tmp_path, tasks=tasks_dir)
    got = error_of(evaluation.main, [f"--out_dir={tmp_path}", "--device=cpu", *map(fill, args)])
    mentions(got, *map(fill, words))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name, words", [
    ("tiny_mcq", ("'tiny_mcq'", "did you mean 'tiny_mc'")),
    ("zzqx", ("'zzqx'", "lm-eval ls tasks", "--include_path=DIR")),
])
def test_a_task_in_neither_the_include_path_nor_lm_evals_own_is_one_line(name, words, tasks_dir,
                                                                          own_tasks_asked,
                                                                          tmp_path):
    """The include_path's tasks are indexed first; a name they lack sends eval.py to lm-eval's own
    as well (include_defaults), and one found in neither is one line with a did-you-mean."""
    own_tasks_asked.clear()
    got = error_of(evaluation.main, [f"--out_dir={tmp_path}", "--device=cpu", f"--tasks={name}",
                                     f"--include_path={tasks_dir}"])
    mentions(got, *words)
    assert own_tasks_asked == [False, True]
    assert list(tmp_path.iterdir()) == []


def test_an_out_dir_where_eval_json_cannot_be_written_is_one_line_before_any_model(tasks_dir,
                                                                                   tmp_path):
    """eval.json is written after minutes of scoring: a folder by that name, an empty out_dir or one
    under /proc is found first."""
    (tmp_path / "run" / "eval.json").mkdir(parents=True)
    for out, says in ((tmp_path / "run", "eval.json is not a file"), ("", "out_dir is empty"),
                      ("/proc/nope", "cannot write in /proc")):
        got = error_of(evaluation.main, [f"--out_dir={out}", "--device=cpu", "--tasks=tiny_mc",
                                         f"--include_path={tasks_dir}"])
        assert says in got, got
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["eval.json"]


@pytest.mark.parametrize("text, why", [
    (b"task: x\n  dataset_path: [json\n", "mapping values are not allowed here, line 2"),
    (b"task: caf\xe9\n", "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9 in position 9: "
                         "invalid continuation byte"),  # no line mark: the error's first line
])
def test_a_task_file_that_does_not_read_is_named_with_why(text, why, tmp_path):
    (tmp_path / "bad.yaml").write_bytes(text)
    message = error_of(evaluation.check_task_files, tmp_path)
    mentions(message, str(tmp_path / "bad.yaml"), "not valid YAML", why, "fix it", "move it out")


def test_task_files_read_through_tags_lists_and_scalars(tmp_path):
    """lm-eval's YAMLs tag Python functions (!function); a file may hold a list or a single
    value."""
    (tmp_path / "tagged.yaml").write_text("task: t\nprocess_docs: !function utils.process\n"
                                          "include: base.yaml\n")
    (tmp_path / "base.yaml").write_text("output_type: multiple_choice\n")
    (tmp_path / "list.yaml").write_text("- include\n- nothing.yaml\n")
    (tmp_path / "scalar.yaml").write_text("include\n")
    assert evaluation.check_task_files(tmp_path) is None


def test_the_dry_run_loads_the_tasks_and_writes_nothing(out_dir, tasks_dir, capsys):
    before = file_hashes(out_dir)
    assert evaluation.main([f"--out_dir={out_dir}", "--tasks=tiny_mc,tiny_ll",
                            f"--include_path={tasks_dir}", "--dry_run=True"]) is None
    assert ("the tasks load (tiny_mc, tiny_ll)" in capsys.readouterr().out
            and file_hashes(out_dir) == before)


def test_ctrl_c_while_scoring_is_one_line_and_exit_130(out_dir, tmp_path):
    """A real SIGINT to python eval.py while lm-eval scores, the deepest stack: once 200 lines of
    traceback."""
    (tmp_path / "tasks").mkdir()
    # 7,200 requests, one per batch: seconds of scoring, far more than the two refreshes of the bar
    # take, even on a loaded machine (each thousand more requests is a second more of building them
    # before the scoring starts)
    write_task(tmp_path / "tasks", "tiny_long", MC_DOCS * 300, **MC)
    (tmp_path / "run").mkdir()
    shutil.copy(out_dir / "ckpt.pt", tmp_path / "run" / "ckpt.pt")
    before = file_hashes(tmp_path / "run")
    proc = subprocess.Popen([sys.executable, "eval.py", f"--out_dir={tmp_path / 'run'}",
                             "--tasks=tiny_long", f"--include_path={tmp_path / 'tasks'}",
                             "--device=cpu", "--batch_size=1"],
                            cwd=ROOT, stderr=subprocess.PIPE,
                            env=os.environ | {"OMP_NUM_THREADS": "1"})
    err = b""
    # the bar's second refresh: inside the loop
    while err.count(b"scoring") < 2 and proc.poll() is None:
        err += os.read(proc.stderr.fileno(), 4096)
    proc.send_signal(signal.SIGINT)
    err = (err + proc.stderr.read()).decode()
    assert proc.wait(60) == 130 and "Traceback" not in err, err
    # the last line: the message (after what is left of tqdm's bar, where the signal lands before it
    # draws again)
    assert err.splitlines()[-1].endswith("interrupted: stopped before the end; "
                                         "files are written whole or not at all")
    assert file_hashes(tmp_path / "run") == before


# one run: pre_lr0.01_s1
ABLATION = ["--max_iters=2", "--eval_interval=2", "--modes=pre", "--seeds=1"]


@pytest.fixture(scope="module")
def ablated_run(data_dir, tmp_path_factory):
    """The run of an ablation (TINY + ABLATION) that trained and finished, evaluated on no task yet:
    the tests below copy it into an ablation of their own, which then scores it (train.py starting
    twice a test, for its check and its run, is most of what training costs here). Trained without
    the check before training: a valid run, and the check is tests/test_ablate.py's subject."""
    out = tmp_path_factory.mktemp("ablated")
    with pytest.MonkeyPatch.context() as patch, forked_runs():
        patch.setattr(ablate, "check_before_training", lambda *_: None)
        ablate.main([f"--data_dir={data_dir}", f"--out_dir={out}", *TINY, *ABLATION])
    assert json.loads((out / "ablate" / "results.json").read_text())["groups"][0]["finished"] == 1
    return out / "ablate" / "pre_lr0.01_s1"


def test_an_evaluation_that_fails_after_training_makes_the_ablation_an_error(ablated_run, data_dir,
                                                                             tmp_path):
    """The task loads (the dry run passes), but this character-level model cannot score it: the run
    has trained, its evaluation fails, and ablate.py exits with an error naming it, not 0 with a
    table lacking the task."""
    (tmp_path / "tasks").mkdir()
    write_task(tmp_path / "tasks", "tiny_euro",
               [dict(question="It costs 5", choices=["€", "$"], answer=0)], **MC)
    shutil.copytree(ablated_run, tmp_path / "ablate" / ablated_run.name)
    with forked_runs():
        message = error_of(ablate.main, [f"--data_dir={data_dir}", f"--out_dir={tmp_path}",
                                         *TINY, *ABLATION, "--eval_tasks=tiny_euro",
                                         f"--eval_include_path={tmp_path / 'tasks'}"])
    mentions(message, "not evaluated", "pre_lr0.01_s1", "eval.log")
    log = (tmp_path / "ablate" / "pre_lr0.01_s1" / "eval.log").read_text()
    assert "downstream tasks need a BPE model" in log


# ----------------------------------------------------------------------------------- OpenAI's GPT-2

@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    """A tiny GPT2LMHeadModel saved as OpenAI's are (no download), every parameter drawn at random,
    the LayerNorms' included, so that a conversion that misplaces any of them shows."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32,
                                                              n_positions=64))
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.2)
    folder = tmp_path_factory.mktemp("gpt2")
    hf.save_pretrained(folder)
    return folder, hf.eval()


@torch.no_grad()
def test_gpt2_converts_into_pre_mode_with_equal_logits(gpt2_dir):
    folder, hf = gpt2_dir
    x = torch.randint(0, 50257, (2, 64), generator=torch.Generator().manual_seed(0))
    want = hf(x).logits
    for source in (hf, str(folder)):  # the model, or the folder transformers loads it from
        model = from_gpt2(source).eval()
        assert ((model.config.norm_mode, model.config.bias, model.config.vocab_size)
                == ("pre", True, 50257))
        assert (model(x, all_logits=True)[0] - want).abs().max() < 1e-5
    assert (from_gpt2(hf, block_size=16).eval()(x[:, :16], all_logits=True)[0]
            - want[:, :16]).abs().max() < 1e-5


def test_gpt2_conversion_keeps_its_settings_and_checks_its_block_size():
    """The checkpoint's layer-norm epsilon (1e-3 here, not the family's 1e-5), the dropout asked
    for, every position up to n_positions; one more is a one-line error."""
    transformers = pytest.importorskip("transformers")
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16,
                                                              n_positions=32,
                                                              layer_norm_epsilon=1e-3))
    model = from_gpt2(hf, block_size=32, dropout=0.25)
    assert ((model.config.norm_eps, model.config.dropout, model.config.block_size)
            == (1e-3, 0.25, 32))
    with pytest.raises(ValueError) as info:
        from_gpt2(hf, block_size=33)
    mentions(str(info.value), "block_size=33", "32 positions", "lower it")


def test_eval_without_lm_eval_is_one_line(monkeypatch):
    monkeypatch.setattr(evaluation, "lm_eval", None)  # as if its import had failed
    mentions(error_of(evaluation.main, ["--tasks=hellaswag"]), "lm-evaluation-harness",
             "pip install lm-eval")


def test_a_gpt2_that_does_not_load_is_one_line(tasks_dir, tmp_path):
    pytest.importorskip("transformers")
    (tmp_path / "empty").mkdir()
    message = error_of(evaluation.main, [f"--out_dir={tmp_path}",
                                         f"--init_from={tmp_path / 'empty'}", "--tasks=tiny_mc",
                                         f"--include_path={tasks_dir}", "--device=cpu"])
    assert message.startswith(f"error: cannot load GPT-2 {str(tmp_path / 'empty')!r} (")
    assert "For a local copy" in message and "(None)" not in message  # the reason transformers gave


def test_train_refuses_to_fine_tune_gpt2_on_a_character_dataset(gpt2_dir, data_dir, tmp_path):
    with pytest.raises(SystemExit, match=r"^error: init_from=.* needs a dataset in GPT-2 BPE, "
                                         r"and tiny is by char"):
        train.main([f"--data_dir={data_dir}", f"--out_dir={tmp_path}", *TINY,
                    f"--init_from={gpt2_dir[0]}", "--max_iters=1"])


@needs_gpt2
def test_train_fine_tunes_gpt2_and_resumes(gpt2_dir, shakespeare_text, tmp_path):
    (tmp_path / "input.txt").write_text(shakespeare_text[:20_000])
    prepare_data.prepare("text", tmp_path / "bpe", inputs=[str(tmp_path / "input.txt")],
                         val_tokens=500, workers=1)
    args = [f"--data_dir={tmp_path}", "--dataset=bpe", f"--out_dir={tmp_path / 'out'}",
            "--block_size=32", "--batch_size=2", "--eval_iters=1", "--device=cpu",
            "--compile=False", "--log_interval=1"]
    # a step that moves nothing
    train.main(args + [f"--init_from={gpt2_dir[0]}", "--max_iters=1", "--learning_rate=0.0",
                       "--min_lr=0.0"])
    ckpt = torch.load(tmp_path / "out" / "ckpt.pt", weights_only=True)
    converted = from_gpt2(str(gpt2_dir[0]), block_size=32).state_dict()
    assert ckpt["model"].keys() == converted.keys()
    # GPT-2's weights, cropped to 32
    assert all(torch.equal(ckpt["model"][k], v) for k, v in converted.items())
    assert {k: ckpt["config"][k] for k in ("n_layer", "n_embd", "bias", "gelu_tanh")} == dict(
        n_layer=2, n_embd=32, bias=True, gelu_tanh=True)
    # GPT-2's 50257 rows
    train.main(args + ["--init_from=resume", "--max_iters=3", "--learning_rate=1e-3"])
    assert torch.load(tmp_path / "out" / "ckpt.pt", weights_only=True)["iter_num"] == 3


@needs_gpt2
def test_eval_scores_a_local_gpt2_as_the_reference_row(gpt2_dir, tasks_dir, ll_docs, tmp_path):
    report = evaluation.main([f"--init_from={gpt2_dir[0]}", f"--out_dir={tmp_path}", "--device=cpu",
                              "--tasks=tiny_mc,tiny_ll,tiny_roll", f"--include_path={tasks_dir}"])
    model, encode = from_gpt2(str(gpt2_dir[0])).eval(), data.get_tokenizer(data.GPT2_META)[0]
    want = expected_scores(model, encode, ll_docs, start="<|endoftext|>")
    assert (metrics_of(report) == pytest.approx(want)
            and report["model"]["source"] == str(gpt2_dir[0]))


# --------------------------------------------------------------------------- ablate.py --eval_tasks

def test_ablate_scores_each_finished_run_once_and_tables_it(ablated_run, data_dir, tasks_dir,
                                                            tmp_path, monkeypatch):
    shutil.copytree(ablated_run, tmp_path / "ablate" / ablated_run.name)  # finished, not scored
    args = [f"--data_dir={data_dir}", f"--out_dir={tmp_path}", *TINY, *ABLATION,
            "--eval_tasks=tiny_mc,tiny_ll", "--eval_limit=4", f"--eval_include_path={tasks_dir}"]
    with forked_runs():
        ablate.main(args)
    report = json.loads((tmp_path / "ablate" / "pre_lr0.01_s1" / "eval.json").read_text())
    assert (report["settings"]["tasks"], report["settings"]["limit"]) == ("tiny_mc,tiny_ll", 4)
    group, = json.loads((tmp_path / "ablate" / "results.json").read_text())["groups"]
    mc = report["scores"]["tiny_mc"]["value"]
    assert group["tasks"]["tiny_mc"] == dict(metric="acc_norm", mean=mc, std=0.0, runs=1)
    header, _, row = [line for line in (tmp_path / "ablate" / "results.md").read_text().splitlines()
                      if line[:1] == "|"]
    assert header.endswith("| tiny_mc acc_norm | tiny_ll acc |")
    assert row.endswith(f"| {report['scores']['tiny_mc']['value']:.4f} "
                        f"| {report['scores']['tiny_ll']['value']:.4f} |")
    before = (tmp_path / "ablate" / "pre_lr0.01_s1" / "eval.json").stat().st_mtime_ns
    # launched, even to check, it would fail
    monkeypatch.setattr(ablate, "EVAL", str(tmp_path / "no_eval.py"))
    ablate.main(args)  # trained and evaluated already: nothing runs again
    assert (tmp_path / "ablate" / "pre_lr0.01_s1" / "eval.json").stat().st_mtime_ns == before


def test_ablate_folds_task_scores_into_mean_and_std_over_the_seeds(tmp_path):
    evaluation, runs = dict(tasks="hellaswag", limit=None, include_path=""), []
    for seed, value in ((1, 0.30), (2, 0.34), (3, 0.29)):
        folder = tmp_path / f"pre_s{seed}"
        folder.mkdir()
        (folder / "log.jsonl").write_text(
            json.dumps(dict(event="eval", iter=5, val_loss=1.0)) + "\n"
            + json.dumps(dict(event="end", status="finished", iter=5)) + "\n")
        (folder / "eval.json").write_text(json.dumps(dict(settings=dict(evaluation), scores=dict(
            hellaswag=dict(metric="acc_norm", value=value, stderr=0.01)))))
        runs.append(dict(name=folder.name, group="pre", mode="pre", lr=1e-3, tripled=False,
                         sweep={}, own={}, seed=seed, dir=folder))
    group, = results.summarize(runs, dict(eval=evaluation, sweep={}))
    assert group["tasks"]["hellaswag"] == pytest.approx(dict(
        metric="acc_norm", mean=statistics.fmean([0.30, 0.34, 0.29]),
        std=statistics.stdev([0.30, 0.34, 0.29]), runs=3))
    assert results.table([group]).splitlines()[-1].endswith(" 0.3100 ± 0.0265 |")


def test_ablate_evaluates_again_only_for_other_tasks_or_limit(tmp_path):
    (tmp_path / "eval.json").write_text(
        json.dumps(dict(settings=dict(tasks="hellaswag,piqa", limit=100))))
    assert logbook.evaluated(tmp_path, dict(tasks="hellaswag,piqa", limit=100, include_path=""))
    assert not logbook.evaluated(tmp_path,
                                 dict(tasks="hellaswag,piqa", limit=None, include_path=""))
    assert not logbook.evaluated(tmp_path, dict(tasks="hellaswag", limit=100, include_path=""))
    assert not logbook.evaluated(tmp_path / "no_run",
                                 dict(tasks="hellaswag", limit=100, include_path=""))


# ------------------------------------------------ which settings reach lm-eval, and what comes back

# docs/evaluation.md
DEFAULT_TASKS = ["hellaswag", "piqa", "arc_easy", "arc_challenge", "winogrande", "lambada_openai"]
FAKE_RESULTS = {  # what a faked lm_eval.simple_evaluate hands back: its shape, lm-eval 0.4's
    "results": {
        "tiny_mc": {"alias": "tiny_mc", "acc,none": 0.5, "acc_stderr,none": 0.2,
                    # acc_norm sums it up, though acc comes first
                    "acc_norm,none": 0.6875, "acc_norm_stderr,none": 0.1875},
        "tiny_ll": {"alias": "tiny_ll", "perplexity,none": 12.5, "perplexity_stderr,none": 3.25,
                    # acc, though perplexity comes first
                    "acc,none": 0.375, "acc_stderr,none": 0.125},
        "tiny_roll": {"alias": "tiny_roll", "word_perplexity,none": 40.5,
                      "word_perplexity_stderr,none": "N/A",
                      # its first number
                      "bits_per_byte,none": 1.25, "bits_per_byte_stderr,none": "N/A"}},
    "versions": {"tiny_mc": 1.0, "tiny_ll": 2.0, "tiny_roll": 3.0},
    "n-shot": {"tiny_mc": 0, "tiny_ll": 0, "tiny_roll": 0},
    "n-samples": {name: {"original": 6, "effective": 6}
                  for name in ("tiny_mc", "tiny_ll", "tiny_roll")},
    "higher_is_better": {"tiny_mc": {"acc": True, "acc_norm": True},
                         "tiny_ll": {"perplexity": False, "acc": True},
                         "tiny_roll": {"word_perplexity": False, "bits_per_byte": False}},
}


@pytest.fixture
def lm_eval_spy(monkeypatch):
    """lm_eval.simple_evaluate faked (nothing is scored): each call's keyword arguments, the LM
    wrapper among them, and the TaskManager made, recorded; it returns FAKE_RESULTS."""
    calls, made = [], []

    def simple_evaluate(**kwargs):
        calls.append(kwargs)
        return json.loads(json.dumps(FAKE_RESULTS))  # a copy, as lm-eval's own is fresh

    class SpyManager(TaskManager):
        """lm-eval's TaskManager, but lm-eval's own ~15,000 tasks left unindexed (seconds each
        time): own_tasks says whether eval.py asked for them."""
        def __init__(self, include_path=None, include_defaults=True):
            made.append(self)
            self.own_tasks = include_defaults
            super().__init__(include_path=include_path, include_defaults=False)

    monkeypatch.setattr(evaluation.lm_eval, "simple_evaluate", simple_evaluate)
    monkeypatch.setattr(evaluation, "TaskManager", SpyManager)
    return calls, made


def arrived(call):
    """What lm-eval got from eval.py: simple_evaluate's arguments, the LM wrapper's and the task
    manager's."""
    lm, manager = call["model"], call["task_manager"]
    autocast = lm.autocast
    files = {t.task_name: (t.config.dataset_kwargs or {}).get("data_files", {}).get("test")
             for t in call["tasks"]}
    return dict(
        arguments=sorted(call), tasks=[t.task_name for t in call["tasks"]],
        files=files, limit=call["limit"],
        num_fewshot=call["num_fewshot"], fewshot_random_seed=call["fewshot_random_seed"],
        bootstrap_iters=call["bootstrap_iters"], log_samples=call["log_samples"],
        include_path=manager.include_path, own_tasks=manager.own_tasks, batch_size=lm.batch_size,
        device=lm.device, weights_on=next(lm.model.parameters()).device.type,
        autocast=((autocast.device, autocast.fast_dtype) if isinstance(autocast, torch.autocast)
                  else None),
        rank=(lm.rank, lm.world_size), vocab_size=lm.model.config.vocab_size,
        tokenizer=lm.meta["tokenizer"])


CUDA = torch.cuda.is_available()
AUTO_DEVICE = "cuda" if CUDA else "cpu"  # eval.py's documented defaults: device auto, dtype auto
DEFAULTS = dict(
    arguments=sorted(["model", "tasks", "num_fewshot", "limit", "task_manager", "bootstrap_iters",
                      "log_samples", "fewshot_random_seed"]),
    limit=None, num_fewshot=None, fewshot_random_seed=1234, bootstrap_iters=1000, log_samples=False,
    batch_size=16, device=torch.device(AUTO_DEVICE), weights_on=AUTO_DEVICE,
    autocast=("cuda", torch.bfloat16) if CUDA else None, rank=(0, 1))
# (setting, the value given on the command line, what lm-eval must then get instead of the default)
SETTINGS = [
    ("limit", 3, dict(limit=3)),
    ("num_fewshot", 2, dict(num_fewshot=2)),
    ("batch_size", 3, dict(batch_size=3)),
    ("seed", 7, dict(fewshot_random_seed=7)),
    ("device", "cpu:0", dict(device=torch.device("cpu:0"), weights_on="cpu", autocast=None)),
    ("dtype", "bfloat16", dict(autocast=(AUTO_DEVICE, torch.bfloat16))),
    ("dtype", "float32", dict(autocast=None)),
    ("tasks", "tiny_ll,tiny_mc", "the two, in this order"),
    ("tasks", "tiny_mc,a YAML's path", "lm-eval's own tasks too, and include_path's"),
    ("include_path", "a second folder", "its tiny_mc"),
    pytest.param("init_from", "a local GPT-2", "its weights and BPE", marks=needs_gpt2),
    (None, None, "every setting at its default"),
]


@pytest.mark.parametrize("setting, value, want", SETTINGS)
def test_each_setting_reaches_lm_eval_exactly_and_the_others_as_their_defaults(
        setting, value, want, lm_eval_spy, out_dir, tasks_dir, tmp_path, monkeypatch, request):
    """eval.py run with one setting given (besides the tasks and their folder, which offline runs
    need): the value given arrives where lm-eval reads it (simple_evaluate's arguments, the LM
    wrapper's batch size, device and autocast, the task manager's include_path, the tasks it loaded
    and their data), and every other setting arrives as eval.py documents its default; eval.json is
    written to out_dir. With no setting given (in a folder whose out/ holds the checkpoint) the six
    default tasks reach lm-eval, from no include_path."""
    calls, made = lm_eval_spy
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(out_dir / "ckpt.pt", run / "ckpt.pt")
    mc_file = str(tasks_dir / "tiny_mc.jsonl")
    expected = DEFAULTS | dict(tasks=["tiny_mc"], files={"tiny_mc": mc_file},
                               include_path=str(tasks_dir), own_tasks=False,
                               vocab_size=load_model(out_dir, "cpu")[0].config.vocab_size,
                               tokenizer="char")
    args = [f"--out_dir={run}", "--tasks=tiny_mc", f"--include_path={tasks_dir}"]
    if value == "tiny_ll,tiny_mc":
        expected |= dict(tasks=["tiny_ll", "tiny_mc"],
                         files={"tiny_ll": str(tasks_dir / "tiny_ll.jsonl"), "tiny_mc": mc_file})
        args[1] = f"--tasks={value}"
    # a task not in include_path: the manager indexes lm-eval's own too, and include_path
    elif setting == "tasks":
        expected |= dict(tasks=["tiny_mc", "tiny_ll"], own_tasks=True, files={
            "tiny_mc": mc_file, "tiny_ll": str(tasks_dir / "tiny_ll.jsonl")})
        args[1] = f"--tasks=tiny_mc,{tasks_dir / 'tiny_ll.yaml'}"
    elif setting == "include_path":
        other = tmp_path / "other_tasks"
        other.mkdir()
        write_task(other, "tiny_mc", MC_DOCS[:2], **MC)
        expected |= dict(include_path=str(other), files={"tiny_mc": str(other / "tiny_mc.jsonl")})
        args[2] = f"--include_path={other}"
    elif setting == "init_from":  # into a new folder, its parents made too
        folder, run = request.getfixturevalue("gpt2_dir")[0], tmp_path / "gpt2" / "eval"
        expected |= dict(vocab_size=50257, tokenizer="gpt2")
        args[0] = f"--out_dir={run}"
        args.append(f"--init_from={folder}")
    # nothing given: lm-eval's own six tasks (a fake manager: offline, and no indexing)
    elif setting is None:
        class DefaultTasks:
            all_tasks = DEFAULT_TASKS

            def __init__(self, include_path=None, include_defaults=True):
                self.include_path, self.own_tasks = include_path, include_defaults
                made.append(self)

            def load(self, names):
                task = type("Task", (), dict(task_name=names[0],
                                             config=type("Config", (), dict(dataset_kwargs=None))))
                return dict(group_map={}, groups={}, tasks={names[0]: task})

        monkeypatch.setattr(evaluation, "TaskManager", DefaultTasks)
        (tmp_path / "out").mkdir()
        shutil.copy(out_dir / "ckpt.pt", tmp_path / "out" / "ckpt.pt")
        monkeypatch.chdir(tmp_path)
        run, args = tmp_path / "out", []
        expected |= dict(tasks=DEFAULT_TASKS, files=dict.fromkeys(DEFAULT_TASKS), include_path=None,
                         own_tasks=True)
    else:
        expected |= want
        args.append(f"--{setting}={value}")
    report = evaluation.main(args)
    assert len(calls) == 1 and made[-1] is calls[0]["task_manager"]
    assert arrived(calls[0]) == expected
    assert json.loads((run / "eval.json").read_text())["settings"] == report["settings"]
    given = {setting: value} if setting in (
        "limit", "num_fewshot", "batch_size", "seed", "device", "dtype") else {}
    assert {k: report["settings"][k] for k in given} == given


def test_the_dry_run_reaches_no_model_and_no_simple_evaluate(lm_eval_spy, out_dir, tasks_dir,
                                                             tmp_path, monkeypatch):
    calls, made = lm_eval_spy
    monkeypatch.setattr(checkpoint, "load_model", tripwire)
    assert evaluation.main([f"--out_dir={tmp_path}", "--tasks=tiny_mc",
                            f"--include_path={tasks_dir}", "--dry_run=True"]) is None
    assert (calls == [] and made[-1].include_path == str(tasks_dir)
            and list(tmp_path.iterdir()) == [])


def test_eval_json_and_the_table_are_exactly_what_lm_eval_returned(lm_eval_spy, out_dir,
                                                                    tasks_dir, tmp_path, capsys):
    """eval.json holds lm-eval's results, versions, shots and sample counts as they came back (the
    faked FAKE_RESULTS), each task summed up by acc_norm where it has one, else acc, else its first
    number (a stderr lm-eval gives as 'N/A' is null), and the settings; the table printed is
    lm-eval's of those results."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(out_dir / "ckpt.pt", run / "ckpt.pt")
    capsys.readouterr()
    t0 = time.time()
    report = evaluation.main([f"--out_dir={run}", "--tasks=tiny_mc,tiny_ll,tiny_roll",
                              f"--include_path={tasks_dir}", "--limit=4", "--device=cpu"])
    took = time.time() - t0
    out = capsys.readouterr().out
    assert json.loads((run / "eval.json").read_text()) == json.loads(json.dumps(report))
    assert report["scores"] == {
        "tiny_mc": dict(metric="acc_norm", value=0.6875, stderr=0.1875),
        "tiny_ll": dict(metric="acc", value=0.375, stderr=0.125),
        "tiny_roll": dict(metric="word_perplexity", value=40.5, stderr=None)}
    assert (report["results"], report["versions"], report["n_shot"], report["n_samples"]) == (
        FAKE_RESULTS["results"], FAKE_RESULTS["versions"], FAKE_RESULTS["n-shot"],
        FAKE_RESULTS["n-samples"])
    model = load_model(out_dir, "cpu")[0]
    assert report["model"] == dict(source=str(checkpoint.find_checkpoint(run)),
                                   parameters=model.get_num_params(), config=vars(model.config))
    assert (report["lm_eval_version"], report["processes"]) == (lm_eval.__version__, 1)
    assert report["settings"] == dict(out_dir=str(run), init_from="resume",
                                      tasks="tiny_mc,tiny_ll,tiny_roll", limit=4, num_fewshot=None,
                                      batch_size=16, include_path=str(tasks_dir), seed=1234,
                                      device="cpu", dtype="auto", dry_run=False)
    assert (set(report) == {"scores", "results", "versions", "n_shot", "n_samples",
                            "lm_eval_version", "settings", "processes", "model", "seconds"}
            and 0 <= report["seconds"] <= took)
    assert out == (lm_eval.utils.make_table(json.loads(json.dumps(FAKE_RESULTS)))
                   + f"\nwrote {run / 'eval.json'}\n")
