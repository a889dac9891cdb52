"""Intermediate predictions: fixed prompts completed at fixed temperatures and seeds (`samples.jsonl`).

Prompts are a file (`.jsonl` with `id` and `prompt`, or plain text: one prompt per line) or
"auto": up to 16 cut from held-out documents, one per domain (the first cell of each domain
in name order, its first held-out document's opening tokens). Each prompt is completed at
every temperature of `[samples] temperatures` (default 0 and 0.2): 0 is greedy, others sample
with a generator seeded by (seed, prompt index, temperature index), so a rerun writes the
same completions. All prompts and temperatures go through the model as one batch, with a KV
cache (`trainer.kv_cache`): one forward per new token of one position per row. Every
rank runs the same generation (the model's sharded layers need all ranks in step); rank 0
writes. The completion's mean log-probability is taken under the
untempered model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from loader.held_out import ValidationSequences
from millrace.errors import ConfigError
from pipeline.store.format import store_tokenizer
from trainer.config import SamplesConfig
from trainer.evaluation import cell_groups, inference
from trainer.kv_cache import KVCache
from trainer.metrics import open_resumed
from trainer.model import Transformer
from trainer.records import SAMPLES_FILE, SAMPLES_SCHEMA, SampleRecord

if TYPE_CHECKING:
    from tokenizers import Tokenizer

AUTO_PROMPTS = 16


@dataclass(frozen=True)
class Prompt:
    id: str
    tokens: list[int]
    text: str
    source: str = "auto: held-out documents"  # where the prompt came from, shown on the run page


def prompts_path(value: str, config_path: Path, home: Path) -> Path:
    """The file `samples.prompts` names (relative to the config file), which must lie, links resolved, inside
    the config file's directory tree or $MILLRACE_HOME: its lines are published on the run page, so a config
    that names `/etc/shadow` or `../../.ssh/id_rsa` is refused in one line."""
    path = Path(value).expanduser()
    path = (path if path.is_absolute() else Path(config_path).parent / path).resolve()
    roots = (Path(config_path).resolve().parent, Path(home).resolve())
    if not any(path.is_relative_to(root) for root in roots):
        raise ConfigError(
            f"{config_path}: field 'samples.prompts' {value!r}: resolves to {path}, outside the "
            f"config file's directory {roots[0]} and $MILLRACE_HOME {roots[1]} (its lines are "
            "published on the run page); copy the prompts next to the config"
        )
    return path


class TokenText:
    """Token ids <-> text with the store's tokenizer; without one, ids are shown as `<id>`."""

    def __init__(self, tokenizer_store: Path | None):
        self.tokenizer: Tokenizer | None = None
        if tokenizer_store is not None:
            self.tokenizer = store_tokenizer(tokenizer_store)  # checked against store.json's fingerprint

    def decode(self, ids: list[int]) -> str:
        if self.tokenizer is None:
            return "".join(f"<{i}>" for i in ids)
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def encode(self, text: str, where: str) -> list[int]:
        if self.tokenizer is None:
            raise ConfigError(f'{where}: the store has no tokenizer to encode text prompts; use prompts = "auto"')
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
    prompts: list[Prompt] = []
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
        prompts.append(Prompt(pid, tokens, prompt, str(path)))
    if not prompts:
        raise ConfigError(f"{path}: no prompts")
    return prompts


def left_padded(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, positions, segment ids) [rows, width]: each prompt right-aligned, its padding a segment of its
    own (0, the prompt 1) so the document mask keeps the prompt from seeing it, positions from 0 at the
    prompt's first token as in training."""
    rows, width = len(prompts), max(len(p) for p in prompts)
    ids = torch.zeros(rows, width, dtype=torch.int64)
    segments = torch.zeros(rows, width, dtype=torch.int32)
    positions = torch.zeros(rows, width, dtype=torch.int32)
    for row, prompt in enumerate(prompts):
        pad = width - len(prompt)
        ids[row, pad:] = torch.tensor(prompt)
        segments[row, pad:] = 1
        positions[row, pad:] = torch.arange(len(prompt), dtype=torch.int32)
    return ids, positions, segments


