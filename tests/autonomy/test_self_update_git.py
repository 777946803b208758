"""The git side of a self-update cycle, on real repositories in tmp_path (no network:
the registered repository's remote URL is never contacted)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

import pytest

from domain.protected_paths import is_protected
from infra.self_update_git import runner
from infra.self_update_git.change import inspect_change
from infra.self_update_git.clone import (
    COMMITTER_EMAIL,
    COMMITTER_NAME,
    CloneRefused,
    checkout_state,
    prepare_clone,
)
from infra.self_update_git.refs import ImportRefused, discard_ref, import_commit
from infra.self_update_git.results import Change, Clone
from infra.self_update_git.runner import GitCommandError, GitTimeout

BRANCH = "tachograph/self-update/task-1"
REF = "refs/tachograph/self-update/task-1"
REMOTE = "https://git.example.invalid/never-contacted.git"


# Helpers


def run_git(cwd: Path, *args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    """Plain git for setting up and looking at repositories (not the module under test)."""
    done = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env=env or base_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"git {args} failed: {done.stderr.decode()}")
    return done.stdout.decode("utf-8", "surrogateescape")


HOME = {"dir": Path(os.devnull)}  # an empty directory per test (the autouse fixture)


@pytest.fixture(autouse=True)
def _test_home(tmp_path: Path) -> None:
    HOME["dir"] = tmp_path / "test-home"
    HOME["dir"].mkdir()


def base_env() -> dict[str, str]:
    home = HOME["dir"]
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "Operator",
        "GIT_AUTHOR_EMAIL": "operator@example.invalid",
        "GIT_COMMITTER_NAME": "Operator",
        "GIT_COMMITTER_EMAIL": "operator@example.invalid",
    }


def agent(clone: Clone, *args: str, check: bool = True) -> str:
    """Git as the agent runs it in the clone: an empty HOME, no global config and no
    identity in the environment (the clone's own config must provide it)."""
    home = clone.path.parent / "agent-home"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }
    return run_git(clone.path, *args, env=env, check=check)


def commit_all(clone: Clone, message: str = "agent change") -> None:
    agent(clone, "add", "-A")
    agent(clone, "commit", "-q", "-m", message)


