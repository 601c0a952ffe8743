"""checkpoint.py's pieces, each against what its readers rely on, without training: which checkpoint a folder
holds, the checksums and their record, the resume checks' one-line errors, where a run stands, what is deleted,
and a run's log as ablate.py reads it. The whole save → kill → load path is tests/test_reliability.py's."""
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
from conftest import ROOT, error_of


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
    assert error_of(checkpoint.find_checkpoint, tmp_path) == (
        f"error: {tmp_path / 'ckpt'} is a dangling link: the folder it points at, ckpt-40, is gone; put the folder "
        "back, or delete the link")


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
    assert sums == {"a.bin": dict(bytes=2560, crc32=[zlib.crc32(data[i:i + 1000]) for i in (0, 1000, 2000)]),
                    "empty": dict(bytes=0, crc32=[zlib.crc32(b"")]),
                    "one": dict(bytes=1000, crc32=[zlib.crc32(data[:1000])])}


def test_a_checkpoint_matches_its_record_or_the_previous_file_it_replaced(tmp_path):
    path = tmp_path / "ckpt.pt"
    assert checkpoint.verify(path) is False  # no record: an older normgpt's
    path.write_bytes(b"new weights")
    record = dict(files=checkpoint.checksums([path]))
    path.write_bytes(b"old weights, longer")  # a kill between the record and the rename: the old file is there
    record["previous"] = checkpoint.checksums([path])
    checkpoint.sums_path(path).write_text(json.dumps(record))
    assert checkpoint.verify(path) is True
    path.write_bytes(b"new weights")
    assert checkpoint.verify(path) is True
    path.write_bytes(b"new weighTs")  # a byte flipped: neither
    fix = "copy it again, or delete the checkpoint and train again"
    assert error_of(checkpoint.verify, path) == (f"error: {path} is damaged: its checksum differs from the one "
                                                 f"recorded at its save (ckpt.pt.crc32.json); {fix}")
    path.write_bytes(b"new weight")
    assert error_of(checkpoint.verify, path) == (f"error: {path} has 10 bytes, 11 when saved: it is cut short or "
                                                 f"damaged; {fix}")
    path.unlink()
    assert error_of(checkpoint.verify, path) == (f"error: {path} is missing from the checkpoint (ckpt.pt.crc32.json "
                                                 f"lists it): {fix}")
    for broken, why in [("{", "JSONDecodeError: Expecting property name enclosed in double quotes"),
                        ("{}", "KeyError: 'files'"), ("[]", "TypeError: list indices must be integers"),
                        ('{"files": []}', "AttributeError: 'list' object has no attribute 'items'"),
                        ('{"files": {"ckpt.pt": 11}}', "TypeError: 'int' object is not subscriptable"),
                        ('{"files": {"ckpt.pt": {}}}', "KeyError: 'bytes'")]:
        checkpoint.sums_path(path).write_text(broken)
        message = error_of(checkpoint.verify, path)
        assert message.startswith(f"error: {checkpoint.sums_path(path)} is not a checksum record ({why}")
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
    assert error_of(checkpoint.verify, folder).startswith(f"error: {folder / '.metadata'} is damaged: ")


def test_the_prefixes_of_compile_and_ddp_are_taken_off_the_front_of_each_key_only():
    weights = {"_orig_mod.module._orig_mod.h.0.w": 1, "module.wte": 2, "lm_head": 3, "h.module.w": 4,
               "_orig_mod.h._orig_mod.b": 5}
    assert checkpoint.unprefixed(weights) == {"h.0.w": 1, "wte": 2, "lm_head": 3, "h.module.w": 4, "h._orig_mod.b": 5}


@pytest.mark.parametrize("meta, token", [
    (dict(eot_token=50256, chars=None), 50256),
    (dict(eot_token=0, chars=["a", "\n"]), 0),  # a token id of 0 is a token
    (dict(eot_token=None, chars=[" ", "\n", "a"]), 1),
    (dict(eot_token=None, chars=[" ", "a"]), None),
])
def test_a_text_starts_after_endoftext_else_the_newline(meta, token):
    assert checkpoint.start_token(meta) == token


def resume_check(tmp_path, given, max_iters, events=(), evaluated=True):
    """check_resume on a checkpoint of step 100 (4 blocks, dropout 0.1) with events in out_dir's log."""
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    ckpt = dict(model_args=dict(n_layer=4, dropout=0.1, norm_mode="pre"), iter_num=100)
    ckpt |= {} if evaluated is None else dict(evaluated=evaluated)  # None: an older checkpoint, without it
    return checkpoint.check_resume(ckpt, given, SimpleNamespace(out_dir=str(tmp_path), max_iters=max_iters))


