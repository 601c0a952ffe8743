"""checkpoint.py's pieces, each against what its readers rely on, without training: which checkpoint
a folder holds, the checksums and their record, the resume checks' one-line errors, where a run
stands, what is deleted, and a run's log as ablate.py reads it. The whole save → kill → load
path is tests/test_reliability.py's."""
import json
import math
import os
import subprocess
import sys
import zlib
from types import SimpleNamespace

import numpy
import pytest
import torch

import checkpoint
import train
import logbook
from conftest import ROOT, error_of, mentions

# DCP in one process: meant
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def touch(path, mtime, text="x"):
    path.write_text(text)
    os.utime(path, (mtime, mtime))


def test_the_checkpoint_found_is_the_whole_one_the_sharded_one_or_the_newer_of_both(tmp_path):
    assert checkpoint.find_checkpoint(tmp_path) is None
    (tmp_path / "ckpt-8").mkdir()
    os.utime(tmp_path / "ckpt-8", (200, 200))
    (tmp_path / "ckpt").symlink_to("ckpt-8")
    assert checkpoint.find_checkpoint(tmp_path) == tmp_path / "ckpt"
    touch(tmp_path / "ckpt.pt", 100)  # older than the folder the link points at
    assert checkpoint.find_checkpoint(tmp_path) == tmp_path / "ckpt"
    touch(tmp_path / "ckpt.pt", 300)
    assert checkpoint.find_checkpoint(str(tmp_path)) == tmp_path / "ckpt.pt"
    (tmp_path / "ckpt").unlink()
    assert checkpoint.find_checkpoint(tmp_path) == tmp_path / "ckpt.pt"


def test_a_link_to_a_folder_that_is_gone_is_one_line(tmp_path):
    (tmp_path / "ckpt").symlink_to("ckpt-40")
    mentions(error_of(checkpoint.find_checkpoint, tmp_path), str(tmp_path / "ckpt"),
             "dangling link", "ckpt-40", "put the folder back", "delete the link")


def test_checksums_are_recorded_beside_a_file_and_inside_a_folder(tmp_path):
    (tmp_path / "ckpt-3").mkdir()
    assert checkpoint.sums_path(tmp_path / "ckpt.pt") == tmp_path / "ckpt.pt.crc32.json"
    assert checkpoint.sums_path(tmp_path / "ckpt-3") == tmp_path / "ckpt-3" / "checksums.json"


def test_checksums_are_a_crc32_per_chunk_of_each_file(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "CHUNK", 1000)
    data = bytes(range(256)) * 10  # 2,560 bytes: two whole chunks and a part
    (tmp_path / "a.bin").write_bytes(data)
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "one").write_bytes(data[:1000])  # exactly one chunk
    sums = checkpoint.checksums([tmp_path / "a.bin", tmp_path / "empty", tmp_path / "one"])
    assert sums == {"a.bin": dict(bytes=2560,
                                  crc32=[zlib.crc32(data[i:i + 1000]) for i in (0, 1000, 2000)]),
                    "empty": dict(bytes=0, crc32=[zlib.crc32(b"")]),
                    "one": dict(bytes=1000, crc32=[zlib.crc32(data[:1000])])}


def test_a_checkpoint_matches_its_record_or_the_previous_file_it_replaced(tmp_path):
    path = tmp_path / "ckpt.pt"
    assert checkpoint.verify(path) is False  # no record: an older normgpt's
    path.write_bytes(b"new weights")
    record = dict(files=checkpoint.checksums([path]))
    # a kill between the record and the rename: the old file is there
    path.write_bytes(b"old weights, longer")
    record["previous"] = checkpoint.checksums([path])
    checkpoint.sums_path(path).write_text(json.dumps(record))
    assert checkpoint.verify(path) is True
    path.write_bytes(b"new weights")
    assert checkpoint.verify(path) is True
    path.write_bytes(b"new weighTs")  # a byte flipped: neither
    fix = "copy it again, or delete the checkpoint and train again"
    mentions(error_of(checkpoint.verify, path), str(path), "checksum", "ckpt.pt.crc32.json",
             "copy it again", "train again")
    path.write_bytes(b"new weight")
    mentions(error_of(checkpoint.verify, path), str(path), "10 bytes", "11 when saved", "cut short",
             "copy it again", "train again")
    path.unlink()
    mentions(error_of(checkpoint.verify, path), str(path), "missing", "ckpt.pt.crc32.json",
             "copy it again", "train again")
    for broken, why in [("{", "JSONDecodeError: Expecting property name enclosed in double quotes"),
                        ("{}", "KeyError: 'files'"),
                        ("[]", "TypeError: list indices must be integers"),
                        ('{"files": []}', "AttributeError: 'list' object has no attribute 'items'"),
                        ('{"files": {"ckpt.pt": 11}}',
                         "TypeError: 'int' object is not subscriptable"),
                        ('{"files": {"ckpt.pt": {}}}', "KeyError: 'bytes'")]:
        checkpoint.sums_path(path).write_text(broken)
        message = error_of(checkpoint.verify, path)
        assert message.startswith(
            f"error: {checkpoint.sums_path(path)} is not a checksum record ({why}")
        assert message.endswith(f"): {fix}")


