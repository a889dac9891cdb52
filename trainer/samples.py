"""Intermediate predictions: fixed prompts completed at fixed temperatures and seeds (`samples.jsonl`).

Prompts are a file (`.jsonl` with `id` and `prompt`, or plain text: one prompt per line) or
"auto": up to 16 cut from held-out documents, one per domain (the first cell of each domain
in name order, its first held-out document's opening tokens). Each prompt is completed at
every temperature of `[samples] temperatures` (default 0 and 0.2): 0 is greedy, others sample
with a generator seeded by (seed, prompt index, temperature index), so a rerun writes the
same completions. All prompts and temperatures go through the model as one batch. Every
rank runs the same generation (the model's sharded layers need all ranks in step); rank 0
writes. The completion's mean log-probability is taken under the
untempered model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from loader.validation import ValidationSequences
from millrace.errors import ConfigError
from millrace.jsonl import read_records
from trainer.config import SamplesConfig
from trainer.evaluation import cell_groups, inference
from trainer.metrics import open_resumed
from trainer.model import Transformer

SAMPLES_FILE = "samples.jsonl"
SAMPLES_SCHEMA = "millrace.samples/1"
AUTO_PROMPTS = 16


@dataclass(frozen=True)
class Prompt:
    id: str
    tokens: list[int]
    text: str


class TokenText:
    """Token ids <-> text with the store's tokenizer; without one, ids are shown as `<id>`."""

    def __init__(self, tokenizer_path: Path | None):
        self.tokenizer = None
        if tokenizer_path is not None and Path(tokenizer_path).exists():
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(str(tokenizer_path))

    def decode(self, ids: list[int]) -> str:
        if self.tokenizer is None:
            return "".join(f"<{i}>" for i in ids)
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def encode(self, text: str, where: str) -> list[int]:
        if self.tokenizer is None:
            raise ConfigError(f"{where}: the store has no tokenizer to encode text prompts; use prompts = \"auto\"")
        return self.tokenizer.encode(text, add_special_tokens=False).ids


def auto_prompts(sequences: ValidationSequences, text: TokenText, prompt_tokens: int) -> list[Prompt]:
    """One prompt per domain (or per held-out entry when cells are not domain x bucket), at most 16."""
    chosen: dict[str, int] = {}
    for index, entry in enumerate(sequences.entries):
        if entry.kind != "cell":
            continue
        domain = cell_groups(entry.name)[0] or entry.name
        chosen.setdefault(domain, index)
    prompts = []
    for domain, index in sorted(chosen.items())[:AUTO_PROMPTS]:
        tokens = sequences.head(index, prompt_tokens).astype(np.int64).tolist()
        if tokens:
            prompts.append(Prompt(f"{domain}:{sequences.entries[index].name}", tokens, text.decode(tokens)))
    return prompts


def file_prompts(path: Path, text: TokenText) -> list[Prompt]:
    if not path.exists():
        raise ConfigError(f"{path}: samples.prompts file not found")
    prompts = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        if path.suffix == ".jsonl":
            try:
                item = json.loads(line)
                pid, prompt = str(item["id"]), str(item["prompt"])
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ConfigError(f"{path}:{number}: expected a JSON object with 'id' and 'prompt'") from None
        else:
            pid, prompt = f"p{len(prompts):02d}", line
        tokens = text.encode(prompt, f"{path}:{number}")
        if not tokens:
            raise ConfigError(f"{path}:{number}: the prompt encodes to no tokens")
        prompts.append(Prompt(pid, tokens, prompt))
    if not prompts:
        raise ConfigError(f"{path}: no prompts")
    return prompts


