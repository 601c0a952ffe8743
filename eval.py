"""
Score a model on downstream tasks with EleutherAI's lm-evaluation-harness (pip install lm-eval): a
checkpoint of train.py, or OpenAI's GPT-2 as the reference row.

    python eval.py --out_dir=out --tasks=hellaswag,piqa,arc_easy,arc_challenge,winogrande
    python eval.py --init_from=gpt2 --out_dir=out/gpt2 --tasks=hellaswag --limit=500
    # task YAMLs of your own
    python eval.py --out_dir=out --tasks=hellaswag_local --include_path=tasks/
    torchrun --standalone --nproc_per_node=8 eval.py --out_dir=out --tasks=hellaswag

The harness owns the tasks, their prompts and their metrics; this script only answers its three
kinds of request with model.py's GPT: the log-likelihood of a continuation (multiple choice,
lambada), of a whole text in windows of block_size tokens (perplexity tasks such as wikitext), and
greedy generation through GPT.generate's KV cache. It prints lm-eval's table and writes
out_dir/eval.json. The tasks load (their data too) before the model; --dry_run=True stops there,
having written nothing (ablate.py runs it before it trains).

The tasks' data download from the Hugging Face hub on first use. Offline, give a task YAML that
reads local files through --include_path (README: Evaluation). Under torchrun every process holds
the whole model and scores its share of the examples. A character-level model cannot do these tasks:
a task's first character outside its table is a one-line error, and where its characters suffice it
scores at chance; they need GPT-2 BPE.
"""
import signal

# a Ctrl-C while torch loads ends the script without a traceback; data.run_cli reports later ones
if __name__ == "__main__" and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.SIG_DFL)

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn import functional as F
from tqdm import tqdm

import checkpoint
import configurator
import data
import devices
from model import GPT2_NAMES, from_gpt2

try:  # only eval.py needs the harness: its absence is one line in main, and --help still works
    import lm_eval
    import yaml  # lm-eval's own dependency: its task files are YAML
    from lm_eval.api.model import TemplateLM
    from lm_eval.tasks import TaskManager
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window, make_table
except ImportError:
    lm_eval, TemplateLM = None, object

# settings: the assignments between the two rulers, read by configurator.py (python eval.py --help)
# --------------------------------------------------------------------------------------------------
# the folder holding the checkpoint (ckpt.pt, or sharded ckpt/); eval.json is written here
out_dir = "out"
# 'resume': out_dir's checkpoint; or OpenAI's gpt2[-medium|-large|-xl], or a folder holding one
init_from = "resume"
# lm-eval task names, by commas
tasks = "hellaswag,piqa,arc_easy,arc_challenge,winogrande,lambada_openai"
limit: int | None = None  # score only each task's first limit examples: a quick look, not a result
num_fewshot: int | None = None  # solved examples put before each question; None: the task's default
batch_size = 16  # sequences per forward pass, padded to the longest
include_path = ""  # a folder of task YAMLs to add to lm-eval's own, e.g. a task on local files
seed = 1234  # lm-eval's seed for choosing few-shot examples
device = "auto"  # 'cpu', 'cuda', 'cuda:1', 'mps'; auto: cuda when available
dtype = "auto"  # 'float32', or 'bfloat16' autocast; auto: bfloat16 on CUDA, float32 elsewhere
# check the settings, load the tasks (data too) and exit: no model loaded, nothing written
dry_run = False
# --------------------------------------------------------------------------------------------------
RANGES = dict(limit=1, num_fewshot=0, batch_size=1, seed="[0, 1e19)",
              init_from=("scratch", "resume", *GPT2_NAMES),
              dtype=devices.DTYPES)  # checked by configurator

class StopGeneration(Exception):
    """Raised from GPT.generate's on_token once the text holds a stop string: generation ends
    there."""


