"""The fair race: every lab entry at its own best learning rate, all with untied heads, at 16
blocks.
    python prepare_data.py shakespeare_char --input input.txt
    python ablate.py configs/ablate_race_char.py   # 176 runs: 22 entries x 4 rates x seeds 1, 2
    python ablate.py configs/ablate_race_char.py --sweep=n_layer=4
        # the same race at 4 blocks, in the same folder
    python ablate.py configs/ablate_race_char.py --modes=pre --tie_embeddings=True \
        --out_dir=out/race_char_tied
The last line is the head control: pre tied, on the same grid and seeds. docs/race.md: the race.
The setting is the depth ladder's (configs/ablate_depth_char.py: 128 wide, 64 characters, 16 a
batch, 2,000 steps, evaluations of 100 batches every 500 steps), with three changes so that the
entries differ only in their placement:
- every head untied (the lab untied post, deep, geonorm and mixln only, and untying alone moves a
  mode by about 0.05 nats at this width), so no entry's gap to pre is partly its head;
- one grid of learning rates for every entry, 1e-3 to 8e-3 by doubling. It brackets the papers' own
  rates: SimpleGPT's 3x baseline (6e-3 here) and nGPT's 1.5e-3 to 3e-3. Where an entry's best rate
  is at the grid's edge and that edge trained, the next point is added for it alone
  (--modes=X --lrs=1.6e-2);
- reorder with QK-norm over all heads, as OLMo 2 runs it.
The time, two runs at a time on 2 cores: about 14 minutes a run on the machine it started on (pre
0.34 s a step eager on one thread; torch.compile measured no faster on that CPU at this size), so
about 12 hours for the first 104 (the ladder's 13 entries) and 9 more for §14's 9 rows, which
joined the race after it started, on its grid and seeds. On the machine it moved to, about 65
minutes a run beside other work (docs/race.md, Status).
"""
from configs.ablate_depth_char import *  # the ladder's setting: 2,000 steps, evaluations, 2 jobs

out_dir = "out/race_char"
ablate_modes = "all"  # every entry: the ladder's 13 and §14's rows
tie_embeddings = False  # the same head for every entry
ablate_sweep = {"n_layer": [16]}  # a sweep of one point, so that run names carry the depth
ablate_seeds_at = {}
ablate_seeds = [1, 2]  # seed 3 at each entry's best rate: --lrs=BEST --seeds=3 --modes=X
ablate_lrs = [1e-3, 2e-3, 4e-3, 8e-3]
ablate_entry_settings = {
    "reorder": dict(qk_norm=True),  # OLMo 2's order comes with its QK-norm
    "ngpt": dict(warmup_iters=0, weight_decay=0.0, min_lr=0.0),  # nGPT's schedule (§13.6)
}
