"""OLMo 2's reordered norm on the Llama 2 "1B" block, x + RMSNorm(f(x)), with QK-norm as OLMo 2 runs
it.
    torchrun --standalone --nproc_per_node=8 train.py configs/llama_reorder_1b.py
From OLMo 2 (OLMo-core's olmo2_1B; docs/spec.md §13.3): the block, no norm before a sub-layer and
one on its output, and RMSNorm on q and k over all heads jointly, before the rotary embedding.
Chosen here: SimpleGPT's 1B settings of the other llama_*_1b configs (rotary θ 10,000 for OLMo 2's
500,000, ε 1e-5 for 1e-6, lr 2e-3), so that it differs from llama_pre_qknorm_1b.py in norm_mode
alone.
"""
from configs.base_llama_1b import *  # the settings the llama_*_1b configs share, and their sources

norm_mode = "reorder"
qk_norm = True
out_dir = "out/llama_reorder_1b"
