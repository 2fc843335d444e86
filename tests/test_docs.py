"""The documentation points at things that exist, and the project stands on its own.

A newcomer follows a doc's references to the code, the tests and the other docs; a reference
to a renamed file, a test that no longer exists or a heading that was reworded sends them
nowhere. Checked in the README, `docs/`, `bench/*.md` and `specs/*.md`:
- every relative Markdown link: the file (or folder) exists, and a `#anchor` is one of the
  target's headings under GitHub's slug rules (or an `<a id=...>` in it);
- every path-like name (`replicaset/core/gc.py`, `core/gc.py`, `gc.py`, `docs/x.md`,
  `specs/X.tla`): some file of the tree is it, or ends with it; a pytest id
  (`file.py::test_name`) names a function or class of that file; `file.py:name` a name
  defined there; `file.md#anchor` a heading there;
- no `file.py:NNN`: a line number rots at the next edit above it, a function name does not;
- `Class.member` of a class the tree defines: that class's file defines the member (a
  renamed method is the commonest stale name);
- a section cited by number (`docs/design/README.md §4.5`, or `§4.5` alone for the file's
  own) has a heading of that number, and one cited by name (`docs/decisions.md, "Full
  disk"`) has that text in the file.
In code, tests and specs, references to `docs/` files, their numbered sections and named
ones are checked the same way. No file may cite the design notes the project was first
written against, which a clone of it does not hold: its design is `docs/design/README.md`.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[1]
THIS = "tests/test_docs.py"

# Outside notes a clone does not hold (the names are split so this file does not match itself).
OUTSIDE_CITATION = re.compile(r"\b(?:" + "DES" + r"IGN|" + "STY" + r"LE|" + "STA" + r"CK\.md|" + "IPR" + r"OTO\.md)\b")

SOURCE_SUFFIXES = (".py", ".tla", ".cfg", ".toml", ".sh", ".txt", ".yml", ".yaml", ".json")
# Extensions a name is checked for even without a folder; other bare names (instance.toml, box.cfg
# as Tarantool's, a data directory's files) are not the tree's.
BARE_SUFFIXES = ("py", "md", "tla", "cfg")
PATH_TOKEN = re.compile(
    r"(?<![\w/.:@-])(?P<path>(?:\.{1,2}/)?[\w.-]+(?:/[\w.-]+)*\.(?P<ext>py|md|tla|cfg|toml|sh|txt|json|yml))"
    r"(?![\w]|\.\w)"
    r"(?:(?P<test>::\w+(?:::\w+)*)|:(?P<line>\d+)\b|:(?P<name>[A-Za-z_]\w*)(?![\w.(/])|(?P<anchor>#[\w-]+))?"
)
CLASS_MEMBER = re.compile(r"`(?P<cls>[A-Z]\w*)\.(?P<member>\w+)(?:\([^`]*\))?`")
MORE_TESTS = re.compile(r"`::(?P<more>\w+(?:::\w+)*)`")
LINK = re.compile(r"!?\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+")
SECTION_OF_FILE = re.compile(r"(?P<path>[\w./-]+\.md)(?:#[\w-]+)?`?\)?,?\s+§(?P<number>\d+(?:\.\d+)*)")
BARE_SECTION = re.compile(r"(?<![\w.])§(?P<number>\d+(?:\.\d+)*)")
NAMED_SECTION = re.compile(r"(?P<path>[\w./-]+\.md)(?:#[\w-]+)?`?\)?,?\s+\"(?P<name>[^\"\n]{2,80})\"")
HEADING = re.compile(r"^(?P<level>#{1,6})\s+(?P<text>.+?)\s*#*\s*$")
NUMBERED = re.compile(r"^(?P<number>\d+(?:\.\d+)*)\.?\s")
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
PLACEHOLDER = re.compile(r"(?:^|[/_])X(?:[._]|$)|(?:^|/)[A-Z]{2,5}/")  # specs/X.tla, OUT/manifest.json


def tracked_files(root: Path) -> list[str]:
    """The tree's files, as git sees them (untracked ones not ignored included)."""
    if (root / ".git").exists():
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                             capture_output=True, check=True, timeout=60)
        return sorted({name for name in out.stdout.decode().split("\0") if name and (root / name).exists()})
    skip = {".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis", "build"}
    return sorted(str(path.relative_to(root)) for path in root.rglob("*")
                  if path.is_file() and not skip & set(path.relative_to(root).parts))


