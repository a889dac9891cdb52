"""The mixture search: a swarm of proxy runs branched from one shared checkpoint, a surrogate fitted on their
held-out results, a proposed revision under the epoch cap, and its validation at several seeds against the
baselines (`millrace mix search plan|run|fit|propose|validate`).

    records.py      the spec file and the artifacts under searches/<name>/ (torch-free: the search page reads it)
    spec.py         a search file resolved: train config, baseline revision, branch step, proxy steps, horizon
    fingerprint.py  cells keyed by content; rows matched to today's cells, stranded ones named
    revisions.py    weights over components as revisions continuing the baseline at the branch step
    plan.py / run.py / fit.py / proposal.py / validate.py   the five steps; steps.py calls them; cli.py
    sampling.py     mixtures drawn around the prior (RegMix's Dirichlet), projected under the epoch cap
    surrogate.py    log-linear and LightGBM surrogates, k-fold out-of-fold fit quality
    propose.py      the surrogate's best mixture under the constraints, with an interval; mixture reuse
    seeds.py        the measured difference of two mixtures over seeds (Welch's t interval)

Downstream of trainer and mixtures; nothing upstream imports it. The maths modules are pure functions of numpy
arrays (no torch, no files), like the ladder's fit.
"""