def test_a_sharded_checkpoint_is_checked_file_by_file_in_its_folder(tmp_path):
    folder = tmp_path / "ckpt-5"
    folder.mkdir()
    for name in ("__0_0.distcp", ".metadata", "run.json"):
        (folder / name).write_text(name * 3)
    record = dict(files=checkpoint.checksums(sorted(folder.iterdir())))
    checkpoint.sums_path(folder).write_text(json.dumps(record))
    assert checkpoint.verify(folder) is True
    (folder / ".metadata").write_text(".metadatA" * 3)
    assert error_of(checkpoint.verify, folder).startswith(
        f"error: {folder / '.metadata'} is damaged: ")


def test_the_prefixes_of_compile_and_ddp_are_taken_off_the_front_of_each_key_only():
    weights = {"_orig_mod.module._orig_mod.h.0.w": 1, "module.wte": 2, "lm_head": 3,
               "h.module.w": 4, "_orig_mod.h._orig_mod.b": 5}
    assert checkpoint.unprefixed(weights) == {"h.0.w": 1, "wte": 2, "lm_head": 3, "h.module.w": 4,
                                              "h._orig_mod.b": 5}


def resume_check(tmp_path, given, max_iters, events=(), evaluated=True):
    """check_resume on a checkpoint of step 100 (4 blocks, dropout 0.1) with events in out_dir's
    log."""
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    ckpt = dict(model_args=dict(n_layer=4, dropout=0.1, norm_mode="pre"), iter_num=100)
    # None: an older checkpoint, without it
    ckpt |= {} if evaluated is None else dict(evaluated=evaluated)
    return checkpoint.check_resume(ckpt, given,
                                   SimpleNamespace(out_dir=str(tmp_path), max_iters=max_iters))


def test_a_resume_goes_on_with_the_checkpoints_model_but_its_dropout(tmp_path):
    assert resume_check(tmp_path, dict(n_layer=4, dropout=0.0, learning_rate=1.0, norm_mode="pre"),
                        200) is None
    message = error_of(resume_check, tmp_path, dict(dropout=0.0, norm_mode="geonorm"), 200)
    mentions(message, "norm_mode='geonorm'", str(tmp_path), "norm_mode='pre'", "drop --norm_mode",
             "another out_dir")


END = dict(event="end", status="finished", iter=100)
EVAL = dict(event="eval", iter=100, val_loss=2.0)


@pytest.mark.parametrize("max_iters, events, evaluated, refused", [
    (99, [EVAL, END], True, True),
    (99, [EVAL], False, True),  # below the checkpoint's step: whatever its log says
    (100, [EVAL, END], True, True),  # at it, evaluated and ended: nothing left
    (100, [EVAL], True, False),  # not ended: the resume records the end
    (100, [END, EVAL], True, False),  # the end is not the last event
    # its evaluation was skipped by a stop: the resume makes it up
    (100, [EVAL, END], False, False),
    (100, [EVAL, END], None, True),  # an older checkpoint's step was evaluated
    (100, [END, EVAL, END], True, True),  # only the last event counts
    (101, [EVAL, END], True, False),
])
def test_a_resume_with_nothing_to_train_evaluate_or_record_is_one_line(tmp_path, max_iters, events,
                                                                       evaluated, refused):
    if not refused:
        assert resume_check(tmp_path, {}, max_iters, events, evaluated) is None
        return
    message = error_of(resume_check, tmp_path, {}, max_iters, events, evaluated)
    mentions(message, "nothing to train", str(tmp_path), "step 100", f"max_iters={max_iters}",
             "above 100")


