"""The README and docs/ hold together: every relative link reaches a file (and its heading), every page and
figure under docs/ is reachable, and the README stays a page with CI's test command in it."""
import re

import matplotlib.image
import pytest

from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^]]*]\(([^)\s]+)\)")  # [text](target) and ![alt](target)


def prose(page):
    """The page's text outside fenced code blocks (a diff's or a YAML's '#' lines are not headings)."""
    return re.sub(r"^```.*?^```$", "", page.read_text(), flags=re.S | re.M)


def anchors(page):
    """GitHub's ids of the page's headings: lower case, punctuation dropped, spaces to hyphens, repeats -1, -2."""
    ids = []
    for heading in re.findall(r"^#+ (.+)$", prose(page), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        ids.append(slug if slug not in ids else f"{slug}-{ids.count(slug)}")
    return set(ids)


def relative_links(page):
    """(target path, anchor or '') of each link that is not to the web."""
    links = []
    for target in LINK.findall(prose(page)):
        if not re.match(r"[a-z]+:", target):
            path, _, anchor = target.partition("#")
            links.append(((page.parent / path).resolve() if path else page, anchor))
    return links


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_reaches_a_file_and_its_heading(page):
    links = relative_links(page)
    assert links or page.name != "README.md"
    for target, anchor in links:
        assert target.is_file(), f"{page.name} links to {target}, which does not exist"
        if anchor:
            assert anchor in anchors(target), f"{page.name} links to #{anchor}, not a heading of {target.name}"


def test_every_page_under_docs_is_linked_from_the_readme():
    linked = {target for target, _ in relative_links(ROOT / "README.md")}
    assert set(PAGES[1:]) <= linked, "a page a reader cannot find from the README"


def test_every_figure_under_docs_is_shown_on_a_page_and_opens():
    shown = {target for page in PAGES for target, _ in relative_links(page) if target.suffix == ".png"}
    pngs = set((ROOT / "docs").rglob("*.png"))
    assert shown == pngs
    for name in pngs:
        height, width, _ = matplotlib.image.imread(name).shape
        assert 300 < height < 800 and 500 < width < 1400 and name.stat().st_size < 60_000, name


def test_the_readme_is_a_page_that_holds_cis_test_command():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 350, "the README is the front page: long material goes to docs/"
    assert any(line.startswith("python -m pytest") for line in lines), ".ci/run runs this line as the test command"
