"""Java `.properties` text, read as `java.util.Properties.load` reads it.

Rules (java.util.Properties.load / LineReader / loadConvert):
- Natural lines end at "\\n", "\\r" or "\\r\\n". Leading whitespace (space, tab,
  form feed) of every natural line is skipped.
- A line whose first non-blank character is "#" or "!" is a comment; blank lines
  are ignored. A comment never continues onto the next line.
- A line ending in an odd number of backslashes continues on the next natural
  line: the backslash is dropped, the next line's leading whitespace too. A
  continuation line is never a comment.
- The key ends at the first unescaped "=", ":" or whitespace; whitespace, then at
  most one "=" or ":", then whitespace separate it from the value. The value runs
  to the end of the logical line (trailing whitespace kept).
- Escapes in keys and values: \\t \\n \\r \\f, \\uXXXX (exactly four hex digits,
  otherwise an error, as Java's "Malformed \\uxxxx encoding"), and a backslash
  before any other character yields that character.
- A key given twice: the last one wins (reported by config.py).

Each property keeps the number of the natural line it starts on, for messages.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PropertiesSyntaxError", "PropertyLine", "parse_properties"]

_WHITESPACE = " \t\f"
# A properties file larger than this is refused (a bound, as every input has one).
MAX_PROPERTIES_CHARS = 16 * 1024 * 1024


class PropertiesSyntaxError(ValueError):
    def __init__(self, message: str, line: int) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


@dataclass(frozen=True, slots=True)
class PropertyLine:
    key: str
    value: str
    line: int


def _natural_lines(text: str) -> list[str]:
    lines: list[str] = []
    start = 0
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\n" or c == "\r":
            lines.append(text[start:i])
            if c == "\r" and i + 1 < n and text[i + 1] == "\n":
                i += 1
            start = i + 1
        i += 1
    if start < n:
        lines.append(text[start:])
    return lines


def _trailing_backslashes(s: str) -> int:
    count = 0
    for c in reversed(s):
        if c != "\\":
            break
        count += 1
    return count


def _unescape(s: str, line: int) -> str:
    out: list[str] = []
    i = 0
    n = len(s)
    while i < n:
        c = s[i]
        i += 1
        if c != "\\":
            out.append(c)
            continue
        if i >= n:
            # A lone trailing backslash (continuation at end of input): Java drops it.
            break
        c = s[i]
        i += 1
        if c == "u":
            digits = s[i : i + 4]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise PropertiesSyntaxError("Malformed \\uxxxx encoding.", line)
            out.append(chr(int(digits, 16)))
            i += 4
        elif c == "t":
            out.append("\t")
        elif c == "r":
            out.append("\r")
        elif c == "n":
            out.append("\n")
        elif c == "f":
            out.append("\f")
        else:
            out.append(c)
    return "".join(out)


def _split_key_value(logical: str) -> tuple[str, str]:
    limit = len(logical)
    key_len = 0
    value_start = limit
    has_sep = False
    preceding_backslash = False
    while key_len < limit:
        c = logical[key_len]
        if c in "=:" and not preceding_backslash:
            value_start = key_len + 1
            has_sep = True
            break
        if c in _WHITESPACE and not preceding_backslash:
            value_start = key_len + 1
            break
        preceding_backslash = (not preceding_backslash) if c == "\\" else False
        key_len += 1
    while value_start < limit:
        c = logical[value_start]
        if c not in _WHITESPACE:
            if not has_sep and c in "=:":
                has_sep = True
            else:
                break
        value_start += 1
    return logical[:key_len], logical[value_start:]


def parse_properties(text: str) -> tuple[PropertyLine, ...]:
    """Every key/value of `text` in file order (duplicates included)."""
    if len(text) > MAX_PROPERTIES_CHARS:
        raise PropertiesSyntaxError(f"file larger than {MAX_PROPERTIES_CHARS} characters", 1)
    result: list[PropertyLine] = []
    naturals = _natural_lines(text)
    i = 0
    while i < len(naturals):
        start_line = i + 1
        stripped = naturals[i].lstrip(_WHITESPACE)
        i += 1
        if not stripped or stripped[0] in "#!":
            continue
        logical = stripped
        while _trailing_backslashes(logical) % 2 == 1:
            logical = logical[:-1]
            if i >= len(naturals):
                break
            logical += naturals[i].lstrip(_WHITESPACE)
            i += 1
        raw_key, raw_value = _split_key_value(logical)
        result.append(
            PropertyLine(
                _unescape(raw_key, start_line), _unescape(raw_value, start_line), start_line
            )
        )
    return tuple(result)
