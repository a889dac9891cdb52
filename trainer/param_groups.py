"""Parameter groups by role (embedding, attention, router, experts, ...), named from parameter names.

The metrics record carries one norm per group (`param_norm_per_group`) so that `train explain` can say which
part of the model moved at a step; the router bias is not a parameter (a rule updates it) and is reported apart,
per layer, under `router_bias`. Torch-free: the explainer reads the names back from the records.
"""

from __future__ import annotations

GROUPS = ("embedding", "attention", "router", "experts", "shared_experts", "dense_ffn", "norms", "output")
ROUTER_BIAS = "router_bias"  # the rule-updated bias, never gradient-trained


def group_of(name: str) -> str:
    """The group of a parameter named as `Transformer.named_parameters()` names it (wrappers' prefixes allowed)."""
    parts = name.split(".")
    if "router" in parts:
        return "router"
    if "experts" in parts:
        return "experts"
    if "shared" in parts:
        return "shared_experts"
    if "attention" in parts:
        return "attention"
    if any(part.endswith("norm") for part in parts[:-1]):
        return "norms"
    if "embed" in parts:
        return "embedding"
    if "output" in parts:
        return "output"
    return "dense_ffn"
