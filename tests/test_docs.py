"""The README and docs/: a README a newcomer can read (short, with a runnable Explicit example), and links that lead
somewhere. Reads files only: imports nothing of the project, starts nothing."""

import json
import re
from pathlib import Path

from tests.paths import ROOT

README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
MAX_README_LINES = 250
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")  # [text](target) and ![alt](target)
FACTORY = re.compile(r"`([A-Za-z_][\w.]*):(make_\w+)`")  # `package.module:function`


def prose(text: str) -> str:
    """The Markdown outside fenced code blocks (a link or heading inside one is code, not Markdown)."""
    return re.sub(r"^```.*?^```[^\n]*$", "", text, flags=re.MULTILINE | re.DOTALL)


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but hyphens and underscores dropped, spaces as hyphens.

    >>> anchor("## `advise --json`"), anchor("## Install the library (command line and notebook)")
    ('advise---json', 'install-the-library-command-line-and-notebook')
    """
    text = heading.lstrip("#").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {anchor(line) for line in prose(page.read_text()).splitlines() if re.match(r"#{1,6} ", line)}


def broken_links(page: Path) -> list[str]:
    """Each relative link of ``page`` whose file, or heading in that file, does not exist."""
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z]+:", target):  # https:, mailto:: not ours to check
            continue
        path, _, fragment = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.is_file():
            broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    return broken


def test_the_readme_is_short():
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; the reference belongs in docs/"


def test_every_relative_link_leads_somewhere():
    assert len(PAGES) >= 10  # the reference moved out of the README is there
    broken = [entry for page in [README, *PAGES] for entry in broken_links(page)]
    assert not broken, "\n".join(broken)


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(README.parent / target.partition("#")[0]).resolve() for target in LINK.findall(prose(README.read_text()))}
    assert not [page.name for page in PAGES if page.resolve() not in linked]


def test_the_readme_names_a_runnable_explicit_example():
    """The Explicit section names a factory that exists and a layout file that opens it on Explicit axes."""
    readme = README.read_text()
    section = readme[readme.index("## Explicit axes") :]
    section = section[: section.index("\n## ")]
    factories = FACTORY.findall(section)
    assert factories, "the README's Explicit section names no factory (`package.module:make_name`)"
    for module, function in factories:
        source = ROOT / (module.replace(".", "/") + ".py")
        assert source.is_file(), f"{module}: no such module in the project"
        defined = re.search(rf"^def {function}\(", source.read_text(), flags=re.MULTILINE) is not None
        assert defined, f"{module} has no {function}"
    allowed = re.search(r"EXPLORER_ALLOWED_FACTORIES=(\S+)", section).group(1)
    (layout_path,) = set(re.findall(r"\b(layouts/[\w.-]+\.json)\b", section))
    layout = json.loads((ROOT / layout_path).read_text())
    assert layout["model"]["name"] == allowed == ":".join(factories[0])
    assert layout["mesh"]["axis_types"] == ["explicit"] * len(layout["mesh"]["axes"])
