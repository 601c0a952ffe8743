"""Sandwich-LN, x + LN(f(LN(x))): CogView's, at GPT-2 small scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/sandwich_125m.py
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "sandwich"
out_dir = "out/sandwich_125m"
