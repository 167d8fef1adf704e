"""Choosing the profile: named on the command line, named in ``EDGE_PROFILE``, or the
largest profile the detected hardware can hold."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pydantic import BaseModel, ConfigDict

from ._detect import HardwareInfo
from ._profile import GIB, DeviceProfile, ProfileError

ENV_PROFILE = "EDGE_PROFILE"


class ProfileChoice(BaseModel):
    model_config = ConfigDict(frozen=True)

    profile: DeviceProfile
    how: str  # "argument", "environment", "board", "hardware", "fallback"
    reason: str


def _fits(profile: DeviceProfile, hw: HardwareInfo) -> list[str]:
    """Why ``profile`` does not fit ``hw`` (empty when it does)."""
    spec = profile.device
    misfits = []
    if spec.arch != hw.arch:
        misfits.append(f"arch {spec.arch} != {hw.arch}")
    if spec.accelerator == "cuda" and not hw.cuda:
        misfits.append("needs CUDA")
    if profile.service_memory_bytes > hw.memory_bytes:
        misfits.append(f"needs {spec.service_memory_gib:g} GiB, {hw.memory_bytes / GIB:.1f} usable")
    if spec.cpu_cores > hw.cpus:
        misfits.append(f"needs {spec.cpu_cores} cores, {hw.cpus} allowed")
    return misfits


def choose_profile(
    profiles: Mapping[str, DeviceProfile],
    hardware: HardwareInfo,
    requested: str | None = None,
    env: Mapping[str, str] | None = None,
    *,
    load: Callable[[str], DeviceProfile] | None = None,
) -> ProfileChoice:
    """Pick the profile and say why.

    Order: an explicit ``requested`` name, then ``EDGE_PROFILE``, then a profile whose
    ``board_match`` appears in the board's device-tree model, then the fitting profile
    (same arch, CUDA when it needs it, service memory and cores within what this process
    may use) with the most memory and cores, CUDA profiles first. When nothing fits, the
    smallest profile of this architecture (or overall) is used and the reason says so.
    """
    if not profiles:
        raise ProfileError("no device profiles found")
    if requested:
        return ProfileChoice(
            profile=_named(profiles, requested, load),
            how="argument",
            reason=f"--profile {requested}",
        )
    named = (env or {}).get(ENV_PROFILE)
    if named:
        return ProfileChoice(
            profile=_named(profiles, named, load),
            how="environment",
            reason=f"{ENV_PROFILE}={named}",
        )
    return (
        _by_board(profiles, hardware)
        or _by_fit(profiles, hardware)
        or _fallback(profiles, hardware)
    )


def _by_board(
    profiles: Mapping[str, DeviceProfile], hardware: HardwareInfo
) -> ProfileChoice | None:
    """The profile whose ``board_match`` appears in the board's device-tree model."""
    if not hardware.board:
        return None
    for profile in profiles.values():
        match = profile.device.board_match
        if match and match.lower() in hardware.board.lower():
            return ProfileChoice(
                profile=profile, how="board", reason=f"board {hardware.board!r} matches {match!r}"
            )
    return None


def _by_fit(profiles: Mapping[str, DeviceProfile], hardware: HardwareInfo) -> ProfileChoice | None:
    """The fitting profile with the most memory and cores, CUDA profiles first."""
    fitting = [p for p in profiles.values() if not _fits(p, hardware)]
    if not fitting:
        return None
    best = max(
        fitting,
        key=lambda p: (
            p.device.accelerator == "cuda",
            p.device.service_memory_gib,
            p.device.cpu_cores,
        ),
    )
    return ProfileChoice(
        profile=best,
        how="hardware",
        reason=(
            f"largest profile that fits {hardware.arch}, {hardware.cpus} cores, "
            f"{hardware.memory_bytes / GIB:.1f} GiB usable, "
            f"{'CUDA' if hardware.cuda else 'no CUDA'}"
        ),
    )


def _fallback(profiles: Mapping[str, DeviceProfile], hardware: HardwareInfo) -> ProfileChoice:
    """Nothing fits: the smallest profile of this architecture (or overall), saying why."""
    same_arch = [p for p in profiles.values() if p.device.arch == hardware.arch]
    pool = same_arch or list(profiles.values())
    smallest = min(pool, key=lambda p: (p.device.service_memory_gib, p.device.cpu_cores))
    why = "; ".join(f"{name}: {', '.join(_fits(p, hardware))}" for name, p in profiles.items())
    return ProfileChoice(
        profile=smallest,
        how="fallback",
        reason=f"no profile fits this machine ({why}); using the smallest",
    )


def _named(
    profiles: Mapping[str, DeviceProfile],
    name: str,
    load: Callable[[str], DeviceProfile] | None,
) -> DeviceProfile:
    if name in profiles:
        return profiles[name]
    if load is not None:
        return load(name)  # a user's profile, or a path to a profile file
    known = ", ".join(sorted(profiles))
    raise ProfileError(f"no device profile named {name!r}; known profiles: {known}")
