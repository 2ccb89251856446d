"""The ``attnpde`` command line (filled in by the run/archive layer)."""
from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    from .demo import main as demo
    return demo(argv)
