"""HybridNorm: QKV-norm in attention with no norm before it, then a norm on the residual path before
the MLP, at GPT-2 small scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/hybrid_125m.py
From the authors (HybridNorm at f0dd605, its dense 1.2B yaml; docs/spec.md §13.4): the placement,
per-head RMSNorm gains on q, k and v, the final norm and a tied head. Chosen here: HybridNorm, not
HybridNorm* (hybrid_star=True makes block 1 pre-norm, as their MoE runs), the family's init for
OLMo's megatron init, no decay on gains (they decay them), and the rest of base_125m, lr 6e-4
included.
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "hybrid"
hybrid_star = False  # the model's default
out_dir = "out/hybrid_125m"
