"""configurator.py: a settings block read from the file is what Python runs, and only train.py imports train.py."""
import ast
import inspect
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import configurator
import measure
import sample
import train
from conftest import ROOT


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


@pytest.mark.parametrize("gpu, peak", [  # names as torch.cuda.get_device_name gives them
    ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H100 NVL", 835e12),
    ("NVIDIA H200", 989e12), ("NVIDIA H200 NVL", 835e12), ("NVIDIA GH200 480GB", 989e12), ("NVIDIA H20", 148e12),
    ("NVIDIA B200", 2250e12), ("NVIDIA A100-SXM4-80GB", 312e12), ("NVIDIA A100-PCIE-40GB", 312e12),
    ("NVIDIA A10", 125e12), ("NVIDIA L4", 121e12), ("NVIDIA L40", 181e12), ("NVIDIA L40S", 362e12),
    ("NVIDIA GeForce RTX 4090", 165e12), ("NVIDIA GeForce RTX 3090", 71e12), ("NVIDIA RTX 6000 Ada Generation", 364e12),
    ("NVIDIA A10G", None), ("Tesla V100-SXM2-16GB", None)])  # not in the table: no MFU rather than a wrong one
def test_the_peak_flops_of_a_gpu_are_its_longest_matching_names(gpu, peak):
    assert measure.peak_flops_of(gpu) == peak