class GPTAdapter(TemplateLM):
    """model.py's GPT as an lm-eval model. TemplateLM turns each (context, continuation) request
    into token ids and calls _loglikelihood_tokens; the other two kinds of request are answered
    below. rank and world_size follow torchrun: lm-eval hands each process its share of the examples
    and pads the shares to equal length; every process holds the whole model, so none waits on
    another."""

    def __init__(self, model, meta, device, dtype, batch_size, rank=0, world_size=1):
        super().__init__()
        self.model, self.meta, self.batch_size = model, meta, batch_size
        self.encode, self.decode = data.get_tokenizer(meta)
        self.start = data.start_token(meta)  # <|endoftext|>, or a character table's newline
        if self.start is None:
            raise SystemExit("error: this character vocabulary has neither <|endoftext|> nor a "
                             "newline to start a text after: the tasks need a BPE model "
                             "(--tokenizer gpt2 data)")
        self.autocast = devices.autocast(device, dtype)
        self._device, self._rank, self._world_size = torch.device(device), rank, world_size

    @property
    def eot_token_id(self):
        """The token texts start after (lm-eval conditions an empty context on it)."""
        return self.start

    def tok_encode(self, string, **kwargs):
        if (self.meta["tokenizer"] == "char"
                and (unknown := sorted(set(string) - set(self.meta["chars"])))):
            listed = ", ".join(map(repr, unknown[:5]))
            raise SystemExit("error: the task has characters this character-level model lacks "
                             f"({listed}): downstream tasks need a BPE model, trained on "
                             "--tokenizer gpt2 data")
        return self.encode(string)

    def tok_decode(self, tokens, **kwargs):
        return self.decode(tokens)

    def _loglikelihood_tokens(self, requests, disable_tqdm, **kwargs):
        """[(log p(continuation | context), whether greedy decoding gives the continuation)] for
        requests of (strings, context ids, continuation ids). The context is cut from the left so
        that both fit the window; the longest come first, so that a batch pads little."""
        block_size, scored = self.model.config.block_size, [None] * len(requests)
        for _, context, continuation in requests:
            if len(continuation) > block_size:
                raise SystemExit(f"error: a continuation of {len(continuation)} tokens does not "
                                 f"fit this model's block_size={block_size}: "
                                 "the task needs a model with a longer context")
        order = sorted(range(len(requests)),
                       key=lambda i: -len(requests[i][1]) - len(requests[i][2]))
        batches = range(0, len(order), self.batch_size)
        # with: a Ctrl-C closes the bar's line, so that run_cli's one line starts a line of its own
        with tqdm(batches, desc="scoring", unit="batch",
                  disable=disable_tqdm or self.rank != 0) as bar:
            for start in bar:
                batch = order[start:start + self.batch_size]
                windows = [((requests[i][1] + requests[i][2])[-(block_size + 1):],
                            len(requests[i][2]))
                           for i in batch]
                for i, result in zip(batch, self.score(windows)):
                    scored[i] = result
        return scored

    @torch.no_grad()
    def score(self, windows):
        """For (tokens, n) pairs of at most block_size + 1 tokens each: the summed log-probability
        of the last n tokens given those before, and whether each is the most likely one. One
        forward pass for all: shorter rows are padded on the right, where causal attention keeps it
        from earlier positions."""
        longest = max(len(tokens) for tokens, _ in windows)
        x = torch.zeros(len(windows), longest - 1, dtype=torch.long)  # (B, T)
        for row, (tokens, _) in enumerate(windows):
            x[row, :len(tokens) - 1] = torch.tensor(tokens[:-1])
        with self.autocast:
            logits, _ = self.model(x.to(self.device), all_logits=True)  # (B, T, V)
        results = []
        for row, (tokens, n) in enumerate(windows):
            # (n, V)
            logp = F.log_softmax(logits[row, len(tokens) - 1 - n:len(tokens) - 1].float(), dim=-1)
            target = torch.tensor(tokens[-n:], device=logp.device)
            greedy = bool((logp.argmax(-1) == target).all())
            results.append((logp.gather(1, target[:, None]).sum().item(), greedy))
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        """log p(text) for each text, from the start token on, in lm-eval's rolling windows as its
        own Hugging Face model makes them for wikitext: each window predicts the next block_size
        tokens (or the rest) given what fits before them in the window (for a full window, one
        token)."""
        windows, owners = [], []
        for i, (text,) in enumerate(request.args for request in requests):
            for context, continuation in map(make_disjoint_window, get_rolling_token_windows(
                    self.tok_encode(text), self.start, self.model.config.block_size,
                    context_len=1)):
                windows.append((None, context, continuation))  # no cache key: nothing here caches
                owners.append(i)
        totals = [0.0] * len(requests)
        for i, (logp, _) in zip(owners, self._loglikelihood_tokens(windows, disable_tqdm)):
            totals[i] += logp
        return totals

    def generate_until(self, requests, disable_tqdm=False):
        args = tqdm([request.args for request in requests], desc="generating",
                    disable=disable_tqdm or self.rank != 0)
        return [self.generate(context, options) for context, options in args]

    def generate(self, context, options):
        """A continuation of context by GPT.generate with the KV cache, greedy unless do_sample, cut
        before the first stop string (`until`, and <|endoftext|>) or after max_gen_toks tokens. The
        context is cut from the left so that it and the new tokens fit one window, as lm-eval's own
        models do."""
        until = options.get("until")
        until = [until] if isinstance(until, str) else list(until or [])
        until += ([self.decode([self.meta["eot_token"]])]
                  if self.meta["eot_token"] is not None else [])
        max_new = options.get("max_gen_toks", 256)
        temperature = options.get("temperature", 1.0) if options.get("do_sample") else 0.0
        ids = (self.tok_encode(context)[-max(1, self.model.config.block_size - max_new):]
               or [self.start])
        new = []

        def on_token(token):  # (1, 1)
            new.append(token.item())
            if any(stop in self.decode(new) for stop in until):
                raise StopGeneration

        try:
            with self.autocast:
                self.model.generate(torch.tensor([ids], device=self.device), max_new, temperature,
                                    on_token=on_token)
        except StopGeneration:
            pass
        text = self.decode(new)
        for stop in until:
            text = text.split(stop)[0]
        return text

    # lm-eval's collectives across torchrun's processes (it calls them only when world_size > 1)

    def all_gather(self, tensor):
        parts = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(parts, tensor)
        return torch.stack(parts) if tensor.dim() == 0 else torch.cat(parts)

    def gather_object(self, obj, dst=0):
        parts = [None] * self.world_size if self.rank == dst else None
        dist.gather_object(obj, parts, dst=dst)
        return parts

    def barrier(self):
        dist.barrier()


