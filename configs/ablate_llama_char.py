"""The six norm modes on the llama block (rotary, SwiGLU, RMSNorm, untied head) on tiny Shakespeare
by characters: configs/ablate_shakespeare_char.py's runs, same size, steps and learning rates,
arch="llama".
    python prepare_data.py shakespeare_char --input input.txt
    python ablate.py configs/ablate_llama_char.py
        # one seed: about 14 minutes on 2 cores
    python ablate.py configs/ablate_llama_char.py --seeds=1,2,3  # adds two seeds; seed 1 is skipped
    python ablate.py configs/ablate_llama_char.py --lrs=2e-3,6e-3
Results and plots: out/ablate_llama_char/ablate/results.md.
"""
# 4 layers, 128 wide, block 64, 2,000 steps at lr 2e-3
from configs.ablate_shakespeare_char import *

arch = "llama"
# SwiGLU 352 wide: 3 x 352 x 128 weights, near GELU's 2 x 512 x 128 (256 would make it 512)
multiple_of = 32
out_dir = "out/ablate_llama_char"
