"""SimpleGPT's baseline at 1B: a Llama 2 "1B" block with pre-norm and QK-norm (its
preqknorm_model.py), RMSNorm on q and k over all heads, before the rotary embedding.
    torchrun --standalone --nproc_per_node=8 train.py configs/llama_pre_qknorm_1b.py
"""
# the settings the four llama_*_1b configs share, and their sources
from configs.base_llama_1b import *

norm_mode = "pre"
qk_norm = True
out_dir = "out/llama_pre_qknorm_1b"
