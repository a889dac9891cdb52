"""The embedded default corpus built from what is on this machine (`builder`), and `millrace corpus` (`cli`)."""