def doc_files(files: list[str]) -> list[str]:
    """The Markdown a reader follows: README, docs/, bench/*.md, specs/*.md."""
    def wanted(name: str) -> bool:
        path = PurePosixPath(name)
        return path.suffix == ".md" and (name == "README.md" or path.parts[0] == "docs"
                                         or (len(path.parts) == 2 and path.parts[0] in ("bench", "specs")))
    return [name for name in files if wanted(name)]


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: the rendered text lowercased, every character but
    letters, digits, `_`, `-` and spaces dropped, each space a `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    text = re.sub(r"(?<!\w)_|_(?!\w)", "", text)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


@dataclass(frozen=True, slots=True)
class Headings:
    anchors: frozenset[str]
    numbers: frozenset[str]


def headings(text: str) -> Headings:
    """The anchors a Markdown file offers (duplicates numbered as GitHub does) and the section
    numbers its headings start with."""
    anchors: list[str] = []
    numbers: set[str] = set()
    seen: dict[str, int] = {}
    for line in _outside_fences(text):
        match = HEADING.match(line)
        if match:
            title = match["text"]
            slug = github_slug(title)
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.append(slug if count == 0 else f"{slug}-{count}")
            number = NUMBERED.match(title)
            if number:
                numbers.add(number["number"])
        anchors.extend(EXPLICIT_ANCHOR.findall(line))
    return Headings(frozenset(anchors), frozenset(numbers))


def _outside_fences(text: str) -> Iterator[str]:
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield line


class Tree:
    """The files of one tree, found by path or by the end of their path."""

    def __init__(self, root: Path, files: list[str]) -> None:
        self.root = root
        self.files = set(files)
        self.folders = {str(parent) for name in files for parent in PurePosixPath(name).parents if str(parent) != "."}
        self._texts: dict[str, str] = {}
        self.classes: dict[str, list[str]] | None = None

    def resolve(self, token: str, base: str, *, anywhere: bool = True) -> str | None:
        """`token` as a file of the tree: relative to `base` (the citing file's folder), to
        the root (unless a link, which GitHub resolves from `base` alone), or (when
        `anywhere`) the first file whose path ends with it."""
        for start in (base, "") if anywhere else (base,):
            name = _normalize(f"{start}/{token}" if start else token)
            if name is not None and (name in self.files or name in self.folders):
                return name
        if anywhere:
            ends = sorted(name for name in self.files if name == token or name.endswith("/" + token.lstrip("./")))
            if ends:
                return ends[0]
        return None

    def text(self, name: str) -> str:
        if name not in self._texts:
            self._texts[name] = (self.root / name).read_text(errors="replace")
        return self._texts[name]

    def headings(self, name: str) -> Headings:
        return headings(self.text(name))


def _normalize(name: str) -> str | None:
    parts: list[str] = []
    for part in name.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return None
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts)


def _defines(text: str, name: str, suffix: str) -> bool:
    if suffix == ".tla":
        return re.search(rf"^\s*{re.escape(name)}\b.*==", text, re.M) is not None
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b|^{re.escape(name)}\s*[:=]", text,
                     re.M) is not None


def _where(name: str, text: str, offset: int) -> str:
    return f"{name}:{text.count(chr(10), 0, offset) + 1}"


def _check_section(tree: Tree, target: str, number: str) -> str | None:
    if number not in tree.headings(target).numbers:
        return f"{target} has no section {number}"
    return None


def _check_anchor(tree: Tree, target: str, anchor: str) -> str | None:
    if not target.endswith(".md"):
        return None
    if anchor not in tree.headings(target).anchors:
        return f"{target} has no heading #{anchor}"
    return None


def doc_problems(tree: Tree, name: str) -> list[str]:
    """Every reference of one Markdown file that leads nowhere, each with where it is."""
    text = tree.text(name)
    base = str(PurePosixPath(name).parent)
    base = "" if base == "." else base
    problems: list[str] = []
    masked = URL.sub(lambda m: " " * len(m.group()), text)

    for match in LINK.finditer(masked):
        target = match["target"]
        where = _where(name, text, match.start())
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = name if not path else tree.resolve(path, base, anywhere=False)
        if resolved is None:
            problems.append(f"{where}: link to {target}: no such file")
            continue
        if anchor and (problem := _check_anchor(tree, resolved, anchor)):
            problems.append(f"{where}: link to {target}: {problem}")
        for section in BARE_SECTION.finditer(match["text"]):
            if problem := _check_section(tree, resolved, section["number"]):
                problems.append(f"{where}: {match.group()}: {problem}")
    without_links = LINK.sub(lambda m: "[" + " " * (len(m.group()) - 2) + "]", masked)
    without_targets = LINK.sub(lambda m: m.group()[:m.start("target") - m.start()].ljust(len(m.group())), masked)
    problems += _path_problems(tree, name, text, without_targets, base)
    problems += _cited_section_problems(tree, name, text, masked, base)
    problems += _member_problems(tree, name, text, masked)
    of_files = {match.end() for match in SECTION_OF_FILE.finditer(masked)}
    for match in BARE_SECTION.finditer(without_links):
        if match.end() in of_files:
            continue
        if problem := _check_section(tree, name, match["number"]):
            problems.append(f"{_where(name, text, match.start())}: §{match['number']}: {problem}")
    return problems


def _path_problems(tree: Tree, name: str, text: str, masked: str, base: str) -> list[str]:
    problems = []
    last_module: dict[int, str] = {}  # line -> the last Python file named on it, for a `::test` after it
    for match in sorted([*PATH_TOKEN.finditer(masked), *MORE_TESTS.finditer(masked)], key=lambda m: m.start()):
        line = masked.count("\n", 0, match.start())
        if "more" in match.groupdict():
            module = last_module.get(line)
            for part in match["more"].split("::") if module else ():
                if not _defines(tree.text(module), part, ".py"):
                    problems.append(f"{_where(name, text, match.start())}: `::{match['more']}`: {module} defines no {part}")
            continue
        path, ext = match["path"], match["ext"]
        if PLACEHOLDER.search(path) or path == "box.cfg":
            continue
        if "/" not in path and ext not in BARE_SUFFIXES:
            continue
        where = _where(name, text, match.start())
        resolved = tree.resolve(path, base)
        if resolved is None:
            problems.append(f"{where}: `{path}`: no such file")
            continue
        if ext == "py":
            last_module[line] = resolved
        if match["line"]:
            problems.append(f"{where}: `{path}:{match['line']}`: a line number rots; name the function or class")
        elif match["test"]:
            for part in match["test"].strip(":").split("::"):
                if not _defines(tree.text(resolved), part, ".py"):
                    problems.append(f"{where}: `{path}{match['test']}`: {resolved} defines no {part}")
        elif match["name"] and ext in ("py", "tla"):
            if not _defines(tree.text(resolved), match["name"], "." + ext):
                problems.append(f"{where}: `{path}:{match['name']}`: {resolved} defines no {match['name']}")
        elif match["anchor"] and (problem := _check_anchor(tree, resolved, match["anchor"][1:])):
            problems.append(f"{where}: `{path}{match['anchor']}`: {problem}")
    return problems


def _classes(tree: Tree) -> dict[str, list[str]]:
    """Class name -> the Python files of the tree that define a class of that name."""
    if tree.classes is None:
        tree.classes = {}
        for name in sorted(tree.files):
            if name.endswith(".py"):
                for match in re.finditer(r"^\s*class\s+(\w+)", tree.text(name), re.M):
                    tree.classes.setdefault(match[1], []).append(name)
    return tree.classes


def _member_problems(tree: Tree, name: str, text: str, masked: str) -> list[str]:
    """`Class.member` of a class the tree defines: a method, attribute or field of that name
    must be in a file defining the class (a renamed method is the commonest stale name)."""
    problems = []
    for match in CLASS_MEMBER.finditer(masked):
        cls, member = match["cls"], match["member"]
        files = _classes(tree).get(cls)
        if not files or member in ("py", "md", "tla", "cfg", "toml"):
            continue
        pattern = rf"def\s+{member}\b|^\s*{member}\s*[:=]|self\.{member}\b|\b{member}\s*="
        if not any(re.search(pattern, tree.text(file), re.M) for file in files):
            problems.append(f"{_where(name, text, match.start())}: `{cls}.{member}`: no {member} where {cls} is "
                            f"defined ({', '.join(files)})")
    return problems


def _cited_section_problems(tree: Tree, name: str, text: str, masked: str, base: str, *,
                            docs_only: bool = False) -> list[str]:
    """Sections cited by number or by name after a Markdown file's name (in code, only a
    `docs/` file's)."""
    def target(path: str) -> str | None:
        if docs_only:
            return path if path.startswith("docs/") and path in tree.files else None
        return tree.resolve(path, base)

    problems = []
    for match in SECTION_OF_FILE.finditer(masked):
        cited = target(match["path"])
        if cited is not None and (problem := _check_section(tree, cited, match["number"])):
            problems.append(f"{_where(name, text, match.start())}: {match.group()}: {problem}")
    for match in NAMED_SECTION.finditer(masked):
        cited = target(match["path"])
        wanted = re.sub(r"\s+", " ", match["name"]).lower()
        if cited is not None and wanted not in re.sub(r"\s+", " ", tree.text(cited)).lower():
            problems.append(f"{_where(name, text, match.start())}: {match.group()}: {cited} has no \"{match['name']}\"")
    return problems


def code_problems(tree: Tree, name: str) -> list[str]:
    """References from code, tests and specs to the docs: the file, a numbered or named section."""
    text = tree.text(name)
    problems = []
    for match in re.finditer(r"(?<![\w/.-])docs/[\w./-]*\.md(?:#[\w-]+)?", text):
        path, _, anchor = match.group().partition("#")
        where = _where(name, text, match.start())
        if path not in tree.files:
            problems.append(f"{where}: {path}: no such file")
        elif anchor and (problem := _check_anchor(tree, path, anchor)):
            problems.append(f"{where}: {match.group()}: {problem}")
    return problems + _cited_section_problems(tree, name, text, text, "", docs_only=True)


def outside_citations(tree: Tree) -> list[str]:
    """Every line of every text file of the tree that cites the outside design notes."""
    found = []
    for name in sorted(tree.files):
        if name == THIS or b"\0" in (tree.root / name).read_bytes()[:8192]:
            continue
        text = tree.text(name)
        for match in OUTSIDE_CITATION.finditer(text):
            line = text.splitlines()[text.count("\n", 0, match.start())].strip()
            found.append(f"{_where(name, text, match.start())}: {line}")
    return found


def all_problems(root: Path) -> list[str]:
    tree = Tree(root, tracked_files(root))
    problems = []
    for name in doc_files(sorted(tree.files)):
        problems += doc_problems(tree, name)
    for name in sorted(tree.files):
        if name.endswith(SOURCE_SUFFIXES) and name != THIS:
            problems += code_problems(tree, name)
    return sorted(set(problems))


@pytest.fixture(scope="module")
def tree() -> Tree:
    return Tree(ROOT, tracked_files(ROOT))


def test_every_reference_in_the_docs_and_to_the_docs_leads_somewhere() -> None:
    problems = all_problems(ROOT)
    assert not problems, f"{len(problems)} references lead nowhere:\n" + "\n".join(problems)


def test_nothing_cites_design_notes_outside_the_repository(tree: Tree) -> None:
    found = outside_citations(tree)
    assert not found, ("cite docs/design/README.md (design) or docs/design/style.md (habits) instead:\n"
                       + "\n".join(found))


def test_the_readme_layout_names_every_top_level_folder_and_package(tree: Tree) -> None:
    layout = tree.text("README.md").partition("## Layout")[2]
    firsts = " ".join(line.split("|")[1] for line in layout.splitlines() if line.startswith("|"))
    folders = {name.split("/")[0] for name in tree.files if "/" in name and not name.startswith(".")}
    missing = [f"{folder}/" for folder in sorted(folders) if f"`{folder}/" not in firsts]
    parts = {name.split("/")[1] for name in tree.files if name.startswith("replicaset/")} - {"__init__.py"}
    for part in sorted(parts):
        if part.endswith(".py"):
            named = f"`replicaset/{part}`" in firsts or f"`{part}`" in firsts
        else:
            named = f"`replicaset/{part}/`" in firsts
        if not named:
            missing.append(f"replicaset/{part}")
    assert not missing, "README.md's Layout table does not name: " + ", ".join(missing)


