"""Kernel options against their plain forms: chunked loss, FlexAttention, compile, padded experts, checkpointing."""

import pydantic
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_mask

from millrace.errors import ConfigError
from testkit.models import tiny_model
from trainer.attention import block_document_mask, dense_document_mask, resolve_backend
from trainer.config import ModelConfig, TrainKernelConfig
from trainer.loss import chunked_cross_entropy
from trainer.moe import RoutedExperts, padded_groups
from trainer.peak import device_peak, peak_flops

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def packed_batch(seed=1, batch=2, length=24):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 96, (batch, length + 1), generator=generator)
    segments = torch.tensor([[0] * 7 + [1] * 11 + [2] * 6, [0] * 15 + [1] * 9])[:batch, :length]
    positions = torch.stack(
        [torch.cat([torch.arange(int((row == s).sum())) for s in row.unique()]) for row in segments]
    )
    return ids[:, :-1], positions, segments, ids[:, 1:]


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_cross_entropy_matches_the_fp32_reference(device, dtype):
    torch.manual_seed(0)
    hidden = torch.randn(3, 10, 16, device=device).to(dtype).requires_grad_()
    weight = (torch.randn(50, 16, device=device) * 0.5).to(dtype).requires_grad_()
    labels = torch.randint(0, 50, (3, 10), device=device)
    upstream = torch.rand(3, 10, device=device)
    reference = F.cross_entropy(F.linear(hidden, weight).float().flatten(0, 1), labels.flatten(), reduction="none")
    ref_grads = torch.autograd.grad((reference.view(3, 10) * upstream).sum(), [hidden, weight])
    chunked = chunked_cross_entropy(hidden, weight, labels, chunk_tokens=7)  # 30 tokens: chunks 7,7,7,7,2
    grads = torch.autograd.grad((chunked * upstream).sum(), [hidden, weight])
    assert chunked.dtype == torch.float32
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(chunked, reference.view(3, 10), **tol)
    for got, want in zip(grads, ref_grads):
        assert got.dtype == dtype
        torch.testing.assert_close(got.float().norm(), want.float().norm(), **tol)
        torch.testing.assert_close(got.float(), want.float(), **tol)


