"""eval.py's promises: lm-eval's three kinds of request answered exactly as model.py's own forward pass
scores the same tokens, end to end through the real harness on tasks written here, offline; and
OpenAI's GPT-2 converted into model.py (a tiny random one saved locally: no download)."""
import json
import math
import os
import subprocess
import sys

import pytest
import torch
from torch.nn import functional as F

import eval as evaluation
import prepare_data
import train
from conftest import ROOT, needs_gpt2
from sample import load_checkpoint

lm_eval = pytest.importorskip("lm_eval")
from lm_eval.api.instance import Instance  # noqa: E402

TINY = ["--dataset=tiny", "--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=32", "--batch_size=8",
        "--eval_iters=1", "--warmup_iters=0", "--learning_rate=1e-2", "--device=cpu", "--compile=False"]
QUESTIONS = ["ROMEO:\nWhat say", "JULIET:\nI shall", "KING:\nThou art the", "First Citizen:\nWe are",
             "MENENIUS:\nWhy, masters,", "CORIOLANUS:\nHe that gives"]
CHOICES = [" you?", " thee.", " king.", " lord!"]


@pytest.fixture(scope="module")
def out_dir(data_dir, tmp_path_factory):
    """A tiny char-level model trained for 40 steps: it prefers some continuations, unlike a fresh one."""
    out = tmp_path_factory.mktemp("eval_run")
    train.main([f"--data_dir={data_dir}", f"--out_dir={out}", *TINY, "--max_iters=40", "--eval_interval=40",
                "--log_interval=40"])
    return out


@pytest.fixture(scope="module")
def model_meta(out_dir):
    return load_checkpoint(out_dir, "cpu")


def adapter(model_meta, batch_size=8):
    return evaluation.GPTAdapter(*model_meta, "cpu", "float32", batch_size)


def requests(kind, *arguments):
    return [Instance(request_type=kind, doc={}, arguments=args, idx=0) for args in arguments]


def own_loglikelihood(model, context_ids, continuation_ids):
    """-(summed cross-entropy) of the continuation from model.py's own forward with targets; and whether
    every continuation token is the argmax there."""
    ids = torch.tensor([context_ids + continuation_ids])
    x, y = ids[:, :-1], ids[:, 1:].clone()
    y[:, :len(context_ids) - 1] = -1  # only the continuation is scored
    logits, loss = model(x, y)
    n = len(continuation_ids)
    greedy = bool((logits[0, -n:].argmax(-1) == ids[0, -n:]).all())
    return -loss.item() * n, greedy


# ------------------------------------------------------------------------- the adapter, request by request

def test_loglikelihood_is_minus_the_summed_cross_entropy_of_models_own_forward(model_meta):
    model, meta = model_meta
    lm, encode = adapter(model_meta), prepare_data.get_tokenizer(meta)[0]
    pairs = [(q, c) for q in QUESTIONS[:3] for c in CHOICES]
    for (context, continuation), (logp, greedy) in zip(pairs, lm.loglikelihood(requests("loglikelihood", *pairs))):
        want, want_greedy = own_loglikelihood(model, encode(context), encode(continuation))
        assert logp == pytest.approx(want, rel=1e-5, abs=1e-5) and greedy == want_greedy


def test_batch_of_one_equals_a_padded_batch_of_eight(model_meta):
    pairs = [(q, c) for q in QUESTIONS for c in CHOICES[:2]]  # 12 requests of 17 to 34 characters
    one = adapter(model_meta, batch_size=1).loglikelihood(requests("loglikelihood", *pairs))
    eight = adapter(model_meta, batch_size=8).loglikelihood(requests("loglikelihood", *pairs))
    assert [g for _, g in one] == [g for _, g in eight]
    assert [p for p, _ in one] == pytest.approx([p for p, _ in eight], abs=1e-5)


def test_is_greedy_holds_exactly_for_the_greedy_continuation(model_meta):
    model, meta = model_meta
    encode, decode = prepare_data.get_tokenizer(meta)
    context = QUESTIONS[2]
    greedy = decode(model.generate(torch.tensor([encode(context)]), 6, temperature=0)[0, -6:].tolist())
    other = next(c for c in meta["chars"] if c != greedy[-1])
    lm = adapter(model_meta)
    results = lm.loglikelihood(requests("loglikelihood", (context, greedy), (context, greedy[:-1] + other)))
    assert [g for _, g in results] == [True, False]


def test_a_context_beyond_block_size_is_cut_from_the_left(model_meta):
    model, meta = model_meta
    encode = prepare_data.get_tokenizer(meta)[0]
    context, continuation = "\n".join(QUESTIONS), " thee."  # 113 characters, the window 32
    (logp, greedy), = adapter(model_meta).loglikelihood(requests("loglikelihood", (context, continuation)))
    kept = encode(context)[-(32 + 1 - len(continuation)):]  # the window's 32 inputs + the last target
    assert (logp, greedy) == pytest.approx(own_loglikelihood(model, kept, encode(continuation)), abs=1e-5)


