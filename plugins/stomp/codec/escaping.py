"""Header value encoding per STOMP version.

1.0 has no escapes: a backslash is a backslash. 1.1 escapes backslash, LF and colon as `\\\\`,
`\\n`, `\\c`; 1.2 adds CR as `\\r`. Any other escape (say `\\t`, or a trailing lone backslash)
is a fatal protocol error in 1.1 and 1.2. The CONNECT, STOMP and CONNECTED frames are never
escaped, so that a 1.0 peer can read them before the version is agreed.
"""

from __future__ import annotations

import re
from typing import Final

from herald.core.codec_kit import LocalProtocolError

_UNESCAPES: Final = {
    "1.1": {"\\": "\\", "n": "\n", "c": ":"},
    "1.2": {"\\": "\\", "n": "\n", "c": ":", "r": "\r"},
}
_ESCAPE_RE: Final = re.compile(r"\\(.?)", re.DOTALL)


def escape(text: str, version: str) -> str:
    """`text` as it is written in a header of an escaped frame of `version`."""
    if version == "1.0":
        return text
    # Chained replace beats str.translate and regexes: most values need no change, and a
    # replace that finds nothing costs one C scan and no copy. Backslash must go first.
    text = text.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c")
    if version == "1.2":
        text = text.replace("\r", "\\r")
    return text


def unescape(text: str, version: str) -> str:
    """The header text that `text`, read from an escaped frame of `version`, stands for.

    Raises LocalProtocolError (the reader turns it into RemoteProtocolError) on an escape
    sequence the version does not define.
    """
    if version == "1.0" or "\\" not in text:
        return text
    table = _UNESCAPES[version]

    def replace(match: re.Match[str]) -> str:
        char = match.group(1)
        try:
            return table[char]
        except KeyError:
            defined = ", ".join("\\" + c for c in table)
            if not char:
                problem = "a lone backslash at its end"
            else:
                problem = f"the undefined escape sequence \\{char}"
            raise LocalProtocolError(
                f"header {text!r} has {problem} (STOMP {version} defines {defined})"
            ) from None

    return _ESCAPE_RE.sub(replace, text)
