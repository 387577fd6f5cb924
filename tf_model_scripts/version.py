"""Which build of ``tf-model-scripts`` this is: the release it leads to and the commit.

A wheel's version is ``RELEASE`` with the commit it was built from as the local label
(``0.8.0.dev0+g1a2b3c4d5e6f``, ``.dirty`` when tracked files differed from it), so that two
builds of unreleased work can be told apart (``pip list``, the model cards' ``project``); the
build also writes the full commit into the wheel (``BUILD_FILE``). The repository has no tags
to count from (the CHANGELOG names the releases), so this module, not ``setuptools-scm``, reads
git: ``setup.py`` loads it by path at build time, the cards at export time. Nothing here
imports the distribution's packages.
"""
from __future__ import annotations

import json
import os
import subprocess

# The release the unreleased work leads to (PEP 440; the CHANGELOG's next version).
RELEASE = "0.8.0.dev0"
# What the build writes beside this module in the wheel: {"version", "commit", "dirty"}.
BUILD_FILE = "_build.json"
_HERE = os.path.dirname(os.path.abspath(__file__))


def from_git(root: str) -> dict | None:
    """The commit of the git checkout at ``root`` and whether its tracked files differ from
    it; None when ``root`` is no checkout (an sdist, a copied tree) or git cannot read it."""
    if not os.path.exists(os.path.join(root, ".git")):
        return None
    git = ["git", "-C", root]
    try:
        commit = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=30, check=True).stdout.strip()
        changed = subprocess.run(git + ["status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, timeout=60,
                                 check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(changed.strip())}


def version_of(build: dict | None) -> str:
    """``RELEASE``, with the commit as the local label when the build knows it."""
    if not build or not build.get("commit"):
        return RELEASE
    return f"{RELEASE}+g{build['commit'][:12]}" + (".dirty" if build.get("dirty") else "")


def build_info(root: str) -> dict:
    """What ``setup.py`` builds from the tree at ``root``: version, commit, dirty. From its git
    checkout; in a tree without ``.git`` (a Docker image's copy: ``docker/build.sh`` passes the
    commit, which the Dockerfile writes as ``BUILD_FILE``), from that file."""
    git = from_git(root) or _recorded(os.path.join(root, "tf_model_scripts"))
    return {"version": version_of(git), "commit": git and git.get("commit"),
            "dirty": bool(git and git.get("dirty"))}


def _recorded(folder: str) -> dict | None:
    try:
        with open(os.path.join(folder, BUILD_FILE), encoding="utf-8") as fh:
            out = json.load(fh)
    except (OSError, ValueError):
        return None
    return out if isinstance(out, dict) and out.get("commit") else None


def this_build() -> dict:
    """The running code's build: from its git checkout when it runs from one (a checkout or an
    editable install, whose files are the checkout's now, whatever was installed), else what
    the wheel's build recorded, else the installed version alone (``commit`` None, with
    ``commit_note`` saying why)."""
    root = os.path.dirname(_HERE)
    if os.path.exists(os.path.join(root, ".git")):
        info = build_info(root)
        if info["commit"]:
            return info
        return {**info, "commit_note": "git could not read the checkout"}
    recorded = _recorded(_HERE)
    if recorded:
        return {"version": version_of(recorded), "commit": recorded["commit"],
                "dirty": bool(recorded.get("dirty"))}
    return {"version": RELEASE, "commit": None, "dirty": False,
            "commit_note": "built without git (an sdist, or an image built without "
                           "docker/build.sh)"}