def test_a_resume_goes_on_with_the_checkpoints_model_but_its_dropout(tmp_path):
    assert resume_check(tmp_path, dict(n_layer=4, dropout=0.0, learning_rate=1.0, norm_mode="pre"), 200) is None
    assert error_of(resume_check, tmp_path, dict(dropout=0.0, norm_mode="geonorm"), 200) == (
        f"error: norm_mode='geonorm', but the checkpoint in {tmp_path} has norm_mode='pre': a resume goes on with "
        "the checkpoint's model; drop --norm_mode, or train a new one in another out_dir")


END = dict(event="end", status="finished", iter=100)
EVAL = dict(event="eval", iter=100, val_loss=2.0)


@pytest.mark.parametrize("max_iters, events, evaluated, refused", [
    (99, [EVAL, END], True, True),
    (99, [EVAL], False, True),  # below the checkpoint's step: whatever its log says
    (100, [EVAL, END], True, True),  # at it, evaluated and ended: nothing left
    (100, [EVAL], True, False),  # not ended: the resume records the end
    (100, [END, EVAL], True, False),  # the end is not the last event
    (100, [EVAL, END], False, False),  # its evaluation was skipped by a stop: the resume makes it up
    (100, [EVAL, END], None, True),  # an older checkpoint's step was evaluated
    (100, [END, EVAL, END], True, True),  # only the last event counts
    (101, [EVAL, END], True, False),
])
def test_a_resume_with_nothing_to_train_evaluate_or_record_is_one_line(tmp_path, max_iters, events, evaluated,
                                                                       refused):
    if not refused:
        assert resume_check(tmp_path, {}, max_iters, events, evaluated) is None
        return
    assert error_of(resume_check, tmp_path, {}, max_iters, events, evaluated) == (
        f"error: nothing to train: the checkpoint in {tmp_path} is at step 100 already, and max_iters={max_iters}: "
        "give a max_iters above 100 to go on")


def test_a_resume_on_another_vocabulary_is_one_line_naming_both_datasets(tmp_path):
    chars = dict(tokenizer="char", vocab_size=65, eot_token=None, chars=list("abc"))
    ckpt = dict(meta=chars | dict(extra="ignored"), config=dict(dataset="shakespeare_char"))
    cfg = SimpleNamespace(out_dir=str(tmp_path), dataset="other")
    assert checkpoint.check_vocabulary(ckpt, cfg, chars) is None
    assert checkpoint.check_vocabulary(dict(config={}), cfg, chars) is None  # an older checkpoint: no meta
    for change in [dict(chars=list("abd")), dict(vocab_size=66), dict(eot_token=0), dict(tokenizer="gpt2")]:
        assert error_of(checkpoint.check_vocabulary, ckpt, cfg, chars | change) == (
            f"error: the checkpoint in {tmp_path} was trained on shakespeare_char (char, 65 tokens), but other has "
            f"another vocabulary ({(chars | change)['tokenizer']}, {(chars | change)['vocab_size']} tokens): its "
            "token ids would mean other text; resume with --dataset=shakespeare_char")


def test_where_a_run_stands_from_scratch_and_from_a_checkpoint():
    assert checkpoint.Progress.of(None) == checkpoint.Progress(0, math.inf, None, None)
    ckpt = dict(iter_num=500, best_val_loss=1.5)
    assert checkpoint.Progress.of(ckpt) == checkpoint.Progress(500, 1.5, 500, 500)
    assert checkpoint.Progress.of(ckpt | dict(evaluated=False)) == checkpoint.Progress(500, 1.5, None, 500)


