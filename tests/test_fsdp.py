"""parallel='fsdp' (FSDP2), activation checkpointing, sharded checkpoints and the memory estimate:
fsdp trains as ddp does, resumes from either kind of checkpoint on any number of processes, survives
a kill during a save, and sample.py reads what it writes. Two processes on gloo, tiny models,
CPU."""
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import types

import pytest
import torch
import torch.distributed.checkpoint as dcp

import checkpoint
import configurator
import devices
import logbook
import measure
import sample
import train
from conftest import ROOT, assert_same_records, logged_numbers, mentions, torchrun, torchrun_mains
from model import GPT, GPTConfig, NORM_MODES

TINY = ["--dataset=tiny", "--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=32",
        "--batch_size=4", "--eval_iters=3", "--log_interval=1", "--warmup_iters=2",
        "--learning_rate=3e-3", "--lr_decay_iters=10"]
VARIANTS = dict(pre=[], deep=["--norm_mode=deep"], geonorm=["--norm_mode=geonorm"],
                simplenorm=["--norm_mode=simplenorm"],
                # a clip on the gates' shards
                gpas_clipped=["--gpas=True", "--gpas_gate_clip=1e-4"],
                llama_simplenorm_gqa=["--arch=llama", "--norm_mode=simplenorm", "--n_kv_head=1",
                                      "--multiple_of=16"])
CLIP = 0.05  # below every gradient norm of these runs: clipping is active at every step
# train.main, whose save of step 2 stops before DCP writes the shards, for a kill -9 to land there
SLOW_SAVE = f"""
import sys, time
sys.path.insert(0, {str(ROOT)!r})
import torch.distributed.checkpoint as dcp
import train
write = dcp.FileSystemWriter.write_data
def slow(self, plan, planner):
    if self.path.name == "ckpt-2":
        print("saving", flush=True)
        time.sleep(60)
    return write(self, plan, planner)
dcp.FileSystemWriter.write_data = slow
train.main(sys.argv[1:])
"""


def trained(out_dir):
    return [e for e in logbook.read_events(out_dir / "log.jsonl") if e["event"] == "train"]


def losses(out_dir):
    return [(e["iter"], e["train_loss"]) for e in trained(out_dir)]


def grad_norms(out_dir):
    return [e["grad_norm"] for e in trained(out_dir)]


def assert_close(a, b, tol=1e-5):
    assert [i for i, _ in a] == [i for i, _ in b] \
        and max(abs(x - y) for (_, x), (_, y) in zip(a, b)) < tol, (a, b)


@pytest.fixture(scope="module")
def two_processes(data_dir, tmp_path_factory):
    """Every run that needs two processes, in one torchrun launch: each mode under ddp and fsdp for
    10 steps (2 processes x 2 micro-batches, clipped); fsdp stopped at 5 and resumed; one more
    stopped at 5 for the tests to resume; a ddp checkpoint at 5 resumed under fsdp; fsdp with
    activation checkpointing. Returns the root."""
    root = tmp_path_factory.mktemp("two")
    common = [f"--data_dir={data_dir}", *TINY, "--gradient_accumulation_steps=4",
              f"--grad_clip={CLIP}", "--eval_interval=10"]
    runs = [[*args, f"--parallel={p}", f"--out_dir={root / f'{v}_{p}'}"]
            for v, args in VARIANTS.items() for p in ("ddp", "fsdp")]
    runs += [["--parallel=fsdp", "--max_iters=5", f"--out_dir={root / 'fsdp_parts'}"],
             ["--max_iters=10", "--init_from=resume", f"--out_dir={root / 'fsdp_parts'}"],
             ["--parallel=fsdp", "--max_iters=5", f"--out_dir={root / 'fsdp_at_5'}"],
             ["--parallel=ddp", "--max_iters=5", f"--out_dir={root / 'ddp_then_fsdp'}"],
             ["--parallel=fsdp", "--max_iters=10", "--init_from=resume",
              f"--out_dir={root / 'ddp_then_fsdp'}"],
             ["--parallel=fsdp", "--activation_checkpointing=True",
              f"--out_dir={root / 'fsdp_checkpointed'}"],
             ["--parallel=fsdp", "--gradient_accumulation_steps=None", "--max_iters=2",
              f"--out_dir={root / 'default'}"]]
    result = torchrun_mains([common + ["--max_iters=10"] + r for r in runs], root, timeout=600)
    assert result.stdout.count("= 2 processes x 2 micro-batches x 4 x 32") == len(runs) - 1
    return root


