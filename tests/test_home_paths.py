"""`Home` answers which home, store or run a path belongs to: the inverse of where it puts them."""

from millrace.home import Home


def test_home_finds_the_home_and_store_of_the_paths_it_lays_out(tmp_path):
    home = Home(tmp_path.resolve())
    store = home.store("local", "2026.01.31")
    assert Home.of_store(store) == home
    assert Home.of_run(home.run("tiny")) == home
    manifest = home.built_mixture("local", "2026.01.31", "mix", "natural") / "manifest.json"
    assert Home.store_of_built_mixture(manifest) == store
    assert Home.of_store(Home.store_of_built_mixture(manifest)) == home