def test_only_the_checkpoints_not_kept_are_deleted_links_before_their_folders(tmp_path):
    for name in ("ckpt.pt", "ckpt.pt.crc32.json", "ckpt.pt.tmp", "log.jsonl", "ckpt-notes.txt"):
        (tmp_path / name).write_text("x")
    for folder in ("ckpt-10", "ckpt-20"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "shard").write_text("x")
    (tmp_path / "ckpt").symlink_to("ckpt-10")
    checkpoint.remove_checkpoints(tmp_path, keep={"ckpt", "ckpt-10"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "ckpt-10", "ckpt.pt.tmp", "log.jsonl"]
    (tmp_path / "ckpt-10" / "shard").unlink()
    (tmp_path / "ckpt-10").rmdir()  # the link left dangling: deleted as a link
    checkpoint.remove_checkpoints(tmp_path, keep=set())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt.tmp", "log.jsonl"]


def write_log(folder, events):
    folder.mkdir(exist_ok=True)
    (folder / "log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def test_a_runs_log_read_as_ablate_reads_it(tmp_path):
    stats = dict(event="layer_stats", iter=0, grad_norm=[1.0])
    events = [dict(event="eval", iter=0, val_loss=4.0), stats, dict(event="train", iter=5, tokens_per_s=None),
              dict(event="train", iter=10, tokens_per_s=100.0), dict(event="eval", iter=10, val_loss=2.0),
              dict(event="train", iter=15, tokens_per_s=300.0), dict(event="train", iter=18, tokens_per_s=800.0),
              dict(event="eval", iter=20, val_loss=2.5),
              dict(event="end", status="finished", iter=20)]
    write_log(tmp_path, events)
    (tmp_path / "seconds.json").write_text(json.dumps(dict(seconds=12.5)))
    assert checkpoint.read_log(tmp_path) == dict(
        status="finished", iter=20, evals=[(0, 4.0), (10, 2.0), (20, 2.5)], seconds=12.5, stats=[stats],
        final_val_loss=2.5, best_val_loss=2.0, tokens_per_s=400.0)  # the mean of the timed
    write_log(tmp_path, events[:-2] + [dict(event="eval", iter=20, val_loss=math.nan), events[-1]])
    assert checkpoint.read_log(tmp_path)["status"] == "diverged"  # a finite training loss, not the evaluation's
    write_log(tmp_path, [dict(event="end", status="diverged", iter=3)])
    (tmp_path / "seconds.json").unlink()
    assert checkpoint.read_log(tmp_path) == dict(status="diverged", iter=3, evals=[], seconds=None, stats=[],
                                                 final_val_loss=None, best_val_loss=None, tokens_per_s=None)


def test_a_run_not_started_reads_as_not_run_and_one_that_stopped_short_as_failed(tmp_path):
    folders = {name: tmp_path / name for name in ("empty", "crashed", "cut", "interrupted", "logged")}
    for folder in folders.values():
        folder.mkdir()
    (folders["crashed"] / "train.log").write_text("Traceback (most recent call last):\n")
    first = json.dumps(dict(event="eval", iter=0, train_loss=4.0, val_loss=4.0, lr=0.0)) + "\n"
    (folders["cut"] / "log.jsonl").write_text(first)
    (folders["interrupted"] / "log.jsonl").write_text(first + json.dumps(dict(event="end", status="interrupted",
                                                                              iter=0)) + "\n")
    (folders["logged"] / "log.jsonl").write_text("")  # started, and crashed before its first line
    statuses = {name: checkpoint.read_log(folder)["status"] for name, folder in folders.items()}
    assert statuses == dict(empty="not run", crashed="failed", cut="failed", interrupted="interrupted",
                            logged="failed")
    assert checkpoint.read_log(tmp_path / "no_folder")["status"] == "not run"


def test_a_log_line_cut_short_by_a_crash_is_left_out_and_trimming_keeps_each_step_once(tmp_path):
    write_log(tmp_path, [dict(event="eval", iter=0), dict(event="train", iter=5), dict(event="eval", iter=10),
                         dict(event="end", status="interrupted", iter=10), dict(event="train", iter=15)])
    with open(tmp_path / "log.jsonl", "a") as f:
        f.write('{"event": "train", "it')
    assert [e["iter"] for e in checkpoint.read_events(tmp_path / "log.jsonl")] == [0, 5, 10, 10, 15]
    checkpoint.trim_log(tmp_path / "log.jsonl", 10)
    assert checkpoint.read_events(tmp_path / "log.jsonl") == [dict(event="eval", iter=0), dict(event="train", iter=5),
                                                              dict(event="eval", iter=10)]
    assert checkpoint.read_events(tmp_path / "missing.jsonl") == []


def test_a_run_is_evaluated_when_its_eval_json_has_the_tasks_and_limit_asked_for(tmp_path):
    asked = dict(tasks="hellaswag,piqa", limit=100)
    assert not checkpoint.evaluated(tmp_path, asked)
    (tmp_path / "eval.json").write_text(json.dumps(dict(settings=dict(tasks="hellaswag,piqa", limit=100, seed=1))))
    assert checkpoint.evaluated(tmp_path, asked) and checkpoint.evaluated(tmp_path, asked | dict(seed=2))
    assert not checkpoint.evaluated(tmp_path, asked | dict(limit=None))
    assert not checkpoint.evaluated(tmp_path, asked | dict(tasks="hellaswag"))


def test_the_provenance_names_the_code_s_revision_wherever_it_runs_and_the_libraries(tmp_path, monkeypatch):
    revision = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip() or None  # None outside a git checkout
    monkeypatch.chdir(tmp_path)  # run from elsewhere: the revision is the code's, not the working folder's
    p = checkpoint.provenance()
    assert p == dict(git=revision, python=sys.version.split()[0], torch=torch.__version__,
                     numpy=numpy.__version__, cuda=torch.version.cuda)

    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")
    monkeypatch.setattr(subprocess, "run", no_git)
    assert checkpoint.provenance()["git"] is None
