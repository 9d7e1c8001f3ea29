"""``dmt-bench judge-train`` and ``dmt-bench judge-report``: judge v2's training and report."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    """Add ``judge-train`` and ``judge-report`` to ``dmt-bench``."""
    from dmt_bench.auditor_eval import judge_report, judge_train

    train = subparsers.add_parser(
        "judge-train", help="train judge v2's heads on the labelled sets' train splits",
        description=judge_train.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    judge_train.add_arguments(train)
    train.set_defaults(func=lambda args: judge_train.run(args))
    report = subparsers.add_parser(
        "judge-report", help="judge v2 against its targets, from auditor-eval reports",
        description=judge_report.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    judge_report.add_arguments(report)
    report.set_defaults(func=judge_report.run)
