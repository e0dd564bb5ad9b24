"""python/examples/finetune_hf_packed.py at a few steps: its first loss equals eager attention's
on the same packed rows (--check), and the loss falls."""
import importlib.util
import os

import pytest

from conftest import REPO

pytest.importorskip("transformers")


def _load():
    path = os.path.join(REPO, "python", "examples", "finetune_hf_packed.py")
    spec = importlib.util.spec_from_file_location("finetune_hf_packed", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_finetune_a_few_steps(capsys):
    ex = _load()
    assert ex.main(["--steps", "25", "--seq", "128", "--batch", "2", "--check", "--log", "0"]) == 0
    out = capsys.readouterr().out
    assert "(distflash)" in out and "finetune_hf_packed: loss" in out


def test_packing_restarts_positions_and_masks_document_starts():
    import torch
    ex = _load()
    docs = [torch.arange(3), torch.arange(10, 15), torch.arange(20, 30)]
    ids, pos, labels = ex.pack(docs, 10, 1)
    assert ids[0].tolist() == [0, 1, 2, 10, 11, 12, 13, 14, 20, 21]
    assert pos[0].tolist() == [0, 1, 2, 0, 1, 2, 3, 4, 0, 1]
    assert labels[0].tolist() == [-100, 1, 2, -100, 11, 12, 13, 14, -100, 21]
