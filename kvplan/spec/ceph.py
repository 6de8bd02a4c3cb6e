"""The Ceph cluster behind the ceph tier: how it is deployed, its size, the KV pool and RGW.

LMCache has no RADOS client; it reaches Ceph through RGW's S3 API (virtual-hosted buckets, so
RGW needs `rgw_dns_name`) or through a CephFS mount (reference/lmcache-vllm.md §3.3).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..units import Bandwidth, Size
from .base import SpecModel
from .grammar import AbsPath, DevicePath, HostName, OptionKey, OptionValue, Word

DNS_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"


class Pool(SpecModel):
    """The dedicated replicated pool that holds KV-cache objects."""

    name: str = Field("kvcache", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    """Pool name (for s3 access this is RGW's data pool for the kvplan placement target)."""

    size: int = Field(3, ge=1, le=10)
    """Replicas of each object (ceph osd pool set <pool> size)."""

    min_size: int = Field(2, ge=1, le=10)
    """Replicas that must be up for I/O to proceed."""

    pg_num: int = Field(128, ge=1, le=65536)
    """Placement groups (a power of two)."""

    adopt: bool = False
    """Let kvplan change an existing pool of this name in an external cluster to the spec: size, min_size, pg_num,
    CRUSH rule, autoscale off. Off: the deploy stops before changing a pool it did not create."""


class Rgw(SpecModel):
    """The RADOS Gateway that serves LMCache's S3 requests."""

    port: int = Field(8080, ge=1, le=65535)
    """Port RGW's beast frontend listens on."""

    dns_name: str = Field("rgw.kvplan.internal", pattern=rf"^{DNS_LABEL}(\.{DNS_LABEL})*$")
    """rgw_dns_name: LMCache's S3 client addresses <bucket>.<dns_name>:<port>."""

    bucket: str = Field("kvcache", pattern=rf"^{DNS_LABEL}$", min_length=3)
    """Bucket for KV chunks: 3-63 lowercase letters, digits and hyphens (it becomes a DNS label)."""

    region: Word = "default"
    """S3 region string RGW expects (its zonegroup's api_name)."""
    address: HostName | None = None
    """Address clients reach RGW at, a host name or IP address (default: the first host of the inventory's ceph group)."""
    user: str = Field("kvplan", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    """RGW user that owns the bucket; its S3 keys are generated once and kept in the state directory's secrets/ (~/.local/state/kvplan/secrets/)."""


class Ceph(SpecModel):
    deploy: Literal["external", "cephadm", "packages"] = "packages"
    """external: use an existing cluster (only pool, user, bucket, options); cephadm: bootstrap a
    containerised cluster; packages: distribution packages, no containers (single node, CI)."""

    hosts: int = Field(3, ge=1, le=1000)
    """Number of OSD hosts."""

    osds_per_host: int = Field(1, ge=1, le=64)
    """OSDs (devices) per host."""

    osd_size: Size = "3.84TB"
    """Raw capacity of one OSD device."""
    osd_devices: list[DevicePath] = []
    """Block devices for the OSDs of each host (packages and cephadm modes), e.g. [/dev/nvme1n1].
    Empty in packages mode: sparse file-backed BlueStore OSDs of osd_size (development and CI)."""

    device_class: Literal["hdd", "ssd", "nvme"] = "nvme"
    """CRUSH device class of the OSDs holding the KV pool."""

    network: str = "25GbE"
    """NIC class of the storage network, by catalog name (`kvplan catalog`)."""

    network_bandwidth: Bandwidth | None = None
    """Storage-network bandwidth per host when it differs from the NIC class's (bonded or shared links), e.g. 50Gbit."""

    failure_domain: Literal["host", "osd"] = "host"
    """CRUSH failure domain: replicas on different hosts, or only on different OSDs."""

    pool: Pool = Pool()
    """The KV-cache pool."""

    access: Literal["s3", "cephfs"] = "s3"
    """How LMCache reaches Ceph: s3 through RGW, or a CephFS mount (simulation-only: kvplan does not deploy CephFS)."""

    rgw: Rgw = Rgw()
    """RGW settings (used when access is s3)."""

    cephfs_mount: AbsPath = "/mnt/cephfs/lmcache"
    """Directory on the CephFS mount (access: cephfs, which is simulation-only: kvplan does not deploy CephFS)."""

    options: dict[OptionKey, OptionValue] = {}
    """Extra `ceph config set` options, e.g. {osd_memory_target: 8589934592}: names are [a-z0-9_]+, values one
    line of printable text each."""

    allow_no_auth: bool = False
    """Let ceph.options switch cephx authentication off (auth_cluster_required, auth_service_required,
    auth_client_required or auth_supported naming `none`): then anyone who reaches the cluster's network reads and
    writes every pool, the KV cache's prompts included. Off: such options are refused at validate."""
