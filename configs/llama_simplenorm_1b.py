"""SimpleGPT at 1B, as its released code builds it (simplegpt_model.py): no pre-norm, an RMSNorm
after every linear map of the Llama 2 "1B" block (q, k, v, o, W₁, W₃, W₂), rotary after the q and k
norms.
    torchrun --standalone --nproc_per_node=8 train.py configs/llama_simplenorm_1b.py
"""
# the settings the four llama_*_1b configs share, and their sources
from configs.base_llama_1b import *

norm_mode = "simplenorm"
out_dir = "out/llama_simplenorm_1b"
