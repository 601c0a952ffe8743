"""SimpleGPT's 7B baseline: Llama 2 7B with pre-norm and QK-norm (its preqknorm_model.py), at the
same lr 1e-3 and weight decay 0.05 as its released preqknorm.toml. The 3e-4 with weight decay 0.1
that its prenorm.toml's comment recommends is for plain pre-norm, which 1e-3 can destabilize at 7B;
QK-norm is what keeps pre-norm stable at large rates (the paper's §5.1). Plain pre-norm:
--qk_norm=False --learning_rate=3e-4 --weight_decay=0.1 --out_dir=out/llama_pre_7b.
    torchrun --standalone --nproc_per_node=8 train.py configs/llama_pre_qknorm_7b.py
"""
# the settings the two llama_*_7b configs share, and their sources
from configs.base_llama_7b import *

norm_mode = "pre"
qk_norm = True
out_dir = "out/llama_pre_qknorm_7b"
