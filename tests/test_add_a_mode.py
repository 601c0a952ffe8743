"""docs/modes.md's "Adding a norm mode" holds: its SkipInit diff applies to this checkout and the
new mode passes every test that runs for each mode; with its branch broken (x returned unchanged, or
the residual dropped) they fail. Each case patches a copy of the repository in tmp_path and runs
pytest -k skipinit on it, in a subprocess."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from model import ARCHS, NORM_MODES

ROOT = Path(__file__).resolve().parents[1]
MODE = "skipinit"
BRANCH = "+            return x + lr * f(x)\n"  # the diff's line in Block.join
BROKEN = {"x unchanged": "+            return x\n",
          "no residual": "+            return lr * f(x)\n"}

pytestmark = pytest.mark.skipif(shutil.which("git") is None,
                                reason="git apply applies the worked diff")


def worked_diff():
    """The ```diff block of docs/modes.md's section "Adding a norm mode"."""
    section = (ROOT / "docs" / "modes.md").read_text().split(
        "\n## Adding a norm mode\n")[1].split("\n## ")[0]
    [diff] = re.findall(r"^```diff\n(.*?)^```$", section, re.S | re.M)
    return diff


def patched_copy(tmp_path, diff):
    """A copy of the repository with diff applied."""
    copy = tmp_path / "normgpt"
    shutil.copytree(ROOT, copy,
                    ignore=shutil.ignore_patterns(".git", "data", "out*", "docs", "__pycache__",
                                                  ".*cache", "mutants"))  # mutmut's copy
    # data and tokenizer files beside the checkout (tests/conftest.py)
    if (ROOT.parent / "shared").is_dir():
        (tmp_path / "shared").symlink_to(ROOT.parent / "shared")
    # git apply takes paths from the copy's root
    subprocess.run(["git", "init", "-q"], cwd=copy, check=True, timeout=60)
    applied = subprocess.run(["git", "apply", "-"], input=diff, cwd=copy, capture_output=True,
                             text=True, timeout=60)
    assert applied.returncode == 0, \
        f"the worked diff does not apply to this checkout:\n{applied.stderr}"
    return copy


# a plugin for the copy's pytest: every test it collected, before -k deselects, one id a line in
# collected.txt
COLLECTED = """
import pytest
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    with open("collected.txt", "w") as f:
        f.writelines(item.nodeid + "\\n" for item in items)
"""


def pytest_on(copy, select, *args, path="tests"):
    """pytest -k select on the copy's tests but this file's: the output, which lists each test id
    with PASSED, FAILED, ERROR or SKIPPED; collected.txt in the copy lists every test collected."""
    (copy / "collected_ids.py").write_text(COLLECTED)
    # --assert=plain: only the outcomes are read, and rewriting every test file's asserts costs
    # seconds of a collection, each time (the copy has no cache)
    return subprocess.run([sys.executable, "-m", "pytest", path,
                           "--ignore=tests/test_add_a_mode.py", "-p", "no:cacheprovider", "-p",
                           "collected_ids", "--assert=plain", "-k", select, *args],
                          cwd=copy, capture_output=True, text=True,
                          env=os.environ | {"OMP_NUM_THREADS": "1"}, timeout=900).stdout


def outcomes(output):
    return dict(re.findall(r"^(tests/\S+) (PASSED|FAILED|ERROR|SKIPPED)", output, re.M))


def test_the_worked_diff_applies_as_printed_every_hunk_at_its_own_line():
    """git apply finds a hunk a few lines away from where its header says; a reader does not. Each
    hunk's context and removed lines are the file's lines from the header's line number on."""
    diff = worked_diff()
    hunks = 0
    for path, body in re.findall(r"^--- a/(\S+)\n\+\+\+ b/\S+\n(.*?)(?=^diff |\Z)", diff,
                                 re.S | re.M):
        lines = (ROOT / path).read_text().splitlines()
        for start, hunk in re.findall(r"^@@ -(\d+),\d+ \+\d+,\d+ @@.*\n((?:[ +-].*\n)*)", body,
                                      re.M):
            old = [line[1:] for line in hunk.splitlines() if line[:1] in (" ", "-")]
            at = int(start) - 1
            assert lines[at:at + len(old)] == old, f"{path}: the hunk at line {start} is elsewhere"
            hunks += 1
    assert hunks >= 4


def test_the_worked_diff_adds_skipinit_and_it_passes_every_test_that_runs_for_each_mode(tmp_path):
    copy = patched_copy(tmp_path, worked_diff())
    output = pytest_on(copy, MODE, "-v")
    ran = outcomes(output)
    # the tests that run for each mode this checkout has (its NORM_MODES): the mode first among
    # their parameters
    modes = {}
    listed = (copy / "collected.txt").read_text()
    for test, mode, rest in re.findall(r"^(tests/\S+)\[(\w+)(\S*)$", listed, re.M):
        modes.setdefault((test, rest), set()).add(mode)
    for_new = {f"{test}[{MODE}{rest}" for (test, rest), ran in modes.items()
               if set(NORM_MODES) <= ran}
    assert len(for_new) > 10 and for_new <= set(ran), f"not run for {MODE}: {for_new - set(ran)}"
    assert set(ran.values()) == {"PASSED"}, output[-3000:]
    assert any(t.startswith(f"tests/test_model.py::test_{MODE}_") for t in ran), \
        "its own test did not run"


@pytest.mark.parametrize("broken, fails", [
    ("x unchanged",
     ["test_every_block_changes_x_through_its_sub_layers", "test_gradients_are_finite"]),
    ("no residual", ["test_every_join_keeps_x_when_its_sub_layer_is_zero"]),
])
def test_a_broken_branch_fails_the_tests_of_every_mode(tmp_path, broken, fails):
    diff = worked_diff()
    assert diff.count(BRANCH) == 1, \
        "the worked diff no longer has the branch this test breaks: update BRANCH"
    copy = patched_copy(tmp_path, diff.replace(BRANCH, BROKEN[broken]))
    # the tests of every mode that should catch it, for the new mode only (the others are unchanged)
    output = pytest_on(copy, f"{MODE} and ({' or '.join(fails)})", "-v", path="tests/test_model.py")
    failed = {test for test, outcome in outcomes(output).items() if outcome == "FAILED"}
    expected = {f"tests/test_model.py::{name}[{MODE}-{arch}]" for name in fails for arch in ARCHS}
    assert expected <= failed, output[-3000:]
