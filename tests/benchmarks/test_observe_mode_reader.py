"""The observe-mode benchmark's reader of logged batches, read while a job writes them."""

from __future__ import annotations

from pathlib import Path

from benchmarks.observe_mode import batches, per_second


def test_a_line_not_yet_written_whole_is_left_for_the_next_read(tmp_path: Path) -> None:
    (tmp_path / "1.log").write_text("1.5 100\n2.5 100\n3.5")  # its last line half written
    (tmp_path / "2.log").write_text("1.0 5\n")
    assert batches(tmp_path) == [(1.0, 5), (1.5, 100), (2.5, 100)]
    assert per_second(batches(tmp_path), 1.0, 2) == [105, 100]
