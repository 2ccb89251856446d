"""Up-front memory estimates: a run whose arrays cannot fit is refused before it starts, not killed by
the operating system (or a MemoryError) hours into it."""
from __future__ import annotations

import os

__all__ = ["physical_memory", "refuse_if_too_big", "GIB"]

GIB = float(1 << 30)
#: share of the physical memory a run may plan to use
_SHARE = 0.8


def physical_memory() -> float:
    """Bytes of physical memory of this machine (inf where the system does not tell)."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE")) * float(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return float("inf")


def refuse_if_too_big(parts: dict[str, float], advice: str) -> None:
    """ValueError when the estimated bytes ``parts`` (what -> bytes) exceed 80% of the physical memory."""
    total = sum(parts.values())
    have = physical_memory()
    if total > _SHARE * have:
        detail = ", ".join(f"{k} {v / GIB:.3g} GiB" for k, v in parts.items() if v >= 1e-3 * total)
        raise ValueError(f"the run would need about {total / GIB:.3g} GiB ({detail}), more than "
                         f"{_SHARE:.0%} of this machine's {have / GIB:.3g} GiB; {advice}")