@pytest.mark.slow
def test_the_models_chunked_loss_matches_logits_and_cross_entropy():
    ids, positions, segments, labels = packed_batch()
    chunked_model, plain_model = tiny_model(loss_chunk_tokens=5), tiny_model()
    losses, aux = chunked_model(ids, positions, segments, labels)
    (losses.mean() + aux).backward()
    logits, aux_ref = plain_model(ids, positions, segments)
    reference = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), reduction="none")
    (reference.mean() + aux_ref).backward()
    torch.testing.assert_close(losses, reference.view_as(losses), rtol=1e-6, atol=1e-6)
    for (name, got), want in zip(chunked_model.named_parameters(), plain_model.parameters()):
        torch.testing.assert_close(got.grad.norm(), want.grad.norm(), rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.slow
def test_flex_attention_forward_matches_sdpa_with_the_block_diagonal_mask():
    ids, positions, segments, _ = packed_batch()
    flex_model, sdpa_model = tiny_model(), tiny_model()
    flex_model.config = flex_model.config.model_copy(update={"attention": "flex"})
    sdpa_model.config = sdpa_model.config.model_copy(update={"attention": "sdpa"})
    with torch.no_grad():
        flex_logits, _ = flex_model(ids, positions, segments)
        sdpa_logits, _ = sdpa_model(ids, positions, segments)
    torch.testing.assert_close(flex_logits, sdpa_logits, rtol=1e-6, atol=1e-6)


def test_the_block_mask_skips_the_tiles_outside_the_documents():
    segments = torch.arange(8).repeat_interleave(128)[None]  # 8 documents of one 128-token block each
    mask = block_document_mask(segments)
    assert mask.sparsity() == pytest.approx(100 * (1 - 8 / 64))  # only the 8 diagonal tiles of 8 x 8 are computed
    dense = dense_document_mask(segments)
    tiles = dense[0, 0].reshape(8, 128, 8, 128).any(3).any(1)
    assert torch.equal(mask.to_dense()[0, 0].bool(), tiles)
    assert torch.equal(create_mask(mask.mask_mod, 1, 1, 1024, 1024, device="cpu"), dense)


def test_attention_backend_is_validated_at_the_edge():
    with pytest.raises(pydantic.ValidationError, match="attention"):
        ModelConfig(attention="flash")
    assert resolve_backend("auto", torch.device("cpu")) == "sdpa"
    assert resolve_backend("auto", torch.device("cuda")) == "flex"
    with pytest.raises(ConfigError, match=r"model\.attention = 'flex' trains only on CUDA"):
        resolve_backend("flex", torch.device("cpu"))
    with torch.no_grad():
        assert resolve_backend("flex", torch.device("cpu")) == "flex"


def inductor_or_skip(fn):
    try:
        return fn()
    except torch._dynamo.exc.BackendCompilerFailed as error:  # no working C++ compiler for inductor here
        pytest.skip(f"inductor cannot compile on this machine: {str(error).splitlines()[0]}")


@pytest.mark.slow
def test_the_moe_layer_compiles_as_one_graph_and_matches_eager():
    """In bf16, the dtype of the grouped expert matmul on a GPU (autocast) and the one its compiled form takes."""
    moe = tiny_model().moe_layers()[0].to(torch.bfloat16)
    x = torch.randn(2, 12, 32, dtype=torch.bfloat16, requires_grad=True)
    eager = moe(x)
    eager_grads = torch.autograd.grad(eager.square().sum(), [x, moe.experts.w1, moe.router.weight])
    explained = torch._dynamo.explain(moe)(x.detach())
    assert explained.graph_break_count == 0, explained.break_reasons
    compiled_moe = torch.compile(moe, fullgraph=True)
    compiled = inductor_or_skip(lambda: compiled_moe(x))
    grads = torch.autograd.grad(compiled.square().sum(), [x, moe.experts.w1, moe.router.weight])
    torch.testing.assert_close(compiled, eager, rtol=2e-2, atol=1e-2)
    for got, want in zip(grads, eager_grads):
        torch.testing.assert_close(got.float().norm(), want.float().norm(), rtol=2e-2, atol=1e-3)


@pytest.mark.slow
def test_compiled_blocks_train_like_eager(monkeypatch):
    """`[train] compile` through dynamo and AOT autograd (inductor's code generation is the MoE test's: time)."""
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **options: compile_(fn, backend="aot_eager", **options))
    ids, positions, segments, labels = packed_batch()
    eager_model, compiled_model = tiny_model(), tiny_model(compile=True)
    assert all(block.run is not block.residual for block in compiled_model.layers)
    eager_loss = eager_model(ids, positions, segments, labels)[0].mean()
    eager_loss.backward()
    compiled_loss = compiled_model(ids, positions, segments, labels)[0].mean()
    compiled_loss.backward()
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-5, atol=1e-6)
    for (name, got), want in zip(compiled_model.named_parameters(), eager_model.parameters()):
        torch.testing.assert_close(got.grad.norm(), want.grad.norm(), rtol=1e-4, atol=1e-7, msg=name)


