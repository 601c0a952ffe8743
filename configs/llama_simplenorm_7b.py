"""SimpleGPT 7B (Llama 2 7B block, an RMSNorm after every linear map, no pre-norm): the paper's
headline run, 0.08 lower training loss than pre+QK-norm at 60k steps (its §5.3; 0.062 at the 20k
steps configured here).
    torchrun --standalone --nproc_per_node=8 train.py configs/llama_simplenorm_7b.py
"""
# the settings the two llama_*_7b configs share, and their sources
from configs.base_llama_7b import *

norm_mode = "simplenorm"
out_dir = "out/llama_simplenorm_7b"
