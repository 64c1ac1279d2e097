"""How the demo tells its story on a terminal: numbered steps with their elapsed time, indented details."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

import click


class Progress:
    """`[3/9 01:12] step` lines plus indented details; to stderr under --json so stdout stays one document."""

    def __init__(self, out: TextIO, total: int) -> None:
        self.out, self.total, self.t0, self.step = out, total, time.monotonic(), 0
        self.tty = out.isatty()

    def elapsed(self) -> str:
        s = int(time.monotonic() - self.t0)
        return f"{s // 60:02d}:{s % 60:02d}"

    def start(self, title: str) -> None:
        self.step += 1
        self._line(click.style(f"[{self.step}/{self.total} {self.elapsed()}] ", bold=True) + title)

    def say(self, text: str) -> None:
        self._line(f"    {text}")

    def counter(self, label: str) -> Callable[[int, int], None]:
        """A callback printing `label done/total` (in place on a terminal, every 25% otherwise)."""

        def show(done: int, total: int) -> None:
            if self.tty:
                end = "\n" if done == total else ""
                self.out.write(f"\r    {label} {done}/{total}{end}")
                self.out.flush()
            elif done == total or done % max(1, total // 4) == 0:
                self._line(f"    {label} {done}/{total}")

        return show

    def _line(self, text: str) -> None:
        click.echo(text, file=self.out, color=self.tty)