def test_expert_groups_padded_for_grouped_mm_match_unpadded_and_the_loop():
    torch.manual_seed(0)
    experts = RoutedExperts(5, 16, 32)
    for w in experts.parameters():
        torch.nn.init.normal_(w, std=0.1)
    weights = (experts.w1, experts.w3, experts.w2)
    counts = torch.tensor([3, 0, 17, 16, 1])  # empty, aligned and unaligned groups
    x = torch.randn(int(counts.sum()), 16, requires_grad=True)
    rows, offsets, capacity = padded_groups(counts, 16, len(x))
    assert offsets.tolist() == [16, 16, 48, 64, 80] and capacity == 37 + 5 * 15
    assert rows.tolist()[:4] == [0, 1, 2, 16] and len(set(rows.tolist())) == len(x)
    upstream = torch.randn(len(x), 16)
    results = {}
    for name, run in {
        "padded": lambda: RoutedExperts.forward_grouped(x, counts, *weights, align=16),
        "unpadded": lambda: RoutedExperts.forward_grouped(x, counts, *weights),
        "loop": lambda: RoutedExperts.forward_loop(x, counts, *weights),
    }.items():
        out = run()
        results[name] = (out, *torch.autograd.grad((out * upstream).sum(), [x, *weights]))
    for name in ("padded", "unpadded"):
        for got, want in zip(results[name], results["loop"]):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_activation_checkpointing_gives_the_same_loss_gradients_and_routing_counts():
    ids, positions, segments, labels = packed_batch()
    plain, checkpointed = tiny_model(), tiny_model(activation_checkpointing="full")
    assert all(block.checkpointed for block in checkpointed.layers)
    results = []
    for model in (plain, checkpointed):
        losses, aux = model(ids, positions, segments, labels)
        (losses.mean() + aux).backward()
        results.append((losses, model))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=0, atol=0)
    for (name, got), want in zip(checkpointed.named_parameters(), plain.parameters()):
        torch.testing.assert_close(got.grad.norm(), want.grad.norm(), rtol=1e-6, atol=0, msg=name)
    for got, want in zip(checkpointed.moe_layers(), plain.moe_layers()):  # recomputation is not counted twice
        assert torch.equal(got.step_counts, want.step_counts) and got.step_counts.sum() == 2 * 24 * 2
        assert torch.equal(got.router.step_entropy, want.router.step_entropy)
        assert got.counting and got.router.counting
    with pytest.raises(pydantic.ValidationError, match="activation_checkpointing"):
        TrainKernelConfig(activation_checkpointing="selective")


@pytest.mark.parametrize(
    "name, entry, flops",
    [
        ("NVIDIA H100 80GB HBM3", "H100", 989.4e12),
        ("NVIDIA H100 PCIe", "H100 PCIe", 756.5e12),
        ("NVIDIA H200", "H200", 989.4e12),
        ("NVIDIA B200", "B200", 2.25e15),
        ("NVIDIA GB200", "GB200", 2.5e15),
    ],
)
def test_the_peak_comes_from_the_device_table(monkeypatch, name, entry, flops):
    assert device_peak(name) == (entry, flops)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    peak, source = peak_flops(0.0, torch.device("cuda"))
    assert peak == flops and source.startswith(f"device table ({entry} bf16 dense")


def test_the_timed_matmul_is_a_labelled_fallback():
    assert device_peak("NVIDIA A10G") is None
    peak, source = peak_flops(0.0, torch.device("cpu"))
    assert peak > 0 and source.startswith("measured fallback")
    assert peak_flops(5e14, torch.device("cpu")) == (5e14, "config")


@pytest.mark.slow
def test_activation_checkpointing_under_fsdp_and_expert_parallel_matches_one_process(built, tiny_config):
    """The recomputation replays the all-to-all inside FSDP's hooks: 2 ranks (expert 2) checkpointed = 1 process."""
    from testkit.torchrun import curve, torchrun
    from trainer.loop import train
    from trainer.train_request import TrainRequest

    home, _ = built
    train(tiny_config("plain"), home, TrainRequest(steps=2, run="plain"))
    torchrun(
        2,
        tiny_config("ac", parallel={"expert_parallel": 2}, train={"activation_checkpointing": "full"}),
        home,
        "ac",
        steps=2,
    )
    plain, checkpointed = curve(home, "plain"), curve(home, "ac")
    assert len(checkpointed) == 2
    assert [loss for loss, _ in checkpointed] == pytest.approx([loss for loss, _ in plain], rel=1e-6)
    assert [norm for _, norm in checkpointed] == pytest.approx([norm for _, norm in plain], rel=1e-6)


def test_the_automatic_loss_chunk_keeps_cpu_logits_under_the_mmap_threshold():
    from trainer.loss import CPU_CHUNK_BYTES, loss_chunk_tokens

    assert loss_chunk_tokens(5, 8192, torch.device("cpu")) == 5
    assert loss_chunk_tokens(0, 8192, torch.device("cuda")) == 8192
    chunk = loss_chunk_tokens(0, 8192, torch.device("cpu"))
    assert chunk == 512 and chunk * 8192 * 4 <= CPU_CHUNK_BYTES
    assert loss_chunk_tokens(0, 10**7, torch.device("cpu")) == 64


