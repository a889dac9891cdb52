"""MFU of the trainer on one GPU (prepared for a lent H200): a ~1B-total MoE in bf16, the real path.

Not part of `make bench` (it needs a CUDA GPU). On a GPU machine with its own Python and CUDA
torch but none of millrace's other dependencies and no network, `make gpu-wheels` here first,
then there from the repo root (`bench/gpu_mfu_device.sh` installs `.whl/` into a target
directory and runs this script with the arguments given):

    bash bench/gpu_mfu_device.sh --out "$OUT"                      # about 3 minutes
    bash bench/gpu_mfu_device.sh --out "$OUT" --compile --activation-checkpointing full
    bash bench/gpu_mfu_device.sh --smoke                           # CPU check that the script runs

It writes a small synthetic store (Zipf tokens, documents of 8-96 tokens, the store's
own ShardWriter), builds a mixture with the mixtures room's `mix new` + `mix build`,
and trains the SHAPE below with `trainer.train`: the loader feeds the GPU, bf16
autocast, grouped expert matmuls on padded groups, FlexAttention document masks
(`[model] attention = "auto"`), chunked fp32 loss, bias rule, metrics. It reports
tokens/s and MFU (FLOPs/token x tokens/s / peak, median over the steps after
warm-up; attention counted over the pairs the document mask leaves, which for these
short documents is a few percent of the full causal count the trainer's own `mfu`
metric uses: that figure is kept as `mfu_full_causal`) against the peak the trainer chose
(`run.json`: the device table's bf16
dense figure, or a labelled measured fallback), MFU against a measured 8192^3 bf16
matmul as a second reference, and the peak GPU memory. Results go to stdout and,
with --out, gpu_mfu.json. Without CUDA (and without --smoke) it exits 2 with a message.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import tomli_w

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# ~1B total, ~0.25B active: d 1024, 12 layers (1 dense), 64 routed experts top-6 + 2 shared, width 384.
SHAPE = {
    "steps": 0,
    "model": {
        "d_model": 1024,
        "n_layers": 12,
        "n_heads": 16,
        "n_kv_heads": 4,
        "vocab_size": 32768,
        "dense_ffn_dim": 4096,
        "n_dense_layers": 1,
    },
    "moe": {
        "n_routed_experts": 64,
        "n_shared_experts": 2,
        "top_k": 6,
        "expert_ffn_dim": 384,
        "score_func": "sigmoid",
        "bias_update_rate": 0.001,
    },
    "optimizer": {"lr": 3e-4},
    "schedule": {"kind": "cosine", "warmup_steps": 5},
    "data": {"micro_batches": 1, "prefetch": 4},
    "checkpoint": {"every": 0, "at_end": False},
    "metrics": {"log_every": 1, "tensorboard": False, "peak_flops_per_device": 0.0},
    "parallel": {"param_dtype": "float32", "bf16_autocast": True},
}


def measured_bf16_peak() -> float:
    import torch

    from trainer.peak import measure_matmul_flops

    return measure_matmul_flops(torch.device("cuda"), size=8192, repeats=10)


def parse_arguments() -> argparse.Namespace:
    """The run's shape and kernels from the command line (`--smoke`: a tiny CPU run)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=32, help="sequences per step")
    parser.add_argument("--out", type=Path, default=None, help="directory for gpu_mfu.json")
    parser.add_argument(
        "--smoke", action="store_true", help="a tiny shape on CPU: checks the script, measures nothing"
    )
    parser.add_argument("--attention", choices=["auto", "sdpa", "flex"], default="auto", help="[model] attention")
    parser.add_argument("--compile", action="store_true", help="[train] compile: torch.compile the blocks")
    parser.add_argument(
        "--activation-checkpointing", choices=["none", "full"], default="none", help="[train] activation_checkpointing"
    )
    return parser.parse_args()


