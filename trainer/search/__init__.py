"""The mixture search: a swarm of proxy runs, a fitted surrogate, a proposed revision, validated with seeds.

    sampling.py   mixtures drawn around the prior (RegMix's Dirichlet), projected under the epoch cap
    surrogate.py  log-linear and LightGBM surrogates, k-fold out-of-fold fit quality
    propose.py    the surrogate's best mixture under the constraints, with an interval; mixture reuse
    seeds.py      the measured difference of two mixtures over seeds (Welch's t interval)

Downstream of trainer and mixtures; nothing upstream imports it. The maths modules are pure functions
of numpy arrays (no torch, no files), like the ladder's fit.
"""
