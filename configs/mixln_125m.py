"""Mix-LN, post-norm in blocks 1..⌊αL⌋ and pre-norm after them, at GPT-2 small scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/mixln_125m.py
From the authors (MixLN at ff45826; docs/spec.md §13.2): α = 0.25, so blocks 1–3 of 12 post-norm as
their 12-layer runs (POST_NUM=3), and an untied head as in all their runs. Chosen here: the rest of
base_125m, lr 6e-4 and the family's init included (their Adam at 1e-3 with weight decay 0 is their
framework's). Untied because, tied, the post blocks give a copy bias at init (P(next =
current) 0.37, loss 11.6 against ln V = 10.8): compare it with pre_125m.py --tie_embeddings=False.
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "mixln"
mixln_alpha = 0.25  # blocks 1-3 of 12 post-norm (the model's default)
tie_embeddings = False
out_dir = "out/mixln_125m"