def test_the_design_map_lists_every_design_page_and_every_spec(tree: Tree) -> None:
    design = tree.text("docs/design/README.md")
    pages = sorted(name for name in tree.files if re.fullmatch(r"docs/design/[^/]+\.md", name))
    missing = [name for name in pages if name != "docs/design/README.md" and f"({PurePosixPath(name).name}" not in design]
    specs = sorted(name for name in tree.files if re.fullmatch(r"specs/[A-Za-z]+\.tla", name) and "Trace" not in name)
    missing += [name for name in specs if f"`{PurePosixPath(name).stem}`" not in design]
    assert not missing, "docs/design/README.md does not list: " + ", ".join(missing)


def _plant(tmp_path: Path, files: dict[str, str]) -> list[str]:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return all_problems(tmp_path)


def test_the_check_finds_each_kind_of_broken_reference(tmp_path: Path) -> None:
    problems = _plant(tmp_path, {
        "README.md": "# Title\n\nSee [the design](docs/design/README.md#2-layers) and [gone](docs/gone.md),\n"
                     "`replicaset/core/gc.py`, `core/gc.py:collect`, `core/gc.py:42`, `core/missing.py`,\n"
                     "`tests/test_x.py::test_there`, `::test_gone`, `tests/test_x.py::test_renamed`, [up](#title), [no](#nowhere),\n"
                     "docs/design/README.md §2, docs/design/README.md §7.1, `docs/design/README.md`, \"Layers\",\n"
                     "`docs/design/README.md`, \"Vanished\", and §3; `WalGc.collect`, `WalGc._open`.\n",
        "docs/design/README.md": "# Design\n\n## 1. What it is\n\n## 2. Layers\n",
        "replicaset/core/gc.py": "class WalGc:\n    def collect(self):\n        pass\n\n\ndef collect():\n    pass\n",
        "tests/test_x.py": "def test_there():\n    pass\n",
        "replicaset/core/hlc.py": "# the rule of docs/design/README.md §9, see docs/nowhere.md\n",
    })
    assert problems == [
        "README.md:3: link to docs/gone.md: no such file",
        "README.md:4: `core/gc.py:42`: a line number rots; name the function or class",
        "README.md:4: `core/missing.py`: no such file",
        "README.md:5: `::test_gone`: tests/test_x.py defines no test_gone",
        "README.md:5: `tests/test_x.py::test_renamed`: tests/test_x.py defines no test_renamed",
        "README.md:5: link to #nowhere: README.md has no heading #nowhere",
        "README.md:6: docs/design/README.md §7.1: docs/design/README.md has no section 7.1",
        "README.md:7: `WalGc._open`: no _open where WalGc is defined (replicaset/core/gc.py)",
        "README.md:7: docs/design/README.md`, \"Vanished\": docs/design/README.md has no \"Vanished\"",
        "README.md:7: §3: README.md has no section 3",
        "replicaset/core/hlc.py:1: docs/design/README.md §9: docs/design/README.md has no section 9",
        "replicaset/core/hlc.py:1: docs/nowhere.md: no such file",
    ]


def test_the_check_finds_a_citation_of_the_outside_notes(tmp_path: Path) -> None:
    cited = "DES" + "IGN 4.5"
    (tmp_path / "a.py").write_text(f'"""Quorum writes ({cited})."""\n')
    (tmp_path / "b.md").write_text("MARK_STYLES is a name, not a citation.\n")
    assert outside_citations(Tree(tmp_path, tracked_files(tmp_path))) == [f"a.py:1: \"\"\"Quorum writes ({cited}).\"\"\""]


@pytest.mark.parametrize(("heading", "slug"), [
    ("4.5 Quorum transactions (`QUORUM`, `ALL`)", "45-quorum-transactions-quorum-all"),
    ("Trace validation", "trace-validation"),
    ("F1. The recovery fetch does not stop rows", "f1-the-recovery-fetch-does-not-stop-rows"),
    ("`wal_mode = write` – and fsync", "wal_mode--write--and-fsync"),
    ("A [link](x.md) and **bold**", "a-link-and-bold"),
])
def test_slugs_follow_github(heading: str, slug: str) -> None:
    assert github_slug(heading) == slug