def test_a_resume_on_another_vocabulary_or_other_shards_is_one_line_naming_both_datasets(tmp_path):
    """The vocabulary, and each shard's file and sha256 (the same name prepared again from other
    text)."""
    shards = dict(train=[dict(file="train_000000.bin", tokens=9, sha256="aa")],
                  val=[dict(file="val_000000.bin", tokens=5, sha256="bb")])
    chars = dict(tokenizer="char", vocab_size=65, eot_token=None, chars=list("abc"), shards=shards)
    ckpt = dict(meta=chars | dict(extra="ignored"), config=dict(dataset="shakespeare_char"))
    cfg = SimpleNamespace(out_dir=str(tmp_path), dataset="other")
    assert checkpoint.check_data(ckpt, cfg, chars) is None
    # an older checkpoint: no meta
    assert checkpoint.check_data(dict(config={}), cfg, chars) is None
    for change in [dict(chars=list("abd")), dict(vocab_size=66), dict(eot_token=0),
                   dict(tokenizer="gpt2")]:
        message = error_of(checkpoint.check_data, ckpt, cfg, chars | change)
        assert "shakespeare_char" in message and "other" in message and "vocabulary" in message
        assert message.endswith("resume with --dataset=shakespeare_char")
    other_text = dict(train=shards["train"],
                      val=[dict(file="val_000000.bin", tokens=5, sha256="cc")])
    more = dict(train=shards["train"] * 2, val=shards["val"])
    for change in [other_text, more]:
        message = error_of(checkpoint.check_data, ckpt, cfg, chars | dict(shards=change))
        assert "sha256" in message and "shakespeare_char" in message and "other" in message
    same_name = SimpleNamespace(out_dir=str(tmp_path), dataset="shakespeare_char")
    message = error_of(checkpoint.check_data, ckpt, same_name, chars | dict(shards=other_text))
    assert message.endswith(
        "restore the shakespeare_char it trained on, or train anew in another out_dir")
    unrecorded = dict(meta={k: v for k, v in chars.items() if k != "shards"}, config=ckpt["config"])
    assert checkpoint.check_data(unrecorded, cfg, chars | dict(shards=other_text)) is None


def test_where_a_run_stands_from_scratch_and_from_a_checkpoint():
    assert train.Progress.of(None) == train.Progress(0, math.inf, None, None)
    ckpt = dict(iter_num=500, best_val_loss=1.5)
    assert train.Progress.of(ckpt) == train.Progress(500, 1.5, 500, 500)
    assert train.Progress.of(ckpt | dict(evaluated=False)) == train.Progress(500, 1.5, None, 500)


def test_only_the_checkpoints_not_kept_are_deleted_links_before_their_folders(tmp_path):
    """The user's files that look like a save's (ckpt-notes.txt, a folder ckpt-old, a link ckpt-7 to
    their own folder) stay: only ckpt-STEP folders are a save's."""
    users = ["ckpt-notes.txt", "ckpt-old", "ckpt-7", "mine"]
    for name in ("ckpt.pt", "ckpt.pt.crc32.json", "ckpt.pt.tmp", "log.jsonl", "ckpt-notes.txt"):
        (tmp_path / name).write_text("x")
    for folder in ("ckpt-10", "ckpt-20", "ckpt-old", "mine"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "shard").write_text("x")
    (tmp_path / "ckpt-7").symlink_to("mine")
    (tmp_path / "ckpt").symlink_to("ckpt-10")
    checkpoint.remove_checkpoints(tmp_path, keep={"ckpt", "ckpt-10"})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["ckpt", "ckpt-10", "ckpt.pt.tmp",
                                                                 "log.jsonl", *users])
    (tmp_path / "ckpt-10" / "shard").unlink()
    (tmp_path / "ckpt-10").rmdir()  # the link left dangling: deleted as a link
    checkpoint.remove_checkpoints(tmp_path, keep=set())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["ckpt.pt.tmp", "log.jsonl",
                                                                 *users])
    assert (tmp_path / "mine" / "shard").exists() and (tmp_path / "ckpt-old" / "shard").exists()


