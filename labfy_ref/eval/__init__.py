"""``labfy-ref eval`` (EV-01): SPECIMEN tasks on a real model, a table and a pass rate."""

from labfy_ref.eval.record import RECORD_NAME, EvalEntry, read_record, write_entry
from labfy_ref.eval.tasks import Task, degenerate, grounded, judge, load_tasks

__all__ = ["RECORD_NAME", "EvalEntry", "Task", "degenerate", "grounded", "judge", "load_tasks",
           "read_record", "write_entry"]
