"""Generation with a KV cache against the full recompute it replaces: the same tokens, the same log-probs."""

import pytest
import torch

from testkit.models import tiny_model
from trainer.samples import choose, complete, left_padded

PROMPTS = [[5, 17, 3, 88, 41], [9, 2, 60, 33, 12, 71, 8, 19, 50], [44, 7, 1]]


def recomputed(model, prompts, temperatures, generators, max_new_tokens, eos_id):
    """The generation without a cache: the whole sequence through the model for every new token."""
    ids, positions, segments = left_padded(prompts)
    new, logprobs = [], []
    for _ in range(max_new_tokens):
        logits, _ = model(ids, positions, segments)
        last = logits[:, -1].float()
        chosen = choose(last, temperatures, generators)
        new.append(chosen)
        logprobs.append(torch.log_softmax(last.double(), -1).gather(1, chosen[:, None])[:, 0])
        ids = torch.cat([ids, chosen[:, None]], 1)
        segments = torch.cat([segments, segments[:, -1:]], 1)
        positions = torch.cat([positions, positions[:, -1:] + 1], 1)
        if eos_id is not None and bool((torch.stack(new, 1) == eos_id).any(1).all()):
            break
    tokens, logprobs = torch.stack(new, 1), torch.stack(logprobs, 1)
    results = []
    for row in range(len(prompts)):
        row_tokens = tokens[row].tolist()
        if eos_id is not None and eos_id in row_tokens:
            row_tokens = row_tokens[: row_tokens.index(eos_id) + 1]
        results.append((row_tokens, float(logprobs[row, : len(row_tokens)].mean())))
    return results


def generators(seed):
    return [torch.Generator().manual_seed(seed * 1000 + row) for row in range(6)]


@pytest.mark.slow
def test_cached_generation_equals_full_recompute_greedy_and_seeded():
    model = tiny_model(seed=3).eval()
    prompts = PROMPTS + PROMPTS
    temperatures = [0.0, 0.0, 0.0, 0.8, 1.0, 1.5]
    output_rows = []
    model.output.register_forward_hook(lambda module, args, out: output_rows.append(args[0].shape[1]))
    with torch.no_grad():
        cached = complete(model, prompts, temperatures, generators(1), 8, torch.device("cpu"), eos_id=None)
        assert output_rows == [1] * 8  # the prompt forward and each new token: logits of one position only
        reference = recomputed(model, prompts, temperatures, generators(1), 8, eos_id=None)
    assert [tokens for tokens, _ in cached] == [tokens for tokens, _ in reference]
    assert all(len(tokens) == 8 for tokens, _ in cached)
    assert any(cached[row][0] != cached[row + 3][0] for row in range(3))  # the seeded rows really sample
    for (_, got), (_, want) in zip(cached, reference):
        assert abs(got - want) < 1e-5


@pytest.mark.slow
def test_cached_generation_stops_at_eos_like_the_recompute():
    model = tiny_model(seed=4).eval()
    temperatures = [1.0, 1.0, 1.0]
    with torch.no_grad():
        first = complete(model, PROMPTS, temperatures, generators(2), 6, torch.device("cpu"), eos_id=None)
        eos = first[0][0][2]  # a token row 0 draws third: it stops there
        cached = complete(model, PROMPTS, temperatures, generators(2), 6, torch.device("cpu"), eos_id=eos)
        reference = recomputed(model, PROMPTS, temperatures, generators(2), 6, eos_id=eos)
    assert cached[0][0][-1] == eos and len(cached[0][0]) <= 3
    assert [tokens for tokens, _ in cached] == [tokens for tokens, _ in reference]
    for (_, got), (_, want) in zip(cached, reference):
        assert abs(got - want) < 1e-5
