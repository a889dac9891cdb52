"""Reading: which files each source reads, and datatrove's readers with every malformed record counted."""
