"""nanochat's x0 mix: pre-norm with x ← λ_k·x + μ_k·x_0 before block k, λ and μ learned, at GPT-2
small scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/x0mix_125m.py
From nanochat (at 92d63d4, gpt.py; docs/spec.md §14.2): λ from 1.15 in block 1 down to 1.05 in the
last, μ from 0.20 down to 0.05, and a normalized embedding as x_0 (embed_norm, as both speedrun
codes mix it in).
Left out: its optimizer's own rates for λ and μ, its backout and its logit softcap. Chosen here: the
rest of base_125m, lr 6e-4 and the tied head included.
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "pre"
x0_mix = True
embed_norm = True  # x_0 normalized, as nanochat's and modded-nanogpt's
out_dir = "out/x0mix_125m"