@torch.no_grad()
def complete(model: Transformer, prompts: list[list[int]], temperatures: list[float], generators: list[torch.Generator],
             max_new_tokens: int, device: torch.device, eos_id: int | None) -> list[tuple[list[int], float]]:
    """Complete every prompt at once (row i: prompts[i] at temperatures[i] with generators[i]).

    Rows are left-padded; the padding is a segment of its own, so the document mask keeps every
    prompt from seeing it and positions start at 0 at each prompt, as in training. A full forward
    per new token (no cache: prompts and completions are short). Returns, per row, the new ids up
    to and including EOS, and their mean log-probability under the untempered model."""
    rows, width = len(prompts), max(len(p) for p in prompts)
    ids = torch.zeros(rows, width, dtype=torch.int64)
    segments = torch.zeros(rows, width, dtype=torch.int32)
    positions = torch.zeros(rows, width, dtype=torch.int32)
    for row, prompt in enumerate(prompts):
        pad = width - len(prompt)
        ids[row, pad:] = torch.tensor(prompt)
        segments[row, pad:] = 1
        positions[row, pad:] = torch.arange(len(prompt), dtype=torch.int32)
    new = torch.zeros(rows, 0, dtype=torch.int64)
    logprobs = torch.zeros(rows, 0, dtype=torch.float64)
    for _ in range(max_new_tokens):
        logits, _ = model(ids.to(device), positions.to(device), segments.to(device))
        last = logits[:, -1].float().cpu()
        log_probs = torch.log_softmax(last, dim=-1)
        chosen = torch.empty(rows, dtype=torch.int64)
        for row, (temperature, generator) in enumerate(zip(temperatures, generators)):
            if temperature == 0:
                chosen[row] = torch.argmax(last[row])
            else:
                chosen[row] = torch.multinomial(torch.softmax(last[row] / temperature, dim=-1), 1, generator=generator)
        new = torch.cat([new, chosen[:, None]], 1)
        logprobs = torch.cat([logprobs, log_probs.gather(1, chosen[:, None]).double()], 1)
        ids = torch.cat([ids, chosen[:, None]], 1)
        segments = torch.cat([segments, segments[:, -1:]], 1)
        positions = torch.cat([positions, positions[:, -1:] + 1], 1)
        if eos_id is not None and bool((new == eos_id).any(1).all()):
            break
    results = []
    for row in range(rows):
        tokens = new[row].tolist()
        if eos_id is not None and eos_id in tokens:
            tokens = tokens[: tokens.index(eos_id) + 1]
        results.append((tokens, float(logprobs[row, : len(tokens)].mean())))
    return results


class SampleWriter:
    """Completes the prompts and appends to runs/<run>/samples.jsonl (rank 0); resume drops later steps."""

    def __init__(self, run_dir: Path, start_step: int, config: SamplesConfig, prompts: list[Prompt], text: TokenText,
                 device: torch.device, eos_id: int | None, write: bool):
        self.config, self.prompts, self.text = config, prompts, text
        self.device, self.eos_id = device, eos_id
        self.path = Path(run_dir) / SAMPLES_FILE
        self.handle = None
        if write:
            self.handle = open_resumed(self.path, start_step)

    def sample(self, model: Transformer, step: int) -> list[dict[str, Any]]:
        cfg = self.config
        pairs = [(p_index, t_index) for p_index in range(len(self.prompts)) for t_index in range(len(cfg.temperatures))]
        generators = [torch.Generator().manual_seed(cfg.seed * 1_000_003 + p * 101 + t) for p, t in pairs]
        with inference(model):
            done = complete(model, [self.prompts[p].tokens for p, _ in pairs], [cfg.temperatures[t] for _, t in pairs],
                            generators, cfg.max_new_tokens, self.device, self.eos_id)
        records = []
        for (p, t), (new, logprob) in zip(pairs, done):
            prompt = self.prompts[p]
            records.append({"schema": SAMPLES_SCHEMA, "step": step, "prompt_id": prompt.id, "prompt": prompt.text,
                            "temperature": cfg.temperatures[t], "seed": cfg.seed, "completion": self.text.decode(new),
                            "completion_tokens": len(new), "mean_logprob": logprob})
        if self.handle is not None:
            for record in records:
                self.handle.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
            self.handle.flush()
        return records

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def read_samples(run_dir: Path | str) -> list[dict[str, Any]]:
    return read_records(Path(run_dir) / SAMPLES_FILE)
