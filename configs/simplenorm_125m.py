"""SimpleNorm, an RMSNorm after every linear map (SimpleGPT), at GPT-2 small scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/simplenorm_125m.py
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "simplenorm"
# 3 x 6e-4: SimpleGPT trains nanoGPT at 3x the baseline rate (docs/spec.md §7.2)
learning_rate = 1.8e-3
min_lr = 1.8e-4
out_dir = "out/simplenorm_125m"
