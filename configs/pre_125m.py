"""Pre-LN, x + f(LN(x)): GPT-2's and nanoGPT's, at GPT-2 small scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/pre_125m.py
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "pre"
out_dir = "out/pre_125m"
