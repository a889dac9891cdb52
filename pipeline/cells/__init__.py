"""What decides a document's cell `cNNqQ`: the quality scorer, the topic domains and their embedder.

`quality` and `domains` fit a model once per store on a sample (`fitted_model` stores it beside the store);
`stats` names cells and gathers the per-cell stats of a cell manifest.
"""
