"""SimpleGPT 8B on the Llama 3 8B block (the paper's §5.4).
    torchrun --standalone --nproc_per_node=8 train.py configs/llama_simplenorm_8b.py
"""
# the settings the two llama_*_8b configs share, and their sources
from configs.base_llama3_8b import *

norm_mode = "simplenorm"
out_dir = "out/llama_simplenorm_8b"