def snapshot(repo: Path) -> dict[str, str]:
    """A hash of every file of the checkout and its .git, but new objects and our refs."""
    seen: dict[str, str] = {}
    for path in sorted(repo.rglob("*")):
        rel = path.relative_to(repo).as_posix()
        if rel.startswith((".git/objects", ".git/refs/tachograph")):
            continue
        if path.is_symlink():
            seen[rel] = f"link:{os.readlink(path)}"
        elif path.is_file():
            seen[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            seen[rel] = "dir"
    return seen


def observed(repo: Path) -> tuple[dict[str, str], str, str, str]:
    return (
        snapshot(repo),
        run_git(repo, "status", "--porcelain=v1", "--untracked-files=all", "-b"),
        run_git(repo, "for-each-ref", "refs/heads", "refs/tags", "refs/remotes"),
        run_git(repo, "rev-parse", "HEAD", "--symbolic-full-name", "HEAD"),
    )


def ref_of(repo: Path, ref: str) -> str | None:
    out = run_git(repo, "rev-parse", "--verify", "--quiet", ref, check=False).strip()
    return out or None


def marker_script(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """An executable that leaves a marker file (and passes its input through)."""
    marker = tmp_path / f"{name}.ran"
    script = tmp_path / f"{name}.sh"
    script.write_text(f'#!/bin/sh\ntouch "{marker}"\ncat "$1" 2>/dev/null\nexit 1\n')
    script.chmod(0o755)
    return script, marker


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "registered"
    path.mkdir()
    run_git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("# project\n")
    (path / "src").mkdir()
    (path / "src" / "app.py").write_text("def main():\n    return 1\n")
    (path / "docs").mkdir()
    (path / "docs" / "old.md").write_text("obsolete\n")
    (path / ".gitignore").write_text("build/\n*.log\n")
    run_git(path, "add", "-A")
    run_git(path, "commit", "-q", "-m", "initial")
    run_git(path, "tag", "v1")
    run_git(path, "remote", "add", "origin", REMOTE)
    return path


@pytest.fixture
def clone(repo: Path, tmp_path: Path) -> Clone:
    state = checkout_state(repo)
    assert state.eligible and state.head
    return prepare_clone(repo, tmp_path / "cycle" / "clone", BRANCH, base=state.head)


def inspected_good_change(clone: Clone) -> Change:
    (clone.path / "src" / "app.py").write_text("def main():\n    return 2\n")
    (clone.path / "docs" / "old.md").unlink()
    (clone.path / "src" / "blob.bin").write_bytes(bytes(range(256)) * 4)
    commit_all(clone)
    change = inspect_change(clone)
    assert change.problem is None, change.problem
    return change


def import_it(repo: Path, clone: Clone, digest: str, ref: str = REF) -> str:
    remotes = checkout_state(repo).remotes_digest
    assert remotes is not None
    return import_commit(
        repo, clone, expected_digest=digest, expected_remotes_digest=remotes, ref=ref
    )


# checkout_state


def test_a_clean_checkout_is_eligible_and_its_head_branch_and_remotes_are_captured(
    repo: Path,
) -> None:
    state = checkout_state(repo)
    assert (state.is_repo, state.clean, state.eligible, state.reason) == (True, True, True, None)
    assert state.head == run_git(repo, "rev-parse", "HEAD").strip()
    assert state.branch == "main"
    lines = sorted(line for line in run_git(repo, "remote", "-v").splitlines() if line)
    expected = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    assert state.remotes_digest == f"sha256:{expected}"
    assert REMOTE not in repr(state)


def test_a_detached_head_is_eligible_and_says_so(repo: Path) -> None:
    run_git(repo, "checkout", "-q", "--detach")
    state = checkout_state(repo)
    assert state.eligible and state.branch is None
    assert state.reason is not None and "detached" in state.reason


@pytest.mark.parametrize("kind", ["modified", "staged", "untracked"])
def test_a_dirty_tree_is_not_clean_and_the_reason_names_the_path(repo: Path, kind: str) -> None:
    if kind == "modified":
        (repo / "src" / "app.py").write_text("changed\n")
        path = "src/app.py"
    elif kind == "staged":
        (repo / "docs" / "new.md").write_text("new\n")
        run_git(repo, "add", "docs/new.md")
        path = "docs/new.md"
    else:
        (repo / "notes.txt").write_text("scratch\n")
        path = "notes.txt"
    state = checkout_state(repo)
    assert state.is_repo and not state.clean and not state.eligible
    assert state.reason is not None and f"{path} ({kind})" in state.reason
    assert state.head is not None and state.branch == "main"


def test_a_dirty_reason_names_at_most_five_paths(repo: Path) -> None:
    for n in range(7):
        (repo / f"scratch-{n}.txt").write_text("x\n")
    reason = checkout_state(repo).reason
    assert reason is not None
    assert reason.count("(untracked)") == 5 and "and 2 more" in reason


def test_ignored_files_do_not_make_a_tree_dirty(repo: Path) -> None:
    (repo / "build").mkdir()
    (repo / "build" / "out.bin").write_bytes(b"\0" * 10)
    (repo / "debug.log").write_text("noise\n")
    assert checkout_state(repo).eligible
    (repo / "debug.txt").write_text("not ignored\n")
    assert not checkout_state(repo).clean


def test_non_repositories_empty_repositories_and_subdirectories_are_not_eligible(
    repo: Path, tmp_path: Path
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    state = checkout_state(plain)
    assert not state.is_repo and state.reason and "not a git repository" in state.reason
    assert not checkout_state(tmp_path / "missing").is_repo

    empty = tmp_path / "empty"
    empty.mkdir()
    run_git(empty, "init", "-q", "-b", "main")
    state = checkout_state(empty)
    assert state.is_repo and not state.eligible and state.head is None
    assert state.reason and "no commits" in state.reason

    inner = checkout_state(repo / "src")
    assert not inner.is_repo and not inner.eligible


def test_the_servers_git_environment_and_home_are_not_used(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script, marker = marker_script(tmp_path, "global-fsmonitor")
    evil_home = tmp_path / "server-home"
    evil_home.mkdir()
    (evil_home / ".gitconfig").write_text(f"[core]\n\tfsmonitor = {script}\n")
    # The check can fail: git run with this HOME does execute the planted command.
    run_git(repo, "status", env={"PATH": os.environ["PATH"], "HOME": str(evil_home)})
    assert marker.exists()
    marker.unlink()

    monkeypatch.setenv("HOME", str(evil_home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setenv("GIT_WORK_TREE", str(tmp_path))
    monkeypatch.setenv("GIT_INDEX_FILE", str(tmp_path / "bogus-index"))
    state = checkout_state(repo)
    assert state.eligible and state.branch == "main"
    assert not marker.exists()


# prepare_clone


def test_a_clone_has_no_remotes_is_on_its_branch_and_shares_no_objects(
    repo: Path, clone: Clone
) -> None:
    base = run_git(repo, "rev-parse", "HEAD").strip()
    assert clone.base == base and clone.branch == BRANCH
    assert agent(clone, "remote").strip() == ""
    assert agent(clone, "for-each-ref", "--format=%(refname)", "refs/remotes").strip() == ""
    assert agent(clone, "symbolic-ref", "HEAD").strip() == f"refs/heads/{BRANCH}"
    assert agent(clone, "rev-parse", "HEAD").strip() == base
    assert agent(clone, "status", "--porcelain").strip() == ""
    objects = clone.path / ".git" / "objects"
    assert not (objects / "info" / "alternates").exists()
    files = [p for p in objects.rglob("*") if p.is_file()]
    assert files and all(p.stat().st_nlink == 1 for p in files)  # copies, not hardlinks
    assert agent(clone, "config", "--local", "user.name").strip() == COMMITTER_NAME
    hooks = clone.path / ".git" / "hooks"
    assert not hooks.exists() or not any(hooks.iterdir())
    # The agent can commit with no identity of its own.
    (clone.path / "added.txt").write_text("x\n")
    commit_all(clone)
    assert agent(clone, "log", "-1", "--format=%cn <%ce>").strip() == (
        f"{COMMITTER_NAME} <{COMMITTER_EMAIL}>"
    )
    assert ref_of(repo, f"refs/heads/{BRANCH}") is None  # nothing appeared in the checkout


def test_a_clone_starts_at_the_captured_head_even_after_the_checkout_moved(
    repo: Path, tmp_path: Path
) -> None:
    captured = checkout_state(repo).head
    assert captured is not None
    (repo / "later.txt").write_text("later\n")
    run_git(repo, "add", "later.txt")
    run_git(repo, "commit", "-q", "-m", "later")
    clone = prepare_clone(repo, tmp_path / "c", BRANCH, base=captured)
    assert agent(clone, "rev-parse", "HEAD").strip() == captured
    assert not (clone.path / "later.txt").exists()


def test_prepare_refuses_a_used_destination_and_a_base_that_is_not_a_commit(
    repo: Path, tmp_path: Path
) -> None:
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine\n")
    with pytest.raises(CloneRefused, match="new or empty"):
        prepare_clone(repo, used, BRANCH)
    assert (used / "keep.txt").read_text() == "mine\n"
    with pytest.raises(CloneRefused, match="outside"):
        prepare_clone(repo, repo / "build" / "clone", BRANCH)
    with pytest.raises(CloneRefused, match="not a commit"):
        prepare_clone(repo, tmp_path / "fresh", BRANCH, base="0" * 40)
    with pytest.raises(CloneRefused, match="branch name"):
        prepare_clone(repo, tmp_path / "fresh", "bad..name")
    assert not (tmp_path / "fresh").exists()
    empty = tmp_path / "empty-dest"
    empty.mkdir()
    assert prepare_clone(repo, empty, BRANCH).path == empty


# inspect_change and import_commit


def test_a_good_change_is_inspected_and_imported_as_one_ref_without_touching_the_checkout(
    repo: Path, clone: Clone, tmp_path: Path
) -> None:
    change = inspected_good_change(clone)
    head = agent(clone, "rev-parse", "HEAD").strip()
    assert (change.head, change.base, change.branch) == (head, clone.base, BRANCH)
    assert change.clean and change.descendant and not change.noop and change.commits == 1
    assert change.digest == f"sha256:{hashlib.sha256(change.patch).hexdigest()}"
    assert change.size == len(change.patch)
    assert dict((path, status) for status, path in change.files) == {
        "src/app.py": "M",
        "docs/old.md": "D",
        "src/blob.bin": "A",
    }
    assert b"deleted file mode 100644" in change.patch and b"-obsolete" in change.patch
    assert b"GIT binary patch" in change.patch
    # The patch is complete: it applies to a copy of the base.
    copy = tmp_path / "copy"
    run_git(tmp_path, "clone", "-q", str(repo), str(copy))
    (tmp_path / "change.patch").write_bytes(change.patch)
    run_git(copy, "apply", "--check", str(tmp_path / "change.patch"))

    before = observed(repo)
    commit = import_it(repo, clone, change.digest)
    assert commit == head
    assert ref_of(repo, REF) == head
    assert run_git(repo, "cat-file", "-t", REF).strip() == "commit"
    assert observed(repo) == before  # worktree, index, HEAD, config, branches: identical
    assert not (repo / ".git" / "FETCH_HEAD").exists()
    assert run_git(repo, "for-each-ref", "--format=%(refname)", "refs/tachograph").split() == [REF]


@pytest.mark.parametrize("how", ["amend", "new commit"])
def test_a_clone_changed_after_inspection_is_refused(repo: Path, clone: Clone, how: str) -> None:
    change = inspected_good_change(clone)
    (clone.path / "src" / "app.py").write_text("def main():\n    return 3\n")
    if how == "amend":
        agent(clone, "commit", "-q", "-a", "--amend", "--no-edit")
    else:
        commit_all(clone, "sneaked in after review")
    before = observed(repo)
    with pytest.raises(ImportRefused, match="not the one reviewed"):
        import_it(repo, clone, change.digest)
    assert ref_of(repo, REF) is None
    assert observed(repo) == before


@pytest.mark.parametrize("how", ["set-url", "add"])
def test_changed_remotes_in_the_registered_repository_refuse_the_import(
    repo: Path, clone: Clone, how: str
) -> None:
    remotes = checkout_state(repo).remotes_digest
    assert remotes is not None
    change = inspected_good_change(clone)
    if how == "set-url":
        run_git(repo, "remote", "set-url", "origin", "https://elsewhere.invalid/x.git")
    else:
        run_git(repo, "remote", "add", "mirror", "https://mirror.invalid/x.git")
    with pytest.raises(ImportRefused, match="remotes"):
        import_commit(
            repo, clone, expected_digest=change.digest, expected_remotes_digest=remotes, ref=REF
        )
    assert ref_of(repo, REF) is None


def test_an_existing_ref_is_never_overwritten(repo: Path, clone: Clone) -> None:
    change = inspected_good_change(clone)
    base = run_git(repo, "rev-parse", "HEAD").strip()
    run_git(repo, "update-ref", REF, base)
    with pytest.raises(ImportRefused, match="already exists"):
        import_it(repo, clone, change.digest)
    assert ref_of(repo, REF) == base
    other = "refs/tachograph/self-update/task-2"
    assert import_it(repo, clone, change.digest, ref=other) == change.head
    with pytest.raises(ImportRefused, match="already exists"):
        import_it(repo, clone, change.digest, ref=other)


def test_only_self_update_refs_are_imported_or_discarded(repo: Path, clone: Clone) -> None:
    change = inspected_good_change(clone)
    main = ref_of(repo, "refs/heads/main")
    for ref in ("refs/heads/main", "refs/heads/new", "refs/tachograph/self-update/", "HEAD"):
        with pytest.raises(ValueError):
            import_it(repo, clone, change.digest, ref=ref)
        with pytest.raises(ValueError):
            discard_ref(repo, ref)
    assert ref_of(repo, "refs/heads/main") == main and ref_of(repo, "refs/heads/new") is None


def test_discard_deletes_the_imported_ref_once(repo: Path, clone: Clone) -> None:
    change = inspected_good_change(clone)
    imported = import_it(repo, clone, change.digest)
    before = observed(repo)
    assert discard_ref(repo, REF) == imported  # the commit it named
    assert ref_of(repo, REF) is None
    assert discard_ref(repo, REF) is None
    assert observed(repo) == before


def test_an_unchanged_clone_is_a_noop(clone: Clone) -> None:
    change = inspect_change(clone)
    assert change.noop and change.problem is None and change.patch == b""
    assert change.head == clone.base and change.commits == 0


def test_a_deletion_appears_in_the_patch_and_the_files(repo: Path, clone: Clone) -> None:
    agent(clone, "rm", "-q", "README.md")
    agent(clone, "commit", "-q", "-m", "drop readme")
    change = inspect_change(clone)
    assert change.problem is None and change.files == (("D", "README.md"),)
    assert b"diff --git a/README.md b/README.md\ndeleted file mode 100644" in change.patch
    assert b"-# project" in change.patch


def test_a_patch_over_the_limit_is_a_problem_and_cannot_be_imported(
    repo: Path, clone: Clone, tmp_path: Path
) -> None:
    (clone.path / "big.txt").write_text("".join(f"line {n:08d}\n" for n in range(20_000)))
    commit_all(clone)
    change = inspect_change(clone)
    assert change.size > 256 * 1024 and len(change.patch) == 256 * 1024
    kib = -(-change.size // 1024)
    assert change.problem == f"the patch is {kib} KiB, over the 256 KiB limit."
    full = subprocess.run(
        ["git", "diff", "--binary", "--full-index", "--no-renames", clone.base, "HEAD", "--"],
        cwd=clone.path,
        env=base_env(),
        capture_output=True,
        check=True,
    ).stdout
    assert change.digest == f"sha256:{hashlib.sha256(full).hexdigest()}"  # of the whole patch
    assert change.patch == full[: 256 * 1024]
    with pytest.raises(ImportRefused, match="over the 256 KiB limit"):
        import_it(repo, clone, change.digest)
    assert ref_of(repo, REF) is None
    assert inspect_change(clone, limit_bytes=1024 * 1024).problem is None


@pytest.mark.parametrize("kind", ["untracked", "modified", "staged"])
def test_uncommitted_leftovers_are_a_problem(repo: Path, clone: Clone, kind: str) -> None:
    change = inspected_good_change(clone)
    if kind == "untracked":
        (clone.path / "leftover.txt").write_text("forgot\n")
    elif kind == "modified":
        (clone.path / "README.md").write_text("edited, not committed\n")
    else:
        (clone.path / "staged.txt").write_text("staged\n")
        agent(clone, "add", "staged.txt")
    left = inspect_change(clone)
    assert not left.clean and left.problem is not None
    assert left.problem.startswith("the agent left uncommitted changes") and kind in left.problem
    with pytest.raises(ImportRefused, match="uncommitted"):
        import_it(repo, clone, change.digest)
    assert ref_of(repo, REF) is None


def test_ignored_leftovers_are_not_a_problem(clone: Clone) -> None:
    (clone.path / "build").mkdir()
    (clone.path / "build" / "artefact.o").write_bytes(b"\0\1")
    (clone.path / "src" / "app.py").write_text("changed\n")
    commit_all(clone)
    assert inspect_change(clone).problem is None


def test_a_head_that_is_not_a_descendant_of_the_base_is_a_problem(repo: Path, clone: Clone) -> None:
    (clone.path / "unrelated.txt").write_text("history of its own\n")
    agent(clone, "add", "unrelated.txt")
    tree = agent(clone, "write-tree").strip()
    orphan = agent(clone, "commit-tree", tree, "-m", "orphan").strip()
    agent(clone, "reset", "-q", "--hard", orphan)
    change = inspect_change(clone)
    assert change.head == orphan and not change.descendant and change.branch == BRANCH
    assert change.problem == (
        f"HEAD {orphan[:12]} is not a descendant of the base commit {clone.base[:12]}."
    )
    with pytest.raises(ImportRefused, match="not a descendant"):
        import_it(repo, clone, change.digest)
    assert ref_of(repo, REF) is None


@pytest.mark.parametrize("where", ["other branch", "detached"])
def test_a_head_moved_off_the_cycle_branch_is_a_problem(clone: Clone, where: str) -> None:
    (clone.path / "src" / "app.py").write_text("changed\n")
    commit_all(clone)
    if where == "other branch":
        agent(clone, "switch", "-q", "-c", "other")
    else:
        agent(clone, "switch", "-q", "--detach")
    problem = inspect_change(clone).problem
    assert problem is not None and "moved to" in problem
    assert ("the branch other" if where == "other branch" else "detached HEAD") in problem


@pytest.mark.parametrize(
    "path",
    [
        ".env",
        "config/.env.production",
        ".envrc",
        "deploy/server.pem",
        "certs/TLS.KEY",
        ".ssh/authorized_keys",
        "home/.aws/credentials",
        ".github/workflows/ci.yml",
        ".gitmodules",
        ".claude/settings.json",
        ".mcp.json",
        # What instructs or configures an agent, the reviewer among them.
        "CLAUDE.md",
        "docs/CLAUDE.md",
        "CLAUDE.local.md",
        "AGENTS.md",
        "src/pkg/Agents.md",
        "AGENTS.override.md",
        "GEMINI.md",
        ".claude/CLAUDE.md",
        ".claude/commands/deploy.md",
        "src/.claude/agents/helper.md",
        ".codex/config.toml",
        ".gemini/settings.json",
        ".gemini/GEMINI.md",
        ".github/copilot-instructions.md",
        ".github/hooks/hooks.json",
        # Git attributes, hooks and config.
        ".gitattributes",
        "src/.gitattributes",
        ".githooks/pre-commit",
        "vendor/.gitmodules",
    ],
)
def test_a_patch_touching_a_protected_path_is_a_problem(
    repo: Path, clone: Clone, path: str
) -> None:
    target = clone.path / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("SECRET=1\n")
    commit_all(clone)
    change = inspect_change(clone)
    assert change.problem == f"the patch touches a protected path: {path}."
    with pytest.raises(ImportRefused, match="protected path"):
        import_it(repo, clone, change.digest)


def test_a_protected_path_added_and_removed_within_the_range_is_still_seen(
    clone: Clone,
) -> None:
    (clone.path / ".env").write_text("TOKEN=abc\n")
    commit_all(clone, "add secrets")
    (clone.path / ".env").unlink()
    (clone.path / "src" / "app.py").write_text("changed\n")
    commit_all(clone, "hide them again")
    change = inspect_change(clone)
    assert change.files == (("M", "src/app.py"),) and change.commits == 2
    assert change.problem == "the patch touches a protected path: .env."


def test_ordinary_paths_are_not_protected() -> None:
    for path in ("docs/environment.md", "src/keys.py", "github/workflows.md", "src/monkey.py"):
        assert not is_protected(path), path
    assert is_protected(".GitHub/Workflows/release.yml")


def test_attributes_the_agent_wrote_cannot_hide_a_text_change_from_the_reviewer(
    clone: Clone,
) -> None:
    (clone.path / ".gitattributes").write_text("*.py -diff\n")
    (clone.path / "src" / "app.py").write_text("def main():\n    return 'exfiltrate'\n")
    commit_all(clone)
    # The check can fail: git run in the clone's work tree shows the change as binary.
    plain = agent(clone, "diff", "--binary", clone.base, "HEAD", "--", "src/app.py")
    assert "Binary" in plain or "GIT binary patch" in plain
    change = inspect_change(clone)
    assert b"+    return 'exfiltrate'" in change.patch
    assert b"GIT binary patch" not in change.patch
    assert change.problem == "the patch touches a protected path: .gitattributes."


def test_a_git_dir_that_borrows_objects_is_refused(repo: Path, clone: Clone) -> None:
    change = inspected_good_change(clone)
    alternates = clone.path / ".git" / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text(f"{repo / '.git' / 'objects'}\n")
    problem = inspect_change(clone).problem
    assert problem is not None and "objects/info/alternates" in problem
    with pytest.raises(ImportRefused, match="alternates"):
        import_it(repo, clone, change.digest)
    assert ref_of(repo, REF) is None


def test_commands_planted_in_the_clone_and_the_checkout_do_not_run(
    repo: Path, clone: Clone, tmp_path: Path
) -> None:
    fsmonitor, fsmonitor_ran = marker_script(tmp_path, "fsmonitor")
    textconv, textconv_ran = marker_script(tmp_path, "textconv")
    clean, clean_ran = marker_script(tmp_path, "clean")
    hook, hook_ran = marker_script(tmp_path, "hook")
    included = tmp_path / "included.config"
    included.write_text(f"[core]\n\tfsmonitor = {fsmonitor}\n")
    (clone.path / "src" / "app.py").write_text("def main():\n    return 42\n")
    commit_all(clone)
    git_dir = clone.path / ".git"
    # Not a committed .gitattributes: that is a protected path, refused on its own.
    (git_dir / "info").mkdir(exist_ok=True)
    (git_dir / "info" / "attributes").write_text("* diff=evil filter=evil\n")
    with (git_dir / "config").open("a") as config:
        config.write(
            f"[core]\n\tfsmonitor = {fsmonitor}\n"
            f'[diff "evil"]\n\ttextconv = {textconv}\n'
            f'[filter "evil"]\n\tclean = {clean}\n\tsmudge = {clean}\n'
            f"[include]\n\tpath = {included}\n"
        )
    (git_dir / "hooks").mkdir(exist_ok=True)
    for name in ("reference-transaction", "post-checkout", "pre-commit", "post-index-change"):
        (git_dir / "hooks" / name).symlink_to(hook)
    (repo / ".git" / "hooks" / "reference-transaction").symlink_to(hook)
    # The checks can fail: plain git does run what was planted.
    head = agent(clone, "rev-parse", "HEAD").strip()
    agent(clone, "status", check=False)
    agent(clone, "diff", clone.base, head, check=False)
    assert fsmonitor_ran.exists() and textconv_ran.exists()
    run_git(repo, "hook", "run", "reference-transaction", "--", "prepared", check=False)
    assert hook_ran.exists()
    for ran in (fsmonitor_ran, textconv_ran, clean_ran, hook_ran):
        ran.unlink(missing_ok=True)

    change = inspect_change(clone)
    assert change.problem is None, change.problem
    assert b"+    return 42" in change.patch  # the real content, not a textconv rendering
    assert "config" in change.restored and "hooks/reference-transaction" in change.restored
    assert "info/attributes" in change.restored
    assert list((git_dir / "hooks").iterdir()) == []
    with (git_dir / "config").open("a") as config:  # planted again after inspection
        config.write(f"[core]\n\tfsmonitor = {fsmonitor}\n[include]\n\tpath = {included}\n")
    (git_dir / "hooks" / "post-checkout").symlink_to(hook)
    assert import_it(repo, clone, change.digest) == head
    for ran in (fsmonitor_ran, textconv_ran, clean_ran, hook_ran):
        assert not ran.exists(), ran.name


# Failures of git itself


def fake_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    fake = bin_dir / "git"
    fake.write_text(f"#!/bin/sh\n{body}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_a_failing_git_raises_with_the_tail_of_its_stderr(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_git(tmp_path, monkeypatch, 'echo "warning: noise" >&2\necho "fatal: boom" >&2\nexit 128')
    with pytest.raises(GitCommandError) as raised:
        runner.check(runner.git((), ["status"], cwd=repo, home=tmp_path))
    assert raised.value.returncode == 128 and "fatal: boom" in raised.value.stderr
    assert "boom" in str(raised.value) and not isinstance(raised.value, GitTimeout)
    with pytest.raises(GitCommandError, match="boom"):
        discard_ref(repo, REF)


def test_a_git_that_hangs_is_killed_with_its_children_and_raises_a_timeout(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid_file = tmp_path / "child.pid"
    fake_git(tmp_path, monkeypatch, f'sleep 60 &\necho $! > "{pid_file}"\nwait')
    started = time.monotonic()
    with pytest.raises(GitTimeout, match="timed out"):
        runner.git((), ["fetch"], cwd=repo, home=tmp_path, timeout=0.5)
    assert time.monotonic() - started < 10
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and alive(child):
        time.sleep(0.05)
    if alive(child):
        pytest.fail("the hanging git's child survived the timeout")


def alive(pid: int) -> bool:
    """Running (a killed child nobody reaped yet is a zombie, and counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
