"""Post-LN, LN(x + f(x)): the original Transformer's, at GPT-2 small scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/post_125m.py
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "post"
out_dir = "out/post_125m"
