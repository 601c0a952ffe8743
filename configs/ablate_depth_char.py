"""The depth ladder: the lab's first 13 entries (eleven modes, Peri-LN, DyT) at 2, 4, 8 and 16
blocks on tiny Shakespeare by characters.
    python prepare_data.py shakespeare_char --input input.txt
    python ablate.py configs/ablate_depth_char.py   # about 4.5 hours on 2 cores; again to resume
    python ablate.py configs/ablate_depth_char.py --figures=DIR
        # the tables and figures of the runs finished so far
Results and plots: out/ablate_depth_char/ablate/results.md. The finished runs' logs (config.json,
log.jsonl, seconds.json; no checkpoints) are kept in docs/depth_char/runs/ablate, from the sittings
so far:
    cp -r docs/depth_char/runs/ablate out/ablate_depth_char/   # a new sitting skips them
    python ablate.py configs/ablate_depth_char.py --out_dir=docs/depth_char/runs --figures=DIR
        # drawn from them
The setting is configs/ablate_lab_char.py's (128 wide, 64 characters, 16 a batch, lr 2e-3, each
entry's own settings: untied heads where a tied one copies, nGPT's schedule), with n_layer swept.
One token budget for every depth: the lab's 2,000 steps of 16 × 64 characters (2.0M, two passes over
the training text), so that a deeper model is not trained on more data, and the 4-block runs repeat
the lab's seed-1 runs (trained again here, in their own folders: the same losses, a check that runs
reproduce). The time, two runs at a time on 2 cores: about 15 ms per block per step with the
evaluations (the lab's 4-block pre run: 2 minutes), so a 16-block run is ~8 minutes and a 2-block
one ~1. The 13 entries at 2+4+8+16 blocks and two more seeds at 16 are 62 blocks × 13 × 2,000 steps:
about 4.5 hours with the slower modes (1.1-1.5x pre). One seed at the shallow depths because the lab
has their seeds' spread at 4, three at 16 because that is where the papers' claims live.
"""
# 128 wide, block 64, 2,000 steps at lr 2e-3, 13 entries, seeds 1-3, 2 jobs
from configs.ablate_lab_char import *

out_dir = "out/ablate_depth_char"
# the 13 entries the ladder ran (§14's rows came after it)
ablate_modes = "post,pre,deep,sandwich,geonorm,simplenorm,lns,mixln,reorder,hybrid,ngpt,peri,dyt"
ablate_sweep = {"n_layer": [2, 4, 8, 16]}
ablate_seeds_at = {"n_layer": [16]}  # seeds 2 and 3 only at the deepest
