"""The held-out split: decontamination against training, the split tasks, and external evaluation sets."""