@pytest.mark.parametrize("variant", VARIANTS)
def test_fsdp_and_ddp_give_the_same_losses_with_accumulation_and_clipping(two_processes, variant):
    ddp, fsdp = two_processes / f"{variant}_ddp", two_processes / f"{variant}_fsdp"
    assert [i for i, _ in losses(fsdp)] == list(range(1, 11))
    assert_close(losses(fsdp), losses(ddp))
    assert min(grad_norms(fsdp)) > CLIP  # the norm over both shards, and clipped to CLIP
    assert grad_norms(fsdp) == pytest.approx(grad_norms(ddp), rel=1e-4)
    # and every other logged number: lr, the evaluations, the tokens a step trains, the end line
    assert_same_records(logged_numbers(fsdp), logged_numbers(ddp), rel=1e-4, abs=1e-5)


def test_fsdp_resumes_exactly_from_its_own_and_from_a_ddp_checkpoint(two_processes):
    whole = losses(two_processes / "pre_fsdp")
    # stopped at 5, resumed on 2 processes: bit for bit
    assert losses(two_processes / "fsdp_parts") == whole
    assert_close(losses(two_processes / "ddp_then_fsdp"), whole)  # 5 steps under ddp, 5 under fsdp
    # activation checkpointing changes nothing
    assert_close(losses(two_processes / "fsdp_checkpointed"), whole, 1e-6)
    assert os.readlink(two_processes / "fsdp_parts" / "ckpt") == "ckpt-10"
    assert sorted(p.name for p in (two_processes / "ddp_then_fsdp").iterdir()
                  if p.name.startswith("ckpt")) == \
        ["ckpt", "ckpt-10"]  # the sharded checkpoint replaced ckpt.pt
    shards = sorted(p.name for p in (two_processes / "fsdp_parts" / "ckpt").iterdir())
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp", "checksums.json", "run.json"]


def test_the_default_accumulation_is_one_micro_batch_per_process_and_is_recorded(two_processes):
    """gradient_accumulation_steps=None on 2 processes: 2 micro-batches a step, one each, written to
    config.json and the checkpoint as 2: a resume on any number of processes keeps the tokens per
    step."""
    saved = json.loads((two_processes / "default" / "config.json").read_text())["config"]
    assert saved["gradient_accumulation_steps"] == 2
    assert [i for i, _ in losses(two_processes / "default")] == [1, 2]
    assert checkpoint.load_checkpoint(
        two_processes / "default")["config"]["gradient_accumulation_steps"] == 2


def test_a_check_that_fails_under_torchrun_is_one_line_from_process_0_and_writes_nothing(
        data_dir, tmp_path, tmp_path_factory):
    """Every process makes the same checks before anything is written: process 0 alone prints the
    line, and torchrun stops the others, which wait for it, and adds its own report of the failure.
    Process 0 starts 2 s late here, as on a loaded machine: were the others not waiting, torchrun
    would stop it before its line."""
    slow = tmp_path_factory.mktemp("process_0_late")
    (slow / "sitecustomize.py").write_text(
        "import os, time\nif os.environ.get('RANK') == '0':\n    time.sleep(2)\n")
    result = torchrun([os.path.join(ROOT, "train.py"), f"--data_dir={data_dir}", *TINY,
                       "--parallel=fsdp", "--gradient_accumulation_steps=3",
                       f"--out_dir={tmp_path / 'out'}"], timeout=300,
                      env=os.environ | {"PYTHONPATH": str(slow)})
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.count("error: ") == 1 and list(tmp_path.iterdir()) == []
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    mentions(line, "gradient_accumulation_steps=3", "2 processes", "multiple of 2", "None")


