"""hangforensics: forensics for hung multi-GPU inference engines."""

from pathlib import Path

__version__ = "0.1.0"

# The database a command reads and writes without --db (the CLI's default, and the entry point's: ``launch``).
DEFAULT_DB = Path("hangforensics.duckdb")
