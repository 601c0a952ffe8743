"""The depth ladder on the llama block (rotary, SwiGLU, RMSNorm, untied head), for the modes that
lead and trail most at 16 blocks on the GPT-2 block (docs/depth.md): post and hybrid lead; reorder,
dyt and simplenorm trail; pre is the baseline. configs/ablate_depth_char.py's setting and token
budget, one seed, arch="llama".
    python ablate.py configs/ablate_depth_llama_char.py
        # 24 runs: about 1.2 hours on 2 cores; again to resume
Results and plots: out/ablate_depth_llama_char/ablate/results.md.
"""
# 2-16 blocks, 128 wide, block 64, 2,000 steps at lr 2e-3, 2 jobs
from configs.ablate_depth_char import *

arch = "llama"
multiple_of = 32  # SwiGLU 352 wide, as configs/ablate_llama_char.py: near GELU's weights
out_dir = "out/ablate_depth_llama_char"
ablate_modes = ["pre", "post", "hybrid", "reorder", "dyt", "simplenorm"]
ablate_seeds = [1]
ablate_seeds_at = {}
