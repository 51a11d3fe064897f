"""The data of a command's CSV output: every CSV result opens with ``#`` lines recording its run
(moeroof.cli.output.run_record: version, command line, inputs' hashes, UTC time); these helpers
read past them, as ``pandas.read_csv(comment="#")`` does."""

from __future__ import annotations

import csv
import io


def data_text(text: str) -> str:
    """``text`` without its leading ``#`` run-record lines (there must be some)."""
    lines = text.splitlines(keepends=True)
    n = 0
    while n < len(lines) and lines[n].startswith("#"):
        n += 1
    assert n >= 1 and lines[0].startswith("# moeroof "), f"no run record above the CSV: {text[:200]!r}"
    return "".join(lines[n:])


def rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data_text(text))))


def dict_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(data_text(text))))


def strip_run(rep):
    """A JSON result without its run record (which names the command line, the inputs and the
    time, so two runs compared for their numbers differ there by design); checks it is there."""
    if isinstance(rep, dict) and "run" in rep:
        run = rep.pop("run")
        assert set(run) == {"moeroof_version", "command", "inputs", "utc"}, run
    return rep
