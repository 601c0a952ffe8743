"""The race's second corpus, text that does not repeat: pystdlib (this Python's standard library
sources by character, about 12M characters of training text; the 2,000 steps of 16 x 64 see a sixth
of it, where on tiny Shakespeare they pass twice over it) at 16 blocks, for the race's six best
entries and pre, each at its own best rate from the race on tiny Shakespeare, seeds 1 and 2.
    python prepare_data.py pystdlib
    python ablate.py configs/ablate_race_pystdlib.py --modes=pre --lrs=BEST   # an entry at its best
    python ablate.py configs/ablate_race_pystdlib.py --modes=pre,post --lrs=BEST1,BEST2 \
        --figures=DIR
The last line draws the table: each entry at the one rate it ran there, and its gap to pre paired by
seed. Everything else is the race's (configs/ablate_race_char.py): untied heads, reorder with its
QK-norm, nGPT's schedule. docs/race.md has the results.
"""
from configs.ablate_race_char import *  # the race's setting, grid and seeds

dataset = "pystdlib"
out_dir = "out/race_pystdlib"
