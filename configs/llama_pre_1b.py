"""Plain pre-norm Llama 2 "1B" (SimpleGPT's prenorm_model.py), x + f(RMSNorm(x)).
    torchrun --standalone --nproc_per_node=8 train.py configs/llama_pre_1b.py
"""
# the settings the four llama_*_1b configs share, and their sources
from configs.base_llama_1b import *

norm_mode = "pre"
out_dir = "out/llama_pre_1b"
