"""The pipeline's datatrove steps, one subpackage per part of the flow, in the order the runner runs them.

    read/       which files each source reads (`discovery`), the readers with every malformed record counted
                (`readers`; `compressed` input, `warc` records)
    filter/     extraction, normalising, language id and the registered filters (`filtering`), each language's
                rules (`language_rules`), the corpus sample drawn in the filter tasks (`sample`)
    dedup/      exact and MinHash signatures in the filter tasks (`signing`), duplicate finding over sorted
                record files (`duplicates`, `sorted_runs`, `components`), n-gram arithmetic (`ngrams`)
    tokenize/   the quality and domain models' steps (`cell_steps`), tokenization (`tokenization`) straight
                into the store's shards (`cell_shards`)
    held_out/   held-out decontamination (`contamination`), the split tasks (`split`), evaluation sets
                (`eval_sets`)
    assemble    the store from what the tasks wrote

Shared by every run: `intermediate` (the document files between executor runs), `funnel` (what each counted
step received, kept and removed) and `progress` (the steady lines while a run goes). All of them import datatrove.
"""
