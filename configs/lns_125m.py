"""LayerNorm Scaling (The Curse of Depth), x + f(LN(x)/√k) in block k, at GPT-2 small scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/lns_125m.py
From the authors (LayerNorm-Scaling at 5d4dd11, OLMo-core; docs/spec.md §13.1): the 1/√k on both
norms' outputs and plain N(0, 0.02²) output projections, not the depth-scaled ones their README
warns against. Chosen here: the rest of base_125m, lr 6e-4 and the tied head included (their
scripts' Adam at 1e-3, weight decay 0 and untied head are their framework's, not the method's,
§13.0; lns has no copy bias at init).
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "lns"
# W_o and W₂ plain 0.02 (the model's default; True keeps GPT-2's 0.02/√(2L))
lns_scaled_init = False
out_dir = "out/lns_125m"
