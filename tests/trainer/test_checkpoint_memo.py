"""The checkpoint a fleet worker keeps in memory (`trainer.checkpoint_memo`): never older than the file it
stands for."""

from pathlib import Path

import torch

from trainer import checkpoint as ckpt
from trainer.checkpoint_memo import keeping_loaded
from trainer.state import ModelState


def weights(value: float) -> dict[str, ModelState]:
    layer = torch.nn.Linear(3, 2)
    with torch.no_grad():
        for tensor in layer.parameters():
            tensor.fill_(value)
    return {"model": ModelState(layer)}


def loaded(place: Path) -> float:
    parts = weights(0.0)
    ckpt.load(place, parts)
    return float(parts["model"].model.weight[0, 0])


def test_a_checkpoint_replaced_while_it_is_read_is_not_kept_with_the_old_values(tmp_path, monkeypatch):
    """The checkpoint at the same path is rewritten (another `save` of its step) after its part was read and
    before it is kept: the next load gives the new values, not the first read's under the new file's stamp."""
    directory = tmp_path / "checkpoints"
    place = ckpt.save(directory, 2, weights(1.0), keep=2)
    read = ckpt._read

    def replaced_after_reading(path: ckpt.Place, name: str, state: dict) -> None:
        read(path, name, state)
        monkeypatch.setattr(ckpt, "_read", read)  # once
        assert ckpt.save(directory, 2, weights(2.0), keep=2) == place

    monkeypatch.setattr(ckpt, "_read", replaced_after_reading)
    with keeping_loaded():
        assert loaded(place) == 1.0  # read before the replacement
        assert loaded(place) == 2.0
        assert loaded(place) == 2.0  # kept now, and the same as the file


def test_an_unchanged_checkpoint_is_kept_and_a_replaced_one_read_again(tmp_path, monkeypatch):
    """The memo does keep: a second load of the same file reads nothing from disk; another file at the same
    path is read again."""
    directory = tmp_path / "checkpoints"
    place = ckpt.save(directory, 2, weights(1.0), keep=2)
    read, calls = ckpt._read, []

    def counted(path: ckpt.Place, name: str, state: dict) -> None:
        calls.append(name)
        read(path, name, state)

    monkeypatch.setattr(ckpt, "_read", counted)
    with keeping_loaded():
        assert loaded(place) == 1.0 and calls == ["model"]
        assert loaded(place) == 1.0 and calls == ["model"]  # from memory
        ckpt.save(directory, 2, weights(3.0), keep=2)
        assert loaded(place) == 3.0 and calls == ["model", "model"]
