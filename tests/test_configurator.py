"""configurator.py: a settings block read from the file is what Python runs, and only train.py imports train.py."""
import ast
import inspect
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import configurator
import sample
import train
from conftest import ROOT, error_of


@pytest.mark.parametrize("script", [train, sample])
def test_the_settings_read_from_the_file_are_those_python_runs(script):
    settings, hints = configurator.read_settings(script.__file__), inspect.get_annotations(script)
    assert len(settings) > 10
    for name, (default, kinds) in settings.items():
        assert getattr(script, name) == default and type(getattr(script, name)) is type(default), name
        assert kinds == (typing.get_args(hints[name]) if name in hints else (type(default),)), name


def test_no_script_but_train_imports_train():
    for path in Path(ROOT).glob("*.py"):
        tree = ast.parse(path.read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert "train" not in imported, path.name
    check = "import sys, ablate, bench, sample; assert 'train' not in sys.modules, 'imported through another module'"
    result = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("script", ["sample.py", "bench.py", "ablate.py"])
def test_help_prints_the_scripts_docstring_and_exits_0(script):
    doc = ast.get_docstring(ast.parse((Path(ROOT) / script).read_text()))
    result = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stderr == ""
    assert doc.splitlines()[0] in result.stdout


def test_help_into_a_pipe_closed_early_exits_0_without_a_traceback():
    """As `python sample.py --help | head -1` does when head has read its line: the pipe is closed here before
    the text is written, so that the first write fails."""
    read, write = os.pipe()
    os.close(read)
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # as Python's default
    result = subprocess.run([sys.executable, "sample.py", "--help"], cwd=ROOT, stdout=write, stderr=subprocess.PIPE,
                            text=True, timeout=120, env=buffered)
    os.close(write)
    assert (result.returncode, result.stderr) == (0, "")


def test_a_config_file_that_fails_to_run_is_one_line_naming_the_file_and_the_error(tmp_path):
    config = tmp_path / "small.py"
    config.write_text("n_layer = 2\nn_head = n_heads\n")
    assert error_of(configurator.read_config_file, config) == (
        f"error: config file {config}: NameError: name 'n_heads' is not defined")