def test_a_sharded_checkpoint_resumes_on_one_process(two_processes, data_dir, tmp_path):
    whole = losses(two_processes / "pre_fsdp")
    for parallel in ("ddp", "fsdp"):  # plain, and fsdp over a group of one
        out = tmp_path / parallel
        subprocess.run(["cp", "-a", str(two_processes / "fsdp_at_5"), str(out)], check=True)
        train.main([f"--data_dir={data_dir}", f"--out_dir={out}", "--init_from=resume",
                    "--max_iters=10", f"--parallel={parallel}"])
        assert_close(losses(out), whole)
        assert checkpoint.find_checkpoint(out).name == ("ckpt.pt" if parallel == "ddp" else "ckpt")


def test_sample_reads_a_sharded_checkpoint(two_processes):
    folder = two_processes / "pre_fsdp"
    model, meta = checkpoint.load_model(str(folder), "cpu")
    # ckpt.pt, ~the same weights
    reference, _ = checkpoint.load_model(str(two_processes / "pre_ddp"), "cpu")
    for (name, p), q in zip(model.state_dict().items(), reference.state_dict().values()):
        assert torch.allclose(p, q, atol=1e-5), name
    (text,) = sample.main([f"--out_dir={folder}", "--device=cpu", "--num_samples=1",
                           "--max_new_tokens=20", "--start=ROMEO:"])
    assert text.startswith("ROMEO:") and len(text) == 26


# ---------------------------------------------------------------- one process

@pytest.mark.parametrize("dropout", [0.0, 0.1])
@pytest.mark.parametrize("mode", NORM_MODES)
def test_activation_checkpointing_gives_the_same_gradients_and_keeps_less(mode, dropout):
    grads, kept = [], []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = GPT(GPTConfig(n_layer=3, n_head=2, n_embd=32, block_size=16, vocab_size=50,
                              norm_mode=mode, dropout=dropout))
        cfg = types.SimpleNamespace(compile=False, parallel="ddp",
                                    activation_checkpointing=checkpointing)
        train_model, _ = train.parallelize(model, cfg,
                                           devices.Process(0, 1, "cpu", "float32", None, 1))
        x = torch.randint(0, 50, (3, 16), generator=torch.Generator().manual_seed(1))
        storages = {}
        def pack(t):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t
        torch.manual_seed(5)  # the dropout masks; checkpointing replays them when it recomputes
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = train_model(x, x)[1]
        loss.backward()
        kept.append(sum(storages.values()))
        grads.append({n.replace("_checkpoint_wrapped_module.", ""): p.grad
                      for n, p in model.named_parameters()})
        # checkpoints keep their keys
        assert list(model.state_dict()) == list(GPT(model.config).state_dict())
    assert grads[0].keys() == grads[1].keys()
    assert all(torch.equal(grads[0][k], grads[1][k]) for k in grads[0])
    assert kept[1] < 0.6 * kept[0]


def fsdp_run(data_dir, out_dir, *args):
    train.main([f"--data_dir={data_dir}", f"--out_dir={out_dir}", *TINY, "--parallel=fsdp",
                "--eval_interval=1", "--eval_iters=1", *args])


class Killed(BaseException):
    """The process dies here: nothing after this point runs, and nothing cleans up."""


def die(*args, **kwargs):
    raise Killed


@pytest.mark.parametrize("moment, first, second, survivor", [
    ("shards written, no .metadata", "fsdp", "fsdp", 1),
    ("shards written, no checksums", "fsdp", "fsdp", 1),
    ("ckpt.pt written, no checksums", "ddp", "ddp", 1),
    ("before the link moves", "fsdp", "fsdp", 1),
    ("link moved, old folder not deleted", "fsdp", "fsdp", 2),
    ("ckpt.pt written, sharded not deleted", "fsdp", "ddp", 2),
    ("link moved, ckpt.pt not deleted", "ddp", "fsdp", 2),
    ("checksums of the new ckpt.pt recorded, the old one not replaced", "ddp", "ddp", 1)])