def test_rolling_is_the_whole_text_loglikelihood_in_disjoint_windows(model_meta):
    model, meta = model_meta
    encode = prepare_data.get_tokenizer(meta)[0]
    start = encode("\n")  # a character table's start token
    short, long = QUESTIONS[0], "\n".join(QUESTIONS[:4])  # 15 and 71 characters: one window, and three
    rolled = adapter(model_meta).loglikelihood_rolling(requests("loglikelihood_rolling", (short,), (long,)))
    assert rolled[0] == pytest.approx(own_loglikelihood(model, start, encode(short))[0], rel=1e-5)
    ids = start + encode(long)  # 32 tokens predicted per window, given what fits before them in the window
    ends = [min(e, len(ids)) for e in range(33, len(ids) + 32, 32)]  # 33, 65, 72
    want = sum(own_loglikelihood(model, ids[max(0, e - 33):b], ids[b:e])[0] for b, e in zip([1] + ends, ends))
    assert rolled[1] == pytest.approx(want, rel=1e-5)


def test_generate_until_is_greedy_generate_cut_at_the_first_stop_string(model_meta):
    model, meta = model_meta
    encode, decode = prepare_data.get_tokenizer(meta)
    context = QUESTIONS[1]
    greedy = decode(model.generate(torch.tensor([encode(context)]), 12, temperature=0)[0, -12:].tolist())
    stop = greedy[7:9]
    outs = adapter(model_meta).generate_until(requests(
        "generate_until", (context, {"until": [stop], "max_gen_toks": 12}), (context, {"until": [], "max_gen_toks": 5})))
    assert outs == [greedy[:greedy.index(stop)], greedy[:5]]


def test_a_character_outside_the_table_is_one_line_saying_bpe_is_needed(model_meta):
    with pytest.raises(SystemExit, match=r"^error: .*\('5', '€'\): downstream tasks need a BPE model"):
        adapter(model_meta).loglikelihood(requests("loglikelihood", ("It costs 5", " €.")))


def test_a_continuation_longer_than_block_size_is_one_line(model_meta):
    with pytest.raises(SystemExit, match=r"^error: a continuation of 40 tokens does not fit .*block_size=32"):
        adapter(model_meta).loglikelihood(requests("loglikelihood", ("Thou", " " + "a" * 39)))


# ------------------------------------------------------------------ end to end through lm_eval.simple_evaluate

def write_task(folder, name, docs, **config):
    """A task YAML reading docs from a local jsonl (HF_DATASETS_OFFLINE holds: nothing is downloaded)."""
    (folder / f"{name}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    config = dict(task=name, dataset_path="json", test_split="test", dataset_kwargs=dict(
        data_files=dict(test=str(folder / f"{name}.jsonl")), cache_dir=str(folder / "cache")), **config)
    (folder / f"{name}.yaml").write_text(json.dumps(config))  # JSON is YAML
    return docs


MC_DOCS = [dict(question=q, choices=[c.strip() for c in CHOICES], answer=i % 4) for i, q in enumerate(QUESTIONS)]
ROLL_DOCS = [dict(text=q.replace("\n", " ")) for q in QUESTIONS]


@pytest.fixture(scope="module")
def ll_docs(model_meta):
    """lambada's kind: a context and its last word; two of them are the model's greedy continuations."""
    model, meta = model_meta
    encode, decode = prepare_data.get_tokenizer(meta)
    greedy = [decode(model.generate(torch.tensor([encode(q)]), 3, temperature=0)[0, -3:].tolist()) for q in QUESTIONS[:2]]
    return ([dict(context=q, word=g) for q, g in zip(QUESTIONS, greedy)]
            + [dict(context=q.rsplit(" ", 1)[0], word=" " + q.rsplit(" ", 1)[1]) for q in QUESTIONS[2:]])


@pytest.fixture(scope="module")
def tasks_dir(tmp_path_factory, ll_docs):
    """tiny_mc (multiple choice), tiny_ll (perplexity and greedy accuracy of a last word), tiny_roll
    (wikitext's kind: whole texts), and tiny_hub, whose data only the hub has."""
    folder = tmp_path_factory.mktemp("tasks")
    write_task(folder, "tiny_mc", MC_DOCS, output_type="multiple_choice", doc_to_text="{{question}}",
               doc_to_choice="{{choices}}", doc_to_target="{{answer}}",
               metric_list=[dict(metric="acc"), dict(metric="acc_norm")])
    write_task(folder, "tiny_ll", ll_docs, output_type="loglikelihood", doc_to_text="{{context}}",
               doc_to_target="{{word}}", metric_list=[dict(metric="perplexity", aggregation="perplexity",
                                                           higher_is_better=False), dict(metric="acc")])
    write_task(folder, "tiny_roll", ROLL_DOCS, output_type="loglikelihood_rolling", doc_to_text="",
               doc_to_target="{{text}}", metric_list=[dict(metric="bits_per_byte")])
    (folder / "tiny_hub.yaml").write_text(json.dumps(dict(
        task="tiny_hub", dataset_path="normgpt/no_such_dataset", test_split="test", output_type="multiple_choice",
        doc_to_text="{{q}}", doc_to_choice="{{c}}", doc_to_target="{{a}}", metric_list=[dict(metric="acc")])))
    return folder