def check_settings(s):
    """One-line errors for values no evaluation can use, before anything is loaded."""
    if s["init_from"] == "scratch":
        raise SystemExit("error: eval.py scores a trained model: "
                         "init_from=resume (out_dir's checkpoint) or a GPT-2")
    # a run's folder given as a GPT-2's would be told to save_pretrained a GPT-2 into it
    if s["init_from"] != "resume" and checkpoint.find_checkpoint(s["init_from"]):
        raise SystemExit(f"error: init_from={s['init_from']} is a run train.py wrote: score it "
                         f"with --out_dir={s['init_from']} (init_from=resume, the default)")
    if not [t for t in s["tasks"].split(",") if t]:
        raise SystemExit("error: no tasks: give --tasks=hellaswag,piqa,... (lm-eval's names)")
    data.check_out_dir(s["out_dir"], "out_dir")  # eval.json goes there, after the scoring's minutes
    checkpoint.check_run_files(s["out_dir"], ("eval.json",))


def check_task_files(include_path):
    """lm-eval skips a task YAML it cannot read without a word, and its task is then unknown: name
    the file and why instead. Its !function tags name Python code, left unread here."""
    loader = type("TaskYaml", (yaml.SafeLoader,), {})
    loader.add_multi_constructor("!", lambda *args: None)
    for path in sorted(Path(include_path).rglob("*.yaml")):
        try:
            config = yaml.load(path.read_text(), loader)
        except (yaml.YAMLError, UnicodeDecodeError) as e:
            mark = getattr(e, "problem_mark", None)
            why = f"{e.problem}, line {mark.line + 1}" if mark else data.first_line(e)
            raise SystemExit(f"error: {path} is not valid YAML ({why}): fix it, or move it out of "
                             f"{include_path}")
        included = config.get("include") if isinstance(config, dict) else None
        if isinstance(included, str) and not (path.parent / included).is_file():
            raise SystemExit(f"error: {path} includes {included}, which is not in {path.parent}")


def task_manager(include_path, names):
    """The tasks of include_path, and lm-eval's own unless include_path has them all (indexing
    lm-eval's ~15,000 takes seconds); an unknown name is a one-line error with a did-you-mean."""
    if include_path and not os.path.isdir(include_path):
        raise SystemExit(f"error: include_path={include_path} is not a folder of task YAMLs")
    if include_path:
        check_task_files(include_path)
    manager = (TaskManager(include_path=include_path or None, include_defaults=False)
               if include_path else None)
    if manager is None or not set(names) <= set(manager.all_tasks):
        manager = TaskManager(include_path=include_path or None)
    for name in names:
        # lm-eval also takes a YAML's path
        if name not in manager.all_tasks and not os.path.isfile(name):
            hint = configurator.did_you_mean(
                name, {task: repr(task) for task in manager.all_tasks},
                otherwise="`lm-eval ls tasks` lists lm-eval's own; add yours with "
                          "--include_path=DIR")
            raise SystemExit(f"error: unknown task {name!r}: {hint}")
    return manager