def test_a_kill_during_a_save_leaves_a_whole_checkpoint(data_dir, tmp_path, monkeypatch, moment,
                                                        first, second, survivor):
    """Every step saves; the save at step 2 dies at one moment. The checkpoint found then is a whole
    one, step 1's or step 2's, its checksums fit it, and the run resumes from it. Some switch from
    one kind of checkpoint to the other."""
    fsdp_run(data_dir, tmp_path, "--max_iters=1", f"--parallel={first}")
    replace, write_json = os.replace, checkpoint.write_json
    if moment.startswith("shards written, no .metadata"):
        monkeypatch.setattr(dcp.FileSystemWriter, "finish", die)
    elif moment.endswith("no checksums"):
        sums = "checksums.json" if first == "fsdp" else "ckpt.pt.crc32.json"
        monkeypatch.setattr(checkpoint, "write_json",
                            lambda path, obj: die() if path.name == sums else write_json(path, obj))
    elif moment.startswith("before") or moment.endswith("not replaced"):
        dst = tmp_path / ("ckpt" if moment.startswith("before") else "ckpt.pt")
        monkeypatch.setattr(os, "replace", lambda src, to: die() if to == dst else replace(src, to))
    else:
        monkeypatch.setattr(checkpoint, "remove_checkpoints", die)
    with pytest.raises((Killed, dcp.CheckpointException)):
        fsdp_run(data_dir, tmp_path, "--max_iters=2", "--init_from=resume", f"--parallel={second}")
    monkeypatch.undo()
    assert checkpoint.load_checkpoint(tmp_path)["iter_num"] == survivor
    model, _ = checkpoint.load_model(str(tmp_path), "cpu")  # every tensor there
    fsdp_run(data_dir, tmp_path, "--max_iters=3", "--init_from=resume")
    assert [i for i, _ in losses(tmp_path)] == [1, 2, 3]
    assert checkpoint.load_checkpoint(tmp_path)["iter_num"] == 3


def test_kill_9_in_the_middle_of_a_sharded_save(data_dir, tmp_path):
    """A real SIGKILL while DCP writes the step 2 checkpoint (held there by a sleep): step 1's
    loads."""
    script = tmp_path / "slow_save.py"
    script.write_text(SLOW_SAVE)
    args = [f"--data_dir={data_dir}", f"--out_dir={tmp_path}", *TINY, "--parallel=fsdp",
            "--eval_interval=1", "--eval_iters=1", "--max_iters=3"]
    proc = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while proc.stdout.readline().strip() != "saving":
        assert proc.poll() is None and time.time() < deadline
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert (tmp_path / "ckpt-2").is_dir() and checkpoint.load_checkpoint(tmp_path)["iter_num"] == 1
    checkpoint.load_model(str(tmp_path), "cpu")


def test_per_block_compile_under_fsdp_trains_and_saves_as_eager(data_dir, tmp_path, monkeypatch):
    compile, compiled = torch.compile, []
    def eager(*args, **kwargs):  # no inductor on this machine
        compiled.append(args)
        return compile(*args, **kwargs | dict(backend="eager"))
    monkeypatch.setattr(torch, "compile", eager)
    fsdp_run(data_dir, tmp_path / "compiled", "--max_iters=3", "--compile=True",
             "--activation_checkpointing=True")
    # each of the 2 blocks on its own (nn.Module.compile calls torch.compile)
    assert len(compiled) == 2
    fsdp_run(data_dir, tmp_path / "eager", "--max_iters=3")
    assert_close(losses(tmp_path / "compiled"), losses(tmp_path / "eager"), 1e-6)
    # no _orig_mod. or wrapper prefixes in the keys
    checkpoint.load_model(str(tmp_path / "compiled"), "cpu")


# what fsdp cannot serve: test_train.py's checks only train.py makes
def test_parallel_is_ddp_or_fsdp():
    with pytest.raises(SystemExit, match="^error: parallel must be one of ddp, fsdp, got 'zero3'"):
        train.configure(["--parallel=zero3"])


# ---------------------------------------------------------------- memory estimate

@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("mode", NORM_MODES)
def test_block_activations_are_counted_from_a_narrow_copy(mode, arch, dtype):
    """The narrow copies' counts, extrapolated to the width, against the same count taken at the
    width itself."""
    config = GPTConfig(n_layer=2, n_head=4, n_embd=256, block_size=64, vocab_size=64,
                       norm_mode=mode, arch=arch, multiple_of=1)
    wide = measure.block_activation_bytes(config, dtype, width=config.n_embd)
    assert measure.block_activation_bytes(config, dtype) == pytest.approx(wide, rel=0.005)
    # at least the vectors any block keeps (reorder, with no norm before f, keeps the fewest)
    assert wide > (32 if dtype == "bfloat16" else 60) * config.n_embd * 0.99


