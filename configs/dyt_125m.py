"""Dynamic Tanh (Transformers without Normalization): pre-norm with γ⊙tanh(α·x) + β in place of
every LayerNorm, at GPT-2 small scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/dyt_125m.py
From the authors (DyT at aab5dde, its LLaMA; docs/spec.md §13.5): the pre-norm placement, the α at
init of their smallest tuned model (7B: 0.8 before attention, 0.2 before the MLP and in the final
norm) and a learned embedding scale s, here √d so that x_0 has their RMS 0.02√d. Chosen here: those
α at d 768, where nobody tuned them (the width trend points larger: sweep dyt_alpha_attn over 0.8,
1.0, 1.5 with the other two a quarter of it), the tied head (theirs is untied; DyT has no copy
bias), no decay on α, γ, s (they decay all), and the rest of base_125m, lr 6e-4 included.
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "pre"
norm_type = "dyt"
dyt_alpha_attn = 0.8  # the model's defaults, the authors' 7B values
dyt_alpha_ffn = 0.2
dyt_alpha_final = 0.2
out_dir = "out/dyt_125m"