def write_log(folder, events):
    folder.mkdir(exist_ok=True)
    (folder / "log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def test_a_runs_log_read_as_ablate_reads_it(tmp_path):
    stats = dict(event="layer_stats", iter=0, grad_norm=[1.0])
    events = [dict(event="eval", iter=0, val_loss=4.0), stats,
              dict(event="train", iter=5, tokens_per_s=None),
              dict(event="train", iter=10, tokens_per_s=100.0),
              dict(event="eval", iter=10, val_loss=2.0),
              dict(event="train", iter=15, tokens_per_s=300.0),
              dict(event="train", iter=18, tokens_per_s=800.0),
              dict(event="eval", iter=20, val_loss=2.5),
              dict(event="end", status="finished", iter=20)]
    write_log(tmp_path, events)
    (tmp_path / "seconds.json").write_text(json.dumps(dict(seconds=12.5)))
    assert logbook.read_log(tmp_path) == dict(
        status="finished", iter=20, evals=[(0, 4.0), (10, 2.0), (20, 2.5)], seconds=12.5,
        stats=[stats], final_val_loss=2.5, best_val_loss=2.0,
        tokens_per_s=400.0)  # the mean of the timed
    write_log(tmp_path, events[:-2] + [dict(event="eval", iter=20, val_loss=math.nan), events[-1]])
    # a finite training loss, not the evaluation's
    assert logbook.read_log(tmp_path)["status"] == "diverged"
    write_log(tmp_path, [dict(event="end", status="diverged", iter=3)])
    (tmp_path / "seconds.json").unlink()
    assert logbook.read_log(tmp_path) == dict(status="diverged", iter=3, evals=[], seconds=None,
                                              stats=[], final_val_loss=None, best_val_loss=None,
                                              tokens_per_s=None)


@pytest.mark.parametrize("corrupt", ["{x", "[1]", "{}", "a folder"])
def test_a_seconds_json_that_is_not_ablates_is_one_line_naming_it(tmp_path, corrupt):
    """A run's seconds.json cut short, edited or replaced: the file and the way on, not a
    traceback; nothing is changed."""
    write_log(tmp_path, [dict(event="eval", iter=3, val_loss=2.0),
                         dict(event="end", status="finished", iter=3)])
    timing = tmp_path / "seconds.json"
    if corrupt == "a folder":
        timing.mkdir()
    else:
        timing.write_text(corrupt)
    before = sorted(p.name for p in tmp_path.iterdir())
    message = error_of(logbook.read_log, tmp_path)
    mentions(message, str(timing), "move it away")
    # and why
    reason = {"{x": "JSONDecodeError", "[1]": "TypeError", "{}": "KeyError",
              "a folder": "IsADirectoryError"}[corrupt]
    assert reason in message
    assert sorted(p.name for p in tmp_path.iterdir()) == before and timing.exists()

def test_a_finished_run_whose_log_holds_no_evaluation_is_one_line_naming_the_way_on(tmp_path):
    """A run resumed at its last step after its log.jsonl was lost or cut writes an end and no
    evaluation: a result without a loss, which a table would read as a number. One line instead,
    naming the log and what to do; a diverged run has no final evaluation to read and stays a
    result."""
    write_log(tmp_path, [dict(event="end", status="finished", iter=3)])
    mentions(error_of(logbook.read_log, tmp_path), str(tmp_path / "log.jsonl"), "no evaluation",
             f"move {tmp_path} away")
    write_log(tmp_path, [dict(event="end", status="diverged", iter=3)])
    assert logbook.read_log(tmp_path)["status"] == "diverged"

def test_a_run_not_started_reads_as_not_run_and_one_that_stopped_short_as_failed(tmp_path):
    folders = {name: tmp_path / name
               for name in ("empty", "crashed", "cut", "interrupted", "logged")}
    for folder in folders.values():
        folder.mkdir()
    (folders["crashed"] / "train.log").write_text("Traceback (most recent call last):\n")
    first = json.dumps(dict(event="eval", iter=0, train_loss=4.0, val_loss=4.0, lr=0.0)) + "\n"
    (folders["cut"] / "log.jsonl").write_text(first)
    (folders["interrupted"] / "log.jsonl").write_text(
        first + json.dumps(dict(event="end", status="interrupted", iter=0)) + "\n")
    (folders["logged"] / "log.jsonl").write_text("")  # started, and crashed before its first line
    statuses = {name: logbook.read_log(folder)["status"] for name, folder in folders.items()}
    assert statuses == dict(empty="not run", crashed="failed", cut="failed",
                            interrupted="interrupted", logged="failed")
    assert logbook.read_log(tmp_path / "no_folder")["status"] == "not run"


def test_a_log_line_cut_short_by_a_crash_is_left_out_and_trimming_keeps_each_step_once(tmp_path):
    write_log(tmp_path, [dict(event="eval", iter=0), dict(event="train", iter=5),
                         dict(event="eval", iter=10),
                         dict(event="end", status="interrupted", iter=10),
                         dict(event="train", iter=15)])
    with open(tmp_path / "log.jsonl", "a") as f:
        f.write('{"event": "train", "it')
    assert [e["iter"] for e in logbook.read_events(tmp_path / "log.jsonl")] == [0, 5, 10, 10, 15]
    logbook.trim_log(tmp_path / "log.jsonl", 10)
    assert logbook.read_events(tmp_path / "log.jsonl") == [
        dict(event="eval", iter=0), dict(event="train", iter=5), dict(event="eval", iter=10)]
    assert logbook.read_events(tmp_path / "missing.jsonl") == []


@pytest.mark.parametrize("text", ['{"event": "eval", "iter": 0}\n{"event": "tr\n{"event": "end"',
                                  "garbage", "{'event': 'eval'}", '{"iter": 0, "ev'])
def test_a_line_that_is_no_record_is_one_line_unless_it_is_the_last_cut_short(tmp_path, text):
    """Only the last line can be cut short (a resume rewrites the log before it appends), and
    only as the start of a record: text that is not train.py's, anywhere, is a one-line error, and a
    resume does not trim it away."""
    (tmp_path / "log.jsonl").write_text(text)
    mentions(error_of(logbook.read_events, tmp_path / "log.jsonl"), "is not a log record",
             "move it away")
    assert (tmp_path / "log.jsonl").read_text() == text


def test_a_run_is_evaluated_when_its_eval_json_has_the_tasks_and_limit_asked_for(tmp_path):
    asked = dict(tasks="hellaswag,piqa", limit=100)
    assert not logbook.evaluated(tmp_path, asked)
    (tmp_path / "eval.json").write_text(
        json.dumps(dict(settings=dict(tasks="hellaswag,piqa", limit=100, seed=1))))
    assert logbook.evaluated(tmp_path, asked) and logbook.evaluated(tmp_path, asked | dict(seed=2))
    assert not logbook.evaluated(tmp_path, asked | dict(limit=None))
    assert not logbook.evaluated(tmp_path, asked | dict(tasks="hellaswag"))


def test_the_provenance_names_the_code_s_revision_wherever_it_runs_and_the_libraries(tmp_path,
                                                                                     monkeypatch):
    # None outside a git checkout
    revision = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT,
                              capture_output=True, text=True, timeout=60).stdout.strip() or None
    # run from elsewhere: the revision is the code's, not the working folder's
    monkeypatch.chdir(tmp_path)
    p = logbook.provenance()
    assert p == dict(git=revision, python=sys.version.split()[0], torch=torch.__version__,
                     numpy=numpy.__version__, cuda=torch.version.cuda)

    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")
    monkeypatch.setattr(subprocess, "run", no_git)
    assert logbook.provenance()["git"] is None


