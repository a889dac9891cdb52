"""The filter run after reading: extraction, normalising, language id, the registered filters, the corpus sample."""