def choose(last: torch.Tensor, temperatures: list[float], generators: list[torch.Generator]) -> torch.Tensor:
    """Each row's next token from its fp32 logits [rows, V] on the host: greedy at temperature 0, else a
    draw from the tempered distribution with the row's own generator."""
    chosen = torch.empty(len(temperatures), dtype=torch.int64)
    for row, (temperature, generator) in enumerate(zip(temperatures, generators)):
        if temperature == 0:
            chosen[row] = torch.argmax(last[row])
        else:
            chosen[row] = torch.multinomial(torch.softmax(last[row] / temperature, dim=-1), 1, generator=generator)
    return chosen


@torch.no_grad()
def complete(
    model: Transformer,
    prompts: list[list[int]],
    temperatures: list[float],
    generators: list[torch.Generator],
    max_new_tokens: int,
    device: torch.device,
    eos_id: int | None,
) -> list[tuple[list[int], float]]:
    """Complete every prompt at once (row i: prompts[i] at temperatures[i] with generators[i]).

    One forward over the left-padded prompts fills a `KVCache`; then each new token is a forward of one
    position that attends to the cache, and only the last position's logits are made (a full-vocabulary
    row per prompt, not one per position). One host read per new token: the logits the generators draw
    from. Returns, per row, the new ids up to and including EOS, and their mean log-probability under the
    untempered model."""
    ids, positions, segments = left_padded(prompts)
    rows = len(prompts)
    cache = KVCache(len(model.layers), ids.shape[1] + max_new_tokens)
    logits, _ = model(ids.to(device), positions.to(device), segments.to(device), cache=cache)
    next_positions = positions[:, -1:] + 1
    new_segments = segments[:, -1:].to(device)
    new = torch.zeros(rows, 0, dtype=torch.int64)
    logprobs = torch.zeros(rows, 0, dtype=torch.float64)
    for index in range(max_new_tokens):
        last = logits[:, -1].float().cpu()
        chosen = choose(last, temperatures, generators)
        new = torch.cat([new, chosen[:, None]], 1)
        logprobs = torch.cat([logprobs, torch.log_softmax(last, dim=-1).gather(1, chosen[:, None]).double()], 1)
        if index + 1 == max_new_tokens or (eos_id is not None and bool((new == eos_id).any(1).all())):
            break
        logits, _ = model(chosen[:, None].to(device), next_positions.to(device), new_segments, cache=cache)
        next_positions = next_positions + 1
    results = []
    for row in range(rows):
        tokens = new[row].tolist()
        if eos_id is not None and eos_id in tokens:
            tokens = tokens[: tokens.index(eos_id) + 1]
        results.append((tokens, float(logprobs[row, : len(tokens)].mean())))
    return results


class SampleWriter:
    """Completes the prompts on every rank and appends to runs/<run>/samples.jsonl where `run_dir` is given
    (rank 0's); a resume from `start_step` drops the file's later steps."""

    def __init__(
        self,
        run_dir: Path | None,
        start_step: int,
        config: SamplesConfig,
        prompts: list[Prompt],
        text: TokenText,
        device: torch.device,
        eos_id: int | None,
    ):
        self.config, self.prompts, self.text = config, prompts, text
        self.device, self.eos_id = device, eos_id
        self.handle = None
        if run_dir is not None:
            self.handle = open_resumed(Path(run_dir) / SAMPLES_FILE, start_step)

    def sample(self, model: Transformer, step: int) -> list[SampleRecord]:
        cfg = self.config
        pairs = [
            (p_index, t_index) for p_index in range(len(self.prompts)) for t_index in range(len(cfg.temperatures))
        ]
        generators = [torch.Generator().manual_seed(cfg.seed * 1_000_003 + p * 101 + t) for p, t in pairs]
        with inference(model):
            done = complete(
                model,
                [self.prompts[p].tokens for p, _ in pairs],
                [cfg.temperatures[t] for _, t in pairs],
                generators,
                cfg.max_new_tokens,
                self.device,
                self.eos_id,
            )
        records = []
        for (p, t), (new, logprob) in zip(pairs, done):
            prompt = self.prompts[p]
            records.append(
                SampleRecord(
                    schema=SAMPLES_SCHEMA,
                    step=step,
                    prompt_id=prompt.id,
                    prompt=prompt.text,
                    prompt_source=prompt.source,
                    temperature=cfg.temperatures[t],
                    seed=cfg.seed,
                    completion=self.text.decode(new),
                    completion_tokens=len(new),
                    mean_logprob=logprob,
                )
            )
        if self.handle is not None:
            for record in records:
                self.handle.write(record.line() + "\n")
            self.handle.flush()
        return records

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