# --------------------------------------------------- save, load, restore: a tiny model, no training

def tiny_run(seed=0, vocab_size=48):
    """A tiny model and its AdamW after one step on made-up gradients: every moment non-zero."""
    from model import GPT, GPTConfig
    torch.manual_seed(seed)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=vocab_size))
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optimizer.step()
    return model, optimizer


META = dict(tokenizer="char", vocab_size=40, eot_token=None,
            chars=[chr(97 + i) for i in range(39)] + ["\n"])


def fields(step):
    return dict(model_args=dict(n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=48),
                iter_num=step, evaluated=True, best_val_loss=1.5, config=dict(dataset="chars"),
                meta=META)


def flip_a_bit(path):
    """One bit in the middle of the file, of a tensor: torch.load would read it without a word."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))


def save(out_dir, model, optimizer, step, sharded):
    checkpoint.save_checkpoint(out_dir, model, optimizer, fields(step), sharded, master=True)


@pytest.mark.parametrize("sharded", [False, True])
def test_a_checkpoint_saved_restores_the_model_and_adams_moments_but_not_its_hyperparameters(
        tmp_path, sharded):
    """Whole or sharded (DCP in one process), the folder then holds the checkpoint, its checksums
    and nothing else; a fresh model and AdamW restored from it equal the saved, state for state,
    while the new optimizer's learning rate, weight decay and betas stay (the settings of now)."""
    model, optimizer = tiny_run()
    save(tmp_path, model, optimizer, 10, sharded)
    names = ["ckpt", "ckpt-10"] if sharded else ["ckpt.pt", "ckpt.pt.crc32.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == names
    if sharded:
        assert os.readlink(tmp_path / "ckpt") == "ckpt-10"  # relative: the folder can move
    ckpt = checkpoint.load_checkpoint(str(tmp_path))
    assert {k: ckpt[k] for k in fields(10)} == fields(10)
    fresh, adam = tiny_run(seed=1)
    for group in adam.param_groups:
        group.update(lr=0.5, betas=(0.8, 0.9), weight_decay=group["weight_decay"] and 0.3)
    now = [{k: v for k, v in g.items() if k != "params"} for g in adam.param_groups]
    checkpoint.restore(fresh, adam, ckpt, str(tmp_path))
    assert all(torch.equal(a, b)
               for a, b in zip(model.state_dict().values(), fresh.state_dict().values()))
    for p, q in zip(model.parameters(), fresh.parameters()):
        assert all(torch.equal(optimizer.state[p][k], adam.state[q][k])
                   for k in ("step", "exp_avg", "exp_avg_sq"))
    assert [{k: v for k, v in g.items() if k != "params"} for g in adam.param_groups] == now


def test_a_whole_checkpoint_keys_adams_state_by_parameter_name_as_a_sharded_one_does(tmp_path):
    model, optimizer = tiny_run()
    save(tmp_path, model, optimizer, 10, sharded=False)
    state = torch.load(tmp_path / "ckpt.pt", weights_only=True)["optimizer"]["state"]
    assert sorted(state) == sorted(name for name, _ in model.named_parameters())


def test_each_save_replaces_the_last_of_either_kind_and_records_the_replaced_files_sums(tmp_path):
    model, optimizer = tiny_run()
    save(tmp_path, model, optimizer, 10, sharded=False)
    first = json.loads((tmp_path / "ckpt.pt.crc32.json").read_text())
    # the first: nothing replaced
    assert first == dict(files=checkpoint.checksums([tmp_path / "ckpt.pt"]))
    save(tmp_path, model, optimizer, 20, sharded=True)
    save(tmp_path, model, optimizer, 30, sharded=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "ckpt-30"]
    assert checkpoint.load_checkpoint(str(tmp_path))["iter_num"] == 30
    assert sorted(p.name for p in (tmp_path / "ckpt-30").iterdir()) == sorted(
        [".metadata", "__0_0.distcp", "run.json", "checksums.json"])
    # every file but the record itself
    assert (sorted(json.loads((tmp_path / "ckpt-30" / "checksums.json").read_text())["files"])
            == sorted([".metadata", "__0_0.distcp", "run.json"]))
    (tmp_path / "ckpt.tmp").symlink_to("ckpt-30")  # a link a kill left before its rename
    save(tmp_path, model, optimizer, 35, sharded=True)
    assert os.readlink(tmp_path / "ckpt") == "ckpt-35" and not (tmp_path / "ckpt.tmp").is_symlink()
    save(tmp_path, model, optimizer, 40, sharded=False)
    save(tmp_path, model, optimizer, 50, sharded=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt", "ckpt.pt.crc32.json"]
    record = json.loads((tmp_path / "ckpt.pt.crc32.json").read_text())
    assert set(record) == {"files", "previous"} and record["previous"] != record["files"]
    assert record["files"] == checkpoint.checksums([tmp_path / "ckpt.pt"])
    assert checkpoint.load_checkpoint(str(tmp_path))["iter_num"] == 50
    # an older normgpt's ckpt.pt, without checksums: replaced alike
    (tmp_path / "ckpt.pt.crc32.json").unlink()
    save(tmp_path, model, optimizer, 60, sharded=False)
    assert json.loads((tmp_path / "ckpt.pt.crc32.json").read_text()) == dict(
        files=checkpoint.checksums([tmp_path / "ckpt.pt"]))


@pytest.mark.parametrize("sharded", [False, True])
def test_load_model_gives_the_saved_model_in_eval_mode_less_its_vocabulary_padding(tmp_path,
                                                                                   sharded):
    model, optimizer = tiny_run()
    save(tmp_path, model, optimizer, 10, sharded)
    loaded, meta = checkpoint.load_model(str(tmp_path), "cpu")
    assert meta == META and not loaded.training
    weights = model.state_dict()
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor,
                           weights[name][:40] if name == "lm_head.weight" else weights[name]), name
    assert loaded.lm_head.weight.shape == (40, 16)  # the 8 padding ids have no text: never sampled


def test_load_model_keeps_a_tied_head_tied_when_there_is_no_padding(tmp_path):
    model, optimizer = tiny_run()
    chars = [chr(97 + i) for i in range(47)] + ["\n"]  # as many as the model's vocabulary
    checkpoint.save_checkpoint(tmp_path, model, optimizer,
                               fields(10) | dict(meta=META | dict(vocab_size=48, chars=chars)),
                               sharded=False, master=True)
    loaded, _ = checkpoint.load_model(str(tmp_path), "cpu")
    assert loaded.lm_head.weight is loaded.transformer.wte.weight


def test_readers_check_the_checkpoint_and_name_one_they_cannot_read_or_fit(tmp_path, capsys):
    """load_model (sample.py, eval.py) checks the checksums as a resume does; an older normgpt's
    checkpoint, without them, loads with a notice; one written by other means (a pickle of anything,
    not only tensors) is not unpickled; one whose settings model.py does not have is one line."""
    model, optimizer = tiny_run()
    save(tmp_path, model, optimizer, 10, sharded=False)
    checkpoint.load_model(str(tmp_path), "cpu")
    assert capsys.readouterr().err == ""  # checked: no notice
    path = tmp_path / "ckpt.pt"
    flip_a_bit(path)
    mentions(error_of(checkpoint.load_model, str(tmp_path), "cpu"), str(path), "checksum",
             "ckpt.pt.crc32.json", "copy it again", "train again")
    save(tmp_path, model, optimizer, 10, sharded=False)
    (tmp_path / "ckpt.pt.crc32.json").unlink()
    checkpoint.load_model(str(tmp_path), "cpu")
    notice = capsys.readouterr().err
    assert notice.count("\n") == 1 and notice.startswith("notice: ")
    mentions(notice, str(path), "no checksums", "ckpt.pt.crc32.json", "unchecked")
    # not weights only
    torch.save(dict(model=model.state_dict(), anything=SimpleNamespace(a=1)), path)
    message = error_of(checkpoint.load_model, str(tmp_path), "cpu")
    assert (message.startswith(f"error: {path} is not a readable checkpoint "
                               "(UnpicklingError: Weights only load failed")
            and message.endswith("it may be truncated or from elsewhere: train again or "
                                 "copy it again"))
    torch.save(fields(10) | dict(model=model.state_dict(), model_args=dict(n_layer=2, n_mixers=3)),
               path)
    message = error_of(checkpoint.load_model, str(tmp_path), "cpu")
    assert message.startswith(f"error: {path} does not fit this model.py (TypeError")
    assert "n_mixers" in message and message.endswith("train it again")


@pytest.mark.parametrize("edit, why", [
    (dict(meta=META | dict(tokenizer="foo")), "tokenizer 'foo'"),
    (dict(meta={k: v for k, v in META.items() if k != "chars"}), "0 characters in its table"),
    (dict(meta=META | dict(vocab_size=64, chars=[chr(97 + i) for i in range(64)])),
     "a vocabulary of 64 for a model of 48 tokens"),
    ("NaN", "transformer.h.1.attn.c_proj.weight holds NaN or inf")])
def test_a_checkpoint_a_reader_would_use_silently_wrong_is_one_line(tmp_path, capsys, edit, why):
    """What train.py never saves, from a file edited by hand (or an older normgpt's, which has no
    checksums to catch the edit): a tokenizer that is not one, a character table that is not the
    vocabulary, a vocabulary past the model's ids, weights that are not finite. sample.py and
    eval.py would decode, sample or score it without a word."""
    model, optimizer = tiny_run()
    if edit == "NaN":
        with torch.no_grad():
            model.transformer.h[1].attn.c_proj.weight[0, 0] = float("nan")
        edit = {}
    checkpoint.save_checkpoint(tmp_path, model, optimizer, fields(10) | edit, sharded=False,
                               master=True)
    mentions(error_of(checkpoint.load_model, str(tmp_path), "cpu"), str(tmp_path / "ckpt.pt"),
             "not a checkpoint train.py saved", why, "train it again")
    # without checksums, as an edited file often is: the error alone, not the notice before it
    (tmp_path / "ckpt.pt.crc32.json").unlink()
    capsys.readouterr()
    error_of(checkpoint.load_model, str(tmp_path), "cpu")
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("parallel, saved", [("ddp", "ckpt.pt"), ("fsdp", "ckpt")])
def test_a_run_saves_its_step_and_where_it_stands_and_says_so(tmp_path, capsys, monkeypatch,
                                                              parallel, saved):
    model, optimizer = tiny_run()
    cfg = SimpleNamespace(out_dir=str(tmp_path), parallel=parallel, dataset="chars")
    run = train.Progress(step=7, best_val=2.5, evaluated=None, saved=5)
    proc = SimpleNamespace(master=True, say=print)
    clock = iter([10.0, 12.25] * 2)
    monkeypatch.setattr(checkpoint, "time", SimpleNamespace(time=lambda: next(clock)))
    checkpoint.save_run(cfg, proc, model, optimizer, META, run)
    assert run.saved == 7 and checkpoint.find_checkpoint(tmp_path).name == saved  # fsdp's: sharded
    ckpt = checkpoint.load_checkpoint(str(tmp_path))
    assert ({k: ckpt[k] for k in ("iter_num", "evaluated", "best_val_loss", "config", "meta")}
            == dict(iter_num=7, evaluated=False, best_val_loss=2.5, config=vars(cfg), meta=META))
    assert ckpt["model_args"]["vocab_size"] == 48 and ckpt["model_args"]["n_embd"] == 16
    assert train.Progress.of(ckpt) == train.Progress(7, 2.5, None, 7)  # the evaluation still due
    said = capsys.readouterr().out
    assert said.count("\n") == 1
    mentions(said, "step 7", "2.2 s")  # the step saved and the seconds it took
    if parallel == "fsdp":
        return
    run.evaluated = 7
    checkpoint.save_run(cfg, SimpleNamespace(master=False, say=lambda *a, **k: None), model,
                        optimizer, META, run)
    # another process writes no ckpt.pt
    assert checkpoint.load_checkpoint(str(tmp_path))["evaluated"] is False


def test_a_checkpoint_that_does_not_fit_the_model_is_one_line_for_resume_and_for_readers(tmp_path):
    model, optimizer = tiny_run()
    save(tmp_path, model, optimizer, 10, sharded=False)
    from model import GPT, GPTConfig
    wider = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=8, vocab_size=48))
    message = error_of(checkpoint.restore, wider, torch.optim.AdamW(wider.parameters()),
                       checkpoint.load_checkpoint(str(tmp_path)), str(tmp_path))
    assert message.startswith(
        f"error: the checkpoint in {tmp_path} does not fit this model.py (RuntimeError")
    assert "size mismatch for transformer.wte.weight" in message
    assert message.endswith("resume with the model.py and model settings it was trained with")
    message = error_of(checkpoint.load_checkpoint, str(tmp_path / "none"))
    mentions(message, "init_from='resume'", str(tmp_path / "none"), "no checkpoint", "set out_dir",
             "from scratch")
    mentions(error_of(checkpoint.load_model, str(tmp_path / "none"), "cpu"), "no folder",
             f"python train.py --out_dir={tmp_path / 'none'}")
    (tmp_path / "a_file").write_text("")
    message = error_of(checkpoint.load_model, str(tmp_path / "a_file"), "cpu")
    mentions(message, f"{tmp_path / 'a_file'} is a file", "the out_dir train.py wrote")
    (tmp_path / "empty").mkdir()
    message = error_of(checkpoint.load_model, str(tmp_path / "empty"), "cpu")
    mentions(message, "no checkpoint", str(tmp_path / "empty"), "train.py", "evaluates")


