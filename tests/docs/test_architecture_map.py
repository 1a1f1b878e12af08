#!/usr/bin/env python3
"""Keeps the folder map of docs/ARCHITECTURE.md true to the tree.

The map is the section "## Folder map": every list item that starts with a folder in backticks
(`src/api/`) maps that folder. The folders that must be mapped: every folder under src/, every
top-level folder of the repository (or, for one like src/, the folders under it), and the first
level of tests/, tools/ and models/. Folders that
git ignores (build trees, node_modules, caches) are not part of the tree. The test fails naming each
folder the map does not mention and each mapped folder that does not exist.

The repository root is DGEMMA_SOURCE_DIR, or two folders above this file.
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

SECOND_LEVEL = ("tests", "tools", "models")
MAP_HEADING = "## Folder map"
# Names .gitignore ignores at any depth or at the top; used only where git cannot say.
FALLBACK_IGNORED = re.compile(r"^(build.*|node_modules|out|__pycache__|\.git|\.whl|\.gl|\.devdeps|\.old)$")
ITEM = re.compile(r"^\s*- `([^`]+/)`")


def mapped_folders(markdown):
    """The folders the map's list items start with, without the trailing slash."""
    folders = []
    in_map = False
    for line in markdown.splitlines():
        if line.startswith("## "):
            in_map = line.strip() == MAP_HEADING
            continue
        if in_map:
            m = ITEM.match(line)
            if m:
                folders.append(m.group(1).rstrip("/"))
    return folders


def _files_from_git(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return [p for p in out.decode("utf-8", "replace").split("\0") if p and os.path.exists(os.path.join(root, p))]


def _files_from_walk(root):
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not FALLBACK_IGNORED.match(d)]
        rel = os.path.relpath(dirpath, root)
        files.extend(f if rel == "." else os.path.join(rel, f).replace(os.sep, "/") for f in filenames)
    return files


def required_folders(root, files=None):
    """The folders the map must name: those that hold a file of the tree, by the rule above."""
    if files is None:
        files = _files_from_git(root)
        if files is None:
            files = _files_from_walk(root)
    required = set()
    for f in files:
        parts = f.split("/")[:-1]
        if not parts:
            continue
        required.add(parts[0])
        if parts[0] in SECOND_LEVEL and len(parts) >= 2:
            required.add("/".join(parts[:2]))
        if parts[0] == "src":
            for depth in range(2, len(parts) + 1):
                required.add("/".join(parts[:depth]))
    return required


def map_problems(root, markdown, files=None):
    """Sentences naming each unmapped folder and each mapped folder that is not in the tree."""
    mapped = mapped_folders(markdown)
    required = required_folders(root, files)
    problems = []
    for folder in sorted(required - set(mapped)):
        if "/" not in folder and any(m.startswith(folder + "/") for m in mapped):
            continue  # a top-level folder whose folders the map names one by one
        problems.append(f"{folder}/ is in the tree but not in the folder map of docs/ARCHITECTURE.md")
    for folder in mapped:
        if not os.path.isdir(os.path.join(root, folder)):
            problems.append(f"{folder}/ is in the folder map of docs/ARCHITECTURE.md but not in the tree")
    seen = set()
    for folder in mapped:
        if folder in seen:
            problems.append(f"{folder}/ is mapped twice")
        seen.add(folder)
    return problems


def repo_root():
    return os.environ.get("DGEMMA_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))


class ArchitectureMapTest(unittest.TestCase):
    def test_map_matches_tree(self):
        root = repo_root()
        with open(os.path.join(root, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
            markdown = f.read()
        self.assertGreater(len(mapped_folders(markdown)), 20, "the folder map section was not found")
        problems = map_problems(root, markdown)
        self.assertEqual(problems, [], "\n" + "\n".join(problems))


class CheckerTest(unittest.TestCase):
    """The checker itself, on a made-up tree and map."""

    MAP = "\n".join([
        "# Architecture", "## Folder map", "### Product code",
        "- `src/a/` — a module.", "- `src/a/sub/` — its sub-folder.", "- `tests/unit/` — tests.",
        "- `tools/gone/` — removed.", "- `docs/` — docs.",
        "## Dependencies", "- `src/b/` — outside the map: does not count.",
    ])

    def test_reads_only_the_map_section(self):
        self.assertEqual(mapped_folders(self.MAP), ["src/a", "src/a/sub", "tests/unit", "tools/gone", "docs"])

    def test_required_folders(self):
        files = ["README.md", "src/a/x.cpp", "src/a/sub/deep/y.cu", "tests/unit/t.cpp",
                 "tests/fixtures/m/golden/z.npy", "bench/b.py"]
        self.assertEqual(required_folders("/nonexistent", files),
                         {"src", "src/a", "src/a/sub", "src/a/sub/deep", "tests", "tests/unit",
                          "tests/fixtures", "bench"})

    def test_names_unmapped_and_missing_folders(self):
        with tempfile.TemporaryDirectory() as root:
            for d in ("src/a/sub", "src/c", "tests/unit", "docs"):
                os.makedirs(os.path.join(root, d))
            files = ["src/a/x.cpp", "src/a/sub/y.cpp", "src/c/z.cpp", "tests/unit/t.cpp", "tests/e2e/e.mjs",
                     "docs/d.md", "bench/b.py"]
            problems = map_problems(root, self.MAP, files)
        self.assertIn("src/c/ is in the tree but not in the folder map of docs/ARCHITECTURE.md", problems)
        self.assertIn("tests/e2e/ is in the tree but not in the folder map of docs/ARCHITECTURE.md", problems)
        self.assertIn("bench/ is in the tree but not in the folder map of docs/ARCHITECTURE.md", problems)
        self.assertIn("tools/gone/ is in the folder map of docs/ARCHITECTURE.md but not in the tree", problems)
        self.assertEqual(len(problems), 4, problems)

    def test_duplicate_entry(self):
        text = self.MAP.replace("- `docs/` — docs.", "- `docs/` — docs.\n- `docs/` — again.")
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "docs"))
            self.assertIn("docs/ is mapped twice", map_problems(root, text, ["docs/d.md"]))


if __name__ == "__main__":
    unittest.main(verbosity=2)
