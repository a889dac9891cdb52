"""The pipeline room: documents in, a token store out. Imports no other room."""