def test_resume_checks_the_checkpoint_before_loading_it_and_one_that_does_not_load_is_one_line(
        tmp_path, capsys):
    model, optimizer = tiny_run()
    save(tmp_path, model, optimizer, 10, sharded=False)
    flip_a_bit(tmp_path / "ckpt.pt")
    mentions(error_of(checkpoint.load_checkpoint, str(tmp_path)), str(tmp_path / "ckpt.pt"),
             "checksum", "ckpt.pt.crc32.json", "copy it again", "train again")
    # another process: unchecked
    assert checkpoint.load_checkpoint(str(tmp_path), check=False)["iter_num"] == 10
    (tmp_path / "ckpt.pt").write_bytes(b"not a checkpoint")
    (tmp_path / "ckpt.pt.crc32.json").unlink()  # an older normgpt's: no checksums, loaded unchecked
    message = error_of(checkpoint.load_checkpoint, str(tmp_path))
    assert message.startswith(f"error: cannot read {tmp_path / 'ckpt.pt'} (RuntimeError")
    assert message.endswith("copy it again, or delete it and train with init_from='scratch'")
    # another program's weights, unchecked
    torch.save(dict(model=model.state_dict()), tmp_path / "ckpt.pt")
    message = error_of(checkpoint.load_checkpoint, str(tmp_path))
    assert ("is not train.py's checkpoint (no config, model_args, iter_num, best_val_loss)"
            in message)
    # its one line alone: no notice of missing checksums before it
    assert capsys.readouterr().err == ""
