"""DeepNorm, LN(alpha x + f(x)) with DeepNet's init, at GPT-2 small scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/deep_125m.py
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "deep"
out_dir = "out/deep_125m"
