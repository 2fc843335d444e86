"""Client SQL cut into tokens by SQLite's own rules, for the few places the engine must
read a statement's text rather than ask SQLite (RETURNING for rows whose key we assign,
docs/design/README.md §4.1).

A regular expression over the raw text cannot tell `RETURNING` the keyword from the same
word inside a string literal, a quoted identifier or a comment; the tokenizer can, as
SQLite's tokenize.c does: whitespace and both comment forms, string literals with `''`,
identifiers quoted with `"`, backquotes or brackets, blob literals, numbers, parameters
(`?`, `?NNN`, `:name`, `@name`, `$name`, `#name`) and operators. Every character of the
text belongs to exactly one token, so text can be rebuilt from tokens. Text SQLite would
refuse still tokenizes (an unterminated literal runs to the end); callers only read
statements SQLite has accepted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum


class Kind(Enum):
    SPACE = "space"  # whitespace and comments
    WORD = "word"  # a keyword or a bare identifier
    QUOTED = "quoted"  # "identifier", `identifier`, [identifier]
    STRING = "string"
    BLOB = "blob"
    NUMBER = "number"
    PARAM = "param"
    PUNCT = "punct"


@dataclass(frozen=True, slots=True)
class Token:
    kind: Kind
    text: str
    depth: int  # parentheses open before it; a "(" counts itself, a ")" does not

    def is_word(self, word: str) -> bool:
        """True for the bare keyword `word` (upper case), never for a quoted name."""
        return self.kind is Kind.WORD and self.text.upper() == word


_ID_CHAR = r"[A-Za-z0-9_$\x80-\U0010ffff]"
_PATTERN = re.compile(
    "|".join(
        (
            r"(?P<space>[ \t\n\f\r]+|--[^\n]*|/\*[\s\S]*?(?:\*/|\Z))",
            r"(?P<string>'(?:[^']|'')*'?)",
            r"(?P<blob>[xX]'[^']*'?)",
            r'(?P<quoted>"(?:[^"]|"")*"?|`(?:[^`]|``)*`?|\[[^\]]*\]?)',
            rf"(?P<word>[A-Za-z_\x80-\U0010ffff]{_ID_CHAR}*)",
            r"(?P<number>(?:0[xX][0-9A-Fa-f_]+|(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][+-]?\d[\d_]*)?)"
            rf"{_ID_CHAR}*)",
            rf"(?P<param>\?\d*|[:@$#](?:{_ID_CHAR}|::)+(?:\([^)\s]*\)?)?)",
            r"(?P<punct>->>|->|\|\||<=|>=|==|!=|<>|<<|>>|[\s\S])",
        )
    )
)


_KINDS = {kind.value: kind for kind in Kind}


def quote(name: str) -> str:
    """An identifier as SQL text, whatever characters it holds."""
    return '"' + name.replace('"', '""') + '"'


def tokenize(sql: str) -> list[Token]:
    tokens = []
    depth = 0
    for match in _PATTERN.finditer(sql):
        kind = _KINDS[match.lastgroup or ""]
        text = match.group()
        if kind is Kind.PUNCT and text == ")":
            depth = max(depth - 1, 0)
        tokens.append(Token(kind, text, depth))
        if kind is Kind.PUNCT and text == "(":
            depth += 1
    return tokens


def meaningful(tokens: Sequence[Token]) -> Iterator[tuple[int, Token]]:
    """The tokens that are not whitespace or comments, with their index."""
    return ((i, t) for i, t in enumerate(tokens) if t.kind is not Kind.SPACE)


def has_conflict_clause(tokens: Sequence[Token], *, top_level: bool) -> bool:
    """Whether the text holds `ON CONFLICT`: an upsert when `top_level` (in an INSERT),
    a constraint's conflict clause anywhere in a CREATE TABLE."""
    previous: Token | None = None
    for _, token in meaningful(tokens):
        if (
            token.is_word("CONFLICT")
            and previous is not None
            and previous.is_word("ON")
            and (not top_level or previous.depth == 0)
        ):
            return True
        previous = token
    return False


def parameter_numbers(tokens: Sequence[Token]) -> dict[int, int]:
    """The number SQLite gives each parameter, by the index of its token, in the order SQLite
    numbers them (sqlite3ExprAssignVarNumber): `?` takes the next number, `?NNN` is NNN,
    and a name keeps the number of its first use."""
    numbers: dict[int, int] = {}
    names: dict[str, int] = {}
    top = 0
    for index, token in enumerate(tokens):
        if token.kind is not Kind.PARAM:
            continue
        text = token.text
        if text == "?":
            top += 1
            number = top
        elif text[0] == "?":
            number = int(text[1:])
            top = max(top, number)
        elif text in names:
            number = names[text]
        else:
            top += 1
            number = names[text] = top
        numbers[index] = number
    return numbers
