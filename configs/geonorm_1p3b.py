"""GeoNorm at 1.3B: 24 layers, 16 heads, 2048 wide; otherwise base_125m's run.
    torchrun --standalone --nproc_per_node=8 train.py configs/geonorm_1p3b.py
"""
from configs.base_125m import *  # data, tokens per step, schedule and evaluation as at 125M

norm_mode = "geonorm"
n_layer = 24
n_head = 16
n_embd = 2048
# per GPU, to fit 80 GB next to the fp32 geodesic steps; accumulation keeps 131,072 tokens/step
batch_size = 16
learning_rate = 2e-4  # GPT-3's for this size
min_lr = 2e-5
out_dir = "out/geonorm_1p3b"
