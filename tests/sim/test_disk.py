"""The simulated disk loses exactly what a power cut may lose: bytes written after a file's last
fsync (a suffix of them), renames and new names after the directory's last fsync; nothing synced."""

from __future__ import annotations

import os
import random
from pathlib import Path

from molens.lmdb_snapshot import BOOT_MARKER, guard_boot, write_durably
from tests.sim.disk import SimDisk


def _write(disk: SimDisk, path: Path, data: bytes, sync: bool) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        if sync:
            disk.fsync(f.fileno())


def test_synced_and_renamed_and_dir_synced_file_survives_every_power_loss(tmp_path: Path) -> None:
    disk = SimDisk()
    disk.track(tmp_path)
    for seed in range(20):
        _write(disk, tmp_path / "a.tmp", b"x" * 100, sync=True)
        disk.replace(tmp_path / "a.tmp", tmp_path / "a")
        disk.fsync_dir(tmp_path)
        disk.power_loss(tmp_path, random.Random(seed))
        assert (tmp_path / "a").read_bytes() == b"x" * 100
        assert not (tmp_path / "a.tmp").exists()


def test_unsynced_bytes_are_a_suffix_that_may_be_dropped(tmp_path: Path) -> None:
    disk = SimDisk()
    disk.track(tmp_path)
    seen = set()
    for seed in range(40):
        _write(disk, tmp_path / "f", b"synced", sync=True)
        disk.fsync_dir(tmp_path)
        with open(tmp_path / "f", "ab") as f:
            f.write(b"-more")
        disk.power_loss(tmp_path, random.Random(seed))
        got = (tmp_path / "f").read_bytes()
        assert (b"synced-more").startswith(got) and got.startswith(b"synced")
        seen.add(got)
    assert b"synced" in seen and b"synced-more" in seen


def test_rename_without_directory_fsync_may_be_undone(tmp_path: Path) -> None:
    disk = SimDisk()
    disk.track(tmp_path)
    outcomes = set()
    for seed in range(40):
        for p in tmp_path.iterdir():
            p.unlink()
        disk.track(tmp_path)
        _write(disk, tmp_path / "new.tmp", b"data", sync=True)
        disk.replace(tmp_path / "new.tmp", tmp_path / "new")
        disk.power_loss(tmp_path, random.Random(seed))
        outcomes.add(tuple(sorted(os.listdir(tmp_path))))
    assert outcomes == {("new",), ()}  # the rename kept, or undone and the never-durable temp name gone


def test_the_boot_guard_discards_a_store_left_open_by_the_boot_before_a_power_loss(tmp_path: Path) -> None:
    disk = SimDisk()
    disk.track(tmp_path)
    (tmp_path / "data.mdb").touch()
    assert not guard_boot(tmp_path, "boot-1", "task store", disk)
    disk.power_loss(tmp_path, random.Random(0))
    assert (tmp_path / BOOT_MARKER).read_text() == "boot-1"  # written durably: it survives
    assert guard_boot(tmp_path, "boot-2", "task store", disk)
    assert not (tmp_path / "data.mdb").exists()


def test_write_durably_survives_power_loss_at_any_point_after_it(tmp_path: Path) -> None:
    disk = SimDisk()
    disk.track(tmp_path)
    for seed in range(20):
        write_durably(tmp_path / "m", f"v{seed}", disk)
        disk.power_loss(tmp_path, random.Random(seed))
        assert (tmp_path / "m").read_text() == f"v{seed}"
