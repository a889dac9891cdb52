"""The mixtures room: cells, token counts and weights. Reads store stats, never tokens."""
