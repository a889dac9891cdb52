import pytest

from testkit.local_corpus import plainly_different_sources


@pytest.fixture(scope="session")
def corpus():
    """About a thousand documents from four plainly different sources on this machine."""
    return plainly_different_sources()


@pytest.fixture(scope="session")
def fitted(corpus, tmp_path_factory):
    """Quality and domain models fitted once on the corpus (prose is the quality reference)."""
    from pipeline.cells.domains import DomainsConfig
    from pipeline.cells.quality import QualityConfig
    from pipeline.steps.tokenize.cell_steps import CellSteps

    model_dir = tmp_path_factory.mktemp("models")
    steps = CellSteps(QualityConfig(reference_sources=["prose"]), DomainsConfig(), model_dir)
    steps.fit(corpus)
    return steps