def expected_scores(model, encode, ll_docs, n=len(QUESTIONS)):
    """What the three tasks must score, computed with model.py's own forward on the first n docs."""
    mc_acc, mc_norm = [], []
    for doc in MC_DOCS[:n]:
        lls = [own_loglikelihood(model, encode(doc["question"]), encode(" " + c))[0] for c in doc["choices"]]
        mc_acc.append(max(range(4), key=lambda j: lls[j]) == doc["answer"])
        mc_norm.append(max(range(4), key=lambda j: lls[j] / len(doc["choices"][j])) == doc["answer"])
    ll = [own_loglikelihood(model, encode(d["context"]), encode(d["word"])) for d in ll_docs[:n]]
    rolled = [own_loglikelihood(model, encode("\n"), encode(d["text"]))[0] for d in ROLL_DOCS[:n]]  # one window each
    bits = -sum(rolled) / sum(len(d["text"].encode()) for d in ROLL_DOCS[:n]) / math.log(2)
    return {("tiny_mc", "acc"): sum(mc_acc) / n, ("tiny_mc", "acc_norm"): sum(mc_norm) / n,
            ("tiny_ll", "acc"): sum(g for _, g in ll) / n, ("tiny_ll", "perplexity"): math.exp(-sum(p for p, _ in ll) / n),
            ("tiny_roll", "bits_per_byte"): bits}


def metrics_of(report):
    """{(task, metric): value} of an eval.json's results."""
    return {(task, k.split(",")[0]): v for task, m in report["results"].items() for k, v in m.items()
            if isinstance(v, float) and "stderr" not in k}


@pytest.fixture(scope="module")
def evaluated(out_dir, tasks_dir):
    evaluation.main([f"--out_dir={out_dir}", "--tasks=tiny_mc,tiny_ll,tiny_roll", f"--include_path={tasks_dir}",
                     "--batch_size=5", "--device=cpu"])
    return json.loads((out_dir / "eval.json").read_text())


def test_end_to_end_scores_equal_those_of_models_own_forward(evaluated, model_meta, ll_docs):
    model, meta = model_meta
    want = expected_scores(model, prepare_data.get_tokenizer(meta)[0], ll_docs)
    assert want[("tiny_ll", "acc")] >= 2 / 6  # the greedy continuations are counted
    assert metrics_of(evaluated) == pytest.approx(want)


def test_eval_json_records_versions_shots_limit_and_settings(evaluated):
    assert evaluated["lm_eval_version"] == lm_eval.__version__
    assert set(evaluated["versions"]) == set(evaluated["n_shot"]) == {"tiny_mc", "tiny_ll", "tiny_roll"}
    assert evaluated["n_shot"]["tiny_mc"] == 0 and evaluated["settings"]["limit"] is None
    assert evaluated["scores"]["tiny_mc"]["metric"] == "acc_norm" and evaluated["scores"]["tiny_ll"]["metric"] == "acc"
    assert evaluated["scores"]["tiny_mc"]["value"] == evaluated["results"]["tiny_mc"]["acc_norm,none"]


def test_limit_scores_only_the_first_examples(out_dir, tasks_dir, model_meta, ll_docs):
    report = evaluation.main([f"--out_dir={out_dir}", "--tasks=tiny_mc", f"--include_path={tasks_dir}",
                              "--limit=3", "--device=cpu"])
    model, meta = model_meta
    assert report["n_samples"]["tiny_mc"]["effective"] == 3
    want = expected_scores(model, prepare_data.get_tokenizer(meta)[0], ll_docs, n=3)
    assert metrics_of(report) == pytest.approx({k: v for k, v in want.items() if k[0] == "tiny_mc"})


def test_the_hub_out_of_reach_is_one_line_naming_include_path(out_dir, tasks_dir):
    with pytest.raises(SystemExit, match=r"^error: .*no_such_dataset.*offline, .*--include_path=DIR"):
        evaluation.main([f"--out_dir={out_dir}", "--tasks=tiny_hub", f"--include_path={tasks_dir}", "--device=cpu"])
