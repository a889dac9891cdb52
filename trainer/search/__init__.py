"""The mixture search: a swarm of proxy runs branched from one shared checkpoint, a surrogate fitted on their
held-out results, a proposed revision under the epoch cap, and its validation at several seeds against the
baselines (`millrace mix search plan|run|fit|propose|validate`). Downstream of the trainer and the mixtures room;
nothing upstream imports it."""
