"""The model's parts: grouped vs loop experts, document masking, parameter arithmetic."""

import pytest
import torch

from trainer.config import ModelConfig, MoEConfig, TrainConfig
from trainer.flops import count_params
from trainer.model import Transformer
from trainer.moe import RoutedExperts, grouped_mm_supported


def test_grouped_and_loop_experts_agree_forward_and_backward():
    torch.manual_seed(0)
    experts = RoutedExperts(4, 16, 32)
    for w in experts.parameters():
        torch.nn.init.normal_(w, std=0.1)
    x = torch.randn(11, 16, requires_grad=True)
    counts = torch.tensor([3, 0, 6, 2])  # one expert gets no token
    assert grouped_mm_supported(x, experts.w1, experts.w2)
    weights = (experts.w1, experts.w3, experts.w2)
    grouped = RoutedExperts.forward_grouped(x, counts, *weights)
    g = torch.randn_like(grouped)
    grads_grouped = torch.autograd.grad(grouped, [x, *weights], g)
    loop = RoutedExperts.forward_loop(x, counts, *weights)
    grads_loop = torch.autograd.grad(loop, [x, *weights], g)
    torch.testing.assert_close(grouped, loop, rtol=1e-5, atol=1e-6)
    for a, b in zip(grads_grouped, grads_loop):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_unaligned_widths_fall_back_to_the_loop():
    experts = RoutedExperts(2, 6, 10)  # 6 * 4 bytes is not a multiple of 16
    assert not grouped_mm_supported(torch.zeros(3, 6), experts.w1, experts.w2)
    torch.nn.init.normal_(experts.w1), torch.nn.init.normal_(experts.w3), torch.nn.init.normal_(experts.w2)
    out = experts(torch.randn(5, 6), torch.tensor([2, 3]))
    assert out.shape == (5, 6)


def tiny(vocab=64, **moe):
    return ModelConfig(
        d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=vocab, dense_ffn_dim=48, n_dense_layers=1
    ), MoEConfig(n_routed_experts=4, top_k=2, expert_ffn_dim=16, **moe)


@pytest.mark.slow
def test_attention_stays_inside_documents():
    model_cfg, moe_cfg = tiny()
    model = Transformer(model_cfg, moe_cfg)
    model.init_weights(0)
    ids = torch.randint(2, 64, (1, 12))
    segments = torch.tensor([[0] * 5 + [1] * 7])
    positions = torch.tensor([list(range(5)) + list(range(7))])
    out, _ = model(ids, positions, segments)
    changed = ids.clone()
    changed[0, :5] = torch.randint(2, 64, (5,))  # rewrite the first document only
    out2, _ = model(changed, positions, segments)
    torch.testing.assert_close(out[0, 5:], out2[0, 5:])  # the second document cannot see the first
    assert not torch.allclose(out[0, :5], out2[0, :5])


@pytest.mark.parametrize("tie", [False, True])
def test_parameter_count_on_paper_matches_the_model(tie):
    model_cfg, moe_cfg = tiny()
    model_cfg = model_cfg.model_copy(update={"tie_embeddings": tie})
    model = Transformer(model_cfg, moe_cfg.model_copy(update={"n_shared_experts": 2}))
    counted = count_params(TrainConfig(model=model_cfg, moe=moe_cfg.model_copy(update={"n_shared_experts": 2})))
    assert counted.total == sum(p.numel() for p in model.parameters())
    routed = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    assert counted.routed_experts == routed
    assert counted.active == counted.total - routed + routed * moe_cfg.top_k // moe_cfg.n_routed_experts


@pytest.mark.slow
def test_router_aux_losses_are_added_when_asked():
    model_cfg, moe_cfg = tiny(seq_aux_loss_coef=0.01, z_loss_coef=0.001)
    model = Transformer(model_cfg, moe_cfg)
    model.init_weights(0)
    ids = torch.randint(2, 64, (2, 8))
    zeros = torch.zeros_like(ids)
    _, aux = model(ids, torch.arange(8).expand(2, 8), zeros)
    assert aux.item() > 0
    aux.backward()
    assert model.layers[1].ffn.router.weight.grad.abs().sum() > 0
