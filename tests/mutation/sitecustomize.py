"""Mutation testing only (setup.cfg's [mutmut]): Python imports this file at the start of every
process that a test starts while mutmut runs, because pytest_plugin.py puts this folder on
PYTHONPATH; the normal suite never sees it.

mutmut 3 switches a mutant on by the environment variable MUTANT_UNDER_TEST
('train.x_main__mutmut_7'), which a test's subprocess inherits, and the subprocess runs the mutated
copy under mutants/ (the tests' ROOT there). Two gaps are closed here, for the subprocess and in the
test process alike:
- a file run as a script (python train.py, torchrun eval.py, runpy's run_name='__main__') is the
  module __main__, so no mutant of its own functions would ever switch on: they answer to the file's
  name instead;
- in the stats run (MUTANT_UNDER_TEST=stats), where mutmut learns which tests call which function,
  the calls made in a subprocess or a forked child are written to a file, and the plugin counts them
  for the test that started it: else a test that checks train.py through its command line would run
  against no mutant of it.
"""
import atexit
import functools
import inspect
import os
import uuid

# where the processes of the stats run write the functions they called
STATS_DIR = "NORMGPT_MUTMUT_STATS"


def follow_scripts():
    """The trampoline of a function of a file run as __main__ switches on the mutants of the file's
    module."""
    from mutmut.mutation import trampoline
    if getattr(trampoline, "follows_scripts", False):
        return
    wrap_in_trampoline = trampoline.wrap_in_trampoline

    def wrap(mutants, is_classmethod=False):
        decorate = wrap_in_trampoline(mutants, is_classmethod)

        def decorator(function):
            # pickle and the script's globals see wrapper: it stays in __main__
            wrapper = decorate(function)
            if function.__module__ != "__main__":
                return wrapper
            module = os.path.splitext(os.path.basename(function.__code__.co_filename))[0]
            # the trampoline compares this with MUTANT_UNDER_TEST's module
            function.__module__ = module

            # the stats run records the original's module (in mutants once called)
            def rename_original():
                original = mutants["_mutmut_orig"]
                # a classmethod's is bound
                getattr(original, "__func__", original).__module__ = module

            if inspect.isgeneratorfunction(wrapper):
                @functools.wraps(wrapper)
                def named(*args, **kwargs):
                    rename_original()
                    return (yield from wrapper(*args, **kwargs))
            else:
                @functools.wraps(wrapper)
                def named(*args, **kwargs):
                    rename_original()
                    return wrapper(*args, **kwargs)
            return named
        return decorator

    trampoline.wrap_in_trampoline = wrap
    trampoline.follows_scripts = True


def record_to_file():
    """In the stats run: this process's calls of mutated functions go to a file of STATS_DIR at
    exit."""
    from mutmut.mutation import trampoline
    called = set()
    trampoline.record_trampoline_hit = lambda name, caller=None: called.add(name)

    def write():
        if called:
            path = os.path.join(os.environ[STATS_DIR], f"{os.getpid()}-{uuid.uuid4().hex}.txt")
            with open(path + ".tmp", "w") as f:
                f.write("\n".join(sorted(called)))
            os.replace(path + ".tmp", path)
            called.clear()  # once, whichever of the two runs first

    atexit.register(write)  # a process that exits normally
    # a forked multiprocessing child leaves by os._exit, after its finalizers
    import multiprocessing.util

    def finalize(_):
        multiprocessing.util.Finalize(None, write, exitpriority=0)

    finalize(None)
    # a multiprocessing Process clears the finalizers it forked with, then runs the after-fork
    # hooks: once more
    multiprocessing.util.register_after_fork(write, finalize)


def record_forked_children():
    """A child forked in the stats run (test_reliability's, prepare_data's pool) records to a file
    too."""
    from mutmut.mutation.trampoline import get_mutant_under_test

    def in_child():
        if get_mutant_under_test() == "stats" and os.environ.get(STATS_DIR):
            record_to_file()

    os.register_at_fork(after_in_child=in_child)


def start():
    """What every process started under mutmut does first."""
    mode = os.environ.get("MUTANT_UNDER_TEST")
    if mode is None:
        return
    follow_scripts()
    if mode == "stats" and os.environ.get(STATS_DIR):
        record_to_file()
    record_forked_children()


if __name__ == "sitecustomize":
    start()
