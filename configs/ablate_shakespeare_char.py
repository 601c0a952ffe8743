"""The six norm modes on tiny Shakespeare by characters: 6 runs of 2,000 steps, 2 at a time on a
2-core CPU.
    python prepare_data.py shakespeare_char --input input.txt
    python ablate.py configs/ablate_shakespeare_char.py   # one seed: about 12 minutes on 2 cores
    python ablate.py configs/ablate_shakespeare_char.py --seeds=1,2,3
        # adds two seeds; seed 1 is skipped
Results and plots: out/ablate_shakespeare_char/ablate/results.md.
"""
from configs.shakespeare_char import *  # the baby GPT: 4 layers, 128 wide, 64 characters, lr 2e-3

out_dir = "out/ablate_shakespeare_char"
# two thirds of shakespeare_char's 3,000 steps: the time limit, not convergence, sets it
max_iters = 2000
eval_interval = 500
# 102k characters drawn from the 111k of val: with 20 batches the eval set alone moved loss
# by ~0.015
eval_iters = 100
# the six; the lab's config runs every entry
ablate_modes = "post,pre,deep,sandwich,geonorm,simplenorm"
ablate_seeds = [1]
ablate_jobs = 2  # two one-thread runs at once beat one two-thread run on 2 cores