def test_memory_estimate_shards_the_state_and_checkpointing_shrinks_activations():
    model = GPT(GPTConfig(n_layer=4, n_head=4, n_embd=64, block_size=64, vocab_size=100))
    n = sum(p.numel() for p in model.parameters())
    cfg = types.SimpleNamespace(batch_size=8, parallel="ddp", activation_checkpointing=False)
    ddp = measure.memory_estimate(model, cfg, 4, "float32")
    # AdamW: 16 bytes each
    assert (ddp["parameters"], ddp["gradients"], ddp["optimizer"]) == (4 * n, 4 * n, 8 * n)
    fsdp = measure.memory_estimate(model, types.SimpleNamespace(**vars(cfg) | dict(
        parallel="fsdp")), 4, "float32")
    assert (fsdp["gradients"], fsdp["optimizer"]) == (n, 2 * n)
    assert fsdp["activations"] == ddp["activations"] > ddp["switched"]
    checkpointed = measure.memory_estimate(model, types.SimpleNamespace(**vars(cfg) | dict(
        activation_checkpointing=True)), 4, "float32")
    assert checkpointed["activations"] == ddp["switched"] \
        and checkpointed["switched"] == ddp["activations"]


# ---------------------------------------------------------------- the 7B and 8B configs

@pytest.mark.parametrize("size, llama_vocab, llama_params, here", [("7b", 32_000, 6.74e9, 6.89e9),
                                                                   ("8b", 128_256, 8.03e9, 7.39e9)])
def test_the_7b_and_8b_configs_build_llamas_blocks_sharded_and_checkpointed(size, llama_vocab,
                                                                            llama_params, here):
    """Parsed, built on the meta device (nothing allocated), counted: Llama 2 7B's and Llama 3 8B's
    parameters with their own vocabularies, and with GPT-2's 50,304 as trained here; SimpleGPT's
    recipe for both models."""
    cfgs = {n: train.configure([os.path.join(ROOT, "configs", f"llama_{n}_{size}.py")])[0]
            for n in ("simplenorm", "pre_qknorm")}
    assert (cfgs["simplenorm"].norm_mode, cfgs["pre_qknorm"].norm_mode,
            cfgs["pre_qknorm"].qk_norm) == ("simplenorm", "pre", True)
    assert {k for k, v in vars(cfgs["simplenorm"]).items() if vars(cfgs["pre_qknorm"])[k] != v} == \
        {"norm_mode", "qk_norm", "out_dir"}
    cfg = cfgs["simplenorm"]
    assert (cfg.parallel, cfg.activation_checkpointing) == ("fsdp", True)
    assert (cfg.learning_rate, cfg.weight_decay) == (1e-3, 0.05)
    assert (cfg.block_size, cfg.warmup_iters, cfg.max_iters, cfg.total_batch_size) == \
        (2048, 200, 20_000, 192 * 2048)
    # as SimpleGPT's tomls on 8 GPUs
    assert train.accumulation_steps(cfg, 8) == {"7b": 6, "8b": 8}[size]
    config = configurator.model_config(cfg, dict(vocab_size=50257, tokenizer="gpt2"))
    for vocab, count in ((llama_vocab, llama_params), (config.vocab_size, here)):
        with torch.device("meta"):
            model = GPT(dataclasses.replace(config, vocab_size=vocab))
        assert sum(p.numel() for p in model.parameters()) == pytest.approx(count, rel=2e-3)
    mlp, attn = model.transformer.h[0].mlp, model.transformer.h[0].attn
    assert (mlp.c_fc.weight.shape[0], attn.n_kv_head) == \
        {"7b": (11_008, 32), "8b": (14_336, 8)}[size]
    # on 8 GPUs, checkpointing: under 80 GB
    memory = measure.memory_estimate(model, cfg, 8, "bfloat16")
    assert sum(memory[k] for k in ("parameters", "gradients", "optimizer", "activations")) < \
        40 * 2**30
    # without checkpointing the activations alone would not fit
    assert memory["switched"] > 50 * 2**30
