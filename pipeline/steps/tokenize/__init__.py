"""The tokenize run: the cells' quality and domain steps, tokenization, and the store's shards written by each task."""
