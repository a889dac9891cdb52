"""Imported once by datatrove's forkserver (see `pipeline.runner`), before it forks any task process.

datatrove's local pool runs every task in a new process (`maxtasksperchild=1`), and each one would import
datatrove, the pipeline's steps and spaCy again, and load py3langid's model again: 1.5 s of CPU per task, 3 s
per filter task. Forked from a server that holds them, a task starts with them loaded.
"""

import datatrove.executor.local  # noqa: F401

import pipeline.runner  # noqa: F401
from pipeline.steps.filter.filtering import language_identifier
from pipeline.steps.filter.language_rules import import_spacy_without_torch

import_spacy_without_torch()
language_identifier()
