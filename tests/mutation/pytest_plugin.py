"""Mutation testing only: the pytest plugin that setup.cfg's [mutmut] loads into every test run of
mutmut (its stats run, the clean run, one run per mutant), in the copy of the repository under
mutants/. The normal suite never loads it. It
- runs each mutant in the processes the tests start too: sitecustomize.py, put on their PYTHONPATH
  (also where a test empties PYTHONPATH to run a script as a user would), follows scripts run as
  __main__ and, in the stats run, reports the functions such a process called, counted here for the
  test that started it;
- points the copy at the checkout's ../shared (tests/conftest.py looks beside the copy, inside the
  checkout);
- runs a mutant's tests cheapest module first, fastest test first, as timed in the stats run, so
  that a killed mutant stops (pytest -x) at its first failing test soon.
"""
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent  # mutants/tests/mutation
COPY = HERE.parents[1]  # mutants/
# what tests/conftest.py finds in the checkout: its ../shared
SHARED = COPY.parent.parent / "shared"
COSTS = COPY / "normgpt-test-seconds.json"  # each test's setup + call + teardown in the stats run

# this folder's sitecustomize.py, which the subprocesses import at start-up, under a name of its own
_spec = importlib.util.spec_from_file_location("normgpt_mutmut_hooks", HERE / "sitecustomize.py")
hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hooks)

hooks.follow_scripts()
hooks.record_forked_children()
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])
if (SHARED / "tiktoken_cache").is_dir():
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken_cache"))

_popen_init = subprocess.Popen.__init__


def _popen_init_with_hooks(self, *args, **kwargs):
    """A test's own environment for a subprocess (made from os.environ) keeps this folder on
    PYTHONPATH."""
    env = kwargs.get("env")
    if env is not None and "MUTANT_UNDER_TEST" in env:
        paths = env.get("PYTHONPATH", "").split(os.pathsep)
        if str(HERE) not in paths:
            kwargs["env"] = {**env,
                             "PYTHONPATH": os.pathsep.join([str(HERE), *filter(None, paths)])}
    _popen_init(self, *args, **kwargs)


subprocess.Popen.__init__ = _popen_init_with_hooks


def stats_run():
    from mutmut.mutation.trampoline import get_mutant_under_test
    return get_mutant_under_test() == "stats"


_seconds = None  # in the stats run: {test id: its setup + call + teardown}


def quiet_while_compiling():
    """The stats run's bookkeeping in each trampoline (a ContextVar, a set) stops
    torch.compile(fullgraph=True), as a graph break does: it is skipped while dynamo traces (the
    same test's eager calls are recorded)."""
    import torch
    from mutmut.core import MutmutCallStack
    from mutmut.mutation import trampoline
    if getattr(trampoline, "quiet_while_compiling", False):
        return
    compiling, record = torch.compiler.is_compiling, trampoline.record_trampoline_hit

    class CallStack(MutmutCallStack):
        @classmethod
        def get(cls):
            return (None, 0) if compiling() else MutmutCallStack.get()

        @classmethod
        def set(cls, value):
            return None if compiling() else MutmutCallStack.set(value)

        @classmethod
        def reset(cls, token):
            if token is not None:
                MutmutCallStack.reset(token)

    def record_hit(name, caller=None):
        if not compiling():
            record(name, caller=caller)

    trampoline.MutmutCallStack, trampoline.record_trampoline_hit = CallStack, record_hit
    trampoline.quiet_while_compiling = True


def restore_signals():
    """Python's own handlers in a test process. mutmut's fork server ignores SIGINT and answers
    SIGTERM by SIGKILLing the mutants it runs; each mutant's process inherits both, and so do the
    workers of a multiprocessing pool that a test forks (prepare_data's). The pool's terminate()
    sends its workers SIGTERM, and they killed the other mutant running beside this one: exit -9,
    which mutmut reports as "segfault" (and the idle workers stayed behind, waiting on their queue).
    In the fork server itself this runs first: mutmut installs its handlers after collecting the
    tests."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)


def pytest_configure(config):
    global _seconds
    restore_signals()
    conftest = sys.modules.get("conftest")
    if conftest is not None and not conftest.SHARED.is_dir() and SHARED.is_dir():
        conftest.SHARED = SHARED
    if stats_run():
        quiet_while_compiling()
        os.environ[hooks.STATS_DIR] = tempfile.mkdtemp(prefix="mutmut-stats-")
        _seconds = {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item):
    """Before mutmut's own teardown hook reads them: the calls the test's subprocesses wrote."""
    folder = os.environ.get(hooks.STATS_DIR)
    if not folder or not stats_run():
        return
    from mutmut.state import state
    for path in Path(folder).glob("*.txt"):
        state()._stats.update(path.read_text().split())
        path.unlink()


def pytest_runtest_logreport(report):
    if _seconds is not None:
        _seconds[report.nodeid] = _seconds.get(report.nodeid, 0.0) + report.duration


def pytest_unconfigure(config):
    global _seconds
    # added to the earlier stats runs' (mutmut runs stats again for tests it has not seen)
    if _seconds:
        earlier = json.loads(COSTS.read_text()) if COSTS.is_file() else {}
        COSTS.write_text(json.dumps(earlier | _seconds, indent=0))
    _seconds = None
    folder = os.environ.pop(hooks.STATS_DIR, None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


def chosen(entries, nodeid):
    """Whether NORMGPT_MUTATE_TESTS's entries choose a test: the most specific entry that names it
    decides, its case (file::test[params]), its test (file::test) or its file; one with a leading
    '-' leaves it out."""
    for name in (nodeid, nodeid.split("[")[0], nodeid.split("::")[0]):
        if name in entries or "-" + name in entries:
            return name in entries
    return False


def pytest_collection_modifyitems(config, items):
    """Only the tests NORMGPT_MUTATE_TESTS chooses (entries by spaces: see chosen), when it is set:
    a file's mutants against the tests written for it, in minutes rather than the whole suite's
    hours. A mutant's tests: the module that cost least in the stats run first (its fixtures are set
    up once), and within a module the fastest first."""
    if entries := set(os.environ.get("NORMGPT_MUTATE_TESTS", "").split()):
        kept = {i: chosen(entries, i.nodeid) for i in items}
        config.hook.pytest_deselected(items=[i for i in items if not kept[i]])
        items[:] = [i for i in items if kept[i]]
    if stats_run() or not COSTS.is_file():
        return
    seconds = json.loads(COSTS.read_text())
    module_seconds = {}
    for nodeid, s in seconds.items():
        module = nodeid.split("::")[0]
        module_seconds[module] = module_seconds.get(module, 0.0) + s
    def order(item):
        module = item.nodeid.split("::")[0]
        return module_seconds.get(module, 0.0), module, seconds.get(item.nodeid, 0.0)

    items.sort(key=order)
