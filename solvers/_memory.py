"""Up-front memory estimates: a run whose arrays cannot fit is refused before it starts, not killed by
the operating system (or a MemoryError) hours into it."""
from __future__ import annotations

import os

__all__ = ["physical_memory", "memory_limit", "refuse_if_too_big", "GIB"]

GIB = float(1 << 30)
#: share of the physical memory a run may plan to use
_SHARE = 0.8


def memory_limit() -> tuple[float, str]:
    """(bytes this process may use, what limits it): the machine's physical memory, or less where the
    process's address space (``ulimit -v``) or its control group (a container, a batch job: cgroup v2
    ``memory.max``, v1 ``memory.limit_in_bytes``) allows less. (inf, "") where nothing tells."""
    found = []
    try:
        found.append((float(os.sysconf("SC_PAGE_SIZE")) * float(os.sysconf("SC_PHYS_PAGES")), ""))
    except (ValueError, OSError, AttributeError):
        pass
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY and soft > 0:
            found.append((float(soft), "the address-space limit of this process"))
    except (ImportError, ValueError, OSError):
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read(64).strip()
        except OSError:
            continue
        if text.isdigit():
            found.append((float(text), "the memory limit of this process's control group"))
    return min(found, key=lambda v: v[0]) if found else (float("inf"), "")


def physical_memory() -> float:
    """Bytes of memory a run on this machine may count on (:func:`memory_limit`; inf where the system does not
    tell)."""
    return memory_limit()[0]


def refuse_if_too_big(parts: dict[str, float], advice: str) -> None:
    """ValueError when the estimated bytes ``parts`` (what -> bytes) exceed 80% of the physical memory (or of
    the limit of this process: :func:`memory_limit`)."""
    total = sum(parts.values())
    have = physical_memory()
    if total > _SHARE * have:
        detail = ", ".join(f"{k} {v / GIB:.3g} GiB" for k, v in parts.items() if v >= 1e-3 * total)
        limited = memory_limit()
        why = f" ({limited[1]})" if limited[0] == have and limited[1] else ""
        raise ValueError(f"the run would need about {total / GIB:.3g} GiB ({detail}), more than "
                         f"{_SHARE:.0%} of this machine's {have / GIB:.3g} GiB{why}; {advice}")
