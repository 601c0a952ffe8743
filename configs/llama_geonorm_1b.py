"""GeoNorm on the Llama 2 "1B" block, in SimpleGPT's setting: the paper has no 1B Llama run, so this
takes the other three's settings unchanged, lr 2e-3 included (its own 1.3B GPT-2 config,
geonorm_1p3b.py, uses 2e-4; the CPU ablations found geonorm the least tolerant of a large rate: try
lower if it collapses).
    torchrun --standalone --nproc_per_node=8 train.py configs/llama_geonorm_1b.py
"""
# the settings the four llama_*_1b configs share, and their sources
from configs.base_llama_1b import *

norm_mode = "geonorm"
out_dir = "out/llama_geonorm_1b"
