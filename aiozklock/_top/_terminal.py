"""``top``'s terminal, with plain ANSI (VT100) sequences and ``termios``: the alternate
screen, no cursor, no line wrap, keys read as typed (no echo, no line editing; Ctrl-C still
signals). A frame rewrites only the rows that changed since the last one; ``restore()`` (or
leaving the ``with``) gives the terminal back as it was, and is safe to call twice.

Plain sequences rather than ``curses``: every terminal reached over SSH today understands
them, reading keys is one ``wait_readable`` on the event loop (``curses`` would want a
thread for its blocking ``getch``, and installs its own SIGWINCH handler), and nothing
beyond the standard library is needed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import termios
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import anyio

from aiozklock._top._screen import Line, Style
from aiozklock._top._text import cells

CSI = "\x1b["
_ENTER = "\x1b[?1049h" + "\x1b[?25l" + "\x1b[?7l" + "\x1b[H\x1b[2J"  # alt screen, no cursor/wrap
_LEAVE = "\x1b[0m" + "\x1b[?7h" + "\x1b[?25h" + "\x1b[?1049l"
_COLOURS: dict[Style, str] = {
    "plain": "",
    "title": "\x1b[7m",  # reverse video
    "head": "\x1b[1m",  # bold
    "critical": "\x1b[1;37;41m",  # bold white on red
    "warning": "\x1b[1;33m",  # bold yellow
}
_NO_COLOURS: dict[Style, str] = {**_COLOURS, "critical": "\x1b[1;7m", "warning": "\x1b[1m"}
_BANDS: frozenset[Style] = frozenset({"title", "critical"})  # styles painted across the row


class Terminal:
    """The terminal of ``fd_in`` (keys) and ``fd_out`` (frames), both a tty."""

    def __init__(self, fd_in: int = 0, fd_out: int = 1) -> None:
        self._in = fd_in
        self._out = fd_out
        self._saved: list[Any] | None = None  # termios attributes
        self._shown: list[str] = []  # the rows on screen, as written
        self._encoding = sys.stdout.encoding or "utf-8"
        self._styles = _NO_COLOURS if os.environ.get("NO_COLOR") else _COLOURS

    def __enter__(self) -> Terminal:
        self.resume()
        return self

    def resume(self) -> None:
        """Take the terminal (again, after ``restore()``): keys as typed, the alternate
        screen; the next ``draw`` should be ``full``."""
        if self._saved is not None:
            return
        saved = termios.tcgetattr(self._in)
        mode = termios.tcgetattr(self._in)
        mode[3] &= ~(termios.ECHO | termios.ICANON)  # lflags: keys as typed, not echoed
        mode[6][termios.VMIN], mode[6][termios.VTIME] = 1, 0
        termios.tcsetattr(self._in, termios.TCSANOW, mode)
        self._saved = saved
        self._shown = []
        self._write(_ENTER)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.restore()

    def restore(self) -> None:
        """Leave the alternate screen, show the cursor, restore the terminal's modes."""
        saved, self._saved = self._saved, None
        if saved is None:
            return
        with contextlib.suppress(OSError, termios.error):  # a terminal gone needs nothing back
            try:
                self._write(_LEAVE)
            finally:
                termios.tcsetattr(self._in, termios.TCSADRAIN, saved)

    def size(self) -> tuple[int, int]:
        """Columns and rows now (80x24 if the terminal does not say)."""
        try:
            size = os.get_terminal_size(self._out)
        except OSError:
            size = shutil.get_terminal_size()
        return size.columns, size.lines

    def draw(self, lines: Sequence[Line], *, full: bool = False) -> None:
        """Show ``lines`` from the top row: only the rows that differ from what is shown,
        or every row (the screen cleared first) if ``full``."""
        if self._saved is None:
            return
        columns, _ = self.size()
        rows = [self._row(line, columns) for line in lines]
        out = []
        if full:
            out.append("\x1b[0m\x1b[H\x1b[2J")
            self._shown = []
        for index, row in enumerate(rows):
            if index >= len(self._shown) or self._shown[index] != row:
                out.append(f"{CSI}{index + 1};1H\x1b[0m\x1b[2K{row}")
        for index in range(len(rows), len(self._shown)):
            out.append(f"{CSI}{index + 1};1H\x1b[0m\x1b[2K")
        self._shown = rows
        if out:
            self._write("".join(out))

    def _row(self, line: Line, columns: int) -> str:
        style = self._styles[line.style]
        if not style:
            return line.text
        text = line.text
        if line.style in _BANDS:  # a band across the screen: the title, an alarm
            text += " " * max(0, columns - cells(text))
        return f"{style}{text}\x1b[0m"

    async def read(self) -> str:
        """The keys typed since the last call, waiting for one; ``""`` at end of input."""
        await anyio.wait_readable(self._in)
        return os.read(self._in, 1024).decode(self._encoding, errors="replace")

    def _write(self, text: str) -> None:
        data = text.encode(self._encoding, errors="replace")
        while data:
            written = os.write(self._out, data)
            data = data[written:]


__all__ = ("Terminal",)
