"""millrace: the frame of the house (command line, artifact root, artifact files).

The rooms (`pipeline`, `mixtures`, `loader`, `trainer`, `reports`) are packages of
their own; this package holds only what every room needs and no room owns.
"""

__version__ = "0.1.0"
