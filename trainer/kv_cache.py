"""Keys and values kept across generation steps, so each new token costs one position's forward.

`KVCache` holds, per layer, the rotated keys and the values of every token seen so far in
buffers sized for the whole generation, and the tokens' segment ids for the document mask.
A forward with a cache (`Transformer.forward(..., cache=...)`) appends its tokens and
attends from them to everything cached: the prompt's forward fills it, then each new
token is a forward of length one. The mask is the training mask restricted to the new
queries, so a cached forward computes what a full forward computes at those positions.
"""

from __future__ import annotations

import torch

from trainer.attention import dense_document_mask


class LayerCache:
    """One layer's keys and values [b, kv_heads, capacity, head_dim], allocated at the first update."""

    def __init__(self, owner: KVCache):
        self.owner = owner
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new tokens' k/v [b, kv_heads, new, hd]; return all cached ones, these included."""
        if self.keys is None or self.values is None:
            shape = (k.shape[0], k.shape[1], self.owner.capacity, k.shape[3])
            self.keys, self.values = k.new_empty(shape), v.new_empty(shape)
        keys, values = self.keys, self.values
        start, end = self.owner.start, self.owner.length
        keys[:, :, start:end] = k
        values[:, :, start:end] = v
        return keys[:, :, :end], values[:, :, :end]


class KVCache:
    """Every layer's cache for a batch of `capacity` tokens at most (prompt plus new tokens)."""

    def __init__(self, n_layers: int, capacity: int):
        self.capacity = capacity
        self.start = 0  # where the tokens of the current forward begin
        self.segment_ids: torch.Tensor | None = None  # [b, tokens so far]
        self.layers = [LayerCache(self) for _ in range(n_layers)]

    @property
    def length(self) -> int:
        return 0 if self.segment_ids is None else self.segment_ids.shape[1]

    def extend(self, segment_ids: torch.Tensor) -> torch.Tensor:
        """Append a forward's tokens; returns their mask over every cached token [b, 1, new, length]."""
        new = segment_ids.shape[1]
        if self.length + new > self.capacity:
            raise ValueError(f"the cache holds {self.capacity} tokens; {self.length} + {new} do not fit")
        self.start = self.length
        self.segment_ids = segment_ids if self.segment_ids is None else torch.cat([self.segment_ids, segment_ids], 1)
        return dense_document_mask(self.segment_ids, new)
