"""The lab: the fourteen modes and eight presets (Derf, LayerScale, the speedrun's lambdas,
nanochat's x0 mix, GPAS, per-head QK-norm, Peri-LN, DyT) on tiny Shakespeare by characters,
seeds 1-3, 2 runs at a time on a 2-core CPU: configs/ablate_shakespeare_char.py's setting (4 blocks,
128 wide, 64 characters, 2,000 steps at lr 2e-3).
    python prepare_data.py shakespeare_char --input input.txt
    python ablate.py configs/ablate_lab_char.py --seeds=1
        # one seed first: about 17 minutes on 2 cores
    python ablate.py configs/ablate_lab_char.py
        # all three (seed 1 is skipped): about 50 minutes in all
Results and plots: out/ablate_lab_char/ablate/results.md; docs/lab.md has them. The time, measured:
2.1 to 3.7 minutes a run, two at a time (ngpt, geonorm and simplenorm step 1.4-1.6x slower than pre,
eager), 53 minutes for the 39 runs of the first 13 entries (docs/lab.md has those; the 9 rows of §14
joined after).
Per entry (ablate_entry_settings below; docs/spec.md §11, §13):
- An untied head (tie_embeddings=False) where a tied one gives a copy bias at init
  (tests/test_llama.py, docs/modes.md): post, deep and geonorm (P(next = current) 0.08 at this
  width, uniform 0.015) and mixln (its first block post: 0.08 here too, 0.37 at d 768). Not pre
  (0.04), sandwich, simplenorm, peri, lns, reorder, hybrid, dyt (at most pre's), nor ngpt, untied
  already. Untying costs about 0.05 nats at this width whatever the mode (docs/results.md, "Tied or
  untied head": pre +0.048, deep +0.048, geonorm +0.049, post +0.004), so an untied entry's gap to
  pre carries that: --sweep=tie_embeddings=False runs every entry untied to compare. §14's rows
  (normformer, subln, rezero and the presets derf to qkhead) are untied, as the race runs every
  entry.
- The learning rate: simplenorm at 3x (6e-3), SimpleGPT's rule, as ablate.py does by default. nGPT's
  authors train it at their GPT's rate (1.5e-3 in train.py, 3e-3 in launcher.sh, both models; flat
  over that range), so 2e-3 as pre, with their schedule: no warmup, no weight decay, cosine to 0.
  The other papers keep their baselines' rates (LNS and Mix-LN 1e-3 for both arms, HybridNorm
  OLMo 2's, DyT LLaMA's): pre's 2e-3.
- DyT keeps the model's α (0.8 before attention, 0.2 elsewhere: the authors' 7B values; theirs grow
  as the width shrinks, untuned below 4,096; 0.2 to 3.2 tried here, docs/lab.md: 0.8 best); mixln
  its α = 0.25 (block 1 of 4 post).
"""
# 4 layers, 128 wide, block 64, 2,000 steps at lr 2e-3, 2 jobs
from configs.ablate_shakespeare_char import *

out_dir = "out/ablate_lab_char"
ablate_modes = "all"  # the fourteen modes, then the presets
ablate_seeds = [1, 2, 3]
_NEXT_ROWS = ("normformer", "subln", "rezero", "derf", "layerscale", "lambdas", "x0mix", "gpas",
              "qkhead")  # §14's
ablate_entry_settings = {
    # the copy bias
    **{mode: dict(tie_embeddings=False) for mode in ("post", "deep", "geonorm", "mixln")},
    **{entry: dict(tie_embeddings=False) for entry in _NEXT_ROWS},  # as the race runs them
    # nGPT's schedule (§13.6), at pre's lr
    "ngpt": dict(warmup_iters=0, weight_decay=0.0, min_lr=0.0),
}
