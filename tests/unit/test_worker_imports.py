"""A Spark task's ``importlib.invalidate_caches()`` no longer re-reads zip archives that did not change."""

from __future__ import annotations

import importlib
import sys
import time
import zipfile
import zipimport
from pathlib import Path

import pytest

from cdcsync.sync.fork_server import reread_zips_only_when_changed


def write_zip(path: Path, modules: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in modules.items():
            archive.writestr(f"{name}.py", text)


def test_an_unchanged_archive_is_not_read_again_and_a_changed_one_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "lib.zip"
    write_zip(archive, {**{f"filler_{i}": "" for i in range(3000)}, "zipmod_a": "A = 1"})
    monkeypatch.syspath_prepend(str(archive))
    assert importlib.import_module("zipmod_a").A == 1
    finder = sys.path_importer_cache[str(archive)]
    assert isinstance(finder, zipimport.zipimporter)

    def seconds_per_call() -> float:
        started = time.perf_counter()
        for _ in range(20):
            importlib.invalidate_caches()
        return (time.perf_counter() - started) / 20

    before = seconds_per_call()
    reread_zips_only_when_changed()
    reread_zips_only_when_changed()  # a second call changes nothing (each task calls it)
    seconds_per_call()  # the first call after the patch reads each archive once more
    after = seconds_per_call()
    assert after < before / 5, (before, after)

    write_zip(archive, {"zipmod_a": "A = 1", "zipmod_b": "B = 2"})  # a changed archive is read again
    importlib.invalidate_caches()
    assert importlib.import_module("zipmod_b").B == 2
    for name in ("zipmod_a", "zipmod_b"):
        sys.modules.pop(name, None)
