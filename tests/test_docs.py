"""The documents point at files that exist: every relative link in README.md and docs/*.md
resolves to a file of the repository, and docs/lesson.md has a section for each § 1–50 that
links every example declaring that §. No kernel runs here."""

import re
from pathlib import Path

import pytest

from flashlesson import tour

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "docs/lesson.md", "docs/results.md", "docs/api.md", "docs/methods.md",
        "docs/gpu.md", "docs/design.md"]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")        # [text](target) and ![alt](target)
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)         # code spans and blocks hold no links


def relative_links(text):
    """The relative targets of the Markdown links in ``text``, without their #fragments
    (URLs with a scheme, such as https:, and links to a fragment of the same page are left out)."""
    out = []
    for target in LINK.findall(CODE.sub("", text)):     # (not inside `code` or ```blocks```)
        path = target.split("#", 1)[0]
        if path and not re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", path):
            out.append(path)
    return out


def test_relative_links_are_found():
    text = ("see [a](../x/y.py) and ![p](pic.png), [s](#top), [w](https://example.org/a.py), "
            "[f](z.md#part)")
    assert relative_links(text) == ["../x/y.py", "pic.png", "z.md"]


@pytest.mark.parametrize("doc", DOCS)
def test_every_relative_link_resolves_to_a_file_in_the_repository(doc):
    path = ROOT / doc
    links = relative_links(path.read_text(encoding="utf-8"))
    assert links, f"{doc} has no relative links (was the file emptied?)"
    broken = sorted({link for link in links
                     if not ((path.parent / link).resolve().is_file()
                             and (path.parent / link).resolve().is_relative_to(ROOT))})
    assert not broken, f"{doc}: links to missing files (relative to {path.parent}): {broken}"


def lesson_sections():
    """{§: the text of its section} from docs/lesson.md's '## §N — …' headings."""
    text = (ROOT / "docs" / "lesson.md").read_text(encoding="utf-8")
    parts = re.split(r"^## §(\d+) ", text, flags=re.M)
    return {int(parts[i]): parts[i + 1] for i in range(1, len(parts), 2)}


def test_lesson_md_has_one_section_per_lesson_section_in_order():
    text = (ROOT / "docs" / "lesson.md").read_text(encoding="utf-8")
    numbers = [int(n) for n in re.findall(r"^## §(\d+) ", text, flags=re.M)]
    assert numbers == list(tour.LESSON_SECTIONS)


def test_each_section_links_its_examples():
    sections = lesson_sections()
    declared = tour.declared_sections()
    missing = {s: [f for f in declared.get(s, []) if f"](../examples/{f})" not in sections[s]]
               for s in tour.LESSON_SECTIONS}
    missing = {s: files for s, files in missing.items() if files}
    assert not missing, f"docs/lesson.md: sections without a link to their example(s): {missing}"
