"""The scaling ladder: rungs of one model family on one revision, fitted to predict a bigger run.

    spec.py           the ladder file (base config, rules, revision, target)
    plan.py           rungs sized on paper (`ladder plan`)
    rung_revision.py  the revision scaled to a rung's budget, same phases and weights
    run.py            train the rungs, resumable (`ladder run`)
    results.py        ladder.json and the rungs' held-out evaluations
    fit.py            L(C) = L_inf + A * C^-alpha, pure (`ladder fit`)
    points.py         fit points from rungs or a file; ladder_fit.py: fit a ladder and save it
    compare.py        two revisions against the seed spread (`ladder compare`)

Downstream of trainer and mixtures; nothing upstream imports it.
"""
