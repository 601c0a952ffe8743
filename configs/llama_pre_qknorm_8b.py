"""SimpleGPT's 8B baseline: Llama 3 8B with pre-norm and QK-norm, at its released preqknorm.toml's
lr 1e-3 and weight decay 0.05 (the same as SimpleGPT's; see llama_pre_qknorm_7b.py for plain
pre-norm's rate).
    torchrun --standalone --nproc_per_node=8 train.py configs/llama_pre_qknorm_8b.py
"""
# the settings the two llama_*_8b configs share, and their sources
from configs.base_llama3_8b import *

norm_mode = "pre"
qk_norm = True
out_dir = "out/llama_pre_qknorm_8b"
