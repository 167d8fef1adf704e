"""mDNS (zeroconf) advertising of the WebSocket and Wyoming services.

The WebSocket service is ``<name>._xr-edge._tcp.local.`` and the Wyoming service
``<name>._wyoming._tcp.local.`` (the type Home Assistant discovers). TXT records carry
the version, the device profile, the models and the protocol path.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Mapping, Sequence

import anyio
from zeroconf import InterfaceChoice, IPVersion, ServiceInfo
from zeroconf.asyncio import AsyncZeroconf

log = logging.getLogger(__name__)

WEBSOCKET_SERVICE = "_xr-edge._tcp.local."
WYOMING_SERVICE = "_wyoming._tcp.local."


def _instance(name: str) -> str:
    clean = "".join(c if c.isalnum() or c in "- " else "-" for c in name).strip() or "edge"
    return clean[:60]


def mdns_host_name(name: str) -> str:
    """The host name the records for instance ``name`` point at (``edge-on-box.local``)."""
    return f"{_instance(name).replace(' ', '-').lower()}.local"


def advertised_addresses(host: str, interfaces: Sequence[str] | None) -> list[str]:
    """IPv4 addresses to put in the records: the bound host when it is specific, else the
    given interfaces' addresses, else this machine's non-loopback addresses."""
    if host not in ("", "0.0.0.0", "::"):
        return [host]
    if interfaces:
        return [i for i in interfaces if _is_ipv4(i)]
    found: set[str] = set()
    try:  # UDP "connect" sends nothing; it only asks the kernel for the outgoing address
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))
            found.add(probe.getsockname()[0])
    except OSError:
        pass
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            found.add(str(info[4][0]))
    except OSError:
        pass
    usable = sorted(a for a in found if not ipaddress.ip_address(a).is_loopback)
    return usable or ["127.0.0.1"]


def _is_ipv4(value: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(value), ipaddress.IPv4Address)
    except ValueError:
        return False


class MdnsAdvertiser:
    """Registers services on ``async with`` and unregisters them on exit.

    ``interfaces`` None uses every interface; tests pass ``["127.0.0.1"]``.
    """

    def __init__(self, name: str, *, interfaces: Sequence[str] | None = None) -> None:
        self.name = _instance(name)
        self.interfaces = list(interfaces) if interfaces is not None else None
        self.infos: list[ServiceInfo] = []
        self._zc: AsyncZeroconf | None = None

    def add(
        self, service_type: str, port: int, addresses: Sequence[str], properties: Mapping[str, str]
    ) -> ServiceInfo:
        if self._zc is not None:
            raise RuntimeError("add services before entering the advertiser")
        info = ServiceInfo(
            service_type,
            f"{self.name}.{service_type}",
            port=port,
            addresses=[socket.inet_aton(a) for a in addresses],
            properties=dict(properties),
            server=f"{mdns_host_name(self.name)}.",
        )
        self.infos.append(info)
        return info

    async def __aenter__(self) -> MdnsAdvertiser:
        zc = AsyncZeroconf(
            interfaces=self.interfaces or InterfaceChoice.All, ip_version=IPVersion.V4Only
        )
        self._zc = zc
        try:
            for info in self.infos:
                await zc.async_register_service(info, allow_name_change=True)
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._close()

    async def _close(self) -> None:
        zc, self._zc = self._zc, None
        if zc is None:
            return
        with anyio.CancelScope(shield=True):
            try:
                await zc.async_unregister_all_services()
            except Exception:
                log.warning("unregistering mDNS services failed", exc_info=True)
            await zc.async_close()


async def discover(
    service_type: str = WEBSOCKET_SERVICE,
    *,
    interfaces: Sequence[str] | None = None,
    wait_s: float = 3.0,
    settle_s: float = 0.0,
) -> list[ServiceInfo]:
    """Browse for ``service_type`` for up to ``wait_s`` seconds (returning ``settle_s``
    after the first one answers, so others answering with it are seen too) and resolve
    what was found."""
    from zeroconf.asyncio import AsyncServiceBrowser

    zc = AsyncZeroconf(
        interfaces=list(interfaces) if interfaces else InterfaceChoice.All,
        ip_version=IPVersion.V4Only,
    )
    names: list[str] = []
    found = anyio.Event()

    def on_change(zeroconf: object, service_type: str, name: str, state_change: object) -> None:
        if name not in names:
            names.append(name)
            found.set()

    browser = AsyncServiceBrowser(zc.zeroconf, service_type, handlers=[on_change])
    try:
        with anyio.move_on_after(wait_s):
            await found.wait()
            await anyio.sleep(settle_s)
        infos: list[ServiceInfo] = []
        for name in names:
            info = await zc.async_get_service_info(service_type, name, 3000)
            if info is not None:
                infos.append(info)
        return infos
    finally:
        with anyio.CancelScope(shield=True):
            await browser.async_cancel()
            await zc.async_close()