@pytest.mark.slow
def test_flex_attention_compiles_once_per_shape_bucket(monkeypatch):
    """Evaluation batches, a last partial batch and other lengths reuse one compiled kernel per bucket (the
    compile counter stands in for inductor, which CUDA uses: the shape guards are the same), and padding
    to the bucket changes nothing against SDPA."""
    from torch._dynamo.testing import CompileCounter
    from torch.nn.attention.flex_attention import flex_attention

    from trainer import attention

    kernel_compiles, mask_compiles = CompileCounter(), CompileCounter()
    kernel = torch.compile(flex_attention, dynamic=False, backend=kernel_compiles)
    masks = torch.compile(attention.create_block_mask, dynamic=False, backend=mask_compiles)
    monkeypatch.setattr(attention, "flex_kernel", lambda device: kernel)
    torch._dynamo.reset()
    flex_model, sdpa_model = tiny_model(), tiny_model()
    flex_model.config = flex_model.config.model_copy(update={"attention": "flex"})
    for batch, length in [(4, 24), (3, 57), (4, 128), (4, 200)]:  # the last in bucket 256
        generator = torch.Generator().manual_seed(batch * length)
        ids = torch.randint(0, 96, (batch, length), generator=generator)
        segments = torch.cumsum(torch.rand(batch, length, generator=generator) < 0.08, 1).to(torch.int32)
        starts = torch.cat([torch.ones(batch, 1, dtype=torch.bool), segments[:, 1:] != segments[:, :-1]], 1)
        index = torch.arange(length).expand(batch, length)
        positions = index - torch.cummax(torch.where(starts, index, 0), 1).values  # 0 at each document start
        with torch.no_grad():
            flex_logits, _ = flex_model(ids, positions, segments)
            sdpa_logits, _ = sdpa_model(ids, positions, segments)
        torch.testing.assert_close(flex_logits, sdpa_logits, rtol=1e-5, atol=1e-5)
    assert kernel_compiles.frame_count == 2  # buckets (4, 128) and (4, 256)
    monkeypatch.setattr(attention, "create_block_mask", masks)
    for batch, length in [(3, 30), (4, 128)]:  # one padded, one exact: one compilation
        attention.block_document_mask(torch.zeros(batch, length, dtype=torch.int32))
    assert mask_compiles.frame_count == 1


def test_document_attention_pairs_are_the_pairs_the_mask_leaves():
    from trainer.config import TrainConfig
    from trainer.flops import attention_flops_per_token, document_attention_pairs, masked_attention_flops

    generator = torch.Generator().manual_seed(5)
    segments = torch.cumsum(torch.rand(3, 300, generator=generator) < 0.05, 1).to(torch.int32)
    segments[1] = 7  # one document filling the row
    assert document_attention_pairs(segments.numpy()) == int(dense_document_mask(segments).sum())
    config = TrainConfig(model=ModelConfig(d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=96))
    whole_row = masked_attention_flops(config, document_attention_pairs(segments[1:2].numpy())) / 300
    assert whole_row == pytest.approx(attention_flops_per_token(config, 300), rel=1 / 300)


@pytest.mark.slow
def test_moe_combine_matches_a_per_token_reference_forward_and_backward():
    """The k outputs of a token are put back by a permutation and summed (no atomic adds): the value and
    the gradients are those of the per-token formula y = shared(x) + Σ_k gate_k · expert_k(x)."""
    moe = tiny_model(seed=2).moe_layers()[0]
    x = torch.randn(2, 12, 32, generator=torch.Generator().manual_seed(3), requires_grad=True)
    y = moe(x)
    with torch.no_grad():
        selected, _, _ = moe.router(x)
    _, gates, _ = moe.router(x)
    flat, experts = x.reshape(-1, 32), moe.experts
    rows = []
    for token in range(flat.shape[0]):
        row = flat[token]
        out = moe.shared(row[None])[0] if moe.shared is not None else torch.zeros_like(row)
        for slot, expert in enumerate(selected[token].tolist()):
            hidden = F.silu(row @ experts.w1[expert]) * (row @ experts.w3[expert])
            out = out + gates[token, slot] * (hidden @ experts.w2[expert])
        rows.append(out)
    reference = torch.stack(rows).view_as(y)
    torch.testing.assert_close(y, reference, rtol=1e-5, atol=1e-6)
    params = [x, experts.w1, moe.router.weight]
    for got, want in zip(
        torch.autograd.grad(y.square().sum(), params), torch.autograd.grad(reference.square().sum(), params)
    ):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
