"""The README and docs/ hold together: every relative link reaches a file (and its heading), every
page and figure under docs/ is reachable, and the README stays a page with CI's test command in
it."""
import json
import re
import shlex

import matplotlib.image
import pytest

import ablate
import bench
import configurator
import eval as evaluation
import logbook
import sample
import train
from conftest import ROOT, ablate_commands

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^]]*]\(([^)\s]+)\)")  # [text](target) and ![alt](target)


def prose(page):
    """The page's text outside fenced code blocks (a diff's or a YAML's '#' lines are not
    headings)."""
    return re.sub(r"^```.*?^```$", "", page.read_text(), flags=re.S | re.M)


def anchors(page):
    """GitHub's ids of the page's headings: lower case, punctuation dropped, spaces to hyphens,
    repeats -1, -2."""
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
            assert anchor in anchors(target), \
                f"{page.name} links to #{anchor}, not a heading of {target.name}"


def test_every_page_under_docs_is_linked_from_the_readme():
    linked = {target for target, _ in relative_links(ROOT / "README.md")}
    assert set(PAGES[1:]) <= linked, "a page a reader cannot find from the README"


def test_every_figure_under_docs_is_shown_on_a_page_and_opens():
    shown = {target for page in PAGES for target, _ in relative_links(page)
             if target.suffix == ".png"}
    pngs = set((ROOT / "docs").rglob("*.png"))
    assert shown == pngs
    for name in pngs:
        height, width, _ = matplotlib.image.imread(name).shape
        assert 300 < height < 800 and 500 < width < 1400 and name.stat().st_size < 60_000, name


def test_the_readme_is_a_page_that_holds_cis_test_command():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 350, "the README is the front page: long material goes to docs/"
    assert any(line.startswith("python -m pytest") for line in lines), \
        ".ci/run runs this line as the test command"


# the specification's name before it came into docs/ (split: not itself a hit)
OUTSIDE = "NORM_MODES" + ".md"


def test_every_section_the_code_and_docs_cite_is_a_heading_of_the_spec():
    """A § in a comment, config, test or page names a section of docs/spec.md (a paper's own
    section is cited with the paper's name on the same line); no file points at a specification
    outside the repository."""
    spec = (ROOT / "docs" / "spec.md").read_text()
    headings = set(re.findall(r"^#+ §(\d+(?:\.\d+)*)", spec, re.M))
    files = [p for p in ROOT.rglob("*") if p.suffix in (".py", ".md") and ".git" not in p.parts
             and "mutants" not in p.parts and p.name != "spec.md"]
    unresolved = []
    for path in files:
        for line in path.read_text().splitlines():
            assert OUTSIDE not in line, f"{path.name} points outside the repository: {line}"
            cited = re.findall(r"§ ?(\d+(?:\.\d+)*)", line)
            papers = re.search(r"paper|SimpleGPT|its §", line)
            unresolved += [(path.name, n) for n in cited if n not in headings and not papers]
    assert not unresolved
    assert {"2", "6.2", "11", "13.6", "14.5"} <= headings


def test_the_first_screen_of_the_readme_installs_runs_and_tests():
    """A newcomer's path: set-up, a first run and the test command within the README's first 25
    lines."""
    first = (ROOT / "README.md").read_text().splitlines()[:25]
    for start in ("pip install -r requirements.txt", "python train.py", "python -m pytest"):
        assert any(line.startswith(start) for line in first), start


def command_lines(page):
    """The lines of a page's code blocks and its inline commands, a command continued over lines
    joined into one."""
    text = page.read_text().replace("\\\n", " ")
    blocks = "\n".join(re.findall(r"^```.*?^```$", text, flags=re.S | re.M))
    inline = re.findall(r"`(python [^`]+)`", " ".join(prose(page).split()))
    return [*blocks.splitlines(), *inline]


