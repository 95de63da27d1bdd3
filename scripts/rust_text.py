"""Rust source as the checks read it: code without comments (scripts/check-docs.sh and
scripts/check-modules.py share this, so both read the same code)."""

import re

RAW = re.compile(r'b?r(#*)"')
WORD = re.compile(r"\w")
SPECIAL = re.compile(r"[/\"'br]")

def strip_code(text, keep_strings=False):
    """Rust source with comments blanked out (line breaks kept), and the contents of strings and
    chars too unless `keep_strings`."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, j = 0, i
            while j < n:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                    if depth == 0:
                        break
                else:
                    j += 1
        elif c in "br" and RAW.match(text, i) and (i == 0 or not WORD.match(text[i - 1])):
            m = RAW.match(text, i)
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            j = n if end < 0 else end + 1 + len(m.group(1))
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
        elif c == "'" and re.match(r"'(\\[^']{1,10}|[^\\'])'", text[i:i + 12]):
            j = i + len(re.match(r"'(\\[^']{1,10}|[^\\'])'", text[i:i + 12]).group(0))
        else:
            # Up to the next character that may open a comment, a string or a char.
            nxt = SPECIAL.search(text, i + 1)
            j = n if nxt is None else nxt.start()
            out.append(text[i:j])
            i = j
            continue
        chunk = text[i:j]
        if c in "\"'rb" and keep_strings:
            out.append(chunk)
        elif c in "\"'rb":
            out.append(chunk[0] + re.sub(r"[^\n]", " ", chunk[1:-1]) + chunk[-1])
        else:
            out.append(re.sub(r"[^\n]", " ", chunk))
        i = j
    return "".join(out)
