"""WK-02: the suite's PostgreSQL is a private cluster: a Unix socket only, removed after use."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from qualification.work.postgres import PrivateCluster, absent_reason


@pytest.mark.req("WK-02")
def test_the_private_cluster_listens_on_its_socket_only_and_leaves_nothing_behind() -> None:
    reason = absent_reason()
    if reason is not None:
        pytest.skip(reason)
    cluster = PrivateCluster().start()
    try:
        with cluster.admin() as conn:
            settings = {str(name): str(value) for name, value in conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('listen_addresses', 'unix_socket_directories', 'port')").fetchall()}
            server_version = conn.execute("SHOW server_version_num").fetchone()
        assert settings["listen_addresses"] == ""  # no TCP socket at all
        assert settings["unix_socket_directories"] == str(cluster.socket_dir)
        assert server_version is not None
        assert str(server_version[0]).startswith(cluster.version)
        socket = cluster.socket_dir / f".s.PGSQL.{settings['port']}"
        assert socket.is_socket()
        pid = int((cluster.data / "postmaster.pid").read_text("ascii").split("\n", 1)[0])
        if os.geteuid() == 0:  # PostgreSQL refuses root: it runs as postgres
            assert os.stat(cluster.data).st_uid != 0
    finally:
        cluster.stop()
    assert not cluster.root.exists()
    assert not running(pid)
    cluster.stop()  # idempotent


def running(pid: int) -> bool:
    """Is ``pid`` a live process? A zombie (exited, not yet reaped by init) is not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text("ascii")
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
