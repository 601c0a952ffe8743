"""GeoNorm at GPT-2 medium scale (350M): 24 layers, 16 heads, 1024 wide; otherwise base_125m's run.
    torchrun --standalone --nproc_per_node=8 train.py configs/geonorm_350m.py
"""
from configs.base_125m import *  # data, batch, schedule and evaluation as at 125M

norm_mode = "geonorm"
n_layer = 24
n_head = 16
n_embd = 1024
learning_rate = 3e-4  # GPT-3's for this size
min_lr = 3e-5
out_dir = "out/geonorm_350m"
