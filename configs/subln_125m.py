"""Sub-LN (Magneto): pre-norm plus a norm before W_o and one before W₂, at GPT-2 small scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/subln_125m.py
From the authors (torchscale at 4d1e0e8, its default decoder; docs/spec.md §14.4): the two inner
norms, the final norm, and the init gain √(ln 2L) (1.78 at 12 blocks) on W_v, W_o, W₁ and W₂. Chosen
here: that gain on the family's init, not on torchscale's Xavier base, and the rest of base_125m,
lr 6e-4 and the tied head included.
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "subln"
subln_init_gain = True  # the model's default
out_dir = "out/subln_125m"
