"""hangforensics: forensics for hung multi-GPU inference engines."""

__version__ = "0.1.0"
