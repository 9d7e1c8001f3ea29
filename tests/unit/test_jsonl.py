"""Append-only JSONL record files: a torn line is skipped, everything else reads back."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from dmt_bench.jsonl import append_record, read_records


class Row(BaseModel):
    n: int


def test_records_read_back_in_order_and_a_torn_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    assert read_records(path, Row) == []
    append_record(path, Row(n=1))
    append_record(path, Row(n=2), sync=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write('\n{"n": 3')  # a blank line, then a writer killed mid-line
    assert read_records(path, Row) == [Row(n=1), Row(n=2)]
