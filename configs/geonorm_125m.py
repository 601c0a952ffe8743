"""GeoNorm: each sub-layer a geodesic step on the sphere, at GPT-2 small scale.
    torchrun --standalone --nproc_per_node=8 train.py configs/geonorm_125m.py
"""
from configs.base_125m import *  # the settings every *_125m config shares

norm_mode = "geonorm"
out_dir = "out/geonorm_125m"
