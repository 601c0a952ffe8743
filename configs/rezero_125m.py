"""ReZero: no norm anywhere, each block's sub-layers scaled by one learned scalar α from 0, at GPT-2
small scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/rezero_125m.py
From the authors (majumderb/rezero at bfea86b, RZTXDecoderLayer; docs/spec.md §14.2): x + α·f(x) in
both sub-layers with the same α (their resweight), no final norm, so every block starts as the
identity and the head reads x_0 itself. Chosen here: the rest of base_125m, lr 6e-4 and the tied
head included, so that the row is matched to pre; with no ln_f the tied head has no copy bias
(§14.2's numerics: P = 3e-5).
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "rezero"
out_dir = "out/rezero_125m"
