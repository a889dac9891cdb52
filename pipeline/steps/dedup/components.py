"""Connected components of the confirmed duplicate pairs, as parallel, resumable rounds over sharded edge files.

Each undirected edge is stored both ways, (node, other) and (other, node), in the part of its
`node` (`node_part`, a hash of the key, so that parts balance). Round r is one executor run of
`parts` tasks: task p reads its nodes' edges from every file of round r (`round-<r>/<task>.npy`,
each sorted by part, node, other, read by binary search on the part) and writes round r+1's.
Even rounds apply large-star, odd rounds small-star (Kiveris et al., "Connected Components in
MapReduce and Beyond", 2014): both keep the components and converge, in O(log² n) rounds, to
one star per component around its smallest key. Each task counts the nodes of its input that
are not in that form yet (a smaller neighbour and another neighbour besides); a round whose
count is zero in every task read the fixed point, where each node's one smaller neighbour is
its component's smallest key. A round is a function of the edge set alone, so the result does
not depend on the number of parts or of tasks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from millrace.artifacts import atomic_write_text
from pipeline.steps import in_place
from pipeline.steps.dedup.signing import prefix_part, save_array
from pipeline.steps.dedup.sorted_runs import RecordFile, sorted_records

EDGE = np.dtype([("part", "<u4"), ("node", "<i8"), ("other", "<i8")])


def mix64(keys: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: document keys (file ordinal, position) spread evenly over uint64."""
    z = np.asarray(keys).astype(np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def node_part(keys: np.ndarray, parts: int) -> np.ndarray:
    return prefix_part(mix64(keys), parts)


def edge_records(a: np.ndarray, b: np.ndarray, parts: int) -> np.ndarray:
    """The undirected edges (a_i, b_i) both ways, self loops left out, sorted and unique."""
    keep = a != b
    node = np.concatenate([a[keep], b[keep]]).astype(np.int64)
    other = np.concatenate([b[keep], a[keep]]).astype(np.int64)
    records = np.empty(node.size, dtype=EDGE)
    records["part"], records["node"], records["other"] = node_part(node, parts), node, other
    return unique_edges(sorted_records(records))


def unique_edges(records: np.ndarray) -> np.ndarray:
    """Sorted edge records without repeats."""
    first = np.ones(records.size, dtype=bool)
    first[1:] = (records["node"][1:] != records["node"][:-1]) | (records["other"][1:] != records["other"][:-1])
    return records[first]


def _smallest_neighbour(node: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For edges sorted by (node, other): per edge its node's smallest neighbour; per node its first edge and
    degree."""
    starts = np.flatnonzero(np.r_[True, node[1:] != node[:-1]]) if node.size else np.zeros(0, np.int64)
    degree = np.diff(np.r_[starts, node.size])
    smallest = np.repeat(other[starts], degree)
    return smallest, starts, degree


def not_star_nodes(node: np.ndarray, other: np.ndarray) -> int:
    """Nodes with a smaller neighbour and another neighbour besides: zero exactly when every component is a star
    around its smallest node."""
    smallest, starts, degree = _smallest_neighbour(node, other)
    return int(((smallest[starts] < node[starts]) & (degree > 1)).sum())


def large_star(node: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every larger neighbour of a node joined to the smallest of the node and its neighbours."""
    smallest, _, _ = _smallest_neighbour(node, other)
    larger = other > node
    return other[larger], np.minimum(node, smallest)[larger]


def small_star(node: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A node and its smaller neighbours joined to the smallest of them."""
    smallest, starts, _ = _smallest_neighbour(node, other)
    smaller = other < node
    m = np.minimum(node, smallest)
    own = starts[smallest[starts] < node[starts]]
    return np.concatenate([other[smaller], node[own]]), np.concatenate([m[smaller], smallest[own]])


@dataclass(frozen=True)
class ComponentFiles:
    """Round r's edges (`round-<r>/<task>.npy`) and each round task's count of its input (`<task>.json`)."""

    root: Path

    def round_dir(self, round_: int) -> Path:
        return Path(self.root) / f"round-{round_:03d}"

    def edges(self, round_: int, task: int) -> Path:
        return self.round_dir(round_) / f"{task:05d}.npy"

    def counts(self, round_: int, task: int) -> Path:
        return self.round_dir(round_) / f"{task:05d}.json"

    def found(self, task: int) -> Path:
        """How many edges candidate task `task` confirmed (round 0's input), so that counting needs no edge file."""
        return self.round_dir(0) / f"{task:05d}.found.json"

    def confirmed_edges(self, tasks: int) -> int:
        """Round 0's edges, summed over the candidate tasks (all must have finished)."""
        total = 0
        for task in range(tasks):
            found = self.found(task)
            found_edges = json.loads(in_place.read_bytes(found))["edges"] if in_place.exists(found) else None
            total += RecordFile(self.edges(0, task)).size if found_edges is None else found_edges
        return total

    def edge_files(self, round_: int) -> list[Path]:
        return in_place.children(self.round_dir(round_), "*.npy")

    def part_edges(self, round_: int, part: int) -> np.ndarray:
        """Every edge of round `round_` whose node lies in `part`, sorted by (node, other), unique."""
        pieces = [RecordFile(path).records_with("part", part) for path in self.edge_files(round_)]
        return unique_edges(sorted_records(np.concatenate(pieces))) if pieces else np.zeros(0, dtype=EDGE)

    def not_star_nodes(self, round_: int, tasks: int) -> int:
        """The round's input nodes not yet in star form, summed over its tasks (all must have finished)."""
        return sum(
            json.loads(in_place.read_bytes(self.counts(round_, task)))["not_star_nodes"] for task in range(tasks)
        )


class ComponentsRound(PipelineStep):
    """One round over this task's nodes: large-star on even rounds, small-star on odd ones."""

    name = "🫂 duplicate components"
    type = "🫂 - DEDUP"

    def __init__(self, directory: Path | str, round_: int):
        super().__init__()
        self.files = ComponentFiles(Path(directory))
        self.round = round_

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        with self.track_time():
            edges = self.files.part_edges(self.round, rank)
            node, other = edges["node"], edges["other"]
            step = large_star if self.round % 2 == 0 else small_star
            save_array(self.files.edges(self.round + 1, rank), edge_records(*step(node, other), world_size))
            unsettled = not_star_nodes(node, other)
            atomic_write_text(
                self.files.counts(self.round, rank),
                json.dumps({"edges": int(node.size), "not_star_nodes": unsettled}) + "\n",
            )
        self.stat_update("edges", value=int(node.size))
        self.stat_update("not_star_nodes", value=unsettled)
