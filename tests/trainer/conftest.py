import pytest

from millrace.home import Home
from tests.trainer.stores import build_mixture, make_store

CELLS = {"c00q0": 30000, "c01q0": 20000, "c02q1": 12000}
SEQ_LEN, GLOBAL_BATCH, STEPS = 32, 8, 60


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(home, manifest path): a real store written with ShardWriter, a mixture built by `mixtures`."""
    home = Home.resolve(tmp_path_factory.mktemp("trainer-home"))
    make_store(home, CELLS)
    path = build_mixture(home, tokens=SEQ_LEN * GLOBAL_BATCH * STEPS, seq_len=SEQ_LEN, global_batch=GLOBAL_BATCH)
    return home, path


@pytest.fixture
def tiny_config(tmp_path):
    """Write a variant of trainer/configs/tiny.toml with some fields replaced; returns its path."""
    import tomllib
    from pathlib import Path

    import tomli_w

    base = tomllib.loads((Path(__file__).parents[2] / "trainer" / "configs" / "tiny.toml").read_text())

    def write(name: str = "tiny", **sections) -> Path:
        data = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
        data["metrics"]["tensorboard"] = False
        data["metrics"]["peak_flops_per_device"] = 1e11
        for section, values in sections.items():
            if isinstance(values, dict):
                data.setdefault(section, {}).update(values)
            else:
                data[section] = values
        path = tmp_path / f"{name}.toml"
        path.write_text(tomli_w.dumps(data))
        return path

    return write
