"""Test setup: offline, importable from the repository root, small and deterministic."""
import os
import pathlib
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"  # read-only data beside the checkout; absent on some machines

# Tests never touch the network.
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"
if (SHARED / "tiktoken_cache").is_dir():
    os.environ["TIKTOKEN_CACHE_DIR"] = str(SHARED / "tiktoken_cache")
sys.path.insert(0, str(ROOT))

# test_reliability.py forks train.main into child processes, and libgomp is not fork-safe: once this
# process has run an OpenMP region on several threads, a child's first one waits forever for threads
# that were not forked. So the test process computes on one thread (its subprocesses choose their own).
torch.set_num_threads(1)


def gpt2_available():
    """True when tiktoken's GPT-2 files are in the offline cache (tests needing BPE skip otherwise)."""
    try:
        import tiktoken
        tiktoken.get_encoding("gpt2")
        return True
    except Exception:
        return False


needs_gpt2 = pytest.mark.skipif(not gpt2_available(), reason="GPT-2 BPE files are not in the offline cache: "
                                "put tiktoken's cache in ../shared/tiktoken_cache or set TIKTOKEN_CACHE_DIR")


def error_of(call, *args, **kwargs):
    """The message of the SystemExit that call raises, checked to be one line starting 'error: '."""
    with pytest.raises(SystemExit) as e:
        call(*args, **kwargs)
    message = str(e.value.code)
    assert message.startswith("error: ") and "\n" not in message
    return message


@pytest.fixture(scope="session")
def shakespeare_text():
    """tiny Shakespeare when ../shared has it, else a generated text with a similar alphabet."""
    path = SHARED / "data" / "tinyshakespeare.txt"
    if path.is_file():
        return path.read_text(encoding="utf-8")
    import random
    rng = random.Random(0)
    words = ["thou", "art", "the", "king", "of", "Rome", "and", "I", "shall", "speak", "no", "more"]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 9))).capitalize() + rng.choice(".,;!?")
             for _ in range(20000)]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory, shakespeare_text):
    """A data_dir holding 'tiny': 200k characters of Shakespeare, prepared character-level."""
    import prepare_data
    root = tmp_path_factory.mktemp("data")
    (root / "input.txt").write_text(shakespeare_text[:200_000])
    prepare_data.prepare("shakespeare_char", root / "tiny", inputs=[str(root / "input.txt")], workers=1)
    return root