def test_every_ablation_command_in_the_docs_plans_its_runs(monkeypatch):
    """A command a reader copies from a page plans its runs: docs/depth.md's QK-norm command and
    the race's 4-block one (a --sweep over the config's own) were refused by a check of a key
    swept twice."""
    monkeypatch.chdir(ROOT)  # the commands' paths are the repository's
    commands = [args for page in PAGES for args in ablate_commands(command_lines(page))]
    assert len(commands) >= 15, commands  # the README's list, the ladder's, the lab's, the race's
    for args in commands:
        assert ablate.plan_runs(ablate.configure(args), ROOT / "out"), args


def test_every_command_of_train_sample_eval_and_bench_in_the_docs_gives_settings_they_take(
        monkeypatch):
    """A setting renamed in a script and not on its pages is a command that fails for the reader
    who copies it: each documented command's settings and config files are read as the script
    reads them (their values checked against its ranges)."""
    scripts = {"train": train, "sample": sample, "eval": evaluation, "bench": bench}
    monkeypatch.chdir(ROOT)  # the commands' config files are the repository's
    checked = 0
    for page in PAGES:
        for line in command_lines(page):
            command = re.search(r"python (train|sample|eval|bench)\.py(.*)", line.split("  #")[0])
            if not command or re.search(r"--help|\bCONFIG\b", command[2]):
                continue
            script = scripts[command[1]]
            train_too = (str(ROOT / "train.py"), "bench_") if script is bench else ()
            configurator.parse_settings(shlex.split(command[2]), script.__file__, script.RANGES,
                                        *train_too)
            checked += 1
    assert checked >= 25, checked  # the README's commands, and those of five pages


def test_committed_runs_hold_no_machine_paths():
    """A run committed under docs/ says where it lives relative to the repository, not on whose
    machine."""
    for path in (ROOT / "docs").rglob("config.json"):
        text = path.read_text()
        assert '"/' not in text and "\\\\" not in text, path
        assert json.loads(text)["config"]["out_dir"] == str(path.parent.relative_to(ROOT)), path


def test_the_race_pages_seconds_are_its_committed_runs_seconds():
    """race.md's table of seconds, each committed 16-block run's seconds.json to the nearest 10 s:
    a run committed without its cell, a cell edited by hand or left for a run taken out, or a
    run committed without its seconds, fails."""
    section = (ROOT / "docs" / "race.md").read_text().split("\n## The runs' seconds\n")[1]
    [table] = re.findall(r"(?:^\|.*\n)+", section, re.M)
    header, _, *rows = [line.strip("|").split(" | ") for line in table.strip().splitlines()]
    rates = [float(cell.removeprefix("lr ")) for cell in header[1:]]
    page = {(name.strip(), rate): cell.strip()
            for name, *cells in rows for rate, cell in zip(rates, cells) if cell.strip() != "—"}
    runs = {}
    for folder in (ROOT / "docs" / "race_char" / "runs" / "ablate").glob("*_n_layer16"):
        parts = re.fullmatch(r"(\w+)_lr([\d.e-]+)_s(\d+)_n_layer16", folder.name)
        mode, rate, seed = parts.groups()  # ablate.py's name: MODE_lrRATE_sSEED_n_layer16
        seconds = logbook.read_log(folder)["seconds"]  # None without seconds.json: fails below
        runs[f"{mode} s{seed}", float(rate)] = seconds and f"{round(seconds, -1):,.0f}"
    assert len(runs) >= 104 and page == runs


def test_every_line_of_code_is_within_100_characters():
    """The house rule, as nanoGPT keeps it: the code and its tests read without scrolling, one
    statement a line (configs/ too: a fork edits them first)."""
    files = [*ROOT.glob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "configs").glob("*.py")]
    long = [f"{path.relative_to(ROOT)}:{number}"
            for path in files
            for number, line in enumerate(path.read_text().splitlines(), 1) if len(line) > 100]
    assert len(files) > 40 and long == [], long
