"""Plain progress lines for logs (a file, a pipe, a child process), where a bar shows only at exit."""

from __future__ import annotations


def progress_line(
    label: str, position: int, total: int, seconds_per: float, unit: str = "step"
) -> str:
    """``[rl] step 3/16  42.0 s/step  ETA 9.1 min``: position, rate and the time left at that rate."""
    eta = seconds_per * max(total - position, 0)
    return (
        f"[{label}] {unit} {position}/{total}  {seconds_per:.1f} s/{unit}  ETA {eta / 60:.1f} min"
    )
