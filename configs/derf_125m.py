"""Dynamic erf (Derf): pre-norm with γ⊙erf(α·x + s) + β in place of every LayerNorm, at GPT-2 small
scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/derf_125m.py
From the authors (zlab-princeton/Derf at 8dd9ea3, its GPT-2 patch on nanoGPT; docs/spec.md §14.1):
the pre-norm block, α at init 1.0 in every norm (the patch's config), s 0, β always, the tied head
and x_0 scaled by a learned √d; their README reports validation losses of 2.94 (LayerNorm), 2.97
(DyT) and 2.94 (Derf). Chosen here: the rest of base_125m, lr 6e-4 included, and no decay on α, s,
γ, β (normgpt's rule below 2-D). Sweep α over 0.5 (the class default of their other models) and 1.0.
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "pre"
norm_type = "derf"
derf_alpha_attn = 1.0  # the model's defaults, the patch's config
derf_alpha_ffn = 1.0
derf_alpha_final = 1.0
out_dir = "out/derf_125m"