def main() -> int:
    args = parse_arguments()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    import torch

    if not args.smoke and not torch.cuda.is_available():
        print(
            "gpu_mfu: no CUDA device here (torch.cuda.is_available() is False); run it on a GPU machine, "
            "or pass --smoke to check the script on a CPU",
            file=sys.stderr,
        )
        return 2
    shape = run_shape(args)
    with tempfile.TemporaryDirectory() as tmp:
        report = train_and_measure(args, shape, Path(tmp))
    if torch.cuda.is_available() and not args.smoke:
        report["peak_memory_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30  # training's, before
        report["peak_memory_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30  # the matmul below
        peak = measured_bf16_peak()
        report["measured_bf16_matmul_flops"] = peak
        report["mfu_vs_measured_matmul"] = report["flops_per_token"] * report["tokens_per_second"] / peak
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_mfu.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


def run_shape(args: argparse.Namespace) -> dict:
    """SHAPE with the command line's kernels; with --smoke a tiny model, and a short run (set on `args`)."""
    shape = json.loads(json.dumps(SHAPE))
    if args.smoke:
        shape["model"].update(
            {"d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 512, "dense_ffn_dim": 128}
        )
        shape["moe"].update({"n_routed_experts": 8, "top_k": 2, "expert_ffn_dim": 32})
        args.steps, args.warmup, args.seq_len, args.batch = 6, 2, 64, 4
    shape["model"]["attention"] = args.attention
    shape["train"] = {"compile": args.compile, "activation_checkpointing": args.activation_checkpointing}
    return shape


def train_and_measure(args: argparse.Namespace, shape: dict, tmp: Path) -> dict:
    """Store, mixture and a real training run of `shape` under `tmp`; the report of its figures after warm-up."""
    from loader import MixtureStream
    from millrace.home import Home
    from testkit.stores import LEARNABLE, build_mixture, make_store
    from trainer.config import load_train_config
    from trainer.flops import document_attention_pairs
    from trainer.loop import train
    from trainer.records import read_metrics, read_run
    from trainer.train_request import TrainRequest

    home = Home.resolve(tmp / "home")
    started = time.time()
    store_tokens = args.seq_len * args.batch * args.steps // 6 + 10 * args.seq_len  # read ~6 epochs (cap is 8)
    vocab = shape["model"]["vocab_size"]
    make_store(home, {"c00q0": store_tokens // 2, "c01q1": store_tokens // 2}, replace(LEARNABLE, vocab=vocab))
    manifest = build_mixture(
        home, tokens=args.seq_len * args.batch * args.steps, seq_len=args.seq_len, global_batch=args.batch
    )
    logging.info("store and mixture ready in %.1fs", time.time() - started)
    config_path = tmp / "gpu_mfu.toml"
    config_path.write_text(tomli_w.dumps(shape))
    config = load_train_config(config_path)
    result = train(config_path, home, TrainRequest(steps=args.steps, run="gpu-mfu"))
    records = read_metrics(result.run_dir)[args.warmup :]
    run_record = read_run(result.run_dir)
    pairs = [document_attention_pairs(batch.segment_ids) for batch in MixtureStream(manifest).iterate(0, args.steps)]
    return report_of(args, shape, config, result, records, run_record, sum(pairs))


def report_of(args: argparse.Namespace, shape: dict, config, result, records, run_record, pairs: int) -> dict:
    """The figures: FLOPs per token with attention over the pairs the document mask leaves, tokens/s and MFU
    (medians after warm-up) against the trainer's chosen peak, and the full-causal MFU the trainer logs."""
    import torch

    from trainer.flops import count_params, flops_per_token, masked_attention_flops

    params = count_params(config)
    full_causal = flops_per_token(config, args.seq_len)
    attention = masked_attention_flops(config, pairs) / (args.steps * args.batch * args.seq_len)
    per_token = 6.0 * params.active_matmul + attention
    tokens_per_second = statistics.median(r.tokens_per_second or 0.0 for r in records)
    return {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu (smoke)",
        "torch": torch.__version__,
        "total_params": params.total,
        "active_params": params.active,
        "seq_len": args.seq_len,
        "batch": args.batch,
        "flops_per_token": per_token,
        "attention_flops_per_token": attention,
        "flops_per_token_full_causal": full_causal,
        "tokens_per_second": tokens_per_second,
        "kernels": {"attention": args.attention, **shape["train"]},
        "mfu": per_token * tokens_per_second / (run_record.peak_flops_per_device or math.nan),
        "mfu_full_causal": statistics.median(r.mfu or 0.0 for r in records),
        "peak_flops": run_record.peak_flops_per_device,
        "peak_flops_source": run_record.peak_flops_source,
        "data_wait_fraction": statistics.median(r.data_wait_fraction or 0.0 for r in records),
        "loss_first_last": [result.losses[0], result.losses[-1]],
        "grouped_mm": hasattr(torch, "_grouped_mm"),
    }


if __name__ == "__main__":
    sys.exit(main())
