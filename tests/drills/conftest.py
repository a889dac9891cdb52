from tests.trainer.conftest import built, tiny_config  # noqa: F401  (the trainer's real store + mixture)
