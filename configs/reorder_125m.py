"""OLMo 2's reordered norm, x + LN(f(x)) with QK-norm, at GPT-2 small scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/reorder_125m.py
From OLMo 2 (OLMo-core's olmo2_1B; docs/spec.md §13.3): the block, no norm before a sub-layer and
one on its output, with QK-norm over all heads jointly, which keeps q·k from growing with the
unnormalized stream. Chosen here: the rest of base_125m (LayerNorm ε 1e-5 for OLMo's RMSNorm ε 1e-6,
learned positions for rotary θ 500,000, the tied head, lr 6e-4); its matched baseline is
pre_125m.py --qk_norm=True.
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "reorder"
qk_norm = True
out_dir = "out/reorder_125m"
