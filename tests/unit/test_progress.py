"""Progress of a bootstrap or reindex on stderr (replay.ProgressBar): plain lines in a log, a bar on a terminal."""

from __future__ import annotations

import io
import sys
import threading

import pytest

from cdcsync.snapshot.replay import ProgressBar


def test_without_a_terminal_each_update_is_one_plain_line(capsys: pytest.CaptureFixture[str]) -> None:
    with ProgressBar("reindex") as progress:
        progress(2500, 10000, 2.0)
        progress(10000, 10000, 4.0)
    assert capsys.readouterr().err.splitlines() == [
        "reindex: 2,500/10,000 records ( 25.0%)  1,250/s  ETA 6s",
        "reindex: 10,000/10,000 records (100.0%)  2,500/s  ETA 0s",
    ]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_a_bar_shows_the_same_figures_and_ends_with_the_block(monkeypatch: pytest.MonkeyPatch) -> None:
    screen = Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    with ProgressBar("bootstrap") as progress:
        updates = [threading.Thread(target=progress, args=(n, 10000, 2.0)) for n in (1000, 2000, 2500)]
        for update in updates:  # a source bootstrap reports from its writer threads
            update.start()
        for update in updates:
            update.join()
        progress(2500, 10000, 2.0)
    shown = screen.getvalue()
    assert "bootstrap:" in shown and "2,500/10,000 records ( 25.0%)  1,250/s  ETA 6s" in shown
    assert "━" in shown  # the bar
    assert shown.endswith("\n\x1b[?25h")  # the bar's last state stays, and the cursor is shown again
    for redraw in [t for t in threading.enumerate() if type(t).__name__ == "_RefreshThread"]:
        redraw.join(5)  # rich's redrawing thread ends with the block
        assert not redraw.is_alive()