def load_tasks(manager, names):
    """lm-eval's Task (or Group) objects for names, their data loaded, before any model is: a task
    that does not load (its data file missing, the hub out of reach, a template that does not parse)
    is one line naming it."""
    loaded = []
    for name in names:
        try:
            found = manager.load([name])
        # a task's data is not in the datasets cache, the hub out of reach
        except ConnectionError as e:
            raise SystemExit(f"error: task {name!r}: {data.first_line(e)}: offline, point a task "
                             "YAML at local copies of the data and pass its folder as "
                             "--include_path=DIR (README: Evaluation)")
        # the task's files and data, read by lm-eval and datasets: whatever they raise
        except Exception as e:
            raise SystemExit(f"error: task {name!r} does not load: {data.first_line(e)}")
        inside = {child for children in found["group_map"].values() for child in children}
        loaded += [item for key, item in (found["groups"] | found["tasks"]).items()
                   if key not in inside]
    return loaded


def headline(metrics):
    """(metric, value, stderr) that sums up a task: acc_norm where it has one (length-normalized,
    the usual choice for hellaswag, arc and piqa), else acc, else its first number (a perplexity,
    say)."""
    values = {k.split(",")[0]: v for k, v in metrics.items()
              if isinstance(v, float) and "_stderr" not in k}
    name = next((m for m in ("acc_norm", "acc") if m in values), next(iter(values), None))
    stderr = metrics.get(f"{name}_stderr,none")
    return name, values.get(name), stderr if isinstance(stderr, float) else None


def main(argv):
    """Evaluate and write out_dir/eval.json; returns its contents (None on processes other than the
    first)."""
    s, _ = configurator.parse_settings(argv, __file__, RANGES)
    check_settings(s)
    if lm_eval is None:
        raise SystemExit("error: eval.py scores with EleutherAI's lm-evaluation-harness: "
                         "pip install lm-eval")
    names = [t for t in s["tasks"].split(",") if t]
    devices.pick_device(s["device"])  # usable, before the tasks take their time to load
    manager = task_manager(s["include_path"], names)
    tasks = load_tasks(manager, names)
    if s["dry_run"]:
        print(f"dry run: the settings are fine and the tasks load ({', '.join(names)}); "
              "nothing was written")
        return None
    rank, world, device = devices.setup_distributed(s["device"])
    try:
        if s["init_from"] == "resume":
            model, meta = checkpoint.load_model(s["out_dir"], device)
        else:
            try:
                model, meta = from_gpt2(s["init_from"]).to(device).eval(), data.GPT2_META
            except ValueError as e:  # model.py's one line: transformers missing, no such GPT-2
                raise SystemExit(f"error: {e}")
        dtype = devices.pick_dtype(s["dtype"], device)
        lm = GPTAdapter(model, meta, device, dtype, s["batch_size"], rank, world)
        t0 = time.time()
        try:
            results = lm_eval.simple_evaluate(model=lm, tasks=tasks, num_fewshot=s["num_fewshot"],
                                              limit=s["limit"], task_manager=manager,
                                              bootstrap_iters=1000, log_samples=False,
                                              fewshot_random_seed=s["seed"])
        # random.sample's, from lm-eval's few-shot sampler: more examples asked than a task has
        except ValueError as e:
            if "larger than population" not in str(e):
                raise
            raise SystemExit(f"error: num_fewshot={s['num_fewshot']} asks for more solved "
                             f"examples than a task has to draw from ({data.first_line(e)}): "
                             "lower num_fewshot")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    if results is None:  # not the first process: it scored its share
        return None
    print(make_table(results))
    report = dict(
        scores={task: dict(zip(("metric", "value", "stderr"), headline(metrics)))
                for task, metrics in results["results"].items()},
        results=results["results"], versions=results["versions"], n_shot=results["n-shot"],
        n_samples=results["n-samples"], lm_eval_version=lm_eval.__version__, settings=s,
        processes=world,
        model=dict(source=str(checkpoint.find_checkpoint(s["out_dir"])
                              if s["init_from"] == "resume" else s["init_from"]),
                   parameters=model.get_num_params(), config=vars(model.config)),
        seconds=time.time() - t0)
    Path(s["out_dir"]).mkdir(parents=True, exist_ok=True)
    data.write_json(Path(s["out_dir"]) / "eval.json", report)  # atomically
    print(f"wrote {Path(s['out_dir']) / 'eval.json'}")
    return report


if __name__ == "__main__":
    data.run_cli(main)
